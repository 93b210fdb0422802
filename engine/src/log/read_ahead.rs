//! Sequential read-ahead for readers behind the tail.
//!
//! A consumer catching up, a follower or a coordinator replaying its log reads from
//! disk. Alone, each such read is one DMA read at a time, and the device idles while
//! the response is sent and the next fetch arrives. So after a cold read the log reads
//! the next window (`READ_AHEAD_BYTES`, as several reads of about
//! `READ_AHEAD_READ_BYTES` in flight at once, cut where the offset index says a batch
//! starts, so that batches are slices of the read buffers and none is copied) in a
//! task of its own, and puts its batches in the shard's cache. A read that lands in a completed window starts the next one: while a
//! reader consumes one window from memory, the next is on its way, and the device stays
//! busy as long as the reader keeps up. A read that misses the cache while a window
//! that may hold its offset is in flight waits for that window instead of reading the
//! same bytes again.
//!
//! Bounds: one window in flight per log, `READ_AHEAD_SHARD_BYTES_MAX` in flight per
//! shard, and a window of at most `1/READ_AHEAD_CACHE_DIVISOR` of the cache's budget (no
//! read-ahead without a cache). Batches read ahead are framed like any cold read (their
//! CRC was checked when they entered the log); a window stops before a badly framed
//! batch, and the reader's own cold read reports it. A window
//! read while the cache dropped batches (truncation, retention, compaction, deletion)
//! is discarded rather than cached, so it never brings back bytes a log let go of.

use bytes::Bytes;

use super::*;
use crate::limits::{
    BATCH_BYTES_MAX, COLD_READ_MIN_BYTES, READ_AHEAD_BYTES, READ_AHEAD_CACHE_DIVISOR, READ_AHEAD_READ_BYTES,
    READ_AHEAD_SHARD_BYTES_MAX,
};
use crate::waiters::Waiters;

/// A log's read-ahead: its last window, and the readers waiting for it.
#[derive(Default)]
pub(super) struct ReadAhead {
    window: RefCell<Option<Window>>,
    done: Waiters,
}

#[derive(Clone, Copy)]
struct Window {
    /// The offset the window was read from.
    start: Offset,
    /// After the window's last whole batch; `None` while the read is in flight.
    end: Option<Offset>,
}

impl<S: Storage> Log<S> {
    /// After a read at `offset`: starts the next window when the read landed in the
    /// last completed one.
    pub(super) fn follow_read_ahead(&self, offset: Offset) {
        let next = match *self.read_ahead.window.borrow() {
            Some(Window { start, end: Some(end) }) if start <= offset && offset < end => end,
            _ => return,
        };
        self.start_read_ahead(next);
    }

    /// Waits for a window in flight that may hold `offset`. Returns whether it waited
    /// (the caller then looks in the cache again).
    pub(super) async fn await_read_ahead(&self, offset: Offset) -> bool {
        let mut waited = false;
        loop {
            match *self.read_ahead.window.borrow() {
                Some(Window { start, end: None }) if start <= offset => {}
                _ => return waited,
            }
            self.read_ahead.done.wait(0).await;
            waited = true;
        }
    }

    /// Reads the window from `from` in the background, unless one is in flight, `from`
    /// is written but not yet on disk, already cached, or a bound says no.
    pub(super) fn start_read_ahead(&self, from: Offset) {
        if matches!(*self.read_ahead.window.borrow(), Some(Window { end: None, .. })) {
            return;
        }
        if from >= self.state.borrow().offset_written_end {
            return;
        }
        let window_bytes = {
            let cache = self.ctx.cache.borrow();
            if cache.contains(self.key, from) {
                return;
            }
            READ_AHEAD_BYTES.min(cache.budget_bytes() / READ_AHEAD_CACHE_DIVISOR)
        };
        let metrics = self.ctx.metrics.clone();
        let in_flight = metrics.read_ahead_bytes_in_flight.get();
        if window_bytes < COLD_READ_MIN_BYTES || in_flight + window_bytes as u64 > READ_AHEAD_SHARD_BYTES_MAX {
            return;
        }
        let Some(range) = self.locate(from) else { return };
        let len = range.len.min(window_bytes as u64) as usize;
        if len == 0 {
            return;
        }
        let pieces = self.pieces(from, range.position, len);
        *self.read_ahead.window.borrow_mut() = Some(Window { start: from, end: None });
        metrics.read_ahead_bytes_in_flight.set(in_flight + len as u64);
        let (cache, key, read_ahead) = (self.ctx.cache.clone(), self.key, self.read_ahead.clone());
        let invalidations = cache.borrow().invalidations();
        self.ctx.storage.spawn(async move {
            // Several reads in flight: one large read is one device request here.
            let reads = pieces.iter().map(|&(at, len)| range.file.read_at(at, len));
            let pieces: std::io::Result<Vec<Bytes>> = futures_util::future::join_all(reads).await.into_iter().collect();
            let in_flight = &metrics.read_ahead_bytes_in_flight;
            in_flight.set(in_flight.get() - len as u64);
            let mut end = from;
            if let Ok(pieces) = pieces {
                let read: u64 = pieces.iter().map(|p| p.len() as u64).sum();
                EngineMetrics::add(&metrics.disk_read_bytes, read);
                EngineMetrics::add(&metrics.read_ahead_bytes, read);
                let mut cache = cache.borrow_mut();
                if cache.invalidations() == invalidations {
                    let mut joined = 0;
                    for batch in whole_batches(&pieces, &mut joined) {
                        if batch.last_offset() >= from {
                            end = end.max(batch.next_offset());
                            cache.insert(key, batch);
                        }
                    }
                    EngineMetrics::add(&metrics.read_copied_bytes, joined);
                }
            }
            let mut window = read_ahead.window.borrow_mut();
            if let Some(w) = window.as_mut().filter(|w| w.start == from) {
                w.end = Some(end);
            }
            drop(window);
            read_ahead.done.wake_all();
        });
    }
}

impl<S: Storage> Log<S> {
    /// The reads of a window of `len` bytes at `position` in the segment holding
    /// `from`: about `READ_AHEAD_READ_BYTES` each, cut where the offset index says a
    /// batch starts, so that a batch rarely spans two reads (one that does is joined
    /// in a copy). Without an index entry in reach, a cut falls where it falls.
    fn pieces(&self, from: Offset, position: u64, len: usize) -> Vec<(u64, usize)> {
        let state = self.state.borrow();
        let index = state.segments.range(..=from).next_back().map(|(_, segment)| &segment.offset_index);
        let end = position + len as u64;
        let mut cuts = vec![position];
        let mut target = position + READ_AHEAD_READ_BYTES as u64;
        while target < end {
            let last = *cuts.last().expect("starts with position");
            let at_batch = index
                .and_then(|index| index.batch_start_at_or_below(u32::try_from(target).ok()?))
                .map(u64::from)
                .filter(|&cut| cut > last + (READ_AHEAD_READ_BYTES / 2) as u64);
            cuts.push(at_batch.unwrap_or(target));
            target = cuts.last().expect("pushed") + READ_AHEAD_READ_BYTES as u64;
        }
        cuts.push(end);
        cuts.windows(2).map(|w| (w[0], (w[1] - w[0]) as usize)).collect()
    }
}

/// The valid whole batches at the start of consecutive `pieces`, up to the first
/// partial or bad one. A batch within one piece shares it; one that crosses into the
/// next is joined in a copy, whose bytes are added to `joined`.
fn whole_batches<'a>(pieces: &'a [Bytes], joined: &'a mut u64) -> impl Iterator<Item = Batch> + 'a {
    let (mut piece, mut position) = (0, 0);
    std::iter::from_fn(move || {
        while pieces.get(piece).is_some_and(|p| position >= p.len()) {
            position -= pieces[piece].len();
            piece += 1;
        }
        let current = pieces.get(piece)?;
        let rest = &current[position..];
        let bytes = if rest.len() >= crate::batch::LOG_OVERHEAD {
            let size = crate::batch::peek_size(rest).ok()?;
            match rest.len() >= size {
                true => current.slice(position..position + size),
                false => join(pieces, piece, position, size, joined)?,
            }
        } else {
            // Even the length field crosses into the next piece.
            let head = join(pieces, piece, position, crate::batch::LOG_OVERHEAD, &mut 0)?;
            let size = crate::batch::peek_size(&head).ok()?;
            join(pieces, piece, position, size, joined)?
        };
        let batch = Batch::frame(bytes, BATCH_BYTES_MAX).ok()?;
        position += batch.size();
        Some(batch)
    })
}

/// `len` bytes from `position` in `pieces[piece]` on, across pieces, copied; `None`
/// when the pieces end first. Nothing is allocated for bytes the pieces do not hold:
/// `len` comes from a batch's length field, which a damaged segment may set to 2 GiB.
fn join(pieces: &[Bytes], piece: usize, position: usize, len: usize, joined: &mut u64) -> Option<Bytes> {
    let held = pieces[piece..].iter().map(Bytes::len).sum::<usize>().saturating_sub(position);
    if held < len {
        return None;
    }
    let mut out = bytes::BytesMut::with_capacity(len);
    let mut from = position;
    for p in &pieces[piece..] {
        let take = (len - out.len()).min(p.len() - from);
        out.extend_from_slice(&p[from..from + take]);
        from = 0;
        if out.len() == len {
            *joined += len as u64;
            return Some(out.freeze());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::batch;

    // Batches cut across pieces anywhere (inside a length field too) come out whole and
    // in order; only those that cross are copied; a partial last batch is left out.
    // The fuzzer's finding: a damaged length field claiming 2 GiB, in a batch that
    // crosses into the next piece, made the read-ahead allocate 2 GiB before seeing the
    // pieces end. It ends the window's batches there, allocating nothing.
    #[test]
    fn a_damaged_length_allocates_nothing() {
        let mut damaged = batch(3, 40).to_vec();
        damaged[8..12].copy_from_slice(&(i32::MAX - 12).to_be_bytes());
        let pieces = [Bytes::copy_from_slice(&damaged[..30]), Bytes::copy_from_slice(&damaged[30..])];
        let mut joined = 0;
        assert_eq!(whole_batches(&pieces, &mut joined).count(), 0);
        assert_eq!(joined, 0);
        assert!(join(&pieces, 0, 0, usize::MAX, &mut joined).is_none(), "no allocation of usize::MAX");
    }

    #[test]
    fn batches_across_pieces() {
        let batches: Vec<Bytes> = (1..6).map(|n| batch(n, 37 * n as usize)).collect();
        let whole: Vec<u8> = batches.iter().flat_map(|b| b.to_vec()).collect();
        for cut in 1..whole.len() {
            for tail in [0, 7] {
                let end = whole.len() - tail;
                let pieces =
                    [Bytes::copy_from_slice(&whole[..cut.min(end)]), Bytes::copy_from_slice(&whole[cut.min(end)..end])];
                let mut joined = 0;
                let got: Vec<Bytes> = whole_batches(&pieces, &mut joined).map(|b| b.bytes()).collect();
                let expected = if tail == 0 { batches.len() } else { batches.len() - 1 };
                assert_eq!(got, batches[..expected], "cut at {cut}, tail {tail}");
                assert!(joined as usize <= batches.iter().map(Bytes::len).max().unwrap());
            }
        }
    }
}
