//! Produce: each partition's batch goes to the shard that owns the partition, all
//! partitions of a request at once, in one message per other shard
//! (`Shard::call_many`); with acks=0 nothing is answered.

use std::rc::Rc;

use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, RequestHeader};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_engine::TopicPartition;

use super::{group_by_topic, leaders, s};
use crate::authorize::{Caller, Op, TOPIC_AUTHORIZATION_FAILED};
use crate::shard::ops::{self, Produced};
use crate::shard::{PartitionError, Shard};

/// From v12 (transaction version 2, KIP-890 part 2) a transactional batch's partition
/// is added to its transaction by its leader; v13 names topics by id (KIP-516), an
/// unknown one answered UNKNOWN_TOPIC_ID.
pub const VERSIONS: VersionRange = VersionRange { min: 3, max: 13 };

/// `frame` is the request's buffer: each partition's batch is routed as a slice of it,
/// and the shard's cache charges the frame whole while it holds any of them.
pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: ProduceRequest,
    frame: skein_engine::Backing,
    listener: &str,
    caller: &Caller,
) -> Option<ProduceResponse> {
    let version = header.request_api_version;
    let acks = request.acks;
    let timeout_ms = request.timeout_ms.max(0) as u64;
    // Transactional batches need a transactional id, which Kafka authorizes for the
    // whole request; the partition leader then checks with its coordinator that the
    // transaction is open and holds the partition (KIP-890).
    let transactional_id = request.transactional_id.as_ref().map(|id| id.0.to_string());
    let image = shard.image();
    let mut slots = Vec::new();
    // Each partition's call, or the error it was refused with here.
    let mut calls = Vec::new();
    let by_id = version >= 13;
    for topic in request.topic_data {
        let (meta, id) = match by_id {
            true => (image.topic_by_id(topic.topic_id), topic.topic_id),
            false => (image.topic(&topic.name.0), uuid::Uuid::nil()),
        };
        let name = match by_id {
            true => meta.map(|m| m.name.clone()).unwrap_or_default(),
            false => topic.name.0.to_string(),
        };
        let unknown_id = by_id && meta.is_none();
        let authorized = unknown_id || caller.topic(Op::Write, &name);
        for data in topic.partition_data {
            let index = data.index;
            slots.push(((name.clone(), id), index));
            let known = meta.is_some_and(|m| index >= 0 && index < m.partitions);
            // Clients may not write the coordinator's topic, as in Kafka.
            let internal = name == skein_coordinator::group::OFFSETS_TOPIC;
            let transactional = data.records.as_ref().is_some_and(|r| {
                r.len() > skein_engine::batch::HEADER_BYTES && skein_engine::batch::attributes_of(r) & 0x10 != 0
            });
            let refused = if !(acks == 0 || acks == 1 || acks == -1) {
                Some(PartitionError::new(code::INVALID_REQUIRED_ACKS))
            } else if unknown_id {
                Some(PartitionError::new(code::UNKNOWN_TOPIC_ID))
            } else if transactional && transactional_id.is_none() {
                Some(PartitionError::new(code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            } else if !authorized {
                Some(PartitionError::new(TOPIC_AUTHORIZATION_FAILED))
            } else if internal {
                Some(PartitionError::with_message(
                    code::INVALID_TOPIC_EXCEPTION,
                    "Cannot append to internal topic __consumer_offsets",
                ))
            } else if !known {
                Some(PartitionError::new(code::UNKNOWN_TOPIC_OR_PARTITION))
            } else {
                match &data.records {
                    None => Some(PartitionError::with_message(code::CORRUPT_MESSAGE, "no records")),
                    // v3+: exactly one batch per partition.
                    Some(records) => match skein_engine::batch::peek_size(records) {
                        Ok(size) if size < records.len() => {
                            Some(PartitionError::with_message(code::INVALID_RECORD, "more than one record batch"))
                        }
                        _ => None,
                    },
                }
            };
            let call = match (refused, data.records) {
                (None, Some(records)) => {
                    let transactional_id = transactional_id.clone().filter(|_| transactional);
                    let op =
                        ops::Produce { batch: records, backing: frame, acks, timeout_ms, transactional_id, version };
                    Ok((TopicPartition::new(name.clone(), index), op))
                }
                (refused, _) => {
                    // Errors found before routing; routed ones are counted by `Shard::call_many`.
                    shard.metrics.count_error(0);
                    Err(refused.unwrap_or_else(|| PartitionError::new(code::CORRUPT_MESSAGE)))
                }
            };
            calls.push(call);
        }
    }
    drop(image);
    // One message per other shard, however many of its partitions the request writes.
    let results = shard.call_many(calls).await;
    if acks == 0 {
        return None;
    }
    let mut leaders = std::collections::BTreeSet::new();
    let partitions = slots.into_iter().zip(results).map(|(((name, id), index), result)| {
        let mut partition = PartitionProduceResponse::default();
        partition.index = index;
        match result {
            Ok(Produced::Appended(appended)) => {
                partition.base_offset = appended.base_offset;
                partition.log_append_time_ms = appended.log_append_time_ms;
                partition.log_start_offset = appended.log_start_offset;
            }
            Ok(Produced::Refused(refused)) => {
                let skein_control::append::Refused { error_code, message, record_errors } = *refused;
                partition.error_code = error_code;
                partition.error_message = Some(s(message));
                partition.base_offset = -1;
                partition.log_start_offset = -1;
                if version >= 8 {
                    partition.record_errors = record_errors
                        .into_iter()
                        .map(|(index, message)| {
                            BatchIndexAndErrorMessage::default()
                                .with_batch_index(index)
                                .with_batch_index_error_message(Some(s(message)))
                        })
                        .collect();
                }
            }
            Err(PartitionError { code: error, message }) => {
                partition.error_code = error;
                partition.error_message = message.map(s);
                partition.base_offset = -1;
                partition.log_append_time_ms = -1;
                partition.log_start_offset = -1;
                if version >= 10 && leaders::names_leader(error) {
                    let (leader, epoch) = leaders::current_leader(shard, &name, index, listener);
                    partition.current_leader = LeaderIdAndEpoch::default()
                        .with_leader_id(kafka_protocol::messages::BrokerId(leader))
                        .with_leader_epoch(epoch);
                    leaders.insert(leader);
                }
            }
        }
        ((name, id), partition)
    });
    let mut response = ProduceResponse::default();
    let partitions: Vec<_> = partitions.collect();
    response.node_endpoints = leaders::endpoints(shard, &leaders, listener)
        .into_iter()
        .map(|e| {
            NodeEndpoint::default()
                .with_node_id(kafka_protocol::messages::BrokerId(e.id))
                .with_host(s(e.host))
                .with_port(i32::from(e.port))
                .with_rack(e.rack.map(s))
        })
        .collect();
    response.responses = group_by_topic(partitions)
        .into_iter()
        .map(|((name, id), partitions)| {
            let topic = TopicProduceResponse::default().with_partition_responses(partitions);
            match by_id {
                true => topic.with_topic_id(id),
                false => topic.with_name(kafka_protocol::messages::TopicName(s(name))),
            }
        })
        .collect();
    Some(response)
}
