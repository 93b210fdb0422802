//! The scrubber's step: reads stored batches back and checks their CRCs.
//!
//! A CRC is checked once, when the bytes enter the log (produce, replication,
//! recovery); reads that serve fetches only frame batches (`segment::Check::Frame`), as
//! Kafka's sendfile reads do. Corruption at rest (a flipped bit on the device, a bad
//! sector read back) is the scrubber's to find: `LogManager::scrub_pass` walks every
//! log of a shard at a bounded rate, a step at a time.
//!
//! A batch found corrupt is counted (`corruptions`, `scrub_corrupt_batches`), logged
//! with its partition, file and position, and its offsets are *fenced*: reads that
//! overlap them answer `Corruption` (a fetch gets KAFKA_STORAGE_ERROR) instead of
//! serving the bytes. A batch whose frame still holds fences its own offsets and the
//! scrub goes on after it; one whose frame is broken fences the rest of its segment.
//! Truncating the log below a fence (a follower refetching from its leader) lifts it.

use super::*;
use crate::limits::COLD_READ_MIN_BYTES;
use crate::segment::{Check, Reader};

/// What one scrubbing step checked.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScrubStep {
    /// Where the next step starts; `None` once the log's written end is reached.
    pub next: Option<Offset>,
    /// Bytes read and checked.
    pub bytes: u64,
    /// Corrupt batches found, as the offset ranges (first, last) now fenced.
    pub corrupt: Vec<(Offset, Offset)>,
}

impl<S: Storage> Log<S> {
    /// Checks the CRCs of the stored batches from the one holding `from`, within its
    /// segment, until about `max_bytes` are read (at least one batch past `from`). The
    /// bytes are read from disk, not the cache, and are not cached.
    ///
    /// # Errors
    /// `Io` when a read fails. Corrupt batches are not errors: they are fenced and
    /// listed in the step.
    pub async fn scrub(&self, from: Offset, max_bytes: usize) -> Result<ScrubStep> {
        let (from, range, segment_last, next_base) = {
            let state = self.state.borrow();
            let from = from.max(state.log_start_offset);
            if from >= state.offset_written_end {
                return Ok(ScrubStep::default());
            }
            let Some(range) = self.locate(from) else { return Ok(ScrubStep::default()) };
            let (&base, _) = state.segments.range(..=from).next_back().expect("located above");
            let next_base = state.segments.range(base.plus(1)..).next().map(|(b, _)| *b);
            let segment_last = next_base.unwrap_or(state.offset_written_end).plus(-1);
            (from, range, segment_last, next_base)
        };
        let limit = range.position + range.len;
        let mut reader = Reader::new(&range.file, limit);
        let read_ahead = max_bytes.clamp(COLD_READ_MIN_BYTES, 16 * COLD_READ_MIN_BYTES);
        let (mut position, mut checked_end) = (range.position, from);
        let mut step = ScrubStep::default();
        let io = |e| Error::io("scrub", &range.path, e);
        while position < limit && !(reader.bytes_read >= max_bytes as u64 && checked_end > from) {
            let at = position;
            let (fence, reason) = match reader.batch_at(position, read_ahead, Check::Frame).await.map_err(io)? {
                // The index points at or before `from`: batches wholly below it were
                // checked by the step before, and are only stepped over.
                Ok(batch) if batch.last_offset() < from => {
                    position += batch.size() as u64;
                    continue;
                }
                Ok(batch) if batch.crc_ok() => {
                    position += batch.size() as u64;
                    checked_end = checked_end.max(batch.next_offset());
                    continue;
                }
                // Its frame holds: only its own offsets are fenced.
                Ok(batch) if batch.last_offset() <= segment_last => {
                    position += batch.size() as u64;
                    checked_end = checked_end.max(batch.next_offset());
                    let reason = format!("crc mismatch: header says {:#010x}", batch.crc());
                    ((batch.base_offset(), batch.last_offset()), reason)
                }
                // No boundary after it can be trusted: the rest of the segment is.
                framed => {
                    let reason = match framed {
                        Ok(batch) => format!("offsets up to {} past its segment's", batch.last_offset()),
                        Err(reason) => reason,
                    };
                    let fence = (checked_end, segment_last);
                    position = limit;
                    checked_end = segment_last.plus(1);
                    (fence, reason)
                }
            };
            self.fence(fence, &range.path, at, &reason);
            step.corrupt.push(fence);
        }
        step.bytes = reader.bytes_read;
        step.next = match position >= limit {
            true => next_base,
            false => Some(checked_end),
        };
        Ok(step)
    }

    /// Fences a corrupt range; one fenced already (a later pass) is not counted again.
    fn fence(&self, (first, last): (Offset, Offset), path: &Path, position: u64, reason: &str) {
        if self.fenced.borrow_mut().insert(first, last) == Some(last) {
            return;
        }
        let metrics = &self.ctx.metrics;
        EngineMetrics::add(&metrics.corruptions, 1);
        EngineMetrics::add(&metrics.scrub_corrupt_batches, 1);
        tracing::error!(target: "skein::engine", partition = %self.partition, path = %path.display(), position,
            first = first.0, last = last.0, reason, "the scrubber found a corrupt batch at rest: reads of its offsets fail until the log is truncated below them");
    }

    /// `Corruption` when any of `batches` overlaps a fenced range.
    pub(super) fn check_fenced(&self, batches: &[Batch]) -> Result<()> {
        let fenced = self.fenced.borrow();
        if fenced.is_empty() {
            return Ok(());
        }
        for batch in batches {
            let overlap = fenced.range(..=batch.last_offset()).find(|(_, &last)| last >= batch.base_offset());
            if let Some((first, last)) = overlap {
                return Err(Error::Corruption {
                    path: self.dir.clone(),
                    position: batch.base_offset().0 as u64,
                    reason: format!("offsets {first} to {last} failed the scrubber's CRC check"),
                });
            }
        }
        Ok(())
    }

    /// Lifts the fences at and after `offset`: the log was truncated there, and what
    /// is appended at those offsets again was checked as it came in.
    pub(super) fn unfence_from(&self, offset: Offset) {
        let mut fenced = self.fenced.borrow_mut();
        fenced.retain(|&first, _| first < offset);
        for last in fenced.values_mut() {
            *last = (*last).min(offset.plus(-1));
        }
    }

    /// The fenced offset ranges, first to last.
    pub fn fenced(&self) -> Vec<(Offset, Offset)> {
        self.fenced.borrow().iter().map(|(&first, &last)| (first, last)).collect()
    }
}
