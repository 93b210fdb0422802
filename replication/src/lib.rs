//! Skein's replication layer: the state of a partition's replica (leader or follower,
//! leader epoch, ISR, high watermark, followers' log ends) and the operations that wait
//! on the high watermark. `net` speaks the Kafka protocol and keeps a `ReplicaState`
//! per hosted partition; the engine stores the log.
//!
//! Dependencies point one way: `engine` <- `replication` <- `net` <- `skein`.

pub mod delayed;
pub mod replica;

pub use delayed::HighWatermarkWaiters;
pub use replica::{BrokerId, IsrProposal, ReplicaState, Role};
