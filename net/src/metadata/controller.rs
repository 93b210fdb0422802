//! The metadata controller: the one writer of the metadata. It runs on shard 0; other
//! shards reach it by message (`Shard::control`). Each request is decided against the
//! current image (`decide`, pure), turned into records and proposed to the metadata
//! log (`quorum`); once committed, the records are applied and the image published to
//! every shard, and the reply goes out only then, so a client that created a topic
//! finds it on any connection.
//!
//! Requests are handled one at a time. Producer ids leave in blocks of
//! `PRODUCER_ID_BLOCK_SIZE`, as Kafka's controller hands out producer-id blocks, so
//! InitProducerId costs a metadata write once per block, not per producer.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_channel::oneshot;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use serde::{Deserialize, Serialize};
use skein_engine::TopicPartition;

use super::quorum::{quorum_id, Input, Proposal};
use super::transport::{Forwarded, Peers};
use super::{default_shard, Assignment, BrokerMeta, MetadataImage, MetadataRecord, Refusal, TopicMeta};
use crate::errors::code;
use crate::shard::Shard;

/// Producer ids per block (Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`).
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// A change a handler asks of the controller. Handlers validate what they can alone
/// (names, counts, configs); the controller checks what depends on the image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ControllerRequest {
    CreateTopic {
        name: String,
        partitions: i32,
        /// -1: Kafka's `default.replication.factor` (1).
        replication_factor: i16,
        configs: BTreeMap<String, String>,
    },
    DeleteTopic {
        name: String,
    },
    CreatePartitions {
        name: String,
        count: i32,
    },
    SetConfigs {
        name: String,
        configs: BTreeMap<String, String>,
    },
    MovePartition {
        #[serde(with = "partition_serde")]
        partition: TopicPartition,
        target: usize,
    },
    ProducerIds,
    /// A broker (re)starting registers its address (and is live again).
    RegisterBroker(BrokerMeta),
    /// A broker says it is alive (Kafka's BrokerHeartbeat): the active controller
    /// notes the time, and unfences it if it was fenced.
    BrokerHeartbeat {
        id: i32,
    },
    /// The active controller found a broker's session expired.
    FenceBroker {
        id: i32,
    },
    /// Leader elections (ElectLeaders): to the preferred replica, or `unclean`ly to
    /// any live replica for partitions without a leader. `None`: every partition.
    ElectLeaders {
        unclean: bool,
        partitions: Option<Vec<(String, i32)>>,
    },
    /// A partition leader changes its ISR (Kafka's AlterPartition).
    AlterPartition {
        topic: String,
        partition: i32,
        leader: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        isr: Vec<i32>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ControllerReply {
    Topic(TopicMeta),
    /// A topic grown from `old` partitions.
    Grown {
        old: i32,
        meta: TopicMeta,
    },
    ProducerIds(std::ops::Range<i64>),
    /// The outcome of each election asked for.
    Elections(Vec<Election>),
    Done,
}

/// One partition's leader election and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Election {
    pub topic: String,
    pub partition: i32,
    pub error: i16,
    pub message: Option<String>,
}

/// Decides `request` against `image`: the records to apply and the reply.
///
/// # Errors
/// The Kafka error and message for a request the image refuses.
pub fn decide(
    image: &MetadataImage,
    request: &ControllerRequest,
    local: &Local,
) -> Result<(Vec<MetadataRecord>, ControllerReply), Refusal> {
    let shards = local.shards;
    let unknown = |name: &str| (code::UNKNOWN_TOPIC_OR_PARTITION, format!("Topic {name} does not exist."));
    let topic = |name: &str| image.topic(name).cloned().ok_or_else(|| unknown(name));
    Ok(match request {
        ControllerRequest::CreateTopic { name, partitions, replication_factor, configs } => {
            if image.topics.contains_key(name) {
                return Err((code::TOPIC_ALREADY_EXISTS, format!("Topic '{name}' already exists.")));
            }
            // Kafka refuses names that collide once '.' and '_' are treated alike.
            let normalized = name.replace('.', "_");
            if let Some(other) = image.topics.keys().find(|t| t.replace('.', "_") == normalized) {
                return Err((
                    code::INVALID_TOPIC_EXCEPTION,
                    format!("Topic '{name}' collides with existing topic: {other}"),
                ));
            }
            let meta = TopicMeta {
                name: name.clone(),
                id: uuid::Uuid::new_v4(),
                partitions: *partitions,
                configs: configs.clone(),
                shards: (0..*partitions).map(|p| default_shard(name, p, shards)).collect(),
                assignments: assign(image, local, name, 0..*partitions, *replication_factor)?,
            };
            (vec![MetadataRecord::Topic(meta.clone())], ControllerReply::Topic(meta))
        }
        ControllerRequest::DeleteTopic { name } => {
            let meta = image.topic(name).cloned().ok_or_else(|| {
                (code::UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.".to_string())
            })?;
            (vec![MetadataRecord::RemoveTopic { name: name.clone(), id: meta.id }], ControllerReply::Topic(meta))
        }
        ControllerRequest::CreatePartitions { name, count } => {
            let mut meta = topic(name)?;
            check_growth(&meta, *count)?;
            let old = meta.partitions;
            meta.shards.extend((old..*count).map(|p| default_shard(name, p, shards)));
            if !meta.assignments.is_empty() {
                let factor = meta.assignments[0].replicas.len() as i16;
                meta.assignments.extend(assign(image, local, name, old..*count, factor)?);
            }
            meta.partitions = *count;
            (vec![MetadataRecord::Topic(meta.clone())], ControllerReply::Grown { old, meta })
        }
        ControllerRequest::SetConfigs { name, configs } => {
            let mut meta = topic(name)?;
            meta.configs = configs.clone();
            (vec![MetadataRecord::Topic(meta.clone())], ControllerReply::Topic(meta))
        }
        ControllerRequest::MovePartition { partition, target } => {
            let mut meta = topic(&partition.topic)?;
            let slot = usize::try_from(partition.partition)
                .ok()
                .and_then(|p| meta.shards.get_mut(p))
                .ok_or((code::UNKNOWN_TOPIC_OR_PARTITION, format!("no partition {partition}")))?;
            *slot = *target;
            (vec![MetadataRecord::Topic(meta.clone())], ControllerReply::Topic(meta))
        }
        ControllerRequest::RegisterBroker(broker) => {
            let mut broker = broker.clone();
            broker.epoch = image.brokers.get(&broker.id).map_or(0, |b| b.epoch + 1);
            broker.fenced = false;
            let mut records = vec![MetadataRecord::RegisterBroker(broker.clone())];
            records.extend(elect_offline(image, broker.id));
            (records, ControllerReply::Done)
        }
        ControllerRequest::BrokerHeartbeat { id } => match image.brokers.get(id) {
            Some(broker) if broker.fenced => {
                let mut records = vec![MetadataRecord::BrokerFencing { id: *id, fenced: false }];
                records.extend(elect_offline(image, *id));
                (records, ControllerReply::Done)
            }
            Some(_) => (Vec::new(), ControllerReply::Done),
            None => return Err((code::BROKER_NOT_AVAILABLE, format!("broker {id} is not registered"))),
        },
        ControllerRequest::FenceBroker { id } => {
            if image.brokers.get(id).is_none_or(|b| b.fenced) {
                return Ok((Vec::new(), ControllerReply::Done));
            }
            let mut records = vec![MetadataRecord::BrokerFencing { id: *id, fenced: true }];
            records.extend(leave_partitions(image, *id));
            (records, ControllerReply::Done)
        }
        ControllerRequest::AlterPartition { topic: name, partition, leader, leader_epoch, partition_epoch, isr } => {
            let mut meta = topic(name)?;
            let slot = usize::try_from(*partition)
                .ok()
                .filter(|&p| p < meta.assignments.len())
                .ok_or((code::UNKNOWN_TOPIC_OR_PARTITION, format!("no partition {name}-{partition}")))?;
            let assignment = &mut meta.assignments[slot];
            if assignment.leader != *leader || assignment.leader_epoch != *leader_epoch {
                return Err((
                    code::FENCED_LEADER_EPOCH,
                    format!("leader {leader} in epoch {leader_epoch} is not current"),
                ));
            }
            if assignment.partition_epoch != *partition_epoch {
                return Err((
                    code::INVALID_UPDATE_VERSION,
                    format!("partition epoch {partition_epoch} is not current"),
                ));
            }
            if !isr.contains(leader) || isr.iter().any(|r| !assignment.replicas.contains(r)) {
                return Err((code::INVALID_REQUEST, format!("ISR {isr:?} must hold the leader and only replicas")));
            }
            // A fenced broker (gone, or shutting down) does not join an ISR.
            let live = |id: &i32| image.brokers.get(id).is_none_or(|b| !b.fenced);
            if let Some(fenced) = isr.iter().find(|r| !assignment.isr.contains(r) && !live(r)) {
                return Err((code::INELIGIBLE_REPLICA, format!("broker {fenced} is fenced: it cannot join the ISR")));
            }
            assignment.isr = isr.clone();
            assignment.partition_epoch += 1;
            (vec![MetadataRecord::Topic(meta.clone())], ControllerReply::Done)
        }
        ControllerRequest::ElectLeaders { unclean, partitions } => {
            elect_leaders(image, *unclean, partitions.as_deref())
        }
        ControllerRequest::ProducerIds => {
            let start = image.next_producer_id;
            let end = start + PRODUCER_ID_BLOCK_SIZE;
            (vec![MetadataRecord::ProducerIds { next: end }], ControllerReply::ProducerIds(start..end))
        }
    })
}

/// Partitions changed by broker `gone` being fenced: those it led get a new leader,
/// the first replica of the rest of the ISR that is live (the leader epoch moves on),
/// or none when no live replica is in the ISR (the partition is offline; unclean
/// election is off); those it followed in sync drop it from the ISR.
fn leave_partitions(image: &MetadataImage, gone: i32) -> Vec<MetadataRecord> {
    let live = |id: i32| id != gone && image.brokers.get(&id).is_some_and(|b| !b.fenced);
    let mut records = Vec::new();
    for topic in image.topics.values() {
        let mut meta = topic.clone();
        let mut changed = false;
        for assignment in &mut meta.assignments {
            if !assignment.isr.contains(&gone) && assignment.leader != gone {
                continue;
            }
            let rest: Vec<i32> = assignment.isr.iter().copied().filter(|&r| r != gone).collect();
            if assignment.leader == gone {
                let next = assignment.replicas.iter().copied().find(|&r| rest.contains(&r) && live(r));
                assignment.leader = next.unwrap_or(-1);
                assignment.leader_epoch += 1;
                if next.is_some() {
                    assignment.isr = rest;
                }
            } else if !rest.is_empty() {
                assignment.isr = rest;
            }
            assignment.partition_epoch += 1;
            changed = true;
        }
        if changed {
            records.push(MetadataRecord::Topic(meta));
        }
    }
    records
}

/// Partitions without a leader that broker `back` can lead again: it is in their ISR.
fn elect_offline(image: &MetadataImage, back: i32) -> Vec<MetadataRecord> {
    let mut records = Vec::new();
    for topic in image.topics.values() {
        let mut meta = topic.clone();
        let mut changed = false;
        for assignment in &mut meta.assignments {
            if assignment.leader == -1 && assignment.isr.contains(&back) {
                assignment.leader = back;
                assignment.leader_epoch += 1;
                assignment.partition_epoch += 1;
                changed = true;
            }
        }
        if changed {
            records.push(MetadataRecord::Topic(meta));
        }
    }
    records
}

/// Elects leaders: the preferred replica (the first) where it is live and in sync
/// and does not lead yet, or (`unclean`) the first live replica of a partition without
/// a leader, which then is the whole ISR. Without `partitions`, every partition whose
/// election would change something.
fn elect_leaders(
    image: &MetadataImage,
    unclean: bool,
    partitions: Option<&[(String, i32)]>,
) -> (Vec<MetadataRecord>, ControllerReply) {
    let live = |id: i32| image.brokers.get(&id).is_some_and(|b| !b.fenced);
    let wanted: Vec<(String, i32)> = match partitions {
        Some(list) => list.to_vec(),
        None => image
            .topics
            .values()
            .flat_map(|t| {
                t.assignments.iter().enumerate().filter_map(|(p, a)| {
                    let due = if unclean { a.leader < 0 } else { a.replicas.first() != Some(&a.leader) };
                    due.then(|| (t.name.clone(), p as i32))
                })
            })
            .collect(),
    };
    let mut changed: BTreeMap<String, TopicMeta> = BTreeMap::new();
    let mut elections = Vec::new();
    for (topic, partition) in wanted {
        let outcome =
            |error: i16, message: Option<String>| Election { topic: topic.clone(), partition, error, message };
        let meta = changed.get(&topic).cloned().or_else(|| image.topic(&topic).cloned());
        let Some(mut meta) = meta.filter(|m| partition >= 0 && (partition as usize) < m.assignments.len()) else {
            elections
                .push(outcome(code::UNKNOWN_TOPIC_OR_PARTITION, Some(format!("no partition {topic}-{partition}"))));
            continue;
        };
        let assignment = &mut meta.assignments[partition as usize];
        let chosen = if unclean {
            if assignment.leader >= 0 {
                elections.push(outcome(code::ELECTION_NOT_NEEDED, None));
                continue;
            }
            assignment.replicas.iter().copied().find(|&r| live(r))
        } else {
            let preferred = assignment.replicas[0];
            if assignment.leader == preferred {
                elections.push(outcome(code::ELECTION_NOT_NEEDED, None));
                continue;
            }
            Some(preferred).filter(|&p| live(p) && assignment.isr.contains(&p))
        };
        let Some(leader) = chosen else {
            let error =
                if unclean { code::ELIGIBLE_LEADERS_NOT_AVAILABLE } else { code::PREFERRED_LEADER_NOT_AVAILABLE };
            elections.push(outcome(error, Some(format!("no eligible leader for {topic}-{partition}"))));
            continue;
        };
        assignment.leader = leader;
        if unclean {
            assignment.isr = vec![leader];
        }
        assignment.leader_epoch += 1;
        assignment.partition_epoch += 1;
        elections.push(outcome(code::NONE, None));
        changed.insert(topic.clone(), meta);
    }
    let records = changed.into_values().map(MetadataRecord::Topic).collect();
    (records, ControllerReply::Elections(elections))
}

/// What `decide` needs to know of the node deciding.
#[derive(Debug, Clone, Copy)]
pub struct Local {
    /// The deciding node (the active controller, itself a broker).
    pub node: i32,
    pub shards: usize,
}

/// Places `replication_factor` replicas of each partition in `partitions` on distinct
/// brokers: the registered ones, and the deciding node, which is a live broker. The
/// first replica (the preferred leader) moves one broker on per partition, starting at
/// a broker derived from the topic name, so leaders spread.
///
/// # Errors
/// INVALID_REPLICATION_FACTOR, in Kafka's words.
fn assign(
    image: &MetadataImage,
    local: &Local,
    topic: &str,
    partitions: std::ops::Range<i32>,
    replication_factor: i16,
) -> Result<Vec<Assignment>, Refusal> {
    let factor = if replication_factor == -1 { 1 } else { replication_factor };
    let mut brokers: Vec<i32> = image.brokers.values().filter(|b| !b.fenced).map(|b| b.id).collect();
    if !brokers.contains(&local.node) {
        brokers.push(local.node);
        brokers.sort_unstable();
    }
    if factor < 1 || factor as usize > brokers.len() {
        return Err((
            code::INVALID_REPLICATION_FACTOR,
            format!("Unable to replicate the partition {factor} time(s): The target replication factor of {factor} cannot be reached because only {} broker(s) are registered.", brokers.len()),
        ));
    }
    let start = crc32c::crc32c(topic.as_bytes()) as usize;
    Ok(partitions
        .map(|p| {
            let first = start.wrapping_add(p as usize);
            let replicas: Vec<i32> =
                (0..factor as usize).map(|i| brokers[first.wrapping_add(i) % brokers.len()]).collect();
            Assignment { leader: replicas[0], leader_epoch: 0, partition_epoch: 0, isr: replicas.clone(), replicas }
        })
        .collect())
}

/// Why a topic cannot grow to `count` partitions, in Kafka's words.
///
/// # Errors
/// INVALID_PARTITIONS.
pub fn check_growth(meta: &TopicMeta, count: i32) -> Result<(), Refusal> {
    if count < meta.partitions {
        return Err((
            code::INVALID_PARTITIONS,
            format!("Topic currently has {} partitions, which is higher than the requested {count}.", meta.partitions),
        ));
    }
    if count == meta.partitions {
        return Err((code::INVALID_PARTITIONS, format!("Topic already has {count} partitions.")));
    }
    if count > 100_000 {
        return Err((code::INVALID_PARTITIONS, format!("Number of partitions {count} exceeds the limit of 100000.")));
    }
    Ok(())
}

/// The controller on shard 0: decides requests one at a time and proposes their
/// records to the metadata log (`quorum::run` drives it). On a node that does not
/// lead the quorum, requests are forwarded to the node that does.
pub struct Controller {
    quorum_id: u64,
    /// Held for a whole request: decide, propose and apply never interleave, so each
    /// request is decided against the image its predecessors left.
    requests: async_lock::Mutex<()>,
    inputs: Rc<LocalSender<Input>>,
    /// The other voters, in a cluster.
    peers: Option<Peers>,
    /// Proposals waiting to be applied on every shard, answered with their index.
    pending: RefCell<HashMap<u64, oneshot::Sender<Result<u64, Refusal>>>>,
    /// Requests forwarded to the active controller.
    forwards: RefCell<HashMap<u64, oneshot::Sender<Forwarded>>>,
    next_id: Cell<u64>,
    leader: Cell<bool>,
    leader_id: Cell<Option<u64>>,
    /// The log index this node's image holds.
    applied: Cell<u64>,
    /// Set when the metadata log cannot be persisted: every request gets it.
    failed: RefCell<Option<Refusal>>,
    changed: event_listener::Event,
    /// As the active controller: when each broker last heartbeat, since when this
    /// node leads, the brokers being fenced, and `broker.session.timeout.ms`.
    heartbeats: RefCell<HashMap<i32, Instant>>,
    leading_since: Cell<Instant>,
    fencing: RefCell<std::collections::HashSet<i32>>,
    session_timeout: Duration,
    /// This node is shutting down: it no longer heartbeats.
    shutting_down: Cell<bool>,
    /// Kafka's `auto.leader.rebalance.enable` with `leader.imbalance.check.interval.seconds`
    /// (`None`: off), when the active controller last looked, and whether an election
    /// it asked for is running.
    rebalance_every: Option<Duration>,
    last_rebalance: Cell<Instant>,
    rebalancing: Cell<bool>,
}

/// Kafka's `leader.imbalance.per.broker.percentage` default.
const LEADER_IMBALANCE_PER_BROKER_PERCENTAGE: usize = 10;

/// How long a request waits for the quorum to have a leader.
const LEADERSHIP_WAIT: Duration = Duration::from_secs(10);
/// How long a proposal may take to be applied.
const PROPOSAL_WAIT: Duration = Duration::from_secs(30);

impl Controller {
    /// The controller of node `node` among `voters` (node ids with their controller
    /// addresses; none for a single node), and the receiver `quorum::run` takes its
    /// inputs from. Starts the connections to the other voters.
    pub fn new(
        node: i32,
        cluster_id: &str,
        voters: &[(i32, SocketAddr)],
        session_timeout: Duration,
        rebalance_every: Option<Duration>,
    ) -> (Controller, LocalReceiver<Input>) {
        let (inputs, receiver) = local_channel::new_bounded(64);
        let inputs = Rc::new(inputs);
        let me = quorum_id(node);
        let peers = (voters.len() > 1).then(|| {
            let voters: Vec<_> = voters.iter().map(|&(id, address)| (quorum_id(id), address)).collect();
            Peers::start(me, cluster_id, &voters, &inputs)
        });
        let controller = Controller {
            quorum_id: me,
            requests: async_lock::Mutex::new(()),
            inputs,
            peers,
            pending: RefCell::new(HashMap::new()),
            forwards: RefCell::new(HashMap::new()),
            next_id: Cell::new(0),
            leader: Cell::new(false),
            leader_id: Cell::new(None),
            applied: Cell::new(0),
            failed: RefCell::new(None),
            changed: event_listener::Event::new(),
            heartbeats: RefCell::new(HashMap::new()),
            leading_since: Cell::new(Instant::now()),
            fencing: RefCell::new(std::collections::HashSet::new()),
            session_timeout,
            shutting_down: Cell::new(false),
            rebalance_every,
            last_rebalance: Cell::new(Instant::now()),
            rebalancing: Cell::new(false),
        };
        (controller, receiver)
    }

    pub fn quorum_id(&self) -> u64 {
        self.quorum_id
    }

    pub fn peers(&self) -> Option<&Peers> {
        self.peers.as_ref()
    }

    /// Whether this node leads the metadata quorum (is the active controller).
    pub fn is_leader(&self) -> bool {
        self.leader.get()
    }

    /// Stops this node's heartbeats (a controlled shutdown).
    pub fn begin_shutdown(&self) {
        self.shutting_down.set(true);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.get()
    }

    /// Hands the quorum's leadership to another voter if this node holds it, and waits
    /// (up to two seconds) until it has gone, so the metadata log goes on without an
    /// election when this node stops.
    pub async fn hand_over(&self) {
        if !self.leader.get() || self.peers.is_none() {
            return;
        }
        let _ = self.inputs.send(Input::TransferLeader).await;
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.leader.get() && Instant::now() < deadline {
            let listener = self.changed.listen();
            futures_lite::future::or(listener, glommio::timer::sleep(Duration::from_millis(50))).await;
        }
    }

    /// The metadata log index this node's shards hold.
    pub fn applied_index(&self) -> u64 {
        self.applied.get()
    }

    /// The active controller's node id, if the quorum has one.
    pub fn active(&self) -> Option<i32> {
        self.leader_id.get().map(|id| (id - 1) as i32)
    }

    /// Hands `input` to the quorum loop (waits while its queue is full).
    pub async fn input(&self, input: Input) {
        let _ = self.inputs.send(input).await;
    }

    fn next_id(&self) -> u64 {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        id
    }

    /// Runs one request: here when this node leads the quorum, forwarded to the
    /// active controller otherwise. Answered once this node's shards hold the image
    /// with its records.
    ///
    /// # Errors
    /// The refusal from `decide`; NOT_CONTROLLER when the quorum has no leader in
    /// time or the leader changed before the records committed; KAFKA_STORAGE_ERROR
    /// when the metadata log cannot be persisted; REQUEST_TIMED_OUT when the quorum
    /// does not commit in time.
    pub async fn handle(&self, shard: &Rc<Shard>, request: ControllerRequest) -> Result<ControllerReply, Refusal> {
        let deadline = Instant::now() + LEADERSHIP_WAIT;
        loop {
            if let Some(failure) = self.failed.borrow().clone() {
                return Err(failure);
            }
            match self.leader_id.get() {
                Some(_) if self.leader.get() => return self.handle_here(shard, request).await.map(|(reply, _)| reply),
                Some(leader) if leader != self.quorum_id && self.peers.is_some() => {
                    return self.forward(leader, request).await;
                }
                _ => self.wait_for_change(deadline).await?,
            }
        }
    }

    /// Decides `request` here, as the active controller, proposes its records and
    /// waits until they are applied on every shard of this node. Returns the reply and
    /// the log index that holds the records.
    ///
    /// # Errors
    /// As `handle`.
    pub async fn handle_here(&self, shard: &Rc<Shard>, request: ControllerRequest) -> Forwarded {
        // A heartbeat of a live broker changes nothing in the log: answered at once.
        if let ControllerRequest::BrokerHeartbeat { id } | ControllerRequest::RegisterBroker(BrokerMeta { id, .. }) =
            &request
        {
            self.heartbeats.borrow_mut().insert(*id, Instant::now());
            let live = shard.image().brokers.get(id).is_some_and(|b| !b.fenced);
            if live && matches!(request, ControllerRequest::BrokerHeartbeat { .. }) && self.leader.get() {
                return Ok((ControllerReply::Done, self.applied.get()));
            }
        }
        let _one = self.requests.lock().await;
        if !self.leader.get() {
            return Err(super::quorum::not_controller(self.leader_id.get()));
        }
        let current = shard.image();
        let local = Local { node: shard.settings.node_id, shards: shard.settings.shards };
        let (records, reply) = decide(&current, &request, &local)?;
        if records.is_empty() {
            return Ok((reply, self.applied.get()));
        }
        let id = self.next_id();
        let data = serde_json::to_vec(&Proposal { node: self.quorum_id, id, records })
            .expect("metadata records always serialise");
        let (done, applied) = oneshot::channel();
        self.pending.borrow_mut().insert(id, done);
        if self.inputs.send(Input::Propose { id, data }).await.is_err() {
            self.pending.borrow_mut().remove(&id);
            return Err((code::NOT_CONTROLLER, "the metadata controller stopped".into()));
        }
        let outcome = within(PROPOSAL_WAIT, applied).await;
        self.pending.borrow_mut().remove(&id);
        Ok((reply, outcome?))
    }

    /// Sends `request` to the active controller `leader` and waits for its answer,
    /// then until this node applied the records.
    async fn forward(&self, leader: u64, request: ControllerRequest) -> Result<ControllerReply, Refusal> {
        let peers = self.peers.as_ref().expect("forwarding needs peers");
        let id = self.next_id();
        let (done, answer) = oneshot::channel();
        self.forwards.borrow_mut().insert(id, done);
        if !peers.forward(leader, id, &request) {
            self.forwards.borrow_mut().remove(&id);
            return Err(super::quorum::not_controller(Some(leader)));
        }
        let outcome = within(PROPOSAL_WAIT, answer).await;
        self.forwards.borrow_mut().remove(&id);
        let (reply, index) = outcome?;
        let deadline = Instant::now() + PROPOSAL_WAIT;
        while self.applied.get() < index {
            self.wait_for_change(deadline).await?;
        }
        Ok(reply)
    }

    /// Waits until the leadership or the applied index changes, or `deadline`.
    async fn wait_for_change(&self, deadline: Instant) -> Result<(), Refusal> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(super::quorum::not_controller(self.leader_id.get()));
        }
        let listener = self.changed.listen();
        futures_lite::future::or(listener, glommio::timer::sleep(left.min(Duration::from_millis(100)))).await;
        Ok(())
    }

    /// Completes proposal `id` with the index it was applied at.
    pub fn complete(&self, id: u64, result: Result<u64, Refusal>) {
        if let Some(done) = self.pending.borrow_mut().remove(&id) {
            let _ = done.send(result);
        }
    }

    /// Completes forwarded request `id` with the active controller's answer.
    pub fn forward_done(&self, id: u64, answer: Forwarded) {
        if let Some(done) = self.forwards.borrow_mut().remove(&id) {
            let _ = done.send(answer);
        }
    }

    /// Records the log index this node's shards now hold.
    pub fn set_applied(&self, index: u64) {
        self.applied.set(index);
        self.changed.notify(usize::MAX);
    }

    /// Records who leads the quorum. Proposals in flight when this node loses
    /// leadership, and forwards in flight when the leader changes, are answered
    /// NOT_CONTROLLER (raft drops them; the client retries).
    pub fn set_leader(&self, leader: bool, known: Option<u64>) {
        let was = (self.leader.replace(leader), self.leader_id.replace(known));
        if was == (leader, known) {
            return;
        }
        if leader && !was.0 {
            // Every broker gets a full session from here before it can be fenced.
            self.heartbeats.borrow_mut().clear();
            self.leading_since.set(Instant::now());
        }
        if was.0 && !leader {
            let pending: Vec<_> = self.pending.borrow_mut().drain().collect();
            for (_, done) in pending {
                let _ = done.send(Err(super::quorum::not_controller(known)));
            }
        }
        if was.1 != known {
            let forwards: Vec<_> = self.forwards.borrow_mut().drain().collect();
            for (_, done) in forwards {
                let _ = done.send(Err(super::quorum::not_controller(known)));
            }
        }
        self.changed.notify(usize::MAX);
    }

    /// As the active controller, fences the brokers whose last heartbeat (or this
    /// node's taking office, for one not heard from since) is older than the session
    /// timeout: their leaderships move to in-sync replicas. Called every tick.
    pub fn check_sessions(&self, shard: &Rc<Shard>) {
        if !self.leader.get() {
            return;
        }
        let now = Instant::now();
        let image = shard.image();
        for broker in image.brokers.values().filter(|b| !b.fenced && b.id != shard.settings.node_id) {
            let last = self.heartbeats.borrow().get(&broker.id).copied().unwrap_or(self.leading_since.get());
            if now.duration_since(last) < self.session_timeout || !self.fencing.borrow_mut().insert(broker.id) {
                continue;
            }
            tracing::warn!(target: "skein::net", broker = broker.id, "broker session expired: fencing it");
            let (shard, id) = (shard.clone(), broker.id);
            glommio::spawn_local(async move {
                let Some(controller) = shard.controller() else { return };
                if let Err((code, message)) =
                    controller.handle_here(&shard, ControllerRequest::FenceBroker { id }).await
                {
                    tracing::debug!(target: "skein::net", broker = id, code, message, "fencing deferred");
                }
                controller.fencing.borrow_mut().remove(&id);
            })
            .detach();
        }
    }

    /// As the active controller, every `leader.imbalance.check.interval.seconds`: when
    /// more than `leader.imbalance.per.broker.percentage` (10%) of the partitions that
    /// prefer some broker are led by another, elects the preferred replicas of those
    /// (where live and in sync), as Kafka's auto leader rebalance does. Called every
    /// tick.
    pub fn check_balance(&self, shard: &Rc<Shard>) {
        let Some(every) = self.rebalance_every else { return };
        if !self.leader.get() || self.rebalancing.get() || self.last_rebalance.get().elapsed() < every {
            return;
        }
        self.last_rebalance.set(Instant::now());
        let image = shard.image();
        let live = |id: i32| image.is_live(id, shard.settings.node_id);
        // Per preferred broker: (partitions preferring it, those it does not lead).
        let mut preferring: BTreeMap<i32, (usize, Vec<(String, i32)>)> = BTreeMap::new();
        for topic in image.topics.values() {
            for (p, assignment) in topic.assignments.iter().enumerate() {
                let Some(&preferred) = assignment.replicas.first() else { continue };
                let entry = preferring.entry(preferred).or_default();
                entry.0 += 1;
                if assignment.leader != preferred && live(preferred) && assignment.isr.contains(&preferred) {
                    entry.1.push((topic.name.clone(), p as i32));
                }
            }
        }
        let partitions: Vec<(String, i32)> = preferring
            .into_values()
            .filter(|(total, misled)| misled.len() * 100 > total * LEADER_IMBALANCE_PER_BROKER_PERCENTAGE)
            .flat_map(|(_, misled)| misled)
            .collect();
        if partitions.is_empty() {
            return;
        }
        tracing::info!(target: "skein::net", partitions = partitions.len(), "leaders out of balance: electing the preferred replicas");
        self.rebalancing.set(true);
        let shard = shard.clone();
        glommio::spawn_local(async move {
            let Some(controller) = shard.controller() else { return };
            let request = ControllerRequest::ElectLeaders { unclean: false, partitions: Some(partitions) };
            if let Err((code, message)) = controller.handle_here(&shard, request).await {
                tracing::debug!(target: "skein::net", code, message, "leader rebalance deferred");
            }
            controller.rebalancing.set(false);
        })
        .detach();
    }

    /// The metadata log failed: every pending and later request gets `failure`.
    pub fn fail(&self, failure: Refusal) {
        *self.failed.borrow_mut() = Some(failure.clone());
        let pending: Vec<_> = self.pending.borrow_mut().drain().collect();
        for (_, done) in pending {
            let _ = done.send(Err(failure.clone()));
        }
        self.leader.set(false);
        self.changed.notify(usize::MAX);
    }
}

/// Waits for `answer` at most `limit`: REQUEST_TIMED_OUT past it, NOT_CONTROLLER when
/// the answer can no longer come.
async fn within<T>(limit: Duration, answer: oneshot::Receiver<Result<T, Refusal>>) -> Result<T, Refusal> {
    let timeout = async {
        glommio::timer::sleep(limit).await;
        Ok(Err((code::REQUEST_TIMED_OUT, "the metadata quorum did not commit in time".to_string())))
    };
    match futures_lite::future::or(answer, timeout).await {
        Ok(result) => result,
        Err(_) => Err((code::NOT_CONTROLLER, "the metadata controller stopped".into())),
    }
}

/// `TopicPartition` as (topic, partition) on the wire between controllers.
mod partition_serde {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use skein_engine::TopicPartition;

    pub fn serialize<S: Serializer>(partition: &TopicPartition, out: S) -> Result<S::Ok, S::Error> {
        (&partition.topic, partition.partition).serialize(out)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<TopicPartition, D::Error> {
        let (topic, partition) = <(String, i32)>::deserialize(input)?;
        Ok(TopicPartition::new(topic, partition))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(image: &mut MetadataImage, request: ControllerRequest) -> Result<ControllerReply, Refusal> {
        let (records, reply) = decide(image, &request, &Local { node: 1, shards: 2 })?;
        image.apply(&records);
        Ok(reply)
    }

    // Each request as Kafka's controller answers it, and the image it leaves.
    #[test]
    fn requests_against_the_image() {
        let mut image = MetadataImage { next_producer_id: 1000, ..Default::default() };
        let create = |name: &str, partitions| ControllerRequest::CreateTopic {
            name: name.into(),
            partitions,
            replication_factor: -1,
            configs: BTreeMap::new(),
        };
        let Ok(ControllerReply::Topic(meta)) = applied(&mut image, create("a.b", 3)) else { panic!() };
        assert_eq!((meta.partitions, meta.shards.len()), (3, 3));
        assert_eq!(applied(&mut image, create("a.b", 1)).unwrap_err().0, code::TOPIC_ALREADY_EXISTS);
        assert_eq!(applied(&mut image, create("a_b", 1)).unwrap_err().0, code::INVALID_TOPIC_EXCEPTION);
        let grow = |count| ControllerRequest::CreatePartitions { name: "a.b".into(), count };
        assert_eq!(applied(&mut image, grow(3)).unwrap_err().0, code::INVALID_PARTITIONS);
        assert_eq!(applied(&mut image, grow(2)).unwrap_err().0, code::INVALID_PARTITIONS);
        let Ok(ControllerReply::Grown { old: 3, meta }) = applied(&mut image, grow(5)) else { panic!() };
        assert_eq!(meta.shards.len(), 5);
        let moved = ControllerRequest::MovePartition { partition: TopicPartition::new("a.b", 4), target: 1 };
        applied(&mut image, moved).unwrap();
        assert_eq!(image.topic("a.b").unwrap().shards[4], 1);
        let missing = ControllerRequest::MovePartition { partition: TopicPartition::new("a.b", 9), target: 1 };
        assert_eq!(applied(&mut image, missing).unwrap_err().0, code::UNKNOWN_TOPIC_OR_PARTITION);
        // Producer ids come in disjoint blocks.
        let Ok(ControllerReply::ProducerIds(first)) = applied(&mut image, ControllerRequest::ProducerIds) else {
            panic!()
        };
        let Ok(ControllerReply::ProducerIds(second)) = applied(&mut image, ControllerRequest::ProducerIds) else {
            panic!()
        };
        assert_eq!((first.start, first.end, second.start), (1000, 2000, 2000));
        assert_eq!(image.next_producer_id, 3000);
        let delete = ControllerRequest::DeleteTopic { name: "a.b".into() };
        applied(&mut image, delete.clone()).unwrap();
        assert!(image.topic("a.b").is_none());
        assert_eq!(applied(&mut image, delete).unwrap_err().0, code::UNKNOWN_TOPIC_OR_PARTITION);
    }

    // Registered brokers share the partitions' leadership evenly; a registration bumps
    // the broker's epoch; a replication factor past the brokers is refused.
    #[test]
    fn partitions_spread_over_the_brokers() {
        let mut image = MetadataImage::default();
        let register = |id: i32| {
            ControllerRequest::RegisterBroker(BrokerMeta {
                id,
                epoch: 0,
                host: "127.0.0.1".into(),
                port: 9000 + id as u16,
                rack: None,
                fenced: false,
            })
        };
        for id in [2, 3] {
            applied(&mut image, register(id)).unwrap();
        }
        applied(&mut image, register(2)).unwrap();
        assert_eq!(image.brokers[&2].epoch, 1);
        let create = |replication_factor| ControllerRequest::CreateTopic {
            name: "spread".into(),
            partitions: 6,
            replication_factor,
            configs: BTreeMap::new(),
        };
        assert_eq!(applied(&mut image, create(4)).unwrap_err().0, code::INVALID_REPLICATION_FACTOR);
        let Ok(ControllerReply::Topic(meta)) = applied(
            &mut image,
            ControllerRequest::CreateTopic {
                name: "replicated".into(),
                partitions: 3,
                replication_factor: 3,
                configs: BTreeMap::new(),
            },
        ) else {
            panic!()
        };
        for p in 0..3 {
            let a = meta.assignment(p, 9);
            let mut replicas = a.replicas.clone();
            replicas.sort_unstable();
            assert_eq!((replicas, a.isr.len(), a.leader), (vec![1, 2, 3], 3, a.replicas[0]));
        }
        // An ISR change from the current leader and partition epoch is taken once.
        let first = meta.assignment(0, 9);
        let shrink = ControllerRequest::AlterPartition {
            topic: "replicated".into(),
            partition: 0,
            leader: first.leader,
            leader_epoch: 0,
            partition_epoch: 0,
            isr: vec![first.leader],
        };
        applied(&mut image, shrink.clone()).unwrap();
        let after = image.topic("replicated").unwrap().assignment(0, 9);
        assert_eq!((after.isr.clone(), after.partition_epoch), (vec![first.leader], 1));
        assert_eq!(applied(&mut image, shrink).unwrap_err().0, code::INVALID_UPDATE_VERSION);
        let Ok(ControllerReply::Topic(meta)) = applied(&mut image, create(1)) else { panic!() };
        let mut led = BTreeMap::new();
        for p in 0..6 {
            let assignment = meta.assignment(p, 9);
            assert_eq!((assignment.replicas.len(), assignment.isr.clone()), (1, vec![assignment.leader]));
            *led.entry(assignment.leader).or_insert(0) += 1;
        }
        assert_eq!(led, BTreeMap::from([(1, 2), (2, 2), (3, 2)]), "the deciding node 1 counts as a broker");
        // Fencing a leader moves its leadership to the next in-sync replica in a new
        // epoch; with no live replica in the ISR the partition goes offline, and the
        // first of its ISR to come back leads it again.
        applied(&mut image, register(1)).unwrap();
        let before = image.topic("replicated").unwrap().assignment(1, 9);
        let gone = before.leader;
        applied(&mut image, ControllerRequest::FenceBroker { id: gone }).unwrap();
        let after = image.topic("replicated").unwrap().assignment(1, 9);
        assert_ne!(after.leader, gone);
        assert_eq!((after.leader_epoch, after.isr.contains(&gone)), (before.leader_epoch + 1, false));
        assert!(image.brokers[&gone].fenced);
        for id in [1, 2, 3].into_iter().filter(|&id| id != gone) {
            applied(&mut image, ControllerRequest::FenceBroker { id }).unwrap();
        }
        let offline = image.topic("replicated").unwrap().assignment(1, 9);
        assert_eq!((offline.leader, offline.isr.len()), (-1, 1));
        let last = offline.isr[0];
        applied(&mut image, ControllerRequest::BrokerHeartbeat { id: last }).unwrap();
        let back = image.topic("replicated").unwrap().assignment(1, 9);
        assert_eq!((back.leader, back.leader_epoch), (last, offline.leader_epoch + 1));
        assert!(!image.brokers[&last].fenced);
    }
}
