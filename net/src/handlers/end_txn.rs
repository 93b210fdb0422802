//! EndTxn: commit or abort the open transaction. Answered once the coordinator wrote
//! its decision (PrepareCommit or PrepareAbort); the markers follow, and the next
//! transaction of the id waits (CONCURRENT_TRANSACTIONS) until they are written. From
//! v5 (transaction version 2, KIP-890 part 2) the epoch is bumped at each end and the
//! answer carries the producer id and epoch of the next transaction.

use std::rc::Rc;

use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId, RequestHeader};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_coordinator::txn::calls::{self, ProducerIdAndEpoch};

use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 5 };

pub async fn handle(shard: &Rc<Shard>, header: &RequestHeader, request: EndTxnRequest) -> EndTxnResponse {
    let id = request.transactional_id.0.to_string();
    let call = calls::End {
        id: id.clone(),
        producer_id: request.producer_id.0,
        epoch: request.producer_epoch,
        commit: request.committed,
        tv2: header.request_api_version >= 5,
    };
    let answer = crate::topics::txn_call(shard, &id, call).await.and_then(|answer| answer);
    let (error, producer) = match answer {
        Ok(producer) => (code::NONE, producer),
        Err(error) => (error, ProducerIdAndEpoch { producer_id: -1, epoch: -1 }),
    };
    let error = skein_coordinator::txn::fenced_for(error, header.request_api_version >= 2);
    EndTxnResponse::default()
        .with_error_code(error)
        .with_producer_id(ProducerId(producer.producer_id))
        .with_producer_epoch(producer.epoch)
}
