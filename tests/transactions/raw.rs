//! Transactional requests sent raw, to check each error code and each transition as
//! Apache Kafka 4.4 answers them, in transaction version 1 (AddPartitionsToTxn,
//! AddOffsetsToTxn, EndTxn v4 and below) and 2 (KIP-890 part 2: Produce v12 and
//! TxnOffsetCommit v5 add their partition, EndTxn v5 bumps the epoch).

use super::*;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

/// Calls `call` until its error code is not one a client retries (a new partition
/// without its leader yet, a coordinator still loading, or a transaction completing),
/// for up to 30 s.
fn retrying<T>(what: &str, mut call: impl FnMut() -> (i16, T)) -> (i16, T) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, answer) = call();
        let retriable = [
            NOT_LEADER_OR_FOLLOWER,
            COORDINATOR_LOAD_IN_PROGRESS,
            COORDINATOR_NOT_AVAILABLE,
            NOT_COORDINATOR,
            CONCURRENT_TRANSACTIONS,
        ];
        if !retriable.contains(&code) || Instant::now() > deadline {
            return (code, answer);
        }
        eprintln!("{what}: {code}, retrying");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// FindCoordinator v4 for `key` of `key_type` (0 group, 1 transaction).
fn find_coordinator(client: &mut RawClient, key_type: i8, key: &str) -> find_coordinator_response::Coordinator {
    let request = FindCoordinatorRequest::default().with_key_type(key_type).with_coordinator_keys(vec![s(key)]);
    let (_, coordinator) = retrying("FindCoordinator", || {
        let coordinator = client.call(&request, 4).coordinators.remove(0);
        (coordinator.error_code, coordinator)
    });
    coordinator
}

fn init_producer_id(client: &mut RawClient, id: &str, timeout_ms: i32) -> InitProducerIdResponse {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(Some(txn(id)))
        .with_transaction_timeout_ms(timeout_ms)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    client.call(&request, 4)
}

fn end_txn(client: &mut RawClient, id: &str, producer: (i64, i16), commit: bool, version: i16) -> i16 {
    end_txn_answer(client, id, producer, commit, version).0
}

/// EndTxn: its error code and the producer id and epoch it answers (v5+).
fn end_txn_answer(
    client: &mut RawClient,
    id: &str,
    producer: (i64, i16),
    commit: bool,
    version: i16,
) -> (i16, (i64, i16)) {
    let request = EndTxnRequest::default()
        .with_transactional_id(txn(id))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_committed(commit);
    let response = client.call(&request, version);
    (response.error_code, (response.producer_id.0, response.producer_epoch))
}

/// AddPartitionsToTxn v3 (the clients' version) for `partitions` of (topic, partition):
/// the error code per (topic, partition).
fn add_partitions(
    client: &mut RawClient,
    id: &str,
    producer: (i64, i16),
    partitions: &[(&str, i32)],
) -> BTreeMap<(String, i32), i16> {
    let topics = partitions
        .iter()
        .map(|(topic, p)| AddPartitionsToTxnTopic::default().with_name(topic_name(topic)).with_partitions(vec![*p]))
        .collect();
    let request = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn(id))
        .with_v3_and_below_producer_id(ProducerId(producer.0))
        .with_v3_and_below_producer_epoch(producer.1)
        .with_v3_and_below_topics(topics);
    let response = client.call(&request, 3);
    assert_eq!(response.error_code, NONE);
    let mut codes = BTreeMap::new();
    for topic in response.results_by_topic_v3_and_below {
        for p in topic.results_by_partition {
            codes.insert((topic.name.0.to_string(), p.partition_index), p.partition_error_code);
        }
    }
    codes
}

fn add_offsets(client: &mut RawClient, id: &str, producer: (i64, i16), group: &str) -> i16 {
    let request = AddOffsetsToTxnRequest::default()
        .with_transactional_id(txn(id))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_group_id(GroupId(s(group)));
    client.call(&request, 3).error_code
}

/// TxnOffsetCommit v3 of `offset` for partition 0 of `topic`: its error code.
fn txn_offset_commit(
    client: &mut RawClient,
    id: &str,
    producer: (i64, i16),
    group: &str,
    topic: &str,
    offset: i64,
) -> i16 {
    txn_offset_commit_v(client, id, producer, (group, topic), offset, 3)
}

/// TxnOffsetCommit in `version` of `offset` for partition 0 of `topic` in `group`.
fn txn_offset_commit_v(
    client: &mut RawClient,
    id: &str,
    producer: (i64, i16),
    (group, topic): (&str, &str),
    offset: i64,
    version: i16,
) -> i16 {
    let request = TxnOffsetCommitRequest::default()
        .with_transactional_id(txn(id))
        .with_group_id(GroupId(s(group)))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(s(""))
        .with_topics(vec![TxnOffsetCommitRequestTopic::default().with_name(topic_name(topic)).with_partitions(vec![
            TxnOffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(offset),
        ])]);
    let response = client.call(&request, version);
    response.topics[0].partitions[0].error_code
}

/// The group's committed offset for partition 0 of `topic` (OffsetFetch v7), -1 if none.
fn committed_offset(client: &mut RawClient, group: &str, topic: &str) -> i64 {
    let request = OffsetFetchRequest::default().with_group_id(GroupId(s(group))).with_topics(Some(vec![
        OffsetFetchRequestTopic::default().with_name(topic_name(topic)).with_partition_indexes(vec![0]),
    ]));
    let response = client.call(&request, 7);
    assert_eq!(response.error_code, NONE);
    response.topics[0].partitions[0].committed_offset
}

/// Produce v9 of one transactional record to partition 0 of `topic`: its error code.
fn produce_transactional(client: &mut RawClient, id: &str, producer: (i64, i16), topic: &str) -> i16 {
    produce_v(client, id, producer, topic, (0, "raw"), 9)
}

/// Produce in `version` of one transactional record (`sequence`, `value`) to
/// partition 0 of `topic`: its error code.
fn produce_v(
    client: &mut RawClient,
    id: &str,
    producer: (i64, i16),
    topic: &str,
    (sequence, value): (i32, &str),
    version: i16,
) -> i16 {
    let record = Record {
        transactional: true,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: producer.0,
        producer_epoch: producer.1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence,
        timestamp: 0,
        key: None,
        value: Some(Bytes::copy_from_slice(value.as_bytes())),
        headers: Default::default(),
    };
    let mut batch = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut batch,
        [&record],
        &RecordEncodeOptions { version: 2, compression: Compression::None },
    )
    .unwrap();
    let request = ProduceRequest::default()
        .with_transactional_id(Some(txn(id)))
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default().with_name(topic_name(topic)).with_partition_data(vec![
            PartitionProduceData::default().with_index(0).with_records(Some(batch.freeze())),
        ])]);
    client.call(&request, version).responses[0].partition_responses[0].error_code
}

// Transactional requests with bad input get the codes Apache Kafka 4.1 answers: a stale
// epoch is PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before EndTxn v2), a producer id the
// transactional id does not hold INVALID_PRODUCER_ID_MAPPING, a missing topic in
// AddPartitionsToTxn UNKNOWN_TOPIC_OR_PARTITION with the rest OPERATION_NOT_ATTEMPTED,
// ending or committing offsets in a transaction that holds nothing INVALID_TXN_STATE.
// InitProducerId while a transaction is open aborts it and fences the old epoch; offsets
// committed in that transaction are never visible, those of a committed one are.
#[test]
fn transactional_requests_with_bad_input() {
    let target = Target::start();
    let topic = target.topic("txn-raw", 1);
    let id = target.name("raw");
    let group = target.name("raw-group");
    let missing = target.name("no-such-topic");
    let mut client = RawClient::connect(&target.bootstrap);

    let coordinator = find_coordinator(&mut client, 1, &id);
    assert_eq!(coordinator.error_code, NONE, "{coordinator:?}");
    assert_eq!(format!("{}:{}", coordinator.host, coordinator.port), target.bootstrap);

    // A second InitProducerId keeps the producer id and bumps the epoch.
    let (code, first) = retrying("InitProducerId", || {
        let r = init_producer_id(&mut client, &id, 60_000);
        (r.error_code, r)
    });
    assert_eq!(code, NONE, "{first:?}");
    assert!(first.producer_id.0 >= 0);
    assert_eq!(first.producer_epoch, 0);
    let second = init_producer_id(&mut client, &id, 60_000);
    assert_eq!((second.error_code, second.producer_id), (NONE, first.producer_id));
    assert_eq!(second.producer_epoch, 1);
    let producer = (second.producer_id.0, second.producer_epoch);
    let stale = (producer.0, producer.1 - 1);
    let stranger = (producer.0 + 1000, producer.1);

    // transaction.max.timeout.ms is 15 minutes.
    let too_long = init_producer_id(&mut client, &target.name("raw-too-long"), 1_000_000_000);
    assert_eq!(too_long.error_code, INVALID_TRANSACTION_TIMEOUT);

    // Nothing was added: there is no transaction to end.
    assert_eq!(end_txn(&mut client, &id, producer, true, 3), INVALID_TXN_STATE);
    assert_eq!(end_txn(&mut client, &id, producer, false, 3), INVALID_TXN_STATE);
    assert_eq!(end_txn(&mut client, &id, stale, true, 1), INVALID_PRODUCER_EPOCH);
    assert_eq!(end_txn(&mut client, &id, stale, true, 3), PRODUCER_FENCED);
    assert_eq!(end_txn(&mut client, &id, (producer.0, producer.1 + 1), true, 3), PRODUCER_FENCED);
    assert_eq!(end_txn(&mut client, &id, stranger, true, 3), INVALID_PRODUCER_ID_MAPPING);
    assert_eq!(end_txn(&mut client, &target.name("raw-unknown"), producer, true, 3), INVALID_PRODUCER_ID_MAPPING);

    let codes = add_partitions(&mut client, &id, producer, &[(&topic, 0), (&missing, 0)]);
    assert_eq!(codes[&(missing.clone(), 0)], UNKNOWN_TOPIC_OR_PARTITION, "{codes:?}");
    assert_eq!(codes[&(topic.clone(), 0)], OPERATION_NOT_ATTEMPTED, "{codes:?}");
    let codes = add_partitions(&mut client, &id, producer, &[(&topic, 99)]);
    assert_eq!(codes[&(topic.clone(), 99)], UNKNOWN_TOPIC_OR_PARTITION);
    let codes = add_partitions(&mut client, &id, stranger, &[(&topic, 0)]);
    assert_eq!(codes[&(topic.clone(), 0)], INVALID_PRODUCER_ID_MAPPING);
    let codes = add_partitions(&mut client, &id, stale, &[(&topic, 0)]);
    assert_eq!(codes[&(topic.clone(), 0)], PRODUCER_FENCED);
    assert_eq!(add_offsets(&mut client, &id, stranger, &group), INVALID_PRODUCER_ID_MAPPING);

    // Offsets and records for a transaction that has not added their partitions.
    let coordinator = find_coordinator(&mut client, 0, &group);
    assert_eq!(coordinator.error_code, NONE, "{coordinator:?}");
    // The group coordinator may still be loading a new offsets partition.
    let (code, _) =
        retrying("TxnOffsetCommit", || (txn_offset_commit(&mut client, &id, producer, &group, &topic, 5), ()));
    assert_eq!(code, INVALID_TXN_STATE);
    assert_eq!(produce_transactional(&mut client, &id, producer, &topic), INVALID_TXN_STATE);

    let codes = add_partitions(&mut client, &id, producer, &[(&topic, 0)]);
    assert_eq!(codes[&(topic.clone(), 0)], NONE);
    assert_eq!(produce_transactional(&mut client, &id, producer, &topic), NONE);
    assert_eq!(add_offsets(&mut client, &id, producer, &group), NONE);
    assert_eq!(txn_offset_commit(&mut client, &id, stranger, &group, &topic, 5), INVALID_PRODUCER_ID_MAPPING);
    assert_eq!(txn_offset_commit(&mut client, &id, stale, &group, &topic, 5), INVALID_PRODUCER_EPOCH);
    let (code, ()) =
        retrying("TxnOffsetCommit", || (txn_offset_commit(&mut client, &id, producer, &group, &topic, 5), ()));
    assert_eq!(code, NONE);
    assert_eq!(end_txn(&mut client, &id, stale, true, 3), PRODUCER_FENCED);

    // InitProducerId with the transaction open: Kafka answers CONCURRENT_TRANSACTIONS
    // while it aborts it (bumping the epoch), then a higher epoch.
    let open = init_producer_id(&mut client, &id, 60_000);
    assert!([CONCURRENT_TRANSACTIONS, NONE].contains(&open.error_code), "{open:?}");
    let (code, fenced) = retrying("InitProducerId", || {
        let r = init_producer_id(&mut client, &id, 60_000);
        (r.error_code, r)
    });
    assert_eq!(code, NONE, "{fenced:?}");
    assert_eq!(fenced.producer_id.0, producer.0);
    assert!(fenced.producer_epoch > producer.1, "{fenced:?}");
    assert_eq!(end_txn(&mut client, &id, producer, true, 3), PRODUCER_FENCED);
    assert_eq!(committed_offset(&mut client, &group, &topic), -1, "offsets of the aborted transaction");

    // The same with the new epoch, committed: the offset becomes visible.
    let producer = (fenced.producer_id.0, fenced.producer_epoch);
    let codes = add_partitions(&mut client, &id, producer, &[(&topic, 0)]);
    assert_eq!(codes[&(topic.clone(), 0)], NONE);
    assert_eq!(add_offsets(&mut client, &id, producer, &group), NONE);
    assert_eq!(txn_offset_commit(&mut client, &id, producer, &group, &topic, 7), NONE);
    assert_eq!(end_txn(&mut client, &id, producer, true, 3), NONE);
    let deadline = Instant::now() + Duration::from_secs(10);
    while committed_offset(&mut client, &group, &topic) != 7 {
        assert!(Instant::now() < deadline, "the committed transaction's offset is not visible");
        std::thread::sleep(Duration::from_millis(50));
    }
    target.stop();
}

/// Waits until `id`'s last transaction is complete (DescribeTransactions), its markers
/// written.
fn wait_complete(client: &mut RawClient, id: &str) {
    let request = DescribeTransactionsRequest::default().with_transactional_ids(vec![txn(id)]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = client.call(&request, 0).transaction_states.remove(0);
        if state.error_code == NONE && state.transaction_state.starts_with("Complete") {
            return;
        }
        assert!(Instant::now() < deadline, "{id} not complete: {state:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// FindCoordinator then InitProducerId for `id`, retried while its coordinator loads:
/// the producer id and epoch.
fn init(client: &mut RawClient, id: &str) -> (i64, i16) {
    let coordinator = find_coordinator(client, 1, id);
    assert_eq!(coordinator.error_code, NONE, "{coordinator:?}");
    let (code, answer) = retrying("InitProducerId", || {
        let r = init_producer_id(client, id, 60_000);
        (r.error_code, r)
    });
    assert_eq!(code, NONE, "{answer:?}");
    (answer.producer_id.0, answer.producer_epoch)
}

// Transaction version 2 (KIP-890 part 2), as Kafka 4.4 answers it: Produce v12 and
// TxnOffsetCommit v5 add their partitions with no AddPartitionsToTxn or
// AddOffsetsToTxn; EndTxn v5 bumps the epoch and answers it, and a retry in the old
// epoch is told it succeeded (the other outcome is INVALID_TXN_STATE); the old epoch
// is fenced; an empty transaction may be aborted, bumping the epoch again.
#[test]
fn transaction_version_2_bumps_the_epoch_at_each_end() {
    let target = Target::start();
    let topic = target.topic("txn-v2", 1);
    let id = target.name("v2");
    let group = target.name("v2-group");
    let mut client = RawClient::connect(&target.bootstrap);
    set_feature(&mut client, "transaction.version", 2);
    let (pid, epoch) = init(&mut client, &id);

    // The first transaction: a record and an offset, each partition added by the broker.
    let (code, ()) = retrying("Produce", || (produce_v(&mut client, &id, (pid, epoch), &topic, (0, "v2-a"), 12), ()));
    assert_eq!(code, NONE);
    // A batch of the next epoch while this transaction is open on the partition (its
    // marker not yet written) is checked with the coordinator, not joined to it.
    let early = produce_v(&mut client, &id, (pid, epoch + 1), &topic, (0, "v2-early"), 12);
    assert_eq!(early, INVALID_PRODUCER_EPOCH);
    let coordinator = find_coordinator(&mut client, 0, &group);
    assert_eq!(coordinator.error_code, NONE, "{coordinator:?}");
    let (code, ()) = retrying("TxnOffsetCommit", || {
        (txn_offset_commit_v(&mut client, &id, (pid, epoch), (&group, &topic), 1, 5), ())
    });
    assert_eq!(code, NONE);
    let (code, next) = end_txn_answer(&mut client, &id, (pid, epoch), true, 5);
    assert_eq!((code, next), (NONE, (pid, epoch + 1)));
    // A retry waits for the markers (Kafka answers before they are written), then
    // succeeds.
    let retried = retrying("EndTxn", || end_txn_answer(&mut client, &id, (pid, epoch), true, 5));
    assert_eq!(retried, (NONE, (pid, epoch + 1)), "a retry");
    assert_eq!(end_txn(&mut client, &id, (pid, epoch), false, 5), INVALID_TXN_STATE);
    assert_eq!(end_txn(&mut client, &id, next, true, 5), INVALID_TXN_STATE, "nothing open");
    assert_eq!(end_txn(&mut client, &id, (pid, epoch - 1), true, 5), PRODUCER_FENCED);
    wait_complete(&mut client, &id);

    // The old epoch is fenced; the new one starts at sequence 0 and is aborted.
    assert_eq!(produce_v(&mut client, &id, (pid, epoch), &topic, (1, "v2-zombie"), 12), INVALID_PRODUCER_EPOCH);
    assert_eq!(produce_v(&mut client, &id, next, &topic, (0, "v2-b"), 12), NONE);
    let (code, after_abort) = end_txn_answer(&mut client, &id, next, false, 5);
    assert_eq!((code, after_abort), (NONE, (pid, epoch + 2)));
    // An empty transaction is aborted in a new epoch too (once the last one completed).
    let (code, after_empty) = retrying("EndTxn", || end_txn_answer(&mut client, &id, after_abort, false, 5));
    assert_eq!((code, after_empty), (NONE, (pid, epoch + 3)));

    // The third transaction commits; read_committed sees the first and the third.
    let produced = retrying("Produce", || (produce_v(&mut client, &id, after_empty, &topic, (0, "v2-c"), 12), ()));
    assert_eq!(produced.0, NONE);
    let (code, _) = retrying("EndTxn", || end_txn_answer(&mut client, &id, after_empty, true, 5));
    assert_eq!(code, NONE);
    assert_eq!(rdkafka_consume(&target, &topic, "read_committed", "v2-c"), ["v2-a", "v2-c"]);
    assert_eq!(committed_offset(&mut client, &group, &topic), 1);
    target.stop();
}

// A transaction begun in transaction version 1 ends as one after the cluster moves to
// version 2 (its EndTxn v4 keeps the epoch), and the producer's next transaction uses
// version 2; moving back to 1, version-1 clients go on.
#[test]
fn transaction_version_upgrade_keeps_an_open_transaction() {
    let target = Target::start();
    let topic = target.topic("txn-upgrade", 1);
    let id = target.name("upgrade");
    let mut client = RawClient::connect(&target.bootstrap);
    set_feature(&mut client, "transaction.version", 1);
    let producer = init(&mut client, &id);
    let codes = add_partitions(&mut client, &id, producer, &[(&topic, 0)]);
    assert_eq!(codes[&(topic.clone(), 0)], NONE);
    assert_eq!(produce_v(&mut client, &id, producer, &topic, (0, "v1-open"), 9), NONE);

    set_feature(&mut client, "transaction.version", 2);
    assert_eq!(end_txn(&mut client, &id, producer, true, 4), NONE);
    // Kafka answers EndTxn before the markers are written: a produce meanwhile would
    // join the transaction being committed (version 1 does not bump the epoch).
    wait_complete(&mut client, &id);
    let (code, ()) = retrying("Produce", || (produce_v(&mut client, &id, producer, &topic, (1, "v2-next"), 12), ()));
    assert_eq!(code, NONE);
    let (code, bumped) = retrying("EndTxn", || end_txn_answer(&mut client, &id, producer, true, 5));
    assert_eq!((code, bumped), (NONE, (producer.0, producer.1 + 1)));

    set_feature(&mut client, "transaction.version", 1);
    let codes = add_partitions(&mut client, &id, bumped, &[(&topic, 0)]);
    assert_eq!(codes[&(topic.clone(), 0)], NONE);
    assert_eq!(produce_v(&mut client, &id, bumped, &topic, (0, "v1-again"), 9), NONE);
    let (code, _) = retrying("EndTxn", || (end_txn(&mut client, &id, bumped, true, 4), ()));
    assert_eq!(code, NONE);
    let read = rdkafka_consume(&target, &topic, "read_committed", "v1-again");
    assert_eq!(read, ["v1-open", "v2-next", "v1-again"]);
    set_feature(&mut client, "transaction.version", 2);
    target.stop();
}

/// WriteTxnMarkers v2 of an ABORT marker for partition 0 of `topic`, of transaction
/// version `transaction_version`: the partition's error code.
fn write_marker(client: &mut RawClient, topic: &str, producer: (i64, i16), transaction_version: i8) -> i16 {
    use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
    let marker = WritableTxnMarker::default()
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_transaction_result(false)
        .with_coordinator_epoch(0)
        .with_transaction_version(transaction_version)
        .with_topics(vec![WritableTxnMarkerTopic::default()
            .with_name(topic_name(topic))
            .with_partition_indexes(vec![0])]);
    let response = client.call(&WriteTxnMarkersRequest::default().with_markers(vec![marker]), 2);
    response.markers[0].topics[0].partitions[0].error_code
}

// A marker of transaction version 2 carries its coordinator's bumped epoch (KIP-1228):
// one in the producer's own epoch is stale while its transaction is open, and taken as
// a retry once the transaction is over.
#[test]
fn write_txn_markers_v2_needs_a_bumped_epoch() {
    let target = Target::start();
    let topic = target.topic("txn-markers", 1);
    let id = target.name("markers");
    let mut client = RawClient::connect(&target.bootstrap);
    init(&mut client, &id);
    // A second InitProducerId: epoch 1, so that epoch 0 is an older one.
    let producer = init(&mut client, &id);
    assert_eq!(producer.1, 1);
    let codes = add_partitions(&mut client, &id, producer, &[(&topic, 0)]);
    assert_eq!(codes[&(topic.clone(), 0)], NONE);
    // Kafka may not lead a partition it just created yet.
    let produced = retrying("Produce", || (produce_v(&mut client, &id, producer, &topic, (0, "open"), 9), ()));
    assert_eq!(produced.0, NONE);
    assert_eq!(write_marker(&mut client, &topic, producer, 2), INVALID_PRODUCER_EPOCH);
    assert_eq!(write_marker(&mut client, &topic, (producer.0, producer.1 - 1), 0), INVALID_PRODUCER_EPOCH);
    assert_eq!(end_txn(&mut client, &id, producer, false, 4), NONE);
    wait_complete(&mut client, &id);
    assert_eq!(write_marker(&mut client, &topic, producer, 2), NONE);
    target.stop();
}
