//! Workload files, modelled on the OpenMessaging Benchmark's: what to create, how many
//! producers and consumers, at what rate, for how long.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The producer rate: messages per second over all producers, or as fast as possible.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Rate {
    PerSecond(u64),
    Named(String),
}

impl Rate {
    /// `None` means `max`.
    pub fn per_second(&self) -> Result<Option<u64>, String> {
        match self {
            Rate::PerSecond(0) => Err("producer_rate must be positive or \"max\"".into()),
            Rate::PerSecond(n) => Ok(Some(*n)),
            Rate::Named(s) if s == "max" => Ok(None),
            Rate::Named(s) => Err(format!("producer_rate {s:?}: expected a number or \"max\"")),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    pub name: String,
    #[serde(default = "one")]
    pub topics: u32,
    #[serde(default = "one")]
    pub partitions_per_topic: u32,
    pub message_size: usize,
    /// A file whose bytes fill the payloads; random bytes when absent.
    #[serde(default)]
    pub payload_file: Option<String>,
    #[serde(default = "one")]
    pub producers_per_topic: u32,
    /// Consumer groups per topic; each group reads every message.
    #[serde(default = "one")]
    pub subscriptions_per_topic: u32,
    #[serde(default = "one")]
    pub consumers_per_subscription: u32,
    pub producer_rate: Rate,
    #[serde(default = "default_acks")]
    pub acks: String,
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    #[serde(default)]
    pub linger_ms: u64,
    /// Produce requests in flight per connection (`max.in.flight.requests.per.connection`,
    /// 5 as in Kafka's clients).
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    #[serde(default = "default_compression")]
    pub compression: String,
    #[serde(default = "default_warmup")]
    pub warmup_secs: u64,
    pub duration_secs: u64,
    /// Topic configs (Kafka names), e.g. `"flush.messages" = "1"`.
    #[serde(default)]
    pub topic_config: BTreeMap<String, String>,
    /// Messages per transaction: each producer is transactional and commits every
    /// this many messages (consumers read committed), and commit latency is measured.
    #[serde(default)]
    pub transaction_size: Option<u32>,
    /// Consumers start this long after the producers, from each partition's first
    /// offset: they read a backlog, from disk once it outgrows the broker's cache (a
    /// consumer catching up). Native driver only; 0, the default, starts them at once
    /// at the latest offsets.
    #[serde(default)]
    pub consumer_delay_secs: u64,
}

fn one() -> u32 {
    1
}
fn default_acks() -> String {
    "all".into()
}
fn default_batch_size() -> usize {
    131_072
}
fn default_max_in_flight() -> usize {
    5
}
fn default_compression() -> String {
    "none".into()
}
fn default_warmup() -> u64 {
    5
}

impl Workload {
    /// Reads and checks a workload file.
    ///
    /// # Errors
    /// A message naming the file and the problem.
    pub fn load(path: &Path) -> Result<Workload, String> {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read workload {}: {e}", path.display()))?;
        let workload: Workload =
            toml::from_str(&text).map_err(|e| format!("invalid workload {}: {e}", path.display()))?;
        workload.check().map_err(|e| format!("invalid workload {}: {e}", path.display()))?;
        Ok(workload)
    }

    /// # Errors
    /// A message naming the bad field.
    pub fn check(&self) -> Result<(), String> {
        self.producer_rate.per_second()?;
        if self.message_size < 16 {
            return Err("message_size must be at least 16 (the payload carries its send time)".into());
        }
        if self.topics == 0 || self.partitions_per_topic == 0 || self.producers_per_topic == 0 {
            return Err("topics, partitions_per_topic and producers_per_topic must be positive".into());
        }
        if self.max_in_flight == 0 {
            return Err("max_in_flight must be positive".into());
        }
        if self.transaction_size == Some(0) {
            return Err("transaction_size must be positive".into());
        }
        if self.duration_secs == 0 {
            return Err("duration_secs must be positive".into());
        }
        if !["0", "1", "all", "-1"].contains(&self.acks.as_str()) {
            return Err(format!("acks {:?}: expected 0, 1 or all", self.acks));
        }
        if !["none", "gzip", "snappy", "lz4", "zstd"].contains(&self.compression.as_str()) {
            return Err(format!("compression {:?}: expected none, gzip, snappy, lz4 or zstd", self.compression));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shipped workloads parse, and bad fields are named.
    #[test]
    fn shipped_workloads_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
        let mut count = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            Workload::load(&path).unwrap_or_else(|e| panic!("{e}"));
            count += 1;
        }
        assert!(count >= 5);
        let bad: Result<Workload, _> =
            toml::from_str("name='x'\nmessage_size=8\nproducer_rate='fast'\nduration_secs=1");
        assert!(bad.unwrap().check().is_err());
    }
}
