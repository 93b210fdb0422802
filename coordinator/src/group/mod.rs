//! The group coordinator, classic protocol (KIP-62 heartbeats, KIP-345 static members,
//! KIP-394 member ids): JoinGroup, SyncGroup, Heartbeat, LeaveGroup, offset commits.
//!
//! A group lives on the shard that owns partition `abs(hash(group)) % 50` of
//! `__consumer_offsets`, as in Kafka; requests reach it through `topics::group_call`. Offsets
//! and group metadata are appended to that partition in Kafka's record format
//! (`records`) and replayed when the partition is opened; until then requests get
//! COORDINATOR_LOAD_IN_PROGRESS. A ticker expires sessions and completes rebalances.
//!
//! States, as Kafka names them: Empty -> PreparingRebalance (members rejoin, bounded by
//! the rebalance timeout and `group.initial.rebalance.delay.ms` for a new group) ->
//! CompletingRebalance (the leader computes assignments) -> Stable. Members that miss
//! their session timeout are removed and the group rebalances.

pub mod calls;
mod classic;
pub mod configs;
pub mod consumer;
pub mod lag;
mod offsets;
pub mod records;
pub mod share;
pub mod streams;
mod streams_coordinator;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;
pub use calls::{GroupAnswer, GroupCall, GroupRequest};
use futures_channel::oneshot;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, JoinGroupResponse, SyncGroupResponse};
use kafka_protocol::protocol::StrBytes;
pub use offsets::offset_entry;
use records::{Entry, GroupValue, MemberValue, OffsetValue};
use skein_control::errors::code;
pub use streams_coordinator::StreamsBeat;

/// The offsets topic and its partition count (`offsets.topic.num.partitions`).
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
pub const OFFSETS_TOPIC_PARTITIONS: i32 = 50;
/// Kafka's `offset.metadata.max.bytes`: longer commit metadata is refused.
pub const OFFSET_METADATA_MAX_BYTES: usize = 4096;
/// Kafka's session timeout bounds (`group.min.session.timeout.ms`, `group.max...`).
pub const SESSION_TIMEOUT_MIN_MS: i32 = 6_000;
pub const SESSION_TIMEOUT_MAX_MS: i32 = 1_800_000;

/// The partition of `__consumer_offsets` that holds a group: Kafka's
/// `Utils.abs(groupId.hashCode) % partitions`, with Java's `String.hashCode`.
pub fn partition_for(group: &str) -> i32 {
    key_partition(group, OFFSETS_TOPIC_PARTITIONS)
}

/// `abs(key.hashCode()) % partitions`, with Java's `String.hashCode` (Kafka's
/// `Utils.abs` masks the sign bit): how Kafka places a group or a transactional id.
pub fn key_partition(key: &str, partitions: i32) -> i32 {
    let mut hash: i32 = 0;
    for unit in key.encode_utf16() {
        hash = hash.wrapping_mul(31).wrapping_add(unit as i32);
    }
    (hash & 0x7fff_ffff) % partitions
}

fn s(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Empty => "Empty",
            State::PreparingRebalance => "PreparingRebalance",
            State::CompletingRebalance => "CompletingRebalance",
            State::Stable => "Stable",
        }
    }
}

struct Member {
    id: String,
    instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    last_seen: Instant,
    join: Option<oneshot::Sender<JoinGroupResponse>>,
    sync: Option<oneshot::Sender<SyncGroupResponse>>,
}

/// One partition's answer to OffsetFetch: its committed offset (`None`: none) or an
/// error (UNSTABLE_OFFSET_COMMIT, TOPIC_AUTHORIZATION_FAILED).
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionOffset {
    pub topic: String,
    pub partition: i32,
    pub committed: Option<Committed>,
    pub error: i16,
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq)]
pub struct Committed {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
}

impl Committed {
    /// What OffsetFetch answers for a partition without a commit.
    pub fn none() -> Committed {
        Committed { offset: -1, leader_epoch: -1, metadata: String::new() }
    }
}

pub struct Group {
    pub id: String,
    pub state: State,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, not yet joined, with when they
    /// expire (one session timeout later, as Kafka's pending-member heartbeat).
    pending: BTreeMap<String, Instant>,
    /// The members changed since the group record was last written (they all left or
    /// expired): the next tick writes it.
    record_stale: bool,
    pub offsets: BTreeMap<(String, i32), Committed>,
    /// Offsets committed in transactions not yet ended (TxnOffsetCommit), by producer
    /// id: they replace `offsets` at a COMMIT marker and are dropped at an ABORT.
    pending_txn: BTreeMap<i64, BTreeMap<(String, i32), Committed>>,
    /// When the current rebalance must complete, joined or not.
    rebalance_deadline: Option<Instant>,
    /// The first rebalance of an empty group: when it started and how long it may last
    /// (the rebalance timeout). Each newcomer during it pushes the deadline to one
    /// `group.initial.rebalance.delay.ms` later, within that bound, as Kafka's
    /// `InitialDelayedJoin` does, so members that start together land in one generation.
    initial_join: Option<(Instant, Duration)>,
    /// Since when the group has had no members (offset retention).
    empty_since: Option<Instant>,
}

impl Group {
    fn new(id: &str) -> Group {
        Group {
            id: id.to_owned(),
            state: State::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            pending: BTreeMap::new(),
            record_stale: false,
            offsets: BTreeMap::new(),
            pending_txn: BTreeMap::new(),
            rebalance_deadline: None,
            initial_join: None,
            empty_since: None,
        }
    }

    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    fn value(&self) -> GroupValue {
        let protocol = self.protocol.clone().unwrap_or_default();
        GroupValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            state_timestamp: skein_engine::time::now_ms(),
            members: self
                .members
                .values()
                .map(|m| MemberValue {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout.as_millis().min(i32::MAX as u128) as i32,
                    session_timeout_ms: m.session_timeout.as_millis().min(i32::MAX as u128) as i32,
                    subscription: m
                        .protocols
                        .iter()
                        .find(|(n, _)| *n == protocol)
                        .map(|(_, b)| b.clone())
                        .unwrap_or_default(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    fn prepare_rebalance(&mut self, now: Instant, initial_delay: Duration) {
        let timeout = self.members.values().map(|m| m.rebalance_timeout).max().unwrap_or(Duration::ZERO);
        let delay = if self.state == State::Empty { initial_delay.min(timeout) } else { timeout };
        self.initial_join = (self.state == State::Empty && !initial_delay.is_zero()).then_some((now, timeout));
        self.state = State::PreparingRebalance;
        // Sync waiters of the old generation learn that a rebalance started.
        for member in self.members.values_mut() {
            if let Some(sync) = member.sync.take() {
                let _ = sync.send(SyncGroupResponse::default().with_error_code(code::REBALANCE_IN_PROGRESS));
            }
        }
        self.rebalance_deadline = Some(now + delay);
    }

    /// Whether every member has rejoined (and no initial delay is pending).
    fn all_joined(&self) -> bool {
        !self.members.is_empty() && self.members.values().all(|m| m.join.is_some())
    }

    /// Ends the join phase: drops members that did not rejoin, picks the protocol and
    /// leader, bumps the generation and answers every join.
    fn complete_join(&mut self) {
        self.members.retain(|_, m| m.join.is_some());
        self.rebalance_deadline = None;
        self.initial_join = None;
        self.generation += 1;
        if self.members.is_empty() {
            self.state = State::Empty;
            self.protocol = None;
            self.leader = None;
            self.record_stale = true;
            return;
        }
        self.protocol = self.select_protocol();
        if self.leader.as_ref().is_none_or(|l| !self.members.contains_key(l)) {
            self.leader = self.members.keys().next().cloned();
        }
        self.state = State::CompletingRebalance;
        let protocol = self.protocol.clone().unwrap_or_default();
        let leader = self.leader.clone().unwrap_or_default();
        let all = self.join_members();
        let (generation, protocol_type) = (self.generation, self.protocol_type.clone());
        for member in self.members.values_mut() {
            member.last_seen = Instant::now();
            if let Some(join) = member.join.take() {
                let response = JoinGroupResponse::default()
                    .with_generation_id(generation)
                    .with_protocol_type(protocol_type.clone().map(s))
                    .with_protocol_name(Some(s(protocol.clone())))
                    .with_leader(s(leader.clone()))
                    .with_member_id(s(member.id.clone()))
                    .with_members(if member.id == leader { all.clone() } else { Vec::new() });
                let _ = join.send(response);
            }
        }
    }

    /// The protocol every member supports that most members prefer (Kafka's vote).
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&String> = first
            .protocols
            .iter()
            .map(|(n, _)| n)
            .filter(|n| self.members.values().all(|m| m.protocols.iter().any(|(p, _)| p == *n)))
            .collect();
        let mut votes: HashMap<&String, usize> = HashMap::new();
        for m in self.members.values() {
            if let Some((n, _)) = m.protocols.iter().find(|(n, _)| candidates.contains(&n)) {
                *votes.entry(n).or_default() += 1;
            }
        }
        candidates.into_iter().max_by_key(|n| votes.get(n).copied().unwrap_or(0)).cloned()
    }

    /// The members as the leader's JoinGroup answer lists them, with their metadata
    /// for the group's protocol.
    fn join_members(&self) -> Vec<JoinGroupResponseMember> {
        let protocol = self.protocol.clone().unwrap_or_default();
        self.members
            .values()
            .map(|m| {
                JoinGroupResponseMember::default()
                    .with_member_id(s(m.id.clone()))
                    .with_group_instance_id(m.instance_id.clone().map(s))
                    .with_metadata(
                        m.protocols.iter().find(|(n, _)| *n == protocol).map(|(_, md)| md.clone()).unwrap_or_default(),
                    )
            })
            .collect()
    }

    /// The topics a classic group's members subscribe to, for OffsetDelete, as
    /// Kafka's `computeSubscribedTopics` reads them from the members' `consumer`
    /// protocol metadata: `None` when they cannot be read (every topic counts as
    /// subscribed then). A non-empty group of another protocol type:
    /// NON_EMPTY_GROUP.
    pub(super) fn subscribed_topics(&self) -> Result<Option<BTreeSet<String>>, i16> {
        use kafka_protocol::messages::ConsumerProtocolSubscription;
        use kafka_protocol::protocol::Decodable;
        if self.members.is_empty() {
            return Ok(Some(BTreeSet::new()));
        }
        if self.protocol_type.as_deref() != Some("consumer") {
            return Err(code::NON_EMPTY_GROUP);
        }
        let Some(protocol) = &self.protocol else { return Ok(None) };
        let mut topics = BTreeSet::new();
        for member in self.members.values() {
            let Some((_, metadata)) = member.protocols.iter().find(|(name, _)| name == protocol) else {
                return Ok(None);
            };
            let mut buf = metadata.clone();
            if buf.len() < 2 {
                return Ok(None);
            }
            let version = bytes::Buf::get_i16(&mut buf).clamp(0, 3);
            let Ok(subscription) = ConsumerProtocolSubscription::decode(&mut buf, version) else { return Ok(None) };
            topics.extend(subscription.topics.into_iter().map(|t| t.to_string()));
        }
        Ok(Some(topics))
    }

    /// The member id a static member (`instance`) holds now.
    fn static_member(&self, instance: &str) -> Option<&str> {
        self.members.values().find(|m| m.instance_id.as_deref() == Some(instance)).map(|m| m.id.as_str())
    }

    /// Kafka's `validateMember`: a request naming a group instance must carry the
    /// member id that instance holds now (FENCED_INSTANCE_ID: an older incarnation,
    /// replaced by a newer one that joined with the same `group.instance.id`).
    pub(super) fn validate_member(&self, member_id: &str, instance: Option<&str>) -> i16 {
        match instance {
            Some(instance) => match self.static_member(instance) {
                None => code::UNKNOWN_MEMBER_ID,
                Some(id) if id != member_id => code::FENCED_INSTANCE_ID,
                Some(_) => code::NONE,
            },
            None if self.members.contains_key(member_id) => code::NONE,
            None => code::UNKNOWN_MEMBER_ID,
        }
    }

    /// A static member that joined again without its member id (a restarted process,
    /// or a second one started with the same `group.instance.id`) takes over the
    /// instance under a new member id, keeping its assignment; the old id is fenced,
    /// and a join or sync it has waiting is answered FENCED_INSTANCE_ID (KIP-345).
    fn replace_static_member(&mut self, old: &str, new: &str) {
        let Some(mut member) = self.members.remove(old) else { return };
        if let Some(join) = member.join.take() {
            let _ = join.send(JoinGroupResponse::default().with_error_code(code::FENCED_INSTANCE_ID));
        }
        if let Some(sync) = member.sync.take() {
            let _ = sync.send(SyncGroupResponse::default().with_error_code(code::FENCED_INSTANCE_ID));
        }
        member.id = new.to_owned();
        self.members.insert(new.to_owned(), member);
        if self.leader.as_deref() == Some(old) {
            self.leader = Some(new.to_owned());
        }
        self.record_stale = true;
    }

    fn remove_member(&mut self, id: &str, now: Instant, initial_delay: Duration) {
        if let Some(member) = self.members.remove(id) {
            if let Some(join) = member.join {
                let _ = join.send(JoinGroupResponse::default().with_error_code(code::UNKNOWN_MEMBER_ID));
            }
            if let Some(sync) = member.sync {
                let _ = sync.send(SyncGroupResponse::default().with_error_code(code::UNKNOWN_MEMBER_ID));
            }
        }
        match self.state {
            _ if self.members.is_empty() => {
                self.state = State::Empty;
                self.rebalance_deadline = None;
                self.leader = None;
                self.generation += 1;
                self.record_stale = true;
            }
            State::Stable | State::CompletingRebalance => self.prepare_rebalance(now, initial_delay),
            State::PreparingRebalance => {
                if self.all_joined() {
                    self.complete_join();
                }
            }
            State::Empty => {}
        }
    }
}

/// Parameters of a join, from a JoinGroup request; sent to the coordinating shard.
#[derive(Debug)]
pub struct Join {
    pub group: String,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// v4+: an unknown member must first ask for an id (MEMBER_ID_REQUIRED).
    pub require_known_member_id: bool,
    /// v9+: a static leader that replaced itself may be told to skip the assignment.
    pub skip_assignment_supported: bool,
}

/// The groups of one shard.
pub struct Coordinator {
    groups: RefCell<HashMap<String, Group>>,
    /// Groups of the KIP-848 consumer protocol (their offsets live in `groups`).
    consumer_groups: RefCell<HashMap<String, consumer::ConsumerGroup>>,
    pub consumer_settings: std::cell::Cell<consumer::ConsumerSettings>,
    /// Share groups (KIP-932): their membership (`share`).
    share_groups: RefCell<HashMap<String, share::ShareGroup>>,
    /// Streams groups (KIP-1071); their offsets live in `groups`.
    streams_groups: RefCell<HashMap<String, streams::StreamsGroup>>,
    pub streams_settings: std::cell::Cell<streams::StreamsSettings>,
    /// Offsets-topic partitions loaded on this shard.
    loaded: RefCell<BTreeSet<i32>>,
    pub initial_rebalance_delay: std::cell::Cell<Duration>,
    /// Kafka's `group.max.size`.
    pub max_size: std::cell::Cell<usize>,
    /// Kafka's `offsets.retention.minutes`: offsets of a group that stayed empty this
    /// long are deleted.
    pub offsets_retention: std::cell::Cell<Duration>,
}

/// What the caller must persist after a state change.
pub type Writes = Vec<Entry>;

/// SyncGroup answers held until the group record they depend on is written.
pub type Deliveries = Vec<(oneshot::Sender<SyncGroupResponse>, SyncGroupResponse)>;

impl Default for Coordinator {
    fn default() -> Self {
        Coordinator {
            groups: RefCell::default(),
            consumer_groups: RefCell::default(),
            share_groups: RefCell::default(),
            streams_groups: RefCell::default(),
            streams_settings: std::cell::Cell::new(streams::StreamsSettings::default()),
            consumer_settings: std::cell::Cell::new(consumer::ConsumerSettings {
                heartbeat_interval: Duration::from_secs(5),
                session_timeout: Duration::from_secs(45),
                max_size: i32::MAX as usize,
            }),
            loaded: RefCell::default(),
            initial_rebalance_delay: std::cell::Cell::new(Duration::from_secs(3)),
            max_size: std::cell::Cell::new(i32::MAX as usize),
            offsets_retention: std::cell::Cell::new(Duration::from_secs(7 * 24 * 3600)),
        }
    }
}

impl Coordinator {
    /// ConsumerGroupHeartbeat (KIP-848).
    pub fn consumer_heartbeat(
        &self,
        request: &kafka_protocol::messages::ConsumerGroupHeartbeatRequest,
        client_id: &str,
        client_host: &str,
        image: &skein_control::metadata::MetadataImage,
        now: Instant,
    ) -> (kafka_protocol::messages::ConsumerGroupHeartbeatResponse, Writes) {
        let id = request.group_id.0.to_string();
        if id.is_empty() {
            return (
                kafka_protocol::messages::ConsumerGroupHeartbeatResponse::default()
                    .with_error_code(code::INVALID_GROUP_ID),
                Vec::new(),
            );
        }
        if self.groups.borrow().get(&id).is_some_and(|g| !g.members.is_empty()) {
            return (
                kafka_protocol::messages::ConsumerGroupHeartbeatResponse::default()
                    .with_error_code(code::GROUP_ID_NOT_FOUND)
                    .with_error_message(Some(s("the group uses the classic protocol"))),
                Vec::new(),
            );
        }
        if self.share_groups.borrow().contains_key(&id) || self.streams_groups.borrow().contains_key(&id) {
            return (
                kafka_protocol::messages::ConsumerGroupHeartbeatResponse::default()
                    .with_error_code(code::GROUP_ID_NOT_FOUND)
                    .with_error_message(Some(s(format!("Group {id} is not a consumer group.")))),
                Vec::new(),
            );
        }
        let settings = configs::consumer_settings(self.consumer_settings.get(), image, &id);
        let mut groups = self.consumer_groups.borrow_mut();
        let group = groups.entry(id.clone()).or_insert_with(|| consumer::ConsumerGroup::new(&id));
        let response = group.heartbeat(request, client_id, client_host, image, settings, now);
        let writes = group.changes(image);
        (response, writes)
    }

    pub fn consumer_describe(
        &self,
        group: &str,
        image: &skein_control::metadata::MetadataImage,
    ) -> kafka_protocol::messages::consumer_group_describe_response::DescribedGroup {
        match self.consumer_groups.borrow().get(group) {
            Some(g) => g.describe(image),
            None => kafka_protocol::messages::consumer_group_describe_response::DescribedGroup::default()
                .with_group_id(GroupId(s(group)))
                .with_error_code(code::GROUP_ID_NOT_FOUND),
        }
    }

    /// Expires consumer-protocol members whose session ended.
    /// Expires KIP-848 members whose session ran out; returns the records to write.
    pub fn tick_consumers(&self, image: &skein_control::metadata::MetadataImage, now: Instant) -> Writes {
        let settings = self.consumer_settings.get();
        let loaded = self.loaded.borrow();
        let mut writes = Vec::new();
        for group in self.consumer_groups.borrow_mut().values_mut() {
            if !loaded.contains(&partition_for(&group.id)) {
                continue;
            }
            let removed = group.expire(image, configs::consumer_settings(settings, image, &group.id), now);
            if removed > 0 {
                tracing::info!(target: "skein::net", group = %group.id, removed, "consumer sessions expired");
                writes.extend(group.changes(image));
            }
        }
        drop(loaded);
        writes.extend(self.tick_shares(image, now));
        writes.extend(self.tick_streams(image, now));
        writes
    }

    pub fn is_loaded(&self, partition: i32) -> bool {
        self.loaded.borrow().contains(&partition)
    }

    /// Marks an offsets partition loaded: its groups are served from now on, and the
    /// KIP-848 records replayed count as written.
    pub fn mark_loaded(&self, partition: i32, image: &skein_control::metadata::MetadataImage) {
        for group in self.consumer_groups.borrow_mut().values_mut() {
            if partition_for(&group.id) == partition {
                group.loaded(image);
            }
        }
        for group in self.share_groups.borrow_mut().values_mut() {
            if partition_for(&group.id) == partition {
                group.loaded(image);
            }
        }
        self.streams_loaded(partition, image);
        self.loaded.borrow_mut().insert(partition);
    }

    /// Forgets the groups of an offsets partition this broker no longer leads: their
    /// members are told to find the new coordinator, which loads them from the log.
    pub fn unload(&self, partition: i32) {
        self.groups.borrow_mut().retain(|id, _| partition_for(id) != partition);
        self.consumer_groups.borrow_mut().retain(|id, _| partition_for(id) != partition);
        self.share_groups.borrow_mut().retain(|id, _| partition_for(id) != partition);
        self.streams_groups.borrow_mut().retain(|id, _| partition_for(id) != partition);
        self.loaded.borrow_mut().remove(&partition);
    }

    /// A KIP-848 group's records could not be written: write them whole next time.
    pub fn consumer_persist_failed(&self, group: &str) {
        if let Some(g) = self.consumer_groups.borrow_mut().get_mut(group) {
            g.forget_persisted();
        }
    }

    /// Applies a record replayed from the offsets topic.
    pub fn replay(&self, entry: Entry, image: &skein_control::metadata::MetadataImage) {
        let mut groups = self.groups.borrow_mut();
        match entry {
            Entry::ConsumerGroup { group, epoch: None } => {
                self.consumer_groups.borrow_mut().remove(&group);
            }
            entry @ (Entry::ConsumerGroup { .. }
            | Entry::ConsumerMember { .. }
            | Entry::TargetAssignment { .. }
            | Entry::TargetMember { .. }
            | Entry::CurrentAssignment { .. }) => {
                let id = entry.group().to_owned();
                let mut consumers = self.consumer_groups.borrow_mut();
                let group = consumers.entry(id.clone()).or_insert_with(|| consumer::ConsumerGroup::new(&id));
                group.replay(entry, image, Instant::now());
            }
            entry @ (Entry::StreamsGroup { .. }
            | Entry::StreamsMember { .. }
            | Entry::StreamsAssignment { .. }
            | Entry::StreamsTopology { .. }) => self.replay_streams(entry),
            Entry::ShareGroup { group, epoch: None } => {
                self.share_groups.borrow_mut().remove(&group);
            }
            entry @ (Entry::ShareGroup { .. }
            | Entry::ShareStatePartitions { .. }
            | Entry::ShareMember { .. }
            | Entry::ShareTargetAssignment { .. }
            | Entry::ShareTargetMember { .. }
            | Entry::ShareCurrentAssignment { .. }) => {
                let id = entry.group().to_owned();
                let mut shares = self.share_groups.borrow_mut();
                let group = shares.entry(id.clone()).or_insert_with(|| share::ShareGroup::new(&id));
                group.replay(entry, image, Instant::now());
            }
            Entry::Offset { group, topic, partition, value } => {
                let g = groups.entry(group.clone()).or_insert_with(|| Group::new(&group));
                match value {
                    Some(v) => {
                        g.offsets.insert(
                            (topic, partition),
                            Committed { offset: v.offset, leader_epoch: v.leader_epoch, metadata: v.metadata },
                        );
                    }
                    None => {
                        g.offsets.remove(&(topic, partition));
                    }
                }
            }
            Entry::Group { group, value: Some(v) } => {
                let g = groups.entry(group.clone()).or_insert_with(|| Group::new(&group));
                g.generation = v.generation;
                g.protocol_type = Some(v.protocol_type).filter(|p| !p.is_empty());
                g.protocol = v.protocol.clone();
                g.leader = v.leader;
                // The members of the last completed rebalance, as Kafka loads them: the
                // group is Stable with them, and each must heartbeat within its session
                // timeout from now, so a static member that restarts meanwhile rejoins
                // without a rebalance.
                let now = Instant::now();
                let protocol = v.protocol.unwrap_or_default();
                g.members = v
                    .members
                    .into_iter()
                    .map(|m| {
                        let member = Member {
                            id: m.member_id.clone(),
                            instance_id: m.instance_id,
                            client_id: m.client_id,
                            client_host: m.client_host,
                            session_timeout: Duration::from_millis(m.session_timeout_ms.max(0) as u64),
                            rebalance_timeout: Duration::from_millis(m.rebalance_timeout_ms.max(0) as u64),
                            protocols: vec![(protocol.clone(), m.subscription)],
                            assignment: m.assignment,
                            last_seen: now,
                            join: None,
                            sync: None,
                        };
                        (m.member_id, member)
                    })
                    .collect();
                g.state = if g.members.is_empty() { State::Empty } else { State::Stable };
            }
            Entry::Group { group, value: None } => {
                groups.remove(&group);
            }
        }
    }

    /// The group's record when its members changed since it was last written (a
    /// static member replaced itself), taken here so that it is written before that
    /// member is answered, as Kafka does; else nothing (the tick writes the others).
    pub fn stale_record(&self, group_id: &str) -> Writes {
        let mut groups = self.groups.borrow_mut();
        let Some(g) = groups.get_mut(group_id) else { return Vec::new() };
        match std::mem::take(&mut g.record_stale) {
            true => vec![Entry::Group { group: g.id.clone(), value: Some(g.value()) }],
            false => Vec::new(),
        }
    }

    /// Expires sessions and completes rebalances whose time is up. Returns the
    /// tombstones of offsets that outlived `offsets.retention.minutes` in empty groups.
    pub fn tick(&self, now: Instant) -> Writes {
        let delay = self.initial_rebalance_delay.get();
        let retention = self.offsets_retention.get();
        let mut writes = Vec::new();
        let mut groups = self.groups.borrow_mut();
        let consumer = self.consumer_groups.borrow();
        let streams = self.streams_groups.borrow();
        let mut removed = Vec::new();
        for group in groups.values_mut() {
            group.pending.retain(|_, expiry| *expiry > now);
            let others_empty = consumer.get(&group.id).is_none_or(|g| g.is_empty())
                && streams.get(&group.id).is_none_or(|g| g.is_empty());
            if group.members.is_empty() && others_empty {
                let since = *group.empty_since.get_or_insert(now);
                if now.duration_since(since) > retention && !group.offsets.is_empty() {
                    tracing::info!(target: "skein::net", group = %group.id, offsets = group.offsets.len(), "offsets expired");
                    for ((t, p), _) in std::mem::take(&mut group.offsets) {
                        writes.push(Entry::Offset { group: group.id.clone(), topic: t, partition: p, value: None });
                    }
                }
                // An empty group without offsets is gone, as Kafka's cleanup removes it:
                // a tombstone for its record, and it leaves the coordinator. Offsets of
                // an open transaction keep it until their marker.
                let idle = group.pending.is_empty() && group.pending_txn.is_empty();
                if group.offsets.is_empty() && idle && group.state == State::Empty {
                    writes.push(Entry::Group { group: group.id.clone(), value: None });
                    removed.push(group.id.clone());
                    continue;
                }
            } else {
                group.empty_since = None;
            }
            if std::mem::take(&mut group.record_stale) {
                writes.push(Entry::Group { group: group.id.clone(), value: Some(group.value()) });
            }
            let expired: Vec<String> = group
                .members
                .values()
                .filter(|m| m.join.is_none() && m.sync.is_none() && now.duration_since(m.last_seen) > m.session_timeout)
                .map(|m| m.id.clone())
                .collect();
            for id in expired {
                tracing::info!(target: "skein::net", group = %group.id, member = %id, "session expired");
                group.remove_member(&id, now, delay);
            }
            if group.state == State::PreparingRebalance && group.rebalance_deadline.is_some_and(|d| d <= now) {
                group.complete_join();
            }
        }
        for id in removed {
            tracing::info!(target: "skein::net", group = %id, "empty group removed");
            groups.remove(&id);
        }
        writes
    }

    pub fn describe(&self, group_id: &str) -> DescribedGroup {
        let groups = self.groups.borrow();
        let mut described =
            DescribedGroup::default().with_group_id(GroupId(s(group_id))).with_authorized_operations(i32::MIN);
        // Not a classic group: GROUP_ID_NOT_FOUND, which DescribeGroups before v6
        // leaves out (`handlers::describe_groups`).
        let other_protocol = self.consumer_groups.borrow().get(group_id).is_some_and(|g| !g.is_empty())
            || self.share_groups.borrow().contains_key(group_id)
            || self.streams_groups.borrow().contains_key(group_id);
        let not_found = |why: String| {
            described
                .clone()
                .with_group_state(s("Dead"))
                .with_error_code(code::GROUP_ID_NOT_FOUND)
                .with_error_message(Some(s(why)))
        };
        match groups.get(group_id) {
            _ if other_protocol => not_found(format!("Group {group_id} is not a classic group.")),
            None => not_found(format!("Group {group_id} not found.")),
            Some(g) => {
                described.group_state = s(g.state.name());
                described.protocol_type = s(g.protocol_type.clone().unwrap_or_default());
                described.protocol_data = s(g.protocol.clone().unwrap_or_default());
                described.members = g
                    .members
                    .values()
                    .map(|m| {
                        let metadata = g
                            .protocol
                            .as_ref()
                            .and_then(|p| m.protocols.iter().find(|(n, _)| n == p))
                            .map(|(_, md)| md.clone())
                            .unwrap_or_default();
                        DescribedGroupMember::default()
                            .with_member_id(s(m.id.clone()))
                            .with_group_instance_id(m.instance_id.clone().map(s))
                            .with_client_id(s(m.client_id.clone()))
                            .with_client_host(s(m.client_host.clone()))
                            .with_member_metadata(metadata)
                            .with_member_assignment(m.assignment.clone())
                    })
                    .collect();
                described
            }
        }
    }

    pub fn list(&self, states: &[String]) -> Vec<ListedGroup> {
        let wanted = |state: &str| states.is_empty() || states.iter().any(|st| st.eq_ignore_ascii_case(state));
        let mut out = self.list_share(&wanted);
        let consumer = self.consumer_groups.borrow();
        let streams = self.streams_groups.borrow();
        out.extend(streams.values().filter(|g| wanted(g.state())).map(|g| {
            ListedGroup::default()
                .with_group_id(GroupId(s(g.id.clone())))
                .with_protocol_type(s("streams"))
                .with_group_state(s(g.state()))
                .with_group_type(s("streams"))
        }));
        out.extend(consumer.values().filter(|g| wanted(g.state())).map(|g| {
            ListedGroup::default()
                .with_group_id(GroupId(s(g.id.clone())))
                .with_protocol_type(s("consumer"))
                .with_group_state(s(g.state()))
                .with_group_type(s("consumer"))
        }));
        out.extend(
            self.groups
                .borrow()
                .values()
                .filter(|g| !consumer.contains_key(&g.id) && !streams.contains_key(&g.id) && wanted(g.state.name()))
                .map(|g| {
                    ListedGroup::default()
                        .with_group_id(GroupId(s(g.id.clone())))
                        .with_protocol_type(s(g.protocol_type.clone().unwrap_or_default()))
                        .with_group_state(s(g.state.name()))
                        .with_group_type(s("classic"))
                }),
        );
        out
    }

    /// Deletes an empty group; returns the tombstones to persist.
    pub fn delete(&self, group_id: &str) -> Result<Writes, i16> {
        if let Some(writes) = self.delete_share(group_id) {
            return writes;
        }
        let mut streams_tombstones = match self.delete_streams(group_id) {
            Some(Err(c)) => return Err(c),
            Some(Ok(writes)) => Some(writes),
            None => None,
        };
        {
            let mut consumer = self.consumer_groups.borrow_mut();
            if consumer.get(group_id).is_some_and(|g| !g.is_empty()) {
                return Err(code::NON_EMPTY_GROUP);
            }
            if consumer.remove(group_id).is_some() && !self.groups.borrow().contains_key(group_id) {
                return Ok(vec![Entry::Group { group: group_id.to_owned(), value: None }]);
            }
        }
        let mut groups = self.groups.borrow_mut();
        let Some(group) = groups.get(group_id) else { return streams_tombstones.ok_or(code::GROUP_ID_NOT_FOUND) };
        if !group.members.is_empty() {
            return Err(code::NON_EMPTY_GROUP);
        }
        let mut writes: Writes = group
            .offsets
            .keys()
            .map(|(t, p)| Entry::Offset { group: group_id.to_owned(), topic: t.clone(), partition: *p, value: None })
            .collect();
        writes.push(Entry::Group { group: group_id.to_owned(), value: None });
        writes.extend(streams_tombstones.take().unwrap_or_default());
        groups.remove(group_id);
        Ok(writes)
    }
}
