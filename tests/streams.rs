//! Kafka Streams 4.4, unchanged, against Skein (tests/streams/ClickStream.java): a
//! stateful topology with a repartition topic, a windowed aggregation in a
//! changelog-backed RocksDB store and a KTable–KStream join, run at-least-once on two
//! instances. One is killed with kill -9 mid-stream: its tasks move to the other,
//! which restores their state from the changelog, and the final output matches a
//! model computed here.
//!
//! And a word count (tests/streams/WordCount.java) at exactly_once_v2, killed with
//! kill -9 again and again while input flows: its committed output holds each input
//! counted exactly once. The same topology runs at at-least-once too.

mod common;
#[path = "streams/raw.rs"]
mod raw;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{create_topic, kafka_streams_classpath, Broker};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};

const USERS: usize = 10;
const PAGES: usize = 7;

/// One application instance and what it printed.
struct Instance {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Instance {
    fn start(bootstrap: &str, state_dir: &std::path::Path) -> Instance {
        Instance::run("ClickStream", bootstrap, state_dir, &[])
    }

    fn run(program: &str, bootstrap: &str, state_dir: &std::path::Path, args: &[&str]) -> Instance {
        let mut child = Command::new("java")
            .arg("-cp")
            .arg(kafka_streams_classpath())
            .arg(format!("{}/tests/streams/{program}.java", env!("CARGO_MANIFEST_DIR")))
            .arg(bootstrap)
            .arg(state_dir)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("java");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (out, seen) = (child.stdout.take().unwrap(), lines.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                seen.lock().unwrap().push(line);
            }
        });
        Instance { child, lines }
    }

    fn printed(&self, prefix: &str) -> Vec<String> {
        self.lines.lock().unwrap().iter().filter(|l| l.starts_with(prefix)).cloned().collect()
    }

    fn wait_for(&self, prefix: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while self.printed(prefix).is_empty() {
            assert!(self.printed("FAILED").is_empty(), "the application failed: {:?}", self.lines.lock().unwrap());
            assert!(Instant::now() < deadline, "no {prefix} in {within:?}: {:?}", self.lines.lock().unwrap());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn produce(bootstrap: &str, topic: &str, records: impl Iterator<Item = (String, String)>) {
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", bootstrap).create().unwrap();
    for (key, value) in records {
        let record = BaseRecord::to(topic).key(&key).payload(&value);
        producer.send(record).unwrap();
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// Every record of `topic` (4 partitions) as (key, value), in each partition's order.
fn read_all(bootstrap: &str, topic: &str) -> Vec<(String, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "streams-test-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for p in 0..4 {
        assignment.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let (mut out, mut ended) = (Vec::new(), BTreeSet::new());
    let deadline = Instant::now() + Duration::from_secs(20);
    while ended.len() < 4 && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let text = |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or_default()).to_string();
                out.push((text(m.key()), text(m.payload())));
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                ended.insert(p);
            }
            _ => {}
        }
    }
    out
}

fn clicks(range: std::ops::Range<usize>) -> impl Iterator<Item = (String, String)> {
    range.map(|n| (format!("u{}", n % USERS), format!("c{n},p{}", n % PAGES)))
}

#[test]
fn streams_survive_a_killed_instance() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    let bootstrap = broker.bootstrap();
    create_topic(&broker, "users", 4);
    for topic in ["clicks", "enriched", "page-counts"] {
        create_topic(&broker, topic, 4);
    }
    produce(&bootstrap, "users", (0..USERS).map(|u| (format!("u{u}"), format!("r{}", u % 3))));

    let a = Instance::start(&bootstrap, &dir.path().join("state-a"));
    let b = Instance::start(&bootstrap, &dir.path().join("state-b"));
    a.wait_for("RUNNING", Duration::from_secs(90));
    b.wait_for("RUNNING", Duration::from_secs(90));
    produce(&bootstrap, "clicks", clicks(0..3000));

    // The model: each click enriched with its user's region; each page's distinct clicks.
    let expected_enriched = |upto: usize| -> BTreeSet<String> {
        (0..upto).map(|n| format!("r{},p{},c{n}", (n % USERS) % 3, n % PAGES)).collect()
    };
    let expected_counts = |upto: usize| -> BTreeMap<String, String> {
        (0..PAGES).map(|p| (format!("p{p}"), (0..upto).filter(|n| n % PAGES == p).count().to_string())).collect()
    };
    let settled = |upto: usize| {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let enriched: BTreeSet<String> = read_all(&bootstrap, "enriched").into_iter().map(|(_, v)| v).collect();
            let mut counts = BTreeMap::new();
            for (page, count) in read_all(&bootstrap, "page-counts") {
                counts.insert(page, count);
            }
            if enriched == expected_enriched(upto) && counts == expected_counts(upto) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not settled: {} of {upto} enriched (extra: {:?}), counts {counts:?}, expected {:?}",
                enriched.len(),
                enriched.difference(&expected_enriched(upto)).take(3).collect::<Vec<_>>(),
                expected_counts(upto)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    settled(3000);

    // kill -9 one instance mid-stream: the other takes its tasks over and restores
    // their stores from the changelog topics.
    let restored_before = b.printed("RESTORED clicks-per-page").len();
    drop(a);
    produce(&bootstrap, "clicks", clicks(3000..6000));
    settled(6000);
    let restored = b.printed("RESTORED clicks-per-page");
    assert!(restored.len() > restored_before, "the survivor restored no store: {:?}", b.lines.lock().unwrap());
    assert!(
        restored[restored_before..].iter().any(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap() > 0),
        "nothing came back from the changelog: {restored:?}"
    );
    assert!(b.printed("FAILED").is_empty() && b.printed("ERROR").is_empty());
    drop(b);
}

/// The word count of `guarantee` on a fresh broker: `kills` times, kill -9 the
/// instance while a batch of words flows and start a new one on the same state
/// directory; then the committed output must count every word exactly: one output
/// record per input (nothing processed twice into it) and each word's last count
/// equal to its occurrences.
fn word_count(guarantee: &str, kills: usize) {
    word_count_in(guarantee, kills, "classic");
}

/// `word_count` with the application's members in a group of `protocol`: `classic`,
/// or `streams` (KIP-1071, the broker assigns the tasks).
fn word_count_in(guarantee: &str, kills: usize, protocol: &str) {
    const WORDS: usize = 13;
    const BATCH: usize = 1500;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    let bootstrap = broker.bootstrap();
    let output = format!("word-counts-{guarantee}");
    create_topic(&broker, "words", 4);
    create_topic(&broker, &output, 4);
    let state = dir.path().join("state");
    let words = |range: std::ops::Range<usize>| range.map(|n| (n.to_string(), format!("w{}", n % WORDS)));
    let mut instance = Instance::run("WordCount", &bootstrap, &state, &[guarantee, protocol]);
    instance.wait_for("RUNNING", Duration::from_secs(90));
    for round in 0..=kills {
        let (bootstrap, range) = (bootstrap.clone(), round * BATCH..(round + 1) * BATCH);
        let producing = std::thread::spawn(move || produce(&bootstrap, "words", words(range)));
        if round < kills {
            // Mid-batch, mid-transaction: the next instance fences the killed one and
            // the transaction it left open is aborted.
            std::thread::sleep(Duration::from_millis(700));
            drop(instance);
            instance = Instance::run("WordCount", &broker.bootstrap(), &state, &[guarantee, protocol]);
            instance.wait_for("RUNNING", Duration::from_secs(90));
        }
        producing.join().unwrap();
    }
    let total = (kills + 1) * BATCH;
    let expected: BTreeMap<String, usize> =
        (0..WORDS).map(|w| (format!("w{w}"), (0..total).filter(|n| n % WORDS == w).count())).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let records = read_all(&bootstrap, &output);
        let mut last = BTreeMap::new();
        for (word, count) in &records {
            last.insert(word.clone(), count.parse::<usize>().unwrap());
        }
        if last == expected {
            assert_eq!(records.len(), total, "each input counted once in the committed output");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not settled: {} records, counts {last:?}, expected {expected:?}: {:?}",
            records.len(),
            instance.lines.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(instance.printed("FAILED").is_empty() && instance.printed("ERROR").is_empty());
    if protocol == "streams" {
        streams_groups_tool(&bootstrap, &format!("words-app-{guarantee}-{protocol}"), instance);
    }
}

/// `kafka-streams-groups` (Kafka 4.4's StreamsGroupCommand) on a running streams
/// group: list, describe its members and state; delete is refused while the member
/// runs, and succeeds once it has closed and left.
fn streams_groups_tool(bootstrap: &str, group: &str, instance: Instance) {
    const TOOL: &str = "org.apache.kafka.tools.streams.StreamsGroupCommand";
    let run = |args: &[&str]| common::kafka_tool(TOOL, &[&["--bootstrap-server", bootstrap][..], args].concat(), "");
    let (ok, listed) = run(&["--list"]);
    assert!(ok && listed.lines().any(|l| l.trim() == group), "{listed}");
    let (ok, members) = run(&["--describe", "--members", "--group", group]);
    assert!(ok && members.contains("ACTIVE: 0:[0,1,2,3]; 1:[0,1,2,3];"), "{members}");
    let (ok, state) = run(&["--describe", "--state", "--verbose", "--group", group]);
    let row = state.lines().find(|l| l.starts_with(group)).unwrap_or_default().to_string();
    assert!(ok && row.contains("sticky") && row.contains("Stable") && row.trim_end().ends_with(" 1"), "{state}");
    let (_, refused) = run(&["--delete", "--group", group]);
    assert!(refused.contains(&format!("Streams group '{group}' is not EMPTY.")), "{refused}");
    // SIGTERM: the shutdown hook closes the application, which leaves the group.
    let mut instance = instance;
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(instance.child.id() as i32, libc::SIGTERM) };
    let _ = instance.child.wait();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, deleted) = run(&["--delete", "--group", group]);
        if ok && deleted.contains(&format!("Deletion of requested streams groups ('{group}') was successful.")) {
            break;
        }
        assert!(Instant::now() < deadline, "not deleted: {deleted}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let (_, listed) = run(&["--list"]);
    assert!(!listed.lines().any(|l| l.trim() == group), "{listed}");
}

#[test]
fn streams_exactly_once_survives_kill_9() {
    word_count("exactly_once_v2", 3);
}

/// The same word count with `group.protocol=streams`: the broker configures the
/// topology, creates its repartition and changelog topics and assigns the tasks. The
/// killed member holds its tasks until its session (45 s, Kafka's least) ends, as on
/// Kafka, so it is killed once.
#[test]
fn streams_group_exactly_once_survives_kill_9() {
    word_count_in("exactly_once_v2", 1, "streams");
}

#[test]
fn streams_word_count_at_least_once() {
    word_count("at_least_once", 0);
}
