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
//! them to its image. A node restarted from its journal applies what its durable
//! commit index covers before raft runs (`applied` starts there), so raft hands it
//! only later entries.

mod feed;
pub mod journal;
mod logger;
pub mod storage;

pub use feed::Feed;
pub use journal::Journal;
use raft::prelude::{ConfState, Entry, EntryType, HardState, Message, Snapshot};
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
        let voters = &durable.snapshot.get_metadata().get_conf_state().voters;
        if !voters.contains(&config.id) {
            return Err(format!("node {} is not among the controller voters {voters:?}", config.id));
        }
        let sole = voters.len() == 1;
        let mut node = RawNode::new(&raft_config, durable, &logger::logger(config.id))
            .map_err(|e| format!("controller quorum: {e}"))?;
        if sole {
            node.campaign().map_err(|e| format!("controller quorum: {e}"))?;
        }
        Ok(Quorum { node, pending: None })
    }

    /// The voters a journal holds (its snapshot's configuration).
    pub fn voters_of(durable: &Durable) -> Vec<u64> {
        durable.snapshot.get_metadata().get_conf_state().voters.clone()
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

    /// Each voter's log end as this leader knows it (the index it matched; this
    /// leader's own last index), by id; empty unless this member leads.
    pub fn voter_progress(&self) -> Vec<(u64, u64)> {
        if !self.is_leader() {
            return Vec::new();
        }
        let me = self.id();
        let mut progress: Vec<(u64, u64)> = self
            .node
            .raft
            .prs()
            .iter()
            .map(|(&id, p)| (id, if id == me { self.last_index() } else { p.matched }))
            .collect();
        progress.sort_unstable();
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
        self.node
            .raft
            .prs()
            .iter()
            .filter(|(id, progress)| **id != me && progress.recent_active)
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

    /// The committed entries that carry data. A leader's empty entry (written when it
    /// takes office) carries none; membership changes are not used (the voters are
    /// configured) and are refused with a warning.
    fn commit(&mut self, entries: Vec<Entry>) -> Vec<Committed> {
        let mut out = Vec::with_capacity(entries.len());
        for mut entry in entries {
            match entry.get_entry_type() {
                EntryType::EntryNormal if !entry.data.is_empty() => {
                    out.push(Committed { index: entry.index, term: entry.term, data: entry.take_data().to_vec() })
                }
                EntryType::EntryNormal => {}
                EntryType::EntryConfChange | EntryType::EntryConfChangeV2 => {
                    tracing::warn!(target: "skein::quorum", index = entry.index, "membership change ignored: the voters are configured");
                }
            }
        }
        out
    }
}

/// The configuration of a quorum of `voters`.
pub fn conf_state(voters: &[u64]) -> ConfState {
    ConfState::from((voters.to_vec(), Vec::new()))
}
