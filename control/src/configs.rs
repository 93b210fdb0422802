//! Topic configs as Apache Kafka 4.x defines them: every name, type, default and
//! validation, the broker-level name each one falls back to (`log.retention.ms` for
//! `retention.ms`), and what Skein does with it.
//!
//! A config Skein accepts but does not act on yet says so in its documentation (which
//! DescribeConfigs returns from v3) and in README's config table: it is stored, shown
//! and kept across restarts, never silently dropped.

use std::collections::BTreeMap;

use skein_engine::{CleanupPolicy, LogConfig};

/// DescribeConfigs' config types (KIP-336).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    Boolean = 1,
    String = 2,
    Int = 3,
    Short = 4,
    Long = 5,
    Double = 6,
    List = 7,
    Class = 8,
    Password = 9,
}

/// Where a config value comes from, with DescribeConfigs' source codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    DynamicTopic = 1,
    DynamicBroker = 2,
    DynamicDefaultBroker = 3,
    StaticBroker = 4,
    Default = 5,
    /// A client-metrics resource's config (Kafka's DYNAMIC_CLIENT_METRICS_CONFIG).
    ClientMetrics = 7,
    /// A group's override (Kafka's DYNAMIC_GROUP_CONFIG).
    Group = 8,
}

/// What Skein does with a config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Applied as Kafka applies it.
    Acted,
    /// Accepted, validated, stored and described, but not acted on yet; says why.
    Stored(&'static str),
}

/// A topic config: its Kafka name, type, default, validation, broker-level synonym and
/// documentation.
#[derive(Debug)]
pub struct ConfigDef {
    pub name: &'static str,
    pub kind: ConfigType,
    pub default: &'static str,
    pub validate: fn(&str) -> Result<(), String>,
    /// The broker config that sets the default for every topic, where Kafka has one.
    pub broker_name: Option<&'static str>,
    pub doc: &'static str,
    pub support: Support,
}

impl ConfigDef {
    /// The documentation DescribeConfigs returns: Kafka's meaning, then what Skein does.
    pub fn documentation(&self) -> String {
        match self.support {
            Support::Acted => self.doc.to_string(),
            Support::Stored(why) => {
                format!("{} Skein stores this setting but does not act on it yet: {why}.", self.doc)
            }
        }
    }
}

fn long_at_least(min: i64) -> impl Fn(&str) -> Result<(), String> {
    move |v: &str| match v.trim().parse::<i64>() {
        Ok(n) if n >= min => Ok(()),
        Ok(_) => Err(format!("Value must be at least {min}")),
        Err(_) => Err("Expected value to be a 64-bit integer (long)".into()),
    }
}

fn int_between(min: i64, max: i64) -> impl Fn(&str) -> Result<(), String> {
    move |v: &str| match v.trim().parse::<i32>() {
        Ok(n) if (min..=max).contains(&(n as i64)) => Ok(()),
        Ok(_) if max == i32::MAX as i64 => Err(format!("Value must be at least {min}")),
        Ok(_) => Err(format!("Value must be in [{min}, {max}]")),
        Err(_) => Err("Expected value to be a 32-bit integer".into()),
    }
}

fn int_at_least(min: i64) -> impl Fn(&str) -> Result<(), String> {
    int_between(min, i32::MAX as i64)
}

fn boolean(v: &str) -> Result<(), String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "false" => Ok(()),
        _ => Err("Expected value to be either true or false".into()),
    }
}

fn one_of(v: &str, allowed: &[&str]) -> Result<(), String> {
    if allowed.contains(&v.trim()) {
        Ok(())
    } else {
        Err(format!("String must be one of: {}", allowed.join(", ")))
    }
}

/// Kafka's throttled-replica list: empty, `*`, or `partition:broker` pairs.
fn throttled_replicas(v: &str) -> Result<(), String> {
    let v = v.trim();
    if v.is_empty() || v == "*" {
        return Ok(());
    }
    let pair = |item: &str| {
        let (p, b) = item.trim().split_once(':')?;
        p.parse::<i32>().ok()?;
        b.parse::<i32>().ok()
    };
    if v.split(',').all(|item| pair(item).is_some()) {
        Ok(())
    } else {
        Err("Should be a list of [PartitionId]:[BrokerId], or the wildcard *".into())
    }
}

const NO_AUTOMATIC_UNCLEAN: &str =
    "the controller never elects outside the ISR and ELR by itself; ElectLeaders with the unclean type does";
const TIERED: &str = "Skein has no tiered storage, so all data is local";

/// Every topic config of Apache Kafka 4.x, plus `message.downconversion.enable`
/// (removed in 4.0, still sent by older tools), sorted by name.
pub const TOPIC_CONFIGS: &[ConfigDef] = &[
    ConfigDef {
        name: "cleanup.policy",
        kind: ConfigType::List,
        default: "delete",
        validate: |v| CleanupPolicy::parse(v).map(|_| ()).map_err(|e| e.to_string()),
        broker_name: Some("log.cleanup.policy"),
        doc: "delete drops old segments by retention.ms and retention.bytes; compact keeps the last record of each key; both may be given.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "compression.gzip.level",
        kind: ConfigType::Int,
        default: "-1",
        validate: |v| match v.trim().parse::<i32>() {
            Ok(-1 | 1..=9) => Ok(()),
            Ok(_) => Err("Value must be -1 or in [1, 9]".into()),
            Err(_) => Err("Expected value to be a 32-bit integer".into()),
        },
        broker_name: Some("compression.gzip.level"),
        doc: "The gzip level the broker recompresses with when compression.type is gzip; -1 is the codec's default.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "compression.lz4.level",
        kind: ConfigType::Int,
        default: "9",
        validate: |v| int_between(1, 17)(v),
        broker_name: Some("compression.lz4.level"),
        doc: "The lz4 level the broker recompresses with when compression.type is lz4.",
        support: Support::Stored("lz4 batches are recompressed with the lz4_flex codec, which has one level"),
    },
    ConfigDef {
        name: "compression.type",
        kind: ConfigType::String,
        default: "producer",
        validate: |v| one_of(v, &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]),
        broker_name: Some("compression.type"),
        doc: "The codec batches are stored with: producer keeps each batch as the producer compressed it; a codec (or uncompressed) makes the broker recompress batches that use another.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "compression.zstd.level",
        kind: ConfigType::Int,
        default: "3",
        validate: |v| int_between(-131072, 22)(v),
        broker_name: Some("compression.zstd.level"),
        doc: "The zstd level the broker recompresses with when compression.type is zstd.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "delete.retention.ms",
        kind: ConfigType::Long,
        default: "86400000",
        validate: |v| long_at_least(0)(v),
        broker_name: Some("log.cleaner.delete.retention.ms"),
        doc: "How long a compacted topic keeps tombstones (records with a null value) after compaction.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "errors.deadletterqueue.group.enable",
        kind: ConfigType::Boolean,
        default: "false",
        validate: boolean,
        broker_name: None,
        doc: "Whether share groups may write records they reject or give up on to this topic, as their dead-letter topic (KIP-1191).",
        support: Support::Acted,
    },
    ConfigDef {
        name: "file.delete.delay.ms",
        kind: ConfigType::Long,
        default: "60000",
        validate: |v| long_at_least(0)(v),
        broker_name: Some("log.segment.delete.delay.ms"),
        doc: "How long a segment removed by retention stays on disk before its files are deleted.",
        support: Support::Stored("segments are deleted as soon as retention removes them"),
    },
    ConfigDef {
        name: "flush.messages",
        kind: ConfigType::Long,
        default: "9223372036854775807",
        validate: |v| long_at_least(1)(v),
        broker_name: Some("log.flush.interval.messages"),
        doc: "fdatasync once this many records are unflushed; 1 syncs every write before it is acknowledged.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "flush.ms",
        kind: ConfigType::Long,
        default: "9223372036854775807",
        validate: |v| long_at_least(0)(v),
        broker_name: Some("log.flush.interval.ms"),
        doc: "fdatasync at most this long after a write.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "follower.replication.throttled.replicas",
        kind: ConfigType::List,
        default: "",
        validate: throttled_replicas,
        broker_name: None,
        doc: "Replicas (partition:broker, or *) whose follower fetches are throttled.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "index.interval.bytes",
        kind: ConfigType::Int,
        default: "4096",
        validate: |v| int_at_least(0)(v),
        broker_name: Some("log.index.interval.bytes"),
        doc: "Bytes of batches between two entries of the sparse offset and time indexes.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "leader.replication.throttled.replicas",
        kind: ConfigType::List,
        default: "",
        validate: throttled_replicas,
        broker_name: None,
        doc: "Replicas (partition:broker, or *) whose leader-side replication is throttled.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "local.retention.bytes",
        kind: ConfigType::Long,
        default: "-2",
        validate: |v| long_at_least(-2)(v),
        broker_name: Some("log.local.retention.bytes"),
        doc: "With tiered storage, the local bytes kept before segments are only remote; -2 follows retention.bytes.",
        support: Support::Stored(TIERED),
    },
    ConfigDef {
        name: "local.retention.ms",
        kind: ConfigType::Long,
        default: "-2",
        validate: |v| long_at_least(-2)(v),
        broker_name: Some("log.local.retention.ms"),
        doc: "With tiered storage, how long segments stay local; -2 follows retention.ms.",
        support: Support::Stored(TIERED),
    },
    ConfigDef {
        name: "max.compaction.lag.ms",
        kind: ConfigType::Long,
        default: "9223372036854775807",
        validate: |v| long_at_least(1)(v),
        broker_name: Some("log.cleaner.max.compaction.lag.ms"),
        doc: "The longest a record may stay uncompacted in a compacted topic.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "max.message.bytes",
        kind: ConfigType::Int,
        default: "1048588",
        validate: |v| int_at_least(0)(v),
        broker_name: Some("message.max.bytes"),
        doc: "The largest record batch the topic accepts, after compression.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "message.downconversion.enable",
        kind: ConfigType::Boolean,
        default: "true",
        validate: boolean,
        broker_name: Some("log.message.downconversion.enable"),
        doc: "Whether fetches from old clients may down-convert batches (removed in Kafka 4.0).",
        support: Support::Stored("Skein serves Fetch v4 and later only, so it never down-converts"),
    },
    ConfigDef {
        name: "message.timestamp.after.max.ms",
        kind: ConfigType::Long,
        default: "3600000",
        validate: |v| long_at_least(0)(v),
        broker_name: Some("log.message.timestamp.after.max.ms"),
        doc: "With CreateTime, batches whose timestamps are further than this in the broker's future are refused (INVALID_TIMESTAMP).",
        support: Support::Acted,
    },
    ConfigDef {
        name: "message.timestamp.before.max.ms",
        kind: ConfigType::Long,
        default: "9223372036854775807",
        validate: |v| long_at_least(0)(v),
        broker_name: Some("log.message.timestamp.before.max.ms"),
        doc: "With CreateTime, batches whose timestamps are further than this in the broker's past are refused (INVALID_TIMESTAMP).",
        support: Support::Acted,
    },
    ConfigDef {
        name: "message.timestamp.type",
        kind: ConfigType::String,
        default: "CreateTime",
        validate: |v| one_of(v, &["CreateTime", "LogAppendTime"]),
        broker_name: Some("log.message.timestamp.type"),
        doc: "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches with the broker's time.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "min.cleanable.dirty.ratio",
        kind: ConfigType::Double,
        default: "0.5",
        validate: |v| match v.trim().parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(()),
            Ok(_) => Err("Value must be in [0.0, 1.0]".into()),
            Err(_) => Err("Expected value to be a double".into()),
        },
        broker_name: Some("log.cleaner.min.cleanable.ratio"),
        doc: "The share of uncompacted bytes in a compacted log before the cleaner runs on it.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "min.compaction.lag.ms",
        kind: ConfigType::Long,
        default: "0",
        validate: |v| long_at_least(0)(v),
        broker_name: Some("log.cleaner.min.compaction.lag.ms"),
        doc: "The shortest time a record stays uncompacted.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "min.insync.replicas",
        kind: ConfigType::Int,
        default: "1",
        validate: |v| int_at_least(1)(v),
        broker_name: Some("min.insync.replicas"),
        doc: "With acks=all, the in-sync replicas a write needs, else NOT_ENOUGH_REPLICAS; one node has one in-sync replica.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "preallocate",
        kind: ConfigType::Boolean,
        default: "false",
        validate: boolean,
        broker_name: Some("log.preallocate"),
        doc: "Whether segment files are preallocated on disk.",
        support: Support::Stored(
            "Skein always reserves segment space ahead of its O_DIRECT writes (fallocate in steps) and trims it when a segment closes",
        ),
    },
    ConfigDef {
        name: "remote.log.copy.disable",
        kind: ConfigType::Boolean,
        default: "false",
        validate: boolean,
        broker_name: None,
        doc: "With tiered storage, stops copying segments to remote storage.",
        support: Support::Stored(TIERED),
    },
    ConfigDef {
        name: "remote.log.delete.on.disable",
        kind: ConfigType::Boolean,
        default: "false",
        validate: boolean,
        broker_name: None,
        doc: "With tiered storage, deletes remote data when tiering is turned off.",
        support: Support::Stored(TIERED),
    },
    ConfigDef {
        name: "remote.storage.enable",
        kind: ConfigType::Boolean,
        default: "false",
        // As a Kafka broker without a remote log manager refuses it.
        validate: |v| match v.trim().to_ascii_lowercase().as_str() {
            "false" => Ok(()),
            "true" => Err("Tiered Storage functionality is disabled in the broker".into()),
            _ => Err("Expected value to be either true or false".into()),
        },
        broker_name: None,
        doc: "Turns on tiered storage for the topic; refused, as Skein has no remote storage.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "retention.bytes",
        kind: ConfigType::Long,
        default: "-1",
        validate: |v| long_at_least(i64::MIN)(v),
        broker_name: Some("log.retention.bytes"),
        doc: "Delete the oldest segments once a partition is larger; -1 keeps all.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "retention.ms",
        kind: ConfigType::Long,
        default: "604800000",
        validate: |v| long_at_least(-1)(v),
        broker_name: Some("log.retention.ms"),
        doc: "Delete segments whose newest record is older; -1 keeps all.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "segment.bytes",
        kind: ConfigType::Int,
        default: "1073741824",
        validate: |v| int_at_least(1 << 20)(v),
        broker_name: Some("log.segment.bytes"),
        doc: "Roll to a new segment file when the active one would grow past this size.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "segment.index.bytes",
        kind: ConfigType::Int,
        default: "10485760",
        validate: |v| int_at_least(4)(v),
        broker_name: Some("log.index.size.max.bytes"),
        doc: "Roll when a segment's offset or time index would grow past this size.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "segment.jitter.ms",
        kind: ConfigType::Long,
        default: "0",
        validate: |v| long_at_least(0)(v),
        broker_name: Some("log.roll.jitter.ms"),
        doc: "Up to this much is taken off segment.ms for each partition, so that partitions do not all roll at once.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "segment.ms",
        kind: ConfigType::Long,
        default: "604800000",
        validate: |v| long_at_least(1)(v),
        broker_name: Some("log.roll.ms"),
        doc: "Roll when the active segment's first record is this old.",
        support: Support::Acted,
    },
    ConfigDef {
        name: "unclean.leader.election.enable",
        kind: ConfigType::Boolean,
        default: "false",
        validate: boolean,
        broker_name: Some("unclean.leader.election.enable"),
        doc: "Whether a replica outside the ISR may become leader, at the cost of losing data.",
        support: Support::Stored(NO_AUTOMATIC_UNCLEAN),
    },
];

pub fn config_def(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Validates one topic config entry.
///
/// # Errors
/// A message for INVALID_CONFIG: unknown name or bad value, in Kafka's words.
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
        segment_jitter_ms: capped("segment.jitter.ms"),
        segment_index_bytes: long("segment.index.bytes").max(8) as u64,
        index_interval_bytes: long("index.interval.bytes").max(0) as u64,
        retention_ms: long("retention.ms"),
        retention_bytes: long("retention.bytes"),
        cleanup_policy: CleanupPolicy::parse(&get("cleanup.policy")).unwrap_or(CleanupPolicy::DELETE),
        delete_retention_ms: long("delete.retention.ms"),
        min_cleanable_dirty_ratio: get("min.cleanable.dirty.ratio")
            .trim()
            .parse::<f64>()
            .unwrap_or(0.5)
            .clamp(0.0, 1.0),
        min_compaction_lag_ms: long("min.compaction.lag.ms").max(0),
        max_compaction_lag_ms: long("max.compaction.lag.ms").max(1),
        max_message_bytes: long("max.message.bytes").clamp(1, i32::MAX as i64) as u32,
        flush_messages: capped("flush.messages").max(1),
        flush_ms: capped("flush.ms"),
    }
}

/// The broker-level value of a topic config: the broker default (under its topic
/// name in Skein's config), or Kafka's default.
pub fn broker_value(def: &ConfigDef, broker: &BTreeMap<String, String>) -> (String, ConfigSource) {
    match broker.get(def.name) {
        Some(v) => (v.clone(), ConfigSource::StaticBroker),
        None => (def.default.to_string(), ConfigSource::Default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Config values are validated with Kafka's names and bounds, and become LogConfig.
    #[test]
    fn configs() {
        let check = |name: &str, value: &str, ok: bool| {
            assert_eq!(validate_config(name, value).is_ok(), ok, "{name}={value}: {:?}", validate_config(name, value))
        };
        check("retention.ms", "-1", true);
        check("retention.ms", "-2", false);
        check("retention.ms", "soon", false);
        check("cleanup.policy", "compact,delete", true);
        check("cleanup.policy", "shred", false);
        check("no.such.config", "1", false);
        check("message.timestamp.type", "LogAppendTime", true);
        check("compression.type", "producer", true);
        check("compression.type", "zstd", true);
        check("compression.type", "brotli", false);
        check("compression.gzip.level", "9", true);
        check("compression.gzip.level", "0", false);
        check("compression.zstd.level", "23", false);
        check("min.cleanable.dirty.ratio", "0.9", true);
        check("min.cleanable.dirty.ratio", "1.5", false);
        check("preallocate", "true", true);
        check("preallocate", "yes", false);
        check("unclean.leader.election.enable", "false", true);
        check("follower.replication.throttled.replicas", "0:1,1:2", true);
        check("follower.replication.throttled.replicas", "*", true);
        check("follower.replication.throttled.replicas", "zero", false);
        check("remote.storage.enable", "true", false);
        check("segment.bytes", "1048576", true);
        check("segment.bytes", "1024", false);
        check("message.downconversion.enable", "false", true);
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

    // Every config's default passes its own validation, and names are unique and sorted.
    #[test]
    fn defaults_are_valid() {
        for def in TOPIC_CONFIGS {
            assert!((def.validate)(def.default).is_ok(), "{}", def.name);
        }
        assert!(TOPIC_CONFIGS.windows(2).all(|w| w[0].name < w[1].name));
    }
}
