//! Transactions across brokers: the partitions a transaction writes are led by other
//! brokers than its coordinator, so markers travel as WriteTxnMarkers and produces are
//! verified with a coordinator elsewhere (AddPartitionsToTxn v4 verify_only, or v5
//! adding the partition for a client of transaction version 2); the coordinator's
//! broker is then killed mid-transaction, and its successor (an in-sync replica of
//! `__transaction_state`) aborts what it left open.

use super::*;

const TOPIC: &str = "txn-spread";
const PARTITIONS: i32 = 6;

fn transactional_producer(bootstrap: &str, id: &str) -> BaseProducer {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("transactional.id", id)
        .set("transaction.timeout.ms", "60000")
        .set("message.timeout.ms", "30000")
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(60)).unwrap();
    producer
}

/// One transaction of a record per partition, values `<tag>-<p>`, flushed.
fn send_all(producer: &BaseProducer, tag: &str) {
    producer.begin_transaction().unwrap();
    for p in 0..PARTITIONS {
        let value = format!("{tag}-{p}");
        producer.send(BaseRecord::<(), str>::to(TOPIC).partition(p).payload(&value)).unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// Every value a read_committed consumer reads from the start until each partition's
/// end (its last stable offset) is reached.
fn read_committed(bootstrap: &str) -> Vec<String> {
    read_committed_from(bootstrap, TOPIC)
}

fn read_committed_from(bootstrap: &str, topic: &str) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "txn-reader")
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        assignment.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let (mut values, mut ended) = (Vec::new(), std::collections::BTreeSet::new());
    let deadline = Instant::now() + Duration::from_secs(30);
    while ended.len() < PARTITIONS as usize {
        assert!(Instant::now() < deadline, "read_committed stalled at {} partitions: {values:?}", ended.len());
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => values.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string()),
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                ended.insert(p);
            }
            _ => {}
        }
    }
    values.sort();
    values
}

fn expected(tags: &[&str]) -> Vec<String> {
    let mut values: Vec<String> = tags.iter().flat_map(|t| (0..PARTITIONS).map(move |p| format!("{t}-{p}"))).collect();
    values.sort();
    values
}

#[test]
fn transactions_span_brokers_and_survive_their_coordinator() {
    let mut cluster = Cluster::start_with(3, &FAST_FAILURE_DETECTION);
    cluster.wait_for_brokers();
    create_replicated(cluster.node(1), TOPIC, PARTITIONS);
    let all: Vec<String> = cluster.nodes.iter().map(Broker::bootstrap).collect();
    let bootstrap = all.join(",");

    let producer = transactional_producer(&bootstrap, "spread-1");
    send_all(&producer, "c1");
    producer.commit_transaction(Duration::from_secs(30)).unwrap();
    send_all(&producer, "a1");
    producer.abort_transaction(Duration::from_secs(30)).unwrap();
    send_all(&producer, "c2");
    producer.commit_transaction(Duration::from_secs(30)).unwrap();
    assert_eq!(read_committed(&bootstrap), expected(&["c1", "c2"]));

    // Mid-transaction, the coordinator's broker dies; the transaction it leaves open
    // is aborted by the new coordinator when the next instance of the producer starts.
    send_all(&producer, "hung");
    let found: FindCoordinatorResponse = RawClient::connect(&cluster.node(1).bootstrap())
        .call(&FindCoordinatorRequest::default().with_key(StrBytes::from_static_str("spread-1")).with_key_type(1), 3);
    let coordinator = found.node_id.0;
    assert!((1..=3).contains(&coordinator), "transaction coordinator {coordinator}: {found:?}");
    drop(producer);
    cluster.node_mut(coordinator).kill();
    let rest: Vec<String> = cluster.nodes.iter().filter(|n| n.child.is_some()).map(Broker::bootstrap).collect();
    let rest = rest.join(",");
    let successor = transactional_producer(&rest, "spread-1");
    send_all(&successor, "c3");
    successor.commit_transaction(Duration::from_secs(30)).unwrap();
    assert_eq!(read_committed(&rest), expected(&["c1", "c2", "c3"]));

    // The killed broker returns and catches up: the same committed view through it.
    cluster.node_mut(coordinator).restart();
    let node = cluster.node(coordinator).bootstrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = std::panic::catch_unwind(|| read_committed(&node));
        if seen.as_ref().is_ok_and(|v| *v == expected(&["c1", "c2", "c3"])) {
            break;
        }
        assert!(Instant::now() < deadline, "the restarted broker serves {seen:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    for node in &mut cluster.nodes {
        node.stop();
    }
}

/// Runs tests/java/Transactions.java `produce-txn` (kafka-clients 4.1, which uses
/// transactions v2 where the cluster finalizes `transaction.version` 2): `txns`
/// transactions of 12 records over the partitions, every fourth aborted.
fn java_produce_txn(bootstrap: &str, topic: &str, id: &str, txns: usize) {
    let output = std::process::Command::new("java")
        .args(["-XX:TieredStopAtLevel=1", "-cp"])
        .arg(common::java_classpath())
        .arg(format!("{}/tests/java/Transactions.java", env!("CARGO_MANIFEST_DIR")))
        .args(["produce-txn", bootstrap, topic, id, &txns.to_string(), "12", "4"])
        .output()
        .expect("java");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let aborted = txns / 4;
    assert!(stdout.contains(&format!("DONE committed={} aborted={aborted}", txns - aborted)), "{stdout}");
}

/// The values `java_produce_txn` committed in transactions `txns`.
fn java_committed(id: &str, txns: std::ops::Range<usize>) -> Vec<String> {
    let mut values: Vec<String> =
        txns.filter(|i| i % 4 != 3).flat_map(|i| (0..12).map(move |j| format!("{id}-{i}-{j}"))).collect();
    values.sort();
    values
}

/// The state and producer epoch `id`'s coordinator (found through `bootstrap`)
/// describes.
fn described_epoch(bootstrap: &str, id: &str) -> (String, i16) {
    let find = FindCoordinatorRequest::default().with_key(StrBytes::from_string(id.to_string())).with_key_type(1);
    let found: FindCoordinatorResponse = RawClient::connect(bootstrap).call(&find, 3);
    assert_eq!(found.error_code, 0, "{found:?}");
    let request = DescribeTransactionsRequest::default()
        .with_transactional_ids(vec![TransactionalId(StrBytes::from_string(id.to_string()))]);
    let coordinator = format!("{}:{}", found.host, found.port);
    let state = RawClient::connect(&coordinator).call(&request, 0).transaction_states.remove(0);
    assert_eq!(state.error_code, 0, "{state:?}");
    (state.transaction_state.to_string(), state.producer_epoch)
}

// The Java client's transactions v2 across brokers: each partition is added by its
// leader through AddPartitionsToTxn v5 to a coordinator on another broker, markers
// carry the bumped epoch (WriteTxnMarkers v2), and the epoch grows by one per
// transaction. The coordinator's broker is killed; its successor replays the state
// (version-1 values) and the same transactional id goes on from the epoch it reached.
#[test]
fn java_transactions_of_version_2_span_brokers() {
    let topic = "txn-v2-spread";
    let id = "spread-v2";
    let mut cluster = Cluster::start_with(3, &FAST_FAILURE_DETECTION);
    cluster.wait_for_brokers();
    create_replicated(cluster.node(1), topic, PARTITIONS);
    let all: Vec<String> = cluster.nodes.iter().map(Broker::bootstrap).collect();
    let bootstrap = all.join(",");

    java_produce_txn(&bootstrap, topic, id, 8);
    assert_eq!(read_committed_from(&bootstrap, topic), java_committed(id, 0..8));
    let (state, epoch) = described_epoch(&cluster.node(1).bootstrap(), id);
    assert_eq!((state.as_str(), epoch), ("CompleteAbort", 8), "one bump per transaction");

    let found: FindCoordinatorResponse = RawClient::connect(&cluster.node(1).bootstrap())
        .call(&FindCoordinatorRequest::default().with_key(StrBytes::from_static_str(id)).with_key_type(1), 3);
    let coordinator = found.node_id.0;
    assert!((1..=3).contains(&coordinator), "transaction coordinator {coordinator}: {found:?}");
    cluster.node_mut(coordinator).kill();
    let rest: Vec<&Broker> = cluster.nodes.iter().filter(|n| n.child.is_some()).collect();
    let rest_bootstrap = rest.iter().map(|n| n.bootstrap()).collect::<Vec<_>>().join(",");
    let survivor = rest[0].bootstrap();
    java_produce_txn(&rest_bootstrap, topic, id, 4);
    let mut expected = java_committed(id, 0..8);
    expected.extend(java_committed(id, 0..4));
    expected.sort();
    assert_eq!(read_committed_from(&rest_bootstrap, topic), expected);
    // InitProducerId bumped 8 to 9, then four transactions.
    assert_eq!(described_epoch(&survivor, id), ("CompleteAbort".to_string(), 13));
    for node in &mut cluster.nodes {
        node.stop();
    }
}
