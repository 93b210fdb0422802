//! DescribeGroups: state, protocol, members and their assignments.

use std::rc::Rc;

use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse};
use kafka_protocol::protocol::VersionRange;

use crate::errors::code;
use crate::group::{GroupAnswer, GroupCall};
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 5 };

pub async fn handle(shard: &Rc<Shard>, request: DescribeGroupsRequest) -> DescribeGroupsResponse {
    let operations =
        crate::operations::authorized(crate::operations::Resource::Group, request.include_authorized_operations);
    let mut response = DescribeGroupsResponse::default();
    for group in request.groups {
        let name = group.0.to_string();
        let described = match crate::topics::group_call(shard, &name, GroupCall::Describe { group: name.clone() }).await
        {
            Ok(GroupAnswer::Described(d)) => d,
            Ok(_) => DescribedGroup::default().with_group_id(group).with_error_code(code::UNKNOWN_SERVER_ERROR),
            Err(c) => DescribedGroup::default().with_group_id(group).with_error_code(c),
        };
        response.groups.push(described.with_authorized_operations(operations));
    }
    response
}
