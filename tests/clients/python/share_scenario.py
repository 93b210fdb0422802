"""The share-group scenario (KIP-932) with librdkafka's share consumer, through
confluent-kafka:

    share_scenario.py <bootstrap host:port> <unique prefix>

On a fresh topic <prefix>-share of 2 partitions and a fresh share group <prefix>-sg
(share.auto.offset.reset=earliest, set with IncrementalAlterConfigs on the GROUP
resource):

1. produce 300 records, keys k0..k299 and values v0..v299;
2. two share consumers with explicit acknowledgement take them: every value ending in
   3 is released on its first delivery, every value ending in 7 rejected, the rest
   accepted, committed with commit_sync after each poll;
3. asserts that every value was accepted exactly once but those ending in 7 (rejected
   once, never delivered again), that released values came back with delivery count
   2, that no acknowledgement was refused, and that both consumers got records.

Prints `OK confluent-kafka share <version> (librdkafka <version>)`, or the failure on
stderr and exits 1. The whole run is bounded to 120 s.
"""

import faulthandler
import os
import sys
import threading
import time
from collections import defaultdict

import confluent_kafka
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   ResourceType)

RECORDS = 300
TIMEOUT_S = 120


def fail(message):
    print("FAIL confluent-kafka share: %s" % message, file=sys.stderr, flush=True)
    os._exit(1)


def watchdog():
    faulthandler.dump_traceback_later(TIMEOUT_S - 5, exit=False)
    timer = threading.Timer(TIMEOUT_S, lambda: fail("did not finish within %d s" % TIMEOUT_S))
    timer.daemon = True
    timer.start()


class Ledger:
    """What the consumers saw and did."""

    def __init__(self):
        self.lock = threading.Lock()
        self.deliveries = defaultdict(list)  # value -> delivery counts, in order
        self.accepted = defaultdict(int)
        self.rejected = defaultdict(int)
        self.per_consumer = defaultdict(int)
        self.refused = []

    def finished(self):
        with self.lock:
            return len(self.accepted) + len(self.rejected)


def consume(index, bootstrap, topic, group, ledger, stop):
    consumer = ShareConsumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": "%s-%d" % (group, index),
        "share.acknowledgement.mode": "explicit",
    })

    def committed(offsets, error):
        if error is not None:
            with ledger.lock:
                ledger.refused.append(str(error))

    consumer.set_acknowledgement_commit_callback(committed)
    consumer.subscribe([topic])
    try:
        while not stop.is_set():
            messages = consumer.poll(0.5)
            if messages.is_empty():
                continue
            for m in messages:
                if m.error() is not None:
                    fail("consumer %d: %s" % (index, m.error()))
                value = int(m.value().decode()[1:])
                if m.key().decode() != "k%d" % value:
                    fail("consumer %d: unexpected record %r=%r" % (index, m.key(), m.value()))
                count = m.delivery_count()
                with ledger.lock:
                    ledger.deliveries[value].append(count)
                    ledger.per_consumer[index] += 1
                    if value % 10 == 7:
                        ack = AcknowledgeType.REJECT
                        ledger.rejected[value] += 1
                    elif value % 10 == 3 and count == 1:
                        ack = AcknowledgeType.RELEASE
                    else:
                        ack = AcknowledgeType.ACCEPT
                        ledger.accepted[value] += 1
                consumer.acknowledge(m, ack)
            for partition, error in consumer.commit_sync(30).items():
                if error is not None:
                    with ledger.lock:
                        ledger.refused.append("%s: %s" % (partition, error))
    finally:
        consumer.close()


def main():
    if len(sys.argv) != 3:
        print("usage: share_scenario.py <bootstrap host:port> <unique prefix>", file=sys.stderr)
        sys.exit(2)
    watchdog()
    bootstrap, prefix = sys.argv[1], sys.argv[2]
    topic, group = prefix + "-share", prefix + "-sg"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name, future in admin.create_topics([NewTopic(topic, 2, 1)]).items():
        future.result(30)
    reset = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[reset])
    for _, future in admin.incremental_alter_configs([resource]).items():
        future.result(30)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    if producer.flush(30) != 0:
        fail("records left unsent")

    ledger, stop = Ledger(), threading.Event()
    consumers = [threading.Thread(target=consume, args=(i, bootstrap, topic, group, ledger, stop), daemon=True)
                 for i in range(2)]
    for c in consumers:
        c.start()
    deadline = time.monotonic() + 90
    while ledger.finished() < RECORDS:
        if time.monotonic() > deadline:
            fail("%d of %d values finished within 90 s" % (ledger.finished(), RECORDS))
        time.sleep(0.2)
    # The consumers keep polling a little longer: nothing may come back.
    time.sleep(2)
    stop.set()
    for c in consumers:
        c.join(30)

    with ledger.lock:
        if ledger.refused:
            fail("acknowledgements refused: %s" % ledger.refused[:5])
        if len([n for n in ledger.per_consumer.values() if n > 0]) < 2:
            fail("records went to %s, want both consumers" % dict(ledger.per_consumer))
        for v in range(RECORDS):
            seen = ledger.deliveries[v]
            if v % 10 == 7:
                ok = ledger.rejected[v] == 1 and ledger.accepted[v] == 0 and seen == [1]
                want = "rejected once at its first delivery"
            elif v % 10 == 3:
                ok = ledger.accepted[v] == 1 and seen == [1, 2]
                want = "released at delivery 1 and accepted at 2"
            else:
                ok = ledger.accepted[v] == 1 and seen == [1]
                want = "accepted once at its first delivery"
            if not ok:
                fail("v%d: accepted %d, rejected %d, deliveries %s; want %s"
                     % (v, ledger.accepted[v], ledger.rejected[v], seen, want))
    print("OK confluent-kafka share %s (librdkafka %s)" % (confluent_kafka.version(), confluent_kafka.libversion()[0]))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
