//! FindCoordinator: this node coordinates every group (it leads every partition of
//! `__consumer_offsets`, created here on first use). Batched keys from v4 (KIP-699).
//! A group's coordinator is named only once its offsets partition is open and loaded;
//! until then the key gets COORDINATOR_NOT_AVAILABLE, which every client retries (a
//! client told the address early would send its commit into the load and, for
//! librdkafka's synchronous commit, fail on COORDINATOR_LOAD_IN_PROGRESS).
//! Transaction coordinators do not exist yet: COORDINATOR_NOT_AVAILABLE.

use std::rc::Rc;

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, RequestHeader};
use kafka_protocol::protocol::VersionRange;

use futures_util::future::join_all;

use super::s;
use crate::errors::code;
use crate::group::GroupCall;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 6 };

const KEY_TYPE_GROUP: i8 = 0;

pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let settings = &shard.settings;
    let keys = if header.request_api_version >= 4 { request.coordinator_keys } else { vec![request.key] };
    let errors = if request.key_type != KEY_TYPE_GROUP {
        vec![code::COORDINATOR_NOT_AVAILABLE; keys.len()]
    } else {
        let ready = keys.iter().map(|key| crate::topics::group_call(shard, key, GroupCall::Ready));
        join_all(ready)
            .await
            .into_iter()
            .map(|r| if r.is_ok() { code::NONE } else { code::COORDINATOR_NOT_AVAILABLE })
            .collect()
    };
    let node = |(key, error): (kafka_protocol::protocol::StrBytes, i16)| {
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
    let mut coordinators = keys.into_iter().zip(errors).map(node);
    if header.request_api_version >= 4 {
        response.coordinators = coordinators.collect();
    } else if let Some(c) = coordinators.next() {
        response.error_code = c.error_code;
        response.node_id = c.node_id;
        response.host = c.host;
        response.port = c.port;
    }
    response
}
