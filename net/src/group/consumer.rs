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

use crate::errors::code;
use crate::metadata::MetadataImage;

/// KIP-848's epochs for leaving: -1 leaves, -2 leaves as a static member.
const LEAVE_EPOCH: i32 = -1;
const STATIC_LEAVE_EPOCH: i32 = -2;
/// FENCED_MEMBER_EPOCH and UNRELEASED_INSTANCE_ID, as Kafka numbers them.
pub const FENCED_MEMBER_EPOCH: i16 = 110;
pub const UNSUPPORTED_ASSIGNOR: i16 = 112;
pub const STALE_MEMBER_EPOCH: i16 = 113;

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
    subscribed: Vec<String>,
    owned: BTreeSet<Partition>,
    target: BTreeSet<Partition>,
    last_seen: Instant,
}

pub struct ConsumerGroup {
    pub id: String,
    pub epoch: i32,
    assignor: String,
    members: BTreeMap<String, ConsumerMember>,
}

/// Settings of consumer groups (`group.consumer.*`).
#[derive(Debug, Clone, Copy)]
pub struct ConsumerSettings {
    pub heartbeat_interval: Duration,
    pub session_timeout: Duration,
}

impl ConsumerGroup {
    pub fn new(id: &str) -> ConsumerGroup {
        ConsumerGroup { id: id.to_owned(), epoch: 0, assignor: "uniform".into(), members: BTreeMap::new() }
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
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

    /// Recomputes every member's target assignment.
    fn assign(&mut self, image: &MetadataImage) {
        let ids: Vec<String> = self.members.keys().cloned().collect();
        let mut targets: BTreeMap<String, BTreeSet<Partition>> =
            ids.iter().map(|id| (id.clone(), BTreeSet::new())).collect();
        let topics: BTreeSet<String> = self.members.values().flat_map(|m| m.subscribed.iter().cloned()).collect();
        let mut cursor = 0usize;
        for topic in topics {
            let Some(meta) = image.topic(&topic) else { continue };
            let subscribers: Vec<&String> =
                ids.iter().filter(|id| self.members[*id].subscribed.contains(&topic)).collect();
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
                let Some(subscribed) = &request.subscribed_topic_names else {
                    return error(code::INVALID_REQUEST, "a joining member must give its subscription");
                };
                if member_id.is_empty() {
                    member_id = uuid::Uuid::new_v4().to_string();
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
                self.members.insert(
                    member_id.clone(),
                    ConsumerMember {
                        id: member_id.clone(),
                        instance_id: request.instance_id.as_ref().map(|i| i.to_string()),
                        rack_id: request.rack_id.as_ref().map(|r| r.to_string()),
                        client_id: client_id.to_owned(),
                        client_host: client_host.to_owned(),
                        epoch: 0,
                        previous_epoch: 0,
                        subscribed: subscribed.iter().map(|t| t.0.to_string()).collect(),
                        owned: BTreeSet::new(),
                        target: BTreeSet::new(),
                        last_seen: now,
                    },
                );
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
                if changed {
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
        // Reconcile.
        let others: BTreeSet<Partition> =
            self.members.values().filter(|m| m.id != member_id).flat_map(|m| m.owned.iter().cloned()).collect();
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
