//! ListGroups, with the state filter (v4+, KIP-518), gathered from every shard.

use std::rc::Rc;

use kafka_protocol::messages::{ListGroupsRequest, ListGroupsResponse};
use kafka_protocol::protocol::VersionRange;

use crate::group::{GroupAnswer, GroupCall};
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 5 };

pub async fn handle(shard: &Rc<Shard>, request: ListGroupsRequest) -> ListGroupsResponse {
    let states: Vec<String> = request.states_filter.iter().map(|s| s.to_string()).collect();
    let mut response = ListGroupsResponse::default();
    for answer in crate::topics::group_call_everywhere(shard, || GroupCall::List { states: states.clone() }).await {
        match answer {
            Ok(GroupAnswer::Listed(groups)) => response.groups.extend(groups),
            Ok(_) => {}
            Err(c) => response.error_code = c,
        }
    }
    response
}
