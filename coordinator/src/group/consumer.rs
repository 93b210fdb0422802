//! The consumer group protocol of KIP-848: members heartbeat their subscriptions and
//! owned partitions; the coordinator computes the target assignment with a
//! server-side assignor (`uniform` or `range`) and hands it out incrementally. A member
//! first revokes what it must give up (its epoch stays) and receives partitions only
//! once their previous owner released them; then it moves to the group epoch.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kafka_protocol::messages::consumer_group_describe_response::{self as describe, Member};
use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, GroupId, TopicName};
use kafka_protocol::protocol::StrBytes;
use skein_control::errors::code;
pub use skein_control::errors::code::{
    FENCED_MEMBER_EPOCH, INVALID_REGULAR_EXPRESSION, STALE_MEMBER_EPOCH, UNSUPPORTED_ASSIGNOR,
};
use skein_control::metadata::MetadataImage;

use crate::group::records::{self, ConsumerMemberValue, CurrentAssignmentValue, Entry};

/// KIP-848's epochs for leaving: -1 leaves, -2 leaves as a static member.
const LEAVE_EPOCH: i32 = -1;
const STATIC_LEAVE_EPOCH: i32 = -2;

fn s(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

type Partition = (String, i32);

struct ConsumerMember {
    id: String,
    instance_id: Option<String>,
    rack_id: Option<String>,
    client_id: String,
    client_host: String,
    epoch: i32,
    previous_epoch: i32,
    /// Topics named in the subscription.
    subscribed: Vec<String>,
    /// A pattern subscription (KIP-848 `subscribed_topic_regex`), matched against whole
    /// topic names, internal topics excluded; `resolved` is what it matched last.
    regex: Option<(String, regex::Regex)>,
    resolved: BTreeSet<String>,
    /// What the member last reported owning, and what it was last told to own: a
    /// partition is free for another member only once it is in neither.
    owned: BTreeSet<Partition>,
    sent: BTreeSet<Partition>,
    target: BTreeSet<Partition>,
    rebalance_timeout_ms: i32,
    last_seen: Instant,
}

impl ConsumerMember {
    fn new(id: &str, now: Instant) -> ConsumerMember {
        ConsumerMember {
            id: id.to_owned(),
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            epoch: 0,
            previous_epoch: 0,
            subscribed: Vec::new(),
            regex: None,
            resolved: BTreeSet::new(),
            owned: BTreeSet::new(),
            sent: BTreeSet::new(),
            target: BTreeSet::new(),
            rebalance_timeout_ms: -1,
            last_seen: now,
        }
    }
}

/// A record's place in the offsets topic: its type and member (empty for the group's).
type RecordKey = (i16, String);

pub struct ConsumerGroup {
    pub id: String,
    pub epoch: i32,
    assignor: String,
    members: BTreeMap<String, ConsumerMember>,
    /// The records last written for this group, to write only what changed.
    persisted: BTreeMap<RecordKey, Entry>,
}

/// Settings of consumer groups (`group.consumer.*`).
#[derive(Debug, Clone, Copy)]
pub struct ConsumerSettings {
    pub heartbeat_interval: Duration,
    pub session_timeout: Duration,
    /// Kafka's `group.consumer.max.size`.
    pub max_size: usize,
}

/// Compiles a subscription pattern as a whole-name match (RE2 syntax, as Kafka's
/// RE2/J).
fn compile(pattern: &str) -> Result<(String, regex::Regex), String> {
    regex::Regex::new(&format!("^(?:{pattern})$")).map(|re| (pattern.to_owned(), re)).map_err(|e| e.to_string())
}

impl ConsumerGroup {
    pub fn new(id: &str) -> ConsumerGroup {
        ConsumerGroup {
            id: id.to_owned(),
            epoch: 0,
            assignor: "uniform".into(),
            members: BTreeMap::new(),
            persisted: BTreeMap::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Whether a member subscribes to `topic`, by name or by a pattern it matched.
    pub fn subscribes(&self, topic: &str) -> bool {
        self.members.values().any(|m| m.subscribed.iter().chain(m.resolved.iter()).any(|t| t == topic))
    }

    pub fn has_member(&self, id: &str) -> Option<i32> {
        self.members.get(id).map(|m| m.epoch)
    }

    /// KIP-848's group states.
    pub fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.members.values().all(|m| m.epoch == self.epoch && m.owned == m.target) {
            "Stable"
        } else {
            "Reconciling"
        }
    }

    /// Resolves pattern subscriptions against the current topics; returns whether any
    /// member's resolved set changed.
    fn resolve(&mut self, image: &MetadataImage) -> bool {
        let mut changed = false;
        for m in self.members.values_mut() {
            if let Some((_, re)) = &m.regex {
                let now: BTreeSet<String> =
                    image.topics.keys().filter(|t| !t.starts_with("__") && re.is_match(t)).cloned().collect();
                if now != m.resolved {
                    m.resolved = now;
                    changed = true;
                }
            }
        }
        changed
    }

    /// Recomputes every member's target assignment.
    fn assign(&mut self, image: &MetadataImage) {
        self.resolve(image);
        let ids: Vec<String> = self.members.keys().cloned().collect();
        let mut targets: BTreeMap<String, BTreeSet<Partition>> =
            ids.iter().map(|id| (id.clone(), BTreeSet::new())).collect();
        let topics: BTreeSet<String> =
            self.members.values().flat_map(|m| m.subscribed.iter().chain(m.resolved.iter()).cloned()).collect();
        let mut cursor = 0usize;
        for topic in topics {
            let Some(meta) = image.topic(&topic) else { continue };
            let subscribers: Vec<&String> = ids
                .iter()
                .filter(|id| {
                    self.members[*id].subscribed.contains(&topic) || self.members[*id].resolved.contains(&topic)
                })
                .collect();
            if subscribers.is_empty() {
                continue;
            }
            let n = meta.partitions as usize;
            for p in 0..n {
                let member = if self.assignor == "range" {
                    // Contiguous ranges per topic, the first members taking one extra.
                    let per = n / subscribers.len();
                    let extra = n % subscribers.len();
                    let mut index = 0;
                    let mut start = 0;
                    for (i, _) in subscribers.iter().enumerate() {
                        let len = per + usize::from(i < extra);
                        if p < start + len {
                            index = i;
                            break;
                        }
                        start += len;
                    }
                    subscribers[index]
                } else {
                    // Uniform: round robin over every subscribed partition.
                    let m = subscribers[cursor % subscribers.len()];
                    cursor += 1;
                    m
                };
                targets.get_mut(member).expect("member").insert((topic.clone(), p as i32));
            }
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

    /// One heartbeat.
    pub fn heartbeat(
        &mut self,
        request: &ConsumerGroupHeartbeatRequest,
        client_id: &str,
        client_host: &str,
        image: &MetadataImage,
        settings: ConsumerSettings,
        now: Instant,
    ) -> ConsumerGroupHeartbeatResponse {
        let error = |c: i16, m: &str| {
            ConsumerGroupHeartbeatResponse::default().with_error_code(c).with_error_message(Some(s(m)))
        };
        if let Some(assignor) = &request.server_assignor {
            if assignor.as_str() != "uniform" && assignor.as_str() != "range" {
                return error(UNSUPPORTED_ASSIGNOR, "supported server assignors: uniform, range");
            }
            self.assignor = assignor.to_string();
        }
        let mut member_id = request.member_id.to_string();
        match request.member_epoch {
            LEAVE_EPOCH | STATIC_LEAVE_EPOCH => {
                if self.members.remove(&member_id).is_some() {
                    self.bump(image);
                }
                return ConsumerGroupHeartbeatResponse::default()
                    .with_member_id(Some(s(member_id)))
                    .with_member_epoch(request.member_epoch);
            }
            0 => {
                let regex = match &request.subscribed_topic_regex {
                    Some(p) if !p.is_empty() => match compile(p) {
                        Ok(r) => Some(r),
                        Err(e) => return error(INVALID_REGULAR_EXPRESSION, &e),
                    },
                    _ => None,
                };
                let empty = Vec::new();
                let subscribed = match (&request.subscribed_topic_names, &regex) {
                    (Some(names), _) => names,
                    (None, Some(_)) => &empty,
                    (None, None) => return error(code::INVALID_REQUEST, "a joining member must give its subscription"),
                };
                if member_id.is_empty() {
                    member_id = uuid::Uuid::new_v4().to_string();
                }
                // A new member beyond `group.consumer.max.size` is refused, as Kafka
                // refuses it; a static member replacing itself is not new.
                let replaces = request
                    .instance_id
                    .as_ref()
                    .is_some_and(|i| self.members.values().any(|m| m.instance_id.as_deref() == Some(i.as_str())));
                if !self.members.contains_key(&member_id) && !replaces && self.members.len() >= settings.max_size {
                    return error(
                        code::GROUP_MAX_SIZE_REACHED,
                        &format!(
                            "the consumer group has reached its maximum capacity of {} members",
                            settings.max_size
                        ),
                    );
                }
                // A static member replacing its previous incarnation takes its place.
                if let Some(instance) = &request.instance_id {
                    let old: Option<String> = self
                        .members
                        .values()
                        .find(|m| m.instance_id.as_deref() == Some(instance.as_str()))
                        .map(|m| m.id.clone());
                    if let Some(old) = old {
                        self.members.remove(&old);
                    }
                }
                let mut member = ConsumerMember::new(&member_id, now);
                member.instance_id = request.instance_id.as_ref().map(|i| i.to_string());
                member.rack_id = request.rack_id.as_ref().map(|r| r.to_string());
                member.client_id = client_id.to_owned();
                member.client_host = client_host.to_owned();
                member.subscribed = subscribed.iter().map(|t| t.0.to_string()).collect();
                member.regex = regex;
                member.rebalance_timeout_ms = request.rebalance_timeout_ms;
                self.members.insert(member_id.clone(), member);
                self.bump(image);
            }
            epoch => {
                let Some(member) = self.members.get_mut(&member_id) else {
                    return error(code::UNKNOWN_MEMBER_ID, "unknown member");
                };
                if epoch != member.epoch && epoch != member.previous_epoch {
                    return error(FENCED_MEMBER_EPOCH, "member epoch is fenced");
                }
                member.last_seen = now;
                let mut changed = false;
                if let Some(subscribed) = &request.subscribed_topic_names {
                    let subscribed: Vec<String> = subscribed.iter().map(|t| t.0.to_string()).collect();
                    if subscribed != member.subscribed {
                        member.subscribed = subscribed;
                        changed = true;
                    }
                }
                if let Some(pattern) = &request.subscribed_topic_regex {
                    if member.regex.as_ref().map(|(p, _)| p.as_str()) != Some(pattern.as_str()) {
                        member.regex = if pattern.is_empty() {
                            None
                        } else {
                            match compile(pattern) {
                                Ok(r) => Some(r),
                                Err(e) => return error(INVALID_REGULAR_EXPRESSION, &e),
                            }
                        };
                        member.resolved.clear();
                        changed = true;
                    }
                }
                // Topics created or deleted since change what patterns match.
                if changed || self.resolve(image) {
                    self.bump(image);
                }
            }
        }
        if let Some(owned) = &request.topic_partitions {
            let member = self.members.get_mut(&member_id).expect("present");
            member.owned = owned
                .iter()
                .filter_map(|tp| image.topic_by_id(tp.topic_id).map(|m| (m.name.clone(), tp.partitions.clone())))
                .flat_map(|(name, ps)| ps.into_iter().map(move |p| (name.clone(), p)))
                .collect();
        }
        // Reconcile: a member first gives up what it must (keeping its epoch), then
        // moves to the group epoch and receives the partitions nobody else holds.
        let others: BTreeSet<Partition> = self
            .members
            .values()
            .filter(|m| m.id != member_id)
            .flat_map(|m| m.owned.iter().chain(m.sent.iter()).cloned())
            .collect();
        let group_epoch = self.epoch;
        let member = self.members.get_mut(&member_id).expect("present");
        let revoking = !member.owned.is_subset(&member.target);
        let assigned: BTreeSet<Partition> = if revoking {
            member.owned.intersection(&member.target).cloned().collect()
        } else {
            if member.epoch != group_epoch {
                member.previous_epoch = member.epoch;
                member.epoch = group_epoch;
            }
            member.target.difference(&others).cloned().collect()
        };
        member.sent = assigned.clone();
        let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for (t, p) in assigned {
            by_topic.entry(t).or_default().push(p);
        }
        let assignment = Assignment::default().with_topic_partitions(
            by_topic
                .into_iter()
                .filter_map(|(t, ps)| {
                    image.topic(&t).map(|m| TopicPartitions::default().with_topic_id(m.id).with_partitions(ps))
                })
                .collect(),
        );
        ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(s(member_id)))
            .with_member_epoch(member.epoch)
            .with_heartbeat_interval_ms(settings.heartbeat_interval.as_millis() as i32)
            .with_assignment(Some(assignment))
    }

    /// Removes members whose session expired; returns how many.
    pub fn expire(&mut self, image: &MetadataImage, settings: ConsumerSettings, now: Instant) -> usize {
        let before = self.members.len();
        self.members.retain(|_, m| now.duration_since(m.last_seen) <= settings.session_timeout);
        let removed = before - self.members.len();
        if removed > 0 {
            self.bump(image);
        }
        removed
    }

    /// The records that describe the group now (Kafka's KIP-848 records), keyed by
    /// type and member, in the order Kafka writes them.
    fn records(&self, image: &MetadataImage) -> BTreeMap<RecordKey, Entry> {
        let by_id = |set: &BTreeSet<Partition>| records::by_topic_id(image, set);
        let group = self.id.clone();
        let mut out = BTreeMap::new();
        out.insert((3, String::new()), Entry::ConsumerGroup { group: group.clone(), epoch: Some(self.epoch) });
        out.insert((6, String::new()), Entry::TargetAssignment { group: group.clone(), epoch: Some(self.epoch) });
        for m in self.members.values() {
            let member = m.id.clone();
            let metadata = ConsumerMemberValue {
                instance_id: m.instance_id.clone(),
                rack_id: m.rack_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                subscribed_topic_names: m.subscribed.clone(),
                subscribed_topic_regex: m.regex.as_ref().map(|(p, _)| p.clone()),
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                server_assignor: Some(self.assignor.clone()),
            };
            out.insert(
                (5, member.clone()),
                Entry::ConsumerMember { group: group.clone(), member: member.clone(), value: Some(metadata) },
            );
            out.insert(
                (7, member.clone()),
                Entry::TargetMember {
                    group: group.clone(),
                    member: member.clone(),
                    partitions: Some(by_id(&m.target)),
                },
            );
            let pending: BTreeSet<Partition> = m.owned.difference(&m.sent).cloned().collect();
            let current = CurrentAssignmentValue {
                member_epoch: m.epoch,
                previous_member_epoch: m.previous_epoch,
                state: if pending.is_empty() { 0 } else { 1 },
                assigned: by_id(&m.sent),
                pending_revocation: by_id(&pending),
            };
            out.insert(
                (8, member.clone()),
                Entry::CurrentAssignment { group: group.clone(), member, value: Some(current) },
            );
        }
        out
    }

    /// The records to write for what changed since the last call: new values, and
    /// tombstones for members that left. Cost: one pass over the members.
    pub fn changes(&mut self, image: &MetadataImage) -> Vec<Entry> {
        let now = self.records(image);
        let mut out: Vec<Entry> =
            now.iter().filter(|(k, e)| self.persisted.get(*k) != Some(*e)).map(|(_, e)| e.clone()).collect();
        for (key, old) in &self.persisted {
            if !now.contains_key(key) {
                out.push(match old.clone() {
                    Entry::ConsumerMember { group, member, .. } => Entry::ConsumerMember { group, member, value: None },
                    Entry::TargetMember { group, member, .. } => {
                        Entry::TargetMember { group, member, partitions: None }
                    }
                    Entry::CurrentAssignment { group, member, .. } => {
                        Entry::CurrentAssignment { group, member, value: None }
                    }
                    other => other,
                });
            }
        }
        self.persisted = now;
        out
    }

    /// Forgets what was written: the next `changes` writes the whole group again
    /// (after a write failed).
    pub fn forget_persisted(&mut self) {
        self.persisted.clear();
    }

    /// Takes the records replayed so far as written, once the partition is loaded.
    pub fn loaded(&mut self, image: &MetadataImage) {
        self.persisted = self.records(image);
    }

    /// Applies one KIP-848 record replayed from the offsets topic. Members restored
    /// get a full session from `now` to heartbeat again.
    pub fn replay(&mut self, entry: Entry, image: &MetadataImage, now: Instant) {
        let names = |topics: Vec<records::TopicPartitions>| records::by_topic_name(image, topics);
        match entry {
            Entry::ConsumerGroup { epoch: Some(epoch), .. } => self.epoch = epoch,
            Entry::ConsumerMember { member, value: Some(v), .. } => {
                let m = self.members.entry(member.clone()).or_insert_with(|| ConsumerMember::new(&member, now));
                m.instance_id = v.instance_id;
                m.rack_id = v.rack_id;
                m.client_id = v.client_id;
                m.client_host = v.client_host;
                m.subscribed = v.subscribed_topic_names;
                m.regex = v.subscribed_topic_regex.and_then(|p| compile(&p).ok());
                m.rebalance_timeout_ms = v.rebalance_timeout_ms;
                if let Some(assignor) = v.server_assignor {
                    self.assignor = assignor;
                }
            }
            Entry::ConsumerMember { member, value: None, .. } => {
                self.members.remove(&member);
            }
            Entry::TargetMember { member, partitions: Some(partitions), .. } => {
                if let Some(m) = self.members.get_mut(&member) {
                    m.target = names(partitions);
                }
            }
            Entry::CurrentAssignment { member, value: Some(v), .. } => {
                if let Some(m) = self.members.get_mut(&member) {
                    m.epoch = v.member_epoch;
                    m.previous_epoch = v.previous_member_epoch;
                    m.sent = names(v.assigned);
                    // The member may still hold what it was asked to revoke.
                    m.owned = m.sent.union(&names(v.pending_revocation)).cloned().collect();
                }
            }
            _ => {}
        }
    }

    /// Whether an offset commit with this member id and epoch may proceed.
    pub fn check_commit(&self, member_id: &str, epoch: i32) -> i16 {
        match self.members.get(member_id) {
            None => code::UNKNOWN_MEMBER_ID,
            Some(m) if epoch > m.epoch => FENCED_MEMBER_EPOCH,
            Some(m) if epoch < m.epoch && epoch != m.previous_epoch => STALE_MEMBER_EPOCH,
            Some(_) => code::NONE,
        }
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
            .with_assignor_name(s(self.assignor.clone()))
            .with_authorized_operations(i32::MIN)
            .with_members(
                self.members
                    .values()
                    .map(|m| {
                        Member::default()
                            .with_member_id(s(m.id.clone()))
                            .with_instance_id(m.instance_id.clone().map(s))
                            .with_rack_id(m.rack_id.clone().map(s))
                            .with_member_epoch(m.epoch)
                            .with_client_id(s(m.client_id.clone()))
                            .with_client_host(s(m.client_host.clone()))
                            .with_subscribed_topic_names(m.subscribed.iter().map(|t| TopicName(s(t.clone()))).collect())
                            .with_assignment(to_assignment(&m.owned))
                            .with_target_assignment(to_assignment(&m.target))
                    })
                    .collect(),
            )
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::TopicName;
    use skein_control::metadata::TopicMeta;

    use super::*;

    fn image(topics: &[(&str, i32)]) -> MetadataImage {
        let mut image = MetadataImage::default();
        for (name, partitions) in topics {
            image.topics.insert(
                name.to_string(),
                TopicMeta {
                    name: name.to_string(),
                    id: uuid::Uuid::new_v4(),
                    partitions: *partitions,
                    configs: Default::default(),
                    shards: vec![0; *partitions as usize],
                    assignments: Vec::new(),
                },
            );
        }
        image
    }

    fn settings() -> ConsumerSettings {
        ConsumerSettings {
            heartbeat_interval: Duration::from_millis(500),
            session_timeout: Duration::from_secs(10),
            max_size: 2,
        }
    }

    fn assigned(r: &ConsumerGroupHeartbeatResponse) -> usize {
        r.assignment.as_ref().map_or(0, |a| a.topic_partitions.iter().map(|t| t.partitions.len()).sum())
    }

    // The records a group writes rebuild it: members, subscriptions, epochs, targets
    // and current assignments come back, and the rebuilt group has nothing to rewrite.
    // A member that leaves is written as tombstones.
    #[test]
    fn records_rebuild_the_group() {
        let img = image(&[("t", 4), ("u", 2)]);
        let mut group = ConsumerGroup::new("g");
        let now = Instant::now();
        let join = |id: &str, topics: &[&str]| {
            ConsumerGroupHeartbeatRequest::default()
                .with_member_id(StrBytes::from_string(id.to_string()))
                .with_member_epoch(0)
                .with_rebalance_timeout_ms(30_000)
                .with_subscribed_topic_names(Some(
                    topics.iter().map(|t| TopicName(StrBytes::from_string(t.to_string()))).collect(),
                ))
        };
        let mut written = Vec::new();
        group.heartbeat(&join("a", &["t", "u"]), "c", "h", &img, settings(), now);
        written.extend(group.changes(&img));
        group.heartbeat(&join("b", &["t"]), "c", "h", &img, settings(), now);
        written.extend(group.changes(&img));
        assert!(group.changes(&img).is_empty(), "nothing changed since");

        let mut rebuilt = ConsumerGroup::new("g");
        for entry in written.clone() {
            rebuilt.replay(entry, &img, now);
        }
        rebuilt.loaded(&img);
        assert_eq!(rebuilt.epoch, group.epoch);
        for (id, m) in &group.members {
            let r = &rebuilt.members[id];
            assert_eq!(
                (r.epoch, r.previous_epoch, &r.sent, &r.target),
                (m.epoch, m.previous_epoch, &m.sent, &m.target)
            );
            assert_eq!((&r.subscribed, r.rebalance_timeout_ms), (&m.subscribed, 30_000));
        }
        assert_eq!(rebuilt.records(&img), group.records(&img));
        assert!(rebuilt.changes(&img).is_empty());

        // b leaves: its three records become tombstones.
        let leave = ConsumerGroupHeartbeatRequest::default()
            .with_member_id(StrBytes::from_static_str("b"))
            .with_member_epoch(LEAVE_EPOCH);
        group.heartbeat(&leave, "c", "h", &img, settings(), now);
        let tombstones: Vec<Entry> = group
            .changes(&img)
            .into_iter()
            .filter(|e| {
                matches!(
                    e,
                    Entry::ConsumerMember { value: None, .. }
                        | Entry::TargetMember { partitions: None, .. }
                        | Entry::CurrentAssignment { value: None, .. }
                )
            })
            .collect();
        assert_eq!(tombstones.len(), 3, "{tombstones:?}");
    }

    // group.consumer.max.size: a third member of a group of at most two is refused,
    // and a member already in the group may rejoin.
    #[test]
    fn max_size_refuses_new_members() {
        let img = image(&[("t", 4)]);
        let mut group = ConsumerGroup::new("g");
        let now = Instant::now();
        let join = |id: &str| {
            ConsumerGroupHeartbeatRequest::default()
                .with_member_id(StrBytes::from_string(id.to_string()))
                .with_member_epoch(0)
                .with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_static_str("t"))]))
        };
        assert_eq!(group.heartbeat(&join("a"), "c", "h", &img, settings(), now).error_code, 0);
        assert_eq!(group.heartbeat(&join("b"), "c", "h", &img, settings(), now).error_code, 0);
        assert_eq!(
            group.heartbeat(&join("c"), "c", "h", &img, settings(), now).error_code,
            code::GROUP_MAX_SIZE_REACHED
        );
        assert_eq!(group.heartbeat(&join("b"), "c", "h", &img, settings(), now).error_code, 0);
    }

    // Two members split the partitions; a pattern subscription follows new topics.
    #[test]
    fn members_split_and_patterns_follow_topics() {
        let mut img = image(&[("rx-a", 2), ("rx-b", 2), ("other", 3)]);
        let mut group = ConsumerGroup::new("g");
        let now = Instant::now();
        let join = |id: &str, names: Option<Vec<&str>>, regex: Option<&str>| {
            ConsumerGroupHeartbeatRequest::default()
                .with_member_id(StrBytes::from_string(id.to_string()))
                .with_member_epoch(0)
                .with_subscribed_topic_names(
                    names.map(|n| n.into_iter().map(|t| TopicName(StrBytes::from_string(t.to_string()))).collect()),
                )
                .with_subscribed_topic_regex(regex.map(|r| StrBytes::from_string(r.to_string())))
        };
        let a = group.heartbeat(&join("a", None, Some("rx-.*")), "c", "h", &img, settings(), now);
        assert_eq!(a.error_code, 0);
        assert_eq!(assigned(&a), 4, "rx-a and rx-b, not other");
        let b = group.heartbeat(&join("b", None, Some("rx-.*")), "c", "h", &img, settings(), now);
        // b's partitions are still owned by a (a has not revoked yet): nothing yet.
        assert_eq!(assigned(&b), 0);
        let steady = |id: &str, epoch: i32| {
            ConsumerGroupHeartbeatRequest::default()
                .with_member_id(StrBytes::from_string(id.to_string()))
                .with_member_epoch(epoch)
        };
        let a2 = group.heartbeat(&steady("a", a.member_epoch), "c", "h", &img, settings(), now);
        assert_eq!(assigned(&a2), 2, "a is told to keep half");
        // A new matching topic is picked up by the patterns.
        img = image(&[("rx-a", 2), ("rx-b", 2), ("other", 3), ("rx-c", 2)]);
        let epoch_before = group.epoch;
        group.heartbeat(&steady("b", b.member_epoch), "c", "h", &img, settings(), now);
        assert!(group.epoch > epoch_before);
        let targets: usize = group.members.values().map(|m| m.target.len()).sum();
        assert_eq!(targets, 6);
        let bad = group.heartbeat(&join("c", None, Some("(")), "c", "h", &img, settings(), now);
        assert_eq!(bad.error_code, INVALID_REGULAR_EXPRESSION);
    }
}
