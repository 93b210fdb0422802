//! Topic administration and offset APIs over the wire: configs with their sources,
//! incremental changes, DeleteRecords, ListOffsets, CreatePartitions, DeleteTopics,
//! DescribeCluster and DescribeLogDirs, auto-creation, LogAppendTime, long polling.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Broker, RawClient};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn name(text: &str) -> TopicName {
    TopicName(s(text))
}

fn create(
    client: &mut RawClient,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
    validate_only: bool,
) -> CreateTopicsResponse {
    let topic = common::creatable_topic(topic, partitions, configs);
    client.call(&CreateTopicsRequest::default().with_topics(vec![topic]).with_validate_only(validate_only), 7)
}

/// Produces `count` records with timestamps base, base+1, ...; returns the base offset.
fn produce(client: &mut RawClient, topic: &str, partition: i32, count: i32, base_timestamp: i64) -> (i16, i64, i64) {
    let records = skein_engine::batch::testing::batch_with(count, 20, base_timestamp, |_| None);
    let request =
        ProduceRequest::default().with_acks(1).with_timeout_ms(5000).with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])]);
    let response = client.call(&request, 9);
    let p = &response.responses[0].partition_responses[0];
    (p.error_code, p.base_offset, p.log_append_time_ms)
}

fn describe(client: &mut RawClient, topic: &str) -> Vec<(String, String, i8)> {
    let request = DescribeConfigsRequest::default()
        .with_resources(vec![DescribeConfigsResource::default().with_resource_type(2).with_resource_name(s(topic))]);
    let response = client.call(&request, 4);
    assert_eq!(response.results[0].error_code, 0, "{:?}", response.results[0].error_message);
    response.results[0]
        .configs
        .iter()
        .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string()).unwrap_or_default(), c.config_source))
        .collect()
}

fn config<'a>(configs: &'a [(String, String, i8)], key: &str) -> (&'a str, i8) {
    let (_, v, src) = configs.iter().find(|(k, _, _)| k == key).unwrap_or_else(|| panic!("{key} missing"));
    (v.as_str(), *src)
}

fn list_offset(client: &mut RawClient, topic: &str, timestamp: i64) -> (i16, i64, i64) {
    let request = ListOffsetsRequest::default().with_topics(vec![ListOffsetsTopic::default()
        .with_name(name(topic))
        .with_partitions(vec![ListOffsetsPartition::default().with_partition_index(0).with_timestamp(timestamp)])]);
    let response = client.call(&request, 8);
    let p = &response.topics[0].partitions[0];
    (p.error_code, p.offset, p.timestamp)
}

// Configs: validate_only creates nothing; sources are reported; incremental changes
// apply and are validated.
#[test]
fn topic_configs() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &["--topic-config", "retention.ms=5000000"]);
    let mut client = RawClient::connect(&broker.bootstrap());
    let dry = create(&mut client, "conf", 3, &[("cleanup.policy", "compact")], true);
    assert_eq!(dry.topics[0].error_code, 0);
    assert_eq!(create(&mut client, "conf", 3, &[("segment.bytes", "not-a-number")], false).topics[0].error_code, 40);
    let created = create(&mut client, "conf", 3, &[("cleanup.policy", "compact")], false);
    assert_eq!(created.topics[0].error_code, 0, "validate_only created nothing");
    assert_eq!(created.topics[0].num_partitions, 3);
    let configs = describe(&mut client, "conf");
    assert_eq!(config(&configs, "cleanup.policy"), ("compact", 1), "dynamic topic config");
    assert_eq!(config(&configs, "retention.ms"), ("5000000", 4), "static broker default");
    assert_eq!(config(&configs, "segment.bytes"), ("1073741824", 5), "Kafka default");

    let alter = |configs: Vec<AlterableConfig>| {
        IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s("conf"))
            .with_configs(configs)])
    };
    let set = |k: &str, v: &str, op: i8| {
        AlterableConfig::default().with_name(s(k)).with_value(Some(s(v))).with_config_operation(op)
    };
    let response =
        client.call(&alter(vec![set("cleanup.policy", "delete", 2), set("max.message.bytes", "2048", 0)]), 1);
    assert_eq!(response.responses[0].error_code, 0);
    let configs = describe(&mut client, "conf");
    assert_eq!(config(&configs, "cleanup.policy").0, "compact,delete");
    assert_eq!(config(&configs, "max.message.bytes").0, "2048");
    let response = client.call(&alter(vec![set("retention.ms", "-5", 0)]), 1);
    assert_eq!(response.responses[0].error_code, 40, "INVALID_CONFIG");
    let response = client.call(&alter(vec![set("max.message.bytes", "", 1)]), 1);
    assert_eq!(response.responses[0].error_code, 0);
    assert_eq!(config(&describe(&mut client, "conf"), "max.message.bytes"), ("1048588", 5));
}

// Kafka 4.4's dynamic broker configs: librdkafka's AlterConfigs sets one Kafka allows
// per broker only (`sasl.kerberos.min.time.before.relogin`, refused before as not
// dynamic); kafka-configs sets a cluster-wide topic default (`message.max.bytes`),
// which topics without their own value describe and apply at once (a larger record
// is refused, then accepted again once the default is deleted). A config Kafka does
// not change at run time, or a per-broker one at the cluster level, gets Kafka's
// message.
#[test]
fn dynamic_broker_configs() {
    use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{FutureProducer, FutureRecord};

    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    let b = broker.bootstrap();
    let mut client = RawClient::connect(&b);
    assert_eq!(create(&mut client, "sized", 1, &[], false).topics[0].error_code, 0);
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", &b).create().unwrap();
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    let relogin = AlterConfig::new(ResourceSpecifier::Broker(1)).set("sasl.kerberos.min.time.before.relogin", "70000");
    let altered = futures_lite::future::block_on(admin.alter_configs(&[relogin], &options)).unwrap();
    assert!(altered[0].is_ok(), "{altered:?}");
    let describe_broker = |client: &mut RawClient, broker: &str| {
        let request = DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(s(broker))]);
        let response = client.call(&request, 4);
        response.results[0]
            .configs
            .iter()
            .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string()).unwrap_or_default(), c.config_source))
            .collect::<Vec<_>>()
    };
    let configs = describe_broker(&mut client, "1");
    assert_eq!(config(&configs, "sasl.kerberos.min.time.before.relogin"), ("70000", 2), "DYNAMIC_BROKER_CONFIG");

    let tool = |args: &[&str]| common::kafka_tool("org.apache.kafka.tools.ConfigCommand", args, "");
    let base = ["--bootstrap-server", b.as_str(), "--entity-type", "brokers", "--entity-default", "--alter"];
    let (ok, out) = tool(&[&base[..], &["--add-config", "message.max.bytes=1000"]].concat());
    assert!(ok, "{out}");
    assert_eq!(config(&describe(&mut client, "sized"), "max.message.bytes"), ("1000", 3), "DYNAMIC_DEFAULT_BROKER");
    let producer: FutureProducer = ClientConfig::new().set("bootstrap.servers", &b).create().unwrap();
    let send = |size: usize| {
        let value = vec![b'x'; size];
        let record = FutureRecord::<(), [u8]>::to("sized").partition(0).payload(&value);
        futures_lite::future::block_on(producer.send(record, Duration::from_secs(10))).map(|_| ()).map_err(|(e, _)| e)
    };
    let refused = send(2000).unwrap_err();
    assert_eq!(refused.rdkafka_error_code(), Some(rdkafka::types::RDKafkaErrorCode::MessageSizeTooLarge), "{refused}");
    let (ok, out) = tool(&[&base[..], &["--delete-config", "message.max.bytes"]].concat());
    assert!(ok, "{out}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while config(&describe(&mut client, "sized"), "max.message.bytes").1 != 5 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    send(2000).expect("the default is back");

    let (ok, out) = tool(&[&base[..], &["--add-config", "num.partitions=3"]].concat());
    assert!(!ok && out.contains("Cannot update these configs dynamically: [num.partitions]"), "{out}");
    let (ok, out) = tool(&[&base[..], &["--add-config", "sasl.kerberos.min.time.before.relogin=1"]].concat());
    assert!(!ok && out.contains("broker id must be specified"), "{out}");
}

// Features with Kafka 4.4's kafka-features: describe lists what ApiVersions says
// (supported ranges, finalized levels, their epoch); a downgrade of share.version to 0
// turns share groups off (their requests answered UNSUPPORTED_VERSION, as on Kafka),
// and an upgrade turns them on again, from any node's view; refused changes get
// Kafka's messages.
#[test]
fn features_describe_upgrade_downgrade() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    let b = broker.bootstrap();
    let features = |args: &[&str]| {
        // Kafka 4.4's tool, which names metadata.version 33 (4.4-IV2).
        common::kafka_share("org.apache.kafka.tools.FeatureCommand", &[&["--bootstrap-server", &b][..], args].concat())
    };
    let (ok, out) = features(&["describe"]);
    assert!(ok, "{out}");
    // Its columns, one space apart.
    let line = |out: &str, name: &str| {
        let lines = out.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "));
        lines
            .into_iter()
            .find(|l| l.starts_with(&format!("Feature: {name} ")))
            .unwrap_or_else(|| panic!("{name}: {out}"))
    };
    assert!(line(&out, "share.version").contains("SupportedMaxVersion: 2 FinalizedVersionLevel: 2"), "{out}");
    assert!(line(&out, "metadata.version").contains("FinalizedVersionLevel: 4.4-IV2"), "{out}");
    assert!(line(&out, "group.version").contains("FinalizedVersionLevel: 1"), "{out}");

    let heartbeat = || {
        let mut client = RawClient::connect(&b);
        let request = ShareGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s("feature-gated")))
            .with_member_id(s(&uuid::Uuid::new_v4().to_string()))
            .with_member_epoch(0)
            .with_subscribed_topic_names(Some(vec![name("absent")]));
        client.call(&request, 1).error_code
    };
    assert_ne!(heartbeat(), 35, "share groups on");
    let (ok, out) = features(&["downgrade", "--feature", "share.version=0"]);
    assert!(ok, "{out}");
    let (_, out) = features(&["describe"]);
    assert!(line(&out, "share.version").contains("FinalizedVersionLevel: 0"), "{out}");
    assert!(!line(&out, "share.version").contains("Epoch: 0"), "the epoch moved: {out}");
    assert_eq!(heartbeat(), 35, "UNSUPPORTED_VERSION while share.version is 0");
    let (ok, out) = features(&["upgrade", "--feature", "share.version=2"]);
    assert!(ok, "{out}");
    assert_ne!(heartbeat(), 35, "share groups on again");

    let (ok, out) = features(&["upgrade", "--feature", "share.version=3"]);
    assert!(!ok && out.contains("only supports versions 0-2"), "{out}");
    let (ok, out) = features(&["downgrade", "--metadata", "4.0"]);
    assert!(!ok && out.contains("might delete metadata information"), "{out}");
    let (ok, out) = features(&["upgrade", "--feature", "share.version=1"]);
    assert!(!ok && out.contains("Can't downgrade the version of this feature without setting"), "{out}");
}

// ListOffsets: earliest, latest, by time, max timestamp; DeleteRecords moves the start.
#[test]
fn offsets_and_delete_records() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(create(&mut client, "offs", 1, &[], false).topics[0].error_code, 0);
    assert_eq!(produce(&mut client, "offs", 0, 5, 1000).1, 0);
    assert_eq!(produce(&mut client, "offs", 0, 5, 2000).1, 5);
    assert_eq!(list_offset(&mut client, "offs", -2), (0, 0, -1));
    assert_eq!(list_offset(&mut client, "offs", -1), (0, 10, -1));
    assert_eq!(list_offset(&mut client, "offs", 1003), (0, 3, 1003));
    assert_eq!(list_offset(&mut client, "offs", 1500), (0, 5, 2000));
    assert_eq!(list_offset(&mut client, "offs", 9999), (0, -1, -1));
    assert_eq!(list_offset(&mut client, "offs", -3), (0, 9, 2004));
    assert_eq!(list_offset(&mut client, "absent", -1).0, 3);
    // The leader epoch each answer carries: the epoch its offset was written in (the
    // latest for -1), 0 on a topic that never changed leader, as Kafka answers.
    let epochs: Vec<i32> = [-2i64, -1, 1003, -3]
        .iter()
        .map(|&timestamp| {
            let request = ListOffsetsRequest::default().with_topics(vec![ListOffsetsTopic::default()
                .with_name(name("offs"))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(timestamp)])]);
            client.call(&request, 8).topics[0].partitions[0].leader_epoch
        })
        .collect();
    assert_eq!(epochs, [0, 0, 0, 0]);

    let delete = |offset: i64| {
        DeleteRecordsRequest::default().with_timeout_ms(5000).with_topics(vec![DeleteRecordsTopic::default()
            .with_name(name("offs"))
            .with_partitions(vec![DeleteRecordsPartition::default().with_partition_index(0).with_offset(offset)])])
    };
    let response = client.call(&delete(7), 2);
    assert_eq!((response.topics[0].partitions[0].error_code, response.topics[0].partitions[0].low_watermark), (0, 7));
    assert_eq!(list_offset(&mut client, "offs", -2), (0, 7, -1));
    assert_eq!(client.call(&delete(11), 2).topics[0].partitions[0].error_code, 1, "OFFSET_OUT_OF_RANGE");
}

// CreatePartitions grows a topic; DeleteTopics removes it; DescribeCluster and
// DescribeLogDirs describe this node.
#[test]
fn partitions_topics_cluster_and_log_dirs() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(create(&mut client, "grow", 2, &[], false).topics[0].error_code, 0);
    let grow = |count: i32| {
        CreatePartitionsRequest::default()
            .with_timeout_ms(5000)
            .with_topics(vec![CreatePartitionsTopic::default().with_name(name("grow")).with_count(count)])
    };
    assert_eq!(client.call(&grow(5), 3).results[0].error_code, 0);
    assert_eq!(client.call(&grow(3), 3).results[0].error_code, 37, "INVALID_PARTITIONS");
    assert_eq!(produce(&mut client, "grow", 4, 3, 1000), (0, 0, -1));

    let cluster = client.call(&DescribeClusterRequest::default(), 1);
    assert_eq!(cluster.brokers.len(), 1);
    assert_eq!(cluster.controller_id, cluster.brokers[0].broker_id);
    let dirs = client.call(&DescribeLogDirsRequest::default().with_topics(None), 4);
    let grow_dir = dirs.results[0].topics.iter().find(|t| t.name.0.as_str() == "grow").unwrap();
    assert_eq!(grow_dir.partitions.len(), 5);
    assert!(grow_dir.partitions.iter().any(|p| p.partition_size > 0));
    assert!(dirs.results[0].total_bytes > 0);

    let deleted =
        client.call(&DeleteTopicsRequest::default().with_topic_names(vec![name("grow")]).with_timeout_ms(5000), 5);
    assert_eq!(deleted.responses[0].error_code, 0);
    let deleted =
        client.call(&DeleteTopicsRequest::default().with_topic_names(vec![name("grow")]).with_timeout_ms(5000), 5);
    assert_eq!(deleted.responses[0].error_code, 3);
    assert!(!broker.data_dir.join("grow-4").exists());
}

// Metadata creates unknown topics with num.partitions when allowed; not otherwise.
#[test]
fn auto_creation() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &["--num-partitions", "3"]);
    let mut client = RawClient::connect(&broker.bootstrap());
    let ask = |topic: &str, allow: bool| {
        MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(name(topic)))]))
            .with_allow_auto_topic_creation(allow)
    };
    let response = client.call(&ask("auto", false), 12);
    assert_eq!(response.topics[0].error_code, 3);
    let response = client.call(&ask("auto", true), 12);
    assert_eq!(response.topics[0].error_code, 0);
    assert_eq!(response.topics[0].partitions.len(), 3);
    assert_eq!(response.controller_id, response.brokers[0].node_id);

    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &["--auto-create-topics", "false"]);
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(client.call(&ask("auto", true), 12).topics[0].error_code, 3);
}

// message.timestamp.type=LogAppendTime stamps batches with the broker's time.
#[test]
fn log_append_time() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(
        create(&mut client, "lat", 1, &[("message.timestamp.type", "LogAppendTime")], false).topics[0].error_code,
        0
    );
    let before = skein_engine::log::now_ms();
    let (error, _, append_time) = produce(&mut client, "lat", 0, 3, 42);
    assert_eq!(error, 0);
    assert!(append_time >= before, "{append_time}");
    let fetched = fetch(&mut client, "lat", 0, 0, 0);
    let batch = skein_engine::Batch::validate(fetched.1, usize::MAX).expect("valid batch with a recomputed CRC");
    assert!(batch.is_log_append_time());
    assert_eq!(batch.max_timestamp(), append_time);
}

fn fetch(client: &mut RawClient, topic: &str, partition: i32, offset: i64, max_wait_ms: i32) -> (i16, Bytes, i64) {
    let request =
        FetchRequest::default().with_max_wait_ms(max_wait_ms).with_min_bytes(1).with_max_bytes(1 << 20).with_topics(
            vec![FetchTopic::default().with_topic(name(topic)).with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])],
        );
    let response = client.call(&request, 12);
    let p = &response.responses[0].partitions[0];
    (p.error_code, p.records.clone().unwrap_or_default(), p.high_watermark)
}

// A fetch at the end waits up to max_wait_ms, and returns as soon as data arrives.
#[test]
fn long_polling() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(create(&mut client, "poll", 2, &[], false).topics[0].error_code, 0);
    let started = Instant::now();
    let (error, records, hw) = fetch(&mut client, "poll", 1, 0, 400);
    assert_eq!((error, records.len(), hw), (0, 0, 0));
    assert!(started.elapsed() >= Duration::from_millis(350), "returned early: {:?}", started.elapsed());

    let bootstrap = broker.bootstrap();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let mut other = RawClient::connect(&bootstrap);
        produce(&mut other, "poll", 1, 2, 1000);
    });
    let started = Instant::now();
    let (error, records, hw) = fetch(&mut client, "poll", 1, 0, 10_000);
    writer.join().unwrap();
    assert_eq!(error, 0);
    assert!(!records.is_empty() && hw == 2);
    assert!(started.elapsed() < Duration::from_secs(5), "waited for the whole max_wait: {:?}", started.elapsed());
    // Out of range and unknown partitions get their errors at once.
    assert_eq!(fetch(&mut client, "poll", 1, 99, 1000).0, 1);
    assert_eq!(fetch(&mut client, "poll", 7, 0, 1000).0, 3);
}
