//! Share groups' state (KIP-932), with no I/O: each share group's state of a partition
//! (`partition`, the state machine), the share-partitions a partition's leader holds
//! (`slots`), and the share sessions of a shard's connections (`sessions`). The
//! leader's operations on them run in `serve::share_leader` (ShareFetch and
//! ShareAcknowledge, persisted through the share coordinator, `serve::share`) and
//! `serve::dead_letter` (KIP-1191). Membership is the group coordinator's
//! (`group::share`).

pub mod partition;
pub mod sessions;
pub mod slots;

use std::cell::Cell;

/// What the share-partitions led on a shard did.
#[derive(Debug, Default)]
pub struct ShareMetrics {
    /// Records acquired for members (each delivery counted).
    pub acquired: Cell<u64>,
    /// Records members acknowledged (accepted, released, rejected or gaps).
    pub acknowledged: Cell<u64>,
    /// Records whose acquisition lock ran out.
    pub expired: Cell<u64>,
    /// Share-partition states the share coordinator did not take: the
    /// acknowledgements that made them were answered with an error.
    pub state_write_failures: Cell<u64>,
    /// The last write failed: the next failure is not logged again.
    pub failing: Cell<bool>,
    /// Records written to share groups' dead-letter topics (KIP-1191).
    pub dead_letters: Cell<u64>,
    /// Dead-letter writes given up on (their records archived without a copy).
    pub dead_letter_failures: Cell<u64>,
    /// The last dead-letter write failed: the next failure is not logged again.
    pub dead_letter_failing: Cell<bool>,
}

impl ShareMetrics {
    pub fn add(counter: &Cell<u64>, n: u64) {
        counter.set(counter.get() + n);
    }
}
