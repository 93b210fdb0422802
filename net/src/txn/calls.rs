//! What the transaction coordinator is asked (`TxnCall`), each call a struct of its
//! own with its answer's type (`TxnRequest`): only the partition operation that carries
//! a call to its coordinator's shard holds the `TxnCall` and `TxnAnswer` unions.

use super::TxnMeta;

/// A typed call to the transaction coordinator: the `TxnCall` it travels as, and how
/// its answer comes back.
pub trait TxnRequest {
    type Answer;
    fn into_call(self) -> TxnCall;
    /// This call's answer; `None` for another call's (a broker bug, answered
    /// UNKNOWN_SERVER_ERROR by `topics::txn_call`).
    fn answer(answer: TxnAnswer) -> Option<Self::Answer>;
}

/// InitProducerId for a transactional id.
#[derive(Debug)]
pub struct Init {
    pub id: String,
    pub timeout_ms: i32,
    pub producer_id: i64,
    pub epoch: i16,
}

/// AddPartitionsToTxn and AddOffsetsToTxn; `verify_only` (v4+, KIP-890) only checks
/// that the partitions are in the open transaction.
#[derive(Debug)]
pub struct Add {
    pub id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub partitions: Vec<(String, i32)>,
    pub verify_only: bool,
}

#[derive(Debug)]
pub struct End {
    pub id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub commit: bool,
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

/// `TxnRequest` for each call: its variant, and its answer's.
macro_rules! txn_requests {
    ($($call:ident => $answer:ty = $variant:ident;)*) => {$(
        impl TxnRequest for $call {
            type Answer = $answer;
            fn into_call(self) -> TxnCall {
                TxnCall::$call(self)
            }
            fn answer(answer: TxnAnswer) -> Option<$answer> {
                match answer {
                    TxnAnswer::$variant(answer) => Some(answer),
                    _ => None,
                }
            }
        }
    )*};
}

txn_requests! {
    Add => i16 = Code;
    End => i16 = Code;
    Describe => Option<TxnMeta> = Described;
    List => Vec<(String, TxnMeta)> = Listed;
    Ready => i16 = Code;
}

/// InitProducerId answers a producer id and epoch, or an error code.
impl TxnRequest for Init {
    type Answer = Result<ProducerIdAndEpoch, i16>;
    fn into_call(self) -> TxnCall {
        TxnCall::Init(self)
    }
    fn answer(answer: TxnAnswer) -> Option<Self::Answer> {
        match answer {
            TxnAnswer::Producer(producer) => Some(Ok(producer)),
            TxnAnswer::Code(error) => Some(Err(error)),
            _ => None,
        }
    }
}
