//! `skein bench scale STEP`: the steps of a partition-count scale run, each timed the
//! same way against any Kafka-compatible broker (`bench-harness/scale.sh` runs them
//! against Skein and Apache Kafka side by side).
//!
//! The topics are `<prefix>-0000 .. <prefix>-<topics-1>`, each with `--partitions`
//! partitions. Each step prints one JSON line of figures, with units in the field names:
//! - `create`: CreateTopics requests for every topic (at most 5,000 partitions each:
//!   Kafka refuses larger operations), the time until they are answered, until every
//!   node's Metadata lists every partition with a leader, and until every leader
//!   answers ListOffsets for each of them;
//! - `produce`: one record to each partition through librdkafka (`acks=all`): how many
//!   were acknowledged, and when;
//! - `metadata`: full Metadata requests (every topic), each timed;
//! - `consume`: one record read back from each partition through librdkafka;
//! - `serving`: how long until every partition's leader answers ListOffsets (after a
//!   restart), and how many did by the deadline;
//! - `delete`: DeleteTopics for every topic.
//!
//! The control requests go on the native client's blocking connections
//! (`native::client`); produce and consume are a real client's (librdkafka).

use std::collections::{BTreeMap, HashSet};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, DeleteTopicsRequest, ListOffsetsRequest, MetadataRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Message, TopicPartitionList};
use serde_json::{json, Value};

use crate::native::client::{connect, exchange};

const CREATE_TOPICS_VERSION: i16 = 5;
const DELETE_TOPICS_VERSION: i16 = 4;
const METADATA_VERSION: i16 = 12;
const LIST_OFFSETS_VERSION: i16 = 7;
/// Partitions in one ListOffsets request: a leader of 10,000 partitions gets ten.
const LIST_OFFSETS_PARTITIONS_MAX: usize = 1000;
/// Kafka codes a partition answers while it is not served yet (not loaded, no leader,
/// unknown to this broker's metadata so far), retried until the deadline.
const NOT_YET: [i16; 5] = [3, 5, 6, 15, 56];

/// What a scale step works on.
#[derive(Debug, Clone)]
pub struct ScaleOptions {
    /// The node requests go to.
    pub bootstrap: String,
    /// Every node whose Metadata must list the topics (`create`); the bootstrap alone
    /// when empty.
    pub nodes: Vec<String>,
    pub prefix: String,
    pub topics: u32,
    pub partitions: u32,
    pub replication_factor: i16,
    /// Bytes of each record's value (`produce`).
    pub record_bytes: usize,
    /// How long a step waits before it reports what it reached.
    pub timeout: Duration,
    /// Topic configs for `create`, `name=value`.
    pub configs: Vec<(String, String)>,
}

impl ScaleOptions {
    pub fn topic_names(&self) -> Vec<String> {
        (0..self.topics).map(|t| format!("{}-{t:04}", self.prefix)).collect()
    }

    fn total(&self) -> usize {
        self.topics as usize * self.partitions as usize
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

/// CreateTopics for every topic, then the times until every node lists every partition
/// with a leader and until the leaders serve them.
///
/// # Errors
/// A message when a node cannot be reached or a topic is refused.
pub fn create(options: &ScaleOptions) -> Result<Value, String> {
    let names = options.topic_names();
    let mut stream = connect(&options.bootstrap)?;
    let started = Instant::now();
    // Kafka's controller refuses an operation of more than 10,000 records ("Unable to
    // perform excessively large batch operation"), so topics go in requests of at most
    // `CREATE_PARTITIONS_PER_REQUEST` partitions, one after another, to every broker.
    let per_request = (CREATE_PARTITIONS_PER_REQUEST / options.partitions.max(1) as usize).max(1);
    for chunk in names.chunks(per_request) {
        create_some(options, &mut stream, chunk)?;
    }
    let answered_ms = ms(started);
    let deadline = started + options.timeout;
    let nodes = if options.nodes.is_empty() { vec![options.bootstrap.clone()] } else { options.nodes.clone() };
    let mut listed_ms = BTreeMap::new();
    for node in &nodes {
        let mut stream = connect(node)?;
        loop {
            let (leaders, _) = leaders_of(&mut stream, &names)?;
            if leaders.len() == options.total() {
                listed_ms.insert(node.clone(), ms(started));
                break;
            }
            if Instant::now() > deadline {
                listed_ms.insert(node.clone(), f64::NAN);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let serving = serve_all(options, started, deadline)?;
    let listed_all_ms = listed_ms.values().copied().fold(0.0, f64::max);
    Ok(json!({
        "step": "create",
        "topics": options.topics,
        "partitions": options.total(),
        "replication_factor": options.replication_factor,
        "requests": names.len().div_ceil(per_request),
        "answered_ms": answered_ms,
        "listed_by_every_node_ms": listed_all_ms,
        "listed_ms": listed_ms,
        "serving_ms": serving.0,
        "served": serving.1,
    }))
}

/// Partitions in one CreateTopics request of `create`.
const CREATE_PARTITIONS_PER_REQUEST: usize = 5000;

/// One CreateTopics request for the topics `names`.
fn create_some(options: &ScaleOptions, stream: &mut TcpStream, names: &[String]) -> Result<(), String> {
    let mut request = CreateTopicsRequest::default();
    request.timeout_ms = options.timeout.as_millis().min(i32::MAX as u128) as i32;
    request.topics = names
        .iter()
        .map(|t| {
            let mut topic = CreatableTopic::default()
                .with_name(name(t))
                .with_num_partitions(options.partitions as i32)
                .with_replication_factor(options.replication_factor);
            topic.configs = options
                .configs
                .iter()
                .map(|(k, v)| {
                    kafka_protocol::messages::create_topics_request::CreatableTopicConfig::default()
                        .with_name(StrBytes::from_string(k.clone()))
                        .with_value(Some(StrBytes::from_string(v.clone())))
                })
                .collect();
            topic
        })
        .collect();
    let response = exchange(stream, &request, CREATE_TOPICS_VERSION)?;
    let refused: Vec<String> = response
        .topics
        .iter()
        .filter(|t| t.error_code != 0)
        .map(|t| format!("{}: {} {:?}", t.name.0.as_str(), t.error_code, t.error_message.as_ref().map(|m| m.as_str())))
        .collect();
    if !refused.is_empty() {
        return Err(format!("CreateTopics refused {} topics, first {}", refused.len(), refused[0]));
    }
    Ok(())
}

/// (topic, partition) → leader id.
type Leaders = BTreeMap<(String, i32), i32>;

/// Every partition of `names` with a leader in one Metadata response: (topic,
/// partition) → leader id, and broker id → address.
fn leaders_of(stream: &mut TcpStream, names: &[String]) -> Result<(Leaders, BTreeMap<i32, String>), String> {
    let mut request = MetadataRequest::default();
    request.topics = Some(
        names
            .iter()
            .map(|t| {
                kafka_protocol::messages::metadata_request::MetadataRequestTopic::default().with_name(Some(name(t)))
            })
            .collect(),
    );
    let response = exchange(stream, &request, METADATA_VERSION)?;
    let brokers = response.brokers.iter().map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port))).collect();
    let mut leaders = BTreeMap::new();
    for topic in &response.topics {
        let Some(topic_name) = &topic.name else { continue };
        for p in topic.partitions.iter().filter(|p| p.error_code == 0 && p.leader_id.0 >= 0) {
            leaders.insert((topic_name.0.to_string(), p.partition_index), p.leader_id.0);
        }
    }
    Ok((leaders, brokers))
}

/// Asks every partition's leader for its latest offset until each answers without an
/// error or the deadline passes. Returns the time from `started` until the last one
/// answered (NaN when some never did) and how many did.
fn serve_all(options: &ScaleOptions, started: Instant, deadline: Instant) -> Result<(f64, usize), String> {
    let names = options.topic_names();
    let mut pending: HashSet<(String, i32)> =
        names.iter().flat_map(|t| (0..options.partitions as i32).map(move |p| (t.clone(), p))).collect();
    let mut bootstrap = loop {
        match connect(&options.bootstrap) {
            Ok(stream) => break stream,
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let mut connections: BTreeMap<String, TcpStream> = BTreeMap::new();
    while !pending.is_empty() && Instant::now() < deadline {
        let (leaders, brokers) = match leaders_of(&mut bootstrap, &names) {
            Ok(found) => found,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                bootstrap = connect(&options.bootstrap)?;
                continue;
            }
        };
        let mut by_leader: BTreeMap<String, Vec<(String, i32)>> = BTreeMap::new();
        for key in &pending {
            if let Some(address) = leaders.get(key).and_then(|l| brokers.get(l)) {
                by_leader.entry(address.clone()).or_default().push(key.clone());
            }
        }
        for (address, partitions) in by_leader {
            for chunk in partitions.chunks(LIST_OFFSETS_PARTITIONS_MAX) {
                let stream = match connections.entry(address.clone()) {
                    std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::btree_map::Entry::Vacant(e) => match connect(&address) {
                        Ok(s) => e.insert(s),
                        Err(_) => continue,
                    },
                };
                match list_offsets(stream, chunk) {
                    Ok(served) => {
                        for key in served {
                            pending.remove(&key);
                        }
                    }
                    Err(_) => {
                        connections.remove(&address);
                    }
                }
            }
        }
        if !pending.is_empty() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let served = options.total() - pending.len();
    Ok((if pending.is_empty() { ms(started) } else { f64::NAN }, served))
}

/// One ListOffsets (latest) for `partitions`; returns those answered without an error.
fn list_offsets(stream: &mut TcpStream, partitions: &[(String, i32)]) -> Result<Vec<(String, i32)>, String> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, p) in partitions {
        by_topic.entry(topic.as_str()).or_default().push(*p);
    }
    let mut request = ListOffsetsRequest::default();
    request.replica_id = BrokerId(-1);
    request.topics = by_topic
        .iter()
        .map(|(topic, ps)| {
            ListOffsetsTopic::default().with_name(name(topic)).with_partitions(
                ps.iter()
                    .map(|&p| {
                        ListOffsetsPartition::default()
                            .with_partition_index(p)
                            .with_current_leader_epoch(-1)
                            .with_timestamp(-1)
                    })
                    .collect(),
            )
        })
        .collect();
    let response = exchange(stream, &request, LIST_OFFSETS_VERSION)?;
    let mut served = Vec::new();
    for topic in &response.topics {
        for p in &topic.partitions {
            if p.error_code == 0 {
                served.push((topic.name.0.to_string(), p.partition_index));
            } else if !NOT_YET.contains(&p.error_code) {
                return Err(format!(
                    "ListOffsets {}-{}: error {}",
                    topic.name.0.as_str(),
                    p.partition_index,
                    p.error_code
                ));
            }
        }
    }
    Ok(served)
}

/// `serving` after a restart: the time until every partition is served, from the
/// step's start (the caller starts it as soon as the node listens).
///
/// # Errors
/// A message when the bootstrap cannot be reached before the deadline.
pub fn serving(options: &ScaleOptions) -> Result<Value, String> {
    let started = Instant::now();
    let (serving_ms, served) = serve_all(options, started, started + options.timeout)?;
    Ok(json!({ "step": "serving", "partitions": options.total(), "serving_ms": serving_ms, "served": served }))
}

/// Counts deliveries and their errors.
struct Deliveries {
    acked: std::sync::atomic::AtomicUsize,
    errors: std::sync::Mutex<BTreeMap<String, usize>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.acked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Err((e, _)) => *self.errors.lock().expect("not poisoned").entry(e.to_string()).or_default() += 1,
        }
    }
}

/// One record to each partition through librdkafka (`acks=all`, idempotence off so a
/// lost delivery is not retried into a duplicate). Returns how many were acknowledged
/// and when the last one was.
///
/// # Errors
/// A message when the producer cannot be created.
pub fn produce(options: &ScaleOptions) -> Result<Value, String> {
    let context = Deliveries { acked: Default::default(), errors: Default::default() };
    let timeout_ms = options.timeout.as_millis().to_string();
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", &options.bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "false")
        .set("linger.ms", "5")
        .set("message.timeout.ms", &timeout_ms)
        .set("queue.buffering.max.messages", "1000000")
        .create_with_context(context)
        .map_err(|e| format!("producer: {e}"))?;
    let value = vec![b'x'; options.record_bytes];
    let started = Instant::now();
    let total = options.total();
    let mut last_acked_ms = f64::NAN;
    for topic in options.topic_names() {
        for p in 0..options.partitions as i32 {
            let key = format!("{topic}-{p}");
            let mut record = BaseRecord::to(&topic).partition(p).key(key.as_bytes()).payload(&value);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((_, returned)) => {
                        record = returned;
                        producer.poll(Duration::from_millis(10));
                    }
                }
            }
        }
        producer.poll(Duration::ZERO);
    }
    let deadline = started + options.timeout + Duration::from_secs(5);
    let mut errors_seen = 0;
    while Instant::now() < deadline {
        producer.poll(Duration::from_millis(20));
        let acked = producer.context().acked.load(std::sync::atomic::Ordering::Relaxed);
        let errors: usize = producer.context().errors.lock().expect("not poisoned").values().sum();
        if acked > 0 && acked + errors > errors_seen {
            last_acked_ms = ms(started);
        }
        errors_seen = acked + errors;
        if acked + errors >= total {
            break;
        }
    }
    let acked = producer.context().acked.load(std::sync::atomic::Ordering::Relaxed);
    let errors = producer.context().errors.lock().expect("not poisoned").clone();
    producer.purge(rdkafka::producer::PurgeConfig::default().queue().inflight());
    Ok(json!({
        "step": "produce",
        "partitions": total,
        "acked": acked,
        "unanswered": total - acked - errors.values().sum::<usize>(),
        "errors": errors,
        "last_answer_ms": last_acked_ms,
    }))
}

/// A slow trickle to every partition at once: `rate` records a second spread over all
/// partitions (each partition gets `rate / partitions` a second), through librdkafka
/// (`acks=all`), for `duration`. Reports the records acknowledged and the broker's
/// resident memory (`VmRSS` and its peak `VmHWM`) before and after, when `broker_pid`
/// is given.
///
/// # Errors
/// A message when the producer cannot be created.
pub fn trickle(
    options: &ScaleOptions,
    rate: u64,
    duration: Duration,
    broker_pid: Option<u32>,
) -> Result<Value, String> {
    let context = Deliveries { acked: Default::default(), errors: Default::default() };
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", &options.bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "false")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .set("queue.buffering.max.messages", "1000000")
        .create_with_context(context)
        .map_err(|e| format!("producer: {e}"))?;
    let memory_before = broker_pid.and_then(memory_kib);
    let value = vec![b'x'; options.record_bytes];
    let targets: Vec<(String, i32)> = options
        .topic_names()
        .into_iter()
        .flat_map(|t| (0..options.partitions as i32).map(move |p| (t.clone(), p)))
        .collect();
    let started = Instant::now();
    let mut sent = 0u64;
    let mut next = 0usize;
    while started.elapsed() < duration {
        let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
        while sent < due {
            let (topic, p) = &targets[next % targets.len()];
            next += 1;
            let record = BaseRecord::to(topic).partition(*p).key("k").payload(&value);
            if producer.send(record).is_err() {
                break;
            }
            sent += 1;
        }
        producer.poll(Duration::from_millis(1));
    }
    let _ = producer.flush(Duration::from_secs(30));
    let acked = producer.context().acked.load(std::sync::atomic::Ordering::Relaxed);
    let errors = producer.context().errors.lock().expect("not poisoned").clone();
    let memory_after = broker_pid.and_then(memory_kib);
    Ok(json!({
        "step": "trickle",
        "partitions": options.total(),
        "rate": rate,
        "seconds": duration.as_secs_f64(),
        "sent": sent,
        "acked": acked,
        "errors": errors,
        "rss_kib_before": memory_before.map(|m| m.0),
        "rss_kib_after": memory_after.map(|m| m.0),
        "rss_peak_kib": memory_after.map(|m| m.1),
    }))
}

/// A process's resident memory and its peak, KiB (`VmRSS`, `VmHWM`).
pub fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status.lines().find(|l| l.starts_with(name))?.split_whitespace().nth(1)?.parse().ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// `rounds` full Metadata requests (every topic of the cluster), each timed.
///
/// # Errors
/// A message when the node cannot be reached or a request fails.
pub fn metadata(options: &ScaleOptions, rounds: usize) -> Result<Value, String> {
    let mut stream = connect(&options.bootstrap)?;
    stream.set_read_timeout(Some(options.timeout)).map_err(|e| e.to_string())?;
    let mut times = Vec::new();
    let mut partitions = 0;
    for _ in 0..rounds.max(1) {
        // No topic list: every topic of the cluster.
        let request = MetadataRequest::default().with_topics(None);
        let started = Instant::now();
        match exchange(&mut stream, &request, METADATA_VERSION) {
            Ok(response) => {
                times.push(ms(started));
                partitions = response.topics.iter().map(|t| t.partitions.len()).sum::<usize>();
            }
            Err(e) => {
                times.push(f64::NAN);
                eprintln!("metadata: {e}");
                stream = connect(&options.bootstrap)?;
            }
        }
    }
    Ok(json!({ "step": "metadata", "round_ms": times, "partitions_listed": partitions }))
}

/// One record read back from each partition through librdkafka, every partition
/// assigned from its beginning.
///
/// # Errors
/// A message when the consumer cannot be created.
pub fn consume(options: &ScaleOptions) -> Result<Value, String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &options.bootstrap)
        .set("group.id", format!("{}-reader", options.prefix))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .map_err(|e| format!("consumer: {e}"))?;
    let mut assignment = TopicPartitionList::new();
    for topic in options.topic_names() {
        for p in 0..options.partitions as i32 {
            assignment
                .add_partition_offset(&topic, p, rdkafka::Offset::Beginning)
                .map_err(|e| format!("assign {topic}-{p}: {e}"))?;
        }
    }
    let started = Instant::now();
    consumer.assign(&assignment).map_err(|e| format!("assign: {e}"))?;
    let mut seen: HashSet<(String, i32)> = HashSet::new();
    let mut errors = 0usize;
    let deadline = started + options.timeout;
    while seen.len() < options.total() && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => {
                seen.insert((message.topic().to_string(), message.partition()));
            }
            Some(Err(_)) => errors += 1,
            None => {}
        }
    }
    let complete = seen.len() == options.total();
    Ok(json!({
        "step": "consume",
        "partitions": options.total(),
        "read": seen.len(),
        "errors": errors,
        "read_all_ms": if complete { ms(started) } else { f64::NAN },
        "elapsed_ms": ms(started),
    }))
}

/// DeleteTopics for every topic.
///
/// # Errors
/// A message when the node cannot be reached.
pub fn delete(options: &ScaleOptions) -> Result<Value, String> {
    let mut stream = connect(&options.bootstrap)?;
    let mut request = DeleteTopicsRequest::default();
    request.timeout_ms = options.timeout.as_millis().min(i32::MAX as u128) as i32;
    request.topic_names = options.topic_names().iter().map(|t| name(t)).collect();
    let started = Instant::now();
    let response = exchange(&mut stream, &request, DELETE_TOPICS_VERSION)?;
    let failed = response.responses.iter().filter(|r| r.error_code != 0).count();
    Ok(json!({ "step": "delete", "answered_ms": ms(started), "failed": failed }))
}

const FIND_COORDINATOR_VERSION: i16 = 4;
const OFFSET_COMMIT_VERSION: i16 = 8;
const OFFSET_FETCH_VERSION: i16 = 8;
/// Keys in one FindCoordinator, groups in one OffsetFetch, and OffsetCommit requests
/// written before their responses are read.
const GROUP_BATCH: usize = 500;

/// The consumer groups of a `groups` run: `<prefix>-group-00000` and on.
fn group_names(options: &ScaleOptions, groups: usize) -> Vec<String> {
    (0..groups).map(|g| format!("{}-group-{g:05}", options.prefix)).collect()
}

/// Each group's coordinator ("host:port"), from batched FindCoordinator requests,
/// retried until every group has one or the deadline passes.
fn coordinators(options: &ScaleOptions, groups: &[String], deadline: Instant) -> Result<Vec<String>, String> {
    use kafka_protocol::messages::FindCoordinatorRequest;
    let mut found: Vec<Option<String>> = vec![None; groups.len()];
    let mut stream = connect(&options.bootstrap)?;
    loop {
        for (chunk, names) in groups.chunks(GROUP_BATCH).enumerate() {
            let missing: Vec<usize> =
                (0..names.len()).map(|i| chunk * GROUP_BATCH + i).filter(|&i| found[i].is_none()).collect();
            if missing.is_empty() {
                continue;
            }
            let request = FindCoordinatorRequest::default()
                .with_key_type(0)
                .with_coordinator_keys(missing.iter().map(|&i| StrBytes::from_string(groups[i].clone())).collect());
            let response = exchange(&mut stream, &request, FIND_COORDINATOR_VERSION)?;
            for coordinator in response.coordinators.iter().filter(|c| c.error_code == 0) {
                if let Some(i) = missing.iter().copied().find(|&i| groups[i] == coordinator.key.as_str()) {
                    found[i] = Some(format!("{}:{}", coordinator.host.as_str(), coordinator.port));
                }
            }
        }
        if found.iter().all(Option::is_some) {
            return Ok(found.into_iter().map(|f| f.expect("checked")).collect());
        }
        if Instant::now() > deadline {
            return Err(format!("{} groups had no coordinator", found.iter().filter(|f| f.is_none()).count()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writes `requests` on `stream` `GROUP_BATCH` at a time, reading each batch's
/// responses before the next: the error codes of every response.
fn pipelined<R: kafka_protocol::protocol::Request>(
    stream: &mut TcpStream,
    requests: &[R],
    version: i16,
    mut errors: impl FnMut(&R::Response) -> Vec<i16>,
) -> Result<Vec<i16>, String> {
    use std::io::Write;
    let mut codes = Vec::new();
    for batch in requests.chunks(GROUP_BATCH) {
        let mut frames = Vec::new();
        for (i, request) in batch.iter().enumerate() {
            frames.extend_from_slice(&crate::native::client::frame(request, version, i as i32)?);
        }
        stream.write_all(&frames).map_err(|e| format!("send: {e}"))?;
        let mut body = Vec::new();
        for i in 0..batch.len() {
            crate::native::client::read_frame(stream, &mut body).map_err(|e| format!("read: {e}"))?;
            let response = crate::native::client::decode::<R>(bytes::Bytes::from(body.clone()), version, i as i32)?;
            codes.extend(errors(&response));
        }
    }
    Ok(codes)
}

/// `groups` consumer groups, each committing an offset for one partition of the first
/// topic every second for `duration` (round `r` commits offset `r`), as simple
/// consumers (no membership, as Kafka's admin tools and `assign()` consumers commit).
/// Reports the commits and errors, each round's time, and the broker's resident memory
/// before and after when `broker_pid` is given.
///
/// # Errors
/// A message when a coordinator cannot be found or reached.
pub fn groups(
    options: &ScaleOptions,
    groups: usize,
    duration: Duration,
    broker_pid: Option<u32>,
) -> Result<Value, String> {
    use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
    use kafka_protocol::messages::{GroupId, OffsetCommitRequest};
    let memory_before = broker_pid.and_then(memory_kib);
    let names = group_names(options, groups);
    let started = Instant::now();
    let coordinators = coordinators(options, &names, started + options.timeout)?;
    let found_ms = ms(started);
    let topic = options.topic_names().first().cloned().ok_or("no topic")?;
    let mut by_coordinator: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (g, address) in coordinators.iter().enumerate() {
        by_coordinator.entry(address.clone()).or_default().push(g);
    }
    let mut streams: BTreeMap<String, TcpStream> = BTreeMap::new();
    for address in by_coordinator.keys() {
        streams.insert(address.clone(), connect(address)?);
    }
    let rounds = duration.as_secs().max(1);
    let (mut commits, mut errors, mut round_ms) = (0u64, BTreeMap::<i16, u64>::new(), Vec::new());
    let first = Instant::now();
    for round in 1..=rounds {
        let due = first + Duration::from_secs(round - 1);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let began = Instant::now();
        for (address, members) in &by_coordinator {
            let requests: Vec<OffsetCommitRequest> = members
                .iter()
                .map(|&g| {
                    OffsetCommitRequest::default()
                        .with_group_id(GroupId(StrBytes::from_string(names[g].clone())))
                        .with_generation_id_or_member_epoch(-1)
                        .with_topics(vec![OffsetCommitRequestTopic::default().with_name(name(&topic)).with_partitions(
                            vec![OffsetCommitRequestPartition::default()
                                .with_partition_index((g % options.partitions.max(1) as usize) as i32)
                                .with_committed_offset(round as i64)
                                .with_committed_leader_epoch(-1)],
                        )])
                })
                .collect();
            let stream = streams.get_mut(address).expect("connected");
            let codes = pipelined(stream, &requests, OFFSET_COMMIT_VERSION, |r| {
                r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect()
            })?;
            for code in codes {
                commits += 1;
                if code != 0 {
                    *errors.entry(code).or_default() += 1;
                }
            }
        }
        round_ms.push(ms(began));
    }
    let memory_after = broker_pid.and_then(memory_kib);
    Ok(json!({
        "step": "groups",
        "groups": groups,
        "coordinators": by_coordinator.len(),
        "coordinators_found_ms": found_ms,
        "rounds": rounds,
        "commits": commits,
        "commit_errors": errors.iter().map(|(k, v)| (k.to_string(), *v)).collect::<BTreeMap<_, _>>(),
        "round_ms": round_ms,
        "rss_kib_before": memory_before.map(|m| m.0),
        "rss_kib_after": memory_after.map(|m| m.0),
    }))
}

/// After a restart: the time until every group's coordinator answers OffsetFetch with
/// the offset its last round committed (`expected`), and how many groups did by the
/// deadline.
///
/// # Errors
/// A message when the node cannot be reached before the deadline.
pub fn group_offsets(options: &ScaleOptions, groups: usize, expected: i64) -> Result<Value, String> {
    use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequestGroup, OffsetFetchRequestTopics};
    use kafka_protocol::messages::{GroupId, OffsetFetchRequest};
    let started = Instant::now();
    let deadline = started + options.timeout;
    let names = group_names(options, groups);
    let topic = options.topic_names().first().cloned().ok_or("no topic")?;
    let mut pending: Vec<usize> = (0..groups).collect();
    while !pending.is_empty() && Instant::now() < deadline {
        let Ok(coordinators) = coordinators(options, &names, deadline) else { break };
        let mut by_coordinator: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for &g in &pending {
            by_coordinator.entry(coordinators[g].as_str()).or_default().push(g);
        }
        let mut served = HashSet::new();
        for (address, members) in by_coordinator {
            let Ok(mut stream) = connect(address) else { continue };
            for batch in members.chunks(GROUP_BATCH) {
                let request = OffsetFetchRequest::default().with_groups(
                    batch
                        .iter()
                        .map(|&g| {
                            OffsetFetchRequestGroup::default()
                                .with_group_id(GroupId(StrBytes::from_string(names[g].clone())))
                                .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                                    .with_name(name(&topic))
                                    .with_partition_indexes(vec![(g % options.partitions.max(1) as usize) as i32])]))
                        })
                        .collect(),
                );
                let Ok(response) = exchange(&mut stream, &request, OFFSET_FETCH_VERSION) else { break };
                for group in response.groups.iter().filter(|g| g.error_code == 0) {
                    let committed = group
                        .topics
                        .iter()
                        .flat_map(|t| &t.partitions)
                        .all(|p| p.error_code == 0 && p.committed_offset == expected);
                    if committed {
                        if let Some(&g) = batch.iter().find(|&&g| names[g] == group.group_id.0.as_str()) {
                            served.insert(g);
                        }
                    }
                }
            }
        }
        pending.retain(|g| !served.contains(g));
        if !pending.is_empty() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(json!({
        "step": "group_offsets",
        "groups": groups,
        "served": groups - pending.len(),
        "serving_ms": if pending.is_empty() { ms(started) } else { f64::NAN },
    }))
}
