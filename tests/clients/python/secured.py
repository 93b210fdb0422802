"""kafka-python against a secured Skein listener: produce N records, read them back
in a fresh consumer, and check every one came back. Exits non-zero with a message
on any failure.

usage: secured.py BOOTSTRAP PROTOCOL MECHANISM USER PASSWORD CAFILE TOPIC
(MECHANISM, USER and PASSWORD are '-' for SSL without SASL)
"""
import sys

from kafka import KafkaConsumer, KafkaProducer

bootstrap, protocol, mechanism, user, password, cafile, topic = sys.argv[1:8]
options = {"bootstrap_servers": bootstrap, "security_protocol": protocol}
if protocol in ("SSL", "SASL_SSL"):
    options.update(ssl_cafile=cafile, ssl_check_hostname=True)
if mechanism != "-":
    options.update(sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)

COUNT = 50
producer = KafkaProducer(acks="all", **options)
for i in range(COUNT):
    producer.send(topic, key=b"k%d" % i, value=b"secured-%d" % i)
producer.flush(timeout=30)
producer.close()

consumer = KafkaConsumer(
    topic,
    auto_offset_reset="earliest",
    enable_auto_commit=False,
    consumer_timeout_ms=15000,
    **options,
)
seen = set()
for message in consumer:
    seen.add(message.value)
    if len(seen) == COUNT:
        break
consumer.close()
want = {b"secured-%d" % i for i in range(COUNT)}
if seen != want:
    sys.exit("read back %d of %d records" % (len(seen & want), COUNT))
print("ok %d" % COUNT)
