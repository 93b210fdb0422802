//! FindCoordinator: a group's coordinator is the leader of its partition of
//! `__consumer_offsets` (created on first use). Batched keys from v4 (KIP-699).
//! A group's coordinator is named only once its offsets partition is open and loaded;
//! until then the key gets COORDINATOR_NOT_AVAILABLE, which every client retries (a
//! client told the address early would send its commit into the load and, for
//! librdkafka's synchronous commit, fail on COORDINATOR_LOAD_IN_PROGRESS).
//! A transactional id's coordinator (key type 1) is the leader of its partition of
//! `__transaction_state`, named the same way once that partition is loaded.

use std::rc::Rc;

use futures_util::future::join_all;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, RequestHeader};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_coordinator::group::calls;

use super::s;
use crate::authorize::{Caller, Op, GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED};
use crate::shard::Shard;

/// A coordinator found: its node id, host and port.
type Found = (i32, String, u16);

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 6 };

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: FindCoordinatorRequest,
    listener: &str,
    caller: &Caller,
) -> FindCoordinatorResponse {
    let keys = if header.request_api_version >= 4 { request.coordinator_keys } else { vec![request.key] };
    // DESCRIBE on the group or transactional id, as in Kafka.
    let denied: Vec<Option<i16>> = keys
        .iter()
        .map(|key| match request.key_type {
            KEY_TYPE_GROUP if !caller.group(Op::Describe, key) => Some(GROUP_AUTHORIZATION_FAILED),
            KEY_TYPE_TRANSACTION if !caller.transactional_id(Op::Describe, key) => {
                Some(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            }
            _ => None,
        })
        .collect();
    let lookups = keys.iter().zip(&denied).map(|(key, denied)| async move {
        match (request.key_type, denied) {
            (_, Some(_)) => None,
            (KEY_TYPE_GROUP, None) => coordinator_of(shard, key, listener).await,
            (KEY_TYPE_TRANSACTION, None) => txn_coordinator_of(shard, key, listener).await,
            _ => None,
        }
    });
    let coordinators: Vec<Option<Found>> = join_all(lookups).await;
    let node = |((key, found), denied): ((kafka_protocol::protocol::StrBytes, Option<Found>), Option<i16>)| {
        let c = Coordinator::default().with_key(key);
        match (found, denied) {
            (_, Some(error)) => c.with_error_code(error).with_node_id(BrokerId(-1)).with_port(-1),
            (Some((id, host, port)), None) => c.with_node_id(BrokerId(id)).with_host(s(host)).with_port(port as i32),
            (None, None) => c.with_error_code(code::COORDINATOR_NOT_AVAILABLE).with_node_id(BrokerId(-1)).with_port(-1),
        }
    };
    let mut response = FindCoordinatorResponse::default();
    let mut coordinators = keys.into_iter().zip(coordinators).zip(denied).map(node);
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

/// The broker that coordinates `group`: the leader of its `__consumer_offsets`
/// partition, once that partition is loaded when it is this node.
async fn coordinator_of(shard: &Rc<Shard>, group: &str, listener: &str) -> Option<(i32, String, u16)> {
    crate::topics::ensure_offsets_topic(shard).await.ok()?;
    let partition = skein_coordinator::group::partition_for(group);
    let leader = shard
        .image()
        .topic(skein_coordinator::group::OFFSETS_TOPIC)?
        .assignment(partition, shard.settings.node_id)
        .leader;
    if leader == shard.settings.node_id {
        crate::topics::group_call(shard, group, calls::Ready).await.ok()?;
    }
    let leader = shard.client_broker_id(leader, listener, skein_coordinator::group::OFFSETS_TOPIC, partition);
    let (host, port) = shard.client_address(leader, listener)?;
    Some((leader, host, port))
}

/// The broker that coordinates transactional id `id`: the leader of its
/// `__transaction_state` partition, once that partition is loaded when it is this node.
async fn txn_coordinator_of(shard: &Rc<Shard>, id: &str, listener: &str) -> Option<(i32, String, u16)> {
    crate::topics::ensure_transaction_topic(shard).await.ok()?;
    let partition = skein_coordinator::txn::partition_for(id);
    let leader = shard
        .image()
        .topic(skein_coordinator::txn::TRANSACTION_TOPIC)?
        .assignment(partition, shard.settings.node_id)
        .leader;
    if leader == shard.settings.node_id {
        crate::topics::txn_call(shard, id, skein_coordinator::txn::calls::Ready).await.ok()?;
    }
    let leader = shard.client_broker_id(leader, listener, skein_coordinator::txn::TRANSACTION_TOPIC, partition);
    let (host, port) = shard.client_address(leader, listener)?;
    Some((leader, host, port))
}
