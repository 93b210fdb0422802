"""What the Python client scenarios (scenario.py for kafka-python, aiokafka_scenario.py
for aiokafka) share: constants, logging, the polling deadline, the step runner, the
watchdog, the entry point with its OK/FAIL report, and every check made on what a
client returned. The scripts import it from their own directory.

A script subclasses BaseScenario with its client calls (sync or async), then calls
main(CLIENT, VERSION, usage_name, run) where run(bootstrap, prefix) returns the failed
steps.
"""

import contextlib
import faulthandler
import os
import sys
import threading
import time
import traceback

TIMEOUT_S = float(os.environ.get("SCENARIO_TIMEOUT_S", "120"))
N = 100
PARTITIONS = 3
REQUEST_TIMEOUT_MS = 10000

START = time.monotonic()
_ident = {"client": "?", "version": "?"}


def log(msg):
    print("[%s %s %.1fs] %s" % (_ident["client"], _ident["version"], time.monotonic() - START, msg),
          file=sys.stderr, flush=True)


# polling --------------------------------------------------------------------


def attempt(fn):
    """Calls fn(): (its value, None), or (None, the exception it raised)."""
    try:
        return fn(), None
    except Exception as e:  # keep the last error for the message
        return None, e


class Deadline:
    """The bookkeeping of a wait_until: its deadline and cond's last value or error."""

    def __init__(self, what, timeout_s):
        self.what = what
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.last = None

    def settled(self, outcome):
        """Records one (value, error) attempt: True when the value is truthy; raises
        AssertionError once the deadline has passed."""
        value, error = outcome
        self.last = value if error is None else error
        if error is None and value:
            return True
        if time.monotonic() > self.deadline:
            raise AssertionError("timed out after %.0fs waiting for %s (last: %r)" % (self.timeout_s, self.what, self.last))
        return False


# steps ------------------------------------------------------------------------

# (name, BaseScenario method, names of the steps it needs)
STEPS = [
    ("admin: create topic", "step_admin_create", []),
    ("admin: list topics", "step_admin_list", ["admin: create topic"]),
    ("admin: create and delete topic", "step_admin_delete", ["admin: create topic"]),
    ("admin: describe configs", "step_admin_configs", ["admin: create topic"]),
    ("produce", "step_produce", ["admin: create topic"]),
    ("list offsets", "step_list_offsets", ["produce"]),
    ("consume (assign, seek)", "step_consume", ["list offsets"]),
    ("consumer group", "step_group", ["list offsets"]),
]


class StepRunner:
    """Iterates over the steps whose needs passed, yielding (step, guard): run the
    step inside `with guard:`, which records it as passed, or as failed with its
    traceback (the exception does not propagate). A step whose needs failed is
    recorded as skipped."""

    def __init__(self, scenario):
        self.scenario = scenario
        self.passed = set()
        self.failed = []  # (name, why)

    def __iter__(self):
        for name, method, needs in STEPS:
            missing = [n for n in needs if n not in self.passed]
            if missing:
                self.failed.append((name, "skipped: needs %s" % ", ".join(missing)))
                continue
            log("step: " + name)
            yield getattr(self.scenario, method), self.guard(name)

    @contextlib.contextmanager
    def guard(self, name):
        try:
            yield
            self.passed.add(name)
        except Exception as e:
            self.failed.append((name, "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc())))
            log("FAILED: %s: %s: %s" % (name, type(e).__name__, e))


# the scenario's state and checks ----------------------------------------------------


class BaseScenario:
    """State shared by the steps, and the checks on what the client returned. A
    subclass sets TopicPartition and implements the step_* methods of STEPS."""

    TopicPartition = None

    def __init__(self, bootstrap, prefix):
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.topic = prefix + "-t"
        self.tmp_topic = prefix + "-tmp"
        self.group = prefix + "-g"
        self.tps = [self.TopicPartition(self.topic, p) for p in range(PARTITIONS)]
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

    def consumer_config(self, suffix, **extra):
        cfg = self.common(
            suffix,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=200,
            # request_timeout_ms (in common()) must exceed session_timeout_ms in kafka-python 2.x
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
        )
        cfg.update(extra)
        return cfg

    # a. admin

    def check_listed(self, topics):
        assert self.topic in topics, "admin list_topics(): %s missing from %r" % (self.topic, topics)

    def check_topic_configs(self, configs):
        assert configs.get("cleanup.policy") == "delete", "cleanup.policy: %r (configs %r)" % (
            configs.get("cleanup.policy"),
            configs,
        )
        assert "retention.ms" in configs, "retention.ms missing from %r" % configs
        assert int(configs["retention.ms"]) != 0, "retention.ms: %r" % configs["retention.ms"]

    # b. produce

    def start_producing(self):
        """Notes T0 and returns the (key, value) pairs to send, in order."""
        self.t0 = int(time.time() * 1000)
        return [(b"k%d" % i, b"v%d" % i) for i in range(N)]

    def record_sent(self, i, md):
        assert md.topic == self.topic and 0 <= md.partition < PARTITIONS, "record %d: metadata %r" % (i, md)
        assert md.offset >= 0, "record %d: offset %r" % (i, md.offset)
        self.produced["k%d" % i] = (md.partition, md.offset)

    def check_produced(self):
        by_partition = {}
        for partition, offset in self.produced.values():
            by_partition.setdefault(partition, []).append(offset)
        for partition, offsets in by_partition.items():
            assert sorted(offsets) == list(range(len(offsets))), "partition %d offsets %r" % (partition, sorted(offsets))
        log("produced: %r" % {p: len(o) for p, o in sorted(by_partition.items())})

    # c. list offsets

    def check_offsets(self, by_time):
        """Checks self.earliest, self.latest and offsets_for_times(T0) (by_time)."""
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

    # d. consume

    def check_record(self, r):
        key = r.key.decode()
        assert r.value == b"v" + r.key[1:], "record %s/%d: key %r value %r" % (r.topic, r.offset, r.key, r.value)
        assert self.produced.get(key) == (r.partition, r.offset), "record %r at %d/%d, produced at %r" % (
            key, r.partition, r.offset, self.produced.get(key))
        assert r.timestamp >= self.t0, "record %r timestamp %d < T0 %d" % (key, r.timestamp, self.t0)
        return key

    def check_consumed_all(self, keys):
        assert len(keys) == N and set(keys) == set(self.produced), (
            "assigned consumer got %d records, %d distinct keys" % (len(keys), len(set(keys))))

    def seek_target(self):
        """A partition with at least two records, and the offset latest-1 to seek to."""
        tp = next(tp for tp in self.tps if self.latest[tp] - self.earliest[tp] >= 2)
        return tp, self.latest[tp] - 1

    def check_after_seek(self, tp, got):
        assert len(got) == 1, "after seek(%s, %d): %d records %r" % (
            tp, self.latest[tp] - 1, len(got), [(r.partition, r.offset) for r in got])
        r = got[0]
        assert (r.partition, r.offset) == (tp.partition, self.latest[tp] - 1), "after seek: %r" % (r,)
        self.check_record(r)

    def check_position(self, tp, position):
        assert position == self.latest[tp], "position %r after the last record" % position

    # e. consumer group

    def group_split(self, assignments, got):
        """Whether two members split the partitions and consumed at least N records."""
        a0, a1 = assignments
        split = a0 and a1 and not (a0 & a1) and (a0 | a1) == set(range(PARTITIONS))
        return split and sum(len(g) for g in got) >= N

    def group_waited_for(self):
        return "two members splitting %d partitions and %d records" % (PARTITIONS, N)

    def check_group(self, assignments, got):
        log("member assignments %r, records %r" % (assignments, [len(g) for g in got]))
        a0, a1 = assignments
        assert a0 and a1, "both members need partitions: %r" % assignments
        assert not (a0 & a1) and (a0 | a1) == set(range(PARTITIONS)), "assignments %r" % assignments
        all_keys = got[0] + got[1]
        assert len(all_keys) == N and set(all_keys) == set(self.produced), (
            "group consumed %d records, %d distinct keys (%d, %d per member)" % (
                len(all_keys), len(set(all_keys)), len(got[0]), len(got[1])))

    def check_committed(self, tp, committed):
        """committed: the offset a member reads back for tp."""
        assert committed == self.latest[tp], "committed(%s) = %r, latest %d" % (tp, committed, self.latest[tp])

    def check_group_offsets(self, offsets):
        """offsets: TopicPartition -> OffsetAndMetadata, as the admin client lists them."""
        offsets = {tp: om.offset for tp, om in offsets.items() if tp.topic == self.topic}
        assert offsets == {tp: self.latest[tp] for tp in self.tps}, "group offsets %r, latest %r" % (
            offsets, self.latest)
        assert sum(offsets.values()) == N


# entry point ------------------------------------------------------------------------


def watchdog():
    time.sleep(TIMEOUT_S)
    print("FAIL %s %s: timed out after %.0fs; stacks:" % (_ident["client"], _ident["version"], TIMEOUT_S),
          file=sys.stderr, flush=True)
    faulthandler.dump_traceback(all_threads=True)
    os._exit(3)


def main(client, version, usage_name, run):
    """Runs run(bootstrap, prefix), which returns the failed steps as (name, why), under
    the watchdog; prints `OK <client> <version>` and exits 0, or the failures and exits 1."""
    _ident.update(client=client, version=version)
    if len(sys.argv) != 3:
        print("usage: %s <bootstrap host:port> <unique prefix>" % usage_name, file=sys.stderr)
        return 2
    threading.Thread(target=watchdog, name="watchdog", daemon=True).start()
    failed = run(sys.argv[1], sys.argv[2])
    if failed:
        print("FAIL %s %s: %d step(s) failed" % (client, version, len(failed)), file=sys.stderr)
        for name, why in failed:
            print("--- %s: %s" % (name, why), file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)  # do not wait on client threads
    print("OK %s %s" % (client, version), flush=True)
    os._exit(0)
