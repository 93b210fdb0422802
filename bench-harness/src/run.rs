//! Runs a workload against a Kafka-compatible broker through librdkafka.
//!
//! Producers are open-loop: message `i` of a producer is due at `start + i / rate`,
//! and both latencies are measured from that due time, not from when the send call
//! happened. A broker that stalls therefore shows its stall in every message that was
//! due meanwhile (coordinated-omission correction, as in the OpenMessaging Benchmark
//! and wrk2). Each payload carries its due time, so consumers measure end-to-end
//! latency from it too. Every worker records into its own HdrHistogram; they are merged
//! at the end.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;
use serde::{Deserialize, Serialize};

use crate::workload::Workload;

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub bootstrap: String,
    /// The broker's process, sampled for CPU time and peak RSS when on this machine.
    pub broker_pid: Option<u32>,
    /// A name for the broker in reports ("skein", "kafka").
    pub label: String,
    /// Overrides the workload's producer rate.
    pub rate: Option<u64>,
    pub progress: Duration,
    /// The broker's Prometheus endpoint (Skein's `/metrics`), scraped before and after
    /// the measured window for its per-stage latency.
    pub metrics_url: Option<String>,
    /// librdkafka properties set on every client (`-X name=value`): security
    /// settings for a TLS or SASL listener, for example.
    pub client_config: Vec<(String, String)>,
    /// Keep the run's topics when it ends (by default they are deleted: `RunTopics`).
    pub keep_topics: bool,
}

/// A librdkafka config for `options`' broker, with its `-X` properties.
pub(crate) fn client_config(options: &RunOptions) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &options.bootstrap);
    for (name, value) in &options.client_config {
        config.set(name, value);
    }
    config
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub p9999_us: u64,
    pub max_us: u64,
    /// (percentile, microseconds) points for plots.
    pub distribution: Vec<(f64, u64)>,
}

impl Latency {
    pub(crate) fn of(h: &Histogram<u64>) -> Latency {
        let distribution = [0.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 99.999, 100.0]
            .iter()
            .map(|&p| (p, h.value_at_percentile(p)))
            .collect();
        Latency {
            count: h.len(),
            p50_us: h.value_at_quantile(0.5),
            p90_us: h.value_at_quantile(0.9),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            p9999_us: h.value_at_quantile(0.9999),
            max_us: h.max(),
            distribution,
        }
    }
}

/// What a run measured (after warm-up).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunResult {
    pub workload: String,
    pub broker: String,
    pub duration_secs: f64,
    pub published_msgs: u64,
    pub published_msgs_per_sec: f64,
    pub published_mb_per_sec: f64,
    pub consumed_msgs: u64,
    pub consumed_mb_per_sec: f64,
    pub publish_errors: u64,
    pub publish_latency: Latency,
    pub end_to_end_latency: Latency,
    /// Broker CPU seconds over the measured window, and per GB produced + consumed.
    pub broker_cpu_secs: Option<f64>,
    pub broker_cpu_secs_per_gb: Option<f64>,
    pub broker_peak_rss_mb: Option<f64>,
    /// Transactional workloads: how long each commit took (commit call to its
    /// return), after warm-up.
    #[serde(default)]
    pub commit_latency: Option<Latency>,
    /// The load generator that produced this run: "librdkafka" or "native".
    #[serde(default = "librdkafka")]
    pub driver: String,
    /// The producer rate the workload asked for (messages per second); `None` at max rate.
    #[serde(default)]
    pub target_msgs_per_sec: Option<f64>,
    /// The load generator's own CPU seconds over the measured window, and per GB
    /// produced + consumed.
    #[serde(default)]
    pub driver_cpu_secs: Option<f64>,
    #[serde(default)]
    pub driver_cpu_secs_per_gb: Option<f64>,
    /// Where the broker's time went over the window, when its metrics were scraped.
    #[serde(default)]
    pub stages: Vec<crate::stages::StageFigure>,
    /// Record bytes the broker copied in user space per byte appended and fetched.
    #[serde(default)]
    pub copies: Option<crate::stages::CopyFigures>,
    /// CPU seconds the whole host spent over the window, less the load generator's,
    /// and per GB: the broker with the kernel's work on its behalf that runs in no
    /// process of its own (page-cache writeback in flusher threads, the journal
    /// thread, interrupts and softirqs that land while it sleeps). A broker that
    /// writes through the page cache hands that work off; one that writes with
    /// O_DIRECT pays it in its own process time.
    #[serde(default)]
    pub host_cpu_secs: Option<f64>,
    #[serde(default)]
    pub host_cpu_secs_per_gb: Option<f64>,
}

fn librdkafka() -> String {
    "librdkafka".into()
}

impl RunResult {
    /// Whether the achieved publish rate is within 1% of the target (always true at
    /// max rate): a run below it fell behind, and one above it was catching up a
    /// backlog; neither measured the broker at that rate.
    pub fn rate_met(&self) -> bool {
        self.target_msgs_per_sec.is_none_or(|t| (self.published_msgs_per_sec - t).abs() <= t * 0.01)
    }
}

pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("histogram bounds")
}

pub(crate) fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// Shared between workers.
#[derive(Default)]
pub(crate) struct Shared {
    /// Set when the warm-up ends: only then are latencies and counts recorded.
    pub measuring: AtomicBool,
    pub stop: AtomicBool,
    pub published: AtomicU64,
    pub published_bytes: AtomicU64,
    pub consumed: AtomicU64,
    pub consumed_bytes: AtomicU64,
    pub errors: AtomicU64,
}

struct Delivery {
    shared: Arc<Shared>,
    latency: Arc<Mutex<Histogram<u64>>>,
}

impl ClientContext for Delivery {}

impl ProducerContext for Delivery {
    /// The message's due time (µs since the epoch) and size.
    type DeliveryOpaque = Box<(u64, u64)>;
    fn delivery(&self, result: &DeliveryResult<'_>, due: Box<(u64, u64)>) {
        let (due_us, size) = *due;
        if !self.shared.measuring.load(Ordering::Relaxed) {
            return;
        }
        match result {
            Ok(_) => {
                let latency = now_us().saturating_sub(due_us).max(1);
                let _ = self.latency.lock().expect("histogram").record(latency);
                self.shared.published.fetch_add(1, Ordering::Relaxed);
                self.shared.published_bytes.fetch_add(size, Ordering::Relaxed);
            }
            Err(_) => {
                self.shared.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The host's busy CPU seconds, from an arbitrary origin (only differences mean
/// anything): wall seconds times CPUs, less the idle seconds of /proc/stat (idle, I/O
/// wait and time stolen by the hypervisor, measured as the CPUs sleep). Unlike the
/// tick-sampled user and system fields, it includes interrupts taken while a CPU was
/// idle (these kernels have no IRQ time accounting).
pub(crate) fn host_busy_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let mut lines = stat.lines();
    let fields: Vec<u64> =
        lines.next()?.strip_prefix("cpu ")?.split_whitespace().map(|f| f.parse().ok()).collect::<Option<_>>()?;
    let cpus = lines.filter(|l| l.starts_with("cpu")).count() as f64;
    let idle = [3, 4, 7].iter().map(|&i| fields.get(i).copied()).sum::<Option<u64>>()?;
    let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?.as_secs_f64();
    // USER_HZ, as for processes.
    Some(wall * cpus - idle as f64 / 100.0)
}

/// CPU seconds of this process (the load generator), from /proc.
pub(crate) fn own_cpu_secs() -> Option<f64> {
    sample(std::process::id()).map(|(cpu, _)| cpu)
}

/// CPU seconds and peak RSS (MB) of a process, from /proc.
pub(crate) fn sample(pid: u32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start after ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hwm_kb: f64 =
        status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    // Linux reports CPU time in clock ticks of USER_HZ, 100 on every common build.
    Some((ticks as f64 / 100.0, hwm_kb / 1024.0))
}

pub(crate) fn payload(size: usize, file: Option<&[u8]>) -> Vec<u8> {
    use rand::RngCore;
    let mut out = vec![0u8; size];
    match file {
        Some(bytes) if !bytes.is_empty() => {
            for (i, b) in out.iter_mut().enumerate() {
                *b = bytes[i % bytes.len()];
            }
        }
        _ => rand::rng().fill_bytes(&mut out),
    }
    out
}

/// A run's topics (fresh names), deleted when the run is over, or has failed, unless
/// `RunOptions::keep_topics`: repeated runs on one broker would otherwise keep every
/// run's data, and at max rate a 10 s warm-up pass writes tens of GB (suite.sh filled
/// an 80 GB disk in five passes at 1.8 GB/s).
pub(crate) struct RunTopics {
    pub suffix: String,
    pub names: Vec<String>,
    /// The admin client's config, `None` when the topics are kept.
    delete_with: Option<ClientConfig>,
}

impl Drop for RunTopics {
    fn drop(&mut self) {
        let Some(config) = self.delete_with.take() else { return };
        if let Err(e) = delete_topics(&config, &self.names) {
            eprintln!("the run's topics were not deleted: {e}");
        }
    }
}

fn delete_topics(config: &ClientConfig, topics: &[String]) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> = config.create().map_err(|e| format!("admin client: {e}"))?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    for result in futures_lite::future::block_on(admin.delete_topics(&names, &admin_options()))
        .map_err(|e| format!("delete topics: {e}"))?
    {
        result.map_err(|(t, e)| format!("delete topic {t}: {e}"))?;
    }
    Ok(())
}

fn admin_options() -> AdminOptions {
    AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))).request_timeout(Some(Duration::from_secs(30)))
}

/// The most partitions a topic is created with in one request: Kafka 4.4 refuses an
/// operation of more than 10,000 metadata records (`PolicyViolation`), and a topic
/// takes one record plus one per partition. Larger topics grow by CreatePartitions.
const PARTITIONS_PER_CREATE: u32 = 5_000;

/// Creates the workload's topics (fresh names) through librdkafka's admin client.
pub(crate) fn create_topics(workload: &Workload, options: &RunOptions) -> Result<RunTopics, String> {
    let suffix = format!("{:08x}", rand::random::<u32>());
    let topics: Vec<String> = (0..workload.topics).map(|i| format!("bench-{}-{suffix}-{i}", workload.name)).collect();
    let config = client_config(options);
    let admin: AdminClient<DefaultClientContext> = config.create().map_err(|e| format!("admin client: {e}"))?;
    let new_topics: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|t| {
            let first = workload.partitions_per_topic.min(PARTITIONS_PER_CREATE);
            let mut topic = NewTopic::new(t, first as i32, TopicReplication::Fixed(1));
            for (k, v) in &workload.topic_config {
                topic = topic.set(k, v);
            }
            topic
        })
        .collect();
    let created = futures_lite::future::block_on(admin.create_topics(&new_topics, &admin_options()));
    // From here on whatever was created is deleted again, also when the rest failed.
    let delete_with = (!options.keep_topics).then_some(config);
    let run_topics = RunTopics { suffix, names: topics.clone(), delete_with };
    for result in created.map_err(|e| format!("create topics: {e}"))? {
        result.map_err(|(t, e)| format!("create topic {t}: {e}"))?;
    }
    let mut count = workload.partitions_per_topic.min(PARTITIONS_PER_CREATE);
    while count < workload.partitions_per_topic {
        count = (count + PARTITIONS_PER_CREATE).min(workload.partitions_per_topic);
        let grow: Vec<NewPartitions<'_>> = topics.iter().map(|t| NewPartitions::new(t, count as usize)).collect();
        let grown = futures_lite::future::block_on(admin.create_partitions(&grow, &admin_options()));
        for result in grown.map_err(|e| format!("create partitions: {e}"))? {
            result.map_err(|(t, e)| format!("grow topic {t} to {count} partitions: {e}"))?;
        }
    }
    Ok(run_topics)
}

/// Runs `workload`; prints a progress line every `options.progress`.
///
/// # Errors
/// A message when topics cannot be created or clients cannot start.
pub fn run(workload: &Workload, options: &RunOptions) -> Result<RunResult, String> {
    workload.check()?;
    if workload.consumer_delay_secs > 0 {
        return Err("consumer_delay_secs is for --driver native".into());
    }
    let rate = match options.rate {
        Some(r) => Some(r),
        None => workload.producer_rate.per_second()?,
    };
    let created = create_topics(workload, options)?;
    let (suffix, topics) = (&created.suffix, &created.names);
    let shared = Arc::new(Shared::default());

    // Consumers first, and wait until they own partitions.
    let mut consumers: Vec<JoinHandle<Histogram<u64>>> = Vec::new();
    let assigned = Arc::new(AtomicU64::new(0));
    let mut expected_consumers = 0;
    for topic in topics {
        for s in 0..workload.subscriptions_per_topic {
            for _ in 0..workload.consumers_per_subscription {
                expected_consumers += 1;
                let consumer: BaseConsumer = client_config(options)
                    .set("group.id", format!("bench-{suffix}-{s}"))
                    .set("auto.offset.reset", "latest")
                    .set("enable.auto.commit", "true")
                    .set("fetch.wait.max.ms", "100")
                    .set("isolation.level", "read_committed")
                    .create()
                    .map_err(|e| format!("consumer: {e}"))?;
                consumer.subscribe(&[topic]).map_err(|e| format!("subscribe: {e}"))?;
                let (shared, assigned) = (shared.clone(), assigned.clone());
                consumers.push(std::thread::spawn(move || {
                    let mut h = histogram();
                    let mut counted = false;
                    let mut idle_since: Option<Instant> = None;
                    loop {
                        let message = consumer.poll(Duration::from_millis(50));
                        if !counted && consumer.assignment().is_ok_and(|a| a.count() > 0) {
                            counted = true;
                            assigned.fetch_add(1, Ordering::Relaxed);
                        }
                        match message {
                            Some(Ok(m)) => {
                                idle_since = None;
                                if !shared.measuring.load(Ordering::Relaxed) {
                                    continue;
                                }
                                let Some(bytes) = m.payload() else { continue };
                                let due =
                                    bytes.get(..8).map_or(0, |b| u64::from_be_bytes(b.try_into().unwrap_or([0; 8])));
                                let _ = h.record(now_us().saturating_sub(due).max(1));
                                shared.consumed.fetch_add(1, Ordering::Relaxed);
                                shared.consumed_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                            }
                            _ if shared.stop.load(Ordering::Relaxed) => {
                                // Drain for up to 2 s of silence after the producers stop.
                                let since = *idle_since.get_or_insert_with(Instant::now);
                                if since.elapsed() > Duration::from_secs(2) {
                                    return h;
                                }
                            }
                            _ => {}
                        }
                    }
                }));
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while assigned.load(Ordering::Relaxed)
        < expected_consumers.min(workload.partitions_per_topic as u64 * workload.topics as u64)
    {
        if Instant::now() > deadline {
            return Err("consumers got no partitions within 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    // Producers.
    let file = match &workload.payload_file {
        Some(path) => Some(std::fs::read(path).map_err(|e| format!("cannot read payload file {path}: {e}"))?),
        None => None,
    };
    let producer_count = (workload.producers_per_topic * workload.topics) as u64;
    let per_producer_rate = rate.map(|r| (r as f64 / producer_count as f64).max(0.001));
    let mut producers: Vec<JoinHandle<Result<(), String>>> = Vec::new();
    let mut publish_histograms = Vec::new();
    let commits = Arc::new(Mutex::new(histogram()));
    let started = Instant::now();
    for topic in topics {
        for _ in 0..workload.producers_per_topic {
            let latency = Arc::new(Mutex::new(histogram()));
            publish_histograms.push(latency.clone());
            let context = Delivery { shared: shared.clone(), latency };
            let mut config = client_config(options);
            config
                .set("acks", &workload.acks)
                .set("batch.size", workload.batch_size.to_string())
                .set("linger.ms", workload.linger_ms.to_string())
                .set("max.in.flight.requests.per.connection", workload.max_in_flight.to_string())
                .set("compression.type", &workload.compression)
                .set("queue.buffering.max.kbytes", "1048576");
            if workload.transaction_size.is_some() {
                config.set("transactional.id", format!("bench-{suffix}-{}", producers.len()));
            }
            let producer: BaseProducer<Delivery> =
                config.create_with_context(context).map_err(|e| format!("producer: {e}"))?;
            if workload.transaction_size.is_some() {
                producer.init_transactions(Duration::from_secs(30)).map_err(|e| format!("init transactions: {e}"))?;
            }
            let transaction_size = workload.transaction_size.map(u64::from);
            let commits = commits.clone();
            let (topic, shared) = (topic.clone(), shared.clone());
            let template = payload(workload.message_size, file.as_deref());
            let partitions = workload.partitions_per_topic as i32;
            producers.push(std::thread::spawn(move || {
                let mut body = template;
                let mut i: u64 = 0;
                let start_us = now_us();
                let txn = |e: rdkafka::error::KafkaError| format!("transaction: {e}");
                while !shared.stop.load(Ordering::Relaxed) {
                    let due = match per_producer_rate {
                        Some(r) => {
                            let due = start_us + (i as f64 * 1e6 / r) as u64;
                            let now = now_us();
                            if due > now {
                                // Wait for the due time, serving delivery reports meanwhile.
                                // librdkafka's poll timeout is in whole milliseconds: a
                                // shorter wait polls without blocking and then sleeps
                                // (polling it with a sub-millisecond timeout spins).
                                if due - now >= 1000 {
                                    producer.poll(Duration::from_millis(1));
                                } else {
                                    producer.poll(Duration::ZERO);
                                    std::thread::sleep(Duration::from_micros(due - now));
                                }
                                continue;
                            }
                            due
                        }
                        None => now_us(),
                    };
                    if transaction_size.is_some_and(|n| i.is_multiple_of(n)) {
                        producer.begin_transaction().map_err(txn)?;
                    }
                    body[..8].copy_from_slice(&due.to_be_bytes());
                    let partition = (i % partitions as u64) as i32;
                    let mut opaque = Box::new((due, body.len() as u64));
                    loop {
                        let record = BaseRecord::<(), [u8], Box<(u64, u64)>>::with_opaque_to(&topic, opaque)
                            .partition(partition)
                            .payload(&body);
                        match producer.send(record) {
                            Ok(()) => break,
                            Err((_, record)) => {
                                opaque = record.delivery_opaque;
                                producer.poll(Duration::from_millis(1));
                                if shared.stop.load(Ordering::Relaxed) {
                                    return Ok(());
                                }
                            }
                        }
                    }
                    producer.poll(Duration::ZERO);
                    i += 1;
                    if transaction_size.is_some_and(|n| i.is_multiple_of(n)) {
                        let begun = Instant::now();
                        // The rdkafka crate's commit flushes first, polling 100 ms at a
                        // time (its `flush`); short polls here instead, so that commit
                        // latency is the broker's, not that wait.
                        while producer.in_flight_count() > 0 && begun.elapsed() < Duration::from_secs(60) {
                            producer.poll(Duration::from_millis(1));
                        }
                        producer.commit_transaction(Duration::from_secs(60)).map_err(txn)?;
                        if shared.measuring.load(Ordering::Relaxed) {
                            let took = begun.elapsed().as_micros().max(1) as u64;
                            let _ = commits.lock().expect("histogram").record(took);
                        }
                    }
                }
                if transaction_size.is_some_and(|n| !i.is_multiple_of(n)) {
                    producer.commit_transaction(Duration::from_secs(60)).map_err(txn)?;
                }
                let _ = producer.flush(Duration::from_secs(30));
                Ok(())
            }));
        }
    }
    let window = measure(workload, options, &shared, &publish_histograms, started);
    let mut failures = Vec::new();
    for p in producers {
        if let Ok(Err(error)) = p.join() {
            failures.push(error);
        }
    }
    if let Some(error) = failures.first() {
        return Err(format!("a producer failed: {error}"));
    }
    let mut e2e = histogram();
    for c in consumers {
        if let Ok(h) = c.join() {
            let _ = e2e.add(h);
        }
    }
    let mut publish = histogram();
    for h in publish_histograms {
        let _ = publish.add(&*h.lock().expect("histogram"));
    }
    let commits = workload.transaction_size.map(|_| Latency::of(&commits.lock().expect("histogram")));
    let mut result = window.result(workload, options, "librdkafka", rate, &publish, &e2e);
    result.commit_latency = commits;
    result.publish_errors = shared.errors.load(Ordering::Relaxed);
    Ok(result)
}

/// What the measured window saw, sampled at its start and end.
pub(crate) struct Window {
    elapsed: f64,
    published: u64,
    published_bytes: u64,
    consumed: u64,
    consumed_bytes: u64,
    broker: Option<((f64, f64), (f64, f64))>,
    own: Option<(f64, f64)>,
    host: Option<(f64, f64)>,
    stages: Vec<crate::stages::StageFigure>,
    copies: Option<crate::stages::CopyFigures>,
}

/// Waits out the warm-up, then measures for the workload's duration with a progress
/// line every `options.progress`; leaves `shared.measuring` off and `shared.stop` on.
pub(crate) fn measure(
    workload: &Workload,
    options: &RunOptions,
    shared: &Shared,
    publish_histograms: &[Arc<Mutex<Histogram<u64>>>],
    started: Instant,
) -> Window {
    std::thread::sleep(Duration::from_secs(workload.warmup_secs));
    shared.measuring.store(true, Ordering::Relaxed);
    let measure_start = Instant::now();
    let cpu_start = options.broker_pid.and_then(sample);
    let own_start = own_cpu_secs();
    let host_start = host_busy_secs();
    let scrape =
        |url: &String| crate::stages::scrape(url).inspect_err(|e| eprintln!("stage latency not measured: {e}")).ok();
    let stages_before = options.metrics_url.as_ref().and_then(scrape);
    let mut last = (0u64, measure_start);
    while measure_start.elapsed() < Duration::from_secs(workload.duration_secs) {
        std::thread::sleep(
            options.progress.min(Duration::from_secs(workload.duration_secs).saturating_sub(measure_start.elapsed())),
        );
        let published = shared.published.load(Ordering::Relaxed);
        let rate_now = (published - last.0) as f64 / last.1.elapsed().as_secs_f64().max(1e-9);
        last = (published, Instant::now());
        let p99 =
            publish_histograms.iter().map(|h| h.lock().expect("histogram").value_at_quantile(0.99)).max().unwrap_or(0);
        eprintln!(
            "[{:>4.0}s] {} on {}: published {:.0} msg/s, consumed {} msgs, publish p99 {:.2} ms",
            started.elapsed().as_secs_f64(),
            workload.name,
            options.label,
            rate_now,
            shared.consumed.load(Ordering::Relaxed),
            p99 as f64 / 1000.0
        );
    }
    let elapsed = measure_start.elapsed().as_secs_f64();
    let cpu_end = options.broker_pid.and_then(sample);
    let own_end = own_cpu_secs();
    let host_end = host_busy_secs();
    let (stages, copies) = match (stages_before, options.metrics_url.as_ref().and_then(scrape)) {
        (Some(before), Some(after)) => {
            (crate::stages::between(&before, &after), crate::stages::copies(&before, &after))
        }
        _ => (Vec::new(), None),
    };
    let published = shared.published.load(Ordering::Relaxed);
    let published_bytes = shared.published_bytes.load(Ordering::Relaxed);
    let consumed_at_end = shared.consumed.load(Ordering::Relaxed);
    let consumed_bytes_at_end = shared.consumed_bytes.load(Ordering::Relaxed);
    shared.measuring.store(false, Ordering::Relaxed);
    shared.stop.store(true, Ordering::Relaxed);
    Window {
        elapsed,
        published,
        published_bytes,
        consumed: consumed_at_end,
        consumed_bytes: consumed_bytes_at_end,
        broker: cpu_start.zip(cpu_end),
        own: own_start.zip(own_end),
        host: host_start.zip(host_end),
        stages,
        copies,
    }
}

impl Window {
    /// The run's result, from this window and the merged histograms.
    pub(crate) fn result(
        &self,
        workload: &Workload,
        options: &RunOptions,
        driver: &str,
        rate: Option<u64>,
        publish: &Histogram<u64>,
        e2e: &Histogram<u64>,
    ) -> RunResult {
        let gb = (self.published_bytes + self.consumed_bytes) as f64 / 1e9;
        let per_gb = |cpu: f64| (gb > 0.0).then(|| cpu / gb);
        let broker_cpu = self.broker.map(|((a, _), (b, _))| b - a);
        let own_cpu = self.own.map(|(a, b)| b - a);
        let host_cpu = self.host.zip(own_cpu).map(|((a, b), own)| (b - a - own).max(0.0));
        RunResult {
            workload: workload.name.clone(),
            broker: options.label.clone(),
            duration_secs: self.elapsed,
            published_msgs: self.published,
            published_msgs_per_sec: self.published as f64 / self.elapsed,
            published_mb_per_sec: self.published_bytes as f64 / self.elapsed / 1e6,
            consumed_msgs: self.consumed,
            consumed_mb_per_sec: self.consumed_bytes as f64 / self.elapsed / 1e6,
            publish_errors: 0,
            publish_latency: Latency::of(publish),
            end_to_end_latency: Latency::of(e2e),
            broker_cpu_secs: broker_cpu,
            broker_cpu_secs_per_gb: broker_cpu.and_then(per_gb),
            broker_peak_rss_mb: self.broker.map(|(_, (_, rss))| rss),
            commit_latency: None,
            driver: driver.to_string(),
            target_msgs_per_sec: rate.map(|r| r as f64),
            driver_cpu_secs: own_cpu,
            driver_cpu_secs_per_gb: own_cpu.and_then(per_gb),
            stages: self.stages.clone(),
            copies: self.copies.clone(),
            host_cpu_secs: host_cpu,
            host_cpu_secs_per_gb: host_cpu.and_then(per_gb),
        }
    }
}
