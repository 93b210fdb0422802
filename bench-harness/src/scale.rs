//! `skein bench scale STEP`: the steps of a partition-count scale run, each timed the
//! same way against any Kafka-compatible broker (`bench-harness/scale.sh` runs them
//! against Skein and Apache Kafka side by side).
//!
//! The topics are `<prefix>-0000 .. <prefix>-<topics-1>`, each with `--partitions`
//! partitions. Each step prints one JSON line of figures, with units in the field names:
//! - `create`: one CreateTopics request for every topic (as an admin client sends it),
//!   the time until it is answered, until every node's Metadata lists every partition
//!   with a leader, and until every leader answers ListOffsets for each of them;
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
    let started = Instant::now();
    let response = exchange(&mut stream, &request, CREATE_TOPICS_VERSION)?;
    let answered_ms = ms(started);
    let refused: Vec<String> = response
        .topics
        .iter()
        .filter(|t| t.error_code != 0)
        .map(|t| format!("{}: {} {:?}", t.name.0.as_str(), t.error_code, t.error_message.as_ref().map(|m| m.as_str())))
        .collect();
    if !refused.is_empty() {
        return Err(format!("CreateTopics refused {} topics, first {}", refused.len(), refused[0]));
    }
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
        "answered_ms": answered_ms,
        "listed_by_every_node_ms": listed_all_ms,
        "listed_ms": listed_ms,
        "serving_ms": serving.0,
        "served": serving.1,
    }))
}

/// Every partition of `names` with a leader in one Metadata response: (topic,
/// partition) → leader id, and broker id → address.
fn leaders_of(
    stream: &mut TcpStream,
    names: &[String],
) -> Result<(BTreeMap<(String, i32), i32>, BTreeMap<i32, String>), String> {
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
