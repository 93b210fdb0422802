//! OffsetFetch: committed offsets of one group (v1-7) or several (v8+, KIP-709); all of
//! a group's offsets when no topics are named. Absent commits are offset -1. With
//! `require_stable` (v7+), offsets of an open transaction answer UNSTABLE_OFFSET_COMMIT.
//! v9 names the member asking, checked in consumer and streams groups as Kafka checks
//! it (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH). v10 names topics by id (KIP-848): an id the image does not know answers
//! UNKNOWN_TOPIC_ID, and offsets of topics that no longer exist are left out of "all".

use std::rc::Rc;

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{GroupId, OffsetFetchRequest, OffsetFetchResponse, RequestHeader, TopicName};
use kafka_protocol::protocol::VersionRange;
use skein_coordinator::group::{calls, Committed, PartitionOffset};

use super::{group_by_topic, s};
use crate::authorize::{Caller, Op, GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED};
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 1, max: 10 };

type Fetched = Result<Vec<PartitionOffset>, i16>;

/// The group's committed offsets that `caller` may see: DESCRIBE on the group, and
/// on each topic (asked for all topics, the others are left out; named, they get
/// TOPIC_AUTHORIZATION_FAILED), as in Kafka.
async fn fetch(
    shard: &Rc<Shard>,
    caller: &Caller,
    group: &str,
    wanted: Option<Vec<(String, i32)>>,
    require_stable: bool,
    member: (Option<String>, i32),
) -> Fetched {
    if !caller.group(Op::Describe, group) {
        return Err(GROUP_AUTHORIZATION_FAILED);
    }
    let all = wanted.is_none();
    type Partitions = Vec<(String, i32)>;
    let (wanted, denied): (Option<Partitions>, Partitions) = match wanted {
        None => (None, Vec::new()),
        Some(list) => {
            let (allowed, denied) = list.into_iter().partition(|(t, _)| caller.topic(Op::Describe, t));
            (Some(allowed), denied)
        }
    };
    // Asked even when every topic named was refused: the coordinator's own errors
    // (not loaded, not the coordinator) still reach the client.
    let call = calls::Fetch { group: group.to_owned(), wanted, require_stable, member };
    let mut offsets = crate::topics::group_call(shard, group, call).await?;
    if all {
        offsets.retain(|o| caller.topic(Op::Describe, &o.topic));
    }
    offsets.extend(denied.into_iter().map(|(topic, partition)| PartitionOffset {
        topic,
        partition,
        committed: None,
        error: TOPIC_AUTHORIZATION_FAILED,
    }));
    Ok(offsets)
}

pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: OffsetFetchRequest,
    caller: &Caller,
) -> OffsetFetchResponse {
    let mut response = OffsetFetchResponse::default();
    if header.request_api_version >= 8 {
        let by_id = header.request_api_version >= 10;
        let image = shard.image();
        for g in request.groups {
            let mut unknown: Vec<(uuid::Uuid, Vec<i32>)> = Vec::new();
            let wanted = g.topics.map(|ts| {
                let mut wanted = Vec::new();
                for t in ts {
                    let name = match by_id {
                        true => match image.topic_by_id(t.topic_id) {
                            Some(meta) => meta.name.clone(),
                            None => {
                                unknown.push((t.topic_id, t.partition_indexes));
                                continue;
                            }
                        },
                        false => t.name.0.to_string(),
                    };
                    wanted.extend(t.partition_indexes.into_iter().map(|p| (name.clone(), p)));
                }
                wanted
            });
            let mut out = OffsetFetchResponseGroup::default().with_group_id(GroupId(g.group_id.0.clone()));
            let member = (g.member_id.as_ref().map(|m| m.to_string()), g.member_epoch);
            match fetch(shard, caller, g.group_id.0.as_str(), wanted, request.require_stable, member).await {
                Err(c) => out.error_code = c,
                Ok(offsets) => {
                    let id_of = |topic: &str| match by_id {
                        true => image.topic(topic).map(|t| t.id),
                        false => Some(uuid::Uuid::nil()),
                    };
                    let partitions =
                        offsets.into_iter().filter_map(|PartitionOffset { topic, partition, committed, error }| {
                            // By id, a topic that no longer exists cannot be named.
                            let id = id_of(&topic)?;
                            Some(((topic, id), fetched_partition(partition, committed, error)))
                        });
                    let unknown = unknown.into_iter().flat_map(|(id, partitions)| {
                        partitions.into_iter().map(move |p| {
                            (
                                (String::new(), id),
                                fetched_partition(p, None, skein_control::errors::code::UNKNOWN_TOPIC_ID),
                            )
                        })
                    });
                    out.topics = group_by_topic(partitions.chain(unknown))
                        .into_iter()
                        .map(|((topic, id), partitions)| {
                            OffsetFetchResponseTopics::default()
                                .with_name(TopicName(s(topic)))
                                .with_topic_id(id)
                                .with_partitions(partitions)
                        })
                        .collect();
                }
            }
            response.groups.push(out);
        }
        return response;
    }
    let wanted = request.topics.map(|ts| {
        ts.into_iter()
            .flat_map(|t| {
                let name = t.name.0.to_string();
                t.partition_indexes.into_iter().map(move |p| (name.clone(), p))
            })
            .collect()
    });
    match fetch(shard, caller, request.group_id.0.as_str(), wanted, request.require_stable, (None, -1)).await {
        Err(c) => response.error_code = c,
        Ok(offsets) => {
            let partitions = offsets.into_iter().map(|PartitionOffset { topic, partition, committed, error }| {
                let c = committed.unwrap_or_else(Committed::none);
                let p = OffsetFetchResponsePartition::default()
                    .with_partition_index(partition)
                    .with_error_code(error)
                    .with_committed_offset(c.offset)
                    .with_committed_leader_epoch(c.leader_epoch)
                    .with_metadata(Some(s(c.metadata)));
                (topic, p)
            });
            response.topics = group_by_topic(partitions)
                .into_iter()
                .map(|(topic, partitions)| {
                    OffsetFetchResponseTopic::default().with_name(TopicName(s(topic))).with_partitions(partitions)
                })
                .collect();
        }
    }
    response
}

/// A partition of an OffsetFetch v8+ answer.
fn fetched_partition(partition: i32, committed: Option<Committed>, error: i16) -> OffsetFetchResponsePartitions {
    let c = committed.unwrap_or_else(Committed::none);
    OffsetFetchResponsePartitions::default()
        .with_partition_index(partition)
        .with_error_code(error)
        .with_committed_offset(c.offset)
        .with_committed_leader_epoch(c.leader_epoch)
        .with_metadata(Some(s(c.metadata)))
}
