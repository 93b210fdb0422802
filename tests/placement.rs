//! Moving partitions between shards of a running broker under load loses nothing and
//! duplicates nothing (idempotent producer, acks=all).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Broker;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

type Delivered = Arc<Mutex<Vec<(i32, Vec<u8>)>>>;

#[derive(Clone, Default)]
struct Acks(Delivered, Arc<Mutex<Vec<String>>>);

impl ClientContext for Acks {}
impl ProducerContext for Acks {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(m) => self.0.lock().unwrap().push((m.partition(), m.payload().unwrap_or_default().to_vec())),
            Err((e, _)) => self.1.lock().unwrap().push(e.to_string()),
        }
    }
}

fn skein(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_skein")).args(args).output().unwrap()
}

// Partitions move back and forth between two shards while a producer writes; every
// acknowledged record is read back exactly once, in order per partition.
#[test]
fn placement_move_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    let b = broker.bootstrap();
    let admin = format!("127.0.0.1:{}", broker.admin_port);
    assert!(skein(&["topic", "create", "moving", "--partitions", "4", "--bootstrap-server", &b]).status.success());

    let acks = Acks::default();
    let producer: BaseProducer<Acks> = ClientConfig::new()
        .set("bootstrap.servers", &b)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "2")
        .set("retry.backoff.ms", "20")
        .set("topic.metadata.refresh.interval.ms", "200")
        .set("message.timeout.ms", "60000")
        .create_with_context(acks.clone())
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let mover = {
        let (done, admin) = (done.clone(), admin.clone());
        std::thread::spawn(move || {
            let mut moves = 0;
            let mut target = 1;
            while !done.load(Ordering::Relaxed) {
                for p in 0..4 {
                    let out = skein(&[
                        "placement",
                        "move",
                        "moving",
                        &p.to_string(),
                        "--shard",
                        &target.to_string(),
                        "--admin",
                        &admin,
                    ]);
                    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                    moves += 1;
                }
                target = 1 - target;
                std::thread::sleep(Duration::from_millis(50));
            }
            moves
        })
    };
    let total = 6000;
    for i in 0..total {
        let partition = (i % 4) as i32;
        let value = format!("p{partition}-s{:05}", i / 4);
        loop {
            match producer.send(BaseRecord::<(), str>::to("moving").partition(partition).payload(&value)) {
                Ok(()) => break,
                Err((_, _)) => {
                    producer.poll(Duration::from_millis(5));
                }
            }
        }
        producer.poll(Duration::ZERO);
        if i % 250 == 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    producer.flush(Duration::from_secs(60)).unwrap();
    done.store(true, Ordering::Relaxed);
    let moves = mover.join().unwrap();
    assert!(moves >= 8, "only {moves} moves happened during the load");
    assert!(acks.1.lock().unwrap().is_empty(), "delivery failures: {:?}", acks.1.lock().unwrap());
    assert_eq!(acks.0.lock().unwrap().len(), total);

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &b)
        .set("group.id", "check")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    for p in 0..4 {
        list.add_partition_offset("moving", p, Offset::Beginning).unwrap();
    }
    consumer.assign(&list).unwrap();
    let mut seen: Vec<Vec<String>> = vec![Vec::new(); 4];
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.iter().map(Vec::len).sum::<usize>() < total && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            seen[m.partition() as usize].push(String::from_utf8_lossy(m.payload().unwrap()).to_string());
        }
    }
    for (p, values) in seen.iter().enumerate() {
        let expected: Vec<String> = (0..total / 4).map(|s| format!("p{p}-s{s:05}")).collect();
        assert_eq!(values, &expected, "partition {p}: lost, duplicated or reordered records");
    }
    // Each partition counts the bytes fetched from it (since it last moved).
    let mut stream = std::net::TcpStream::connect(&admin).unwrap();
    std::io::Write::write_all(&mut stream, b"GET /v1/placement HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut response = String::new();
    std::io::Read::read_to_string(&mut stream, &mut response).unwrap();
    let body = &response[response.find('[').expect("a JSON array")..];
    let rows: Vec<serde_json::Value> = serde_json::from_str(body).unwrap();
    let moving: Vec<&serde_json::Value> = rows.iter().filter(|r| r["topic"] == "moving").collect();
    assert_eq!(moving.len(), 4);
    assert!(moving.iter().all(|r| r["bytes_out"].as_u64().unwrap() > 0), "{rows:?}");
    // `placement show` reports every partition with its shard.
    let show = skein(&["placement", "show", "--admin", &admin, "--interval-ms", "200"]);
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(show.status.success() && text.lines().filter(|l| l.starts_with("moving")).count() == 4, "{text}");
    // Then each shard's reactor figures over the same interval.
    let header = text.lines().position(|l| l.trim_start().starts_with("shard") && l.contains("busy")).expect(&text);
    let shard_rows: Vec<&str> = text.lines().skip(header + 1).filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(shard_rows.len(), 2, "{text}");
    assert!(shard_rows.iter().all(|l| l.contains('%')), "{text}");
    // Operations crossed between the shards (the producer's connection is on one of
    // them, the partitions on both): their waits are counted where they ran, and each
    // shard's ring depths and cross-shard queue are in /metrics.
    let metrics = broker.metrics();
    let waits: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("skein_cross_shard_wait_us_count"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(waits > 0, "{metrics}");
    for name in
        ["skein_ring_sq_depth", "skein_ring_cq_depth", "skein_cross_shard_queued", "skein_task_queue_latency_us"]
    {
        assert!(metrics.lines().filter(|l| l.starts_with(name)).count() >= 2, "{name} missing: {metrics}");
    }
}

/// GETs or POSTs `path` on the admin endpoint and parses its JSON answer.
fn admin_json(admin: &str, method: &str, path: &str) -> serde_json::Value {
    let mut stream = std::net::TcpStream::connect(admin).unwrap();
    let request = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
    std::io::Write::write_all(&mut stream, request.as_bytes()).unwrap();
    let mut response = String::new();
    std::io::Read::read_to_string(&mut stream, &mut response).unwrap();
    let body = &response[response.find("\r\n\r\n").expect("a response") + 4..];
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {response}"))
}

/// The shard of each partition of `topic`, by partition.
fn shards_of(admin: &str, topic: &str) -> Vec<u64> {
    let rows = admin_json(admin, "GET", "/v1/placement");
    let mut rows: Vec<&serde_json::Value> = rows.as_array().unwrap().iter().filter(|r| r["topic"] == topic).collect();
    rows.sort_by_key(|r| r["partition"].as_u64());
    rows.iter().map(|r| r["shard"].as_u64().unwrap()).collect()
}

/// Reads `partitions` partitions of `topic` from the start until `total` records came
/// or 30 s passed; the values by partition.
fn read_all(bootstrap: &str, topic: &str, partitions: i32, total: usize) -> Vec<Vec<String>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "check")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&list).unwrap();
    let mut seen: Vec<Vec<String>> = vec![Vec::new(); partitions as usize];
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.iter().map(Vec::len).sum::<usize>() < total && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            seen[m.partition() as usize].push(String::from_utf8_lossy(m.payload().unwrap()).to_string());
        }
    }
    seen
}

// The load is skewed onto one shard (all four partitions moved to shard 0) under a
// steady producer. The background balancer moves partitions until the shards' busy
// shares are within the band, and every acknowledged record is read back once, in
// order per partition.
#[test]
fn auto_balance_evens_out_a_skewed_load() {
    let dir = tempfile::tempdir().unwrap();
    let extra = ["--auto-balance", "--auto-balance-interval-ms", "1000", "--auto-balance-band", "0.15"];
    let broker = Broker::start(dir.path(), "2", &extra);
    let b = broker.bootstrap();
    let admin = format!("127.0.0.1:{}", broker.admin_port);
    // The topic compresses with gzip: the owning shard compresses every batch (as
    // Kafka's broker does when the topic's codec is not the producer's), so most of
    // the load follows the partitions rather than the producer's connection.
    let create = ["topic", "create", "skewed", "--partitions", "4", "--config", "compression.type=gzip"];
    assert!(skein(&[&create[..], &["--bootstrap-server", &b]].concat()).status.success());
    for p in 0..4 {
        let out = skein(&["placement", "move", "skewed", &p.to_string(), "--shard", "0", "--admin", &admin]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(shards_of(&admin, "skewed"), [0, 0, 0, 0]);

    let acks = Acks::default();
    let producer: BaseProducer<Acks> = ClientConfig::new()
        .set("bootstrap.servers", &b)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "1")
        .set("batch.size", "16384")
        .set("retry.backoff.ms", "20")
        .set("topic.metadata.refresh.interval.ms", "200")
        .set("message.timeout.ms", "60000")
        .create_with_context(acks.clone())
        .unwrap();
    // Paced at about 8 MB/s of 1 KiB records, on a thread of its own, until the
    // balancer has spread the partitions and a measurement finds the shards within the
    // band (or 60 s).
    // Letters from a simple generator, which gzip halves.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let payload: String = (0..1000)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (b'a' + (seed % 16) as u8) as char
        })
        .collect();
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (done, payload) = (done.clone(), payload.clone());
        std::thread::spawn(move || {
            let mut sent = 0usize;
            while !done.load(Ordering::Relaxed) {
                for _ in 0..80 {
                    let partition = (sent % 4) as i32;
                    let value = format!("p{partition}-s{:07}-{payload}", sent / 4);
                    while producer
                        .send(BaseRecord::<(), str>::to("skewed").partition(partition).payload(&value))
                        .is_err()
                    {
                        producer.poll(Duration::from_millis(5));
                    }
                    sent += 1;
                }
                producer.poll(Duration::from_millis(10));
            }
            producer.flush(Duration::from_secs(60)).unwrap();
            sent
        })
    };
    let (mut spread, mut plan) = (f64::MAX, serde_json::Value::Null);
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(5));
    while started.elapsed() < Duration::from_secs(60) {
        if shards_of(&admin, "skewed").contains(&1) {
            // The balancer's own measure, over two seconds, while the load runs.
            plan = admin_json(&admin, "GET", "/v1/placement/balance?interval_ms=2000&band=0.15");
            spread = plan["spread_before"].as_f64().unwrap();
            if spread <= 0.15 {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    done.store(true, Ordering::Relaxed);
    let sent = writer.join().unwrap();
    let placed = shards_of(&admin, "skewed");
    let log = broker.log();
    eprintln!("balanced after {:.1} s: {placed:?}, {plan}", started.elapsed().as_secs_f64());
    assert!(placed.contains(&1), "nothing moved off the hot shard: {placed:?}\n{plan:#}\n{log}");
    assert!(log.contains("auto-balance moved a partition"), "{log}");
    assert!(spread <= 0.15, "busy shares still {spread:.3} apart: {plan:#}");
    assert!(acks.1.lock().unwrap().is_empty(), "delivery failures: {:?}", acks.1.lock().unwrap());
    assert_eq!(acks.0.lock().unwrap().len(), sent);
    let seen = read_all(&b, "skewed", 4, sent);
    for (p, values) in seen.iter().enumerate() {
        let count = sent / 4 + usize::from(p < sent % 4);
        let expected: Vec<String> = (0..count).map(|s| format!("p{p}-s{s:07}-{payload}")).collect();
        assert!(
            values == &expected,
            "partition {p}: lost, duplicated or reordered records ({} read, {count} sent)",
            values.len()
        );
    }
}

// `skein placement balance` proposes without moving, and a restart with another
// number of shards spreads the partitions over them (grow, then shrink) with every
// record kept.
#[test]
fn balance_dry_run_and_restarts_with_other_cores() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path(), "1", &[]);
    let b = broker.bootstrap();
    let admin = format!("127.0.0.1:{}", broker.admin_port);
    assert!(skein(&["topic", "create", "spread", "--partitions", "6", "--bootstrap-server", &b]).status.success());
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", &b).set("acks", "all").create().unwrap();
    let produce = |from: usize, to: usize| {
        for i in from..to {
            let partition = (i % 6) as i32;
            let value = format!("p{partition}-s{:05}", i / 6);
            producer.send(BaseRecord::<(), str>::to("spread").partition(partition).payload(&value)).unwrap();
        }
        producer.flush(Duration::from_secs(30)).unwrap();
    };
    produce(0, 600);
    // One shard: nothing to propose.
    let out = skein(&["placement", "balance", "--dry-run", "--interval-ms", "300", "--admin", &admin]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("no moves"), "{text}{}", String::from_utf8_lossy(&out.stderr));
    broker.stop();
    for (cores, counts) in [("2", [3, 3]), ("1", [6, 0])] {
        broker.cores = cores.to_string();
        broker.restart();
        let admin = format!("127.0.0.1:{}", broker.admin_port);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut placed = shards_of(&admin, "spread");
        while (0..2).any(|s| placed.iter().filter(|&&x| x == s as u64).count() != counts[s])
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(100));
            placed = shards_of(&admin, "spread");
        }
        for (s, &count) in counts.iter().enumerate() {
            assert_eq!(placed.iter().filter(|&&x| x == s as u64).count(), count, "{cores} shards: {placed:?}");
        }
        let seen = read_all(&broker.bootstrap(), "spread", 6, 600);
        for (p, values) in seen.iter().enumerate() {
            let expected: Vec<String> = (0..100).map(|s| format!("p{p}-s{s:05}")).collect();
            assert_eq!(values, &expected, "{cores} shards, partition {p}");
        }
        broker.stop();
    }
    // A bad band is refused with a clear message.
    broker.restart();
    let admin = format!("127.0.0.1:{}", broker.admin_port);
    let out = skein(&["placement", "balance", "--band", "7", "--admin", &admin]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("band from 0 to 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
