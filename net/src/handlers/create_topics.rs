//! CreateTopics, with `validate_only`, default partition counts (-1) and the resulting
//! configs (v5+).

use std::collections::{BTreeMap, HashSet};
use std::rc::Rc;

use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse, RequestHeader};
use kafka_protocol::protocol::VersionRange;

use super::s;
use crate::configs::{effective, TOPIC_CONFIGS};
use crate::errors::code;
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
    let mut response = CreateTopicsResponse::default();
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let mut result = CreatableTopicResult::default();
        result.name = topic.name.clone();
        result.num_partitions = -1;
        result.replication_factor = -1;
        let partitions = if topic.num_partitions == -1 {
            if topic.assignments.is_empty() {
                shard.settings.num_partitions
            } else {
                topic.assignments.len() as i32
            }
        } else {
            topic.num_partitions
        };
        let replication_factor = if topic.replication_factor == -1 { 1 } else { topic.replication_factor };
        let mut configs = BTreeMap::new();
        let mut outcome: Result<(), (i16, String)> = Ok(());
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
        if outcome.is_ok() {
            outcome = if request.validate_only {
                topics::validate_create(shard, &name, partitions, replication_factor, &configs)
            } else {
                topics::create_topic(shard, &name, partitions, replication_factor, configs.clone()).await.map(|meta| {
                    result.topic_id = meta.id;
                })
            };
        }
        match outcome {
            Ok(()) => {
                result.error_message = None;
                result.num_partitions = partitions;
                result.replication_factor = replication_factor;
                result.configs = Some(
                    TOPIC_CONFIGS
                        .iter()
                        .filter_map(|def| {
                            let (value, source) = effective(def.name, &configs, &shard.settings.topic_defaults)?;
                            let mut c = CreatableTopicConfigs::default();
                            c.name = s(def.name);
                            c.value = Some(s(value));
                            c.config_source = source as i8;
                            Some(c)
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
