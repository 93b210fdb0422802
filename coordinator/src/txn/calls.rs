//! What the transaction coordinator is asked (`TxnCall`), each call a struct of its
//! own with its answer's type (`TxnRequest`): only the partition operation that carries
//! a call to its coordinator's shard holds the `TxnCall` and `TxnAnswer` unions.

use super::TxnMeta;

/// A typed call to the transaction coordinator: the `TxnCall` it travels as, and how
/// its answer comes back.
pub trait TxnRequest {
    type Reply;
    fn into_message(self) -> TxnCall;
    /// This call's answer; `None` for another call's (a broker bug, answered
    /// UNKNOWN_SERVER_ERROR by `topics::txn_call`).
    fn reply(answer: TxnAnswer) -> Option<Self::Reply>;
}

/// InitProducerId for a transactional id.
#[derive(Debug)]
pub struct Init {
    pub id: String,
    pub timeout_ms: i32,
    pub producer_id: i64,
    pub epoch: i16,
}

/// AddPartitionsToTxn and AddOffsetsToTxn, and the checks of a transactional write.
#[derive(Debug)]
pub struct Add {
    pub id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub partitions: Vec<(String, i32)>,
    pub mode: AddMode,
}

/// Who asks to add partitions, and so what the coordinator does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddMode {
    /// A client's own AddPartitionsToTxn (v0-3) or AddOffsetsToTxn: transaction
    /// version 1.
    Client,
    /// A broker checks a transactional write belongs to the open transaction
    /// (AddPartitionsToTxn v4+ with `verify_only`, KIP-890 part 1); nothing changes.
    Verify,
    /// A broker adds the partitions for a write of transaction version 2 (Produce v12+,
    /// TxnOffsetCommit v5+: AddPartitionsToTxn v4+ without `verify_only`).
    Implicit,
}

impl AddMode {
    /// The transaction version the add belongs to, as the state records it.
    pub fn client_version(self) -> i16 {
        if self == AddMode::Implicit {
            2
        } else {
            0
        }
    }
}

/// EndTxn; `tv2` (v5+) bumps the epoch and answers the next transaction's producer id
/// and epoch.
#[derive(Debug)]
pub struct End {
    pub id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub commit: bool,
    pub tv2: bool,
}

#[derive(Debug)]
pub struct Describe {
    pub id: String,
}

/// Every id of this shard's loaded partitions.
#[derive(Debug)]
pub struct List;

/// Answers NONE once the partition is loaded (FindCoordinator).
#[derive(Debug)]
pub struct Ready;

/// A request to the transaction coordinator, as it travels to the shard that owns the
/// id's partition of `__transaction_state`.
#[derive(Debug)]
pub enum TxnCall {
    Init(Init),
    Add(Add),
    End(End),
    Describe(Describe),
    List(List),
    Ready(Ready),
}

/// The producer id and epoch InitProducerId gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdAndEpoch {
    pub producer_id: i64,
    pub epoch: i16,
}

/// A transaction coordinator's answer, as it travels back.
#[derive(Debug, Clone, PartialEq)]
pub enum TxnAnswer {
    Producer(ProducerIdAndEpoch),
    Code(i16),
    Described(Option<TxnMeta>),
    Listed(Vec<(String, TxnMeta)>),
}

skein_control::typed_requests! {
    TxnRequest: TxnCall -> TxnAnswer {
        Add => i16 = TxnAnswer::Code(r) => r;
        Describe => Option<TxnMeta> = TxnAnswer::Described(r) => r;
        List => Vec<(String, TxnMeta)> = TxnAnswer::Listed(r) => r;
        Ready => i16 = TxnAnswer::Code(r) => r;
    }
}

/// A producer id and epoch, or an error code.
fn producer_reply(answer: TxnAnswer) -> Option<Result<ProducerIdAndEpoch, i16>> {
    match answer {
        TxnAnswer::Producer(producer) => Some(Ok(producer)),
        TxnAnswer::Code(error) => Some(Err(error)),
        _ => None,
    }
}

/// InitProducerId answers a producer id and epoch, or an error code.
impl TxnRequest for Init {
    type Reply = Result<ProducerIdAndEpoch, i16>;
    fn into_message(self) -> TxnCall {
        TxnCall::Init(self)
    }
    fn reply(answer: TxnAnswer) -> Option<Self::Reply> {
        producer_reply(answer)
    }
}

/// EndTxn answers the producer id and epoch of the next transaction, or an error code.
impl TxnRequest for End {
    type Reply = Result<ProducerIdAndEpoch, i16>;
    fn into_message(self) -> TxnCall {
        TxnCall::End(self)
    }
    fn reply(answer: TxnAnswer) -> Option<Self::Reply> {
        producer_reply(answer)
    }
}

/// A transaction marker for a partition (WriteTxnMarkers), written by its leader:
/// the coordinator's decision for `producer_id`'s transaction.
#[derive(Debug, Clone, Copy)]
pub struct WriteMarker {
    pub producer_id: i64,
    pub epoch: i16,
    pub coordinator_epoch: i32,
    pub commit: bool,
    /// The transaction version of the transaction (WriteTxnMarkers v2, KIP-1228): with
    /// 2, the marker's epoch must be above the producer's (a bumped one), or equal for a
    /// retry once the transaction is over.
    pub transaction_version: i8,
}
