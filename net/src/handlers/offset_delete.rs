//! OffsetDelete (KIP-496): deletes a group's committed offsets of the topics it does
//! not subscribe to; each partition of a topic it does gets GROUP_SUBSCRIBED_TO_TOPIC,
//! as Kafka answers (`group::offsets`).

use std::rc::Rc;

use kafka_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_coordinator::group::calls;

use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };

/// The group's DELETE was checked for the whole request (`authorize`); the offsets
/// of a topic the caller may not READ stay, and get TOPIC_AUTHORIZATION_FAILED; those
/// of a topic that does not exist get UNKNOWN_TOPIC_OR_PARTITION.
pub async fn handle(
    shard: &Rc<Shard>,
    request: OffsetDeleteRequest,
    caller: &crate::authorize::Caller,
) -> OffsetDeleteResponse {
    let group = request.group_id.0.to_string();
    let image = shard.image();
    let topic_code = |t: &str| match () {
        _ if !caller.topic(crate::authorize::Op::Read, t) => crate::authorize::TOPIC_AUTHORIZATION_FAILED,
        _ if image.topic(t).is_none() => code::UNKNOWN_TOPIC_OR_PARTITION,
        _ => code::NONE,
    };
    let partitions: Vec<(String, i32)> = request
        .topics
        .iter()
        .filter(|t| topic_code(&t.name) == code::NONE)
        .flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.to_string(), p.partition_index)))
        .collect();
    let call = calls::DeleteOffsets { group: group.clone(), partitions };
    let codes = match crate::topics::group_call(shard, &group, call).await.and_then(|r| r) {
        Ok(codes) => codes,
        Err(error) => return OffsetDeleteResponse::default().with_error_code(error),
    };
    let mut codes = codes.into_iter();
    let mut response = OffsetDeleteResponse::default();
    for t in request.topics {
        let refused = topic_code(&t.name);
        let partitions = t
            .partitions
            .iter()
            .map(|p| {
                let error = match refused {
                    code::NONE => codes.next().unwrap_or(code::UNKNOWN_SERVER_ERROR),
                    refused => refused,
                };
                OffsetDeleteResponsePartition::default().with_partition_index(p.partition_index).with_error_code(error)
            })
            .collect();
        response.topics.push(OffsetDeleteResponseTopic::default().with_name(t.name).with_partitions(partitions));
    }
    response
}
