"""Client conformance scenario for kafka-python (2.x and 3.x) against Skein.

Usage: <venv>/bin/python scenario.py <bootstrap host:port> <unique prefix>

Runs, and checks with assertions:
  a. admin: create <prefix>-t (3 partitions), create and delete <prefix>-tmp,
     describe the configs of <prefix>-t;
  b. 100 records k0..k99 / v0..v99 through an idempotent producer, acks=all;
  c. ListOffsets: earliest, latest, offsets_for_times;
  d. consume everything with manual assignment, then one record after a seek;
  e. a two-member consumer group <prefix>-g, synchronous commits, committed
     offsets read back, clean close.

Prints `OK kafka-python <version>` and exits 0 when every check holds; otherwise a FAIL
report and exit 1 (3 if the SCENARIO_TIMEOUT_S watchdog fires): see common.py,
which holds what this script shares with aiokafka_scenario.py.
"""

import os
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kafka  # noqa: E402
from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient  # noqa: E402

import common  # noqa: E402
from common import N, PARTITIONS, REQUEST_TIMEOUT_MS, log  # noqa: E402

CLIENT = "kafka-python"
VERSION = kafka.__version__
MAJOR = int(VERSION.split(".")[0])


def wait_until(what, cond, timeout_s=10.0, interval_s=0.2):
    """Polls cond() until it returns a truthy value; raises AssertionError after timeout_s."""
    deadline = common.Deadline(what, timeout_s)
    while not deadline.settled(common.attempt(cond)):
        time.sleep(interval_s)
    return deadline.last


def poll(consumer, timeout_ms):
    return [r for records in consumer.poll(timeout_ms=timeout_ms).values() for r in records]


def drain(consumer, want, timeout_s):
    """Polls until want records came or timeout_s passed, then once more for 1 s."""
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        got.extend(poll(consumer, 500))
    got.extend(poll(consumer, 1000))  # nothing more may come
    return got


class Scenario(common.BaseScenario):
    TopicPartition = TopicPartition

    def consumer(self, suffix, **extra):
        return KafkaConsumer(**self.consumer_config(suffix, **extra))

    # a. admin ---------------------------------------------------------------

    def list_topics(self):
        return set(self.admin.list_topics())

    def create_topic(self, name, partitions):
        if MAJOR >= 3:
            result = self.admin.create_topics(
                {name: {"num_partitions": partitions, "replication_factor": 1}}, timeout_ms=REQUEST_TIMEOUT_MS
            )
            errors = [(t["name"], t["error_code"]) for t in result["topics"]]
        else:
            from kafka.admin import NewTopic

            result = self.admin.create_topics(
                [NewTopic(name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=REQUEST_TIMEOUT_MS
            )
            errors = [(t[0], t[1]) for t in result.topic_errors]
        assert errors == [(name, 0)], "CreateTopics %s: unexpected result %r" % (name, result)

    def step_admin_create(self):
        self.admin = KafkaAdminClient(**self.common("admin"))
        self.meta = KafkaConsumer(**self.common("meta"))  # a plain Metadata view, no group
        self.create_topic(self.topic, PARTITIONS)
        wait_until(
            "%s with %d partitions in metadata" % (self.topic, PARTITIONS),
            lambda: self.meta.partitions_for_topic(self.topic) == set(range(PARTITIONS)),
        )

    def step_admin_list(self):
        self.check_listed(self.list_topics())

    def step_admin_delete(self):
        self.create_topic(self.tmp_topic, 1)
        wait_until("%s in metadata" % self.tmp_topic, lambda: self.tmp_topic in self.meta.topics())
        result = self.admin.delete_topics([self.tmp_topic], timeout_ms=REQUEST_TIMEOUT_MS)
        if MAJOR >= 3:
            errors = [(t["name"], t["error_code"]) for t in result["topics"]]
        else:
            errors = [(t[0], t[1]) for t in result.topic_error_codes]
        assert errors == [(self.tmp_topic, 0)], "DeleteTopics: unexpected result %r" % (result,)
        wait_until("%s gone from consumer topics()" % self.tmp_topic, lambda: self.tmp_topic not in self.meta.topics())
        wait_until("%s gone from admin list_topics()" % self.tmp_topic, lambda: self.tmp_topic not in self.list_topics())
        assert self.topic in self.list_topics(), "%s vanished after deleting %s" % (self.topic, self.tmp_topic)

    def describe_topic_configs(self):
        resource = ConfigResource(ConfigResourceType.TOPIC, self.topic)
        if MAJOR >= 3:
            result = self.admin.describe_configs([resource], config_filter="all")
            entries = result["topic"][self.topic]
            return {name: entry["value"] for name, entry in entries.items()}
        responses = self.admin.describe_configs([resource])
        configs = {}
        for response in responses:
            for error_code, error_message, _rtype, rname, entries in [r[:5] for r in response.resources]:
                assert error_code == 0, "DescribeConfigs %s: error %d %s" % (rname, error_code, error_message)
                assert rname == self.topic, "DescribeConfigs answered for %r" % rname
                for entry in entries:
                    configs[entry[0]] = entry[1]
        return configs

    def step_admin_configs(self):
        self.check_topic_configs(self.describe_topic_configs())

    # b. produce ---------------------------------------------------------------

    def step_produce(self):
        extra = {}
        idempotent = "enable_idempotence" in KafkaProducer.DEFAULT_CONFIG
        if idempotent:
            extra["enable_idempotence"] = True
        producer = KafkaProducer(**self.common("producer", acks="all", linger_ms=5, max_block_ms=15000, **extra))
        try:
            futures = [producer.send(self.topic, key=k, value=v) for k, v in self.start_producing()]
            producer.flush(timeout=30)
            for i, future in enumerate(futures):
                self.record_sent(i, future.get(timeout=10))  # raises the send's error, if any
            if idempotent:
                pid = producer._transaction_manager.producer_id_and_epoch
                valid = pid.is_valid() if callable(pid.is_valid) else pid.is_valid
                assert valid, "idempotent producer has no producer id: %r" % pid
                log("idempotent producer id %d epoch %d" % (pid.producer_id, pid.epoch))
        finally:
            producer.close(timeout=10)
        self.check_produced()

    # c. list offsets ------------------------------------------------------------

    def step_list_offsets(self):
        consumer = self.consumer("offsets")
        try:
            self.earliest = consumer.beginning_offsets(self.tps)
            self.latest = consumer.end_offsets(self.tps)
            by_time = consumer.offsets_for_times({tp: self.t0 for tp in self.tps})
        finally:
            consumer.close(autocommit=False)
        self.check_offsets(by_time)

    # d. consume ------------------------------------------------------------------

    def step_consume(self):
        consumer = self.consumer("assign")
        try:
            consumer.assign(self.tps)
            consumer.seek_to_beginning(*self.tps)
            self.check_consumed_all([self.check_record(r) for r in drain(consumer, N, 20)])

            tp, offset = self.seek_target()
            consumer.assign([tp])
            consumer.seek(tp, offset)
            got = drain(consumer, 1, 10)
            self.check_after_seek(tp, got)
            self.check_position(tp, consumer.position(tp))
        finally:
            consumer.close(autocommit=False)

    # e. consumer group -------------------------------------------------------------

    def step_group(self):
        members = [self.consumer("member%d" % i, group_id=self.group) for i in range(2)]
        got = [[] for _ in members]  # (member) -> keys
        assignments = [set() for _ in members]
        errors = []
        stop = threading.Event()
        lock = threading.Lock()

        def run(i):
            c = members[i]
            try:
                c.subscribe([self.topic])
                while not stop.is_set():
                    keys = [self.check_record(r) for r in poll(c, 300)]
                    with lock:
                        got[i].extend(keys)
                        assignments[i] = {tp.partition for tp in c.assignment()}
                    if keys:
                        # commit what was processed before the next poll, where a
                        # rebalance could hand the partition to the other member
                        c.commit()
                # final synchronous commit of the positions
                c.commit()
            except Exception as e:
                errors.append((i, e, traceback.format_exc()))
                stop.set()

        threads = [threading.Thread(target=run, args=(i,), name="member%d" % i, daemon=True) for i in range(2)]
        try:
            for t in threads:
                t.start()

            def done():
                if errors:
                    return True
                with lock:
                    return self.group_split(assignments, got)

            try:
                wait_until(self.group_waited_for(), done, timeout_s=45)
                time.sleep(1)  # let duplicates, if any, show up
            finally:
                stop.set()
                for t in threads:
                    t.join(timeout=15)
            assert not any(t.is_alive() for t in threads), "a group member did not stop"
            if errors:
                i, e, tb = errors[0]
                raise AssertionError("group member %d failed: %r\n%s" % (i, e, tb))
            self.check_group(assignments, got)

            # committed offsets, as a member sees them
            for tp in self.tps:
                committed = members[0].committed(tp)
                if committed is not None and not isinstance(committed, int):
                    committed = committed.offset
                self.check_committed(tp, committed)
            # and as the admin client sees them
            if MAJOR >= 3:
                self.check_group_offsets(self.admin.list_group_offsets(self.group)[self.group])
            else:
                self.check_group_offsets(self.admin.list_consumer_group_offsets(self.group))
        finally:
            for c in members:
                c.close(autocommit=False)

        # after both LeaveGroups the group is empty
        def state():
            if MAJOR >= 3:
                return self.admin.describe_groups([self.group])[self.group]["group_state"]
            return self.admin.describe_consumer_groups([self.group])[0].state

        wait_until("group %s Empty after close" % self.group, lambda: state() == "Empty", timeout_s=10)

    # -------------------------------------------------------------------------

    def run(self):
        steps = common.StepRunner(self)
        for step, guard in steps:
            with guard:
                step()
        for client in (self.admin, self.meta):
            if client is not None:
                try:
                    client.close()
                except Exception:
                    pass
        return steps.failed


if __name__ == "__main__":
    sys.exit(common.main(CLIENT, VERSION, "scenario.py", lambda bootstrap, prefix: Scenario(bootstrap, prefix).run()))
