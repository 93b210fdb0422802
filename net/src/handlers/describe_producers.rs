//! DescribeProducers: the producers a partition leader knows, with their epochs, last
//! sequences and the first offset of their open transaction (`kafka-transactions
//! describe-producers`, `find-hanging`).

use std::rc::Rc;

use kafka_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState, TopicResponse};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};
use kafka_protocol::protocol::VersionRange;

use super::route_partitions;
use crate::authorize::{Caller, Op};
use crate::errors::code;
use crate::shard::{PartitionOp, PartitionReply, Shard};

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };

pub async fn handle(
    shard: &Rc<Shard>,
    request: DescribeProducersRequest,
    caller: &Caller,
) -> DescribeProducersResponse {
    let image = shard.image();
    let mut response = DescribeProducersResponse::default();
    for topic in request.topics {
        let ops = topic.partition_indexes.iter().map(|&p| (p, PartitionOp::Producers));
        let results = route_partitions(shard, &image, &topic.name.0, ops, caller.topic(Op::Read, &topic.name.0)).await;
        let partitions = topic
            .partition_indexes
            .iter()
            .zip(results)
            .map(|(&p, result)| {
                let out = PartitionResponse::default().with_partition_index(p);
                match result {
                    Ok(PartitionReply::Producers(producers)) => out.with_active_producers(
                        producers
                            .into_iter()
                            .map(|(pid, epoch, last_seq, last_ts, coordinator_epoch, txn_start)| {
                                ProducerState::default()
                                    .with_producer_id(ProducerId(pid))
                                    .with_producer_epoch(i32::from(epoch))
                                    .with_last_sequence(last_seq)
                                    .with_last_timestamp(last_ts)
                                    .with_coordinator_epoch(coordinator_epoch)
                                    .with_current_txn_start_offset(txn_start)
                            })
                            .collect(),
                    ),
                    Ok(_) => out.with_error_code(code::UNKNOWN_SERVER_ERROR),
                    Err((c, message)) => out.with_error_code(c).with_error_message(message.map(super::s)),
                }
            })
            .collect();
        response.topics.push(TopicResponse::default().with_name(topic.name).with_partitions(partitions));
    }
    response
}
