//! The O_DIRECT appender of a log's active segment.
//!
//! Appends are copied into aligned chunks, the one copy of a produced byte. A chunk
//! holds `WriteShape::chunk_bytes` (the node's setting: `APPEND_CHUNK_BYTES_DEFAULT`
//! unless `skein iotune` measured another), or `APPEND_HANDOVER_MIN_BYTES` when it
//! continues a small write. A chunk that fills is sealed and written whole, without a
//! copy. A write of the open chunk takes the chunk's memory too when it starts at the
//! chunk's first byte, and the appends after it continue from the partial last block,
//! the only bytes copied again (under `DMA_ALIGNMENT`): a lone batch on an idle device
//! is copied once, not into the chunk and then into its write.
//!
//! Head chunks. The partial last block continues in a chunk of its own, one block
//! long, and the appends that do not fit go on in the next chunk. So no write covers
//! both a block already on disk and blocks never written: ext4 takes such a write for
//! an allocating one (the reserved blocks are unwritten extents), refuses it to
//! io_uring's non-blocking attempt, and io_uring hands it to a kernel worker thread,
//! which costs two task switches per write on the shard's core. A head's write and the
//! write of the chunk after it go out together.
//!
//! Group commit falls out of the structure: while writes are in flight, appends only
//! copy into the chunk, and the next write takes everything that accumulated. A head's
//! write does not count as the device being busy: it is the first part of the next one.
//!
//! Ordering. io_uring completes writes in any order, so two writes that cover the same
//! block must not be in flight together: a chunk has at most one write in flight, and
//! chunks cover disjoint blocks, except that a head shares its block with the chunk
//! whose write it continues, and is not written while that write is in flight.
//! Up to `WriteShape::writes_in_flight` writes to different chunks run at once.
//! `written` is the end of the contiguous prefix of completed writes; readers see only
//! what lies below it.
//!
//! The appender does no I/O itself: `take_write` hands out a write, the caller awaits
//! it outside any borrow of shard state and reports it with `complete_write`.

use std::collections::{BTreeMap, VecDeque};

use crate::config::WriteShape;
use crate::io::{align_down, align_up, IoBuf, StorageFile};
use crate::limits::{APPEND_HANDOVER_MIN_BYTES, DMA_ALIGNMENT};

struct Chunk<B> {
    /// File position of the chunk's first byte (aligned).
    position: u64,
    /// The chunk's memory; `None` while a sealed chunk is moved into its write.
    buf: Option<B>,
    /// Bytes the chunk's memory holds (aligned).
    capacity: usize,
    /// Bytes of data in the chunk.
    len: usize,
    /// Bytes of data known to be on disk.
    written_len: usize,
    in_flight: bool,
    /// No more appends go here: the chunk is full, or its memory went to a write.
    sealed: bool,
    /// Capacity of the chunk that follows this one once it fills.
    next_capacity: usize,
}

impl<B> Chunk<B> {
    /// An empty chunk at `position` (aligned).
    fn fresh(position: u64, capacity: usize, buf: Option<B>, next_capacity: usize) -> Chunk<B> {
        Chunk { position, capacity, buf, len: 0, written_len: 0, in_flight: false, sealed: false, next_capacity }
    }

    /// The open chunk after data on disk that ends `partial` bytes past the aligned
    /// `position`: a head chunk of one block holding those bytes when `partial > 0`,
    /// followed by a chunk of `next_capacity` bytes; else a chunk of `next_capacity`.
    /// `buf` holds the partial bytes, or is `None` to be allocated on the first append.
    fn after(position: u64, partial: usize, buf: Option<B>, next_capacity: usize, chunk_bytes: usize) -> Chunk<B> {
        if partial == 0 {
            return Chunk::fresh(position, next_capacity, buf, chunk_bytes);
        }
        Chunk {
            position,
            capacity: DMA_ALIGNMENT,
            buf,
            len: partial,
            written_len: partial,
            in_flight: false,
            sealed: false,
            next_capacity,
        }
    }

    /// A head chunk: the one block that continues data already on disk, from inside
    /// the last block of the chunk before it, which both cover: it is not written while
    /// that chunk's write is in flight. Every other chunk holds at least
    /// `APPEND_HANDOVER_MIN_BYTES`.
    fn is_head(&self) -> bool {
        self.capacity == DMA_ALIGNMENT
    }
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
    /// The write is a head chunk's: the next `take_write` may give the write that
    /// follows it, to go out together.
    pub head: bool,
    chunk_position: u64,
}

pub(crate) struct Appender<F: StorageFile> {
    /// Chunk size and writes in flight, fixed for the appender's life (validated).
    shape: WriteShape,
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
    pub fn new(_file: &F, shape: WriteShape, end: u64, tail: &[u8], reserved: u64) -> Self {
        let position = align_down(end);
        assert_eq!(tail.len() as u64, end - position);
        debug_assert!(shape.validate().is_ok(), "{shape:?}");
        Appender {
            shape,
            chunks: VecDeque::from([Chunk::after(position, tail.len(), None, shape.chunk_bytes, shape.chunk_bytes)]),
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
    /// not a whole chunk. Returns whether a buffer was released.
    pub fn release_idle(&mut self) -> bool {
        if self.chunks.len() != 1 || self.in_flight != 0 || self.written != self.end {
            return false;
        }
        let open = self.chunks.back_mut().expect("an open chunk always exists");
        let Some(buf) = open.buf.take() else { return false };
        let keep = align_down(open.len as u64) as usize;
        self.idle_tail = buf.as_bytes()[keep..open.len].to_vec();
        let chunk_bytes = self.shape.chunk_bytes;
        *open = Chunk::after(open.position + keep as u64, open.len - keep, None, chunk_bytes, chunk_bytes);
        true
    }

    pub fn end(&self) -> u64 {
        self.end
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    /// Whether what waits to be written is small, with nothing in flight: what a
    /// coalescing window may hold back.
    pub fn coalescible(&self) -> bool {
        self.in_flight == 0
            && self.written < self.end
            && self.end - align_down(self.written) < APPEND_HANDOVER_MIN_BYTES as u64
    }

    pub fn writes_in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether `len` more bytes fit in the buffer budget. An empty buffer takes any
    /// batch, so a batch larger than the budget still makes progress.
    pub fn has_room(&self, len: usize) -> bool {
        let buffered = self.end - self.written;
        buffered == 0 || buffered + len as u64 <= self.shape.buffer_bytes() as u64
    }

    /// Copies the batch made of `pieces` to the tail. The caller reserved file space.
    pub fn append(&mut self, file: &F, pieces: [&[u8]; 2]) {
        let chunk_bytes = self.shape.chunk_bytes;
        let total = pieces.iter().map(|p| p.len() as u64).sum::<u64>();
        debug_assert!(self.end + total <= self.reserved);
        for mut rest in pieces {
            while !rest.is_empty() {
                let open = self.chunks.back_mut().expect("an open chunk always exists");
                if open.buf.is_none() {
                    // A released (or never used) open chunk: take a buffer and put back
                    // the bytes of its partial block.
                    let mut buf = file.alloc_buf(open.capacity);
                    buf.as_bytes_mut()[..self.idle_tail.len()].copy_from_slice(&self.idle_tail);
                    debug_assert_eq!(self.idle_tail.len(), open.len);
                    open.buf = Some(buf);
                    self.idle_tail.clear();
                }
                let n = (open.capacity - open.len).min(rest.len());
                let buf = open.buf.as_mut().expect("the open chunk is never moved into a write");
                buf.as_bytes_mut()[open.len..open.len + n].copy_from_slice(&rest[..n]);
                open.len += n;
                rest = &rest[n..];
                if open.len == open.capacity {
                    open.sealed = true;
                    let position = open.position + open.capacity as u64;
                    let capacity = open.next_capacity;
                    let buf = file.alloc_buf(capacity);
                    self.chunks.push_back(Chunk::fresh(position, capacity, Some(buf), chunk_bytes));
                }
            }
        }
        self.end += total;
    }

    /// The next write to submit, if any may start now.
    pub fn take_write(&mut self, file: &F) -> Option<Write<F::Buf>> {
        if self.failed.is_some() || self.in_flight >= self.shape.writes_in_flight {
            return None;
        }
        // Sealed chunks go out as soon as a slot is free. The open chunk goes out only
        // when nothing else is in flight but heads: while the device is busy, appends
        // keep accumulating and the next write carries them all (group commit), instead
        // of many small writes that each rewrite the partial tail block.
        let idle = self.chunks.iter().all(|c| !c.in_flight || c.is_head());
        let index = (0..self.chunks.len()).find(|&i| {
            let c = &self.chunks[i];
            let blocked = c.is_head() && i > 0 && self.chunks[i - 1].in_flight;
            !c.in_flight && !blocked && c.written_len < c.len && (c.sealed || idle)
        })?;
        let chunk = &mut self.chunks[index];
        let from = align_down(chunk.written_len as u64) as usize;
        let to = align_up(chunk.len as u64) as usize;
        let unwritten = chunk.len - from;
        // The chunk's memory goes to the write when the write rewrites no block already
        // written, or few beside a large copy saved (the write starts at the chunk's
        // first byte). So a chunk that continues a write goes out whole as the next one.
        let handover =
            chunk.buf.is_some() && (from == 0 || unwritten >= APPEND_HANDOVER_MIN_BYTES && from <= unwritten / 8);
        let data_end = chunk.position + chunk.len as u64;
        let chunk_position = chunk.position;
        let head = chunk.is_head();
        let mut continuation = None;
        let write = if handover {
            let mut buf = chunk.buf.take().expect("checked");
            buf.truncate(to);
            buf.as_bytes_mut()[chunk.len..].fill(0);
            let mut copied = 0;
            if !chunk.sealed {
                // A fresh open chunk continues from the partial last block (a head). After
                // a small write the chunk after it is small too: the next write is likely
                // as small, and takes it.
                let keep = align_down(chunk.len as u64) as usize;
                let partial = chunk.len - keep;
                let small = unwritten < APPEND_HANDOVER_MIN_BYTES;
                let chunk_bytes = self.shape.chunk_bytes;
                let next_capacity = if small { APPEND_HANDOVER_MIN_BYTES } else { chunk_bytes };
                let mut next = file.alloc_buf(if partial > 0 { DMA_ALIGNMENT } else { next_capacity });
                next.as_bytes_mut()[..partial].copy_from_slice(&buf.as_bytes()[keep..chunk.len]);
                // Its first bytes go out with this write: they count as written, so
                // that only new data makes it write again.
                let position = chunk.position + keep as u64;
                continuation = Some(Chunk::after(position, partial, Some(next), next_capacity, chunk_bytes));
                copied = partial;
                chunk.sealed = true;
            }
            Write { buf, position: chunk_position, data_end, copied, head, chunk_position }
        } else {
            // Copy the unwritten blocks; the first may be a partial block rewritten.
            let source = chunk.buf.as_ref().expect("a partially written chunk has its buffer");
            let mut buf = file.alloc_buf(to - from);
            let bytes = buf.as_bytes_mut();
            bytes[..unwritten].copy_from_slice(&source.as_bytes()[from..chunk.len]);
            bytes[unwritten..].fill(0);
            Write { buf, position: chunk_position + from as u64, data_end, copied: unwritten, head, chunk_position }
        };
        chunk.in_flight = true;
        self.in_flight += 1;
        if let Some(open) = continuation {
            self.chunks.push_back(open);
        }
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
            let done = index < last && c.sealed && c.written_len == c.len && !c.in_flight;
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

#[cfg(test)]
mod tests {
    use std::io;

    use bytes::Bytes;
    use rand::{Rng, SeedableRng};

    use super::*;

    /// A buffer in plain memory; the appender never needs real I/O.
    struct MemBuf(Vec<u8>);

    impl IoBuf for MemBuf {
        fn as_bytes(&self) -> &[u8] {
            &self.0
        }
        fn as_bytes_mut(&mut self) -> &mut [u8] {
            &mut self.0
        }
        fn truncate(&mut self, len: usize) {
            self.0.truncate(len);
        }
    }

    #[derive(Clone)]
    struct MemFile;

    impl StorageFile for MemFile {
        type Buf = MemBuf;
        fn alloc_buf(&self, len: usize) -> MemBuf {
            // Garbage, not zeros: the appender must write every byte it submits.
            MemBuf(vec![0xee; len])
        }
        async fn write_at(&self, _: MemBuf, _: u64) -> io::Result<usize> {
            unreachable!("the test applies writes itself")
        }
        async fn read_at(&self, _: u64, _: usize) -> io::Result<Bytes> {
            unreachable!()
        }
        async fn fdatasync(&self) -> io::Result<()> {
            unreachable!()
        }
        async fn allocate(&self, _: u64) -> io::Result<()> {
            unreachable!()
        }
        async fn truncate(&self, _: u64) -> io::Result<()> {
            unreachable!()
        }
        async fn size(&self) -> io::Result<u64> {
            unreachable!()
        }
    }

    fn blocks(position: u64, len: usize) -> std::ops::Range<u64> {
        position / DMA_ALIGNMENT as u64..(position + len as u64).div_ceil(DMA_ALIGNMENT as u64)
    }

    // Appends of mixed sizes, with writes completing in random order: no two writes in
    // flight ever cover one block, `written` never claims bytes the image lacks, and the
    // image ends equal to what was appended, with at most one copy per appended byte
    // beyond the first (partial blocks rewritten) and none for large writes; for the
    // default write shape and the extremes a node may set.
    #[test]
    fn writes_in_any_order_leave_the_appended_bytes() {
        use crate::limits::{APPEND_CHUNK_BYTES_MAX, APPEND_CHUNK_BYTES_MIN, WRITES_IN_FLIGHT_MAX};
        let shapes = [
            WriteShape::default(),
            WriteShape { chunk_bytes: APPEND_CHUNK_BYTES_MIN, writes_in_flight: 1 },
            WriteShape { chunk_bytes: APPEND_CHUNK_BYTES_MIN, writes_in_flight: WRITES_IN_FLIGHT_MAX },
            WriteShape { chunk_bytes: APPEND_CHUNK_BYTES_MAX, writes_in_flight: 8 },
        ];
        for (seed, shape) in (0..64u64).map(|seed| (seed, shapes[seed as usize % shapes.len()])) {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let start = rng.random_range(0..3 * DMA_ALIGNMENT as u64);
            let tail: Vec<u8> = (0..start % DMA_ALIGNMENT as u64).map(|i| i as u8).collect();
            let mut expected = vec![0u8; align_down(start) as usize];
            expected.extend_from_slice(&tail);
            let mut image = expected.clone();
            image.resize(align_up(start) as usize, 0);
            let mut appender = Appender::new(&MemFile, shape, start, &tail, u64::MAX);
            let mut in_flight: Vec<Write<MemBuf>> = Vec::new();
            // Blocks some completed write (or the file before) holds.
            let mut on_disk: std::collections::HashSet<u64> = (0..align_up(start) / DMA_ALIGNMENT as u64).collect();
            let (mut appended, mut copied) = (0usize, 0usize);
            for step in 0..400 {
                if rng.random_bool(0.6) && appender.has_room(1) {
                    let len = match rng.random_range(0..10) {
                        0..=5 => rng.random_range(1..2000),
                        6..=8 => rng.random_range(2000..100_000),
                        _ => rng.random_range(100_000..700_000),
                    };
                    let data: Vec<u8> = (0..len).map(|i| (i * 31 + step) as u8).collect();
                    let split = rng.random_range(0..=len.min(PATCH));
                    appender.append(&MemFile, [&data[..split], &data[split..]]);
                    expected.extend_from_slice(&data);
                    appended += len;
                }
                while rng.random_bool(0.7) {
                    let Some(write) = appender.take_write(&MemFile) else { break };
                    let mine = blocks(write.position, write.buf.as_bytes().len());
                    for other in &in_flight {
                        let theirs = blocks(other.position, other.buf.as_bytes().len());
                        assert!(mine.end <= theirs.start || theirs.end <= mine.start, "seed {seed}: overlap");
                    }
                    // Blocks on disk and fresh ones never share a write (ext4 would
                    // hand it to a worker thread).
                    let old = mine.clone().filter(|b| on_disk.contains(b)).count();
                    assert!(old == 0 || old == mine.clone().count(), "seed {seed}: {mine:?} mixes {old} old blocks");
                    on_disk.extend(mine);
                    copied += write.copied;
                    in_flight.push(write);
                    assert!(in_flight.len() <= shape.writes_in_flight, "seed {seed}: past the depth");
                }
                if !in_flight.is_empty() && rng.random_bool(0.5) {
                    let write = in_flight.swap_remove(rng.random_range(0..in_flight.len()));
                    complete(&mut appender, &mut image, write);
                    let written = appender.written() as usize;
                    assert_eq!(image[..written], expected[..written], "seed {seed}: written too far");
                }
            }
            // Drain: everything appended reaches the image.
            loop {
                while let Some(write) = appender.take_write(&MemFile) {
                    in_flight.push(write);
                }
                let Some(write) = in_flight.pop() else { break };
                complete(&mut appender, &mut image, write);
            }
            assert_eq!(appender.written(), appender.end());
            assert_eq!(image[..expected.len()], expected[..], "seed {seed}");
            assert!(copied <= appended + 2 * DMA_ALIGNMENT * 400, "seed {seed}: {copied} copied of {appended}");
        }
    }

    const PATCH: usize = 16;

    fn complete(appender: &mut Appender<MemFile>, image: &mut Vec<u8>, write: Write<MemBuf>) {
        let at = write.position as usize;
        let bytes = write.buf.as_bytes();
        if image.len() < at + bytes.len() {
            image.resize(at + bytes.len(), 0);
        }
        image[at..at + bytes.len()].copy_from_slice(bytes);
        appender.complete_write(write.position, write.data_end, write.chunk_position, Ok(()));
    }

    // A lone batch on an idle device, write after write: each write takes the chunk it
    // was appended into (the head, then the small chunk after it when the batch spills
    // over, both at once), and copies only the partial last block into the next head.
    // Its bytes reach the image.
    #[test]
    fn small_writes_copy_only_the_partial_block() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut appender = Appender::new(&MemFile, WriteShape::default(), 0, &[], u64::MAX);
        let (mut expected, mut image) = (Vec::new(), Vec::new());
        for step in 0..200usize {
            let data: Vec<u8> = (0..rng.random_range(100..20_000)).map(|i| (i + step) as u8).collect();
            appender.append(&MemFile, [&data[..1], &data[1..]]);
            expected.extend_from_slice(&data);
            let first = appender.take_write(&MemFile).expect("an idle appender writes at once");
            let next = if first.head { appender.take_write(&MemFile) } else { None };
            assert!(appender.take_write(&MemFile).is_none(), "step {step}: the next head waits");
            let writes: Vec<_> = std::iter::once(first).chain(next).collect();
            let copied: usize = writes.iter().map(|w| w.copied).sum();
            assert_eq!(copied, expected.len() % DMA_ALIGNMENT, "step {step}");
            for write in writes {
                assert!(write.buf.as_bytes().len() <= APPEND_HANDOVER_MIN_BYTES, "step {step}");
                complete(&mut appender, &mut image, write);
            }
            assert_eq!(appender.written() as usize, expected.len());
            assert_eq!(appender.chunks.len(), 1, "step {step}: the written chunks are dropped");
            let partial = expected.len() % DMA_ALIGNMENT;
            let open = &appender.chunks[0];
            assert_eq!(open.capacity, if partial > 0 { DMA_ALIGNMENT } else { APPEND_HANDOVER_MIN_BYTES });
            assert!(open.is_head() || partial == 0);
        }
        assert_eq!(image[..expected.len()], expected[..]);
        // A burst larger than the small chunk seals it and goes on in full-size chunks.
        let burst = vec![3u8; 3 * APPEND_HANDOVER_MIN_BYTES];
        appender.append(&MemFile, [&burst[..], &[]]);
        expected.extend_from_slice(&burst);
        assert!(appender.chunks.len() >= 2);
        assert_eq!(appender.chunks.back().unwrap().capacity, WriteShape::default().chunk_bytes);
        while let Some(write) = appender.take_write(&MemFile) {
            complete(&mut appender, &mut image, write);
        }
        assert_eq!(appender.written(), appender.end());
        assert_eq!(image[..expected.len()], expected[..]);
    }

    // One large write of the open chunk takes the chunk's memory: only the partial last
    // block is copied.
    #[test]
    fn a_large_write_copies_only_the_partial_block() {
        let mut appender = Appender::new(&MemFile, WriteShape::default(), 0, &[], u64::MAX);
        let chunk_bytes = WriteShape::default().chunk_bytes;
        let data = vec![7u8; chunk_bytes];
        appender.append(&MemFile, [&data[..16], &data[16..300_000]]);
        let write = appender.take_write(&MemFile).expect("a write");
        assert_eq!(write.copied, 300_000 % DMA_ALIGNMENT);
        assert_eq!(write.buf.as_bytes().len(), align_up(300_000) as usize);
        // The continuation shares the last block: it waits for the first write.
        let partial = 300_000 % DMA_ALIGNMENT;
        appender.append(&MemFile, [&data[..16], &data[16..chunk_bytes - partial]]);
        assert!(appender.take_write(&MemFile).is_none(), "sealed chunk overlapping an in-flight write");
        let mut image = Vec::new();
        complete(&mut appender, &mut image, write);
        assert!(appender.take_write(&MemFile).is_some());
    }
}
