//! DescribeConfigs for topics (every Kafka 4.x topic config, with its source, type,
//! synonyms and documentation), for this broker (its settings under Kafka's names) and
//! for groups (every Kafka 4.4 group config, `group::configs`).

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse, RequestHeader};
use kafka_protocol::protocol::VersionRange;
use skein_control::broker_configs::{effective_topic_config, DYNAMIC_BROKER_CONFIGS};
use skein_control::configs::{broker_value, ConfigSource, ConfigType, TOPIC_CONFIGS};
use skein_control::errors::code;

use super::s;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 1, max: 4 };

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
pub const RESOURCE_GROUP: i8 = 32;
pub const RESOURCE_CLIENT_METRICS: i8 = 16;

/// One described config, before it is shaped for the request's version.
struct Entry {
    name: String,
    value: String,
    source: ConfigSource,
    read_only: bool,
    /// A password: described without its value, as Kafka does.
    sensitive: bool,
    kind: ConfigType,
    doc: String,
    /// (name, value, source), most specific first.
    synonyms: Vec<(String, String, ConfigSource)>,
}

pub fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: DescribeConfigsRequest,
    caller: &crate::authorize::Caller,
) -> DescribeConfigsResponse {
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
        let denied = crate::authorize::config_denied(
            caller,
            resource.resource_type,
            &name,
            crate::authorize::Op::DescribeConfigs,
        );
        let entries: Vec<Entry> = match resource.resource_type {
            _ if denied.is_some() => {
                let (error, message) = denied.unwrap_or_default();
                result.error_code = error;
                result.error_message = Some(s(message));
                Vec::new()
            }
            RESOURCE_TOPIC => match image.topic(&name) {
                Some(meta) => topic_configs(&meta.configs, &shard.topic_default_layers()),
                None => {
                    result.error_code = code::UNKNOWN_TOPIC_OR_PARTITION;
                    result.error_message = Some(s(format!("Topic {name} does not exist")));
                    Vec::new()
                }
            },
            RESOURCE_BROKER if name.is_empty() || name == shard.settings.node_id.to_string() => broker_configs(shard),
            RESOURCE_GROUP if name.is_empty() => {
                result.error_code = code::INVALID_REQUEST;
                result.error_message = Some(s("Group name must not be empty"));
                Vec::new()
            }
            RESOURCE_GROUP => group_configs(shard, &image, &name),
            RESOURCE_CLIENT_METRICS => crate::client_metrics::describe(image.client_metrics.get(&name))
                .into_iter()
                .map(|(name, value, set, kind, doc)| Entry {
                    name: name.to_string(),
                    // A value the resource sets is its own synonym, as on Kafka.
                    synonyms: match set {
                        true => vec![(name.to_string(), value.clone(), ConfigSource::ClientMetrics)],
                        false => Vec::new(),
                    },
                    value,
                    source: if set { ConfigSource::ClientMetrics } else { ConfigSource::Default },
                    read_only: false,
                    sensitive: false,
                    kind,
                    doc: doc.to_string(),
                })
                .collect(),
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
        for entry in entries.into_iter().filter(|e| wanted(&e.name)) {
            let mut out = DescribeConfigsResourceResult::default();
            out.name = s(entry.name);
            let sensitive = entry.sensitive;
            out.value = (!sensitive).then(|| s(entry.value));
            out.is_sensitive = sensitive;
            out.read_only = entry.read_only;
            out.config_source = entry.source as i8;
            if request.include_synonyms {
                out.synonyms = entry
                    .synonyms
                    .into_iter()
                    .map(|(name, value, source)| {
                        DescribeConfigsSynonym::default()
                            .with_name(s(name))
                            .with_value((!sensitive).then(|| s(value)))
                            .with_source(source as i8)
                    })
                    .collect();
            }
            if version >= 3 {
                out.config_type = entry.kind as i8;
                if request.include_documentation {
                    out.documentation = Some(s(entry.doc));
                }
            }
            result.configs.push(out);
        }
        response.results.push(result);
    }
    response
}

/// Every topic config with its effective value; synonyms as Kafka lists them: the
/// topic override, then the broker-level configs (this broker's dynamic value, the
/// cluster's, the static one), then the default.
fn topic_configs(
    overrides: &BTreeMap<String, String>,
    layers: &[(ConfigSource, BTreeMap<String, String>)],
) -> Vec<Entry> {
    TOPIC_CONFIGS
        .iter()
        .map(|def| {
            let (value, source) = effective_topic_config(def, overrides, layers);
            let broker_name = def.broker_name.unwrap_or(def.name).to_string();
            let mut synonyms = Vec::new();
            if let Some(v) = overrides.get(def.name) {
                synonyms.push((def.name.to_string(), v.clone(), ConfigSource::DynamicTopic));
            }
            for (source, layer) in layers {
                if let Some(v) = layer.get(def.name) {
                    synonyms.push((broker_name.clone(), v.clone(), *source));
                }
            }
            synonyms.push((broker_name, def.default.to_string(), ConfigSource::Default));
            Entry {
                name: def.name.to_string(),
                value,
                source,
                read_only: false,
                sensitive: false,
                kind: def.kind,
                doc: def.documentation(),
                synonyms,
            }
        })
        .collect()
}

/// Every config of group `name` (which need not exist yet, as in Kafka).
fn group_configs(shard: &Shard, image: &skein_control::metadata::MetadataImage, name: &str) -> Vec<Entry> {
    let broker = skein_coordinator::group::configs::broker_values(&shard.coordinators.groups.consumer_settings.get());
    skein_coordinator::group::configs::describe(image, name, &broker)
        .into_iter()
        .map(|(def, value, source, synonyms)| Entry {
            name: def.name.to_string(),
            value,
            source,
            read_only: false,
            sensitive: false,
            kind: def.kind,
            doc: def.documentation(),
            synonyms,
        })
        .collect()
}

const GROUP_DELAY: &str = "How long a new classic group waits for more members before its first rebalance.";
const KIP_848: &str = "A setting of consumer-protocol (KIP-848) groups.";

/// The node's settings under Kafka's broker config names, the broker-level topic
/// defaults (`log.retention.ms`, ...) and Kafka 4.4's dynamic broker configs
/// (`broker_configs`). Only the dynamic ones can change without a restart; the others
/// are read-only.
fn broker_configs(shard: &Shard) -> Vec<Entry> {
    let settings = &shard.settings;
    let node = |name: &str, value: String, kind: ConfigType, doc: &str| Entry {
        name: name.to_string(),
        value: value.clone(),
        source: ConfigSource::StaticBroker,
        read_only: true,
        sensitive: false,
        kind,
        doc: doc.to_string(),
        synonyms: vec![(name.to_string(), value, ConfigSource::StaticBroker)],
    };
    let listener = format!("PLAINTEXT://{}:{}", settings.advertised_host, settings.advertised_port);
    let nodes = [
        ("node.id", settings.node_id.to_string(), ConfigType::Int, "This node's id."),
        ("broker.id", settings.node_id.to_string(), ConfigType::Int, "The node id, under its pre-KRaft name."),
        ("advertised.listeners", listener.clone(), ConfigType::List, "The address given to clients."),
        ("listeners", listener, ConfigType::List, "The Kafka listener."),
        ("process.roles", "broker,controller".into(), ConfigType::List, "One process is broker and controller."),
        ("auto.create.topics.enable", settings.auto_create_topics.to_string(), ConfigType::Boolean, "Auto-creation."),
        ("num.partitions", settings.num_partitions.to_string(), ConfigType::Int, "Partitions of new topics."),
        ("socket.request.max.bytes", settings.socket_request_max_bytes.to_string(), ConfigType::Int, "Largest frame."),
        ("log.dirs", log_dirs_text(settings), ConfigType::List, "The log directories (--log-dirs)."),
        (
            "group.initial.rebalance.delay.ms",
            settings.group_initial_rebalance_delay_ms.to_string(),
            ConfigType::Int,
            GROUP_DELAY,
        ),
        (
            "group.consumer.heartbeat.interval.ms",
            settings.group_consumer_heartbeat_interval_ms.to_string(),
            ConfigType::Int,
            KIP_848,
        ),
        (
            "group.consumer.session.timeout.ms",
            settings.group_consumer_session_timeout_ms.to_string(),
            ConfigType::Int,
            KIP_848,
        ),
        ("group.consumer.max.size", settings.group_consumer_max_size.to_string(), ConfigType::Int, KIP_848),
        ("group.max.size", settings.group_max_size.to_string(), ConfigType::Int, "Members of a classic group."),
        ("offsets.retention.minutes", settings.offsets_retention_minutes.to_string(), ConfigType::Int, "Offsets kept."),
        ("max.connections", settings.connections.configured().0.to_string(), ConfigType::Int, "Connections at once."),
        ("max.connections.per.ip", settings.connections.configured().1.to_string(), ConfigType::Int, "Per address."),
    ];
    let mut out: Vec<Entry> = nodes.into_iter().map(|(name, value, kind, doc)| node(name, value, kind, doc)).collect();
    if let Some(rack) = &settings.rack {
        out.push(node("broker.rack", rack.clone(), ConfigType::String, "This broker's rack."));
    }
    for def in TOPIC_CONFIGS {
        let Some(name) = def.broker_name else { continue };
        let (value, source) = broker_value(def, &settings.topic_defaults);
        let mut synonyms = Vec::new();
        if source == ConfigSource::StaticBroker {
            synonyms.push((name.to_string(), value.clone(), ConfigSource::StaticBroker));
        }
        synonyms.push((name.to_string(), def.default.to_string(), ConfigSource::Default));
        out.push(Entry {
            name: name.to_string(),
            value,
            source,
            read_only: true,
            sensitive: false,
            kind: def.kind,
            doc: format!("The default of the topic config {} for every topic. {}", def.name, def.documentation()),
            synonyms,
        });
    }
    // Kafka 4.4's dynamic configs: this broker's own value, else the cluster default,
    // else the static value, else Kafka's default. One that Skein also reads at start
    // (a broker-level topic default, `max.connections`, ...) keeps that value as its
    // static synonym.
    let image = shard.image();
    for config in DYNAMIC_BROKER_CONFIGS {
        let name = config.name;
        let set_for = |broker: &str| image.broker_configs.get(broker).and_then(|c| c.get(name)).cloned();
        let statics = out.iter().position(|e| e.name == name).map(|i| out.remove(i));
        let mut synonyms = Vec::new();
        if let Some(value) = set_for(&settings.node_id.to_string()) {
            synonyms.push((name.to_string(), value, ConfigSource::DynamicBroker));
        }
        if let Some(value) = set_for("") {
            synonyms.push((name.to_string(), value, ConfigSource::DynamicDefaultBroker));
        }
        match statics {
            Some(statics) => synonyms.extend(statics.synonyms.into_iter().filter(|(n, _, _)| n == name)),
            None => {
                synonyms.push((name.to_string(), config.default.unwrap_or_default().to_string(), ConfigSource::Default))
            }
        }
        let (_, value, source) = synonyms[0].clone();
        out.push(Entry {
            name: name.to_string(),
            value,
            source,
            read_only: false,
            sensitive: config.kind == ConfigType::Password,
            kind: config.kind,
            doc: config.doc.to_string(),
            synonyms,
        });
    }
    out
}

/// `log.dirs` as Kafka describes it: the paths, comma-separated.
fn log_dirs_text(settings: &crate::shard::NodeSettings) -> String {
    let dirs = settings.log_dirs.dirs().iter().map(|d| d.path().display().to_string());
    dirs.collect::<Vec<_>>().join(",")
}
