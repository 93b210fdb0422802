//! `skein bench`: an OpenMessaging-style, latency-first load generator for any
//! Kafka-compatible broker, driven by librdkafka (the rdkafka crate: a real client's
//! view) or by the native driver (pipelined, pre-built batches: a generator cheap
//! enough that the broker is the limit), with
//! coordinated-omission-corrected HdrHistogram latencies, broker CPU and memory
//! sampling, JSON results and side-by-side comparison.
//!
//! Architecture invariant: this crate depends on no other Skein crate; it speaks only
//! the Kafka protocol, so it measures Skein and Apache Kafka alike.

pub mod compare;
pub mod failover;
pub mod native;
pub mod run;
pub mod scale;
pub mod stages;
pub mod workload;

pub use run::{run, RunOptions, RunResult};
pub use workload::Workload;
