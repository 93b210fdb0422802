//! Consumer groups with librdkafka (classic protocol): members split the partitions,
//! a leaving member's partitions move to the others, two groups each read everything,
//! committed offsets survive clean and unclean restarts.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Broker;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

fn create(broker: &Broker, topic: &str, partitions: i32) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["topic", "create", topic, "--partitions", &partitions.to_string(), "--bootstrap-server", &broker.bootstrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn fill(broker: &Broker, topic: &str, partitions: i32, per_partition: usize) {
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", broker.bootstrap()).create().unwrap();
    for i in 0..per_partition * partitions as usize {
        let value = format!("r{i}");
        producer.send(BaseRecord::<(), str>::to(topic).partition((i % partitions as usize) as i32).payload(&value)).unwrap();
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

fn consumer(broker: &Broker, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "300")
        .create()
        .unwrap()
}

fn assignment(c: &BaseConsumer) -> BTreeSet<i32> {
    c.assignment().unwrap().elements().iter().map(|e| e.partition()).collect()
}

/// Polls all consumers until `done` holds for their assignments, or 30 s pass.
fn poll_until(consumers: &[BaseConsumer], done: impl Fn(&[BTreeSet<i32>]) -> bool) -> Vec<BTreeSet<i32>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for c in consumers {
            let _ = c.poll(Duration::from_millis(20));
        }
        let sets: Vec<BTreeSet<i32>> = consumers.iter().map(assignment).collect();
        if done(&sets) || Instant::now() > deadline {
            return sets;
        }
    }
}

fn disjoint_cover(sets: &[BTreeSet<i32>], partitions: i32) -> bool {
    let total: usize = sets.iter().map(BTreeSet::len).sum();
    let union: BTreeSet<i32> = sets.iter().flatten().copied().collect();
    sets.iter().all(|s| !s.is_empty()) && total == partitions as usize && union.len() == partitions as usize
}

// Three members split six partitions; when one leaves, the other two take them all.
#[test]
fn members_split_partitions_and_take_over() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &["--group-initial-rebalance-delay-ms", "300"]);
    create(&broker, "split", 6);
    let mut members: Vec<BaseConsumer> = (0..3).map(|_| consumer(&broker, "splitters")).collect();
    for m in &members {
        m.subscribe(&["split"]).unwrap();
    }
    let started = Instant::now();
    let sets = poll_until(&members, |s| disjoint_cover(s, 6));
    assert!(disjoint_cover(&sets, 6), "{sets:?}");
    eprintln!("three members assigned after {:?}", started.elapsed());
    // One leaves (close sends LeaveGroup): the other two cover everything.
    let leaving = members.pop().unwrap();
    let started = Instant::now();
    drop(leaving);
    let sets = poll_until(&members, |s| disjoint_cover(s, 6));
    assert!(disjoint_cover(&sets, 6), "{sets:?}");
    eprintln!("rebalance after a leave took {:?}", started.elapsed());
}

// Two groups read the same topic; each gets every record exactly once.
#[test]
fn two_groups_each_get_everything() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &["--group-initial-rebalance-delay-ms", "100"]);
    create(&broker, "shared", 4);
    fill(&broker, "shared", 4, 250);
    for group in ["g-one", "g-two"] {
        let members: Vec<BaseConsumer> = (0..2).map(|_| consumer(&broker, group)).collect();
        for m in &members {
            m.subscribe(&["shared"]).unwrap();
        }
        let mut seen: BTreeMap<(i32, i64), usize> = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen.len() < 1000 && Instant::now() < deadline {
            for m in &members {
                if let Some(Ok(msg)) = m.poll(Duration::from_millis(20)) {
                    *seen.entry((msg.partition(), msg.offset())).or_default() += 1;
                }
            }
        }
        assert_eq!(seen.len(), 1000, "{group}");
        assert!(seen.values().all(|&n| n == 1), "{group}: duplicates");
    }
}

// Committed offsets survive a clean restart and a kill -9.
#[test]
fn committed_offsets_survive_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path(), "2", &["--group-initial-rebalance-delay-ms", "100"]);
    create(&broker, "kept", 3);
    fill(&broker, "kept", 3, 10);
    let commit = |broker: &Broker, offsets: &[(i32, i64)]| {
        let c = consumer(broker, "keepers");
        let mut list = TopicPartitionList::new();
        for (p, o) in offsets {
            list.add_partition_offset("kept", *p, Offset::Offset(*o)).unwrap();
        }
        // A simple commit, as an assign-mode consumer makes it.
        c.commit(&list, CommitMode::Sync).unwrap();
    };
    let committed = |broker: &Broker| -> Vec<(i32, i64)> {
        let c = consumer(broker, "keepers");
        let mut list = TopicPartitionList::new();
        for p in 0..3 {
            list.add_partition("kept", p);
        }
        let got = c.committed_offsets(list, Duration::from_secs(10)).unwrap();
        got.elements().iter().map(|e| (e.partition(), e.offset().to_raw().unwrap_or(-9))).collect()
    };
    commit(&broker, &[(0, 3), (1, 5), (2, 7)]);
    assert_eq!(committed(&broker), vec![(0, 3), (1, 5), (2, 7)]);
    broker.stop();
    broker.restart();
    assert_eq!(committed(&broker), vec![(0, 3), (1, 5), (2, 7)], "after a clean restart");
    commit(&broker, &[(0, 9), (1, 10)]);
    broker.kill();
    broker.restart();
    assert_eq!(committed(&broker), vec![(0, 9), (1, 10), (2, 7)], "after kill -9");
    // A consumer of the group resumes from the committed offsets.
    let c = consumer(&broker, "keepers");
    c.subscribe(&["kept"]).unwrap();
    let first: Arc<Mutex<BTreeMap<i32, i64>>> = Arc::default();
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs(30);
    while first.lock().unwrap().len() < 2 && Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(50)) {
            first.lock().unwrap().entry(m.partition()).or_insert(m.offset());
        }
    }
    let first = first.lock().unwrap();
    assert_eq!(first.get(&0), Some(&9));
    assert_eq!(first.get(&2), Some(&7));
}
