//! Group configs (KIP-848, KIP-932, KIP-1071): the per-group settings Kafka 4.4 keeps
//! for GROUP config resources, each with its type, default, broker-level synonym and
//! validation, as `kafka-configs --entity-type groups` shows them on Kafka 4.4.
//!
//! A group's overrides live in the metadata image (`MetadataImage::group_configs`,
//! Kafka's ConfigRecord for GROUP resources), so every node sees them and they outlive
//! the group. Consumer groups act on `consumer.session.timeout.ms` and
//! `consumer.heartbeat.interval.ms`, share groups on theirs, and streams groups on
//! their session, heartbeat, standby, initial delay and assignment interval settings
//! (`sticky` is the one assignor). The others are
//! stored, shown and validated, and not yet acted on.

use std::collections::BTreeMap;
use std::time::Duration;

use skein_control::configs::{ConfigSource, ConfigType};
use skein_control::errors::code;
use skein_control::metadata::{MetadataImage, Refusal};

use super::consumer::ConsumerSettings;

/// How a value is checked, as Kafka 4.4's `GroupConfig` checks it: its type and lower
/// bound first (ConfigDef), then the range the broker allows.
#[derive(Debug, Clone, Copy)]
enum Check {
    /// An INT at least `at_least`, and within `range` (the broker's min and max) when
    /// there is one.
    Int {
        at_least: i64,
        range: Option<(i64, i64)>,
    },
    /// An INT at least `at_least` and at most `max` (`... must be less than or equal
    /// to max`).
    IntAtMost {
        at_least: i64,
        max: i64,
    },
    Boolean,
    OneOf(&'static [&'static str]),
    /// `earliest`, `latest` or `by_duration:<ISO-8601 duration>`.
    AutoOffsetReset,
    /// One of the broker's streams assignors.
    Assignor,
    /// A topic name, or empty for none; not an internal topic's.
    DeadLetterTopic,
    List,
}

pub struct GroupConfigDef {
    pub name: &'static str,
    /// The broker config it falls back to.
    pub broker_name: &'static str,
    pub default: &'static str,
    pub kind: ConfigType,
    pub doc: &'static str,
    check: Check,
}

/// Kafka 4.4's broker bounds: `group.consumer.{min,max}.session.timeout.ms`,
/// `group.consumer.{min,max}.heartbeat.interval.ms` (and the same for share and
/// streams groups), `group.share.{min,max}.record.lock.duration.ms`,
/// `group.share.{min,max}.delivery.count.limit`,
/// `group.share.{min,max}.partition.max.record.locks`,
/// `group.streams.max.standby.replicas`.
const SESSION_RANGE: (i64, i64) = (45_000, 60_000);
const HEARTBEAT_RANGE: (i64, i64) = (5_000, 15_000);
const RECORD_LOCK_RANGE: (i64, i64) = (15_000, 60_000);
const DELIVERY_COUNT_RANGE: (i64, i64) = (2, 10);
const RECORD_LOCKS_RANGE: (i64, i64) = (100, 4_000);
const MAX_STANDBY_REPLICAS: i64 = 2;
/// The streams assignors a broker registers (`group.streams.assignors`).
const STREAMS_ASSIGNORS: &[&str] = &["sticky"];

const fn def(
    name: &'static str,
    broker_name: &'static str,
    default: &'static str,
    kind: ConfigType,
    check: Check,
    doc: &'static str,
) -> GroupConfigDef {
    GroupConfigDef { name, broker_name, default, kind, doc, check }
}

const fn int(at_least: i64, range: Option<(i64, i64)>) -> Check {
    Check::Int { at_least, range }
}

pub const CONSUMER_SESSION_TIMEOUT_MS: &str = "consumer.session.timeout.ms";
pub const CONSUMER_HEARTBEAT_INTERVAL_MS: &str = "consumer.heartbeat.interval.ms";
/// Key-ordered share groups: Skein's own group config, prefixed `skein.` so that no
/// future Kafka name can clash with it.
pub const SHARE_KEY_ORDERED: &str = "skein.share.key.ordered";

/// Every group config of Kafka 4.4, by name, and Skein's own `skein.share.key.ordered`.
pub static GROUP_CONFIGS: &[GroupConfigDef] = &[
    def(
        "consumer.assignment.interval.ms",
        "group.consumer.assignment.interval.ms",
        "1000",
        ConfigType::Int,
        int(0, None),
        "The interval between assignment updates for a consumer group.",
    ),
    def(
        CONSUMER_HEARTBEAT_INTERVAL_MS,
        "group.consumer.heartbeat.interval.ms",
        "5000",
        ConfigType::Int,
        int(1, Some(HEARTBEAT_RANGE)),
        "The heartbeat interval given to the members of a consumer group.",
    ),
    def(
        CONSUMER_SESSION_TIMEOUT_MS,
        "group.consumer.session.timeout.ms",
        "45000",
        ConfigType::Int,
        int(1, Some(SESSION_RANGE)),
        "The timeout to detect client failures when using the consumer group protocol.",
    ),
    def(
        "errors.deadletterqueue.copy.record.enable",
        "errors.deadletterqueue.copy.record.enable",
        "false",
        ConfigType::Boolean,
        Check::Boolean,
        "When writing onto the dead-letter queue topic, whether to copy the original record onto the DLQ topic, or \
         just write a record containing the context information headers.",
    ),
    def(
        "errors.deadletterqueue.topic.name",
        "errors.deadletterqueue.topic.name",
        "",
        ConfigType::String,
        Check::DeadLetterTopic,
        "The name of the topic to be used as the dead-letter queue (DLQ) topic for this share group. If blank (the \
         default), the group does not have a DLQ topic.",
    ),
    def(
        "share.assignment.interval.ms",
        "group.share.assignment.interval.ms",
        "1000",
        ConfigType::Int,
        int(0, None),
        "The interval between assignment updates for a share group.",
    ),
    def(
        "share.auto.offset.reset",
        "share.auto.offset.reset",
        "latest",
        ConfigType::String,
        Check::AutoOffsetReset,
        "The strategy to initialize the share-partition start offset: earliest, latest, or by_duration:<duration> \
         (ISO-8601, PnDTnHnMn.nS, not negative) from the current timestamp.",
    ),
    def(
        "share.delivery.count.limit",
        "group.share.delivery.count.limit",
        "5",
        ConfigType::Int,
        int(2, Some(DELIVERY_COUNT_RANGE)),
        "The maximum number of delivery attempts for a record delivered to a share group.",
    ),
    def(
        "share.heartbeat.interval.ms",
        "group.share.heartbeat.interval.ms",
        "5000",
        ConfigType::Int,
        int(1, Some(HEARTBEAT_RANGE)),
        "The heartbeat interval given to the members of a share group.",
    ),
    def(
        "share.isolation.level",
        "share.isolation.level",
        "read_uncommitted",
        ConfigType::String,
        Check::OneOf(&["read_committed", "read_uncommitted"]),
        "Controls how to read records written transactionally: read_committed delivers only committed \
         transactional records, read_uncommitted all of them. Non-transactional records are returned either way.",
    ),
    def(
        "share.partition.max.record.locks",
        "group.share.partition.max.record.locks",
        "2000",
        ConfigType::Int,
        int(100, Some(RECORD_LOCKS_RANGE)),
        "Share-group record lock limit per share-partition.",
    ),
    def(
        "share.record.lock.duration.ms",
        "group.share.record.lock.duration.ms",
        "30000",
        ConfigType::Int,
        int(1000, Some(RECORD_LOCK_RANGE)),
        "The record acquisition lock duration in milliseconds for share groups.",
    ),
    def(
        "share.renew.acknowledge.enable",
        "share.renew.acknowledge.enable",
        "true",
        ConfigType::Boolean,
        Check::Boolean,
        "Whether the renew acknowledge type is enabled for the share group.",
    ),
    def(
        "share.session.timeout.ms",
        "group.share.session.timeout.ms",
        "45000",
        ConfigType::Int,
        int(1, Some(SESSION_RANGE)),
        "The timeout to detect client failures when using the share group protocol.",
    ),
    def(
        SHARE_KEY_ORDERED,
        SHARE_KEY_ORDERED,
        "false",
        ConfigType::Boolean,
        Check::Boolean,
        "Skein's own, not Kafka's: when true, a share group's records with the same key are never acquired by two \
         members at once, and a key's records are delivered in offset order; a key held by a slow member holds \
         back only that key.",
    ),
    def(
        "streams.assignment.interval.ms",
        "group.streams.assignment.interval.ms",
        "1000",
        ConfigType::Int,
        int(0, None),
        "The interval between assignment updates for a streams group.",
    ),
    def(
        "streams.assignor.name",
        "group.streams.assignors",
        "sticky",
        ConfigType::String,
        Check::Assignor,
        "The task assignor to use for this streams group, selected by short name from the broker's \
         group.streams.assignors; it takes effect at the group's next rebalance.",
    ),
    def(
        "streams.heartbeat.interval.ms",
        "group.streams.heartbeat.interval.ms",
        "5000",
        ConfigType::Int,
        int(1, Some(HEARTBEAT_RANGE)),
        "The heartbeat interval given to the members.",
    ),
    def(
        "streams.initial.rebalance.delay.ms",
        "group.streams.initial.rebalance.delay.ms",
        "3000",
        ConfigType::Int,
        int(0, None),
        "The amount of time the group coordinator will wait for more streams clients to join a new group before \
         performing the first rebalance.",
    ),
    def(
        "streams.num.standby.replicas",
        "group.streams.num.standby.replicas",
        "0",
        ConfigType::Int,
        Check::IntAtMost { at_least: 0, max: MAX_STANDBY_REPLICAS },
        "The number of standby replicas for each task.",
    ),
    def(
        "streams.rack.aware.assignment.tags",
        "group.streams.rack.aware.assignment.tags",
        "",
        ConfigType::List,
        Check::List,
        "List of client tag keys used to distribute standby replicas across Kafka Streams instances.",
    ),
    def(
        "streams.session.timeout.ms",
        "group.streams.session.timeout.ms",
        "45000",
        ConfigType::Int,
        int(1, Some(SESSION_RANGE)),
        "The timeout to detect client failures when using the streams group protocol.",
    ),
];

impl GroupConfigDef {
    /// Its documentation, saying so when Skein stores it without acting on it yet.
    pub fn documentation(&self) -> String {
        match self.name {
            CONSUMER_SESSION_TIMEOUT_MS
            | CONSUMER_HEARTBEAT_INTERVAL_MS
            | SHARE_KEY_ORDERED
            | "share.auto.offset.reset"
            | "share.delivery.count.limit"
            | "share.heartbeat.interval.ms"
            | "share.isolation.level"
            | "share.partition.max.record.locks"
            | "share.record.lock.duration.ms"
            | "share.session.timeout.ms"
            | "streams.heartbeat.interval.ms"
            | "streams.session.timeout.ms"
            | "streams.num.standby.replicas"
            | "streams.initial.rebalance.delay.ms"
            | "streams.assignment.interval.ms"
            | "streams.assignor.name" => self.doc.to_string(),
            _ => format!("{} (Skein: stored and validated, not acted on yet.)", self.doc),
        }
    }
}

pub fn group_config_def(name: &str) -> Option<&'static GroupConfigDef> {
    GROUP_CONFIGS.iter().find(|d| d.name == name)
}

/// The broker-level values this node was started with, where they differ from Kafka's
/// defaults: the synonyms a group config falls back to.
pub fn broker_values(consumer: &ConsumerSettings) -> BTreeMap<&'static str, String> {
    BTreeMap::from([
        (CONSUMER_SESSION_TIMEOUT_MS, consumer.session_timeout.as_millis().to_string()),
        (CONSUMER_HEARTBEAT_INTERVAL_MS, consumer.heartbeat_interval.as_millis().to_string()),
    ])
}

fn invalid(value: &str, name: &str, why: impl std::fmt::Display) -> Refusal {
    (code::INVALID_CONFIG, format!("Invalid value {value} for configuration {name}: {why}"))
}

/// Checks one value as Kafka 4.4 does, with the broker's own value of the setting
/// (`broker`) widening the allowed range as a broker started with it allows it.
fn check_value(def: &GroupConfigDef, value: &str, broker: Option<&str>) -> Result<(), Refusal> {
    let name = def.name;
    let number =
        || value.trim().parse::<i32>().map(i64::from).map_err(|_| invalid(value, name, "Not a number of type INT"));
    match def.check {
        Check::Int { at_least, range } => {
            let n = number()?;
            if n < at_least {
                return Err(invalid(value, name, format!("Value must be at least {at_least}")));
            }
            if let Some((min, max)) = range {
                let own = broker.and_then(|b| b.parse::<i64>().ok());
                let (min, max) = own.map_or((min, max), |own| (min.min(own), max.max(own)));
                if n < min || n > max {
                    return Err((
                        code::INVALID_CONFIG,
                        format!("{name} must be in the range {min} to {max} inclusive."),
                    ));
                }
            }
        }
        Check::IntAtMost { at_least, max } => {
            let n = number()?;
            if n < at_least {
                return Err(invalid(value, name, format!("Value must be at least {at_least}")));
            }
            if n > max {
                return Err((code::INVALID_CONFIG, format!("{name} must be less than or equal to {max}")));
            }
        }
        Check::Boolean => {
            if !value.trim().eq_ignore_ascii_case("true") && !value.trim().eq_ignore_ascii_case("false") {
                return Err(invalid(value, name, "Expected value to be either true or false"));
            }
        }
        Check::OneOf(allowed) => {
            if !allowed.contains(&value) {
                return Err(invalid(value, name, format!("String must be one of: {}", allowed.join(", "))));
            }
        }
        Check::AutoOffsetReset => {
            let fine = match value.strip_prefix("by_duration:") {
                Some(duration) => iso_duration_ms(duration).is_some(),
                None => value == "earliest" || value == "latest",
            };
            if !fine {
                return Err(invalid(
                    value,
                    name,
                    format!(
                        "Invalid value `{value}` for configuration {name}. The value must be either 'earliest', \
                         'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."
                    ),
                ));
            }
        }
        Check::Assignor => {
            if !STREAMS_ASSIGNORS.contains(&value) {
                return Err((
                    code::INVALID_CONFIG,
                    format!(
                        "{name} '{value}' is not a registered task assignor. Registered assignors are: [{}].",
                        STREAMS_ASSIGNORS.join(", ")
                    ),
                ));
            }
        }
        Check::DeadLetterTopic => {
            if value.starts_with("__") {
                return Err((code::INVALID_CONFIG, format!("{name}: DLQ topic name must not start with '__'")));
            }
        }
        Check::List => {}
    }
    Ok(())
}

/// A non-negative ISO-8601 duration (`PnDTnHnMn.nS`, as Java's `Duration.parse`), in
/// milliseconds.
pub fn iso_duration_ms(text: &str) -> Option<u64> {
    let rest = text.strip_prefix('P').or_else(|| text.strip_prefix('p'))?;
    let (days, time) = match rest.split_once(['T', 't']) {
        Some((days, time)) => (days, Some(time)),
        None => (rest, None),
    };
    let mut ms = 0f64;
    let mut any = false;
    if !days.is_empty() {
        let n = days.strip_suffix(['D', 'd'])?.parse::<u64>().ok()?;
        ms += n as f64 * 86_400_000.0;
        any = true;
    }
    if let Some(mut time) = time {
        if time.is_empty() {
            return None;
        }
        for (unit, scale) in [(['H', 'h'], 3_600_000.0), (['M', 'm'], 60_000.0), (['S', 's'], 1_000.0)] {
            if let Some(at) = time.find(unit) {
                let n: f64 = time[..at].parse().ok().filter(|n: &f64| *n >= 0.0 && n.is_finite())?;
                ms += n * scale;
                time = &time[at + 1..];
                any = true;
            }
        }
        if !time.is_empty() {
            return None;
        }
    }
    any.then_some(ms as u64)
}

/// Checks a group's whole set of overrides (`configs`) as Kafka 4.4 does before it
/// keeps them: names, values, and each session timeout above its heartbeat interval.
///
/// # Errors
/// INVALID_REQUEST for an empty group name; INVALID_CONFIG with Kafka's message.
pub fn validate(
    group: &str,
    configs: &BTreeMap<String, String>,
    broker: &BTreeMap<&'static str, String>,
) -> Result<(), Refusal> {
    if group.is_empty() {
        return Err((code::INVALID_REQUEST, "Default group resources are not allowed.".into()));
    }
    for (name, value) in configs {
        let def = group_config_def(name).ok_or((code::INVALID_CONFIG, format!("Unknown group config name: {name}")))?;
        check_value(def, value, broker.get(def.name).map(String::as_str))?;
    }
    let get = |name: &str| {
        configs
            .get(name)
            .or_else(|| broker.get(name))
            .map(String::as_str)
            .or_else(|| group_config_def(name).map(|d| d.default))
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(0)
    };
    for kind in ["consumer", "share", "streams"] {
        let (session, heartbeat) = (format!("{kind}.session.timeout.ms"), format!("{kind}.heartbeat.interval.ms"));
        if get(&session) <= get(&heartbeat) {
            return Err((code::INVALID_CONFIG, format!("{session} must be greater than {heartbeat}")));
        }
    }
    Ok(())
}

/// A group config's value for DescribeConfigs: (definition, value, source, synonyms
/// as (name, value, source), most specific first).
pub type Described = (&'static GroupConfigDef, String, ConfigSource, Vec<(String, String, ConfigSource)>);

/// Every config of `group`: its override, else the broker's value, else Kafka's default.
pub fn describe(image: &MetadataImage, group: &str, broker: &BTreeMap<&'static str, String>) -> Vec<Described> {
    let overrides = image.group_configs.get(group);
    GROUP_CONFIGS
        .iter()
        .map(|def| {
            let (broker_value, broker_source) = match broker.get(def.name) {
                Some(v) if v != def.default => (v.clone(), ConfigSource::StaticBroker),
                _ => (def.default.to_string(), ConfigSource::Default),
            };
            let mut synonyms = Vec::new();
            let own = overrides.and_then(|o| o.get(def.name));
            if let Some(v) = own {
                synonyms.push((def.name.to_string(), v.clone(), ConfigSource::Group));
            }
            synonyms.push((def.broker_name.to_string(), broker_value.clone(), broker_source));
            match own {
                Some(v) => (def, v.clone(), ConfigSource::Group, synonyms),
                None => (def, broker_value, broker_source, synonyms),
            }
        })
        .collect()
}

/// The consumer-group settings of `group`: the node's, with the group's overrides of
/// its session timeout and heartbeat interval.
pub fn consumer_settings(base: ConsumerSettings, image: &MetadataImage, group: &str) -> ConsumerSettings {
    let Some(overrides) = image.group_configs.get(group) else { return base };
    let ms = |name: &str| overrides.get(name).and_then(|v| v.trim().parse::<u64>().ok()).map(Duration::from_millis);
    ConsumerSettings {
        session_timeout: ms(CONSUMER_SESSION_TIMEOUT_MS).unwrap_or(base.session_timeout),
        heartbeat_interval: ms(CONSUMER_HEARTBEAT_INTERVAL_MS).unwrap_or(base.heartbeat_interval),
        ..base
    }
}

/// A share group's membership settings: `base` with the group's own
/// `share.heartbeat.interval.ms` and `share.session.timeout.ms`.
pub fn share_membership(base: MembershipSettings, image: &MetadataImage, group: &str) -> MembershipSettings {
    let Some(overrides) = image.group_configs.get(group) else { return base };
    let ms = |name: &str| overrides.get(name).and_then(|v| v.trim().parse::<u64>().ok()).map(Duration::from_millis);
    MembershipSettings {
        heartbeat_interval: ms("share.heartbeat.interval.ms").unwrap_or(base.heartbeat_interval),
        session_timeout: ms("share.session.timeout.ms").unwrap_or(base.session_timeout),
        ..base
    }
}

/// Where a share group's new share-partitions start (`share.auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareReset {
    Earliest,
    Latest,
    /// The first record at or after now minus this many milliseconds.
    ByDuration(u64),
}

/// A share group's settings for its share-partitions on their leaders: the group's
/// overrides, else Kafka 4.4's defaults.
/// The group config naming a share group's dead-letter topic (KIP-1191).
pub const DEAD_LETTER_TOPIC: &str = "errors.deadletterqueue.topic.name";

/// A share group's dead-letter topic and whether its records are copied there whole
/// (`errors.deadletterqueue.copy.record.enable`); `None` without one.
pub fn share_dead_letter(image: &MetadataImage, group: &str) -> Option<(String, bool)> {
    let overrides = image.group_configs.get(group)?;
    let topic = overrides.get(DEAD_LETTER_TOPIC).map(|v| v.trim().to_string()).filter(|v| !v.is_empty())?;
    let copy = overrides
        .get("errors.deadletterqueue.copy.record.enable")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    Some((topic, copy))
}

pub fn share_partition_settings(
    image: &MetadataImage,
    group: &str,
) -> (crate::share::partition::ShareSettings, ShareReset, bool) {
    let defaults = crate::share::partition::ShareSettings::default();
    let overrides = image.group_configs.get(group);
    let get = |name: &str| overrides.and_then(|o| o.get(name)).map(|v| v.trim().to_string());
    let number = |name: &str| get(name).and_then(|v| v.parse::<u64>().ok());
    let settings = crate::share::partition::ShareSettings {
        max_in_flight: number("share.partition.max.record.locks").map_or(defaults.max_in_flight, |n| n as usize),
        delivery_limit: number("share.delivery.count.limit")
            .map_or(defaults.delivery_limit, |n| n.min(u16::MAX as u64) as u16),
        lock_duration: number("share.record.lock.duration.ms").map_or(defaults.lock_duration, Duration::from_millis),
        key_ordered: get(SHARE_KEY_ORDERED).is_some_and(|v| v.eq_ignore_ascii_case("true")),
        renew_enabled: !get("share.renew.acknowledge.enable").is_some_and(|v| v.eq_ignore_ascii_case("false")),
        dead_letter: get(DEAD_LETTER_TOPIC).is_some_and(|v| !v.is_empty()),
    };
    let reset = match get("share.auto.offset.reset").map(|v| v.to_ascii_lowercase()) {
        Some(v) if v == "earliest" => ShareReset::Earliest,
        Some(v) if v.starts_with("by_duration:") => iso_duration_ms(&v["by_duration:".len()..].to_ascii_uppercase())
            .map_or(ShareReset::Latest, ShareReset::ByDuration),
        _ => ShareReset::Latest,
    };
    let committed = get("share.isolation.level").is_some_and(|v| v.eq_ignore_ascii_case("read_committed"));
    (settings, reset, committed)
}

/// Settings of a share group's membership (`group.share.*`, `share.*` group configs).
#[derive(Debug, Clone, Copy)]
pub struct MembershipSettings {
    pub heartbeat_interval: Duration,
    pub session_timeout: Duration,
    /// Kafka's `group.share.max.size`.
    pub max_size: usize,
}

impl Default for MembershipSettings {
    /// Kafka 4.4's defaults.
    fn default() -> MembershipSettings {
        MembershipSettings {
            heartbeat_interval: Duration::from_secs(5),
            session_timeout: Duration::from_secs(45),
            max_size: 200,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> BTreeMap<&'static str, String> {
        broker_values(&ConsumerSettings {
            heartbeat_interval: Duration::from_secs(5),
            session_timeout: Duration::from_secs(45),
            max_size: 10,
        })
    }

    fn one(name: &str, value: &str) -> Result<(), Refusal> {
        validate("g", &BTreeMap::from([(name.to_string(), value.to_string())]), &base())
    }

    fn message(name: &str, value: &str) -> String {
        one(name, value).unwrap_err().1
    }

    // The messages Kafka 4.4 answered for the same values.
    #[test]
    fn values_are_checked_as_kafka_checks_them() {
        assert_eq!(
            message("consumer.session.timeout.ms", "1000"),
            "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive."
        );
        assert!(one("consumer.session.timeout.ms", "50000").is_ok());
        assert_eq!(
            message("consumer.session.timeout.ms", "abc"),
            "Invalid value abc for configuration consumer.session.timeout.ms: Not a number of type INT"
        );
        assert_eq!(
            message("share.record.lock.duration.ms", "100"),
            "Invalid value 100 for configuration share.record.lock.duration.ms: Value must be at least 1000"
        );
        assert_eq!(
            message("share.record.lock.duration.ms", "70000"),
            "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive."
        );
        assert_eq!(
            message("share.delivery.count.limit", "11"),
            "share.delivery.count.limit must be in the range 2 to 10 inclusive."
        );
        assert_eq!(
            message("streams.num.standby.replicas", "100"),
            "streams.num.standby.replicas must be less than or equal to 2"
        );
        assert_eq!(
            message("share.isolation.level", "READ_COMMITTED"),
            "Invalid value READ_COMMITTED for configuration share.isolation.level: String must be one of: \
             read_committed, read_uncommitted"
        );
        assert_eq!(message("nope.config", "1"), "Unknown group config name: nope.config");
        assert_eq!(
            message("errors.deadletterqueue.topic.name", "__consumer_offsets"),
            "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"
        );
        assert_eq!(
            message("streams.assignor.name", "foo"),
            "streams.assignor.name 'foo' is not a registered task assignor. Registered assignors are: [sticky]."
        );
        assert_eq!(
            message("share.renew.acknowledge.enable", "maybe"),
            "Invalid value maybe for configuration share.renew.acknowledge.enable: Expected value to be either \
             true or false"
        );
        assert!(one("errors.deadletterqueue.copy.record.enable", "TRUE").is_ok());
        for fine in ["earliest", "latest", "by_duration:PT1H", "by_duration:P1D"] {
            assert!(one("share.auto.offset.reset", fine).is_ok(), "{fine}");
        }
        for bad in ["foo", "EARLIEST", "by_duration:-PT1H", "by_duration:xyz"] {
            assert!(message("share.auto.offset.reset", bad).contains("The value must be either 'earliest'"), "{bad}");
        }
        assert_eq!(one("consumer.assignment.interval.ms", "-1").unwrap_err().0, code::INVALID_CONFIG);
        assert_eq!(validate("", &BTreeMap::new(), &base()).unwrap_err().0, code::INVALID_REQUEST);
    }

    #[test]
    fn a_broker_started_outside_kafkas_range_widens_it() {
        let broker = broker_values(&ConsumerSettings {
            heartbeat_interval: Duration::from_millis(500),
            session_timeout: Duration::from_secs(6),
            max_size: 10,
        });
        let configs = BTreeMap::from([("consumer.session.timeout.ms".to_string(), "6000".to_string())]);
        assert!(validate("g", &configs, &broker).is_ok());
        let configs = BTreeMap::from([("consumer.heartbeat.interval.ms".to_string(), "6000".to_string())]);
        assert_eq!(
            validate("g", &configs, &broker).unwrap_err().1,
            "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"
        );
    }

    // A group's overrides of the session timeout and heartbeat interval are what its
    // heartbeats answer and its expiry uses; other groups keep the node's.
    #[test]
    fn a_group_uses_its_own_session_timeout_and_heartbeat_interval() {
        let node = ConsumerSettings {
            heartbeat_interval: Duration::from_secs(5),
            session_timeout: Duration::from_secs(45),
            max_size: 10,
        };
        let mut image = MetadataImage::default();
        image.apply(&[skein_control::metadata::MetadataRecord::GroupConfigs {
            group: "billing".into(),
            configs: BTreeMap::from([
                (CONSUMER_SESSION_TIMEOUT_MS.to_string(), "50000".to_string()),
                ("share.auto.offset.reset".to_string(), "earliest".to_string()),
            ]),
        }]);
        let billing = consumer_settings(node, &image, "billing");
        assert_eq!(billing.session_timeout, Duration::from_secs(50));
        assert_eq!(billing.heartbeat_interval, Duration::from_secs(5));
        let shipping = consumer_settings(node, &image, "shipping");
        assert_eq!(
            (shipping.session_timeout, shipping.heartbeat_interval),
            (node.session_timeout, node.heartbeat_interval)
        );
        // Removing the overrides removes the group's entry.
        image.apply(&[skein_control::metadata::MetadataRecord::GroupConfigs {
            group: "billing".into(),
            configs: BTreeMap::new(),
        }]);
        assert!(image.group_configs.is_empty());
        assert_eq!(consumer_settings(node, &image, "billing").session_timeout, node.session_timeout);
    }

    #[test]
    fn durations_parse_as_java_parses_them() {
        assert_eq!(iso_duration_ms("PT1H"), Some(3_600_000));
        assert_eq!(iso_duration_ms("P1DT2M3.5S"), Some(86_400_000 + 120_000 + 3_500));
        for bad in ["", "P", "PT", "1H", "PT-1H", "PTxS", "P1H"] {
            assert_eq!(iso_duration_ms(bad), None, "{bad}");
        }
    }
}
