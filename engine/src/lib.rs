//! Skein's storage engine: Kafka-format segmented partition logs, appended with
//! O_DIRECT writes on io_uring, one log manager per shard.
//!
//! The engine stores validated RecordBatch v2 bytes by (partition, offset) in Kafka's
//! on-disk layout (`<topic>-<partition>/<20-digit base offset>.log|.index|.timeindex`).
//! It knows nothing of Kafka requests, sockets or replication protocols: `net` turns
//! requests into appends and reads, `replication` drives truncation.
//!
//! Map of the crate:
//! - `batch`: the zero-copy batch view and its validation.
//! - `records`: record-level decoding and codecs (compaction, timestamp lookups).
//! - `io`: the storage trait, its glommio implementation, and fault injection.
//! - `appender`: the O_DIRECT tail buffer with group commit and ordered writes.
//! - `segment`, `index`: one segment file and its sparse indexes.
//! - `log`: a partition log (append, read, flush, recovery, truncation, retention,
//!   compaction). Its module docs state the offsets it keeps and the recovery policy.
//! - `cache`: the shard's LRU batch cache.
//! - `manager`: the per-shard log manager.
//! - `checkpoint`: recovery point, log start and leader epoch files.
//! - `stamp`: a log's change stamp, which fetch sessions on any shard watch.

// `unsafe` is allowed in one module only: `io::dma`, whose read buffers are owned by
// their shard's ring and travel to other shards inside `Bytes`.
#![deny(unsafe_code)]

pub mod appender;
pub mod batch;
pub mod cache;
pub mod checkpoint;
pub mod config;
pub mod error;
pub mod index;
pub mod io;
pub mod limits;
pub mod log;
pub mod log_dirs;
pub mod manager;
pub mod metrics;
pub mod offset_map;
pub mod records;
pub mod relocate;
pub mod segment;
pub mod space;
pub mod stamp;
pub mod time;
pub mod types;
pub mod validate;
mod waiters;

pub use batch::{Backing, Batch, BatchError};
pub use config::{CleanupPolicy, LogConfig, WriteShape};
pub use error::{Error, Result};
pub use log::{AppendInfo, AppendMode, CleanerConfig, Dirtiness, Log, LogContext};
pub use manager::LogManager;
pub use stamp::{Signal, Stamp, Stamped};
pub use types::{LeaderEpoch, Offset, TimestampMs, TopicPartition};
pub use waiters::{Wait, Waiters};
