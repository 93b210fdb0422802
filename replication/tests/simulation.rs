//! The replica state machine under a deterministic simulated network and clock
//! (issue: clusters, section 5). Three brokers replicate one partition: the leader
//! appends, followers fetch (truncating where their log diverged from the leader's by
//! the same leader epoch exchange the brokers run: `divergence` on the leader,
//! `truncation_offset` on the follower, over Kafka's leader epoch caches), the ISR
//! shrinks and grows through a simulated controller, and brokers crash, come back,
//! and lose leadership to an ISR member.
//!
//! Checked after every step: no record below the highest high watermark ever reached
//! (an acknowledged `acks=all` record) is lost or changed; the leader's high
//! watermark never passes an ISR member's log end; no replica's high watermark passes
//! its own log end. Checked at every fetch: the follower's truncation converges within
//! a few exchanges and leaves its log a prefix of the leader's. `SIM_SEED=n` replays one seed (`SIM_TRACE=1` prints each step);
//! `SIM_SEEDS=n` runs n seeds (200 by default; 10,000 for the long run, 2 s in release).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use skein_engine::checkpoint::LeaderEpochCache;
use skein_engine::{LeaderEpoch, Offset};
use skein_replication::{divergence, truncation_offset, ReplicaState, Role};

const BROKERS: [i32; 3] = [1, 2, 3];
const LAG_MAX_MS: i64 = 300;

/// A broker: its log (one unique record id per offset, with the epoch it was written
/// in), its leader epoch cache, its replica state, and whether it is up.
struct Broker {
    id: i32,
    log: Vec<(u64, i32)>,
    epochs: LeaderEpochCache,
    state: ReplicaState,
    up: bool,
}

impl Broker {
    fn end(&self) -> Offset {
        Offset(self.log.len() as i64)
    }

    /// Appends records with their epochs, as the engine does: each new epoch starts
    /// where its first record lands.
    fn extend(&mut self, records: &[(u64, i32)]) {
        for &(id, epoch) in records {
            let offset = self.end();
            self.epochs.assign(LeaderEpoch(epoch), offset);
            self.log.push((id, epoch));
        }
    }

    fn truncate(&mut self, offset: Offset) {
        self.log.truncate(offset.0 as usize);
        self.epochs.truncate_from(offset);
        self.state.truncated(self.end());
    }
}

struct Cluster {
    brokers: Vec<Broker>,
    leader: Option<i32>,
    epoch: i32,
    partition_epoch: i32,
    isr: Vec<i32>,
    now: i64,
    next_record: u64,
    /// The records below the highest high watermark ever reached: acknowledged.
    committed: Vec<(u64, i32)>,
}

impl Cluster {
    fn new() -> Cluster {
        let brokers = BROKERS
            .iter()
            .map(|&id| Broker {
                id,
                log: Vec::new(),
                epochs: LeaderEpochCache::default(),
                state: ReplicaState::sole_leader(id, LeaderEpoch(0), Offset(0)),
                up: true,
            })
            .collect();
        let mut cluster = Cluster {
            brokers,
            leader: None,
            epoch: -1,
            partition_epoch: 0,
            isr: BROKERS.to_vec(),
            now: 0,
            next_record: 0,
            committed: Vec::new(),
        };
        cluster.elect(1);
        cluster
    }

    fn broker(&mut self, id: i32) -> &mut Broker {
        self.brokers.iter_mut().find(|b| b.id == id).unwrap()
    }

    /// The controller makes `leader` the leader in a new epoch; the others follow.
    fn elect(&mut self, leader: i32) {
        self.epoch += 1;
        self.partition_epoch += 1;
        self.leader = Some(leader);
        let (epoch, partition_epoch, isr, now) = (self.epoch, self.partition_epoch, self.isr.clone(), self.now);
        for broker in &mut self.brokers {
            let end = broker.end();
            if broker.id == leader {
                // A new leader starts its epoch at its log end (`start_leader_epoch`).
                broker.epochs.assign(LeaderEpoch(epoch), end);
                broker.state.become_leader(
                    LeaderEpoch(epoch),
                    partition_epoch,
                    BROKERS.to_vec(),
                    isr.clone(),
                    end,
                    now,
                );
            } else {
                broker.state.become_follower(leader, LeaderEpoch(epoch), partition_epoch, end);
            }
        }
    }

    fn append(&mut self, count: usize) {
        let Some(leader) = self.leader else { return };
        let epoch = self.epoch;
        let first = self.next_record;
        self.next_record += count as u64;
        let broker = self.broker(leader);
        if !broker.up {
            return;
        }
        let records: Vec<(u64, i32)> = (first..first + count as u64).map(|id| (id, epoch)).collect();
        broker.extend(&records);
        let end = broker.end();
        broker.state.local_append(end);
        self.note_committed();
    }

    /// A follower fetches from the leader: while the leader answers that their logs
    /// diverged (`divergence`), it truncates by its own epochs (`truncation_offset`)
    /// and asks again; then it reports its log end, copies up to `max` records and
    /// takes the leader's high watermark.
    fn fetch(&mut self, follower: i32, max: usize, seed: u64) {
        let Some(leader) = self.leader else { return };
        if follower == leader {
            return;
        }
        let leader_index = self.brokers.iter().position(|b| b.id == leader).unwrap();
        let follower_index = self.brokers.iter().position(|b| b.id == follower).unwrap();
        if !self.brokers[leader_index].up || !self.brokers[follower_index].up {
            return;
        }
        let leader_log = self.brokers[leader_index].log.clone();
        let leader_epochs = self.brokers[leader_index].epochs.clone();
        let leader_end = self.brokers[leader_index].end();
        let follower_broker = &mut self.brokers[follower_index];
        let mut exchanges = 0;
        loop {
            let own_end = follower_broker.end();
            let last = follower_broker.epochs.latest().map_or(-1, |(epoch, _)| epoch.0);
            let end_for = |epoch| leader_epochs.end_offset_for(epoch, leader_end);
            let latest = leader_epochs.latest().map(|(epoch, _)| epoch);
            let Some((epoch, end)) = divergence(end_for, latest, leader_end, own_end, last) else { break };
            let own_end_for = (epoch >= 0).then(|| follower_broker.epochs.end_offset_for(LeaderEpoch(epoch), own_end));
            let high_watermark = follower_broker.state.high_watermark();
            let target = truncation_offset(own_end_for.flatten(), own_end, high_watermark, epoch, end);
            follower_broker.truncate(target);
            exchanges += 1;
            assert!(exchanges <= 8, "seed {seed}: follower {follower}'s truncation does not converge");
        }
        let kept = follower_broker.log.len();
        assert!(
            kept <= leader_log.len() && follower_broker.log[..] == leader_log[..kept],
            "seed {seed}: follower {follower} kept a log that diverges from leader {leader}'s"
        );
        let fetch_offset = follower_broker.end();
        let epoch = self.epoch;
        let now = self.now;
        let result = self.brokers[leader_index].state.follower_fetch(follower, fetch_offset, epoch, now);
        let (_, proposal) = result.expect("a fetch in the current epoch from a replica is accepted");
        if let Some(proposal) = proposal {
            self.commit_isr(proposal.isr, proposal.partition_epoch);
        }
        let high_watermark = self.brokers[leader_index].state.high_watermark();
        let follower_broker = &mut self.brokers[follower_index];
        let start = follower_broker.log.len();
        let end = (start + max).min(leader_log.len());
        follower_broker.extend(&leader_log[start..end]);
        let new_end = follower_broker.end();
        follower_broker.state.local_append(new_end);
        follower_broker.state.follower_high_watermark(high_watermark);
        self.note_committed();
    }

    /// The controller commits an ISR change proposed at `partition_epoch`.
    fn commit_isr(&mut self, isr: Vec<i32>, partition_epoch: i32) {
        if partition_epoch != self.partition_epoch {
            return;
        }
        self.partition_epoch += 1;
        self.isr = isr.clone();
        let leader = self.leader.unwrap();
        let next = self.partition_epoch;
        self.broker(leader).state.apply_isr(isr, next);
        self.note_committed();
    }

    fn shrink_isr(&mut self) {
        let Some(leader) = self.leader else { return };
        let now = self.now;
        if !self.broker(leader).up {
            return;
        }
        if let Some(proposal) = self.broker(leader).state.isr_shrink(now, LAG_MAX_MS) {
            self.commit_isr(proposal.isr, proposal.partition_epoch);
        }
    }

    /// A broker crashes: unsynced data is not modelled here (the engine's tests cover
    /// it); if it led, the controller elects another ISR member, never one outside it.
    fn crash(&mut self, id: i32) {
        self.broker(id).up = false;
        if self.leader == Some(id) {
            self.isr.retain(|&r| r != id);
            match self.isr.iter().copied().find(|&r| self.brokers.iter().any(|b| b.id == r && b.up)) {
                Some(next) => self.elect(next),
                None => {
                    // No eligible replica: offline until the last leader returns.
                    self.isr.push(id);
                    self.leader = None;
                }
            }
        }
    }

    /// A broker comes back: it follows the leader, or leads if the partition was
    /// offline and it is the ISR member that last led.
    fn recover(&mut self, id: i32) {
        self.broker(id).up = true;
        if self.leader.is_none() {
            // Only an ISR member may lead (unclean.leader.election.enable=false); any
            // other broker waits, and the partition stays offline.
            if self.isr.contains(&id) {
                self.elect(id);
            }
        } else {
            let (leader, epoch, partition_epoch) = (self.leader.unwrap(), self.epoch, self.partition_epoch);
            let broker = self.broker(id);
            let end = broker.end();
            broker.state.become_follower(leader, LeaderEpoch(epoch), partition_epoch, end);
        }
    }

    /// Records what the leader's high watermark now covers.
    fn note_committed(&mut self) {
        let Some(leader) = self.leader else { return };
        let broker = self.brokers.iter().find(|b| b.id == leader).unwrap();
        let high_watermark = broker.state.high_watermark().0 as usize;
        if high_watermark > self.committed.len() {
            self.committed.extend_from_slice(&broker.log[self.committed.len()..high_watermark]);
        }
    }

    fn check(&self, seed: u64, step: usize) {
        if let Some(leader) = self.leader {
            let broker = self.brokers.iter().find(|b| b.id == leader).unwrap();
            assert_eq!(broker.state.role(), Role::Leader);
            assert!(
                broker.log.len() >= self.committed.len() && broker.log[..self.committed.len()] == self.committed[..],
                "seed {seed} step {step}: leader {leader} lost or changed an acknowledged record"
            );
            for member in broker.state.isr() {
                let end = self.brokers.iter().find(|b| b.id == *member).unwrap().end();
                assert!(
                    broker.state.high_watermark() <= end || *member == leader,
                    "seed {seed} step {step}: high watermark past ISR member {member}'s log end"
                );
            }
        }
        for broker in &self.brokers {
            assert!(broker.state.high_watermark() <= broker.end(), "seed {seed} step {step}: broker {}", broker.id);
        }
    }
}

fn run(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut cluster = Cluster::new();
    for step in 0..600 {
        cluster.now += rng.random_range(1..40);
        match rng.random_range(0..100) {
            0..=34 => cluster.append(rng.random_range(1..5)),
            35..=79 => {
                let follower = BROKERS[rng.random_range(0..3)];
                cluster.fetch(follower, rng.random_range(1..8), seed);
            }
            80..=87 => cluster.shrink_isr(),
            88..=92 => {
                let up: Vec<i32> = cluster.brokers.iter().filter(|b| b.up).map(|b| b.id).collect();
                if up.len() > 1 {
                    cluster.crash(up[rng.random_range(0..up.len())]);
                }
            }
            _ => {
                let down: Vec<i32> = cluster.brokers.iter().filter(|b| !b.up).map(|b| b.id).collect();
                if !down.is_empty() {
                    cluster.recover(down[rng.random_range(0..down.len())]);
                }
            }
        }
        if std::env::var("SIM_TRACE").is_ok() {
            let view: Vec<String> = cluster
                .brokers
                .iter()
                .map(|b| {
                    format!(
                        "{}{}:end {} hw {} isr {:?}",
                        b.id,
                        if b.up { "" } else { "(down)" },
                        b.end().0,
                        b.state.high_watermark().0,
                        b.state.isr()
                    )
                })
                .collect();
            eprintln!(
                "step {step} leader {:?} epoch {} isr {:?} committed {} | {}",
                cluster.leader,
                cluster.epoch,
                cluster.isr,
                cluster.committed.len(),
                view.join(" | ")
            );
        }
        cluster.check(seed, step);
    }
    assert!(!cluster.committed.is_empty(), "seed {seed}: nothing was ever committed");
}

#[test]
fn acknowledged_records_survive_leader_changes() {
    let seeds = match (std::env::var("SIM_SEED"), std::env::var("SIM_SEEDS")) {
        (Ok(one), _) => one.parse::<u64>().unwrap()..one.parse::<u64>().unwrap() + 1,
        (_, Ok(count)) => 0..count.parse::<u64>().unwrap(),
        _ => 0..200,
    };
    for seed in seeds {
        run(seed);
    }
}
