//! Node configuration: flags, `SKEIN_`-prefixed environment variables and an optional
//! TOML file (`--config`), validated at start with clear errors. Precedence: flag or
//! environment variable, then the file, then the default.
//!
//! The file mirrors the flags, with `_` for `-`, plus a `[topic_defaults]` table of
//! Kafka topic configs:
//!
//! ```toml
//! listener = "127.0.0.1:9092"
//! data_dir = "/var/lib/skein"
//! cores = "2-5"
//! [topic_defaults]
//! "retention.ms" = "86400000"
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use serde::Deserialize;

#[derive(Args, Debug, Clone, Default)]
pub struct StartArgs {
    /// TOML config file.
    #[arg(long, env = "SKEIN_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address of a PLAINTEXT listener for Kafka clients, a shorthand beside
    /// `--listeners` [default: 127.0.0.1:9092 when `--listeners` is not given].
    #[arg(long, env = "SKEIN_LISTENER")]
    pub listener: Option<String>,
    /// Address advertised for the PLAINTEXT listener [default: its own].
    #[arg(long, env = "SKEIN_ADVERTISED_LISTENER")]
    pub advertised_listener: Option<String>,
    /// Address of the admin HTTP endpoint (/metrics, /v1/placement, /v1/health)
    /// [default: 127.0.0.1:9644]; `off` disables it.
    #[arg(long, env = "SKEIN_ADMIN_LISTENER")]
    pub admin_listener: Option<String>,
    /// Data directory (partition logs in Kafka's layout) [default: ./skein-data].
    #[arg(long, env = "SKEIN_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Log directories for partitions, comma-separated (Kafka's `log.dirs`, JBOD: one
    /// per drive); the data directory keeps the node's metadata [default: the data
    /// directory].
    #[arg(long, env = "SKEIN_LOG_DIRS", value_delimiter = ',')]
    pub log_dirs: Vec<PathBuf>,
    /// Cores to run shards on: `all`, a count (`4`), or a range (`2-5`) [default: all].
    #[arg(long, env = "SKEIN_CORES")]
    pub cores: Option<String>,
    /// Batch cache per shard, in MiB [default: 256].
    #[arg(long, env = "SKEIN_CACHE_MB_PER_SHARD")]
    pub cache_mb_per_shard: Option<usize>,
    /// Milliseconds between housekeeping passes (flush.ms, retention, compaction,
    /// checkpoints) [default: 1000].
    #[arg(long, env = "SKEIN_HOUSEKEEPING_INTERVAL_MS")]
    pub housekeeping_interval_ms: Option<u64>,
    /// This node's id [default: 1].
    #[arg(long, env = "SKEIN_NODE_ID")]
    pub node_id: Option<i32>,
    /// Kafka's `auto.create.topics.enable` [default: true].
    #[arg(long, env = "SKEIN_AUTO_CREATE_TOPICS")]
    pub auto_create_topics: Option<bool>,
    /// Kafka's `num.partitions`: partitions of auto-created topics [default: 1].
    #[arg(long, env = "SKEIN_NUM_PARTITIONS")]
    pub num_partitions: Option<i32>,
    /// Kafka's `socket.request.max.bytes` [default: 104857600].
    #[arg(long, env = "SKEIN_SOCKET_REQUEST_MAX_BYTES")]
    pub socket_request_max_bytes: Option<usize>,
    /// Kafka's `connections.max.idle.ms`: a connection that sends nothing for this
    /// long is closed [default: 600000; 0: never].
    #[arg(long, env = "SKEIN_CONNECTIONS_MAX_IDLE_MS")]
    pub connections_max_idle_ms: Option<u64>,
    /// Kafka's `telemetry.max.bytes`: the largest metrics a client may push at once
    /// (KIP-714) [default: 1048576].
    #[arg(long, env = "SKEIN_TELEMETRY_MAX_BYTES")]
    pub telemetry_max_bytes: Option<i32>,
    /// Kafka's `group.initial.rebalance.delay.ms` [default: 3000].
    #[arg(long, env = "SKEIN_GROUP_INITIAL_REBALANCE_DELAY_MS")]
    pub group_initial_rebalance_delay_ms: Option<u64>,
    /// Kafka's `group.consumer.heartbeat.interval.ms` (KIP-848 groups) [default: 5000].
    #[arg(long, env = "SKEIN_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS")]
    pub group_consumer_heartbeat_interval_ms: Option<u64>,
    /// Kafka's `group.consumer.session.timeout.ms` (KIP-848 groups) [default: 45000].
    #[arg(long, env = "SKEIN_GROUP_CONSUMER_SESSION_TIMEOUT_MS")]
    pub group_consumer_session_timeout_ms: Option<u64>,
    /// Kafka's `group.max.size` [default: 2147483647].
    #[arg(long, env = "SKEIN_GROUP_MAX_SIZE")]
    pub group_max_size: Option<usize>,
    /// Kafka's `group.consumer.max.size`: members of a consumer-protocol (KIP-848)
    /// group [default: 2147483647].
    #[arg(long, env = "SKEIN_GROUP_CONSUMER_MAX_SIZE")]
    pub group_consumer_max_size: Option<usize>,
    /// Kafka's `offsets.retention.minutes`: offsets of groups empty this long are
    /// deleted [default: 10080].
    #[arg(long, env = "SKEIN_OFFSETS_RETENTION_MINUTES")]
    pub offsets_retention_minutes: Option<u64>,
    /// Kafka's `producer.id.expiration.ms`: an idempotent producer silent this long
    /// is forgotten by each partition [default: 86400000].
    #[arg(long, env = "SKEIN_PRODUCER_ID_EXPIRATION_MS")]
    pub producer_id_expiration_ms: Option<u64>,
    /// Kafka's `producer.id.expiration.check.interval.ms`: how often each partition
    /// looks for producers to forget; each look walks every partition
    /// [default: 600000].
    #[arg(long, env = "SKEIN_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS")]
    pub producer_id_expiration_check_interval_ms: Option<u64>,
    /// Kafka's `transaction.max.timeout.ms`: the longest `transaction.timeout.ms` a
    /// transactional producer may ask for [default: 900000].
    #[arg(long, env = "SKEIN_TRANSACTION_MAX_TIMEOUT_MS")]
    pub transaction_max_timeout_ms: Option<u32>,
    /// Kafka's `transactional.id.expiration.ms`: a transactional id idle this long
    /// is forgotten by its coordinator [default: 604800000].
    #[arg(long, env = "SKEIN_TRANSACTIONAL_ID_EXPIRATION_MS")]
    pub transactional_id_expiration_ms: Option<u64>,
    /// Kafka's `max.incremental.fetch.session.cache.slots`: fetch sessions (KIP-227)
    /// kept by the node; 0 turns sessions off [default: 1000].
    #[arg(long, env = "SKEIN_MAX_INCREMENTAL_FETCH_SESSION_CACHE_SLOTS")]
    pub max_incremental_fetch_session_cache_slots: Option<usize>,
    /// Adaptive group commit: the longest, in microseconds, an idle partition holds a
    /// small write back to let more appends share it. The window opens only when the
    /// partition's appends come faster than this; 0 never holds a write back
    /// [default: 0, at most 100000].
    #[arg(long, env = "SKEIN_GROUP_COMMIT_MAX_DELAY_US")]
    pub group_commit_max_delay_us: Option<u64>,
    /// Reactor stall detection: a task that holds its shard this many milliseconds past
    /// glommio's preemption budget (100 ms) is a stall, counted in
    /// `skein_reactor_stalls_total` and logged with its backtrace (at most once every
    /// 10 s per shard); 0 turns detection off [default: 25].
    #[arg(long, env = "SKEIN_STALL_THRESHOLD_MS")]
    pub stall_threshold_ms: Option<u64>,
    /// The background balancer: measures each shard's busy share and each partition's
    /// load every `--auto-balance-interval-ms`, and moves partitions between shards
    /// (one per round, after two rounds outside the band in a row) [default: false].
    /// Virtual brokers: each shard also listens on `BASE_PORT + shard` (the first
    /// listener's host and security) and is advertised to that listener's clients as a
    /// broker of its own, leading the partitions it owns, so clients send each request
    /// to the core that owns its partitions. In a cluster, each node registers its own
    /// and every node lists them all [default: off].
    #[arg(long, env = "SKEIN_VIRTUAL_BROKERS", value_name = "BASE_PORT")]
    pub virtual_brokers: Option<u16>,
    #[arg(long, env = "SKEIN_AUTO_BALANCE", num_args = 0..=1, default_missing_value = "true")]
    pub auto_balance: Option<bool>,
    /// How long the background balancer measures each round [default: 10000].
    #[arg(long, env = "SKEIN_AUTO_BALANCE_INTERVAL_MS")]
    pub auto_balance_interval_ms: Option<u64>,
    /// How far apart, as a share of a core, the busiest and idlest shards may be before
    /// the background balancer moves a partition [default: 0.15].
    #[arg(long, env = "SKEIN_AUTO_BALANCE_BAND")]
    pub auto_balance_band: Option<f64>,
    /// Kafka's `max.connections`: connections the node accepts at once [default:
    /// 2147483647].
    #[arg(long, env = "SKEIN_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Kafka's `max.connections.per.ip` [default: 2147483647].
    #[arg(long, env = "SKEIN_MAX_CONNECTIONS_PER_IP")]
    pub max_connections_per_ip: Option<usize>,
    /// The controller quorum's initial voters, Kafka's `controller.quorum.voters`:
    /// `id@host:port,...`. A node among them votes; a broker-only node (`--roles
    /// broker`) follows their log; a controller not among them waits to be added
    /// with `kafka-metadata-quorum add-controller` (KIP-853), and must be given the
    /// list the quorum started with. Without it the node is a quorum of one
    /// [default: none, a single node].
    #[arg(long, env = "SKEIN_CONTROLLER_VOTERS")]
    pub controller_voters: Option<String>,
    /// The cluster id (Kafka's `kafka-storage format --cluster-id`), for a node whose
    /// data directory is new: 22 characters of URL-safe base64. A controller joining
    /// a quorum whose voters changed gives it, since the id is otherwise derived from
    /// --controller-voters; a data directory of another cluster is refused [default:
    /// derived from --controller-voters, random for a single node].
    #[arg(long, env = "SKEIN_CLUSTER_ID")]
    pub cluster_id: Option<String>,
    /// Address the controller quorum listens on [default: this node's address in
    /// --controller-voters].
    #[arg(long, env = "SKEIN_CONTROLLER_LISTENER")]
    pub controller_listener: Option<String>,
    /// KIP-853's `kafka-storage format --initial-controllers`: the first voters with
    /// their directory ids, `id@host:port:directory-id,...`; this node's directory id
    /// is written to a new data directory's meta.properties [default: none].
    #[arg(long, env = "SKEIN_INITIAL_CONTROLLERS")]
    pub initial_controllers: Option<String>,
    /// KIP-853's `kafka-storage format --standalone`: this node is the quorum's first
    /// and only voter, at --controller-listener; more controllers join it with
    /// `kafka-metadata-quorum add-controller`.
    #[arg(long, env = "SKEIN_STANDALONE")]
    pub standalone: bool,
    /// Kafka's `controller.quorum.bootstrap.servers`: controller listeners to ask for
    /// the quorum's voters and cluster id, `host:port,...`, instead of naming the
    /// voters (a broker, or a controller that joins later) [default: none].
    #[arg(long, env = "SKEIN_CONTROLLER_QUORUM_BOOTSTRAP_SERVERS")]
    pub controller_quorum_bootstrap_servers: Option<String>,
    /// Kafka's `process.roles`: `broker`, `controller` or `broker,controller`. A
    /// controller is one of --controller-voters or joins them later; a broker-only
    /// node is not, and
    /// follows the quorum's log; a controller-only node holds no partitions [default:
    /// broker,controller for a voter, broker otherwise].
    #[arg(long, env = "SKEIN_ROLES")]
    pub roles: Option<String>,
    /// Kafka's `broker.rack`: this broker's rack. Replicas of a partition are placed on
    /// as many racks as they can be [default: none].
    #[arg(long, env = "SKEIN_RACK")]
    pub rack: Option<String>,
    /// Kafka's `replica.selector.class`: `org.apache.kafka.common.replica.RackAwareReplicaSelector`
    /// sends consumers that name their rack (`client.rack`) to a replica on it
    /// (KIP-392) [default: none, consumers read from leaders].
    #[arg(long, env = "SKEIN_REPLICA_SELECTOR_CLASS")]
    pub replica_selector_class: Option<String>,
    /// Kafka's `replica.lag.time.max.ms`: a follower not caught up for this long leaves
    /// the ISR [default: 30000].
    #[arg(long, env = "SKEIN_REPLICA_LAG_TIME_MAX_MS")]
    pub replica_lag_time_max_ms: Option<u64>,
    /// Kafka's `replica.high.watermark.checkpoint.interval.ms`: how often the high
    /// watermarks are written to `replication-offset-checkpoint` [default: 5000].
    #[arg(long, env = "SKEIN_REPLICA_HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS")]
    pub replica_high_watermark_checkpoint_interval_ms: Option<u64>,
    /// Kafka's `broker.session.timeout.ms`: a broker the active controller has not
    /// heard from for this long is fenced and its leaderships move [default: 9000].
    #[arg(long, env = "SKEIN_BROKER_SESSION_TIMEOUT_MS")]
    pub broker_session_timeout_ms: Option<u64>,
    /// Kafka's `broker.heartbeat.interval.ms` [default: 2000].
    #[arg(long, env = "SKEIN_BROKER_HEARTBEAT_INTERVAL_MS")]
    pub broker_heartbeat_interval_ms: Option<u64>,
    /// Kafka's `auto.leader.rebalance.enable`: the active controller moves leadership
    /// back to preferred replicas when leaders are out of balance [default: true].
    #[arg(long, env = "SKEIN_AUTO_LEADER_REBALANCE_ENABLE")]
    pub auto_leader_rebalance_enable: Option<bool>,
    /// Kafka's `leader.imbalance.check.interval.seconds` [default: 300].
    #[arg(long, env = "SKEIN_LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS")]
    pub leader_imbalance_check_interval_seconds: Option<u64>,
    /// Kafka's `log.cleaner.dedupe.buffer.size`: the log cleaner's offset map memory
    /// for the whole node, shared out among the shards [default: 134217728].
    #[arg(long, env = "SKEIN_LOG_CLEANER_DEDUPE_BUFFER_SIZE")]
    pub log_cleaner_dedupe_buffer_size: Option<usize>,
    /// Kafka's `log.cleaner.io.buffer.size`: bytes the cleaner reads, and writes, per
    /// step [default: 524288].
    #[arg(long, env = "SKEIN_LOG_CLEANER_IO_BUFFER_SIZE")]
    pub log_cleaner_io_buffer_size: Option<usize>,
    /// Kafka's `log.cleaner.io.max.bytes.per.second`: the cleaner's reads plus writes,
    /// per shard [default: unlimited].
    #[arg(long, env = "SKEIN_LOG_CLEANER_IO_MAX_BYTES_PER_SECOND")]
    pub log_cleaner_io_max_bytes_per_second: Option<f64>,
    /// Kafka's `log.cleaner.backoff.ms`: how long the cleaner sleeps when no log is
    /// due [default: 15000].
    #[arg(long, env = "SKEIN_LOG_CLEANER_BACKOFF_MS")]
    pub log_cleaner_backoff_ms: Option<u64>,
    /// The scrubber's read rate per shard: it reads every stored batch back and
    /// checks its CRC, which reads that serve fetches do not; 0 turns it off
    /// [default: 8388608].
    #[arg(long, env = "SKEIN_LOG_SCRUB_BYTES_PER_SECOND")]
    pub log_scrub_bytes_per_second: Option<u64>,
    /// The least time from the start of one scrubber pass to the start of the next
    /// [default: 3600000].
    #[arg(long, env = "SKEIN_LOG_SCRUB_INTERVAL_MS")]
    pub log_scrub_interval_ms: Option<u64>,
    /// A default topic config, `name=value` with Kafka's names; repeatable.
    #[arg(long = "topic-config", value_name = "NAME=VALUE")]
    pub topic_configs: Vec<String>,
    /// The device profile `skein iotune` wrote: the appender's write size and depth,
    /// and a cap on the group commit window. Refused at start when it is not a valid
    /// profile [default: <data-dir>/iotune.json when present].
    #[arg(long, env = "SKEIN_IOTUNE_FILE")]
    pub iotune_file: Option<PathBuf>,
    #[command(flatten)]
    pub security: crate::security_config::SecurityArgs,
}

/// The TOML file's shape.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listener: Option<String>,
    advertised_listener: Option<String>,
    admin_listener: Option<String>,
    data_dir: Option<PathBuf>,
    log_dirs: Option<Vec<PathBuf>>,
    cores: Option<String>,
    cache_mb_per_shard: Option<usize>,
    housekeeping_interval_ms: Option<u64>,
    node_id: Option<i32>,
    auto_create_topics: Option<bool>,
    num_partitions: Option<i32>,
    socket_request_max_bytes: Option<usize>,
    connections_max_idle_ms: Option<u64>,
    telemetry_max_bytes: Option<i32>,
    group_initial_rebalance_delay_ms: Option<u64>,
    group_consumer_heartbeat_interval_ms: Option<u64>,
    group_consumer_session_timeout_ms: Option<u64>,
    group_max_size: Option<usize>,
    group_consumer_max_size: Option<usize>,
    offsets_retention_minutes: Option<u64>,
    producer_id_expiration_ms: Option<u64>,
    producer_id_expiration_check_interval_ms: Option<u64>,
    transaction_max_timeout_ms: Option<u32>,
    transactional_id_expiration_ms: Option<u64>,
    max_incremental_fetch_session_cache_slots: Option<usize>,
    group_commit_max_delay_us: Option<u64>,
    stall_threshold_ms: Option<u64>,
    virtual_brokers: Option<u16>,
    auto_balance: Option<bool>,
    auto_balance_interval_ms: Option<u64>,
    auto_balance_band: Option<f64>,
    max_connections: Option<usize>,
    max_connections_per_ip: Option<usize>,
    controller_voters: Option<String>,
    cluster_id: Option<String>,
    controller_listener: Option<String>,
    initial_controllers: Option<String>,
    standalone: Option<bool>,
    controller_quorum_bootstrap_servers: Option<String>,
    roles: Option<String>,
    rack: Option<String>,
    replica_selector_class: Option<String>,
    replica_lag_time_max_ms: Option<u64>,
    replica_high_watermark_checkpoint_interval_ms: Option<u64>,
    broker_session_timeout_ms: Option<u64>,
    broker_heartbeat_interval_ms: Option<u64>,
    auto_leader_rebalance_enable: Option<bool>,
    leader_imbalance_check_interval_seconds: Option<u64>,
    log_cleaner_dedupe_buffer_size: Option<usize>,
    log_cleaner_io_buffer_size: Option<usize>,
    log_cleaner_io_max_bytes_per_second: Option<f64>,
    log_cleaner_backoff_ms: Option<u64>,
    log_scrub_bytes_per_second: Option<u64>,
    log_scrub_interval_ms: Option<u64>,
    iotune_file: Option<PathBuf>,
    #[serde(default)]
    topic_defaults: BTreeMap<String, String>,
}

/// Validated node settings.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The listeners, the `--listener` shorthand's PLAINTEXT one first.
    pub listeners: Vec<skein_control::security::ListenerConfig>,
    /// Kafka's `inter.broker.listener.name`.
    pub inter_broker_listener: String,
    /// TLS and SASL settings, loaded.
    pub security: std::sync::Arc<skein_control::security::Security>,
    pub admin_listener: Option<SocketAddr>,
    pub data_dir: PathBuf,
    /// Where partitions live (never empty; `--log-dirs`, else the data directory).
    pub log_dirs: Vec<PathBuf>,
    pub cpus: Vec<usize>,
    pub cache_bytes_per_shard: usize,
    pub housekeeping_interval_ms: u64,
    pub node_id: i32,
    pub auto_create_topics: bool,
    pub num_partitions: i32,
    pub socket_request_max_bytes: usize,
    pub connections_max_idle_ms: u64,
    pub telemetry_max_bytes: i32,
    pub group_initial_rebalance_delay_ms: u64,
    pub group_consumer_heartbeat_interval_ms: u64,
    pub group_consumer_session_timeout_ms: u64,
    pub group_max_size: usize,
    pub group_consumer_max_size: usize,
    pub offsets_retention_minutes: u64,
    pub producer_id_expiration_ms: u64,
    pub producer_id_expiration_check_interval_ms: u64,
    pub transaction_max_timeout_ms: i32,
    pub transactional_id_expiration_ms: u64,
    pub max_incremental_fetch_session_cache_slots: usize,
    pub group_commit_max_delay_us: u64,
    /// Extra milliseconds past the preemption budget that make a stall; 0: off.
    pub stall_threshold_ms: u64,
    /// Each shard a broker of its own to the first listener's clients.
    pub virtual_brokers: Option<skein_control::virtual_brokers::VirtualBrokers>,
    /// The background balancer's round and band, when it runs (`--auto-balance`).
    pub auto_balance: Option<(std::time::Duration, f64)>,
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    /// The controller quorum's voters with their addresses; empty for a single node.
    pub controller_voters: Vec<(i32, SocketAddr)>,
    /// Where this node's controller listens, in a cluster.
    pub controller_listener: Option<SocketAddr>,
    /// Controllers to ask for the voters when none are named.
    pub controller_quorum_bootstrap_servers: Vec<SocketAddr>,
    /// This node's directory id, as `--initial-controllers` names it.
    pub directory_id: Option<String>,
    /// `--cluster-id`, checked.
    pub cluster_id: Option<String>,
    /// Kafka's `process.roles`.
    pub roles: crate::quorum_config::Roles,
    /// Kafka's `broker.rack`.
    pub rack: Option<String>,
    /// `replica.selector.class` is the rack-aware selector.
    pub rack_aware_reads: bool,
    pub replica_lag_time_max_ms: u64,
    pub replica_high_watermark_checkpoint_interval_ms: u64,
    pub broker_session_timeout_ms: u64,
    pub broker_heartbeat_interval_ms: u64,
    /// How often the active controller checks leader balance; `None`: never.
    pub leader_rebalance_every: Option<std::time::Duration>,
    /// The log cleaner's settings for the whole node (the dedupe buffer is shared out).
    pub cleaner: skein_engine::CleanerConfig,
    pub log_cleaner_backoff_ms: u64,
    /// The scrubber's read rate per shard (0: off) and least pass interval.
    pub log_scrub_bytes_per_second: u64,
    pub log_scrub_interval_ms: u64,
    pub topic_defaults: BTreeMap<String, String>,
    /// The appender's chunk size and writes in flight: the iotune profile's, else the
    /// engine's defaults.
    pub write_shape: skein_engine::WriteShape,
    /// The iotune profile applied, if any.
    pub iotune: Option<crate::iotune::Applied>,
}

impl NodeConfig {
    /// Logs the write shape the node's shards take (`NodeSettings::write_shape`), and
    /// where it came from.
    ///
    /// # Errors
    /// The shape out of bounds (checked when the profile was read, so not expected).
    pub fn announce_write_shape(&self) -> Result<(), String> {
        self.write_shape.validate().map_err(|e| e.to_string())?;
        let shape = self.write_shape;
        match &self.iotune {
            Some(applied) => tracing::info!(target: "skein", file = %applied.path.display(),
                append_chunk_bytes = shape.chunk_bytes, writes_in_flight = shape.writes_in_flight,
                group_commit_window_us = applied.recommended.group_commit_window_us,
                group_commit_max_delay_us = self.group_commit_max_delay_us, "iotune profile applied"),
            None => tracing::info!(target: "skein", append_chunk_bytes = shape.chunk_bytes,
                writes_in_flight = shape.writes_in_flight, group_commit_max_delay_us = self.group_commit_max_delay_us,
                "no iotune profile: default write shape"),
        }
        Ok(())
    }

    /// Merges flags, environment and file, and validates the result.
    ///
    /// # Errors
    /// A message naming the bad setting.
    pub fn load(args: StartArgs) -> Result<NodeConfig, String> {
        let (file, file_security): (FileConfig, crate::security_config::SecurityArgs) = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
                let invalid = |e: toml::de::Error| format!("invalid config file {}: {e}", path.display());
                // The security keys are read by their own struct; both refuse unknown keys.
                let mut table: toml::Table = toml::from_str(&text).map_err(invalid)?;
                let mut security = toml::Table::new();
                for key in crate::security_config::FILE_KEYS {
                    if let Some(value) = table.remove(*key) {
                        security.insert(key.to_string(), value);
                    }
                }
                (table.try_into().map_err(invalid)?, security.try_into().map_err(invalid)?)
            }
            None => Default::default(),
        };
        let listener = args.listener.or(file.listener);
        let advertised = args.advertised_listener.or(file.advertised_listener);
        let security_args = args.security.or(file_security);
        let admin_text = args.admin_listener.or(file.admin_listener).unwrap_or_else(|| "127.0.0.1:9644".into());
        let admin_listener = if admin_text == "off" {
            None
        } else {
            Some(
                admin_text
                    .parse()
                    .map_err(|_| format!("invalid admin listener {admin_text:?}: expected host:port or off"))?,
            )
        };
        let available = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cores = args.cores.or(file.cores).unwrap_or_else(|| "all".into());
        let cpus = parse_cores(&cores, available)?;
        let cache_mb = args.cache_mb_per_shard.or(file.cache_mb_per_shard).unwrap_or(256);
        if cache_mb == 0 {
            return Err("--cache-mb-per-shard must be at least 1".into());
        }
        let housekeeping_interval_ms = args.housekeeping_interval_ms.or(file.housekeeping_interval_ms).unwrap_or(1000);
        if housekeeping_interval_ms == 0 {
            return Err("--housekeeping-interval-ms must be at least 1".into());
        }
        let node_id = args.node_id.or(file.node_id).unwrap_or(1);
        if node_id < 0 {
            return Err(format!("invalid --node-id {node_id}: must be 0 or more"));
        }
        let num_partitions = args.num_partitions.or(file.num_partitions).unwrap_or(1);
        let auto_balance_band =
            args.auto_balance_band.or(file.auto_balance_band).unwrap_or(crate::balance::BALANCE_BAND);
        if !(0.0..=1.0).contains(&auto_balance_band) {
            return Err(format!("invalid --auto-balance-band {auto_balance_band}: a share of a core, from 0 to 1"));
        }
        let auto_balance_interval_ms =
            args.auto_balance_interval_ms.or(file.auto_balance_interval_ms).unwrap_or(10_000);
        if auto_balance_interval_ms < 100 {
            return Err(format!("invalid --auto-balance-interval-ms {auto_balance_interval_ms}: at least 100"));
        }
        let auto_balance = args
            .auto_balance
            .or(file.auto_balance)
            .unwrap_or(false)
            .then(|| (std::time::Duration::from_millis(auto_balance_interval_ms), auto_balance_band));
        let group_commit_max_delay_us = args.group_commit_max_delay_us.or(file.group_commit_max_delay_us).unwrap_or(0);
        if group_commit_max_delay_us > 100_000 {
            return Err(format!(
                "invalid --group-commit-max-delay-us {group_commit_max_delay_us}: at most 100000 (100 ms)"
            ));
        }
        if num_partitions < 1 {
            return Err(format!("invalid --num-partitions {num_partitions}: must be at least 1"));
        }
        let socket_request_max_bytes = args
            .socket_request_max_bytes
            .or(file.socket_request_max_bytes)
            .unwrap_or(skein_control::limits::SOCKET_REQUEST_MAX_BYTES_DEFAULT);
        if socket_request_max_bytes < 1024 || socket_request_max_bytes > i32::MAX as usize {
            return Err(format!(
                "invalid --socket-request-max-bytes {socket_request_max_bytes}: must be in [1024, 2147483647]"
            ));
        }
        let connections_max_idle_ms = args
            .connections_max_idle_ms
            .or(file.connections_max_idle_ms)
            .unwrap_or(skein_control::limits::CONNECTIONS_MAX_IDLE_MS_DEFAULT);
        let telemetry_max_bytes = args
            .telemetry_max_bytes
            .or(file.telemetry_max_bytes)
            .unwrap_or(skein_net::telemetry::TELEMETRY_MAX_BYTES_DEFAULT);
        if telemetry_max_bytes < 1 {
            return Err(format!("invalid --telemetry-max-bytes {telemetry_max_bytes}: must be at least 1"));
        }
        let mut topic_defaults = file.topic_defaults;
        for entry in &args.topic_configs {
            let (k, v) = entry
                .split_once('=')
                .ok_or_else(|| format!("invalid --topic-config {entry:?}: expected NAME=VALUE"))?;
            topic_defaults.insert(k.trim().to_string(), v.trim().to_string());
        }
        for (k, v) in &topic_defaults {
            skein_control::configs::validate_config(k, v).map_err(|e| format!("invalid topic default: {e}"))?;
        }
        let quorum = crate::quorum_config::resolve(
            node_id,
            crate::quorum_config::QuorumFlags {
                voters: args.controller_voters.or(file.controller_voters),
                initial_controllers: args.initial_controllers.or(file.initial_controllers),
                standalone: args.standalone || file.standalone.unwrap_or(false),
                bootstrap_servers: args
                    .controller_quorum_bootstrap_servers
                    .or(file.controller_quorum_bootstrap_servers),
                controller_listener: args.controller_listener.or(file.controller_listener),
                roles: args.roles.or(file.roles),
            },
        )?;
        let clustered = quorum.clustered();
        let crate::quorum_config::QuorumConfig {
            voters: controller_voters,
            bootstrap_servers: controller_quorum_bootstrap_servers,
            directory_id,
            controller_listener,
            roles,
        } = quorum;
        let rack = args.rack.or(file.rack);
        if rack.as_ref().is_some_and(|r| r.trim().is_empty() || r.len() > 255) {
            return Err("--rack must be 1 to 255 characters".into());
        }
        let rack_aware_reads = match args.replica_selector_class.or(file.replica_selector_class).as_deref() {
            None | Some("") | Some("org.apache.kafka.common.replica.LeaderSelector") => false,
            Some("org.apache.kafka.common.replica.RackAwareReplicaSelector") => true,
            Some(other) => {
                return Err(format!(
                    "--replica-selector-class {other} is not supported: use org.apache.kafka.common.replica.RackAwareReplicaSelector or LeaderSelector"
                ))
            }
        };
        let cluster_id = args.cluster_id.or(file.cluster_id);
        if let Some(id) = &cluster_id {
            let base64 = id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if id.len() != 22 || !base64 {
                return Err(format!("invalid --cluster-id {id:?}: expected 22 characters of URL-safe base64"));
            }
        }
        let broker_session_timeout_ms =
            args.broker_session_timeout_ms.or(file.broker_session_timeout_ms).unwrap_or(9000).max(1);
        let broker_heartbeat_interval_ms =
            args.broker_heartbeat_interval_ms.or(file.broker_heartbeat_interval_ms).unwrap_or(2000).max(1);
        if broker_heartbeat_interval_ms >= broker_session_timeout_ms {
            return Err(format!(
                "--broker-heartbeat-interval-ms ({broker_heartbeat_interval_ms}) must be below --broker-session-timeout-ms ({broker_session_timeout_ms})"
            ));
        }
        let io_max = args.log_cleaner_io_max_bytes_per_second.or(file.log_cleaner_io_max_bytes_per_second);
        if io_max.is_some_and(|rate| rate.is_nan() || rate <= 0.0) {
            return Err("log.cleaner.io.max.bytes.per.second must be positive".into());
        }
        let cleaner = skein_engine::CleanerConfig {
            dedupe_buffer_bytes: args
                .log_cleaner_dedupe_buffer_size
                .or(file.log_cleaner_dedupe_buffer_size)
                .unwrap_or(128 << 20),
            io_buffer_bytes: args.log_cleaner_io_buffer_size.or(file.log_cleaner_io_buffer_size).unwrap_or(512 << 10),
            io_max_bytes_per_second: io_max.unwrap_or(f64::INFINITY),
        };
        let data_dir = args.data_dir.or(file.data_dir).unwrap_or_else(|| PathBuf::from("./skein-data"));
        let log_dirs = log_dirs(
            if args.log_dirs.is_empty() { file.log_dirs.unwrap_or_default() } else { args.log_dirs },
            &data_dir,
        )?;
        let security = crate::security_config::resolve(security_args, listener, advertised, clustered, &data_dir)?;
        let iotune = crate::iotune::load_for_start(args.iotune_file.or(file.iotune_file).as_deref(), &data_dir)?;
        let write_shape =
            iotune.as_ref().map_or_else(Default::default, |applied| crate::iotune::write_shape(&applied.recommended));
        // The profile's window caps group commit when it is on, and never turns it on.
        let group_commit_max_delay_us = crate::iotune::group_commit_cap(group_commit_max_delay_us, iotune.as_ref());
        let virtual_brokers = match args.virtual_brokers.or(file.virtual_brokers) {
            None => None,
            Some(base) => Some(virtual_brokers(base, node_id, &cpus, &security.listeners)?),
        };
        Ok(NodeConfig {
            virtual_brokers,
            listeners: security.listeners,
            inter_broker_listener: security.inter_broker_listener,
            security: security.security,
            admin_listener,
            data_dir,
            log_dirs,
            cpus,
            cache_bytes_per_shard: cache_mb << 20,
            housekeeping_interval_ms,
            node_id,
            auto_create_topics: args.auto_create_topics.or(file.auto_create_topics).unwrap_or(true),
            num_partitions,
            socket_request_max_bytes,
            connections_max_idle_ms,
            telemetry_max_bytes,
            group_initial_rebalance_delay_ms: args
                .group_initial_rebalance_delay_ms
                .or(file.group_initial_rebalance_delay_ms)
                .unwrap_or(3000),
            group_consumer_heartbeat_interval_ms: args
                .group_consumer_heartbeat_interval_ms
                .or(file.group_consumer_heartbeat_interval_ms)
                .unwrap_or(5000)
                .max(1),
            group_consumer_session_timeout_ms: args
                .group_consumer_session_timeout_ms
                .or(file.group_consumer_session_timeout_ms)
                .unwrap_or(45000)
                .max(1),
            group_max_size: args.group_max_size.or(file.group_max_size).unwrap_or(i32::MAX as usize).max(1),
            group_consumer_max_size: args
                .group_consumer_max_size
                .or(file.group_consumer_max_size)
                .unwrap_or(i32::MAX as usize)
                .max(1),
            offsets_retention_minutes: args
                .offsets_retention_minutes
                .or(file.offsets_retention_minutes)
                .unwrap_or(10080),
            producer_id_expiration_ms: args
                .producer_id_expiration_ms
                .or(file.producer_id_expiration_ms)
                .unwrap_or(86_400_000)
                .min(i64::MAX as u64),
            producer_id_expiration_check_interval_ms: args
                .producer_id_expiration_check_interval_ms
                .or(file.producer_id_expiration_check_interval_ms)
                .unwrap_or(600_000)
                .max(1),
            transaction_max_timeout_ms: args
                .transaction_max_timeout_ms
                .or(file.transaction_max_timeout_ms)
                .unwrap_or(900_000)
                .clamp(1, i32::MAX as u32) as i32,
            transactional_id_expiration_ms: args
                .transactional_id_expiration_ms
                .or(file.transactional_id_expiration_ms)
                .unwrap_or(604_800_000)
                .clamp(1, i64::MAX as u64),
            max_incremental_fetch_session_cache_slots: args
                .max_incremental_fetch_session_cache_slots
                .or(file.max_incremental_fetch_session_cache_slots)
                .unwrap_or(1000),
            group_commit_max_delay_us,
            stall_threshold_ms: args.stall_threshold_ms.or(file.stall_threshold_ms).unwrap_or(25),
            auto_balance,
            max_connections: args.max_connections.or(file.max_connections).unwrap_or(i32::MAX as usize),
            max_connections_per_ip: args
                .max_connections_per_ip
                .or(file.max_connections_per_ip)
                .unwrap_or(i32::MAX as usize),
            controller_voters,
            roles,
            controller_listener,
            controller_quorum_bootstrap_servers,
            directory_id,
            cluster_id,
            rack,
            rack_aware_reads,
            replica_lag_time_max_ms: args
                .replica_lag_time_max_ms
                .or(file.replica_lag_time_max_ms)
                .unwrap_or(30_000)
                .clamp(1, i64::MAX as u64),
            replica_high_watermark_checkpoint_interval_ms: args
                .replica_high_watermark_checkpoint_interval_ms
                .or(file.replica_high_watermark_checkpoint_interval_ms)
                .unwrap_or(5_000)
                .clamp(1, i64::MAX as u64),
            broker_session_timeout_ms,
            broker_heartbeat_interval_ms,
            leader_rebalance_every: args
                .auto_leader_rebalance_enable
                .or(file.auto_leader_rebalance_enable)
                .unwrap_or(true)
                .then(|| {
                    let seconds = args
                        .leader_imbalance_check_interval_seconds
                        .or(file.leader_imbalance_check_interval_seconds)
                        .unwrap_or(300);
                    std::time::Duration::from_secs(seconds.max(1))
                }),
            cleaner,
            log_cleaner_backoff_ms: args
                .log_cleaner_backoff_ms
                .or(file.log_cleaner_backoff_ms)
                .unwrap_or(15_000)
                .max(1),
            log_scrub_bytes_per_second: args
                .log_scrub_bytes_per_second
                .or(file.log_scrub_bytes_per_second)
                .unwrap_or(8 << 20),
            log_scrub_interval_ms: args.log_scrub_interval_ms.or(file.log_scrub_interval_ms).unwrap_or(3_600_000),
            topic_defaults,
            write_shape,
            iotune,
        })
    }
}

/// Parses `all`, `N` (the first N cores) or `a-b` (inclusive) against `available` cores.
pub(crate) fn parse_cores(spec: &str, available: usize) -> Result<Vec<usize>, String> {
    let bad = |why: &str| Err(format!("invalid --cores {spec:?}: {why}"));
    let spec = spec.trim();
    if spec == "all" {
        return Ok((0..available).collect());
    }
    if let Some((a, b)) = spec.split_once('-') {
        let (Ok(a), Ok(b)) = (a.trim().parse::<usize>(), b.trim().parse::<usize>()) else {
            return bad("expected all, a count, or a range such as 2-5");
        };
        if a > b {
            return bad("range start is after its end");
        }
        if b >= available {
            return bad(&format!("this machine has cores 0-{}", available - 1));
        }
        return Ok((a..=b).collect());
    }
    match spec.parse::<usize>() {
        Ok(0) => bad("at least one core is needed"),
        Ok(n) if n > available => bad(&format!("this machine has {available} cores")),
        Ok(n) => Ok((0..n).collect()),
        Err(_) => bad("expected all, a count, or a range such as 2-5"),
    }
}

/// `--log-dirs` checked: the data directory when none is given; no empty path, and no
/// directory named twice (compared as absolute paths).
fn log_dirs(given: Vec<PathBuf>, data_dir: &std::path::Path) -> Result<Vec<PathBuf>, String> {
    if given.is_empty() {
        return Ok(vec![data_dir.to_path_buf()]);
    }
    let mut seen = std::collections::BTreeSet::new();
    for dir in &given {
        if dir.as_os_str().is_empty() {
            return Err("--log-dirs names an empty path".into());
        }
        let absolute = std::path::absolute(dir).map_err(|e| format!("--log-dirs {}: {e}", dir.display()))?;
        if !seen.insert(absolute) {
            return Err(format!("--log-dirs names {} twice", dir.display()));
        }
    }
    Ok(given)
}

/// Checks `--virtual-brokers BASE_PORT` against the node: ids and ports that fit,
/// ports apart from the listeners'.
fn virtual_brokers(
    base: u16,
    node_id: i32,
    cpus: &[usize],
    listeners: &[skein_control::security::ListenerConfig],
) -> Result<skein_control::virtual_brokers::VirtualBrokers, String> {
    use skein_control::virtual_brokers::{NODE_ID_MAX, SHARDS_PER_NODE_MAX};
    let refuse = |why: String| Err(format!("invalid --virtual-brokers {base}: {why}"));
    if !(0..=NODE_ID_MAX).contains(&node_id) || cpus.len() > SHARDS_PER_NODE_MAX as usize {
        return refuse(format!("needs a node id up to {NODE_ID_MAX} and at most {SHARDS_PER_NODE_MAX} shards"));
    }
    let last = u32::from(base) + cpus.len() as u32 - 1;
    if base == 0 || last > u32::from(u16::MAX) {
        return refuse(format!("ports {base} to {last} are not all valid ports"));
    }
    let ports = u32::from(base)..=last;
    if let Some(taken) = listeners.iter().find(|l| ports.contains(&u32::from(l.address.port()))) {
        return refuse(format!("listener {} already uses port {}", taken.name, taken.address.port()));
    }
    let first = listeners.first().ok_or("virtual brokers need a listener")?;
    Ok(skein_control::virtual_brokers::VirtualBrokers {
        listener: first.name.clone(),
        port_base: base,
        shards: cpus.len() as u16,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Core specs parse as documented and bad ones get a message.
    #[test]
    fn cores() {
        let check = |spec: &str, expected: Result<Vec<usize>, ()>| {
            assert_eq!(parse_cores(spec, 4).map_err(|_| ()), expected, "{spec}");
        };
        check("all", Ok(vec![0, 1, 2, 3]));
        check("2", Ok(vec![0, 1]));
        check("1-3", Ok(vec![1, 2, 3]));
        check("0", Err(()));
        check("5", Err(()));
        check("3-1", Err(()));
        check("2-4", Err(()));
        check("x", Err(()));
    }

    // Defaults need no config; bad values are named in the error.
    #[test]
    fn defaults_and_errors() {
        let config = NodeConfig::load(StartArgs::default()).unwrap();
        let listener = &config.listeners[0];
        assert_eq!(listener.address.to_string(), "127.0.0.1:9092");
        assert_eq!((listener.advertised_host.as_str(), listener.advertised_port), ("127.0.0.1", 9092));
        assert_eq!(config.data_dir, PathBuf::from("./skein-data"));
        assert_eq!(config.log_dirs, vec![PathBuf::from("./skein-data")]);
        let two = vec![PathBuf::from("/d1"), PathBuf::from("/d2")];
        let config = NodeConfig::load(StartArgs { log_dirs: two.clone(), ..Default::default() }).unwrap();
        assert_eq!(config.log_dirs, two);
        let bad = |args: StartArgs, needle: &str| {
            let e = NodeConfig::load(args).unwrap_err();
            assert!(e.contains(needle), "{e}");
        };
        bad(StartArgs { listener: Some("nope".into()), ..Default::default() }, "invalid listener");
        bad(StartArgs { topic_configs: vec!["retention.ms=-7".into()], ..Default::default() }, "retention.ms");
        bad(StartArgs { topic_configs: vec!["retention.ms".into()], ..Default::default() }, "NAME=VALUE");
        bad(StartArgs { num_partitions: Some(0), ..Default::default() }, "--num-partitions");
        let twice = vec![PathBuf::from("/d1"), PathBuf::from("/d1/")];
        bad(StartArgs { log_dirs: twice, ..Default::default() }, "names /d1/ twice");
        bad(StartArgs { cluster_id: Some("short".into()), ..Default::default() }, "invalid --cluster-id");
        bad(StartArgs { cluster_id: Some("a".repeat(21) + "!"), ..Default::default() }, "URL-safe base64");
        let given = "MkU3OEVBNTcwNTJENDM2Qk";
        assert_eq!(
            NodeConfig::load(StartArgs { cluster_id: Some(given.into()), ..Default::default() })
                .unwrap()
                .cluster_id
                .as_deref(),
            Some(given)
        );
    }
}
