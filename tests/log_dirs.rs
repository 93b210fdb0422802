//! More than one log directory per node (`--log-dirs`, Kafka's JBOD, KIP-858): new
//! partitions spread over the directories, `kafka-log-dirs` describes each, and
//! `kafka-reassign-partitions` moves a replica from one to another
//! (AlterReplicaLogDirs) while librdkafka's idempotent producer writes to it. Every
//! acknowledged record is read back from the new directory, after a restart too. A
//! cordoned directory (`cordoned.log.dirs`) takes no new partition.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::acks::Acks;
use common::{kafka_tool, Broker};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const TOPICS: &str = "org.apache.kafka.tools.TopicCommand";
const REASSIGN: &str = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand";
const LOG_DIRS: &str = "org.apache.kafka.tools.LogDirsCommand";

fn ok(main: &str, args: &[&str]) -> String {
    let (success, output) = kafka_tool(main, args, "");
    assert!(success, "{main} {args:?} failed:\n{output}");
    output
}

/// Partition directories of `topic` in `dir`.
fn partitions_in(dir: &Path, topic: &str) -> BTreeSet<i32> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.strip_prefix(&format!("{topic}-"))?.parse().ok())
        .collect()
}

/// Every payload of `partition` from its start, until `expected` or 60 s.
fn read_back(bootstrap: &str, topic: &str, partition: i32, expected: usize) -> Vec<Vec<u8>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "jbod")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, partition, Offset::Beginning).unwrap();
    consumer.assign(&list).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while out.len() < expected && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            out.push(m.payload().unwrap_or_default().to_vec());
        }
    }
    out
}

#[test]
fn replicas_move_between_log_directories_under_a_producer() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("logs-a"), dir.path().join("logs-b"));
    let dirs = format!("{},{}", a.display(), b.display());
    let mut node = Broker::start(dir.path(), "2", &["--log-dirs", &dirs]);
    let bootstrap = node.bootstrap();
    let bs = bootstrap.as_str();
    // Segments of 4 MiB: the moved partition's active segment outgrows what a move
    // copies whole again, so the move appends only what was written meanwhile.
    let created = ["--bootstrap-server", bs, "--create", "--topic", "jbod", "--partitions", "4"];
    ok(TOPICS, &[&created[..], &["--config", "segment.bytes=4194304"]].concat());
    // Two shards, each at home in one directory: the partitions spread over both.
    let deadline = Instant::now() + Duration::from_secs(10);
    while partitions_in(&a, "jbod").len() + partitions_in(&b, "jbod").len() < 4 {
        assert!(Instant::now() < deadline, "partitions never created");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (in_a, in_b) = (partitions_in(&a, "jbod"), partitions_in(&b, "jbod"));
    assert!(!in_a.is_empty() && !in_b.is_empty(), "not spread: {in_a:?} {in_b:?}");
    assert!(a.join("meta.properties").exists() && b.join("meta.properties").exists());
    let (source, target) = match in_a.contains(&1) {
        true => (a.clone(), b.clone()),
        false => (b.clone(), a.clone()),
    };

    // An idempotent producer writes to partition 1 throughout, 1 KiB records.
    let acks = Acks::default();
    let producer: BaseProducer<Acks> = ClientConfig::new()
        .set("bootstrap.servers", bs)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create_with_context(acks.clone())
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let payload = format!("{n:08}-{}", "x".repeat(1000));
                let record: BaseRecord<'_, (), str> = BaseRecord::to("jbod").partition(1).payload(&payload);
                match producer.send(record) {
                    Ok(()) => n += 1,
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
                producer.poll(Duration::ZERO);
                // About 5,000 records a second: a partition of tens of MiB by the move.
                if n.is_multiple_of(50) {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            producer.flush(Duration::from_secs(60)).unwrap();
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while acks.acked.lock().unwrap().len() < 3_000 {
        assert!(Instant::now() < deadline, "the producer never got going: {:?}", acks.errors.lock().unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }

    // kafka-reassign-partitions moves it to the other directory; --verify says when.
    let plan = dir.path().join("plan.json");
    let json = format!(
        r#"{{"version":1,"partitions":[{{"topic":"jbod","partition":1,"replicas":[1],"log_dirs":["{}"]}}]}}"#,
        target.display()
    );
    std::fs::write(&plan, json).unwrap();
    let plan = plan.to_str().unwrap();
    let executed = ok(REASSIGN, &["--bootstrap-server", bs, "--execute", "--reassignment-json-file", plan]);
    assert!(executed.contains("Successfully started moving log directory"), "{executed}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let verified = ok(REASSIGN, &["--bootstrap-server", bs, "--verify", "--reassignment-json-file", plan]);
        if verified.contains("Reassignment of replica jbod-1-1 completed successfully.") {
            break;
        }
        assert!(Instant::now() < deadline, "the move never completed:\n{verified}\n{}", node.log());
        std::thread::sleep(Duration::from_millis(300));
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(acks.errors.lock().unwrap().is_empty(), "{:?}", acks.errors.lock().unwrap());
    assert!(partitions_in(&target, "jbod").contains(&1), "not in the target");
    assert!(!partitions_in(&source, "jbod").contains(&1), "still in the source");
    let log = node.log();
    let moved = log.lines().find(|l| l.contains("replica moved to another log directory"));
    eprintln!("{}", moved.unwrap_or_else(|| panic!("{log}")));

    // kafka-log-dirs: both directories, the partition under the target.
    let described =
        ok(LOG_DIRS, &["--bootstrap-server", bs, "--describe", "--topic-list", "jbod", "--broker-list", "1"]);
    let json = described.lines().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("{described}"));
    let parsed: serde_json::Value = serde_json::from_str(json).unwrap();
    let log_dirs = parsed["brokers"][0]["logDirs"].as_array().unwrap();
    assert_eq!(log_dirs.len(), 2, "{json}");
    let holder = log_dirs
        .iter()
        .find(|d| d["partitions"].as_array().unwrap().iter().any(|p| p["partition"] == "jbod-1"))
        .unwrap_or_else(|| panic!("{json}"));
    assert_eq!(holder["logDir"], target.display().to_string(), "{json}");
    assert!(log_dirs.iter().all(|d| d["error"].is_null()), "{json}");

    // Every acknowledged record is there, in order, before and after a restart.
    let acked: Vec<Vec<u8>> = acks.acked.lock().unwrap().iter().map(|(_, _, payload)| payload.clone()).collect();
    eprintln!("{} records acknowledged", acked.len());
    assert!(acked.len() > 3_000, "{}", acked.len());
    for round in ["after the move", "after a restart"] {
        let read = read_back(&node.bootstrap(), "jbod", 1, acked.len());
        let read: BTreeSet<Vec<u8>> = read.into_iter().collect();
        let missing = acked.iter().filter(|p| !read.contains(*p)).count();
        assert_eq!(missing, 0, "{round}: {missing} of {} acknowledged records missing", acked.len());
        if round == "after the move" {
            node.stop();
            node.restart();
        }
    }
    assert!(partitions_in(&target, "jbod").contains(&1) && !partitions_in(&source, "jbod").contains(&1));

    // A cordoned directory (KIP-1066) takes no new partition while another does not.
    let bs = bootstrap.as_str();
    let broker = ["--bootstrap-server", bs, "--entity-type", "brokers", "--entity-name", "1", "--alter"];
    let cordon = format!("cordoned.log.dirs={}", a.display());
    ok("org.apache.kafka.tools.ConfigCommand", &[&broker[..], &["--add-config", &cordon]].concat());
    std::thread::sleep(Duration::from_millis(500));
    ok(TOPICS, &["--bootstrap-server", bs, "--create", "--topic", "fresh", "--partitions", "4"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while partitions_in(&b, "fresh").len() < 4 {
        assert!(Instant::now() < deadline, "{:?} {:?}", partitions_in(&a, "fresh"), partitions_in(&b, "fresh"));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(partitions_in(&a, "fresh").is_empty());
}

// A directory named twice, and a directory of another node, are refused at start with
// a message.
#[test]
fn log_directories_are_checked_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("logs-a");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::write(a.join("meta.properties"), "version=1\nnode.id=7\ndirectory.id=x\n").unwrap();
    let skein = env!("CARGO_BIN_EXE_skein");
    let start = |log_dirs: &str| {
        let out = std::process::Command::new(skein)
            .args(["start", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--listener", "127.0.0.1:0", "--admin-listener", "off", "--cores", "1", "--log-dirs", log_dirs])
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (code, stderr) = start(&format!("{0},{0}/", a.display()));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("twice"), "{stderr}");
    let (code, stderr) = start(&a.display().to_string());
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("belongs to node 7"), "{stderr}");
}

/// Produces one record to each of `partitions` of `topic`; returns which were
/// acknowledged within `timeout`.
fn produce_each(bootstrap: &str, topic: &str, partitions: i32, timeout: Duration) -> BTreeSet<i32> {
    let acks = Acks::default();
    let producer: BaseProducer<Acks> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("message.timeout.ms", timeout.as_millis().to_string())
        .create_with_context(acks.clone())
        .unwrap();
    for p in 0..partitions {
        producer.send(BaseRecord::<(), str>::to(topic).partition(p).payload("r")).unwrap();
    }
    let _ = producer.flush(timeout + Duration::from_secs(5));
    let acked = acks.acked.lock().unwrap().iter().map(|(p, _, _)| *p).collect();
    acked
}

// A drive that fails (its ext4 file system shut down: every I/O EIO) takes only the
// partitions in its log directory offline: they answer KAFKA_STORAGE_ERROR, DescribeLogDirs
// reports the directory offline, `skein_log_dir_failed` says so, the failure is
// logged once, and the partitions in the other directory take writes on.
#[test]
fn a_failed_drive_takes_only_its_partitions_offline() {
    use kafka_protocol::messages::DescribeLogDirsRequest;
    let dir = tempfile::tempdir().unwrap();
    let drive = common::LoopFs::new(dir.path(), 256 << 20);
    let (a, b) = (drive.mountpoint.join("logs"), dir.path().join("logs-b"));
    let dirs = format!("{},{}", a.display(), b.display());
    let mut node = Broker::start(dir.path(), "2", &["--log-dirs", &dirs]);
    let bootstrap = node.bootstrap();
    ok(TOPICS, &["--bootstrap-server", &bootstrap, "--create", "--topic", "split", "--partitions", "4"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while partitions_in(&a, "split").len() + partitions_in(&b, "split").len() < 4 {
        assert!(Instant::now() < deadline, "partitions never created");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (on_a, on_b) = (partitions_in(&a, "split"), partitions_in(&b, "split"));
    assert!(!on_a.is_empty() && !on_b.is_empty(), "{on_a:?} {on_b:?}");
    assert_eq!(produce_each(&bootstrap, "split", 4, Duration::from_secs(10)).len(), 4);

    drive.shut_down();
    // A topic created now: the shard at home on the failed drive cannot create its
    // partitions there, and that alone fails the directory.
    ok(TOPICS, &["--bootstrap-server", &bootstrap, "--create", "--topic", "late", "--partitions", "2"]);
    let failed = format!("skein_log_dir_failed{{shard=\"0\",dir=\"{}\"}} 1", a.display());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !node.metrics().contains(&failed) {
        assert!(Instant::now() < deadline, "{}", node.metrics());
        std::thread::sleep(Duration::from_millis(200));
    }
    // The other directory's partitions take writes meanwhile and after.
    let acked = produce_each(&bootstrap, "split", 4, Duration::from_secs(5));
    assert_eq!(acked, on_b, "acknowledged {acked:?}, the healthy directory holds {on_b:?}");
    // Once its partitions are dropped (a housekeeping pass), they answer
    // KAFKA_STORAGE_ERROR at once.
    std::thread::sleep(Duration::from_millis(1_500));
    let mut client = common::RawClient::connect(&bootstrap);
    let described = client.call(&DescribeLogDirsRequest::default().with_topics(None), 4);
    let by_path =
        |path: &Path| described.results.iter().find(|r| r.log_dir.as_str() == path.to_str().unwrap()).unwrap();
    assert_eq!(by_path(&a).error_code, 56, "KAFKA_STORAGE_ERROR: {described:?}");
    assert_eq!(by_path(&b).error_code, 0);
    let split = by_path(&b).topics.iter().find(|t| t.name.as_str() == "split").unwrap();
    assert_eq!(split.partitions.len(), on_b.len());
    assert_eq!(produce_each(&bootstrap, "split", 4, Duration::from_secs(5)), on_b);
    assert_eq!(node.log().matches("log directory failed: its partitions go offline").count(), 1, "{}", node.log());
    node.stop();
}
