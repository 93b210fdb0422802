//! CreateTopics, with `validate_only`, default partition counts (-1) and the resulting
//! configs (v5+).

use std::collections::{BTreeMap, HashSet};
use std::rc::Rc;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse, RequestHeader};
use kafka_protocol::protocol::VersionRange;
use skein_control::broker_configs::effective_topic_config;
use skein_control::configs::TOPIC_CONFIGS;
use skein_control::errors::code;
use skein_control::metadata::decide::NewTopic;
use skein_control::metadata::Refusal;

use super::s;
use crate::shard::Shard;
use crate::topics;

pub const VERSIONS: VersionRange = VersionRange { min: 2, max: 7 };

pub async fn handle(
    shard: &Rc<Shard>,
    _header: &RequestHeader,
    request: CreateTopicsRequest,
    caller: &crate::authorize::Caller,
) -> CreateTopicsResponse {
    let mut seen = HashSet::new();
    let duplicates: HashSet<String> =
        request.topics.iter().map(|t| t.name.0.to_string()).filter(|n| !seen.insert(n.clone())).collect();
    let mut planned: Vec<Planned> =
        request.topics.iter().map(|topic| plan(shard, topic, caller, &duplicates)).collect();
    // The topics that passed are created together: one decision, one metadata entry,
    // their partitions opened at once (Kafka's controller takes a request whole too).
    let passed: Vec<usize> = (0..planned.len()).filter(|&i| planned[i].outcome.is_ok()).collect();
    if request.validate_only {
        for &i in &passed {
            let p = &planned[i];
            let checked = topics::validate_create(
                shard,
                &p.topic.name,
                p.topic.partitions,
                p.topic.replication_factor,
                &p.topic.configs,
            );
            planned[i].outcome = checked;
        }
    } else if !passed.is_empty() {
        let wanted = passed.iter().map(|&i| planned[i].topic.clone()).collect();
        for (&i, created) in passed.iter().zip(topics::create_topics(shard, wanted).await) {
            planned[i].outcome = created.map(|meta| planned[i].result.topic_id = meta.id);
        }
    }
    let mut response = CreateTopicsResponse::default();
    let layers = shard.topic_default_layers();
    for Planned { mut result, topic, outcome } in planned {
        match outcome {
            Ok(()) => {
                result.error_message = None;
                result.num_partitions = topic.partitions;
                result.replication_factor = topic.replication_factor;
                result.configs = Some(
                    TOPIC_CONFIGS
                        .iter()
                        .map(|def| {
                            let (value, source) = effective_topic_config(def, &topic.configs, &layers);
                            let mut c = CreatableTopicConfigs::default();
                            c.name = s(def.name);
                            c.value = Some(s(value));
                            c.config_source = source as i8;
                            c
                        })
                        .collect(),
                );
            }
            Err((error, message)) => {
                result.error_code = error;
                result.error_message = Some(s(message));
            }
        }
        response.topics.push(result);
    }
    response
}

/// A topic of the request: what it asks for, its result so far, and whether it may
/// be created (checked alone, before the controller sees it).
struct Planned {
    result: CreatableTopicResult,
    topic: NewTopic,
    outcome: Result<(), Refusal>,
}

/// Reads one topic of the request and checks what needs no controller: null configs,
/// authorization, duplicates in the request, manual replica assignments.
fn plan(
    shard: &Shard,
    topic: &CreatableTopic,
    caller: &crate::authorize::Caller,
    duplicates: &HashSet<String>,
) -> Planned {
    let name = topic.name.0.to_string();
    let mut result = CreatableTopicResult::default();
    result.name = topic.name.clone();
    result.num_partitions = -1;
    result.replication_factor = -1;
    let partitions = match (topic.num_partitions, topic.assignments.is_empty()) {
        (-1, true) => shard.settings.num_partitions,
        (-1, false) => topic.assignments.len() as i32,
        (n, _) => n,
    };
    let replication_factor = if topic.replication_factor == -1 { 1 } else { topic.replication_factor };
    let mut configs = BTreeMap::new();
    let mut outcome: Result<(), Refusal> = Ok(());
    for config in &topic.configs {
        match &config.value {
            Some(v) => {
                configs.insert(config.name.to_string(), v.to_string());
            }
            None => {
                outcome = Err((
                    code::INVALID_CONFIG,
                    format!("Null value not supported for topic configs: {}", config.name.as_str()),
                ))
            }
        }
    }
    if !caller.may_create_topic(&name) {
        outcome = Err((crate::authorize::TOPIC_AUTHORIZATION_FAILED, "Authorization failed.".into()));
    } else if duplicates.contains(&name) {
        outcome = Err((
            code::INVALID_REQUEST,
            format!("Create topics request from client contains a duplicate topic {name}"),
        ));
    }
    let assignment_ok =
        topic.assignments.iter().all(|a| a.broker_ids.len() == 1 && a.broker_ids[0].0 == shard.settings.node_id)
            && (topic.assignments.is_empty() || topic.num_partitions == -1);
    if !assignment_ok && outcome.is_ok() {
        outcome = Err((
            code::INVALID_REPLICA_ASSIGNMENT,
            "Replica assignments must name this broker once per partition".into(),
        ));
    }
    Planned { result, topic: NewTopic { name, partitions, replication_factor, configs }, outcome }
}
