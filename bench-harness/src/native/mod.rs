//! The native driver: a Kafka client on the `kafka-protocol` crate, built so that the
//! load generator costs a small fraction of what it measures.
//!
//! - **Producers** stamp pre-built batches (`batch::Template`): a request is one copy
//!   of its payload bytes, a CRC and no allocation per message. Each producer keeps up
//!   to the workload's `max_in_flight` requests in flight per leader; a reader thread per connection
//!   takes the responses in order.
//! - **Latency** is measured as `run.rs` does: message `k` of a producer is due at
//!   `start + k / rate` and carries its due time in its first 8 bytes, so publish and
//!   end-to-end latency are coordinated-omission corrected. At max rate a message is
//!   due when its batch is stamped.
//! - **Consumers** fetch (read_committed) from the latest offsets without a group: each
//!   of a subscription's consumers reads the partitions `p % consumers == c`. Within a
//!   response, records are timed when the response arrives.
//!
//! Uncompressed batches only, and no transactions: workloads that need those run on
//! the librdkafka driver.

pub mod batch;
pub mod client;

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::run::{histogram, measure, now_us, payload, RunOptions, RunResult, Shared};
use crate::workload::Workload;
use batch::{ProduceFrame, Template};

/// Per-record overhead in a batch, for sizing batches to `batch_size`.
const RECORD_OVERHEAD: usize = 12;
const FETCH_MAX_BYTES: i32 = 50 << 20;
const PARTITION_FETCH_MAX_BYTES: i32 = 1 << 20;
const FETCH_MAX_WAIT_MS: i32 = 100;
const REQUEST_TIMEOUT_MS: i32 = 30_000;
/// Kafka's "no error" code. A partition that answers any other counts its messages
/// as publish errors (a client would refresh metadata and retry; a bench reports it).
const NONE: i16 = 0;

/// Runs `workload` on the native driver.
///
/// # Errors
/// A message when the workload needs what this driver lacks (compression,
/// transactions), when topics cannot be created, or when a connection fails.
pub fn run(workload: &Workload, options: &RunOptions) -> Result<RunResult, String> {
    workload.check()?;
    if workload.compression != "none" {
        return Err(format!(
            "the native driver sends uncompressed batches; run compression {:?} with --driver librdkafka",
            workload.compression
        ));
    }
    if workload.transaction_size.is_some() {
        return Err("the native driver is not transactional; run transaction_size with --driver librdkafka".into());
    }
    let acks: i16 = match workload.acks.as_str() {
        "0" => 0,
        "1" => 1,
        _ => -1,
    };
    let rate = match options.rate {
        Some(r) => Some(r),
        None => workload.producer_rate.per_second()?,
    };
    if !options.client_config.is_empty() {
        return Err("the native driver speaks PLAINTEXT only: -X properties are for --driver librdkafka".into());
    }
    let created = crate::run::create_topics(workload, options)?;
    let topics = &created.names;
    let leaders = client::leaders(&options.bootstrap, topics, workload.partitions_per_topic)?;
    let shared = Arc::new(Shared::default());
    let partitions: Vec<i32> = (0..workload.partitions_per_topic as i32).collect();

    // Consumers: one fetch thread per (consumer, leader), starting at the latest offsets.
    let mut consumers: Vec<JoinHandle<Result<Histogram<u64>, String>>> = Vec::new();
    for topic in topics {
        for _ in 0..workload.subscriptions_per_topic {
            let readers = workload.consumers_per_subscription.max(1) as i32;
            for c in 0..readers {
                let mine: Vec<i32> = partitions.iter().copied().filter(|p| p % readers == c).collect();
                for (address, led) in by_leader(&leaders, topic, &mine)? {
                    let delay = Duration::from_secs(workload.consumer_delay_secs);
                    let offsets = match delay.is_zero() {
                        true => client::latest_offsets(&address, topic, &led)?,
                        // The topic is new: its first offset is 0.
                        false => led.iter().map(|&p| (p, 0)).collect(),
                    };
                    let stream = client::connect(&address)?;
                    let (topic, shared) = (topic.clone(), shared.clone());
                    consumers.push(std::thread::spawn(move || {
                        std::thread::sleep(delay);
                        consume(stream, &topic, offsets, &shared)
                    }));
                }
            }
        }
    }

    // Producers: each writes every partition of its topic, one connection per leader.
    let producer_count = u64::from(workload.producers_per_topic * workload.topics);
    let per_producer_rate = rate.map(|r| (r as f64 / producer_count as f64).max(0.001));
    let file = match &workload.payload_file {
        Some(path) => Some(std::fs::read(path).map_err(|e| format!("cannot read payload file {path}: {e}"))?),
        None => None,
    };
    let per_batch = (workload.batch_size / (workload.message_size + RECORD_OVERHEAD)).max(1);
    let template = Arc::new(Template::new(&payload(workload.message_size, file.as_deref()), per_batch));
    let mut producers: Vec<JoinHandle<Result<(), String>>> = Vec::new();
    let mut readers: Vec<JoinHandle<Result<(), String>>> = Vec::new();
    let mut publish_histograms = Vec::new();
    let started = Instant::now();
    for topic in topics {
        for _ in 0..workload.producers_per_topic {
            let latency = Arc::new(Mutex::new(histogram()));
            publish_histograms.push(latency.clone());
            let mut connections = Vec::new();
            for (address, led) in by_leader(&leaders, topic, &partitions)? {
                let stream = client::connect(&address)?;
                let (sender, receiver) = std::sync::mpsc::sync_channel::<InFlight>(workload.max_in_flight.max(1) - 1);
                let in_flight = Arc::new(AtomicUsize::new(0));
                if acks != 0 {
                    let read = stream.try_clone().map_err(|e| format!("{address}: {e}"))?;
                    let (shared, latency, in_flight) = (shared.clone(), latency.clone(), in_flight.clone());
                    let size = workload.message_size as u64;
                    readers.push(std::thread::spawn(move || {
                        acknowledge(read, receiver, &in_flight, &shared, &latency, size)
                    }));
                }
                connections.push(Connection {
                    stream,
                    in_flight,
                    partitions: led,
                    cursor: 0,
                    sender,
                    frame: Vec::new(),
                    correlation: 0,
                });
            }
            let producer = Producer {
                topic: topic.clone(),
                connections,
                template: template.clone(),
                acks,
                rate: per_producer_rate,
                linger_us: workload.linger_ms * 1000,
                shared: shared.clone(),
                latency,
                message_size: workload.message_size as u64,
            };
            producers.push(std::thread::spawn(move || producer.run()));
        }
    }
    let window = measure(workload, options, &shared, &publish_histograms, started);
    let mut failures: Vec<String> = Vec::new();
    for handle in producers.into_iter().chain(readers) {
        match handle.join() {
            Ok(Err(e)) => failures.push(e),
            Err(_) => failures.push("a producer thread panicked".into()),
            Ok(Ok(())) => {}
        }
    }
    let mut e2e = histogram();
    for handle in consumers {
        match handle.join() {
            Ok(Ok(h)) => {
                let _ = e2e.add(h);
            }
            Ok(Err(e)) => failures.push(e),
            Err(_) => failures.push("a consumer thread panicked".into()),
        }
    }
    if let Some(error) = failures.first() {
        return Err(format!("the native driver failed: {error}"));
    }
    let mut publish = histogram();
    for h in &publish_histograms {
        let _ = publish.add(&*h.lock().expect("histogram"));
    }
    let mut result = window.result(workload, options, "native", rate, &publish, &e2e);
    result.publish_errors = shared.errors.load(Ordering::Relaxed);
    Ok(result)
}

/// `partitions` of `topic` grouped by their leader's address.
fn by_leader(leaders: &client::Leaders, topic: &str, partitions: &[i32]) -> Result<Vec<(String, Vec<i32>)>, String> {
    let mut grouped: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for &p in partitions {
        grouped.entry(leaders.address(topic, p)?.to_string()).or_default().push(p);
    }
    Ok(grouped.into_iter().collect())
}

/// A produce request on its way: which messages it carries, per partition, and when
/// they were due.
struct InFlight {
    correlation: i32,
    /// (partition, first message index, count).
    chunks: Vec<(i32, u64, usize)>,
    due: Due,
}

/// When a producer's messages are due.
#[derive(Clone, Copy)]
enum Due {
    /// Message `k` at `start_us + k / rate`.
    Rate { start_us: u64, rate: f64 },
    /// Max rate: every message of the request when it was stamped.
    Stamped(u64),
}

impl Due {
    fn of(self, k: u64) -> u64 {
        match self {
            Due::Rate { start_us, rate } => start_us + (k as f64 * 1e6 / rate) as u64,
            Due::Stamped(at) => at,
        }
    }
}

struct Connection {
    stream: TcpStream,
    /// Requests sent and not yet answered.
    in_flight: Arc<AtomicUsize>,
    partitions: Vec<i32>,
    /// The partition that the next wake-up's messages start at.
    cursor: usize,
    sender: SyncSender<InFlight>,
    frame: Vec<u8>,
    correlation: i32,
}

struct Producer {
    topic: String,
    connections: Vec<Connection>,
    template: Arc<Template>,
    acks: i16,
    rate: Option<f64>,
    /// `linger.ms`: at a fixed rate, a partial batch waits this long for more.
    linger_us: u64,
    shared: Arc<Shared>,
    latency: Arc<Mutex<Histogram<u64>>>,
    message_size: u64,
}

impl Producer {
    /// Sends until told to stop. At a fixed rate, each wake-up sends the messages due
    /// by now: they go to the next partition of a leader, split into full batches over
    /// the following ones when there are more. At max rate, each request carries a
    /// full batch for every partition of its leader. Leaders take turns.
    fn run(mut self) -> Result<(), String> {
        let per_batch = self.template.capacity();
        let start_us = now_us();
        let mut next: u64 = 0;
        let mut turn = 0usize;
        let mut chunks: Vec<(i32, u64, usize)> = Vec::new();
        while !self.shared.stop.load(Ordering::Relaxed) {
            let index = turn % self.connections.len();
            turn += 1;
            let led = self.connections[index].partitions.len();
            let (count, due) = match self.rate {
                Some(rate) => {
                    let due = Due::Rate { start_us, rate };
                    let now = now_us();
                    let due_by_now = (now.saturating_sub(start_us) as f64 * rate / 1e6) as u64 + 1;
                    let full = (per_batch * led) as u64;
                    let send_at = due.of(next) + self.linger_us;
                    if due_by_now <= next || (due_by_now - next < full && now < send_at) {
                        let wait = if due_by_now <= next { due.of(next) } else { send_at }.saturating_sub(now);
                        std::thread::sleep(Duration::from_micros(wait.clamp(1, 1000)));
                        continue;
                    }
                    ((due_by_now - next).min(full) as usize, due)
                }
                None => (per_batch * led, Due::Stamped(now_us())),
            };
            let connection = &mut self.connections[index];
            chunks.clear();
            let mut left = count;
            while left > 0 {
                let n = left.min(per_batch);
                chunks.push((connection.partitions[connection.cursor % led], next, n));
                connection.cursor += 1;
                next += n as u64;
                left -= n;
            }
            connection.correlation = connection.correlation.wrapping_add(1);
            let timestamp_ms = (now_us() / 1000) as i64;
            let mut frame = ProduceFrame::start(
                &mut connection.frame,
                connection.correlation,
                self.acks,
                REQUEST_TIMEOUT_MS,
                &self.topic,
                chunks.len(),
            );
            for &(partition, first, n) in &chunks {
                frame.add(partition, &self.template, n, timestamp_ms, |i| due.of(first + i as u64));
            }
            frame.finish();
            let in_flight = InFlight { correlation: connection.correlation, chunks: chunks.clone(), due };
            if self.acks == 0 {
                connection.stream.write_all(&connection.frame).map_err(|e| format!("produce: {e}"))?;
                record(&self.shared, &self.latency, &in_flight, None, self.message_size);
                continue;
            }
            // Blocks while `max_in_flight` requests await their responses.
            connection.in_flight.fetch_add(1, Ordering::SeqCst);
            connection.sender.send(in_flight).map_err(|_| "the acknowledging thread stopped".to_string())?;
            connection.stream.write_all(&connection.frame).map_err(|e| format!("produce: {e}"))?;
        }
        // Once every request is answered, closing the socket ends its reader's read.
        for connection in &self.connections {
            let deadline = Instant::now() + Duration::from_secs(REQUEST_TIMEOUT_MS as u64 / 1000);
            while connection.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            let _ = connection.stream.shutdown(std::net::Shutdown::Both);
        }
        Ok(())
    }
}

/// Counts a request's messages as published (or failed, by partition), with their
/// publish latency, when the run is measuring.
fn record(
    shared: &Shared,
    latency: &Mutex<Histogram<u64>>,
    request: &InFlight,
    errors: Option<&BTreeMap<i32, i16>>,
    message_size: u64,
) {
    if !shared.measuring.load(Ordering::Relaxed) {
        return;
    }
    let now = now_us();
    let mut histogram = latency.lock().expect("histogram");
    for &(partition, first, n) in &request.chunks {
        if errors.and_then(|e| e.get(&partition)).is_some_and(|&code| code != NONE) {
            shared.errors.fetch_add(n as u64, Ordering::Relaxed);
            continue;
        }
        match request.due {
            Due::Stamped(at) => {
                let _ = histogram.record_n(now.saturating_sub(at).max(1), n as u64);
            }
            Due::Rate { .. } => {
                for k in first..first + n as u64 {
                    let _ = histogram.record(now.saturating_sub(request.due.of(k)).max(1));
                }
            }
        }
        shared.published.fetch_add(n as u64, Ordering::Relaxed);
        shared.published_bytes.fetch_add(n as u64 * message_size, Ordering::Relaxed);
    }
}

/// Reads a connection's produce responses in order, each against the request that
/// the producer queued before sending it, until the producer closes the socket with
/// nothing in flight. Reading the socket first and then the queue, which already holds
/// the request, keeps the threads from waking each other for every response.
fn acknowledge(
    stream: TcpStream,
    requests: Receiver<InFlight>,
    in_flight: &AtomicUsize,
    shared: &Shared,
    latency: &Mutex<Histogram<u64>>,
    message_size: u64,
) -> Result<(), String> {
    stream.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
    let mut stream = BufReader::with_capacity(64 << 10, stream);
    let mut body = Vec::new();
    let mut errors = BTreeMap::new();
    loop {
        if let Err(e) = client::read_frame(&mut stream, &mut body) {
            if shared.stop.load(Ordering::SeqCst) && in_flight.load(Ordering::SeqCst) == 0 {
                return Ok(());
            }
            return Err(format!("produce response: {e}"));
        }
        let request = requests.recv().map_err(|_| "a produce response to no request".to_string())?;
        let response = client::decode::<ProduceRequest>(
            Bytes::copy_from_slice(&body),
            client::PRODUCE_VERSION,
            request.correlation,
        )?;
        errors.clear();
        for p in response.responses.iter().flat_map(|t| &t.partition_responses) {
            errors.insert(p.index, p.error_code);
        }
        record(shared, latency, &request, Some(&errors), message_size);
        in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Kafka's errors for a fetch session the broker no longer knows, or an epoch out of
/// step: the consumer opens a new session.
const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
const INVALID_FETCH_SESSION_EPOCH: i16 = 71;

/// A consumer's fetch session: its id (0: none yet, or sessionless), the epoch of the
/// next request (0 opens one), and the offsets the broker's session holds.
#[derive(Default)]
struct FetchSession {
    id: i32,
    epoch: i32,
    sent: BTreeMap<i32, i64>,
}

impl FetchSession {
    /// After a fetch of `offsets` was answered with session `id`: the next request
    /// continues it, or is full again when the broker keeps no session.
    fn served(&mut self, id: i32, offsets: &BTreeMap<i32, i64>) {
        if id == 0 {
            *self = FetchSession::default();
            return;
        }
        self.epoch = if self.id == id { self.epoch.checked_add(1).filter(|&e| e > 0).unwrap_or(1) } else { 1 };
        self.id = id;
        self.sent.clone_from(offsets);
    }
}

/// Fetches `offsets`' partitions of `topic` from their leader on `stream` until the
/// run stops and 2 s pass with nothing new; returns the end-to-end latencies measured.
fn consume(
    stream: TcpStream,
    topic: &str,
    mut offsets: BTreeMap<i32, i64>,
    shared: &Shared,
) -> Result<Histogram<u64>, String> {
    stream.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
    let mut stream = BufReader::with_capacity(256 << 10, stream);
    let mut h = histogram();
    let mut idle_since: Option<Instant> = None;
    let mut body = Vec::new();
    let mut request = FetchRequest::default();
    request.replica_id = BrokerId(-1);
    request.max_wait_ms = FETCH_MAX_WAIT_MS;
    request.min_bytes = 1;
    request.max_bytes = FETCH_MAX_BYTES;
    request.isolation_level = 1;
    request.topics = vec![FetchTopic::default().with_topic(TopicName(StrBytes::from_string(topic.to_string())))];
    let mut correlation = 0i32;
    // An incremental fetch session (KIP-227), as Kafka's consumers keep one: after the
    // first (full) fetch, a request names only the partitions whose offset moved, and
    // a response only those with records or news. The broker may refuse a session
    // (id 0 in its answer): then every fetch is full.
    let mut session = FetchSession::default();
    loop {
        request.session_id = session.id;
        request.session_epoch = session.epoch;
        request.topics[0].partitions = offsets
            .iter()
            .filter(|&(p, &offset)| session.id == 0 || session.sent.get(p) != Some(&offset))
            .map(|(&p, &offset)| {
                FetchPartition::default()
                    .with_partition(p)
                    .with_current_leader_epoch(-1)
                    .with_fetch_offset(offset)
                    .with_last_fetched_epoch(-1)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(PARTITION_FETCH_MAX_BYTES)
            })
            .collect();
        correlation = correlation.wrapping_add(1);
        let frame = client::frame(&request, client::FETCH_VERSION, correlation)?;
        stream.get_mut().write_all(&frame).map_err(|e| format!("fetch: {e}"))?;
        client::read_frame(&mut stream, &mut body).map_err(|e| format!("fetch response: {e}"))?;
        let arrived = now_us();
        let response =
            client::decode::<FetchRequest>(Bytes::from(std::mem::take(&mut body)), client::FETCH_VERSION, correlation)?;
        if response.error_code == FETCH_SESSION_ID_NOT_FOUND || response.error_code == INVALID_FETCH_SESSION_EPOCH {
            session = FetchSession::default();
            continue;
        }
        if response.error_code != NONE {
            return Err(format!("fetch {topic}: error {}", response.error_code));
        }
        session.served(response.session_id, &offsets);
        let measuring = shared.measuring.load(Ordering::Relaxed);
        let mut got = 0u64;
        for p in response.responses.iter().flat_map(|t| &t.partitions) {
            if p.error_code != NONE {
                return Err(format!("fetch {topic}-{}: error {}", p.partition_index, p.error_code));
            }
            let (Some(records), Some(offset)) = (&p.records, offsets.get_mut(&p.partition_index)) else { continue };
            let walked = batch::walk(records, *offset, |due, _| {
                if measuring {
                    let _ = h.record(arrived.saturating_sub(due).max(1));
                }
            });
            if let Some(next) = walked.next_offset {
                *offset = next.max(*offset);
            }
            got += walked.records;
            if measuring {
                shared.consumed.fetch_add(walked.records, Ordering::Relaxed);
                shared.consumed_bytes.fetch_add(walked.value_bytes, Ordering::Relaxed);
            }
        }
        if got > 0 {
            idle_since = None;
        } else if shared.stop.load(Ordering::Relaxed) {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_secs(2) {
                return Ok(h);
            }
        }
    }
}
