//! OffsetCommit: by a group member (generation and member id checked) or a simple
//! commit (generation -1) from an assign-mode consumer; persisted to
//! `__consumer_offsets` before the answer. v10 names topics by id (KIP-848).

use std::rc::Rc;

use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse, RequestHeader};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_coordinator::group::{calls, Committed};

use super::commits::{metadata, resolve, Commits};
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 2, max: 10 };

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
    let by_id = header.request_api_version >= 10;
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
                leader_epoch: if header.request_api_version >= 6 { p.committed_leader_epoch } else { -1 },
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
    } else {
        let n = offsets.len();
        let call = calls::Commit {
            group: group.clone(),
            generation: request.generation_id_or_member_epoch,
            member_id: request.member_id.to_string(),
            instance_id: request.group_instance_id.as_ref().map(|i| i.to_string()),
            offsets,
        };
        crate::topics::group_call(shard, &group, call).await.unwrap_or_else(|error| vec![error; n])
    };
    let partitions = commits.errors(codes).map(|(topic, partition, error)| {
        (topic, OffsetCommitResponsePartition::default().with_partition_index(partition).with_error_code(error))
    });
    let mut response = OffsetCommitResponse::default();
    response.topics = super::group_by_topic(partitions)
        .into_iter()
        .map(|((topic, id), partitions)| {
            OffsetCommitResponseTopic::default()
                .with_name(kafka_protocol::messages::TopicName(super::s(topic)))
                .with_topic_id(id)
                .with_partitions(partitions)
        })
        .collect();
    response
}
