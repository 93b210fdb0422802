//! Cluster metadata as the broker's handlers see it: topics, their ids, partition
//! counts, config overrides and the partition-to-shard table.
//!
//! Control plane: one writer (`MetadataStore`, driven by shard 0) publishes immutable,
//! versioned `MetadataImage`s; every shard reads the latest `Arc` and never mutates it.
//! The single-node store persists the image as JSON, atomically (temp file, fsync,
//! rename, directory fsync). A cluster controller's metadata log replaces the store
//! behind the same `MetadataImage` type without touching the handlers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};
use skein_engine::{CleanupPolicy, LogConfig, TopicPartition};

/// One topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub name: String,
    /// Kafka's topic id (KIP-516), random v4.
    pub id: uuid::Uuid,
    pub partitions: i32,
    /// Topic-level config overrides, Kafka names to values.
    pub configs: BTreeMap<String, String>,
    /// Shard of each partition (index = partition).
    pub shards: Vec<usize>,
}

/// An immutable snapshot of the metadata, with a version that only grows.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MetadataImage {
    pub version: u64,
    pub topics: BTreeMap<String, TopicMeta>,
    /// Producer ids handed out up to (excluding) this one.
    pub next_producer_id: i64,
}

impl MetadataImage {
    pub fn topic(&self, name: &str) -> Option<&TopicMeta> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: uuid::Uuid) -> Option<&TopicMeta> {
        self.topics.values().find(|t| t.id == id)
    }

    /// The shard that owns a partition, if the partition exists.
    pub fn shard_of(&self, partition: &TopicPartition) -> Option<usize> {
        let topic = self.topics.get(&partition.topic)?;
        usize::try_from(partition.partition).ok().and_then(|p| topic.shards.get(p).copied())
    }
}

/// The default placement: partitions of a topic spread round-robin over the shards,
/// starting at a shard derived from the topic name so that topics do not all start on 0.
pub fn default_shard(topic: &str, partition: i32, shards: usize) -> usize {
    let start = crc32c::crc32c(topic.as_bytes()) as usize;
    start.wrapping_add(partition as usize) % shards
}

/// Why a topic name is invalid, in Kafka's words (`Topic.validate`).
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("Topic name is illegal, it can't be empty".into());
    }
    if name == "." || name == ".." {
        return Err("Topic name cannot be \".\" or \"..\"".into());
    }
    if name.len() > 249 {
        return Err(format!("Topic name is illegal, it can't be longer than 249 characters, topic name: {name}"));
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-') {
        return Err(format!(
            "Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// Where a config value comes from, with DescribeConfigs' source codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    DynamicTopic = 1,
    StaticBroker = 4,
    Default = 5,
}

/// A topic config Skein understands: its Kafka name, default and validation.
pub struct ConfigDef {
    pub name: &'static str,
    pub default: &'static str,
    pub validate: fn(&str) -> Result<(), String>,
}

fn long_at_least(min: i64) -> impl Fn(&str) -> Result<(), String> {
    move |v: &str| match v.trim().parse::<i64>() {
        Ok(n) if n >= min => Ok(()),
        Ok(_) => Err(format!("value must be at least {min}")),
        Err(_) => Err("value must be a long".into()),
    }
}

fn int_at_least(min: i64) -> impl Fn(&str) -> Result<(), String> {
    move |v: &str| match v.trim().parse::<i32>() {
        Ok(n) if n as i64 >= min => Ok(()),
        Ok(_) => Err(format!("value must be at least {min}")),
        Err(_) => Err("value must be an int".into()),
    }
}

/// Every topic config Skein honours, as Kafka names and defaults them.
pub const TOPIC_CONFIGS: &[ConfigDef] = &[
    ConfigDef {
        name: "cleanup.policy",
        default: "delete",
        validate: |v| CleanupPolicy::parse(v).map(|_| ()).map_err(|e| e.to_string()),
    },
    ConfigDef { name: "delete.retention.ms", default: "86400000", validate: |v| long_at_least(0)(v) },
    ConfigDef { name: "flush.messages", default: "9223372036854775807", validate: |v| long_at_least(1)(v) },
    ConfigDef { name: "flush.ms", default: "9223372036854775807", validate: |v| long_at_least(0)(v) },
    ConfigDef { name: "index.interval.bytes", default: "4096", validate: |v| int_at_least(0)(v) },
    ConfigDef { name: "max.message.bytes", default: "1048588", validate: |v| int_at_least(0)(v) },
    ConfigDef {
        name: "message.timestamp.type",
        default: "CreateTime",
        validate: |v| match v {
            "CreateTime" | "LogAppendTime" => Ok(()),
            _ => Err("value must be CreateTime or LogAppendTime".into()),
        },
    },
    ConfigDef { name: "min.insync.replicas", default: "1", validate: |v| int_at_least(1)(v) },
    ConfigDef { name: "retention.bytes", default: "-1", validate: |v| long_at_least(-1)(v) },
    ConfigDef { name: "retention.ms", default: "604800000", validate: |v| long_at_least(-1)(v) },
    ConfigDef { name: "segment.bytes", default: "1073741824", validate: |v| int_at_least(14)(v) },
    ConfigDef { name: "segment.index.bytes", default: "10485760", validate: |v| int_at_least(8)(v) },
    ConfigDef { name: "segment.ms", default: "604800000", validate: |v| long_at_least(1)(v) },
];

pub fn config_def(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Validates one topic config entry.
///
/// # Errors
/// A message for INVALID_CONFIG: unknown name or bad value.
pub fn validate_config(name: &str, value: &str) -> Result<(), String> {
    let def = config_def(name).ok_or_else(|| format!("Unknown topic config name: {name}"))?;
    (def.validate)(value).map_err(|why| format!("Invalid value {value} for configuration {name}: {why}"))
}

/// The effective value of a topic config and where it comes from.
pub fn effective(
    name: &str,
    overrides: &BTreeMap<String, String>,
    broker: &BTreeMap<String, String>,
) -> Option<(String, ConfigSource)> {
    let def = config_def(name)?;
    if let Some(v) = overrides.get(name) {
        return Some((v.clone(), ConfigSource::DynamicTopic));
    }
    if let Some(v) = broker.get(name) {
        return Some((v.clone(), ConfigSource::StaticBroker));
    }
    Some((def.default.to_owned(), ConfigSource::Default))
}

/// The engine's `LogConfig` for a topic: overrides, then broker defaults, then Kafka's.
pub fn log_config(overrides: &BTreeMap<String, String>, broker: &BTreeMap<String, String>) -> LogConfig {
    let get = |name: &str| effective(name, overrides, broker).map(|(v, _)| v).unwrap_or_default();
    let long = |name: &str| get(name).trim().parse::<i64>().unwrap_or(0);
    let capped = |name: &str| {
        let v = long(name);
        if v == i64::MAX {
            u64::MAX
        } else {
            v.max(0) as u64
        }
    };
    LogConfig {
        segment_bytes: long("segment.bytes").max(14) as u64,
        segment_ms: capped("segment.ms").max(1),
        segment_index_bytes: long("segment.index.bytes").max(8) as u64,
        index_interval_bytes: long("index.interval.bytes").max(0) as u64,
        retention_ms: long("retention.ms"),
        retention_bytes: long("retention.bytes"),
        cleanup_policy: CleanupPolicy::parse(&get("cleanup.policy")).unwrap_or(CleanupPolicy::DELETE),
        delete_retention_ms: long("delete.retention.ms"),
        max_message_bytes: long("max.message.bytes").clamp(1, i32::MAX as i64) as u32,
        flush_messages: capped("flush.messages").max(1),
        flush_ms: capped("flush.ms"),
    }
}

/// Whether the topic stamps batches with the broker's time.
pub fn log_append_time(overrides: &BTreeMap<String, String>, broker: &BTreeMap<String, String>) -> bool {
    effective("message.timestamp.type", overrides, broker).is_some_and(|(v, _)| v == "LogAppendTime")
}

/// A refused change: a Kafka error code and its message.
pub type Refusal = (i16, String);

/// The single writer of metadata on a single node: applies changes, persists them,
/// publishes new images.
pub struct MetadataStore {
    path: PathBuf,
    current: RwLock<Arc<MetadataImage>>,
}

impl MetadataStore {
    /// Loads the store under `data_dir`, or starts empty.
    ///
    /// # Errors
    /// A message when the file exists but cannot be read or parsed.
    pub fn open(data_dir: &Path) -> Result<MetadataStore, String> {
        let dir = data_dir.join("__skein_metadata");
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let path = dir.join("image.json");
        let image = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| format!("cannot parse {}: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                MetadataImage { next_producer_id: 1000, ..Default::default() }
            }
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        Ok(MetadataStore { path, current: RwLock::new(Arc::new(image)) })
    }

    /// The latest image. Cheap: one uncontended read lock and an `Arc` clone.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.current.read().expect("metadata lock").clone()
    }

    /// Applies `change` to a copy of the image, persists it, then publishes it.
    /// Blocks on the file write (small, rare: topic changes only).
    ///
    /// # Errors
    /// The change's own error, or a message when the image cannot be persisted (then
    /// nothing is published).
    pub fn update<T>(
        &self,
        change: impl FnOnce(&mut MetadataImage) -> Result<T, Refusal>,
    ) -> Result<(T, Arc<MetadataImage>), Refusal> {
        let mut guard = self.current.write().expect("metadata lock");
        let mut next = (**guard).clone();
        let result = change(&mut next)?;
        next.version += 1;
        let bytes =
            serde_json::to_vec_pretty(&next).map_err(|e| (crate::errors::code::UNKNOWN_SERVER_ERROR, e.to_string()))?;
        write_atomic(&self.path, &bytes)
            .map_err(|e| (crate::errors::code::KAFKA_STORAGE_ERROR, format!("cannot persist metadata: {e}")))?;
        let next = Arc::new(next);
        *guard = next.clone();
        Ok((result, next))
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let temp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&temp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temp, path)?;
    std::fs::File::open(path.parent().unwrap_or(Path::new(".")))?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Topic names are checked as Kafka checks them.
    #[test]
    fn topic_names() {
        let check = |name: &str, ok: bool| assert_eq!(validate_topic_name(name).is_ok(), ok, "{name}");
        check("orders", true);
        check("a.b_c-D9", true);
        check("", false);
        check(".", false);
        check("..", false);
        check("has space", false);
        check("slash/no", false);
        check("ünicode", false);
        check(&"x".repeat(249), true);
        check(&"x".repeat(250), false);
    }

    // Config values are validated with Kafka's names and bounds, and become LogConfig.
    #[test]
    fn configs() {
        assert!(validate_config("retention.ms", "-1").is_ok());
        assert!(validate_config("retention.ms", "-2").is_err());
        assert!(validate_config("retention.ms", "soon").is_err());
        assert!(validate_config("cleanup.policy", "compact,delete").is_ok());
        assert!(validate_config("cleanup.policy", "shred").is_err());
        assert!(validate_config("no.such.config", "1").is_err());
        assert!(validate_config("message.timestamp.type", "LogAppendTime").is_ok());
        let overrides = BTreeMap::from([("segment.bytes".to_string(), "1024".to_string())]);
        let broker = BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]);
        let config = log_config(&overrides, &broker);
        assert_eq!(config.segment_bytes, 1024);
        assert_eq!(config.retention_ms, 1000);
        assert_eq!(config.flush_messages, u64::MAX);
        assert_eq!(effective("retention.ms", &overrides, &broker), Some(("1000".into(), ConfigSource::StaticBroker)));
        assert_eq!(effective("segment.bytes", &overrides, &broker), Some(("1024".into(), ConfigSource::DynamicTopic)));
        assert_eq!(effective("segment.ms", &overrides, &broker).unwrap().1, ConfigSource::Default);
    }
}
