//! Topic lifecycle shared by CreateTopics, auto-creation in Metadata and Produce,
//! DeleteTopics, CreatePartitions and config changes: the controller changes the
//! metadata, and every node opens, reconfigures or removes its partitions as it
//! applies the new image (`reconcile`).

use std::collections::BTreeMap;
use std::rc::Rc;

use futures_util::future::{join_all, Either};
use skein_control::append::TopicSettings;
use skein_control::configs::validate_config;
use skein_control::errors::code;
use skein_control::metadata::controller::{check_growth, decide, ControllerRequest};
use skein_control::metadata::decide::NewTopic;
use skein_control::metadata::{validate_topic_name, Assignment, MetadataImage, Refusal, TopicMeta};
use skein_coordinator::group::GroupRequest;
use skein_coordinator::txn::TxnRequest;
use skein_engine::TopicPartition;

use crate::shard::{ops, PartitionError, Shard};

/// A controller reply of the wrong kind: a bug, answered as Kafka answers one.
/// Checks a new topic's name, partition count, replication factor and configs.
///
/// # Errors
/// INVALID_TOPIC_EXCEPTION, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR or
/// INVALID_CONFIG with Kafka's message.
pub fn validate_new_topic(
    name: &str,
    partitions: i32,
    replication_factor: i16,
    configs: &BTreeMap<String, String>,
) -> Result<(), Refusal> {
    validate_topic_name(name).map_err(|m| (code::INVALID_TOPIC_EXCEPTION, m))?;
    if partitions < 1 {
        return Err((code::INVALID_PARTITIONS, "Number of partitions must be larger than 0.".into()));
    }
    if partitions > 100_000 {
        return Err((
            code::INVALID_PARTITIONS,
            format!("Number of partitions {partitions} exceeds the limit of 100000."),
        ));
    }
    // The controller checks the factor against the registered brokers.
    if replication_factor < 1 && replication_factor != -1 {
        return Err((
            code::INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.".into(),
        ));
    }
    for (name, value) in configs {
        validate_config(name, value).map_err(|m| (code::INVALID_CONFIG, m))?;
    }
    Ok(())
}

/// Creates a topic; its partitions are opened on the nodes that hold them as the image
/// is applied there (`reconcile`), here before the answer.
///
/// # Errors
/// As `validate_new_topic`, TOPIC_ALREADY_EXISTS, INVALID_REPLICATION_FACTOR.
pub async fn create_topic(
    shard: &Rc<Shard>,
    name: &str,
    partitions: i32,
    replication_factor: i16,
    configs: BTreeMap<String, String>,
) -> Result<TopicMeta, Refusal> {
    validate_new_topic(name, partitions, replication_factor, &configs)?;
    let request = ControllerRequest::CreateTopic { name: name.to_owned(), partitions, replication_factor, configs };
    let meta = shard.control(request).await?.into_topic()?;
    tracing::info!(target: "skein::net", topic = name, partitions, "topic created");
    Ok(meta)
}

/// Creates the topics of one CreateTopics request together: each checked alone, those
/// that pass decided in one controller request and committed as one metadata entry,
/// their partitions registered on this node's shards before the answer and opened
/// after it (`reconcile`; operations on them wait for their open). Returns each
/// topic's outcome, in order.
pub async fn create_topics(shard: &Rc<Shard>, topics: Vec<NewTopic>) -> Vec<Result<TopicMeta, Refusal>> {
    let mut outcomes: Vec<Option<Result<TopicMeta, Refusal>>> = topics
        .iter()
        .map(|t| validate_new_topic(&t.name, t.partitions, t.replication_factor, &t.configs).err().map(Err))
        .collect();
    let valid: Vec<NewTopic> = topics.into_iter().zip(&outcomes).filter(|(_, o)| o.is_none()).map(|(t, _)| t).collect();
    let count = valid.len();
    if count > 0 {
        let decided = match shard.control(ControllerRequest::CreateTopics(valid)).await.and_then(|r| r.into_topics()) {
            Ok(decided) if decided.len() == count => decided,
            Ok(_) => vec![Err((code::UNKNOWN_SERVER_ERROR, "the controller answered another count".into())); count],
            Err(refusal) => vec![Err(refusal); count],
        };
        for (slot, outcome) in outcomes.iter_mut().filter(|o| o.is_none()).zip(decided) {
            if let Ok(meta) = &outcome {
                tracing::info!(target: "skein::net", topic = meta.name, partitions = meta.partitions, "topic created");
            }
            *slot = Some(outcome);
        }
    }
    outcomes.into_iter().map(|o| o.unwrap_or_else(|| Err((code::UNKNOWN_SERVER_ERROR, String::new())))).collect()
}

/// Checks what creating a topic would check, changing nothing (`validate_only`).
///
/// # Errors
/// As `create_topic`.
pub fn validate_create(
    shard: &Shard,
    name: &str,
    partitions: i32,
    replication_factor: i16,
    configs: &BTreeMap<String, String>,
) -> Result<(), Refusal> {
    validate_new_topic(name, partitions, replication_factor, configs)?;
    let request = ControllerRequest::CreateTopic {
        name: name.to_owned(),
        partitions,
        replication_factor,
        configs: configs.clone(),
    };
    let local = shard.settings.local();
    decide(&shard.image(), &request, &local).map(|_| ())
}

/// This node's view of partition `p` of `meta` in `image`. In a cluster, a leadership
/// the image gives this node before it registered in this run is not taken: written
/// before a restart, it may stand on a tail this node lost. The registration moves it
/// to an in-sync replica, or gives it back in a new epoch (`decide`).
pub fn assignment_here(shard: &Shard, image: &MetadataImage, meta: &TopicMeta, p: i32) -> Assignment {
    let node = shard.settings.node_id;
    let mut assignment = meta.assignment(p, node);
    let registered = image.brokers.get(&node).is_some_and(|b| b.incarnation == shard.settings.incarnation);
    if shard.settings.clustered && assignment.leader == node && !registered {
        assignment.leader = -1;
    }
    assignment
}

/// Brings this node's partitions in line with a new image, as Kafka's replica manager
/// applies a metadata delta: partitions of deleted topics (or of an older incarnation
/// of their topic) and replicas a reassignment moved off this node are removed, then partitions newly assigned to this node are opened
/// on their shards and those whose topic's configs changed are reconfigured, then each
/// whose assignment changed takes its role (leader or follower, epochs, ISR). Runs on
/// shard 0 after each image is published and before the controller answers. A new
/// partition is only registered on its shard by then, and opened in the background
/// (`ops::Open::in_background`), as Kafka's brokers create a new topic's logs after
/// its CreateTopics is answered. Moving a partition between this node's shards is
/// `move_partition`'s.
pub async fn reconcile(shard: &Rc<Shard>, before: &MetadataImage, after: &MetadataImage) {
    let node = shard.settings.node_id;
    let mut removals = Vec::new();
    for old in before.topics.values() {
        // A topic deleted (or recreated) goes whole; a kept one loses the replicas a
        // reassignment moved off this node.
        let kept = after.topic(&old.name).filter(|t| t.id == old.id);
        let gone = |p: i32| kept.is_none_or(|t| !t.is_replica(p, node));
        for p in (0..old.partitions).filter(|&p| old.is_replica(p, node) && gone(p)) {
            let op = ops::Remove { topic_id: *old.id.as_bytes() };
            removals.push(shard.call_on(old.shards[p as usize], TopicPartition::new(old.name.clone(), p), op));
        }
    }
    let removed = join_all(removals).await;
    let mut moves = Vec::new();
    let mut opens = Vec::new();
    let mut assigns = Vec::new();
    // Dynamic broker-level topic defaults (`log.retention.ms` set cluster-wide, ...)
    // reach every topic without its own value.
    let statics = &shard.settings.topic_defaults;
    let defaults = skein_control::broker_configs::topic_defaults(after, node, statics);
    let defaults_changed = skein_control::broker_configs::topic_defaults(before, node, statics) != defaults;
    let failed_dirs = !shard.settings.log_dirs.failed().is_empty();
    for meta in after.topics.values() {
        let old = before.topic(&meta.name).filter(|o| o.id == meta.id);
        let reconfigured = old.is_some_and(|o| o.configs != meta.configs) || defaults_changed;
        let settings = TopicSettings::of(meta, &defaults);
        for p in (0..meta.partitions).filter(|&p| meta.is_replica(p, node)) {
            let existed = old.is_some_and(|o| p < o.partitions && o.is_replica(p, node));
            let (owner, partition) = (meta.shards[p as usize], TopicPartition::new(meta.name.clone(), p));
            // A replica in a failed log directory stays offline until the node restarts.
            if failed_dirs && shard.settings.log_dirs.is_offline(&partition) {
                continue;
            }
            let assignment = assignment_here(shard, after, meta, p);
            if existed && old.is_some_and(|o| assignment_here(shard, before, o, p) != assignment) {
                tracing::debug!(target: "skein::net", partition = %partition, leader = assignment.leader,
                    leader_epoch = assignment.leader_epoch, partition_epoch = assignment.partition_epoch,
                    isr = ?assignment.isr, "assignment changed");
                assigns.push((owner, partition.clone(), ops::Assign(assignment.clone())));
            }
            // The shard table is the cluster's: a move another node (or this one's
            // `move_partition`, which released it already) made is followed here, so
            // requests routed by the new table find the partition.
            // (A partition the topic just grew by has no old shard.)
            let previous = old.filter(|_| existed).map(|o| o.shards[p as usize]).filter(|&s| s != owner);
            if let Some(source) = previous {
                let open = ops::Open { settings: Box::new(settings.clone()), assignment, in_background: false };
                moves.push(follow_move(shard, partition, source, owner, open));
                continue;
            }
            let change = match (existed, reconfigured) {
                (false, _) => {
                    let open = ops::Open { settings: Box::new(settings.clone()), assignment, in_background: true };
                    Either::Left(shard.call_on(owner, partition, open))
                }
                (true, true) => {
                    Either::Right(shard.call_on(owner, partition, ops::Reconfigure(Box::new(settings.clone()))))
                }
                (true, false) => continue,
            };
            opens.push(change);
        }
    }
    let moved = join_all(moves).await;
    let opened = join_all(opens).await;
    // Roles after the logs are open: lead or follow, with the epochs and ISR.
    let assigned =
        join_all(assigns.into_iter().map(|(owner, partition, op)| shard.call_on(owner, partition, op))).await;
    for (kind, results) in [("remove", removed), ("move", moved), ("open", opened), ("assign", assigned)] {
        for result in results {
            if let Err(PartitionError { code, message }) = result {
                tracing::error!(target: "skein::net", kind, code, message, "partition change failed");
            }
        }
    }
}

/// Moves a hosted partition from shard `source` to `target` as the image now says: a
/// release on the old shard (already done when it was this node's move) and an open
/// on the new one, in its role.
async fn follow_move(
    shard: &Rc<Shard>,
    partition: TopicPartition,
    source: usize,
    target: usize,
    open: ops::Open,
) -> Result<(), PartitionError> {
    match shard.call_on(source, partition.clone(), ops::Release).await {
        Ok(()) => {}
        Err(error) if error.code == code::NOT_LEADER_OR_FOLLOWER => {}
        Err(error) => return Err(error),
    }
    shard.call_on(target, partition, open).await
}

/// Replaces broker `broker`'s dynamic configs (`""`: the cluster defaults) through
/// the controller, or only checks them (`validate_only`).
///
/// # Errors
/// INVALID_REQUEST for a config that is not dynamic here or a bad broker id,
/// INVALID_CONFIG for a bad value; the controller's refusal.
pub async fn set_broker_configs(
    shard: &Rc<Shard>,
    broker: &str,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), Refusal> {
    if !broker.is_empty() && broker.parse::<i32>().is_err() {
        return Err((code::INVALID_REQUEST, format!("Invalid broker id {broker}")));
    }
    for (name, value) in &configs {
        skein_control::broker_configs::validate_broker_config(broker, name, value)?;
    }
    if validate_only {
        return Ok(());
    }
    shard.control(ControllerRequest::SetBrokerConfigs { broker: broker.to_string(), configs }).await.map(|_| ())
}

/// Replaces group `group`'s config overrides through the controller, once they pass
/// Kafka's checks against this node's bounds, or only checks them (`validate_only`).
///
/// # Errors
/// INVALID_REQUEST, INVALID_CONFIG (`group::configs::validate`); the controller's
/// refusal.
pub async fn set_group_configs(
    shard: &Rc<Shard>,
    group: &str,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), Refusal> {
    let broker = skein_coordinator::group::configs::broker_values(&shard.coordinators.groups.consumer_settings.get());
    skein_coordinator::group::configs::validate(group, &configs, &broker)?;
    if validate_only {
        return Ok(());
    }
    shard.control(ControllerRequest::SetGroupConfigs { group: group.to_string(), configs }).await.map(|_| ())
}

/// Replaces the configs of client-metrics resource `name` (KIP-714) after Kafka's
/// checks; empty removes it.
///
/// # Errors
/// As `client_metrics::validate`, and the controller's refusal.
pub async fn set_client_metrics(
    shard: &Rc<Shard>,
    name: &str,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), Refusal> {
    crate::client_metrics::validate(name, &configs)?;
    if validate_only {
        return Ok(());
    }
    shard.control(ControllerRequest::SetClientMetrics { name: name.to_string(), configs }).await.map(|_| ())
}

/// Deletes a topic: metadata first (the topic disappears for clients); each node
/// removes its logs as it applies the change.
///
/// # Errors
/// UNKNOWN_TOPIC_OR_PARTITION.
pub async fn delete_topic(shard: &Rc<Shard>, name: &str) -> Result<TopicMeta, Refusal> {
    let request = ControllerRequest::DeleteTopic { name: name.to_owned() };
    let meta = shard.control(request).await?.into_topic()?;
    tracing::info!(target: "skein::net", topic = name, "topic deleted");
    Ok(meta)
}

/// Grows a topic to `count` partitions.
///
/// # Errors
/// UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS.
pub async fn create_partitions(shard: &Rc<Shard>, name: &str, count: i32, validate_only: bool) -> Result<(), Refusal> {
    if validate_only {
        let image = shard.image();
        let meta = image.topic(name).ok_or_else(|| {
            (code::UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.".to_string())
        })?;
        return check_growth(meta, count);
    }
    let request = ControllerRequest::CreatePartitions { name: name.to_owned(), count };
    shard.control(request).await?.into_grown()?;
    Ok(())
}

/// Replaces a topic's config overrides; each node applies them to its partitions as it
/// applies the change.
///
/// # Errors
/// UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG.
pub async fn set_topic_configs(
    shard: &Rc<Shard>,
    name: &str,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), Refusal> {
    for (k, v) in &configs {
        validate_config(k, v).map_err(|m| (code::INVALID_CONFIG, m))?;
    }
    let unknown = || (code::UNKNOWN_TOPIC_OR_PARTITION, format!("Topic {name} does not exist."));
    if validate_only {
        return shard.image().topic(name).map(|_| ()).ok_or_else(unknown);
    }
    let request = ControllerRequest::SetConfigs { name: name.to_owned(), configs };
    shard.control(request).await?.into_topic()?;
    Ok(())
}

/// Auto-creates a topic (`auto.create.topics.enable`) with `num.partitions`.
pub async fn auto_create(shard: &Rc<Shard>, name: &str) -> Result<TopicMeta, Refusal> {
    match create_topic(shard, name, shard.settings.num_partitions, 1, BTreeMap::new()).await {
        Err((code::TOPIC_ALREADY_EXISTS, _)) => {
            shard.image().topic(name).cloned().ok_or((code::UNKNOWN_TOPIC_OR_PARTITION, String::new()))
        }
        other => other,
    }
}

/// Moves a partition to another shard of this node without stopping it: the old shard
/// closes the log cleanly (appends already admitted are written first), the metadata
/// points at the new shard, and the new shard opens the log. Meanwhile requests for the
/// partition get NOT_LEADER_OR_FOLLOWER, which clients retry after a metadata refresh;
/// nothing acknowledged is lost and idempotent producers' retries are deduplicated.
///
/// # Errors
/// UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST for a shard this node does not run.
pub async fn move_partition(shard: &Rc<Shard>, partition: &TopicPartition, target: usize) -> Result<(), Refusal> {
    if target >= shard.settings.shards {
        return Err((
            code::INVALID_REQUEST,
            format!("no shard {target}: this node runs {} shards", shard.settings.shards),
        ));
    }
    let image = shard.image();
    let meta = image
        .topic(&partition.topic)
        .cloned()
        .ok_or((code::UNKNOWN_TOPIC_OR_PARTITION, format!("no topic {}", partition.topic)))?;
    let source =
        image.shard_of(partition).ok_or((code::UNKNOWN_TOPIC_OR_PARTITION, format!("no partition {partition}")))?;
    if source == target {
        return Ok(());
    }
    shard.call_on(source, partition.clone(), ops::Release).await.map_err(PartitionError::into_refusal)?;
    shard.control(ControllerRequest::MovePartition { partition: partition.clone(), target }).await?;
    let settings = TopicSettings::of(&meta, &shard.topic_defaults());
    let image = shard.image();
    let meta = image.topic(&partition.topic).unwrap_or(&meta);
    let assignment = assignment_here(shard, &image, meta, partition.partition);
    let open = ops::Open { settings: Box::new(settings), assignment, in_background: false };
    shard.call_on(target, partition.clone(), open).await.map_err(PartitionError::into_refusal)?;
    tracing::info!(target: "skein::net", partition = %partition, source, target, "partition moved");
    Ok(())
}

/// Moves `partition`'s replica on this node to log directory `target`
/// (AlterReplicaLogDirs), in the background as Kafka's future replicas do: the
/// request is answered at once, and DescribeLogDirs shows the replica as a future one
/// in `target` until it is there. Returns false when this node hosts no replica of it.
pub async fn move_to_log_dir(shard: &Rc<Shard>, partition: &TopicPartition, target: usize) -> bool {
    let Some(owner) = shard.image().shard_of(partition) else { return false };
    if shard.call_on(owner, partition.clone(), ops::Stats).await.is_err() {
        return false;
    }
    let dirs = shard.settings.log_dirs.clone();
    let moving = dirs.moving_to(partition).is_some();
    if !moving && dirs.located(partition) == Some(target) {
        return true;
    }
    if dirs.want_move(partition, target) {
        glommio::spawn_local(log_dir_moves(shard.clone(), partition.clone())).detach();
    }
    true
}

/// The moves of one partition between log directories, one after the other until it
/// is where it was last asked to be. A move that fails is logged and given up; the
/// partition serves from where it was.
async fn log_dir_moves(shard: Rc<Shard>, partition: TopicPartition) {
    let dirs = shard.settings.log_dirs.clone();
    while let Some(target) = dirs.moving_to(&partition) {
        if dirs.located(&partition) == Some(target) {
            if dirs.end_move(&partition, target) {
                return;
            }
            continue;
        }
        let started = std::time::Instant::now();
        match move_log_dir_once(&shard, &partition, target).await {
            Ok(moved) => tracing::info!(target: "skein::net", partition = %partition,
                dir = %dirs.get(target).map(|d| d.path().display().to_string()).unwrap_or_default(),
                ms = started.elapsed().as_millis() as u64, precopied_bytes = moved.precopied_bytes,
                paused_ms = moved.paused_ms, copied_in_pause_bytes = moved.paused_bytes,
                "replica moved to another log directory"),
            Err(message) => {
                tracing::warn!(target: "skein::net", partition = %partition, error = %message,
                    "moving a replica to another log directory failed; it stays where it was");
                dirs.cancel_move(&partition);
                return;
            }
        }
    }
}

/// What one move copied, and how long the partition was not served.
struct Moved {
    precopied_bytes: u64,
    paused_bytes: u64,
    paused_ms: u64,
}

/// One move: the copy while the partition serves, then the pause in which its owner
/// closes it and the copy takes over, then the open from wherever it ended. Requests
/// meanwhile get NOT_LEADER_OR_FOLLOWER, which clients retry.
async fn move_log_dir_once(shard: &Rc<Shard>, partition: &TopicPartition, target: usize) -> Result<Moved, String> {
    let owner = shard.image().shard_of(partition).ok_or("its topic is gone")?;
    let precopy = shard
        .call_on(owner, partition.clone(), ops::Precopy { target })
        .await
        .map_err(|e| format!("copying: {}", e.message.unwrap_or_else(|| format!("error {}", e.code))))?;
    let precopied_bytes = precopy.bytes();
    let paused = std::time::Instant::now();
    let finished = shard.call_on(owner, partition.clone(), ops::FinishMove(Box::new(precopy))).await;
    // Opened again, moved or not, if this node still holds a replica of it.
    let image = shard.image();
    if let Some(meta) =
        image.topic(&partition.topic).filter(|m| m.is_replica(partition.partition, shard.settings.node_id))
    {
        let settings = TopicSettings::of(meta, &shard.topic_defaults());
        let assignment = assignment_here(shard, &image, meta, partition.partition);
        let open = ops::Open { settings: Box::new(settings), assignment, in_background: false };
        let owner = image.shard_of(partition).unwrap_or(owner);
        shard.call_on(owner, partition.clone(), open).await.map_err(|e| format!("opening again: error {}", e.code))?;
    }
    let paused_bytes =
        finished.map_err(|e| format!("finishing: {}", e.message.unwrap_or_else(|| format!("error {}", e.code))))?;
    Ok(Moved { precopied_bytes, paused_bytes, paused_ms: paused.elapsed().as_millis() as u64 })
}

/// Kafka's `offsets.topic.replication.factor` and
/// `transaction.state.log.replication.factor` default.
const INTERNAL_TOPIC_REPLICATION_FACTOR: i16 = 3;

/// Creates `__consumer_offsets` (compacted, `offsets.topic.num.partitions`) on first use.
///
/// # Errors
/// When the topic cannot be created.
pub async fn ensure_offsets_topic(shard: &Rc<Shard>) -> Result<(), Refusal> {
    let partitions = skein_coordinator::group::OFFSETS_TOPIC_PARTITIONS;
    ensure_internal_topic(shard, skein_coordinator::group::OFFSETS_TOPIC, partitions, BTreeMap::new()).await
}

/// Creates `__transaction_state` (compacted, `transaction.state.log.num.partitions`,
/// `transaction.state.log.min.isr` 2 within its replicas) on first use.
///
/// # Errors
/// When the topic cannot be created.
pub async fn ensure_transaction_topic(shard: &Rc<Shard>) -> Result<(), Refusal> {
    let factor = internal_replication_factor(shard);
    let configs = BTreeMap::from([("min.insync.replicas".to_string(), factor.min(2).to_string())]);
    let partitions = skein_coordinator::txn::TRANSACTION_TOPIC_PARTITIONS;
    ensure_internal_topic(shard, skein_coordinator::txn::TRANSACTION_TOPIC, partitions, configs).await
}

/// Kafka's `offsets.topic.replication.factor` and
/// `transaction.state.log.replication.factor` (3), within the live brokers, so that a
/// coordinator moves to an in-sync replica when its broker goes.
fn internal_replication_factor(shard: &Shard) -> i16 {
    let image = shard.image();
    let live = image.brokers.values().filter(|b| !b.fenced && b.id != shard.settings.node_id).count() + 1;
    INTERNAL_TOPIC_REPLICATION_FACTOR.min(live as i16)
}

/// Creates `__share_group_state` on first use: compacted (Skein writes each
/// share-partition's state whole, so the latest record of a key is all of it),
/// `share.coordinator.state.topic.min.isr` 2 within its replicas.
///
/// # Errors
/// When the topic cannot be created.
pub async fn ensure_share_state_topic(shard: &Rc<Shard>) -> Result<(), Refusal> {
    let factor = internal_replication_factor(shard);
    let configs = BTreeMap::from([("min.insync.replicas".to_string(), factor.min(2).to_string())]);
    let partitions = skein_coordinator::serve::share::STATE_TOPIC_PARTITIONS;
    ensure_internal_topic(shard, skein_coordinator::serve::share::STATE_TOPIC, partitions, configs).await
}

async fn ensure_internal_topic(
    shard: &Rc<Shard>,
    name: &str,
    partitions: i32,
    mut configs: BTreeMap<String, String>,
) -> Result<(), Refusal> {
    if shard.image().topic(name).is_some() {
        return Ok(());
    }
    configs.insert("cleanup.policy".to_string(), "compact".to_string());
    configs.insert("segment.bytes".to_string(), "104857600".to_string());
    let factor = internal_replication_factor(shard);
    match create_topic(shard, name, partitions, factor, configs).await {
        Ok(_) | Err((code::TOPIC_ALREADY_EXISTS, _)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Runs a transaction coordinator operation on the shard that coordinates `id`,
/// creating `__transaction_state` first when it does not exist.
///
/// # Errors
/// The Kafka error code when the coordinator cannot answer: NOT_COORDINATOR when
/// another broker leads the id's partition, COORDINATOR_LOAD_IN_PROGRESS while it loads.
pub async fn txn_call<C: TxnRequest>(shard: &Rc<Shard>, id: &str, call: C) -> Result<C::Reply, i16> {
    ensure_transaction_topic(shard).await.map_err(|_| code::COORDINATOR_NOT_AVAILABLE)?;
    shard.txn_call(id, call).await
}

/// Runs a group operation on the shard that coordinates `group`, creating
/// `__consumer_offsets` first when it does not exist.
///
/// # Errors
/// The Kafka error code when the coordinator cannot answer (loading, unavailable).
pub async fn group_call<C: GroupRequest>(shard: &Rc<Shard>, group: &str, call: C) -> Result<C::Reply, i16> {
    ensure_offsets_topic(shard).await.map_err(|_| code::COORDINATOR_NOT_AVAILABLE)?;
    shard.group_call(group, call).await
}
