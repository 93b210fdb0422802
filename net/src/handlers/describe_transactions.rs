//! DescribeTransactions: each transactional id's state from its coordinator
//! (`kafka-transactions describe`). An id this broker does not coordinate answers
//! NOT_COORDINATOR; an unknown one TRANSACTIONAL_ID_NOT_FOUND.

use std::rc::Rc;

use futures_util::future::join_all;
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, TopicName};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_coordinator::txn::calls;

use super::{group_by_topic, s};
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };

pub async fn handle(
    shard: &Rc<Shard>,
    request: DescribeTransactionsRequest,
    caller: &crate::authorize::Caller,
) -> DescribeTransactionsResponse {
    let states = request.transactional_ids.into_iter().map(|id| async move {
        let name = id.0.to_string();
        let out = TransactionState::default().with_transactional_id(id).with_producer_id(ProducerId(-1));
        if !caller.transactional_id(crate::authorize::Op::Describe, &name) {
            return out.with_error_code(crate::authorize::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
        }
        match crate::topics::txn_call(shard, &name, calls::Describe { id: name.clone() }).await {
            Ok(Some(m)) => {
                let partitions = m.partitions.iter().map(|(t, p)| (t.clone(), *p));
                let topics = group_by_topic(partitions)
                    .into_iter()
                    .map(|(t, ps)| TopicData::default().with_topic(TopicName(s(t))).with_partitions(ps))
                    .collect();
                out.with_transaction_state(s(m.state.name()))
                    .with_transaction_timeout_ms(m.timeout_ms)
                    .with_transaction_start_time_ms(m.start_ms)
                    .with_producer_id(ProducerId(m.producer_id))
                    .with_producer_epoch(m.producer_epoch)
                    .with_topics(topics)
            }
            Ok(None) => out.with_error_code(code::TRANSACTIONAL_ID_NOT_FOUND),
            Err(c) => out.with_error_code(c),
        }
    });
    DescribeTransactionsResponse::default().with_transaction_states(join_all(states).await)
}
