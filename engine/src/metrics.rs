//! Per-shard engine counters. Plain `Cell`s: a shard is one thread, and the broker's
//! `/metrics` endpoint reads them from that thread.

use std::cell::Cell;

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
    /// Corruption found where data must be intact (below the recovery point, on read).
    pub corruptions: Cell<u64>,
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
    /// Segments deleted by retention and bytes reclaimed by compaction.
    pub segments_deleted: Cell<u64>,
    pub compacted_bytes_reclaimed: Cell<u64>,
    /// Cleaning passes the log cleaner completed.
    pub cleaner_passes: Cell<u64>,
}

impl EngineMetrics {
    pub fn add(cell: &Cell<u64>, n: u64) {
        cell.set(cell.get() + n);
    }
}
