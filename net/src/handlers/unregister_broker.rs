//! UnregisterBroker (KIP-500, `kafka-cluster unregister --id N`), v0: removes a
//! decommissioned broker's registration. As on Kafka 4.4, the controller first takes
//! the broker out of every ISR and ELR (its leaderships move to in-sync replicas),
//! then drops the registration; a broker still running registers again with its next
//! heartbeat. An id with no registration is BROKER_ID_NOT_REGISTERED.

use std::rc::Rc;

use kafka_protocol::messages::{UnregisterBrokerRequest, UnregisterBrokerResponse};
use kafka_protocol::protocol::VersionRange;
use skein_control::metadata::requests::ControllerRequest;

use super::s;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };

pub async fn handle(shard: &Rc<Shard>, request: UnregisterBrokerRequest) -> UnregisterBrokerResponse {
    match shard.control(ControllerRequest::UnregisterBroker { id: request.broker_id.0 }).await {
        Ok(_) => UnregisterBrokerResponse::default(),
        Err((code, message)) => {
            UnregisterBrokerResponse::default().with_error_code(code).with_error_message(Some(s(message)))
        }
    }
}
