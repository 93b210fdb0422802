//! ListGroups, with the state filter (v4+, KIP-518) and the type filter (v5+,
//! KIP-848: classic, consumer, share), gathered from every shard.

use std::rc::Rc;

use kafka_protocol::messages::{ListGroupsRequest, ListGroupsResponse};
use kafka_protocol::protocol::VersionRange;
use skein_coordinator::group::calls;

use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 5 };

/// DESCRIBE on the cluster lists every group; otherwise the groups the caller may
/// describe, as in Kafka.
pub async fn handle(
    shard: &Rc<Shard>,
    request: ListGroupsRequest,
    caller: &crate::authorize::Caller,
) -> ListGroupsResponse {
    let states: Vec<String> = request.states_filter.iter().map(|s| s.to_string()).collect();
    let mut response = ListGroupsResponse::default();
    for answer in shard.group_call_everywhere(|| calls::List { states: states.clone() }).await {
        match answer {
            Ok(groups) => response.groups.extend(groups),
            Err(c) => response.error_code = c,
        }
    }
    if !request.types_filter.is_empty() {
        let wanted = |t: &str| request.types_filter.iter().any(|f| f.eq_ignore_ascii_case(t));
        response.groups.retain(|g| wanted(&g.group_type));
    }
    if !caller.cluster(crate::authorize::Op::Describe) {
        response.groups.retain(|g| caller.group(crate::authorize::Op::Describe, &g.group_id));
    }
    response
}
