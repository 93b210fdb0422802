//! TxnOffsetCommit: a transactional producer commits its consumer group's offsets
//! within its transaction. Sent to the group's coordinator, they are written to
//! `__consumer_offsets` in a transactional batch of the producer and become visible
//! when the transaction's COMMIT marker reaches that partition (dropped at ABORT).

use std::rc::Rc;

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{RequestHeader, TopicName, TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_coordinator::group::{calls, Committed};
use skein_engine::TopicPartition;

use super::commits::{metadata, resolve, Commits};
use super::{group_by_topic, s};
use crate::shard::Shard;

/// From v5 (transaction version 2, KIP-890 part 2) the group's offsets partition is
/// added to the transaction here, with no AddOffsetsToTxn before; v6 names topics by
/// id (KIP-1319).
pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 6 };

pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: TxnOffsetCommitRequest,
    caller: &crate::authorize::Caller,
) -> TxnOffsetCommitResponse {
    let group = request.group_id.0.to_string();
    let image = shard.image();
    let by_id = header.request_api_version >= 6;
    let mut commits = Commits::default();
    for topic in &request.topics {
        let Some((name, meta)) = resolve(&image, by_id, &topic.name.0, topic.topic_id) else {
            for p in &topic.partitions {
                commits.unknown_id(topic.topic_id, p.partition_index);
            }
            continue;
        };
        let readable = caller.topic(crate::authorize::Op::Read, &name);
        for p in &topic.partitions {
            let committed = Committed {
                offset: p.committed_offset,
                leader_epoch: p.committed_leader_epoch,
                metadata: metadata(p.committed_metadata.as_ref()),
            };
            commits.add((&name, topic.topic_id), meta, readable, p.partition_index, committed);
        }
    }
    let offsets = std::mem::take(&mut commits.offsets);
    let codes = if group.is_empty() {
        vec![code::INVALID_GROUP_ID; offsets.len()]
    } else if offsets.is_empty() {
        Vec::new()
    } else if let Err(error) = verify(shard, header.request_api_version, &request, &group).await {
        vec![error; offsets.len()]
    } else {
        let n = offsets.len();
        let call = calls::TxnCommit {
            group: group.clone(),
            producer_id: request.producer_id.0,
            epoch: request.producer_epoch,
            generation: request.generation_id_or_member_epoch,
            member_id: request.member_id.to_string(),
            instance_id: request.group_instance_id.as_ref().map(|i| i.to_string()),
            offsets,
        };
        crate::topics::group_call(shard, &group, call).await.unwrap_or_else(|error| vec![error; n])
    };
    let partitions = commits.errors(codes).map(|(topic, partition, error)| {
        (topic, TxnOffsetCommitResponsePartition::default().with_partition_index(partition).with_error_code(error))
    });
    let mut response = TxnOffsetCommitResponse::default();
    response.topics = group_by_topic(partitions)
        .into_iter()
        .map(|((topic, id), partitions)| {
            TxnOffsetCommitResponseTopic::default()
                .with_name(TopicName(s(topic)))
                .with_topic_id(id)
                .with_partitions(partitions)
        })
        .collect();
    response
}

/// The producer's transaction must be open with the group's offsets partition in it
/// (AddOffsetsToTxn; from v5 it is added here), as Kafka's coordinator checks:
/// INVALID_PRODUCER_ID_MAPPING, INVALID_PRODUCER_EPOCH for another epoch,
/// INVALID_TXN_STATE when the group was not added (TRANSACTION_ABORTABLE from v4), and
/// a coordinator that could not be asked as COORDINATOR_NOT_AVAILABLE.
async fn verify(shard: &Rc<Shard>, version: i16, request: &TxnOffsetCommitRequest, group: &str) -> Result<(), i16> {
    let id = request.transactional_id.0.to_string();
    let partition =
        TopicPartition::new(skein_coordinator::group::OFFSETS_TOPIC, skein_coordinator::group::partition_for(group));
    let producer = (request.producer_id.0, request.producer_epoch);
    let checked = shard.check_txn(&id, producer, &partition, version >= 5).await;
    checked.map_err(|error| match skein_coordinator::txn::fenced_for(error, false) {
        code::INVALID_TXN_STATE if version >= 4 => code::TRANSACTION_ABORTABLE,
        code::NETWORK_EXCEPTION => code::COORDINATOR_NOT_AVAILABLE,
        error => error,
    })
}
