//! Client quotas (Kafka's ClientQuotaManager): produce and fetch byte rates and a
//! request-time percentage per user and client id, and connection creation rates
//! per ip.

mod entity;

pub use entity::*;
