"""Client conformance scenario for aiokafka against Skein.

Usage: <venv>/bin/python aiokafka_scenario.py <bootstrap host:port> <unique prefix>

The same scenario as scenario.py (kafka-python), on asyncio:
  a. admin: create <prefix>-t (3 partitions), create and delete <prefix>-tmp,
     describe the configs of <prefix>-t;
  b. 100 records k0..k99 / v0..v99 through an idempotent producer, acks=all;
  c. ListOffsets: earliest, latest, offsets_for_times;
  d. consume everything with manual assignment, then one record after a seek;
  e. a two-member consumer group <prefix>-g (two tasks), synchronous commits,
     committed offsets read back, clean close.

Prints `OK aiokafka <version>` and exits 0 when every check holds; otherwise
prints each failed step with its traceback to stderr and exits 1. A watchdog
bounds the run (SCENARIO_TIMEOUT_S, default 120 s) and exits 3 with the stacks
of all threads if it fires.
"""

import asyncio
import faulthandler
import os
import sys
import threading
import time
import traceback

import aiokafka
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

CLIENT = "aiokafka"
VERSION = aiokafka.__version__
TIMEOUT_S = float(os.environ.get("SCENARIO_TIMEOUT_S", "120"))
N = 100
PARTITIONS = 3
REQUEST_TIMEOUT_MS = 10000
CALL_TIMEOUT_S = 20  # bound on any single awaited client call


def log(msg):
    print("[%s %s %.1fs] %s" % (CLIENT, VERSION, time.monotonic() - START, msg), file=sys.stderr, flush=True)


async def bounded(what, awaitable, timeout_s=CALL_TIMEOUT_S):
    try:
        return await asyncio.wait_for(awaitable, timeout_s)
    except asyncio.TimeoutError:
        raise AssertionError("%s did not complete within %.0fs" % (what, timeout_s)) from None


async def wait_until(what, cond, timeout_s=10.0, interval_s=0.2):
    """Awaits cond() until it returns a truthy value; raises AssertionError after timeout_s."""
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        try:
            last = await bounded(what, cond(), timeout_s)
            if last:
                return last
        except Exception as e:  # keep the last error for the message
            last = e
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0fs waiting for %s (last: %r)" % (timeout_s, what, last))
        await asyncio.sleep(interval_s)


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

    def common(self, suffix, **extra):
        cfg = dict(
            bootstrap_servers=self.bootstrap,
            client_id="%s-%s" % (self.prefix, suffix),
            request_timeout_ms=REQUEST_TIMEOUT_MS,
        )
        cfg.update(extra)
        return cfg

    async def consumer(self, suffix, **extra):
        cfg = self.common(
            suffix,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=200,
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
        )
        cfg.update(extra)
        consumer = AIOKafkaConsumer(**cfg)
        await bounded("consumer %s start()" % suffix, consumer.start())
        return consumer

    # a. admin ---------------------------------------------------------------

    async def list_topics(self):
        return set(await bounded("admin list_topics()", self.admin.list_topics()))

    async def create_topic(self, name, partitions):
        result = await bounded(
            "admin create_topics(%s)" % name,
            self.admin.create_topics([NewTopic(name, partitions, 1)], timeout_ms=REQUEST_TIMEOUT_MS),
        )
        errors = [(t["topic"], t["error_code"]) for t in result.to_object()["topic_errors"]]
        assert errors == [(name, 0)], "CreateTopics %s: unexpected result %r" % (name, result)

    async def step_admin_create(self):
        self.admin = AIOKafkaAdminClient(**self.common("admin"))
        await bounded("admin start()", self.admin.start())
        self.meta = await self.consumer("meta")  # a plain Metadata view, no group
        await self.create_topic(self.topic, PARTITIONS)

        async def ready():
            await self.meta._client.force_metadata_update()
            return self.meta.partitions_for_topic(self.topic) == set(range(PARTITIONS))

        await wait_until("%s with %d partitions in metadata" % (self.topic, PARTITIONS), ready)

    async def step_admin_list(self):
        topics = await self.list_topics()
        assert self.topic in topics, "admin list_topics(): %s missing from %r" % (self.topic, topics)

    async def step_admin_delete(self):
        await self.create_topic(self.tmp_topic, 1)

        async def present():
            return self.tmp_topic in await self.list_topics()

        await wait_until("%s in list_topics()" % self.tmp_topic, present)
        result = await bounded(
            "admin delete_topics()", self.admin.delete_topics([self.tmp_topic], timeout_ms=REQUEST_TIMEOUT_MS)
        )
        errors = [(t["topic"], t["error_code"]) for t in result.to_object()["topic_error_codes"]]
        assert errors == [(self.tmp_topic, 0)], "DeleteTopics: unexpected result %r" % (result,)

        async def gone():
            return not await present()

        await wait_until("%s gone from list_topics()" % self.tmp_topic, gone)
        assert self.topic in await self.list_topics(), "%s vanished after deleting %s" % (self.topic, self.tmp_topic)

    async def step_admin_configs(self):
        responses = await bounded(
            "admin describe_configs()",
            self.admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, self.topic)]),
        )
        configs = {}
        for response in responses:
            for resource in response.to_object()["resources"]:
                assert resource["error_code"] == 0, "DescribeConfigs: %r" % resource
                assert resource["resource_name"] == self.topic, "DescribeConfigs answered for %r" % resource
                for entry in resource["config_entries"]:
                    configs[entry["config_names"]] = entry["config_value"]
        assert configs.get("cleanup.policy") == "delete", "cleanup.policy: %r (configs %r)" % (
            configs.get("cleanup.policy"), configs)
        assert "retention.ms" in configs, "retention.ms missing from %r" % configs
        assert int(configs["retention.ms"]) != 0, "retention.ms: %r" % configs["retention.ms"]

    # b. produce ---------------------------------------------------------------

    async def step_produce(self):
        producer = AIOKafkaProducer(
            **self.common("producer", acks="all", enable_idempotence=True, linger_ms=5)
        )
        await bounded("producer start()", producer.start())
        try:
            self.t0 = int(time.time() * 1000)
            futures = []
            for i in range(N):
                futures.append(await bounded("send()", producer.send(self.topic, key=b"k%d" % i, value=b"v%d" % i)))
            await bounded("producer flush()", producer.flush(), 30)
            results = await bounded("send results", asyncio.gather(*futures, return_exceptions=True))
            for i, md in enumerate(results):
                if isinstance(md, BaseException):
                    raise AssertionError("record %d: send failed: %r" % (i, md))
                assert md.topic == self.topic and 0 <= md.partition < PARTITIONS, "record %d: metadata %r" % (i, md)
                assert md.offset >= 0, "record %d: offset %r" % (i, md.offset)
                self.produced["k%d" % i] = (md.partition, md.offset)
            txn = producer._txn_manager
            assert txn is not None and txn.has_pid(), "idempotent producer has no producer id"
            log("idempotent producer id %d" % txn.producer_id)
        finally:
            await bounded("producer stop()", producer.stop())
        by_partition = {}
        for partition, offset in self.produced.values():
            by_partition.setdefault(partition, []).append(offset)
        for partition, offsets in by_partition.items():
            assert sorted(offsets) == list(range(len(offsets))), "partition %d offsets %r" % (partition, sorted(offsets))
        log("produced: %r" % {p: len(o) for p, o in sorted(by_partition.items())})

    # c. list offsets ------------------------------------------------------------

    async def step_list_offsets(self):
        consumer = await self.consumer("offsets")
        try:
            self.earliest = await bounded("beginning_offsets()", consumer.beginning_offsets(self.tps))
            self.latest = await bounded("end_offsets()", consumer.end_offsets(self.tps))
            by_time = await bounded("offsets_for_times()", consumer.offsets_for_times({tp: self.t0 for tp in self.tps}))
        finally:
            await bounded("consumer stop()", consumer.stop())
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

    @staticmethod
    async def poll(consumer, timeout_ms):
        batch = await bounded("getmany()", consumer.getmany(timeout_ms=timeout_ms))
        return [r for records in batch.values() for r in records]

    async def step_consume(self):
        consumer = await self.consumer("assign")
        try:
            consumer.assign(self.tps)
            await bounded("seek_to_beginning()", consumer.seek_to_beginning(*self.tps))
            keys = []
            deadline = time.monotonic() + 20
            while len(keys) < N and time.monotonic() < deadline:
                keys.extend(self.check_record(r) for r in await self.poll(consumer, 500))
            keys.extend(self.check_record(r) for r in await self.poll(consumer, 1000))  # nothing more may come
            assert len(keys) == N and set(keys) == set(self.produced), (
                "assigned consumer got %d records, %d distinct keys" % (len(keys), len(set(keys))))

            # seek to latest-1 of a partition with at least two records
            tp = next(tp for tp in self.tps if self.latest[tp] - self.earliest[tp] >= 2)
            consumer.assign([tp])
            consumer.seek(tp, self.latest[tp] - 1)
            got = []
            deadline = time.monotonic() + 10
            while not got and time.monotonic() < deadline:
                got.extend(await self.poll(consumer, 500))
            got.extend(await self.poll(consumer, 1000))
            assert len(got) == 1, "after seek(%s, %d): %d records %r" % (
                tp, self.latest[tp] - 1, len(got), [(r.partition, r.offset) for r in got])
            r = got[0]
            assert (r.partition, r.offset) == (tp.partition, self.latest[tp] - 1), "after seek: %r" % (r,)
            self.check_record(r)
            position = await bounded("position()", consumer.position(tp))
            assert position == self.latest[tp], "position %r after the last record" % position
        finally:
            await bounded("consumer stop()", consumer.stop())

    # e. consumer group -------------------------------------------------------------

    async def step_group(self):
        members = []
        try:
            for i in range(2):
                members.append(await self.consumer("member%d" % i, group_id=self.group))
            got = [[] for _ in members]
            assignments = [set() for _ in members]
            stop = asyncio.Event()

            async def run(i):
                c = members[i]
                c.subscribe([self.topic])
                while not stop.is_set():
                    records = await self.poll(c, 300)
                    keys = [self.check_record(r) for r in records]
                    got[i].extend(keys)
                    assignments[i] = {tp.partition for tp in c.assignment()}
                    if keys:
                        # commit what was processed before the next poll, where a
                        # rebalance could hand the partition to the other member
                        await bounded("commit()", c.commit())
                await bounded("commit()", c.commit())  # final synchronous commit of the positions

            tasks = [asyncio.ensure_future(run(i)) for i in range(2)]

            async def done():
                for t in tasks:
                    if t.done():
                        t.result()  # raises the member's error
                        raise AssertionError("a member stopped early")
                a0, a1 = assignments
                split = a0 and a1 and not (a0 & a1) and (a0 | a1) == set(range(PARTITIONS))
                return split and sum(len(g) for g in got) >= N

            try:
                await wait_until("two members splitting %d partitions and %d records" % (PARTITIONS, N), done,
                                 timeout_s=45)
                await asyncio.sleep(1)  # let duplicates, if any, show up
            finally:
                stop.set()
                finished, pending = await asyncio.wait(tasks, timeout=15)
                for t in pending:
                    t.cancel()
            assert not pending, "a group member did not stop"
            for t in tasks:
                t.result()  # raises the member's error
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
                committed = await bounded("committed()", members[0].committed(tp))
                assert committed == self.latest[tp], "committed(%s) = %r, latest %d" % (tp, committed, self.latest[tp])
            # and as the admin client sees them
            offsets = await bounded("list_consumer_group_offsets()", self.admin.list_consumer_group_offsets(self.group))
            offsets = {tp: om.offset for tp, om in offsets.items() if tp.topic == self.topic}
            assert offsets == {tp: self.latest[tp] for tp in self.tps}, "group offsets %r, latest %r" % (
                offsets, self.latest)
            assert sum(offsets.values()) == N
        finally:
            for c in members:
                await bounded("member stop()", c.stop())

        # after both LeaveGroups the group is empty
        async def empty():
            responses = await self.admin.describe_consumer_groups([self.group])
            groups = [g for r in responses for g in r.to_object()["groups"]]
            assert len(groups) == 1 and groups[0]["error_code"] == 0, "DescribeGroups: %r" % groups
            return groups[0]["state"] == "Empty"

        await wait_until("group %s Empty after stop()" % self.group, empty, timeout_s=10)

    # -------------------------------------------------------------------------

    async def run(self):
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
                await step()
                passed.add(name)
            except Exception as e:
                failed.append((name, "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc())))
                log("FAILED: %s: %s: %s" % (name, type(e).__name__, e))
        for what, close in (("admin", self.admin and self.admin.close), ("meta", self.meta and self.meta.stop)):
            if close:
                try:
                    await bounded("%s close" % what, close(), 10)
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
        print("usage: aiokafka_scenario.py <bootstrap host:port> <unique prefix>", file=sys.stderr)
        return 2
    threading.Thread(target=watchdog, name="watchdog", daemon=True).start()
    failed = asyncio.run(Scenario(sys.argv[1], sys.argv[2]).run())
    if failed:
        print("FAIL %s %s: %d step(s) failed" % (CLIENT, VERSION, len(failed)), file=sys.stderr)
        for name, why in failed:
            print("--- %s: %s" % (name, why), file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)
    print("OK %s %s" % (CLIENT, VERSION), flush=True)
    os._exit(0)


START = time.monotonic()
if __name__ == "__main__":
    sys.exit(main())
