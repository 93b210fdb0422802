//! Skein's control plane, and the vocabulary every broker layer above it shares.
//!
//! The control plane: the cluster's metadata (`metadata`: the image every shard reads,
//! the one writer `metadata::controller`, the raft quorum that orders its records and
//! the transport between controllers), who may do what (`security`: TLS, SASL, ACLs,
//! delegation tokens, SCRAM credentials) and how much (`quota`), the cluster's feature
//! levels (`features`) and the topic and broker configs (`configs`, `broker_configs`,
//! `append`).
//!
//! It sees a node only through `metadata::host::Host`, so it names no shard and no
//! connection. The Kafka error codes are defined here, in `errors`, once for the
//! broker: the coordinators (`skein-coordinator`) and the protocol layer
//! (`skein-net`) answer with them, the engine and the replication layer answer with
//! typed errors that `errors` maps.
#![forbid(unsafe_code)]

pub mod append;
pub mod broker_configs;
pub mod capture;
pub mod configs;
pub mod errors;
pub mod features;
pub mod limits;
pub mod metadata;
pub mod peer;
pub mod quota;
pub mod security;
mod typed;
pub mod virtual_brokers;
