//! IncrementalAlterConfigs (KIP-339) for topics: SET, DELETE, APPEND and SUBTRACT
//! (the last two for list configs: `cleanup.policy`); for brokers, SET and DELETE of
//! their dynamic configs (`configs::DYNAMIC_BROKER_CONFIGS`); for groups, SET and
//! DELETE of their configs (`group::configs`), as Kafka 4.4 allows.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use kafka_protocol::protocol::VersionRange;
use skein_control::configs::config_def;
use skein_control::errors::code;
use skein_control::metadata::Refusal;

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_CLIENT_METRICS, RESOURCE_GROUP, RESOURCE_TOPIC};
use super::s;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 1 };

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

pub async fn handle(
    shard: &Rc<Shard>,
    request: IncrementalAlterConfigsRequest,
    caller: &crate::authorize::Caller,
) -> IncrementalAlterConfigsResponse {
    let mut response = IncrementalAlterConfigsResponse::default();
    for resource in request.resources {
        let mut result = AlterConfigsResourceResponse::default();
        result.resource_type = resource.resource_type;
        result.resource_name = resource.resource_name.clone();
        let name = resource.resource_name.to_string();
        let denied =
            crate::authorize::config_denied(caller, resource.resource_type, &name, crate::authorize::Op::AlterConfigs);
        let outcome: Result<(), Refusal> = async {
            if let Some(denied) = denied {
                return Err(denied);
            }
            if resource.resource_type == RESOURCE_BROKER {
                let mut configs = shard.image().broker_configs.get(&name).cloned().unwrap_or_default();
                set_and_delete(&mut configs, &resource.configs, |_, key| {
                    format!("Config value append is not allowed for config key: {key}")
                })?;
                return crate::topics::set_broker_configs(shard, &name, configs, request.validate_only).await;
            }
            if resource.resource_type == RESOURCE_GROUP {
                let mut configs = shard.image().group_configs.get(&name).cloned().unwrap_or_default();
                // Kafka 4.4 refuses APPEND and SUBTRACT for every group config, lists included.
                set_and_delete(&mut configs, &resource.configs, |op, key| {
                    let op = if op == APPEND { "APPEND" } else { "SUBTRACT" };
                    format!("Can't {op} to key {key} because its type is not LIST.")
                })?;
                return crate::topics::set_group_configs(shard, &name, configs, request.validate_only).await;
            }
            if resource.resource_type == RESOURCE_CLIENT_METRICS {
                let mut configs = shard.image().client_metrics.get(&name).cloned().unwrap_or_default();
                set_and_delete(&mut configs, &resource.configs, |_, key| {
                    format!("Config value append is not allowed for config key: {key}")
                })?;
                return crate::topics::set_client_metrics(shard, &name, configs, request.validate_only).await;
            }
            if resource.resource_type != RESOURCE_TOPIC {
                let message = "Only topic, broker, group and client metrics configs can be altered";
                return Err((code::INVALID_REQUEST, message.to_string()));
            }
            let image = shard.image();
            let meta = image
                .topic(&name)
                .ok_or((code::UNKNOWN_TOPIC_OR_PARTITION, format!("Topic {name} does not exist.")))?;
            let mut configs = meta.configs.clone();
            for c in &resource.configs {
                let key = c.name.to_string();
                let def =
                    config_def(&key).ok_or((code::INVALID_CONFIG, format!("Unknown topic config name: {key}")))?;
                let value = c.value.as_ref().map(|v| v.to_string());
                match c.config_operation {
                    SET => {
                        let v = value.ok_or((code::INVALID_REQUEST, format!("Null value for SET of {key}")))?;
                        configs.insert(key, v);
                    }
                    DELETE => {
                        configs.remove(&key);
                    }
                    APPEND | SUBTRACT if key == "cleanup.policy" => {
                        let current = configs.get(&key).cloned().unwrap_or_else(|| def.default.to_string());
                        let mut items: Vec<String> =
                            current.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect();
                        for item in
                            value.unwrap_or_default().split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty())
                        {
                            if c.config_operation == APPEND {
                                if !items.contains(&item) {
                                    items.push(item);
                                }
                            } else {
                                items.retain(|x| *x != item);
                            }
                        }
                        configs.insert(key, items.join(","));
                    }
                    APPEND | SUBTRACT => {
                        return Err((
                            code::INVALID_CONFIG,
                            format!("Config value append is not allowed for config key: {key}"),
                        ))
                    }
                    other => return Err((code::INVALID_REQUEST, format!("Unknown config operation {other}"))),
                }
            }
            crate::topics::set_topic_configs(shard, &name, configs, request.validate_only).await
        }
        .await;
        if let Err((error, message)) = outcome {
            result.error_code = error;
            result.error_message = Some(s(message));
        }
        response.responses.push(result);
    }
    response
}

/// Applies the SET and DELETE operations of `ops` to `configs`; APPEND and SUBTRACT
/// are refused with INVALID_CONFIG and the message `refusal(operation, key)` gives.
fn set_and_delete(
    configs: &mut BTreeMap<String, String>,
    ops: &[AlterableConfig],
    refusal: impl Fn(i8, &str) -> String,
) -> Result<(), Refusal> {
    for c in ops {
        let key = c.name.to_string();
        match (c.config_operation, &c.value) {
            (SET, Some(value)) => {
                configs.insert(key, value.to_string());
            }
            (SET, None) => return Err((code::INVALID_REQUEST, format!("Null value for SET of {key}"))),
            (DELETE, _) => {
                configs.remove(&key);
            }
            (APPEND | SUBTRACT, _) => return Err((code::INVALID_CONFIG, refusal(c.config_operation, &key))),
            (other, _) => return Err((code::INVALID_REQUEST, format!("Unknown config operation {other}"))),
        }
    }
    Ok(())
}
