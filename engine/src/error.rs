//! The engine's one error type. Operating errors (bad input, disk trouble) are values
//! of `Error`; programmer errors are assertions.

use std::path::PathBuf;

use crate::batch::BatchError;
use crate::types::{Offset, TopicPartition};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bytes offered for append are not a valid batch.
    #[error("invalid batch: {0}")]
    InvalidBatch(#[from] BatchError),

    /// Stored data failed validation (length or CRC) where it must be intact: below the
    /// recovery point, or on a read. Counted in `EngineMetrics::corruptions`.
    #[error("corruption in {path} at byte {position}: {reason}")]
    Corruption { path: PathBuf, position: u64, reason: String },

    /// An I/O operation failed; `op` and `path` say which.
    #[error("{op} {path}: {source}")]
    Io { op: &'static str, path: PathBuf, source: std::io::Error },

    /// The disk has too little free space for new data. Retriable: reads, deletes and
    /// retention keep working, and appends succeed again once space is freed.
    #[error("disk full at {path}: {available_bytes} bytes available, {needed_bytes} needed")]
    DiskFull { path: PathBuf, available_bytes: u64, needed_bytes: u64 },

    /// A write or fsync failed earlier, so the log no longer knows what is on disk. It
    /// refuses all appends until it is reopened (which runs recovery). A failed fsync
    /// is never retried as if it had succeeded (see "fsyncgate", PostgreSQL 2018).
    #[error("log {partition} failed and is read-only until reopened: {reason}")]
    LogFailed { partition: TopicPartition, reason: String },

    /// The partition's log directory failed (a write or sync in it failed): its
    /// partitions stay offline until the node restarts with the directory repaired or
    /// left out (Kafka's offline log directory).
    #[error("log directory {dir} of {partition} is offline")]
    DirOffline { partition: TopicPartition, dir: PathBuf },

    /// The requested offset is outside `[log_start_offset, log_end_offset]`.
    #[error("offset {offset} out of range [{start}, {end}]")]
    OffsetOutOfRange { offset: Offset, start: Offset, end: Offset },

    /// A replica append whose offsets do not follow the log end.
    #[error("batch offset {offset} is below the log end offset {log_end}")]
    OffsetNotMonotonic { offset: Offset, log_end: Offset },

    /// The partition is not hosted by this log manager.
    #[error("unknown partition {0}")]
    UnknownPartition(TopicPartition),

    /// The partition already exists.
    #[error("partition {0} already exists")]
    PartitionExists(TopicPartition),

    /// The partition's directory belongs to another incarnation of its topic (Kafka's
    /// `partition.metadata` names a different topic id).
    #[error("partition {partition} on disk belongs to topic id {found}, not {expected}")]
    TopicIdMismatch { partition: TopicPartition, expected: String, found: String },

    /// A configuration value is out of range; the message names it with Kafka's name.
    #[error("invalid config {name}={value}: {reason}")]
    InvalidConfig { name: &'static str, value: String, reason: &'static str },

    /// The log is closed (shutting down or deleted).
    #[error("log {0} is closed")]
    Closed(TopicPartition),
}

impl Error {
    /// Whether a client may retry the same request later and expect success.
    pub fn is_retriable(&self) -> bool {
        matches!(self, Error::DiskFull { .. })
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io { op, path: path.into(), source }
    }
}
