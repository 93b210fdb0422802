//! Skein's Kafka wire protocol layer.
//!
//! A request arrives on the connection's shard (`server`), is parsed with the
//! `kafka-protocol` codecs (generated from Kafka's JSON specs), checked against the
//! handler `registry` and handed to its handler (`handlers/`, one module per API). A
//! handler works on partitions through `Shard::call`, which runs a typed operation on the
//! partition's owner shard, here or across a bounded channel (`shard::router`).
//!
//! Below it: the coordinators (`skein-coordinator`), which this crate hosts on its
//! shards through `serve::Host`, and the control plane (`skein-control`: the metadata
//! image and its controller, security, quotas, configs and the Kafka error codes),
//! which it hosts through `metadata::host::Host` (`control`). This crate owns no
//! storage or replica logic: it calls `skein_replication` and `skein_engine`.

#![deny(unsafe_code)]

pub mod authorize;
pub mod budget;
pub mod client_metrics;
pub mod connections;
pub mod control;
pub mod error_response;
pub mod fetch_sessions;
// The only modules with unsafe blocks, each with a SAFETY note: vectored socket
// writes (`frame`, `server`) and reads straight into request bodies (`incoming`).
#[allow(unsafe_code)]
pub mod frame;
pub mod handlers;
#[allow(unsafe_code)]
pub mod incoming;
pub mod metrics;
pub mod operations;
pub mod registry;
pub mod replica_fetcher;
#[allow(unsafe_code)]
pub mod server;
pub mod shard;
pub mod telemetry;
pub mod throttle;
pub mod topics;

pub use shard::{NodeSettings, Shard};
