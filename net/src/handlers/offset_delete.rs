//! OffsetDelete (KIP-496): deletes committed offsets of a group without members.

use std::rc::Rc;

use kafka_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};
use kafka_protocol::protocol::VersionRange;

use crate::errors::code;
use crate::group::calls;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };

/// The group's DELETE was checked for the whole request (`authorize`); the offsets
/// of a topic the caller may not READ stay, and get TOPIC_AUTHORIZATION_FAILED.
pub async fn handle(
    shard: &Rc<Shard>,
    request: OffsetDeleteRequest,
    caller: &crate::authorize::Caller,
) -> OffsetDeleteResponse {
    let group = request.group_id.0.to_string();
    let readable = |t: &str| caller.topic(crate::authorize::Op::Read, t);
    let partitions: Vec<(String, i32)> = request
        .topics
        .iter()
        .filter(|t| readable(&t.name))
        .flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.to_string(), p.partition_index)))
        .collect();
    let call = calls::DeleteOffsets { group: group.clone(), partitions };
    let error = crate::topics::group_call(shard, &group, call).await.unwrap_or_else(|error| error);
    let mut response = OffsetDeleteResponse::default().with_error_code(error);
    if error == code::NONE {
        for t in request.topics {
            response.topics.push(
                OffsetDeleteResponseTopic::default().with_name(t.name.clone()).with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            let denied = match readable(&t.name) {
                                true => code::NONE,
                                false => crate::authorize::TOPIC_AUTHORIZATION_FAILED,
                            };
                            OffsetDeleteResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(denied)
                        })
                        .collect(),
                ),
            );
        }
    }
    response
}
