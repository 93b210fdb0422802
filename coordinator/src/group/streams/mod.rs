//! Streams groups (KIP-1071): Kafka Streams applications whose tasks the coordinator
//! assigns. A joining member sends the application's topology; the coordinator
//! configures it against the topics (`topology`), names the internal topics to
//! create, and once every topic is there assigns the tasks (`assign`) and hands them
//! out member by member, each revoking before another receives.
//!
//! The group's records in `__consumer_offsets` are Kafka's: its epoch, its topology,
//! and each member's metadata and tasks (`records`, `persist`), so the group and its
//! members outlive a coordinator move: they heartbeat on to the new coordinator,
//! which computes the target again from their tasks. Offsets are the classic offsets
//! of the group (`Coordinator::groups`).

pub mod assign;
mod persist;
pub mod records;
pub mod topology;
mod view;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use assign::{MemberState, Progress, TaskSet, Tasks};
use kafka_protocol::messages::streams_group_heartbeat_request::{self as req, Topology};
use kafka_protocol::messages::streams_group_heartbeat_response::{self as resp, Status};
use kafka_protocol::messages::{StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse};
use kafka_protocol::protocol::StrBytes;
use skein_control::errors::code;
use skein_control::metadata::MetadataImage;
use topology::{Configured, InternalTopic};

use crate::group::consumer::{FENCED_MEMBER_EPOCH, STALE_MEMBER_EPOCH};

const LEAVE_EPOCH: i32 = -1;
const STATIC_LEAVE_EPOCH: i32 = -2;

fn s(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

/// A refused heartbeat: the error code and Kafka's message.
pub use skein_control::errors::Refusal as Refused;

/// Settings of a streams group (`group.streams.*`, `streams.*` group configs).
#[derive(Debug, Clone, Copy)]
pub struct StreamsSettings {
    pub heartbeat_interval: Duration,
    pub session_timeout: Duration,
    pub num_standby_replicas: usize,
    /// Kafka's `group.streams.max.size`.
    pub max_size: usize,
    /// How long a group that was empty waits for more members before its first
    /// assignment (`streams.initial.rebalance.delay.ms`).
    pub initial_rebalance_delay: Duration,
    /// The least time between two target assignments (`streams.assignment.interval.ms`).
    pub assignment_interval: Duration,
}

impl Default for StreamsSettings {
    /// Kafka 4.4's defaults.
    fn default() -> StreamsSettings {
        StreamsSettings {
            heartbeat_interval: Duration::from_secs(5),
            session_timeout: Duration::from_secs(45),
            num_standby_replicas: 0,
            max_size: i32::MAX as usize,
            initial_rebalance_delay: Duration::from_secs(3),
            assignment_interval: Duration::from_secs(1),
        }
    }
}

/// A streams group's settings: `base` with the group's own `streams.*` configs.
pub fn settings(base: StreamsSettings, image: &MetadataImage, group: &str) -> StreamsSettings {
    let Some(overrides) = image.group_configs.get(group) else { return base };
    let number = |name: &str| overrides.get(name).and_then(|v| v.trim().parse::<u64>().ok());
    let ms = |name: &str| number(name).map(Duration::from_millis);
    StreamsSettings {
        heartbeat_interval: ms("streams.heartbeat.interval.ms").unwrap_or(base.heartbeat_interval),
        session_timeout: ms("streams.session.timeout.ms").unwrap_or(base.session_timeout),
        num_standby_replicas: number("streams.num.standby.replicas").map_or(base.num_standby_replicas, |n| n as usize),
        initial_rebalance_delay: ms("streams.initial.rebalance.delay.ms").unwrap_or(base.initial_rebalance_delay),
        assignment_interval: ms("streams.assignment.interval.ms").unwrap_or(base.assignment_interval),
        ..base
    }
}

/// Kafka 4.4's `group.streams.task.offset.interval.ms` and acceptable recovery lag.
const TASK_OFFSET_INTERVAL_MS: i32 = 60_000;
const ACCEPTABLE_RECOVERY_LAG: i64 = 10_000;

#[derive(Debug, Clone, PartialEq)]
struct Member {
    id: String,
    instance_id: Option<String>,
    rack_id: Option<String>,
    client_id: String,
    client_host: String,
    rebalance_timeout_ms: i32,
    topology_epoch: i32,
    process_id: String,
    endpoint: Option<(String, u16)>,
    client_tags: BTreeMap<String, String>,
    progress: Progress,
    previous_epoch: i32,
    last_seen: Instant,
    /// Since when it has been asked to revoke tasks: fenced after its rebalance
    /// timeout.
    revoking_since: Option<Instant>,
}

impl Member {
    fn new(id: &str, now: Instant) -> Member {
        Member {
            id: id.to_owned(),
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            rebalance_timeout_ms: -1,
            topology_epoch: -1,
            process_id: String::new(),
            endpoint: None,
            client_tags: BTreeMap::new(),
            progress: Progress {
                epoch: 0,
                state: MemberState::Stable,
                assigned: Tasks::default(),
                pending_revocation: Tasks::default(),
            },
            previous_epoch: -1,
            last_seen: now,
            revoking_since: None,
        }
    }

    /// The metadata a static member's rebalance depends on (Kafka's
    /// `hasEpochRelevantMemberConfigChanged`).
    fn assignment_inputs(&self) -> (&Option<String>, i32, &str, &BTreeMap<String, String>) {
        (&self.rack_id, self.topology_epoch, &self.process_id, &self.client_tags)
    }
}

pub struct StreamsGroup {
    pub id: String,
    epoch: i32,
    assignment_epoch: i32,
    /// The topology the first member sent, in canonical order.
    topology: Option<Topology>,
    configured: Option<Configured>,
    validated_topology_epoch: i32,
    members: BTreeMap<String, Member>,
    target: BTreeMap<String, Tasks>,
    /// The standby count the target was computed with.
    standbys: usize,
    endpoint_epoch: i32,
    shutdown_requested_by: Option<String>,
    /// What the records last written hold, to write only what changed (`persist`).
    persisted: persist::Persisted,
    /// The end of the initial rebalance delay, while it runs.
    delayed_until: Option<Instant>,
    /// When the target assignment was last computed.
    assigned_at: Option<Instant>,
}

/// What a heartbeat produced besides its answer: the internal topics to create.
#[derive(Debug)]
pub struct Beat {
    pub response: StreamsGroupHeartbeatResponse,
    pub create: Vec<InternalTopic>,
}

fn task_ids(set: &TaskSet) -> Vec<resp::TaskIds> {
    set.iter()
        .filter(|(_, parts)| !parts.is_empty())
        .map(|(sub, parts)| {
            resp::TaskIds::default()
                .with_subtopology_id(s(sub.clone()))
                .with_partitions(parts.iter().copied().collect())
        })
        .collect()
}

fn from_request(tasks: &[req::TaskIds]) -> TaskSet {
    let mut set = TaskSet::new();
    for t in tasks {
        set.entry(t.subtopology_id.to_string()).or_default().extend(&t.partitions);
    }
    set
}

/// Kafka's `throwIfStreamsGroupHeartbeatRequestIsInvalid` and the unsupported-feature
/// check, run before the coordinator sees the request.
///
/// # Errors
/// INVALID_REQUEST or STREAMS_INVALID_TOPOLOGY with Kafka's message.
pub fn check_request(request: &StreamsGroupHeartbeatRequest) -> Result<(), Refused> {
    let invalid = |why: &str| Err((code::INVALID_REQUEST, why.to_owned()));
    if let Some(topology) = &request.topology {
        topology::validate(topology)?;
    }
    if request.member_id.is_empty() {
        return invalid("MemberId can't be empty.");
    }
    if request.group_id.is_empty() {
        return invalid("GroupId can't be empty.");
    }
    if request.instance_id.as_ref().is_some_and(|i| i.is_empty()) {
        return invalid("InstanceId can't be empty.");
    }
    if request.rack_id.as_ref().is_some_and(|r| r.is_empty()) {
        return invalid("RackId can't be empty.");
    }
    let tasks = [
        (&request.active_tasks, "ActiveTasks"),
        (&request.standby_tasks, "StandbyTasks"),
        (&request.warmup_tasks, "WarmupTasks"),
    ];
    match request.member_epoch {
        0 => {
            if request.rebalance_timeout_ms == -1 {
                return invalid("RebalanceTimeoutMs must be provided in first request.");
            }
            if let Some((_, name)) = tasks.iter().find(|(t, _)| t.as_ref().is_some_and(|t| !t.is_empty())) {
                return Err((code::INVALID_REQUEST, format!("{name} must be empty when (re-)joining.")));
            }
            if request.topology.is_none() {
                return invalid("Topology must be non-null when (re-)joining.");
            }
        }
        STATIC_LEAVE_EPOCH if request.instance_id.is_none() => return invalid("InstanceId can't be null."),
        epoch if epoch < STATIC_LEAVE_EPOCH => {
            return Err((
                code::INVALID_REQUEST,
                format!("MemberEpoch is {epoch}, but must be greater than or equal to -2."),
            ))
        }
        _ => {}
    }
    if tasks.iter().any(|(t, _)| t.is_some()) && tasks.iter().any(|(t, _)| t.is_none()) {
        return invalid("If one task-type is non-null, all must be non-null.");
    }
    if request.member_epoch != 0 && request.topology.is_some() {
        return invalid("Topology can only be provided when (re-)joining.");
    }
    Ok(())
}

/// Who holds which task now, from the members' current tasks, leaving one member out.
struct Held<'a> {
    active: BTreeMap<(&'a str, i32), &'a str>,
    replicas: BTreeMap<(&'a str, i32), Vec<&'a str>>,
}

impl<'a> Held<'a> {
    fn of(members: impl Iterator<Item = &'a Member>) -> Held<'a> {
        let mut held = Held { active: BTreeMap::new(), replicas: BTreeMap::new() };
        for m in members {
            for tasks in [&m.progress.assigned, &m.progress.pending_revocation] {
                for (sub, parts) in &tasks.active {
                    for p in parts {
                        held.active.insert((sub.as_str(), *p), m.process_id.as_str());
                    }
                }
                for set in [&tasks.standby, &tasks.warmup] {
                    for (sub, parts) in set {
                        for p in parts {
                            held.replicas.entry((sub.as_str(), *p)).or_default().push(m.process_id.as_str());
                        }
                    }
                }
            }
        }
        held
    }
}

impl assign::Holders for Held<'_> {
    fn active(&self, sub: &str, partition: i32) -> Option<&str> {
        self.active.get(&(sub, partition)).copied()
    }
    fn replicas(&self, sub: &str, partition: i32) -> Vec<&str> {
        self.replicas.get(&(sub, partition)).cloned().unwrap_or_default()
    }
}

impl StreamsGroup {
    pub fn new(id: &str) -> StreamsGroup {
        StreamsGroup {
            id: id.to_owned(),
            epoch: 0,
            assignment_epoch: 0,
            topology: None,
            configured: None,
            validated_topology_epoch: -1,
            members: BTreeMap::new(),
            target: BTreeMap::new(),
            standbys: 0,
            endpoint_epoch: 0,
            shutdown_requested_by: None,
            persisted: persist::Persisted::default(),
            delayed_until: None,
            assigned_at: None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// A member's epoch, if it is one.
    pub fn member_epoch(&self, member: &str) -> Option<i32> {
        self.members.get(member).map(|m| m.progress.epoch)
    }

    /// Kafka's streams group states.
    pub fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.topology.as_ref().is_none_or(|t| t.epoch != self.validated_topology_epoch) {
            "NotReady"
        } else if self.epoch > self.assignment_epoch {
            "Assigning"
        } else if self.members.values().any(|m| !self.reconciled(m)) {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    fn reconciled(&self, m: &Member) -> bool {
        m.progress.state == MemberState::Stable && m.progress.epoch == self.assignment_epoch
    }

    /// Whether the group reads `topic` while it has members (OffsetDelete's check).
    pub fn subscribes(&self, topic: &str) -> bool {
        !self.members.is_empty()
            && self
                .topology
                .as_ref()
                .is_some_and(|t| t.subtopologies.iter().any(|s| topology::input_topics(s).contains(topic)))
    }

    /// The partition counts of the topology's topics now.
    fn counts(image: &MetadataImage) -> impl Fn(&str) -> Option<i32> + '_ {
        |topic| image.topic(topic).map(|t| t.partitions)
    }

    /// Configures the topology again when it is new or its topics changed; whether the
    /// configuration changed.
    fn configure(&mut self, image: &MetadataImage) -> Result<bool, Refused> {
        let Some(topology) = &self.topology else { return Ok(false) };
        let count = Self::counts(image);
        let fresh = self
            .configured
            .as_ref()
            .is_some_and(|c| c.epoch == topology.epoch && c.counts.iter().all(|(t, n)| count(t) == *n));
        if fresh {
            return Ok(false);
        }
        let configured = topology::configure(topology, count)?;
        match &configured.problem {
            None => {
                tracing::info!(target: "skein::net", group = %self.id, epoch = topology.epoch, "streams topology configured")
            }
            Some((_, detail)) => {
                tracing::info!(target: "skein::net", group = %self.id, %detail, "streams topology not ready")
            }
        }
        self.configured = Some(configured);
        Ok(true)
    }

    /// Bumps the group epoch; the target assignment follows (`assign_target`).
    fn bump(&mut self, settings: StreamsSettings, now: Instant, statuses: &mut Vec<Status>) {
        self.epoch += 1;
        self.assign_target(settings, now, statuses);
    }

    /// Computes the target assignment for the group epoch when it is behind, as Kafka
    /// 4.4 does: not during the initial rebalance delay (the members get an empty
    /// target at the group epoch meanwhile), and not twice within the assignment
    /// interval; each is an ASSIGNMENT_DELAYED status for the member.
    fn assign_target(&mut self, settings: StreamsSettings, now: Instant, statuses: &mut Vec<Status>) {
        if self.delayed_until.is_some_and(|until| now < until) {
            statuses.push(status(
                topology::ASSIGNMENT_DELAYED,
                "Assignment delayed due to the configured initial rebalance delay.".into(),
            ));
            self.target.clear();
            self.assignment_epoch = self.epoch;
            return;
        }
        if self.assignment_epoch >= self.epoch {
            return;
        }
        if self.assigned_at.is_some_and(|at| now.duration_since(at) < settings.assignment_interval) {
            statuses.push(status(
                topology::ASSIGNMENT_DELAYED,
                "Assignment delayed due to the configured assignment interval.".into(),
            ));
            return;
        }
        self.assigned_at = Some(now);
        self.compute_target(settings.num_standby_replicas);
    }

    /// The sticky assignor's target for the group epoch.
    fn compute_target(&mut self, standbys: usize) {
        self.standbys = standbys;
        let tasks = match &self.configured {
            Some(c) if c.ready() => c.tasks.clone(),
            _ => BTreeMap::new(),
        };
        let candidates: Vec<assign::Candidate<'_>> = self
            .members
            .values()
            .map(|m| assign::Candidate { id: &m.id, process: &m.process_id, current: &m.progress.assigned })
            .collect();
        self.target = assign::assign(&tasks, &candidates, standbys);
        self.assignment_epoch = self.epoch;
        tracing::info!(target: "skein::net", group = %self.id, epoch = self.epoch, members = self.members.len(), "streams group rebalanced");
    }

    fn check_epoch(member: &Member, epoch: i32, owned: Option<&Tasks>) -> Result<(), Refused> {
        let fenced = |which: &str| {
            Err((
                FENCED_MEMBER_EPOCH,
                format!(
                    "The streams group member has a {which} member epoch ({epoch}) than the one known by the group \
                     coordinator ({}). The member must abandon all its partitions and rejoin.",
                    member.progress.epoch
                ),
            ))
        };
        if epoch == 0 || epoch == member.progress.epoch {
            return Ok(());
        }
        if epoch > member.progress.epoch {
            return fenced("greater");
        }
        if epoch != member.previous_epoch || !owned.is_none_or(|o| o.within(&member.progress.assigned)) {
            return fenced("smaller");
        }
        Ok(())
    }

    /// The member a heartbeat is for: found, created, or a static member's new
    /// incarnation; with the id of the member it replaced.
    fn member_for(
        &mut self,
        request: &StreamsGroupHeartbeatRequest,
        owned: Option<&Tasks>,
        settings: StreamsSettings,
        now: Instant,
    ) -> Result<(Member, Option<String>), Refused> {
        let id = request.member_id.to_string();
        let joining = request.member_epoch == 0;
        let full = || {
            Err((
                code::GROUP_MAX_SIZE_REACHED,
                format!("The streams group has reached its maximum capacity of {} members.", settings.max_size),
            ))
        };
        let Some(instance) = request.instance_id.as_ref().map(|i| i.to_string()) else {
            return match self.members.get(&id) {
                Some(m) => Self::check_epoch(m, request.member_epoch, owned).map(|()| (m.clone(), None)),
                None if !joining => {
                    Err((code::UNKNOWN_MEMBER_ID, format!("Member {id} is not a member of group {}.", self.id)))
                }
                None if self.members.len() >= settings.max_size => full(),
                None => Ok((Member::new(&id, now), None)),
            };
        };
        let existing = self.members.values().find(|m| m.instance_id.as_deref() == Some(instance.as_str())).cloned();
        match existing {
            None if !joining => Err((code::UNKNOWN_MEMBER_ID, format!("Instance id {instance} is unknown."))),
            None if self.members.len() >= settings.max_size && !self.members.contains_key(&id) => full(),
            None => Ok((self.members.get(&id).cloned().unwrap_or_else(|| Member::new(&id, now)), None)),
            Some(old) if joining && old.id == id => Ok((old, None)),
            Some(old) if joining => {
                if old.progress.epoch != STATIC_LEAVE_EPOCH {
                    return Err((
                        code::UNRELEASED_INSTANCE_ID,
                        format!(
                            "Static member {id} with instance id {instance} cannot join the group because the instance \
                             id is owned by {} member.",
                            old.id
                        ),
                    ));
                }
                // The new incarnation takes over the old one's tasks.
                let mut member = old.clone();
                member.id = id;
                member.progress.epoch = 0;
                member.previous_epoch = 0;
                Ok((member, Some(old.id)))
            }
            Some(old) if old.id != id => Err((
                code::FENCED_INSTANCE_ID,
                format!("Static member {id} with instance id {instance} was fenced by member {}.", old.id),
            )),
            Some(old) => Self::check_epoch(&old, request.member_epoch, owned).map(|()| (old, None)),
        }
    }

    /// StreamsGroupHeartbeat, as Kafka 4.4's `GroupMetadataManager.streamsGroupHeartbeat`.
    ///
    /// # Errors
    /// The error and message that answer the heartbeat.
    pub fn heartbeat(
        &mut self,
        request: &StreamsGroupHeartbeatRequest,
        client: (&str, &str),
        image: &MetadataImage,
        settings: StreamsSettings,
        now: Instant,
    ) -> Result<Beat, Refused> {
        // A refused heartbeat changes nothing, as Kafka drops a failed operation's
        // records: a topology it brought is forgotten.
        let had_topology = self.topology.is_some();
        let beat = self.beat(request, client, image, settings, now);
        if beat.is_err() && !had_topology {
            self.topology = None;
            self.configured = None;
        }
        beat
    }

    fn beat(
        &mut self,
        request: &StreamsGroupHeartbeatRequest,
        (client_id, client_host): (&str, &str),
        image: &MetadataImage,
        settings: StreamsSettings,
        now: Instant,
    ) -> Result<Beat, Refused> {
        if matches!(request.member_epoch, LEAVE_EPOCH | STATIC_LEAVE_EPOCH) {
            return self.leave(request, settings, now);
        }
        let joining = request.member_epoch == 0;
        let owned = match (&request.active_tasks, &request.standby_tasks, &request.warmup_tasks) {
            (Some(a), Some(s), Some(w)) => {
                Some(Tasks { active: from_request(a), standby: from_request(s), warmup: from_request(w) })
            }
            _ => None,
        };
        let (before, replaced) = self.member_for(request, owned.as_ref(), settings, now)?;
        let mut member = before.clone();
        if let Some(i) = &request.instance_id {
            member.instance_id = Some(i.to_string());
        }
        if let Some(r) = &request.rack_id {
            member.rack_id = Some(r.to_string());
        }
        if request.rebalance_timeout_ms != -1 {
            member.rebalance_timeout_ms = request.rebalance_timeout_ms;
        }
        if let Some(t) = &request.topology {
            member.topology_epoch = t.epoch;
        }
        member.client_id = client_id.to_owned();
        member.client_host = client_host.to_owned();
        if let Some(p) = &request.process_id {
            member.process_id = p.to_string();
        }
        if let Some(tags) = &request.client_tags {
            member.client_tags = tags.iter().map(|kv| (kv.key.to_string(), kv.value.to_string())).collect();
        }
        let endpoint = request.user_endpoint.as_ref().map(|e| (e.host.to_string(), e.port));
        if joining || endpoint.is_some() {
            member.endpoint = endpoint;
        }
        member.last_seen = now;
        let is_new = !self.members.contains_key(&before.id) || replaced.is_some();
        let mut recompute = if member.instance_id.is_none() {
            is_new || member != Member { last_seen: member.last_seen, ..before.clone() }
        } else {
            !self.members.contains_key(&before.id) && replaced.is_none()
                || member.assignment_inputs() != before.assignment_inputs()
        };
        if let Some(t) = &request.topology {
            let sent = topology::canonical(t);
            match &self.topology {
                None => {
                    tracing::info!(target: "skein::net", group = %self.id, epoch = t.epoch, "streams topology initialized");
                    self.topology = Some(sent);
                }
                Some(current) if current.epoch > t.epoch => {}
                Some(current) if *current != sent => {
                    return Err((code::INVALID_REQUEST, "Topology updates are not supported yet.".into()));
                }
                Some(_) => {}
            }
        }
        let mut statuses = Vec::new();
        if let Some(t) = self.topology.as_ref().filter(|t| member.topology_epoch < t.epoch) {
            statuses.push(status(
                topology::STALE_TOPOLOGY,
                format!(
                    "The member's topology epoch {} is behind the group's topology epoch {}.",
                    member.topology_epoch, t.epoch
                ),
            ));
        }
        recompute |= self.configure(image)?;
        let configured = self.configured.clone();
        let validated = match (&configured, &self.topology) {
            (Some(c), Some(t)) if c.ready() => t.epoch,
            _ => -1,
        };
        if let (Some(c), Some(owned)) = (configured.as_ref().filter(|c| c.ready()), &owned) {
            for set in [&owned.active, &owned.standby, &owned.warmup] {
                check_tasks(&c.tasks, set)?;
            }
        }
        if validated != self.validated_topology_epoch || settings.num_standby_replicas != self.standbys {
            recompute = true;
        }
        self.validated_topology_epoch = validated;
        if let Some(old) = &replaced {
            self.members.remove(old);
            if let Some(tasks) = self.target.remove(old) {
                self.target.insert(member.id.clone(), tasks);
            }
        }
        if self.members.is_empty() && !settings.initial_rebalance_delay.is_zero() && self.delayed_until.is_none() {
            self.delayed_until = Some(now + settings.initial_rebalance_delay);
        }
        self.members.insert(member.id.clone(), member.clone());
        match recompute {
            true => self.bump(settings, now, &mut statuses),
            false => self.assign_target(settings, now, &mut statuses),
        }
        if request.shutdown_application && self.shutdown_requested_by.is_none() {
            tracing::info!(target: "skein::net", group = %self.id, member = %member.id, "shutdown requested for the streams application");
            self.shutdown_requested_by = Some(member.id.clone());
        }
        self.reconcile(&member.id, owned.as_ref(), now);
        let member = self.members[&member.id].clone();
        let mut response = StreamsGroupHeartbeatResponse::default()
            .with_member_id(s(member.id.clone()))
            .with_member_epoch(member.progress.epoch)
            .with_heartbeat_interval_ms(settings.heartbeat_interval.as_millis().min(i32::MAX as u128) as i32)
            .with_task_offset_interval_ms(TASK_OFFSET_INTERVAL_MS)
            .with_acceptable_recovery_lag_legacy(ACCEPTABLE_RECOVERY_LAG as i32)
            .with_acceptable_recovery_lag(ACCEPTABLE_RECOVERY_LAG);
        let tasks_changed = member.progress.assigned != before.progress.assigned;
        if joining || tasks_changed {
            let assigned = &member.progress.assigned;
            response.active_tasks = Some(task_ids(&assigned.active));
            response.standby_tasks = Some(task_ids(&assigned.standby));
            response.warmup_tasks = Some(task_ids(&assigned.warmup));
        }
        if member.endpoint != before.endpoint || tasks_changed && member.endpoint.is_some() {
            self.endpoint_epoch += 1;
        }
        if request.endpoint_information_epoch != self.endpoint_epoch {
            response.partitions_by_user_endpoint = Some(self.endpoints(image));
        }
        response.endpoint_information_epoch = self.endpoint_epoch;
        let mut create = Vec::new();
        if let Some(c) = &configured {
            if let Some((code, detail)) = &c.problem {
                statuses.push(status(*code, detail.clone()));
                create = c.to_create.clone();
            }
        }
        if let Some(by) = &self.shutdown_requested_by {
            statuses.push(status(
                topology::SHUTDOWN_APPLICATION,
                format!("Streams group member {by} encountered a fatal error and requested a shutdown for the entire application."),
            ));
        }
        response.status = Some(statuses);
        Ok(Beat { response, create })
    }

    /// Moves a member one step towards its target.
    fn reconcile(&mut self, id: &str, owned: Option<&Tasks>, now: Instant) {
        let Some(member) = self.members.get(id) else { return };
        let empty = Tasks::default();
        let target = self.target.get(id).unwrap_or(&empty);
        let held = Held::of(self.members.values().filter(|m| m.id != id));
        let next = assign::reconcile(&member.progress, &member.process_id, self.assignment_epoch, target, owned, &held);
        if next == member.progress {
            return;
        }
        let member = self.members.get_mut(id).expect("member");
        if next.epoch != member.progress.epoch {
            member.previous_epoch = member.progress.epoch;
        }
        member.revoking_since = match next.state {
            MemberState::UnrevokedTasks => member.revoking_since.or(Some(now)),
            _ => None,
        };
        member.progress = next;
    }

    /// A heartbeat of epoch -1 (leave) or -2 (a static member leaving for now).
    fn leave(
        &mut self,
        request: &StreamsGroupHeartbeatRequest,
        settings: StreamsSettings,
        now: Instant,
    ) -> Result<Beat, Refused> {
        let id = request.member_id.to_string();
        if request.shutdown_application && self.shutdown_requested_by.is_none() {
            self.shutdown_requested_by = Some(id.clone());
        }
        let response = StreamsGroupHeartbeatResponse::default()
            .with_member_id(s(id.clone()))
            .with_member_epoch(request.member_epoch)
            .with_status(Some(Vec::new()));
        let leaving = match &request.instance_id {
            None if !self.members.contains_key(&id) => {
                return Err((code::UNKNOWN_MEMBER_ID, format!("Member {id} is not a member of group {}.", self.id)))
            }
            None => id,
            Some(instance) => {
                let Some(member) =
                    self.members.values_mut().find(|m| m.instance_id.as_deref() == Some(instance.as_str()))
                else {
                    return Err((code::UNKNOWN_MEMBER_ID, format!("Instance id {instance} is unknown.")));
                };
                if member.id != id {
                    return Err((
                        code::FENCED_INSTANCE_ID,
                        format!("Static member {id} with instance id {instance} was fenced by member {}.", member.id),
                    ));
                }
                if request.member_epoch == STATIC_LEAVE_EPOCH {
                    // It keeps its tasks until it comes back or its session ends.
                    member.progress.epoch = STATIC_LEAVE_EPOCH;
                    member.progress.pending_revocation = Tasks::default();
                    tracing::info!(target: "skein::net", group = %self.id, member = %id, "static member left the streams group for now");
                    return Ok(Beat { response, create: Vec::new() });
                }
                id
            }
        };
        tracing::info!(target: "skein::net", group = %self.id, member = %leaving, "member left the streams group");
        self.remove(&leaving, settings, now);
        Ok(Beat { response, create: Vec::new() })
    }

    fn remove(&mut self, id: &str, settings: StreamsSettings, now: Instant) {
        self.members.remove(id);
        self.target.remove(id);
        if self.members.is_empty() {
            self.shutdown_requested_by = None;
            self.delayed_until = None;
        }
        self.bump(settings, now, &mut Vec::new());
    }

    /// The group's timers: the end of the initial rebalance delay (a new epoch and
    /// its assignment, as Kafka's `computeDelayedTargetAssignment`), an assignment
    /// the interval held back, and the members fenced because their session ran out
    /// or they did not revoke within their rebalance timeout. Returns whether the
    /// group epoch moved.
    pub fn tick(&mut self, settings: StreamsSettings, now: Instant) -> bool {
        let epoch = self.epoch;
        if self.delayed_until.is_some_and(|until| now >= until) {
            self.delayed_until = None;
            if !self.members.is_empty() {
                self.bump(settings, now, &mut Vec::new());
            }
        } else if self.epoch > self.assignment_epoch {
            self.assign_target(settings, now, &mut Vec::new());
        }
        self.expire(settings, now);
        self.epoch != epoch
    }

    /// Fences members whose session ran out, or that did not revoke within their
    /// rebalance timeout; returns how many.
    fn expire(&mut self, settings: StreamsSettings, now: Instant) -> usize {
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                let session = now.duration_since(m.last_seen) > settings.session_timeout;
                let timeout = Duration::from_millis(m.rebalance_timeout_ms.max(0) as u64);
                let revoke = m.revoking_since.is_some_and(|since| now.duration_since(since) > timeout);
                session || revoke
            })
            .map(|m| m.id.clone())
            .collect();
        for id in &expired {
            tracing::info!(target: "skein::net", group = %self.id, member = %id, "streams member fenced (session or rebalance timeout)");
            self.remove(id, settings, now);
        }
        expired.len()
    }

    /// Kafka's `StreamsGroup.validateOffsetCommit`: an empty group takes any commit, a
    /// transaction may commit without a member; otherwise the member's epoch, or the
    /// one before it (a commit sent before it learned its new epoch).
    pub fn check_commit(&self, member_id: &str, epoch: i32, transactional: bool) -> i16 {
        if epoch < 0 && self.members.is_empty() || transactional && epoch == -1 && member_id.is_empty() {
            return code::NONE;
        }
        match self.members.get(member_id) {
            None => code::UNKNOWN_MEMBER_ID,
            Some(m) if epoch == m.progress.epoch || epoch == m.previous_epoch && epoch >= 0 => code::NONE,
            Some(_) => STALE_MEMBER_EPOCH,
        }
    }
}

fn status(code: i8, detail: String) -> Status {
    Status::default().with_status_code(code).with_status_detail(s(detail))
}

/// Kafka's `throwIfRequestContainsInvalidTasks`.
fn check_tasks(tasks: &BTreeMap<String, i32>, owned: &TaskSet) -> Result<(), Refused> {
    for (sub, parts) in owned {
        let Some(n) = tasks.get(sub) else {
            return Err((code::INVALID_REQUEST, format!("Subtopology {sub} does not exist in the topology.")));
        };
        if let Some(p) = parts.iter().find(|p| **p < 0 || **p >= *n) {
            return Err((
                code::INVALID_REQUEST,
                format!("Task {p} for subtopology {sub} is invalid. Number of tasks for this subtopology: {n}"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
