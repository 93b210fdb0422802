//! One shard's broker state: its partitions (log plus producer state), the metadata
//! it reads, and the routes to the other shards.
//!
//! Every partition operation goes through `Shard::call`: executed here when this
//! shard owns the partition, otherwise sent to the owner over a bounded cross-shard
//! channel (record bytes travel as `Bytes`, not copied) and answered on a oneshot.
//! A request over many partitions goes through `Shard::call_many` (`many.rs`): one
//! message per other shard carries all of that shard's operations, and a long poll's
//! waits go the same way (`Shard::wait_any`). The owner runs each incoming operation
//! or batch as its own task, in arrival order, so operations from one connection to
//! one partition keep their order.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use futures_channel::oneshot;
use router::Router;
use skein_control::errors::code;
use skein_control::metadata::controller::{Controller, ControllerReply, ControllerRequest};
use skein_control::metadata::{Assignment, MetadataImage, Refusal};
use skein_engine::io::dma::DmaStorage;
use skein_engine::{LeaderEpoch, LogManager, Offset, TopicPartition};
use skein_replication as replication;
use skein_replication::producer::ProducerStates;

use crate::metrics::ShardMetrics;

mod brokers;
use skein_coordinator::hosted::assign;
pub use skein_coordinator::hosted::Partition;
mod coordinators;
mod execute;
mod inbox;
mod isr;
mod many;
mod opening;
pub mod ops;
mod produce;
pub mod quotas;
pub mod router;
mod security;
pub use brokers::BrokerAddress;
pub(crate) use execute::Parked;
pub use inbox::serve_peer;
pub use many::Wait;
pub use ops::{
    Fetch, OpResult, PartitionError, PartitionOp, PartitionReply, Reader, ReplicationGauges, ShardMessage, ShardOp,
};
pub use security::ShardSecurity;

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
    pub quota_ledger: Arc<skein_control::quota::Ledger>,
    /// The inter-broker listener's advertised address (registered as the broker's).
    pub advertised_host: String,
    pub advertised_port: u16,
    /// The node's listeners (`listeners`, `advertised.listeners`).
    pub listeners: Vec<skein_control::security::ListenerConfig>,
    /// Each shard a broker of its own to clients on one listener (`virtual_brokers`).
    pub virtual_brokers: Option<skein_control::virtual_brokers::VirtualBrokers>,
    /// The listener brokers reach each other on (`inter.broker.listener.name`).
    pub inter_broker_listener: String,
    /// TLS and SASL settings.
    pub security: Arc<skein_control::security::Security>,
    /// The controller quorum's voters with their addresses (none for a single node).
    pub controller_voters: Vec<(i32, std::net::SocketAddr)>,
    /// This node as a member of the controller quorum would be recorded (its
    /// controller endpoint and directory id); none for a broker-only node.
    pub controller_member: Option<skein_control::metadata::QuorumMember>,
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
    /// Kafka's `telemetry.max.bytes` (`telemetry`).
    pub telemetry_max_bytes: i32,
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
    /// The node's log directories, shared by every shard: where each partition is, and
    /// whether each has room for appends (`skein_engine::space`: logged once, exported
    /// as `skein_log_dir_full`, reported to the controller in broker heartbeats).
    pub log_dirs: Arc<skein_engine::log_dirs::LogDirs>,
    /// Each shard's home log directory, where it creates partitions.
    pub log_dir_homes: Vec<usize>,
}

/// What a shard keeps of its clients between their requests: sessions and telemetry
/// instances, each bounded by its own limit.
pub struct Clients {
    /// Fetch sessions (KIP-227) of this shard's connections.
    pub fetch_sessions: RefCell<crate::fetch_sessions::FetchSessions>,
    /// Share sessions (KIP-932) of this shard's connections.
    pub share_sessions: RefCell<skein_coordinator::share::sessions::ShareSessions>,
    /// Client telemetry instances and their pushed series (`telemetry`).
    pub telemetry: RefCell<crate::telemetry::Telemetry>,
}

/// A shard as the control plane sees it (`metadata::host::Host`, in `control.rs`).
#[derive(Clone)]
pub struct ShardHost(pub Rc<Shard>);

impl NodeSettings {
    /// This node as the controller decides for it.
    pub fn local(&self) -> skein_control::metadata::decide::Local {
        skein_control::metadata::decide::Local::new(self.node_id, self.broker, self.shards, &self.topic_defaults)
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
    /// Looked up for every partition of every request: hashed with FxHash, not
    /// SipHash (1% of the broker at 10,000 msg/s); its keys are topics an authorized
    /// client created, not input an attacker picks per request.
    partitions: RefCell<fxhash::FxHashMap<TopicPartition, Rc<Partition>>>,
    /// Partitions being opened in the background, which operations wait for.
    openings: opening::Openings,
    pub(crate) router: Router,
    pub metrics: ShardMetrics,
    /// Request bytes read by this shard's connections and not yet answered.
    pub buffered_bytes: Cell<usize>,
    /// Response bytes of this shard's connections not yet written (`budget.rs`).
    pub responses: Rc<crate::budget::ShardResponses>,
    /// The group and transaction coordinators' state (`coordinator`).
    pub coordinators: skein_coordinator::serve::Coordinators,
    /// What this shard keeps of its clients between their requests.
    pub clients: Clients,
    /// This shard's replication quotas (`throttle.rs`).
    pub throttles: crate::throttle::ReplicationThrottles,
    /// This shard's client quota buckets (`quota::manager`).
    pub quotas: skein_control::quota::ShardQuotas,
    /// This shard's copies of the node's security state (`security.rs`).
    pub security: ShardSecurity,
    /// Set when the shard is stopping: connections answer what they read, then close.
    closing: Closing,
}

/// A shard's stop signal: a flag, and the event its waiters listen on.
#[derive(Default)]
struct Closing {
    set: Cell<bool>,
    event: event_listener::Event,
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
            .with_log_dirs(settings.log_dirs.clone(), settings.log_dir_homes.get(id).copied().unwrap_or(0))
            .with_group_commit(settings.group_commit_max_delay)
            .with_write_shape(settings.write_shape);
        let session_slots = settings.fetch_session_cache_slots.div_ceil(settings.shards.max(1));
        let share_slots = skein_coordinator::share::sessions::SESSIONS_PER_NODE_MAX.div_ceil(settings.shards.max(1));
        let security = ShardSecurity::new(&settings, &image);
        if id == 0 {
            skein_control::broker_configs::install_cordoned(&image, settings.node_id, &settings.log_dirs);
        }
        let shard = Shard {
            id,
            settings,
            image: RefCell::new(image),
            controller,
            producer_ids: RefCell::new(0..0),
            logs,
            partitions: RefCell::default(),
            openings: opening::Openings::default(),
            router,
            metrics: ShardMetrics::default(),
            buffered_bytes: Cell::new(0),
            responses: Rc::new(crate::budget::ShardResponses::default()),
            coordinators: Default::default(),
            clients: Clients {
                fetch_sessions: RefCell::new(crate::fetch_sessions::FetchSessions::new(session_slots, id)),
                share_sessions: RefCell::new(skein_coordinator::share::sessions::ShareSessions::new(share_slots)),
                telemetry: Default::default(),
            },
            throttles: crate::throttle::ReplicationThrottles::default(),
            quotas: Default::default(),
            security,
            closing: Closing::default(),
        };
        let groups = &shard.coordinators.groups;
        let settings = &shard.settings;
        groups.initial_rebalance_delay.set(Duration::from_millis(settings.group_initial_rebalance_delay_ms));
        groups.max_size.set(settings.group_max_size);
        groups.offsets_retention.set(Duration::from_secs(settings.offsets_retention_minutes.saturating_mul(60)));
        groups.consumer_settings.set(skein_coordinator::group::consumer::ConsumerSettings {
            heartbeat_interval: Duration::from_millis(settings.group_consumer_heartbeat_interval_ms),
            session_timeout: Duration::from_millis(settings.group_consumer_session_timeout_ms),
            max_size: settings.group_consumer_max_size,
        });
        shard.coordinators.txns.settings.set(skein_coordinator::txn::TxnSettings {
            max_timeout_ms: settings.transaction_max_timeout_ms,
            id_expiration_ms: settings.transactional_id_expiration_ms,
        });
        shard
    }

    /// Replication gauges over this shard's partitions: (partitions it leads with
    /// fewer in-sync replicas than replicas, records its leaders hold above their
    /// high watermark, records its followers are behind their leaders).
    pub fn replication_gauges(&self) -> ReplicationGauges {
        let mut gauges = ReplicationGauges::default();
        let now = skein_engine::time::now_ms();
        for state in self.partitions.borrow().values() {
            let replica = state.replica();
            if replica.role() == replication::Role::Leader {
                gauges.under_replicated += u64::from(replica.isr().len() < replica.replicas().len());
                gauges.high_watermark_lag += (state.log().log_end_offset().0 - replica.high_watermark().0).max(0);
                gauges.follower_lag_ms = gauges.follower_lag_ms.max(replica.max_follower_lag_ms(now));
            } else {
                gauges.follower_lag += state.follower_lag.get();
            }
        }
        gauges
    }

    /// Stops hosting this shard's partitions in log directories that failed: their
    /// requests answer KAFKA_STORAGE_ERROR from now on (`execute`), and the broker's
    /// heartbeats take them out of their ISRs.
    pub fn drop_offline_partitions(&self) {
        if self.settings.log_dirs.failed().is_empty() {
            return;
        }
        for partition in self.logs.forget_offline() {
            self.partitions.borrow_mut().remove(&partition);
            tracing::warn!(target: "skein::net", partition = %partition, "partition offline: its log directory failed");
        }
    }

    /// The metadata controller, on shard 0.
    pub fn controller(&self) -> Option<&Controller> {
        self.controller.as_ref()
    }

    /// Stops this shard's connections reading requests; each closes once it has
    /// answered what it read.
    pub fn close_connections(&self) {
        self.closing.set.set(true);
        self.closing.event.notify(usize::MAX);
    }

    /// Resolves once the shard is stopping.
    pub async fn closing(&self) {
        loop {
            if self.closing.set.get() {
                return;
            }
            let listener = self.closing.event.listen();
            if self.closing.set.get() {
                return;
            }
            listener.await;
        }
    }

    /// This shard's current metadata image: no lock, no other shard involved.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.borrow().clone()
    }

    /// The broker-level topic defaults this node applies now: its static ones under
    /// the dynamic broker configs (`broker_configs::topic_defaults`).
    pub fn topic_defaults(&self) -> BTreeMap<String, String> {
        skein_control::broker_configs::topic_defaults(
            &self.image(),
            self.settings.node_id,
            &self.settings.topic_defaults,
        )
    }

    /// `topic_defaults` by where each comes from, most specific first.
    pub fn topic_default_layers(&self) -> Vec<(skein_control::configs::ConfigSource, BTreeMap<String, String>)> {
        skein_control::broker_configs::topic_default_layers(
            &self.image(),
            self.settings.node_id,
            &self.settings.topic_defaults,
        )
    }

    /// Installs a published image unless a newer one is already here.
    pub fn install(&self, image: Arc<MetadataImage>) {
        let mut current = self.image.borrow_mut();
        if image.version > current.version {
            self.security.install(&self.settings, &current, &image);
            if self.id == 0 {
                let node = self.settings.node_id;
                let limit = |name| image.broker_config(node, name).and_then(|(v, _)| v.trim().parse::<usize>().ok());
                self.settings.connections.apply(limit("max.connections"), limit("max.connections.per.ip"));
                skein_control::broker_configs::install_cordoned(&image, node, &self.settings.log_dirs);
            }
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
            return controller.handle(&ShardHost(self.clone()), request).await;
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
            let block = self.control(ControllerRequest::ProducerIds).await?.into_producer_ids()?;
            let mut ids = self.producer_ids.borrow_mut();
            // Another task may have refilled meanwhile: keep the fuller block.
            if ids.is_empty() {
                *ids = block;
            }
        }
    }

    pub fn partition(&self, partition: &TopicPartition) -> Option<Rc<Partition>> {
        self.partitions.borrow().get(partition).cloned()
    }

    /// Calls `f` with each partition this shard hosts (without cloning the list).
    pub fn for_each_hosted(&self, mut f: impl FnMut(&TopicPartition, &Rc<Partition>)) {
        for (partition, state) in self.partitions.borrow().iter() {
            f(partition, state);
        }
    }

    /// How many partitions this shard hosts (without listing them).
    pub fn hosted_count(&self) -> usize {
        self.partitions.borrow().len()
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
            .filter(|(p, _)| p.topic != skein_coordinator::txn::TRANSACTION_TOPIC)
            .map(|(_, state)| state.clone())
            .collect();
        for state in partitions {
            state.snapshot_at_end().await;
        }
    }

    /// Forgets producers silent for `producer.id.expiration.ms`; returns how many.
    pub fn expire_producers(&self, now_ms: i64) -> usize {
        let expiration = self.settings.producer_id_expiration_ms;
        self.partitions.borrow().values().map(|state| state.expire_producers(now_ms, expiration)).sum()
    }

    /// Messages other shards sent to `shard` that it has not taken yet.
    pub fn cross_shard_queued(&self, shard: usize) -> u64 {
        self.router.queued(shard)
    }

    /// Runs `op` on the shard that owns `partition`.
    pub async fn call<O: ShardOp>(
        self: &Rc<Self>,
        partition: TopicPartition,
        op: O,
    ) -> Result<O::Reply, PartitionError> {
        ops::typed::<O>(self.route(partition, op.into_message()).await)
    }

    /// Runs `op` on shard `owner`.
    pub async fn call_on<O: ShardOp>(
        self: &Rc<Self>,
        owner: usize,
        partition: TopicPartition,
        op: O,
    ) -> Result<O::Reply, PartitionError> {
        ops::typed::<O>(self.route_to(owner, partition, op.into_message()).await)
    }

    /// Runs `op` on this shard, which owns `partition`, uncounted (startup).
    pub async fn call_here<O: ShardOp>(
        self: &Rc<Self>,
        partition: &TopicPartition,
        op: O,
    ) -> Result<O::Reply, PartitionError> {
        ops::typed::<O>(self.execute(partition, op.into_message()).await)
    }

    async fn route(self: &Rc<Self>, partition: TopicPartition, op: PartitionOp) -> OpResult {
        let owner = self.owner(&self.image(), &partition)?;
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

    async fn route_to(self: &Rc<Self>, owner: usize, partition: TopicPartition, op: PartitionOp) -> OpResult {
        let api = op.api_key();
        let result = if owner == self.id {
            // Boxed: the operation's future is large (every partition operation's
            // states), and callers hold many of these in vectors (a fetch's or a
            // produce's partitions) that move them, each move a copy of its size.
            Box::pin(self.execute(&partition, op)).await
        } else {
            self.metrics.cross_shard_messages.set(self.metrics.cross_shard_messages.get() + 1);
            // What virtual brokers take off the cross-shard route: clients' data.
            if matches!(op, PartitionOp::Produce(_) | PartitionOp::Fetch(Fetch { reader: Reader::Consumer { .. }, .. }))
            {
                let client = &self.metrics.cross_shard_client_messages;
                client.set(client.get() + 1);
            }
            let (reply, answer) = oneshot::channel();
            if self
                .router
                .send(owner, ShardMessage::Partition { partition, op, reply, sent: std::time::Instant::now() })
                .await
                .is_err()
            {
                Err(many::unavailable("shard unavailable"))
            } else {
                answer.await.unwrap_or_else(|_| Err(many::unavailable("shard dropped the request")))
            }
        };
        // Partition-level errors, counted by the API that caused them (`/metrics`).
        if let (Err(_), Some(api)) = (&result, api) {
            self.metrics.count_error(api);
        }
        result
    }
}
