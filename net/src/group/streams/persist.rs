//! A streams group in its records: the full set its state calls for (`records`), the
//! changes since the last write (`changes`), the replay of a loaded log, and the
//! group as it resumes on a new coordinator (`loaded`): its members keep their
//! tasks and their sessions start over, and the target is computed again from them.

use std::collections::BTreeMap;
use std::time::Instant;

use super::assign::{MemberState, Progress};
use super::records::{AssignmentValue, MemberValue, ASSIGNMENT, MEMBER, METADATA, TOPOLOGY};
use super::{topology, Member, StreamsGroup, StreamsSettings};
use crate::group::records::Entry;
use crate::metadata::MetadataImage;

type RecordKey = (i16, String);

fn state_code(state: MemberState) -> i8 {
    match state {
        MemberState::Stable => 1,
        MemberState::UnrevokedTasks => 2,
        MemberState::UnreleasedTasks => 3,
    }
}

fn state_of(code: i8) -> MemberState {
    match code {
        2 => MemberState::UnrevokedTasks,
        3 => MemberState::UnreleasedTasks,
        _ => MemberState::Stable,
    }
}

impl Member {
    fn value(&self) -> MemberValue {
        MemberValue {
            instance_id: self.instance_id.clone(),
            rack_id: self.rack_id.clone(),
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            rebalance_timeout_ms: self.rebalance_timeout_ms,
            topology_epoch: self.topology_epoch,
            process_id: self.process_id.clone(),
            endpoint: self.endpoint.clone(),
            client_tags: self.client_tags.clone(),
        }
    }

    fn assignment(&self) -> AssignmentValue {
        AssignmentValue {
            epoch: self.progress.epoch,
            previous_epoch: self.previous_epoch,
            state: state_code(self.progress.state),
            assigned: self.progress.assigned.clone(),
            pending_revocation: self.progress.pending_revocation.clone(),
        }
    }
}

impl StreamsGroup {
    /// Whether no record of the group was ever written.
    pub fn never_written(&self) -> bool {
        self.persisted.is_empty()
    }

    /// Every record the group's state calls for.
    fn records(&self) -> BTreeMap<RecordKey, Entry> {
        let group = || self.id.clone();
        let mut out = BTreeMap::new();
        if let Some(t) = &self.topology {
            out.insert(
                (TOPOLOGY, String::new()),
                Entry::StreamsTopology { group: group(), topology: Some(Box::new(t.clone())) },
            );
        }
        out.insert((METADATA, String::new()), Entry::StreamsGroup { group: group(), epoch: Some(self.epoch) });
        for (id, m) in &self.members {
            let value = Some(Box::new(m.value()));
            out.insert((MEMBER, id.clone()), Entry::StreamsMember { group: group(), member: id.clone(), value });
            let value = Some(Box::new(m.assignment()));
            out.insert(
                (ASSIGNMENT, id.clone()),
                Entry::StreamsAssignment { group: group(), member: id.clone(), value },
            );
        }
        out
    }

    /// The records that changed since they were last written, and tombstones for the
    /// members gone: the topology first, the group's epoch last.
    pub fn changes(&mut self) -> Vec<Entry> {
        let now = self.records();
        let mut out = Vec::new();
        for (key, entry) in &now {
            if self.persisted.get(key) != Some(entry) {
                out.push(entry.clone());
            }
        }
        for (kind, member) in self.persisted.keys().filter(|k| !now.contains_key(*k)) {
            let (group, member) = (self.id.clone(), member.clone());
            match *kind {
                MEMBER => out.push(Entry::StreamsMember { group, member, value: None }),
                ASSIGNMENT => out.push(Entry::StreamsAssignment { group, member, value: None }),
                TOPOLOGY => out.push(Entry::StreamsTopology { group, topology: None }),
                _ => {}
            }
        }
        // Replayed in order: the epoch after what it counts.
        out.sort_by_key(|e| match e {
            Entry::StreamsTopology { .. } => 0,
            Entry::StreamsGroup { .. } => 2,
            _ => 1,
        });
        self.persisted = now;
        out
    }

    /// The last records could not be written: write them whole next time.
    pub fn forget_persisted(&mut self) {
        self.persisted.clear();
    }

    /// Applies a record replayed from the offsets topic.
    pub fn replay(&mut self, entry: Entry, now: Instant) {
        let key = match &entry {
            Entry::StreamsGroup { epoch: Some(epoch), .. } => {
                self.epoch = *epoch;
                self.assignment_epoch = *epoch;
                (METADATA, String::new())
            }
            Entry::StreamsTopology { topology, .. } => {
                self.topology = topology.as_ref().map(|t| topology::canonical(t));
                self.configured = None;
                (TOPOLOGY, String::new())
            }
            Entry::StreamsMember { member, value, .. } => {
                match value {
                    Some(v) => {
                        let m = self.members.entry(member.clone()).or_insert_with(|| Member::new(member, now));
                        m.instance_id = v.instance_id.clone();
                        m.rack_id = v.rack_id.clone();
                        m.client_id = v.client_id.clone();
                        m.client_host = v.client_host.clone();
                        m.rebalance_timeout_ms = v.rebalance_timeout_ms;
                        m.topology_epoch = v.topology_epoch;
                        m.process_id = v.process_id.clone();
                        m.endpoint = v.endpoint.clone();
                        m.client_tags = v.client_tags.clone();
                    }
                    None => {
                        self.members.remove(member);
                    }
                }
                (MEMBER, member.clone())
            }
            Entry::StreamsAssignment { member, value, .. } => {
                if let Some(v) = value {
                    let m = self.members.entry(member.clone()).or_insert_with(|| Member::new(member, now));
                    m.previous_epoch = v.previous_epoch;
                    m.progress = Progress {
                        epoch: v.epoch,
                        state: state_of(v.state),
                        assigned: v.assigned.clone(),
                        pending_revocation: v.pending_revocation.clone(),
                    };
                }
                (ASSIGNMENT, member.clone())
            }
            _ => return,
        };
        let tombstone = matches!(
            &entry,
            Entry::StreamsMember { value: None, .. }
                | Entry::StreamsAssignment { value: None, .. }
                | Entry::StreamsTopology { topology: None, .. }
        );
        match tombstone {
            true => self.persisted.remove(&key),
            false => self.persisted.insert(key, entry),
        };
    }

    /// The group resumes on this coordinator: its members' sessions (and revocations)
    /// start over from `now`, the topology is configured against the topics, and the
    /// target is computed again from the members' tasks, at the group's epoch.
    pub fn loaded(&mut self, image: &MetadataImage, settings: StreamsSettings, now: Instant) {
        for m in self.members.values_mut() {
            m.last_seen = now;
            m.revoking_since = (m.progress.state == MemberState::UnrevokedTasks).then_some(now);
        }
        if self.configure(image).is_err() {
            self.configured = None;
        }
        self.validated_topology_epoch = match (&self.configured, &self.topology) {
            (Some(c), Some(t)) if c.ready() => t.epoch,
            _ => -1,
        };
        self.compute_target(settings.num_standby_replicas);
    }
}
