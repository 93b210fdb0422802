//! Client quotas (Kafka's ClientQuotaManager): produce and fetch byte rates and a
//! request-time percentage per user and client id, and connection creation rates
//! per ip, enforced per shard (`manager`).

mod entity;
pub mod manager;

pub use entity::*;
pub use manager::{Charge, Ledger, ShardQuotas};
