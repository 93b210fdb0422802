//! Idempotent producers (KIP-98): per partition, the last batches of each producer id,
//! so that a retried batch is answered with its original offset, a gap is refused
//! with OUT_OF_ORDER_SEQUENCE_NUMBER and an old epoch with INVALID_PRODUCER_EPOCH.
//!
//! The state is snapshotted as Kafka's `<offset>.snapshot` files (at each roll, once
//! every batch below the new segment is settled, and at clean shutdown), and rebuilt
//! on open from the newest readable snapshot plus the batches after it, so that it
//! survives restarts, clean or not, however far back a producer last wrote.
//! Producers silent for `producer.id.expiration.ms` are forgotten. As in Kafka 4.x, a
//! producer the partition does not know (new, or expired) may start at any sequence.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use skein_engine::{Batch, Offset};

use crate::refusal::Refusal;
use crate::txn::{marker_of, Transactions};

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
    /// The max timestamp of the producer's latest batch, for expiry (as Kafka).
    #[serde(default)]
    pub last_timestamp: i64,
    /// The epoch of the transaction coordinator that wrote its latest marker: markers
    /// of an older coordinator are refused.
    #[serde(default)]
    pub coordinator_epoch: i32,
}

/// The verdict on an incoming batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Not idempotent, or the next in sequence: append it.
    Append,
    /// Already appended: answer with its original offsets.
    Duplicate(BatchSeq),
    /// Refused.
    Reject(Refusal),
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
    /// Reservations not yet completed or forgotten, by ticket (issue order, which is
    /// the order of their offsets): producer id and first sequence.
    #[serde(skip)]
    outstanding: BTreeMap<u64, (i64, i32)>,
    #[serde(skip)]
    next_ticket: u64,
    /// Open, recently ended and aborted transactions.
    #[serde(default)]
    pub txns: Transactions,
}

/// First line of a snapshot file; the JSON state follows.
const SNAPSHOT_MAGIC: &str = "skein-producer-snapshot v1 crc32c=";

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

/// A producer as DescribeProducers lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerInfo {
    pub producer_id: i64,
    pub epoch: i16,
    /// The last sequence written (-1: none kept).
    pub last_sequence: i32,
    pub last_timestamp: i64,
    pub coordinator_epoch: i32,
    /// The first offset of its open transaction (-1: none).
    pub txn_start_offset: i64,
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
        // A producer with a transaction open here writes only within it (Kafka's
        // ProducerAppendInfo).
        if !batch.is_transactional() && self.txns.is_ongoing(pid) {
            return Check::Reject(Refusal::InvalidTxnState);
        }
        let last = last_seq_of(batch);
        let verdict = match self.producers.get(&pid) {
            // Kafka 4.x accepts any sequence from a producer it has no state for (its
            // batches were deleted, or it expired).
            None => Check::Append,
            Some(entry) if epoch < entry.epoch => Check::Reject(Refusal::InvalidProducerEpoch),
            Some(entry) if epoch > entry.epoch => {
                if first == 0 {
                    Check::Append
                } else {
                    Check::Reject(Refusal::OutOfOrderSequence)
                }
            }
            Some(entry) => {
                if let Some(dup) = entry.batches.iter().find(|b| b.first_seq == first && b.last_seq == last) {
                    if dup.base_offset < 0 {
                        // The original is still being written: retry later.
                        Check::Reject(Refusal::RequestTimedOut)
                    } else {
                        Check::Duplicate(*dup)
                    }
                } else {
                    match entry.batches.back() {
                        Some(latest) if next_seq(latest.last_seq) == first => Check::Append,
                        None if first == 0 => Check::Append,
                        _ => Check::Reject(Refusal::OutOfOrderSequence),
                    }
                }
            }
        };
        if verdict == Check::Append {
            let seq = BatchSeq { first_seq: first, last_seq: last, base_offset: -1, last_offset: -1 };
            self.push(pid, epoch, seq, batch.max_timestamp());
            self.outstanding.insert(self.next_ticket, (pid, first));
            self.next_ticket += 1;
        }
        verdict
    }

    fn push(&mut self, pid: i64, epoch: i16, seq: BatchSeq, timestamp: i64) {
        let entry = self.producers.entry(pid).or_default();
        if epoch != entry.epoch || entry.batches.is_empty() {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        entry.last_timestamp = entry.last_timestamp.max(timestamp);
        entry.batches.push_back(seq);
        while entry.batches.len() > BATCHES_PER_PRODUCER {
            entry.batches.pop_front();
        }
    }

    /// Fills in the offsets of a reserved batch once it is appended.
    pub fn complete(&mut self, pid: i64, first_seq: i32, base_offset: i64, last_offset: i64) {
        self.settle(pid, first_seq);
        if let Some(entry) = self.producers.get_mut(&pid) {
            if let Some(seq) = entry.batches.iter_mut().find(|b| b.first_seq == first_seq && b.base_offset < 0) {
                seq.base_offset = base_offset;
                seq.last_offset = last_offset;
            }
        }
    }

    /// Records a batch found in the log (recovery) or from the leader (a follower).
    pub fn record(&mut self, batch: &Batch) {
        let pid = batch.producer_id();
        if let (true, Some((commit, coordinator_epoch))) = (pid >= 0, marker_of(batch)) {
            let (epoch, offset) = (batch.producer_epoch(), batch.base_offset().0);
            self.end_txn(pid, epoch, coordinator_epoch, offset, commit, batch.max_timestamp());
            return;
        }
        if pid < 0 || batch.base_sequence() < 0 {
            return;
        }
        if batch.is_transactional() {
            self.txns.begin(pid, batch.base_offset().0, true);
        }
        let seq = BatchSeq {
            first_seq: batch.base_sequence(),
            last_seq: last_seq_of(batch),
            base_offset: batch.base_offset().0,
            last_offset: batch.last_offset().0,
        };
        self.push(pid, batch.producer_epoch(), seq, batch.max_timestamp());
    }

    /// Whether `pid` has a transaction open here in `epoch` (Kafka's
    /// `hasOngoingTransaction`): a batch of a later epoch is of the next transaction
    /// (transaction version 2 bumped the epoch) while this one's marker is still to
    /// come, so it must be checked with the coordinator, which holds it back until the
    /// marker is written.
    pub fn in_transaction(&self, pid: i64, epoch: i16) -> bool {
        self.txns.is_ongoing(pid) && self.producers.get(&pid).is_some_and(|entry| entry.epoch == epoch)
    }

    /// Checks a transaction marker before it is written: refused for an epoch older
    /// than the producer's (INVALID_PRODUCER_EPOCH) or from an older coordinator
    /// (TRANSACTION_COORDINATOR_FENCED). A marker of transaction version 2 (`tv2`)
    /// carries the epoch its coordinator bumped, so it must be above the producer's,
    /// or equal for a retry once no transaction is open (Kafka 4.4, KIP-1228).
    ///
    /// # Errors
    /// The Kafka error code.
    pub fn check_marker(&self, pid: i64, epoch: i16, coordinator_epoch: i32, tv2: bool) -> Result<(), Refusal> {
        let Some(entry) = self.producers.get(&pid) else { return Ok(()) };
        let retry = epoch == entry.epoch && (!self.txns.is_ongoing(pid) || epoch == i16::MAX);
        let stale = if tv2 { epoch < entry.epoch || (epoch == entry.epoch && !retry) } else { epoch < entry.epoch };
        if stale {
            Err(Refusal::InvalidProducerEpoch)
        } else if coordinator_epoch < entry.coordinator_epoch {
            Err(Refusal::TransactionCoordinatorFenced)
        } else {
            Ok(())
        }
    }

    /// A marker at `offset` ended `pid`'s transaction; a newer epoch in it (the
    /// coordinator bumped it, fencing the producer) resets the producer's sequences.
    pub fn end_txn(&mut self, pid: i64, epoch: i16, coordinator_epoch: i32, offset: i64, commit: bool, timestamp: i64) {
        let entry = self.producers.entry(pid).or_default();
        if epoch != entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        entry.coordinator_epoch = entry.coordinator_epoch.max(coordinator_epoch);
        entry.last_timestamp = entry.last_timestamp.max(timestamp);
        self.txns.end(pid, offset, commit);
    }

    /// The producers this partition knows, for DescribeProducers, by id.
    pub fn describe(&self) -> Vec<ProducerInfo> {
        let mut all: Vec<_> = self
            .producers
            .iter()
            .map(|(&pid, e)| ProducerInfo {
                producer_id: pid,
                epoch: e.epoch,
                last_sequence: e.batches.back().map_or(-1, |b| b.last_seq),
                last_timestamp: e.last_timestamp,
                coordinator_epoch: e.coordinator_epoch,
                txn_start_offset: self.txns.first_offset(pid).unwrap_or(-1),
            })
            .collect();
        all.sort_unstable_by_key(|p| p.producer_id);
        all
    }

    /// Forgets a batch whose append failed, so that its retry is not a "duplicate".
    pub fn forget(&mut self, pid: i64, first_seq: i32) {
        self.settle(pid, first_seq);
        if let Some(entry) = self.producers.get_mut(&pid) {
            entry.batches.retain(|b| !(b.first_seq == first_seq && b.base_offset < 0));
        }
    }

    fn settle(&mut self, pid: i64, first_seq: i32) {
        if let Some(ticket) = self.outstanding.iter().find(|(_, &r)| r == (pid, first_seq)).map(|(&t, _)| t) {
            self.outstanding.remove(&ticket);
        }
    }

    /// The ticket of the latest reservation (tickets only grow).
    pub fn last_ticket(&self) -> u64 {
        self.next_ticket.wrapping_sub(1)
    }

    /// Whether every reservation up to `ticket` is completed or forgotten: then every
    /// batch appended before it is in the state with its offsets.
    pub fn settled_through(&self, ticket: u64) -> bool {
        self.outstanding.keys().next().is_none_or(|&first| first > ticket)
    }

    /// Forgets producers whose latest batch is older than `expiration_ms` at `now_ms`
    /// (Kafka's `producer.id.expiration.ms`), unless a batch of theirs is in flight.
    /// Returns how many were forgotten.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        let busy: std::collections::HashSet<i64> = self.outstanding.values().map(|&(pid, _)| pid).collect();
        let txns = &self.txns;
        self.producers.retain(|pid, e| {
            busy.contains(pid) || txns.is_ongoing(*pid) || e.last_timestamp.saturating_add(expiration_ms) > now_ms
        });
        before - self.producers.len()
    }

    /// The snapshot of the state of every batch below `offset`, as file bytes: a
    /// header line with the CRC-32C of the JSON body that follows.
    pub fn snapshot_below(&self, offset: Offset) -> Vec<u8> {
        let mut below = ProducerStates::default();
        for (&pid, entry) in &self.producers {
            let batches: VecDeque<BatchSeq> =
                entry.batches.iter().filter(|b| b.base_offset >= 0 && b.last_offset < offset.0).copied().collect();
            if !batches.is_empty() {
                below.producers.insert(pid, ProducerEntry { batches, ..entry.clone() });
            }
        }
        below.txns = self.txns.below(offset.0);
        let body = serde_json::to_vec(&below).expect("producer state always serialises");
        let mut bytes = format!("{SNAPSHOT_MAGIC}{:08x}\n", crc32c::crc32c(&body)).into_bytes();
        bytes.extend_from_slice(&body);
        bytes
    }

    /// Reads a snapshot written by `snapshot_below`.
    ///
    /// # Errors
    /// A message when the header, the CRC or the body is wrong.
    pub fn from_snapshot(bytes: &[u8]) -> Result<ProducerStates, String> {
        let newline = bytes.iter().position(|&b| b == b'\n').ok_or("no header line")?;
        let header = std::str::from_utf8(&bytes[..newline]).map_err(|_| "header is not text")?;
        let crc = header.strip_prefix(SNAPSHOT_MAGIC).ok_or_else(|| format!("unknown header {header:?}"))?;
        let crc = u32::from_str_radix(crc, 16).map_err(|_| format!("bad crc {crc:?}"))?;
        let body = &bytes[newline + 1..];
        if crc32c::crc32c(body) != crc {
            return Err("crc mismatch".into());
        }
        let states: ProducerStates = serde_json::from_slice(body).map_err(|e| format!("bad body: {e}"))?;
        // What `snapshot_below` writes: each producer with settled batches only, at
        // least one. Anything else was not written by it, and is not trusted.
        let made_up =
            states.producers.iter().find(|(_, e)| e.batches.is_empty() || e.batches.iter().any(|b| b.base_offset < 0));
        if let Some((pid, _)) = made_up {
            return Err(format!("producer {pid} has no settled batch"));
        }
        Ok(states)
    }

    /// Drops everything at or after `offset` (log truncation).
    pub fn truncate(&mut self, offset: Offset) {
        for entry in self.producers.values_mut() {
            entry.batches.retain(|b| b.base_offset < offset.0);
        }
        self.producers.retain(|_, e| !e.batches.is_empty());
    }

    /// Forgets producers whose batches all lie below `log_start` (deleted by
    /// retention or DeleteRecords).
    pub fn truncate_head(&mut self, log_start: Offset) {
        let txns = &self.txns;
        self.producers.retain(|pid, e| {
            txns.is_ongoing(*pid) || e.batches.back().is_some_and(|b| b.last_offset >= log_start.0 || b.base_offset < 0)
        });
        self.txns.truncate_head(log_start.0);
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
        // A producer the partition does not know may start at any sequence (Kafka 4.x).
        check(&batch(8, 0, 5, 1, 0), Check::Append);
        check(&batch(7, 0, 0, 3, 0), Check::Append);
        // The next batch is accepted while the first is still being written...
        check(&batch(7, 0, 3, 2, 0), Check::Append);
        // ...and a retry of the first, still in flight, is asked to wait.
        check(&batch(7, 0, 0, 3, 0), Check::Reject(Refusal::RequestTimedOut));
        states.complete(7, 0, 0, 2);
        states.complete(7, 3, 3, 4);
        let mut check = |b: &Batch, expected: Check| assert_eq!(states.check_and_reserve(b), expected);
        check(
            &batch(7, 0, 0, 3, 99),
            Check::Duplicate(BatchSeq { first_seq: 0, last_seq: 2, base_offset: 0, last_offset: 2 }),
        );
        check(&batch(7, 0, 6, 1, 3), Check::Reject(Refusal::OutOfOrderSequence));
        check(
            &batch(7, 0, 3, 2, 9),
            Check::Duplicate(BatchSeq { first_seq: 3, last_seq: 4, base_offset: 3, last_offset: 4 }),
        );
        // A new epoch starts at 0; an old epoch is fenced.
        check(&batch(7, 1, 5, 1, 5), Check::Reject(Refusal::OutOfOrderSequence));
        check(&batch(7, 1, 0, 1, 5), Check::Append);
        check(&batch(7, 0, 5, 1, 6), Check::Reject(Refusal::InvalidProducerEpoch));
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
        assert_eq!(states.check_and_reserve(&batch(7, 1, 0, 1, 50)), Check::Reject(Refusal::OutOfOrderSequence));
        states.truncate(Offset(12));
        assert_eq!(states.check_and_reserve(&batch(7, 1, 2, 1, 12)), Check::Append);
    }

    // Markers: an older epoch is stale; with transaction version 2 the marker's epoch
    // is the coordinator's bump, so its own epoch is stale while the transaction is
    // open and a retry once it is over.
    #[test]
    fn marker_epochs() {
        let mut states = ProducerStates::default();
        states.record(&batch(7, 3, 0, 1, 0));
        assert_eq!(states.check_marker(7, 2, 0, false), Err(Refusal::InvalidProducerEpoch));
        assert_eq!(states.check_marker(7, 3, 0, false), Ok(()));
        let mut txn = batch(7, 3, 1, 1, 1).bytes().to_vec();
        txn[22] |= 0x10;
        skein_engine::batch::testing::fix_crc(&mut txn);
        let txn = Batch::validate(Bytes::from(txn), usize::MAX).unwrap();
        states.record(&txn.with_offset_and_epoch(Offset(1), skein_engine::LeaderEpoch(0)));
        // The open transaction is epoch 3's: a batch of epoch 4 is the next one's.
        assert!(states.in_transaction(7, 3) && !states.in_transaction(7, 4));
        assert_eq!(states.check_marker(7, 3, 0, true), Err(Refusal::InvalidProducerEpoch));
        assert_eq!(states.check_marker(7, 4, 0, true), Ok(()));
        states.end_txn(7, 4, 1, 2, true, 0);
        assert_eq!(states.check_marker(7, 4, 1, true), Ok(()));
        assert_eq!(states.check_marker(7, 4, 0, true), Err(Refusal::TransactionCoordinatorFenced));
        assert_eq!(states.check_and_reserve(&batch(7, 4, 0, 1, 3)), Check::Append);
    }

    // A snapshot holds exactly the settled batches below its offset and reads back;
    // a damaged one is refused.
    #[test]
    fn snapshots() {
        let mut states = ProducerStates::default();
        for (pid, base) in [(1, 0), (2, 1), (1, 2)] {
            let b = batch(pid, 0, if base == 2 { 1 } else { 0 }, 1, base);
            assert_eq!(states.check_and_reserve(&b), Check::Append);
            states.complete(pid, b.base_sequence(), base, base);
        }
        assert_eq!(states.check_and_reserve(&batch(3, 0, 0, 1, 3)), Check::Append);
        let ticket = states.last_ticket();
        assert!(!states.settled_through(ticket), "pid 3 is in flight");
        let restored = ProducerStates::from_snapshot(&states.snapshot_below(Offset(2))).unwrap();
        assert_eq!(restored.len(), 2);
        let mut restored_mut = restored.clone();
        // Below offset 2, pid 1's latest batch is seq 0: its retry is a duplicate there.
        assert!(matches!(restored_mut.check_and_reserve(&batch(1, 0, 0, 1, 9)), Check::Duplicate(_)));
        states.complete(3, 0, 3, 3);
        assert!(states.settled_through(ticket));
        let all = ProducerStates::from_snapshot(&states.snapshot_below(Offset(4))).unwrap();
        assert_eq!(all.len(), 3);
        let mut bytes = states.snapshot_below(Offset(4));
        let last = bytes.len() - 2;
        bytes[last] ^= 1;
        assert!(ProducerStates::from_snapshot(&bytes).unwrap_err().contains("crc"));
        assert!(ProducerStates::from_snapshot(b"garbage").is_err());
        // A body behind a valid CRC that `snapshot_below` never writes (a producer
        // with no batch, one in flight; found by the state_files fuzz target) is
        // refused, not loaded.
        for body in [&b"[\n{\"6\"\t:[0,[\n]]}]"[..], br#"{"producers":{"6":{"epoch":0,"batches":[{"first_seq":0,"last_seq":0,"base_offset":-1,"last_offset":-1}]}}}"#] {
            let mut file = format!("{SNAPSHOT_MAGIC}{:08x}\n", crc32c::crc32c(body)).into_bytes();
            file.extend_from_slice(body);
            let refused = ProducerStates::from_snapshot(&file).unwrap_err();
            assert!(refused.contains("producer 6 has no settled batch"), "{refused}");
        }
    }

    // Producers silent for longer than the expiration are forgotten, unless a batch of
    // theirs is in flight; a forgotten producer may then resume at any sequence.
    #[test]
    fn expiry() {
        let mut states = ProducerStates::default();
        let old = batch(1, 0, 0, 1, 0); // stamped 1_700_000_000_000
        states.record(&old);
        assert_eq!(states.check_and_reserve(&batch(2, 0, 0, 1, 1)), Check::Append);
        assert_eq!(states.expire(1_700_000_001_000, 500), 1, "pid 1 expired, pid 2 is in flight");
        assert_eq!(states.len(), 1);
        assert_eq!(states.check_and_reserve(&batch(1, 0, 7, 1, 2)), Check::Append);
        assert_eq!(states.expire(1_700_000_000_100, 500), 0);
    }

    // Sequence numbers wrap at i32::MAX.
    #[test]
    fn sequence_wraps() {
        assert_eq!(last_seq_of(&batch(1, 0, i32::MAX - 1, 3, 0)), 0);
        assert_eq!(next_seq(i32::MAX), 0);
    }
}
