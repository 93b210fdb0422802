//! One segment of a partition log: a `.log` file of batches plus its two indexes (and,
//! when it holds ABORT markers, Kafka's `.txnindex`).
//!
//! A segment is named by its base offset, 20 digits, as Kafka names it. Closed
//! segments are immutable except by compaction, which replaces the whole file. The
//! active (last) segment is written through the log's `Appender`.

use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::batch::{self, Batch, BatchError};
use crate::config::LogConfig;
use crate::error::{Error, Result};
use crate::index::{OffsetIndex, TimeIndex};
use crate::io::StorageFile;
use crate::limits::{BATCH_BYTES_MAX, COLD_READ_MIN_BYTES};
use crate::types::{Offset, TimestampMs};

pub const LOG_SUFFIX: &str = ".log";
/// How a deleted partition's directory name ends, as Kafka names it.
pub const DELETED_SUFFIX: &str = "-delete";

/// An aborted transaction: its producer, its first record, its ABORT marker and the
/// last stable offset once it ended, Kafka's `.txnindex` entry (`AbortedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedRange {
    pub producer_id: i64,
    pub first_offset: Offset,
    pub last_offset: Offset,
    pub last_stable_offset: Offset,
}
pub const INDEX_SUFFIX: &str = ".index";
pub const TIME_INDEX_SUFFIX: &str = ".timeindex";
/// Kafka's transaction index: the aborted transactions whose markers the segment holds.
pub const TXN_INDEX_SUFFIX: &str = ".txnindex";
/// A compacted copy being written; deleted by recovery (the swap never started).
pub const CLEANED_SUFFIX: &str = ".log.cleaned";
/// A compacted copy that is complete; recovery finishes renaming it over the `.log`.
pub const SWAP_SUFFIX: &str = ".log.swap";

/// A `.txnindex` file: one 34-byte entry per aborted transaction (version 0, producer
/// id, first offset, last offset, last stable offset), as Kafka's `TransactionIndex`.
pub fn encode_txn_index(entries: &[AbortedRange]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * 34);
    for entry in entries {
        out.extend_from_slice(&0i16.to_be_bytes());
        out.extend_from_slice(&entry.producer_id.to_be_bytes());
        out.extend_from_slice(&entry.first_offset.0.to_be_bytes());
        out.extend_from_slice(&entry.last_offset.0.to_be_bytes());
        out.extend_from_slice(&entry.last_stable_offset.0.to_be_bytes());
    }
    out
}

/// `<dir>/<20-digit base offset><suffix>`.
pub fn file_path(dir: &Path, base_offset: Offset, suffix: &str) -> PathBuf {
    dir.join(format!("{:020}{}", base_offset.0, suffix))
}

/// The base offset in a segment file name with the given suffix.
pub fn parse_file_name(name: &str, suffix: &str) -> Option<Offset> {
    let digits = name.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(Offset)
}

pub(crate) struct Segment<F> {
    pub base_offset: Offset,
    pub file: F,
    /// Bytes of batches in the segment (appended, possibly not yet written).
    pub size: u64,
    /// One past the last offset of the segment's last batch (its base offset if empty).
    pub next_offset: Offset,
    pub offset_index: OffsetIndex,
    pub time_index: TimeIndex,
    bytes_since_index: u64,
    /// The largest timestamp in the segment and the last offset of its batch.
    pub max_timestamp: TimestampMs,
    pub max_timestamp_offset: Offset,
    /// Wall-clock time of the first append, for `segment.ms`.
    pub first_append_ms: Option<i64>,
    /// Whether the in-memory indexes differ from the files.
    pub indexes_dirty: bool,
}

/// What one batch contributes to a segment's bookkeeping.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BatchMeta {
    pub position: u64,
    pub size: u64,
    pub last_offset: Offset,
    pub max_timestamp: TimestampMs,
}

impl BatchMeta {
    pub fn of(batch: &Batch, position: u64) -> BatchMeta {
        BatchMeta {
            position,
            size: batch.size() as u64,
            last_offset: batch.last_offset(),
            max_timestamp: batch.max_timestamp(),
        }
    }
}

impl<F: StorageFile> Segment<F> {
    pub fn new(base_offset: Offset, file: F) -> Segment<F> {
        Segment {
            base_offset,
            file,
            size: 0,
            next_offset: base_offset,
            offset_index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            bytes_since_index: 0,
            max_timestamp: -1,
            max_timestamp_offset: Offset(-1),
            first_append_ms: None,
            // Index files are written for every segment, empty ones too, as Kafka has them.
            indexes_dirty: true,
        }
    }

    pub fn relative(&self, offset: Offset) -> u32 {
        let delta = offset.since(self.base_offset);
        debug_assert!((0..=u32::MAX as i64).contains(&delta));
        delta.clamp(0, u32::MAX as i64) as u32
    }

    /// Records a batch placed at the segment's end, adding index entries every
    /// `index.interval.bytes` as Kafka's `LogSegment.append` does.
    pub fn record(&mut self, meta: BatchMeta, config: &LogConfig) {
        debug_assert_eq!(meta.position, self.size);
        if meta.max_timestamp > self.max_timestamp {
            self.max_timestamp = meta.max_timestamp;
            self.max_timestamp_offset = meta.last_offset;
        }
        if self.bytes_since_index > config.index_interval_bytes {
            self.offset_index.append(self.relative(meta.last_offset), meta.position as u32);
            self.time_index.maybe_append(self.max_timestamp, self.relative(self.max_timestamp_offset));
            self.bytes_since_index = 0;
            self.indexes_dirty = true;
        }
        self.bytes_since_index += meta.size;
        self.size += meta.size;
        self.next_offset = meta.last_offset.plus(1);
    }

    /// Whether the next batch needs a new segment: full file or indexes, or offsets no
    /// longer expressible relative to the base.
    pub fn is_full(&self, batch_size: u64, last_offset: Offset, config: &LogConfig) -> bool {
        self.size > 0
            && (self.size + batch_size > config.segment_bytes
                || self.offset_index.len() >= config.offset_index_entries_max()
                || self.time_index.len() >= config.time_index_entries_max()
                || last_offset.since(self.base_offset) > i32::MAX as i64)
    }

    /// Restores the bookkeeping of a segment whose indexes were loaded from disk, from
    /// the batches at and after the last offset index entry (`tail`, as a scan from that
    /// entry's position returns them).
    pub fn resume(&mut self, tail: &[BatchMeta]) {
        if let Some((timestamp, relative)) = self.time_index.last() {
            self.max_timestamp = timestamp;
            self.max_timestamp_offset = self.base_offset.plus(relative as i64);
        }
        self.bytes_since_index = 0;
        for meta in tail {
            if meta.max_timestamp > self.max_timestamp {
                self.max_timestamp = meta.max_timestamp;
                self.max_timestamp_offset = meta.last_offset;
            }
            self.bytes_since_index += meta.size;
            self.size = meta.position + meta.size;
            self.next_offset = meta.last_offset.plus(1);
        }
    }

    /// Adds the final time index entry when the segment closes (Kafka's
    /// `onBecomeInactiveSegment`), so its max timestamp is known without a scan.
    pub fn seal_time_index(&mut self) {
        if self.max_timestamp >= 0 {
            let before = self.time_index.len();
            self.time_index.maybe_append(self.max_timestamp, self.relative(self.max_timestamp_offset));
            self.indexes_dirty |= self.time_index.len() != before;
        }
    }
}

/// Result of scanning a segment file from its start.
pub(crate) struct Scan {
    pub batches: Vec<BatchMeta>,
    /// Bytes of valid batches from the start of the file.
    pub valid_bytes: u64,
    /// Where and why the scan stopped before the end of the file, if it did.
    pub stopped: Option<(u64, String)>,
    /// Leader epochs seen, in order, with the first offset of each.
    pub epochs: Vec<(crate::types::LeaderEpoch, Offset)>,
}

/// Reads `file` from `start_position` to `file_len`, validating every batch (length,
/// CRC, offsets growing from `start_offset`). Stops at the first invalid byte: trailing zeros
/// from preallocation, a torn write or corruption.
///
/// # Errors
/// Only I/O errors; invalid data ends the scan and is reported in `Scan::stopped`.
pub(crate) async fn scan<F: StorageFile>(
    file: &F,
    start_position: u64,
    start_offset: Offset,
    file_len: u64,
) -> Result<Scan, std::io::Error> {
    let mut scan = Scan { batches: Vec::new(), valid_bytes: start_position, stopped: None, epochs: Vec::new() };
    let mut reader = Reader::new(file, file_len);
    let mut expected = start_offset;
    let mut position = start_position;
    while position < file_len {
        let batch = match reader.batch_at(position, COLD_READ_MIN_BYTES * 16, Check::Crc).await? {
            Ok(batch) => batch,
            Err(reason) => {
                scan.stopped = Some((position, reason));
                break;
            }
        };
        if batch.base_offset() < expected {
            let reason = format!("batch offset {} below expected {}", batch.base_offset(), expected);
            scan.stopped = Some((position, reason));
            break;
        }
        let epoch = batch.leader_epoch();
        if epoch.0 >= 0 && scan.epochs.last().is_none_or(|&(e, _)| epoch > e) {
            scan.epochs.push((epoch, batch.base_offset()));
        }
        expected = batch.next_offset();
        scan.batches.push(BatchMeta::of(&batch, position));
        position += batch.size() as u64;
        scan.valid_bytes = position;
    }
    Ok(scan)
}

/// How much of a stored batch a read checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// Everything: recovery, compaction (which rewrites the bytes under a new CRC) and
    /// the scrubber.
    Crc,
    /// The framing only (`Batch::frame`): reads that serve fetches. Their CRC was
    /// checked when the bytes entered the log, and clients check it again.
    Frame,
}

/// Reads batches from a file range through a read-ahead buffer.
pub(crate) struct Reader<'a, F> {
    file: &'a F,
    limit: u64,
    buf: Bytes,
    buf_position: u64,
    pub bytes_read: u64,
}

impl<'a, F: StorageFile> Reader<'a, F> {
    pub fn new(file: &'a F, limit: u64) -> Self {
        Reader { file, limit, buf: Bytes::new(), buf_position: 0, bytes_read: 0 }
    }

    /// Ensures `[position, position + len)` is buffered, reading `read_ahead` at least.
    async fn fill(&mut self, position: u64, len: u64, read_ahead: usize) -> std::io::Result<bool> {
        if position + len > self.limit {
            return Ok(false);
        }
        let buffered_end = self.buf_position + self.buf.len() as u64;
        if position >= self.buf_position && position + len <= buffered_end {
            return Ok(true);
        }
        let want = (len.max(read_ahead as u64)).min(self.limit - position);
        let read = self.file.read_at(position, want as usize).await?;
        self.bytes_read += read.len() as u64;
        self.buf = read;
        self.buf_position = position;
        Ok(self.buf.len() as u64 >= len)
    }

    fn slice(&self, position: u64, len: u64) -> Bytes {
        let from = (position - self.buf_position) as usize;
        self.buf.slice(from..from + len as usize)
    }

    /// The validated batch at `position`, or why there is none.
    ///
    /// # Errors
    /// Only I/O errors; an invalid batch is `Ok(Err(reason))`.
    pub async fn batch_at(
        &mut self,
        position: u64,
        read_ahead: usize,
        check: Check,
    ) -> std::io::Result<Result<Batch, String>> {
        if !self.fill(position, batch::LOG_OVERHEAD as u64, read_ahead).await? {
            return Ok(Err(format!("{} bytes left, less than a batch header", self.limit - position)));
        }
        let size = match batch::peek_size(&self.slice(position, batch::LOG_OVERHEAD as u64)) {
            Ok(size) => size as u64,
            Err(e) => return Ok(Err(e.to_string())),
        };
        if size > BATCH_BYTES_MAX as u64 || !self.fill(position, size, read_ahead).await? {
            let e = BatchError::Truncated { needed: size as usize, available: (self.limit - position) as usize };
            return Ok(Err(e.to_string()));
        }
        let bytes = self.slice(position, size);
        let batch = match check {
            Check::Crc => Batch::validate(bytes, BATCH_BYTES_MAX),
            Check::Frame => Batch::frame(bytes, BATCH_BYTES_MAX),
        };
        Ok(batch.map_err(|e| e.to_string()))
    }
}

/// Reads the batches of a segment from `position` (from an index lookup) up to
/// `limit`: skips batches ending before `offset`, stops at `end` (exclusive) or once
/// `max_bytes` are collected; the first batch is returned whole whatever its size.
///
/// # Errors
/// `Corruption` when stored bytes fail `check`; `Io` on read errors.
#[allow(clippy::too_many_arguments)] // a range, its bounds and a check: all plain values
pub(crate) async fn read_batches<F: StorageFile>(
    file: &F,
    path: &Path,
    position: u64,
    limit: u64,
    offset: Offset,
    end: Offset,
    max_bytes: usize,
    check: Check,
) -> Result<(Vec<Batch>, u64)> {
    let mut reader = Reader::new(file, limit);
    let mut batches = Vec::new();
    let mut bytes = 0usize;
    let mut position = position;
    let read_ahead = max_bytes.clamp(COLD_READ_MIN_BYTES, 16 * COLD_READ_MIN_BYTES);
    while position < limit {
        let batch = reader
            .batch_at(position, read_ahead, check)
            .await
            .map_err(|e| Error::io("read", path, e))?
            .map_err(|reason| Error::Corruption { path: path.to_owned(), position, reason })?;
        position += batch.size() as u64;
        if batch.last_offset() < offset {
            continue;
        }
        if batch.base_offset() >= end || (!batches.is_empty() && bytes + batch.size() > max_bytes) {
            break;
        }
        bytes += batch.size();
        batches.push(batch);
        if bytes >= max_bytes {
            break;
        }
    }
    Ok((batches, reader.bytes_read))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Segment file names are Kafka's 20-digit base offsets.
    #[test]
    fn names() {
        let path = file_path(Path::new("/d"), Offset(42), LOG_SUFFIX);
        assert_eq!(path, Path::new("/d/00000000000000000042.log"));
        assert_eq!(parse_file_name("00000000000000000042.log", LOG_SUFFIX), Some(Offset(42)));
        assert_eq!(parse_file_name("00000000000000000042.index", LOG_SUFFIX), None);
        assert_eq!(parse_file_name("42.log", LOG_SUFFIX), None);
        assert_eq!(parse_file_name("0000000000000000004x.log", LOG_SUFFIX), None);
        assert_eq!(parse_file_name("00000000000000000042.log.swap", SWAP_SUFFIX), Some(Offset(42)));
    }
}
