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

Prints `OK kafka-python <version>` and exits 0 when every check holds; otherwise
prints each failed step with its traceback to stderr and exits 1. A watchdog
bounds the run (SCENARIO_TIMEOUT_S, default 120 s) and exits 3 with the stacks
of all threads if it fires.
"""

import faulthandler
import os
import sys
import threading
import time
import traceback

import kafka
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

CLIENT = "kafka-python"
VERSION = kafka.__version__
MAJOR = int(VERSION.split(".")[0])
TIMEOUT_S = float(os.environ.get("SCENARIO_TIMEOUT_S", "120"))
N = 100
PARTITIONS = 3
REQUEST_TIMEOUT_MS = 10000


def log(msg):
    print("[%s %s %.1fs] %s" % (CLIENT, VERSION, time.monotonic() - START, msg), file=sys.stderr, flush=True)


def wait_until(what, cond, timeout_s=10.0, interval_s=0.2):
    """Polls cond() until it returns a truthy value; raises AssertionError after timeout_s."""
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        try:
            last = cond()
            if last:
                return last
        except Exception as e:  # keep the last error for the message
            last = e
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0fs waiting for %s (last: %r)" % (timeout_s, what, last))
        time.sleep(interval_s)


class Scenario:
    def __init__(self, bootstrap, prefix):
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.topic = prefix + "-t"
        self.tmp_topic = prefix + "-tmp"
        self.group = prefix + "-g"
        self.tps = [TopicPartition(self.topic, p) for p in range(PARTITIONS)]
        self.admin = None
        self.meta = None
        self.produced = {}  # key -> (partition, offset)
        self.t0 = None
        self.earliest = None
        self.latest = None

    def common(self, **extra):
        cfg = dict(
            bootstrap_servers=self.bootstrap,
            client_id="%s-%s" % (self.prefix, extra.pop("client_suffix", "c")),
            request_timeout_ms=REQUEST_TIMEOUT_MS,
        )
        cfg.update(extra)
        return cfg

    def consumer(self, suffix, **extra):
        cfg = self.common(
            client_suffix=suffix,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=200,
            # request_timeout_ms must exceed session_timeout_ms in kafka-python 2.x
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
        )
        cfg.update(extra)
        return KafkaConsumer(**cfg)

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
        self.admin = KafkaAdminClient(**self.common(client_suffix="admin"))
        self.meta = KafkaConsumer(**self.common(client_suffix="meta"))  # a plain Metadata view, no group
        self.create_topic(self.topic, PARTITIONS)
        wait_until(
            "%s with %d partitions in metadata" % (self.topic, PARTITIONS),
            lambda: self.meta.partitions_for_topic(self.topic) == set(range(PARTITIONS)),
        )

    def step_admin_list(self):
        topics = self.list_topics()
        assert self.topic in topics, "admin list_topics(): %s missing from %r" % (self.topic, topics)

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
        configs = self.describe_topic_configs()
        assert configs.get("cleanup.policy") == "delete", "cleanup.policy: %r (configs %r)" % (
            configs.get("cleanup.policy"),
            configs,
        )
        assert "retention.ms" in configs, "retention.ms missing from %r" % configs
        assert int(configs["retention.ms"]) != 0, "retention.ms: %r" % configs["retention.ms"]

    # b. produce ---------------------------------------------------------------

    def step_produce(self):
        extra = {}
        idempotent = "enable_idempotence" in KafkaProducer.DEFAULT_CONFIG
        if idempotent:
            extra["enable_idempotence"] = True
        producer = KafkaProducer(
            **self.common(client_suffix="producer", acks="all", linger_ms=5, max_block_ms=15000, **extra)
        )
        try:
            self.t0 = int(time.time() * 1000)
            futures = [
                (i, producer.send(self.topic, key=b"k%d" % i, value=b"v%d" % i)) for i in range(N)
            ]
            producer.flush(timeout=30)
            for i, future in futures:
                md = future.get(timeout=10)  # raises the send's error, if any
                assert md.topic == self.topic and 0 <= md.partition < PARTITIONS, "record %d: metadata %r" % (i, md)
                assert md.offset >= 0, "record %d: offset %r" % (i, md.offset)
                self.produced["k%d" % i] = (md.partition, md.offset)
            if idempotent:
                pid = producer._transaction_manager.producer_id_and_epoch
                valid = pid.is_valid() if callable(pid.is_valid) else pid.is_valid
                assert valid, "idempotent producer has no producer id: %r" % pid
                log("idempotent producer id %d epoch %d" % (pid.producer_id, pid.epoch))
        finally:
            producer.close(timeout=10)
        by_partition = {}
        for partition, offset in self.produced.values():
            by_partition.setdefault(partition, []).append(offset)
        for partition, offsets in by_partition.items():
            assert sorted(offsets) == list(range(len(offsets))), "partition %d offsets %r" % (partition, sorted(offsets))
        log("produced: %r" % {p: len(o) for p, o in sorted(by_partition.items())})

    # c. list offsets ------------------------------------------------------------

    def step_list_offsets(self):
        consumer = self.consumer("offsets")
        try:
            self.earliest = consumer.beginning_offsets(self.tps)
            self.latest = consumer.end_offsets(self.tps)
            by_time = consumer.offsets_for_times({tp: self.t0 for tp in self.tps})
        finally:
            consumer.close(autocommit=False)
        log("earliest %r latest %r" % ({tp.partition: o for tp, o in self.earliest.items()},
                                      {tp.partition: o for tp, o in self.latest.items()}))
        for tp in self.tps:
            count = sum(1 for p, _ in self.produced.values() if p == tp.partition)
            assert self.earliest[tp] == 0, "%s earliest %r" % (tp, self.earliest[tp])
            assert self.latest[tp] == count, "%s latest %r, produced %d" % (tp, self.latest[tp], count)
        total = sum(self.latest[tp] - self.earliest[tp] for tp in self.tps)
        assert total == N, "sum(latest - earliest) = %d" % total
        for tp in self.tps:
            found = by_time[tp]
            if self.latest[tp] == self.earliest[tp]:
                assert found is None, "%s is empty, offsets_for_times gave %r" % (tp, found)
            else:
                assert found is not None, "%s offsets_for_times(T0) gave None" % tp
                assert found.offset == self.earliest[tp], "%s offsets_for_times(T0) = %r, earliest %d" % (
                    tp, found, self.earliest[tp])
                assert found.timestamp >= self.t0, "%s timestamp %d < T0 %d" % (tp, found.timestamp, self.t0)

    # d. consume ------------------------------------------------------------------

    def check_record(self, r):
        key = r.key.decode()
        assert r.value == b"v" + r.key[1:], "record %s/%d: key %r value %r" % (r.topic, r.offset, r.key, r.value)
        assert self.produced.get(key) == (r.partition, r.offset), "record %r at %d/%d, produced at %r" % (
            key, r.partition, r.offset, self.produced.get(key))
        assert r.timestamp >= self.t0, "record %r timestamp %d < T0 %d" % (key, r.timestamp, self.t0)
        return key

    def step_consume(self):
        consumer = self.consumer("assign")
        try:
            consumer.assign(self.tps)
            consumer.seek_to_beginning(*self.tps)
            keys = []
            deadline = time.monotonic() + 20
            while len(keys) < N and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    keys.extend(self.check_record(r) for r in records)
            # nothing more may come
            for records in consumer.poll(timeout_ms=1000).values():
                keys.extend(self.check_record(r) for r in records)
            assert len(keys) == N and set(keys) == set(self.produced), (
                "assigned consumer got %d records, %d distinct keys" % (len(keys), len(set(keys))))

            # seek to latest-1 of a partition with at least two records
            tp = next(tp for tp in self.tps if self.latest[tp] - self.earliest[tp] >= 2)
            consumer.assign([tp])
            consumer.seek(tp, self.latest[tp] - 1)
            got = []
            deadline = time.monotonic() + 10
            while not got and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    got.extend(records)
            for records in consumer.poll(timeout_ms=1000).values():
                got.extend(records)
            assert len(got) == 1, "after seek(%s, %d): %d records %r" % (
                tp, self.latest[tp] - 1, len(got), [(r.partition, r.offset) for r in got])
            r = got[0]
            assert (r.partition, r.offset) == (tp.partition, self.latest[tp] - 1), "after seek: %r" % (r,)
            self.check_record(r)
            assert consumer.position(tp) == self.latest[tp], "position %r after the last record" % consumer.position(tp)
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

        def total():
            with lock:
                return sum(len(g) for g in got)

        def run(i):
            c = members[i]
            try:
                c.subscribe([self.topic])
                while not stop.is_set():
                    batch = c.poll(timeout_ms=300)
                    keys = [self.check_record(r) for records in batch.values() for r in records]
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
                    a0, a1 = assignments
                    split = a0 and a1 and not (a0 & a1) and (a0 | a1) == set(range(PARTITIONS))
                    return split and sum(len(g) for g in got) >= N

            try:
                wait_until("two members splitting %d partitions and %d records" % (PARTITIONS, N), done, timeout_s=45)
                time.sleep(1)  # let duplicates, if any, show up
            finally:
                stop.set()
                for t in threads:
                    t.join(timeout=15)
            assert not any(t.is_alive() for t in threads), "a group member did not stop"
            if errors:
                i, e, tb = errors[0]
                raise AssertionError("group member %d failed: %r\n%s" % (i, e, tb))
            log("member assignments %r, records %r" % (assignments, [len(g) for g in got]))
            a0, a1 = assignments
            assert a0 and a1, "both members need partitions: %r" % assignments
            assert not (a0 & a1) and (a0 | a1) == set(range(PARTITIONS)), "assignments %r" % assignments
            all_keys = got[0] + got[1]
            assert len(all_keys) == N and set(all_keys) == set(self.produced), (
                "group consumed %d records, %d distinct keys (%d, %d per member)" % (
                    len(all_keys), len(set(all_keys)), len(got[0]), len(got[1])))

            # committed offsets, as a member sees them
            for tp in self.tps:
                committed = members[0].committed(tp)
                if committed is not None and not isinstance(committed, int):
                    committed = committed.offset
                assert committed == self.latest[tp], "committed(%s) = %r, latest %d" % (tp, committed, self.latest[tp])
            # and as the admin client sees them
            if MAJOR >= 3:
                offsets = self.admin.list_group_offsets(self.group)[self.group]
            else:
                offsets = self.admin.list_consumer_group_offsets(self.group)
            offsets = {tp: om.offset for tp, om in offsets.items() if tp.topic == self.topic}
            assert offsets == {tp: self.latest[tp] for tp in self.tps}, "group offsets %r, latest %r" % (
                offsets, self.latest)
            assert sum(offsets.values()) == N
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
        steps = [
            ("admin: create topic", self.step_admin_create, []),
            ("admin: list topics", self.step_admin_list, ["admin: create topic"]),
            ("admin: create and delete topic", self.step_admin_delete, ["admin: create topic"]),
            ("admin: describe configs", self.step_admin_configs, ["admin: create topic"]),
            ("produce", self.step_produce, ["admin: create topic"]),
            ("list offsets", self.step_list_offsets, ["produce"]),
            ("consume (assign, seek)", self.step_consume, ["list offsets"]),
            ("consumer group", self.step_group, ["list offsets"]),
        ]
        passed, failed = set(), []
        for name, step, needs in steps:
            missing = [n for n in needs if n not in passed]
            if missing:
                failed.append((name, "skipped: needs %s" % ", ".join(missing)))
                continue
            log("step: " + name)
            try:
                step()
                passed.add(name)
            except Exception as e:
                failed.append((name, "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc())))
                log("FAILED: %s: %s: %s" % (name, type(e).__name__, e))
        for client in (self.admin, self.meta):
            if client is not None:
                try:
                    client.close()
                except Exception:
                    pass
        return failed


def watchdog():
    time.sleep(TIMEOUT_S)
    print("FAIL %s %s: timed out after %.0fs; stacks:" % (CLIENT, VERSION, TIMEOUT_S), file=sys.stderr, flush=True)
    faulthandler.dump_traceback(all_threads=True)
    os._exit(3)


def main():
    if len(sys.argv) != 3:
        print("usage: scenario.py <bootstrap host:port> <unique prefix>", file=sys.stderr)
        return 2
    threading.Thread(target=watchdog, name="watchdog", daemon=True).start()
    failed = Scenario(sys.argv[1], sys.argv[2]).run()
    if failed:
        print("FAIL %s %s: %d step(s) failed" % (CLIENT, VERSION, len(failed)), file=sys.stderr)
        for name, why in failed:
            print("--- %s: %s" % (name, why), file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)  # do not wait on client threads
    print("OK %s %s" % (CLIENT, VERSION), flush=True)
    os._exit(0)


START = time.monotonic()
if __name__ == "__main__":
    sys.exit(main())
