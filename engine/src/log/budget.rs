//! The shard's tail-buffer budget: appended bytes not yet written, over all its logs.
//!
//! Each log bounds its own tail buffer (`WriteShape::buffer_bytes`, at most
//! `APPEND_BUFFER_BYTES_MAX`), but 10,000 active logs of one shard could then hold
//! 160 GB between them. So the shard keeps one budget, `SHARD_TAIL_BUFFER_BYTES_MAX`:
//! a log charges it with what it has appended and not yet written, and an append that
//! would take the shard past it waits until writes of any log complete. A log with
//! nothing buffered is always admitted one batch, so every log progresses whatever the
//! others hold, and the shard holds at most the budget plus one batch per log.
//!
//! Every charged byte belongs to an admitted append that drives its log's writes (an
//! append whose task is dropped hands its log to a driver task, `Log::append`), so the
//! charge always drains and a waiting append is always woken.

use std::cell::Cell;

use crate::waiters::Waiters;

pub struct TailBudget {
    /// Bytes charged by the shard's logs.
    charged: Cell<u64>,
    /// The most the logs may charge before appends wait.
    max: u64,
    /// Appends waiting for room, woken when a charge falls.
    waiters: Waiters,
}

impl TailBudget {
    pub fn new(max: u64) -> TailBudget {
        TailBudget { charged: Cell::new(0), max, waiters: Waiters::default() }
    }

    /// Bytes the shard's logs have appended and not yet written.
    pub fn charged(&self) -> u64 {
        self.charged.get()
    }

    /// Whether `len` more bytes fit.
    pub(super) fn has_room(&self, len: usize) -> bool {
        self.charged.get() + len as u64 <= self.max
    }

    /// Moves one log's charge from `before` to `after`, waking waiting appends when
    /// it fell.
    pub(super) fn recharge(&self, before: u64, after: u64) {
        debug_assert!(self.charged.get() >= before);
        self.charged.set(self.charged.get() - before + after);
        if after < before {
            self.waiters.wake_all();
        }
    }

    /// Completes when a charge fell (the caller checks again).
    pub(super) async fn wait(&self) {
        self.waiters.wait(i64::MIN).await;
    }
}

impl Default for TailBudget {
    fn default() -> Self {
        TailBudget::new(crate::limits::SHARD_TAIL_BUFFER_BYTES_MAX)
    }
}
