//! ShareGroupDescribe (KIP-932): a share group's state, epochs, assignor and members
//! with their assignments.

use std::rc::Rc;

use kafka_protocol::messages::share_group_describe_response::DescribedGroup;
use kafka_protocol::messages::{ShareGroupDescribeRequest, ShareGroupDescribeResponse};
use kafka_protocol::protocol::{StrBytes, VersionRange};
use skein_control::errors::code;
use skein_coordinator::group::calls;

use crate::authorize::{Caller, Op, GROUP_AUTHORIZATION_FAILED};
use crate::operations::{authorized, Resource, NOT_REQUESTED};
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 1, max: 1 };

pub async fn handle(
    shard: &Rc<Shard>,
    request: ShareGroupDescribeRequest,
    caller: &Caller,
) -> ShareGroupDescribeResponse {
    let mut response = ShareGroupDescribeResponse::default();
    for group in request.group_ids {
        let name = group.0.to_string();
        if name.is_empty() {
            let invalid = DescribedGroup::default().with_group_id(group).with_error_code(code::INVALID_GROUP_ID);
            response.groups.push(invalid.with_authorized_operations(NOT_REQUESTED));
            continue;
        }
        if !caller.group(Op::Describe, &name) {
            let denied = DescribedGroup::default()
                .with_group_id(group)
                .with_error_code(GROUP_AUTHORIZATION_FAILED)
                .with_error_message(Some(StrBytes::from_static_str("Group authorization failed.")));
            response.groups.push(denied.with_authorized_operations(NOT_REQUESTED));
            continue;
        }
        let operations = authorized(caller, Resource::Group, &name, request.include_authorized_operations);
        let described =
            match crate::topics::group_call(shard, &name, calls::ShareDescribe { group: name.clone() }).await {
                Ok(d) => d,
                Err(c) => DescribedGroup::default().with_group_id(group).with_error_code(c),
            };
        response.groups.push(described.with_authorized_operations(operations));
    }
    response
}
