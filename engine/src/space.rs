//! Whether the data directory has room for new data, as appends find it.
//!
//! A log reserves file space before it buffers a batch (`log/reserve.rs`), and checks
//! the file system's free space first: below what it needs plus `DISK_HEADROOM_BYTES`
//! the append fails at once with the retriable `DiskFull` (Kafka's
//! KAFKA_STORAGE_ERROR on the wire) and nothing is stored. Reads, deletes, retention
//! and DeleteRecords keep working, and appends succeed again as soon as space is
//! freed, without a restart.
//!
//! `SpaceWatch` makes that state visible: one flag per data directory, shared by every
//! shard of the node (so the change is logged once, not once per shard or per refused
//! append), counted per shard in `EngineMetrics::disk_full_refusals`, and exported as
//! `skein_log_dir_full`. A node in a cluster reports it in its heartbeats, and the
//! controller moves its leaderships away while it lasts.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::metrics::EngineMetrics;

/// Free space kept back when reserving, so that checkpoints, indexes and the
/// metadata log can still be written on a disk that appends have filled.
pub const DISK_HEADROOM_BYTES: u64 = 16 << 20;

/// The least time between two log lines about the same directory filling: a disk
/// hovering at its limit would otherwise log at every retention pass. The end of a
/// spell that was logged is logged too.
const LOG_INTERVAL_MS: u64 = 30_000;

/// The shared state of one data directory.
#[derive(Debug, Default)]
struct Shared {
    full: AtomicBool,
    /// The bytes the last refused append needed (besides the headroom).
    needed: AtomicU64,
    /// Wall-clock milliseconds of the last "full" log line.
    logged_ms: AtomicU64,
    /// The current full spell was logged: its end is logged too.
    spell_logged: AtomicBool,
    /// A write or sync of a log in the directory failed: the directory is offline.
    failed: AtomicBool,
}

/// One shard's view of its data directory's free space; clones share the flag.
#[derive(Debug, Clone)]
pub struct SpaceWatch {
    dir: PathBuf,
    shared: Arc<Shared>,
}

impl SpaceWatch {
    /// A watch of `dir` that no other shard shares (tests, one-shard nodes).
    pub fn new(dir: impl Into<PathBuf>) -> SpaceWatch {
        SpaceWatch { dir: dir.into(), shared: Arc::default() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether appends are being refused for want of space.
    pub fn is_full(&self) -> bool {
        self.shared.full.load(Ordering::Relaxed)
    }

    /// Whether the directory failed (`failed`).
    pub fn is_failed(&self) -> bool {
        self.shared.failed.load(Ordering::Relaxed)
    }

    /// A write or sync of `partition`'s log failed: the device under the directory is
    /// taken for failed, as Kafka takes a log directory offline on an I/O error, and
    /// the node takes its partitions offline. Logged once.
    pub fn failed(&self, partition: &crate::TopicPartition, reason: &str) {
        if !self.shared.failed.swap(true, Ordering::Relaxed) {
            tracing::error!(target: "skein::engine", dir = %self.dir.display(), partition = %partition, reason,
                "log directory failed: its partitions go offline until the node restarts");
        }
    }

    /// An append was refused: `available` bytes are free and it needed `needed` (plus
    /// the headroom). Counted; logged once when the directory becomes full.
    pub fn refused(&self, metrics: &EngineMetrics, available: u64, needed: u64) {
        EngineMetrics::add(&metrics.disk_full_refusals, 1);
        self.shared.needed.store(needed, Ordering::Relaxed);
        if !self.shared.full.swap(true, Ordering::Relaxed) && self.may_log() {
            self.shared.spell_logged.store(true, Ordering::Relaxed);
            tracing::error!(target: "skein::engine", dir = %self.dir.display(), available_bytes = available,
                needed_bytes = needed, headroom_bytes = DISK_HEADROOM_BYTES,
                "log directory full: appends are refused (KAFKA_STORAGE_ERROR) until space is freed");
        }
    }

    /// Whether `available` free bytes would take the last refused append.
    pub fn would_take_refused(&self, available: u64) -> bool {
        available >= self.shared.needed.load(Ordering::Relaxed).saturating_add(DISK_HEADROOM_BYTES)
    }

    /// A reservation found room (or housekeeping found room for the last refused
    /// one): appends go on.
    pub fn has_room(&self, available: u64) {
        if self.shared.full.load(Ordering::Relaxed)
            && self.shared.full.swap(false, Ordering::Relaxed)
            && self.shared.spell_logged.swap(false, Ordering::Relaxed)
        {
            tracing::warn!(target: "skein::engine", dir = %self.dir.display(), available_bytes = available,
                "log directory has room again: appends resume");
        }
    }

    /// Whether a "full" line may go out now (at most one per `LOG_INTERVAL_MS`; the
    /// end of a logged spell is always logged).
    fn may_log(&self) -> bool {
        let now = crate::time::now_ms().max(0) as u64;
        let last = self.shared.logged_ms.load(Ordering::Relaxed);
        (last == 0 || now.saturating_sub(last) >= LOG_INTERVAL_MS)
            && self.shared.logged_ms.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The flag is shared by clones (the node's shards), flips both ways, and every
    // refusal is counted.
    #[test]
    fn the_flag_is_shared_and_refusals_counted() {
        let watch = SpaceWatch::new("/data");
        let other = watch.clone();
        let metrics = EngineMetrics::default();
        assert!(!other.is_full());
        watch.refused(&metrics, 10, 20);
        watch.refused(&metrics, 10, 20);
        assert!(other.is_full());
        assert_eq!(metrics.disk_full_refusals.get(), 2);
        other.has_room(1 << 30);
        assert!(!watch.is_full());
    }
}
