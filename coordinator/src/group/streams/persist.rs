//! A streams group in its records: the changes since the last write (`changes`,
//! against `Persisted`, what was written), the replay of a loaded log, and the
//! group as it resumes on a new coordinator (`loaded`): its members keep their
//! tasks and their sessions start over, and the target is computed again from them.

use std::collections::HashMap;
use std::time::Instant;

use kafka_protocol::messages::streams_group_heartbeat_request::Topology;
use skein_control::metadata::MetadataImage;

use super::assign::{MemberState, Progress};
use super::records::{AssignmentValue, MemberValue};
use super::{topology, Member, StreamsGroup, StreamsSettings};
use crate::group::records::Entry;

/// What the group's records last written (or replayed) hold, so that a heartbeat
/// writes only what changed, comparing each member in place (no record is built for
/// a member that did not change).
#[derive(Debug, Default)]
pub(super) struct Persisted {
    topology: Option<Topology>,
    epoch: Option<i32>,
    members: HashMap<String, MemberRecords>,
}

#[derive(Debug, Default)]
struct MemberRecords {
    value: Option<MemberValue>,
    assignment: Option<AssignmentValue>,
}

impl Persisted {
    fn is_empty(&self) -> bool {
        self.topology.is_none() && self.epoch.is_none() && self.members.is_empty()
    }

    /// Changes what is written of `member`; a member with no records left is gone.
    fn note(&mut self, member: String, change: impl FnOnce(&mut MemberRecords)) {
        let written = self.members.entry(member.clone()).or_default();
        change(written);
        if written.value.is_none() && written.assignment.is_none() {
            self.members.remove(&member);
        }
    }
}

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

    /// Whether `value` is what `value()` would build, compared field by field.
    fn value_is(&self, value: &MemberValue) -> bool {
        self.instance_id == value.instance_id
            && self.rack_id == value.rack_id
            && self.client_id == value.client_id
            && self.client_host == value.client_host
            && self.rebalance_timeout_ms == value.rebalance_timeout_ms
            && self.topology_epoch == value.topology_epoch
            && self.process_id == value.process_id
            && self.endpoint == value.endpoint
            && self.client_tags == value.client_tags
    }

    /// Whether `assignment` is what `assignment()` would build.
    fn assignment_is(&self, assignment: &AssignmentValue) -> bool {
        self.progress.epoch == assignment.epoch
            && self.previous_epoch == assignment.previous_epoch
            && state_code(self.progress.state) == assignment.state
            && self.progress.assigned == assignment.assigned
            && self.progress.pending_revocation == assignment.pending_revocation
    }
}

impl StreamsGroup {
    /// Whether no record of the group was ever written.
    pub fn never_written(&self) -> bool {
        self.persisted.is_empty()
    }

    /// The records that changed since they were last written, and tombstones for the
    /// members gone: the topology first, the group's epoch last (replayed in order:
    /// the epoch after what it counts). O(members) comparisons in place; records are
    /// built only for what changed.
    pub fn changes(&mut self) -> Vec<Entry> {
        let group = || self.id.clone();
        let persisted = &mut self.persisted;
        let mut out = Vec::new();
        if persisted.topology != self.topology {
            persisted.topology.clone_from(&self.topology);
            let topology = self.topology.clone().map(Box::new);
            out.push(Entry::StreamsTopology { group: group(), topology });
        }
        for (id, m) in &self.members {
            // The id is copied only for a member not written before.
            if !persisted.members.contains_key(id) {
                persisted.members.insert(id.clone(), MemberRecords::default());
            }
            let Some(written) = persisted.members.get_mut(id) else { continue };
            if !written.value.as_ref().is_some_and(|v| m.value_is(v)) {
                let value = m.value();
                written.value = Some(value.clone());
                out.push(Entry::StreamsMember { group: group(), member: id.clone(), value: Some(Box::new(value)) });
            }
            if !written.assignment.as_ref().is_some_and(|a| m.assignment_is(a)) {
                let value = m.assignment();
                written.assignment = Some(value.clone());
                let value = Some(Box::new(value));
                out.push(Entry::StreamsAssignment { group: group(), member: id.clone(), value });
            }
        }
        if persisted.members.len() > self.members.len() {
            let gone: Vec<String> =
                persisted.members.keys().filter(|id| !self.members.contains_key(*id)).cloned().collect();
            for member in gone {
                let written = persisted.members.remove(&member).unwrap_or_default();
                if written.value.is_some() {
                    out.push(Entry::StreamsMember { group: group(), member: member.clone(), value: None });
                }
                if written.assignment.is_some() {
                    out.push(Entry::StreamsAssignment { group: group(), member, value: None });
                }
            }
        }
        if persisted.epoch != Some(self.epoch) {
            persisted.epoch = Some(self.epoch);
            out.push(Entry::StreamsGroup { group: group(), epoch: Some(self.epoch) });
        }
        out
    }

    /// The last records could not be written: write them whole next time.
    pub fn forget_persisted(&mut self) {
        self.persisted = Persisted::default();
    }

    /// Applies a record replayed from the offsets topic; what it holds counts as
    /// written.
    pub fn replay(&mut self, entry: Entry, now: Instant) {
        match entry {
            Entry::StreamsGroup { epoch: Some(epoch), .. } => {
                self.epoch = epoch;
                self.assignment_epoch = epoch;
                self.persisted.epoch = Some(epoch);
            }
            Entry::StreamsTopology { topology, .. } => {
                self.topology = topology.as_ref().map(|t| topology::canonical(t));
                self.configured = None;
                self.persisted.topology.clone_from(&self.topology);
            }
            Entry::StreamsMember { member, value, .. } => {
                match &value {
                    Some(v) => {
                        let m = self.members.entry(member.clone()).or_insert_with(|| Member::new(&member, now));
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
                        self.members.remove(&member);
                    }
                }
                self.persisted.note(member, |written| written.value = value.map(|v| *v));
            }
            Entry::StreamsAssignment { member, value, .. } => {
                if let Some(v) = &value {
                    let m = self.members.entry(member.clone()).or_insert_with(|| Member::new(&member, now));
                    m.previous_epoch = v.previous_epoch;
                    m.progress = Progress {
                        epoch: v.epoch,
                        state: state_of(v.state),
                        assigned: v.assigned.clone(),
                        pending_revocation: v.pending_revocation.clone(),
                    };
                }
                self.persisted.note(member, |written| written.assignment = value.map(|v| *v));
            }
            _ => {}
        }
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
