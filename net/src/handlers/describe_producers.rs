//! DescribeProducers: the producers a partition leader knows, with their epochs, last
//! sequences and the first offset of their open transaction (`kafka-transactions
//! describe-producers`, `find-hanging`).

use std::rc::Rc;

use kafka_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState, TopicResponse};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};
use kafka_protocol::protocol::VersionRange;

use super::route_partitions;
use crate::authorize::{Caller, Op};
use crate::shard::{ops, Shard};

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };

pub async fn handle(
    shard: &Rc<Shard>,
    request: DescribeProducersRequest,
    caller: &Caller,
) -> DescribeProducersResponse {
    let image = shard.image();
    let mut response = DescribeProducersResponse::default();
    for topic in request.topics {
        let ops = topic.partition_indexes.iter().map(|&p| (p, ops::Producers));
        let results = route_partitions(shard, &image, &topic.name.0, ops, caller.topic(Op::Read, &topic.name.0)).await;
        let partitions = topic
            .partition_indexes
            .iter()
            .zip(results)
            .map(|(&p, result)| {
                let out = PartitionResponse::default().with_partition_index(p);
                match result {
                    Ok(producers) => out.with_active_producers(
                        producers
                            .into_iter()
                            .map(|p| {
                                ProducerState::default()
                                    .with_producer_id(ProducerId(p.producer_id))
                                    .with_producer_epoch(i32::from(p.epoch))
                                    .with_last_sequence(p.last_sequence)
                                    .with_last_timestamp(p.last_timestamp)
                                    .with_coordinator_epoch(p.coordinator_epoch)
                                    .with_current_txn_start_offset(p.txn_start_offset)
                            })
                            .collect(),
                    ),
                    Err(error) => out.with_error_code(error.code).with_error_message(error.message.map(super::s)),
                }
            })
            .collect();
        response.topics.push(TopicResponse::default().with_name(topic.name).with_partitions(partitions));
    }
    response
}
