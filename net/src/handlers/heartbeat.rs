//! Heartbeat: keeps a member's session; tells it when a rebalance started.

use std::rc::Rc;

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};
use kafka_protocol::protocol::VersionRange;
use skein_coordinator::group::calls;

use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 4 };

pub async fn handle(shard: &Rc<Shard>, request: HeartbeatRequest) -> HeartbeatResponse {
    let group = request.group_id.0.to_string();
    let call = calls::Heartbeat {
        group: group.clone(),
        generation: request.generation_id,
        member_id: request.member_id.to_string(),
        instance_id: request.group_instance_id.map(|i| i.to_string()),
    };
    let error = crate::topics::group_call(shard, &group, call).await.unwrap_or_else(|error| error);
    HeartbeatResponse::default().with_error_code(error)
}
