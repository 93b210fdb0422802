//! What a partition leader does to a client's batch before appending it, as Kafka's
//! `LogValidator` does: refuse what a client may not write (control batches, a bad
//! sequence), check every record against the batch header and the topic's rules, then
//! stamp LogAppendTime or recompress to the topic's `compression.type`.
//!
//! A refused batch leaves the log untouched and gets Kafka's error code: INVALID_RECORD
//! for framing and keys, INVALID_TIMESTAMP for timestamps, with the offending records
//! listed (KIP-467).

use std::collections::BTreeMap;

use skein_engine::records::{recompress_batch, Compression};
use skein_engine::validate::{validate_records, RecordRules, Violation};
use skein_engine::Batch;

use crate::configs::{effective, log_config};
use crate::errors::code;

/// Bytes a compressed batch may expand to while it is validated or recompressed: the
/// engine's bound for reading batches back, so nothing is accepted that cannot be read.
const DECOMPRESSED_BYTES_MAX: usize = skein_engine::limits::DECOMPRESSED_BATCH_BYTES_MAX;

/// The settings of a topic that its partitions apply.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicSettings {
    pub log: skein_engine::LogConfig,
    pub append: AppendRules,
    /// The topic's id, written into each partition directory (`partition.metadata`).
    pub topic_id: [u8; 16],
}

impl TopicSettings {
    pub fn of(topic: &crate::metadata::TopicMeta, broker: &BTreeMap<String, String>) -> TopicSettings {
        let log = log_config(&topic.configs, broker);
        let append = AppendRules::of(&topic.configs, broker, log.cleanup_policy.compact);
        TopicSettings { log, append, topic_id: *topic.id.as_bytes() }
    }
}

/// The topic configs that govern appends from clients.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AppendRules {
    /// `message.timestamp.type=LogAppendTime`.
    pub log_append_time: bool,
    /// `min.insync.replicas`.
    pub min_insync_replicas: i32,
    /// `compression.type`: the codec batches are stored with and its level; `None`
    /// keeps each batch as its producer compressed it.
    pub compression: Option<(Compression, Option<i32>)>,
    /// `cleanup.policy` includes compact: records need keys.
    pub key_required: bool,
    /// `message.timestamp.before.max.ms` and `message.timestamp.after.max.ms`.
    pub timestamp_before_max_ms: i64,
    pub timestamp_after_max_ms: i64,
}

impl AppendRules {
    /// The rules of a topic; `compacted` is its log config's cleanup policy.
    pub fn of(overrides: &BTreeMap<String, String>, broker: &BTreeMap<String, String>, compacted: bool) -> AppendRules {
        let get = |name: &str| effective(name, overrides, broker).map(|(v, _)| v).unwrap_or_default();
        let long = |name: &str| get(name).trim().parse::<i64>().unwrap_or(i64::MAX);
        let level = |name: &str| get(name).trim().parse::<i32>().ok();
        let compression = match get("compression.type").as_str() {
            "uncompressed" => Some((Compression::None, None)),
            "gzip" => Some((Compression::Gzip, level("compression.gzip.level").filter(|l| *l > 0))),
            "snappy" => Some((Compression::Snappy, None)),
            "lz4" => Some((Compression::Lz4, None)),
            "zstd" => Some((Compression::Zstd, level("compression.zstd.level"))),
            _ => None,
        };
        AppendRules {
            log_append_time: get("message.timestamp.type") == "LogAppendTime",
            min_insync_replicas: get("min.insync.replicas").parse().unwrap_or(1),
            compression,
            key_required: compacted,
            timestamp_before_max_ms: long("message.timestamp.before.max.ms"),
            timestamp_after_max_ms: long("message.timestamp.after.max.ms"),
        }
    }
}

/// Why a batch was refused: a Kafka error code, a message, and the refused records
/// (index in the batch, message).
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub error_code: i16,
    pub message: String,
    pub record_errors: Vec<(i32, String)>,
}

impl Refused {
    fn invalid(message: String) -> Refused {
        Refused { error_code: code::INVALID_RECORD, message, record_errors: Vec::new() }
    }
}

/// Validates a client's batch for `partition` at time `now_ms` and returns the batch
/// to append: unchanged, stamped with LogAppendTime, or recompressed.
///
/// # Errors
/// `Refused` with Kafka's error code; the log must then stay untouched.
pub fn admit(batch: Batch, rules: &AppendRules, partition: &str, now_ms: i64) -> Result<Batch, Refused> {
    if batch.is_control() {
        return Err(Refused::invalid(format!(
            "Clients are not allowed to write control records in topic partition {partition}"
        )));
    }
    if batch.producer_id() >= 0 && batch.base_sequence() < 0 {
        return Err(Refused::invalid(format!(
            "Invalid sequence number {} in record batch with producerId {} in topic partition {partition}",
            batch.base_sequence(),
            batch.producer_id()
        )));
    }
    let timestamp_range = (!rules.log_append_time).then(|| {
        (now_ms.saturating_sub(rules.timestamp_before_max_ms), now_ms.saturating_add(rules.timestamp_after_max_ms))
    });
    let record_rules = RecordRules {
        key_required: rules.key_required,
        timestamp_range,
        decompressed_bytes_max: DECOMPRESSED_BYTES_MAX,
    };
    let violations = validate_records(&batch, &record_rules)
        .map_err(|e| Refused::invalid(format!("invalid record batch in topic partition {partition}: {e}")))?;
    if !violations.is_empty() {
        let timestamps = violations.iter().any(|v| matches!(v.violation, Violation::TimestampOutOfRange { .. }));
        let record_errors: Vec<(i32, String)> = violations
            .iter()
            .map(|v| {
                let message = match &v.violation {
                    Violation::KeyMissing => {
                        format!("Compacted topic cannot accept message without key in topic partition {partition}.")
                    }
                    Violation::TimestampOutOfRange { timestamp, min, max } => format!(
                        "Timestamp {timestamp} of message with offset {} is out of range. The timestamp should be within [{min}, {max}]",
                        v.index
                    ),
                };
                (v.index, message)
            })
            .collect();
        let (error_code, message) = if timestamps {
            (code::INVALID_TIMESTAMP, "One or more records have been rejected due to invalid timestamp".to_string())
        } else {
            let shown: Vec<&str> = record_errors.iter().take(3).map(|(_, m)| m.as_str()).collect();
            (
                code::INVALID_RECORD,
                format!(
                    "One or more records have been rejected due to {} record errors in total, and only showing the first three errors at most: {shown:?}",
                    record_errors.len()
                ),
            )
        };
        return Err(Refused { error_code, message, record_errors });
    }
    let batch = match rules.compression {
        Some((codec, level)) if codec.attribute_bits() != batch.compression_bits() => {
            let bytes = recompress_batch(&batch.bytes(), codec, level, DECOMPRESSED_BYTES_MAX)
                .map_err(|e| Refused::invalid(format!("cannot recompress a batch for {partition}: {e}")))?;
            // The new bytes get the same checks as any batch before they reach the log.
            Batch::validate_fresh(bytes::Bytes::from(bytes), usize::MAX)
                .map_err(|e| Refused::invalid(format!("recompressed batch for {partition} is invalid: {e}")))?
        }
        _ => batch,
    };
    Ok(if rules.log_append_time { batch.with_log_append_time(now_ms) } else { batch })
}
