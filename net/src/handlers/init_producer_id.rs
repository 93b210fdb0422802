//! InitProducerId. Without a transactional id, for idempotent producers: a new
//! producer id, epoch 0, from this shard's block of ids (a metadata write once per
//! block, not per producer). With one, the transaction coordinator's: a new id, or
//! the id's next epoch (fencing older instances), after aborting a transaction the
//! previous instance left open (CONCURRENT_TRANSACTIONS meanwhile; the client retries).

use std::rc::Rc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_coordinator::txn::calls;

use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 5 };

pub async fn handle(shard: &Rc<Shard>, request: InitProducerIdRequest) -> InitProducerIdResponse {
    let mut response = InitProducerIdResponse::default();
    response.producer_id = ProducerId(-1);
    response.producer_epoch = -1;
    if let Some(id) = request.transactional_id {
        if id.is_empty() {
            response.error_code = code::INVALID_REQUEST;
            return response;
        }
        let call = calls::Init {
            id: id.to_string(),
            timeout_ms: request.transaction_timeout_ms,
            producer_id: request.producer_id.0,
            epoch: request.producer_epoch,
        };
        match crate::topics::txn_call(shard, &id, call).await {
            Ok(Ok(producer)) => {
                response.producer_id = ProducerId(producer.producer_id);
                response.producer_epoch = producer.epoch;
            }
            Ok(Err(error)) | Err(error) => response.error_code = error,
        }
        return response;
    }
    match shard.next_producer_id().await {
        Ok(id) => {
            response.producer_id = ProducerId(id);
            response.producer_epoch = 0;
        }
        Err((error, _)) => response.error_code = error,
    }
    response
}
