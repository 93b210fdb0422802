//! Skein's Kafka wire protocol layer.
//!
//! A request arrives on the connection's shard (`server`), is parsed with the
//! `kafka-protocol` codecs (generated from Kafka's JSON specs), checked against the
//! handler `registry` and handed to its handler (`handlers/`, one module per API). A
//! handler works on partitions through `Shard::call`, which runs a typed operation on the
//! partition's owner shard, here or across a bounded channel (`router`). Metadata has
//! one writer (`metadata::controller`, on shard 0) and every shard its own published image.
//!
//! Architecture invariant: Kafka error codes are defined only here, in `errors`
//! (which maps the engine's errors and the replication layer's `Refusal`s), and this
//! crate owns no storage or replica logic: it calls `skein_replication` and
//! `skein_engine`.

pub mod append;
pub mod authorize;
pub mod broker_configs;
pub mod budget;
pub mod capture;
pub mod client_metrics;
pub mod configs;
pub mod connections;
pub mod control;
pub mod coordinator;
pub mod error_response;
pub mod errors;
pub mod features;
pub mod fetch_sessions;
pub mod frame;
pub mod group;
pub mod handlers;
pub mod hosted;
pub mod incoming;
pub mod limits;
pub mod metadata;
pub mod metrics;
pub mod operations;
pub mod peer;
pub mod quota;
pub mod registry;
pub mod replica_fetcher;
pub mod security;
pub mod server;
pub mod shard;
pub mod share;
pub mod telemetry;
pub mod throttle;
pub mod topics;
pub mod txn;
mod typed;
pub mod virtual_brokers;

pub use shard::{NodeSettings, Shard};
