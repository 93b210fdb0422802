//! Share groups (KIP-932) on the partitions' leaders: each share group's state of a
//! partition (`partition`, the state machine), its leader's operations on it
//! (`leader`: ShareFetch and ShareAcknowledge on the owner shard, persisted through
//! the share coordinator, `coordinator::share`), the dead-letter topics records go to
//! when rejected or given up on (`dead_letter`, KIP-1191), and the share sessions of a
//! shard's connections (`sessions`). Membership is the group coordinator's (`group::share`).

pub mod dead_letter;
pub mod leader;
pub mod partition;
pub mod sessions;
pub mod slots;
