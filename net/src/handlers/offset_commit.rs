//! OffsetCommit: by a group member (generation and member id checked) or a simple
//! commit (generation -1) from an assign-mode consumer; persisted to
//! `__consumer_offsets` before the answer.

use std::rc::Rc;

use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse, RequestHeader};
use kafka_protocol::protocol::VersionRange;

use crate::errors::code;
use crate::group::{calls, Committed};
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 2, max: 9 };

/// The group's READ was checked for the whole request (`authorize`); each topic
/// needs READ too.
pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: OffsetCommitRequest,
    caller: &crate::authorize::Caller,
) -> OffsetCommitResponse {
    let group = request.group_id.0.to_string();
    let image = shard.image();
    // (topic, partition, error known before the coordinator is asked)
    let mut slots: Vec<(String, i32, Option<i16>)> = Vec::new();
    let mut offsets = Vec::new();
    for topic in &request.topics {
        let name = topic.name.0.to_string();
        let meta = image.topic(&name);
        let authorized = caller.topic(crate::authorize::Op::Read, &name);
        for p in &topic.partitions {
            let known = meta.is_some_and(|m| p.partition_index >= 0 && p.partition_index < m.partitions);
            if !authorized {
                slots.push((name.clone(), p.partition_index, Some(crate::authorize::TOPIC_AUTHORIZATION_FAILED)));
                continue;
            }
            if !known {
                slots.push((name.clone(), p.partition_index, Some(code::UNKNOWN_TOPIC_OR_PARTITION)));
                continue;
            }
            if p.committed_metadata.as_ref().is_some_and(|m| m.len() > crate::group::OFFSET_METADATA_MAX_BYTES) {
                slots.push((name.clone(), p.partition_index, Some(code::OFFSET_METADATA_TOO_LARGE)));
                continue;
            }
            slots.push((name.clone(), p.partition_index, None));
            offsets.push((
                name.clone(),
                p.partition_index,
                Committed {
                    offset: p.committed_offset,
                    leader_epoch: if header.request_api_version >= 6 { p.committed_leader_epoch } else { -1 },
                    metadata: p.committed_metadata.as_ref().map(|m| m.to_string()).unwrap_or_default(),
                },
            ));
        }
    }
    let codes = if group.is_empty() {
        vec![code::INVALID_GROUP_ID; offsets.len()]
    } else if offsets.is_empty() {
        Vec::new()
    } else {
        let n = offsets.len();
        let call = calls::Commit {
            group: group.clone(),
            generation: request.generation_id_or_member_epoch,
            member_id: request.member_id.to_string(),
            offsets,
        };
        match crate::topics::group_call(shard, &group, call).await {
            Ok(codes) => codes,
            Err(c) => vec![c; n],
        }
    };
    let mut codes = codes.into_iter();
    let partitions = slots.into_iter().map(|(topic, partition, known_error)| {
        let error = known_error.unwrap_or_else(|| codes.next().unwrap_or(code::UNKNOWN_SERVER_ERROR));
        (topic, OffsetCommitResponsePartition::default().with_partition_index(partition).with_error_code(error))
    });
    let mut response = OffsetCommitResponse::default();
    response.topics = super::group_by_topic(partitions)
        .into_iter()
        .map(|(topic, partitions)| {
            OffsetCommitResponseTopic::default()
                .with_name(kafka_protocol::messages::TopicName(super::s(topic)))
                .with_partitions(partitions)
        })
        .collect();
    response
}
