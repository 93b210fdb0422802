//! SyncGroup: the leader hands in assignments; every member receives its own.

use std::rc::Rc;

use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};
use kafka_protocol::protocol::VersionRange;
use skein_coordinator::group::calls;

use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 5 };

pub async fn handle(shard: &Rc<Shard>, request: SyncGroupRequest) -> SyncGroupResponse {
    let group = request.group_id.0.to_string();
    let call = calls::Sync {
        group: group.clone(),
        generation: request.generation_id,
        member_id: request.member_id.to_string(),
        instance_id: request.group_instance_id.map(|i| i.to_string()),
        assignments: request.assignments.into_iter().map(|a| (a.member_id.to_string(), a.assignment)).collect(),
    };
    match crate::topics::group_call(shard, &group, call).await {
        Ok(response) => response,
        Err(c) => SyncGroupResponse::default().with_error_code(c),
    }
}
