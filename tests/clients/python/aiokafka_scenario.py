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

Prints `OK aiokafka <version>` and exits 0 when every check holds; otherwise a FAIL
report and exit 1 (3 if the SCENARIO_TIMEOUT_S watchdog fires): see common.py,
which holds what this script shares with scenario.py.
"""

import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import aiokafka  # noqa: E402
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType  # noqa: E402

import common  # noqa: E402
from common import N, PARTITIONS, REQUEST_TIMEOUT_MS, log  # noqa: E402

CLIENT = "aiokafka"
VERSION = aiokafka.__version__
CALL_TIMEOUT_S = 20  # bound on any single awaited client call


async def bounded(what, awaitable, timeout_s=CALL_TIMEOUT_S):
    try:
        return await asyncio.wait_for(awaitable, timeout_s)
    except asyncio.TimeoutError:
        raise AssertionError("%s did not complete within %.0fs" % (what, timeout_s)) from None


async def attempt(what, cond, timeout_s):
    """common.attempt for an async cond, bounded by timeout_s."""
    try:
        return await bounded(what, cond(), timeout_s), None
    except Exception as e:  # keep the last error for the message
        return None, e


async def wait_until(what, cond, timeout_s=10.0, interval_s=0.2):
    """Awaits cond() until it returns a truthy value; raises AssertionError after timeout_s."""
    deadline = common.Deadline(what, timeout_s)
    while not deadline.settled(await attempt(what, cond, timeout_s)):
        await asyncio.sleep(interval_s)
    return deadline.last


async def poll(consumer, timeout_ms):
    batch = await bounded("getmany()", consumer.getmany(timeout_ms=timeout_ms))
    return [r for records in batch.values() for r in records]


async def drain(consumer, want, timeout_s):
    """Polls until want records came or timeout_s passed, then once more for 1 s."""
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        got.extend(await poll(consumer, 500))
    got.extend(await poll(consumer, 1000))  # nothing more may come
    return got


class Scenario(common.BaseScenario):
    TopicPartition = TopicPartition

    async def consumer(self, suffix, **extra):
        consumer = AIOKafkaConsumer(**self.consumer_config(suffix, **extra))
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
        self.check_listed(await self.list_topics())

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
        self.check_topic_configs(configs)

    # b. produce ---------------------------------------------------------------

    async def step_produce(self):
        producer = AIOKafkaProducer(**self.common("producer", acks="all", enable_idempotence=True, linger_ms=5))
        await bounded("producer start()", producer.start())
        try:
            futures = []
            for k, v in self.start_producing():
                futures.append(await bounded("send()", producer.send(self.topic, key=k, value=v)))
            await bounded("producer flush()", producer.flush(), 30)
            results = await bounded("send results", asyncio.gather(*futures, return_exceptions=True))
            for i, md in enumerate(results):
                if isinstance(md, BaseException):
                    raise AssertionError("record %d: send failed: %r" % (i, md))
                self.record_sent(i, md)
            txn = producer._txn_manager
            assert txn is not None and txn.has_pid(), "idempotent producer has no producer id"
            log("idempotent producer id %d" % txn.producer_id)
        finally:
            await bounded("producer stop()", producer.stop())
        self.check_produced()

    # c. list offsets ------------------------------------------------------------

    async def step_list_offsets(self):
        consumer = await self.consumer("offsets")
        try:
            self.earliest = await bounded("beginning_offsets()", consumer.beginning_offsets(self.tps))
            self.latest = await bounded("end_offsets()", consumer.end_offsets(self.tps))
            by_time = await bounded("offsets_for_times()", consumer.offsets_for_times({tp: self.t0 for tp in self.tps}))
        finally:
            await bounded("consumer stop()", consumer.stop())
        self.check_offsets(by_time)

    # d. consume ------------------------------------------------------------------

    async def step_consume(self):
        consumer = await self.consumer("assign")
        try:
            consumer.assign(self.tps)
            await bounded("seek_to_beginning()", consumer.seek_to_beginning(*self.tps))
            self.check_consumed_all([self.check_record(r) for r in await drain(consumer, N, 20)])

            tp, offset = self.seek_target()
            consumer.assign([tp])
            consumer.seek(tp, offset)
            got = await drain(consumer, 1, 10)
            self.check_after_seek(tp, got)
            self.check_position(tp, await bounded("position()", consumer.position(tp)))
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
                    keys = [self.check_record(r) for r in await poll(c, 300)]
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
                return self.group_split(assignments, got)

            try:
                await wait_until(self.group_waited_for(), done, timeout_s=45)
                await asyncio.sleep(1)  # let duplicates, if any, show up
            finally:
                stop.set()
                finished, pending = await asyncio.wait(tasks, timeout=15)
                for t in pending:
                    t.cancel()
            assert not pending, "a group member did not stop"
            for t in tasks:
                t.result()  # raises the member's error
            self.check_group(assignments, got)

            # committed offsets, as a member sees them
            for tp in self.tps:
                self.check_committed(tp, await bounded("committed()", members[0].committed(tp)))
            # and as the admin client sees them
            self.check_group_offsets(
                await bounded("list_consumer_group_offsets()", self.admin.list_consumer_group_offsets(self.group)))
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
        steps = common.StepRunner(self)
        for step, guard in steps:
            with guard:
                await step()
        for what, close in (("admin", self.admin and self.admin.close), ("meta", self.meta and self.meta.stop)):
            if close:
                try:
                    await bounded("%s close" % what, close(), 10)
                except Exception:
                    pass
        return steps.failed


if __name__ == "__main__":
    sys.exit(common.main(CLIENT, VERSION, "aiokafka_scenario.py",
                         lambda bootstrap, prefix: asyncio.run(Scenario(bootstrap, prefix).run())))
