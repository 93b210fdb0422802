//! Distinct integer types for the quantities the engine stores, so that an offset can
//! never be passed where a leader epoch or a byte position is expected.

use std::fmt;

/// A Kafka offset: the position of a record in a partition's log.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Offset(pub i64);

impl Offset {
    pub const ZERO: Offset = Offset(0);

    /// The offset `delta` records after this one.
    pub fn plus(self, delta: i64) -> Offset {
        Offset(self.0 + delta)
    }

    /// The number of offsets between `earlier` and this one.
    pub fn since(self, earlier: Offset) -> i64 {
        self.0 - earlier.0
    }
}

impl fmt::Debug for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The epoch of the partition leader that appended a batch (KIP-101, KIP-279).
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct LeaderEpoch(pub i32);

/// A record timestamp in milliseconds since the Unix epoch, as Kafka stores it.
pub type TimestampMs = i64;

/// A partition of a topic: the unit the engine stores, named `<topic>-<partition>` on disk.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition { topic: topic.into(), partition }
    }

    /// The directory name Kafka uses for this partition.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    /// Parses a directory name `<topic>-<partition>`; topic names may contain '-'.
    pub fn from_dir_name(name: &str) -> Option<Self> {
        let (topic, partition) = name.rsplit_once('-')?;
        let partition: i32 = partition.parse().ok()?;
        if topic.is_empty() || partition < 0 {
            return None;
        }
        Some(TopicPartition::new(topic, partition))
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Directory names round-trip, including topics that contain dashes.
    #[test]
    fn dir_names() {
        let check = |name: &str, expected: Option<(&str, i32)>| {
            let parsed = TopicPartition::from_dir_name(name);
            assert_eq!(parsed, expected.map(|(t, p)| TopicPartition::new(t, p)), "{name}");
        };
        check("orders-0", Some(("orders", 0)));
        check("my-topic-12", Some(("my-topic", 12)));
        check("orders", None);
        check("-3", None);
        check("orders--1", Some(("orders-", 1)));
        check("orders-x", None);
        assert_eq!(TopicPartition::new("a-b", 7).dir_name(), "a-b-7");
    }
}
