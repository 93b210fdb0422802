//! The FIFO admission gate of appends and maintenance.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;

use crate::waiters::Waiters;

/// A FIFO admission queue. A ticket is taken when an operation first runs and is
/// served in order; dropping a ticket (done, failed or cancelled) passes the turn on
/// and wakes only the next holder.
#[derive(Default)]
pub(super) struct Gate {
    next: Cell<u64>,
    serving: Cell<u64>,
    abandoned: RefCell<BTreeSet<u64>>,
    pub(super) waiters: Waiters,
}

pub(super) struct Ticket<'a> {
    gate: &'a Gate,
    number: u64,
}

impl Gate {
    /// Whether no ticket is outstanding: a ticket taken now is served at once.
    pub(super) fn is_idle(&self) -> bool {
        self.serving.get() == self.next.get()
    }

    pub(super) fn ticket(&self) -> Ticket<'_> {
        let number = self.next.get();
        self.next.set(number + 1);
        Ticket { gate: self, number }
    }
}

impl Ticket<'_> {
    pub(super) async fn wait_turn(&self) {
        while self.gate.serving.get() != self.number {
            self.gate.waiters.wait(self.number as i64).await;
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let gate = self.gate;
        if gate.serving.get() == self.number {
            let mut serving = self.number + 1;
            let mut abandoned = gate.abandoned.borrow_mut();
            while abandoned.remove(&serving) {
                serving += 1;
            }
            gate.serving.set(serving);
            drop(abandoned);
            gate.waiters.wake_upto(serving as i64);
        } else {
            gate.abandoned.borrow_mut().insert(self.number);
        }
    }
}
