//! Transactions end to end (KIP-98, KIP-447, KIP-890): the Java client
//! (tests/java/Transactions.java, kafka-clients 4.1) and librdkafka commit and abort,
//! consume-transform-produce with offsets in the transaction, a killed producer's
//! transaction aborted by its successor or by its timeout, zombie fencing, transaction
//! state across a broker restart; read_committed consumers see committed records once
//! and aborted ones never, and are not held back by a finished transaction; the Admin
//! client describes transactions and producers. The Java client runs at
//! `transaction.version` 2 (transactions v2: an epoch bump per transaction, partitions
//! added by the broker) and 1; librdkafka has no transactions v2 and keeps to version 1.
//! Raw requests (`transactions/raw.rs`) get the error codes Apache Kafka 4.4 answers.
//!
//! Every expectation here was checked against Apache Kafka 4.4 (a single KRaft node,
//! `bench-harness/peers/kafka/run-kafka.sh`): with
//! `SKEIN_TEST_EXTERNAL_BOOTSTRAP=host:port` the tests run against that broker instead of
//! starting Skein, on topics and ids named uniquely per run (one at a time: some change
//! `transaction.version`).

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use common::{Broker, RawClient};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const NONE: i16 = 0;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
const CONCURRENT_TRANSACTIONS: i16 = 51;
const OPERATION_NOT_ATTEMPTED: i16 = 55;
const PRODUCER_FENCED: i16 = 90;

/// How long one run of the Java program may take: a JVM start, a source compile and
/// a few transactions, on a loaded two-core machine.
const JAVA_LIMIT: Duration = Duration::from_secs(120);

/// The broker under test: a Skein started for this test, or the broker at
/// $SKEIN_TEST_EXTERNAL_BOOTSTRAP (Apache Kafka, to check what these tests expect).
struct Target {
    broker: Option<Broker>,
    bootstrap: String,
    /// Appended to topic, group and transactional ids: an external broker keeps them
    /// between runs.
    suffix: String,
    _dir: tempfile::TempDir,
}

impl Target {
    fn start() -> Target {
        let dir = tempfile::tempdir().unwrap();
        if let Ok(bootstrap) = std::env::var("SKEIN_TEST_EXTERNAL_BOOTSTRAP") {
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
            return Target { broker: None, bootstrap, suffix: format!("-{nanos:x}"), _dir: dir };
        }
        let broker = Broker::start(dir.path(), "2", &["--group-initial-rebalance-delay-ms", "100"]);
        Target { bootstrap: broker.bootstrap(), broker: Some(broker), suffix: String::new(), _dir: dir }
    }

    /// `name` made unique to this run.
    fn name(&self, name: &str) -> String {
        format!("{name}{}", self.suffix)
    }

    /// Creates topic `name` (made unique) with `partitions` and waits until every
    /// partition has a leader; returns its full name.
    fn topic(&self, name: &str, partitions: i32) -> String {
        let topic = self.name(name);
        let mut client = RawClient::connect(&self.bootstrap);
        let request = CreateTopicsRequest::default()
            .with_topics(vec![common::creatable_topic(&topic, partitions, &[])])
            .with_timeout_ms(10_000);
        let response = client.call(&request, 7);
        assert_eq!(response.topics[0].error_code, NONE, "create {topic}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let request = MetadataRequest::default()
                .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(topic_name(&topic)))]));
            let response = client.call(&request, 12);
            let led = &response.topics[0];
            if led.error_code == NONE
                && led.partitions.len() == partitions as usize
                && led.partitions.iter().all(|p| p.leader_id.0 >= 0)
            {
                return topic;
            }
            assert!(Instant::now() < deadline, "{topic} has no leaders: {led:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops Skein cleanly (an external broker is left alone).
    fn stop(mut self) {
        if let Some(broker) = self.broker.as_mut() {
            broker.stop();
        }
    }

    /// Stops Skein cleanly and starts it again on the same data; an external broker
    /// is left running (the test then shows the same without the restart).
    fn restart(&mut self) {
        match self.broker.as_mut() {
            Some(broker) => {
                broker.stop();
                broker.restart();
            }
            None => eprintln!("external broker: not restarted"),
        }
    }

    /// The tail of Skein's log, for a failure message.
    fn log_tail(&self) -> String {
        let Some(broker) = &self.broker else { return String::from("(external broker)") };
        let log = broker.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

/// UpdateFeatures v1 of `feature` to `level` (a safe downgrade where it is lower),
/// waiting until ApiVersions shows it.
fn set_feature(client: &mut RawClient, feature: &str, level: i16) {
    let current = |client: &mut RawClient| {
        let versions = client.call(&common::api_versions_request(), 3);
        let finalized = versions.finalized_features.iter().find(|f| f.name.as_str() == feature);
        finalized.map_or(0, |f| f.max_version_level)
    };
    let upgrade_type = if level < current(client) { 2 } else { 1 };
    use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
    let update = FeatureUpdateKey::default()
        .with_feature(s(feature))
        .with_max_version_level(level)
        .with_upgrade_type(upgrade_type);
    let request = UpdateFeaturesRequest::default().with_timeout_ms(10_000).with_feature_updates(vec![update]);
    let response = client.call(&request, 1);
    assert_eq!(response.error_code, NONE, "{response:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if current(client) == level {
            return;
        }
        assert!(Instant::now() < deadline, "{feature} not at {level}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn topic_name(name: &str) -> TopicName {
    TopicName(s(name))
}

fn txn(id: &str) -> TransactionalId {
    TransactionalId(s(id))
}

// ---------------------------------------------------------------------------------------
// The Java program.

/// tests/java/Transactions.java run with `args`.
fn java_command(args: &[&str]) -> Command {
    let mut command = Command::new("java");
    command
        .args(["-XX:TieredStopAtLevel=1", "-cp"])
        .arg(common::java_classpath())
        .arg(format!("{}/tests/java/Transactions.java", env!("CARGO_MANIFEST_DIR")))
        .args(args);
    command
}

/// Runs Transactions.java with `args` to its end within JAVA_LIMIT; returns its output.
/// A failure or an overrun panics with what it printed and Skein's log tail.
fn java(target: &Target, args: &[&str]) -> String {
    let started = Instant::now();
    let child = java_command(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start java");
    let pid = child.id() as i32;
    let (done, output) = channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    let output = match output.recv_timeout(JAVA_LIMIT) {
        Ok(result) => result.unwrap(),
        Err(_) => {
            // SAFETY: signalling our own child, still running.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            output.recv().unwrap().unwrap()
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "Transactions.java {args:?} failed ({}) after {:?}\nstdout:\n{stdout}\nstderr:\n{}\nbroker log (tail):\n{}",
        output.status,
        started.elapsed(),
        String::from_utf8_lossy(&output.stderr),
        target.log_tail()
    );
    eprintln!("Transactions.java {} took {:?}", args[0], started.elapsed());
    stdout
}

/// A Java program left running (the `hang` subcommand), its output read as it comes.
struct Running {
    child: Child,
    lines: Receiver<String>,
}

impl Running {
    fn start(args: &[&str]) -> Running {
        let mut child = java_command(args).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("start java");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running { child, lines }
    }

    /// Waits up to `timeout` for the line `expected`.
    fn wait_for(&mut self, expected: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(100)) {
                if line == expected {
                    return;
                }
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("Transactions.java exited ({status}) before printing {expected}");
            }
        }
        panic!("Transactions.java did not print {expected} within {timeout:?}");
    }

    /// kill -9: the producer dies mid-transaction.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `Transactions.java consume` saw.
#[derive(Debug)]
struct Consumed {
    values: Vec<String>,
    /// The end offset per partition for the isolation level (the LSO for read_committed).
    end: BTreeMap<i32, i64>,
    position: BTreeMap<i32, i64>,
    /// It stopped because nothing came for a while, not because it reached `end`.
    idle: bool,
}

impl Consumed {
    fn sorted(&self) -> Vec<String> {
        let mut values = self.values.clone();
        values.sort();
        values
    }

    fn with_prefix(&self, prefix: &str) -> Vec<String> {
        let mut values: Vec<String> = self.values.iter().filter(|v| v.starts_with(prefix)).cloned().collect();
        values.sort();
        values
    }
}

/// Parses "key p=offset" lines.
fn partition_offsets(stdout: &str, key: &str) -> BTreeMap<i32, i64> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .map(|kv| {
            let (p, offset) = kv.split_once('=').unwrap();
            (p.parse().unwrap(), offset.parse().unwrap())
        })
        .collect()
}

/// Reads all of `topic` with `isolation` (read_committed or read_uncommitted).
fn consume(target: &Target, topic: &str, isolation: &str) -> Consumed {
    let stdout = java(target, &["consume", &target.bootstrap, topic, isolation, "5000"]);
    let count: usize = stdout.lines().find_map(|l| l.strip_prefix("COUNT ")).expect("COUNT").parse().unwrap();
    let values: Vec<String> =
        stdout.lines().take_while(|l| !l.starts_with("END ") && *l != "IDLE").map(str::to_string).collect();
    assert_eq!(values.len(), count, "{stdout}");
    Consumed {
        values,
        end: partition_offsets(&stdout, "END"),
        position: partition_offsets(&stdout, "POSITION"),
        idle: stdout.lines().any(|l| l == "IDLE"),
    }
}

/// What `Transactions.java describe` printed: each line's `key=value` fields.
#[derive(Debug)]
struct Described {
    txn: BTreeMap<String, String>,
    /// "state=<state>" or "none".
    listed: String,
    /// Per partition and active producer, with `partition` added.
    producers: Vec<BTreeMap<String, String>>,
}

fn fields(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace().filter_map(|f| f.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Describes transaction `id` and the producers of `topic` with Kafka's Admin client.
fn describe(target: &Target, topic: &str, id: &str) -> Described {
    let stdout = java(target, &["describe", &target.bootstrap, topic, id]);
    let txn = stdout.lines().find_map(|l| l.strip_prefix("TXN ")).map(fields).expect("TXN");
    let listed = stdout.lines().find_map(|l| l.strip_prefix("LISTED ")).expect("LISTED").to_string();
    let producers = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("PRODUCER "))
        .map(|l| {
            let (partition, rest) = l.split_once(' ').unwrap();
            let mut producer = fields(rest);
            producer.insert("partition".to_string(), partition.to_string());
            producer
        })
        .collect();
    Described { txn, listed, producers }
}

/// The values `produce-txn` sends in transactions `txns` of `per_txn` records each.
fn txn_values(txn_id: &str, txns: impl IntoIterator<Item = usize>, per_txn: usize) -> Vec<String> {
    let mut values: Vec<String> =
        txns.into_iter().flat_map(|i| (0..per_txn).map(move |j| format!("{txn_id}-{i}-{j}"))).collect();
    values.sort();
    values
}

// ---------------------------------------------------------------------------------------
// The Java client.

// Committed transactions are read once by read_committed, aborted ones never; a
// read_uncommitted consumer sees the aborted records too. Both reach the end of every
// partition: no transaction is left open to hold the LSO back.
#[test]
fn read_committed_sees_committed_transactions_once() {
    read_committed_once(2);
}

// The same with the cluster at transaction version 1: the client keeps to
// AddPartitionsToTxn and EndTxn v4, and the epoch to the one InitProducerId gave.
#[test]
fn read_committed_sees_committed_transactions_once_in_version_1() {
    read_committed_once(1);
}

fn read_committed_once(transaction_version: i16) {
    let target = Target::start();
    set_feature(&mut RawClient::connect(&target.bootstrap), "transaction.version", transaction_version);
    let topic = target.topic(&format!("txn-basic-v{transaction_version}"), 3);
    let id = target.name(&format!("basic-v{transaction_version}"));
    let started = Instant::now();
    // Transactions 2 and 5 are aborted, 0, 1, 3 and 4 committed.
    let out = java(&target, &["produce-txn", &target.bootstrap, &topic, &id, "6", "5", "3"]);
    assert!(out.contains("DONE committed=4 aborted=2"), "{out}");
    let committed = consume(&target, &topic, "read_committed");
    assert!(!committed.idle, "read_committed did not reach the LSO: {committed:?}");
    assert_eq!(committed.sorted(), txn_values(&id, [0, 1, 3, 4], 5));
    let uncommitted = consume(&target, &topic, "read_uncommitted");
    assert!(!uncommitted.idle, "{uncommitted:?}");
    assert_eq!(uncommitted.sorted(), txn_values(&id, 0..6, 5));
    // Every transaction ended: the LSO is the high watermark everywhere.
    assert_eq!(committed.end, uncommitted.end);
    assert_eq!(committed.position, committed.end);
    let described = describe(&target, &topic, &id);
    assert_eq!(described.txn["state"], "CompleteAbort", "the last one was aborted: {described:?}");
    // Version 2 bumps the epoch at each of the six ends; version 1 never.
    let epoch = if transaction_version >= 2 { "6" } else { "0" };
    assert_eq!(described.txn["epoch"], epoch, "{described:?}");
    assert!(described.producers.iter().all(|p| p["epoch"] == epoch), "{described:?}");
    eprintln!("read_committed_once(v{transaction_version}): {:?}", started.elapsed());
    set_feature(&mut RawClient::connect(&target.bootstrap), "transaction.version", 2);
    target.stop();
}

// Consume-transform-produce with the input offsets committed in the same transaction
// (sendOffsetsToTransaction with the consumer's group metadata, KIP-447): the first
// transaction is aborted and its batch processed again, yet the output holds each
// input exactly once, and the group's committed offsets are the input's end.
#[test]
fn read_process_write_is_exactly_once() {
    read_process_write(2);
}

// The same at transaction version 1 (AddOffsetsToTxn, TxnOffsetCommit v4).
#[test]
fn read_process_write_is_exactly_once_in_version_1() {
    read_process_write(1);
}

fn read_process_write(transaction_version: i16) {
    let target = Target::start();
    set_feature(&mut RawClient::connect(&target.bootstrap), "transaction.version", transaction_version);
    let v = transaction_version;
    let input = target.topic(&format!("rpw-in-v{v}"), 3);
    let output = target.topic(&format!("rpw-out-v{v}"), 2);
    let group = target.name(&format!("rpw-v{v}"));
    let id = target.name(&format!("rpw-txn-v{v}"));
    let started = Instant::now();
    let out = java(&target, &["produce-plain", &target.bootstrap, &input, "300"]);
    assert!(out.contains("PRODUCED 300"), "{out}");
    let out = java(&target, &["read-process-write", &target.bootstrap, &input, &output, &group, &id, "300", "1", "90"]);
    assert!(out.contains("PROCESSED 300"), "{out}");
    let aborted: usize = out
        .lines()
        .find(|l| l.starts_with("TXN 0 ") && l.ends_with(" aborted"))
        .and_then(|l| l.split_whitespace().nth(2)?.strip_prefix("records=")?.parse().ok())
        .unwrap_or_else(|| panic!("the first transaction was not aborted: {out}"));
    let mut expected: Vec<String> = (0..300).map(|i| format!("out-in-{i}")).collect();
    expected.sort();
    let committed = consume(&target, &output, "read_committed");
    assert!(!committed.idle, "{committed:?}");
    assert_eq!(committed.sorted(), expected, "each input once in the output");
    let uncommitted = consume(&target, &output, "read_uncommitted");
    assert_eq!(uncommitted.values.len(), 300 + aborted, "the aborted batch is in the log: {out}\n{uncommitted:?}");
    let out = java(&target, &["committed", &target.bootstrap, &input, &group]);
    let offsets = partition_offsets(&out, "COMMITTED");
    let ends = partition_offsets(&out, "END");
    assert_eq!(offsets.len(), 3, "{out}");
    assert_eq!(offsets, ends, "the group's committed offsets are the input's end");
    eprintln!("read_process_write(v{v}): {:?}", started.elapsed());
    set_feature(&mut RawClient::connect(&target.bootstrap), "transaction.version", 2);
    target.stop();
}

// A producer killed (kill -9) mid-transaction holds the LSO at its first record: a
// read_committed consumer stops there, even though a later transaction committed, and
// DescribeTransactions, ListTransactions and DescribeProducers show it open.
// A new producer with the same transactional.id fences it in initTransactions(), which
// aborts the open transaction: its records are never read committed, and the LSO moves on.
#[test]
fn a_killed_producers_transaction_is_aborted_by_its_successor() {
    let target = Target::start();
    let topic = target.topic("txn-hang", 1);
    let (pre, hung, other) = (target.name("pre"), target.name("hung"), target.name("other"));
    let started = Instant::now();
    java(&target, &["produce-txn", &target.bootstrap, &topic, &pre, "1", "3", "0"]);
    let mut hang = Running::start(&["hang", &target.bootstrap, &topic, &hung, "4", "60000"]);
    hang.wait_for("READY", JAVA_LIMIT);
    java(&target, &["produce-txn", &target.bootstrap, &topic, &other, "1", "2", "0"]);
    // Offsets 0-2 the first transaction, 3 its commit marker, 4 the open one's first.
    let blocked = consume(&target, &topic, "read_committed");
    assert_eq!(blocked.sorted(), txn_values(&pre, [0], 3), "{blocked:?}");
    assert_eq!(blocked.end.get(&0), Some(&4), "the LSO is the open transaction's first offset: {blocked:?}");
    assert!(!blocked.idle, "read_committed did not reach the LSO: {blocked:?}");
    let uncommitted = consume(&target, &topic, "read_uncommitted");
    assert_eq!(uncommitted.with_prefix("hung-"), ["hung-0", "hung-1", "hung-2", "hung-3"]);
    // DescribeTransactions, ListTransactions and DescribeProducers show it open.
    let described = describe(&target, &topic, &hung);
    assert_eq!(described.txn["state"], "Ongoing", "{described:?}");
    assert_eq!(described.txn["partitions"], format!("{topic}-0"), "{described:?}");
    assert_eq!(described.txn["timeout"], "60000", "{described:?}");
    assert_eq!(described.listed, "state=Ongoing", "{described:?}");
    let open = described.producers.iter().find(|p| p["producer"] == described.txn["producer"]);
    assert_eq!(open.map(|p| p["txn-start"].as_str()), Some("4"), "{described:?}");
    hang.kill();
    let fenced = Instant::now();
    // The successor: initTransactions() aborts the open transaction, then it commits.
    let out = java(&target, &["produce-txn", &target.bootstrap, &topic, &hung, "1", "2", "0"]);
    assert!(out.contains("DONE committed=1 aborted=0"), "{out}");
    eprintln!("the successor fenced, aborted and committed in {:?}", fenced.elapsed());
    let after = consume(&target, &topic, "read_committed");
    assert!(!after.idle, "read_committed is still blocked: {after:?}");
    let mut expected = txn_values(&pre, [0], 3);
    expected.extend(txn_values(&other, [0], 2));
    expected.extend(txn_values(&hung, [0], 2));
    expected.sort();
    assert_eq!(after.sorted(), expected, "none of the killed producer's records");
    let uncommitted = consume(&target, &topic, "read_uncommitted");
    assert_eq!(after.end, uncommitted.end, "the LSO is the high watermark again");
    let described = describe(&target, &topic, &hung);
    assert_eq!(described.txn["state"], "CompleteCommit", "{described:?}");
    assert_eq!(described.txn["partitions"], "", "{described:?}");
    assert!(described.producers.iter().all(|p| p["txn-start"] == "-1"), "{described:?}");
    eprintln!("a_killed_producers_transaction_is_aborted_by_its_successor: {:?}", started.elapsed());
    target.stop();
}

// Transaction state outlives a broker restart: committed and aborted transactions read
// as before, a transaction open across the restart still holds the LSO, and its
// producer's successor still fences it and aborts it.
#[test]
fn transactions_survive_a_broker_restart() {
    let mut target = Target::start();
    let topic = target.topic("txn-restart", 1);
    let (done, open) = (target.name("done"), target.name("open"));
    // Transactions 0 and 1 committed, 2 aborted: 9 records and 3 markers at offsets 0-11;
    // the open one starts at 12.
    java(&target, &["produce-txn", &target.bootstrap, &topic, &done, "3", "3", "3"]);
    let mut hang = Running::start(&["hang", &target.bootstrap, &topic, &open, "2", "60000"]);
    hang.wait_for("READY", JAVA_LIMIT);
    hang.kill();
    target.restart();
    let blocked = consume(&target, &topic, "read_committed");
    assert_eq!(blocked.sorted(), txn_values(&done, [0, 1], 3), "{blocked:?}");
    assert_eq!(blocked.end.get(&0), Some(&12), "the open transaction holds the LSO: {blocked:?}");
    let uncommitted = consume(&target, &topic, "read_uncommitted");
    assert_eq!(uncommitted.values.len(), 9 + 2, "{uncommitted:?}");
    let out = java(&target, &["produce-txn", &target.bootstrap, &topic, &open, "1", "1", "0"]);
    assert!(out.contains("DONE committed=1 aborted=0"), "{out}");
    let after = consume(&target, &topic, "read_committed");
    assert!(!after.idle, "{after:?}");
    let mut expected = txn_values(&done, [0, 1], 3);
    expected.extend(txn_values(&open, [0], 1));
    expected.sort();
    assert_eq!(after.sorted(), expected);
    target.stop();
}

// A transaction whose producer dies and never comes back is aborted by the coordinator
// once transaction.timeout.ms passes (Kafka checks every
// transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by default):
// read_committed consumers move on without any new producer.
#[test]
fn an_abandoned_transaction_is_aborted_after_its_timeout() {
    let target = Target::start();
    let topic = target.topic("txn-timeout", 1);
    let (hung, other) = (target.name("abandoned"), target.name("later"));
    let mut hang = Running::start(&["hang", &target.bootstrap, &topic, &hung, "3", "2000"]);
    hang.wait_for("READY", JAVA_LIMIT);
    hang.kill();
    let killed = Instant::now();
    java(&target, &["produce-txn", &target.bootstrap, &topic, &other, "1", "2", "0"]);
    let expected = txn_values(&other, [0], 2);
    loop {
        let committed = consume(&target, &topic, "read_committed");
        assert!(committed.with_prefix("hung-").is_empty(), "{committed:?}");
        if committed.sorted() == expected {
            break;
        }
        assert!(killed.elapsed() < Duration::from_secs(60), "the abandoned transaction is still open: {committed:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("an abandoned transaction (timeout 2 s) was aborted {:?} after its producer died", killed.elapsed());
    target.stop();
}

// Zombie fencing: producer A's transaction is open when B, with the same transactional.id,
// calls initTransactions(); B commits, and A fails: ProducerFencedException from EndTxn
// when it only commits, InvalidProducerEpochException when it first produces. Nothing
// A sent is read committed.
#[test]
fn a_zombie_producer_is_fenced() {
    let target = Target::start();
    let topic = target.topic("txn-zombie", 1);
    let started = Instant::now();
    let out = java(&target, &["zombie", &target.bootstrap, &topic, &target.name("zombie-commit"), "commit"]);
    assert!(out.contains("B COMMITTED"), "{out}");
    assert!(out.contains("A FENCED ProducerFencedException"), "{out}");
    let out = java(&target, &["zombie", &target.bootstrap, &topic, &target.name("zombie-send"), "send"]);
    assert!(out.contains("B COMMITTED"), "{out}");
    assert!(out.contains("A FENCED InvalidProducerEpochException"), "{out}");
    let committed = consume(&target, &topic, "read_committed");
    assert_eq!(committed.sorted(), ["fresh-0", "fresh-0"], "{committed:?}");
    let uncommitted = consume(&target, &topic, "read_uncommitted");
    assert_eq!(uncommitted.with_prefix("zombie-"), ["zombie-0", "zombie-0"], "A's first records reached the log");
    eprintln!("a_zombie_producer_is_fenced: {:?}", started.elapsed());
    target.stop();
}

// ---------------------------------------------------------------------------------------
// librdkafka.

fn rdkafka_producer(target: &Target, id: &str) -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", &target.bootstrap)
        .set("transactional.id", id)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .create()
        .expect("transactional producer")
}

fn rdkafka_send(producer: &BaseProducer, topic: &str, values: &[String]) {
    for value in values {
        let record: BaseRecord<'_, (), str> = BaseRecord::to(topic).partition(0).payload(value.as_str());
        producer.send(record).map_err(|(e, _)| e).expect("send");
        producer.poll(Duration::ZERO);
    }
}

/// Reads partition 0 of `topic` with librdkafka from the start until `last` arrives
/// (nothing after it is expected) or 30 s pass.
fn rdkafka_consume(target: &Target, topic: &str, isolation: &str, last: &str) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &target.bootstrap)
        .set("group.id", target.name("rdkafka-reader"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .create()
        .expect("consumer");
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
    consumer.assign(&list).unwrap();
    let mut values = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while values.last().map(String::as_str) != Some(last) {
        assert!(Instant::now() < deadline, "{last} not read with {isolation}; read {values:?}");
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => values.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string()),
            Some(Err(e)) => eprintln!("consume: {e}"),
            None => {}
        }
    }
    values
}

// librdkafka's transactional producer: init_transactions, a committed transaction, an
// aborted one, another committed; read_committed reads the committed ones in order, and
// read_uncommitted the aborted one too. A second producer with the same transactional.id
// fences the first, whose next commit fails.
#[test]
fn librdkafka_transactions() {
    let target = Target::start();
    let topic = target.topic("txn-rdkafka", 1);
    let id = target.name("rdkafka");
    let started = Instant::now();
    let timeout = Duration::from_secs(30);
    let producer = rdkafka_producer(&target, &id);
    producer.init_transactions(timeout).expect("init_transactions");
    let batch = |t: usize| -> Vec<String> { (0..10).map(|j| format!("rd-{t}-{j}")).collect() };
    for t in 0..3 {
        producer.begin_transaction().expect("begin_transaction");
        rdkafka_send(&producer, &topic, &batch(t));
        if t == 1 {
            producer.flush(timeout).expect("flush");
            producer.abort_transaction(timeout).expect("abort_transaction");
        } else {
            producer.commit_transaction(timeout).expect("commit_transaction");
        }
    }
    let committed = rdkafka_consume(&target, &topic, "read_committed", "rd-2-9");
    assert_eq!(committed, [batch(0), batch(2)].concat());
    let uncommitted = rdkafka_consume(&target, &topic, "read_uncommitted", "rd-2-9");
    assert_eq!(uncommitted, [batch(0), batch(1), batch(2)].concat());
    // A successor fences this producer: its next transaction cannot commit.
    producer.begin_transaction().expect("begin_transaction");
    rdkafka_send(&producer, &topic, &["rd-zombie".to_string()]);
    producer.flush(timeout).expect("flush");
    let successor = rdkafka_producer(&target, &id);
    successor.init_transactions(timeout).expect("successor init_transactions");
    let fenced = producer.commit_transaction(timeout);
    assert!(fenced.is_err(), "a fenced producer committed");
    successor.begin_transaction().expect("begin_transaction");
    rdkafka_send(&successor, &topic, &["rd-successor".to_string()]);
    successor.commit_transaction(timeout).expect("successor commit_transaction");
    let committed = rdkafka_consume(&target, &topic, "read_committed", "rd-successor");
    assert_eq!(committed, [batch(0), batch(2), vec!["rd-successor".to_string()]].concat());
    eprintln!("librdkafka_transactions: {:?} (fenced commit: {:?})", started.elapsed(), fenced.unwrap_err());
    drop(producer);
    drop(successor);
    target.stop();
}

// Raw requests, in transaction versions 1 and 2.
#[path = "transactions/raw.rs"]
mod raw;
