//! The shard's batch cache: recently written batches, kept in memory so that readers
//! near the tail (the common case: consumers and followers keeping up) touch no disk.
//!
//! One cache per shard, shared by all its logs (`Rc<RefCell<BatchCache>>`), with a
//! byte budget. Eviction is least-recently-used: a `BTreeMap` keyed by (log, base
//! offset) for range lookups, and a second map keyed by a use tick for LRU order.
//! Both operations are O(log n).
//!
//! The budget counts the memory entries keep alive: a batch that owns its buffer
//! costs its size; batches that are slices of a larger allocation (`Backing`: a
//! produce request's frame) cost that allocation once, whole, while any of them is
//! cached. So a small batch cached for long cannot pin a large request unaccounted.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use crate::batch::{Backing, Batch};
use crate::types::Offset;

/// Identifies a log within a shard's cache.
pub type LogKey = u64;

struct Entry {
    batch: Batch,
    tick: u64,
}

pub struct BatchCache {
    budget_bytes: usize,
    used_bytes: usize,
    entries: BTreeMap<(LogKey, Offset), Entry>,
    lru: BTreeMap<u64, (LogKey, Offset)>,
    /// Allocations charged whole, with how many cached batches they back.
    backings: HashMap<usize, (usize, usize)>,
    tick: u64,
    /// Calls that dropped batches, so that a reader that read from disk meanwhile can
    /// tell its bytes may be stale (`log/read_ahead.rs`).
    invalidations: u64,
    /// Reads answered from the cache, and reads that had to go to disk.
    pub hits: u64,
    pub misses: u64,
}

impl BatchCache {
    pub fn new(budget_bytes: usize) -> BatchCache {
        BatchCache {
            budget_bytes,
            used_bytes: 0,
            entries: BTreeMap::new(),
            lru: BTreeMap::new(),
            backings: HashMap::new(),
            tick: 0,
            invalidations: 0,
            hits: 0,
            misses: 0,
        }
    }

    pub fn used_bytes(&self) -> usize {
        self.used_bytes
    }

    pub fn budget_bytes(&self) -> usize {
        self.budget_bytes
    }

    pub fn invalidations(&self) -> u64 {
        self.invalidations
    }

    /// Whether the batch holding `offset` of `log` is cached.
    pub fn contains(&self, log: LogKey, offset: Offset) -> bool {
        self.entries
            .range((Bound::Included((log, Offset(i64::MIN))), Bound::Included((log, offset))))
            .next_back()
            .is_some_and(|(_, entry)| entry.batch.last_offset() >= offset)
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// What caching `batch` would add to `used_bytes` now.
    fn charge(&self, batch: &Batch) -> usize {
        match batch.backing() {
            Some(b) if self.backings.contains_key(&b.id) => 0,
            Some(b) => b.len.max(batch.size()),
            None => batch.size(),
        }
    }

    /// Caches a batch that is now written. Batches that would cost more than the budget
    /// are skipped.
    pub fn insert(&mut self, log: LogKey, batch: Batch) {
        let key = (log, batch.base_offset());
        self.remove(key);
        if self.charge(&batch) > self.budget_bytes {
            return;
        }
        // Evicting may release this batch's own allocation; the charge is taken again.
        while self.used_bytes + self.charge(&batch) > self.budget_bytes {
            let Some((_, oldest)) = self.lru.pop_first() else { break };
            self.drop_entry(oldest);
        }
        self.used_bytes += self.charge(&batch);
        if let Some(Backing { id, len }) = batch.backing() {
            self.backings.entry(id).or_insert((0, len.max(batch.size()))).0 += 1;
        }
        let tick = self.next_tick();
        self.lru.insert(tick, key);
        self.entries.insert(key, Entry { batch, tick });
    }

    fn remove(&mut self, key: (LogKey, Offset)) {
        if let Some(tick) = self.entries.get(&key).map(|e| e.tick) {
            self.lru.remove(&tick);
            self.drop_entry(key);
        }
    }

    /// Removes an entry whose LRU tick is already gone, releasing what it cost.
    fn drop_entry(&mut self, key: (LogKey, Offset)) {
        let Some(entry) = self.entries.remove(&key) else { return };
        match entry.batch.backing() {
            None => self.used_bytes -= entry.batch.size(),
            Some(b) => {
                let backed = self.backings.get_mut(&b.id).expect("a cached backing is counted");
                backed.0 -= 1;
                if backed.0 == 0 {
                    self.used_bytes -= backed.1;
                    self.backings.remove(&b.id);
                }
            }
        }
    }

    /// Batches of `log` from the one holding `offset`, consecutive, whose base offset is
    /// below `end`, up to `max_bytes` (the first batch always whole). `None` when the
    /// batch holding `offset` is not cached. Touches each returned batch for LRU.
    pub fn read(&mut self, log: LogKey, offset: Offset, end: Offset, max_bytes: usize) -> Option<Vec<Batch>> {
        let first = self
            .entries
            .range((Bound::Included((log, Offset(i64::MIN))), Bound::Included((log, offset))))
            .next_back()
            .filter(|(_, entry)| entry.batch.last_offset() >= offset)
            .map(|(key, _)| *key);
        let Some(first) = first else {
            self.misses += 1;
            return None;
        };
        self.hits += 1;
        let mut batches: Vec<Batch> = Vec::new();
        let mut bytes = 0;
        let mut touched = Vec::new();
        for (key, entry) in self.entries.range((Bound::Included(first), Bound::Included((log, Offset(i64::MAX))))) {
            let batch = &entry.batch;
            if batch.base_offset() >= end {
                break;
            }
            if let Some(previous) = batches.last() {
                // A gap means a batch is missing from the cache: stop, the reader
                // fetches the rest from disk next time.
                if previous.next_offset() != batch.base_offset() || bytes + batch.size() > max_bytes {
                    break;
                }
            }
            bytes += batch.size();
            batches.push(batch.clone());
            touched.push(*key);
        }
        for key in touched {
            let tick = self.next_tick();
            if let Some(entry) = self.entries.get_mut(&key) {
                self.lru.remove(&entry.tick);
                entry.tick = tick;
                self.lru.insert(tick, key);
            }
        }
        Some(batches)
    }

    /// Drops the batches of `log` that overlap `[start, end)`.
    pub fn invalidate(&mut self, log: LogKey, start: Offset, end: Offset) {
        self.invalidations += 1;
        let keys: Vec<_> = self
            .entries
            .range((Bound::Included((log, Offset(i64::MIN))), Bound::Excluded((log, end))))
            .filter(|(_, entry)| entry.batch.last_offset() >= start)
            .map(|(key, _)| *key)
            .collect();
        for key in keys {
            self.remove(key);
        }
    }

    /// Drops every batch of `log`.
    pub fn invalidate_log(&mut self, log: LogKey) {
        self.invalidate(log, Offset(i64::MIN), Offset(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::batch;
    use crate::types::LeaderEpoch;

    fn at(offset: i64, count: i32) -> Batch {
        Batch::validate(batch(count, 100), 1 << 20).unwrap().with_offset_and_epoch(Offset(offset), LeaderEpoch(0))
    }

    // Reads find the batch holding the offset and continue while batches are adjacent.
    #[test]
    fn reads_follow_adjacent_batches() {
        let mut cache = BatchCache::new(1 << 20);
        cache.insert(1, at(0, 5));
        cache.insert(1, at(5, 5));
        cache.insert(1, at(20, 5));
        cache.insert(2, at(10, 5));
        let offsets = |v: Option<Vec<Batch>>| v.map(|b| b.iter().map(|b| b.base_offset().0).collect::<Vec<_>>());
        assert_eq!(offsets(cache.read(1, Offset(3), Offset(100), 1 << 20)), Some(vec![0, 5]));
        assert_eq!(offsets(cache.read(1, Offset(7), Offset(100), 1)), Some(vec![5]));
        assert_eq!(offsets(cache.read(1, Offset(0), Offset(5), 1 << 20)), Some(vec![0]));
        assert_eq!(offsets(cache.read(1, Offset(12), Offset(100), 1 << 20)), None);
        assert_eq!(offsets(cache.read(2, Offset(14), Offset(100), 1 << 20)), Some(vec![10]));
        cache.invalidate(1, Offset(4), Offset(6));
        assert_eq!(offsets(cache.read(1, Offset(0), Offset(100), 1 << 20)), None);
        assert_eq!(offsets(cache.read(1, Offset(20), Offset(100), 1 << 20)), Some(vec![20]));
    }

    // The budget holds, and the least recently used batch goes first.
    #[test]
    fn lru_eviction_respects_budget() {
        let size = at(0, 1).size();
        let mut cache = BatchCache::new(size * 2);
        cache.insert(1, at(0, 1));
        cache.insert(1, at(1, 1));
        assert!(cache.read(1, Offset(0), Offset(10), 1).is_some());
        cache.insert(1, at(2, 1));
        assert!(cache.used_bytes() <= cache.budget_bytes());
        assert!(cache.read(1, Offset(0), Offset(10), 1).is_some());
        assert!(cache.read(1, Offset(1), Offset(10), 1).is_none());
        assert!(cache.read(1, Offset(2), Offset(10), 1).is_some());
    }

    // Batches sliced from one frame cost the frame once, while any of them is cached;
    // the budget holds frames whole, and a frame larger than the budget is not cached.
    #[test]
    fn frames_are_charged_once_and_whole() {
        let frame = Backing { id: 0x1000, len: 10_000 };
        let sliced = |offset| at(offset, 1).with_backing(frame);
        let mut cache = BatchCache::new(25_000);
        cache.insert(1, sliced(0));
        cache.insert(2, sliced(0));
        assert_eq!(cache.used_bytes(), 10_000, "two batches of one frame");
        cache.insert(1, at(1, 1));
        assert_eq!(cache.used_bytes(), 10_000 + at(1, 1).size());
        cache.invalidate_log(1);
        assert_eq!(cache.used_bytes(), 10_000, "the other log still holds the frame");
        cache.invalidate_log(2);
        assert_eq!(cache.used_bytes(), 0);
        // Three frames do not fit in 25 000 bytes: the oldest goes whole.
        for (i, id) in [0x1000, 0x2000, 0x3000].into_iter().enumerate() {
            let backing = Backing { id, len: 10_000 };
            cache.insert(1, at(i as i64 * 2, 1).with_backing(backing));
            cache.insert(2, at(i as i64 * 2, 1).with_backing(backing));
            assert!(cache.used_bytes() <= cache.budget_bytes());
        }
        assert_eq!(cache.used_bytes(), 20_000);
        assert!(cache.read(1, Offset(0), Offset(10), 1).is_none());
        assert!(cache.read(2, Offset(4), Offset(10), 1).is_some());
        cache.insert(1, at(9, 1).with_backing(Backing { id: 0x4000, len: 30_000 }));
        assert!(cache.read(1, Offset(9), Offset(10), 1).is_none(), "larger than the budget");
        assert_eq!(cache.used_bytes(), 20_000);
    }
}
