//! Replication throttles, as Kafka's reassignment tool sets them: the broker rates
//! `leader.replication.throttled.rate` and `follower.replication.throttled.rate`
//! (dynamic broker configs) apply to the replicas the topic configs
//! `leader.replication.throttled.replicas` and `follower.replication.throttled.replicas`
//! name (`*`, or `partition:broker` pairs). A follower leaves its throttled partitions
//! out of its fetches while its quota is spent; a leader answers throttled partitions
//! with no records while its quota is spent. Other partitions replicate at full speed.
//!
//! Quotas are per shard (each takes its share of the broker's rate), so no lock is
//! shared: a token bucket holding at most one second of its rate. As in Kafka, the
//! quota is checked before a fetch, so one fetch (up to 1 MiB a partition) may
//! overshoot it; the fetches after it wait until the average is back at the rate.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Instant;

use skein_control::metadata::MetadataImage;

pub const LEADER_RATE: &str = "leader.replication.throttled.rate";
pub const FOLLOWER_RATE: &str = "follower.replication.throttled.rate";
pub const LEADER_REPLICAS: &str = "leader.replication.throttled.replicas";
pub const FOLLOWER_REPLICAS: &str = "follower.replication.throttled.replicas";

/// A byte rate: tokens refill at the rate, up to one second's worth; spending may
/// go below zero, and the quota is spent until the tokens are back above it.
#[derive(Debug)]
pub struct ByteRate {
    tokens: f64,
    last: Instant,
}

impl Default for ByteRate {
    fn default() -> Self {
        ByteRate { tokens: 0.0, last: Instant::now() }
    }
}

impl ByteRate {
    fn refill(&mut self, rate: u64, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate as f64).min(rate as f64);
        self.last = now;
    }

    /// Whether the quota at `rate` bytes a second is spent.
    pub fn spent(&mut self, rate: u64, now: Instant) -> bool {
        self.refill(rate, now);
        self.tokens < 0.0
    }

    /// Spends `bytes` of the quota at `rate`.
    pub fn record(&mut self, rate: u64, bytes: u64, now: Instant) {
        self.refill(rate, now);
        self.tokens -= bytes as f64;
    }
}

/// A shard's two replication quotas.
#[derive(Debug, Default)]
pub struct ReplicationThrottles {
    pub leader: RefCell<ByteRate>,
    pub follower: RefCell<ByteRate>,
}

/// This shard's share (of `shards`) of broker `node`'s rate config `name`, in bytes a
/// second; `None` when it is not set (unlimited).
pub fn shard_rate(image: &MetadataImage, node: i32, name: &str, shards: usize) -> Option<u64> {
    let (value, _) = image.broker_config(node, name)?;
    let rate = value.trim().parse::<i64>().ok().filter(|r| (0..i64::MAX).contains(r))?;
    Some((rate as u64 / shards.max(1) as u64).max(1))
}

/// Whether `configs` (a topic's) name partition `partition` on broker `broker` in the
/// throttled-replica list `list`.
pub fn throttled(configs: &BTreeMap<String, String>, list: &str, partition: i32, broker: i32) -> bool {
    let Some(value) = configs.get(list) else { return false };
    if value.trim() == "*" {
        return true;
    }
    value.split(',').filter_map(|entry| entry.trim().split_once(':')).any(|(p, b)| {
        p.trim().parse::<i32>().is_ok_and(|p| p == partition) && b.trim().parse::<i32>().is_ok_and(|b| b == broker)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // A quota lets a second's worth through, then holds to its rate.
    #[test]
    fn byte_rates_hold_their_quota() {
        let start = Instant::now();
        let mut rate = ByteRate { tokens: 1000.0, last: start };
        assert!(!rate.spent(1000, start));
        rate.record(1000, 1500, start);
        assert!(rate.spent(1000, start));
        assert!(rate.spent(1000, start + std::time::Duration::from_millis(400)));
        assert!(!rate.spent(1000, start + std::time::Duration::from_millis(600)));
        // Idle time refills at most a second's worth.
        assert!(!rate.spent(1000, start + std::time::Duration::from_secs(60)));
        rate.record(1000, 1001, start + std::time::Duration::from_secs(60));
        assert!(rate.spent(1000, start + std::time::Duration::from_secs(60)));
    }

    #[test]
    fn throttled_replica_lists() {
        let configs = |v: &str| BTreeMap::from([(FOLLOWER_REPLICAS.to_string(), v.to_string())]);
        assert!(throttled(&configs("*"), FOLLOWER_REPLICAS, 3, 9));
        assert!(throttled(&configs("0:1, 3:9"), FOLLOWER_REPLICAS, 3, 9));
        assert!(!throttled(&configs("0:1,3:8"), FOLLOWER_REPLICAS, 3, 9));
        assert!(!throttled(&configs(""), FOLLOWER_REPLICAS, 3, 9));
        assert!(!throttled(&configs("*"), LEADER_REPLICAS, 3, 9));
    }
}
