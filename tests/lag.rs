//! Consumer lag in `/metrics`, computed by the group's coordinator without a client:
//! per partition and per group, following the group's commits, gone with the group.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{create_topic, Broker};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const TOPIC: &str = "lagged";
const GROUP: &str = "laggers";

/// The value of the series `name{labels}` in a scrape.
fn gauge(metrics: &str, name: &str, labels: &str) -> Option<i64> {
    let prefix = format!("{name}{{{labels}}} ");
    metrics.lines().find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
}

/// The group's lag per partition and its sum, as `/metrics` shows them.
fn lag(broker: &Broker) -> (BTreeMap<i32, i64>, Option<i64>) {
    let metrics = broker.metrics();
    let partitions = (0..2)
        .filter_map(|p| {
            let labels = format!("group=\"{GROUP}\",topic=\"{TOPIC}\",partition=\"{p}\"");
            Some((p, gauge(&metrics, "skein_consumer_group_lag_records", &labels)?))
        })
        .collect();
    (partitions, gauge(&metrics, "skein_consumer_group_lag_sum_records", &format!("group=\"{GROUP}\"")))
}

/// Scrapes until the group's lag is `expected` (partition -> records, and the sum),
/// for up to four refresh intervals; returns how long it took.
fn wait_for_lag(broker: &Broker, expected: &BTreeMap<i32, i64>, sum: Option<i64>) -> Duration {
    let started = Instant::now();
    loop {
        let seen = lag(broker);
        if seen == (expected.clone(), sum) {
            return started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(20), "lag {seen:?}, expected {expected:?} sum {sum:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Reads `count` records, returning each partition's next offset to read.
fn consume(consumer: &BaseConsumer, count: usize, next: &mut BTreeMap<i32, i64>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut read = 0;
    while read < count {
        assert!(Instant::now() < deadline, "read {read} of {count}");
        if let Some(message) = consumer.poll(Duration::from_millis(50)) {
            let message = message.unwrap();
            next.insert(message.partition(), message.offset() + 1);
            read += 1;
        }
    }
}

fn commit(consumer: &BaseConsumer, next: &BTreeMap<i32, i64>) {
    let mut list = TopicPartitionList::new();
    for (&partition, &offset) in next {
        list.add_partition_offset(TOPIC, partition, Offset::Offset(offset)).unwrap();
    }
    consumer.commit(&list, CommitMode::Sync).unwrap();
}

// 100 records over two partitions on a two-shard node; the group commits 60, and
// /metrics shows the 40 left per partition and in sum; it reads the rest and the lag
// goes to 0; deleting the group removes its series.
#[test]
fn lag_follows_commits_and_leaves_with_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    create_topic(&broker, TOPIC, 2);
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", broker.bootstrap()).create().unwrap();
    for i in 0..100 {
        let value = format!("r{i}");
        producer.send(BaseRecord::<(), str>::to(TOPIC).partition(i % 2).payload(&value)).unwrap();
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).unwrap();

    // Assigned, not subscribed: the group has offsets and no members, so it can be
    // deleted at the end without waiting for a session to expire.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", GROUP)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for p in 0..2 {
        assignment.add_partition_offset(TOPIC, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut next = BTreeMap::new();
    consume(&consumer, 60, &mut next);
    commit(&consumer, &next);
    // A partition nothing was read from yet has no commit, hence no series.
    let expected: BTreeMap<i32, i64> = next.iter().map(|(&p, &o)| (p, 50 - o)).collect();
    let took = wait_for_lag(&broker, &expected, Some(40));
    eprintln!("lag {expected:?} after 60 of 100 shown within {took:?}");

    consume(&consumer, 40, &mut next);
    commit(&consumer, &next);
    assert_eq!(next, BTreeMap::from([(0, 50), (1, 50)]));
    let took = wait_for_lag(&broker, &BTreeMap::from([(0, 0), (1, 0)]), Some(0));
    eprintln!("lag 0 after the rest shown within {took:?}");
    drop(consumer);

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["group", "delete", GROUP, "--bootstrap-server", &broker.bootstrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let took = wait_for_lag(&broker, &BTreeMap::new(), None);
    let metrics = broker.metrics();
    assert!(!metrics.contains(&format!("group=\"{GROUP}\"")), "{metrics}");
    for name in ["skein_consumer_group_lag_series_dropped", "skein_consumer_group_lag_partitions_unknown"] {
        let values: Vec<&str> = metrics.lines().filter(|l| l.starts_with(&format!("{name}{{"))).collect();
        assert_eq!(values.len(), 2, "one per shard: {values:?}");
        assert!(values.iter().all(|l| l.ends_with(" 0")), "{values:?}");
    }
    eprintln!("series gone {took:?} after the delete");
}
