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
}
