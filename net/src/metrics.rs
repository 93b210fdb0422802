//! Per-shard counters of the network layer, read by `/metrics` on the shard's thread.

use std::cell::{Cell, RefCell};

use skein_engine::metrics::StageHistogram;

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
    /// Record bytes copied to build fetch responses (the rest is shared, `frame.rs`).
    pub fetch_copied_bytes: Cell<u64>,
    /// Produce record bytes that may have been copied as they were read: the prefix
    /// read ahead with a frame's size past the fields before any records
    /// (`incoming.rs`); none after a produce request.
    pub produce_copied_bytes: Cell<u64>,
    pub cross_shard_messages: Cell<u64>,
    /// Of those, clients' produce and fetch operations (not followers', not admin).
    pub cross_shard_client_messages: Cell<u64>,
    /// Partition operations other shards sent here: from the send to their start on
    /// this shard (the channel's queue and this shard's task queue).
    pub cross_shard_wait: StageHistogram,
    pub connections: Cell<u64>,
    /// Connections closed on accept by a connection limit.
    pub connections_refused: Cell<u64>,
    /// SASL authentications that succeeded and that failed (bad credentials, a
    /// malformed or oversized token, an exchange out of order), and TLS handshakes that
    /// failed or timed out.
    pub sasl_authentications: Cell<u64>,
    pub sasl_authentication_failures: Cell<u64>,
    pub tls_handshake_failures: Cell<u64>,
    /// Connections closed for a request sent before authenticating or after the SASL
    /// session expired.
    pub unauthenticated_requests: Cell<u64>,
    /// Responses throttled by a client quota, and the throttle they were given.
    pub quota_throttled_responses: Cell<u64>,
    pub quota_throttle_ms: Cell<u64>,
    /// Connections delayed by a connection creation rate quota.
    pub connections_throttled: Cell<u64>,
    /// ACL checks that refused (a whole request, or one resource of it).
    pub authorization_denials: Cell<u64>,
    /// Partitions named in Fetch requests (with sessions, only the changed ones).
    pub fetch_partitions_requested: Cell<u64>,
    /// Partition reads Fetch requests made: each requested partition once, and after a
    /// long poll's wait the partitions that woke again.
    pub fetch_partition_reads: Cell<u64>,
    /// Fetch waits parked on this shard's partitions now (long polls).
    pub fetch_waits_parked: Cell<u64>,
    /// Attempts to load an offsets partition into the group coordinator that failed.
    pub group_load_failures: Cell<u64>,
    /// ISR changes this shard's leaders proposed: followers dropped, followers added.
    pub isr_shrinks: Cell<u64>,
    pub isr_expands: Cell<u64>,
    /// Assignments (role, epochs, ISR) this shard's partitions took from the
    /// controller: the replica fetchers look for new leaders to follow when it moves.
    pub assignments: Cell<u64>,
    /// Share groups on this shard's partitions (`serve::share_leader`).
    pub shares: skein_coordinator::share::ShareMetrics,
    /// Where Produce and Fetch requests spend their time on this shard.
    pub produce_stages: RequestStages,
    pub fetch_stages: RequestStages,
}

/// The stages of a request on a shard, in order. `handle` holds the partition work
/// (the engine's gate wait, write and sync, and the replication wait, which the
/// engine's own stage histograms break down further).
#[derive(Debug, Default)]
pub struct RequestStages {
    /// From the frame's size prefix to its last byte read (including the wait for
    /// response budget before a frame is buffered).
    pub read: StageHistogram,
    pub decode: StageHistogram,
    /// From a partition operation's send to another shard to its start there
    /// (counted on the owning shard).
    pub route: StageHistogram,
    /// The handler, from dispatch to its response.
    pub handle: StageHistogram,
    pub encode: StageHistogram,
    /// From the encoded response to its write starting: waiting behind earlier
    /// responses of the same connection.
    pub queued: StageHistogram,
    /// Writing the response to the socket.
    pub write: StageHistogram,
}

impl RequestStages {
    /// The stages with their metric names.
    pub fn named(&self) -> [(&'static str, &StageHistogram); 7] {
        [
            ("read", &self.read),
            ("decode", &self.decode),
            ("route", &self.route),
            ("handle", &self.handle),
            ("encode", &self.encode),
            ("queued", &self.queued),
            ("write", &self.write),
        ]
    }
}

impl ShardMetrics {
    pub fn count_throttle(&self, throttle: std::time::Duration) {
        self.quota_throttled_responses.set(self.quota_throttled_responses.get() + 1);
        self.quota_throttle_ms.set(self.quota_throttle_ms.get() + throttle.as_millis() as u64);
    }

    pub fn count_denials(&self, denials: u64) {
        self.authorization_denials.set(self.authorization_denials.get() + denials);
    }

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

    /// The stage histograms of an API, for Produce (0) and Fetch (1).
    pub fn stages(&self, api_key: i16) -> Option<&RequestStages> {
        match api_key {
            0 => Some(&self.produce_stages),
            1 => Some(&self.fetch_stages),
            _ => None,
        }
    }

    pub fn count_encode_failure(&self, api_key: i16) {
        *self.encode_failures.borrow_mut().entry(api_key).or_default() += 1;
    }

    pub fn count_error(&self, api_key: i16) {
        *self.errors.borrow_mut().entry(api_key).or_default() += 1;
    }
}
