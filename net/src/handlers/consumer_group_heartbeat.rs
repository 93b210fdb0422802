//! ConsumerGroupHeartbeat (KIP-848): joins, heartbeats, reconciles and leaves a
//! consumer-protocol group; the assignment is computed on the coordinator.

use std::rc::Rc;

use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, RequestHeader};
use kafka_protocol::protocol::VersionRange;
use skein_coordinator::group::calls;

use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 1 };

pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: ConsumerGroupHeartbeatRequest,
    peer: &str,
) -> ConsumerGroupHeartbeatResponse {
    let group = request.group_id.0.to_string();
    let call = calls::ConsumerHeartbeat {
        request: Box::new(request),
        client_id: header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default(),
        client_host: format!("/{peer}"),
    };
    match crate::topics::group_call(shard, &group, call).await {
        Ok(response) => response,
        Err(c) => ConsumerGroupHeartbeatResponse::default().with_error_code(c),
    }
}
