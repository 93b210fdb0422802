//! Metadata: the registered brokers (this node always among them), the active
//! controller, and topics with their partitions' leaders, replicas and ISR as the
//! controller assigned them. Unknown topics are created when the client allows it
//! and `auto.create.topics.enable` is on, with `num.partitions` partitions.

use std::rc::Rc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, RequestHeader, TopicName};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_control::metadata::{validate_topic_name, TopicMeta};

use super::s;
use crate::authorize::{Caller, Op, TOPIC_AUTHORIZATION_FAILED};
use crate::operations::{authorized, Resource, NOT_REQUESTED};
use crate::shard::{BrokerAddress, Shard};

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 13 };

pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: MetadataRequest,
    listener: &str,
    caller: &Caller,
) -> MetadataResponse {
    let version = header.request_api_version;
    let settings = &shard.settings;
    // Before v4 every Metadata request may create topics.
    let allow_auto_create = version < 4 || request.allow_auto_topic_creation;
    let include_operations = request.include_topic_authorized_operations;
    let topic_response = |shard: &Shard, meta: &TopicMeta| {
        let mut topic = topic_response(shard, meta, listener);
        topic.topic_authorized_operations = authorized(caller, Resource::Topic, &meta.name, include_operations);
        topic
    };
    // All topics: those the caller may describe, the others left out, as in Kafka.
    let visible = |meta: &&TopicMeta| caller.topic(Op::Describe, &meta.name);
    let mut topics = Vec::new();
    match request.topics {
        // v0: an empty list means all topics; later versions use null for that.
        None => topics.extend(shard.image().topics.values().filter(visible).map(|t| topic_response(shard, t))),
        Some(list) if list.is_empty() && version == 0 => {
            topics.extend(shard.image().topics.values().filter(visible).map(|t| topic_response(shard, t)))
        }
        Some(list) => {
            for wanted in list {
                let name = wanted.name.as_ref().map(|n| n.0.to_string());
                let image = shard.image();
                let found = match &name {
                    Some(n) => image.topic(n).cloned(),
                    None => image.topic_by_id(wanted.topic_id).cloned(),
                };
                let response = match (found, name) {
                    // A topic named by id that the caller may not see is unknown to it.
                    (Some(meta), None) if !visible(&&meta) => {
                        error_topic(None, wanted.topic_id, code::UNKNOWN_TOPIC_ID)
                    }
                    (Some(meta), Some(n)) if !visible(&&meta) => {
                        error_topic(Some(n), wanted.topic_id, TOPIC_AUTHORIZATION_FAILED)
                    }
                    (Some(meta), _) => topic_response(shard, &meta),
                    (None, Some(n)) => match validate_topic_name(&n) {
                        Err(_) => error_topic(Some(n), wanted.topic_id, code::INVALID_TOPIC_EXCEPTION),
                        // Auto-creation needs CREATE, and the caller must be allowed to
                        // learn the topic does not exist.
                        Ok(()) if !caller.topic(Op::Describe, &n) => {
                            error_topic(Some(n), wanted.topic_id, TOPIC_AUTHORIZATION_FAILED)
                        }
                        Ok(()) if allow_auto_create && settings.auto_create_topics && !caller.may_create_topic(&n) => {
                            error_topic(Some(n), wanted.topic_id, TOPIC_AUTHORIZATION_FAILED)
                        }
                        Ok(()) if allow_auto_create && settings.auto_create_topics => {
                            match crate::topics::auto_create(shard, &n).await {
                                Ok(meta) => topic_response(shard, &meta),
                                Err((c, _)) => error_topic(Some(n), wanted.topic_id, c),
                            }
                        }
                        Ok(()) => error_topic(Some(n), wanted.topic_id, code::UNKNOWN_TOPIC_OR_PARTITION),
                    },
                    (None, None) => error_topic(None, wanted.topic_id, code::UNKNOWN_TOPIC_ID),
                };
                topics.push(response);
            }
        }
    }
    let mut response = MetadataResponse::default();
    response.brokers = shard
        .brokers(listener)
        .into_iter()
        .map(|BrokerAddress { id, host, port, rack }| {
            let mut broker = MetadataResponseBroker::default();
            broker.node_id = BrokerId(id);
            broker.host = s(host);
            broker.port = port as i32;
            broker.rack = rack.map(s);
            broker
        })
        .collect();
    response.cluster_id = Some(s(settings.cluster_id.clone()));
    let controller = settings.active_controller.load(std::sync::atomic::Ordering::Relaxed);
    response.controller_id = BrokerId(shard.client_controller_id(controller, listener));
    response.topics = topics;
    let include_cluster = (8..=10).contains(&version) && request.include_cluster_authorized_operations;
    response.cluster_authorized_operations = authorized(caller, Resource::Cluster, "", include_cluster);
    response
}

fn topic_response(shard: &Shard, meta: &TopicMeta, listener: &str) -> MetadataResponseTopic {
    let node = shard.settings.node_id;
    let image = shard.image();
    let mut topic = MetadataResponseTopic::default();
    topic.name = Some(TopicName(s(meta.name.clone())));
    topic.topic_id = meta.id;
    topic.is_internal = meta.name.starts_with("__");
    topic.topic_authorized_operations = NOT_REQUESTED;
    topic.partitions = (0..meta.partitions)
        .map(|p| {
            let mut partition = MetadataResponsePartition::default();
            let assignment = meta.assignment(p, node);
            let id = |r: i32| BrokerId(shard.client_broker_id(r, listener, &meta.name, p));
            partition.partition_index = p;
            partition.leader_id = match assignment.leader {
                none if none < 0 => BrokerId(none),
                leader => id(leader),
            };
            partition.leader_epoch = assignment.leader_epoch;
            partition.replica_nodes = assignment.replicas.iter().map(|&r| id(r)).collect();
            partition.isr_nodes = assignment.isr.iter().map(|&r| id(r)).collect();
            partition.offline_replicas =
                assignment.replicas.iter().filter(|&&r| !image.is_live(r, node)).map(|&r| id(r)).collect();
            // No live leader (every in-sync replica is gone): offline until one returns.
            if assignment.leader < 0 {
                partition.error_code = code::LEADER_NOT_AVAILABLE;
            }
            partition
        })
        .collect();
    topic
}

fn error_topic(name: Option<String>, id: uuid::Uuid, error_code: i16) -> MetadataResponseTopic {
    let mut topic = MetadataResponseTopic::default();
    topic.error_code = error_code;
    topic.name = name.map(|n| TopicName(s(n)));
    topic.topic_id = id;
    topic.topic_authorized_operations = NOT_REQUESTED;
    topic
}
