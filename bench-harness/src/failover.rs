//! `skein bench failover`: a three-broker cluster's `acks=all` latency and failover
//! time, measured the same way on any Kafka-compatible cluster. An idempotent
//! `acks=all` librdkafka producer writes one partition of replication factor 3
//! (`min.insync.replicas=2`) at a fixed rate; after a steady window the partition's
//! leader is killed with SIGKILL, and the failover time is from the kill to the
//! acknowledgement of the first record sent after it.
//!
//! Latencies are from each record's due send time (coordinated-omission corrected) to
//! its acknowledgement.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;
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
    let payload = [b'x'; 100];
    let start = Instant::now();
    let interval = Duration::from_nanos(1_000_000_000 / options.rate.max(1));
    let kill_at = options.steady;
    let end = options.steady + options.after;
    let mut killed: Option<Instant> = None;
    let mut sent = 0u64;
    loop {
        let due = interval * sent as u32;
        if due >= end {
            break;
        }
        if killed.is_none() && due >= kill_at {
            // SAFETY: kill(2) with a pid the caller named; no memory is involved.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            killed = Some(Instant::now());
        }
        while start.elapsed() < due {
            producer.poll(Duration::from_micros(200));
        }
        let mut record: BaseRecord<'_, (), [u8], Box<u64>> =
            BaseRecord::with_opaque_to(&options.topic, Box::new(due.as_micros() as u64)).payload(&payload[..]);
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
    let acked = acks.acked.lock().expect("acks lock").clone();
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds");
    let steady_end = kill_at.as_micros() as u64;
    let mut acked_steady = 0;
    for (due_us, at) in &acked {
        if *due_us < steady_end && *at < killed {
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
    Ok(FailoverResult {
        label: options.label.clone(),
        rate: options.rate,
        acked_steady,
        publish_p50_ms: ms(histogram.value_at_quantile(0.50)),
        publish_p99_ms: ms(histogram.value_at_quantile(0.99)),
        publish_p999_ms: ms(histogram.value_at_quantile(0.999)),
        killed_broker,
        failover_ms: first_after.duration_since(killed).as_secs_f64() * 1000.0,
        failed,
    })
}
