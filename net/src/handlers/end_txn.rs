//! EndTxn: commit or abort the open transaction. Answered once the coordinator wrote
//! its decision (PrepareCommit or PrepareAbort); the markers follow, and the next
//! transaction of the id waits (CONCURRENT_TRANSACTIONS) until they are written.

use std::rc::Rc;

use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId, RequestHeader};
use kafka_protocol::protocol::VersionRange;

use crate::shard::Shard;
use crate::txn::calls;

/// v5 is KIP-890 part 2 (an epoch bump at every EndTxn), not offered: clients then
/// keep to the transaction protocol of version 1.
pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 4 };

pub async fn handle(shard: &Rc<Shard>, header: &RequestHeader, request: EndTxnRequest) -> EndTxnResponse {
    let id = request.transactional_id.0.to_string();
    let call = calls::End {
        id: id.clone(),
        producer_id: request.producer_id.0,
        epoch: request.producer_epoch,
        commit: request.committed,
    };
    let error = crate::topics::txn_call(shard, &id, call).await.unwrap_or_else(|error| error);
    let error = crate::txn::fenced_for(error, header.request_api_version >= 2);
    EndTxnResponse::default().with_error_code(error).with_producer_id(ProducerId(-1)).with_producer_epoch(-1)
}
