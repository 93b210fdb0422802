//! Per-shard engine counters. Plain `Cell`s: a shard is one thread, and the broker's
//! `/metrics` endpoint reads them from that thread.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// Upper bounds (µs) of the buckets of a stage's latency histogram, then +Inf.
pub const STAGE_BUCKETS_US: [u64; 16] =
    [5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000];

/// The latency of one stage of a request's path on a shard: a fixed-bucket histogram
/// cheap enough to stay on (a clock read and two cell updates per observation).
#[derive(Debug, Default)]
pub struct StageHistogram {
    buckets: [Cell<u64>; STAGE_BUCKETS_US.len() + 1],
    sum_us: Cell<u64>,
}

impl StageHistogram {
    pub fn observe(&self, elapsed: Duration) {
        let us = elapsed.as_micros() as u64;
        let bucket = STAGE_BUCKETS_US.iter().position(|&b| us <= b).unwrap_or(STAGE_BUCKETS_US.len());
        self.buckets[bucket].set(self.buckets[bucket].get() + 1);
        self.sum_us.set(self.sum_us.get() + us);
    }

    pub fn observe_since(&self, start: Instant) {
        self.observe(start.elapsed());
    }

    /// Count per bucket of `STAGE_BUCKETS_US`, then the overflow bucket (not cumulative).
    pub fn buckets(&self) -> [u64; STAGE_BUCKETS_US.len() + 1] {
        std::array::from_fn(|i| self.buckets[i].get())
    }

    pub fn sum_us(&self) -> u64 {
        self.sum_us.get()
    }
}

#[derive(Debug, Default)]
pub struct EngineMetrics {
    /// Batches and bytes appended (written to the tail buffer and then to disk).
    pub appended_batches: Cell<u64>,
    pub appended_bytes: Cell<u64>,
    /// O_DIRECT writes submitted and currently in flight.
    pub writes: Cell<u64>,
    pub writes_in_flight: Cell<u64>,
    /// fdatasync calls.
    pub syncs: Cell<u64>,
    /// Reads answered from the batch cache or from disk.
    pub cache_reads: Cell<u64>,
    pub disk_reads: Cell<u64>,
    pub disk_read_bytes: Cell<u64>,
    /// Bytes copied in user space on the way to disk (patching a leader's batch, the
    /// tail buffer, writes of a chunk still open) and out of it (a batch that crosses
    /// two read-ahead reads, joined): against `appended_bytes` and the bytes fetches
    /// send, copies per byte.
    pub append_copied_bytes: Cell<u64>,
    pub read_copied_bytes: Cell<u64>,
    /// Windows an idle log held a write back in, to coalesce appends (`log/coalesce.rs`).
    pub coalescing_windows: Cell<u64>,
    /// Bytes read ahead of readers behind the tail, and read-ahead bytes in flight.
    pub read_ahead_bytes: Cell<u64>,
    pub read_ahead_bytes_in_flight: Cell<u64>,
    /// Corruption found where data must be intact (below the recovery point, on read,
    /// by the scrubber).
    pub corruptions: Cell<u64>,
    /// The scrubber (`log/scrub.rs`): bytes read back and CRC-checked, corrupt batches
    /// found, and passes over every log of the shard completed.
    pub scrubbed_bytes: Cell<u64>,
    pub scrub_corrupt_batches: Cell<u64>,
    pub scrub_passes: Cell<u64>,
    /// Bytes read and validated by recovery scans when logs open.
    pub recovery_scanned_bytes: Cell<u64>,
    /// Bytes cut from log tails by crash recovery (invalid data: torn or corrupt).
    pub recovery_truncated_bytes: Cell<u64>,
    /// Segment tails an unclean open found zeroed after the last valid batch, and their
    /// bytes. Unused reservation and records lost to a power loss (written without a
    /// flush, then read back as zeros) look the same on disk, so the bytes are an
    /// upper bound of what was lost; each cut is logged with its partition and offset.
    pub recovery_zero_tails: Cell<u64>,
    pub recovery_zero_tail_bytes: Cell<u64>,
    /// Appends refused because the data directory had too little free space
    /// (`space.rs`).
    pub disk_full_refusals: Cell<u64>,
    /// Segments deleted by retention and bytes reclaimed by compaction.
    pub segments_deleted: Cell<u64>,
    pub compacted_bytes_reclaimed: Cell<u64>,
    /// Cleaning passes the log cleaner completed.
    pub cleaner_passes: Cell<u64>,
    /// Stages of an append: waiting for its turn at the log's gate, an O_DIRECT write
    /// from submission to completion, an fdatasync.
    pub gate_wait: StageHistogram,
    pub write_latency: StageHistogram,
    pub sync_latency: StageHistogram,
    /// A roll's part under the gate (appends wait for it: drain, create the next
    /// segment), and the sealing of the closed segment behind it (trim, fdatasync,
    /// indexes, directory sync), which appends do not wait for.
    pub roll_latency: StageHistogram,
    pub seal_latency: StageHistogram,
}

impl EngineMetrics {
    pub fn add(cell: &Cell<u64>, n: u64) {
        cell.set(cell.get() + n);
    }
}
