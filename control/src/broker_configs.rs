//! Kafka 4.4's dynamic broker configs: every config a Kafka 4.4 broker lets
//! AlterConfigs and IncrementalAlterConfigs change at run time on a BROKER resource,
//! for one broker or, named `""`, as the cluster default. The list was taken from a
//! Kafka 4.4.0 node (each config it describes, set with `validateOnly`, per broker and
//! at the cluster level), with its types, defaults and documentation.
//!
//! Every one is accepted, validated by its type, stored in the metadata log and
//! described. Skein acts on the broker-level topic defaults (`log.retention.ms`,
//! `compression.type`, ...: `topic_defaults`, applied to every topic without an
//! override), on the replication throttles and on the dead-letter settings of share
//! groups; README lists which others are only stored.

use std::collections::BTreeMap;

use crate::configs::{ConfigSource, ConfigType, TOPIC_CONFIGS};
use crate::errors::code;
use crate::metadata::MetadataImage;

/// Where a dynamic config may be set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Per broker or as the cluster default.
    Cluster,
    /// Only per broker (listener and security settings, as on Kafka).
    PerBroker,
}

#[derive(Debug)]
pub struct DynamicBrokerConfig {
    pub name: &'static str,
    pub kind: ConfigType,
    /// Kafka's default (`None`: no default, described as null).
    pub default: Option<&'static str>,
    pub scope: Scope,
    pub doc: &'static str,
}

const fn c(
    name: &'static str,
    kind: ConfigType,
    default: Option<&'static str>,
    scope: Scope,
    doc: &'static str,
) -> DynamicBrokerConfig {
    DynamicBrokerConfig { name, kind, default, scope, doc }
}

use ConfigType::{Boolean, Class, Double, Int, List, Long, Password, Short, String as Str};
use Scope::{Cluster, PerBroker};

/// Sorted by name.
#[rustfmt::skip]
pub const DYNAMIC_BROKER_CONFIGS: &[DynamicBrokerConfig] = &[
    c("background.threads", Int, Some("10"), Cluster, "The number of threads to use for various background processing tasks"),
    c("compression.gzip.level", Int, Some("-1"), Cluster, "The compression level to use if compression.type is set to 'gzip'."),
    c("compression.lz4.level", Int, Some("9"), Cluster, "The compression level to use if compression.type is set to 'lz4'."),
    c("compression.type", Str, Some("producer"), Cluster, "Specify the final compression type for a given topic."),
    c("compression.zstd.level", Int, Some("3"), Cluster, "The compression level to use if compression.type is set to 'zstd'."),
    c("config.providers", List, Some(""), Cluster, "Comma-separated alias names for classes implementing the <code>ConfigProvider</code> interface."),
    c("cordoned.log.dirs", List, Some(""), PerBroker, "A comma-separated list of the directories that are cordoned."),
    c("errors.deadletterqueue.auto.create.topics.enable", Boolean, Some("false"), Cluster, "Whether automatic creation of DLQ topics is enabled (KIP-1191)."),
    c("errors.deadletterqueue.topic.name.prefix", Str, Some("dlq."), Cluster, "The required prefix of topic names used by dead-letter queue topics for share groups."),
    c("follower.fetch.last.tiered.offset.enable", Boolean, Some("false"), Cluster, "When enabled, an empty follower skips offsets up to the last tiered offset and begins replication from the next offset."),
    c("follower.replication.throttled.rate", Long, Some("9223372036854775807"), Cluster, "Bytes per second this broker fetches for the replicas in follower.replication.throttled.replicas."),
    c("group.consumer.assignment.interval.ms", Int, Some("1000"), Cluster, "The interval between assignment updates for a consumer group."),
    c("group.coordinator.cached.buffer.max.bytes", Int, Some("1048588"), Cluster, "The maximum buffer size that the GroupCoordinator will retain for reuse."),
    c("group.share.assignment.interval.ms", Int, Some("1000"), Cluster, "The interval between assignment updates for a share group."),
    c("group.streams.assignment.interval.ms", Int, Some("1000"), Cluster, "The interval between assignment updates for a streams group."),
    c("leader.replication.throttled.rate", Long, Some("9223372036854775807"), Cluster, "Bytes per second this broker sends to followers of the replicas in leader.replication.throttled.replicas."),
    c("listener.security.protocol.map", Str, Some("SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"), PerBroker, "Map between listener names and security protocols."),
    c("listeners", List, Some("PLAINTEXT://:9092"), PerBroker, "Listener List - Comma-separated list of URIs we will listen on and the listener names."),
    c("log.cleaner.backoff.ms", Long, Some("15000"), Cluster, "The amount of time to sleep when there are no logs to clean"),
    c("log.cleaner.dedupe.buffer.size", Long, Some("134217728"), Cluster, "The total memory used for log deduplication across all cleaner threads"),
    c("log.cleaner.delete.retention.ms", Long, Some("86400000"), Cluster, "The amount of time to retain tombstone message markers for log compacted topics."),
    c("log.cleaner.io.buffer.load.factor", Double, Some("0.9"), Cluster, "Log cleaner dedupe buffer load factor."),
    c("log.cleaner.io.buffer.size", Int, Some("524288"), Cluster, "The total memory used for log cleaner I/O buffers across all cleaner threads"),
    c("log.cleaner.io.max.bytes.per.second", Double, Some("1.7976931348623157E308"), Cluster, "The log cleaner will be throttled so that the sum of its read and write i/o will be less than this value on average"),
    c("log.cleaner.max.compaction.lag.ms", Long, Some("9223372036854775807"), Cluster, "The maximum time a message will remain ineligible for compaction in the log."),
    c("log.cleaner.min.cleanable.ratio", Double, Some("0.5"), Cluster, "The minimum ratio of dirty log to total log for a log to eligible for cleaning."),
    c("log.cleaner.min.compaction.lag.ms", Long, Some("0"), Cluster, "The minimum time a message will remain uncompacted in the log."),
    c("log.cleaner.threads", Int, Some("1"), Cluster, "The number of background threads to use for log cleaning"),
    c("log.cleanup.policy", List, Some("delete"), Cluster, "This config designates the retention policy to use on log segments."),
    c("log.flush.interval.messages", Long, Some("9223372036854775807"), Cluster, "The number of messages accumulated on a log partition before messages are flushed to disk."),
    c("log.flush.interval.ms", Long, None, Cluster, "The maximum time in ms that a message in any topic is kept in memory before flushed to disk."),
    c("log.index.interval.bytes", Int, Some("4096"), Cluster, "The interval with which we add an entry to the offset index."),
    c("log.index.size.max.bytes", Int, Some("10485760"), Cluster, "The maximum size in bytes of the offset index"),
    c("log.local.retention.bytes", Long, Some("-2"), Cluster, "The maximum size of local log segments that can grow for a partition before it gets eligible for deletion."),
    c("log.local.retention.ms", Long, Some("-2"), Cluster, "The number of milliseconds to keep the local log segments before it gets eligible for deletion."),
    c("log.message.timestamp.after.max.ms", Long, Some("3600000"), Cluster, "This configuration sets the allowable timestamp difference between the message timestamp and the broker's timestamp."),
    c("log.message.timestamp.before.max.ms", Long, Some("9223372036854775807"), Cluster, "This configuration sets the allowable timestamp difference between the broker's timestamp and the message timestamp."),
    c("log.message.timestamp.type", Str, Some("CreateTime"), Cluster, "Define whether the timestamp in the message is message create time or log append time."),
    c("log.preallocate", Boolean, Some("false"), Cluster, "Should pre allocate file when create new segment? If you are using Kafka on Windows, you probably need to set it to true."),
    c("log.remote.copy.lag.bytes", Long, Some("-1"), Cluster, "Controls one of the two upload eligibility checks (time and size) for copying segments to remote storage."),
    c("log.remote.copy.lag.ms", Long, Some("0"), Cluster, "Controls one of the two upload eligibility checks (time and size) for copying segments to remote storage."),
    c("log.retention.bytes", Long, Some("-1"), Cluster, "The maximum size of the log before deleting it"),
    c("log.retention.ms", Long, None, Cluster, "The number of milliseconds to keep a log file before deleting it (in milliseconds), If not set, the value in log.retention.minutes is used."),
    c("log.roll.jitter.ms", Long, None, Cluster, "The maximum jitter to subtract from logRollTimeMillis (in milliseconds)."),
    c("log.roll.ms", Long, None, Cluster, "The maximum time before a new log segment is rolled out (in milliseconds)."),
    c("log.segment.bytes", Int, Some("1073741824"), Cluster, "The maximum size of a single log file"),
    c("log.segment.delete.delay.ms", Long, Some("60000"), Cluster, "The amount of time to wait before deleting a file from the filesystem."),
    c("max.connection.creation.rate", Int, Some("2147483647"), Cluster, "The maximum connection creation rate we allow in the broker at any time."),
    c("max.connections", Int, Some("2147483647"), Cluster, "The maximum number of connections we allow in the broker at any time."),
    c("max.connections.per.ip", Int, Some("2147483647"), Cluster, "The maximum number of connections we allow from each ip address."),
    c("max.connections.per.ip.overrides", Str, Some(""), Cluster, "A comma-separated list of per-ip or hostname overrides to the default maximum number of connections."),
    c("max.decompressed.message.bytes", Int, Some("2147483639"), Cluster, "The maximum decompressed size, in bytes, of a single record the broker will accept; larger records are rejected with an <code>InvalidRecordException</code>."),
    c("message.max.bytes", Int, Some("1048588"), Cluster, "The largest record batch size allowed by Kafka (after compression if compression is enabled).This can be set per topic with the topic level..."),
    c("metric.reporters", List, Some("org.apache.kafka.common.metrics.JmxReporter"), Cluster, "A list of classes to use as metrics reporters."),
    c("min.insync.replicas", Int, Some("1"), Cluster, "Specifies the <i>minimum</i> number of in-sync replicas (including the leader) required for a write to succeed when a producer sets <code>acks</code> to..."),
    c("num.io.threads", Int, Some("8"), Cluster, "The number of threads that the server uses for processing requests, which may include disk I/O"),
    c("num.network.threads", Int, Some("3"), Cluster, "The number of threads that the server uses for receiving requests from the network and sending responses to the network."),
    c("num.recovery.threads.per.data.dir", Int, Some("2"), Cluster, "The number of threads per data directory to be used for log recovery at startup and flushing at shutdown"),
    c("num.replica.fetchers", Int, Some("1"), Cluster, "Number of fetcher threads used to replicate records from each source broker."),
    c("principal.builder.class", Class, Some("org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"), PerBroker, "The fully qualified name of a class that implements the KafkaPrincipalBuilder interface, which is used to build the KafkaPrincipal object used during..."),
    c("producer.id.expiration.ms", Int, Some("86400000"), Cluster, "The time in ms that a topic partition leader will wait before expiring producer IDs."),
    c("remote.fetch.max.wait.ms", Int, Some("500"), Cluster, "The maximum amount of time the server will wait before answering the fetch request containing remote fetch partitions."),
    c("remote.list.offsets.request.timeout.ms", Long, Some("30000"), Cluster, "The maximum amount of time the server will wait for the remote list offsets request to complete."),
    c("remote.log.index.file.cache.total.size.bytes", Long, Some("1073741824"), Cluster, "The total size of the space allocated to store index files fetched from remote storage in the local storage."),
    c("remote.log.manager.copier.thread.pool.size", Int, Some("10"), Cluster, "Size of the thread pool used in scheduling tasks to copy segments."),
    c("remote.log.manager.copy.max.bytes.per.second", Long, Some("9223372036854775807"), Cluster, "The maximum number of bytes that can be copied from local storage to remote storage per second."),
    c("remote.log.manager.expiration.thread.pool.size", Int, Some("10"), Cluster, "Size of the thread pool used in scheduling tasks to clean up the expired remote log segments."),
    c("remote.log.manager.fetch.max.bytes.per.second", Long, Some("9223372036854775807"), Cluster, "The maximum number of bytes that can be fetched from remote storage to local storage per second."),
    c("remote.log.manager.follower.thread.pool.size", Int, Some("2"), Cluster, "Size of the thread pool used in scheduling follower tasks to read the highest-uploaded remote-offset for follower partitions."),
    c("remote.log.reader.threads", Int, Some("10"), Cluster, "Size of the thread pool that is allocated for handling remote log reads."),
    c("sasl.enabled.mechanisms", List, Some("GSSAPI"), PerBroker, "The list of SASL mechanisms enabled in the Kafka server."),
    c("sasl.jaas.config", Password, None, PerBroker, "JAAS login context parameters for SASL connections in the format used by JAAS configuration files."),
    c("sasl.kerberos.kinit.cmd", Str, Some("/usr/bin/kinit"), PerBroker, "Kerberos kinit command path."),
    c("sasl.kerberos.min.time.before.relogin", Long, Some("60000"), PerBroker, "Login thread sleep time between refresh attempts."),
    c("sasl.kerberos.principal.to.local.rules", List, Some("DEFAULT"), PerBroker, "A list of rules for mapping from principal names to short names (typically operating system usernames)."),
    c("sasl.kerberos.service.name", Str, None, PerBroker, "The Kerberos principal name that Kafka runs as."),
    c("sasl.kerberos.ticket.renew.jitter", Double, Some("0.05"), PerBroker, "Percentage of random jitter added to the renewal time."),
    c("sasl.kerberos.ticket.renew.window.factor", Double, Some("0.8"), PerBroker, "Login thread will sleep until the specified window factor of time from last refresh to ticket's expiry has been reached, at which time it will try to renew..."),
    c("sasl.login.refresh.buffer.seconds", Short, Some("300"), PerBroker, "The amount of buffer time before credential expiration to maintain when refreshing a credential, in seconds."),
    c("sasl.login.refresh.min.period.seconds", Short, Some("60"), PerBroker, "The desired minimum time for the login refresh thread to wait before refreshing a credential, in seconds."),
    c("sasl.login.refresh.window.factor", Double, Some("0.8"), PerBroker, "Login refresh thread will sleep until the specified window factor relative to the credential's lifetime has been reached, at which time it will try to..."),
    c("sasl.login.refresh.window.jitter", Double, Some("0.05"), PerBroker, "The maximum amount of random jitter relative to the credential's lifetime that is added to the login refresh thread's sleep time."),
    c("sasl.mechanism.inter.broker.protocol", Str, Some("GSSAPI"), PerBroker, "SASL mechanism used for inter-broker communication."),
    c("share.coordinator.cached.buffer.max.bytes", Int, Some("1048588"), Cluster, "The maximum buffer size that the ShareCoordinator will retain for reuse."),
    c("ssl.cipher.suites", List, Some(""), PerBroker, "A list of cipher suites."),
    c("ssl.client.auth", Str, Some("none"), PerBroker, "Configures kafka broker to request client authentication."),
    c("ssl.enabled.protocols", List, Some("TLSv1.2,TLSv1.3"), PerBroker, "The list of protocols enabled for SSL connections."),
    c("ssl.endpoint.identification.algorithm", Str, Some("https"), PerBroker, "The endpoint identification algorithm to validate server hostname using server certificate."),
    c("ssl.keymanager.algorithm", Str, Some("SunX509"), PerBroker, "The algorithm used by key manager factory for SSL connections."),
    c("ssl.protocol", Str, Some("TLSv1.3"), PerBroker, "The SSL protocol used to generate the SSLContext."),
    c("ssl.provider", Str, None, PerBroker, "The name of the security provider used for SSL connections."),
    c("ssl.secure.random.implementation", Str, None, PerBroker, "The SecureRandom PRNG implementation to use for SSL cryptography operations."),
    c("ssl.trustmanager.algorithm", Str, Some("PKIX"), PerBroker, "The algorithm used by trust manager factory for SSL connections."),
    c("transaction.partition.verification.enable", Boolean, Some("true"), Cluster, "Enable verification that checks that the partition has been added to the transaction before writing transactional records to the partition"),
    c("unclean.leader.election.enable", Boolean, Some("false"), Cluster, "Indicates whether to enable replicas not in the ISR set to be elected as leader as a last resort, even though doing so may result in data loss<p>Note: In..."),
];

pub fn find(name: &str) -> Option<&'static DynamicBrokerConfig> {
    DYNAMIC_BROKER_CONFIGS.binary_search_by(|c| c.name.cmp(name)).ok().map(|i| &DYNAMIC_BROKER_CONFIGS[i])
}

/// A dynamic broker config's value on `broker`: its own, else the cluster default,
/// else Kafka's default.
pub fn dynamic_broker_value<'a>(image: &'a MetadataImage, broker: i32, name: &str) -> &'a str {
    match image.broker_config(broker, name) {
        Some((value, _)) => value,
        None => find(name).and_then(|c| c.default).unwrap_or(""),
    }
}

/// Checks a dynamic broker config for `broker` (`""`: the cluster default), with
/// Kafka's messages.
///
/// # Errors
/// INVALID_REQUEST (not dynamic, or per broker only) or INVALID_CONFIG (a bad value),
/// with the message.
pub fn validate_broker_config(broker: &str, name: &str, value: &str) -> Result<(), crate::errors::Refusal> {
    let Some(config) = find(name) else {
        return Err((code::INVALID_REQUEST, format!("Cannot update these configs dynamically: [{name}]")));
    };
    if broker.is_empty() && config.scope == PerBroker {
        return Err((
            code::INVALID_REQUEST,
            format!("Cannot update these configs at default cluster level, broker id must be specified: [{name}]"),
        ));
    }
    let invalid =
        |why: &str| Err((code::INVALID_CONFIG, format!("Invalid value {value} for configuration {name}: {why}")));
    let v = value.trim();
    let typed = match config.kind {
        Int => v.parse::<i32>().is_ok(),
        Short => v.parse::<i16>().is_ok(),
        Long => v.parse::<i64>().is_ok(),
        Double => v.parse::<f64>().is_ok(),
        Boolean => v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false"),
        Str | List | Class | Password => true,
    };
    if !typed {
        let kind = match config.kind {
            Boolean => "Expected value to be either true or false",
            Double => "Not a number of type DOUBLE",
            Short => "Not a number of type SHORT",
            Int => "Not a number of type INT",
            _ => "Not a number of type LONG",
        };
        return invalid(kind);
    }
    if matches!(name, "follower.replication.throttled.rate" | "leader.replication.throttled.rate")
        && v.parse::<i64>().is_ok_and(|n| n < 0)
    {
        return invalid("Value must be at least 0");
    }
    // A broker-level topic default is held to the topic config's bounds.
    if let Some(def) = TOPIC_CONFIGS.iter().find(|d| d.broker_name == Some(name)) {
        if let Err(why) = (def.validate)(value) {
            return invalid(&why);
        }
    }
    Ok(())
}

/// The broker-level topic defaults that `broker` applies, by topic config name, most
/// specific first: its own dynamic values, the cluster's dynamic defaults, then the
/// static ones (`[topic_defaults]`, flags).
pub fn topic_default_layers(
    image: &MetadataImage,
    broker: i32,
    statics: &BTreeMap<String, String>,
) -> Vec<(ConfigSource, BTreeMap<String, String>)> {
    let dynamic = |key: &str| {
        let set = image.broker_configs.get(key);
        TOPIC_CONFIGS
            .iter()
            .filter_map(|def| {
                let value = set?.get(def.broker_name?)?;
                Some((def.name.to_owned(), value.clone()))
            })
            .collect::<BTreeMap<_, _>>()
    };
    vec![
        (ConfigSource::DynamicBroker, dynamic(&broker.to_string())),
        (ConfigSource::DynamicDefaultBroker, dynamic("")),
        (ConfigSource::StaticBroker, statics.clone()),
    ]
}

/// A topic config's value and its source: the topic's override, else the first
/// layer (`topic_default_layers`) that sets it, else Kafka's default.
pub fn effective_topic_config(
    def: &crate::configs::ConfigDef,
    overrides: &BTreeMap<String, String>,
    layers: &[(ConfigSource, BTreeMap<String, String>)],
) -> (String, ConfigSource) {
    if let Some(v) = overrides.get(def.name) {
        return (v.clone(), ConfigSource::DynamicTopic);
    }
    layers
        .iter()
        .find_map(|(source, layer)| layer.get(def.name).map(|v| (v.clone(), *source)))
        .unwrap_or_else(|| (def.default.to_owned(), ConfigSource::Default))
}

/// The broker-level topic defaults `broker` applies now, by topic config name
/// (`topic_default_layers`, merged).
pub fn topic_defaults(
    image: &MetadataImage,
    broker: i32,
    statics: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut merged = BTreeMap::new();
    for (_, layer) in topic_default_layers(image, broker, statics).into_iter().rev() {
        merged.extend(layer);
    }
    merged
}

/// Which of `dirs` a `cordoned.log.dirs` value (KIP-1066: paths, comma-separated, or
/// `*` for all) names.
pub fn cordoned(value: &str, dirs: &skein_engine::log_dirs::LogDirs) -> Vec<bool> {
    let named: Vec<&str> = value.split(',').map(str::trim).filter(|d| !d.is_empty()).collect();
    dirs.dirs()
        .iter()
        .map(|dir| {
            let path = dir.path().display().to_string();
            named.iter().any(|d| *d == "*" || d.trim_end_matches('/') == path.trim_end_matches('/'))
        })
        .collect()
}

/// Sets which of the node's log directories are cordoned, from `image`.
pub fn install_cordoned(image: &MetadataImage, node: i32, dirs: &skein_engine::log_dirs::LogDirs) {
    dirs.set_cordoned(&cordoned(dynamic_broker_value(image, node, "cordoned.log.dirs"), dirs));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_and_checked_as_kafka() {
        assert!(DYNAMIC_BROKER_CONFIGS.windows(2).all(|w| w[0].name < w[1].name), "sorted, for find");
        assert!(validate_broker_config("1", "sasl.kerberos.min.time.before.relogin", "60000").is_ok());
        let (c, why) = validate_broker_config("", "sasl.kerberos.min.time.before.relogin", "60000").unwrap_err();
        assert_eq!(c, code::INVALID_REQUEST);
        assert!(why.contains("broker id must be specified"), "{why}");
        let (c, why) = validate_broker_config("", "num.partitions", "3").unwrap_err();
        assert_eq!(
            (c, why.as_str()),
            (code::INVALID_REQUEST, "Cannot update these configs dynamically: [num.partitions]")
        );
        assert_eq!(validate_broker_config("", "max.connections", "x").unwrap_err().0, code::INVALID_CONFIG);
        assert_eq!(validate_broker_config("", "log.retention.ms", "-7").unwrap_err().0, code::INVALID_CONFIG);
        assert!(validate_broker_config("", "log.retention.ms", "3600000").is_ok());
        assert_eq!(
            validate_broker_config("", "leader.replication.throttled.rate", "-1").unwrap_err().0,
            code::INVALID_CONFIG
        );
    }

    #[test]
    fn topic_defaults_layer_dynamic_over_static() {
        let mut image = MetadataImage::default();
        let statics = BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]);
        assert_eq!(topic_defaults(&image, 1, &statics)["retention.ms"], "1000");
        image.broker_configs.entry(String::new()).or_default().insert("log.retention.ms".into(), "2000".into());
        assert_eq!(topic_defaults(&image, 1, &statics)["retention.ms"], "2000");
        image.broker_configs.entry("1".into()).or_default().insert("log.retention.ms".into(), "3000".into());
        assert_eq!(topic_defaults(&image, 1, &statics)["retention.ms"], "3000");
        assert_eq!(topic_defaults(&image, 2, &statics)["retention.ms"], "2000");
    }
}
