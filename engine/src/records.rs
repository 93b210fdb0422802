//! Encoding, decoding, compression and compaction filtering of Kafka record
//! batches in the v2 ("magic 2") format introduced by KIP-98 (exactly-once
//! and transactional messaging).
//!
//! The layouts mirror Kafka's `DefaultRecordBatch` (the 61-byte batch header
//! followed by a records section) and `DefaultRecord` (one varint-framed
//! record), and the varint encoding mirrors `ByteUtils.readVarint` /
//! `readVarlong` (zigzag, at most 5 and 10 bytes). When the batch attributes
//! name a codec, the records section is compressed as a whole, with the same
//! stream formats the Java client uses: gzip streams, xerial-framed snappy
//! (raw snappy written by librdkafka is accepted too), the LZ4 frame format
//! and zstd frames.
//!
//! Every input is treated as hostile: parsing returns `Result` instead of
//! panicking, allocations are bounded by the bytes actually present, and the
//! total decompressed size is capped by the caller's `max_decompressed_bytes`
//! so a decompression bomb fails with [`RecordsError::TooLarge`].
//!
//! Batch-level length and CRC validation is the caller's job; this module
//! recomputes both whenever it writes a batch.

use bytes::Bytes;
use std::io::{Read, Write};
use std::ops::Range;

// The header layout is `batch`'s; the CRC covers everything from the attributes field
// to the end of the batch, and batchLength does not count the first 12 bytes.
pub use crate::batch::HEADER_BYTES as HEADER_LEN;
use crate::batch::{
    ATTRIBUTES_AT as ATTRIBUTES_OFFSET, CRC_AT as CRC_OFFSET, LENGTH_AT as LENGTH_OFFSET, LOG_OVERHEAD,
    MAGIC_AT as MAGIC_OFFSET, RECORD_COUNT_AT as RECORD_COUNT_OFFSET,
};
/// The smallest possible record: a one-byte varint for each of length,
/// timestampDelta, offsetDelta, keyLength, valueLength and headerCount, plus
/// the attributes byte. Used to bound capacity reservations by the input size.
const MIN_RECORD_LEN: usize = 7;
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Kafka's Java producer writes 32 KiB xerial blocks; using the same size
/// keeps our batches shaped like the ones its consumers already handle.
const XERIAL_BLOCK: usize = 32 * 1024;
/// Kafka's default zstd level.
const ZSTD_LEVEL: i32 = 3;

/// The compression codec stored in bits 0-2 of the batch attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None = 0,
    Gzip = 1,
    Snappy = 2,
    Lz4 = 3,
    Zstd = 4,
}

impl Compression {
    /// Extracts the codec from a batch's attributes field.
    pub fn from_attributes(attributes: i16) -> Result<Self, RecordsError> {
        match attributes & 0x7 {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            other => Err(RecordsError::UnknownCompression(other)),
        }
    }

    /// The value of the codec bits, ready to be OR-ed into the attributes.
    pub fn attribute_bits(self) -> i16 {
        self as i16
    }
}

#[derive(thiserror::Error, Debug)]
pub enum RecordsError {
    #[error("record data is truncated")]
    Truncated,
    #[error("malformed record data: {0}")]
    Malformed(&'static str),
    #[error("unsupported record batch magic {0}")]
    UnsupportedMagic(i8),
    #[error("unknown compression codec {0}")]
    UnknownCompression(i16),
    #[error("decompression failed: {0}")]
    Decompress(String),
    #[error("compression failed: {0}")]
    Compress(String),
    #[error("decompressed data exceeds the limit of {limit} bytes")]
    TooLarge { limit: usize },
}

/// One record of a v2 batch; offsets and timestamps are deltas from the batch
/// header so that compaction can drop records without rewriting the others.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    pub attributes: i8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(Bytes, Option<Bytes>)>,
}

/// A bounds-checked cursor; every read fails with `Truncated` instead of
/// panicking when the input runs out.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Advances over `n` bytes and returns their position in the buffer.
    pub(crate) fn skip(&mut self, n: usize) -> Result<Range<usize>, RecordsError> {
        let end = self.pos.checked_add(n).ok_or(RecordsError::Truncated)?;
        if end > self.buf.len() {
            return Err(RecordsError::Truncated);
        }
        let range = self.pos..end;
        self.pos = end;
        Ok(range)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, RecordsError> {
        let at = self.skip(1)?.start;
        self.buf.get(at).copied().ok_or(RecordsError::Truncated)
    }

    /// Reads an unsigned LEB128 value of at most `max_bytes` bytes, like the
    /// loops in Kafka's `ByteUtils`, which reject longer encodings.
    pub(crate) fn unsigned_varint(&mut self, max_bytes: u32) -> Result<u64, RecordsError> {
        unsigned_varint(max_bytes, || self.u8())
    }

    pub(crate) fn varint(&mut self) -> Result<i32, RecordsError> {
        self.unsigned_varint(5).map(zigzag32)
    }

    pub(crate) fn varlong(&mut self) -> Result<i64, RecordsError> {
        self.unsigned_varint(10).map(zigzag64)
    }

    /// Reads a varint length where -1 means null and other negatives are invalid.
    fn nullable_bytes(&mut self, data: &Bytes) -> Result<Option<Bytes>, RecordsError> {
        match self.varint()? {
            -1 => Ok(None),
            n => Ok(Some(data.slice(self.skip(non_negative(n, "negative length")?)?))),
        }
    }
}

/// Reads an unsigned LEB128 value of at most `max_bytes` bytes from `next`, like the
/// loops in Kafka's `ByteUtils`, which reject longer encodings.
pub(crate) fn unsigned_varint(
    max_bytes: u32,
    mut next: impl FnMut() -> Result<u8, RecordsError>,
) -> Result<u64, RecordsError> {
    let mut value = 0u64;
    for i in 0..max_bytes {
        let b = next()?;
        // Bits pushed past 64 are dropped, matching Java's silent overflow.
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(RecordsError::Malformed("varint is too long"))
}

/// Zigzag-decodes a varint; truncation to 32 bits is deliberate: it is what Java's int
/// math does.
pub(crate) fn zigzag32(raw: u64) -> i32 {
    let raw = raw as u32;
    ((raw >> 1) as i32) ^ -((raw & 1) as i32)
}

/// Zigzag-decodes a varlong.
pub(crate) fn zigzag64(raw: u64) -> i64 {
    ((raw >> 1) as i64) ^ -((raw & 1) as i64)
}

/// Converts a length or count field, where negatives (other than a null
/// marker the caller has already handled) mean the input is corrupt.
fn non_negative(v: i32, what: &'static str) -> Result<usize, RecordsError> {
    usize::try_from(v).map_err(|_| RecordsError::Malformed(what))
}

fn compress_err(e: impl std::fmt::Display) -> RecordsError {
    RecordsError::Compress(e.to_string())
}

fn decompress_err(e: impl std::fmt::Display) -> RecordsError {
    RecordsError::Decompress(e.to_string())
}

fn write_varint(out: &mut Vec<u8>, v: i32) {
    write_unsigned(out, u64::from((v.wrapping_shl(1) ^ (v >> 31)) as u32));
}

fn write_varlong(out: &mut Vec<u8>, v: i64) {
    write_unsigned(out, (v.wrapping_shl(1) ^ (v >> 63)) as u64);
}

fn write_unsigned(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Lengths above `i32::MAX` cannot be represented in the format; saturating
/// keeps encoding panic-free and the resulting batch fails to decode rather
/// than silently aliasing a shorter length.
fn len_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn write_nullable(out: &mut Vec<u8>, b: &Option<Bytes>) {
    match b {
        None => write_varint(out, -1),
        Some(b) => {
            write_varint(out, len_i32(b.len()));
            out.extend_from_slice(b);
        }
    }
}

fn be_bytes<const N: usize>(buf: &[u8], at: usize) -> Result<[u8; N], RecordsError> {
    let end = at.checked_add(N).ok_or(RecordsError::Truncated)?;
    let slice = buf.get(at..end).ok_or(RecordsError::Truncated)?;
    slice.try_into().map_err(|_| RecordsError::Truncated)
}

fn read_i32(buf: &[u8], at: usize) -> Result<i32, RecordsError> {
    be_bytes::<4>(buf, at).map(i32::from_be_bytes)
}

fn read_i16(buf: &[u8], at: usize) -> Result<i16, RecordsError> {
    be_bytes::<2>(buf, at).map(i16::from_be_bytes)
}

/// The parts of the header this module needs to interpret the records section.
struct BatchHeader {
    compression: Compression,
    record_count: usize,
    /// One past the last byte of the batch, taken from batchLength so that a
    /// slice holding several consecutive batches is read correctly.
    end: usize,
}

fn parse_header(batch: &[u8]) -> Result<BatchHeader, RecordsError> {
    if batch.len() < HEADER_LEN {
        return Err(RecordsError::Truncated);
    }
    let magic = be_bytes::<1>(batch, MAGIC_OFFSET)?[0] as i8;
    if magic != 2 {
        return Err(RecordsError::UnsupportedMagic(magic));
    }
    let batch_length = non_negative(read_i32(batch, LENGTH_OFFSET)?, "negative batch length")?;
    let end = batch_length.checked_add(LOG_OVERHEAD).ok_or(RecordsError::Malformed("batch length overflows"))?;
    if end < HEADER_LEN {
        return Err(RecordsError::Malformed("batch length shorter than header"));
    }
    if end > batch.len() {
        return Err(RecordsError::Truncated);
    }
    let compression = Compression::from_attributes(read_i16(batch, ATTRIBUTES_OFFSET)?)?;
    let record_count = non_negative(read_i32(batch, RECORD_COUNT_OFFSET)?, "negative count")?;
    Ok(BatchHeader { compression, record_count, end })
}

fn decode_record(r: &mut Reader<'_>, data: &Bytes) -> Result<Record, RecordsError> {
    let len = non_negative(r.varint()?, "negative record length")?;
    let body = r.skip(len)?;
    // Parse the body through its own reader so a record can never read into
    // its neighbour, and so the declared length must match exactly.
    let mut br = Reader::new(data.get(..body.end).ok_or(RecordsError::Truncated)?);
    br.pos = body.start;
    let attributes = br.u8()? as i8;
    let timestamp_delta = br.varlong()?;
    let offset_delta = br.varint()?;
    let key = br.nullable_bytes(data)?;
    let value = br.nullable_bytes(data)?;
    let header_count = non_negative(br.varint()?, "negative header count")?;
    // A header takes at least two bytes, so this caps the reservation by the input.
    let mut headers = Vec::with_capacity(header_count.min(br.remaining() / 2));
    for _ in 0..header_count {
        let key_len = non_negative(br.varint()?, "negative header key length")?;
        let key = data.slice(br.skip(key_len)?);
        let value = br.nullable_bytes(data)?;
        headers.push((key, value));
    }
    if br.remaining() != 0 {
        return Err(RecordsError::Malformed("record length does not match its contents"));
    }
    Ok(Record { attributes, timestamp_delta, offset_delta, key, value, headers })
}

fn decode_section(data: Bytes, expected: usize) -> Result<Vec<Record>, RecordsError> {
    let mut r = Reader::new(&data);
    let mut records = Vec::with_capacity(expected.min(data.len() / MIN_RECORD_LEN));
    while r.remaining() > 0 {
        // Stopping as soon as the count is exceeded bounds the work on a
        // section stuffed with more records than the header admits.
        if records.len() >= expected {
            return Err(RecordsError::Malformed("more records than recordCount"));
        }
        records.push(decode_record(&mut r, &data)?);
    }
    if records.len() != expected {
        return Err(RecordsError::Malformed("fewer records than recordCount"));
    }
    Ok(records)
}

/// Decompresses (if needed) and decodes every record of one batch.
///
/// The batch extent is taken from its batchLength field; the CRC is not
/// checked here because the caller has already validated it.
pub fn decode_records(batch: &[u8], max_decompressed_bytes: usize) -> Result<Vec<Record>, RecordsError> {
    decode_with_header(batch, max_decompressed_bytes).map(|(_, records)| records)
}

fn decode_with_header(batch: &[u8], limit: usize) -> Result<(BatchHeader, Vec<Record>), RecordsError> {
    let header = parse_header(batch)?;
    let section = batch.get(HEADER_LEN..header.end).ok_or(RecordsError::Truncated)?;
    let data = match header.compression {
        Compression::None => Bytes::copy_from_slice(section),
        c => Bytes::from(decompress(c, section, limit)?),
    };
    let records = decode_section(data, header.record_count)?;
    Ok((header, records))
}

/// Appends the uncompressed records-section encoding of `records` to `out`.
pub fn encode_records(records: &[Record], out: &mut Vec<u8>) {
    // The length prefix precedes the body, so each body is staged first.
    let mut body = Vec::new();
    for rec in records {
        body.clear();
        body.push(rec.attributes as u8);
        write_varlong(&mut body, rec.timestamp_delta);
        write_varint(&mut body, rec.offset_delta);
        write_nullable(&mut body, &rec.key);
        write_nullable(&mut body, &rec.value);
        write_varint(&mut body, len_i32(rec.headers.len()));
        for (k, v) in &rec.headers {
            write_varint(&mut body, len_i32(k.len()));
            body.extend_from_slice(k);
            write_nullable(&mut body, v);
        }
        write_varint(out, len_i32(body.len()));
        out.extend_from_slice(&body);
    }
}

/// Compresses a records section with the stream format Kafka uses for `c`.
pub fn compress(c: Compression, raw: &[u8]) -> Result<Vec<u8>, RecordsError> {
    compress_at(c, raw, None)
}

/// Compresses like [`compress`], at `level` where the codec has levels (gzip 1-9,
/// zstd); `None` is the codec's default. Snappy and lz4 (lz4_flex) have one level.
pub fn compress_at(c: Compression, raw: &[u8], level: Option<i32>) -> Result<Vec<u8>, RecordsError> {
    match c {
        Compression::None => Ok(raw.to_vec()),
        Compression::Gzip => {
            let level = match level {
                Some(l @ 1..=9) => flate2::Compression::new(l as u32),
                _ => flate2::Compression::default(),
            };
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), level);
            enc.write_all(raw).map_err(compress_err)?;
            enc.finish().map_err(compress_err)
        }
        Compression::Snappy => {
            let mut out = Vec::with_capacity(16 + snap::raw::max_compress_len(raw.len()));
            out.extend_from_slice(&XERIAL_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes()); // version
            out.extend_from_slice(&1i32.to_be_bytes()); // minimum compatible version
            let mut enc = snap::raw::Encoder::new();
            for chunk in raw.chunks(XERIAL_BLOCK) {
                let block = enc.compress_vec(chunk).map_err(compress_err)?;
                out.extend_from_slice(&len_i32(block.len()).to_be_bytes());
                out.extend_from_slice(&block);
            }
            Ok(out)
        }
        Compression::Lz4 => {
            // Java's KafkaLZ4BlockInputStream decodes each block on its own,
            // so blocks must be independent; 64 KiB matches Kafka's writer.
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
            enc.write_all(raw).map_err(compress_err)?;
            enc.finish().map_err(compress_err)
        }
        Compression::Zstd => zstd::bulk::compress(raw, level.unwrap_or(ZSTD_LEVEL)).map_err(compress_err),
    }
}

/// Rewrites a batch's records section with codec `target` (Kafka's topic-level
/// `compression.type`): the section is decompressed and compressed again, the records
/// themselves and every other header field (producer id, epoch, sequence, timestamps,
/// transactional bit) are kept; length and CRC are recomputed.
///
/// # Errors
/// `RecordsError` when the section does not decompress within
/// `max_decompressed_bytes` or the codec fails.
pub fn recompress_batch(
    batch: &[u8],
    target: Compression,
    level: Option<i32>,
    max_decompressed_bytes: usize,
) -> Result<Vec<u8>, RecordsError> {
    let header = parse_header(batch)?;
    let section = batch.get(HEADER_LEN..header.end).ok_or(RecordsError::Truncated)?;
    let raw = match header.compression {
        Compression::None => std::borrow::Cow::Borrowed(section),
        c => std::borrow::Cow::Owned(decompress(c, section, max_decompressed_bytes)?),
    };
    let section = compress_at(target, &raw, level)?;
    let mut template: [u8; HEADER_LEN] = be_bytes(batch, 0)?;
    let attributes = (read_i16(batch, ATTRIBUTES_OFFSET)? & !0x7) | target.attribute_bits();
    template[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
    Ok(assemble(&template, header.record_count, &section))
}

/// Reads a decoder to the end, failing once it produces more than `limit` bytes.
fn read_limited(r: impl Read, limit: usize) -> Result<Vec<u8>, RecordsError> {
    let mut out = Vec::new();
    // One byte past the limit is enough to tell "exactly at" from "over".
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    r.take(cap).read_to_end(&mut out).map_err(decompress_err)?;
    if out.len() > limit {
        return Err(RecordsError::TooLarge { limit });
    }
    Ok(out)
}

/// Decompresses one raw snappy block onto `out`, keeping `out` within `limit`.
fn snappy_raw_into(block: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), RecordsError> {
    let n = snap::raw::decompress_len(block).map_err(decompress_err)?;
    let total = out.len().checked_add(n).ok_or(RecordsError::TooLarge { limit })?;
    if total > limit {
        return Err(RecordsError::TooLarge { limit });
    }
    // A snappy element expands at most ~21x (a 3-byte copy of 64 bytes), so a
    // claimed length beyond 32x the input is a lie; rejecting it before
    // allocating keeps a tiny block from reserving `limit` bytes.
    if n > block.len().saturating_mul(32) {
        return Err(decompress_err("snappy length exceeds what its input can encode"));
    }
    let start = out.len();
    out.resize(total, 0);
    let dst = out.get_mut(start..).ok_or(RecordsError::Truncated)?;
    let written = snap::raw::Decoder::new().decompress(block, dst).map_err(decompress_err)?;
    out.truncate(start.saturating_add(written));
    Ok(())
}

fn snappy_decompress(data: &[u8], limit: usize) -> Result<Vec<u8>, RecordsError> {
    let mut out = Vec::new();
    if !data.starts_with(&XERIAL_MAGIC) {
        // librdkafka writes a bare snappy block with no framing.
        snappy_raw_into(data, &mut out, limit)?;
        return Ok(out);
    }
    // Skip the magic plus the version and compatible-version ints.
    let mut r = Reader::new(data);
    r.skip(XERIAL_MAGIC.len() + 8)?;
    while r.remaining() > 0 {
        let len = read_i32(data, r.skip(4)?.start)?;
        let len = non_negative(len, "negative snappy block length")?;
        let block = data.get(r.skip(len)?).ok_or(RecordsError::Truncated)?;
        snappy_raw_into(block, &mut out, limit)?;
    }
    Ok(out)
}

/// ceil(log2(n)), used to size the zstd window limit.
fn ceil_log2(n: usize) -> u32 {
    usize::BITS - n.saturating_sub(1).leading_zeros()
}

/// Decompresses a records section, failing with `TooLarge` if the output
/// would exceed `max_decompressed_bytes`.
pub fn decompress(c: Compression, data: &[u8], max_decompressed_bytes: usize) -> Result<Vec<u8>, RecordsError> {
    let limit = max_decompressed_bytes;
    match c {
        Compression::None => read_limited(data, limit),
        Compression::Gzip => read_limited(flate2::read::MultiGzDecoder::new(data), limit),
        Compression::Snappy => snappy_decompress(data, limit),
        Compression::Lz4 => read_limited(lz4_flex::frame::FrameDecoder::new(data), limit),
        Compression::Zstd => {
            let mut dec = zstd::stream::read::Decoder::with_buffer(data).map_err(decompress_err)?;
            // A frame without a content size makes zstd allocate its whole
            // declared window up front; capping the window near the limit
            // bounds that, while 2^23 still admits Java's high-level frames.
            dec.window_log_max(ceil_log2(limit).clamp(23, 27)).map_err(decompress_err)?;
            read_limited(dec, limit)
        }
    }
}

/// Writes a complete batch around an already-compressed records section,
/// copying the first 61 bytes of `template` and recomputing length, count and CRC.
fn assemble(template: &[u8; HEADER_LEN], count: usize, section: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN.saturating_add(section.len()));
    out.extend_from_slice(template);
    out.extend_from_slice(section);
    let batch_length = len_i32(out.len().saturating_sub(LOG_OVERHEAD));
    out[LENGTH_OFFSET..LENGTH_OFFSET + 4].copy_from_slice(&batch_length.to_be_bytes());
    out[RECORD_COUNT_OFFSET..HEADER_LEN].copy_from_slice(&len_i32(count).to_be_bytes());
    let crc = crc32c::crc32c(&out[ATTRIBUTES_OFFSET..]);
    out[CRC_OFFSET..ATTRIBUTES_OFFSET].copy_from_slice(&crc.to_be_bytes());
    out
}

/// Rebuilds a batch with only the records `keep` accepts, for log compaction.
///
/// Header fields (including lastOffsetDelta, which compaction must preserve
/// so the next offset stays correct) are copied; recordCount, batchLength and
/// the CRC are recomputed, and the section is recompressed with the batch's
/// own codec. Returns `None` when nothing is kept (even for an already-empty
/// batch) and a copy of the original bytes when everything is kept.
pub fn filter_batch(
    batch: &[u8],
    max_decompressed_bytes: usize,
    mut keep: impl FnMut(&Record) -> bool,
) -> Result<Option<Vec<u8>>, RecordsError> {
    let (header, records) = decode_with_header(batch, max_decompressed_bytes)?;
    let total = records.len();
    let kept: Vec<Record> = records.into_iter().filter(|r| keep(r)).collect();
    if kept.is_empty() {
        return Ok(None);
    }
    let original = batch.get(..header.end).ok_or(RecordsError::Truncated)?;
    if kept.len() == total {
        return Ok(Some(original.to_vec()));
    }
    let mut raw = Vec::new();
    encode_records(&kept, &mut raw);
    let section = compress(header.compression, &raw)?;
    let template: [u8; HEADER_LEN] = be_bytes(batch, 0)?;
    Ok(Some(assemble(&template, kept.len(), &section)))
}

/// Builds a complete v2 batch (producer id, epoch, base sequence and
/// partition leader epoch all -1). If the codec fails, which in-memory
/// buffers only do on allocation failure, the batch is written uncompressed
/// so the result is still a valid batch.
pub fn build_batch(base_offset: i64, base_timestamp: i64, compression: Compression, records: &[Record]) -> Vec<u8> {
    build_batch_for(base_offset, base_timestamp, compression, records, BatchProducer::NONE)
}

/// The producer fields of a batch header, and whether it is transactional or a
/// control batch (a transaction marker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchProducer {
    pub id: i64,
    pub epoch: i16,
    pub base_sequence: i32,
    pub transactional: bool,
    pub control: bool,
}

impl BatchProducer {
    /// No producer: a plain batch.
    pub const NONE: BatchProducer =
        BatchProducer { id: -1, epoch: -1, base_sequence: -1, transactional: false, control: false };
}

/// `build_batch` with the producer fields and attribute bits of `producer`.
pub fn build_batch_for(
    base_offset: i64,
    base_timestamp: i64,
    compression: Compression,
    records: &[Record],
    producer: BatchProducer,
) -> Vec<u8> {
    let mut raw = Vec::new();
    encode_records(records, &mut raw);
    let (compression, section) = match compress(compression, &raw) {
        Ok(section) => (compression, section),
        Err(_) => (Compression::None, raw),
    };
    let last_offset_delta = records.iter().map(|r| r.offset_delta).max().unwrap_or(0);
    let max_delta = records.iter().map(|r| r.timestamp_delta).max().unwrap_or(0);
    let attributes = compression.attribute_bits()
        | if producer.transactional { crate::batch::ATTR_TRANSACTIONAL } else { 0 }
        | if producer.control { crate::batch::ATTR_CONTROL } else { 0 };
    let mut h = Vec::with_capacity(HEADER_LEN);
    h.extend_from_slice(&base_offset.to_be_bytes());
    h.extend_from_slice(&0i32.to_be_bytes()); // batchLength, set by assemble
    h.extend_from_slice(&(-1i32).to_be_bytes()); // partitionLeaderEpoch
    h.push(2); // magic
    h.extend_from_slice(&0u32.to_be_bytes()); // crc, set by assemble
    h.extend_from_slice(&attributes.to_be_bytes());
    h.extend_from_slice(&last_offset_delta.to_be_bytes());
    h.extend_from_slice(&base_timestamp.to_be_bytes());
    // Java computes this with wrapping long arithmetic, so we do too.
    h.extend_from_slice(&base_timestamp.wrapping_add(max_delta).to_be_bytes());
    h.extend_from_slice(&producer.id.to_be_bytes());
    h.extend_from_slice(&producer.epoch.to_be_bytes());
    h.extend_from_slice(&producer.base_sequence.to_be_bytes());
    h.extend_from_slice(&0i32.to_be_bytes()); // recordCount, set by assemble
    let mut template = [0u8; HEADER_LEN];
    template.copy_from_slice(&h);
    assemble(&template, records.len(), &section)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: usize = 16 << 20;
    const ALL: [Compression; 5] =
        [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];

    fn rec(offset_delta: i32, ts: i64, key: Option<&[u8]>, value: Option<&[u8]>) -> Record {
        let (key, value) = (key.map(Bytes::copy_from_slice), value.map(Bytes::copy_from_slice));
        Record { timestamp_delta: ts, offset_delta, key, value, ..Record::default() }
    }

    // Recompression keeps the records and the header's producer fields, with any codec.
    #[test]
    fn recompress_keeps_records() {
        for from in ALL {
            for to in ALL {
                let mut original = build_batch(5, 1_000, from, &sample());
                original[43..51].copy_from_slice(&77i64.to_be_bytes());
                let again = recompress_batch(&original, to, Some(1), LIMIT).unwrap();
                assert_eq!(Compression::from_attributes(read_i16(&again, ATTRIBUTES_OFFSET).unwrap()).unwrap(), to);
                assert_eq!(&again[43..51], &77i64.to_be_bytes());
                assert_eq!(decode_records(&again, LIMIT).unwrap(), sample(), "{from:?} -> {to:?}");
                let crc = u32::from_be_bytes(again[CRC_OFFSET..ATTRIBUTES_OFFSET].try_into().unwrap());
                assert_eq!(crc, crc32c::crc32c(&again[ATTRIBUTES_OFFSET..]));
            }
        }
    }

    fn sample() -> Vec<Record> {
        let mut with_headers = rec(2, -5, Some(b"k2"), Some(b"v2"));
        with_headers.headers = vec![(Bytes::from_static(b"h"), None), (Bytes::new(), Some(Bytes::from_static(b"x")))];
        vec![
            rec(0, 0, Some(b"k0"), Some(b"v0")),
            rec(1, i64::MAX, None, Some(b"")),
            with_headers,
            rec(3, 7, Some(b"tombstone"), None),
            // Large and repetitive enough to span several xerial and lz4 blocks.
            rec(9, 100, None, Some(&vec![b'z'; 100_000])),
        ]
    }

    fn i32_at(batch: &[u8], at: usize) -> i32 {
        read_i32(batch, at).unwrap()
    }

    /// Checks the stored CRC and batchLength against the bytes, as a reader would.
    fn assert_framing(batch: &[u8]) {
        assert_eq!(i32_at(batch, CRC_OFFSET) as u32, crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..]));
        assert_eq!(i32_at(batch, LENGTH_OFFSET) as usize, batch.len() - LOG_OVERHEAD);
    }

    /// Wraps an arbitrary records section in an otherwise valid batch header.
    fn with_section(c: Compression, count: usize, section: &[u8]) -> Vec<u8> {
        let template = build_batch(0, 0, c, &[])[..HEADER_LEN].try_into().unwrap();
        assemble(&template, count, section)
    }

    fn err<T: std::fmt::Debug>(r: Result<T, RecordsError>) -> String {
        format!("{:?}", r.expect_err("expected an error"))
    }

    #[test]
    fn round_trip_every_codec() {
        // Every codec survives build_batch -> decode_records with a valid header and CRC.
        let records = sample();
        for c in ALL {
            let batch = build_batch(42, 1_000, c, &records);
            assert_framing(&batch);
            let attributes = read_i16(&batch, ATTRIBUTES_OFFSET).unwrap();
            assert_eq!(Compression::from_attributes(attributes).unwrap(), c);
            assert_eq!((i32_at(&batch, 23), i32_at(&batch, RECORD_COUNT_OFFSET)), (9, 5));
            assert_eq!(decode_records(&batch, LIMIT).unwrap(), records, "{c:?}");
            // Trailing bytes after the batch (the next batch in a log) are ignored.
            let mut padded = batch.clone();
            padded.extend_from_slice(b"next batch");
            assert_eq!(decode_records(&padded, LIMIT).unwrap(), records);
        }
    }

    #[test]
    fn filter_batch_preserves_offsets_and_crc() {
        // Compaction keeps deltas and lastOffsetDelta, recounts, and writes a valid CRC.
        let records: Vec<Record> = (0..10).map(|i| rec(i, i64::from(i) * 10, Some(&[i as u8]), Some(b"v"))).collect();
        for c in ALL {
            let batch = build_batch(500, 77, c, &records);
            let out = filter_batch(&batch, LIMIT, |r| r.offset_delta % 2 == 0).unwrap().unwrap();
            assert_framing(&out);
            assert_eq!(i32_at(&out, RECORD_COUNT_OFFSET), 5);
            assert_eq!(i32_at(&out, 23), 9, "lastOffsetDelta must be preserved");
            // Everything but batchLength, CRC and recordCount is copied verbatim.
            assert_eq!(out[..LENGTH_OFFSET], batch[..LENGTH_OFFSET]);
            assert_eq!(out[LOG_OVERHEAD..CRC_OFFSET], batch[LOG_OVERHEAD..CRC_OFFSET]);
            let copied = ATTRIBUTES_OFFSET..RECORD_COUNT_OFFSET;
            assert_eq!(out[copied.clone()], batch[copied]);
            let kept = decode_records(&out, LIMIT).unwrap();
            let deltas: Vec<_> = kept.iter().map(|r| (r.offset_delta, r.timestamp_delta)).collect();
            assert_eq!(deltas, vec![(0, 0), (2, 20), (4, 40), (6, 60), (8, 80)]);
            assert_eq!(filter_batch(&batch, LIMIT, |_| true).unwrap().unwrap(), batch);
            assert!(filter_batch(&batch, LIMIT, |_| false).unwrap().is_none());
        }
    }

    #[test]
    fn snappy_accepts_xerial_and_raw() {
        // The snappy decoder reads Java's xerial framing and librdkafka's raw blocks.
        let raw: Vec<u8> = (0..80_000u32).map(|i| (i % 251) as u8).collect();
        let framed = compress(Compression::Snappy, &raw).unwrap();
        assert!(framed.starts_with(&XERIAL_MAGIC));
        assert_eq!(decompress(Compression::Snappy, &framed, LIMIT).unwrap(), raw);
        let bare = snap::raw::Encoder::new().compress_vec(&raw).unwrap();
        assert_eq!(decompress(Compression::Snappy, &bare, LIMIT).unwrap(), raw);
        // A whole batch whose section is raw snappy decodes too.
        let records = sample();
        let mut section = Vec::new();
        encode_records(&records, &mut section);
        let bare = snap::raw::Encoder::new().compress_vec(&section).unwrap();
        let batch = with_section(Compression::Snappy, records.len(), &bare);
        assert_eq!(decode_records(&batch, LIMIT).unwrap(), records);
    }

    #[test]
    fn malformed_records_are_errors() {
        // Bad lengths, long varints and count mismatches yield errors, not panics.
        let mut good = Vec::new();
        encode_records(&[rec(0, 0, Some(b"key"), Some(b"value"))], &mut good);
        let mut padded = good.clone();
        padded[0] += 2; // Record length 2 bytes longer than its contents.
        padded.extend_from_slice(&[0, 0]);
        let long_varlong = [30, 0, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 1, 1, 1, 0];
        let cases: [(&[u8], usize, &str); 10] = [
            (&good[..good.len() - 2], 1, "Truncated"),
            (&[20, 0, 0, 0, 1, 1, 0], 1, "Truncated"),
            (&[12, 0, 0, 0, 3, 1, 0], 1, r#"Malformed("negative length")"#), // key length -2
            (&[3], 1, r#"Malformed("negative record length")"#),
            (&[12, 0, 0, 0, 1, 1, 3], 1, r#"Malformed("negative header count")"#),
            (&[255, 255, 255, 255, 255, 1], 1, r#"Malformed("varint is too long")"#),
            (&long_varlong, 1, r#"Malformed("varint is too long")"#),
            (&padded, 1, r#"Malformed("record length does not match its contents")"#),
            (&good, 2, r#"Malformed("fewer records than recordCount")"#),
            (&good, 0, r#"Malformed("more records than recordCount")"#),
        ];
        for (section, count, want) in cases {
            let batch = with_section(Compression::None, count, section);
            assert_eq!(err(decode_records(&batch, LIMIT)), want, "{section:?}");
        }
        // Header-level damage.
        let batch = with_section(Compression::None, 1, &good);
        assert!(decode_records(&batch, LIMIT).is_ok());
        assert_eq!(err(decode_records(&batch[..60], LIMIT)), "Truncated");
        assert_eq!(err(decode_records(&batch[..batch.len() - 1], LIMIT)), "Truncated");
        let damage = [(ATTRIBUTES_OFFSET + 1, 5), (MAGIC_OFFSET, 1), (LENGTH_OFFSET, 0x80)];
        let wants = ["UnknownCompression(5)", "UnsupportedMagic(1)", r#"Malformed("negative batch length")"#];
        for ((at, byte), want) in damage.into_iter().zip(wants) {
            let mut bad = batch.clone();
            bad[at] = byte;
            assert_eq!(err(decode_records(&bad, LIMIT)), want);
        }
    }

    #[test]
    fn garbage_compressed_data_is_an_error() {
        // Each codec rejects bytes that are not a valid stream of its format.
        let garbage: Vec<u8> = (0..200u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8).collect();
        for c in ALL.into_iter().skip(1) {
            assert!(decompress(c, &garbage, LIMIT).is_err(), "{c:?}");
            assert!(decode_records(&with_section(c, 1, &garbage), LIMIT).is_err(), "{c:?}");
        }
        // A xerial header followed by a negative block length.
        let mut framed = compress(Compression::Snappy, b"").unwrap();
        framed.extend_from_slice(&(-5i32).to_be_bytes());
        assert!(decompress(Compression::Snappy, &framed, LIMIT).is_err());
    }

    #[test]
    fn decompression_bomb_hits_limit() {
        // Output beyond max_decompressed_bytes is refused, for every codec.
        let zeros = vec![0u8; 8 << 20];
        for c in ALL {
            let packed = compress(c, &zeros).unwrap();
            assert_eq!(err(decompress(c, &packed, 1 << 20)), "TooLarge { limit: 1048576 }");
            assert_eq!(decompress(c, &packed, zeros.len()).unwrap().len(), zeros.len());
            if c != Compression::None {
                let batch = with_section(c, 1, &packed);
                assert_eq!(err(decode_records(&batch, 1 << 20)), "TooLarge { limit: 1048576 }");
            }
        }
        // A raw snappy header claiming far more than the input could produce.
        assert!(decompress(Compression::Snappy, &[255, 255, 255, 127, 0], usize::MAX).is_err());
    }

    #[test]
    fn randomized_damage_never_panics() {
        // Truncating valid data at every byte and flipping random bytes never panics.
        let mut records = sample();
        records[4].value = Some(Bytes::from_static(b"short value"));
        // A xorshift generator keeps the test reproducible without extra crates.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for c in ALL {
            let batch = build_batch(0, 0, c, &records);
            let section = &batch[HEADER_LEN..];
            for cut in 0..=batch.len() {
                let _ = decode_records(&batch[..cut], LIMIT);
            }
            // Re-framing each prefix makes the cut reach the codec and record parser.
            for cut in 0..=section.len() {
                let damaged = with_section(c, records.len(), &section[..cut]);
                let _ = decode_records(&damaged, LIMIT);
                let _ = filter_batch(&damaged, LIMIT, |r| r.offset_delta > 1);
            }
            for _ in 0..2_000 {
                let mut damaged = batch.clone();
                for _ in 0..1 + next() % 3 {
                    let at = HEADER_LEN + (next() as usize) % section.len();
                    damaged[at] ^= 1 << (next() % 8);
                }
                let _ = decode_records(&damaged, 4096);
                let _ = filter_batch(&damaged, 4096, |r| r.offset_delta > 1);
            }
        }
    }
}
