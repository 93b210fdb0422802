//! The controller quorum: the metadata log replicated by raft-rs among the controller
//! voters (`--controller-voters`; a single node is a quorum of one).
//!
//! `Quorum` is sans-IO: it wraps raft-rs's `RawNode` over the in-memory `Durable`
//! state and hands its driver `Work` to do, in raft's order:
//! 1. send `Work::messages` at once (a leader's appends go out while it persists);
//! 2. install `Work::snapshot` if any, then apply `Work::committed` in order;
//! 3. make `Work::entries` and `Work::hard_state` durable (`Journal`, one fdatasync);
//! 4. call `advance`, send what it returns (the votes and acknowledgements that
//!    promise the persisted state) and apply what it committed.
//!
//! The data of an entry is opaque here: `net` puts metadata records in it and applies
//! them to its image. Membership changes (`propose_change`, KIP-853's AddRaftVoter
//! and RemoveRaftVoter) are raft-rs's single-member changes, one at a time and only
//! once the leader has committed in its term (raft-rs holds `pending_conf_index`);
//! each carries opaque data too, committed like an entry's, and is applied to raft
//! when it commits. A node restarted from its journal applies what its durable
//! commit index covers before raft runs (`applied` starts there), so raft hands it
//! only later entries.

mod feed;
pub mod journal;
mod logger;
pub mod storage;

pub use feed::Feed;
pub use journal::Journal;
use raft::prelude::{
    ConfChangeSingle, ConfChangeType, ConfChangeV2, ConfState, Entry, EntryType, HardState, Message, Snapshot,
};
use raft::{RawNode, StateRole};
pub use storage::Durable;

/// How a quorum member is set up.
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    pub id: u64,
    pub voters: Vec<u64>,
    /// Ticks without a leader's word before a follower campaigns (raft-rs draws the
    /// timeout between this and twice this).
    pub election_tick: usize,
    /// The drawn election timeout stays below this; `election_tick + 1` makes it
    /// fixed (a deterministic simulation), 0 means twice `election_tick`.
    pub max_election_tick: usize,
    pub heartbeat_tick: usize,
}

impl QuorumConfig {
    /// Kafka's `controller.quorum.election.timeout.ms` default (1 s) at 100 ms ticks.
    pub fn new(id: u64, voters: Vec<u64>) -> QuorumConfig {
        QuorumConfig { id, voters, election_tick: 10, max_election_tick: 0, heartbeat_tick: 2 }
    }
}

/// A committed entry carrying data, to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Committed {
    pub index: u64,
    pub term: u64,
    pub data: Vec<u8>,
    /// A membership change's data (raft applied the change itself).
    pub membership: bool,
}

impl Committed {
    /// The data an entry carries for the state machine, if any: a normal entry's data,
    /// or what a membership change carries beside the change.
    pub fn of(entry: &Entry) -> Option<Committed> {
        let membership = entry.get_entry_type() != EntryType::EntryNormal;
        let data = if membership { &entry.context } else { &entry.data };
        (!data.is_empty()).then(|| Committed { index: entry.index, term: entry.term, data: data.to_vec(), membership })
    }
}

/// A change of the quorum's members, one member at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The member receives the log without voting (it catches up first).
    AddLearner(u64),
    /// The member votes.
    AddVoter(u64),
    Remove(u64),
}

/// Why a membership change was not proposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeRefused {
    NotLeader(Option<u64>),
    /// Another change is not applied yet, or this leader has not committed in its
    /// term (raft-rs would drop the proposal).
    Pending,
    /// The change would remove or demote the leader itself, which raft-rs does not
    /// survive: leadership moves first, and the next leader makes the change.
    Leader,
}

/// A member's place in the configuration and the log, as the leader knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub id: u64,
    pub voter: bool,
    /// The index it matched (the leader's own last index for the leader).
    pub matched: u64,
}

/// What the driver must do for one raft `Ready`, in the order of the fields.
#[derive(Debug, Default)]
pub struct Work {
    pub messages: Vec<Message>,
    /// A snapshot from the leader (this member was too far behind): its data replaces
    /// the state machine before `committed` applies.
    pub snapshot: Option<Snapshot>,
    pub committed: Vec<Committed>,
    /// To persist before `advance`: entries (each replacing its index and later) and
    /// the new hard state.
    pub entries: Vec<Entry>,
    pub hard_state: Option<HardState>,
}

impl Work {
    /// Whether anything must be made durable before `advance`.
    pub fn must_persist(&self) -> bool {
        self.snapshot.is_some() || !self.entries.is_empty() || self.hard_state.is_some()
    }
}

/// What `advance` releases once the work's state is durable.
#[derive(Debug, Default)]
pub struct Advanced {
    pub messages: Vec<Message>,
    pub committed: Vec<Committed>,
}

/// Why a proposal was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotLeader {
    /// The leader this member knows of, if any.
    pub leader: Option<u64>,
}

/// One quorum member's raft state.
pub struct Quorum {
    node: RawNode<Durable>,
    /// The `Ready` whose work the driver is doing.
    pending: Option<raft::Ready>,
    /// The configuration changed since the snapshot: the driver folds the log, so
    /// that the snapshot a new member is sent names it (raft-rs refuses to restore a
    /// snapshot that does not).
    membership_changed: bool,
}

impl std::fmt::Debug for Quorum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quorum")
            .field("id", &self.node.raft.id)
            .field("term", &self.node.raft.term)
            .field("leader", &self.leader())
            .finish()
    }
}

impl Quorum {
    /// A member over `durable`, whose entries up to its durable commit index the caller
    /// has applied already. A sole voter elects itself at once.
    ///
    /// # Errors
    /// A message when the configuration or the recovered state is invalid.
    pub fn new(config: &QuorumConfig, durable: Durable) -> Result<Quorum, String> {
        let applied = durable.hard_state.commit.max(durable.snapshot_index());
        let raft_config = raft::Config {
            id: config.id,
            election_tick: config.election_tick,
            min_election_tick: config.election_tick,
            max_election_tick: config.max_election_tick,
            heartbeat_tick: config.heartbeat_tick,
            applied,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        raft_config.validate().map_err(|e| format!("controller quorum config: {e}"))?;
        // Raft panics on a state it would not have written; a damaged journal is refused.
        durable.check().map_err(|e| format!("the quorum's state is inconsistent: {e}"))?;
        // A member outside the configuration (waiting to be added, or removed) follows
        // without campaigning: raft-rs does not promote it.
        let conf = durable.conf_state_at(durable.hard_state.commit)?;
        let sole = conf.voters == [config.id];
        let membership_changed = !same_members(&conf, durable.snapshot.get_metadata().get_conf_state());
        let mut node = RawNode::new(&raft_config, durable, &logger::logger(config.id))
            .map_err(|e| format!("controller quorum: {e}"))?;
        if sole {
            node.campaign().map_err(|e| format!("controller quorum: {e}"))?;
        }
        Ok(Quorum { node, pending: None, membership_changed })
    }

    /// The voters a journal holds (at its durable commit).
    ///
    /// # Errors
    /// A membership entry that does not parse.
    pub fn voters_of(durable: &Durable) -> Result<Vec<u64>, String> {
        let mut voters = durable.conf_state_at(durable.hard_state.commit)?.voters;
        voters.sort_unstable();
        Ok(voters)
    }

    /// The voters and the learners now.
    pub fn members(&self) -> (Vec<u64>, Vec<u64>) {
        let conf = self.node.raft.prs().conf();
        let mut voters: Vec<u64> = conf.voters().ids().iter().collect();
        let mut learners: Vec<u64> = conf.learners().iter().copied().collect();
        voters.sort_unstable();
        learners.sort_unstable();
        (voters, learners)
    }

    /// Whether the configuration changed since the last call (or the snapshot): the
    /// driver then folds the log at the index it applied.
    pub fn membership_changed(&mut self) -> bool {
        std::mem::take(&mut self.membership_changed)
    }

    /// Proposes a membership change carrying `data`; only the leader takes it, one
    /// at a time.
    ///
    /// # Errors
    /// `NotLeader`, or `Pending` while another change is not applied.
    pub fn propose_change(&mut self, change: Change, data: Vec<u8>) -> Result<(), ChangeRefused> {
        if !self.is_leader() || self.node.raft.lead_transferee.is_some() {
            return Err(ChangeRefused::NotLeader(self.leader()));
        }
        if self.node.raft.has_pending_conf() {
            return Err(ChangeRefused::Pending);
        }
        let (kind, id) = match change {
            Change::AddLearner(id) => (ConfChangeType::AddLearnerNode, id),
            Change::AddVoter(id) => (ConfChangeType::AddNode, id),
            Change::Remove(id) => (ConfChangeType::RemoveNode, id),
        };
        if id == self.id() && kind != ConfChangeType::AddNode {
            return Err(ChangeRefused::Leader);
        }
        let mut single = ConfChangeSingle::default();
        single.set_change_type(kind);
        single.node_id = id;
        let mut conf_change = ConfChangeV2::default();
        conf_change.set_changes(vec![single].into());
        self.node.propose_conf_change(data, conf_change).map_err(|_| ChangeRefused::NotLeader(self.leader()))
    }

    pub fn id(&self) -> u64 {
        self.node.raft.id
    }

    pub fn term(&self) -> u64 {
        self.node.raft.term
    }

    /// The leader this member knows of.
    pub fn leader(&self) -> Option<u64> {
        Some(self.node.raft.leader_id).filter(|&id| id != raft::INVALID_ID)
    }

    pub fn is_leader(&self) -> bool {
        self.node.raft.state == StateRole::Leader
    }

    /// The highest index known committed.
    pub fn committed(&self) -> u64 {
        self.node.raft.raft_log.committed
    }

    /// The index of the last entry in this member's log.
    pub fn last_index(&self) -> u64 {
        self.node.raft.raft_log.last_index()
    }

    /// Each member's log end as this leader knows it, by id; empty unless this
    /// member leads.
    pub fn progress(&self) -> Vec<Progress> {
        if !self.is_leader() {
            return Vec::new();
        }
        let me = self.id();
        let voters = self.node.raft.prs().conf().voters().ids();
        let mut progress: Vec<Progress> = self
            .node
            .raft
            .prs()
            .iter()
            .map(|(&id, p)| Progress {
                id,
                voter: voters.contains(id),
                matched: if id == me { self.last_index() } else { p.matched },
            })
            .collect();
        progress.sort_unstable_by_key(|p| p.id);
        progress
    }

    /// The state as it will be once the pending work is durable.
    pub fn durable(&self) -> &Durable {
        self.node.store()
    }

    /// One clock tick (100 ms in the broker).
    pub fn tick(&mut self) {
        self.node.tick();
    }

    /// A message from another member. Messages for another term or member are
    /// dropped by raft itself.
    pub fn step(&mut self, message: Message) {
        if let Err(e) = self.node.step(message) {
            tracing::debug!(target: "skein::quorum", node = self.id(), error = %e, "message dropped");
        }
    }

    /// Proposes `data` for the log; only the leader takes proposals.
    ///
    /// # Errors
    /// `NotLeader` naming the leader this member knows of.
    pub fn propose(&mut self, data: Vec<u8>) -> Result<(), NotLeader> {
        if !self.is_leader() || self.node.raft.lead_transferee.is_some() {
            return Err(NotLeader { leader: self.leader() });
        }
        self.node.propose(Vec::new(), data).map_err(|_| NotLeader { leader: self.leader() })
    }

    /// Tells raft that `peer` could not be reached (it slows down its appends).
    pub fn unreachable(&mut self, peer: u64) {
        self.node.report_unreachable(peer);
    }

    /// Reports how a snapshot sent to `peer` (a `MsgSnapshot`) went: raft holds that
    /// peer's appends until it knows.
    pub fn snapshot_sent(&mut self, peer: u64, delivered: bool) {
        let status = if delivered { raft::SnapshotStatus::Finish } else { raft::SnapshotStatus::Failure };
        self.node.report_snapshot(peer, status);
    }

    /// As leader: the voter best placed to take over (active recently, furthest
    /// along the log), if any.
    pub fn successor(&self) -> Option<u64> {
        let me = self.id();
        let voters = self.node.raft.prs().conf().voters().ids();
        self.node
            .raft
            .prs()
            .iter()
            .filter(|(id, progress)| **id != me && voters.contains(**id) && progress.recent_active)
            .max_by_key(|(_, progress)| progress.matched)
            .map(|(id, _)| *id)
    }

    /// Hands leadership to `peer` (a controlled shutdown of the leader).
    pub fn transfer_leader(&mut self, peer: u64) {
        self.node.transfer_leader(peer);
    }

    /// The next work, if raft has any. Its state is in memory at once; the driver
    /// makes it durable and then calls `advance` before asking again.
    ///
    /// # Panics
    /// If the previous work was not advanced.
    pub fn ready(&mut self) -> Option<Work> {
        assert!(self.pending.is_none(), "the previous work was not advanced");
        if !self.node.has_ready() {
            return None;
        }
        let mut ready = self.node.ready();
        let messages = ready.take_messages();
        let snapshot = Some(ready.snapshot().clone()).filter(|s| !s.is_empty());
        if let Some(snapshot) = &snapshot {
            self.node.mut_store().install(snapshot.clone());
        }
        let committed = self.commit(ready.take_committed_entries());
        let entries = ready.take_entries();
        self.node.mut_store().append(&entries);
        let hard_state = ready.hs().cloned();
        if let Some(hard_state) = &hard_state {
            self.node.mut_store().hard_state = hard_state.clone();
        }
        self.pending = Some(ready);
        Some(Work { messages, snapshot, committed, entries, hard_state })
    }

    /// Completes the pending work once it is durable.
    ///
    /// # Panics
    /// If no work is pending.
    pub fn advance(&mut self) -> Advanced {
        let mut ready = self.pending.take().expect("advance follows ready");
        let mut messages = ready.take_persisted_messages();
        let mut light = self.node.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.node.mut_store().hard_state.commit = commit;
        }
        messages.extend(light.take_messages());
        let committed = self.commit(light.take_committed_entries());
        self.node.advance_apply();
        Advanced { messages, committed }
    }

    /// Folds the applied entries up to `index` into a snapshot carrying `data` (the
    /// state machine at `index`); the driver then folds its journal.
    pub fn compact(&mut self, index: u64, data: Vec<u8>) {
        self.node.mut_store().compact(index, data);
    }

    /// The committed entries that carry data; a membership change is applied to raft
    /// here. A leader's empty entry (written when it takes office) carries none.
    fn commit(&mut self, entries: Vec<Entry>) -> Vec<Committed> {
        let mut out = Vec::with_capacity(entries.len());
        for entry in entries {
            match Durable::membership(&entry) {
                Ok(None) => {}
                Ok(Some(change)) => match self.node.apply_conf_change(&change) {
                    Ok(conf) => {
                        self.membership_changed = true;
                        tracing::info!(target: "skein::quorum", index = entry.index, voters = ?conf.voters, learners = ?conf.learners, "quorum membership changed");
                        // A leader that committed its own removal (proposed by an
                        // earlier leader) steps down: raft-rs cannot lead without
                        // being a voter, and the others elect a new leader.
                        if self.is_leader() && !conf.voters.contains(&self.id()) {
                            let term = self.term();
                            self.node.raft.become_follower(term, raft::INVALID_ID);
                        }
                    }
                    Err(e) => {
                        tracing::error!(target: "skein::quorum", index = entry.index, error = %e, "membership change refused")
                    }
                },
                // A leader only replicates what it wrote itself, which always parses.
                Err(e) => tracing::error!(target: "skein::quorum", error = %e, "membership entry skipped"),
            }
            out.extend(Committed::of(&entry));
        }
        out
    }
}

/// Whether two configurations hold the same voters and learners, in any order.
fn same_members(a: &ConfState, b: &ConfState) -> bool {
    let sorted = |ids: &[u64]| {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids
    };
    sorted(&a.voters) == sorted(&b.voters) && sorted(&a.learners) == sorted(&b.learners)
}

/// The configuration of a quorum of `voters`.
pub fn conf_state(voters: &[u64]) -> ConfState {
    ConfState::from((voters.to_vec(), Vec::new()))
}
