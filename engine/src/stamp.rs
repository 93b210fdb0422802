//! A log's change stamp: a counter any shard may read, moved whenever something a
//! reader of the log can see moves (its written end, its log start, and, through
//! `replication`, its high watermark and its replica's role), and when the log
//! closes, fails or is truncated.
//!
//! A consumer's fetch session on another shard keeps, for each of its partitions, the
//! stamp at which a read found nothing new there. Its next fetch reads only the
//! partitions whose stamps moved since, so a fetch of 10,000 mostly idle partitions
//! visits the few that changed, not all of them (`net/src/fetch_sessions.rs`). A
//! session also watches its partitions' stamps with one `Signal`, which a move fires,
//! so its long poll sleeps without a wait parked on each partition.
//!
//! The stamp is read from other shards' threads: it is atomic, and its watchers sit
//! behind a lock of its own, taken when a session starts watching and when the stamp
//! moves while watched; neither holds it across an await.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::Poll;

use futures_util::task::AtomicWaker;

/// A log's change stamp.
#[derive(Debug, Default)]
pub struct Stamp {
    value: AtomicU64,
    /// Whether `watchers` may hold a live signal: moving an unwatched stamp takes no
    /// lock.
    watched: AtomicBool,
    watchers: Mutex<Vec<Weak<Signal>>>,
}

impl Stamp {
    pub fn new() -> Arc<Stamp> {
        Arc::new(Stamp::default())
    }

    /// The stamp now.
    pub fn get(&self) -> u64 {
        self.value.load(Ordering::SeqCst)
    }

    /// Something a reader sees moved: the stamp moves and fires its watchers' signals.
    pub fn bump(&self) {
        self.value.fetch_add(1, Ordering::SeqCst);
        if !self.watched.load(Ordering::SeqCst) {
            return;
        }
        let mut watchers = self.watchers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        watchers.retain(|watcher| match watcher.upgrade() {
            Some(signal) => {
                signal.fire();
                true
            }
            None => false,
        });
        if watchers.is_empty() {
            self.watched.store(false, Ordering::SeqCst);
        }
    }

    /// Fires `signal` at every later move, for as long as it lives. Watchers that are
    /// gone are dropped here and at each move, so a stamp that never moves again holds
    /// only its live watchers and one more.
    pub fn watch(&self, signal: &Arc<Signal>) {
        let mut watchers = self.watchers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        watchers.retain(|watcher| watcher.strong_count() > 0 && !std::ptr::eq(watcher.as_ptr(), Arc::as_ptr(signal)));
        watchers.push(Arc::downgrade(signal));
        self.watched.store(true, Ordering::SeqCst);
    }

    /// How many live signals watch it.
    pub fn watchers(&self) -> usize {
        let watchers = self.watchers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        watchers.iter().filter(|w| w.strong_count() > 0).count()
    }
}

/// A stamp as a read found it: where the read stood in the log's changes.
#[derive(Debug, Clone)]
pub struct Stamped {
    pub stamp: Arc<Stamp>,
    pub at: u64,
}

impl Stamped {
    /// The stamp of `stamp` now.
    pub fn now(stamp: &Arc<Stamp>) -> Stamped {
        Stamped { stamp: Arc::clone(stamp), at: stamp.get() }
    }

    /// Whether the stamp moved since.
    pub fn moved(&self) -> bool {
        self.stamp.get() != self.at
    }
}

impl PartialEq for Stamped {
    fn eq(&self, other: &Stamped) -> bool {
        Arc::ptr_eq(&self.stamp, &other.stamp) && self.at == other.at
    }
}

/// Fired by the stamps it watches; wakes the one task waiting on it, on whichever
/// shard that task runs.
#[derive(Debug, Default)]
pub struct Signal {
    fired: AtomicBool,
    waker: AtomicWaker,
}

impl Signal {
    pub fn new() -> Arc<Signal> {
        Arc::new(Signal::default())
    }

    fn fire(&self) {
        self.fired.store(true, Ordering::SeqCst);
        self.waker.wake();
    }

    /// Forgets the fires so far: a waiter resets, then checks the stamps it watches,
    /// then waits, and so misses no move.
    pub fn reset(&self) {
        self.fired.store(false, Ordering::SeqCst);
    }

    /// Completes at the first fire since the last `reset` (at once if one came).
    pub async fn fired(&self) {
        std::future::poll_fn(|cx| {
            if self.fired.swap(false, Ordering::SeqCst) {
                return Poll::Ready(());
            }
            self.waker.register(cx.waker());
            match self.fired.swap(false, Ordering::SeqCst) {
                true => Poll::Ready(()),
                false => Poll::Pending,
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_fires_the_live_watchers_only() {
        let stamp = Stamp::new();
        let before = Stamped::now(&stamp);
        let signal = Signal::new();
        stamp.watch(&signal);
        stamp.watch(&signal);
        assert_eq!(stamp.watchers(), 1, "one signal watches once");
        stamp.bump();
        assert!(before.moved());
        assert!(signal.fired.load(Ordering::SeqCst));
        signal.reset();
        let gone = Signal::new();
        stamp.watch(&gone);
        drop(gone);
        assert_eq!(stamp.watchers(), 1);
        stamp.bump();
        assert_eq!(stamp.watchers.lock().unwrap().len(), 1, "the dropped watcher is pruned");
        drop(signal);
        stamp.bump();
        assert!(!stamp.watched.load(Ordering::SeqCst), "no live watcher: moves take no lock");
    }

    #[test]
    fn a_fire_before_the_wait_is_not_missed() {
        let signal = Signal::new();
        signal.reset();
        signal.fire();
        futures_lite::future::block_on(signal.fired());
        // Another thread's fire wakes a waiting task.
        let remote = Arc::clone(&signal);
        let firing = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            remote.fire();
        });
        futures_lite::future::block_on(signal.fired());
        firing.join().unwrap();
    }
}
