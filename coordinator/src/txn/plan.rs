//! The transaction coordinator's rules, as Kafka 4.4's `TransactionCoordinator` and
//! `TransactionMetadata`: each request is decided against the current `TxnMeta` into a
//! `Transit` (the state to write) or an error code, with no I/O.
//!
//! Transaction version 2 (KIP-890 part 2; EndTxn v5, Produce v12, TxnOffsetCommit v5)
//! bumps the producer epoch at each Prepare: the markers carry the new epoch, EndTxn
//! answers it, and a retried EndTxn in the old epoch is told it succeeded. When the
//! epoch is spent, the Prepare takes a next producer id, which the completed state
//! hands over at epoch 0.

use skein_control::errors::code;

use super::calls::ProducerIdAndEpoch;
use super::{TxnMeta, TxnState};

/// Kafka's `TransactionMetadata.isEpochExhausted`: from this epoch on, the next bump
/// takes a new producer id.
const EXHAUSTED_EPOCH: i16 = i16::MAX - 1;

fn is_exhausted(epoch: i16) -> bool {
    epoch >= EXHAUSTED_EPOCH
}

/// A producer id to allocate before a `Transit` is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdSlot {
    /// The id in use (a new id at epoch 0, InitProducerId at a spent epoch).
    Current,
    /// The id the completed transaction hands over to (transaction version 2).
    Next,
}

/// A state to write, and the producer id to allocate into it first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transit {
    pub meta: TxnMeta,
    pub allocate: Option<IdSlot>,
}

impl Transit {
    fn write(meta: TxnMeta) -> Transit {
        Transit { meta, allocate: None }
    }

    /// The state with `producer_id` allocated into its slot.
    pub fn with_producer_id(mut self, producer_id: i64) -> TxnMeta {
        match self.allocate {
            Some(IdSlot::Current) => self.meta.producer_id = producer_id,
            Some(IdSlot::Next) => self.meta.next_producer_id = producer_id,
            None => {}
        }
        self.meta
    }
}

/// What InitProducerId does to a transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitPlan {
    /// Write this state (a new id's at epoch 0, an epoch bump, the same epoch for a
    /// retry, or a new producer id when the epoch is spent) and answer with it.
    Write(Transit),
    /// A transaction is open: abort it in a new epoch (which fences the old
    /// producer); the client retries on CONCURRENT_TRANSACTIONS.
    AbortOpen(Transit),
}

/// What EndTxn does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndPlan {
    /// Write the Prepare state, send the markers, answer with the producer id and
    /// epoch of the completed state.
    Prepare(Transit),
    /// Already ended this way (a retry): answer at once, with these.
    Done(ProducerIdAndEpoch),
}

/// A copy of `m` to change: every change of state remembers the producer id it
/// leaves (Kafka's `prepareTransitionTo`).
fn transit(m: &TxnMeta) -> TxnMeta {
    TxnMeta { previous_producer_id: m.producer_id, ..m.clone() }
}

/// InitProducerId for a known or unknown id, with the producer id and epoch the
/// client already has (KIP-360; -1 when none). An open transaction is aborted in the
/// transaction version finalized now (`tv2`).
///
/// # Errors
/// INVALID_TRANSACTION_TIMEOUT, CONCURRENT_TRANSACTIONS, PRODUCER_FENCED.
pub fn plan_init(
    current: Option<&TxnMeta>,
    timeout_ms: i32,
    max_timeout_ms: i32,
    given: (i64, i16),
    tv2: bool,
    now_ms: i64,
) -> Result<InitPlan, i16> {
    if timeout_ms <= 0 || timeout_ms > max_timeout_ms {
        return Err(code::INVALID_TRANSACTION_TIMEOUT);
    }
    let Some(m) = current else {
        // An unknown id: a new producer id at epoch 0.
        let meta = TxnMeta {
            producer_id: -1,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: 0,
            last_producer_epoch: -1,
            timeout_ms,
            state: TxnState::Empty,
            partitions: Default::default(),
            start_ms: -1,
            update_ms: now_ms,
            client_version: 0,
        };
        return Ok(InitPlan::Write(Transit { meta, allocate: Some(IdSlot::Current) }));
    };
    if m.state.preparing() {
        return Err(code::CONCURRENT_TRANSACTIONS);
    }
    let (given_pid, given_epoch) = given;
    let expected = given_pid >= 0;
    // Kafka's `isValidProducerId`: the id in use, or the one a spent epoch left.
    let known_id = m.producer_epoch < 0
        || given_pid == m.producer_id
        || (given_pid == m.previous_producer_id && is_exhausted(given_epoch));
    if expected && !known_id {
        return Err(code::PRODUCER_FENCED);
    }
    if m.state == TxnState::Ongoing {
        return Ok(InitPlan::AbortOpen(fence(m, tv2, now_ms)));
    }
    let mut next = transit(m);
    next.state = TxnState::Empty;
    next.timeout_ms = timeout_ms;
    next.partitions.clear();
    next.start_ms = -1;
    next.update_ms = now_ms;
    if is_exhausted(m.producer_epoch) && (!expected || given_epoch == m.producer_epoch) {
        // The epoch is spent: a new producer id starts at epoch 0.
        next.producer_epoch = 0;
        next.last_producer_epoch = if expected { m.producer_epoch } else { -1 };
        return Ok(InitPlan::Write(Transit { meta: next, allocate: Some(IdSlot::Current) }));
    }
    if !expected {
        next.producer_epoch = m.producer_epoch + 1;
        next.last_producer_epoch = -1;
    } else if m.producer_epoch >= 0 && given_epoch != m.producer_epoch {
        // A retry of the last bump keeps its epoch; any other epoch is fenced.
        if given_epoch != m.last_producer_epoch {
            return Err(code::PRODUCER_FENCED);
        }
    } else {
        next.producer_epoch = m.producer_epoch + 1;
        next.last_producer_epoch = m.producer_epoch;
    }
    Ok(InitPlan::Write(Transit::write(next)))
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

/// AddPartitionsToTxn / AddOffsetsToTxn, or a broker's implicit add (transaction
/// version 2, `client_version` 2): the state with `partitions` in the open
/// transaction, or `None` when nothing changes (already in it).
///
/// # Errors
/// INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS.
pub fn plan_add(
    current: Option<&TxnMeta>,
    producer_id: i64,
    epoch: i16,
    partitions: &[(String, i32)],
    client_version: i16,
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
    let mut next = transit(m);
    if m.state != TxnState::Ongoing {
        next.partitions.clear();
        next.start_ms = now_ms;
    }
    next.state = TxnState::Ongoing;
    next.partitions.extend(partitions.iter().cloned());
    next.update_ms = now_ms;
    next.client_version = client_version;
    Ok(Some(next))
}

/// EndTxn: commit (or abort) the open transaction, in transaction version 2 (`tv2`,
/// EndTxn v5) or an earlier one.
///
/// # Errors
/// INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS,
/// INVALID_TXN_STATE.
pub fn plan_end(
    current: Option<&TxnMeta>,
    producer_id: i64,
    epoch: i16,
    commit: bool,
    tv2: bool,
    now_ms: i64,
) -> Result<EndPlan, i16> {
    let m = current.ok_or(code::INVALID_PRODUCER_ID_MAPPING)?;
    let done = || Ok(EndPlan::Done(ProducerIdAndEpoch { producer_id: m.producer_id, epoch: m.producer_epoch }));
    if !tv2 {
        check_producer(m, producer_id, epoch)?;
        return match (m.state, commit) {
            (TxnState::Ongoing, _) => Ok(EndPlan::Prepare(prepare(m, commit, false, false, now_ms))),
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => done(),
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => Err(code::CONCURRENT_TRANSACTIONS),
            (TxnState::PrepareEpochFence, _) => Err(code::CONCURRENT_TRANSACTIONS),
            _ => Err(code::INVALID_TXN_STATE),
        };
    }
    // With the epoch bumped at each end, the same epoch is the next transaction and
    // the epoch before the bump is a retry of the last one.
    let retry_on_overflow = m.previous_producer_id == producer_id && epoch == EXHAUSTED_EPOCH && m.producer_epoch == 0;
    let retry_on_bump = i32::from(m.producer_epoch) == i32::from(epoch) + 1;
    let valid_epoch = match m.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => retry_on_bump,
        TxnState::CompleteCommit | TxnState::CompleteAbort => {
            retry_on_bump || retry_on_overflow || epoch == m.producer_epoch
        }
        _ => epoch == m.producer_epoch,
    };
    let retry = retry_on_bump || retry_on_overflow;
    if m.producer_id != producer_id && !retry_on_overflow {
        return Err(code::INVALID_PRODUCER_ID_MAPPING);
    }
    if !valid_epoch {
        return Err(code::PRODUCER_FENCED);
    }
    let abort_empty = || Ok(EndPlan::Prepare(prepare(m, false, true, true, now_ms)));
    match (m.state, commit) {
        (TxnState::Ongoing, _) => Ok(EndPlan::Prepare(prepare(m, commit, true, false, now_ms))),
        (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) if retry => done(),
        // A new transaction with nothing in it may be aborted (the epoch is bumped).
        (TxnState::CompleteCommit | TxnState::CompleteAbort | TxnState::Empty, false) if !retry => abort_empty(),
        (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => Err(code::CONCURRENT_TRANSACTIONS),
        _ => Err(code::INVALID_TXN_STATE),
    }
}

/// Kafka's `prepareAbortOrCommit`: the Prepare state, in a bumped epoch with
/// transaction version 2, taking a next producer id when that epoch is the last.
fn prepare(m: &TxnMeta, commit: bool, tv2: bool, no_partition_added: bool, now_ms: i64) -> Transit {
    let mut next = transit(m);
    next.state = if commit { TxnState::PrepareCommit } else { TxnState::PrepareAbort };
    if tv2 {
        next.producer_epoch = m.producer_epoch.saturating_add(1);
        next.last_producer_epoch = m.producer_epoch;
    }
    if no_partition_added {
        next.start_ms = now_ms;
    }
    next.next_producer_id = -1;
    next.update_ms = now_ms;
    next.client_version = if tv2 { 2 } else { 0 };
    let allocate = (tv2 && is_exhausted(m.producer_epoch)).then_some(IdSlot::Next);
    Transit { meta: next, allocate }
}

/// The state once every marker of a Prepare state is written; with transaction
/// version 2 and a spent epoch, the next producer id takes over at epoch 0.
pub fn completed(m: &TxnMeta, now_ms: i64) -> TxnMeta {
    let mut next = transit(m);
    next.state = match m.state {
        TxnState::PrepareCommit => TxnState::CompleteCommit,
        _ => TxnState::CompleteAbort,
    };
    if m.client_version >= 2 && m.next_producer_id >= 0 {
        next.producer_id = m.next_producer_id;
        next.producer_epoch = 0;
    }
    next.next_producer_id = -1;
    next.partitions.clear();
    next.update_ms = now_ms;
    next
}

/// The state that aborts an open transaction in a new epoch, fencing its producer:
/// past its timeout (in the transaction's own version) or for a new InitProducerId (in
/// the version finalized). Kafka's `prepareFenceProducerEpoch` then
/// `prepareAbortOrCommit`.
pub fn fence(m: &TxnMeta, tv2: bool, now_ms: i64) -> Transit {
    if tv2 {
        return prepare(m, false, true, false, now_ms);
    }
    let mut next = transit(m);
    next.producer_epoch = m.producer_epoch.saturating_add(1).min(EXHAUSTED_EPOCH);
    next.last_producer_epoch = -1;
    next.state = TxnState::PrepareAbort;
    next.update_ms = now_ms;
    next.client_version = 0;
    Transit::write(next)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn meta(state: TxnState, epoch: i16) -> TxnMeta {
        TxnMeta {
            producer_id: 7,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: epoch,
            last_producer_epoch: -1,
            timeout_ms: 60_000,
            state,
            partitions: BTreeSet::new(),
            start_ms: -1,
            update_ms: 0,
            client_version: 0,
        }
    }

    fn written(plan: Result<InitPlan, i16>) -> TxnMeta {
        match plan {
            Ok(InitPlan::Write(transit)) => transit.meta,
            other => panic!("not a write: {other:?}"),
        }
    }

    fn prepared(plan: Result<EndPlan, i16>) -> Transit {
        match plan {
            Ok(EndPlan::Prepare(transit)) => transit,
            other => panic!("not a prepare: {other:?}"),
        }
    }

    // Kafka's transitions and error codes, state by state (transaction version 1).
    #[test]
    fn transitions() {
        let max = 900_000;
        assert_eq!(plan_init(None, 1_000_000, max, (-1, -1), false, 0), Err(code::INVALID_TRANSACTION_TIMEOUT));
        let Ok(InitPlan::Write(new)) = plan_init(None, 60_000, max, (-1, -1), false, 0) else { panic!() };
        assert_eq!(
            (new.allocate, new.meta.producer_epoch, new.meta.state),
            (Some(IdSlot::Current), 0, TxnState::Empty)
        );
        let empty = meta(TxnState::Empty, 0);
        let bumped = written(plan_init(Some(&empty), 60_000, max, (-1, -1), false, 5));
        assert_eq!((bumped.producer_epoch, bumped.last_producer_epoch), (1, -1));
        let bumped = written(plan_init(Some(&bumped), 60_000, max, (7, 1), false, 5));
        assert_eq!((bumped.producer_epoch, bumped.last_producer_epoch), (2, 1));
        // A retried bump (KIP-360) keeps the epoch; a stale one is fenced.
        assert_eq!(written(plan_init(Some(&bumped), 60_000, max, (7, 1), false, 6)).producer_epoch, 2);
        assert_eq!(plan_init(Some(&bumped), 60_000, max, (7, 5), false, 6), Err(code::PRODUCER_FENCED));
        assert_eq!(plan_init(Some(&bumped), 60_000, max, (8, 2), false, 6), Err(code::PRODUCER_FENCED));
        // An open transaction is aborted in a new epoch first.
        let ongoing = plan_add(Some(&bumped), 7, 2, &[("t".into(), 0)], 0, 10).unwrap().unwrap();
        assert_eq!((ongoing.state, ongoing.start_ms), (TxnState::Ongoing, 10));
        assert_eq!(plan_add(Some(&ongoing), 7, 2, &[("t".into(), 0)], 0, 11), Ok(None));
        assert_eq!(plan_add(Some(&ongoing), 7, 1, &[], 0, 11), Err(code::PRODUCER_FENCED));
        assert_eq!(plan_add(Some(&ongoing), 8, 2, &[], 0, 11), Err(code::INVALID_PRODUCER_ID_MAPPING));
        let Ok(InitPlan::AbortOpen(aborting)) = plan_init(Some(&ongoing), 60_000, max, (-1, -1), false, 12) else {
            panic!()
        };
        assert_eq!((aborting.meta.state, aborting.meta.producer_epoch), (TxnState::PrepareAbort, 3));
        assert_eq!(
            plan_init(Some(&aborting.meta), 60_000, max, (-1, -1), false, 13),
            Err(code::CONCURRENT_TRANSACTIONS)
        );
        // EndTxn: prepare, retries, wrong outcomes; the epoch stays.
        let prepared = prepared(plan_end(Some(&ongoing), 7, 2, true, false, 20)).meta;
        assert_eq!((prepared.state, prepared.producer_epoch), (TxnState::PrepareCommit, 2));
        assert_eq!(plan_end(Some(&prepared), 7, 2, true, false, 21), Err(code::CONCURRENT_TRANSACTIONS));
        assert_eq!(plan_add(Some(&prepared), 7, 2, &[], 0, 21), Err(code::CONCURRENT_TRANSACTIONS));
        let done = completed(&prepared, 22);
        assert_eq!((done.state, done.partitions.len()), (TxnState::CompleteCommit, 0));
        let same = ProducerIdAndEpoch { producer_id: 7, epoch: 2 };
        assert_eq!(plan_end(Some(&done), 7, 2, true, false, 23), Ok(EndPlan::Done(same)));
        assert_eq!(plan_end(Some(&done), 7, 2, false, false, 23), Err(code::INVALID_TXN_STATE));
        assert_eq!(plan_end(Some(&bumped), 7, 2, true, false, 23), Err(code::INVALID_TXN_STATE));
        assert_eq!(plan_end(None, 7, 2, true, false, 23), Err(code::INVALID_PRODUCER_ID_MAPPING));
        // A spent epoch gets a new producer id.
        let spent = meta(TxnState::CompleteAbort, i16::MAX - 1);
        let Ok(InitPlan::Write(fresh)) = plan_init(Some(&spent), 60_000, max, (-1, -1), false, 30) else { panic!() };
        assert_eq!((fresh.allocate, fresh.meta.producer_epoch), (Some(IdSlot::Current), 0));
        assert_eq!(fresh.with_producer_id(9).producer_id, 9);
        let timed_out = fence(&ongoing, false, 40).meta;
        assert_eq!((timed_out.producer_epoch, timed_out.last_producer_epoch), (3, -1));
    }

    // Transaction version 2: the epoch is bumped at each end, EndTxn retries in the
    // old epoch succeed, a spent epoch hands over to a new producer id.
    #[test]
    fn transaction_version_2() {
        let empty = meta(TxnState::Empty, 4);
        let ongoing = plan_add(Some(&empty), 7, 4, &[("t".into(), 0)], 2, 10).unwrap().unwrap();
        assert_eq!(ongoing.client_version, 2);
        let prepare = prepared(plan_end(Some(&ongoing), 7, 4, true, true, 11));
        assert_eq!(prepare.allocate, None);
        let p = prepare.meta;
        assert_eq!((p.state, p.producer_epoch, p.last_producer_epoch), (TxnState::PrepareCommit, 5, 4));
        // A retry while the markers are written waits; the new epoch is not yet valid.
        assert_eq!(plan_end(Some(&p), 7, 4, true, true, 12), Err(code::CONCURRENT_TRANSACTIONS));
        assert_eq!(plan_end(Some(&p), 7, 5, true, true, 12), Err(code::PRODUCER_FENCED));
        let done = completed(&p, 13);
        assert_eq!((done.producer_id, done.producer_epoch), (7, 5));
        assert_eq!(
            plan_end(Some(&done), 7, 4, true, true, 14),
            Ok(EndPlan::Done(ProducerIdAndEpoch { producer_id: 7, epoch: 5 }))
        );
        assert_eq!(plan_end(Some(&done), 7, 4, false, true, 14), Err(code::INVALID_TXN_STATE));
        assert_eq!(plan_end(Some(&done), 7, 5, true, true, 14), Err(code::INVALID_TXN_STATE));
        assert_eq!(plan_end(Some(&done), 7, 3, true, true, 14), Err(code::PRODUCER_FENCED));
        // An empty transaction may be aborted, in a bumped epoch.
        let aborted = prepared(plan_end(Some(&done), 7, 5, false, true, 15)).meta;
        assert_eq!((aborted.state, aborted.producer_epoch, aborted.start_ms), (TxnState::PrepareAbort, 6, 15));
        // The old producer's write is fenced by the bump.
        assert_eq!(plan_add(Some(&done), 7, 4, &[("t".into(), 1)], 2, 16), Err(code::PRODUCER_FENCED));
        let next = plan_add(Some(&done), 7, 5, &[("t".into(), 1)], 2, 16).unwrap().unwrap();
        assert_eq!((next.state, next.start_ms, next.partitions.len()), (TxnState::Ongoing, 16, 1));
        // At the last epoch, the Prepare takes a next producer id; the completed state
        // hands over to it, and a retry under the old id is answered with the new one.
        let last = TxnMeta { producer_epoch: i16::MAX - 1, ..ongoing.clone() };
        let prepare = prepared(plan_end(Some(&last), 7, i16::MAX - 1, true, true, 20));
        assert_eq!((prepare.allocate, prepare.meta.producer_epoch), (Some(IdSlot::Next), i16::MAX));
        let p = prepare.with_producer_id(8);
        let done = completed(&p, 21);
        assert_eq!((done.producer_id, done.producer_epoch, done.previous_producer_id), (8, 0, 7));
        let answer = ProducerIdAndEpoch { producer_id: 8, epoch: 0 };
        assert_eq!(plan_end(Some(&done), 7, i16::MAX - 1, true, true, 22), Ok(EndPlan::Done(answer)));
        assert_eq!(plan_end(Some(&done), 7, 3, true, true, 22), Err(code::INVALID_PRODUCER_ID_MAPPING));
        // A timed-out transaction of version 2 is fenced by the same bump.
        let fenced = fence(&ongoing, true, 30).meta;
        assert_eq!((fenced.state, fenced.producer_epoch, fenced.last_producer_epoch), (TxnState::PrepareAbort, 5, 4));
        // InitProducerId with the id a spent epoch left is a retry, not fenced.
        let rotated = written(plan_init(Some(&done), 60_000, 900_000, (7, i16::MAX - 1), true, 40));
        assert_eq!((rotated.producer_id, rotated.producer_epoch, rotated.state), (8, 0, TxnState::Empty));
    }
}
