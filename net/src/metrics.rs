//! Per-shard counters of the network layer, read by `/metrics` on the shard's thread.

use std::cell::{Cell, RefCell};

/// Upper bounds (µs) of the request latency histogram buckets, Prometheus style.
pub const LATENCY_BUCKETS_US: [u64; 12] =
    [100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 500_000, 1_000_000];

/// A cumulative latency histogram of one API.
#[derive(Debug, Default, Clone)]
pub struct Latency {
    /// Count per bucket of `LATENCY_BUCKETS_US`, then the overflow (+Inf) bucket.
    pub buckets: [u64; 13],
    pub count: u64,
    pub sum_us: u64,
}

/// Requests and errors by API key, bytes in and out, cross-shard messages.
#[derive(Debug, Default)]
pub struct ShardMetrics {
    pub latency: RefCell<std::collections::BTreeMap<i16, Latency>>,
    pub requests: RefCell<std::collections::BTreeMap<i16, u64>>,
    pub errors: RefCell<std::collections::BTreeMap<i16, u64>>,
    /// Responses a handler built that did not encode at the request's version, by API
    /// key: a handler bug. The client got an error response or a closed connection.
    pub encode_failures: RefCell<std::collections::BTreeMap<i16, u64>>,
    pub bytes_in: Cell<u64>,
    pub bytes_out: Cell<u64>,
    pub cross_shard_messages: Cell<u64>,
    pub connections: Cell<u64>,
    /// Connections closed on accept by a connection limit.
    pub connections_refused: Cell<u64>,
    /// Partitions named in Fetch requests (with sessions, only the changed ones).
    pub fetch_partitions_requested: Cell<u64>,
    /// Fetch waits parked on this shard's partitions now (long polls).
    pub fetch_waits_parked: Cell<u64>,
    /// Attempts to load an offsets partition into the group coordinator that failed.
    pub group_load_failures: Cell<u64>,
    /// ISR changes this shard's leaders proposed: followers dropped, followers added.
    pub isr_shrinks: Cell<u64>,
    pub isr_expands: Cell<u64>,
}

impl ShardMetrics {
    pub fn count_request(&self, api_key: i16) {
        *self.requests.borrow_mut().entry(api_key).or_default() += 1;
    }

    pub fn observe_latency(&self, api_key: i16, elapsed: std::time::Duration) {
        let us = elapsed.as_micros() as u64;
        let mut all = self.latency.borrow_mut();
        let latency = all.entry(api_key).or_default();
        let bucket = LATENCY_BUCKETS_US.iter().position(|&b| us <= b).unwrap_or(LATENCY_BUCKETS_US.len());
        latency.buckets[bucket] += 1;
        latency.count += 1;
        latency.sum_us += us;
    }

    pub fn count_encode_failure(&self, api_key: i16) {
        *self.encode_failures.borrow_mut().entry(api_key).or_default() += 1;
    }

    pub fn count_error(&self, api_key: i16) {
        *self.errors.borrow_mut().entry(api_key).or_default() += 1;
    }
}
