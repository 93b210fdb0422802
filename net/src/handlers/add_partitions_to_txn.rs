//! AddPartitionsToTxn: a transactional producer adds the partitions it is about to
//! write to its open transaction (v0-3, one transaction), or a broker checks or adds
//! them for several (v4+, KIP-890: `verify_only` asks whether they are in it; without
//! it, the broker adds them for a client of transaction version 2, whose produce or
//! offset commit names no AddPartitionsToTxn of its own).
//! Partitions of unknown topics answer UNKNOWN_TOPIC_OR_PARTITION and the others of
//! the transaction OPERATION_NOT_ATTEMPTED, as Kafka: nothing is half-added.

use std::rc::Rc;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, RequestHeader, TopicName};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_coordinator::txn::calls::{self, AddMode};

use super::{group_by_topic, s};
use crate::authorize::{Caller, Op, TOPIC_AUTHORIZATION_FAILED};
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 5 };

pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: AddPartitionsToTxnRequest,
    caller: &Caller,
) -> AddPartitionsToTxnResponse {
    let mut response = AddPartitionsToTxnResponse::default();
    if header.request_api_version <= 3 {
        let id = request.v3_and_below_transactional_id.0.to_string();
        let (pid, epoch) = (request.v3_and_below_producer_id.0, request.v3_and_below_producer_epoch);
        let knows_fenced = header.request_api_version >= 2;
        let topics = &request.v3_and_below_topics;
        response.results_by_topic_v3_and_below =
            add(shard, caller, &id, (pid, epoch), topics, AddMode::Client, knows_fenced).await;
        return response;
    }
    for txn in request.transactions {
        let id = txn.transactional_id.0.to_string();
        let (pid, epoch) = (txn.producer_id.0, txn.producer_epoch);
        // A broker's batched verification (v4+) was authorized whole, for CLUSTER_ACTION.
        // Without `verify_only`, a broker adds them for a write of transaction version 2
        // (Kafka's `transactionVersionForAddPartitionsToTxn`).
        let mode = if txn.verify_only { AddMode::Verify } else { AddMode::Implicit };
        let results = add(shard, &Caller::unchecked(), &id, (pid, epoch), &txn.topics, mode, true).await;
        response.results_by_transaction.push(
            AddPartitionsToTxnResult::default().with_transactional_id(txn.transactional_id).with_topic_results(results),
        );
    }
    response
}

/// Adds (or checks) the partitions of one transaction of `producer` (id and epoch);
/// one result per partition. `caller` needs WRITE on each topic: if any is refused,
/// none is added.
async fn add(
    shard: &Rc<Shard>,
    caller: &Caller,
    id: &str,
    producer: (i64, i16),
    topics: &[AddPartitionsToTxnTopic],
    mode: AddMode,
    knows_fenced: bool,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let (producer_id, epoch) = producer;
    let image = shard.image();
    let wanted: Vec<(String, i32)> =
        topics.iter().flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.to_string(), *p))).collect();
    let unknown = |(t, p): &(String, i32)| image.topic(t).is_none_or(|m| *p < 0 || *p >= m.partitions);
    let denied = |(t, _): &(String, i32)| !caller.topic(Op::Write, t);
    let codes: Vec<i16> = if wanted.iter().any(denied) {
        wanted
            .iter()
            .map(|w| if denied(w) { TOPIC_AUTHORIZATION_FAILED } else { code::OPERATION_NOT_ATTEMPTED })
            .collect()
    } else if wanted.iter().any(unknown) {
        wanted
            .iter()
            .map(|w| if unknown(w) { code::UNKNOWN_TOPIC_OR_PARTITION } else { code::OPERATION_NOT_ATTEMPTED })
            .collect()
    } else {
        let call = calls::Add { id: id.to_owned(), producer_id, epoch, partitions: wanted.clone(), mode };
        let error = crate::topics::txn_call(shard, id, call).await.unwrap_or_else(|error| error);
        vec![skein_coordinator::txn::fenced_for(error, knows_fenced); wanted.len()]
    };
    let partitions = wanted.into_iter().zip(codes).map(|((topic, p), error)| {
        (topic, AddPartitionsToTxnPartitionResult::default().with_partition_index(p).with_partition_error_code(error))
    });
    group_by_topic(partitions)
        .into_iter()
        .map(|(topic, results)| {
            AddPartitionsToTxnTopicResult::default().with_name(TopicName(s(topic))).with_results_by_partition(results)
        })
        .collect()
}
