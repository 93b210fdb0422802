//! Why a replica refuses an operation, in the replication layer's own terms. `net`
//! gives each its Kafka error code in one place (`errors::code_of_refusal`).

/// A refusal by a replica, its producer state or its ISR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// This broker does not lead (or no longer holds) the partition.
    NotLeaderOrFollower,
    /// An `acks=all` batch not committed within the produce's timeout, or a retried
    /// batch whose first attempt is still being appended.
    RequestTimedOut,
    /// An `acks=all` batch refused before it is written: the ISR is smaller than
    /// `min.insync.replicas`.
    NotEnoughReplicas,
    /// Committed, but by an ISR that shrank below `min.insync.replicas` meanwhile.
    NotEnoughReplicasAfterAppend,
    /// A producer's batch out of sequence.
    OutOfOrderSequence,
    /// A producer (or its marker) of an older epoch than the one the partition knows.
    InvalidProducerEpoch,
    /// A leader epoch older than the partition's.
    FencedLeaderEpoch,
    /// A leader epoch newer than the partition's.
    UnknownLeaderEpoch,
    /// A transactional batch of a producer the partition knows as non-transactional,
    /// or the other way round.
    InvalidTxnState,
    /// A marker from an older transaction coordinator.
    TransactionCoordinatorFenced,
    /// DeleteRecords past the high watermark (or below zero).
    OffsetOutOfRange,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}
