//! `skein bench failover`: a three-broker cluster's `acks=all` latency and failover
//! time, measured the same way on any Kafka-compatible cluster. An idempotent
//! `acks=all` librdkafka producer writes one partition of replication factor 3
//! (`min.insync.replicas=2`) at a fixed rate; after a steady window the partition's
//! leader is killed with SIGKILL, and the failover time is from the kill to the
//! acknowledgement of the first record sent after it.
//!
//! Latencies are from each record's due send time (coordinated-omission corrected) to
//! its acknowledgement (publish) and to its arrival at a consumer reading the
//! partition throughout (end to end; each record carries its due time). The brokers'
//! CPU time over the steady window (from `/proc/<pid>/stat`, all three processes) per
//! GB produced gives CPU-seconds per GB.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};
use serde::Serialize;

/// What to measure.
#[derive(Debug, Clone)]
pub struct FailoverOptions {
    pub bootstrap: String,
    pub topic: String,
    /// Broker id to process id, for the kill.
    pub pids: BTreeMap<i32, u32>,
    /// Records a second.
    pub rate: u64,
    pub steady: Duration,
    /// How long to keep producing after the kill.
    pub after: Duration,
    pub label: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct FailoverResult {
    pub label: String,
    pub rate: u64,
    pub acked_steady: u64,
    pub publish_p50_ms: f64,
    pub publish_p99_ms: f64,
    pub publish_p999_ms: f64,
    /// From the due send time to the consumer's receipt, over the steady window.
    pub e2e_p50_ms: f64,
    pub e2e_p99_ms: f64,
    pub e2e_p999_ms: f64,
    pub consumed_steady: u64,
    /// The three brokers' CPU time over the steady window per GB of record payload
    /// produced in it.
    pub cpu_seconds_per_gb: f64,
    pub killed_broker: i32,
    /// From the kill to the acknowledgement of the first record sent after it.
    pub failover_ms: f64,
    /// Records not acknowledged in the end (the producer gave up on them).
    pub failed: u64,
}

/// Per-record acknowledgements: (due time offset in µs since start, ack instant).
#[derive(Clone, Default)]
struct Acks {
    acked: Arc<Mutex<Vec<(u64, Instant)>>>,
    failed: Arc<Mutex<u64>>,
}

impl ClientContext for Acks {}

impl ProducerContext for Acks {
    type DeliveryOpaque = Box<u64>;
    fn delivery(&self, result: &DeliveryResult<'_>, due_us: Box<u64>) {
        match result {
            Ok(_) => self.acked.lock().expect("acks lock").push((*due_us, Instant::now())),
            Err(_) => *self.failed.lock().expect("acks lock") += 1,
        }
    }
}

/// The partition's leader, as Metadata names it.
fn leader(producer: &BaseProducer<Acks>, topic: &str) -> Option<i32> {
    let metadata = producer.client().fetch_metadata(Some(topic), Duration::from_secs(5)).ok()?;
    let leader = metadata.topics().first()?.partitions().first()?.leader();
    (leader >= 0).then_some(leader)
}

/// Creates the topic (replication factor 3, `min.insync.replicas=2`), waits until its
/// ISR is whole, measures, kills the leader, and measures the failover.
///
/// # Errors
/// A message when the cluster cannot be reached, the topic cannot be made, the
/// leader's pid is unknown, or no record is acknowledged after the kill.
pub fn run(options: &FailoverOptions) -> Result<FailoverResult, String> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &options.bootstrap)
        .create()
        .map_err(|e| format!("admin client: {e}"))?;
    // Every broker registered first: a topic of three replicas needs three.
    let deadline = Instant::now() + Duration::from_secs(60);
    while admin.inner().fetch_metadata(None, Duration::from_secs(5)).map_or(0, |m| m.brokers().len()) < 3 {
        if Instant::now() > deadline {
            return Err("the cluster did not name three brokers within 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let topic = NewTopic::new(&options.topic, 1, TopicReplication::Fixed(3)).set("min.insync.replicas", "2");
    let created = futures_lite::future::block_on(admin.create_topics([&topic], &AdminOptions::new()))
        .map_err(|e| format!("create topic: {e}"))?;
    for result in created {
        if let Err((name, code)) = result {
            return Err(format!("create topic {name}: {code}"));
        }
    }
    let acks = Acks::default();
    let producer: BaseProducer<Acks> = ClientConfig::new()
        .set("bootstrap.servers", &options.bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "0")
        .set("message.timeout.ms", "120000")
        .set("topic.metadata.refresh.interval.ms", "1000")
        .create_with_context(acks.clone())
        .map_err(|e| format!("producer: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let isr_whole = || {
        producer
            .client()
            .fetch_metadata(Some(&options.topic), Duration::from_secs(5))
            .ok()
            .and_then(|m| m.topics().first().and_then(|t| t.partitions().first().map(|p| p.isr().len())))
            == Some(3)
    };
    while !isr_whole() {
        if Instant::now() > deadline {
            return Err("the topic's ISR did not reach three replicas".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let killed_broker = leader(&producer, &options.topic).ok_or("the partition has no leader")?;
    let pid = *options.pids.get(&killed_broker).ok_or(format!("no pid given for broker {killed_broker}"))?;
    let mut payload = [b'x'; PAYLOAD];
    let start = Instant::now();
    let stop_reading = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (bootstrap, topic, stop) = (options.bootstrap.clone(), options.topic.clone(), stop_reading.clone());
        let warm_us = warm_up(options.steady).as_micros() as u64;
        std::thread::spawn(move || read_end_to_end(&bootstrap, &topic, start, warm_us, &stop))
    };
    let cpu_before = cpu_seconds(options.pids.values());
    let interval = Duration::from_nanos(1_000_000_000 / options.rate.max(1));
    let kill_at = options.steady;
    let end = options.steady + options.after;
    let mut killed: Option<Instant> = None;
    let mut cpu_steady = 0.0;
    let mut sent = 0u64;
    loop {
        let due = interval * sent as u32;
        if due >= end {
            break;
        }
        if killed.is_none() && due >= kill_at {
            cpu_steady = cpu_seconds(options.pids.values()) - cpu_before;
            stop_reading.store(true, std::sync::atomic::Ordering::Relaxed);
            // SAFETY: kill(2) with a pid the caller named; no memory is involved.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            killed = Some(Instant::now());
        }
        while start.elapsed() < due {
            producer.poll(Duration::from_micros(200));
        }
        let due_us = due.as_micros() as u64;
        payload[..8].copy_from_slice(&due_us.to_le_bytes());
        let mut record: BaseRecord<'_, (), [u8], Box<u64>> =
            BaseRecord::with_opaque_to(&options.topic, Box::new(due_us)).payload(&payload[..]);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(1));
                }
            }
        }
        producer.poll(Duration::ZERO);
        sent += 1;
    }
    producer.flush(Duration::from_secs(120)).map_err(|e| format!("flush: {e}"))?;
    let killed = killed.ok_or("the run ended before the kill")?;
    let e2e = reader.join().map_err(|_| "the end-to-end reader failed")??;
    let acked = acks.acked.lock().expect("acks lock").clone();
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds");
    let steady_end = kill_at.as_micros() as u64;
    let warm_us = warm_up(options.steady).as_micros() as u64;
    let mut acked_steady = 0;
    for (due_us, at) in &acked {
        if *due_us < steady_end && *due_us >= warm_us && *at < killed {
            let latency = (at.duration_since(start).as_micros() as u64).saturating_sub(*due_us).max(1);
            histogram.record(latency.min(600_000_000)).expect("within bounds");
            acked_steady += 1;
        }
    }
    // Responses already on their way when the leader died are not a failover: the
    // first record sent after the kill is.
    let first_after = acked
        .iter()
        .filter(|(due_us, _)| *due_us >= steady_end)
        .map(|(_, at)| *at)
        .min()
        .ok_or("nothing sent after the kill was acknowledged")?;
    let ms = |us: u64| us as f64 / 1000.0;
    let failed = *acks.failed.lock().expect("acks lock");
    // The CPU time covers the whole steady window, warm-up included: so do the bytes.
    let produced_steady = acked.iter().filter(|(due_us, at)| *due_us < steady_end && *at < killed).count();
    let steady_gb = produced_steady as f64 * PAYLOAD as f64 / 1e9;
    Ok(FailoverResult {
        label: options.label.clone(),
        rate: options.rate,
        acked_steady,
        publish_p50_ms: ms(histogram.value_at_quantile(0.50)),
        publish_p99_ms: ms(histogram.value_at_quantile(0.99)),
        publish_p999_ms: ms(histogram.value_at_quantile(0.999)),
        e2e_p50_ms: ms(e2e.value_at_quantile(0.50)),
        e2e_p99_ms: ms(e2e.value_at_quantile(0.99)),
        e2e_p999_ms: ms(e2e.value_at_quantile(0.999)),
        consumed_steady: e2e.len(),
        cpu_seconds_per_gb: if steady_gb > 0.0 { cpu_steady / steady_gb } else { 0.0 },
        killed_broker,
        failover_ms: first_after.duration_since(killed).as_secs_f64() * 1000.0,
        failed,
    })
}

/// The start of the steady window left out of the latencies (clients and brokers
/// still finding each other): 2 s, or a quarter of a shorter window.
fn warm_up(steady: Duration) -> Duration {
    Duration::from_secs(2).min(steady / 4)
}

/// Record payload bytes; the first 8 carry the record's due time.
const PAYLOAD: usize = 100;

/// Reads the partition from the start until `stop`: each record's latency from its
/// due time (µs since `start`, in its first 8 bytes) to its receipt, for records due
/// after the warm-up (`warm_us`).
fn read_end_to_end(
    bootstrap: &str,
    topic: &str,
    start: Instant,
    warm_us: u64,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<Histogram<u64>, String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "skein-bench-end-to-end")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "100")
        .create()
        .map_err(|e| format!("consumer: {e}"))?;
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, 0, Offset::Beginning).map_err(|e| format!("assign: {e}"))?;
    consumer.assign(&assignment).map_err(|e| format!("assign: {e}"))?;
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds");
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let Some(Ok(message)) = consumer.poll(Duration::from_millis(50)) else { continue };
        let now = start.elapsed().as_micros() as u64;
        if let Some(due) =
            message.payload().and_then(|p| p.first_chunk::<8>()).filter(|d| u64::from_le_bytes(**d) >= warm_us)
        {
            let latency = now.saturating_sub(u64::from_le_bytes(*due)).max(1);
            histogram.record(latency.min(600_000_000)).expect("within bounds");
        }
    }
    Ok(histogram)
}

/// The CPU time (user and system) the processes `pids` used so far, in seconds; a
/// process gone counts nothing.
fn cpu_seconds<'a>(pids: impl Iterator<Item = &'a u32>) -> f64 {
    // SAFETY: sysconf reads a constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    pids.filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // Fields after the parenthesised command name: utime and stime are the
            // 12th and 13th.
            let rest = &stat[stat.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split_whitespace().collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .map(|t| t as f64 / ticks)
        .sum()
}
