//! Transactions across brokers: the partitions a transaction writes are led by other
//! brokers than its coordinator, so markers travel as WriteTxnMarkers and produces are
//! verified with a coordinator elsewhere (AddPartitionsToTxn v4 verify_only); the
//! coordinator's broker is then killed mid-transaction, and its successor (an
//! in-sync replica of `__transaction_state`) aborts what it left open.

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
        assignment.add_partition_offset(TOPIC, p, Offset::Beginning).unwrap();
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
