//! `skein iotune` on a real directory (small file, short steps: the figures are not
//! the point, their presence and bounds are), its refusals, and `skein start`
//! applying a profile or refusing a bad one with the file named.
//!
//! Directories live under Cargo's target tmpdir: O_DIRECT needs a disk's file system,
//! and `/tmp` may be tmpfs.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Broker;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn skein(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_skein")).args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn profile(chunk: u64, writes: u64, window_us: u64) -> String {
    format!(
        r#"{{"format_version": 1, "measured_at": "2026-01-01T00:00:00Z", "recommended":
        {{"append_chunk_bytes": {chunk}, "writes_in_flight": {writes}, "group_commit_window_us": {window_us}}}}}"#
    )
}

// A short run measures every step, prints the tables, writes a profile whose every
// field is present and within bounds, and leaves no scratch file behind.
#[test]
fn measures_and_writes_a_profile() {
    let dir = tempdir();
    let data = dir.path().to_str().unwrap();
    let started = Instant::now();
    let (ok, stdout, stderr) = skein(&["iotune", "--data-dir", data, "--size-mib", "16", "--duration-ms", "10"]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());
    for table in ["sequential write, MB/s", "sequential read, MB/s", "4 KiB random, IOPS", "4 KiB write + fdatasync"] {
        assert!(stdout.contains(table), "no {table:?} in:\n{stdout}");
    }
    assert!(stdout.contains("append_chunk_bytes") && stdout.contains("iotune.json"), "{stdout}");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.contains("skein-iotune"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    let json: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("iotune.json")).unwrap()).unwrap();
    assert_eq!(json["format_version"], 1);
    assert!(json["measured_at"].as_str().unwrap().ends_with('Z'), "{}", json["measured_at"]);
    assert_eq!(json["file_bytes"], 16 << 20);
    assert_eq!(json["step_ms"], 10);
    // On this machine's disk, /sys and /proc/mounts name the device and file system.
    assert!(json["device"]["filesystem"].is_string(), "{}", json["device"]);
    assert!(json["device"].get("name").is_some() && json["device"].get("model").is_some());
    for (table, rows) in [("sequential_write", 30), ("sequential_read", 30), ("random_read", 7), ("random_write", 7)] {
        let steps = json[table].as_array().unwrap_or_else(|| panic!("no {table}"));
        assert_eq!(steps.len(), rows, "{table}");
        for step in steps {
            let figure = step.get("mb_per_s").or(step.get("iops")).unwrap().as_f64().unwrap();
            assert!(figure > 0.0, "{table}: {step}");
            assert!(step["depth"].as_u64().unwrap() >= 1, "{step}");
            assert!(step["latency_us_p50"].as_u64().unwrap() <= step["latency_us_p99"].as_u64().unwrap(), "{step}");
        }
    }
    for knee in ["random_read_knee_depth", "random_write_knee_depth"] {
        assert!([1, 2, 4, 8, 16, 32, 64].contains(&json[knee].as_u64().unwrap()), "{knee}: {}", json[knee]);
    }
    for latency in ["small_write_latency", "fdatasync_latency"] {
        let l = &json[latency];
        assert!(l["rounds"].as_u64().unwrap() > 0, "{latency}: {l}");
        assert!(l["latency_us_p50"].as_u64().unwrap() <= l["latency_us_p99"].as_u64().unwrap(), "{latency}: {l}");
    }
    let r = &json["recommended"];
    let chunk = r["append_chunk_bytes"].as_u64().unwrap();
    assert!([128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20].contains(&chunk), "{r}");
    let writes = r["writes_in_flight"].as_u64().unwrap();
    assert!((1..=32).contains(&writes) && chunk * writes.max(8) <= 16 << 20, "{r}");
    assert!((1..=100_000).contains(&r["group_commit_window_us"].as_u64().unwrap()), "{r}");

    // --out puts the profile elsewhere.
    let out = dir.path().join("elsewhere.json");
    let args = ["iotune", "--data-dir", data, "--size-mib", "8", "--duration-ms", "1", "--out", out.to_str().unwrap()];
    let (ok, stdout, stderr) = skein(&args);
    assert!(ok && out.exists(), "{stdout}\n{stderr}");
}

// A directory that cannot be measured is refused with the reason and a failing exit,
// never a panic; nothing is left in it.
#[test]
fn refuses_what_it_cannot_measure() {
    let dir = tempdir();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let missing = dir.path().join("missing");
    let mut cases = vec![
        (missing.to_str().unwrap().to_string(), vec!["--duration-ms", "1"], "does not exist"),
        (file.to_str().unwrap().to_string(), vec!["--duration-ms", "1"], "is not a directory"),
        (dir.path().to_str().unwrap().to_string(), vec!["--size-mib", "1"], "invalid --size-mib"),
        (dir.path().to_str().unwrap().to_string(), vec!["--duration-ms", "0"], "invalid --duration-ms"),
    ];
    // tmpfs accepts O_DIRECT on recent kernels, but measures memory: refused by name.
    let shm = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    if shm.lines().any(|l| l.split_whitespace().nth(1) == Some("/dev/shm") && l.contains(" tmpfs ")) {
        cases.push(("/dev/shm".into(), vec!["--duration-ms", "1"], "is on tmpfs"));
    }
    for (data_dir, extra, expected) in cases {
        let mut args = vec!["iotune", "--data-dir", &data_dir];
        args.extend(extra);
        let (ok, stdout, stderr) = skein(&args);
        assert!(!ok, "{data_dir}: {stdout}");
        assert!(stderr.contains(expected) && !stderr.contains("panicked"), "{data_dir}: {stderr}");
        assert!(!Path::new(&data_dir).join("iotune.json").exists(), "{data_dir}");
    }
}

fn produce(broker: &Broker, topic: &str, from: usize, count: usize) {
    let producer: BaseProducer =
        ClientConfig::new().set("bootstrap.servers", broker.bootstrap()).set("linger.ms", "5").create().unwrap();
    for i in from..from + count {
        let payload = format!("{i:06}").repeat(170);
        loop {
            match producer.send(BaseRecord::<(), str>::to(topic).partition(0).payload(payload.as_str())) {
                Ok(()) => break,
                Err((_, _)) => {
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// The records of partition 0 from the start, in order, until `expected` or 30 s.
fn consume(broker: &Broker, topic: &str, expected: usize) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", "iotune")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
    consumer.assign(&list).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.len() < expected && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            out.push(String::from_utf8_lossy(&m.payload().unwrap_or_default()[..6]).to_string());
        }
    }
    out
}

// Start applies the data directory's profile (logged with what applies); the
// window caps an enabled group commit. Records produced under one write shape and
// then another, across a restart, all read back in order.
#[test]
fn start_applies_a_profile() {
    let dir = tempdir();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("iotune.json"), profile(1 << 20, 4, 120)).unwrap();
    let mut broker = Broker::start(dir.path(), "1", &["--group-commit-max-delay-us", "500"]);
    let log = broker.log();
    let line = log.lines().find(|l| l.contains("iotune profile applied")).unwrap_or_else(|| panic!("{log}"));
    for field in ["append_chunk_bytes=1048576", "writes_in_flight=4", "group_commit_max_delay_us=120", "iotune.json"] {
        assert!(line.contains(field), "no {field} in {line}");
    }
    // The shard's own appenders took it.
    let metrics = broker.metrics();
    for line in ["skein_append_chunk_bytes{shard=\"0\"} 1048576", "skein_append_writes_in_flight_max{shard=\"0\"} 4"] {
        assert!(metrics.lines().any(|l| l == line), "no {line} in /metrics");
    }
    common::create_topic(&broker, "shaped", 1);
    produce(&broker, "shaped", 0, 3000);
    broker.stop();
    // The smallest chunks, one write at a time; group commit off: the profile leaves it off.
    std::fs::write(data.join("iotune.json"), profile(64 << 10, 1, 120)).unwrap();
    broker.extra.clear();
    broker.restart();
    let log = broker.log();
    let line = log.lines().rfind(|l| l.contains("iotune profile applied")).unwrap();
    assert!(line.contains("append_chunk_bytes=65536") && line.contains("group_commit_max_delay_us=0"), "{line}");
    assert!(broker.metrics().lines().any(|l| l == "skein_append_chunk_bytes{shard=\"0\"} 65536"));
    produce(&broker, "shaped", 3000, 1000);
    let read = consume(&broker, "shaped", 4000);
    let expected: Vec<String> = (0..4000).map(|i| format!("{i:06}")).collect();
    assert!(
        read == expected,
        "{} records read, first differing at {:?}",
        read.len(),
        read.iter().zip(&expected).position(|(a, b)| a != b)
    );
}

// Without a profile the defaults apply and say so; a profile that is not JSON, of a
// later format, or out of bounds, and a --iotune-file that is missing, are refused at
// start with the file named.
#[test]
fn start_refuses_a_bad_profile() {
    let dir = tempdir();
    let broker = Broker::start(dir.path(), "1", &[]);
    assert!(broker.log().contains("no iotune profile: default write shape"), "{}", broker.log());
    drop(broker);
    let data = dir.path().join("refused");
    std::fs::create_dir_all(&data).unwrap();
    let profile_path = data.join("iotune.json");
    let elsewhere = dir.path().join("missing.json");
    let cases: Vec<(String, Vec<String>, &str)> = vec![
        ("{ not json".into(), vec![], "not JSON"),
        (r#"{"format_version": 9, "recommended": {}}"#.into(), vec![], "format 9 is newer"),
        (profile(3 << 20, 8, 100), vec![], "append_chunk_bytes"),
        (profile(2 << 20, 16, 100), vec![], "writes_in_flight"),
        (profile(512 << 10, 8, 0), vec![], "group_commit_window_us"),
        (profile(512 << 10, 8, 100), vec!["--iotune-file".into(), elsewhere.display().to_string()], "missing.json"),
    ];
    for (text, extra, expected) in cases {
        std::fs::write(&profile_path, &text).unwrap();
        let mut args = vec!["start", "--data-dir", data.to_str().unwrap(), "--admin-listener", "off"];
        args.extend(extra.iter().map(String::as_str));
        let (ok, _, stderr) = skein(&args);
        assert!(!ok, "{text}");
        assert!(stderr.contains("iotune file") && stderr.contains(expected), "{text}: {stderr}");
        if extra.is_empty() {
            assert!(stderr.contains(profile_path.to_str().unwrap()), "{stderr}");
        }
    }
}
