//! ListTransactions: the transactional ids this broker coordinates, filtered by
//! state, producer id, running time (v1) and id pattern (v2), as Kafka's
//! `kafka-transactions list` asks every broker.

use std::collections::BTreeSet;
use std::rc::Rc;

use futures_util::future::join_all;
use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{ListTransactionsRequest, ListTransactionsResponse, ProducerId, TransactionalId};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_coordinator::txn::{calls, TxnRequest, TxnState, TRANSACTION_TOPIC};
use skein_engine::TopicPartition;

use super::s;
use crate::shard::{ops, Shard};

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 2 };

const STATES: [&str; 8] = [
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
];

/// The transactions whose ids the caller may describe, as in Kafka.
pub async fn handle(
    shard: &Rc<Shard>,
    request: ListTransactionsRequest,
    caller: &crate::authorize::Caller,
) -> ListTransactionsResponse {
    let mut response = ListTransactionsResponse::default();
    let pattern = match request.transactional_id_pattern.as_deref().filter(|p| !p.is_empty()).map(regex::Regex::new) {
        Some(Ok(re)) => Some(re),
        Some(Err(_)) => return response.with_error_code(code::INVALID_REQUEST),
        None => None,
    };
    let states: BTreeSet<String> = request.state_filters.iter().map(|f| f.to_string()).collect();
    response.unknown_state_filters =
        request.state_filters.iter().filter(|f| !STATES.contains(&f.as_str())).cloned().collect();
    let pids: BTreeSet<i64> = request.producer_id_filters.iter().map(|p| p.0).collect();
    let now = skein_engine::time::now_ms();
    // One call per shard owning a partition of the transaction log this broker leads.
    let image = shard.image();
    let node = shard.settings.node_id;
    let mut owners = BTreeSet::new();
    let calls: Vec<_> = image
        .topic(TRANSACTION_TOPIC)
        .map(|meta| {
            meta.shards
                .iter()
                .enumerate()
                .filter(|(p, owner)| meta.assignment(*p as i32, node).leader == node && owners.insert(**owner))
                .map(|(p, owner)| {
                    let partition = TopicPartition::new(TRANSACTION_TOPIC, p as i32);
                    shard.call_on(*owner, partition, ops::Txn(Box::new(calls::List.into_message())))
                })
                .collect()
        })
        .unwrap_or_default();
    for result in join_all(calls).await {
        let Some(all) = result.ok().and_then(calls::List::reply) else { continue };
        for (id, m) in all {
            let running = m.state == TxnState::Ongoing && now - m.start_ms >= request.duration_filter;
            let kept = (states.is_empty() || states.contains(m.state.name()))
                && (pids.is_empty() || pids.contains(&m.producer_id))
                && (request.duration_filter < 0 || running)
                && pattern.as_ref().is_none_or(|re| re.is_match(&id))
                && caller.transactional_id(crate::authorize::Op::Describe, &id);
            if kept {
                response.transaction_states.push(
                    TransactionState::default()
                        .with_transactional_id(TransactionalId(s(id)))
                        .with_producer_id(ProducerId(m.producer_id))
                        .with_transaction_state(s(m.state.name())),
                );
            }
        }
    }
    response
}
