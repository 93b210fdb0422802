//! Client quotas with librdkafka (the rdkafka crate): a tenant producing flat out
//! against a 10 MiB/s `producer_byte_rate` is held to it within ±10% on a node of
//! two shards, while another tenant's p99 stays near its p99 alone; a fetch quota
//! holds a consumer to its rate; `skein quota set|list` and the API's refusals;
//! a connection creation rate per ip.

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Broker, RawClient};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;

const QUOTA: f64 = 10.0 * 1024.0 * 1024.0;

fn quota(broker: &Broker, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_skein"))
        .arg("quota")
        .args(args)
        .args(["--bootstrap-server", &broker.bootstrap()])
        .output()
        .unwrap()
}

fn text(output: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// Delivery reports: bytes acknowledged with their times, and latencies.
#[derive(Clone, Default)]
struct Reports {
    acked: Arc<Mutex<Vec<(Instant, usize)>>>,
    latencies_us: Arc<Mutex<Vec<u64>>>,
    failed: Arc<AtomicU64>,
}

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    type DeliveryOpaque = Box<(Instant, usize)>;
    fn delivery(&self, result: &DeliveryResult<'_>, sent: Box<(Instant, usize)>) {
        let now = Instant::now();
        match result {
            Ok(_) => {
                self.acked.lock().unwrap().push((now, sent.1));
                self.latencies_us.lock().unwrap().push((now - sent.0).as_micros() as u64);
            }
            Err(_) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn producer(broker: &Broker, client_id: &str) -> (BaseProducer<Reports>, Reports) {
    let reports = Reports::default();
    let producer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("client.id", client_id)
        .set("linger.ms", "2")
        .set("acks", "1")
        .set("queue.buffering.max.kbytes", "65536")
        .create_with_context(reports.clone())
        .unwrap();
    (producer, reports)
}

/// Sends `rate` records a second of `size` bytes for `duration`: the p99 latency.
/// Sends `rate` records a second of `size` bytes for `duration`; the acknowledgement
/// latencies' (p50, p99) in microseconds.
fn paced(broker: &Broker, topic: &str, rate: u64, size: usize, duration: Duration) -> (u64, u64) {
    let (producer, reports) = producer(broker, "tenant-b");
    let value = vec![b'b'; size];
    let started = Instant::now();
    let mut sent = 0u64;
    // The clients sleep between sends: on two cores, a client that spins takes the
    // broker's CPU and measures itself.
    while started.elapsed() < duration {
        let due = started + Duration::from_micros(sent * 1_000_000 / rate);
        let now = Instant::now();
        if now >= due {
            let record = BaseRecord::with_opaque_to(topic, Box::new((now, size))).payload(&value).key("b");
            if producer.send(record).is_ok() {
                sent += 1;
            }
        } else {
            std::thread::sleep((due - now).min(Duration::from_millis(1)));
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    let mut latencies = reports.latencies_us.lock().unwrap().clone();
    assert!(latencies.len() as u64 >= sent * 9 / 10, "tenant b's records were acknowledged");
    latencies.sort_unstable();
    (latencies[latencies.len() / 2], latencies[latencies.len() * 99 / 100])
}

// One tenant flat out is held to its 10 MiB/s quota within ±10%; the other's p99
// stays within noise of running alone.
#[test]
fn producer_byte_rate_holds_a_tenant_and_spares_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    common::create_topic(&broker, "flat", 2);
    common::create_topic(&broker, "paced", 1);
    let set =
        quota(&broker, &["set", "--client-id", "tenant-a", "--add-config", &format!("producer_byte_rate={QUOTA}")]);
    assert!(set.status.success(), "{}", text(&set));
    let listed = text(&quota(&broker, &["list"]));
    assert!(listed.contains("client-id=tenant-a\tproducer_byte_rate=10485760"), "{listed}");
    let alone = paced(&broker, "paced", 500, 1024, Duration::from_secs(4));
    let (flat, reports) = producer(&broker, "tenant-a");
    let stop = Arc::new(AtomicBool::new(false));
    let flat_out = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let value = vec![b'a'; 16 * 1024];
            while !stop.load(Ordering::Relaxed) {
                let record = BaseRecord::with_opaque_to("flat", Box::new((Instant::now(), value.len())))
                    .payload(&value)
                    .key("a");
                // A full queue: the producer is ahead of its quota, so it waits.
                if flat.send(record).is_err() {
                    std::thread::sleep(Duration::from_millis(2));
                }
                flat.poll(Duration::ZERO);
            }
            flat.purge(rdkafka::producer::PurgeConfig::default().queue().inflight());
            flat.poll(Duration::from_millis(100));
        })
    };
    let started = Instant::now();
    // The shares settle within two rebalances; then tenant b runs beside it.
    std::thread::sleep(Duration::from_secs(3));
    let beside = paced(&broker, "paced", 500, 1024, Duration::from_secs(4));
    std::thread::sleep(Duration::from_secs(11).saturating_sub(started.elapsed()));
    stop.store(true, Ordering::Relaxed);
    flat_out.join().unwrap();
    let acked = reports.acked.lock().unwrap().clone();
    let window = (started + Duration::from_secs(3), started + Duration::from_secs(11));
    let bytes: usize = acked.iter().filter(|(t, _)| *t >= window.0 && *t < window.1).map(|(_, b)| b).sum();
    let rate = bytes as f64 / 8.0;
    let ratio = rate / QUOTA;
    eprintln!(
        "tenant a: {:.2} MiB/s ({ratio:.3} of the quota); tenant b (p50, p99) alone {alone:?} us, beside {beside:?} us",
        rate / 1048576.0
    );
    assert!((0.9..=1.1).contains(&ratio), "tenant a ran at {ratio:.3} of its quota");
    // Tenant b is spared when its typical record is as fast beside tenant a as alone:
    // a throttle wrongly applied to it would hold its records for seconds. Its p99
    // is bounded loosely: on this shared disk one device stall of 60-220 ms (seen in
    // every latency bench) covers the 20 slowest of its 2,000 records, and tenant b's
    // p99 *alone* ranged from 7 to 101 ms between runs of one build (2026-12-02);
    // 68 ms beside against 4 ms alone failed a 60 ms slack once (2026-12-05).
    let ((alone_p50, alone_p99), (beside_p50, beside_p99)) = (alone, beside);
    assert!(
        beside_p50 <= (alone_p50 * 3).max(alone_p50 + 10_000),
        "tenant b's p50: {beside_p50} us beside, {alone_p50} us alone"
    );
    assert!(beside_p99 <= alone_p99 + 250_000, "tenant b's p99: {beside_p99} us beside, {alone_p99} us alone");
    assert!(broker.metric_sum("skein_quota_throttled_responses_total") > 0);
}

// A consumer over its consumer_byte_rate is held to it; the API refuses bad
// entities and keys with INVALID_REQUEST and changes nothing.
#[test]
fn consumer_byte_rate_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    common::create_topic(&broker, "backlog", 1);
    let (producer, _) = producer(&broker, "loader");
    let value = vec![b'c'; 16 * 1024];
    for _ in 0..1024 {
        let record = || BaseRecord::with_opaque_to("backlog", Box::new((Instant::now(), value.len())));
        while producer.send(record().payload(&value).key("k")).is_err() {
            producer.poll(Duration::from_millis(5));
        }
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let rate = 4.0 * 1024.0 * 1024.0;
    let set =
        quota(&broker, &["set", "--client-id", "slow-reader", "--add-config", &format!("consumer_byte_rate={rate}")]);
    assert!(set.status.success(), "{}", text(&set));
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("client.id", "slow-reader")
        .set("group.id", "slow")
        .set("auto.offset.reset", "earliest")
        .set("fetch.max.bytes", "1048576")
        .create()
        .unwrap();
    consumer.subscribe(&["backlog"]).unwrap();
    // The rate is measured past the first 4 MiB (the bucket's one-second burst).
    let mut past_burst: Option<Instant> = None;
    let mut bytes = 0usize;
    let deadline = Instant::now() + Duration::from_secs(30);
    while bytes < 16 << 20 && Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
            bytes += rdkafka::Message::payload(&message).map_or(0, |p| p.len());
            if bytes >= 4 << 20 {
                past_burst.get_or_insert_with(Instant::now);
            }
        }
    }
    assert!(bytes >= 16 << 20, "the consumer read the backlog");
    let observed = (bytes - (4 << 20)) as f64 / past_burst.unwrap().elapsed().as_secs_f64();
    eprintln!("consumer: {:.2} MiB/s against a 4 MiB/s quota", observed / 1048576.0);
    assert!((0.85..=1.15).contains(&(observed / rate)), "the consumer ran at {observed} B/s");
    // Refusals: an ip entity with a byte rate, a negative value, an unknown key.
    for bad in [
        vec!["--ip", "10.0.0.1", "--add-config", "producer_byte_rate=5"],
        vec!["--user", "alice", "--add-config", "producer_byte_rate=-5"],
        vec!["--user", "alice", "--add-config", "bogus=1"],
        vec!["--ip", "not-an-ip", "--add-config", "connection_creation_rate=5"],
    ] {
        let out = quota(&broker, &["set"].into_iter().chain(bad.iter().copied()).collect::<Vec<_>>());
        assert!(!out.status.success() && text(&out).contains("InvalidRequest"), "{bad:?}: {}", text(&out));
    }
    let listed = text(&quota(&broker, &["list", "--user", "alice"]));
    assert!(listed.trim().is_empty(), "nothing was set for alice: {listed}");
}

// Past its ip's connection_creation_rate a new connection is held, then closed.
#[test]
fn connection_creation_rate_per_ip() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let set = quota(&broker, &["set", "--ip", "127.0.0.1", "--add-config", "connection_creation_rate=5"]);
    assert!(set.status.success(), "{}", text(&set));
    let mut closed = 0;
    for _ in 0..20 {
        let mut client = RawClient::connect(&broker.bootstrap());
        client.stream.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let frame = client.frame(&common::api_versions_request(), 3);
        client.send_bytes(&frame);
        if client.read_frame().is_none() {
            closed += 1;
        }
    }
    assert!(closed >= 10, "{closed} of 20 connections in a burst were closed");
    assert!(broker.metric_sum("skein_connections_throttled_total") >= 10);
    std::thread::sleep(Duration::from_secs(1));
    let mut client = RawClient::connect(&broker.bootstrap());
    let answer = client.call(&common::api_versions_request(), 3);
    assert_eq!(answer.error_code, 0, "a connection after the burst is served");
}
