//! The O_DIRECT appender of a log's active segment.
//!
//! Appends are copied into aligned chunks, the one copy of a produced byte. A chunk
//! holds `WriteShape::chunk_bytes` (the node's setting: `APPEND_CHUNK_BYTES_DEFAULT`
//! unless `skein iotune` measured another), or `APPEND_HANDOVER_MIN_BYTES` when it
//! continues a small write. A chunk that fills is sealed and written whole, without a
//! copy. A write of the open chunk takes the chunk's memory too when it starts at the
//! chunk's first byte, and the appends after it continue from the partial last block:
//! a lone batch on an idle device is copied once, not into the chunk and then into its
//! write.
//!
//! Partial blocks in place. A write shares its memory with the chunk that continues
//! it (`Memory`, an `Rc`): the head's block is the last block of the buffer the write
//! took. Appends go into that memory only once the write completed and the head's
//! reference is the only one (`Rc::get_mut`), so the bytes under the device never
//! change, and on a device that keeps up (every write done before the next append, the
//! usual case below saturation) no byte is copied twice. An append that finds the write
//! still in flight copies the partial block into memory of its own (under
//! `DMA_ALIGNMENT`, counted). Only small chunks (`APPEND_HANDOVER_MIN_BYTES`) are
//! shared so: a head never pins a large chunk, whose partial block is copied at once.
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
use std::ops::Range;
use std::rc::Rc;

use crate::config::WriteShape;
use crate::io::{align_down, align_up, IoBuf, StorageFile};
use crate::limits::{APPEND_HANDOVER_MIN_BYTES, DMA_ALIGNMENT};

/// A chunk's memory: its bytes start `offset` bytes into `buf`, which a head shares
/// with the write of the chunk before it until that write completes.
struct Memory<B> {
    buf: Rc<B>,
    offset: usize,
}

impl<B: IoBuf> Memory<B> {
    fn fresh(buf: B) -> Memory<B> {
        Memory { buf: Rc::new(buf), offset: 0 }
    }

    /// The first `len` bytes.
    fn bytes(&self, len: usize) -> &[u8] {
        &self.buf.as_bytes()[self.offset..self.offset + len]
    }

    /// Whether no write shares the memory (nothing else holds a reference, and no weak
    /// one is ever made).
    fn owned(&self) -> bool {
        Rc::strong_count(&self.buf) == 1
    }

    /// The first `len` bytes to write into, or `None` while a write in flight shares
    /// them.
    fn bytes_mut(&mut self, len: usize) -> Option<&mut [u8]> {
        let offset = self.offset;
        Rc::get_mut(&mut self.buf).map(|buf| &mut buf.as_bytes_mut()[offset..offset + len])
    }
}

struct Chunk<B> {
    /// File position of the chunk's first byte (aligned).
    position: u64,
    /// The chunk's memory; `None` while a sealed chunk is moved into its write, or
    /// while an idle log's open chunk has none.
    buf: Option<Memory<B>>,
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
    fn fresh(position: u64, capacity: usize, buf: Option<Memory<B>>, next_capacity: usize) -> Chunk<B> {
        Chunk { position, capacity, buf, len: 0, written_len: 0, in_flight: false, sealed: false, next_capacity }
    }

    /// The open chunk after data on disk that ends `partial` bytes past the aligned
    /// `position`: a head chunk of one block holding those bytes when `partial > 0`,
    /// followed by a chunk of `next_capacity` bytes; else a chunk of `next_capacity`.
    /// `buf` holds the partial bytes, or is `None` to be allocated on the first append.
    fn after(
        position: u64,
        partial: usize,
        buf: Option<Memory<B>>,
        next_capacity: usize,
        chunk_bytes: usize,
    ) -> Chunk<B> {
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

/// One write handed out by `take_write`: the bytes `range` of `buf`.
pub(crate) struct Write<B> {
    pub buf: Rc<B>,
    pub range: Range<usize>,
    pub position: u64,
    /// Position after the last byte of real data the write carries (before padding).
    pub data_end: u64,
    /// Appended bytes this write copied out of its chunk (a chunk partly written is
    /// copied; a full one is handed over, an open one too, and a large one's partial
    /// last block copied into the head that continues it).
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
        let Some(memory) = open.buf.take() else { return false };
        let keep = align_down(open.len as u64) as usize;
        self.idle_tail = memory.bytes(open.len)[keep..].to_vec();
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
    /// Returns the bytes copied beyond the batch's: a partial block that a write in
    /// flight still shares, copied into memory of the open chunk's own.
    pub fn append(&mut self, file: &F, pieces: [&[u8]; 2]) -> usize {
        let chunk_bytes = self.shape.chunk_bytes;
        let total = pieces.iter().map(|p| p.len() as u64).sum::<u64>();
        debug_assert!(self.end + total <= self.reserved);
        let mut copied = 0;
        for mut rest in pieces {
            while !rest.is_empty() {
                let open = self.chunks.back_mut().expect("an open chunk always exists");
                copied += own_memory(file, open, &mut self.idle_tail);
                let n = (open.capacity - open.len).min(rest.len());
                let capacity = open.capacity;
                let bytes = open.buf.as_mut().and_then(|m| m.bytes_mut(capacity)).expect("owned above");
                bytes[open.len..open.len + n].copy_from_slice(&rest[..n]);
                open.len += n;
                rest = &rest[n..];
                if open.len == open.capacity {
                    open.sealed = true;
                    let position = open.position + open.capacity as u64;
                    let capacity = open.next_capacity;
                    let buf = Memory::fresh(file.alloc_buf(capacity));
                    self.chunks.push_back(Chunk::fresh(position, capacity, Some(buf), chunk_bytes));
                }
            }
        }
        self.end += total;
        copied
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
            let mut copied = own_memory(file, chunk, &mut self.idle_tail);
            let mut memory = chunk.buf.take().expect("checked");
            memory.bytes_mut(to).expect("owned above")[chunk.len..].fill(0);
            if !chunk.sealed {
                // A fresh open chunk continues from the partial last block (a head). After
                // a small write the chunk after it is small too: the next write is likely
                // as small, and takes it.
                let keep = align_down(chunk.len as u64) as usize;
                let partial = chunk.len - keep;
                let small = unwritten < APPEND_HANDOVER_MIN_BYTES;
                let chunk_bytes = self.shape.chunk_bytes;
                let next_capacity = if small { APPEND_HANDOVER_MIN_BYTES } else { chunk_bytes };
                let next = if partial == 0 {
                    Memory::fresh(file.alloc_buf(next_capacity))
                } else if memory.buf.as_bytes().len() <= APPEND_HANDOVER_MIN_BYTES {
                    // The head shares the partial block with this write, in place.
                    Memory { buf: Rc::clone(&memory.buf), offset: memory.offset + keep }
                } else {
                    let mut head = file.alloc_buf(DMA_ALIGNMENT);
                    head.as_bytes_mut()[..partial].copy_from_slice(&memory.bytes(chunk.len)[keep..]);
                    copied += partial;
                    Memory::fresh(head)
                };
                // Its first bytes go out with this write: they count as written, so
                // that only new data makes it write again.
                let position = chunk.position + keep as u64;
                continuation = Some(Chunk::after(position, partial, Some(next), next_capacity, chunk_bytes));
                chunk.sealed = true;
            }
            let range = memory.offset..memory.offset + to;
            Write { buf: memory.buf, range, position: chunk_position, data_end, copied, head, chunk_position }
        } else {
            // Copy the unwritten blocks; the first may be a partial block rewritten.
            let source = chunk.buf.as_ref().expect("a partially written chunk has its buffer");
            let mut buf = file.alloc_buf(to - from);
            let bytes = buf.as_bytes_mut();
            bytes[..unwritten].copy_from_slice(&source.bytes(chunk.len)[from..]);
            bytes[unwritten..].fill(0);
            let (position, range) = (chunk_position + from as u64, 0..to - from);
            Write { buf: Rc::new(buf), range, position, data_end, copied: unwritten, head, chunk_position }
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

impl<B: IoBuf> Write<B> {
    pub fn chunk_position(&self) -> u64 {
        self.chunk_position
    }

    /// The bytes the write carries, padding included.
    #[cfg(test)]
    pub fn bytes(&self) -> &[u8] {
        &self.buf.as_bytes()[self.range.clone()]
    }
}

/// Makes the chunk's memory its own to write into: a buffer for an idle log's open
/// chunk, holding its partial block again (`idle_tail`); or, while a write in flight
/// shares the memory, a copy of the chunk's bytes. Returns the bytes copied again (the
/// idle tail is not: it left the chunk for memory's sake, not the write's).
fn own_memory<F: StorageFile>(file: &F, chunk: &mut Chunk<F::Buf>, idle_tail: &mut Vec<u8>) -> usize {
    let shared = match &mut chunk.buf {
        Some(memory) if memory.owned() => return 0,
        Some(memory) => Some(memory.bytes(chunk.len)),
        None => None,
    };
    let mut buf = file.alloc_buf(chunk.capacity);
    let copied = match shared {
        Some(bytes) => {
            buf.as_bytes_mut()[..chunk.len].copy_from_slice(bytes);
            chunk.len
        }
        None => {
            debug_assert_eq!(idle_tail.len(), chunk.len);
            buf.as_bytes_mut()[..idle_tail.len()].copy_from_slice(idle_tail);
            idle_tail.clear();
            0
        }
    };
    chunk.buf = Some(Memory::fresh(buf));
    copied
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
        async fn write_shared_at(&self, _: Rc<MemBuf>, _: Range<usize>, _: u64) -> io::Result<usize> {
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
    // flight ever cover one block, no write's bytes change while it is in flight (the
    // appends into memory a write shares wait for it or copy), `written` never claims
    // bytes the image lacks, and the image ends equal to what was appended, with at
    // most one copy per appended byte beyond the first (partial blocks rewritten) and
    // none for large writes; for the default write shape and the extremes a node may
    // set.
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
            // Each write in flight with the bytes it carried when taken.
            let mut in_flight: Vec<(Write<MemBuf>, Vec<u8>)> = Vec::new();
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
                    copied += appender.append(&MemFile, [&data[..split], &data[split..]]);
                    expected.extend_from_slice(&data);
                    appended += len;
                }
                while rng.random_bool(0.7) {
                    let Some(write) = appender.take_write(&MemFile) else { break };
                    let mine = blocks(write.position, write.range.len());
                    for (other, _) in &in_flight {
                        let theirs = blocks(other.position, other.range.len());
                        assert!(mine.end <= theirs.start || theirs.end <= mine.start, "seed {seed}: overlap");
                    }
                    // Blocks on disk and fresh ones never share a write (ext4 would
                    // hand it to a worker thread).
                    let old = mine.clone().filter(|b| on_disk.contains(b)).count();
                    assert!(old == 0 || old == mine.clone().count(), "seed {seed}: {mine:?} mixes {old} old blocks");
                    on_disk.extend(mine);
                    copied += write.copied;
                    let carried = write.bytes().to_vec();
                    in_flight.push((write, carried));
                    assert!(in_flight.len() <= shape.writes_in_flight, "seed {seed}: past the depth");
                }
                if !in_flight.is_empty() && rng.random_bool(0.5) {
                    let (write, carried) = in_flight.swap_remove(rng.random_range(0..in_flight.len()));
                    assert!(write.bytes() == carried, "seed {seed}: a write's bytes changed in flight");
                    complete(&mut appender, &mut image, write);
                    let written = appender.written() as usize;
                    assert_eq!(image[..written], expected[..written], "seed {seed}: written too far");
                }
            }
            // Drain: everything appended reaches the image.
            loop {
                while let Some(write) = appender.take_write(&MemFile) {
                    let carried = write.bytes().to_vec();
                    in_flight.push((write, carried));
                }
                let Some((write, carried)) = in_flight.pop() else { break };
                assert!(write.bytes() == carried, "seed {seed}: a write's bytes changed in flight");
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
        let bytes = write.bytes();
        if image.len() < at + bytes.len() {
            image.resize(at + bytes.len(), 0);
        }
        image[at..at + bytes.len()].copy_from_slice(bytes);
        appender.complete_write(write.position, write.data_end, write.chunk_position, Ok(()));
    }

    // A lone batch on an idle device, write after write: each write takes the chunk it
    // was appended into (the head, then the small chunk after it when the batch spills
    // over, both at once), and the next head continues in the same memory: after the
    // first write (a large chunk's, whose partial block is copied) no byte is copied
    // twice. Its bytes reach the image.
    #[test]
    fn small_writes_copy_no_byte_twice() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut appender = Appender::new(&MemFile, WriteShape::default(), 0, &[], u64::MAX);
        let (mut expected, mut image) = (Vec::new(), Vec::new());
        for step in 0..200usize {
            let data: Vec<u8> = (0..rng.random_range(100..20_000)).map(|i| (i + step) as u8).collect();
            assert_eq!(appender.append(&MemFile, [&data[..1], &data[1..]]), 0, "step {step}");
            expected.extend_from_slice(&data);
            let first = appender.take_write(&MemFile).expect("an idle appender writes at once");
            let next = if first.head { appender.take_write(&MemFile) } else { None };
            assert!(appender.take_write(&MemFile).is_none(), "step {step}: the next head waits");
            let writes: Vec<_> = std::iter::once(first).chain(next).collect();
            let copied: usize = writes.iter().map(|w| w.copied).sum();
            let first_partial = if step == 0 { expected.len() % DMA_ALIGNMENT } else { 0 };
            assert_eq!(copied, first_partial, "step {step}");
            for write in writes {
                assert!(step == 0 || write.range.len() <= APPEND_HANDOVER_MIN_BYTES, "step {step}");
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
        assert_eq!(write.range.len(), align_up(300_000) as usize);
        // The continuation shares the last block: it waits for the first write.
        let partial = 300_000 % DMA_ALIGNMENT;
        appender.append(&MemFile, [&data[..16], &data[16..chunk_bytes - partial]]);
        assert!(appender.take_write(&MemFile).is_none(), "sealed chunk overlapping an in-flight write");
        let mut image = Vec::new();
        complete(&mut appender, &mut image, write);
        assert!(appender.take_write(&MemFile).is_some());
    }

    // An append that finds the write of its head's memory still in flight copies the
    // partial block into memory of its own, and the bytes under the write stay as they
    // were taken; once that write completes, the next write goes out.
    #[test]
    fn an_append_during_the_write_of_its_block_copies_the_block() {
        let mut appender = Appender::new(&MemFile, WriteShape::default(), 0, &[], u64::MAX);
        let mut image = Vec::new();
        let mut expected = Vec::new();
        let mut append = |appender: &mut Appender<MemFile>, data: &[u8]| {
            expected.extend_from_slice(data);
            appender.append(&MemFile, [data, &[]])
        };
        // Past the first (large) chunk and into a small one, whose memory the next
        // head shares.
        append(&mut appender, &[1u8; 100]);
        let write = appender.take_write(&MemFile).expect("a write");
        complete(&mut appender, &mut image, write);
        append(&mut appender, &[2u8; 5000]);
        while let Some(write) = appender.take_write(&MemFile) {
            complete(&mut appender, &mut image, write);
        }
        assert_eq!(append(&mut appender, &[3u8; 10]), 0, "the head's memory is its own again");
        let in_flight = appender.take_write(&MemFile).expect("a write");
        assert_eq!(in_flight.copied, 0);
        let carried = in_flight.bytes().to_vec();
        let partial = appender.end() as usize % DMA_ALIGNMENT;
        assert_eq!(append(&mut appender, &[4u8; 10]), partial, "the shared block is copied");
        assert!(in_flight.bytes() == carried, "the bytes under the write changed");
        assert!(appender.take_write(&MemFile).is_none(), "the head waits for the write of its block");
        complete(&mut appender, &mut image, in_flight);
        let write = appender.take_write(&MemFile).expect("the head's write");
        complete(&mut appender, &mut image, write);
        assert_eq!(appender.written(), appender.end());
        assert_eq!(image[..expected.len()], expected[..]);
    }
}
