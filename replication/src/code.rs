//! The Kafka error codes the replication layer answers with (Kafka's `Errors`).

pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
pub const REQUEST_TIMED_OUT: i16 = 7;
pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
pub const INVALID_PRODUCER_EPOCH: i16 = 47;
pub const FENCED_LEADER_EPOCH: i16 = 74;
pub const UNKNOWN_LEADER_EPOCH: i16 = 75;
pub const INVALID_TXN_STATE: i16 = 48;
pub const TRANSACTION_COORDINATOR_FENCED: i16 = 52;
