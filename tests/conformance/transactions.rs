//! Samples for the transaction APIs, over transactions opened for real (a
//! transactional producer's partitions added and written), for `exercise`.

use super::*;

impl Conformance {
    /// A transactional producer for `id` (InitProducerId, retried while the
    /// coordinator loads), with `TOPIC`'s partitions in an open transaction and a
    /// transactional batch written to each.
    fn open_transaction(&mut self, id: &str) -> (i64, i16) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let (pid, epoch) = loop {
            let init = InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(s(id))))
                .with_transaction_timeout_ms(60_000);
            let response = self.call(init, 4).expect("InitProducerId answered");
            if response.error_code == 0 {
                break (response.producer_id.0, response.producer_epoch);
            }
            assert!(std::time::Instant::now() < deadline, "InitProducerId for {id}: {}", response.error_code);
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        let add = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(s(id)))
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(topic(TOPIC))
                .with_partitions((0..TOPIC_PARTITIONS).collect())]);
        self.call(add, 3);
        let partitions = (0..TOPIC_PARTITIONS)
            .map(|p| {
                let mut batch = records(2, Some((pid, epoch, 0))).to_vec();
                batch[22] |= 0x10; // transactional
                skein_engine::batch::testing::fix_crc(&mut batch);
                produce_request::PartitionProduceData::default().with_index(p).with_records(Some(Bytes::from(batch)))
            })
            .collect();
        let produce = ProduceRequest::default()
            .with_transactional_id(Some(TransactionalId(s(id))))
            .with_acks(-1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![produce_request::TopicProduceData::default()
                .with_name(topic(TOPIC))
                .with_partition_data(partitions)]);
        self.call(produce, 9);
        (pid, epoch)
    }
}

/// Exercises `key` at `v` if it is a transaction API; false for any other.
pub(super) fn exercise(c: &mut Conformance, key: ApiKey, v: i16) -> bool {
    match key {
        ApiKey::AddPartitionsToTxn => {
            let id = format!("conf-apt-{v}");
            let (pid, epoch) = c.open_transaction(&id);
            let topics = vec![
                add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                    .with_name(topic(TOPIC))
                    .with_partitions(vec![0, 1]),
                add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                    .with_name(topic("conf-missing"))
                    .with_partitions(vec![0]),
            ];
            let request = if v <= 3 {
                AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(TransactionalId(s(&id)))
                    .with_v3_and_below_producer_id(ProducerId(pid))
                    .with_v3_and_below_producer_epoch(epoch)
                    .with_v3_and_below_topics(topics)
            } else {
                let txn = |verify_only: bool, topics| {
                    add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
                        .with_transactional_id(TransactionalId(s(&id)))
                        .with_producer_id(ProducerId(pid))
                        .with_producer_epoch(epoch)
                        .with_verify_only(verify_only)
                        .with_topics(topics)
                };
                let verify = vec![add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                    .with_name(topic(TOPIC))
                    .with_partitions(vec![0, 3])];
                AddPartitionsToTxnRequest::default().with_transactions(vec![txn(true, verify), txn(false, topics)])
            };
            c.call(request, v);
        }
        ApiKey::AddOffsetsToTxn => {
            let id = format!("conf-aot-{v}");
            let (pid, epoch) = c.open_transaction(&id);
            let request = AddOffsetsToTxnRequest::default()
                .with_transactional_id(TransactionalId(s(&id)))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_group_id(group(FIXTURE_GROUP));
            c.call(request.clone(), v);
            // A stale epoch: fenced.
            c.call(request.with_producer_epoch(epoch - 1), v);
        }
        ApiKey::EndTxn => {
            let id = format!("conf-end-{v}");
            let (pid, epoch) = c.open_transaction(&id);
            let request = EndTxnRequest::default()
                .with_transactional_id(TransactionalId(s(&id)))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_committed(v % 2 == 0);
            c.call(request.clone(), v);
            c.call(request.with_producer_epoch(epoch - 1), v);
        }
        ApiKey::WriteTxnMarkers => {
            let id = format!("conf-markers-{v}");
            let (pid, epoch) = c.open_transaction(&id);
            // v2 names a marker of transaction version 2, which carries the bumped epoch.
            let (tv, marker_epoch) = if v >= 2 { (2, epoch + 1) } else { (0, epoch) };
            let marker = write_txn_markers_request::WritableTxnMarker::default()
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(marker_epoch)
                .with_transaction_result(false)
                .with_coordinator_epoch(0)
                .with_transaction_version(tv)
                .with_topics(vec![
                    write_txn_markers_request::WritableTxnMarkerTopic::default()
                        .with_name(topic(TOPIC))
                        .with_partition_indexes(vec![0, 99]),
                    write_txn_markers_request::WritableTxnMarkerTopic::default()
                        .with_name(topic("conf-missing"))
                        .with_partition_indexes(vec![0]),
                ]);
            c.call(WriteTxnMarkersRequest::default().with_markers(vec![marker]), v);
        }
        ApiKey::TxnOffsetCommit => {
            let id = format!("conf-toc-{v}");
            let (pid, epoch) = c.open_transaction(&id);
            let group_name = format!("conf-txn-group-{v}");
            let add = AddOffsetsToTxnRequest::default()
                .with_transactional_id(TransactionalId(s(&id)))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_group_id(group(&group_name));
            c.call(add, 3);
            let partitions = (0..TOPIC_PARTITIONS)
                .map(|p| {
                    txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(p)
                        .with_committed_offset(1)
                        .with_committed_leader_epoch(0)
                        .with_committed_metadata(Some(s("conformance")))
                })
                .collect();
            let mut request = TxnOffsetCommitRequest::default()
                .with_transactional_id(TransactionalId(s(&id)))
                .with_group_id(group(&group_name))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_topics(vec![
                    txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                        .with_name(topic(TOPIC))
                        .with_partitions(partitions),
                    txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                        .with_name(topic("conf-missing"))
                        .with_partitions(vec![txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()]),
                ]);
            if v >= 3 {
                request.generation_id_or_member_epoch = -1;
                request.member_id = s("");
            }
            c.call(request, v);
        }
        ApiKey::DescribeTransactions => {
            c.open_transaction("conf-describe");
            let request = DescribeTransactionsRequest::default().with_transactional_ids(vec![
                TransactionalId(s("conf-describe")),
                TransactionalId(s("conf-unknown-txn")),
            ]);
            c.call(request, v);
        }
        ApiKey::ListTransactions => {
            c.open_transaction("conf-list");
            let mut request = ListTransactionsRequest::default()
                .with_state_filters(vec![s("Ongoing"), s("NoSuchState")])
                .with_producer_id_filters(vec![]);
            if v >= 1 {
                request.duration_filter = 0;
            }
            if v >= 2 {
                request.transactional_id_pattern = Some(s("conf-.*"));
            }
            c.call(request, v);
        }
        ApiKey::DescribeProducers => {
            c.open_transaction("conf-producers");
            let request = DescribeProducersRequest::default().with_topics(vec![
                describe_producers_request::TopicRequest::default()
                    .with_name(topic(TOPIC))
                    .with_partition_indexes(vec![0, 1, 2, 3, 99]),
            ]);
            c.call(request, v);
        }
        _ => return super::security::exercise(c, key, v),
    }
    true
}
