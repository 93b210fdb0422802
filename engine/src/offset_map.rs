//! The log cleaner's offset map, as Kafka's `SkimpyOffsetMap`: a fixed-size open
//! addressing table from a 128-bit hash of a record key to the key's latest offset.
//!
//! Its memory is set once (`log.cleaner.dedupe.buffer.size`) and never grows: 32 bytes
//! a slot, filled to a load factor of 0.9. When it is full the cleaner stops mapping
//! there and cleans up to that offset; the next pass maps the rest. Keys are not
//! stored, only their hashes: two keys whose 128-bit hashes collide would be taken for
//! one (Kafka accepts the same odds with MD5).
//!
//! The map is kept between passes, as Kafka keeps its buffer: a slot belongs to the
//! current pass only if it carries the pass's generation, so clearing is a counter
//! increment. It is allocated and written in 256 KiB chunks (`allocate` pauses between
//! them): faulting in 128 MiB at once, or through the puts of one large batch, stalled
//! the shard for 0.5 s (page faults are slow in a VM).

use std::hash::Hasher;

use crate::types::Offset;

/// Bytes one slot takes: two 64-bit hash halves, an offset and a generation.
pub const SLOT_BYTES: usize = 32;

/// The share of slots filled before the map counts as full.
const LOAD_FACTOR: f64 = 0.9;

/// `[hash0, hash1, offset, generation]`; generation 0 (zeroed memory) is never current.
type Slot = [u64; 4];

/// Slots per chunk: 256 KiB, a few ms of page faults in a VM.
const CHUNK_SLOTS: usize = (256 << 10) / SLOT_BYTES;

pub struct OffsetMap {
    chunks: Vec<Vec<Slot>>,
    capacity: usize,
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

    /// A map using about `bytes` of memory (`memory_for`), empty, allocated at once.
    pub fn with_memory(bytes: usize) -> OffsetMap {
        let mut map = OffsetMap::empty(bytes);
        while map.grow() {}
        map
    }

    /// As `with_memory`, pausing after each chunk as long as it took, so the shard's
    /// requests and I/O run in between.
    pub async fn allocate(bytes: usize) -> OffsetMap {
        let mut map = OffsetMap::empty(bytes);
        loop {
            let started = std::time::Instant::now();
            if !map.grow() {
                return map;
            }
            crate::time::pace(started.elapsed()).await;
        }
    }

    fn empty(bytes: usize) -> OffsetMap {
        let capacity = Self::memory_for(bytes) / SLOT_BYTES;
        OffsetMap {
            chunks: Vec::with_capacity(capacity.div_ceil(CHUNK_SLOTS)),
            capacity,
            generation: 1,
            used: 0,
            max_used: ((capacity as f64 * LOAD_FACTOR) as usize).max(1),
            latest: None,
        }
    }

    /// Allocates the next chunk; false once all are there.
    fn grow(&mut self) -> bool {
        let allocated = self.chunks.len() * CHUNK_SLOTS;
        if allocated >= self.capacity {
            return false;
        }
        // Written now (malloc and fill, not calloc), so its pages are faulted in here,
        // a chunk between yields, and not by the puts of a pass: a large batch's keys
        // land on thousands of fresh pages at once.
        let len = CHUNK_SLOTS.min(self.capacity - allocated);
        let mut chunk = Vec::with_capacity(len);
        chunk.resize(len, [0u64; 4]);
        self.chunks.push(chunk);
        true
    }

    /// The memory the map holds.
    pub fn memory_bytes(&self) -> usize {
        self.capacity * SLOT_BYTES
    }

    fn slot(&self, index: usize) -> &Slot {
        &self.chunks[index / CHUNK_SLOTS][index % CHUNK_SLOTS]
    }

    fn slot_mut(&mut self, index: usize) -> &mut Slot {
        &mut self.chunks[index / CHUNK_SLOTS][index % CHUNK_SLOTS]
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
        if self.slot(index)[3] != generation {
            if self.used >= self.max_used {
                return false;
            }
            self.used += 1;
            *self.slot_mut(index) = [hash[0], hash[1], 0, generation];
        }
        self.slot_mut(index)[2] = offset.0 as u64;
        self.latest = Some(self.latest.map_or(offset, |l| l.max(offset)));
        true
    }

    /// The latest offset put for `key`.
    pub fn get(&self, key: &[u8]) -> Option<Offset> {
        let slot = self.slot(self.find(hash(key)));
        (slot[3] == self.generation).then_some(Offset(slot[2] as i64))
    }

    /// The slot holding `hash`, or the free slot where it would go (linear probing; the
    /// load factor keeps a free slot).
    fn find(&self, hash: [u64; 2]) -> usize {
        let mut index = (hash[0] % self.capacity as u64) as usize;
        loop {
            let slot = self.slot(index);
            if slot[3] != self.generation || (slot[0] == hash[0] && slot[1] == hash[1]) {
                return index;
            }
            index = (index + 1) % self.capacity;
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
