//! AddRaftVoter, RemoveRaftVoter and UnregisterController (KIP-853,
//! `kafka-metadata-quorum add-controller` and `remove-controller [--unregister]`):
//! change the controller quorum's voters, or drop a controller's record, through the
//! active controller (`Controller::change_voters`). Any node answers, as Kafka's
//! brokers forward them. A node without a controller listener (a single node started
//! without `--controller-voters`) has no quorum to grow: INVALID_REQUEST says so.
//!
//! The change is answered once it is committed, which both AddRaftVoter versions
//! accept (v1's `AckWhenCommitted` false allows answering earlier). UpdateRaftVoter,
//! which a Kafka voter sends its leader over the controller listener, is not a broker
//! API: a Skein controller records its endpoint over its own controller connection
//! at each start (`quorum::announce`).

use std::rc::Rc;

use kafka_protocol::messages::{
    AddRaftVoterRequest, AddRaftVoterResponse, RemoveRaftVoterRequest, RemoveRaftVoterResponse, RequestHeader,
    UnregisterControllerRequest, UnregisterControllerResponse,
};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_control::metadata::requests::ControllerRequest;
use skein_control::metadata::{QuorumMember, Refusal};

use super::s;
use crate::shard::Shard;

pub const ADD_VERSIONS: VersionRange = VersionRange { min: 0, max: 1 };
pub const REMOVE_VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };
pub const UNREGISTER_VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };

/// The listener Kafka's tools name a controller's endpoint after.
const CONTROLLER_LISTENER: &str = "CONTROLLER";

pub async fn add(shard: &Rc<Shard>, _header: &RequestHeader, request: AddRaftVoterRequest) -> AddRaftVoterResponse {
    let outcome = match checked(shard, request.cluster_id.as_deref()) {
        Err(refusal) => Err(refusal),
        Ok(()) => match endpoint(&request) {
            Err(refusal) => Err(refusal),
            Ok((host, port)) => {
                let member = QuorumMember {
                    node: request.voter_id,
                    directory_id: request.voter_directory_id,
                    host,
                    port,
                    voter: true,
                };
                let change = ControllerRequest::AddVoter { member, timeout_ms: i64::from(request.timeout_ms) };
                shard.control(change).await.map(|_| ())
            }
        },
    };
    let (error, message) = split(outcome);
    AddRaftVoterResponse::default().with_error_code(error).with_error_message(message)
}

pub async fn remove(
    shard: &Rc<Shard>,
    _header: &RequestHeader,
    request: RemoveRaftVoterRequest,
) -> RemoveRaftVoterResponse {
    let outcome = match checked(shard, request.cluster_id.as_deref()) {
        Err(refusal) => Err(refusal),
        Ok(()) => {
            let directory_id = request.voter_directory_id;
            shard.control(ControllerRequest::RemoveVoter { node: request.voter_id, directory_id }).await.map(|_| ())
        }
    };
    let (error, message) = split(outcome);
    RemoveRaftVoterResponse::default().with_error_code(error).with_error_message(message)
}

pub async fn unregister(shard: &Rc<Shard>, request: UnregisterControllerRequest) -> UnregisterControllerResponse {
    let outcome = match checked(shard, None) {
        Err(refusal) => Err(refusal),
        Ok(()) => {
            shard.control(ControllerRequest::UnregisterController { node: request.controller_id }).await.map(|_| ())
        }
    };
    let (error, message) = split(outcome);
    UnregisterControllerResponse::default().with_error_code(error).with_error_message(message)
}

/// The request is for this cluster, which has a quorum that can change.
fn checked(shard: &Shard, cluster_id: Option<&str>) -> Result<(), Refusal> {
    if cluster_id.is_some_and(|id| id != shard.settings.cluster_id) {
        return Err((code::INCONSISTENT_CLUSTER_ID, format!("The cluster id is {}", shard.settings.cluster_id)));
    }
    if shard.settings.controller_voters.is_empty() {
        return Err((
            code::INVALID_REQUEST,
            "This node runs alone without a controller listener: start it with --controller-voters for a quorum that can grow".into(),
        ));
    }
    Ok(())
}

/// The new voter's controller endpoint: the listener named CONTROLLER, else the only
/// one.
fn endpoint(request: &AddRaftVoterRequest) -> Result<(String, u16), Refusal> {
    let named = request.listeners.iter().find(|l| l.name.as_str() == CONTROLLER_LISTENER);
    let only = (request.listeners.len() == 1).then(|| &request.listeners[0]);
    match named.or(only) {
        Some(listener) => Ok((listener.host.to_string(), listener.port)),
        None => Err((
            code::INVALID_REQUEST,
            format!(
                "the new voter names no {CONTROLLER_LISTENER} listener among {} listeners",
                request.listeners.len()
            ),
        )),
    }
}

fn split(outcome: Result<(), Refusal>) -> (i16, Option<kafka_protocol::protocol::StrBytes>) {
    match outcome {
        Ok(()) => (code::NONE, None),
        Err((error, message)) => (error, Some(s(message))),
    }
}
