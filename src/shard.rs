//! Node bootstrap: one glommio executor per configured core, pinned, each running a
//! shard: its partitions, a Kafka listener on the shared port (SO_REUSEPORT), the
//! servers of its cross-shard channels, housekeeping, and a clean shutdown on
//! SIGINT/SIGTERM.

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use skein_control::append::TopicSettings;
use skein_control::metadata::controller::Controller;
use skein_engine::TopicPartition;
use skein_net::shard::ShardHost;
use skein_net::shard::{ops, PartitionError};
use skein_net::{NodeSettings, Shard};

use crate::config::NodeConfig;

/// Runs the node until SIGINT or SIGTERM, then closes every log cleanly.
///
/// # Errors
/// A message when the data directory, the metadata or a listener cannot be set up.
/// Turns transparent huge pages off for the process, unless `MIMALLOC_ALLOW_THP` says
/// otherwise. mimalloc asks for huge pages for its arenas (`MADV_HUGEPAGE`, honoured
/// under the `madvise` setting `skein tune` recommends), and the kernel then zeroes a
/// whole 2 MiB page on the request path the first time a buffer touches it. While a
/// shard's batch cache fills (its first ~25 s at 10 MB/s) that put the publish p99 at
/// 10,000 msg/s at 5.0-5.4 ms against 1.8-1.95 ms without, three runs each; once the
/// cache is full, and at max rate, the two measured level (RESULTS.md).
fn without_huge_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    if let Err(e) = rustix::thread::disable_transparent_huge_pages(true) {
        tracing::warn!(target: "skein", error = %e, "cannot turn transparent huge pages off for this process");
    }
}

/// Raises the soft limit on open files to the hard one, so that shards keep more
/// segments open (shells commonly start processes at a soft limit of 1,024). The hard
/// limit stays the operator's (`LimitNOFILE=`). Returns the limit now in force.
fn raise_open_files_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::warn!(target: "skein", error = %e, "cannot raise the open files limit");
        }
    }
    getrlimit(Resource::Nofile).current
}

pub fn run_node(mut config: NodeConfig) -> Result<(), String> {
    without_huge_pages();
    let open_files = raise_open_files_limit();
    // Each shard keeps at most its share of the limit open: an idle segment's file is
    // closed, and opened again on its next use (`io::open_files`).
    let per_shard = open_files.map(|limit| skein_engine::io::open_files::budget_for(limit, config.cpus.len()));
    if let Some(per_shard) = per_shard {
        skein_engine::io::open_files::set_budget(per_shard);
    }
    tracing::info!(target: "skein", open_files_limit = open_files.map_or("unlimited".into(), |l| l.to_string()),
        open_files_per_shard = per_shard.map_or("unlimited".into(), |b| b.to_string()),
        "idle segment files are closed past each shard's budget of open files");
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| format!("cannot create data directory {}: {e}", config.data_dir.display()))?;
    // Its entry in the parent made durable (the main thread, before any shard runs):
    // partitions the engine syncs into it must not vanish with it on power loss.
    if let Some(parent) = config.data_dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::File::open(parent)
            .and_then(|dir| dir.sync_all())
            .map_err(|e| format!("cannot sync {}: {e}", parent.display()))?;
    }
    // Held until the node stops: a second node on this directory is refused.
    let _lock = crate::exclusive::lock_data_dir(&config.data_dir)?;
    // Kafka's clean-shutdown marker: present only between a clean stop and the next
    // start. Without it the broker may have lost its unwritten tail (KIP-966: it then
    // is no longer an eligible leader replica).
    let marker = config.data_dir.join(CLEAN_SHUTDOWN_FILE);
    let clean_restart = marker.exists();
    if clean_restart {
        std::fs::remove_file(&marker).map_err(|e| format!("cannot remove {}: {e}", marker.display()))?;
        sync_dir(&config.data_dir)?;
    }
    // SIGINT/SIGTERM raise `signal`; a cluster node then drains (controlled shutdown:
    // its leaderships move away first) before `stop` tells the shards to close.
    let signal = Arc::new(AtomicBool::new(false));
    for number in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(number, signal.clone())
            .map_err(|e| format!("cannot install signal handler: {e}"))?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let drained = Arc::new(AtomicBool::new(false));
    let exited = Arc::new(AtomicUsize::new(0));
    let shards = config.cpus.len();
    // The metadata log: its voters, or this node alone. A broker-only node fetches the
    // quorum's image first (Kafka's brokers catch up with the metadata log before
    // they serve).
    crate::quorum_config::find_quorum(&mut config, &signal)?;
    let (cluster_id, directory_id) = crate::meta_properties::identity(&config)?;
    let log = match config.roles.controller {
        true => {
            let voter_ids: Vec<i32> = match config.controller_voters.is_empty() {
                true => vec![config.node_id],
                false => config.controller_voters.iter().map(|(id, _)| *id).collect(),
            };
            MetadataLog::Voter(Box::new(skein_control::metadata::log::open(
                &config.data_dir,
                config.node_id,
                &voter_ids,
                shards,
            )?))
        }
        false => {
            let (image, index) = skein_control::metadata::observer::catch_up(
                config.node_id,
                &cluster_id,
                &config.controller_voters,
                shards,
                &signal,
                &config.security,
            )?;
            MetadataLog::Observer(Box::new(image), index)
        }
    };
    let image = Arc::new(match &log {
        MetadataLog::Voter(opened) => opened.image.clone(),
        MetadataLog::Observer(image, _) => (**image).clone(),
    });
    let mut log = Some(log);
    let log_dirs = crate::log_dirs::prepare(&config, &cluster_id, &directory_id, &image)?;
    // Probe the listener before starting shards, for a clear error when it is taken,
    // and resolve port 0 to a free port that every shard then binds.
    for listener in &mut config.listeners {
        crate::exclusive::refuse_taken(listener.address, &format!("Kafka listener {}", listener.name))?;
        let bound = probe_listener(listener.address)?;
        if listener.advertised_port == 0 {
            listener.advertised_port = bound.port();
        }
        listener.address = bound;
    }
    if let (Some(virtual_brokers), Some(first)) = (&config.virtual_brokers, config.listeners.first()) {
        for shard in 0..config.cpus.len() {
            let address = std::net::SocketAddr::new(first.address.ip(), virtual_brokers.port_base + shard as u16);
            crate::exclusive::refuse_taken(address, &format!("virtual broker of shard {shard}"))?;
            probe_listener(address)?;
        }
    }
    if let Some(controller) = config.controller_listener {
        crate::exclusive::refuse_taken(controller, "controller listener")?;
        probe_listener(controller)?;
    }
    if let Some(admin) = config.admin_listener {
        crate::exclusive::refuse_taken(admin, "admin listener")?;
        config.admin_listener = Some(probe_listener(admin)?);
    }
    let inter_broker = config
        .listeners
        .iter()
        .find(|l| l.name == config.inter_broker_listener)
        .expect("the configuration checked the inter-broker listener")
        .clone();
    // OAUTHBEARER's key set is fetched and refreshed on a thread of its own.
    if config.security.signed_tokens.is_some() {
        let security = config.security.clone();
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("jwks-refresh".into())
            .spawn(move || crate::oauth_jwks::run(security, stop))
            .map_err(|e| format!("cannot start the JWKS refresh thread: {e}"))?;
    }
    // The certificates are watched for changes on a thread of their own.
    if config.security.tls.is_some() {
        let security = config.security.clone();
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("tls-reload".into())
            .spawn(move || {
                if let Some(tls) = &security.tls {
                    tls.watch(&stop);
                }
            })
            .map_err(|e| format!("cannot start the TLS reload thread: {e}"))?;
    }
    let settings = Arc::new(NodeSettings {
        node_id: config.node_id,
        // A single node is its own controller; a cluster names the quorum's leader
        // once elected.
        active_controller: Arc::new(std::sync::atomic::AtomicI32::new(match config.controller_voters.is_empty() {
            true => config.node_id,
            false => -1,
        })),
        quota_ledger: Default::default(),
        cluster_id,
        incarnation: uuid::Uuid::new_v4().as_u64_pair().0,
        clean_restart,
        clustered: !config.controller_voters.is_empty(),
        broker: config.roles.broker,
        advertised_host: inter_broker.advertised_host.clone(),
        advertised_port: inter_broker.advertised_port,
        listeners: config.listeners.clone(),
        inter_broker_listener: config.inter_broker_listener.clone(),
        security: config.security.clone(),
        controller_voters: config.controller_voters.clone(),
        controller_member: crate::quorum_config::member(&config, &directory_id),
        rack: config.rack.clone(),
        rack_aware_reads: config.rack_aware_reads,
        auto_create_topics: config.auto_create_topics,
        num_partitions: config.num_partitions,
        topic_defaults: config.topic_defaults.clone(),
        socket_request_max_bytes: config.socket_request_max_bytes,
        connections_max_idle_ms: config.connections_max_idle_ms,
        telemetry_max_bytes: config.telemetry_max_bytes,
        shards,
        data_dir: config.data_dir.clone(),
        group_initial_rebalance_delay_ms: config.group_initial_rebalance_delay_ms,
        group_consumer_heartbeat_interval_ms: config.group_consumer_heartbeat_interval_ms,
        group_consumer_session_timeout_ms: config.group_consumer_session_timeout_ms,
        group_max_size: config.group_max_size,
        group_consumer_max_size: config.group_consumer_max_size,
        offsets_retention_minutes: config.offsets_retention_minutes,
        producer_id_expiration_ms: config.producer_id_expiration_ms as i64,
        transaction_max_timeout_ms: config.transaction_max_timeout_ms,
        transactional_id_expiration_ms: config.transactional_id_expiration_ms as i64,
        fetch_session_cache_slots: config.max_incremental_fetch_session_cache_slots,
        group_commit_max_delay: Duration::from_micros(config.group_commit_max_delay_us),
        write_shape: config.write_shape,
        virtual_brokers: config.virtual_brokers.clone(),
        connections: Arc::new(skein_net::connections::ConnectionLimits::new(
            config.max_connections,
            config.max_connections_per_ip,
        )),
        recovered_high_watermarks: recovered_high_watermarks(&config.data_dir),
        log_dirs: log_dirs.dirs.clone(),
        log_dir_homes: log_dirs.homes.clone(),
    });
    let started = std::time::Instant::now();
    // The shard count of the last run: another one redistributes the partitions.
    let placed = crate::balance::placed_shards(&config.data_dir);
    let ready = Arc::new(AtomicUsize::new(0));
    let wirings = skein_net::shard::router::wire(shards);
    let mut handles = Vec::new();
    for ((shard, &cpu), wiring) in config.cpus.iter().enumerate().zip(wirings) {
        let (config, stop, image, settings, ready) =
            (config.clone(), stop.clone(), image.clone(), settings.clone(), ready.clone());
        let (signal, drained, on_exit) = (signal.clone(), drained.clone(), exited.clone());
        // Shard 0 runs the metadata controller and drives the metadata log.
        let log = if shard == 0 { log.take() } else { None };
        let (node_id, voters) = (config.node_id, config.controller_voters.clone());
        let session_timeout = Duration::from_millis(config.broker_session_timeout_ms);
        let rebalance_every = config.leader_rebalance_every;
        // glommio's stall detection, counted and rate-limited by `reactor`.
        let stalls = (config.stall_threshold_ms > 0).then(|| {
            let extra = Duration::from_millis(config.stall_threshold_ms);
            Box::new(crate::reactor::StallThreshold { extra, shard }) as Box<dyn glommio::StallDetectionHandler>
        });
        // glommio runs the file operations io_uring does not take (mkdir, truncate,
        // rename, unlink) on a thread pool of the executor's: one thread by default,
        // on the shard's own core, where creating or deleting thousands of partitions
        // queued them one at a time. A few threads on the node's cores run them side
        // by side (they block in the kernel, not on the cores).
        let node_cpus: Vec<usize> = config.cpus.clone();
        let pool_cpus = glommio::CpuSet::online()
            .map_err(|e| format!("cannot list the online cpus: {e}"))?
            .filter(|l| node_cpus.contains(&l.cpu));
        let handle = glommio::LocalExecutorBuilder::new(glommio::Placement::Fixed(cpu))
            .blocking_thread_pool_placement(glommio::PoolPlacement::Fenced(BLOCKING_THREADS_PER_SHARD, pool_cpus))
            .name(&format!("shard-{shard}"))
            .detect_stalls(stalls)
            // DMA reads' queueing, device and completion latencies (`reactor`).
            .record_io_latencies(true)
            .spawn(move || async move {
                crate::reactor::register(shard);
                let (router, receivers) = wiring.connect().await;
                let (controller, inputs) = match log {
                    Some(log) => {
                        let observer = matches!(log, MetadataLog::Observer(..));
                        let cluster_id = &settings.cluster_id;
                        let (controller, inputs) = Controller::new(
                            node_id,
                            cluster_id,
                            &voters,
                            observer,
                            session_timeout,
                            rebalance_every,
                            &settings.security,
                        );
                        (Some(controller), Some((log, inputs)))
                    }
                    None => (None, None),
                };
                let node =
                    Rc::new(Shard::new(shard, settings, image, controller, config.cache_bytes_per_shard, router));
                glommio::spawn_local(skein_net::shard::quotas::rebalance(node.clone())).detach();
                if let Some((log, inputs)) = inputs {
                    let follow = match log {
                        MetadataLog::Voter(opened) => glommio::spawn_local(skein_control::metadata::quorum::run(
                            ShardHost(node.clone()),
                            *opened,
                            inputs,
                        )),
                        MetadataLog::Observer(image, index) => glommio::spawn_local(
                            skein_control::metadata::observer::run(ShardHost(node.clone()), *image, index),
                        ),
                    };
                    follow.detach();
                    glommio::spawn_local(drain_on_signal(node.clone(), signal, drained)).detach();
                }
                if shard == 0 {
                    let redistribute = crate::balance::redistribute_after_start(node.clone(), ready.clone(), placed);
                    glommio::spawn_local(redistribute).detach();
                    if let Some((interval, band)) = config.auto_balance.filter(|_| shards > 1) {
                        glommio::spawn_local(crate::balance::auto_balance_task(node.clone(), interval, band)).detach();
                    }
                }
                let result = run_shard(node, receivers, config, stop, ready, shards).await;
                on_exit.fetch_add(1, Ordering::Release);
                result
            })
            .map_err(|e| format!("cannot start shard {shard} on cpu {cpu} (io_uring must be available): {e}"))?;
        handles.push(handle);
        // Its rings exist once it registered: claim them before the next shard makes
        // its own (for the ring sampler).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !crate::reactor::is_registered(shard) && exited.load(Ordering::Acquire) == 0 {
            if std::time::Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        crate::reactor::claim_rings(shard);
    }
    {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("ring-sampler".into())
            .spawn(move || crate::reactor::sample_rings(&stop))
            .map_err(|e| format!("cannot start the ring sampler thread: {e}"))?;
    }
    let running = || !signal.load(Ordering::Relaxed) && exited.load(Ordering::Acquire) == 0;
    while ready.load(Ordering::Acquire) < shards && running() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let listeners: Vec<String> = config.listeners.iter().map(|l| format!("{}://{}", l.name, l.address)).collect();
    tracing::info!(target: "skein", listener = %config.listeners[0].address, listeners = listeners.join(","), shards, startup_ms = started.elapsed().as_millis() as u64, "listening");
    while running() {
        std::thread::sleep(Duration::from_millis(20));
    }
    // A signal: wait for the drain (bounded), then stop every shard. A shard that
    // ended on its own stops the others at once.
    let drain_deadline = std::time::Instant::now() + DRAIN_MAX;
    while !drained.load(Ordering::Acquire)
        && exited.load(Ordering::Acquire) == 0
        && std::time::Instant::now() < drain_deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let mut failure = None;
    for handle in handles {
        match handle.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = Some(e),
            Err(e) => failure = Some(format!("shard thread failed: {e}")),
        }
    }
    match failure {
        Some(e) => Err(e),
        None => {
            std::fs::write(&marker, b"{\"version\":0,\"brokerEpoch\":-1}")
                .and_then(|()| std::fs::File::open(&marker)?.sync_all())
                .map_err(|e| format!("cannot write {}: {e}", marker.display()))?;
            sync_dir(&config.data_dir)?;
            tracing::info!(target: "skein", "stopped cleanly");
            Ok(())
        }
    }
}

/// Kafka's clean-shutdown marker in the data directory.
const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";

/// Makes the entries of `dir` durable (main thread only).
fn sync_dir(dir: &std::path::Path) -> Result<(), String> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| format!("cannot sync {}: {e}", dir.display()))
}

/// Binds `address` as the shards will (SO_REUSEPORT, which also lets a restarted node
/// take over a port whose old connections are still closing), then releases it.
/// Returns the bound address, so port 0 becomes a real port.
fn probe_listener(address: std::net::SocketAddr) -> Result<std::net::SocketAddr, String> {
    let fail = |e: std::io::Error| format!("cannot listen on {address}: {e}");
    let socket =
        socket2::Socket::new(socket2::Domain::for_address(address), socket2::Type::STREAM, None).map_err(fail)?;
    socket.set_reuse_port(true).map_err(fail)?;
    socket.bind(&address.into()).map_err(fail)?;
    socket.listen(1).map_err(fail)?;
    let bound = socket.local_addr().map_err(fail)?;
    bound.as_socket().ok_or_else(|| format!("cannot listen on {address}: not an inet address"))
}

/// The high watermarks of `replication-offset-checkpoint`, read on the main thread
/// before any shard starts. A missing or damaged file gives none: replicated
/// partitions then start from their log start until their leader says more.
fn recovered_high_watermarks(
    data_dir: &std::path::Path,
) -> std::collections::HashMap<TopicPartition, skein_engine::Offset> {
    use skein_replication::checkpoint;
    let path = data_dir.join(checkpoint::HIGH_WATERMARK_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => checkpoint::decode(&bytes).unwrap_or_else(|| {
            tracing::warn!(target: "skein", path = %path.display(), "damaged high watermark checkpoint ignored");
            Default::default()
        }),
        Err(_) => Default::default(),
    }
}

/// Shard 0 removes the directories of deleted partitions (one shard, so that two never
/// race on the same files).
async fn remove_deleted(shard: &Shard) {
    if shard.id != 0 {
        return;
    }
    if let Err(e) = shard.logs.remove_deleted_dirs().await {
        tracing::warn!(target: "skein", error = %e, "cannot remove deleted partitions");
    }
}

/// Where a node's metadata comes from: the quorum it votes in, or (a broker-only
/// node) the image it fetched from the voters, with the log index it holds.
enum MetadataLog {
    Voter(Box<skein_control::metadata::log::Opened>),
    Observer(Box<skein_control::metadata::MetadataImage>, u64),
}

/// Threads of each shard's blocking pool (glommio's, for the file operations io_uring
/// does not take). Each is a parked thread until file creations or deletions queue.
const BLOCKING_THREADS_PER_SHARD: usize = 4;

/// The longest a stopping cluster node waits for its leaderships to move.
const DRAIN_MAX: Duration = Duration::from_secs(20);

/// Once a stop signal arrives: on a cluster node, a controlled shutdown (Kafka's): it
/// stops heartbeating and asks the active controller to fence it, so that its
/// leaderships move to in-sync replicas while it still serves; once its image shows
/// it leads nothing, it hands the quorum's leadership on if it holds it. Then (or at
/// once on a single node) it lets the node stop.
async fn drain_on_signal(shard: Rc<Shard>, signal: Arc<AtomicBool>, drained: Arc<AtomicBool>) {
    while !signal.load(Ordering::Relaxed) {
        glommio::timer::sleep(Duration::from_millis(20)).await;
    }
    if let Some(controller) = shard.controller().filter(|c| c.clustered()) {
        let me = shard.settings.node_id;
        let deadline = std::time::Instant::now() + DRAIN_MAX - Duration::from_secs(2);
        // A controller-only node leads no partition: it only hands the quorum on.
        let began = std::time::Instant::now();
        if shard.settings.broker {
            tracing::info!(target: "skein", node = me, "controlled shutdown: moving leaderships away");
            controller.begin_shutdown();
            let request = skein_control::metadata::controller::ControllerRequest::FenceBroker { id: me };
            let mut refusals = 0u32;
            while let Err((code, message)) = controller.handle(&ShardHost(shard.clone()), request.clone()).await {
                refusals += 1;
                if refusals == 1 {
                    tracing::info!(target: "skein", code, message, "controlled shutdown refused; retrying");
                }
                // A controller removed from the quorum is answered by nobody: its
                // leaderships move when its session ends.
                if std::time::Instant::now() > deadline || controller.is_removed() {
                    break;
                }
                glommio::timer::sleep(Duration::from_millis(100)).await;
            }
            let leads = |shard: &Shard| {
                let image = shard.image();
                image.topics.values().any(|t| (0..t.partitions).any(|p| t.assignment(p, me).leader == me))
            };
            let fenced_ms = began.elapsed().as_millis() as u64;
            tracing::info!(target: "skein", node = me, fenced_ms, refusals, "controlled shutdown: fenced");
            while leads(&shard) && std::time::Instant::now() < deadline && !controller.is_removed() {
                glommio::timer::sleep(Duration::from_millis(20)).await;
            }
            let leads_nothing = !leads(&shard);
            tracing::info!(target: "skein", node = me, fenced_ms, moved_ms = began.elapsed().as_millis() as u64,
                leads_nothing, "controlled shutdown: leaderships moved");
        }
        controller.hand_over().await;
        if shard.settings.broker {
            // Clients still sending here are told NOT_LEADER_OR_FOLLOWER meanwhile
            // and look the new leaders up before this node goes.
            glommio::timer::sleep(Duration::from_millis(500)).await;
        }
        tracing::info!(target: "skein", node = me, elapsed_ms = began.elapsed().as_millis() as u64, "controlled shutdown done");
    }
    drained.store(true, Ordering::Release);
}

/// Registers this broker's address with the controller (Kafka's BrokerRegistration),
/// retrying until the quorum takes it, then heartbeats every `interval` (in a cluster),
/// registering again if the controller no longer knows it (UnregisterBroker of a
/// running broker). A broker that stops
/// heartbeating is fenced by the active controller after the session timeout.
async fn register_broker(shard: Rc<Shard>, interval: Duration) {
    use skein_control::metadata::controller::ControllerRequest;
    let Some(controller) = shard.controller() else { return };
    let broker = skein_control::metadata::BrokerMeta {
        id: shard.settings.node_id,
        epoch: 0,
        host: shard.settings.advertised_host.clone(),
        port: shard.settings.advertised_port,
        rack: shard.settings.rack.clone(),
        fenced: false,
        incarnation: shard.settings.incarnation,
        clean_restart: shard.settings.clean_restart,
        listeners: shard
            .settings
            .listeners
            .iter()
            .map(|l| skein_control::security::Endpoint {
                listener: l.name.clone(),
                host: l.advertised_host.clone(),
                port: l.advertised_port,
            })
            .collect(),
        virtual_brokers: shard.settings.virtual_brokers.clone(),
    };
    let mut registered = false;
    loop {
        if controller.is_shutting_down() {
            return;
        }
        // A single node does not heartbeat (its controller is itself, and fencing its
        // only replicas for a full disk would take every partition offline): it only
        // registers again if an UnregisterBroker of itself removed its registration.
        if registered && !controller.clustered() {
            if !shard.image().brokers.contains_key(&broker.id) {
                registered = false;
                continue;
            }
            glommio::timer::sleep(interval).await;
            continue;
        }
        let request = match registered {
            false => ControllerRequest::RegisterBroker(broker.clone()),
            // No log directory that takes writes: the controller moves this node's
            // leaderships away until one has room again (as Kafka's offline log
            // dirs). The replicas of a failed directory leave their ISRs.
            true => {
                let dirs = shard.logs.log_dirs();
                let offline_replicas = dirs
                    .failed()
                    .into_iter()
                    .flat_map(|d| dirs.partitions_in(d))
                    .map(|p| (p.topic, p.partition))
                    .collect();
                ControllerRequest::BrokerHeartbeat {
                    id: broker.id,
                    log_dir_offline: dirs.none_writable(),
                    offline_replicas,
                }
            }
        };
        match controller.handle(&ShardHost(shard.clone()), request).await {
            Ok(_) if !registered => {
                tracing::info!(target: "skein", node = broker.id, "broker registered");
                registered = true;
            }
            Ok(_) => {}
            Err((code, message)) => {
                tracing::debug!(target: "skein", code, message, registered, "broker registration or heartbeat refused");
                if code == skein_control::errors::code::BROKER_NOT_AVAILABLE {
                    registered = false;
                }
                if !registered {
                    glommio::timer::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            }
        }
        glommio::timer::sleep(interval).await;
    }
}

/// The log cleaner's CPU share against the default task queue's 1000: when requests
/// wait, the cleaner gets about one slice in twenty.
const CLEANER_SHARES: usize = 50;

/// Runs the log cleaner in a task queue of its own with a small share of the CPU, so
/// request tasks go first: it cleans the dirtiest due log, then looks again, and sleeps
/// `log.cleaner.backoff.ms` when none is due.
fn spawn_cleaner(shard: &Rc<Shard>, config: &NodeConfig, shards: usize) {
    let mut cleaner = config.cleaner.clone();
    cleaner.dedupe_buffer_bytes = (cleaner.dedupe_buffer_bytes / shards.max(1)).max(1 << 20);
    shard.logs.set_cleaner_config(cleaner);
    let backoff = Duration::from_millis(config.log_cleaner_backoff_ms);
    let shard = shard.clone();
    spawn_in_background("log-cleaner", async move {
        loop {
            match shard.logs.clean_dirtiest(skein_engine::log::now_ms()).await {
                Some((partition, Ok(stats))) => {
                    tracing::debug!(target: "skein", shard = shard.id, partition = %partition, ?stats, "log cleaned");
                }
                Some((partition, Err(e))) => {
                    tracing::warn!(target: "skein", shard = shard.id, partition = %partition, error = %e, "log cleaning failed");
                    glommio::timer::sleep(backoff).await;
                }
                None => glommio::timer::sleep(backoff).await,
            }
        }
    });
}

/// Runs `task` detached in a task queue of its own named `name`, with the cleaner's
/// small share of the CPU, so request tasks go first.
fn spawn_in_background(name: &str, task: impl std::future::Future<Output = ()> + 'static) {
    let queue = glommio::executor().create_task_queue(
        glommio::Shares::Static(CLEANER_SHARES),
        glommio::Latency::NotImportant,
        name,
    );
    match glommio::spawn_local_into(task, queue) {
        Ok(task) => {
            task.detach();
        }
        Err(e) => tracing::error!(target: "skein", error = %e, "cannot start the {name}"),
    };
}

/// The longest a node waits after start before its first scrubber pass.
const SCRUB_START_DELAY_MAX: Duration = Duration::from_secs(300);

/// Runs the scrubber (`skein_engine::log` scrub) in a task queue of its own with the
/// cleaner's small share: a pass over every log of the shard at
/// `log_scrub_bytes_per_second`, then the next no sooner than `log_scrub_interval_ms`
/// after the last one started. The first starts one interval (at most 5 minutes)
/// after the node.
fn spawn_scrubber(shard: &Rc<Shard>, config: &NodeConfig) {
    let rate = config.log_scrub_bytes_per_second;
    if rate == 0 {
        return;
    }
    let interval = Duration::from_millis(config.log_scrub_interval_ms);
    let shard = shard.clone();
    spawn_in_background("log-scrubber", async move {
        // Not at start: recovery and clients come first.
        glommio::timer::sleep(interval.min(SCRUB_START_DELAY_MAX)).await;
        loop {
            let started = std::time::Instant::now();
            let pass = shard.logs.scrub_pass(rate).await;
            if pass.corrupt == 0 {
                tracing::debug!(target: "skein", shard = shard.id, bytes = pass.bytes, "scrubber pass done");
            } else {
                tracing::error!(target: "skein", shard = shard.id, bytes = pass.bytes, corrupt = pass.corrupt,
                        "scrubber pass found corrupt batches at rest");
            }
            // At least a second between passes, whatever the interval.
            glommio::timer::sleep(interval.saturating_sub(started.elapsed()).max(Duration::from_secs(1))).await;
        }
    });
}

async fn run_shard(
    shard: Rc<Shard>,
    receivers: Vec<glommio::channels::shared_channel::ConnectedReceiver<skein_net::shard::ShardMessage>>,
    config: NodeConfig,
    stop: Arc<AtomicBool>,
    ready: Arc<AtomicUsize>,
    shards: usize,
) -> Result<(), String> {
    let started = std::time::Instant::now();
    for receiver in receivers {
        glommio::spawn_local(skein_net::shard::serve_peer(shard.clone(), receiver)).detach();
    }
    glommio::spawn_local(skein_coordinator::serve::group::group_ticker(shard.clone())).detach();
    glommio::spawn_local(skein_coordinator::serve::group::consumer_lag_task(shard.clone())).detach();
    glommio::spawn_local(skein_coordinator::serve::txn::txn_ticker(shard.clone())).detach();
    // Recover the partitions this shard owns, `PARTITION_OPENS_IN_FLIGHT` at a time:
    // each open waits on a few reads and syncs, which the ring overlaps.
    let image = shard.image();
    // After a clean stop, a log without a checkpoint file (a small one) holds only
    // flushed data: invalid data in it is corruption, not a torn tail.
    shard.logs.set_clean_start(shard.settings.clean_restart);
    let owned: Vec<(TopicPartition, uuid::Uuid)> = image
        .topics
        .values()
        .flat_map(|topic| (0..topic.partitions).map(move |p| (topic, p)))
        .filter(|(topic, p)| {
            topic.shards.get(*p as usize).copied().unwrap_or(0) % shards == shard.id
                && topic.is_replica(*p, shard.settings.node_id)
        })
        .map(|(topic, p)| (TopicPartition::new(topic.name.clone(), p), topic.id))
        .collect();
    drop(image);
    let opens = futures_util::stream::iter(owned).map(|(partition, id)| {
        let shard = shard.clone();
        async move {
            // The topic and assignment as the metadata says now: images applied while
            // other logs recovered may have changed them.
            let image = shard.image();
            let topic = image.topic(&partition.topic).filter(|t| t.id == id)?;
            let settings = TopicSettings::of(topic, &shard.settings.topic_defaults);
            let assignment = skein_net::topics::assignment_here(&shard, &image, topic, partition.partition);
            drop(image);
            let op = ops::Open { settings: Box::new(settings), assignment, in_background: false };
            match shard.call_here(&partition, op).await {
                Ok(()) => Some((partition, id)),
                Err(PartitionError { code, message }) => {
                    tracing::error!(target: "skein", shard = shard.id, partition = %partition, code, message, "partition offline");
                    None
                }
            }
        }
    });
    let hosted: Vec<(TopicPartition, uuid::Uuid)> =
        futures_util::StreamExt::buffer_unordered(opens, skein_control::limits::PARTITION_OPENS_IN_FLIGHT)
            .filter_map(|opened| async move { opened })
            .collect()
            .await;
    let opened = hosted.len();
    shard.logs.set_clean_start(false);
    // An image applied while a log was still recovering could not reach it (the
    // partition was not open): every partition takes its assignment once more, from
    // the image as it is now (the same epoch only refreshes the ISR).
    for (partition, id) in hosted {
        let image = shard.image();
        let Some(topic) = image.topic(&partition.topic).filter(|t| t.id == id) else { continue };
        if !topic.is_replica(partition.partition, shard.settings.node_id) {
            continue;
        }
        let assignment = skein_net::topics::assignment_here(&shard, &image, topic, partition.partition);
        if let Err(PartitionError { code, message }) = shard.call_here(&partition, ops::Assign(assignment)).await {
            tracing::warn!(target: "skein", partition = %partition, code, message, "assignment after recovery failed");
        }
    }
    tracing::info!(target: "skein", shard = shard.id, partitions = opened, recovery_ms = started.elapsed().as_millis() as u64, "shard ready");
    remove_deleted(&shard).await;
    let mut servers = Vec::new();
    for listener in &config.listeners {
        let socket = glommio::net::TcpListener::bind(listener.address)
            .map_err(|e| format!("shard {}: cannot listen on {}: {e}", shard.id, listener.address))?;
        let config = Rc::new(listener.clone());
        servers.push(glommio::spawn_local(skein_net::server::serve(shard.clone(), socket, config)));
    }
    // A virtual broker: this shard's own port on the first listener.
    if let (Some(virtual_brokers), Some(first)) = (&config.virtual_brokers, config.listeners.first()) {
        let address = std::net::SocketAddr::new(first.address.ip(), virtual_brokers.port_base + shard.id as u16);
        let socket = glommio::net::TcpListener::bind(address)
            .map_err(|e| format!("shard {}: cannot listen on {address} (its virtual broker): {e}", shard.id))?;
        let config = Rc::new(first.clone());
        servers.push(glommio::spawn_local(skein_net::server::serve(shard.clone(), socket, config)));
    }
    if shard.id == 0 {
        let interval = Duration::from_millis(config.broker_heartbeat_interval_ms);
        if shard.settings.broker {
            glommio::spawn_local(register_broker(shard.clone(), interval)).detach();
        }
        glommio::spawn_local(crate::user_cli::apply_staged(shard.clone())).detach();
        if let Some(address) = config.controller_listener {
            let listener = glommio::net::TcpListener::bind(address)
                .map_err(|e| format!("cannot listen for the controller quorum on {address}: {e}"))?;
            let cluster_id = shard.settings.cluster_id.clone();
            glommio::spawn_local(skein_control::metadata::listener::serve(
                ShardHost(shard.clone()),
                listener,
                cluster_id,
            ))
            .detach();
        }
        if let Some(admin) = config.admin_listener {
            let shard = shard.clone();
            glommio::spawn_local(async move {
                if let Err(e) = crate::admin::serve(shard, admin).await {
                    tracing::error!(target: "skein", error = %e, "admin endpoint failed");
                }
            })
            .detach();
        }
    }
    spawn_cleaner(&shard, &config, shards);
    spawn_scrubber(&shard, &config);
    glommio::spawn_local(skein_net::replica_fetcher::run(shard.clone(), config.replica_lag_time_max_ms as i64))
        .detach();
    if shard.id == 0 {
        let every = Duration::from_millis(config.replica_high_watermark_checkpoint_interval_ms);
        let shard = shard.clone();
        glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(every).await;
                shard.checkpoint_high_watermarks().await;
            }
        })
        .detach();
    }
    ready.fetch_add(1, Ordering::Release);
    let tick = Duration::from_millis(config.housekeeping_interval_ms.min(100));
    let mut since_housekeeping = Duration::ZERO;
    // Kafka's `producer.id.expiration.check.interval.ms`: each look walks every partition.
    let expiry_check = Duration::from_millis(config.producer_id_expiration_check_interval_ms);
    let mut last_expiry_check = std::time::Instant::now();
    let mut busy = crate::reactor::BusyMeter::new(crate::reactor::health(shard.id));
    while !stop.load(Ordering::Relaxed) {
        let slept = std::time::Instant::now();
        glommio::timer::sleep(tick).await;
        busy.timer_late(slept.elapsed().saturating_sub(tick));
        busy.cross_shard_wait(shard.metrics.cross_shard_wait.buckets());
        busy.sample();
        crate::admin::publish_if_wanted(&shard);
        since_housekeeping += tick;
        if since_housekeeping >= Duration::from_millis(config.housekeeping_interval_ms) {
            since_housekeeping = Duration::ZERO;
            let now = skein_engine::log::now_ms();
            shard.drop_offline_partitions();
            shard.logs.housekeeping(now).await;
            if last_expiry_check.elapsed() >= expiry_check {
                last_expiry_check = std::time::Instant::now();
                let expired = shard.expire_producers(now);
                if expired > 0 {
                    tracing::debug!(target: "skein", shard = shard.id, expired, "idle producers expired");
                }
            }
            remove_deleted(&shard).await;
        }
    }
    // Stop accepting; connections answer what they read (so clients know how their
    // requests ended) and close, for up to two seconds; then close every log.
    for server in servers {
        drop(server.cancel());
    }
    shard.close_connections();
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while shard.metrics.connections.get() > 0 && std::time::Instant::now() < deadline {
        glommio::timer::sleep(Duration::from_millis(10)).await;
    }
    shard.snapshot_producers().await;
    let failed = shard.logs.close_all().await;
    for (partition, error) in &failed {
        tracing::error!(target: "skein", shard = shard.id, partition = %partition, error = %error, "close failed");
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("shard {}: {} logs failed to close", shard.id, failed.len()))
    }
}
