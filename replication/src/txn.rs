//! Transactions at a partition (KIP-98), as Kafka's `ProducerStateManager` keeps them:
//! the open transactions with the offset of their first batch here, the ones a marker
//! ended that the high watermark has not passed yet, and the aborted ones, which
//! read_committed consumers are told about so that they drop those records.
//!
//! The last stable offset (LSO) is the smallest first offset of a transaction not yet
//! known to be complete on every in-sync replica, bounded by the high watermark:
//! read_committed consumers read below it only.
//!
//! The state lives in the producer snapshots (`ProducerStates`), so a restart keeps
//! the open transactions and the aborted ones whose markers are still in the log.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use skein_engine::records::{BatchProducer, Compression, Record};
use skein_engine::Batch;

/// A transaction aborted at this partition: its producer, its first record here and
/// its ABORT marker. Kafka's `AbortedTxn` (the `.txnindex` entry) and what Fetch's
/// `aborted_transactions` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    /// The last stable offset once it ended (Kafka's `.txnindex` keeps it).
    #[serde(default)]
    pub last_stable_offset: i64,
}

/// A transaction a marker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CompletedTxn {
    producer_id: i64,
    first_offset: i64,
    last_offset: i64,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transactions {
    /// Open transactions by producer id: the offset of their first batch here.
    ongoing: BTreeMap<i64, i64>,
    /// Open transactions whose first batch is still being written: their first offset
    /// is the log end when it was admitted, at or below where it lands.
    #[serde(skip)]
    provisional: BTreeSet<i64>,
    /// Transactions ended since the last snapshot point, in marker order (so those
    /// past an offset are a suffix, those below it a prefix): they hold the LSO back
    /// until the high watermark passes their marker, and a snapshot taken below their
    /// marker shows them open.
    #[serde(skip)]
    completed: VecDeque<CompletedTxn>,
    /// Aborted transactions whose markers are in the log, in marker order.
    aborted: Vec<AbortedTxn>,
}

impl Transactions {
    /// A transactional batch of `producer_id` admitted at `first_offset` (exact when
    /// the batch is in the log, the log end when it is being written).
    pub fn begin(&mut self, producer_id: i64, first_offset: i64, exact: bool) {
        if self.ongoing.contains_key(&producer_id) {
            return;
        }
        self.ongoing.insert(producer_id, first_offset);
        if !exact {
            self.provisional.insert(producer_id);
        }
    }

    /// The batch that opened `producer_id`'s transaction landed at `base_offset`.
    pub fn landed(&mut self, producer_id: i64, base_offset: i64) {
        if self.provisional.remove(&producer_id) {
            self.ongoing.insert(producer_id, base_offset);
        }
    }

    pub fn is_ongoing(&self, producer_id: i64) -> bool {
        self.ongoing.contains_key(&producer_id)
    }

    /// The first offset of `producer_id`'s open transaction.
    pub fn first_offset(&self, producer_id: i64) -> Option<i64> {
        self.ongoing.get(&producer_id).copied()
    }

    /// A marker at `marker_offset` ended `producer_id`'s transaction. A transaction
    /// with no record here starts at its marker, as in Kafka.
    pub fn end(&mut self, producer_id: i64, marker_offset: i64, commit: bool) {
        self.provisional.remove(&producer_id);
        let first_offset = self.ongoing.remove(&producer_id).unwrap_or(marker_offset);
        // Markers of different producers may settle out of offset order: kept sorted.
        let at = self.completed.partition_point(|t| t.last_offset < marker_offset);
        self.completed.insert(at, CompletedTxn { producer_id, first_offset, last_offset: marker_offset });
        if !commit {
            let last_stable_offset = self.ongoing.values().copied().min().unwrap_or(marker_offset + 1);
            self.aborted.push(AbortedTxn { producer_id, first_offset, last_offset: marker_offset, last_stable_offset });
        }
    }

    /// The smallest first offset of a transaction that is open, or whose marker is at
    /// or past `high_watermark` (not yet on every in-sync replica).
    pub fn first_unstable_offset(&self, high_watermark: i64) -> Option<i64> {
        let open = self.ongoing.values().copied();
        // Asked at every fetch and high watermark move: only the suffix is read.
        let unreplicated =
            self.completed.iter().rev().take_while(|t| t.last_offset >= high_watermark).map(|t| t.first_offset);
        open.chain(unreplicated).min()
    }

    /// The aborted transactions a read from `from` up to `upper` (exclusive) may hold
    /// records of, as Kafka's `collectAbortedTxns`.
    pub fn aborted_between(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        self.aborted.iter().filter(|t| t.last_offset >= from && t.first_offset < upper).copied().collect()
    }

    /// Forgets completed transactions whose markers lie below `below` (no snapshot
    /// will be taken below it, and the high watermark passed them).
    pub fn prune_completed(&mut self, below: i64) {
        let cut = self.completed.partition_point(|t| t.last_offset < below);
        self.completed.drain(..cut);
    }

    /// Forgets aborted transactions whose markers the log no longer holds.
    pub fn truncate_head(&mut self, log_start: i64) {
        self.aborted.retain(|t| t.last_offset >= log_start);
        self.completed.retain(|t| t.last_offset >= log_start);
    }

    /// The state as it was below offset `at`: transactions that began below it and
    /// ended at or past it are open there.
    pub fn below(&self, at: i64) -> Transactions {
        let mut ongoing: BTreeMap<i64, i64> =
            self.ongoing.iter().filter(|(_, &first)| first < at).map(|(&p, &f)| (p, f)).collect();
        for t in self.completed.iter().filter(|t| t.first_offset < at && t.last_offset >= at) {
            ongoing.insert(t.producer_id, t.first_offset);
        }
        let aborted = self.aborted.iter().filter(|t| t.last_offset < at).copied().collect();
        Transactions { ongoing, provisional: BTreeSet::new(), completed: VecDeque::new(), aborted }
    }

    /// Open transactions: (producer id, first offset).
    pub fn open(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.ongoing.iter().map(|(&p, &f)| (p, f))
    }

    pub fn aborted_len(&self) -> usize {
        self.aborted.len()
    }
}

/// What the log cleaner sees of a partition's transactions: the aborted ones, whose
/// records it removes, and the first open one, where it stops.
pub struct CleanerView(pub std::rc::Rc<std::cell::RefCell<crate::producer::ProducerStates>>);

impl skein_engine::log::Transactions for CleanerView {
    fn aborted(&self) -> Vec<skein_engine::log::AbortedRange> {
        let producers = self.0.borrow();
        producers
            .txns
            .aborted
            .iter()
            .map(|t| skein_engine::log::AbortedRange {
                producer_id: t.producer_id,
                first_offset: skein_engine::Offset(t.first_offset),
                last_offset: skein_engine::Offset(t.last_offset),
                last_stable_offset: skein_engine::Offset(t.last_stable_offset),
            })
            .collect()
    }

    fn first_unstable(&self) -> Option<skein_engine::Offset> {
        self.0.borrow().txns.ongoing.values().min().map(|&first| skein_engine::Offset(first))
    }
}

/// Kafka's control record type of a transaction marker.
const ABORT: i16 = 0;
const COMMIT: i16 = 1;

/// A transaction marker for `producer_id` in `epoch`, written by the partition leader
/// when the coordinator ends a transaction: a control batch with one record whose key
/// is (version 0, COMMIT or ABORT) and whose value is (version 0, the coordinator's
/// epoch), as Kafka's `EndTransactionMarker`.
pub fn marker_batch(producer_id: i64, epoch: i16, coordinator_epoch: i32, commit: bool, now_ms: i64) -> Batch {
    let kind = if commit { COMMIT } else { ABORT };
    let mut key = Vec::with_capacity(4);
    key.extend_from_slice(&0i16.to_be_bytes());
    key.extend_from_slice(&kind.to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    let record = Record { key: Some(Bytes::from(key)), value: Some(Bytes::from(value)), ..Default::default() };
    let producer = BatchProducer { id: producer_id, epoch, base_sequence: -1, transactional: true, control: true };
    let bytes = skein_engine::records::build_batch_for(0, now_ms, Compression::None, &[record], producer);
    Batch::validate(Bytes::from(bytes), usize::MAX).expect("a marker batch is well formed")
}

/// What a control batch marks: COMMIT (true) or ABORT (false), with the coordinator
/// epoch that wrote it; `None` for anything else (an unknown control type is skipped,
/// as Kafka skips it).
pub fn marker_of(batch: &Batch) -> Option<(bool, i32)> {
    if !batch.is_control() {
        return None;
    }
    let records = skein_engine::records::decode_records(&batch.bytes(), 1 << 16).ok()?;
    let record = records.first()?;
    let key = record.key.as_ref()?;
    if key.len() < 4 {
        return None;
    }
    let coordinator_epoch = match record.value.as_deref() {
        Some(v) if v.len() >= 6 => i32::from_be_bytes([v[2], v[3], v[4], v[5]]),
        _ => -1,
    };
    match i16::from_be_bytes([key[2], key[3]]) {
        COMMIT => Some((true, coordinator_epoch)),
        ABORT => Some((false, coordinator_epoch)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The LSO stops at the first open transaction, and at a completed one until the
    // high watermark passes its marker; aborted ones are listed for the reads that
    // overlap them.
    #[test]
    fn last_stable_offset_and_aborted_list() {
        let mut txns = Transactions::default();
        txns.begin(7, 10, false);
        txns.landed(7, 12);
        txns.begin(8, 15, true);
        assert_eq!(txns.first_unstable_offset(20), Some(12));
        txns.end(7, 18, false);
        assert_eq!(txns.first_unstable_offset(18), Some(12), "the abort marker is not replicated yet");
        assert_eq!(txns.first_unstable_offset(19), Some(15));
        txns.end(8, 20, true);
        assert_eq!(txns.first_unstable_offset(21), None);
        let aborted = AbortedTxn { producer_id: 7, first_offset: 12, last_offset: 18, last_stable_offset: 15 };
        assert_eq!(txns.aborted_between(0, 13), vec![aborted]);
        assert!(txns.aborted_between(19, 30).is_empty());
        assert!(txns.aborted_between(0, 12).is_empty());
        // Below 16, pid 7 and 8 were open; below 19, only 8 (7 aborted at 18).
        let below = txns.below(16);
        assert_eq!(below.open().collect::<Vec<_>>(), vec![(7, 12), (8, 15)]);
        assert_eq!(below.aborted_len(), 0);
        let below = txns.below(19);
        assert_eq!(below.open().collect::<Vec<_>>(), vec![(8, 15)]);
        assert_eq!(below.aborted_len(), 1);
        txns.truncate_head(19);
        assert_eq!(txns.aborted_len(), 0);
        // Markers settling out of offset order still hold the LSO where they should.
        txns.begin(9, 30, true);
        txns.begin(10, 31, true);
        txns.end(10, 41, true);
        txns.end(9, 40, true);
        assert_eq!(txns.first_unstable_offset(41), Some(31));
        txns.prune_completed(41);
        assert_eq!(txns.first_unstable_offset(41), Some(31), "the unreplicated marker is kept");
        txns.prune_completed(42);
        assert_eq!(txns.first_unstable_offset(42), None);
    }

    // A marker reads back as what it marks.
    #[test]
    fn markers() {
        let commit = marker_batch(5, 2, 9, true, 1_700_000_000_000);
        assert!(commit.is_control() && commit.is_transactional());
        assert_eq!((commit.producer_id(), commit.producer_epoch(), commit.base_sequence()), (5, 2, -1));
        assert_eq!(marker_of(&commit), Some((true, 9)));
        assert_eq!(marker_of(&marker_batch(5, 2, 9, false, 0)), Some((false, 9)));
    }
}
