//! `skein bench`: an OpenMessaging-style, latency-first load generator for any
//! Kafka-compatible broker (librdkafka through the rdkafka crate), with
//! coordinated-omission-corrected HdrHistogram latencies, broker CPU and memory
//! sampling, JSON results and side-by-side comparison.
//!
//! Architecture invariant: this crate depends on no other Skein crate; it speaks only
//! the Kafka protocol, so it measures Skein and Apache Kafka alike.

pub mod compare;
pub mod failover;
pub mod run;
pub mod workload;

pub use run::{run, RunOptions, RunResult};
pub use workload::Workload;
