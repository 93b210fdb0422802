//! A partition hosted by a shard: the replica (`replication::Partition`: log,
//! producer state, epoch, ISR, high watermark) plus what the protocol layer keeps of
//! it (its append rules and the load balancer's counters).

use std::cell::Cell;

use skein_control::append::{AppendRules, TopicSettings};
use skein_control::metadata::Assignment;
use skein_engine::io::dma::DmaStorage;
use skein_engine::LeaderEpoch;
use skein_replication as replication;

/// Gives `replica` the role, epochs, replicas and ISR of the controller's `assignment`,
/// counted in `assignments` (the replica fetchers look for new leaders to follow
/// when it moves, instead of walking every partition on a clock).
pub fn assign(replica: &replication::Partition<DmaStorage>, assignment: Assignment, assignments: &Cell<u64>) {
    let now = skein_engine::log::now_ms();
    let Assignment { leader, leader_epoch, partition_epoch, replicas, isr, .. } = assignment;
    replica.assign(leader, LeaderEpoch(leader_epoch), partition_epoch, replicas, isr, now);
    assignments.set(assignments.get() + 1);
}

/// A partition hosted by this shard: the replica (`replication::Partition`: log,
/// producer state, epoch, ISR, high watermark) plus what the protocol layer keeps.
pub struct Partition {
    pub replica: replication::Partition<DmaStorage>,
    /// The topic configs that govern appends (`append::admit`).
    pub rules: Cell<AppendRules>,
    /// Record bytes produced to and fetched from this partition, for placement.
    pub bytes_in: Cell<u64>,
    pub bytes_out: Cell<u64>,
    /// Operations run on this partition (produce, fetch, offsets, group calls, ...),
    /// for the load balancer's per-request cost.
    pub requests: Cell<u64>,
    /// Time the shard spent polling this partition's operations, in nanoseconds.
    pub busy_ns: Cell<u64>,
    /// An ISR change this leader proposed is with the controller.
    pub isr_change_pending: Cell<bool>,
    /// As a follower: records the leader's high watermark was ahead of this log end at
    /// the last fetch.
    pub follower_lag: Cell<i64>,
    /// As the leader: the share-partitions of the share groups consuming it.
    pub shares: crate::share::slots::Shares,
}

/// The replica's fields and methods (`log`, `producers`, `high_watermark`, ...) read
/// through the hosted partition.
impl std::ops::Deref for Partition {
    type Target = replication::Partition<DmaStorage>;

    fn deref(&self) -> &Self::Target {
        &self.replica
    }
}

impl Partition {
    pub fn apply(&self, settings: &TopicSettings) -> Result<(), skein_engine::Error> {
        self.log().set_config(settings.log.clone())?;
        self.rules.set(settings.append);
        self.set_min_insync(settings.append.min_insync_replicas.max(1) as usize);
        Ok(())
    }
}
