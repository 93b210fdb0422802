//! What shards send each other: operations on a partition (`PartitionOp`) and their
//! replies, controller requests, published images and high-watermark gathering
//! (`ShardMessage`), with the replication gauges a shard reports.

use std::sync::Arc;

use bytes::Bytes;
use futures_channel::oneshot;
use skein_engine::{Offset, TopicPartition};

use crate::append::TopicSettings;
use crate::metadata::controller::{ControllerReply, ControllerRequest};
use crate::metadata::{Assignment, MetadataImage, Refusal};

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
    /// Whether it reads to the log end (a follower), and whether only up to the last
    /// stable offset (read_committed).
    pub fn reads_to(&self) -> (bool, bool) {
        match self {
            Reader::Follower => (true, false),
            Reader::Consumer { committed, .. } => (false, *committed),
        }
    }
}

/// An operation on one partition, executed by the shard that owns it.
#[derive(Debug)]
pub enum PartitionOp {
    Produce {
        batch: Bytes,
        /// The request frame `batch` is a slice of, for the cache's accounting.
        backing: skein_engine::Backing,
        acks: i16,
        /// How long `acks=all` waits for the commit (the request's `timeout_ms`).
        timeout_ms: u64,
        /// The request's transactional id, for a transactional batch's verification.
        transactional_id: Option<String>,
    },
    Fetch {
        offset: i64,
        max_bytes: usize,
        wait_ms: u64,
        reader: Reader,
    },
    /// A follower's fetch position, recorded by the leader before it reads: the high
    /// watermark may move. Answers where the follower's log diverged, if it did.
    FollowerFetch {
        follower: i32,
        offset: i64,
        current_leader_epoch: i32,
        last_fetched_epoch: i32,
    },
    /// The controller's assignment of this partition (leader, epochs, replicas, ISR).
    Assign(Assignment),
    ListOffsets {
        timestamp: i64,
        /// read_committed: the latest offset is the last stable offset.
        committed: bool,
    },
    DeleteRecords {
        offset: i64,
    },
    /// OffsetForLeaderEpoch: where `leader_epoch` ends, checked against the sender's
    /// view of the current epoch (-1: none).
    EpochEndOffset {
        current_leader_epoch: i32,
        leader_epoch: i32,
    },
    /// Opens (creating if needed) the partition's log with these settings, in the
    /// role the assignment gives it.
    Open {
        settings: Box<TopicSettings>,
        assignment: Assignment,
    },
    Reconfigure(Box<TopicSettings>),
    /// Deletes the partition's log (its directory is renamed `-delete` at once, its
    /// files removed later), if it belongs to the topic with this id.
    Remove {
        topic_id: [u8; 16],
    },
    /// Closes the partition's log cleanly and forgets it here (a placement move).
    Release,
    Stats,
    /// A group coordinator operation; the partition is the group's offsets partition.
    Group(Box<crate::group::GroupCall>),
    /// A transaction coordinator operation; the partition is the transactional id's
    /// partition of `__transaction_state`.
    Txn(Box<crate::txn::TxnCall>),
    /// A transaction marker (WriteTxnMarkers), written as leader.
    WriteMarker {
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
    },
    /// The producers the partition knows (DescribeProducers).
    Producers,
}

#[derive(Debug, Clone, PartialEq)]
pub enum PartitionReply {
    Produce {
        base_offset: i64,
        log_append_time_ms: i64,
        log_start_offset: i64,
    },
    /// The batch was refused before the log was touched.
    ProduceRefused(Box<crate::append::Refused>),
    Fetch {
        high_watermark: i64,
        log_start_offset: i64,
        /// The batches read, each whole (a batch may hold its bytes in two pieces:
        /// `Batch::segments`).
        records: Vec<skein_engine::Batch>,
        /// The replica the consumer should read from instead (KIP-392), or -1.
        preferred_read_replica: i32,
        last_stable_offset: i64,
        /// For a read_committed read: the aborted transactions its records may hold.
        aborted: Vec<skein_replication::txn::AbortedTxn>,
    },
    /// Where a follower's log diverged from the leader's: (epoch, end offset).
    FollowerFetch {
        diverging: Option<(i32, i64)>,
    },
    Offsets {
        offset: i64,
        timestamp: i64,
    },
    DeleteRecords {
        low_watermark: i64,
    },
    /// The largest epoch at or below the one asked and where it ends (-1, -1: unknown).
    EpochEndOffset {
        leader_epoch: i32,
        end_offset: i64,
    },
    Stats {
        size_bytes: u64,
        log_start_offset: i64,
        log_end_offset: i64,
        /// The replica's high watermark (a follower's as the leader last told it).
        high_watermark: i64,
        bytes_in: u64,
        bytes_out: u64,
        requests: u64,
        /// The shard's time polling the partition's operations (`Partition::busy_ns`).
        busy_us: u64,
    },
    Group(Box<crate::group::GroupAnswer>),
    Txn(Box<crate::txn::TxnAnswer>),
    /// (producer id, epoch, last sequence, last timestamp, coordinator epoch, first
    /// offset of its open transaction or -1).
    Producers(Vec<(i64, i16, i32, i64, i32, i64)>),
    Done,
}

impl PartitionOp {
    /// The Kafka API an operation serves, for error metrics.
    pub fn api_key(&self) -> Option<i16> {
        match self {
            PartitionOp::Produce { .. } => Some(0),
            PartitionOp::Fetch { .. } | PartitionOp::FollowerFetch { .. } => Some(1),
            PartitionOp::ListOffsets { .. } => Some(2),
            PartitionOp::DeleteRecords { .. } => Some(21),
            PartitionOp::EpochEndOffset { .. } => Some(23),
            PartitionOp::WriteMarker { .. } => Some(27),
            _ => None,
        }
    }
}

/// A Kafka error code, with a message where Kafka sends one.
pub type OpResult = Result<PartitionReply, (i16, Option<String>)>;

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
}
