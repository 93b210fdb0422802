//! OffsetDelete (KIP-496): deletes committed offsets of a group without members.

use std::rc::Rc;

use kafka_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};
use kafka_protocol::protocol::VersionRange;

use crate::errors::code;
use crate::group::{GroupAnswer, GroupCall};
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };

pub async fn handle(shard: &Rc<Shard>, request: OffsetDeleteRequest) -> OffsetDeleteResponse {
    let group = request.group_id.0.to_string();
    let partitions: Vec<(String, i32)> = request
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.to_string(), p.partition_index)))
        .collect();
    let error =
        match crate::topics::group_call(shard, &group, GroupCall::DeleteOffsets { group: group.clone(), partitions })
            .await
        {
            Ok(GroupAnswer::Code(c)) => c,
            Ok(_) => code::UNKNOWN_SERVER_ERROR,
            Err(c) => c,
        };
    let mut response = OffsetDeleteResponse::default().with_error_code(error);
    if error == code::NONE {
        for t in request.topics {
            response.topics.push(
                OffsetDeleteResponseTopic::default().with_name(t.name.clone()).with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| OffsetDeleteResponsePartition::default().with_partition_index(p.partition_index))
                        .collect(),
                ),
            );
        }
    }
    response
}
