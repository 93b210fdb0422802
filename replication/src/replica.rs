//! A partition's replica state, as Kafka's `Partition` keeps it: its role and leader
//! epoch, the assigned replicas and the ISR with its partition epoch, every follower's
//! log end offset as the leader last saw it, and the high watermark.
//!
//! The rules, from Kafka 4.x:
//! - The high watermark is the smallest log end offset over the ISR (the leader's own
//!   included), and never moves back while the leader keeps its epoch.
//! - A follower's fetch at offset `o` tells the leader that the follower's log end is
//!   `o`. The follower is caught up when `o` reaches the leader's log end as it was at
//!   the follower's previous fetch (`last_caught_up_ms`), as `Replica.updateFetchState`
//!   does; a follower not caught up for `replica.lag.time.max.ms` leaves the ISR.
//! - A follower outside the ISR joins it once its log end reaches the high watermark
//!   (and the leader's epoch start, so it holds this epoch's records).
//! - Requests carry the sender's leader epoch: older than the leader's is
//!   FENCED_LEADER_EPOCH, newer is UNKNOWN_LEADER_EPOCH.
//!
//! ISR changes are proposed here and take effect only when the controller commits them
//! (`apply_isr` with a newer partition epoch), as AlterPartition works.
//!
//! Pure state: no I/O, no clock (times are passed in), so the simulation tests can
//! drive it with a simulated network and clock.

use std::collections::BTreeMap;

use skein_engine::{LeaderEpoch, Offset};

use crate::refusal::Refusal;

/// A broker's id.
pub type BrokerId = i32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower { leader: BrokerId },
}

/// What the leader knows of a follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Follower {
    log_end: Offset,
    /// When its log end last reached the leader's (ms).
    last_caught_up_ms: i64,
    /// The leader's log end at the follower's previous fetch, and when that was.
    leader_end_at_last_fetch: Offset,
    last_fetch_ms: i64,
}

/// A change of the ISR for the controller to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrProposal {
    pub isr: Vec<BrokerId>,
    /// The partition epoch the proposal builds on.
    pub partition_epoch: i32,
}

#[derive(Debug, Clone)]
pub struct ReplicaState {
    broker: BrokerId,
    role: Role,
    leader_epoch: LeaderEpoch,
    partition_epoch: i32,
    replicas: Vec<BrokerId>,
    isr: Vec<BrokerId>,
    /// Followers proposed to join the ISR, not yet committed: the high watermark
    /// counts them already (Kafka's maximal ISR, KIP-497), so that it cannot pass a
    /// member the controller is about to add.
    joining: Vec<BrokerId>,
    /// Followers' progress (leader only), by broker.
    followers: BTreeMap<BrokerId, Follower>,
    /// This replica's log end (what it has written).
    log_end: Offset,
    /// The offset at which this leader's epoch began.
    epoch_start: Offset,
    high_watermark: Offset,
    /// The topic's `min.insync.replicas`: the high watermark moves only while the ISR
    /// has at least this many members (KIP-966), so a replica that left a smaller ISR
    /// holds every committed record and may be elected from the ELR.
    min_insync: usize,
}

impl ReplicaState {
    /// A single replica that leads with itself as the ISR: one node, replication
    /// factor 1. Its high watermark is its log end.
    pub fn sole_leader(broker: BrokerId, epoch: LeaderEpoch, log_end: Offset) -> ReplicaState {
        let mut state = ReplicaState {
            broker,
            role: Role::Follower { leader: broker },
            leader_epoch: LeaderEpoch(-1),
            partition_epoch: 0,
            replicas: vec![broker],
            isr: vec![broker],
            joining: Vec::new(),
            followers: BTreeMap::new(),
            log_end,
            epoch_start: log_end,
            high_watermark: log_end,
            min_insync: 1,
        };
        state.become_leader(epoch, 0, vec![broker], vec![broker], log_end, 0);
        state
    }

    /// The broker this replica is on.
    pub fn broker(&self) -> BrokerId {
        self.broker
    }

    pub fn role(&self) -> Role {
        self.role
    }

    pub fn leader_epoch(&self) -> LeaderEpoch {
        self.leader_epoch
    }

    pub fn partition_epoch(&self) -> i32 {
        self.partition_epoch
    }

    pub fn isr(&self) -> &[BrokerId] {
        &self.isr
    }

    pub fn replicas(&self) -> &[BrokerId] {
        &self.replicas
    }

    pub fn high_watermark(&self) -> Offset {
        self.high_watermark
    }

    pub fn log_end(&self) -> Offset {
        self.log_end
    }

    /// How long (ms at `now_ms`) the follower furthest behind has not been caught up
    /// with this leader (0 when every follower that fetched is; leader only).
    pub fn max_follower_lag_ms(&self, now_ms: i64) -> i64 {
        self.followers.values().map(|f| (now_ms - f.last_caught_up_ms).max(0)).max().unwrap_or(0)
    }

    /// Sets the topic's `min.insync.replicas`; a leader's high watermark may move.
    pub fn set_min_insync(&mut self, min_insync: usize) -> bool {
        self.min_insync = min_insync.max(1);
        self.advance_high_watermark()
    }

    /// A follower's log end as this leader last saw it (`None`: not fetched yet, or
    /// this replica does not lead).
    pub fn follower_log_end(&self, follower: BrokerId) -> Option<Offset> {
        self.followers.get(&follower).map(|f| f.log_end)
    }

    /// Takes leadership in `epoch` (from the controller). Followers start unknown:
    /// their log ends count from their first fetch. The high watermark carries over
    /// (a new leader never moves it back; it may lag until followers fetch).
    pub fn become_leader(
        &mut self,
        epoch: LeaderEpoch,
        partition_epoch: i32,
        replicas: Vec<BrokerId>,
        isr: Vec<BrokerId>,
        log_end: Offset,
        now_ms: i64,
    ) {
        self.role = Role::Leader;
        self.leader_epoch = epoch;
        self.partition_epoch = partition_epoch;
        self.log_end = log_end;
        self.epoch_start = log_end;
        self.followers = replicas
            .iter()
            .filter(|&&r| r != self.broker)
            .map(|&r| {
                let follower = Follower {
                    log_end: Offset(-1),
                    last_caught_up_ms: now_ms,
                    leader_end_at_last_fetch: Offset(-1),
                    last_fetch_ms: now_ms,
                };
                (r, follower)
            })
            .collect();
        self.replicas = replicas;
        self.isr = isr;
        self.joining.clear();
        self.high_watermark = self.high_watermark.min(log_end);
        self.advance_high_watermark();
    }

    /// Starts the high watermark over at `offset` (a replica of several opened with
    /// no record of the committed end: it learns it again from the ISR or the leader).
    pub fn restart_high_watermark(&mut self, offset: Offset) {
        self.high_watermark = offset;
    }

    /// Follows `leader` in `epoch`. The high watermark is what the leader reports.
    pub fn become_follower(&mut self, leader: BrokerId, epoch: LeaderEpoch, partition_epoch: i32, log_end: Offset) {
        self.role = Role::Follower { leader };
        self.leader_epoch = epoch;
        self.partition_epoch = partition_epoch;
        self.log_end = log_end;
        self.followers.clear();
        self.joining.clear();
        self.high_watermark = self.high_watermark.min(log_end);
    }

    /// Checks a request's leader epoch against this replica's (-1: not given).
    ///
    /// # Errors
    /// FENCED_LEADER_EPOCH for an older epoch, UNKNOWN_LEADER_EPOCH for a newer one.
    pub fn check_epoch(&self, epoch: i32) -> Result<(), Refusal> {
        match epoch {
            -1 => Ok(()),
            e if e < self.leader_epoch.0 => Err(Refusal::FencedLeaderEpoch),
            e if e > self.leader_epoch.0 => Err(Refusal::UnknownLeaderEpoch),
            _ => Ok(()),
        }
    }

    /// This replica wrote up to `log_end`. Returns whether the high watermark moved.
    pub fn local_append(&mut self, log_end: Offset) -> bool {
        self.log_end = self.log_end.max(log_end);
        self.advance_high_watermark()
    }

    /// A follower fetched at `fetch_offset` in `epoch`. Returns whether the high
    /// watermark moved, and an ISR expansion to propose if the follower caught up.
    ///
    /// # Errors
    /// NOT_LEADER_OR_FOLLOWER when this replica does not lead or the follower is not a
    /// replica; an epoch error from `check_epoch`.
    pub fn follower_fetch(
        &mut self,
        follower: BrokerId,
        fetch_offset: Offset,
        epoch: i32,
        now_ms: i64,
    ) -> Result<(bool, Option<IsrProposal>), Refusal> {
        if self.role != Role::Leader {
            return Err(Refusal::NotLeaderOrFollower);
        }
        self.check_epoch(epoch)?;
        let leader_end = self.log_end;
        let Some(progress) = self.followers.get_mut(&follower) else {
            return Err(Refusal::NotLeaderOrFollower);
        };
        progress.log_end = fetch_offset;
        if fetch_offset >= leader_end {
            progress.last_caught_up_ms = now_ms;
        } else if fetch_offset >= progress.leader_end_at_last_fetch && progress.leader_end_at_last_fetch >= Offset(0) {
            progress.last_caught_up_ms = progress.last_caught_up_ms.max(progress.last_fetch_ms);
        }
        progress.leader_end_at_last_fetch = leader_end;
        progress.last_fetch_ms = now_ms;
        let moved = self.advance_high_watermark();
        let joins =
            !self.isr.contains(&follower) && fetch_offset >= self.high_watermark && fetch_offset >= self.epoch_start;
        let proposal = joins.then(|| {
            let mut isr = self.isr.clone();
            isr.push(follower);
            isr.sort_unstable();
            IsrProposal { isr, partition_epoch: self.partition_epoch }
        });
        Ok((moved, proposal))
    }

    /// The ISR without the followers not caught up for `lag_max_ms`, if any are.
    pub fn isr_shrink(&self, now_ms: i64, lag_max_ms: i64) -> Option<IsrProposal> {
        if self.role != Role::Leader {
            return None;
        }
        let lagging = |r: &BrokerId| {
            *r != self.broker
                && self.followers.get(r).is_some_and(|f| now_ms.saturating_sub(f.last_caught_up_ms) > lag_max_ms)
        };
        if !self.isr.iter().any(lagging) {
            return None;
        }
        let isr = self.isr.iter().copied().filter(|r| !lagging(r)).collect();
        Some(IsrProposal { isr, partition_epoch: self.partition_epoch })
    }

    /// The controller committed `isr` at `partition_epoch`; an older epoch is ignored.
    /// Returns whether the high watermark moved (a smaller ISR may let it advance).
    pub fn apply_isr(&mut self, isr: Vec<BrokerId>, partition_epoch: i32) -> bool {
        if partition_epoch <= self.partition_epoch {
            return false;
        }
        self.isr = isr;
        self.partition_epoch = partition_epoch;
        self.joining.clear();
        self.advance_high_watermark()
    }

    /// The leader sends `proposal` to the controller: the followers it adds count for
    /// the high watermark from now on.
    pub fn proposing(&mut self, proposal: &IsrProposal) {
        self.joining = proposal.isr.iter().copied().filter(|r| !self.isr.contains(r)).collect();
    }

    /// An ISR proposal ended without a change (refused, or unanswered): the followers
    /// it would have added no longer hold the high watermark back.
    pub fn proposal_failed(&mut self) {
        self.joining.clear();
        self.advance_high_watermark();
    }

    /// This replica truncated its log to `log_end` (a follower whose tail diverged from
    /// the leader's); its high watermark never stays past its log.
    pub fn truncated(&mut self, log_end: Offset) {
        self.log_end = log_end;
        self.high_watermark = self.high_watermark.min(log_end);
    }

    /// A follower takes the high watermark the leader sent, bounded by its own log end.
    pub fn follower_high_watermark(&mut self, leader_high_watermark: Offset) {
        if matches!(self.role, Role::Follower { .. }) {
            self.high_watermark = self.high_watermark.max(leader_high_watermark.min(self.log_end));
        }
    }

    /// Moves the high watermark up to the smallest log end over the ISR.
    fn advance_high_watermark(&mut self) -> bool {
        if self.role != Role::Leader || self.isr.len() < self.min_insync.min(self.replicas.len()) {
            return false;
        }
        let mut low = self.log_end;
        for replica in self.isr.iter().chain(&self.joining) {
            if *replica == self.broker {
                continue;
            }
            match self.followers.get(replica) {
                Some(f) => low = low.min(f.log_end),
                // An ISR member that is not a known replica holds nothing here.
                None => low = low.min(self.high_watermark),
            }
        }
        if low > self.high_watermark {
            self.high_watermark = low;
            return true;
        }
        false
    }
}

/// The leader's side of a follower's fetch at `fetch_offset` whose last batch is in
/// `last_fetched_epoch` (KIP-320): `Some((epoch, end))` when the follower's log
/// diverged, where `epoch` is the largest the leader has at or below the follower's
/// (-1: none) and `end` where it ends in the leader's log; the follower then truncates
/// (`truncation_offset`). A follower past the leader's end holds records the leader
/// never had (uncommitted: the leader holds every committed one) and is told the
/// leader's end. `end_for` is the leader's epoch lookup (Kafka's `endOffsetFor`),
/// `latest` its newest epoch.
pub fn divergence(
    end_for: impl Fn(LeaderEpoch) -> Option<(LeaderEpoch, Offset)>,
    latest: Option<LeaderEpoch>,
    log_end: Offset,
    fetch_offset: Offset,
    last_fetched_epoch: i32,
) -> Option<(i32, i64)> {
    if last_fetched_epoch >= 0 {
        // An epoch newer than any here (this log has none): to this log's end.
        let (epoch, end) = end_for(LeaderEpoch(last_fetched_epoch)).unwrap_or((LeaderEpoch(-1), log_end));
        if epoch.0 != last_fetched_epoch || end < fetch_offset {
            return Some((epoch.0, end.0));
        }
    }
    (fetch_offset > log_end).then(|| (latest.map_or(-1, |e| e.0), log_end.0))
}

/// Where a follower truncates when its leader says their logs diverged, answering
/// `(leader_epoch, leader_end)` for the follower's last epoch: the largest epoch the
/// leader has at or below it, and where that epoch ends in the leader's log. As Kafka's
/// `getOffsetTruncationState`: when the follower has that epoch too, to the smaller of
/// the two ends; when it does not, to the end of its own largest epoch below it (the
/// next fetch is checked again from there); with no epoch from the leader, to the
/// leader's end, or without one to the high watermark. Never past `own_end`.
/// `own_end_for` is the follower's own `(epoch, end)` for `leader_epoch`.
pub fn truncation_offset(
    own_end_for: Option<(LeaderEpoch, Offset)>,
    own_end: Offset,
    high_watermark: Offset,
    leader_epoch: i32,
    leader_end: i64,
) -> Offset {
    let target = if leader_end < 0 {
        high_watermark
    } else if leader_epoch < 0 {
        Offset(leader_end)
    } else {
        match own_end_for {
            Some((epoch, end)) if epoch.0 != leader_epoch => end,
            Some((_, end)) => end.min(Offset(leader_end)),
            None => Offset(leader_end),
        }
    };
    target.min(own_end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader_of_three(log_end: i64) -> ReplicaState {
        let mut state = ReplicaState::sole_leader(1, LeaderEpoch(0), Offset(0));
        state.become_leader(LeaderEpoch(3), 5, vec![1, 2, 3], vec![1, 2, 3], Offset(log_end), 0);
        state
    }

    // One replica: the high watermark is the log end.
    #[test]
    fn a_sole_leader_commits_what_it_writes() {
        let mut state = ReplicaState::sole_leader(1, LeaderEpoch(0), Offset(10));
        assert_eq!(state.high_watermark(), Offset(10));
        assert!(state.local_append(Offset(15)));
        assert_eq!(state.high_watermark(), Offset(15));
    }

    // The high watermark is the smallest log end over the ISR, and never moves back.
    #[test]
    fn the_high_watermark_waits_for_the_isr() {
        let mut state = leader_of_three(0);
        state.local_append(Offset(10));
        assert_eq!(state.high_watermark(), Offset(0), "followers have not fetched");
        assert_eq!(state.follower_fetch(2, Offset(10), 3, 5), Ok((false, None)));
        assert_eq!(state.follower_fetch(3, Offset(7), 3, 5), Ok((true, None)));
        assert_eq!(state.high_watermark(), Offset(7));
        // A follower that truncated and fetches lower does not move it back.
        state.follower_fetch(3, Offset(4), 3, 6).unwrap();
        assert_eq!(state.high_watermark(), Offset(7));
    }

    // KIP-966's strict min ISR: below min.insync.replicas (capped at the replicas) the
    // high watermark stays, so a replica that left the ISR then holds every committed
    // record; back at min.insync.replicas it moves on.
    #[test]
    fn the_high_watermark_waits_for_min_insync_replicas() {
        let mut state = ReplicaState::sole_leader(1, LeaderEpoch(0), Offset(0));
        state.set_min_insync(2);
        state.become_leader(LeaderEpoch(3), 5, vec![1, 2, 3], vec![1], Offset(10), 0);
        state.local_append(Offset(20));
        assert_eq!(state.high_watermark(), Offset(0), "an ISR of one is below min.insync.replicas 2");
        state.follower_fetch(2, Offset(20), 3, 1).unwrap();
        assert!(state.apply_isr(vec![1, 2], 6));
        assert_eq!(state.high_watermark(), Offset(20));
        // A sole replica of a topic asking for two is held to one.
        let mut alone = ReplicaState::sole_leader(1, LeaderEpoch(0), Offset(0));
        alone.set_min_insync(2);
        alone.local_append(Offset(5));
        assert_eq!(alone.high_watermark(), Offset(5));
    }

    // A follower proposed to join the ISR (the proposal sent) holds the high watermark
    // back before the controller commits it (KIP-497's maximal ISR): otherwise it
    // would join behind the high watermark and could be elected without committed
    // records. A failed proposal lets go.
    #[test]
    fn a_joining_follower_holds_the_high_watermark() {
        let mut state = ReplicaState::sole_leader(1, LeaderEpoch(0), Offset(0));
        state.become_leader(LeaderEpoch(3), 5, vec![1, 2, 3], vec![1, 3], Offset(10), 0);
        state.follower_fetch(3, Offset(10), 3, 1).unwrap();
        assert_eq!(state.high_watermark(), Offset(10));
        let (_, proposal) = state.follower_fetch(2, Offset(10), 3, 1).unwrap();
        let proposal = proposal.unwrap();
        assert_eq!(proposal.isr, vec![1, 2, 3]);
        state.proposing(&proposal);
        state.local_append(Offset(20));
        state.follower_fetch(3, Offset(20), 3, 2).unwrap();
        assert_eq!(state.high_watermark(), Offset(10), "held at the joining follower's log end");
        state.proposal_failed();
        assert_eq!(state.high_watermark(), Offset(20));
        state.follower_fetch(2, Offset(20), 3, 3).unwrap();
        assert!(state.apply_isr(vec![1, 2, 3], 6) || state.high_watermark() == Offset(20));
        state.local_append(Offset(30));
        state.follower_fetch(3, Offset(30), 3, 4).unwrap();
        assert_eq!(state.high_watermark(), Offset(20), "a member now");
    }

    // Requests from an older epoch are fenced; from a newer one, unknown.
    #[test]
    fn epochs_fence_and_unknown() {
        let mut state = leader_of_three(0);
        assert_eq!(state.follower_fetch(2, Offset(0), 2, 0), Err(Refusal::FencedLeaderEpoch));
        assert_eq!(state.follower_fetch(2, Offset(0), 4, 0), Err(Refusal::UnknownLeaderEpoch));
        assert_eq!(state.follower_fetch(9, Offset(0), 3, 0), Err(Refusal::NotLeaderOrFollower));
        state.become_follower(2, LeaderEpoch(4), 6, Offset(0));
        assert_eq!(state.follower_fetch(3, Offset(0), 4, 0), Err(Refusal::NotLeaderOrFollower));
    }

    // A follower not caught up for replica.lag.time.max.ms is proposed out of the ISR;
    // once the controller commits it, the high watermark may advance without it; the
    // follower rejoins when it reaches the high watermark.
    #[test]
    fn the_isr_shrinks_and_expands() {
        let mut state = leader_of_three(0);
        state.local_append(Offset(100));
        state.follower_fetch(2, Offset(100), 3, 1_000).unwrap();
        state.follower_fetch(3, Offset(40), 3, 1_000).unwrap();
        assert_eq!(state.isr_shrink(20_000, 30_000), None, "within the lag");
        state.follower_fetch(2, Offset(100), 3, 40_000).unwrap();
        let shrink = state.isr_shrink(40_000, 30_000).expect("follower 3 lags");
        assert_eq!(shrink, IsrProposal { isr: vec![1, 2], partition_epoch: 5 });
        assert_eq!(state.high_watermark(), Offset(40));
        assert!(state.apply_isr(shrink.isr, 6), "without 3 the ISR is at 100");
        assert_eq!(state.high_watermark(), Offset(100));
        assert!(!state.apply_isr(vec![1, 2, 3], 6), "a stale epoch is ignored");
        let (_, grow) = state.follower_fetch(3, Offset(100), 3, 41_000).unwrap();
        assert_eq!(grow, Some(IsrProposal { isr: vec![1, 2, 3], partition_epoch: 6 }));
    }

    // A follower that keeps up with a moving leader stays caught up even though its
    // fetch offset is always a little behind the leader's current end.
    #[test]
    fn a_follower_chasing_a_busy_leader_stays_in_sync() {
        let mut state = leader_of_three(0);
        for step in 1..100i64 {
            state.local_append(Offset(step * 10));
            // Each fetch reaches what the leader had at the previous fetch.
            state.follower_fetch(2, Offset((step - 1) * 10), 3, step * 1_000).unwrap();
            state.follower_fetch(3, Offset((step - 1) * 10), 3, step * 1_000).unwrap();
        }
        assert_eq!(state.isr_shrink(100_000, 30_000), None);
    }

    // A follower takes the leader's high watermark, never past its own log end.
    #[test]
    fn followers_bound_the_leaders_high_watermark() {
        let mut state = ReplicaState::sole_leader(2, LeaderEpoch(0), Offset(0));
        state.become_follower(1, LeaderEpoch(3), 5, Offset(30));
        state.follower_high_watermark(Offset(50));
        assert_eq!(state.high_watermark(), Offset(30));
        state.local_append(Offset(60));
        state.follower_high_watermark(Offset(50));
        assert_eq!(state.high_watermark(), Offset(50));
    }

    // The follower led epoch 6 from 120, which the leader never saw (it has 5, then 7
    // from 100): told (5, 100), it cuts to where its own epoch 5 ends (120, where its
    // 6 began) only when the leader's end is not smaller; a follower without the
    // leader's epoch cuts to the end of its own older one and asks again.
    #[test]
    fn truncation_follows_the_epochs() {
        let e = LeaderEpoch;
        assert_eq!(truncation_offset(Some((e(5), Offset(120))), Offset(150), Offset(90), 5, 100), Offset(100));
        assert_eq!(truncation_offset(Some((e(5), Offset(80))), Offset(150), Offset(50), 5, 100), Offset(80));
        assert_eq!(truncation_offset(Some((e(3), Offset(70))), Offset(150), Offset(50), 5, 100), Offset(70));
        assert_eq!(truncation_offset(None, Offset(150), Offset(50), 5, 100), Offset(100));
        assert_eq!(truncation_offset(None, Offset(150), Offset(50), -1, 130), Offset(130));
        assert_eq!(truncation_offset(None, Offset(150), Offset(50), -1, -1), Offset(50));
        assert_eq!(truncation_offset(Some((e(5), Offset(120))), Offset(60), Offset(50), 5, 100), Offset(60));
    }
}
