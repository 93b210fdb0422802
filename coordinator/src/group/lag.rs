//! Consumer lag computed by the broker, without a client (as Burrow does it): for each
//! group a shard coordinates and each partition the group committed an offset for,
//! the partition's high watermark minus the committed offset, in records.
//!
//! The high watermark is what Kafka's own lag measures against
//! (`kafka-consumer-groups --describe`'s LAG, the consumer's `records-lag`): what a
//! read_uncommitted consumer can reach. A read_committed consumer stops at the last
//! stable offset, so while a transaction is open its lag reads higher here by the
//! records from that offset up to the high watermark.
//!
//! `coordinator::group::consumer_lag_task` refreshes a shard's `ConsumerLag` every
//! `limits::CONSUMER_LAG_INTERVAL`: it snapshots the committed offsets
//! (`Coordinator::committed_offsets`), admits groups under
//! `limits::CONSUMER_LAG_SERIES_PER_SHARD_MAX` (`admit`), asks each partition's owning
//! shard for its high watermark (`PartitionOp::Stats`), and replaces the table whole
//! (`ConsumerLag::compute`), so that groups deleted, unloaded or whose offsets expired
//! leave it at the next refresh. `/metrics` renders the table; nothing on the request
//! path reads or writes it.

use std::collections::BTreeMap;

/// One group's committed offsets, by (topic, partition).
pub type GroupOffsets = BTreeMap<(String, i32), i64>;

/// The groups whose lag a refresh computes, and the series left out.
#[derive(Debug, Default, PartialEq)]
pub struct Admitted {
    pub groups: BTreeMap<String, GroupOffsets>,
    /// Partition series of groups that did not fit under the cap.
    pub dropped_series: u64,
}

/// Admits groups in name order while their partition series fit under `cap`. A group
/// that does not fit is left out whole (a partial per-group sum would read as a lag
/// smaller than the group's) and its series are counted as dropped; smaller groups
/// after it may still fit.
pub fn admit(committed: BTreeMap<String, GroupOffsets>, cap: usize) -> Admitted {
    let mut admitted = Admitted::default();
    let mut series = 0usize;
    for (group, offsets) in committed {
        if offsets.is_empty() {
            continue;
        }
        if series + offsets.len() > cap {
            admitted.dropped_series += offsets.len() as u64;
            continue;
        }
        series += offsets.len();
        admitted.groups.insert(group, offsets);
    }
    admitted
}

/// Records between a committed offset and the high watermark; none for a commit at or
/// past it (a consumer may commit an offset it has not read, or one a truncation
/// removed).
pub fn lag_records(high_watermark: i64, committed: i64) -> i64 {
    (high_watermark - committed).max(0)
}

/// One partition's lag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    pub records: i64,
}

/// One group's lag over the partitions whose high watermark this node knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupLag {
    pub group: String,
    pub partitions: Vec<PartitionLag>,
}

impl GroupLag {
    pub fn sum_records(&self) -> i64 {
        self.partitions.iter().map(|p| p.records).sum()
    }
}

/// The consumer lag of the groups one shard coordinates, as of its last refresh.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ConsumerLag {
    /// Counts refreshes, so that a renderer may keep its text until the next one.
    pub generation: u64,
    /// By group name, each group's partitions by (topic, partition).
    pub groups: Vec<GroupLag>,
    /// Partition series left out by `CONSUMER_LAG_SERIES_PER_SHARD_MAX`.
    pub dropped_series: u64,
    /// Committed partitions whose high watermark this node does not know: no replica
    /// here (in a cluster the partition lives on other brokers), the topic is gone,
    /// or the owning shard did not answer.
    pub unknown_partitions: u64,
}

impl ConsumerLag {
    /// The lag of the `admitted` groups, with `high_watermark` of a (topic, partition)
    /// where this node knows it. Groups none of whose partitions are known are left
    /// out.
    pub fn compute(
        admitted: Admitted,
        high_watermark: impl Fn(&str, i32) -> Option<i64>,
        generation: u64,
    ) -> ConsumerLag {
        let mut lag = ConsumerLag { generation, dropped_series: admitted.dropped_series, ..ConsumerLag::default() };
        for (group, offsets) in admitted.groups {
            let mut partitions = Vec::with_capacity(offsets.len());
            for ((topic, partition), committed) in offsets {
                match high_watermark(&topic, partition) {
                    Some(end) => {
                        partitions.push(PartitionLag { topic, partition, records: lag_records(end, committed) })
                    }
                    None => lag.unknown_partitions += 1,
                }
            }
            if !partitions.is_empty() {
                lag.groups.push(GroupLag { group, partitions });
            }
        }
        lag
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(entries: &[(&str, i32, i64)]) -> GroupOffsets {
        entries.iter().map(|&(t, p, o)| ((t.to_string(), p), o)).collect()
    }

    /// (topic, partition, committed offset) entries of one group.
    type Entries<'a> = &'a [(&'a str, i32, i64)];

    fn committed(groups: &[(&str, Entries<'_>)]) -> BTreeMap<String, GroupOffsets> {
        groups.iter().map(|(g, e)| (g.to_string(), offsets(e))).collect()
    }

    // Lag is the high watermark minus the commit, never negative.
    #[test]
    fn lag_is_high_watermark_minus_commit() {
        for (high_watermark, commit, expected) in [(100, 60, 40), (100, 100, 0), (100, 150, 0), (0, 0, 0), (5, 0, 5)] {
            assert_eq!(lag_records(high_watermark, commit), expected, "{high_watermark} - {commit}");
        }
    }

    // Groups are admitted whole in name order; one that does not fit is counted as
    // dropped and smaller ones after it still come in.
    #[test]
    fn admit_keeps_groups_whole_under_the_cap() {
        let all = committed(&[
            ("a", &[("t", 0, 1), ("t", 1, 1)]),
            ("b", &[("t", 0, 1), ("t", 1, 1), ("u", 0, 1)]),
            ("c", &[("t", 0, 1)]),
            ("d", &[]),
        ]);
        let admitted = admit(all.clone(), 3);
        assert_eq!(admitted.groups.keys().collect::<Vec<_>>(), ["a", "c"]);
        assert_eq!(admitted.dropped_series, 3);
        let admitted = admit(all.clone(), 100);
        assert_eq!(admitted.groups.len(), 3, "empty groups have no series");
        assert_eq!(admitted.dropped_series, 0);
        assert_eq!(admit(all, 0).dropped_series, 6);
    }

    // Partitions without a known high watermark are counted, not shown; a group with
    // none known is left out; sums cover the known partitions.
    #[test]
    fn compute_per_partition_and_group() {
        let admitted = admit(
            committed(&[
                ("g1", &[("t", 0, 20), ("t", 1, 40), ("gone", 0, 3)]),
                ("g2", &[("t", 0, 50), ("t", 1, 70)]),
                ("g3", &[("gone", 1, 0)]),
            ]),
            100,
        );
        let high_watermarks = |topic: &str, partition: i32| match (topic, partition) {
            ("t", 0) => Some(50),
            ("t", 1) => Some(50),
            _ => None,
        };
        let lag = ConsumerLag::compute(admitted, high_watermarks, 7);
        assert_eq!(lag.generation, 7);
        assert_eq!(lag.unknown_partitions, 2);
        assert_eq!(
            lag.groups.iter().map(|g| (g.group.as_str(), g.sum_records())).collect::<Vec<_>>(),
            [("g1", 40), ("g2", 0)]
        );
        assert_eq!(
            lag.groups[0].partitions,
            vec![
                PartitionLag { topic: "t".into(), partition: 0, records: 30 },
                PartitionLag { topic: "t".into(), partition: 1, records: 10 },
            ]
        );
    }
}
