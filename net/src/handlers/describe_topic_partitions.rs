//! DescribeTopicPartitions (KIP-966): partitions with their eligible leader replicas,
//! in pages. Topics go in name order (every topic when none is named), from the
//! cursor's topic and partition, up to `response_partition_limit` partitions (at most
//! 2,000, Kafka's `max.request.partition.size.limit`); `next_cursor` names where the
//! next page starts.

use std::collections::BTreeSet;
use std::rc::Rc;

use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, TopicName};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;

use super::s;
use crate::authorize::{Caller, Op, TOPIC_AUTHORIZATION_FAILED};
use crate::operations::{authorized, Resource};
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };

/// Kafka's `max.request.partition.size.limit` default.
const PARTITIONS_PER_PAGE_MAX: usize = 2000;

pub fn handle(
    shard: &Rc<Shard>,
    request: DescribeTopicPartitionsRequest,
    listener: &str,
    caller: &Caller,
) -> DescribeTopicPartitionsResponse {
    let node = shard.settings.node_id;
    let image = shard.image();
    // All topics: those the caller may describe; one named that it may not gets
    // TOPIC_AUTHORIZATION_FAILED, as in Kafka.
    let names: BTreeSet<String> = match request.topics.is_empty() {
        true => image.topics.keys().filter(|t| caller.topic(Op::Describe, t)).cloned().collect(),
        false => request.topics.iter().map(|t| t.name.to_string()).collect(),
    };
    let mut response = DescribeTopicPartitionsResponse::default();
    let (first_topic, first_partition) = match &request.cursor {
        Some(cursor) => (Some(cursor.topic_name.to_string()), cursor.partition_index.max(0)),
        None => (None, 0),
    };
    if let Some(topic) = first_topic.as_ref().filter(|t| !names.contains(*t)) {
        // As Kafka: the cursor must name one of the topics asked for.
        response.topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_error_code(code::INVALID_REQUEST)
                .with_name(Some(TopicName(s(topic.clone())))),
        );
        return response;
    }
    let limit = usize::try_from(request.response_partition_limit).unwrap_or(1).clamp(1, PARTITIONS_PER_PAGE_MAX);
    let mut left = limit;
    // Ids as clients on this listener know them (virtual brokers: the owning shard's).
    let ids = |list: &[i32], topic: &str, p: i32| {
        list.iter().map(|&r| BrokerId(shard.client_broker_id(r, listener, topic, p))).collect::<Vec<_>>()
    };
    let start = first_topic.clone().unwrap_or_default();
    for name in names.range(start..) {
        if !caller.topic(Op::Describe, name) {
            response.topics.push(
                DescribeTopicPartitionsResponseTopic::default()
                    .with_error_code(TOPIC_AUTHORIZATION_FAILED)
                    .with_name(Some(TopicName(s(name.clone())))),
            );
            continue;
        }
        let Some(meta) = image.topic(name) else {
            response.topics.push(
                DescribeTopicPartitionsResponseTopic::default()
                    .with_error_code(code::UNKNOWN_TOPIC_OR_PARTITION)
                    .with_name(Some(TopicName(s(name.clone())))),
            );
            continue;
        };
        let from = if first_topic.as_deref() == Some(name.as_str()) { first_partition } else { 0 };
        if left == 0 {
            response.next_cursor =
                Some(Cursor::default().with_topic_name(TopicName(s(name.clone()))).with_partition_index(from));
            break;
        }
        let to = meta.partitions.min(from.saturating_add(left as i32));
        let partitions = (from..to)
            .map(|p| {
                let a = meta.assignment(p, node);
                let offline: Vec<i32> = a.replicas.iter().copied().filter(|&r| !image.is_live(r, node)).collect();
                DescribeTopicPartitionsResponsePartition::default()
                    .with_error_code(if a.leader < 0 { code::LEADER_NOT_AVAILABLE } else { code::NONE })
                    .with_partition_index(p)
                    .with_leader_id(match a.leader {
                        none if none < 0 => BrokerId(none),
                        leader => BrokerId(shard.client_broker_id(leader, listener, name, p)),
                    })
                    .with_leader_epoch(a.leader_epoch)
                    .with_replica_nodes(ids(&a.replicas, name, p))
                    .with_isr_nodes(ids(&a.isr, name, p))
                    .with_eligible_leader_replicas(Some(ids(&a.elr, name, p)))
                    .with_last_known_elr(Some(Vec::new()))
                    .with_offline_replicas(ids(&offline, name, p))
            })
            .collect::<Vec<_>>();
        left -= partitions.len();
        response.topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(TopicName(s(name.clone()))))
                .with_topic_id(meta.id)
                .with_is_internal(name.starts_with("__"))
                .with_partitions(partitions)
                .with_topic_authorized_operations(authorized(caller, Resource::Topic, name, true)),
        );
        if to < meta.partitions {
            response.next_cursor =
                Some(Cursor::default().with_topic_name(TopicName(s(name.clone()))).with_partition_index(to));
            break;
        }
    }
    response
}
