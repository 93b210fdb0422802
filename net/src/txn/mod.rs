//! The transaction coordinator (KIP-98, KIP-447), as Kafka's `TransactionCoordinator`:
//! a transactional id lives on the shard owning partition `abs(javaHash(id)) % 50` of
//! `__transaction_state`, while this broker leads that partition. Its state
//! (`TxnMeta`) is written there as Kafka's records (`records.rs`) before any answer
//! depends on it, and replayed when the partition is loaded.
//!
//! This module is the state and its rules, with no I/O: each request is decided
//! against the current `TxnMeta` into the state to write and what to answer
//! (`coordinator/txn.rs` writes, answers and sends the markers). A transactional id with
//! a write in flight is `busy`: requests meanwhile get CONCURRENT_TRANSACTIONS, as
//! Kafka's pending state transition.
//!
//! States: Empty -> Ongoing (AddPartitionsToTxn, AddOffsetsToTxn) -> PrepareCommit or
//! PrepareAbort (EndTxn, written before EndTxn is answered) -> CompleteCommit or
//! CompleteAbort (once every partition took its marker) -> Ongoing again.

pub mod calls;
pub mod records;

pub use calls::{TxnAnswer, TxnCall, TxnRequest};

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};

use crate::errors::code;

pub const TRANSACTION_TOPIC: &str = "__transaction_state";
/// Kafka's `transaction.state.log.num.partitions` default.
pub const TRANSACTION_TOPIC_PARTITIONS: i32 = 50;

/// The partition of `__transaction_state` that holds `transactional_id`.
pub fn partition_for(transactional_id: &str) -> i32 {
    crate::group::key_partition(transactional_id, TRANSACTION_TOPIC_PARTITIONS)
}

/// Kafka's `TransactionState`, with its wire ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnState {
    Empty = 0,
    Ongoing = 1,
    PrepareCommit = 2,
    PrepareAbort = 3,
    CompleteCommit = 4,
    CompleteAbort = 5,
    Dead = 6,
    PrepareEpochFence = 7,
}

impl TxnState {
    pub fn from_i8(id: i8) -> Option<TxnState> {
        Some(match id {
            0 => TxnState::Empty,
            1 => TxnState::Ongoing,
            2 => TxnState::PrepareCommit,
            3 => TxnState::PrepareAbort,
            4 => TxnState::CompleteCommit,
            5 => TxnState::CompleteAbort,
            6 => TxnState::Dead,
            7 => TxnState::PrepareEpochFence,
            _ => return None,
        })
    }

    /// The name DescribeTransactions and ListTransactions use.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    fn preparing(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence)
    }
}

/// A transactional id's state: Kafka's `TransactionMetadata`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMeta {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last InitProducerId bump, so that a retried
    /// InitProducerId (KIP-360) is answered with the same epoch; -1 when unknown.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// The partitions in the transaction, `__consumer_offsets` ones included.
    pub partitions: BTreeSet<(String, i32)>,
    pub start_ms: i64,
    pub update_ms: i64,
}

/// Coordinator settings (Kafka's broker configs).
#[derive(Debug, Clone, Copy)]
pub struct TxnSettings {
    /// `transaction.max.timeout.ms`.
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`.
    pub id_expiration_ms: i64,
}

impl Default for TxnSettings {
    fn default() -> Self {
        TxnSettings { max_timeout_ms: 900_000, id_expiration_ms: 604_800_000 }
    }
}

struct Txn {
    meta: TxnMeta,
    partition: i32,
    busy: bool,
}

/// What InitProducerId does to a transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitPlan {
    /// Unknown: a new producer id, epoch 0.
    New,
    /// Write this state (an epoch bump, or a new producer id when the epoch is spent:
    /// `producer_id` is -1 then) and answer with it.
    Bump(TxnMeta),
    /// A retry of the last bump: answer with the current id and epoch.
    Same(TxnMeta),
    /// A transaction is open: abort it in a new epoch (which fences the old
    /// producer); the client retries on CONCURRENT_TRANSACTIONS.
    AbortOpen(TxnMeta),
}

/// What EndTxn does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndPlan {
    /// Write the Prepare state, answer, then send the markers.
    Prepare(TxnMeta),
    /// Already ended this way (a retry): answer at once.
    Done,
}

#[derive(Default)]
pub struct Coordinator {
    txns: RefCell<HashMap<String, Txn>>,
    /// Loaded partitions of `__transaction_state`, with the coordinator epoch (the
    /// partition's leader epoch) markers carry.
    loaded: RefCell<HashMap<i32, i32>>,
    pub settings: Cell<TxnSettings>,
}

impl Coordinator {
    pub fn is_loaded(&self, partition: i32) -> bool {
        self.loaded.borrow().contains_key(&partition)
    }

    pub fn coordinator_epoch(&self, partition: i32) -> Option<i32> {
        self.loaded.borrow().get(&partition).copied()
    }

    pub fn mark_loaded(&self, partition: i32, coordinator_epoch: i32) {
        self.loaded.borrow_mut().insert(partition, coordinator_epoch);
    }

    /// Forgets a partition this broker no longer leads.
    pub fn unload(&self, partition: i32) {
        self.loaded.borrow_mut().remove(&partition);
        self.txns.borrow_mut().retain(|_, t| t.partition != partition);
    }

    /// Takes a record replayed from the log (a tombstone removes the id).
    pub fn replay(&self, partition: i32, id: String, meta: Option<TxnMeta>) {
        let mut txns = self.txns.borrow_mut();
        match meta {
            Some(meta) => {
                txns.insert(id, Txn { meta, partition, busy: false });
            }
            None => {
                txns.remove(&id);
            }
        }
    }

    pub fn get(&self, id: &str) -> Option<TxnMeta> {
        self.txns.borrow().get(id).map(|t| t.meta.clone())
    }

    /// Marks `id` busy for a write; false when it already is (CONCURRENT_TRANSACTIONS).
    pub fn begin_write(&self, id: &str) -> bool {
        match self.txns.borrow_mut().get_mut(id) {
            Some(t) if t.busy => false,
            Some(t) => {
                t.busy = true;
                true
            }
            None => true,
        }
    }

    /// Ends a write: the state written (or, when it failed, `None`: unchanged).
    pub fn end_write(&self, id: &str, partition: i32, written: Option<TxnMeta>) {
        let mut txns = self.txns.borrow_mut();
        match (written, txns.get_mut(id)) {
            (Some(meta), Some(t)) => {
                t.meta = meta;
                t.busy = false;
            }
            (Some(meta), None) => {
                txns.insert(id.to_owned(), Txn { meta, partition, busy: false });
            }
            (None, Some(t)) => t.busy = false,
            (None, None) => {}
        }
    }

    /// Transactional ids of the loaded partitions, with their state.
    pub fn all(&self) -> Vec<(String, TxnMeta)> {
        let mut all: Vec<_> = self.txns.borrow().iter().map(|(id, t)| (id.clone(), t.meta.clone())).collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Transactions open past their timeout at `now_ms`, and ids left in a Prepare
    /// state (their markers are to be sent again), not busy.
    pub fn due(&self, now_ms: i64) -> (Vec<String>, Vec<String>) {
        let txns = self.txns.borrow();
        let mut timed_out = Vec::new();
        let mut expired = Vec::new();
        let expiration = self.settings.get().id_expiration_ms;
        for (id, t) in txns.iter().filter(|(_, t)| !t.busy) {
            let m = &t.meta;
            if m.state == TxnState::Ongoing && m.start_ms.saturating_add(i64::from(m.timeout_ms)) < now_ms {
                timed_out.push(id.clone());
            }
            let idle = matches!(m.state, TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort);
            if idle && m.update_ms.saturating_add(expiration) < now_ms {
                expired.push(id.clone());
            }
        }
        (timed_out, expired)
    }
}

/// InitProducerId for a known or unknown id, with the producer id and epoch the
/// client already has (KIP-360; -1 when none).
///
/// # Errors
/// INVALID_TRANSACTION_TIMEOUT, CONCURRENT_TRANSACTIONS, PRODUCER_FENCED.
pub fn plan_init(
    current: Option<&TxnMeta>,
    timeout_ms: i32,
    max_timeout_ms: i32,
    given: (i64, i16),
    now_ms: i64,
) -> Result<InitPlan, i16> {
    if timeout_ms <= 0 || timeout_ms > max_timeout_ms {
        return Err(code::INVALID_TRANSACTION_TIMEOUT);
    }
    let Some(m) = current else { return Ok(InitPlan::New) };
    if m.state.preparing() {
        return Err(code::CONCURRENT_TRANSACTIONS);
    }
    let (given_pid, given_epoch) = given;
    if given_pid >= 0 {
        let retry = given_pid == m.producer_id && given_epoch == m.last_producer_epoch && m.state == TxnState::Empty;
        if retry {
            return Ok(InitPlan::Same(m.clone()));
        }
        if given_pid != m.producer_id || given_epoch != m.producer_epoch {
            return Err(code::PRODUCER_FENCED);
        }
    }
    let mut next = m.clone();
    next.last_producer_epoch = m.producer_epoch;
    next.timeout_ms = timeout_ms;
    next.update_ms = now_ms;
    if m.state == TxnState::Ongoing {
        next.producer_epoch = bumped(m.producer_epoch);
        next.state = TxnState::PrepareAbort;
        return Ok(InitPlan::AbortOpen(next));
    }
    next.state = TxnState::Empty;
    next.partitions.clear();
    next.start_ms = -1;
    if m.producer_epoch >= i16::MAX - 1 {
        // The epoch is spent: a new producer id starts at epoch 0.
        next.producer_id = -1;
        next.producer_epoch = 0;
        next.last_producer_epoch = -1;
    } else {
        next.producer_epoch = m.producer_epoch + 1;
    }
    Ok(InitPlan::Bump(next))
}

fn bumped(epoch: i16) -> i16 {
    epoch.saturating_add(1).min(i16::MAX - 1)
}

/// The producer's id and epoch checked against the state, as every transactional
/// request after InitProducerId is.
fn check_producer(m: &TxnMeta, producer_id: i64, epoch: i16) -> Result<(), i16> {
    if producer_id != m.producer_id {
        return Err(code::INVALID_PRODUCER_ID_MAPPING);
    }
    if epoch != m.producer_epoch {
        return Err(code::PRODUCER_FENCED);
    }
    Ok(())
}

/// KIP-890's check of a transactional write (a produce, a TxnOffsetCommit): the
/// transaction of this producer is open and holds `partitions`.
///
/// # Errors
/// INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, INVALID_TXN_STATE.
pub fn plan_verify(
    current: Option<&TxnMeta>,
    producer_id: i64,
    epoch: i16,
    partitions: &[(String, i32)],
) -> Result<(), i16> {
    let m = current.ok_or(code::INVALID_PRODUCER_ID_MAPPING)?;
    check_producer(m, producer_id, epoch)?;
    if m.state != TxnState::Ongoing || !partitions.iter().all(|p| m.partitions.contains(p)) {
        return Err(code::INVALID_TXN_STATE);
    }
    Ok(())
}

/// Kafka answers PRODUCER_FENCED (KIP-588) only to request versions that know it;
/// older ones get INVALID_PRODUCER_EPOCH.
pub fn fenced_for(error: i16, knows_fenced: bool) -> i16 {
    if error == code::PRODUCER_FENCED && !knows_fenced {
        code::INVALID_PRODUCER_EPOCH
    } else {
        error
    }
}

/// AddPartitionsToTxn / AddOffsetsToTxn: the state with `partitions` in the open
/// transaction, or `None` when nothing changes (already in it).
///
/// # Errors
/// INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS.
pub fn plan_add(
    current: Option<&TxnMeta>,
    producer_id: i64,
    epoch: i16,
    partitions: &[(String, i32)],
    now_ms: i64,
) -> Result<Option<TxnMeta>, i16> {
    let m = current.ok_or(code::INVALID_PRODUCER_ID_MAPPING)?;
    check_producer(m, producer_id, epoch)?;
    if m.state.preparing() || m.state == TxnState::Dead {
        return Err(code::CONCURRENT_TRANSACTIONS);
    }
    if m.state == TxnState::Ongoing && partitions.iter().all(|p| m.partitions.contains(p)) {
        return Ok(None);
    }
    let mut next = m.clone();
    if m.state != TxnState::Ongoing {
        next.partitions.clear();
        next.start_ms = now_ms;
    }
    next.state = TxnState::Ongoing;
    next.partitions.extend(partitions.iter().cloned());
    next.update_ms = now_ms;
    Ok(Some(next))
}

/// EndTxn: commit (or abort) the open transaction.
///
/// # Errors
/// INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS,
/// INVALID_TXN_STATE.
pub fn plan_end(
    current: Option<&TxnMeta>,
    producer_id: i64,
    epoch: i16,
    commit: bool,
    now_ms: i64,
) -> Result<EndPlan, i16> {
    let m = current.ok_or(code::INVALID_PRODUCER_ID_MAPPING)?;
    check_producer(m, producer_id, epoch)?;
    match (m.state, commit) {
        (TxnState::Ongoing, _) => {
            let mut next = m.clone();
            next.state = if commit { TxnState::PrepareCommit } else { TxnState::PrepareAbort };
            next.update_ms = now_ms;
            Ok(EndPlan::Prepare(next))
        }
        (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => Ok(EndPlan::Done),
        (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => Err(code::CONCURRENT_TRANSACTIONS),
        (TxnState::PrepareEpochFence, _) => Err(code::CONCURRENT_TRANSACTIONS),
        _ => Err(code::INVALID_TXN_STATE),
    }
}

/// The state once every marker of a Prepare state is written.
pub fn completed(m: &TxnMeta, now_ms: i64) -> TxnMeta {
    let mut next = m.clone();
    next.state = match m.state {
        TxnState::PrepareCommit => TxnState::CompleteCommit,
        _ => TxnState::CompleteAbort,
    };
    next.partitions.clear();
    next.update_ms = now_ms;
    next
}

/// The state that aborts an open transaction past its timeout, in a new epoch so
/// that its producer is fenced.
pub fn timed_out(m: &TxnMeta, now_ms: i64) -> TxnMeta {
    let mut next = m.clone();
    next.last_producer_epoch = -1;
    next.producer_epoch = bumped(m.producer_epoch);
    next.state = TxnState::PrepareAbort;
    next.update_ms = now_ms;
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(state: TxnState, epoch: i16) -> TxnMeta {
        TxnMeta {
            producer_id: 7,
            producer_epoch: epoch,
            last_producer_epoch: -1,
            timeout_ms: 60_000,
            state,
            partitions: BTreeSet::new(),
            start_ms: -1,
            update_ms: 0,
        }
    }

    // Kafka's transitions and error codes, state by state.
    #[test]
    fn transitions() {
        let max = 900_000;
        assert_eq!(plan_init(None, 1_000_000, max, (-1, -1), 0), Err(code::INVALID_TRANSACTION_TIMEOUT));
        assert_eq!(plan_init(None, 60_000, max, (-1, -1), 0), Ok(InitPlan::New));
        let empty = meta(TxnState::Empty, 0);
        let Ok(InitPlan::Bump(bumped)) = plan_init(Some(&empty), 60_000, max, (-1, -1), 5) else { panic!() };
        assert_eq!((bumped.producer_epoch, bumped.last_producer_epoch), (1, 0));
        // A retried bump (KIP-360) gets the same epoch; a stale one is fenced.
        assert_eq!(plan_init(Some(&bumped), 60_000, max, (7, 0), 6), Ok(InitPlan::Same(bumped.clone())));
        assert_eq!(plan_init(Some(&bumped), 60_000, max, (7, 5), 6), Err(code::PRODUCER_FENCED));
        // An open transaction is aborted in a new epoch first.
        let ongoing = plan_add(Some(&bumped), 7, 1, &[("t".into(), 0)], 10).unwrap().unwrap();
        assert_eq!((ongoing.state, ongoing.start_ms), (TxnState::Ongoing, 10));
        assert_eq!(plan_add(Some(&ongoing), 7, 1, &[("t".into(), 0)], 11), Ok(None));
        assert_eq!(plan_add(Some(&ongoing), 7, 0, &[], 11), Err(code::PRODUCER_FENCED));
        assert_eq!(plan_add(Some(&ongoing), 8, 1, &[], 11), Err(code::INVALID_PRODUCER_ID_MAPPING));
        let Ok(InitPlan::AbortOpen(aborting)) = plan_init(Some(&ongoing), 60_000, max, (-1, -1), 12) else { panic!() };
        assert_eq!((aborting.state, aborting.producer_epoch), (TxnState::PrepareAbort, 2));
        assert_eq!(plan_init(Some(&aborting), 60_000, max, (-1, -1), 13), Err(code::CONCURRENT_TRANSACTIONS));
        // EndTxn: prepare, retries, wrong outcomes.
        let Ok(EndPlan::Prepare(prepared)) = plan_end(Some(&ongoing), 7, 1, true, 20) else { panic!() };
        assert_eq!(plan_end(Some(&prepared), 7, 1, true, 21), Err(code::CONCURRENT_TRANSACTIONS));
        assert_eq!(plan_add(Some(&prepared), 7, 1, &[], 21), Err(code::CONCURRENT_TRANSACTIONS));
        let done = completed(&prepared, 22);
        assert_eq!((done.state, done.partitions.len()), (TxnState::CompleteCommit, 0));
        assert_eq!(plan_end(Some(&done), 7, 1, true, 23), Ok(EndPlan::Done));
        assert_eq!(plan_end(Some(&done), 7, 1, false, 23), Err(code::INVALID_TXN_STATE));
        assert_eq!(plan_end(Some(&bumped), 7, 1, true, 23), Err(code::INVALID_TXN_STATE));
        assert_eq!(plan_end(None, 7, 1, true, 23), Err(code::INVALID_PRODUCER_ID_MAPPING));
        // A spent epoch gets a new producer id.
        let spent = meta(TxnState::CompleteAbort, i16::MAX - 1);
        let Ok(InitPlan::Bump(fresh)) = plan_init(Some(&spent), 60_000, max, (-1, -1), 30) else { panic!() };
        assert_eq!((fresh.producer_id, fresh.producer_epoch), (-1, 0));
        assert_eq!(timed_out(&ongoing, 40).producer_epoch, 2);
    }

    // The same partition as Kafka's `Utils.abs(id.hashCode) % 50`.
    #[test]
    fn partitions_match_kafka() {
        assert_eq!(
            partition_for("my-txn"),
            (("my-txn".chars().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))) & 0x7fff_ffff) % 50
        );
    }
}
