//! Targeted wake-ups for tasks of one shard waiting on a growing value (a written
//! offset, a flushed offset, a ticket number).
//!
//! A broadcast event wakes every waiter on every change: with hundreds of appends in
//! flight on one log, each write completion would poll all of them (a thundering herd,
//! quadratic in the appends in flight). Here each waiter registers under the value it
//! waits for, and a change wakes only those whose value was reached, plus, when asked,
//! the first remaining one to take over work (a hand-off).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct Waiters {
    entries: RefCell<BTreeMap<(i64, u64), Waker>>,
    next_id: Cell<u64>,
}

impl Waiters {
    /// Completes the first time it is woken (by any of the `wake_*` calls). Callers
    /// re-check their condition in a loop; check, then wait, with no await between,
    /// so no wake-up is missed on a single-threaded executor.
    pub fn wait(&self, key: i64) -> Wait<'_> {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        Wait { waiters: self, key: (key, id), registered: false }
    }

    /// Wakes every waiter whose key is at most `value`.
    pub fn wake_upto(&self, value: i64) {
        let woken: Vec<Waker> = {
            let mut entries = self.entries.borrow_mut();
            let rest = entries.split_off(&(value.saturating_add(1), 0));
            std::mem::replace(&mut *entries, rest).into_values().collect()
        };
        woken.into_iter().for_each(Waker::wake);
    }

    /// Wakes the waiter with the smallest key, to hand work over to it.
    pub fn wake_first(&self) {
        let first = self.entries.borrow_mut().pop_first();
        if let Some((_, waker)) = first {
            waker.wake();
        }
    }

    pub fn wake_all(&self) {
        self.wake_upto(i64::MAX);
    }

    pub fn is_empty(&self) -> bool {
        self.entries.borrow().is_empty()
    }
}

pub struct Wait<'a> {
    waiters: &'a Waiters,
    key: (i64, u64),
    registered: bool,
}

impl Future for Wait<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut entries = self.waiters.entries.borrow_mut();
        if self.registered {
            // Woken (the entry was removed by the waker) or polled spuriously.
            if let Some(waker) = entries.get_mut(&self.key) {
                waker.clone_from(cx.waker());
                return Poll::Pending;
            }
            drop(entries);
            self.registered = false;
            return Poll::Ready(());
        }
        entries.insert(self.key, cx.waker().clone());
        drop(entries);
        self.registered = true;
        Poll::Pending
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if self.registered {
            self.waiters.entries.borrow_mut().remove(&self.key);
        }
    }
}
