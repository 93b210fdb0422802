//! The log cleaner's offset map, as Kafka's `SkimpyOffsetMap`: a fixed-size open
//! addressing table from a 128-bit hash of a record key to the key's latest offset.
//!
//! Its memory is set once (`log.cleaner.dedupe.buffer.size`) and never grows: 32 bytes
//! a slot, filled to a load factor of 0.9. When it is full the cleaner stops mapping
//! there and cleans up to that offset; the next pass maps the rest. Keys are not
//! stored, only their hashes: two keys whose 128-bit hashes collide would be taken for
//! one (Kafka accepts the same odds with MD5).
//!
//! The map is allocated zeroed (the kernel hands out zero pages as they are touched)
//! and kept between passes, as Kafka keeps its buffer: a slot belongs to the current
//! pass only if it carries the pass's generation, so clearing is a counter increment.
//! Writing the whole buffer at each pass start stalled the shard for 0.5 s at 128 MiB.

use std::hash::Hasher;

use crate::types::Offset;

/// Bytes one slot takes: two 64-bit hash halves, an offset and a generation.
pub const SLOT_BYTES: usize = 32;

/// The share of slots filled before the map counts as full.
const LOAD_FACTOR: f64 = 0.9;

/// `[hash0, hash1, offset, generation]`; generation 0 (zeroed memory) is never current.
type Slot = [u64; 4];

pub struct OffsetMap {
    slots: Vec<Slot>,
    generation: u64,
    used: usize,
    max_used: usize,
    /// The largest offset put.
    latest: Option<Offset>,
}

impl OffsetMap {
    /// The memory a map given `bytes` holds: whole slots, at least 16.
    pub fn memory_for(bytes: usize) -> usize {
        (bytes / SLOT_BYTES).max(16) * SLOT_BYTES
    }

    /// A map using about `bytes` of memory (`memory_for`), empty.
    pub fn with_memory(bytes: usize) -> OffsetMap {
        let capacity = Self::memory_for(bytes) / SLOT_BYTES;
        OffsetMap {
            // Zeroed memory: calloc, so pages are faulted in as the map fills.
            slots: vec![[0u64; 4]; capacity],
            generation: 1,
            used: 0,
            max_used: ((capacity as f64 * LOAD_FACTOR) as usize).max(1),
            latest: None,
        }
    }

    /// The memory the map holds.
    pub fn memory_bytes(&self) -> usize {
        self.slots.len() * SLOT_BYTES
    }

    /// Empties the map for a new pass, without touching its memory.
    pub fn clear(&mut self) {
        self.generation += 1;
        self.used = 0;
        self.latest = None;
    }

    /// Keys the map holds.
    pub fn len(&self) -> usize {
        self.used
    }

    pub fn is_empty(&self) -> bool {
        self.used == 0
    }

    /// The largest offset put, if any.
    pub fn latest(&self) -> Option<Offset> {
        self.latest
    }

    /// Records `offset` as `key`'s latest. Returns false, changing nothing, when `key`
    /// is new and the map is full.
    pub fn put(&mut self, key: &[u8], offset: Offset) -> bool {
        let hash = hash(key);
        let index = self.find(hash);
        let generation = self.generation;
        let slot = &mut self.slots[index];
        if slot[3] != generation {
            if self.used >= self.max_used {
                return false;
            }
            self.used += 1;
            *slot = [hash[0], hash[1], 0, generation];
        }
        slot[2] = offset.0 as u64;
        self.latest = Some(self.latest.map_or(offset, |l| l.max(offset)));
        true
    }

    /// The latest offset put for `key`.
    pub fn get(&self, key: &[u8]) -> Option<Offset> {
        let slot = &self.slots[self.find(hash(key))];
        (slot[3] == self.generation).then_some(Offset(slot[2] as i64))
    }

    /// The slot holding `hash`, or the free slot where it would go (linear probing; the
    /// load factor keeps a free slot).
    fn find(&self, hash: [u64; 2]) -> usize {
        let mut index = (hash[0] % self.slots.len() as u64) as usize;
        loop {
            let slot = &self.slots[index];
            if slot[3] != self.generation || (slot[0] == hash[0] && slot[1] == hash[1]) {
                return index;
            }
            index = (index + 1) % self.slots.len();
        }
    }
}

/// Two independent 64-bit SipHash values of `key`.
fn hash(key: &[u8]) -> [u64; 2] {
    let half = |seed: u8| {
        let mut hasher = std::hash::DefaultHasher::new();
        hasher.write_u8(seed);
        hasher.write(key);
        hasher.finish()
    };
    [half(0), half(1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    // Keys map to their latest offset; a full map refuses new keys but still updates
    // the ones it holds; its memory is what it was given.
    #[test]
    fn bounded_latest_offsets() {
        let mut map = OffsetMap::with_memory(100 * SLOT_BYTES);
        for i in 0..90 {
            assert!(map.put(format!("k{i}").as_bytes(), Offset(i)));
        }
        assert!(!map.put(b"new", Offset(100)), "full at the load factor");
        assert!(map.put(b"k3", Offset(200)), "a held key still updates");
        assert_eq!(map.get(b"k3"), Some(Offset(200)));
        assert_eq!(map.get(b"k4"), Some(Offset(4)));
        assert_eq!(map.get(b"absent"), None);
        assert_eq!((map.len(), map.latest()), (90, Some(Offset(200))));
        assert_eq!(map.memory_bytes(), 100 * SLOT_BYTES);
        // Cleared for the next pass: empty, same memory.
        map.clear();
        assert_eq!((map.len(), map.get(b"k3"), map.latest()), (0, None, None));
        assert!(map.put(b"new", Offset(7)));
        assert_eq!(map.get(b"new"), Some(Offset(7)));
    }
}
