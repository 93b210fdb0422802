//! Record-level validation of a producer's batch, as Kafka's `LogValidator` does it
//! before a leader appends: every record's framing must match the batch header, and
//! each record must obey the topic's rules (a key on a compacted topic, a CreateTime
//! timestamp within `message.timestamp.before.max.ms` / `after.max.ms` of now).
//!
//! `Batch::validate_fresh` has already checked length, magic, CRC and the header's
//! counts. This module reads the records section in place when uncompressed, and
//! through a fixed buffer from the codec's stream reader when compressed, allocating
//! nothing per record.
//!
//! Framing faults (a length that does not match, a record count or offset delta that
//! disagrees with the header, a section that does not decompress) fail the whole batch
//! with `RecordsError`. Rule violations are reported per record (`RecordViolation`), as
//! Kafka's produce response lists them (KIP-467).

use crate::batch::Batch;
use std::io::Read;

use crate::records::{decompress, unsigned_varint, zigzag32, zigzag64, Compression, Reader, RecordsError, HEADER_LEN};

/// What the topic asks of each record.
#[derive(Debug, Clone, Copy)]
pub struct RecordRules {
    /// `cleanup.policy` includes compact: every record needs a key.
    pub key_required: bool,
    /// With CreateTime: the inclusive range of record timestamps accepted (now minus
    /// `message.timestamp.before.max.ms`, now plus `after.max.ms`). `None` with
    /// LogAppendTime, whose timestamps the broker sets.
    pub timestamp_range: Option<(i64, i64)>,
    /// Largest decompressed records section accepted.
    pub decompressed_bytes_max: usize,
}

/// Why one record is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A record without a key on a compacted topic.
    KeyMissing,
    /// A CreateTime timestamp outside the accepted range.
    TimestampOutOfRange { timestamp: i64, min: i64, max: i64 },
}

/// A refused record: its index in the batch and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordViolation {
    pub index: i32,
    pub violation: Violation,
}

/// Checks every record of `batch` against its header and `rules`.
///
/// Cost: one pass over the records section. An uncompressed section is read in place;
/// a compressed one is decompressed as a stream through a 16 KiB buffer, so memory
/// stays constant whatever the batch expands to (up to `rules.decompressed_bytes_max`).
///
/// # Errors
/// `RecordsError` when the records section is malformed or does not decompress; the
/// records that break `rules` come back as `Ok` with their violations.
pub fn validate_records(batch: &Batch, rules: &RecordRules) -> Result<Vec<RecordViolation>, RecordsError> {
    let bytes = batch.bytes();
    let section = bytes.get(HEADER_LEN..batch.size()).ok_or(RecordsError::Truncated)?;
    let compression = Compression::from_attributes(batch.attributes())?;
    let (count, base_timestamp) = (batch.record_count(), batch.base_timestamp());
    match compression {
        Compression::None => check_section(&mut SliceSource(Reader::new(section)), count, base_timestamp, rules),
        codec => {
            let stream = decompressor(codec, section)?;
            let mut source = StreamSource::new(stream, rules.decompressed_bytes_max);
            check_section(&mut source, count, base_timestamp, rules)
        }
    }
}

/// Where records are read from: a slice in place, or a decompressing stream.
trait Source {
    fn u8(&mut self) -> Result<u8, RecordsError>;
    fn skip(&mut self, n: usize) -> Result<(), RecordsError>;
    /// Whether the section has no more bytes.
    fn at_end(&mut self) -> Result<bool, RecordsError>;
    /// Bytes consumed so far.
    fn position(&self) -> usize;

    fn varint(&mut self) -> Result<i32, RecordsError> {
        unsigned_varint(5, || self.u8()).map(zigzag32)
    }

    fn varlong(&mut self) -> Result<i64, RecordsError> {
        unsigned_varint(10, || self.u8()).map(zigzag64)
    }

    /// Skips a varint-length-prefixed nullable field; whether it was present.
    fn skip_nullable(&mut self) -> Result<bool, RecordsError> {
        match self.varint()? {
            -1 => Ok(false),
            n if n < 0 => Err(RecordsError::Malformed("negative length")),
            n => {
                self.skip(n as usize)?;
                Ok(true)
            }
        }
    }
}

struct SliceSource<'a>(Reader<'a>);

impl Source for SliceSource<'_> {
    fn u8(&mut self) -> Result<u8, RecordsError> {
        self.0.u8()
    }

    fn skip(&mut self, n: usize) -> Result<(), RecordsError> {
        self.0.skip(n).map(|_| ())
    }

    fn at_end(&mut self) -> Result<bool, RecordsError> {
        Ok(self.0.remaining() == 0)
    }

    fn position(&self) -> usize {
        self.0.position()
    }
}

/// A decompressing stream read through a fixed buffer.
struct StreamSource<R> {
    stream: R,
    buffer: Box<[u8; STREAM_BUFFER_BYTES]>,
    start: usize,
    end: usize,
    consumed: usize,
    limit: usize,
}

/// The buffer a compressed section is validated through.
const STREAM_BUFFER_BYTES: usize = 16 << 10;

impl<R: Read> StreamSource<R> {
    fn new(stream: R, limit: usize) -> Self {
        StreamSource { stream, buffer: Box::new([0; STREAM_BUFFER_BYTES]), start: 0, end: 0, consumed: 0, limit }
    }

    /// Refills the buffer; false at the end of the stream.
    fn fill(&mut self) -> Result<bool, RecordsError> {
        if self.start < self.end {
            return Ok(true);
        }
        let n = self.stream.read(&mut self.buffer[..]).map_err(|e| RecordsError::Decompress(e.to_string()))?;
        self.start = 0;
        self.end = n;
        Ok(n > 0)
    }

    fn take(&mut self, n: usize) -> Result<(), RecordsError> {
        self.consumed += n;
        if self.consumed > self.limit {
            return Err(RecordsError::TooLarge { limit: self.limit });
        }
        Ok(())
    }
}

impl<R: Read> Source for StreamSource<R> {
    fn u8(&mut self) -> Result<u8, RecordsError> {
        if !self.fill()? {
            return Err(RecordsError::Truncated);
        }
        let b = self.buffer[self.start];
        self.start += 1;
        self.take(1)?;
        Ok(b)
    }

    fn skip(&mut self, mut n: usize) -> Result<(), RecordsError> {
        while n > 0 {
            if !self.fill()? {
                return Err(RecordsError::Truncated);
            }
            let step = n.min(self.end - self.start);
            self.start += step;
            self.take(step)?;
            n -= step;
        }
        Ok(())
    }

    fn at_end(&mut self) -> Result<bool, RecordsError> {
        Ok(!self.fill()?)
    }

    fn position(&self) -> usize {
        self.consumed
    }
}

/// A reader that decompresses `section` with `codec`'s stream format.
fn decompressor<'a>(codec: Compression, section: &'a [u8]) -> Result<Box<dyn Read + 'a>, RecordsError> {
    Ok(match codec {
        Compression::None => Box::new(section),
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(section)),
        Compression::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(section)),
        Compression::Zstd => {
            let mut decoder = zstd::stream::read::Decoder::with_buffer(section)
                .map_err(|e| RecordsError::Decompress(e.to_string()))?;
            // Bounds the window zstd allocates for a frame without a content size.
            decoder.window_log_max(27).map_err(|e| RecordsError::Decompress(e.to_string()))?;
            Box::new(decoder)
        }
        // Snappy blocks carry their whole length: decompressed block by block by the
        // codec module, within the limit of the caller.
        Compression::Snappy => Box::new(std::io::Cursor::new(decompress(codec, section, SNAPPY_LIMIT)?)),
    })
}

/// Snappy sections are decompressed whole (the codec has no stream reader here); their
/// bound is the engine's.
const SNAPPY_LIMIT: usize = crate::limits::DECOMPRESSED_BATCH_BYTES_MAX;

fn check_section(
    source: &mut impl Source,
    count: i32,
    base_timestamp: i64,
    rules: &RecordRules,
) -> Result<Vec<RecordViolation>, RecordsError> {
    let mut violations = Vec::new();
    let mut index = 0i32;
    while !source.at_end()? {
        if index >= count {
            return Err(RecordsError::Malformed("more records than the batch header's record count"));
        }
        let length = source.varint()?;
        let length = usize::try_from(length).map_err(|_| RecordsError::Malformed("negative record length"))?;
        let body_start = source.position();
        let _attributes = source.u8()?;
        let timestamp_delta = source.varlong()?;
        if source.varint()? != index {
            return Err(RecordsError::Malformed("record offset delta out of sequence"));
        }
        let key_present = source.skip_nullable()?;
        source.skip_nullable()?;
        let headers = source.varint()?;
        if headers < 0 {
            return Err(RecordsError::Malformed("negative header count"));
        }
        for _ in 0..headers {
            let key_length = source.varint()?;
            let key_length = usize::try_from(key_length).map_err(|_| RecordsError::Malformed("null header key"))?;
            source.skip(key_length)?;
            source.skip_nullable()?;
            if source.position() - body_start > length {
                break;
            }
        }
        if source.position() - body_start != length {
            return Err(RecordsError::Malformed("record length does not match its contents"));
        }
        if rules.key_required && !key_present {
            violations.push(RecordViolation { index, violation: Violation::KeyMissing });
        } else if let Some((min, max)) = rules.timestamp_range {
            let timestamp = base_timestamp.wrapping_add(timestamp_delta);
            // -1 is "no timestamp", which Kafka leaves alone.
            if timestamp != -1 && !(min..=max).contains(&timestamp) {
                violations
                    .push(RecordViolation { index, violation: Violation::TimestampOutOfRange { timestamp, min, max } });
            }
        }
        index += 1;
    }
    if index != count {
        return Err(RecordsError::Malformed("fewer records than the batch header's record count"));
    }
    Ok(violations)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::batch::testing;
    use crate::records::{build_batch, Record};

    const OPEN: RecordRules =
        RecordRules { key_required: false, timestamp_range: None, decompressed_bytes_max: 1 << 20 };

    fn record(offset_delta: i32, key: Option<&'static [u8]>) -> Record {
        Record {
            offset_delta,
            timestamp_delta: offset_delta as i64,
            key: key.map(Bytes::from_static),
            value: Some(Bytes::from_static(b"value")),
            ..Record::default()
        }
    }

    fn batch(bytes: Vec<u8>) -> Batch {
        Batch::validate_fresh(Bytes::from(bytes), 1 << 20).expect("a valid batch header")
    }

    fn check(bytes: Vec<u8>, rules: RecordRules) -> Result<Vec<RecordViolation>, RecordsError> {
        validate_records(&batch(bytes), &rules)
    }

    // Well-formed batches pass with every codec, and rule breaks are listed by index.
    #[test]
    fn records_are_checked_with_every_codec() {
        let codecs = [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];
        for codec in codecs {
            let records = vec![record(0, Some(b"a")), record(1, None), record(2, Some(b"c"))];
            let bytes = build_batch(0, 1_000, codec, &records);
            assert_eq!(check(bytes.clone(), OPEN).unwrap(), vec![], "{codec:?}");
            let compacted = RecordRules { key_required: true, ..OPEN };
            assert_eq!(
                check(bytes.clone(), compacted).unwrap(),
                vec![RecordViolation { index: 1, violation: Violation::KeyMissing }],
                "{codec:?}"
            );
            let late = RecordRules { timestamp_range: Some((1_001, 5_000)), ..OPEN };
            assert_eq!(
                check(bytes, late).unwrap(),
                vec![RecordViolation {
                    index: 0,
                    violation: Violation::TimestampOutOfRange { timestamp: 1_000, min: 1_001, max: 5_000 }
                }],
                "{codec:?}"
            );
        }
    }

    // Framing that disagrees with the header fails the whole batch.
    #[test]
    fn framing_must_match_the_header() {
        // Offset deltas out of sequence (the header's last offset delta still matches).
        let gap = build_batch(0, 0, Compression::None, &[record(0, None), record(0, None)]);
        let mut gap = gap;
        gap[23..27].copy_from_slice(&1i32.to_be_bytes());
        testing::fix_crc(&mut gap);
        assert!(matches!(check(gap, OPEN), Err(RecordsError::Malformed(_))));

        // A record whose length varint claims one byte more than its contents.
        let mut long = testing::batch(2, 10).to_vec();
        long[HEADER_LEN] += 2; // zigzag: +1 in value
        testing::fix_crc(&mut long);
        assert!(check(long, OPEN).is_err());

        // A header claiming more records than the section holds.
        let mut short = testing::batch(3, 10).to_vec();
        short[57..61].copy_from_slice(&4i32.to_be_bytes());
        short[23..27].copy_from_slice(&3i32.to_be_bytes());
        testing::fix_crc(&mut short);
        assert!(matches!(check(short, OPEN), Err(RecordsError::Malformed(_))));

        // A compressed section that is not what its codec says.
        let mut garbage = build_batch(0, 0, Compression::None, &[record(0, None)]);
        garbage[21..23].copy_from_slice(&Compression::Zstd.attribute_bits().to_be_bytes());
        testing::fix_crc(&mut garbage);
        assert!(matches!(check(garbage, OPEN), Err(RecordsError::Decompress(_))));
    }
}
