//! Share groups' membership (KIP-932): members heartbeat their subscriptions and the
//! coordinator assigns them partitions with the `simple` assignor. A partition may be
//! shared by several members (the records, not the partitions, are what members
//! split, under acquisition locks on the partition's leader), so there is no
//! revocation: a member moves to the group's epoch and its new assignment at once.
//!
//! The group's records in `__consumer_offsets` are Kafka's: `ShareGroupMetadata`
//! (its epoch), and `ShareGroupStatePartitionMetadata` (the topics whose
//! share-partitions were initialized, which DescribeShareGroupOffsets reports and
//! DeleteShareGroupOffsets removes). Members are kept in memory only: after the
//! coordinator moves they get UNKNOWN_MEMBER_ID and join again, which the share
//! consumer does on its own; their records stay acquired on the partition leaders
//! until their locks run out.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use kafka_protocol::messages::share_group_describe_response::{self as describe, Member};
use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{GroupId, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use skein_control::errors::code;
use skein_control::metadata::MetadataImage;

use crate::group::configs::MembershipSettings;
use crate::group::records::{self, Entry, ShareAssignmentValue, ShareMemberValue};

/// The member epoch that leaves the group.
const LEAVE_EPOCH: i32 = -1;

fn s(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

type Partition = (String, i32);

struct ShareMember {
    id: String,
    rack_id: Option<String>,
    client_id: String,
    client_host: String,
    epoch: i32,
    /// Its epoch before the last move: a heartbeat sent before it learned the new
    /// one is still accepted.
    previous_epoch: i32,
    subscribed: Vec<String>,
    /// What the assignor gave it at the group's epoch.
    target: BTreeSet<Partition>,
    /// What it was last told it has; a heartbeat answers an assignment only when
    /// they differ.
    sent: Option<BTreeSet<Partition>>,
    last_seen: Instant,
}

/// Topics with state: by id, the name and the partitions.
type Initialized = BTreeMap<uuid::Uuid, (String, BTreeSet<i32>)>;

/// A record of the group, by type and member (empty for the group's own records).
type RecordKey = (i16, String);

pub struct ShareGroup {
    pub id: String,
    pub epoch: i32,
    members: BTreeMap<String, ShareMember>,
    /// Topics (by id, with their name) whose share-partitions were initialized, with
    /// the partitions: what the group has state for.
    initialized: Initialized,
    /// The records last written, to write only what changed.
    persisted: BTreeMap<RecordKey, Entry>,
}

impl ShareGroup {
    pub fn new(id: &str) -> ShareGroup {
        ShareGroup {
            id: id.to_owned(),
            epoch: 0,
            members: BTreeMap::new(),
            initialized: BTreeMap::new(),
            persisted: BTreeMap::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn member_epoch(&self, member: &str) -> Option<i32> {
        self.members.get(member).map(|m| m.epoch)
    }

    /// Kafka's share group states: Empty, or Stable (members move to the group's
    /// assignment at once).
    pub fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else {
            "Stable"
        }
    }

    /// The topic-partitions the group has state for, by topic name.
    pub fn initialized(&self) -> impl Iterator<Item = (&uuid::Uuid, &String, &BTreeSet<i32>)> {
        self.initialized.iter().map(|(id, (name, ps))| (id, name, ps))
    }

    /// Forgets the state of `topics` (DeleteShareGroupOffsets).
    pub fn forget_topics(&mut self, topics: &[uuid::Uuid]) {
        for topic in topics {
            self.initialized.remove(topic);
        }
    }

    /// Forgets every topic's state (AlterShareGroupOffsets marks what it sets again).
    pub fn mark_initialized(&mut self, topic: uuid::Uuid, name: &str, partitions: impl IntoIterator<Item = i32>) {
        self.initialized.entry(topic).or_insert_with(|| (name.to_owned(), BTreeSet::new())).1.extend(partitions);
    }

    /// Recomputes every member's target with Kafka's `simple` assignor, topic by
    /// topic: with P partitions and M subscribers, each partition is shared by
    /// `ceil(M / P)` members (1 while members do not outnumber partitions), and the
    /// members' counts differ by at most one. What a member held and may keep, it
    /// keeps (sticky); the rest is dealt round-robin to the members short of their count.
    fn assign(&mut self, image: &MetadataImage) {
        let ids: Vec<String> = self.members.keys().cloned().collect();
        let mut targets: BTreeMap<String, BTreeSet<Partition>> =
            ids.iter().map(|id| (id.clone(), BTreeSet::new())).collect();
        let topics: BTreeSet<String> = self.members.values().flat_map(|m| m.subscribed.iter().cloned()).collect();
        for topic in topics {
            let Some(meta) = image.topic(&topic) else { continue };
            let subscribers: Vec<&String> =
                ids.iter().filter(|id| self.members[*id].subscribed.contains(&topic)).collect();
            if subscribers.is_empty() || meta.partitions < 1 {
                continue;
            }
            let previous: Vec<BTreeSet<i32>> = subscribers
                .iter()
                .map(|id| {
                    self.members[*id]
                        .target
                        .iter()
                        .filter(|(t, p)| *t == topic && *p < meta.partitions)
                        .map(|(_, p)| *p)
                        .collect()
                })
                .collect();
            for (member, partitions) in subscribers.iter().zip(simple_assign(meta.partitions as usize, &previous)) {
                let target = targets.get_mut(*member).expect("member");
                target.extend(partitions.into_iter().map(|p| (topic.clone(), p)));
            }
            let initialized = self.initialized.entry(meta.id).or_insert_with(|| (topic.clone(), BTreeSet::new()));
            initialized.1.extend(0..meta.partitions);
        }
        for (id, target) in targets {
            if let Some(m) = self.members.get_mut(&id) {
                m.target = target;
            }
        }
    }

    fn bump(&mut self, image: &MetadataImage) {
        self.epoch += 1;
        self.assign(image);
    }

    /// One ShareGroupHeartbeat.
    pub fn heartbeat(
        &mut self,
        request: &ShareGroupHeartbeatRequest,
        client_id: &str,
        client_host: &str,
        image: &MetadataImage,
        settings: MembershipSettings,
        now: Instant,
    ) -> ShareGroupHeartbeatResponse {
        let error =
            |c: i16, m: &str| ShareGroupHeartbeatResponse::default().with_error_code(c).with_error_message(Some(s(m)));
        let member_id = request.member_id.to_string();
        if member_id.is_empty() || member_id.chars().count() > 36 {
            return error(code::INVALID_REQUEST, "Invalid member id in the request.");
        }
        if request.rack_id.as_ref().is_some_and(|r| r.is_empty()) {
            return error(code::INVALID_REQUEST, "RackId can't be empty.");
        }
        match request.member_epoch {
            LEAVE_EPOCH => {
                if self.members.remove(&member_id).is_some() {
                    self.bump(image);
                }
                return ShareGroupHeartbeatResponse::default()
                    .with_member_id(Some(s(member_id)))
                    .with_member_epoch(LEAVE_EPOCH);
            }
            0 => {
                let Some(subscribed) = request.subscribed_topic_names.as_ref().filter(|t| !t.is_empty()) else {
                    return error(code::INVALID_REQUEST, "SubscribedTopicNames must be set in first request.");
                };
                if !self.members.contains_key(&member_id) && self.members.len() >= settings.max_size {
                    return error(
                        code::GROUP_MAX_SIZE_REACHED,
                        &format!("The share group has reached its maximum capacity of {} members.", settings.max_size),
                    );
                }
                let previous_epoch = self.members.get(&member_id).map_or(0, |m| m.epoch);
                let member = ShareMember {
                    id: member_id.clone(),
                    previous_epoch,
                    rack_id: request.rack_id.as_ref().map(|r| r.to_string()),
                    client_id: client_id.to_owned(),
                    client_host: client_host.to_owned(),
                    epoch: 0,
                    subscribed: subscribed.iter().map(|t| t.0.to_string()).collect(),
                    target: BTreeSet::new(),
                    sent: None,
                    last_seen: now,
                };
                self.members.insert(member_id.clone(), member);
                self.bump(image);
            }
            epoch if epoch < LEAVE_EPOCH => {
                return error(code::INVALID_REQUEST, "MemberEpoch is invalid.");
            }
            epoch => {
                let Some(member) = self.members.get_mut(&member_id) else {
                    let message = format!("Member {member_id} is not a member of group {}.", self.id);
                    return error(code::UNKNOWN_MEMBER_ID, &message);
                };
                if epoch > member.epoch || (epoch < member.epoch && epoch != member.previous_epoch) {
                    let message = format!(
                        "The share group member has a smaller or larger member epoch ({epoch}) than the one known \
                         by the group coordinator ({}).",
                        member.epoch
                    );
                    return error(crate::group::consumer::FENCED_MEMBER_EPOCH, &message);
                }
                member.last_seen = now;
                if let Some(subscribed) = &request.subscribed_topic_names {
                    let subscribed: Vec<String> = subscribed.iter().map(|t| t.0.to_string()).collect();
                    if subscribed != member.subscribed {
                        member.subscribed = subscribed;
                        self.bump(image);
                    }
                }
                // Topics created, deleted or grown since move the assignment.
                if self.targets_stale(image) {
                    self.bump(image);
                }
            }
        }
        let group_epoch = self.epoch;
        let member = self.members.get_mut(&member_id).expect("present");
        if member.epoch != group_epoch {
            member.previous_epoch = member.epoch;
            member.epoch = group_epoch;
        }
        // The full assignment goes with a join, a subscription, and any change.
        let send = request.member_epoch == 0
            || request.subscribed_topic_names.is_some()
            || member.sent.as_ref() != Some(&member.target);
        let assignment = send.then(|| {
            member.sent = Some(member.target.clone());
            let mut by_topic: BTreeMap<&String, Vec<i32>> = BTreeMap::new();
            for (t, p) in &member.target {
                by_topic.entry(t).or_default().push(*p);
            }
            Assignment::default().with_topic_partitions(
                by_topic
                    .into_iter()
                    .filter_map(|(t, ps)| {
                        image.topic(t).map(|m| TopicPartitions::default().with_topic_id(m.id).with_partitions(ps))
                    })
                    .collect(),
            )
        });
        ShareGroupHeartbeatResponse::default()
            .with_member_id(Some(s(member_id)))
            .with_member_epoch(group_epoch)
            .with_heartbeat_interval_ms(settings.heartbeat_interval.as_millis() as i32)
            .with_assignment(assignment)
    }

    /// Whether the metadata moved under the members' targets: a subscribed topic
    /// created, deleted or given partitions, so that the targets no longer cover its
    /// partitions exactly.
    fn targets_stale(&self, image: &MetadataImage) -> bool {
        let subscribed: BTreeSet<&String> = self.members.values().flat_map(|m| m.subscribed.iter()).collect();
        subscribed.into_iter().any(|topic| {
            let partitions = image.topic(topic).map_or(0, |m| m.partitions.max(0));
            let covered: BTreeSet<i32> = self
                .members
                .values()
                .flat_map(|m| m.target.iter())
                .filter(|(t, _)| t == topic)
                .map(|(_, p)| *p)
                .collect();
            covered.len() != partitions as usize || covered.iter().any(|p| *p >= partitions)
        })
    }

    /// Removes members whose session ran out; returns how many.
    pub fn expire(&mut self, image: &MetadataImage, settings: MembershipSettings, now: Instant) -> usize {
        let before = self.members.len();
        self.members.retain(|_, m| now.duration_since(m.last_seen) <= settings.session_timeout);
        let removed = before - self.members.len();
        if removed > 0 {
            self.bump(image);
        }
        removed
    }

    /// The records that describe the group now (Kafka's share group records: the
    /// group's epoch and assignment epoch, the topics it has state for, and each
    /// member's subscription, target and current assignment), by type and member.
    fn records(&self, image: &MetadataImage) -> BTreeMap<RecordKey, Entry> {
        let by_id = |set: &BTreeSet<Partition>| records::by_topic_id(image, set);
        let group = self.id.clone();
        let mut out = BTreeMap::new();
        out.insert((11, String::new()), Entry::ShareGroup { group: group.clone(), epoch: Some(self.epoch) });
        out.insert((12, String::new()), Entry::ShareTargetAssignment { group: group.clone(), epoch: Some(self.epoch) });
        let topics = self.initialized.iter().map(|(id, (n, ps))| (*id, n.clone(), ps.clone())).collect();
        out.insert((15, String::new()), Entry::ShareStatePartitions { group: group.clone(), topics: Some(topics) });
        for m in self.members.values() {
            let (group, member) = (group.clone(), m.id.clone());
            let value = ShareMemberValue {
                rack_id: m.rack_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                subscribed_topic_names: m.subscribed.clone(),
            };
            out.insert(
                (10, member.clone()),
                Entry::ShareMember { group: group.clone(), member: member.clone(), value: Some(value) },
            );
            let partitions = Some(by_id(&m.target));
            out.insert(
                (13, member.clone()),
                Entry::ShareTargetMember { group: group.clone(), member: member.clone(), partitions },
            );
            let current = ShareAssignmentValue {
                member_epoch: m.epoch,
                previous_member_epoch: m.previous_epoch,
                assigned: m.sent.as_ref().map(&by_id).unwrap_or_default(),
            };
            out.insert((14, member.clone()), Entry::ShareCurrentAssignment { group, member, value: Some(current) });
        }
        out
    }

    /// The records to write for what changed since the last call: new values, and
    /// tombstones for members that left.
    pub fn changes(&mut self, image: &MetadataImage) -> Vec<Entry> {
        let now = self.records(image);
        let mut out: Vec<Entry> =
            now.iter().filter(|(k, e)| self.persisted.get(*k) != Some(*e)).map(|(_, e)| e.clone()).collect();
        out.extend(self.persisted.iter().filter(|(k, _)| !now.contains_key(*k)).map(|(_, old)| tombstone(old)));
        self.persisted = now;
        out
    }

    /// Takes what was replayed as written (the partition is loaded).
    pub fn loaded(&mut self, image: &MetadataImage) {
        self.persisted = self.records(image);
    }

    /// Forgets what was written: the next `changes` writes it all (a write failed).
    pub fn forget_persisted(&mut self) {
        self.persisted.clear();
    }

    /// Applies a replayed record. Members restored get a full session from `now` to
    /// heartbeat again, with the epochs they had, so that a new coordinator takes
    /// their heartbeats as the old one would have.
    pub fn replay(&mut self, entry: Entry, image: &MetadataImage, now: Instant) {
        let names = |topics: Vec<records::TopicPartitions>| records::by_topic_name(image, topics);
        match entry {
            Entry::ShareGroup { epoch: Some(epoch), .. } => self.epoch = epoch,
            Entry::ShareStatePartitions { topics: Some(topics), .. } => {
                self.initialized = topics.into_iter().map(|(id, name, ps)| (id, (name, ps))).collect();
            }
            Entry::ShareStatePartitions { topics: None, .. } => self.initialized.clear(),
            Entry::ShareMember { member, value: Some(v), .. } => {
                let m = self.members.entry(member.clone()).or_insert_with(|| ShareMember {
                    id: member,
                    rack_id: None,
                    client_id: String::new(),
                    client_host: String::new(),
                    epoch: 0,
                    previous_epoch: 0,
                    subscribed: Vec::new(),
                    target: BTreeSet::new(),
                    sent: None,
                    last_seen: now,
                });
                m.rack_id = v.rack_id;
                m.client_id = v.client_id;
                m.client_host = v.client_host;
                m.subscribed = v.subscribed_topic_names;
            }
            Entry::ShareMember { member, value: None, .. } => {
                self.members.remove(&member);
            }
            Entry::ShareTargetMember { member, partitions: Some(partitions), .. } => {
                if let Some(m) = self.members.get_mut(&member) {
                    m.target = names(partitions);
                }
            }
            Entry::ShareCurrentAssignment { member, value: Some(v), .. } => {
                if let Some(m) = self.members.get_mut(&member) {
                    m.epoch = v.member_epoch;
                    m.previous_epoch = v.previous_member_epoch;
                    m.sent = Some(names(v.assigned));
                }
            }
            _ => {}
        }
    }

    /// The tombstones that delete the group: any member records written, then the
    /// group's own, `ShareGroupMetadata` last.
    pub fn tombstones(&self) -> Vec<Entry> {
        let group = self.id.clone();
        let mut out: Vec<Entry> =
            self.persisted.iter().filter(|((_, member), _)| !member.is_empty()).map(|(_, e)| tombstone(e)).collect();
        out.push(Entry::ShareStatePartitions { group: group.clone(), topics: None });
        out.push(Entry::ShareTargetAssignment { group: group.clone(), epoch: None });
        out.push(Entry::ShareGroup { group, epoch: None });
        out
    }

    pub fn describe(&self, image: &MetadataImage) -> describe::DescribedGroup {
        let to_assignment = |set: &BTreeSet<Partition>| {
            let mut by_topic: BTreeMap<&String, Vec<i32>> = BTreeMap::new();
            for (t, p) in set {
                by_topic.entry(t).or_default().push(*p);
            }
            describe::Assignment::default().with_topic_partitions(
                by_topic
                    .into_iter()
                    .filter_map(|(t, ps)| {
                        image.topic(t).map(|m| {
                            describe::TopicPartitions::default()
                                .with_topic_id(m.id)
                                .with_topic_name(TopicName(s(t.clone())))
                                .with_partitions(ps)
                        })
                    })
                    .collect(),
            )
        };
        describe::DescribedGroup::default()
            .with_group_id(GroupId(s(self.id.clone())))
            .with_group_state(s(self.state()))
            .with_group_epoch(self.epoch)
            .with_assignment_epoch(self.epoch)
            .with_assignor_name(s("simple"))
            .with_authorized_operations(i32::MIN)
            .with_members(
                self.members
                    .values()
                    .map(|m| {
                        Member::default()
                            .with_member_id(s(m.id.clone()))
                            .with_rack_id(m.rack_id.clone().map(s))
                            .with_member_epoch(m.epoch)
                            .with_client_id(s(m.client_id.clone()))
                            .with_client_host(s(m.client_host.clone()))
                            .with_subscribed_topic_names(m.subscribed.iter().map(|t| TopicName(s(t.clone()))).collect())
                            .with_assignment(to_assignment(&m.target))
                    })
                    .collect(),
            )
    }
}

type Writes = Vec<Entry>;

/// The group coordinator's share groups.
impl super::Coordinator {
    /// ShareGroupHeartbeat: the response and the records to write before it.
    pub fn share_heartbeat(
        &self,
        request: &ShareGroupHeartbeatRequest,
        client_id: &str,
        client_host: &str,
        image: &MetadataImage,
        now: Instant,
    ) -> (ShareGroupHeartbeatResponse, Writes) {
        let id = request.group_id.0.to_string();
        let refuse = |c: i16, m: String| {
            (ShareGroupHeartbeatResponse::default().with_error_code(c).with_error_message(Some(s(m))), Vec::new())
        };
        if id.is_empty() {
            return refuse(code::INVALID_REQUEST, "GroupId can't be empty.".into());
        }
        // A classic group, even one with offsets only, or a consumer group, keeps its id.
        if self.groups.borrow().contains_key(&id)
            || self.consumer_groups.borrow().contains_key(&id)
            || self.streams_groups.borrow().contains_key(&id)
        {
            return refuse(code::GROUP_ID_NOT_FOUND, format!("Group {id} is not a share group."));
        }
        let mut groups = self.share_groups.borrow_mut();
        if !groups.contains_key(&id) && request.member_epoch != 0 {
            return refuse(code::GROUP_ID_NOT_FOUND, format!("Share group {id} not found."));
        }
        let settings = super::configs::share_membership(MembershipSettings::default(), image, &id);
        let group = groups.entry(id.clone()).or_insert_with(|| ShareGroup::new(&id));
        let response = group.heartbeat(request, client_id, client_host, image, settings, now);
        (response, group.changes(image))
    }

    pub fn share_describe(&self, group: &str, image: &MetadataImage) -> describe::DescribedGroup {
        match self.share_groups.borrow().get(group) {
            Some(g) => g.describe(image),
            None => {
                let message = match self.consumer_groups.borrow().contains_key(group)
                    || self.groups.borrow().contains_key(group)
                {
                    true => format!("Group {group} is not a share group."),
                    false => format!("Group {group} not found."),
                };
                describe::DescribedGroup::default()
                    .with_group_id(GroupId(s(group)))
                    .with_group_state(s("Dead"))
                    .with_error_code(code::GROUP_ID_NOT_FOUND)
                    .with_error_message(Some(s(message)))
            }
        }
    }

    /// The topics a share group has state for; `None` when it is no share group.
    pub fn share_topics(&self, group: &str) -> Option<Vec<crate::group::records::InitializedTopic>> {
        let groups = self.share_groups.borrow();
        let g = groups.get(group)?;
        Some(g.initialized().map(|(id, name, ps)| (*id, name.clone(), ps.clone())).collect())
    }

    /// Records state for `topics` (AlterShareGroupOffsets), creating the group.
    ///
    /// # Errors
    /// NON_EMPTY_GROUP while the group has members; GROUP_ID_NOT_FOUND for a group
    /// of another type.
    pub fn share_initialize(
        &self,
        group: &str,
        topics: Vec<crate::group::records::InitializedTopic>,
        image: &MetadataImage,
    ) -> Result<Writes, i16> {
        if self.consumer_groups.borrow().contains_key(group) || self.groups.borrow().contains_key(group) {
            return Err(code::GROUP_ID_NOT_FOUND);
        }
        let mut groups = self.share_groups.borrow_mut();
        let g = groups.entry(group.to_owned()).or_insert_with(|| ShareGroup::new(group));
        if !g.is_empty() {
            return Err(code::NON_EMPTY_GROUP);
        }
        for (id, name, partitions) in topics {
            g.mark_initialized(id, &name, partitions);
        }
        Ok(g.changes(image))
    }

    /// Forgets `topics`' state (DeleteShareGroupOffsets); answers the topics it had
    /// no state for, and the records to write.
    ///
    /// # Errors
    /// GROUP_ID_NOT_FOUND; NON_EMPTY_GROUP while the group has members.
    pub fn share_forget(
        &self,
        group: &str,
        topics: &[uuid::Uuid],
        image: &MetadataImage,
    ) -> Result<(Vec<uuid::Uuid>, Writes), i16> {
        let mut groups = self.share_groups.borrow_mut();
        let g = groups.get_mut(group).ok_or(code::GROUP_ID_NOT_FOUND)?;
        if !g.is_empty() {
            return Err(code::NON_EMPTY_GROUP);
        }
        let unknown: Vec<uuid::Uuid> = topics.iter().filter(|t| !g.initialized.contains_key(t)).copied().collect();
        g.forget_topics(topics);
        Ok((unknown, g.changes(image)))
    }

    /// A share group's records could not be written: write them whole next time.
    pub fn share_persist_failed(&self, group: &str) {
        if let Some(g) = self.share_groups.borrow_mut().get_mut(group) {
            g.forget_persisted();
        }
    }

    /// ListGroups' entries for the share groups in a wanted state.
    pub(super) fn list_share(
        &self,
        wanted: &dyn Fn(&str) -> bool,
    ) -> Vec<kafka_protocol::messages::list_groups_response::ListedGroup> {
        self.share_groups
            .borrow()
            .values()
            .filter(|g| wanted(g.state()))
            .map(|g| {
                kafka_protocol::messages::list_groups_response::ListedGroup::default()
                    .with_group_id(GroupId(s(g.id.clone())))
                    .with_protocol_type(s("share"))
                    .with_group_state(s(g.state()))
                    .with_group_type(s("share"))
            })
            .collect()
    }

    /// DeleteGroups of a share group (`None`: it is none): its tombstones, or
    /// NON_EMPTY_GROUP.
    pub(super) fn delete_share(&self, group: &str) -> Option<Result<Writes, i16>> {
        let mut groups = self.share_groups.borrow_mut();
        let g = groups.get(group)?;
        if !g.is_empty() {
            return Some(Err(code::NON_EMPTY_GROUP));
        }
        let writes = g.tombstones();
        groups.remove(group);
        Some(Ok(writes))
    }

    /// Expires share-group members whose session ran out; returns the records to write.
    pub fn tick_shares(&self, image: &MetadataImage, now: Instant) -> Writes {
        let loaded = self.loaded.borrow();
        let mut writes = Vec::new();
        for group in self.share_groups.borrow_mut().values_mut() {
            if !loaded.contains(&super::partition_for(&group.id)) {
                continue;
            }
            let settings = super::configs::share_membership(MembershipSettings::default(), image, &group.id);
            let removed = group.expire(image, settings, now);
            if removed > 0 {
                tracing::info!(target: "skein::net", group = %group.id, removed, "share group sessions expired");
                writes.extend(group.changes(image));
            }
        }
        writes
    }
}

/// The tombstone of a share group record.
fn tombstone(entry: &Entry) -> Entry {
    match entry.clone() {
        Entry::ShareMember { group, member, .. } => Entry::ShareMember { group, member, value: None },
        Entry::ShareTargetMember { group, member, .. } => Entry::ShareTargetMember { group, member, partitions: None },
        Entry::ShareCurrentAssignment { group, member, .. } => {
            Entry::ShareCurrentAssignment { group, member, value: None }
        }
        Entry::ShareTargetAssignment { group, .. } => Entry::ShareTargetAssignment { group, epoch: None },
        Entry::ShareStatePartitions { group, .. } => Entry::ShareStatePartitions { group, topics: None },
        Entry::ShareGroup { group, .. } => Entry::ShareGroup { group, epoch: None },
        other => other,
    }
}

/// Kafka's `simple` assignment of one topic's `partitions` to its subscribers, who
/// held `previous` (their partitions of the topic, in subscriber order): each
/// partition is shared by `ceil(M / P)` members, member `i` gets its precise count
/// `ceil(x (i + 1)) - ceil(x i)` with `x = sharing * P / M`, what a member held it
/// keeps within its count and the sharing, and the rest goes round-robin to the
/// members short of their count.
pub fn simple_assign(partitions: usize, previous: &[BTreeSet<i32>]) -> Vec<BTreeSet<i32>> {
    let members = previous.len();
    if members == 0 || partitions == 0 {
        return vec![BTreeSet::new(); members];
    }
    let sharing = members.div_ceil(partitions);
    let total = sharing * partitions;
    // ceil(total * i / members), in integers.
    let bound = |i: usize| (total * i).div_ceil(members);
    let counts: Vec<usize> = (0..members).map(|i| bound(i + 1) - bound(i)).collect();
    let mut holders = vec![0usize; partitions];
    let mut out: Vec<BTreeSet<i32>> = vec![BTreeSet::new(); members];
    for (i, held) in previous.iter().enumerate() {
        for p in held {
            let index = *p as usize;
            if index < partitions && out[i].len() < counts[i] && holders[index] < sharing {
                out[i].insert(*p);
                holders[index] += 1;
            }
        }
    }
    let mut cursor = 0usize;
    for (p, holding) in holders.iter_mut().enumerate() {
        while *holding < sharing {
            let short = (0..members)
                .map(|k| (cursor + k) % members)
                .find(|&i| out[i].len() < counts[i] && !out[i].contains(&(p as i32)));
            let Some(i) = short else { break };
            out[i].insert(p as i32);
            *holding += 1;
            cursor = i + 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(sets: &[&[i32]]) -> Vec<BTreeSet<i32>> {
        sets.iter().map(|s| s.iter().copied().collect()).collect()
    }

    // Members no more than partitions: every partition has one member and the counts
    // differ by one; more members than partitions: each partition is shared and every
    // member has one; a member that stays keeps what it held.
    #[test]
    fn the_simple_assignor_spreads_and_shares_and_sticks() {
        let fresh = simple_assign(5, &held(&[&[], &[]]));
        assert_eq!(fresh.iter().map(BTreeSet::len).collect::<Vec<_>>(), vec![3, 2]);
        let union: BTreeSet<i32> = fresh.iter().flatten().copied().collect();
        assert_eq!(union, (0..5).collect());

        let shared = simple_assign(2, &held(&[&[], &[], &[]]));
        assert_eq!(shared.iter().map(BTreeSet::len).collect::<Vec<_>>(), vec![2, 1, 1]);
        for p in 0..2 {
            assert_eq!(shared.iter().filter(|s| s.contains(&p)).count(), 2, "partition {p} shared by two");
        }

        // A third member joins two that split 4 partitions: the first two keep what
        // they can, and nothing is held twice.
        let before = simple_assign(4, &held(&[&[], &[]]));
        let after = simple_assign(4, &[before[0].clone(), before[1].clone(), BTreeSet::new()]);
        assert!(after[0].is_subset(&before[0]) && after[1].is_subset(&before[1]));
        assert_eq!(after.iter().map(BTreeSet::len).sum::<usize>(), 4);
        let union: BTreeSet<i32> = after.iter().flatten().copied().collect();
        assert_eq!(union.len(), 4);
    }
}
