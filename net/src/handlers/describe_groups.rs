//! DescribeGroups: state, protocol, members and their assignments. From v6 (KIP-1043)
//! a group that does not exist, or is not a classic group, is GROUP_ID_NOT_FOUND;
//! before, it is only `Dead`.

use std::rc::Rc;

use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code::GROUP_ID_NOT_FOUND;
use skein_coordinator::group::calls;

use crate::authorize::{Caller, Op, GROUP_AUTHORIZATION_FAILED};
use crate::operations::{authorized, Resource, NOT_REQUESTED};
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 6 };

pub async fn handle(
    shard: &Rc<Shard>,
    version: i16,
    request: DescribeGroupsRequest,
    caller: &Caller,
) -> DescribeGroupsResponse {
    let mut response = DescribeGroupsResponse::default();
    for group in request.groups {
        let name = group.0.to_string();
        if !caller.group(Op::Describe, &name) {
            let denied = DescribedGroup::default().with_group_id(group).with_error_code(GROUP_AUTHORIZATION_FAILED);
            response.groups.push(denied.with_authorized_operations(NOT_REQUESTED));
            continue;
        }
        let operations = authorized(caller, Resource::Group, &name, request.include_authorized_operations);
        let mut described = match crate::topics::group_call(shard, &name, calls::Describe { group: name.clone() }).await
        {
            Ok(d) => d,
            Err(c) => DescribedGroup::default().with_group_id(group).with_error_code(c),
        };
        if version < 6 {
            if described.error_code == GROUP_ID_NOT_FOUND {
                described.error_code = 0;
            }
            described.error_message = None;
        }
        response.groups.push(described.with_authorized_operations(operations));
    }
    response
}
