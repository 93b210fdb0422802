//! The quorum's raft log in memory, as raft-rs reads it (`raft::Storage`): the last
//! snapshot (with the metadata image it carries), the entries after it, the hard
//! state and the voters. The journal makes the same state durable; `Durable` is what
//! both hold, and what a restart recovers.
//!
//! The members are the snapshot's configuration changed by the membership entries
//! after it (`conf_state`): raft-rs starts from the configuration its applied index
//! holds, and a restart applies what the durable commit covers before raft runs.

use protobuf::Message as _;
use raft::prelude::{ConfChangeType, ConfChangeV2, ConfState, Entry, EntryType, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};

/// What the journal keeps and a restart recovers: the last snapshot, the entries
/// after it and the hard state (term, vote, commit).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Durable {
    pub snapshot: Snapshot,
    pub entries: Vec<Entry>,
    pub hard_state: HardState,
}

impl Durable {
    /// The membership change an entry carries, if it is one. Only single changes are
    /// written (`Quorum::propose_change`); a joint one, or one that does not parse,
    /// is an error.
    ///
    /// # Errors
    /// What is wrong with the entry.
    pub fn membership(entry: &Entry) -> Result<Option<ConfChangeV2>, String> {
        let change = match entry.get_entry_type() {
            EntryType::EntryNormal => return Ok(None),
            EntryType::EntryConfChangeV2 => ConfChangeV2::parse_from_bytes(&entry.data),
            EntryType::EntryConfChange => {
                return Err(format!(
                    "membership entry {} is of the first form, which this version never writes",
                    entry.index
                ))
            }
        }
        .map_err(|e| format!("membership entry {} does not parse: {e}", entry.index))?;
        if change.enter_joint().is_some() || change.leave_joint() || change.changes.len() != 1 {
            return Err(format!("membership entry {} is a joint change, which this version never writes", entry.index));
        }
        Ok(Some(change))
    }

    /// The configuration once the membership entries up to `index` apply to the
    /// snapshot's.
    ///
    /// # Errors
    /// A membership entry that does not parse or is joint.
    pub fn conf_state_at(&self, index: u64) -> Result<ConfState, String> {
        let mut conf = self.snapshot.get_metadata().get_conf_state().clone();
        for entry in self.entries.iter().take_while(|e| e.index <= index) {
            if let Some(change) = Durable::membership(entry)? {
                apply_change(&mut conf, &change);
            }
        }
        Ok(conf)
    }

    /// A new quorum of `voters`, whose initial snapshot (index 0) carries `data`.
    pub fn bootstrap(voters: &[u64], data: Vec<u8>) -> Durable {
        let mut snapshot = Snapshot::default();
        snapshot.set_data(data.into());
        snapshot.mut_metadata().set_conf_state(ConfState::from((voters.to_vec(), Vec::new())));
        Durable { snapshot, entries: Vec::new(), hard_state: HardState::default() }
    }

    /// Appends `entries`: one at index i replaces the entry at i and every later one
    /// (a new leader overwriting an uncommitted tail). Entries at or below the
    /// snapshot are ignored.
    pub fn append(&mut self, entries: &[Entry]) {
        let Some(first) = entries.iter().find(|e| e.index > self.snapshot_index()) else { return };
        let keep = self.entries.iter().take_while(|e| e.index < first.index).count();
        self.entries.truncate(keep);
        self.entries.extend(entries.iter().filter(|e| e.index >= first.index).cloned());
    }

    /// Replaces everything with `snapshot` (sent by the leader to a follower too far
    /// behind): entries are dropped and the commit moves to the snapshot.
    pub fn install(&mut self, snapshot: Snapshot) {
        let index = snapshot.get_metadata().index;
        self.hard_state.term = self.hard_state.term.max(snapshot.get_metadata().term);
        self.hard_state.commit = self.hard_state.commit.max(index);
        self.entries.retain(|e| e.index > index);
        if self.entries.first().is_some_and(|e| e.index != index + 1) {
            self.entries.clear();
        }
        self.snapshot = snapshot;
    }

    /// Folds the entries up to `index` (applied) into a snapshot carrying `data`.
    pub fn compact(&mut self, index: u64, data: Vec<u8>) {
        let Some(term) = self.term_at(index) else { return };
        if index <= self.snapshot_index() {
            return;
        }
        let Ok(conf_state) = self.conf_state_at(index) else { return };
        let metadata = self.snapshot.mut_metadata();
        metadata.index = index;
        metadata.term = term;
        metadata.set_conf_state(conf_state);
        self.snapshot.set_data(data.into());
        self.entries.retain(|e| e.index > index);
    }

    /// Whether raft can start from this state: the entries follow the snapshot one by
    /// one with terms that never fall, the commit lies within them, and the
    /// configuration names voters (a member still waiting to be added holds no log and
    /// may name none). A journal that fails this is damaged (raft would panic on it).
    ///
    /// # Errors
    /// What is inconsistent.
    pub fn check(&self) -> Result<(), String> {
        let mut previous = (self.snapshot_index(), self.snapshot.get_metadata().term);
        for entry in &self.entries {
            if entry.index != previous.0 + 1 {
                return Err(format!("entry {} follows {}", entry.index, previous.0));
            }
            if entry.term < previous.1 {
                return Err(format!("entry {} has term {} after term {}", entry.index, entry.term, previous.1));
            }
            previous = (entry.index, entry.term);
        }
        if self.hard_state.commit > self.last_index() {
            return Err(format!("commit {} is past the last entry {}", self.hard_state.commit, self.last_index()));
        }
        if self.hard_state.term < previous.1 {
            return Err(format!("term {} is below the last entry's {}", self.hard_state.term, previous.1));
        }
        let conf = self.conf_state_at(self.hard_state.commit)?;
        let conf = &conf;
        if conf.voters.is_empty() && (self.snapshot_index() > 0 || !self.entries.is_empty()) {
            return Err("no voters".into());
        }
        for entry in &self.entries {
            Durable::membership(entry)?;
        }
        // Raft refuses (fatally) a configuration it would not have made itself.
        let distinct = |ids: &[u64]| {
            let set: std::collections::BTreeSet<u64> = ids.iter().copied().collect();
            set.len() == ids.len() && !set.contains(&raft::INVALID_ID)
        };
        if !distinct(&conf.voters) || !distinct(&conf.learners) {
            return Err(format!("voters {:?} or learners {:?} repeat an id or name id 0", conf.voters, conf.learners));
        }
        if conf.learners.iter().any(|l| conf.voters.contains(l)) {
            return Err(format!("learners {:?} are also voters {:?}", conf.learners, conf.voters));
        }
        if !conf.voters_outgoing.is_empty() || !conf.learners_next.is_empty() || conf.auto_leave {
            return Err("a joint configuration, which this version never writes".into());
        }
        Ok(())
    }

    pub fn snapshot_index(&self) -> u64 {
        self.snapshot.get_metadata().index
    }

    fn first_index(&self) -> u64 {
        self.snapshot_index() + 1
    }

    fn last_index(&self) -> u64 {
        self.entries.last().map_or(self.snapshot_index(), |e| e.index)
    }

    fn term_at(&self, index: u64) -> Option<u64> {
        if index == self.snapshot_index() {
            return Some(self.snapshot.get_metadata().term);
        }
        let position = index.checked_sub(self.first_index())?;
        self.entries.get(position as usize).map(|e| e.term)
    }
}

/// Applies one single change, as raft-rs's `Changer::simple` does; like it, leaves
/// the configuration as it was when the change would remove the last voter.
fn apply_change(conf: &mut ConfState, change: &ConfChangeV2) {
    let before = conf.clone();
    for single in change.changes.iter() {
        let id = single.node_id;
        conf.voters.retain(|&v| v != id);
        conf.learners.retain(|&l| l != id);
        match single.get_change_type() {
            ConfChangeType::AddNode => conf.voters.push(id),
            ConfChangeType::AddLearnerNode => conf.learners.push(id),
            ConfChangeType::RemoveNode => {}
        }
    }
    if conf.voters.is_empty() {
        *conf = before;
    }
}

impl raft::Storage for Durable {
    fn initial_state(&self) -> raft::Result<RaftState> {
        // `check` refused a state whose membership entries do not parse.
        let conf_state = self.conf_state_at(self.hard_state.commit).map_err(raft::Error::ConfigInvalid)?;
        Ok(RaftState { hard_state: self.hard_state.clone(), conf_state })
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last_index() + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let from = (low - self.first_index()) as usize;
        let to = (high - self.first_index()) as usize;
        let mut entries = self.entries[from..to].to_vec();
        raft::util::limit_size(&mut entries, max_size.into());
        Ok(entries)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        if index < self.snapshot_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        self.term_at(index).ok_or(raft::Error::Store(StorageError::Unavailable))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(Durable::first_index(self))
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(Durable::last_index(self))
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        // A member added after the snapshot is not in its configuration and would
        // refuse it: the driver folds a new one once the change applied.
        let conf = self.snapshot.get_metadata().get_conf_state();
        let named = conf.voters.contains(&to) || conf.learners.contains(&to);
        if self.snapshot_index() < request_index || !named {
            return Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable));
        }
        Ok(self.snapshot.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::Storage;

    fn entry(index: u64, term: u64) -> Entry {
        Entry { index, term, ..Default::default() }
    }

    // A later append replaces the tail from its first index; compaction keeps the
    // term of the folded index; an installed snapshot replaces a diverged log.
    // A state raft would panic on is refused with what is wrong: a gap in the entries,
    // a falling term, a commit past the log, a term below the log's, no voters.
    #[test]
    fn inconsistent_states_are_refused() {
        let good = || {
            let mut log = Durable::bootstrap(&[1], b"i".to_vec());
            log.append(&[entry(1, 1), entry(2, 2)]);
            log.hard_state.term = 2;
            log.hard_state.commit = 2;
            log
        };
        assert_eq!(good().check(), Ok(()));
        let mut gap = good();
        gap.entries[1].index = 3;
        assert!(gap.check().unwrap_err().contains("follows"));
        let mut falling = good();
        falling.entries[1].term = 0;
        assert!(falling.check().unwrap_err().contains("term"));
        let mut ahead = good();
        ahead.hard_state.commit = 3;
        assert!(ahead.check().unwrap_err().contains("past the last entry"));
        let mut behind = good();
        behind.hard_state.term = 1;
        assert!(behind.check().unwrap_err().contains("below"));
        let mut nobody = good();
        nobody.snapshot.mut_metadata().mut_conf_state().voters.clear();
        assert_eq!(nobody.check(), Err("no voters".into()));
        // The fuzzer's first finding: a voter listed twice made raft panic at start.
        let mut twice = good();
        twice.snapshot.mut_metadata().mut_conf_state().voters = vec![45, 98, 45];
        assert!(twice.check().unwrap_err().contains("repeat"));
        let mut both = good();
        both.snapshot.mut_metadata().mut_conf_state().learners = vec![1];
        assert!(both.check().unwrap_err().contains("also voters"));
    }

    #[test]
    fn append_compact_install() {
        let mut log = Durable::bootstrap(&[1, 2, 3], b"empty".to_vec());
        log.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]);
        log.append(&[entry(3, 2), entry(4, 2)]);
        let terms: Vec<_> = log.entries.iter().map(|e| (e.index, e.term)).collect();
        assert_eq!(terms, [(1, 1), (2, 1), (3, 2), (4, 2)]);
        log.compact(2, b"image@2".to_vec());
        assert_eq!((log.snapshot_index(), log.term(2).unwrap()), (2, 1));
        assert!(matches!(
            log.entries(1, 3, None, GetEntriesContext::empty(false)),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
        assert_eq!(log.entries(3, 5, None, GetEntriesContext::empty(false)).unwrap().len(), 2);
        assert_eq!(log.initial_state().unwrap().conf_state.voters, [1, 2, 3]);
        let mut snapshot = log.snapshot.clone();
        snapshot.mut_metadata().index = 10;
        snapshot.mut_metadata().term = 5;
        log.install(snapshot);
        assert!(log.entries.is_empty());
        assert_eq!((log.hard_state.commit, log.hard_state.term, log.last_index()), (10, 5, 10));
    }
}
