//! End-to-end: real `skein` processes on loopback driven by librdkafka (the rdkafka
//! crate): partitions spread over shards, ordering, compression, restarts.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::acks::Acks;
use common::Broker;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

fn new_producer(broker: &Broker, extra: &[(&str, &str)]) -> (BaseProducer<Acks>, Acks) {
    let acks = Acks::default();
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", broker.bootstrap()).set("linger.ms", "5").set("message.timeout.ms", "30000");
    for (k, v) in extra {
        config.set(*k, *v);
    }
    (config.create_with_context(acks.clone()).expect("producer"), acks)
}

fn send_all(producer: &BaseProducer<Acks>, topic: &str, records: &[(i32, Vec<u8>)]) {
    for (partition, payload) in records {
        loop {
            let record: BaseRecord<'_, (), [u8]> = BaseRecord::to(topic).partition(*partition).payload(payload);
            match producer.send(record) {
                Ok(()) => break,
                Err((
                    rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                    _,
                )) => {
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => panic!("send: {e}"),
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

fn create_topic(broker: &Broker, name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", broker.bootstrap()).create().expect("admin");
    let results = futures_lite::future::block_on(admin.create_topics(
        &[NewTopic::new(name, partitions, TopicReplication::Fixed(1))],
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
    ))
    .expect("create_topics");
    for r in results {
        r.expect("topic created");
    }
}

/// Reads everything from the start of `partitions` until `expected` records or 30 s.
fn consume(broker: &Broker, topic: &str, partitions: i32, expected: usize) -> BTreeMap<i32, Vec<(i64, Vec<u8>)>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", "e2e")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&list).unwrap();
    let mut out: BTreeMap<i32, Vec<(i64, Vec<u8>)>> = BTreeMap::new();
    let mut count = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while count < expected && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                out.entry(m.partition()).or_default().push((m.offset(), m.payload().unwrap_or_default().to_vec()));
                count += 1;
            }
            // Transient client errors (a broker restarting) are retried by librdkafka.
            Some(Err(e)) => eprintln!("consume: {e}"),
            None => {}
        }
    }
    out
}

fn payload(partition: i32, seq: usize) -> Vec<u8> {
    format!("p{partition}-s{seq:06}").into_bytes()
}

// Many partitions spread over two shards: every record arrives once, in order per
// partition, and requests crossed shards.
#[test]
fn many_partitions_over_shards_keep_order() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    create_topic(&broker, "spread", 16);
    let (producer, acks) = new_producer(&broker, &[("enable.idempotence", "true"), ("acks", "all")]);
    let records: Vec<(i32, Vec<u8>)> = (0..8000).map(|i| ((i % 16) as i32, payload((i % 16) as i32, i / 16))).collect();
    send_all(&producer, "spread", &records);
    assert!(acks.errors.lock().unwrap().is_empty(), "{:?}", acks.errors.lock().unwrap());
    assert_eq!(acks.acked.lock().unwrap().len(), 8000);
    let got = consume(&broker, "spread", 16, 8000);
    for p in 0..16 {
        let list = &got[&p];
        assert_eq!(list.len(), 500, "partition {p}");
        for (seq, (offset, value)) in list.iter().enumerate() {
            assert_eq!(*offset, seq as i64);
            assert_eq!(value, &payload(p, seq));
        }
    }
    // Shards publish their counters every 100 ms.
    std::thread::sleep(Duration::from_millis(300));
    assert!(broker.metric_sum("skein_cross_shard_messages_total") > 0, "{}", broker.metrics());
    assert!(broker.metric_sum("skein_requests_total") > 0);
}

// Batches compressed with every codec librdkafka has are stored and served intact.
#[test]
fn compressed_batches() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("codec-{codec}");
        create_topic(&broker, &topic, 1);
        let (producer, acks) = new_producer(&broker, &[("compression.type", codec), ("batch.num.messages", "100")]);
        let records: Vec<(i32, Vec<u8>)> =
            (0..1000).map(|i| (0, format!("{codec}-{i}-{}", "x".repeat(i % 50)).into_bytes())).collect();
        send_all(&producer, &topic, &records);
        assert!(acks.errors.lock().unwrap().is_empty(), "{codec}: {:?}", acks.errors.lock().unwrap());
        let got = consume(&broker, &topic, 1, 1000);
        let values: Vec<Vec<u8>> = got[&0].iter().map(|(_, v)| v.clone()).collect();
        assert_eq!(values, records.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(), "{codec}");
    }
}

// Every acknowledged record survives a clean stop and a kill -9.
#[test]
fn restarts_keep_every_acknowledged_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path(), "2", &["--topic-config", "flush.messages=1"]);
    create_topic(&broker, "durable", 4);
    let (producer, acks) = new_producer(&broker, &[("acks", "all"), ("enable.idempotence", "true")]);
    let first: Vec<(i32, Vec<u8>)> = (0..2000).map(|i| ((i % 4) as i32, payload((i % 4) as i32, i / 4))).collect();
    send_all(&producer, "durable", &first);
    drop(producer);
    broker.stop();
    broker.restart();
    let got = consume(&broker, "durable", 4, 2000);
    assert_eq!(got.values().map(Vec::len).sum::<usize>(), 2000);

    let (producer, acks2) = new_producer(&broker, &[("acks", "all"), ("enable.idempotence", "true")]);
    let second: Vec<(i32, Vec<u8>)> = (2000..4000).map(|i| ((i % 4) as i32, payload((i % 4) as i32, i / 4))).collect();
    send_all(&producer, "durable", &second);
    let acked = acks.acked.lock().unwrap().len() + acks2.acked.lock().unwrap().len();
    assert_eq!(acked, 4000);
    drop(producer);
    broker.kill();
    broker.restart();
    let got = consume(&broker, "durable", 4, 4000);
    for p in 0..4 {
        let values: Vec<Vec<u8>> = got[&p].iter().map(|(_, v)| v.clone()).collect();
        let expected: Vec<Vec<u8>> = (0..1000).map(|s| payload(p, s)).collect();
        assert_eq!(values, expected, "partition {p} after kill -9");
    }
}
