//! FindCoordinator: this node coordinates every group (it leads every partition of
//! `__consumer_offsets`, created here on first use). Batched keys from v4 (KIP-699).
//! Transaction coordinators do not exist yet: COORDINATOR_NOT_AVAILABLE.

use std::rc::Rc;

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, RequestHeader};
use kafka_protocol::protocol::VersionRange;

use super::s;
use crate::errors::code;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 6 };

const KEY_TYPE_GROUP: i8 = 0;

pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let settings = &shard.settings;
    let error = if request.key_type != KEY_TYPE_GROUP {
        code::COORDINATOR_NOT_AVAILABLE
    } else {
        match crate::topics::ensure_offsets_topic(shard).await {
            Ok(()) => code::NONE,
            Err(_) => code::COORDINATOR_NOT_AVAILABLE,
        }
    };
    let node = |key: kafka_protocol::protocol::StrBytes| {
        let mut c = Coordinator::default().with_key(key).with_error_code(error);
        if error == code::NONE {
            c = c
                .with_node_id(BrokerId(settings.node_id))
                .with_host(s(settings.advertised_host.clone()))
                .with_port(settings.advertised_port as i32);
        } else {
            c = c.with_node_id(BrokerId(-1)).with_port(-1);
        }
        c
    };
    let mut response = FindCoordinatorResponse::default();
    if header.request_api_version >= 4 {
        response.coordinators = request.coordinator_keys.into_iter().map(node).collect();
    } else {
        let c = node(request.key);
        response.error_code = c.error_code;
        response.node_id = c.node_id;
        response.host = c.host;
        response.port = c.port;
    }
    response
}
