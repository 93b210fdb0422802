//! Per-log settings, named and defaulted as Kafka's topic configs, and the node-wide
//! shape of the appender's writes (`WriteShape`), which no topic can change.

use crate::error::{Error, Result};
use crate::limits::{
    APPEND_BUFFER_BYTES_MAX, APPEND_CHUNKS_MAX, APPEND_CHUNK_BYTES_DEFAULT, APPEND_CHUNK_BYTES_MAX,
    APPEND_CHUNK_BYTES_MIN, WRITES_IN_FLIGHT_DEFAULT, WRITES_IN_FLIGHT_MAX, WRITES_IN_FLIGHT_MIN,
};

/// How the appender writes a log's active segment: the size of a full write and how
/// many writes to one file run at once. A property of the device, not of a topic, so
/// one per node: the defaults (`limits.rs`), or what `skein iotune` measured for the
/// data directory's device. Bounded so that a tail buffer stays within
/// `APPEND_BUFFER_BYTES_MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteShape {
    /// Bytes of one appender chunk: a full write. A power of two in
    /// [`APPEND_CHUNK_BYTES_MIN`, `APPEND_CHUNK_BYTES_MAX`].
    pub chunk_bytes: usize,
    /// Writes in flight per log file, in [`WRITES_IN_FLIGHT_MIN`, `WRITES_IN_FLIGHT_MAX`].
    pub writes_in_flight: usize,
}

impl Default for WriteShape {
    fn default() -> Self {
        WriteShape { chunk_bytes: APPEND_CHUNK_BYTES_DEFAULT, writes_in_flight: WRITES_IN_FLIGHT_DEFAULT }
    }
}

impl WriteShape {
    /// Checks the bounds of `limits.rs`.
    ///
    /// # Errors
    /// `InvalidConfig` naming the first setting out of bounds.
    pub fn validate(&self) -> Result<()> {
        let bad = |name: &'static str, value: usize, reason: &'static str| {
            Err(Error::InvalidConfig { name, value: value.to_string(), reason })
        };
        let chunk = self.chunk_bytes;
        if !chunk.is_power_of_two() || !(APPEND_CHUNK_BYTES_MIN..=APPEND_CHUNK_BYTES_MAX).contains(&chunk) {
            return bad("append_chunk_bytes", chunk, "must be a power of two in [65536, 2097152]");
        }
        if !(WRITES_IN_FLIGHT_MIN..=WRITES_IN_FLIGHT_MAX).contains(&self.writes_in_flight) {
            return bad("writes_in_flight", self.writes_in_flight, "must be in [1, 32]");
        }
        if self.buffer_bytes() > APPEND_BUFFER_BYTES_MAX {
            let reason = "with this append_chunk_bytes the tail buffer (a chunk per write in flight, at least 8) passes 16 MiB per log";
            return bad("writes_in_flight", self.writes_in_flight, reason);
        }
        Ok(())
    }

    /// Bytes a log buffers before its appends wait for writes: `APPEND_CHUNKS_MAX`
    /// chunks, or one per write in flight when that is more.
    pub fn buffer_bytes(&self) -> usize {
        self.chunk_bytes * APPEND_CHUNKS_MAX.max(self.writes_in_flight)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn check(chunk_bytes: usize, writes_in_flight: usize, expected: Option<&str>) {
        let result = WriteShape { chunk_bytes, writes_in_flight }.validate();
        match (result, expected) {
            (Ok(()), None) => {}
            (Err(e), Some(name)) => assert!(e.to_string().contains(name), "{chunk_bytes}x{writes_in_flight}: {e}"),
            (result, expected) => panic!("{chunk_bytes}x{writes_in_flight}: {result:?}, expected {expected:?}"),
        }
    }

    // Write shapes within the bounds of `limits.rs` pass; each bound refuses, naming
    // the setting; the default is valid.
    #[test]
    fn write_shape_bounds() {
        WriteShape::default().validate().unwrap();
        check(APPEND_CHUNK_BYTES_MIN, WRITES_IN_FLIGHT_MIN, None);
        check(APPEND_CHUNK_BYTES_MAX, APPEND_CHUNKS_MAX, None);
        check(512 << 10, WRITES_IN_FLIGHT_MAX, None);
        check(APPEND_CHUNK_BYTES_MIN / 2, 8, Some("append_chunk_bytes"));
        check(APPEND_CHUNK_BYTES_MAX * 2, 8, Some("append_chunk_bytes"));
        check(768 << 10, 8, Some("append_chunk_bytes"));
        check(512 << 10, 0, Some("writes_in_flight"));
        check(512 << 10, WRITES_IN_FLIGHT_MAX + 1, Some("writes_in_flight"));
        check(APPEND_CHUNK_BYTES_MAX, 16, Some("16 MiB"));
    }

    // The refusals' texts state the bounds `limits.rs` holds (they are static strings).
    #[test]
    fn write_shape_messages_match_the_limits() {
        let chunk = WriteShape { chunk_bytes: 1, writes_in_flight: 8 }.validate().unwrap_err().to_string();
        assert!(chunk.contains(&format!("[{APPEND_CHUNK_BYTES_MIN}, {APPEND_CHUNK_BYTES_MAX}]")), "{chunk}");
        let depth = WriteShape { chunk_bytes: 512 << 10, writes_in_flight: 0 }.validate().unwrap_err().to_string();
        assert!(depth.contains(&format!("[{WRITES_IN_FLIGHT_MIN}, {WRITES_IN_FLIGHT_MAX}]")), "{depth}");
        assert_eq!(APPEND_BUFFER_BYTES_MAX, 16 << 20);
        assert_eq!(APPEND_CHUNKS_MAX, 8);
    }
}
