//! Kafka's sparse segment indexes, kept in memory and written as Kafka writes them.
//!
//! `.index`: 8-byte entries (offset relative to the segment base u32, byte position
//! u32), one every `index.interval.bytes`, keyed by the *last* offset of the indexed
//! batch and pointing at that batch's start, as Kafka's `LogSegment.append` does.
//! `.timeindex`: 12-byte entries (timestamp i64, relative offset u32), appended with
//! the offset index when the segment's max timestamp has grown.
//!
//! Entries are small (2 MiB for a 1 GiB segment at the default interval), so a
//! segment's indexes live in memory and are written whole when the segment closes or
//! the log checkpoints. A missing or corrupt index file is rebuilt by scanning the log.

/// Offset index entries: (relative last offset, position of the batch).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OffsetIndex {
    entries: Vec<(u32, u32)>,
}

pub const OFFSET_ENTRY_BYTES: usize = 8;
pub const TIME_ENTRY_BYTES: usize = 12;

impl OffsetIndex {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn last(&self) -> Option<(u32, u32)> {
        self.entries.last().copied()
    }

    /// Adds an entry; relative offsets and positions only grow.
    pub fn append(&mut self, relative_offset: u32, position: u32) {
        if let Some(&(last_offset, last_position)) = self.entries.last() {
            assert!(relative_offset > last_offset && position > last_position);
        }
        self.entries.push((relative_offset, position));
    }

    /// The byte position from which a scan for `relative_offset` must start: the batch
    /// of the largest entry whose offset is below the target (an entry names a batch's
    /// last offset, so the batch holding the target starts at or after it).
    pub fn lookup(&self, relative_offset: u32) -> u32 {
        // Entries with last offset < target end before the target's batch; the first
        // entry with last offset >= target may be the target's batch itself.
        let at = self.entries.partition_point(|&(o, _)| o < relative_offset);
        match at {
            0 => 0,
            n => {
                // Start at the batch after entry n-1: its position is not stored, but
                // entry n-1's batch starts before the target and is skipped by the scan.
                self.entries[n - 1].1
            }
        }
    }

    /// The start of an indexed batch at or below `position`, if any: a place where a
    /// read can be cut without cutting a batch.
    pub fn batch_start_at_or_below(&self, position: u32) -> Option<u32> {
        let at = self.entries.partition_point(|&(_, p)| p <= position);
        at.checked_sub(1).map(|n| self.entries[n].1)
    }

    /// Drops entries for batches at or after `position` (truncation).
    pub fn truncate_to_position(&mut self, position: u32) {
        let keep = self.entries.partition_point(|&(_, p)| p < position);
        self.entries.truncate(keep);
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * OFFSET_ENTRY_BYTES);
        for &(offset, position) in &self.entries {
            out.extend_from_slice(&offset.to_be_bytes());
            out.extend_from_slice(&position.to_be_bytes());
        }
        out
    }

    /// Parses an index file, checking it can belong to a log of `log_bytes` bytes.
    ///
    /// # Errors
    /// A reason when the size is not a multiple of 8, entries do not grow strictly, or
    /// a position lies beyond the log.
    pub fn decode(bytes: &[u8], log_bytes: u64) -> Result<OffsetIndex, String> {
        if !bytes.len().is_multiple_of(OFFSET_ENTRY_BYTES) {
            return Err(format!("size {} is not a multiple of 8", bytes.len()));
        }
        let mut index = OffsetIndex::default();
        for entry in bytes.chunks_exact(OFFSET_ENTRY_BYTES) {
            let offset = u32::from_be_bytes(entry[..4].try_into().expect("4 bytes"));
            let position = u32::from_be_bytes(entry[4..].try_into().expect("4 bytes"));
            if let Some(&(o, p)) = index.entries.last() {
                if offset <= o || position <= p {
                    return Err(format!("entry ({offset}, {position}) does not grow"));
                }
            }
            if position as u64 >= log_bytes {
                return Err(format!("position {position} beyond log of {log_bytes} bytes"));
            }
            index.entries.push((offset, position));
        }
        Ok(index)
    }
}

/// Time index entries: (max timestamp so far, relative last offset of its batch).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TimeIndex {
    entries: Vec<(i64, u32)>,
}

impl TimeIndex {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn last(&self) -> Option<(i64, u32)> {
        self.entries.last().copied()
    }

    pub fn first(&self) -> Option<(i64, u32)> {
        self.entries.first().copied()
    }

    /// Adds an entry if `timestamp` is larger than the last one (Kafka's `maybeAppend`).
    pub fn maybe_append(&mut self, timestamp: i64, relative_offset: u32) {
        match self.entries.last() {
            Some(&(t, o)) if timestamp <= t || relative_offset <= o => {}
            _ => self.entries.push((timestamp, relative_offset)),
        }
    }

    /// The relative offset from which to scan for the first timestamp >= `timestamp`:
    /// the last entry with a timestamp below it (its batch holds no larger timestamp
    /// than the entry, so the answer lies after it), or 0.
    pub fn lookup(&self, timestamp: i64) -> u32 {
        let at = self.entries.partition_point(|&(t, _)| t < timestamp);
        match at {
            0 => 0,
            n => self.entries[n - 1].1,
        }
    }

    /// Drops entries at or after `relative_offset`.
    pub fn truncate_to_offset(&mut self, relative_offset: u32) {
        let keep = self.entries.partition_point(|&(_, o)| o < relative_offset);
        self.entries.truncate(keep);
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * TIME_ENTRY_BYTES);
        for &(timestamp, offset) in &self.entries {
            out.extend_from_slice(&timestamp.to_be_bytes());
            out.extend_from_slice(&offset.to_be_bytes());
        }
        out
    }

    /// Parses a time index file.
    ///
    /// # Errors
    /// A reason when the size is not a multiple of 12 or entries do not grow.
    pub fn decode(bytes: &[u8]) -> Result<TimeIndex, String> {
        if !bytes.len().is_multiple_of(TIME_ENTRY_BYTES) {
            return Err(format!("size {} is not a multiple of 12", bytes.len()));
        }
        let mut index = TimeIndex::default();
        for entry in bytes.chunks_exact(TIME_ENTRY_BYTES) {
            let timestamp = i64::from_be_bytes(entry[..8].try_into().expect("8 bytes"));
            let offset = u32::from_be_bytes(entry[8..].try_into().expect("4 bytes"));
            if let Some(&(t, o)) = index.entries.last() {
                if timestamp <= t || offset <= o {
                    return Err(format!("entry ({timestamp}, {offset}) does not grow"));
                }
            }
            index.entries.push((timestamp, offset));
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Offset lookups start at or before the batch holding the target.
    #[test]
    fn offset_lookup() {
        let mut index = OffsetIndex::default();
        index.append(9, 100);
        index.append(19, 200);
        index.append(29, 300);
        let check = |target: u32, expected: u32| assert_eq!(index.lookup(target), expected, "{target}");
        check(0, 0);
        check(9, 0);
        check(10, 100);
        check(19, 100);
        check(20, 200);
        check(35, 300);
    }

    // Encoded indexes decode to the same entries; damaged files are refused.
    #[test]
    fn encode_decode() {
        let mut index = OffsetIndex::default();
        index.append(3, 10);
        index.append(7, 90);
        assert_eq!(OffsetIndex::decode(&index.encode(), 100).unwrap(), index);
        assert!(OffsetIndex::decode(&index.encode()[..12], 100).is_err());
        assert!(OffsetIndex::decode(&index.encode(), 50).is_err());
        let mut bad = index.encode();
        bad[8..12].copy_from_slice(&1u32.to_be_bytes());
        assert!(OffsetIndex::decode(&bad, 100).is_err());
        let mut times = TimeIndex::default();
        times.maybe_append(5, 1);
        times.maybe_append(4, 2);
        times.maybe_append(9, 3);
        assert_eq!(times.len(), 2);
        assert_eq!(TimeIndex::decode(&times.encode()).unwrap(), times);
        assert!(TimeIndex::decode(&times.encode()[..5]).is_err());
    }

    // Truncation drops entries for the removed tail only.
    #[test]
    fn truncation() {
        let mut index = OffsetIndex::default();
        index.append(1, 10);
        index.append(2, 20);
        index.truncate_to_position(20);
        assert_eq!(index.len(), 1);
        let mut times = TimeIndex::default();
        times.maybe_append(1, 1);
        times.maybe_append(2, 5);
        times.truncate_to_offset(5);
        assert_eq!(times.last(), Some((1, 1)));
        assert_eq!(times.lookup(2), 1);
        assert_eq!(times.lookup(1), 0);
    }
}
