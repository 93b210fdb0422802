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
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_channel::oneshot;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};

pub use super::decide::{
    check_growth, decide, decide_all, ControllerReply, ControllerRequest, Election, Local, QuorumStatus, VoterStatus,
    PRODUCER_ID_BLOCK_SIZE,
};
use super::host::Host;
use super::log::{not_controller, quorum_id, Input, Proposal};
use super::transport::Link;
use super::transport::{Forwarded, Peers};
use super::{BrokerMeta, MetadataRecord, Refusal};
use crate::errors::code;
use skein_replication::quorum::Change;

/// The controller on shard 0: decides requests one at a time and proposes their
/// records to the metadata log (`quorum::run` drives it). On a node that does not
/// lead the quorum, requests are forwarded to the node that does; on a broker-only
/// node (an observer of the log), to the voter it follows, which forwards them on.
pub struct Controller {
    quorum_id: u64,
    /// Held for a whole request: decide, propose and apply never interleave, so each
    /// request is decided against the image its predecessors left.
    requests: async_lock::Mutex<()>,
    inputs: Rc<LocalSender<Input>>,
    /// The other voters, on a voter of a cluster.
    peers: Option<Peers>,
    /// The connection to the voter this broker-only node follows.
    observer: Option<Link>,
    /// As the active controller: the observers fetching from it, by node id, as
    /// DescribeQuorum lists them (the index each holds, when it last fetched and last
    /// held the whole log, in ms).
    observers: RefCell<BTreeMap<i32, VoterStatus>>,
    /// Proposals waiting to be applied on every shard, answered with their index.
    pending: RefCell<HashMap<u64, oneshot::Sender<Result<u64, Refusal>>>>,
    /// ISR changes waiting for the request lock: whoever takes it next decides them
    /// all and proposes their records at once, as Kafka's AlterPartition carries a
    /// broker's pending changes in one request. A node that restarts behind 10,000
    /// partitions otherwise has its ISR rejoins proposed and applied one at a time.
    alters: RefCell<Vec<(ControllerRequest, oneshot::Sender<Forwarded>)>>,
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
    /// Whether this controller is in the quorum's configuration, and whether it was
    /// and has been removed (RemoveRaftVoter): its requests then fail at once, as the
    /// quorum no longer answers it.
    member: Cell<bool>,
    removed: Cell<bool>,
    /// The voters of the configuration this node holds (node ids).
    voters: RefCell<Vec<i32>>,
    /// Kafka's `auto.leader.rebalance.enable` with `leader.imbalance.check.interval.seconds`
    /// (`None`: off), when the active controller last looked, and whether an election
    /// it asked for is running.
    rebalance_every: Option<Duration>,
    last_rebalance: Cell<Instant>,
    rebalancing: Cell<bool>,
    /// When the active controller last removed expired delegation tokens, and
    /// whether a removal is running.
    last_token_sweep: Cell<Instant>,
    sweeping_tokens: Cell<bool>,
    /// The quorum's state as the metadata loop last saw it.
    quorum_status: RefCell<QuorumStatus>,
}

/// Kafka's `leader.imbalance.per.broker.percentage` default.
const LEADER_IMBALANCE_PER_BROKER_PERCENTAGE: usize = 10;

/// How long a request waits for the quorum to have a leader.
const LEADERSHIP_WAIT: Duration = Duration::from_secs(10);
/// How long a proposal may take to be applied.
const PROPOSAL_WAIT: Duration = Duration::from_secs(30);
/// A voter heard from this recently (and since this leader took office) is running:
/// RemoveRaftVoter keeps it as an observer. Voters answer heartbeats every 200 ms.
const OBSERVER_GRACE: Duration = Duration::from_secs(1);
/// How often an added controller's progress is looked at (the quorum loop refreshes
/// it every tick).
const CATCH_UP_POLL: Duration = Duration::from_millis(100);
/// How long an observer's fetch waits for new entries before it is answered empty.
const FEED_WAIT: Duration = Duration::from_millis(500);

impl Controller {
    /// The controller of node `node` among `voters` (node ids with their controller
    /// addresses; none for a single node), and the receiver `quorum::run` takes its
    /// inputs from. Starts the connections to the other voters. An `observer` (a
    /// broker-only node) has no quorum: `observer::run` follows the log for it.
    pub fn new(
        node: i32,
        cluster_id: &str,
        voters: &[(i32, SocketAddr)],
        observer: bool,
        session_timeout: Duration,
        rebalance_every: Option<Duration>,
        security: &Arc<crate::security::Security>,
    ) -> (Controller, LocalReceiver<Input>) {
        let (inputs, receiver) = local_channel::new_bounded(64);
        let inputs = Rc::new(inputs);
        let me = quorum_id(node);
        let peers = (!voters.is_empty() && !observer).then(|| {
            let voters: Vec<_> = voters.iter().map(|&(id, address)| (quorum_id(id), address)).collect();
            Peers::start(me, cluster_id, &voters, &inputs, security)
        });
        let controller = Controller {
            quorum_id: me,
            requests: async_lock::Mutex::new(()),
            inputs,
            peers,
            observer: observer.then(Link::default),
            observers: RefCell::new(BTreeMap::new()),
            pending: RefCell::new(HashMap::new()),
            alters: RefCell::new(Vec::new()),
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
            member: Cell::new(false),
            voters: RefCell::new(Vec::new()),
            removed: Cell::new(false),
            rebalance_every,
            last_rebalance: Cell::new(Instant::now()),
            rebalancing: Cell::new(false),
            last_token_sweep: Cell::new(Instant::now()),
            sweeping_tokens: Cell::new(false),
            quorum_status: RefCell::new(QuorumStatus::default()),
        };
        (controller, receiver)
    }

    pub fn quorum_id(&self) -> u64 {
        self.quorum_id
    }

    pub fn peers(&self) -> Option<&Peers> {
        self.peers.as_ref()
    }

    /// The connection a broker-only node follows the log over.
    pub fn observer_link(&self) -> Option<&Link> {
        self.observer.as_ref()
    }

    /// Whether this node is part of a cluster (a voter among others, or an observer).
    pub fn clustered(&self) -> bool {
        self.peers.is_some() || self.observer.is_some()
    }

    /// Whether this node leads the metadata quorum (is the active controller).
    pub fn is_leader(&self) -> bool {
        self.leader.get()
    }

    /// Follows the quorum's configuration, `voters` and `learners` (quorum ids; the
    /// quorum loop calls it after each change): a controller that leaves it was
    /// removed.
    pub fn set_members(&self, voters: &[u64], learners: &[u64]) {
        let member = voters.contains(&self.quorum_id) || learners.contains(&self.quorum_id);
        *self.voters.borrow_mut() = voters.iter().map(|&v| (v - 1) as i32).collect();
        if self.member.get() && !member {
            tracing::warn!(target: "skein::net", node = self.quorum_id - 1, "this controller was removed from the quorum; restart it with --roles broker to keep its broker");
            self.removed.set(true);
        }
        if member {
            self.removed.set(false);
        }
        self.member.set(member);
    }

    /// The quorum's voters (node ids) in the configuration this node holds.
    pub fn voters(&self) -> Vec<i32> {
        self.voters.borrow().clone()
    }

    /// Whether this controller was removed from the quorum while it ran: the quorum
    /// no longer answers its requests.
    pub fn is_removed(&self) -> bool {
        self.removed.get()
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
    pub async fn handle<H: Host>(&self, host: &H, request: ControllerRequest) -> Result<ControllerReply, Refusal> {
        self.handle_indexed(host, request).await.map(|(reply, _)| reply)
    }

    /// As `handle`, with the log index that holds the request's records (for an
    /// observer that forwarded it here, to wait until it applied that far).
    ///
    /// # Errors
    /// As `handle`.
    pub async fn handle_indexed<H: Host>(&self, host: &H, request: ControllerRequest) -> Forwarded {
        let deadline = Instant::now() + LEADERSHIP_WAIT;
        loop {
            if let Some(failure) = self.failed.borrow().clone() {
                return Err(failure);
            }
            if self.removed.get() {
                let node = self.quorum_id - 1;
                return Err((code::NOT_CONTROLLER, format!("controller {node} was removed from the quorum")));
            }
            let answer = match self.leader_id.get() {
                Some(_) if self.leader.get() => self.handle_here(host, request.clone()).await,
                Some(leader) if leader != self.quorum_id && self.clustered() => {
                    self.forward(leader, request.clone()).await
                }
                _ => {
                    self.wait_for_change(deadline).await?;
                    continue;
                }
            };
            // Removing the active controller moves its leadership first: the request
            // then goes to the next leader.
            let membership = matches!(request, ControllerRequest::RemoveVoter { .. });
            match answer {
                Err((code::NOT_CONTROLLER, _)) if membership && Instant::now() < deadline => {
                    self.wait_for_change(deadline).await?;
                }
                answer => return answer,
            }
        }
    }

    /// Decides `request` here, as the active controller, proposes its records and
    /// waits until they are applied on every shard of this node. Returns the reply and
    /// the log index that holds the records.
    ///
    /// # Errors
    /// As `handle`.
    pub async fn handle_here<H: Host>(&self, host: &H, request: ControllerRequest) -> Forwarded {
        // A heartbeat of a live broker changes nothing in the log: answered at once.
        if let ControllerRequest::BrokerHeartbeat { id, .. }
        | ControllerRequest::RegisterBroker(BrokerMeta { id, .. }) = &request
        {
            self.heartbeats.borrow_mut().insert(*id, Instant::now());
            let live = host.image().brokers.get(id).is_some_and(|b| !b.fenced);
            let healthy = matches!(&request, ControllerRequest::BrokerHeartbeat { log_dir_offline: false, offline_replicas, .. }
                if offline_replicas.is_empty());
            if live && healthy && self.leader.get() {
                return Ok((ControllerReply::Done, self.applied.get()));
            }
        }
        if request == ControllerRequest::DescribeQuorum {
            if !self.leader.get() {
                return Err(not_controller(self.leader_id.get()));
            }
            let mut status = self.quorum_status.borrow().clone();
            status.observers.extend(self.observers.borrow().values().cloned());
            return Ok((ControllerReply::Quorum(status), self.applied.get()));
        }
        if matches!(request, ControllerRequest::AlterPartition { .. }) {
            let (done, answer) = oneshot::channel();
            let first = {
                let mut alters = self.alters.borrow_mut();
                alters.push((request, done));
                alters.len() == 1
            };
            // The batch runs in a task of its own: a requester that stops waiting
            // must not cut the others' answers short (a committed change must never
            // be taken for a failed one).
            if first {
                let host = host.clone();
                glommio::spawn_local(async move {
                    let Some(controller) = host.controller() else { return };
                    let _one = controller.requests.lock().await;
                    let batch = std::mem::take(&mut *controller.alters.borrow_mut());
                    controller.alter_all(&host, batch).await;
                })
                .detach();
            }
            return answer.await.unwrap_or_else(|_| Err(not_controller(self.leader_id.get())));
        }
        let _one = self.requests.lock().await;
        if !self.leader.get() {
            return Err(not_controller(self.leader_id.get()));
        }
        if matches!(
            request,
            ControllerRequest::AddVoter { .. }
                | ControllerRequest::RemoveVoter { .. }
                | ControllerRequest::UpdateVoter { .. }
                | ControllerRequest::UnregisterController { .. }
        ) {
            return self.change_voters(host, request).await;
        }
        let current = host.image();
        let local = host.local();
        let (records, reply) = decide(&current, &request, &local)?;
        if records.is_empty() {
            return Ok((reply, self.applied.get()));
        }
        let index = self.propose(records).await?;
        Ok((reply, index))
    }

    /// Adds or removes a voter (KIP-853), as the active controller, with the request
    /// lock held. An added controller joins as a learner, and becomes a voter once
    /// it holds the log as far as the learner's own entry (within the request's
    /// timeout; else it is removed again): a voter that cannot keep up never weakens
    /// the quorum. A removed voter that runs stays a learner (an observer), so that
    /// its broker carries on; one that is down, or an observer, leaves altogether. Kafka's
    /// errors: UNSUPPORTED_VERSION while `kraft.version` is 0, DUPLICATE_VOTER,
    /// VOTER_NOT_FOUND, REQUEST_TIMED_OUT.
    async fn change_voters<H: Host>(&self, host: &H, request: ControllerRequest) -> Forwarded {
        let image = host.image();
        if crate::features::level(&image, crate::features::KRAFT_VERSION) < 1 {
            return Err((
                code::UNSUPPORTED_VERSION,
                "The cluster doesn't support changing its voters because the kraft.version feature is 0".into(),
            ));
        }
        let status = self.quorum_status.borrow().clone();
        let is_voter = |node: i32| status.voters.iter().any(|v| v.node == node);
        let is_learner = |node: i32| status.observers.iter().any(|v| v.node == node);
        match request {
            ControllerRequest::AddVoter { member, timeout_ms } => {
                let node = member.node;
                if is_voter(node) {
                    return Err((
                        code::DUPLICATE_VOTER,
                        format!("The voter id for ReplicaKey(id={node}) is already part of the set of voters."),
                    ));
                }
                ip_endpoint(&member)?;
                let id = quorum_id(node);
                let learner = MetadataRecord::QuorumMember(super::QuorumMember { voter: false, ..member.clone() });
                let mut index = self.applied.get();
                if !is_learner(node)
                    || image.quorum.get(&node) != Some(&super::QuorumMember { voter: false, ..member.clone() })
                {
                    index = self.propose_as(vec![learner], Some(Change::AddLearner(id))).await?;
                }
                // The learner holds the log up to its own entry: it can vote.
                let deadline = Instant::now() + Duration::from_millis(timeout_ms.clamp(1_000, 120_000) as u64);
                loop {
                    let caught_up = self
                        .quorum_status
                        .borrow()
                        .observers
                        .iter()
                        .any(|o| o.node == node && o.log_end_offset >= index as i64);
                    if caught_up {
                        break;
                    }
                    if Instant::now() >= deadline {
                        // A failed add leaves the configuration as it found it, as
                        // Kafka's does: the learner goes again.
                        let removal = vec![MetadataRecord::RemoveQuorumMember { node }];
                        if let Err(e) = self.propose_as(removal, Some(Change::Remove(id))).await {
                            tracing::warn!(target: "skein::net", node, error = ?e, "cannot take back a learner that did not catch up");
                        }
                        let late = format!("controller {node} did not catch up with the metadata log in time");
                        return Err((code::REQUEST_TIMED_OUT, late));
                    }
                    glommio::timer::sleep(CATCH_UP_POLL).await;
                    if !self.leader.get() {
                        return Err(not_controller(self.leader_id.get()));
                    }
                }
                let voter = MetadataRecord::QuorumMember(super::QuorumMember { voter: true, ..member });
                let index = self.propose_as(vec![voter], Some(Change::AddVoter(id))).await?;
                Ok((ControllerReply::Done, index))
            }
            ControllerRequest::RemoveVoter { node, directory_id } => {
                if !is_voter(node) && !is_learner(node) {
                    return Err((
                        code::VOTER_NOT_FOUND,
                        format!("Cannot remove voter ReplicaKey(id={node}) as it is not part of the set of voters"),
                    ));
                }
                let recorded = image.quorum.get(&node).map(|m| m.directory_id);
                if !directory_id.is_nil() && recorded.is_some_and(|d| d != directory_id) {
                    return Err((
                        code::VOTER_NOT_FOUND,
                        format!("Controller {node} has another directory id than {directory_id}"),
                    ));
                }
                if is_voter(node) && status.voters.len() == 1 {
                    return Err((code::INVALID_REQUEST, "Cannot remove the last voter of the quorum".into()));
                }
                let id = quorum_id(node);
                if id == self.quorum_id {
                    // Raft's leader cannot remove itself: it hands over, and the next
                    // leader removes it (`handle_indexed` sends the request there).
                    drop(status);
                    self.hand_over().await;
                    return Err(not_controller(self.leader_id.get()));
                }
                // A voter that runs (heard from within `OBSERVER_GRACE`) stays as a
                // learner, an observer of the log, so its broker carries on, as a
                // removed Kafka voter keeps fetching; one that is down, or an
                // observer removed again, leaves altogether.
                // Heard from since this leader took office: a leader new in office
                // first waits out one grace for the voters' answers.
                let leading = self.leading_since.get().elapsed();
                if leading < OBSERVER_GRACE {
                    glommio::timer::sleep(OBSERVER_GRACE - leading).await;
                    if !self.leader.get() {
                        return Err(not_controller(self.leader_id.get()));
                    }
                }
                let status = self.quorum_status.borrow().clone();
                let heard = status.voters.iter().find(|v| v.node == node).map(|v| v.last_fetch_ms);
                let running =
                    heard.is_some_and(|ms| skein_engine::time::now_ms() - ms < OBSERVER_GRACE.as_millis() as i64);
                let endpoint = match image.quorum.get(&node) {
                    Some(member) => Some((member.host.clone(), member.port, member.directory_id)),
                    None => host
                        .voters()
                        .iter()
                        .find(|(id, _)| *id == node)
                        .map(|(_, at)| (at.ip().to_string(), at.port(), directory_id)),
                };
                // A controller that leaves keeps its record (its endpoint and
                // directory id, Kafka's controller registration) until
                // UnregisterController.
                let (records, change) = match (running, endpoint) {
                    (running, Some((host, port, directory_id))) => {
                        let member = super::QuorumMember { node, directory_id, host, port, voter: false };
                        let change = if running { Change::AddLearner(id) } else { Change::Remove(id) };
                        (vec![MetadataRecord::QuorumMember(member)], change)
                    }
                    (_, None) => (vec![MetadataRecord::RemoveQuorumMember { node }], Change::Remove(id)),
                };
                let index = self.propose_as(records, Some(change)).await?;
                Ok((ControllerReply::Done, index))
            }
            ControllerRequest::UpdateVoter { member } => {
                let node = member.node;
                if !is_voter(node) && !is_learner(node) {
                    return Err((code::VOTER_NOT_FOUND, format!("controller {node} is not a member of the quorum")));
                }
                ip_endpoint(&member)?;
                let recorded = super::QuorumMember { voter: is_voter(node), ..member };
                if image.quorum.get(&node) == Some(&recorded) {
                    return Ok((ControllerReply::Done, self.applied.get()));
                }
                let index = self.propose(vec![MetadataRecord::QuorumMember(recorded)]).await?;
                Ok((ControllerReply::Done, index))
            }
            ControllerRequest::UnregisterController { node } => {
                if is_voter(node) {
                    return Err((
                        code::INVALID_REQUEST,
                        format!("Controller {node} is a voter of the quorum: remove it from the voters first"),
                    ));
                }
                if !image.quorum.contains_key(&node) && !is_learner(node) {
                    return Err((
                        code::CONTROLLER_ID_NOT_REGISTERED,
                        format!("Controller ID {node} is not currently registered."),
                    ));
                }
                let records = vec![MetadataRecord::RemoveQuorumMember { node }];
                let index = match is_learner(node) {
                    true => self.propose_as(records, Some(Change::Remove(quorum_id(node)))).await?,
                    false => self.propose(records).await?,
                };
                Ok((ControllerReply::Done, index))
            }
            _ => Err((code::INVALID_REQUEST, "not a change of the quorum's voters".into())),
        }
    }

    /// Decides the ISR changes of `batch` in order, each against the image the
    /// earlier ones leave, proposes their records at once (a topic's last record
    /// holds all of its changes) and answers each. Called with the request lock held.
    async fn alter_all<H: Host>(&self, host: &H, batch: Vec<(ControllerRequest, oneshot::Sender<Forwarded>)>) {
        if !self.leader.get() {
            for (_, done) in batch {
                let _ = done.send(Err(not_controller(self.leader_id.get())));
            }
            return;
        }
        let (requests, answers): (Vec<ControllerRequest>, Vec<_>) = batch.into_iter().unzip();
        let (records, replies) = decide_all(&host.image(), &requests, &host.local());
        let index = match records.is_empty() {
            true => Ok(self.applied.get()),
            false => self.propose(records).await,
        };
        for (done, reply) in answers.into_iter().zip(replies) {
            let answer = match (&index, reply) {
                (Ok(index), Ok(reply)) => Ok((reply, *index)),
                (Err(refusal), Ok(_)) => Err(refusal.clone()),
                (_, Err(refusal)) => Err(refusal),
            };
            let _ = done.send(answer);
        }
    }

    /// Proposes `records` to the metadata log and waits until they are applied on
    /// every shard of this node; returns the index that holds them.
    async fn propose(&self, records: Vec<MetadataRecord>) -> Result<u64, Refusal> {
        self.propose_as(records, None).await
    }

    /// As `propose`, the records carried by membership change `change` if any.
    async fn propose_as(&self, records: Vec<MetadataRecord>, change: Option<Change>) -> Result<u64, Refusal> {
        let id = self.next_id();
        let data = serde_json::to_vec(&Proposal { node: self.quorum_id, id, records })
            .expect("metadata records always serialise");
        let (done, applied) = oneshot::channel();
        self.pending.borrow_mut().insert(id, done);
        let input = match change {
            Some(change) => Input::Change { id, change, data },
            None => Input::Propose { id, data },
        };
        if self.inputs.send(input).await.is_err() {
            self.pending.borrow_mut().remove(&id);
            return Err((code::NOT_CONTROLLER, "the metadata controller stopped".into()));
        }
        let outcome = within(PROPOSAL_WAIT, applied).await;
        self.pending.borrow_mut().remove(&id);
        outcome
    }

    /// Sends `request` to the active controller `leader` (from an observer: to the
    /// voter it follows) and waits for its answer, then until this node applied the
    /// records.
    async fn forward(&self, leader: u64, request: ControllerRequest) -> Forwarded {
        let id = self.next_id();
        let (done, answer) = oneshot::channel();
        self.forwards.borrow_mut().insert(id, done);
        let sent = match (&self.peers, &self.observer) {
            (Some(peers), _) => peers.forward(leader, id, &request),
            (None, Some(link)) => link.forward(id, &request),
            (None, None) => false,
        };
        if !sent {
            self.forwards.borrow_mut().remove(&id);
            return Err(not_controller(Some(leader)));
        }
        let outcome = within(PROPOSAL_WAIT, answer).await;
        self.forwards.borrow_mut().remove(&id);
        let (reply, index) = outcome?;
        let deadline = Instant::now() + PROPOSAL_WAIT;
        // A controller the request took out of the quorum may never hear of later
        // entries: the leader's answer says the change is committed.
        while self.applied.get() < index && !self.removed.get() {
            self.wait_for_change(deadline).await?;
        }
        Ok((reply, index))
    }

    /// What follows `after` in the metadata log for observer `node`: committed
    /// entries, or, when there are none yet, an empty answer after `FEED_WAIT` (a
    /// long poll). The active controller keeps each observer's progress for
    /// DescribeQuorum.
    pub async fn feed(&self, node: i32, after: u64) -> Option<skein_replication::quorum::Feed> {
        let deadline = Instant::now() + FEED_WAIT;
        loop {
            let listener = self.changed.listen();
            let (reply, answer) = oneshot::channel();
            self.inputs.send(Input::Feed { after, reply }).await.ok()?;
            let feed = answer.await.ok()?;
            let now = Instant::now();
            if self.leader.get() {
                let ms = skein_engine::time::now_ms();
                let mut observers = self.observers.borrow_mut();
                let entry = observers.entry(node).or_insert(VoterStatus {
                    node,
                    log_end_offset: 0,
                    last_fetch_ms: -1,
                    last_caught_up_ms: -1,
                });
                entry.log_end_offset = after as i64;
                entry.last_fetch_ms = ms;
                if after >= feed.committed {
                    entry.last_caught_up_ms = ms;
                }
            }
            if feed.upto > after || feed.snapshot.is_some() || now >= deadline {
                return Some(feed);
            }
            futures_lite::future::or(listener, glommio::timer::sleep(deadline - now)).await;
        }
    }

    /// Waits until the leadership or the applied index changes, or `deadline`.
    async fn wait_for_change(&self, deadline: Instant) -> Result<(), Refusal> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(not_controller(self.leader_id.get()));
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

    /// The connection forwards went over is gone: they are answered NOT_CONTROLLER
    /// (the caller retries).
    pub fn forwards_lost(&self) {
        let forwards: Vec<_> = self.forwards.borrow_mut().drain().collect();
        for (_, done) in forwards {
            let _ = done.send(Err(not_controller(self.leader_id.get())));
        }
    }

    /// Records the quorum's state as this member sees it, for DescribeQuorum.
    pub fn set_quorum_status(&self, status: QuorumStatus) {
        *self.quorum_status.borrow_mut() = status;
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
            self.observers.borrow_mut().clear();
            self.leading_since.set(Instant::now());
        }
        if was.0 && !leader {
            let pending: Vec<_> = self.pending.borrow_mut().drain().collect();
            for (_, done) in pending {
                let _ = done.send(Err(not_controller(known)));
            }
        }
        if was.1 != known {
            let forwards: Vec<_> = self.forwards.borrow_mut().drain().collect();
            for (_, done) in forwards {
                let _ = done.send(Err(not_controller(known)));
            }
        }
        self.changed.notify(usize::MAX);
    }

    /// As the active controller, fences the brokers whose last heartbeat (or this
    /// node's taking office, for one not heard from since) is older than the session
    /// timeout: their leaderships move to in-sync replicas. Called every tick.
    pub fn check_sessions<H: Host>(&self, host: &H) {
        if !self.leader.get() {
            return;
        }
        let now = Instant::now();
        let image = host.image();
        let me = host.local().node;
        for broker in image.brokers.values().filter(|b| !b.fenced && b.id != me) {
            let last = self.heartbeats.borrow().get(&broker.id).copied().unwrap_or(self.leading_since.get());
            if now.duration_since(last) < self.session_timeout || !self.fencing.borrow_mut().insert(broker.id) {
                continue;
            }
            tracing::warn!(target: "skein::net", broker = broker.id, "broker session expired: fencing it");
            let (host, id) = (host.clone(), broker.id);
            glommio::spawn_local(async move {
                let Some(controller) = host.controller() else { return };
                if let Err((code, message)) = controller.handle_here(&host, ControllerRequest::FenceBroker { id }).await
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
    pub fn check_balance<H: Host>(&self, host: &H) {
        let Some(every) = self.rebalance_every else { return };
        if !self.leader.get() || self.rebalancing.get() || self.last_rebalance.get().elapsed() < every {
            return;
        }
        self.last_rebalance.set(Instant::now());
        let image = host.image();
        let me = host.local().node;
        let live = |id: i32| image.is_live(id, me);
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
        let host = host.clone();
        glommio::spawn_local(async move {
            let Some(controller) = host.controller() else { return };
            let request = ControllerRequest::ElectLeaders { unclean: false, partitions: Some(partitions) };
            if let Err((code, message)) = controller.handle_here(&host, request).await {
                tracing::debug!(target: "skein::net", code, message, "leader rebalance deferred");
            }
            controller.rebalancing.set(false);
        })
        .detach();
    }

    /// As the active controller, every `delegation.token.expiry.check.interval.ms`:
    /// removes the delegation tokens past their expiry (Kafka's token sweep). Called
    /// every tick.
    pub fn check_tokens<H: Host>(&self, host: &H) {
        let Some(settings) = &host.security().tokens else { return };
        let every = Duration::from_millis(settings.expiry_check_interval_ms);
        if !self.leader.get() || self.sweeping_tokens.get() || self.last_token_sweep.get().elapsed() < every {
            return;
        }
        self.last_token_sweep.set(Instant::now());
        let now_ms = skein_engine::time::now_ms();
        let expired = host.image().tokens.values().filter(|t| t.expired(now_ms)).count();
        if expired == 0 {
            return;
        }
        tracing::info!(target: "skein::net", expired, "removing expired delegation tokens");
        self.sweeping_tokens.set(true);
        let host = host.clone();
        glommio::spawn_local(async move {
            let Some(controller) = host.controller() else { return };
            let request = ControllerRequest::RemoveExpiredTokens { now_ms };
            if let Err((code, message)) = controller.handle_here(&host, request).await {
                tracing::debug!(target: "skein::net", code, message, "expired delegation tokens kept for now");
            }
            controller.sweeping_tokens.set(false);
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

/// A member's endpoint must be an IP address (or `localhost`): no executor thread waits
/// on a name lookup to reach it.
fn ip_endpoint(member: &super::QuorumMember) -> Result<(), Refusal> {
    match member.address() {
        Some(_) => Ok(()),
        None => Err((
            code::INVALID_REQUEST,
            format!("controller {}'s endpoint {}:{} is not an IP address", member.node, member.host, member.port),
        )),
    }
}
