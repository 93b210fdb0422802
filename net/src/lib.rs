//! Skein's Kafka wire protocol layer.
//!
//! A request arrives on the connection's shard (`server`), is parsed with the
//! `kafka-protocol` codecs (generated from Kafka's JSON specs), checked against the
//! handler `registry` and handed to its handler (`handlers/`, one module per API). A
//! handler works on partitions through `Shard::route`, which runs the operation on the
//! partition's owner shard, here or across a bounded channel (`router`). Metadata has
//! one writer (`metadata::controller`, on shard 0) and every shard its own published image.
//!
//! Architecture invariant: Kafka error codes are produced only here (`errors`), and
//! this crate owns no storage logic: it calls `skein_engine`.

pub mod append;
pub mod budget;
pub mod configs;
pub mod connections;
pub mod error_response;
pub mod errors;
pub mod group;
pub mod handlers;
pub mod limits;
pub mod metadata;
pub mod metrics;
pub mod operations;
pub mod producer;
pub mod registry;
pub mod router;
pub mod server;
pub mod shard;
pub mod topics;

pub use metadata::store::MetadataStore;
pub use shard::{NodeSettings, Shard};
