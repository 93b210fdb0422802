//! The shard's budget of open files: descriptors of idle files are closed, and the file
//! is opened again by path on its next use.
//!
//! Every segment of every partition is a file, and a node's open descriptors are
//! limited (`ulimit -n`, often 20,000 or fewer). Holding one per segment made the
//! partition count a node could serve follow that limit rather than its data: on a
//! 20,000 limit, 33,000 partitions a node failed to open 13,400 of them. Here a shard
//! keeps at most `budget` files open. Opening past it first closes the least recently
//! used file that no operation is using (the clock algorithm: a use marks a file, the
//! hand clears marks and takes the first unmarked, idle file it finds), so a node's
//! descriptors follow the files in use, not the files it has.
//!
//! A reopened file must be the one that was closed: a file replaced under the same name
//! since (compaction renames its cleaned copy over a segment) or removed (retention)
//! answers `NotFound`, never another file's bytes. Writes are O_DIRECT, so a closed
//! descriptor holds no dirty pages, and an fdatasync through the new one covers every
//! write to the inode.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};

use glommio::io::DmaFile;

/// Files each shard keeps open at most; `usize::MAX` until the node sets it.
static BUDGET: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Sets how many files each shard thread keeps open (at least 1); shards already
/// running close files down to it as they open others.
pub fn set_budget(per_shard: usize) {
    BUDGET.store(per_shard.max(1), Ordering::Relaxed);
}

/// The budget for a node whose open-files limit is `limit` with `shards` shards: a
/// quarter of the limit (at least 256) is left for connections, the metadata log and
/// transient files, and the rest shared by the shards.
pub fn budget_for(limit: u64, shards: usize) -> usize {
    let reserve = (limit / 4).max(256);
    (limit.saturating_sub(reserve) as usize / shards.max(1)).max(1)
}

/// One file's descriptor, open or closed, shared by its handle and the shard's table.
#[derive(Default)]
pub(super) struct Slot {
    file: RefCell<Option<Rc<DmaFile>>>,
    /// Used since the hand last passed (the clock's mark).
    used: Cell<bool>,
    /// Its place in the table while open.
    index: Cell<usize>,
}

impl Slot {
    /// The open descriptor, marked used; `None` when closed.
    pub(super) fn get(&self) -> Option<Rc<DmaFile>> {
        let file = self.file.borrow().clone();
        if file.is_some() {
            self.used.set(true);
        }
        file
    }

    /// Keeps `file` as this slot's descriptor and counts it against the budget. When
    /// a concurrent reopen won, returns the descriptor it kept, with `file` to close.
    pub(super) fn put(self: &Rc<Slot>, file: DmaFile) -> (Rc<DmaFile>, Option<DmaFile>) {
        if let Some(kept) = self.get() {
            return (kept, Some(file));
        }
        let file = Rc::new(file);
        *self.file.borrow_mut() = Some(file.clone());
        self.used.set(true);
        TABLE.with(|t| t.borrow_mut().register(self));
        (file, None)
    }

    /// Forgets the descriptor (the handle is going away); the caller drops it.
    pub(super) fn release(&self) -> Option<Rc<DmaFile>> {
        let file = self.file.borrow_mut().take();
        if file.is_some() {
            let _ = TABLE.try_with(|t| t.borrow_mut().unregister(self));
        }
        file
    }
}

#[derive(Default)]
struct Table {
    open: Vec<Rc<Slot>>,
    /// Opens under way, each with room made for it (`Room`).
    opening: usize,
    hand: usize,
    reopened: u64,
    closed: u64,
    over_budget: u64,
}

thread_local! {
    static TABLE: RefCell<Table> = RefCell::default();
}

impl Table {
    fn register(&mut self, slot: &Rc<Slot>) {
        slot.index.set(self.open.len());
        self.open.push(slot.clone());
    }

    fn unregister(&mut self, slot: &Slot) {
        let index = slot.index.get();
        if !self.open.get(index).is_some_and(|s| std::ptr::eq(Rc::as_ptr(s), slot)) {
            return;
        }
        self.open.swap_remove(index);
        if let Some(moved) = self.open.get(index) {
            moved.index.set(index);
        }
        if self.hand >= self.open.len() {
            self.hand = 0;
        }
    }

    /// Takes the descriptor of an idle file out of the table for the caller to close,
    /// when the table is at its budget. `None` when there is room, or when every open
    /// file is in use (the open then goes past the budget, and is counted).
    fn evict(&mut self, budget: usize) -> Option<Rc<DmaFile>> {
        if self.open.len() + self.opening < budget || self.open.is_empty() {
            return None;
        }
        // Two turns of the hand: the first may only clear marks.
        for _ in 0..2 * self.open.len() {
            let slot = self.open[self.hand].clone();
            let idle = slot.file.borrow().as_ref().is_some_and(|f| Rc::strong_count(f) == 1);
            if idle && !slot.used.replace(false) {
                let file = slot.file.borrow_mut().take();
                self.unregister(&slot);
                self.closed += 1;
                return file;
            }
            self.hand = (self.hand + 1) % self.open.len();
        }
        self.over_budget += 1;
        None
    }
}

/// Room for one file being opened, counted against the budget until the file is in
/// the table (`Slot::put`) or the open failed.
pub(super) struct Room(());

impl Drop for Room {
    fn drop(&mut self) {
        let _ = TABLE.try_with(|t| t.borrow_mut().opening -= 1);
    }
}

/// Makes room for one more open file: closes the least recently used idle one when the
/// shard's open files and the opens under way are at its budget. Hold the `Room`
/// until the file is put in its slot.
pub(super) async fn make_room() -> Room {
    let budget = BUDGET.load(Ordering::Relaxed);
    let victim = TABLE.with(|t| {
        let mut table = t.borrow_mut();
        let victim = table.evict(budget);
        table.opening += 1;
        victim
    });
    let room = Room(());
    if let Some(file) = victim.and_then(|victim| Rc::try_unwrap(victim).ok()) {
        // A close that fails leaves nothing to retry: the descriptor is gone either way.
        let _ = file.close().await;
    }
    room
}

pub(super) fn count_reopen() {
    TABLE.with(|t| t.borrow_mut().reopened += 1);
}

/// This shard's open files, for `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFiles {
    /// Files open now, and the most this shard keeps open.
    pub open: usize,
    pub budget: usize,
    /// Files closed to stay within the budget, and opened again on their next use.
    pub closed: u64,
    pub reopened: u64,
    /// Opens that went past the budget because every open file was in use.
    pub over_budget: u64,
}

pub fn stats() -> OpenFiles {
    TABLE.with(|t| {
        let t = t.borrow();
        OpenFiles {
            open: t.open.len(),
            budget: BUDGET.load(Ordering::Relaxed),
            closed: t.closed,
            reopened: t.reopened,
            over_budget: t.over_budget,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_leaves_a_quarter_for_connections() {
        assert_eq!(budget_for(20_000, 1), 15_000);
        assert_eq!(budget_for(20_000, 2), 7_500);
        assert_eq!(budget_for(1_024, 1), 768);
        assert_eq!(budget_for(300, 4), 11);
        assert_eq!(budget_for(100, 1), 1);
    }
}
