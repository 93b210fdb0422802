/*
 * The admin calls of the client scenario (tests/clients.rs) with the system
 * librdkafka (Debian's librdkafka-dev, 2.0): create a topic with a config, describe
 * its configs, create and delete a second topic, and check the topic list.
 *   usage: rdkafka-admin BOOTSTRAP PREFIX
 * Prints "OK librdkafka <version>" or "FAIL ..." on stderr with exit 1.
 */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rd_kafka_t *rk;
static rd_kafka_queue_t *queue;

static void fail(const char *what, const char *detail) {
    fprintf(stderr, "FAIL librdkafka: %s: %s\n", what, detail ? detail : "");
    exit(1);
}

/* Waits for the result event of one admin call. */
static rd_kafka_event_t *wait_result(rd_kafka_event_type_t type) {
    rd_kafka_event_t *ev = rd_kafka_queue_poll(queue, 20000);
    if (!ev) fail("admin call", "no result within 20 s");
    if (rd_kafka_event_type(ev) != type) fail("admin call", rd_kafka_event_name(ev));
    if (rd_kafka_event_error(ev)) fail("admin call", rd_kafka_event_error_string(ev));
    return ev;
}

static void check_topics(const rd_kafka_topic_result_t **results, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++) {
        if (rd_kafka_topic_result_error(results[i]))
            fail(what, rd_kafka_topic_result_error_string(results[i]));
    }
}

static void create(const char *name, int partitions, const char *config, const char *value) {
    char err[256];
    rd_kafka_NewTopic_t *topic = rd_kafka_NewTopic_new(name, partitions, 1, err, sizeof err);
    if (!topic) fail("NewTopic", err);
    if (config && rd_kafka_NewTopic_set_config(topic, config, value)) fail("set_config", config);
    rd_kafka_CreateTopics(rk, &topic, 1, NULL, queue);
    rd_kafka_event_t *ev = wait_result(RD_KAFKA_EVENT_CREATETOPICS_RESULT);
    size_t n;
    const rd_kafka_topic_result_t **results =
        rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
    check_topics(results, n, "CreateTopics");
    rd_kafka_event_destroy(ev);
    rd_kafka_NewTopic_destroy(topic);
}

/* Whether the cluster's metadata lists `name`. */
static int listed(const char *name) {
    const struct rd_kafka_metadata *md;
    if (rd_kafka_metadata(rk, 1, NULL, &md, 10000)) fail("Metadata", "no answer");
    int found = 0;
    for (int i = 0; i < md->topic_cnt; i++) found |= strcmp(md->topics[i].topic, name) == 0;
    rd_kafka_metadata_destroy(md);
    return found;
}

int main(int argc, char **argv) {
    if (argc != 3) fail("usage", "rdkafka-admin BOOTSTRAP PREFIX");
    char err[256], topic[256], tmp[256];
    snprintf(topic, sizeof topic, "%s-t", argv[2]);
    snprintf(tmp, sizeof tmp, "%s-tmp", argv[2]);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", argv[1], err, sizeof err)) fail("conf", err);
    rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk) fail("rd_kafka_new", err);
    queue = rd_kafka_queue_new(rk);

    create(topic, 3, "compression.type", "producer");
    create(tmp, 1, NULL, NULL);
    if (!listed(tmp)) fail("Metadata", "the second topic is not listed");

    rd_kafka_DeleteTopic_t *del = rd_kafka_DeleteTopic_new(tmp);
    rd_kafka_DeleteTopics(rk, &del, 1, NULL, queue);
    rd_kafka_event_t *ev = wait_result(RD_KAFKA_EVENT_DELETETOPICS_RESULT);
    size_t n;
    const rd_kafka_topic_result_t **deleted =
        rd_kafka_DeleteTopics_result_topics(rd_kafka_event_DeleteTopics_result(ev), &n);
    check_topics(deleted, n, "DeleteTopics");
    rd_kafka_event_destroy(ev);
    rd_kafka_DeleteTopic_destroy(del);
    if (listed(tmp)) fail("DeleteTopics", "the topic is still listed");

    rd_kafka_ConfigResource_t *resource = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic);
    rd_kafka_DescribeConfigs(rk, &resource, 1, NULL, queue);
    ev = wait_result(RD_KAFKA_EVENT_DESCRIBECONFIGS_RESULT);
    const rd_kafka_ConfigResource_t **described =
        rd_kafka_DescribeConfigs_result_resources(rd_kafka_event_DescribeConfigs_result(ev), &n);
    if (n != 1 || rd_kafka_ConfigResource_error(described[0]))
        fail("DescribeConfigs", n ? rd_kafka_ConfigResource_error_string(described[0]) : "no resource");
    size_t count;
    const rd_kafka_ConfigEntry_t **entries = rd_kafka_ConfigResource_configs(described[0], &count);
    int policy = 0, compression = 0, retention = 0;
    for (size_t i = 0; i < count; i++) {
        const char *name = rd_kafka_ConfigEntry_name(entries[i]);
        const char *value = rd_kafka_ConfigEntry_value(entries[i]);
        if (!value) continue;
        policy |= !strcmp(name, "cleanup.policy") && !strcmp(value, "delete");
        compression |= !strcmp(name, "compression.type") && !strcmp(value, "producer") &&
                       rd_kafka_ConfigEntry_source(entries[i]) == RD_KAFKA_CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG;
        retention |= !strcmp(name, "retention.ms");
    }
    if (!(policy && compression && retention)) fail("DescribeConfigs", "cleanup.policy, compression.type or retention.ms wrong");
    rd_kafka_event_destroy(ev);
    rd_kafka_ConfigResource_destroy(resource);

    rd_kafka_queue_destroy(queue);
    rd_kafka_destroy(rk);
    printf("OK librdkafka %s\n", rd_kafka_version_str());
    return 0;
}
