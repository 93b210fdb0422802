//! InitProducerId for idempotent producers: a new producer id, epoch 0, from this
//! shard's block of ids (a metadata write once per block, not per producer). Transactions are not implemented yet, so a request
//! with a transactional id is refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) rather
//! than answered as if it were coordinated.

use std::rc::Rc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use kafka_protocol::protocol::VersionRange;

use crate::errors::code;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 5 };

pub async fn handle(shard: &Rc<Shard>, request: InitProducerIdRequest) -> InitProducerIdResponse {
    let mut response = InitProducerIdResponse::default();
    response.producer_id = ProducerId(-1);
    response.producer_epoch = -1;
    if request.transactional_id.is_some() {
        response.error_code = code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
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
