//! The log cleaner's offset map, as Kafka's `SkimpyOffsetMap`: a fixed-size open
//! addressing table from a 128-bit hash of a record key to the key's latest offset.
//!
//! Its memory is set once (`log.cleaner.dedupe.buffer.size`) and never grows: 24 bytes
//! a slot, filled to `log.cleaner.io.buffer.load.factor` (0.9). When it is full the
//! cleaner stops mapping there and cleans up to that offset; the next pass maps the
//! rest. Keys are not stored, only their hashes: two keys whose 128-bit hashes collide
//! would be taken for one (Kafka accepts the same odds with MD5).

use std::hash::Hasher;

use crate::types::Offset;

/// Bytes one slot takes: two 64-bit hash halves and an offset.
pub const SLOT_BYTES: usize = 24;

/// The share of slots filled before the map counts as full.
const LOAD_FACTOR: f64 = 0.9;

#[derive(Clone, Copy)]
struct Slot {
    hash: [u64; 2],
    /// -1: empty.
    offset: i64,
}

const EMPTY: Slot = Slot { hash: [0, 0], offset: -1 };

pub struct OffsetMap {
    slots: Vec<Slot>,
    used: usize,
    max_used: usize,
    /// The largest offset put.
    latest: Option<Offset>,
}

impl OffsetMap {
    /// A map using about `bytes` of memory (at least 16 slots).
    pub fn with_memory(bytes: usize) -> OffsetMap {
        let capacity = (bytes / SLOT_BYTES).max(16);
        OffsetMap {
            slots: vec![EMPTY; capacity],
            used: 0,
            max_used: ((capacity as f64 * LOAD_FACTOR) as usize).max(1),
            latest: None,
        }
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
        let slot = &mut self.slots[index];
        if slot.offset < 0 {
            if self.used >= self.max_used {
                return false;
            }
            self.used += 1;
            slot.hash = hash;
        }
        slot.offset = offset.0;
        self.latest = Some(self.latest.map_or(offset, |l| l.max(offset)));
        true
    }

    /// The latest offset put for `key`.
    pub fn get(&self, key: &[u8]) -> Option<Offset> {
        let slot = &self.slots[self.find(hash(key))];
        (slot.offset >= 0).then_some(Offset(slot.offset))
    }

    /// The slot holding `hash`, or the empty slot where it would go (linear probing;
    /// the load factor keeps an empty slot).
    fn find(&self, hash: [u64; 2]) -> usize {
        let mut index = (hash[0] % self.slots.len() as u64) as usize;
        loop {
            let slot = &self.slots[index];
            if slot.offset < 0 || slot.hash == hash {
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
        assert_eq!(map.slots.len() * SLOT_BYTES, 100 * SLOT_BYTES);
    }
}
