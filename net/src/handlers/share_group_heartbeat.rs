//! ShareGroupHeartbeat (KIP-932): joins, heartbeats and leaves a share group; the
//! coordinator assigns partitions with the `simple` assignor (`group::share`).

use std::rc::Rc;

use kafka_protocol::messages::{RequestHeader, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse};
use kafka_protocol::protocol::VersionRange;
use skein_coordinator::group::calls;

use crate::shard::Shard;

/// Version 1 is Kafka's first stable version (v0 was 4.0's early access).
pub const VERSIONS: VersionRange = VersionRange { min: 1, max: 1 };

pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: ShareGroupHeartbeatRequest,
    peer: &str,
) -> ShareGroupHeartbeatResponse {
    let group = request.group_id.0.to_string();
    let call = calls::ShareHeartbeat {
        request: Box::new(request),
        client_id: header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default(),
        client_host: format!("/{peer}"),
    };
    match crate::topics::group_call(shard, &group, call).await {
        Ok(response) => response,
        Err(c) => ShareGroupHeartbeatResponse::default().with_error_code(c),
    }
}
