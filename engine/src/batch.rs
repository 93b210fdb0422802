//! A zero-copy view over one Kafka RecordBatch (magic v2) and its validation.
//!
//! The engine stores batches exactly as they arrive on the wire (KIP-98's v2 format,
//! `DefaultRecordBatch` in Kafka). The leader assigns offsets by patching the base offset
//! and the partition leader epoch in place: the CRC32C covers the bytes from `attributes`
//! to the end, so neither field is covered and nothing is re-encoded.
//!
//! Header layout (big-endian), 61 bytes:
//!
//! | field                 | type | at |
//! |-----------------------|------|----|
//! | base offset           | i64  | 0  |
//! | batch length          | i32  | 8  |
//! | partition leader epoch| i32  | 12 |
//! | magic                 | i8   | 16 |
//! | crc                   | u32  | 17 |
//! | attributes            | i16  | 21 |
//! | last offset delta     | i32  | 23 |
//! | base timestamp        | i64  | 27 |
//! | max timestamp         | i64  | 35 |
//! | producer id           | i64  | 43 |
//! | producer epoch        | i16  | 51 |
//! | base sequence         | i32  | 53 |
//! | record count          | i32  | 57 |

use bytes::{Bytes, BytesMut};

use crate::types::{LeaderEpoch, Offset, TimestampMs};

/// Size of the v2 batch header, before the first record.
pub const HEADER_BYTES: usize = 61;
/// Bytes before and including the batch length field; `batch length` counts what follows.
pub const LOG_OVERHEAD: usize = 12;
/// The only batch format the engine stores.
pub const MAGIC_V2: i8 = 2;

const BASE_OFFSET_AT: usize = 0;
pub(crate) const LENGTH_AT: usize = 8;
const LEADER_EPOCH_AT: usize = 12;
pub(crate) const MAGIC_AT: usize = 16;
pub(crate) const CRC_AT: usize = 17;
pub(crate) const ATTRIBUTES_AT: usize = 21;
const LAST_OFFSET_DELTA_AT: usize = 23;
const BASE_TIMESTAMP_AT: usize = 27;
const MAX_TIMESTAMP_AT: usize = 35;
const PRODUCER_ID_AT: usize = 43;
const PRODUCER_EPOCH_AT: usize = 51;
const BASE_SEQUENCE_AT: usize = 53;
pub(crate) const RECORD_COUNT_AT: usize = 57;

const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
pub const ATTR_TRANSACTIONAL: i16 = 0x10;
pub const ATTR_CONTROL: i16 = 0x20;

const _: () = assert!(RECORD_COUNT_AT + 4 == HEADER_BYTES);

/// Why bytes are not a valid batch. Each case names what a broker would call it:
/// `TooLarge` is MESSAGE_TOO_LARGE, `UnsupportedMagic` UNSUPPORTED_FOR_MESSAGE_FORMAT,
/// everything else CORRUPT_MESSAGE.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("batch truncated: needs {needed} bytes, {available} available")]
    Truncated { needed: usize, available: usize },
    #[error("batch length {0} is invalid")]
    LengthInvalid(i32),
    #[error("batch of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge { size: usize, max: usize },
    #[error("unsupported magic {0}")]
    UnsupportedMagic(i8),
    #[error("crc mismatch: header says {expected:#010x}, computed {actual:#010x}")]
    CrcMismatch { expected: u32, actual: u32 },
    #[error("record count {0} is invalid")]
    RecordCountInvalid(i32),
    #[error("last offset delta {last_offset_delta} is inconsistent with record count {count}")]
    LastOffsetDeltaInvalid { last_offset_delta: i32, count: i32 },
}

/// The offset after the last record of the batch that starts at `buf[0]` (base offset
/// plus last offset delta plus one), read without validating; `None` when `buf` is
/// shorter than a header.
pub fn next_offset_of(buf: &[u8]) -> Option<Offset> {
    (buf.len() >= HEADER_BYTES)
        .then(|| Offset(read_i64(buf, BASE_OFFSET_AT) + read_i32(buf, LAST_OFFSET_DELTA_AT) as i64 + 1))
}

/// The attributes of the batch that starts at `buf[0]`, read before the batch is
/// validated (for request-level checks); `buf` must hold at least a batch header.
pub fn attributes_of(buf: &[u8]) -> i16 {
    read_i16(buf, ATTRIBUTES_AT)
}

/// Reads the total size of the batch that starts at `buf[0]`, from its length field.
///
/// # Errors
/// `Truncated` when fewer than 12 bytes are present, `LengthInvalid` when the length
/// field cannot describe a v2 batch (negative, or shorter than a header).
pub fn peek_size(buf: &[u8]) -> Result<usize, BatchError> {
    if buf.len() < LOG_OVERHEAD {
        return Err(BatchError::Truncated { needed: LOG_OVERHEAD, available: buf.len() });
    }
    let length = read_i32(buf, LENGTH_AT);
    if length < (HEADER_BYTES - LOG_OVERHEAD) as i32 {
        return Err(BatchError::LengthInvalid(length));
    }
    Ok(LOG_OVERHEAD + length as usize)
}

/// The bytes in front of the magic byte: base offset, batch length and partition leader
/// epoch. A leader patches the first and the last; the CRC covers none of them.
pub const PATCHABLE_BYTES: usize = MAGIC_AT;

/// A validated v2 batch. Holds its bytes as `Bytes`, so clones and slices share memory.
///
/// A batch patched while its buffer is shared (a leader's batch is a slice of the
/// produce request) keeps the buffer as it came and carries its patched first
/// `PATCHABLE_BYTES` beside it, in `head`: patching then copies 16 bytes, not the batch.
/// Every accessor reads through the head; `segments` hands both pieces out uncopied.
#[derive(Clone)]
pub struct Batch {
    bytes: Bytes,
    head: Option<Bytes>,
    backing: Option<Backing>,
}

/// The allocation a batch's bytes are a slice of, when it holds more than the batch (a
/// produce request's frame, with other partitions' batches): its address, which tells
/// allocations apart while any slice of them lives, and its length. The shard's cache
/// charges such an allocation once and whole, however many of its batches it holds,
/// so what it pins stays within its budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Backing {
    pub id: usize,
    pub len: usize,
}

impl Backing {
    /// The allocation `frame` is, for the slices taken from it.
    pub fn of(frame: &[u8]) -> Backing {
        Backing { id: frame.as_ptr() as usize, len: frame.len() }
    }
}

impl PartialEq for Batch {
    fn eq(&self, other: &Batch) -> bool {
        self.head() == other.head() && self.bytes[PATCHABLE_BYTES..] == other.bytes[PATCHABLE_BYTES..]
    }
}

impl Eq for Batch {}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("base_offset", &self.base_offset())
            .field("last_offset", &self.last_offset())
            .field("size", &self.size())
            .finish()
    }
}

impl Batch {
    /// Validates `bytes` as exactly one v2 batch of at most `max_bytes`.
    ///
    /// Checks, in order: the length field against the buffer, the size limit, magic 2,
    /// CRC32C, a record count of at least 1, and a last offset delta consistent with it.
    /// Compaction can remove records from the middle of a batch, so the check is
    /// `last_offset_delta >= count - 1`; `validate_fresh` is the stricter producer check.
    ///
    /// # Errors
    /// A `BatchError` naming the first check that failed. Never panics.
    pub fn validate(bytes: Bytes, max_bytes: usize) -> Result<Batch, BatchError> {
        Batch::check(bytes, max_bytes, true)
    }

    /// `validate` without the CRC: the framing a read needs (length, size limit, magic,
    /// record count, offsets). For bytes read back from the log, whose CRC was checked
    /// when they entered it (produce, replication, recovery); the scrubber
    /// (`log/scrub.rs`) checks them at rest.
    ///
    /// # Errors
    /// As `validate`, but never `CrcMismatch`.
    pub fn frame(bytes: Bytes, max_bytes: usize) -> Result<Batch, BatchError> {
        Batch::check(bytes, max_bytes, false)
    }

    fn check(bytes: Bytes, max_bytes: usize, crc: bool) -> Result<Batch, BatchError> {
        let size = peek_size(&bytes)?;
        if size > max_bytes {
            return Err(BatchError::TooLarge { size, max: max_bytes });
        }
        if size != bytes.len() {
            if size > bytes.len() {
                return Err(BatchError::Truncated { needed: size, available: bytes.len() });
            }
            return Err(BatchError::LengthInvalid(read_i32(&bytes, LENGTH_AT)));
        }
        if bytes.len() < HEADER_BYTES {
            return Err(BatchError::Truncated { needed: HEADER_BYTES, available: bytes.len() });
        }
        let magic = bytes[MAGIC_AT] as i8;
        if magic != MAGIC_V2 {
            return Err(BatchError::UnsupportedMagic(magic));
        }
        if crc {
            let expected = read_u32(&bytes, CRC_AT);
            let actual = crc32c::crc32c(&bytes[ATTRIBUTES_AT..]);
            if expected != actual {
                return Err(BatchError::CrcMismatch { expected, actual });
            }
        }
        let batch = Batch { bytes, head: None, backing: None };
        let count = batch.record_count();
        if count < 1 {
            return Err(BatchError::RecordCountInvalid(count));
        }
        let last_offset_delta = batch.last_offset_delta();
        if last_offset_delta < count - 1 {
            return Err(BatchError::LastOffsetDeltaInvalid { last_offset_delta, count });
        }
        Ok(batch)
    }

    /// `validate`, plus the producer's promise that offsets inside the batch are dense:
    /// a freshly produced batch has `last_offset_delta == count - 1`.
    ///
    /// # Errors
    /// As `validate`, and `LastOffsetDeltaInvalid` for a sparse batch.
    pub fn validate_fresh(bytes: Bytes, max_bytes: usize) -> Result<Batch, BatchError> {
        let batch = Batch::validate(bytes, max_bytes)?;
        let (count, last_offset_delta) = (batch.record_count(), batch.last_offset_delta());
        if last_offset_delta != count - 1 {
            return Err(BatchError::LastOffsetDeltaInvalid { last_offset_delta, count });
        }
        Ok(batch)
    }

    /// Splits a buffer holding consecutive whole batches into batches, validating each.
    ///
    /// # Errors
    /// The first invalid batch's error, with its byte position in `buf`.
    pub fn split_all(buf: Bytes, max_bytes: usize) -> Result<Vec<Batch>, (usize, BatchError)> {
        let mut batches = Vec::new();
        let mut position = 0;
        while position < buf.len() {
            let size = peek_size(&buf[position..]).map_err(|e| (position, e))?;
            if position + size > buf.len() {
                let available = buf.len() - position;
                return Err((position, BatchError::Truncated { needed: size, available }));
            }
            let batch = Batch::validate(buf.slice(position..position + size), max_bytes).map_err(|e| (position, e))?;
            batches.push(batch);
            position += size;
        }
        Ok(batches)
    }

    /// The batch as one contiguous buffer. Shares memory unless the batch carries a
    /// patched head, which is then joined to the rest in a copy: paths that send or
    /// write batches use `segments` or `pieces` instead.
    pub fn bytes(&self) -> Bytes {
        match &self.head {
            None => self.bytes.clone(),
            Some(head) => {
                let mut joined = BytesMut::with_capacity(self.bytes.len());
                joined.extend_from_slice(head);
                joined.extend_from_slice(&self.bytes[PATCHABLE_BYTES..]);
                joined.freeze()
            }
        }
    }

    /// The batch's bytes as the pieces it holds, in order, none copied: the whole
    /// buffer, or the patched head and the rest of the shared buffer.
    pub fn segments(&self) -> impl Iterator<Item = Bytes> {
        let pieces = match &self.head {
            None => [Some(self.bytes.clone()), None],
            Some(head) => [Some(head.clone()), Some(self.bytes.slice(PATCHABLE_BYTES..))],
        };
        pieces.into_iter().flatten()
    }

    /// The batch's bytes as two borrowed pieces that join to the whole batch.
    pub fn pieces(&self) -> [&[u8]; 2] {
        [self.head(), &self.bytes[PATCHABLE_BYTES..]]
    }

    /// This batch, noting the larger allocation its bytes are a slice of. Kept through
    /// patching (a copy keeps it too: the cache may then over-charge, never under).
    pub fn with_backing(mut self, backing: Backing) -> Batch {
        self.backing = Some(backing);
        self
    }

    pub fn backing(&self) -> Option<Backing> {
        self.backing
    }

    fn head(&self) -> &[u8] {
        self.head.as_deref().unwrap_or(&self.bytes[..PATCHABLE_BYTES])
    }

    /// Total bytes of the batch, header included.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }

    pub fn base_offset(&self) -> Offset {
        Offset(read_i64(self.head(), BASE_OFFSET_AT))
    }

    /// The offset of the batch's last record: base offset plus last offset delta.
    pub fn last_offset(&self) -> Offset {
        self.base_offset().plus(self.last_offset_delta() as i64)
    }

    /// The offset right after this batch, where the next batch starts.
    pub fn next_offset(&self) -> Offset {
        self.last_offset().plus(1)
    }

    pub fn leader_epoch(&self) -> LeaderEpoch {
        LeaderEpoch(read_i32(self.head(), LEADER_EPOCH_AT))
    }

    pub fn crc(&self) -> u32 {
        read_u32(&self.bytes, CRC_AT)
    }

    pub fn attributes(&self) -> i16 {
        read_i16(&self.bytes, ATTRIBUTES_AT)
    }

    /// Whether the batch's timestamps were set by the broker (`LogAppendTime`).
    pub fn is_log_append_time(&self) -> bool {
        self.attributes() & ATTR_TIMESTAMP_TYPE != 0
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes() & ATTR_TRANSACTIONAL != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes() & ATTR_CONTROL != 0
    }

    /// The compression codec bits (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
    pub fn compression_bits(&self) -> i16 {
        self.attributes() & 0x07
    }

    pub fn last_offset_delta(&self) -> i32 {
        read_i32(&self.bytes, LAST_OFFSET_DELTA_AT)
    }

    pub fn base_timestamp(&self) -> TimestampMs {
        read_i64(&self.bytes, BASE_TIMESTAMP_AT)
    }

    pub fn max_timestamp(&self) -> TimestampMs {
        read_i64(&self.bytes, MAX_TIMESTAMP_AT)
    }

    pub fn producer_id(&self) -> i64 {
        read_i64(&self.bytes, PRODUCER_ID_AT)
    }

    pub fn producer_epoch(&self) -> i16 {
        read_i16(&self.bytes, PRODUCER_EPOCH_AT)
    }

    pub fn base_sequence(&self) -> i32 {
        read_i32(&self.bytes, BASE_SEQUENCE_AT)
    }

    pub fn record_count(&self) -> i32 {
        read_i32(&self.bytes, RECORD_COUNT_AT)
    }

    /// Whether the CRC still matches the bytes: checked right before a write and right
    /// after a read, so corruption is caught at the disk boundary.
    pub fn crc_ok(&self) -> bool {
        self.crc() == crc32c::crc32c(&self.bytes[ATTRIBUTES_AT..])
    }

    /// Returns this batch with its base offset and leader epoch replaced. Neither field
    /// is covered by the CRC, so nothing is re-encoded and no record byte is copied:
    /// the only owner of its buffer is patched in place, a shared buffer gets a patched
    /// head of `PATCHABLE_BYTES` beside it.
    pub fn with_offset_and_epoch(self, base_offset: Offset, epoch: LeaderEpoch) -> Batch {
        let patch = |head: &mut [u8]| {
            head[BASE_OFFSET_AT..BASE_OFFSET_AT + 8].copy_from_slice(&base_offset.0.to_be_bytes());
            head[LEADER_EPOCH_AT..LEADER_EPOCH_AT + 4].copy_from_slice(&epoch.0.to_be_bytes());
        };
        let mut head = [0u8; PATCHABLE_BYTES];
        head.copy_from_slice(self.head());
        patch(&mut head);
        let backing = self.backing;
        match self.bytes.try_into_mut() {
            Ok(mut owned) => {
                owned[..PATCHABLE_BYTES].copy_from_slice(&head);
                Batch { bytes: owned.freeze(), head: None, backing }
            }
            Err(shared) => Batch { bytes: shared, head: Some(Bytes::copy_from_slice(&head)), backing },
        }
    }

    /// Returns this batch with `LogAppendTime` semantics: the timestamp-type attribute
    /// set and the max timestamp replaced by `now`. Both are covered by the CRC, so the
    /// CRC is recomputed (as Kafka's LogValidator does).
    pub fn with_log_append_time(self, now: TimestampMs) -> Batch {
        let backing = self.backing;
        let mut bytes = self.into_mut();
        let attributes = read_i16(&bytes, ATTRIBUTES_AT) | ATTR_TIMESTAMP_TYPE;
        bytes[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.to_be_bytes());
        bytes[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&now.to_be_bytes());
        let crc = crc32c::crc32c(&bytes[ATTRIBUTES_AT..]);
        bytes[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        Batch { bytes: bytes.freeze(), head: None, backing }
    }

    /// Takes the bytes back for mutation, with the head applied, copying only if the
    /// buffer is shared.
    fn into_mut(self) -> BytesMut {
        let head = self.head;
        let mut bytes = match self.bytes.try_into_mut() {
            Ok(unique) => unique,
            Err(shared) => BytesMut::from(&shared[..]),
        };
        if let Some(head) = head {
            bytes[..PATCHABLE_BYTES].copy_from_slice(&head);
        }
        bytes
    }
}

fn read_i16(buf: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([buf[at], buf[at + 1]])
}

fn read_i32(buf: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

fn read_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

fn read_i64(buf: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

/// Builds valid batches for tests and benchmarks: `count` uncompressed records of
/// `value_bytes` each, keys `key-<i>` when `keyed`.
pub mod testing {
    use super::*;

    /// A batch of `count` records with values of `value_bytes` bytes, at base offset 0.
    pub fn batch(count: i32, value_bytes: usize) -> Bytes {
        batch_with(count, value_bytes, 1_700_000_000_000, |_| None)
    }

    /// A batch whose record `i` has key `key(i)` and a value of `value_bytes` bytes
    /// (`None` from `value_bytes == usize::MAX` makes a tombstone).
    pub fn batch_with(
        count: i32,
        value_bytes: usize,
        base_timestamp: TimestampMs,
        key: impl Fn(i32) -> Option<Vec<u8>>,
    ) -> Bytes {
        assert!(count >= 1);
        let mut records = Vec::new();
        for i in 0..count {
            let mut body = Vec::new();
            body.push(0u8); // attributes
            put_varint(&mut body, i as i64); // timestamp delta
            put_varint(&mut body, i as i64); // offset delta
            match key(i) {
                Some(k) => {
                    put_varint(&mut body, k.len() as i64);
                    body.extend_from_slice(&k);
                }
                None => put_varint(&mut body, -1),
            }
            if value_bytes == usize::MAX {
                put_varint(&mut body, -1);
            } else {
                put_varint(&mut body, value_bytes as i64);
                body.extend((0..value_bytes).map(|j| (j as u8).wrapping_add(i as u8)));
            }
            put_varint(&mut body, 0); // headers
            put_varint(&mut records, body.len() as i64);
            records.extend_from_slice(&body);
        }
        let mut out = vec![0u8; HEADER_BYTES];
        out.extend_from_slice(&records);
        let length = (out.len() - LOG_OVERHEAD) as i32;
        out[LENGTH_AT..LENGTH_AT + 4].copy_from_slice(&length.to_be_bytes());
        out[LEADER_EPOCH_AT..LEADER_EPOCH_AT + 4].copy_from_slice(&(-1i32).to_be_bytes());
        out[MAGIC_AT] = MAGIC_V2 as u8;
        out[LAST_OFFSET_DELTA_AT..LAST_OFFSET_DELTA_AT + 4].copy_from_slice(&(count - 1).to_be_bytes());
        out[BASE_TIMESTAMP_AT..BASE_TIMESTAMP_AT + 8].copy_from_slice(&base_timestamp.to_be_bytes());
        let max_timestamp = base_timestamp + count as i64 - 1;
        out[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&max_timestamp.to_be_bytes());
        out[PRODUCER_ID_AT..PRODUCER_ID_AT + 8].copy_from_slice(&(-1i64).to_be_bytes());
        out[PRODUCER_EPOCH_AT..PRODUCER_EPOCH_AT + 2].copy_from_slice(&(-1i16).to_be_bytes());
        out[BASE_SEQUENCE_AT..BASE_SEQUENCE_AT + 4].copy_from_slice(&(-1i32).to_be_bytes());
        out[RECORD_COUNT_AT..RECORD_COUNT_AT + 4].copy_from_slice(&count.to_be_bytes());
        let crc = crc32c::crc32c(&out[ATTRIBUTES_AT..]);
        out[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(out)
    }

    /// Zigzag varint, as Kafka's `ByteUtils.writeVarlong`.
    pub fn put_varint(out: &mut Vec<u8>, value: i64) {
        let mut v = ((value << 1) ^ (value >> 63)) as u64;
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    /// Recomputes the CRC after a test edited covered bytes on purpose.
    /// Makes a batch an idempotent producer's: id, epoch and base sequence, CRC fixed.
    pub fn set_producer(bytes: &mut [u8], producer_id: i64, epoch: i16, base_sequence: i32) {
        bytes[PRODUCER_ID_AT..PRODUCER_ID_AT + 8].copy_from_slice(&producer_id.to_be_bytes());
        bytes[PRODUCER_EPOCH_AT..PRODUCER_EPOCH_AT + 2].copy_from_slice(&epoch.to_be_bytes());
        bytes[BASE_SEQUENCE_AT..BASE_SEQUENCE_AT + 4].copy_from_slice(&base_sequence.to_be_bytes());
        fix_crc(bytes);
    }

    pub fn fix_crc(bytes: &mut [u8]) {
        let crc = crc32c::crc32c(&bytes[ATTRIBUTES_AT..]);
        bytes[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    const MAX: usize = 1 << 20;

    fn edit(mut f: impl FnMut(&mut Vec<u8>)) -> Bytes {
        let mut bytes = batch(3, 10).to_vec();
        f(&mut bytes);
        Bytes::from(bytes)
    }

    // Valid and malformed batches get the verdict a broker would give, never a panic.
    #[test]
    fn validation_table() {
        let check = |input: Bytes, expected: Result<(), BatchError>| {
            let got = Batch::validate(input, MAX).map(|_| ());
            assert_eq!(got, expected);
        };
        check(batch(3, 10), Ok(()));
        check(Bytes::new(), Err(BatchError::Truncated { needed: 12, available: 0 }));
        check(batch(3, 10).slice(..11), Err(BatchError::Truncated { needed: 12, available: 11 }));
        let full = batch(3, 10);
        check(
            full.slice(..full.len() - 1),
            Err(BatchError::Truncated { needed: full.len(), available: full.len() - 1 }),
        );
        // A length field larger than anything that could follow.
        check(
            edit(|b| b[8..12].copy_from_slice(&i32::MAX.to_be_bytes())),
            Err(BatchError::TooLarge { size: 12 + i32::MAX as usize, max: MAX }),
        );
        check(edit(|b| b[8..12].copy_from_slice(&(-5i32).to_be_bytes())), Err(BatchError::LengthInvalid(-5)));
        check(edit(|b| b[8..12].copy_from_slice(&10i32.to_be_bytes())), Err(BatchError::LengthInvalid(10)));
        check(edit(|b| b[16] = 1), Err(BatchError::UnsupportedMagic(1)));
        let flipped = edit(|b| b[70] ^= 0x01);
        let actual = crc32c::crc32c(&flipped[21..]);
        check(
            flipped.clone(),
            Err(BatchError::CrcMismatch {
                expected: batch(3, 10)[17..21].iter().fold(0, |a, b| (a << 8) | *b as u32),
                actual,
            }),
        );
        check(
            edit(|b| {
                b[57..61].copy_from_slice(&(-2i32).to_be_bytes());
                fix_crc(b);
            }),
            Err(BatchError::RecordCountInvalid(-2)),
        );
        check(
            edit(|b| {
                b[57..61].copy_from_slice(&0i32.to_be_bytes());
                fix_crc(b);
            }),
            Err(BatchError::RecordCountInvalid(0)),
        );
        check(
            edit(|b| {
                b[23..27].copy_from_slice(&0i32.to_be_bytes());
                fix_crc(b);
            }),
            Err(BatchError::LastOffsetDeltaInvalid { last_offset_delta: 0, count: 3 }),
        );
        // Two batches back to back are not one batch.
        let mut two = batch(1, 1).to_vec();
        two.extend_from_slice(&batch(1, 1));
        check(Bytes::from(two), Err(BatchError::LengthInvalid(batch(1, 1).len() as i32 - 12)));
        check(batch(3, 10), Ok(()));
        assert_eq!(Batch::validate(batch(3, 10), 50), Err(BatchError::TooLarge { size: batch(3, 10).len(), max: 50 }));
    }

    // The producer check rejects sparse offsets that compaction may legitimately leave.
    #[test]
    fn fresh_batches_are_dense() {
        let sparse = edit(|b| {
            b[23..27].copy_from_slice(&5i32.to_be_bytes());
            fix_crc(b);
        });
        assert!(Batch::validate(sparse.clone(), MAX).is_ok());
        assert_eq!(
            Batch::validate_fresh(sparse, MAX),
            Err(BatchError::LastOffsetDeltaInvalid { last_offset_delta: 5, count: 3 })
        );
    }

    // Patching offset and epoch keeps the CRC valid; LogAppendTime recomputes it.
    #[test]
    fn patching_preserves_crc() {
        let b = Batch::validate(batch(4, 100), MAX).unwrap();
        let patched = b.with_offset_and_epoch(Offset(1000), LeaderEpoch(7));
        assert_eq!(patched.base_offset(), Offset(1000));
        assert_eq!(patched.last_offset(), Offset(1003));
        assert_eq!(patched.leader_epoch(), LeaderEpoch(7));
        assert!(patched.crc_ok());
        let stamped = patched.with_log_append_time(42);
        assert!(stamped.is_log_append_time());
        assert_eq!(stamped.max_timestamp(), 42);
        assert!(Batch::validate(stamped.bytes(), MAX).is_ok());
    }

    // A batch whose buffer is shared is patched beside it: its pieces and segments join
    // to the bytes an in-place patch gives, the request's bytes stay as they came, and
    // LogAppendTime on top of it still yields one valid batch.
    #[test]
    fn shared_batches_are_patched_apart() {
        let request = batch(3, 50);
        let shared = Batch::validate(request.clone(), MAX).unwrap();
        let owned = Batch::validate(Bytes::from(request.to_vec()), MAX).unwrap();
        let apart = shared.with_offset_and_epoch(Offset(77), LeaderEpoch(4));
        let in_place = owned.with_offset_and_epoch(Offset(77), LeaderEpoch(4));
        assert_eq!(apart.segments().count(), 2, "patched beside the shared buffer");
        assert_eq!(in_place.segments().count(), 1, "patched in place");
        assert_eq!(apart, in_place);
        assert_eq!(apart.bytes(), in_place.bytes());
        assert_eq!(apart.pieces().concat(), in_place.bytes().to_vec());
        assert_eq!(apart.segments().flat_map(|b| b.to_vec()).collect::<Vec<u8>>(), in_place.bytes().to_vec());
        assert_eq!(
            (apart.base_offset(), apart.leader_epoch(), apart.next_offset()),
            (Offset(77), LeaderEpoch(4), Offset(80))
        );
        assert_eq!(request, batch(3, 50), "the request's buffer is not written");
        let stamped = apart.with_log_append_time(9);
        assert_eq!(stamped.base_offset(), Offset(77));
        assert!(Batch::validate(stamped.bytes(), MAX).is_ok());
    }

    // Splitting consecutive batches finds each one and reports where a bad one starts.
    #[test]
    fn split_all_positions() {
        let mut buf = batch(2, 5).to_vec();
        let first = buf.len();
        buf.extend_from_slice(&batch(3, 5));
        let batches = Batch::split_all(Bytes::from(buf.clone()), MAX).unwrap();
        assert_eq!(batches.len(), 2);
        buf.truncate(buf.len() - 3);
        let (position, _) = Batch::split_all(Bytes::from(buf), MAX).unwrap_err();
        assert_eq!(position, first);
    }

    // Truncating a batch anywhere or flipping any byte is rejected without a panic.
    #[test]
    fn every_truncation_and_flip_is_rejected() {
        let good = batch(5, 20);
        for cut in 0..good.len() {
            assert!(Batch::validate(good.slice(..cut), MAX).is_err(), "cut at {cut}");
        }
        for at in 8..good.len() {
            let mut bad = good.to_vec();
            bad[at] ^= 0x40;
            // Bytes 12..16 (leader epoch) and 17..21 (crc) excepted: the epoch is not
            // covered, and a flipped crc must still be caught.
            let verdict = Batch::validate(Bytes::from(bad), MAX);
            if (12..16).contains(&at) {
                assert!(verdict.is_ok());
            } else {
                assert!(verdict.is_err(), "flip at {at}");
            }
        }
    }

    // Framing a read skips only the CRC: a flipped record byte passes, a broken frame
    // does not.
    #[test]
    fn frame_checks_everything_but_the_crc() {
        let good = batch(5, 20);
        let mut flipped = good.to_vec();
        *flipped.last_mut().unwrap() ^= 0x40;
        let flipped = Bytes::from(flipped);
        assert!(matches!(Batch::validate(flipped.clone(), MAX), Err(BatchError::CrcMismatch { .. })));
        assert_eq!(Batch::frame(flipped.clone(), MAX).unwrap().bytes(), flipped);
        for cut in 0..good.len() {
            assert!(Batch::frame(good.slice(..cut), MAX).is_err(), "cut at {cut}");
        }
        let mut bad_magic = good.to_vec();
        bad_magic[MAGIC_AT] = 1;
        assert_eq!(Batch::frame(Bytes::from(bad_magic), MAX).unwrap_err(), BatchError::UnsupportedMagic(1));
        assert!(matches!(Batch::frame(good.clone(), 10), Err(BatchError::TooLarge { .. })));
    }
}
