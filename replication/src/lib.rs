//! Skein's replication layer: a partition replica (`Partition`: its log, idempotent
//! producers' state and snapshots, appends as leader), its replica state (leader or
//! follower, leader epoch, ISR, high watermark, followers' log ends) and the
//! operations that wait on the high watermark. `net` speaks the Kafka protocol and
//! hosts one `Partition` per partition its shard owns; the engine stores the log.
//! `quorum` is the controller quorum: the metadata log replicated by raft-rs.
//!
//! Dependencies point one way: `engine` <- `replication` <- `control` <-
//! `coordinator` <- `net` <- `skein`.
#![forbid(unsafe_code)]

pub mod checkpoint;
pub mod delayed;
pub mod partition;
pub mod producer;
pub mod quorum;
pub mod refusal;
pub mod replica;
pub mod txn;

pub use delayed::HighWatermarkWaiters;
pub use partition::{load_producers, AcksAll, AppendError, Appended, Isolation, OffsetSpec, Partition};
pub use refusal::Refusal;
pub use replica::{divergence, truncation_offset, BrokerId, IsrProposal, ReplicaState, Role};
