//! ConsumerGroupDescribe (KIP-848): epochs, assignor, members with their current and
//! target assignments.

use std::rc::Rc;

use kafka_protocol::messages::consumer_group_describe_response::DescribedGroup;
use kafka_protocol::messages::{ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse};
use kafka_protocol::protocol::VersionRange;
use skein_coordinator::group::calls;

use crate::authorize::{Caller, Op, GROUP_AUTHORIZATION_FAILED};
use crate::operations::{authorized, Resource, NOT_REQUESTED};
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 1 };

pub async fn handle(
    shard: &Rc<Shard>,
    request: ConsumerGroupDescribeRequest,
    caller: &Caller,
) -> ConsumerGroupDescribeResponse {
    let mut response = ConsumerGroupDescribeResponse::default();
    for group in request.group_ids {
        let name = group.0.to_string();
        if !caller.group(Op::Describe, &name) {
            let denied = DescribedGroup::default().with_group_id(group).with_error_code(GROUP_AUTHORIZATION_FAILED);
            response.groups.push(denied.with_authorized_operations(NOT_REQUESTED));
            continue;
        }
        let operations = authorized(caller, Resource::Group, &name, request.include_authorized_operations);
        let described =
            match crate::topics::group_call(shard, &name, calls::ConsumerDescribe { group: name.clone() }).await {
                Ok(d) => d,
                Err(c) => DescribedGroup::default().with_group_id(group).with_error_code(c),
            };
        response.groups.push(described.with_authorized_operations(operations));
    }
    response
}
