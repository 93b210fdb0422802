//! Idempotent producers (KIP-98): per partition, the last batches of each producer id,
//! so that a retried batch is answered with its original offset, a gap is refused
//! with OUT_OF_ORDER_SEQUENCE_NUMBER and an old epoch with INVALID_PRODUCER_EPOCH.
//!
//! The state is rebuilt from the log on open (batches carry producer id, epoch and
//! sequence), from the snapshot written at clean shutdown onward, so it survives
//! restarts, clean or not.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use skein_engine::{Batch, Offset};

use crate::errors::code;

/// Batches remembered per producer, as Kafka (and max.in.flight=5) assume.
pub const BATCHES_PER_PRODUCER: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchSeq {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: i64,
    pub last_offset: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerEntry {
    pub epoch: i16,
    pub batches: VecDeque<BatchSeq>,
}

/// The verdict on an incoming batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Not idempotent, or the next in sequence: append it.
    Append,
    /// Already appended: answer with its original offsets.
    Duplicate(BatchSeq),
    /// Refused with this Kafka error code.
    Reject(i16),
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
}

fn last_seq_of(batch: &Batch) -> i32 {
    // Sequences wrap at i32::MAX, as in Kafka's DefaultRecordBatch.incrementSequence.
    let delta = batch.last_offset_delta();
    let first = batch.base_sequence();
    if first > i32::MAX - delta {
        delta - (i32::MAX - first) - 1
    } else {
        first + delta
    }
}

fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

impl ProducerStates {
    /// Checks a batch before it is appended and, when it is to be appended, reserves
    /// its sequence range at once: the producer's next batch may be checked while this
    /// one is still being written (max.in.flight up to 5). `complete` fills in the
    /// offsets, `forget` releases the reservation when the append fails.
    pub fn check_and_reserve(&mut self, batch: &Batch) -> Check {
        let pid = batch.producer_id();
        if pid < 0 || batch.base_sequence() < 0 {
            return Check::Append;
        }
        let (epoch, first) = (batch.producer_epoch(), batch.base_sequence());
        let last = last_seq_of(batch);
        let verdict = match self.producers.get(&pid) {
            None => {
                if first == 0 {
                    Check::Append
                } else {
                    Check::Reject(code::OUT_OF_ORDER_SEQUENCE_NUMBER)
                }
            }
            Some(entry) if epoch < entry.epoch => Check::Reject(code::INVALID_PRODUCER_EPOCH),
            Some(entry) if epoch > entry.epoch => {
                if first == 0 {
                    Check::Append
                } else {
                    Check::Reject(code::OUT_OF_ORDER_SEQUENCE_NUMBER)
                }
            }
            Some(entry) => {
                if let Some(dup) = entry.batches.iter().find(|b| b.first_seq == first && b.last_seq == last) {
                    if dup.base_offset < 0 {
                        // The original is still being written: retry later.
                        Check::Reject(code::REQUEST_TIMED_OUT)
                    } else {
                        Check::Duplicate(*dup)
                    }
                } else {
                    match entry.batches.back() {
                        Some(latest) if next_seq(latest.last_seq) == first => Check::Append,
                        None if first == 0 => Check::Append,
                        _ => Check::Reject(code::OUT_OF_ORDER_SEQUENCE_NUMBER),
                    }
                }
            }
        };
        if verdict == Check::Append {
            self.push(pid, epoch, BatchSeq { first_seq: first, last_seq: last, base_offset: -1, last_offset: -1 });
        }
        verdict
    }

    fn push(&mut self, pid: i64, epoch: i16, seq: BatchSeq) {
        let entry = self.producers.entry(pid).or_default();
        if epoch != entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        entry.batches.push_back(seq);
        while entry.batches.len() > BATCHES_PER_PRODUCER {
            entry.batches.pop_front();
        }
    }

    /// Fills in the offsets of a reserved batch once it is appended.
    pub fn complete(&mut self, pid: i64, first_seq: i32, base_offset: i64, last_offset: i64) {
        if let Some(entry) = self.producers.get_mut(&pid) {
            if let Some(seq) = entry.batches.iter_mut().find(|b| b.first_seq == first_seq && b.base_offset < 0) {
                seq.base_offset = base_offset;
                seq.last_offset = last_offset;
            }
        }
    }

    /// Records a batch found in the log (recovery).
    pub fn record(&mut self, batch: &Batch) {
        let pid = batch.producer_id();
        if pid < 0 || batch.base_sequence() < 0 {
            return;
        }
        let seq = BatchSeq {
            first_seq: batch.base_sequence(),
            last_seq: last_seq_of(batch),
            base_offset: batch.base_offset().0,
            last_offset: batch.last_offset().0,
        };
        self.push(pid, batch.producer_epoch(), seq);
    }

    /// Forgets a batch whose append failed, so that its retry is not a "duplicate".
    pub fn forget(&mut self, pid: i64, first_seq: i32) {
        if let Some(entry) = self.producers.get_mut(&pid) {
            entry.batches.retain(|b| b.first_seq != first_seq);
        }
    }

    /// Drops everything at or after `offset` (log truncation).
    pub fn truncate(&mut self, offset: Offset) {
        for entry in self.producers.values_mut() {
            entry.batches.retain(|b| b.base_offset < offset.0);
        }
        self.producers.retain(|_, e| !e.batches.is_empty());
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn batch(pid: i64, epoch: i16, first_seq: i32, count: i32, base: i64) -> Batch {
        let mut bytes = skein_engine::batch::testing::batch(count, 10).to_vec();
        bytes[43..51].copy_from_slice(&pid.to_be_bytes());
        bytes[51..53].copy_from_slice(&epoch.to_be_bytes());
        bytes[53..57].copy_from_slice(&first_seq.to_be_bytes());
        skein_engine::batch::testing::fix_crc(&mut bytes);
        Batch::validate(Bytes::from(bytes), usize::MAX)
            .unwrap()
            .with_offset_and_epoch(Offset(base), skein_engine::LeaderEpoch(0))
    }

    // The sequence rules of KIP-98: in order, duplicates, gaps, fencing, new epochs.
    #[test]
    fn sequence_rules() {
        let mut states = ProducerStates::default();
        let mut check = |b: &Batch, expected: Check| assert_eq!(states.check_and_reserve(b), expected);
        check(&batch(7, 0, 5, 1, 0), Check::Reject(code::OUT_OF_ORDER_SEQUENCE_NUMBER));
        check(&batch(7, 0, 0, 3, 0), Check::Append);
        // The next batch is accepted while the first is still being written...
        check(&batch(7, 0, 3, 2, 0), Check::Append);
        // ...and a retry of the first, still in flight, is asked to wait.
        check(&batch(7, 0, 0, 3, 0), Check::Reject(code::REQUEST_TIMED_OUT));
        states.complete(7, 0, 0, 2);
        states.complete(7, 3, 3, 4);
        let mut check = |b: &Batch, expected: Check| assert_eq!(states.check_and_reserve(b), expected);
        check(
            &batch(7, 0, 0, 3, 99),
            Check::Duplicate(BatchSeq { first_seq: 0, last_seq: 2, base_offset: 0, last_offset: 2 }),
        );
        check(&batch(7, 0, 6, 1, 3), Check::Reject(code::OUT_OF_ORDER_SEQUENCE_NUMBER));
        check(
            &batch(7, 0, 3, 2, 9),
            Check::Duplicate(BatchSeq { first_seq: 3, last_seq: 4, base_offset: 3, last_offset: 4 }),
        );
        // A new epoch starts at 0; an old epoch is fenced.
        check(&batch(7, 1, 5, 1, 5), Check::Reject(code::OUT_OF_ORDER_SEQUENCE_NUMBER));
        check(&batch(7, 1, 0, 1, 5), Check::Append);
        check(&batch(7, 0, 5, 1, 6), Check::Reject(code::INVALID_PRODUCER_EPOCH));
        // Non-idempotent batches are always appended.
        check(&batch(-1, -1, -1, 1, 6), Check::Append);
        // A failed append is forgotten, so its retry is appended, not a duplicate.
        check(&batch(7, 1, 1, 1, 6), Check::Append);
        states.forget(7, 1);
        assert_eq!(states.check_and_reserve(&batch(7, 1, 1, 1, 6)), Check::Append);
        // Only the last five batches are remembered; recovery records batches from the log.
        let mut states = ProducerStates::default();
        for i in 0..6 {
            states.record(&batch(7, 1, i, 1, 10 + i as i64));
        }
        assert_eq!(states.check_and_reserve(&batch(7, 1, 0, 1, 50)), Check::Reject(code::OUT_OF_ORDER_SEQUENCE_NUMBER));
        states.truncate(Offset(12));
        assert_eq!(states.check_and_reserve(&batch(7, 1, 2, 1, 12)), Check::Append);
    }

    // Sequence numbers wrap at i32::MAX.
    #[test]
    fn sequence_wraps() {
        assert_eq!(last_seq_of(&batch(1, 0, i32::MAX - 1, 3, 0)), 0);
        assert_eq!(next_seq(i32::MAX), 0);
    }
}
