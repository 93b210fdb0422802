//! StreamsGroupDescribe (KIP-1071): a streams group's epochs, topology and members
//! with their current and target tasks, as `kafka-streams-groups --describe` shows
//! them. Version 1's topology description is left null with its status 0, as Kafka
//! answers without a topology description plugin.

use std::rc::Rc;

use kafka_protocol::messages::streams_group_describe_response::DescribedGroup;
use kafka_protocol::messages::{StreamsGroupDescribeRequest, StreamsGroupDescribeResponse};
use kafka_protocol::protocol::VersionRange;
use skein_coordinator::group::calls;

use crate::authorize::{Caller, Op, GROUP_AUTHORIZATION_FAILED};
use crate::operations::{authorized, Resource, NOT_REQUESTED};
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 1 };

pub async fn handle(
    shard: &Rc<Shard>,
    request: StreamsGroupDescribeRequest,
    caller: &Caller,
) -> StreamsGroupDescribeResponse {
    let mut response = StreamsGroupDescribeResponse::default();
    for group in request.group_ids {
        let name = group.0.to_string();
        if !caller.group(Op::Describe, &name) {
            let denied = DescribedGroup::default().with_group_id(group).with_error_code(GROUP_AUTHORIZATION_FAILED);
            response.groups.push(denied.with_authorized_operations(NOT_REQUESTED));
            continue;
        }
        let operations = authorized(caller, Resource::Group, &name, request.include_authorized_operations);
        let described =
            match crate::topics::group_call(shard, &name, calls::StreamsDescribe { group: name.clone() }).await {
                Ok(d) => *d,
                Err(c) => DescribedGroup::default().with_group_id(group).with_error_code(c),
            };
        response.groups.push(described.with_authorized_operations(operations));
    }
    response
}
