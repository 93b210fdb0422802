//! One shard's broker state: its partitions (log plus producer state), the metadata
//! it reads, and the routes to the other shards.
//!
//! Every partition operation goes through `Shard::route`: executed here when this
//! shard owns the partition, otherwise sent to the owner over a bounded cross-shard
//! channel (record bytes travel as `Bytes`, not copied) and answered on a oneshot.
//! The owner runs each incoming operation as its own task, in arrival order, so
//! operations from one connection to one partition keep their order.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use futures_channel::oneshot;
use skein_engine::io::dma::DmaStorage;
use skein_engine::{LeaderEpoch, LogManager, Offset, TopicPartition};
use skein_replication as replication;

use crate::append::{AppendRules, TopicSettings};
use crate::errors::{code, code_of};
use crate::metadata::controller::{Controller, ControllerReply, ControllerRequest};
use crate::metadata::{Assignment, MetadataImage, Refusal};
use crate::metrics::ShardMetrics;
use crate::router::Router;
use skein_replication::producer::ProducerStates;

mod brokers;
mod groups;
mod ops;
mod produce;
mod security;
mod txns;
pub use groups::{consumer_lag_task, group_ticker};
pub use ops::{OpResult, PartitionOp, PartitionReply, Reader, ReplicationGauges, ShardMessage};
pub use txns::txn_ticker;

/// Node-wide settings the handlers need.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    pub node_id: i32,
    pub cluster_id: String,
    /// Drawn at each start (Kafka's incarnation id), registered with the controller.
    pub incarnation: u64,
    /// The data directory was closed cleanly by the last run (`.kafka_cleanshutdown`).
    pub clean_restart: bool,
    /// A member of a cluster (controller voters given), not a lone node.
    pub clustered: bool,
    /// This node has the broker role (Kafka's `process.roles`): it registers and
    /// holds partitions. A controller-only node does neither.
    pub broker: bool,
    /// The active controller's node id (-1 while the quorum has no leader), as
    /// Metadata and DescribeCluster name it; written by shard 0's quorum loop.
    pub active_controller: Arc<std::sync::atomic::AtomicI32>,
    /// The shards' use of each client quota (`quota::manager`).
    pub quota_ledger: Arc<crate::quota::Ledger>,
    /// The inter-broker listener's advertised address (registered as the broker's).
    pub advertised_host: String,
    pub advertised_port: u16,
    /// The node's listeners (`listeners`, `advertised.listeners`).
    pub listeners: Vec<crate::security::ListenerConfig>,
    /// Each shard a broker of its own to clients on one listener (`virtual_brokers`).
    pub virtual_brokers: Option<crate::virtual_brokers::VirtualBrokers>,
    /// The listener brokers reach each other on (`inter.broker.listener.name`).
    pub inter_broker_listener: String,
    /// TLS and SASL settings.
    pub security: Arc<crate::security::Security>,
    /// The controller quorum's voters with their addresses (none for a single node).
    pub controller_voters: Vec<(i32, std::net::SocketAddr)>,
    /// Kafka's `broker.rack`.
    pub rack: Option<String>,
    /// `replica.selector.class` is Kafka's `RackAwareReplicaSelector`: consumers that
    /// name their rack are sent to a replica on it (KIP-392).
    pub rack_aware_reads: bool,
    pub auto_create_topics: bool,
    pub num_partitions: i32,
    /// Broker-level topic config defaults (Kafka names), e.g. from the config file.
    pub topic_defaults: BTreeMap<String, String>,
    pub socket_request_max_bytes: usize,
    /// Kafka's `connections.max.idle.ms` (0: never).
    pub connections_max_idle_ms: u64,
    pub shards: usize,
    pub data_dir: std::path::PathBuf,
    /// Kafka's `group.initial.rebalance.delay.ms`.
    pub group_initial_rebalance_delay_ms: u64,
    /// Kafka's `group.consumer.heartbeat.interval.ms` and `group.consumer.session.timeout.ms`.
    pub group_consumer_heartbeat_interval_ms: u64,
    pub group_consumer_session_timeout_ms: u64,
    /// Kafka's `group.max.size` and `offsets.retention.minutes`.
    pub group_max_size: usize,
    /// Kafka's `group.consumer.max.size`.
    pub group_consumer_max_size: usize,
    pub offsets_retention_minutes: u64,
    /// Kafka's `producer.id.expiration.ms`.
    pub producer_id_expiration_ms: i64,
    /// Kafka's `transaction.max.timeout.ms` and `transactional.id.expiration.ms`.
    pub transaction_max_timeout_ms: i32,
    pub transactional_id_expiration_ms: i64,
    /// Kafka's `max.incremental.fetch.session.cache.slots`, over the whole node.
    pub fetch_session_cache_slots: usize,
    /// The adaptive group commit's maximum delay (`skein_engine::log`'s coalescing
    /// window); zero never holds a write back.
    pub group_commit_max_delay: std::time::Duration,
    /// The appenders' chunk size and writes in flight (from the iotune profile).
    pub write_shape: skein_engine::WriteShape,
    /// `max.connections` and `max.connections.per.ip`, with the node's open
    /// connections (shared by the shards).
    pub connections: Arc<crate::connections::ConnectionLimits>,
    /// The high watermarks of `replication-offset-checkpoint` as the node found it.
    pub recovered_high_watermarks: HashMap<TopicPartition, Offset>,
}

/// Gives `replica` the role, epochs, replicas and ISR of the controller's `assignment`.
fn assign(replica: &replication::Partition<DmaStorage>, assignment: Assignment) {
    let now = skein_engine::log::now_ms();
    let Assignment { leader, leader_epoch, partition_epoch, replicas, isr, .. } = assignment;
    replica.assign(leader, LeaderEpoch(leader_epoch), partition_epoch, replicas, isr, now);
}

/// A partition hosted by this shard: the replica (`replication::Partition`: log,
/// producer state, epoch, ISR, high watermark) plus what the protocol layer keeps.
pub struct Partition {
    pub replica: replication::Partition<DmaStorage>,
    /// The topic configs that govern appends (`append::admit`).
    pub rules: Cell<AppendRules>,
    /// Record bytes produced to and fetched from this partition, for placement.
    pub bytes_in: Cell<u64>,
    pub bytes_out: Cell<u64>,
    /// Operations run on this partition (produce, fetch, offsets, group calls, ...),
    /// for the load balancer's per-request cost.
    pub requests: Cell<u64>,
    /// Time the shard spent polling this partition's operations, in nanoseconds.
    pub busy_ns: Cell<u64>,
    /// An ISR change this leader proposed is with the controller.
    pub isr_change_pending: Cell<bool>,
    /// As a follower: records the leader's high watermark was ahead of this log end at
    /// the last fetch.
    pub follower_lag: Cell<i64>,
}

/// The replica's fields and methods (`log`, `producers`, `high_watermark`, ...) read
/// through the hosted partition.
impl std::ops::Deref for Partition {
    type Target = replication::Partition<DmaStorage>;

    fn deref(&self) -> &Self::Target {
        &self.replica
    }
}

impl Partition {
    fn apply(&self, settings: &TopicSettings) -> Result<(), skein_engine::Error> {
        self.log.set_config(settings.log.clone())?;
        self.rules.set(settings.append);
        self.set_min_insync(settings.append.min_insync_replicas.max(1) as usize);
        Ok(())
    }
}

pub struct Shard {
    pub id: usize,
    pub settings: Arc<NodeSettings>,
    /// This shard's metadata image, replaced whole when the controller publishes.
    image: RefCell<Arc<MetadataImage>>,
    /// The metadata controller, on shard 0 only.
    controller: Option<Controller>,
    /// Producer ids this shard may hand out (a block from the controller).
    producer_ids: RefCell<std::ops::Range<i64>>,
    pub logs: LogManager<DmaStorage>,
    partitions: RefCell<HashMap<TopicPartition, Rc<Partition>>>,
    pub(crate) router: Router,
    pub metrics: ShardMetrics,
    /// Request bytes read by this shard's connections and not yet answered.
    pub buffered_bytes: Cell<usize>,
    /// Response bytes of this shard's connections not yet written (`budget.rs`).
    pub responses: Rc<crate::budget::ShardResponses>,
    /// The groups whose offsets partitions this shard owns.
    pub groups: crate::group::Coordinator,
    /// Their consumer lag as of the last refresh (`consumer_lag_task`), for `/metrics`.
    pub consumer_lag: RefCell<crate::group::lag::ConsumerLag>,
    /// The transactional ids whose `__transaction_state` partitions this shard owns.
    pub txns: crate::txn::Coordinator,
    /// Fetch sessions (KIP-227) of this shard's connections.
    pub fetch_sessions: RefCell<crate::handlers::fetch::FetchSessions>,
    /// This shard's replication quotas (`throttle.rs`).
    pub throttles: crate::throttle::ReplicationThrottles,
    /// This shard's index of the image's ACLs, when an authorizer is configured.
    authorizer: RefCell<Option<Rc<crate::security::acl::Authorizer>>>,
    /// This shard's client quota buckets (`quota::manager`).
    pub quotas: crate::quota::ShardQuotas,
    /// Whether the installed image has any client quota: without one, the request
    /// path does not look at the image for them.
    has_quotas: Cell<bool>,
    /// This shard's copy of the OAUTHBEARER key set and its generation (`security::jwks`).
    jwks: RefCell<Option<(u64, Arc<crate::security::jwks::KeySet>)>>,
    /// This shard's copy of the TLS config (`security::tls`).
    pub tls: crate::security::tls::ShardTls,
    /// The shard is stopping: connections answer what they read, then close.
    closing: Cell<bool>,
    closing_event: event_listener::Event,
}

impl Shard {
    pub fn new(
        id: usize,
        settings: Arc<NodeSettings>,
        image: Arc<MetadataImage>,
        controller: Option<Controller>,
        cache_bytes: usize,
        router: Router,
    ) -> Shard {
        let logs = LogManager::new(DmaStorage, settings.data_dir.clone(), cache_bytes)
            .with_group_commit(settings.group_commit_max_delay)
            .with_write_shape(settings.write_shape);
        let session_slots = settings.fetch_session_cache_slots.div_ceil(settings.shards.max(1));
        let authorizer = RefCell::new(Self::index_acls(&settings, &image));
        let has_quotas = Cell::new(!image.client_quotas.is_empty());
        let shard = Shard {
            id,
            settings,
            authorizer,
            image: RefCell::new(image),
            controller,
            producer_ids: RefCell::new(0..0),
            logs,
            partitions: RefCell::new(HashMap::new()),
            router,
            metrics: ShardMetrics::default(),
            buffered_bytes: Cell::new(0),
            responses: Rc::new(crate::budget::ShardResponses::default()),
            groups: crate::group::Coordinator::default(),
            consumer_lag: RefCell::default(),
            txns: crate::txn::Coordinator::default(),
            fetch_sessions: RefCell::new(crate::handlers::fetch::FetchSessions::new(session_slots, id)),
            throttles: crate::throttle::ReplicationThrottles::default(),
            quotas: Default::default(),
            has_quotas,
            jwks: RefCell::new(None),
            tls: RefCell::new(None),
            closing: Cell::new(false),
            closing_event: event_listener::Event::new(),
        };
        shard
            .groups
            .initial_rebalance_delay
            .set(Duration::from_millis(shard.settings.group_initial_rebalance_delay_ms));
        shard.groups.max_size.set(shard.settings.group_max_size);
        shard.txns.settings.set(crate::txn::TxnSettings {
            max_timeout_ms: shard.settings.transaction_max_timeout_ms,
            id_expiration_ms: shard.settings.transactional_id_expiration_ms,
        });
        shard
            .groups
            .offsets_retention
            .set(Duration::from_secs(shard.settings.offsets_retention_minutes.saturating_mul(60)));
        shard.groups.consumer_settings.set(crate::group::consumer::ConsumerSettings {
            heartbeat_interval: Duration::from_millis(shard.settings.group_consumer_heartbeat_interval_ms),
            session_timeout: Duration::from_millis(shard.settings.group_consumer_session_timeout_ms),
            max_size: shard.settings.group_consumer_max_size,
        });
        shard
    }

    /// Replication gauges over this shard's partitions: (partitions it leads with
    /// fewer in-sync replicas than replicas, records its leaders hold above their
    /// high watermark, records its followers are behind their leaders).
    pub fn replication_gauges(&self) -> ReplicationGauges {
        let mut gauges = ReplicationGauges::default();
        let now = now_ms();
        for state in self.partitions.borrow().values() {
            let replica = state.replica_state.borrow();
            if replica.role() == replication::Role::Leader {
                gauges.under_replicated += u64::from(replica.isr().len() < replica.replicas().len());
                gauges.high_watermark_lag += (state.log.log_end_offset().0 - replica.high_watermark().0).max(0);
                gauges.follower_lag_ms = gauges.follower_lag_ms.max(replica.max_follower_lag_ms(now));
            } else {
                gauges.follower_lag += state.follower_lag.get();
            }
        }
        gauges
    }

    /// The metadata controller, on shard 0.
    pub fn controller(&self) -> Option<&Controller> {
        self.controller.as_ref()
    }

    /// Stops this shard's connections reading requests; each closes once it has
    /// answered what it read.
    pub fn close_connections(&self) {
        self.closing.set(true);
        self.closing_event.notify(usize::MAX);
    }

    /// Resolves once the shard is stopping.
    pub async fn closing(&self) {
        loop {
            if self.closing.get() {
                return;
            }
            let listener = self.closing_event.listen();
            if self.closing.get() {
                return;
            }
            listener.await;
        }
    }

    /// This shard's current metadata image: no lock, no other shard involved.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.borrow().clone()
    }

    /// Installs a published image unless a newer one is already here.
    pub fn install(&self, image: Arc<MetadataImage>) {
        let mut current = self.image.borrow_mut();
        if image.version > current.version {
            if image.acls != current.acls {
                *self.authorizer.borrow_mut() = Self::index_acls(&self.settings, &image);
            }
            self.has_quotas.set(!image.client_quotas.is_empty());
            *current = image;
        }
    }

    /// Installs `image` here and on every other shard, and waits until each holds it.
    pub async fn publish(&self, image: Arc<MetadataImage>) {
        self.install(image.clone());
        let acks = (0..self.settings.shards).filter(|&s| s != self.id).map(|s| {
            let image = image.clone();
            async move {
                let (reply, ack) = oneshot::channel();
                if self.router.send(s, ShardMessage::Publish { image, reply }).await.is_ok() {
                    let _ = ack.await;
                }
            }
        });
        futures_util::future::join_all(acks).await;
    }

    /// Asks the metadata controller for a change; answered once every shard holds the
    /// resulting image.
    ///
    /// # Errors
    /// The controller's refusal, or NOT_CONTROLLER (retriable) when shard 0 cannot
    /// be reached.
    pub async fn control(self: &Rc<Self>, request: ControllerRequest) -> Result<ControllerReply, Refusal> {
        if let Some(controller) = &self.controller {
            return controller.handle(self, request).await;
        }
        let unavailable = || (code::NOT_CONTROLLER, "the metadata controller is unavailable".to_string());
        let (reply, answer) = oneshot::channel();
        self.router.send(0, ShardMessage::Control { request, reply }).await.map_err(|_| unavailable())?;
        answer.await.unwrap_or_else(|_| Err(unavailable()))
    }

    /// A new producer id from this shard's block, fetching a new block from the
    /// controller when it is used up.
    ///
    /// # Errors
    /// The controller's error when no block can be had.
    pub async fn next_producer_id(self: &Rc<Self>) -> Result<i64, Refusal> {
        loop {
            if let Some(id) = self.producer_ids.borrow_mut().next() {
                return Ok(id);
            }
            match self.control(ControllerRequest::ProducerIds).await? {
                ControllerReply::ProducerIds(block) => {
                    let mut ids = self.producer_ids.borrow_mut();
                    // Another task may have refilled meanwhile: keep the fuller block.
                    if ids.is_empty() {
                        *ids = block;
                    }
                }
                other => return Err((code::UNKNOWN_SERVER_ERROR, format!("unexpected controller reply {other:?}"))),
            }
        }
    }

    pub fn partition(&self, partition: &TopicPartition) -> Option<Rc<Partition>> {
        self.partitions.borrow().get(partition).cloned()
    }

    pub fn hosted(&self) -> Vec<TopicPartition> {
        self.partitions.borrow().keys().cloned().collect()
    }

    /// Snapshots every partition's producer state at its log end (clean shutdown), so
    /// that the next start replays nothing.
    pub async fn snapshot_producers(&self) {
        let partitions: Vec<Rc<Partition>> = self
            .partitions
            .borrow()
            .iter()
            .filter(|(p, _)| p.topic != crate::txn::TRANSACTION_TOPIC)
            .map(|(_, state)| state.clone())
            .collect();
        for state in partitions {
            state.snapshot_at_end().await;
        }
    }

    /// Forgets producers silent for `producer.id.expiration.ms`; returns how many.
    pub fn expire_producers(&self, now_ms: i64) -> usize {
        let expiration = self.settings.producer_id_expiration_ms;
        self.partitions.borrow().values().map(|state| state.producers.borrow_mut().expire(now_ms, expiration)).sum()
    }

    /// Messages other shards sent to `shard` that it has not taken yet.
    pub fn cross_shard_queued(&self, shard: usize) -> u64 {
        self.router.queued(shard)
    }

    /// Runs `op` on the shard that owns `partition`.
    pub async fn route(self: &Rc<Self>, partition: TopicPartition, op: PartitionOp) -> OpResult {
        let image = self.image();
        let Some(owner) = image.shard_of(&partition) else {
            return Err((code::UNKNOWN_TOPIC_OR_PARTITION, None));
        };
        // A partition another broker holds: the client's metadata is stale.
        if !image.topic(&partition.topic).is_some_and(|t| t.is_replica(partition.partition, self.settings.node_id)) {
            return Err((code::NOT_LEADER_OR_FOLLOWER, None));
        }
        drop(image);
        self.route_to(owner, partition, op).await
    }

    /// The high watermarks of the partitions this shard hosts.
    pub fn high_watermarks(&self) -> Vec<(TopicPartition, Offset)> {
        let partitions = self.partitions.borrow();
        partitions.iter().map(|(partition, state)| (partition.clone(), state.high_watermark())).collect()
    }

    /// Writes every shard's high watermarks to `replication-offset-checkpoint` (shard
    /// 0, every `replica.high.watermark.checkpoint.interval.ms`). A shard that does not
    /// answer leaves its partitions out: they restart from their log start, as with
    /// no checkpoint.
    pub async fn checkpoint_high_watermarks(self: &Rc<Self>) {
        let mut all = self.high_watermarks();
        for owner in (0..self.settings.shards).filter(|&s| s != self.id) {
            let (reply, answer) = oneshot::channel();
            if self.router.send(owner, ShardMessage::HighWatermarks { reply }).await.is_ok() {
                all.extend(answer.await.unwrap_or_default());
            }
        }
        let bytes = replication::checkpoint::encode(&all);
        if let Err(e) = self.logs.write_file(replication::checkpoint::HIGH_WATERMARK_FILE, &bytes).await {
            tracing::warn!(target: "skein", error = %e, "cannot write the high watermark checkpoint");
        }
    }

    /// The replica a consumer on `rack` reading at `offset` should read from, where it
    /// is not this leader, as Kafka's `RackAwareReplicaSelector` chooses: none when this
    /// broker is on the consumer's rack; otherwise the live in-sync follower on that
    /// rack that holds `offset` and is furthest ahead.
    fn preferred_read_replica(&self, state: &Partition, offset: Offset, rack: &str) -> Option<i32> {
        let me = self.settings.node_id;
        if !self.settings.rack_aware_reads || self.settings.rack.as_deref() == Some(rack) {
            return None;
        }
        let image = self.image();
        let replica = state.replica_state.borrow();
        replica
            .isr()
            .iter()
            .filter(|&&id| id != me && image.is_live(id, me))
            .filter(|&&id| image.brokers.get(&id).and_then(|b| b.rack.as_deref()) == Some(rack))
            .filter_map(|&id| Some((replica.follower_log_end(id)?, id)))
            .filter(|&(end, _)| end >= offset && offset >= state.log.log_start_offset())
            .max()
            .map(|(_, id)| id)
    }

    /// Runs `op` on shard `owner`.
    pub async fn route_to(self: &Rc<Self>, owner: usize, partition: TopicPartition, op: PartitionOp) -> OpResult {
        let api = op.api_key();
        let result = if owner == self.id {
            self.execute(&partition, op).await
        } else {
            self.metrics.cross_shard_messages.set(self.metrics.cross_shard_messages.get() + 1);
            let (reply, answer) = oneshot::channel();
            if self
                .router
                .send(owner, ShardMessage::Partition { partition, op, reply, sent: std::time::Instant::now() })
                .await
                .is_err()
            {
                Err((code::NOT_LEADER_OR_FOLLOWER, Some("shard unavailable".into())))
            } else {
                answer.await.unwrap_or(Err((code::NOT_LEADER_OR_FOLLOWER, Some("shard dropped the request".into()))))
            }
        };
        // Partition-level errors, counted by the API that caused them (`/metrics`).
        if let (Err(_), Some(api)) = (&result, api) {
            self.metrics.count_error(api);
        }
        result
    }

    /// Takes the controller's assignment of a hosted partition: its role, epochs and
    /// ISR. The group coordinator follows the leadership of its offsets partition:
    /// unloaded when it goes, loaded again from the log when it comes (as a follower
    /// the replica kept the log in sync).
    fn take_assignment(self: &Rc<Self>, partition: &TopicPartition, state: &Rc<Partition>, assignment: Assignment) {
        let was_leader = state.replica_state.borrow().role() == replication::Role::Leader;
        let was_epoch = state.replica_state.borrow().leader_epoch().0;
        assign(state, assignment);
        let leads = state.replica_state.borrow().role() == replication::Role::Leader;
        if partition.topic == crate::group::OFFSETS_TOPIC && was_leader != leads {
            self.groups.unload(partition.partition);
            if leads {
                let load = groups::load_as_leader(self.clone(), partition.clone(), state.log.clone(), Duration::ZERO);
                glommio::spawn_local(load).detach();
            }
        }
        // So does the transaction coordinator, loaded again in each new leader epoch
        // (its coordinator epoch, which fences markers of an older coordinator).
        let epoch = state.replica_state.borrow().leader_epoch().0;
        if partition.topic == crate::txn::TRANSACTION_TOPIC && (was_leader != leads || epoch != was_epoch) {
            self.txns.unload(partition.partition);
            if leads {
                let load = txns::load_as_leader(self.clone(), partition.clone(), state.log.clone(), Duration::ZERO);
                glommio::spawn_local(load).detach();
            }
        }
    }

    /// Executes an operation on a partition this shard owns, counting the time its
    /// polls take against the partition (`Partition::busy_ns`: the shard's CPU
    /// attributed to it, which the load balancer moves).
    pub async fn execute(self: &Rc<Self>, partition: &TopicPartition, op: PartitionOp) -> OpResult {
        let spent = Cell::new(0u64);
        let result = poll_timed(self.execute_untimed(partition, op), &spent).await;
        if let Some(state) = self.partition(partition) {
            state.busy_ns.set(state.busy_ns.get() + spent.get());
        }
        result
    }

    async fn execute_untimed(self: &Rc<Self>, partition: &TopicPartition, op: PartitionOp) -> OpResult {
        match op {
            PartitionOp::Open { settings, assignment } => {
                if let Some(existing) = self.partition(partition) {
                    if existing.topic_id == settings.topic_id {
                        existing.apply(&settings).map_err(|e| (code_of(&e), Some(e.to_string())))?;
                        self.take_assignment(partition, &existing, assignment);
                        return Ok(PartitionReply::Done);
                    }
                    // An older incarnation whose removal has not arrived yet: the
                    // log manager deletes it before opening the new one.
                    self.partitions.borrow_mut().remove(partition);
                }
                let log = self
                    .logs
                    .open_for_topic(partition.clone(), settings.log.clone(), settings.topic_id)
                    .await
                    .map_err(|e| (code_of(&e), Some(e.to_string())))?;
                // The offsets topic is written only by the coordinator: its leader
                // loads the groups from it (a follower loads them when it comes to
                // lead). Its producer state holds the transactions of offset commits
                // (TxnOffsetCommit), so that the cleaner drops aborted ones.
                let leads = assignment.leader == self.settings.node_id;
                let producers = if partition.topic == crate::group::OFFSETS_TOPIC {
                    let loaded = match leads {
                        true => self.load_groups(&log, partition.partition).await,
                        false => Ok(()),
                    };
                    if let Err(error) = loaded {
                        self.group_load_failed(partition, &error);
                        // Retried once the partition is hosted.
                        let retry = groups::load_as_leader(
                            self.clone(),
                            partition.clone(),
                            log.clone(),
                            Duration::from_millis(200),
                        );
                        glommio::spawn_local(retry).detach();
                    }
                    replication::load_producers(&log).await
                } else if partition.topic == crate::txn::TRANSACTION_TOPIC {
                    // Loaded by its leader once the partition is hosted (below).
                    ProducerStates::default()
                } else {
                    replication::load_producers(&log).await
                };
                let replica =
                    replication::Partition::sole_leader(log, settings.topic_id, self.settings.node_id, producers);
                if let Some(&recovered) = self.settings.recovered_high_watermarks.get(partition) {
                    replica.recover_high_watermark(recovered);
                }
                replica.set_min_insync(settings.append.min_insync_replicas.max(1) as usize);
                assign(&replica, assignment);
                self.partitions.borrow_mut().insert(
                    partition.clone(),
                    Rc::new(Partition {
                        replica,
                        rules: Cell::new(settings.append),
                        bytes_in: Cell::new(0),
                        bytes_out: Cell::new(0),
                        requests: Cell::new(0),
                        busy_ns: Cell::new(0),
                        isr_change_pending: Cell::new(false),
                        follower_lag: Cell::new(0),
                    }),
                );
                if partition.topic == crate::txn::TRANSACTION_TOPIC && leads {
                    let hosted = self.partition(partition).expect("inserted above");
                    let load =
                        txns::load_as_leader(self.clone(), partition.clone(), hosted.log.clone(), Duration::ZERO);
                    glommio::spawn_local(load).detach();
                }
                return Ok(PartitionReply::Done);
            }
            PartitionOp::Release => {
                let removed = self.partitions.borrow_mut().remove(partition);
                if removed.is_none() {
                    return Err((code::NOT_LEADER_OR_FOLLOWER, None));
                }
                return match self.logs.close(partition).await {
                    Ok(()) => Ok(PartitionReply::Done),
                    Err(e) => Err((code_of(&e), Some(e.to_string()))),
                };
            }
            PartitionOp::Remove { topic_id } => {
                // Only the incarnation being deleted: a topic recreated meanwhile keeps
                // its log (`delete_for_topic` checks the id).
                let current = self.partitions.borrow().get(partition).map(|p| p.topic_id);
                if current.is_none_or(|id| id == topic_id) {
                    self.partitions.borrow_mut().remove(partition);
                }
                return match self.logs.delete_for_topic(partition, topic_id).await {
                    Ok(()) | Err(skein_engine::Error::UnknownPartition(_)) => Ok(PartitionReply::Done),
                    Err(e) => Err((code_of(&e), Some(e.to_string()))),
                };
            }
            _ => {}
        }
        let Some(state) = self.partition(partition) else {
            return Err((code::NOT_LEADER_OR_FOLLOWER, None));
        };
        if !matches!(op, PartitionOp::Stats) {
            state.requests.set(state.requests.get() + 1);
        }
        let log = &state.log;
        let engine = |e: skein_engine::Error| (code_of(&e), Some(e.to_string()));
        // Clients write, list offsets and delete records only at the leader.
        let leader_only = matches!(
            op,
            PartitionOp::Produce { .. }
                | PartitionOp::ListOffsets { .. }
                | PartitionOp::DeleteRecords { .. }
                | PartitionOp::Group(_)
                | PartitionOp::Txn(_)
                | PartitionOp::Producers
        );
        if leader_only && state.replica_state.borrow().role() != replication::Role::Leader {
            return Err((code::NOT_LEADER_OR_FOLLOWER, None));
        }
        match op {
            PartitionOp::Produce { batch, backing, acks, timeout_ms, transactional_id } => {
                self.produce(partition, &state, batch, backing, acks, timeout_ms, transactional_id).await
            }
            PartitionOp::Fetch { offset, max_bytes, wait_ms, reader } => {
                // The leader serves every read; a follower serves consumers that may
                // read from followers (KIP-392), up to its high watermark.
                let leads = state.replica_state.borrow().role() == replication::Role::Leader;
                let to_log_end = reader == Reader::Follower;
                if !leads && !matches!(reader, Reader::Consumer { any_replica: true, .. }) {
                    return Err((code::NOT_LEADER_OR_FOLLOWER, None));
                }
                let offset = Offset(offset);
                let committed = matches!(reader, Reader::Consumer { committed: true, .. });
                // A follower whose log ends below this log's start reads nothing: the
                // log start it is sent tells it to restart there (Kafka answers
                // OFFSET_OUT_OF_RANGE and the follower then asks for the log start).
                if to_log_end && offset < log.log_start_offset() {
                    return Ok(PartitionReply::Fetch {
                        high_watermark: state.high_watermark().0,
                        log_start_offset: log.log_start_offset().0,
                        records: Vec::new(),
                        preferred_read_replica: -1,
                        last_stable_offset: state.last_stable_offset().0,
                        aborted: Vec::new(),
                    });
                }
                if let Reader::Consumer { rack: Some(rack), .. } = &reader {
                    let preferred = leads.then(|| self.preferred_read_replica(&state, offset, rack)).flatten();
                    if let Some(replica) = preferred {
                        return Ok(PartitionReply::Fetch {
                            high_watermark: state.high_watermark().0,
                            log_start_offset: log.log_start_offset().0,
                            records: Vec::new(),
                            preferred_read_replica: replica,
                            last_stable_offset: state.last_stable_offset().0,
                            aborted: Vec::new(),
                        });
                    }
                }
                // What a reader may see: a follower what is written (appended records
                // still on their way to disk are not readable yet: it waits for them
                // rather than being answered empty), a consumer the high watermark.
                // A read_committed consumer, the last stable offset.
                let visible_end = match (to_log_end, committed) {
                    (true, _) => log.offset_written_end(),
                    (false, true) => state.last_stable_offset(),
                    (false, false) => state.high_watermark(),
                };
                if wait_ms > 0 && offset >= visible_end && offset <= log.log_end_offset() {
                    let timeout = async {
                        glommio::timer::sleep(Duration::from_millis(wait_ms)).await;
                    };
                    let _parked = Parked::new(&self.metrics.fetch_waits_parked);
                    // A follower waits for the next write; a consumer for the high
                    // watermark to pass its offset (written records the followers
                    // have not caught up with are not for it yet).
                    let more = async {
                        match to_log_end {
                            true => log.wait_for_data(offset).await,
                            false if committed => {
                                while state.last_stable_offset() <= offset && !log.is_closed() {
                                    state.wait_for_stable(offset).await;
                                }
                            }
                            false => {
                                while state.high_watermark() <= offset && !log.is_closed() {
                                    state.wait_for_high_watermark(offset).await;
                                }
                            }
                        }
                    };
                    futures_lite::future::or(more, timeout).await;
                }
                // A fetch the response budget did not reach asks only for watermarks;
                // so does a diverged follower's, whose position may lie past this
                // log's end (it is told where to truncate, not refused).
                let batches = if max_bytes == 0 {
                    let (start, end) = (log.log_start_offset(), log.log_end_offset());
                    if !to_log_end && (offset < start || offset > end) {
                        return Err(engine(skein_engine::Error::OffsetOutOfRange { offset, start, end }));
                    }
                    Vec::new()
                } else {
                    // Consumers never read past the high watermark (read_committed
                    // ones past the last stable offset); followers read to the log end.
                    let limit = match (to_log_end, committed) {
                        (true, _) => None,
                        (false, true) => Some(state.last_stable_offset()),
                        (false, false) => Some(state.high_watermark()),
                    };
                    log.read(offset, max_bytes, limit).await.inspect_err(|e| {
                        if to_log_end {
                            tracing::debug!(target: "skein::net", partition = %partition, error = %e, "a follower's read failed");
                        }
                    }).map_err(engine)?
                };
                let sent = batches.iter().map(|b| b.size() as u64).sum::<u64>();
                self.metrics.bytes_out.set(self.metrics.bytes_out.get() + sent);
                // Per partition too, for `skein placement show`.
                state.bytes_out.set(state.bytes_out.get() + sent);
                let last_stable_offset = state.last_stable_offset();
                // What a read_committed consumer must drop: the aborted transactions
                // the records read may hold (Kafka's `collectAbortedTxns`).
                let aborted = match (committed, batches.last()) {
                    (true, Some(last)) => state.aborted_between(offset, last.next_offset()),
                    _ => Vec::new(),
                };
                Ok(PartitionReply::Fetch {
                    high_watermark: state.high_watermark().0,
                    log_start_offset: log.log_start_offset().0,
                    records: batches,
                    preferred_read_replica: -1,
                    last_stable_offset: last_stable_offset.0,
                    aborted,
                })
            }
            PartitionOp::FollowerFetch { follower, offset, current_leader_epoch, last_fetched_epoch } => {
                // A follower whose last epoch ends before where it fetches (or that
                // the leader does not know), or that is past the log end, diverged: it
                // truncates first (KIP-320).
                let log_end = log.log_end_offset();
                let latest = log.latest_leader_epoch();
                let end_for = |epoch| log.end_offset_for_epoch(epoch);
                if let Some(diverging) =
                    replication::divergence(end_for, latest, log_end, Offset(offset), last_fetched_epoch)
                {
                    state.replica_state.borrow().check_epoch(current_leader_epoch).map_err(|c| (c, None))?;
                    tracing::debug!(target: "skein::net", partition = %partition, follower, offset, last_fetched_epoch,
                        log_end = log_end.0, epoch = diverging.0, end = diverging.1, "a follower's log diverged");
                    return Ok(PartitionReply::FollowerFetch { diverging: Some(diverging) });
                }
                let now = skein_engine::log::now_ms();
                let proposal = state
                    .follower_fetched(follower, Offset(offset), current_leader_epoch, now)
                    .map_err(|c| (c, None))?;
                // A fenced follower (gone, or shutting down) is not proposed for the ISR.
                if let Some(proposal) = proposal.filter(|_| self.image().is_live(follower, self.settings.node_id)) {
                    crate::replica_fetcher::propose_isr(self, partition, proposal);
                }
                Ok(PartitionReply::FollowerFetch { diverging: None })
            }
            PartitionOp::Assign(assignment) => {
                self.take_assignment(partition, &state, assignment);
                Ok(PartitionReply::Done)
            }
            PartitionOp::ListOffsets { timestamp, committed } => {
                let (offset, ts) = match timestamp {
                    -2 => (log.log_start_offset().0, -1),
                    -1 if committed => (state.last_stable_offset().0, -1),
                    -1 => (state.high_watermark().0, -1),
                    -3 => match log.max_timestamp_offset().await.map_err(engine)? {
                        Some((o, t)) => (o.0, t),
                        None => (-1, -1),
                    },
                    // -4: earliest-local (KIP-405), the same as earliest without tiering.
                    -4 => (log.log_start_offset().0, -1),
                    t if t >= 0 => match log.offset_for_timestamp(t).await.map_err(engine)? {
                        Some((o, t)) => (o.0, t),
                        None => (-1, -1),
                    },
                    _ => return Err((code::INVALID_REQUEST, Some(format!("invalid timestamp {timestamp}")))),
                };
                Ok(PartitionReply::Offsets { offset, timestamp: ts })
            }
            PartitionOp::DeleteRecords { offset } => {
                // -1 means the high watermark.
                let high_watermark = state.high_watermark();
                let target = if offset == -1 { high_watermark } else { Offset(offset) };
                if target > high_watermark || target < Offset::ZERO {
                    return Err((code::OFFSET_OUT_OF_RANGE, None));
                }
                let low = log.delete_records_before(target).await.map_err(engine)?;
                Ok(PartitionReply::DeleteRecords { low_watermark: low.0 })
            }
            PartitionOp::EpochEndOffset { current_leader_epoch, leader_epoch } => {
                let (leader_epoch, end_offset) =
                    state.epoch_end_offset(current_leader_epoch, LeaderEpoch(leader_epoch)).map_err(|c| (c, None))?;
                Ok(PartitionReply::EpochEndOffset { leader_epoch: leader_epoch.0, end_offset: end_offset.0 })
            }
            PartitionOp::Reconfigure(settings) => {
                state.apply(&settings).map_err(engine)?;
                Ok(PartitionReply::Done)
            }
            PartitionOp::Stats => Ok(PartitionReply::Stats {
                size_bytes: log.size_bytes(),
                log_start_offset: log.log_start_offset().0,
                log_end_offset: log.log_end_offset().0,
                high_watermark: state.high_watermark().0,
                bytes_in: state.bytes_in.get(),
                bytes_out: state.bytes_out.get(),
                requests: state.requests.get(),
                busy_us: state.busy_ns.get() / 1000,
            }),
            PartitionOp::Group(call) => {
                if !self.groups.is_loaded(partition.partition) {
                    return Err((code::COORDINATOR_LOAD_IN_PROGRESS, None));
                }
                self.group(&state, partition.partition, *call)
                    .await
                    .map(|answer| PartitionReply::Group(Box::new(answer)))
                    .map_err(|c| (c, None))
            }
            PartitionOp::Txn(call) => {
                if !self.txns.is_loaded(partition.partition) {
                    return Err((code::COORDINATOR_LOAD_IN_PROGRESS, None));
                }
                Ok(PartitionReply::Txn(Box::new(self.txn(&state, partition.partition, *call).await)))
            }
            PartitionOp::WriteMarker { producer_id, epoch, coordinator_epoch, commit } => {
                let marker = (producer_id, epoch, coordinator_epoch, commit);
                self.write_marker(partition, &state, marker).await.map_err(|c| (c, None))?;
                Ok(PartitionReply::Done)
            }
            PartitionOp::Producers => Ok(PartitionReply::Producers(state.producers.borrow().describe())),
            PartitionOp::Open { .. } | PartitionOp::Remove { .. } | PartitionOp::Release => {
                unreachable!("handled above")
            }
        }
    }
}

/// Runs a coordinator's `load` of `partition` (its groups, its transactional ids)
/// while this shard leads it through `log`: first after `delay`, then again with
/// backoff until `load` says it succeeded or the leadership (or the log) is gone.
/// `load` gets the leader epoch it loads in.
async fn load_while_leading<F, Fut>(
    shard: Rc<Shard>,
    partition: TopicPartition,
    log: Rc<skein_engine::Log<DmaStorage>>,
    delay: Duration,
    load: F,
) where
    F: Fn(Rc<Shard>, TopicPartition, Rc<skein_engine::Log<DmaStorage>>, i32) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut backoff = Duration::from_millis(200);
    glommio::timer::sleep(delay).await;
    loop {
        let leader_epoch = shard.partition(&partition).and_then(|p| {
            let replica = p.replica_state.borrow();
            (Rc::ptr_eq(&p.log, &log) && replica.role() == replication::Role::Leader).then(|| replica.leader_epoch().0)
        });
        let Some(epoch) = leader_epoch else { return };
        if load(shard.clone(), partition.clone(), log.clone(), epoch).await {
            return;
        }
        glommio::timer::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

/// Counts a parked fetch wait for as long as it lives, however it ends (answered,
/// timed out, or dropped when its request completed elsewhere).
struct Parked<'a>(&'a Cell<u64>);

impl<'a> Parked<'a> {
    fn new(gauge: &'a Cell<u64>) -> Parked<'a> {
        gauge.set(gauge.get() + 1);
        Parked(gauge)
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    skein_engine::log::now_ms()
}

/// Runs `future`, adding the time spent inside its polls to `spent` (ns): the CPU it
/// took, without the time it waited.
async fn poll_timed<F: std::future::Future>(future: F, spent: &Cell<u64>) -> F::Output {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        let started = std::time::Instant::now();
        let poll = future.as_mut().poll(cx);
        spent.set(spent.get() + started.elapsed().as_nanos() as u64);
        poll
    })
    .await
}
