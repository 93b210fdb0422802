//! Per-log settings, named and defaulted as Kafka's topic configs.

use crate::error::{Error, Result};

/// `cleanup.policy`: `delete`, `compact`, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

impl CleanupPolicy {
    pub const DELETE: CleanupPolicy = CleanupPolicy { delete: true, compact: false };
    pub const COMPACT: CleanupPolicy = CleanupPolicy { delete: false, compact: true };

    /// Parses Kafka's comma-separated form, e.g. `compact,delete`.
    ///
    /// # Errors
    /// `InvalidConfig` for an unknown or empty policy.
    pub fn parse(value: &str) -> Result<CleanupPolicy> {
        let mut policy = CleanupPolicy { delete: false, compact: false };
        for part in value.split(',').map(str::trim) {
            match part {
                "delete" => policy.delete = true,
                "compact" => policy.compact = true,
                _ => {
                    return Err(Error::InvalidConfig {
                        name: "cleanup.policy",
                        value: value.to_owned(),
                        reason: "expected delete, compact or both",
                    })
                }
            }
        }
        Ok(policy)
    }
}

/// Settings of one partition log. Field names mirror Kafka's config names.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes`: roll when the active segment would exceed this size.
    pub segment_bytes: u64,
    /// `segment.ms`: roll when the active segment's first append is this old.
    pub segment_ms: u64,
    /// `segment.jitter.ms`: up to this much is taken off `segment_ms` per segment, so
    /// that partitions created together do not all roll at once.
    pub segment_jitter_ms: u64,
    /// `segment.index.bytes`: roll when an index would exceed this size.
    pub segment_index_bytes: u64,
    /// `index.interval.bytes`: bytes of batches between two index entries.
    pub index_interval_bytes: u64,
    /// `retention.ms`: delete closed segments whose newest record is older; -1 keeps all.
    pub retention_ms: i64,
    /// `retention.bytes`: delete oldest closed segments beyond this size; -1 keeps all.
    pub retention_bytes: i64,
    /// `cleanup.policy`.
    pub cleanup_policy: CleanupPolicy,
    /// `delete.retention.ms`: how long compaction keeps tombstones.
    pub delete_retention_ms: i64,
    /// `min.cleanable.dirty.ratio`: the share of dirty bytes at which the cleaner runs.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: records younger than this are not compacted.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a log whose oldest dirty record is older is cleaned
    /// whatever its dirty ratio.
    pub max_compaction_lag_ms: i64,
    /// `max.message.bytes`: the largest batch accepted.
    pub max_message_bytes: u32,
    /// `flush.messages`: fdatasync once this many records are unflushed; 1 syncs every
    /// append before it completes. `u64::MAX` (Kafka's Long.MAX_VALUE) never forces it.
    pub flush_messages: u64,
    /// `flush.ms`: fdatasync at most this long after a write; `u64::MAX` never.
    pub flush_ms: u64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            segment_jitter_ms: 0,
            segment_index_bytes: 10 << 20,
            index_interval_bytes: 4096,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            cleanup_policy: CleanupPolicy::DELETE,
            delete_retention_ms: 24 * 3600 * 1000,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            max_message_bytes: 1024 * 1024 + 12,
            flush_messages: u64::MAX,
            flush_ms: u64::MAX,
        }
    }
}

impl LogConfig {
    /// Checks ranges as Kafka's `LogConfig` validation does.
    ///
    /// # Errors
    /// `InvalidConfig` naming the first bad setting.
    pub fn validate(&self) -> Result<()> {
        let bad =
            |name: &'static str, value: String, reason: &'static str| Err(Error::InvalidConfig { name, value, reason });
        if self.segment_bytes < 14 || self.segment_bytes > i32::MAX as u64 {
            return bad("segment.bytes", self.segment_bytes.to_string(), "must be in [14, 2147483647]");
        }
        if self.segment_ms < 1 {
            return bad("segment.ms", self.segment_ms.to_string(), "must be at least 1");
        }
        if self.segment_index_bytes < 8 || self.segment_index_bytes > i32::MAX as u64 {
            return bad("segment.index.bytes", self.segment_index_bytes.to_string(), "must be in [8, 2147483647]");
        }
        if self.index_interval_bytes > i32::MAX as u64 {
            return bad("index.interval.bytes", self.index_interval_bytes.to_string(), "must be at most 2147483647");
        }
        if self.retention_ms < -1 {
            return bad("retention.ms", self.retention_ms.to_string(), "must be -1 or more");
        }
        if self.delete_retention_ms < 0 {
            return bad("delete.retention.ms", self.delete_retention_ms.to_string(), "must be 0 or more");
        }
        if !(0.0..=1.0).contains(&self.min_cleanable_dirty_ratio) {
            let value = self.min_cleanable_dirty_ratio.to_string();
            return bad("min.cleanable.dirty.ratio", value, "must be in [0.0, 1.0]");
        }
        if self.min_compaction_lag_ms < 0 {
            return bad("min.compaction.lag.ms", self.min_compaction_lag_ms.to_string(), "must be 0 or more");
        }
        if self.max_compaction_lag_ms < 1 {
            return bad("max.compaction.lag.ms", self.max_compaction_lag_ms.to_string(), "must be at least 1");
        }
        if self.max_message_bytes == 0 || self.max_message_bytes > i32::MAX as u32 {
            return bad("max.message.bytes", self.max_message_bytes.to_string(), "must be in [1, 2147483647]");
        }
        if self.flush_messages < 1 {
            return bad("flush.messages", self.flush_messages.to_string(), "must be at least 1");
        }
        Ok(())
    }

    /// Index entries a segment may hold before it must roll.
    pub fn offset_index_entries_max(&self) -> usize {
        (self.segment_index_bytes as usize / crate::index::OFFSET_ENTRY_BYTES).max(1)
    }

    pub fn time_index_entries_max(&self) -> usize {
        (self.segment_index_bytes as usize / crate::index::TIME_ENTRY_BYTES).max(1)
    }
}
