//! What shards send each other: operations on a partition (`PartitionOp`) and their
//! replies, batches of them and of long-poll waits, controller requests, published images and high-watermark gathering
//! (`ShardMessage`), with the replication gauges a shard reports.

use std::sync::Arc;

use bytes::Bytes;
use futures_channel::oneshot;
use skein_control::append::TopicSettings;
use skein_control::metadata::controller::{ControllerReply, ControllerRequest};
use skein_control::metadata::{Assignment, MetadataImage, Refusal};
use skein_engine::{Offset, TopicPartition};

/// Who reads a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reader {
    /// A follower replicating: up to the log end, from the leader only.
    Follower,
    /// A consumer: up to the high watermark. `any_replica` (Fetch v11+, KIP-392): a
    /// follower serves it too. `rack`: the consumer's rack, where the node's
    /// `replica.selector.class` is rack-aware; the leader then names a replica on that
    /// rack to read from instead (`preferred_read_replica`).
    /// `committed`: read_committed (isolation level 1), up to the last stable offset.
    Consumer { any_replica: bool, rack: Option<String>, committed: bool },
}

impl Reader {
    /// How far it reads: a follower to the log end, a consumer to the high watermark,
    /// a read_committed one to the last stable offset.
    pub fn isolation(&self) -> skein_replication::Isolation {
        use skein_replication::Isolation;
        match self {
            Reader::Follower => Isolation::LogEnd,
            Reader::Consumer { committed: true, .. } => Isolation::Committed,
            Reader::Consumer { committed: false, .. } => Isolation::HighWatermark,
        }
    }
}

/// A Kafka error from a partition operation, with a message where Kafka sends one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionError {
    pub code: i16,
    pub message: Option<String>,
}

impl PartitionError {
    pub fn new(code: i16) -> PartitionError {
        PartitionError { code, message: None }
    }

    pub fn with_message(code: i16, message: impl Into<String>) -> PartitionError {
        PartitionError { code, message: Some(message.into()) }
    }
}

impl PartitionError {
    /// As the controller's refusals are: a code and a message (empty: none).
    pub fn into_refusal(self) -> Refusal {
        (self.code, self.message.unwrap_or_default())
    }
}

impl From<i16> for PartitionError {
    fn from(code: i16) -> PartitionError {
        PartitionError::new(code)
    }
}

/// A replica's refusal as Kafka answers it (`errors::code_of_refusal`).
impl From<skein_replication::Refusal> for PartitionError {
    fn from(refusal: skein_replication::Refusal) -> PartitionError {
        PartitionError::new(skein_control::errors::code_of_refusal(refusal))
    }
}

/// A replica's failed append: its refusal, or its log's error with the error's text.
impl From<skein_replication::AppendError> for PartitionError {
    fn from(error: skein_replication::AppendError) -> PartitionError {
        match error {
            skein_replication::AppendError::Refused(refusal) => refusal.into(),
            skein_replication::AppendError::Log(e) => e.into(),
        }
    }
}

/// An engine error as Kafka answers it: its code (`errors::code_of`) and its text.
impl From<skein_engine::Error> for PartitionError {
    fn from(error: skein_engine::Error) -> PartitionError {
        PartitionError { code: skein_control::errors::code_of(&error), message: Some(error.to_string()) }
    }
}

/// A typed operation on one partition: what the caller sends and what it gets back.
/// Only the channel between shards carries the `PartitionOp` and `PartitionReply`
/// unions; `Shard::call` gives the caller the operation's own reply type.
pub trait ShardOp {
    type Reply;
    fn into_message(self) -> PartitionOp;
    /// This operation's reply; `None` for another operation's (a broker bug, which
    /// `Shard::call` answers UNKNOWN_SERVER_ERROR in one place).
    fn reply(reply: PartitionReply) -> Option<Self::Reply>;
}

/// A produce of one batch as leader.
#[derive(Debug)]
pub struct Produce {
    pub batch: Bytes,
    /// The request frame `batch` is a slice of, for the cache's accounting.
    pub backing: skein_engine::Backing,
    pub acks: i16,
    /// How long `acks=all` waits for the commit (the request's `timeout_ms`).
    pub timeout_ms: u64,
    /// The request's transactional id, for a transactional batch's verification.
    pub transactional_id: Option<String>,
    /// The request's version: from 12 (transaction version 2) a transactional batch's
    /// partition is added to its transaction by this broker, not verified only.
    pub version: i16,
}

/// A read by a consumer or a follower of what the partition holds now (a long poll
/// waits apart: `Shard::wait_any`).
#[derive(Debug)]
pub struct Fetch {
    pub offset: i64,
    pub max_bytes: usize,
    pub reader: Reader,
}

/// A follower's fetch position, recorded by the leader before it reads: the high
/// watermark may move. Answers where the follower's log diverged, if it did.
#[derive(Debug)]
pub struct FollowerFetch {
    pub follower: i32,
    pub offset: i64,
    pub current_leader_epoch: i32,
    pub last_fetched_epoch: i32,
}

/// The controller's assignment of this partition (leader, epochs, replicas, ISR).
#[derive(Debug)]
pub struct Assign(pub Assignment);

/// ListOffsets at `timestamp` (or one of Kafka's sentinels: -1 latest, -2 earliest,
/// -3 max timestamp, -4 earliest local).
#[derive(Debug)]
pub struct ListOffsets {
    pub timestamp: i64,
    /// read_committed: the latest offset is the last stable offset.
    pub committed: bool,
}

/// DeleteRecords below `offset` (-1: the high watermark).
#[derive(Debug)]
pub struct DeleteRecords {
    pub offset: i64,
}

/// OffsetForLeaderEpoch: where `leader_epoch` ends, checked against the sender's view
/// of the current epoch (-1: none).
#[derive(Debug)]
pub struct EpochEndOffset {
    pub current_leader_epoch: i32,
    pub leader_epoch: i32,
}

/// Opens (creating if needed) the partition's log with these settings, in the role
/// the assignment gives it. `in_background`: a partition not hosted yet is answered
/// at once and opened after (`opening.rs`), its operations waiting for it.
#[derive(Debug)]
pub struct Open {
    pub settings: Box<TopicSettings>,
    pub assignment: Assignment,
    pub in_background: bool,
}

/// New topic settings for a hosted partition.
#[derive(Debug)]
pub struct Reconfigure(pub Box<TopicSettings>);

/// Deletes the partition's log (its directory is renamed `-delete` at once, its files
/// removed later), if it belongs to the topic with this id.
#[derive(Debug)]
pub struct Remove {
    pub topic_id: [u8; 16],
}

/// Closes the partition's log cleanly and forgets it here (a placement move).
#[derive(Debug)]
pub struct Release;

/// Step 1 of moving the partition to another log directory of this node (its index
/// in `NodeSettings::log_dirs`): its files copied there while it serves.
#[derive(Debug)]
pub struct Precopy {
    pub target: usize,
}

/// Step 2 of a move: the partition stops being hosted here, its log closes, and the
/// copy catches up and replaces it (`LogManager::finish_move`). The caller opens it
/// again, whatever the outcome.
#[derive(Debug)]
pub struct FinishMove(pub Box<skein_engine::relocate::Precopy>);

/// The partition's sizes, offsets and counters.
#[derive(Debug)]
pub struct Stats;

/// A group coordinator operation; the partition is the group's offsets partition.
#[derive(Debug)]
pub struct Group(pub Box<skein_coordinator::group::GroupCall>);

/// A transaction coordinator operation; the partition is the transactional id's
/// partition of `__transaction_state`.
#[derive(Debug)]
pub struct Txn(pub Box<skein_coordinator::txn::TxnCall>);

/// A share coordinator call; the partition is the key's partition of
/// `__share_group_state`.
#[derive(Debug)]
pub struct ShareState(pub Box<skein_coordinator::serve::share::StateCall>);

/// A share-partition operation on its topic partition's leader (ShareFetch,
/// ShareAcknowledge, a closed session's release).
#[derive(Debug)]
pub struct Share(pub Box<skein_coordinator::serve::share_leader::ShareCall>);

pub use skein_coordinator::txn::calls::WriteMarker;

/// The producers the partition knows (DescribeProducers).
#[derive(Debug)]
pub struct Producers;

/// An operation on one partition, as it travels to the shard that owns it.
#[derive(Debug)]
pub enum PartitionOp {
    Produce(Produce),
    Fetch(Fetch),
    FollowerFetch(FollowerFetch),
    Assign(Assign),
    ListOffsets(ListOffsets),
    DeleteRecords(DeleteRecords),
    EpochEndOffset(EpochEndOffset),
    Open(Open),
    Reconfigure(Reconfigure),
    Remove(Remove),
    Release(Release),
    Precopy(Precopy),
    FinishMove(FinishMove),
    Stats(Stats),
    Group(Group),
    Txn(Txn),
    WriteMarker(WriteMarker),
    Producers(Producers),
    ShareState(ShareState),
    Share(Share),
}

/// What a produce came to: appended, or refused before the log was touched.
#[derive(Debug, Clone, PartialEq)]
pub enum Produced {
    Appended(Appended),
    Refused(Box<skein_control::append::Refused>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Appended {
    pub base_offset: i64,
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Fetched {
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// The batches read, each whole (a batch may hold its bytes in two pieces:
    /// `Batch::segments`).
    pub records: Vec<skein_engine::Batch>,
    /// The replica the consumer should read from instead (KIP-392), or -1.
    pub preferred_read_replica: i32,
    pub last_stable_offset: i64,
    /// For a read_committed read: the aborted transactions its records may hold.
    pub aborted: Vec<skein_replication::txn::AbortedTxn>,
    /// The log's change stamp as the read found it: a fetch session reads the
    /// partition again only once it moves, if the read found nothing new
    /// (`crate::fetch_sessions`). `None` for a consumer sent to another replica.
    pub stamp: Option<skein_engine::Stamped>,
}

/// An epoch and where it ends: OffsetForLeaderEpoch's answer (-1, -1: unknown), and
/// where a follower's log diverged from the leader's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEnd {
    pub leader_epoch: i32,
    pub end_offset: i64,
}

/// ListOffsets' answer: the offset, its record's timestamp and the leader epoch it
/// was written in (-1: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetAt {
    pub offset: i64,
    pub timestamp: i64,
    pub leader_epoch: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordsDeleted {
    pub low_watermark: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionStats {
    pub size_bytes: u64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// The replica's high watermark (a follower's as the leader last told it).
    pub high_watermark: i64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub requests: u64,
    /// The shard's time polling the partition's operations (`Partition::busy_ns`).
    pub busy_us: u64,
}

/// A partition operation's reply, as it travels back.
#[derive(Debug, Clone, PartialEq)]
pub enum PartitionReply {
    Produced(Produced),
    Fetched(Fetched),
    /// Where a follower's log diverged from the leader's, if it did.
    FollowerFetched(Option<EpochEnd>),
    OffsetAt(OffsetAt),
    RecordsDeleted(RecordsDeleted),
    EpochEnd(EpochEnd),
    Stats(PartitionStats),
    Group(Box<skein_coordinator::group::GroupAnswer>),
    Txn(Box<skein_coordinator::txn::TxnAnswer>),
    Producers(Vec<skein_replication::producer::ProducerInfo>),
    ShareState(Box<skein_coordinator::serve::share::Stored>),
    Share(Box<skein_coordinator::serve::share_leader::ShareAnswer>),
    Precopied(Box<skein_engine::relocate::Precopy>),
    /// The bytes the last step of a move copied.
    Moved(u64),
    Done,
}

skein_control::typed_requests! {
    ShardOp: PartitionOp -> PartitionReply {
        Produce => Produced = PartitionReply::Produced(r) => r;
        Fetch => Fetched = PartitionReply::Fetched(r) => r;
        FollowerFetch => Option<EpochEnd> = PartitionReply::FollowerFetched(r) => r;
        Assign => () = PartitionReply::Done => ();
        ListOffsets => OffsetAt = PartitionReply::OffsetAt(r) => r;
        DeleteRecords => RecordsDeleted = PartitionReply::RecordsDeleted(r) => r;
        EpochEndOffset => EpochEnd = PartitionReply::EpochEnd(r) => r;
        Open => () = PartitionReply::Done => ();
        Reconfigure => () = PartitionReply::Done => ();
        Remove => () = PartitionReply::Done => ();
        Release => () = PartitionReply::Done => ();
        Precopy => skein_engine::relocate::Precopy = PartitionReply::Precopied(r) => *r;
        FinishMove => u64 = PartitionReply::Moved(r) => r;
        Stats => PartitionStats = PartitionReply::Stats(r) => r;
        WriteMarker => () = PartitionReply::Done => ();
        Producers => Vec<skein_replication::producer::ProducerInfo> = PartitionReply::Producers(r) => r;
        Group => skein_coordinator::group::GroupAnswer = PartitionReply::Group(r) => *r;
        Txn => skein_coordinator::txn::TxnAnswer = PartitionReply::Txn(r) => *r;
        ShareState => skein_coordinator::serve::share::Stored = PartitionReply::ShareState(r) => *r;
        Share => skein_coordinator::serve::share_leader::ShareAnswer = PartitionReply::Share(r) => *r;
    }
}

/// `result` as operation `O`'s reply; another operation's reply is a broker bug,
/// answered UNKNOWN_SERVER_ERROR (and logged) here rather than at every caller.
pub fn typed<O: ShardOp>(result: OpResult) -> Result<O::Reply, PartitionError> {
    O::reply(result?).ok_or_else(|| {
        tracing::error!(target: "skein::net", operation = std::any::type_name::<O>(),
            "a partition operation got another operation's reply");
        PartitionError::with_message(skein_control::errors::code::UNKNOWN_SERVER_ERROR, "unexpected reply")
    })
}

impl PartitionOp {
    /// The Kafka API an operation serves, for error metrics.
    pub fn api_key(&self) -> Option<i16> {
        match self {
            PartitionOp::Produce(_) => Some(0),
            PartitionOp::Fetch(_) | PartitionOp::FollowerFetch(_) => Some(1),
            PartitionOp::ListOffsets(_) => Some(2),
            PartitionOp::DeleteRecords(_) => Some(21),
            PartitionOp::EpochEndOffset(_) => Some(23),
            PartitionOp::WriteMarker(_) => Some(27),
            PartitionOp::Share(_) => Some(78),
            _ => None,
        }
    }
}

/// A partition operation's reply or its Kafka error, as it travels back.
pub type OpResult = Result<PartitionReply, PartitionError>;

/// The replication state of a shard's partitions, for `/metrics`.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReplicationGauges {
    /// Partitions led here whose ISR lacks a replica.
    pub under_replicated: u64,
    /// Records led here past the high watermark (written, not yet committed).
    pub high_watermark_lag: i64,
    /// Records the partitions followed here lack of their leaders' high watermarks.
    pub follower_lag: i64,
    /// The longest a follower of a partition led here has not been caught up (ms).
    pub follower_lag_ms: i64,
}

/// A message between shards.
pub enum ShardMessage {
    /// An operation on a partition the receiver owns.
    /// `sent`: when the sender routed it, for the route stage histogram.
    Partition { partition: TopicPartition, op: PartitionOp, reply: oneshot::Sender<OpResult>, sent: std::time::Instant },
    /// A metadata change for the controller (shard 0).
    Control { request: ControllerRequest, reply: oneshot::Sender<Result<ControllerReply, Refusal>> },
    /// A new metadata image from the controller; acknowledged once installed.
    Publish { image: Arc<MetadataImage>, reply: oneshot::Sender<()> },
    /// The high watermarks of the receiver's partitions, for the checkpoint.
    HighWatermarks { reply: oneshot::Sender<Vec<(TopicPartition, Offset)>> },
    /// Operations on many of the receiver's partitions (`Shard::call_many`), run
    /// concurrently and answered together, in order.
    Batch { ops: Vec<(TopicPartition, PartitionOp)>, reply: oneshot::Sender<Vec<OpResult>>, sent: std::time::Instant },
    /// A fetch's reads of the receiver's partitions within `budget` bytes, in order
    /// (`Shard::read_many`): answered together, each with whether the budget reached it.
    Reads {
        reads: Vec<(TopicPartition, Fetch)>,
        budget: usize,
        reply: oneshot::Sender<Vec<(Result<Fetched, PartitionError>, bool)>>,
        sent: std::time::Instant,
    },
    /// A long poll's waits on the receiver's partitions (`Shard::wait_any`): answered
    /// with those whose waits ended first, or none after `wait_ms`.
    WaitAny { waits: Vec<super::many::Wait>, wait_ms: u64, reply: oneshot::Sender<Vec<usize>> },
}

#[cfg(test)]
mod tests {
    use super::*;

    // A reply of another operation's kind is the one UNKNOWN_SERVER_ERROR; a matching
    // reply and an error pass through as they are.
    #[test]
    fn a_reply_of_the_wrong_kind_is_an_unknown_server_error() {
        let wrong = typed::<Stats>(Ok(PartitionReply::Done)).unwrap_err();
        assert_eq!(wrong.code, skein_control::errors::code::UNKNOWN_SERVER_ERROR);
        let offset = OffsetAt { offset: 7, timestamp: -1, leader_epoch: 0 };
        assert_eq!(typed::<ListOffsets>(Ok(PartitionReply::OffsetAt(offset))), Ok(offset));
        assert_eq!(typed::<Release>(Ok(PartitionReply::Done)), Ok(()));
        let refused = PartitionError::new(skein_control::errors::code::NOT_LEADER_OR_FOLLOWER);
        assert_eq!(typed::<Fetch>(Err(refused.clone())), Err(refused));
    }
}
