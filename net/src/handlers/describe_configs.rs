//! DescribeConfigs for topics (every config Skein honours, with its source) and for
//! this broker (its node settings).

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::describe_configs_response::{DescribeConfigsResourceResult, DescribeConfigsResult};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse, RequestHeader};
use kafka_protocol::protocol::VersionRange;

use super::s;
use crate::errors::code;
use crate::metadata::{effective, ConfigSource, TOPIC_CONFIGS};
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 1, max: 4 };

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;

/// DescribeConfigs' config types (KIP-336).
pub fn config_type(name: &str) -> i8 {
    const BOOLEAN: i8 = 1;
    const STRING: i8 = 2;
    const INT: i8 = 3;
    const LONG: i8 = 5;
    const LIST: i8 = 7;
    match name {
        "cleanup.policy" => LIST,
        "message.timestamp.type" | "advertised.listeners" | "listeners" | "log.dirs" => STRING,
        "auto.create.topics.enable" => BOOLEAN,
        "segment.bytes"
        | "segment.index.bytes"
        | "index.interval.bytes"
        | "max.message.bytes"
        | "min.insync.replicas"
        | "num.partitions"
        | "socket.request.max.bytes"
        | "node.id" => INT,
        _ => LONG,
    }
}

pub fn handle(shard: &Rc<Shard>, header: &RequestHeader, request: DescribeConfigsRequest) -> DescribeConfigsResponse {
    let version = header.request_api_version;
    let mut response = DescribeConfigsResponse::default();
    let image = shard.image();
    for resource in request.resources {
        let mut result = DescribeConfigsResult::default();
        result.resource_type = resource.resource_type;
        result.resource_name = resource.resource_name.clone();
        let name = resource.resource_name.to_string();
        // Null (or an empty list) asks for every config.
        let keys: Option<Vec<String>> =
            resource.configuration_keys.filter(|k| !k.is_empty()).map(|k| k.iter().map(|x| x.to_string()).collect());
        let wanted = |config: &str| keys.as_ref().is_none_or(|k| k.iter().any(|x| x == config));
        let entries: Vec<(String, String, ConfigSource, bool)> = match resource.resource_type {
            RESOURCE_TOPIC => match image.topic(&name) {
                Some(meta) => TOPIC_CONFIGS
                    .iter()
                    .filter(|d| wanted(d.name))
                    .filter_map(|d| {
                        effective(d.name, &meta.configs, &shard.settings.topic_defaults)
                            .map(|(v, src)| (d.name.to_string(), v, src, false))
                    })
                    .collect(),
                None => {
                    result.error_code = code::UNKNOWN_TOPIC_OR_PARTITION;
                    result.error_message = Some(s(format!("Topic {name} does not exist")));
                    Vec::new()
                }
            },
            RESOURCE_BROKER if name.is_empty() || name == shard.settings.node_id.to_string() => {
                broker_configs(shard).into_iter().filter(|(k, ..)| wanted(k)).collect()
            }
            RESOURCE_BROKER => {
                result.error_code = code::INVALID_REQUEST;
                result.error_message = Some(s(format!("Unexpected broker id, expected {}", shard.settings.node_id)));
                Vec::new()
            }
            other => {
                result.error_code = code::INVALID_REQUEST;
                result.error_message = Some(s(format!("Unsupported resource type {other}")));
                Vec::new()
            }
        };
        for (key, value, source, read_only) in entries {
            let mut entry = DescribeConfigsResourceResult::default();
            entry.name = s(key.clone());
            entry.value = Some(s(value));
            entry.read_only = read_only;
            entry.config_source = source as i8;
            if version >= 3 {
                entry.config_type = config_type(&key);
            }
            result.configs.push(entry);
        }
        response.results.push(result);
    }
    response
}

fn broker_configs(shard: &Shard) -> Vec<(String, String, ConfigSource, bool)> {
    let settings = &shard.settings;
    let mut out = vec![
        ("node.id".to_string(), settings.node_id.to_string(), ConfigSource::StaticBroker, true),
        (
            "advertised.listeners".to_string(),
            format!("PLAINTEXT://{}:{}", settings.advertised_host, settings.advertised_port),
            ConfigSource::StaticBroker,
            true,
        ),
        (
            "auto.create.topics.enable".to_string(),
            settings.auto_create_topics.to_string(),
            ConfigSource::StaticBroker,
            true,
        ),
        ("num.partitions".to_string(), settings.num_partitions.to_string(), ConfigSource::StaticBroker, true),
        (
            "socket.request.max.bytes".to_string(),
            settings.socket_request_max_bytes.to_string(),
            ConfigSource::StaticBroker,
            true,
        ),
        ("log.dirs".to_string(), settings.data_dir.display().to_string(), ConfigSource::StaticBroker, true),
    ];
    let none = BTreeMap::new();
    for def in TOPIC_CONFIGS {
        if let Some((value, source)) = effective(def.name, &none, &settings.topic_defaults) {
            out.push((def.name.to_string(), value, source, true));
        }
    }
    out
}
