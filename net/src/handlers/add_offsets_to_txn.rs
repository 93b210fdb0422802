//! AddOffsetsToTxn: a transactional producer adds its consumer group's partition of
//! `__consumer_offsets` to the open transaction, before TxnOffsetCommit
//! (`sendOffsetsToTransaction`).

use std::rc::Rc;

use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, RequestHeader};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_coordinator::txn::calls;

use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 4 };

pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    let mut response = AddOffsetsToTxnResponse::default();
    let group = request.group_id.0.to_string();
    if group.is_empty() {
        response.error_code = code::INVALID_GROUP_ID;
        return response;
    }
    if crate::topics::ensure_offsets_topic(shard).await.is_err() {
        response.error_code = code::COORDINATOR_NOT_AVAILABLE;
        return response;
    }
    let id = request.transactional_id.0.to_string();
    let partition =
        (skein_coordinator::group::OFFSETS_TOPIC.to_string(), skein_coordinator::group::partition_for(&group));
    let call = calls::Add {
        id: id.clone(),
        producer_id: request.producer_id.0,
        epoch: request.producer_epoch,
        partitions: vec![partition],
        mode: calls::AddMode::Client,
    };
    let error = crate::topics::txn_call(shard, &id, call).await.unwrap_or_else(|error| error);
    response.error_code = skein_coordinator::txn::fenced_for(error, header.request_api_version >= 2);
    response
}
