//! The O_DIRECT appender of a log's active segment.
//!
//! Appends are copied into aligned chunks of `APPEND_CHUNK_BYTES`. A chunk that fills
//! is sealed and written whole, without a copy. The open chunk's unwritten bytes are
//! written as a partial write padded to the block size; its last block is rewritten by
//! a later write once more data arrives (the partial tail block rewritten on flush).
//!
//! Group commit falls out of the structure: while writes are in flight, appends only
//! copy into the chunk, and the next write takes everything that accumulated.
//!
//! Ordering. io_uring completes writes in any order, so two writes that cover the same
//! block must not be in flight together: a chunk has at most one write in flight, and
//! chunks cover disjoint blocks. Up to `WRITES_IN_FLIGHT_MAX` writes to different
//! chunks run at once. `written` is the end of the contiguous prefix of completed
//! writes; readers see only what lies below it.
//!
//! The appender does no I/O itself: `take_write` hands out a write, the caller awaits
//! it outside any borrow of shard state and reports it with `complete_write`.

use std::collections::{BTreeMap, VecDeque};

use crate::io::{align_down, align_up, IoBuf, StorageFile};
use crate::limits::{APPEND_CHUNKS_MAX, APPEND_CHUNK_BYTES, WRITES_IN_FLIGHT_MAX};

struct Chunk<B> {
    /// File position of the chunk's first byte (aligned).
    position: u64,
    /// The chunk's memory; `None` while a sealed chunk is moved into its write.
    buf: Option<B>,
    /// Bytes of data in the chunk.
    len: usize,
    /// Bytes of data known to be on disk.
    written_len: usize,
    in_flight: bool,
}

/// One write handed out by `take_write`.
pub(crate) struct Write<B> {
    pub buf: B,
    pub position: u64,
    /// Position after the last byte of real data the write carries (before padding).
    pub data_end: u64,
    /// Appended bytes this write copied out of its chunk (a chunk still open, or
    /// partly written, is copied; a full one is handed over).
    pub copied: usize,
    chunk_position: u64,
}

pub(crate) struct Appender<F: StorageFile> {
    chunks: VecDeque<Chunk<F::Buf>>,
    /// Position after the last appended byte.
    end: u64,
    /// Every byte below this position is written.
    written: u64,
    /// Completed writes above `written`, waiting for the gap below them to close.
    completed: BTreeMap<u64, u64>,
    in_flight: usize,
    /// The file is allocated up to here.
    pub reserved: u64,
    /// Why a write failed; from then on nothing is written.
    pub failed: Option<String>,
    /// The open chunk's bytes while its buffer is released (an idle log keeps these few
    /// bytes of its last partial block instead of a whole chunk).
    idle_tail: Vec<u8>,
}

impl<F: StorageFile> Appender<F> {
    /// An appender continuing a file whose data ends at `end`; `tail` holds the bytes
    /// from `align_down(end)` to `end`, so the partial last block can be rewritten.
    /// No chunk buffer is allocated until the first append.
    pub fn new(_file: &F, end: u64, tail: &[u8], reserved: u64) -> Self {
        let position = align_down(end);
        assert_eq!(tail.len() as u64, end - position);
        let chunk = Chunk { position, buf: None, len: tail.len(), written_len: tail.len(), in_flight: false };
        Appender {
            chunks: VecDeque::from([chunk]),
            end,
            written: end,
            completed: BTreeMap::new(),
            in_flight: 0,
            reserved,
            failed: None,
            idle_tail: tail.to_vec(),
        }
    }

    /// Gives the open chunk's buffer back when everything is written and nothing is in
    /// flight, keeping only the partial last block: an idle log then costs a few bytes,
    /// not `APPEND_CHUNK_BYTES`. Returns whether a buffer was released.
    pub fn release_idle(&mut self) -> bool {
        if self.chunks.len() != 1 || self.in_flight != 0 || self.written != self.end {
            return false;
        }
        let open = self.chunks.back_mut().expect("an open chunk always exists");
        let Some(buf) = open.buf.take() else { return false };
        let keep = align_down(open.len as u64) as usize;
        self.idle_tail = buf.as_bytes()[keep..open.len].to_vec();
        open.position += keep as u64;
        open.len -= keep;
        open.written_len = open.len;
        true
    }

    pub fn end(&self) -> u64 {
        self.end
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    pub fn writes_in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether `len` more bytes fit in the buffer budget. An empty buffer takes any
    /// batch, so a batch larger than the budget still makes progress.
    pub fn has_room(&self, len: usize) -> bool {
        let buffered = self.end - self.written;
        buffered == 0 || buffered + len as u64 <= (APPEND_CHUNK_BYTES * APPEND_CHUNKS_MAX) as u64
    }

    /// Copies `data` to the tail. The caller reserved file space for it.
    pub fn append(&mut self, file: &F, data: &[u8]) {
        debug_assert!(self.end + data.len() as u64 <= self.reserved);
        let mut rest = data;
        while !rest.is_empty() {
            let open = self.chunks.back_mut().expect("an open chunk always exists");
            if open.buf.is_none() {
                // A released (or never used) open chunk: take a buffer and put back the
                // bytes of its partial block.
                let mut buf = file.alloc_buf(APPEND_CHUNK_BYTES);
                buf.as_bytes_mut()[..self.idle_tail.len()].copy_from_slice(&self.idle_tail);
                debug_assert_eq!(self.idle_tail.len(), open.len);
                open.buf = Some(buf);
                self.idle_tail.clear();
            }
            let n = (APPEND_CHUNK_BYTES - open.len).min(rest.len());
            let buf = open.buf.as_mut().expect("the open chunk is never moved into a write");
            buf.as_bytes_mut()[open.len..open.len + n].copy_from_slice(&rest[..n]);
            open.len += n;
            rest = &rest[n..];
            if open.len == APPEND_CHUNK_BYTES {
                let position = open.position + APPEND_CHUNK_BYTES as u64;
                let buf = file.alloc_buf(APPEND_CHUNK_BYTES);
                self.chunks.push_back(Chunk { position, buf: Some(buf), len: 0, written_len: 0, in_flight: false });
            }
        }
        self.end += data.len() as u64;
    }

    /// The next write to submit, if any may start now.
    pub fn take_write(&mut self, file: &F) -> Option<Write<F::Buf>> {
        if self.failed.is_some() || self.in_flight >= WRITES_IN_FLIGHT_MAX {
            return None;
        }
        // Sealed chunks go out whole as soon as a slot is free. The open chunk goes out
        // only when nothing else is in flight: while the device is busy, appends keep
        // accumulating and the next write carries them all (group commit), instead of
        // many small writes that each rewrite the partial tail block.
        let idle = self.in_flight == 0;
        let chunk = self
            .chunks
            .iter_mut()
            .find(|c| !c.in_flight && c.written_len < c.len && (c.len == APPEND_CHUNK_BYTES || idle))?;
        let sealed = chunk.len == APPEND_CHUNK_BYTES;
        let write = if sealed && chunk.written_len == 0 {
            // A full chunk never written: hand its memory to the write, no copy.
            let buf = chunk.buf.take().expect("an unwritten chunk has its buffer");
            Write {
                buf,
                position: chunk.position,
                data_end: chunk.position + chunk.len as u64,
                copied: 0,
                chunk_position: chunk.position,
            }
        } else {
            // Copy the unwritten blocks; the first may be a partial block rewritten.
            let from = align_down(chunk.written_len as u64) as usize;
            let to = align_up(chunk.len as u64) as usize;
            let source = chunk.buf.as_ref().expect("a partially written chunk has its buffer");
            let mut buf = file.alloc_buf(to - from);
            let bytes = buf.as_bytes_mut();
            bytes[..chunk.len - from].copy_from_slice(&source.as_bytes()[from..chunk.len]);
            bytes[chunk.len - from..].fill(0);
            let position = chunk.position + from as u64;
            let copied = chunk.len - from;
            let data_end = chunk.position + chunk.len as u64;
            Write { buf, position, data_end, copied, chunk_position: chunk.position }
        };
        chunk.in_flight = true;
        self.in_flight += 1;
        Some(write)
    }

    /// Records the outcome of a write from `take_write`. Returns whether `written` moved.
    pub fn complete_write(
        &mut self,
        position: u64,
        data_end: u64,
        chunk_position: u64,
        result: Result<(), String>,
    ) -> bool {
        self.in_flight -= 1;
        let chunk = self
            .chunks
            .iter_mut()
            .find(|c| c.position == chunk_position)
            .expect("a write's chunk stays until its write completes");
        chunk.in_flight = false;
        if let Err(reason) = result {
            self.failed.get_or_insert(reason);
            return false;
        }
        chunk.written_len = chunk.written_len.max((data_end - chunk.position) as usize);
        let entry = self.completed.entry(position).or_insert(data_end);
        *entry = (*entry).max(data_end);
        let before = self.written;
        while let Some((&start, &end)) = self.completed.first_key_value() {
            if start > self.written {
                break;
            }
            self.written = self.written.max(end);
            self.completed.pop_first();
        }
        let last = self.chunks.len() - 1;
        let mut index = 0;
        self.chunks.retain(|c| {
            let done = index < last && c.len == APPEND_CHUNK_BYTES && c.written_len == c.len && !c.in_flight;
            index += 1;
            !done
        });
        self.written > before
    }
}

impl<B> Write<B> {
    pub fn chunk_position(&self) -> u64 {
        self.chunk_position
    }
}
