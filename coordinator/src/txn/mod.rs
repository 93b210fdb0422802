//! The transaction coordinator (KIP-98, KIP-447), as Kafka's `TransactionCoordinator`:
//! a transactional id lives on the shard owning partition `abs(javaHash(id)) % 50` of
//! `__transaction_state`, while this broker leads that partition. Its state
//! (`TxnMeta`) is written there as Kafka's records (`records.rs`) before any answer
//! depends on it, and replayed when the partition is loaded.
//!
//! This module is the state (`TxnMeta`, the `Coordinator` of a shard's ids) and, in
//! `plan.rs`, its rules, with no I/O: each request is decided against the current
//! `TxnMeta` into the state to write and what to answer (`coordinator/txn.rs` writes,
//! answers and sends the markers). A transactional id with a write in flight is
//! `busy`: requests meanwhile get CONCURRENT_TRANSACTIONS, as Kafka's pending state
//! transition.
//!
//! States: Empty -> Ongoing (AddPartitionsToTxn, AddOffsetsToTxn, or a broker's
//! implicit add) -> PrepareCommit or PrepareAbort (EndTxn, written before EndTxn is
//! answered) -> CompleteCommit or CompleteAbort (once every partition took its marker)
//! -> Ongoing again. With transaction version 2 (KIP-890 part 2) the epoch is bumped at
//! each Prepare, so the markers fence the transaction's own late writes.

pub mod calls;
pub mod plan;
pub mod records;

pub use calls::{TxnAnswer, TxnCall, TxnRequest};
pub use plan::{fenced_for, plan_add, plan_end, plan_init, plan_verify, EndPlan, IdSlot, InitPlan, Transit};

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};

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

    pub fn preparing(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence)
    }
}

/// A transactional id's state: Kafka's `TransactionMetadata`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMeta {
    pub producer_id: i64,
    /// The producer id before the last change of state (Kafka's `prevProducerId`):
    /// once a spent epoch handed the id over (transaction version 2), a retried
    /// EndTxn still names the old one.
    pub previous_producer_id: i64,
    /// The producer id a transaction being completed hands over to, its epoch being
    /// spent (transaction version 2); -1 otherwise.
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump, so that a retried InitProducerId (KIP-360) or
    /// EndTxn (transaction version 2) is answered, not fenced; -1 when unknown.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// The partitions in the transaction, `__consumer_offsets` ones included.
    pub partitions: BTreeSet<(String, i32)>,
    pub start_ms: i64,
    pub update_ms: i64,
    /// The transaction version of the last client request that changed the state
    /// (Kafka's `clientTransactionVersion`): 2 (EndTxn v5, a broker's implicit add)
    /// bumps the epoch at each transaction's end; 0 keeps it.
    pub client_version: i16,
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
