//! JoinGroup: enters the group's rebalance; answered when the join phase completes.
//! From v4 an unknown member first gets MEMBER_ID_REQUIRED with its id (KIP-394).

use std::rc::Rc;

use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse, RequestHeader};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_coordinator::group::Join;

use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 9 };

pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: JoinGroupRequest,
    peer: &str,
) -> JoinGroupResponse {
    let version = header.request_api_version;
    let group = request.group_id.0.to_string();
    if group.is_empty() {
        return JoinGroupResponse::default().with_error_code(code::INVALID_GROUP_ID).with_generation_id(-1);
    }
    let call = Join {
        group: group.clone(),
        member_id: request.member_id.to_string(),
        instance_id: request.group_instance_id.map(|i| i.to_string()),
        client_id: header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default(),
        client_host: format!("/{peer}"),
        session_timeout_ms: request.session_timeout_ms,
        rebalance_timeout_ms: if version == 0 { request.session_timeout_ms } else { request.rebalance_timeout_ms },
        protocol_type: request.protocol_type.to_string(),
        protocols: request.protocols.into_iter().map(|p| (p.name.to_string(), p.metadata)).collect(),
        require_known_member_id: version >= 4,
        skip_assignment_supported: version >= 9,
    };
    match crate::topics::group_call(shard, &group, call).await {
        Ok(response) => response,
        Err(c) => JoinGroupResponse::default().with_error_code(c).with_generation_id(-1),
    }
}
