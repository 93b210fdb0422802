//! The bounds of the network layer, with what each costs.

/// Partition logs a shard opens at once when it starts (recovery), and that one image
/// change opens at once (a CreateTopics of 10,000 partitions). An open waits on a few
/// reads and file creations and, after a crash, a directory sync and an fdatasync; with
/// many in flight the ring overlaps them and the file system commits their syncs
/// together. Each costs an open log's state and its recovery scan's read buffers (one
/// segment read at a time, up to 1 MiB).
pub const PARTITION_OPENS_IN_FLIGHT: usize = 64;

/// Messages queued per ordered pair of shards. A message is small (an op and a
/// `Bytes` handle); 1024 of them bound what one shard can push at another.
pub const CROSS_SHARD_CHANNEL_CAPACITY: usize = 1024;

/// Requests read from one connection but not yet answered. Past this the connection
/// stops reading its socket (backpressure). With produce requests of up to
/// `socket.request.max.bytes` this is also the bound on buffered request bytes per
/// connection, together with `CONNECTION_BUFFERED_BYTES_MAX`.
pub const IN_FLIGHT_REQUESTS_PER_CONNECTION: usize = 32;

/// Request bytes one connection may hold in flight before it stops reading.
pub const CONNECTION_BUFFERED_BYTES_MAX: usize = 64 << 20;

/// Kafka's `socket.request.max.bytes` default: the largest request frame accepted.
pub const SOCKET_REQUEST_MAX_BYTES_DEFAULT: usize = 100 << 20;

/// Longest `max_wait_ms` honoured for a fetch; Kafka clients send at most a few seconds.
pub const FETCH_WAIT_MAX_MS: u64 = 30_000;

/// Bytes a single fetch response may carry, whatever the client asks.
pub const FETCH_RESPONSE_BYTES_MAX: usize = 64 << 20;

/// Segments one vectored socket write of a response frame takes (`frame.rs`); a fetch
/// of many partitions goes out in several writes. The kernel's IOV_MAX is 1024; each
/// segment costs an `IoSlice` (16 bytes) on the writer's stack of slices.
pub const FRAME_WRITE_SEGMENTS_MAX: usize = 256;

/// Response bytes one connection may hold unwritten (`budget.rs`): a fetch reads at
/// most what is left of this, so a client that never reads holds no more.
pub const CONNECTION_RESPONSE_BYTES_MAX: usize = 16 << 20;

/// Response bytes all connections of one shard may hold unwritten. Past this, fetches
/// of connections that hold nothing get `FETCH_GRANT_FLOOR`; others wait.
pub const SHARD_RESPONSE_BYTES_MAX: usize = 64 << 20;

/// The smallest grant a fetch gets: a client that holds nothing always progresses,
/// even when slow readers hold the shard's whole response budget.
pub const FETCH_GRANT_FLOOR: usize = 256 << 10;

/// Request bytes all connections of one shard may hold in flight. Past this every
/// connection of the shard stops reading until responses drain: memory per shard stays
/// bounded however many clients connect.
pub const SHARD_BUFFERED_BYTES_MAX: usize = 512 << 20;

/// Member ids a classic group may have handed out with MEMBER_ID_REQUIRED and not yet
/// seen join (they expire after their session timeout). A client looping on joins
/// with empty member ids gets GROUP_MAX_SIZE_REACHED past this, not unbounded memory:
/// about 100 bytes each, 1 MiB per group.
pub const GROUP_PENDING_MEMBERS_MAX: usize = 10_000;

/// Connections one shard serves at once; past this it closes new ones on accept. An
/// idle connection costs a task and its buffers, about 10 KiB, so 100,000 connections
/// per shard cost about 1 GiB.
pub const SHARD_CONNECTIONS_MAX: usize = 100_000;

/// Operations one shard runs at once for one peer shard. Past this the shard stops
/// taking the peer's messages, the bounded channel fills, and the peer waits
/// (backpressure): the tasks `shard::serve_peer` spawns are bounded.
pub const PEER_TASKS_MAX: usize = 1024;

/// Long-poll waits (one per fetch, however many partitions it waits on) and group
/// joins one shard parks at once for one peer shard. Past this a wait ends at once
/// with nothing woken, and a join takes a task slot, so parked polls never hold up the
/// peer's produce requests behind the task bound.
pub const PEER_PARKED_MAX: usize = 4096;

/// The largest frame a connection may send before it has authenticated, and the
/// largest SASL token (Kafka's `sasl.server.max.receive.size`, 512 KiB): a client
/// that has not proved who it is cannot make the broker buffer more.
pub const SASL_TOKEN_MAX_BYTES: usize = 512 << 10;

/// How long a TLS handshake may take before the connection is closed: a client that
/// opens a connection and sends nothing holds only its socket, for this long.
pub const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a connection to another broker may take to open, TLS handshake and SASL
/// login included: a peer that accepts and then says nothing holds a replica fetcher
/// or a transaction marker for this long, then it tries again.
pub const PEER_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How often the TLS files are checked for changes (one `stat` each, on the
/// watcher's own thread).
pub const TLS_RELOAD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// SCRAM iterations Kafka accepts for a credential (`ScramMechanism`'s bounds): fewer
/// is too weak, more costs the broker too much CPU per authentication.
pub const SCRAM_ITERATIONS_MIN: u32 = 4096;
pub const SCRAM_ITERATIONS_MAX: u32 = 16384;

/// The read and write buffers under a TLS connection (`security::buffered`): 128 KiB
/// per connection, so that rustls' 4 KiB reads and per-record writes become few
/// large syscalls.
pub const TLS_SOCKET_BUFFER_BYTES: usize = 64 << 10;

/// ACL decisions one connection caches (`security::acl::Session`): past this the
/// cache starts over, so a client naming endless resources costs bounded memory.
pub const SESSION_ACL_CACHE_ENTRIES_MAX: usize = 4096;

/// ACL bindings a CreateAcls or DeleteAcls request may name, and bindings the
/// cluster holds: each is replicated to every shard's index.
pub const ACL_BINDINGS_MAX: usize = 100_000;
/// Delegation tokens the cluster holds at most: each costs a record in every image,
/// and an HMAC per token in each lookup by HMAC.
pub const DELEGATION_TOKENS_MAX: usize = 10_000;
/// Delegation-token SCRAM credentials each shard keeps derived.
pub const TOKEN_CREDENTIALS_CACHED: usize = 1_024;

/// Client quota buckets one shard keeps (`quota::manager`): past this the idlest is
/// dropped, so clients naming endless client ids cost bounded memory.
pub const QUOTA_BUCKETS_PER_SHARD_MAX: usize = 10_000;

/// The burst a quota bucket allows: at most this long of its rate saved up.
pub const QUOTA_BURST: std::time::Duration = std::time::Duration::from_secs(1);

/// The longest throttle a quota imposes on one response (Kafka caps it at its quota
/// window).
pub const QUOTA_THROTTLE_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// How often shards publish their quota use and take new shares of each quota.
pub const QUOTA_REBALANCE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// The part of a quota shared equally by the shards regardless of use, so that a
/// shard a client just moved to is not starved until the next rebalance.
pub const QUOTA_SHARE_FLOOR: f64 = 0.05;

/// Kafka's `connections.max.idle.ms` default: ten minutes without a request and a
/// connection is closed, so abandoned sockets do not hold a shard's memory.
pub const CONNECTIONS_MAX_IDLE_MS_DEFAULT: u64 = 600_000;

/// Consumer lag series (group, topic, partition) one shard keeps and renders
/// (`group::lag`). Groups past it are left out whole and counted in
/// `skein_consumer_group_lag_series_dropped`. A series costs about 150 bytes in the
/// table and as much in `/metrics`' text, so 10,000 cost about 3 MiB per shard, and
/// each refresh asks the owning shards for up to this many high watermarks.
pub const CONSUMER_LAG_SERIES_PER_SHARD_MAX: usize = 10_000;

/// How often a shard recomputes its groups' consumer lag: one `PartitionOp::Stats` per
/// committed partition, sequential, so a refresh never queues more than one message
/// at another shard. Lag moves with traffic; scrapes every 15 s or so see each refresh.
pub const CONSUMER_LAG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Client telemetry instances (KIP-714) one shard keeps: Kafka's broker caches 16,384
/// per node. An instance is about 300 bytes with its subscription, so the table costs
/// at most 1.2 MiB per shard. Past it the instance seen longest ago is forgotten (it
/// gets a fresh subscription at its next request, as from a Kafka broker that evicted it).
pub const TELEMETRY_INSTANCES_PER_SHARD_MAX: usize = 4_096;

/// Pushed client metric series (client, metric, attributes) one shard keeps for
/// `/metrics`. A series costs about 200 bytes in the table and as much in the text
/// of a scrape, so the cap costs about 4 MiB per shard. Series past it (or past
/// `TELEMETRY_SERIES_PER_CLIENT_MAX` for one client) are left out and counted in
/// `skein_client_telemetry_series_dropped_total`.
pub const TELEMETRY_SERIES_PER_SHARD_MAX: usize = 20_000;

/// Pushed series one client instance may hold: a Java producer pushes about 100
/// metrics plus a few per broker and per topic it talks to.
pub const TELEMETRY_SERIES_PER_CLIENT_MAX: usize = 1_000;

/// The most a PushTelemetry's metrics may decompress to: 16 times Kafka's default
/// `telemetry.max.bytes` (OTLP compresses about 10:1). A payload that grows past it
/// is refused as INVALID_RECORD, as a failing exporter is on Kafka.
pub const TELEMETRY_DECOMPRESSED_BYTES_MAX: usize = 16 << 20;
