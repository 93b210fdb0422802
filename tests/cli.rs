//! The CLI (`skein topic|produce|consume|placement`) against a real broker, and its
//! errors when the broker is unreachable.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::Broker;

fn skein(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_skein")).args(args).env("SKEIN_LOG", "warn").output().unwrap()
}

fn ok(output: Output) -> String {
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).to_string()
}

fn produce(bootstrap: &str, topic: &str, lines: &str, extra: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["produce", topic, "--bootstrap-server", bootstrap])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(lines.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

// Topics are created, listed, described, altered and deleted; records produced from
// stdin are consumed from the beginning, from an offset and from a time.
#[test]
fn topic_produce_consume() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    let b = broker.bootstrap();
    let b = b.as_str();
    ok(skein(&[
        "topic",
        "create",
        "cli",
        "--partitions",
        "3",
        "--config",
        "retention.ms=3600000",
        "--bootstrap-server",
        b,
    ]));
    assert!(ok(skein(&["topic", "list", "--bootstrap-server", b])).lines().any(|l| l == "cli"));
    let described = ok(skein(&["topic", "describe", "cli", "--bootstrap-server", b]));
    assert!(described.contains("3 partitions"), "{described}");
    assert!(described.contains("retention.ms=3600000"), "{described}");

    let lines: String = (0..30).map(|i| format!("k{}:v{i}\n", i % 5)).collect();
    ok(produce(b, "cli", &lines, &["--key-separator", ":"]));
    let all = ok(skein(&[
        "consume",
        "cli",
        "--from-beginning",
        "--max-messages",
        "30",
        "--key-separator",
        ":",
        "--bootstrap-server",
        b,
    ]));
    let mut got: Vec<&str> = all.lines().collect();
    got.sort();
    let mut want: Vec<String> = (0..30).map(|i| format!("k{}:v{i}", i % 5)).collect();
    want.sort();
    assert_eq!(got, want);

    // One partition, from offset 2.
    ok(produce(b, "cli", "a\nb\nc\nd\n", &["--partition", "0"]));
    let from_offset = ok(skein(&[
        "consume",
        "cli",
        "--partition",
        "0",
        "--offset",
        "2",
        "--idle-timeout-ms",
        "1500",
        "--bootstrap-server",
        b,
    ]));
    let partition0 = ok(skein(&[
        "consume",
        "cli",
        "--partition",
        "0",
        "--from-beginning",
        "--idle-timeout-ms",
        "1500",
        "--bootstrap-server",
        b,
    ]));
    assert_eq!(from_offset.lines().count() + 2, partition0.lines().count());
    // From a timestamp in the future: nothing; from 0: everything.
    let future = ok(skein(&[
        "consume",
        "cli",
        "--timestamp",
        "99999999999999",
        "--idle-timeout-ms",
        "1000",
        "--bootstrap-server",
        b,
    ]));
    assert_eq!(future.lines().count(), 0);
    let past = ok(skein(&["consume", "cli", "--timestamp", "0", "--max-messages", "34", "--bootstrap-server", b]));
    assert_eq!(past.lines().count(), 34);

    ok(skein(&[
        "topic",
        "alter",
        "cli",
        "--config",
        "retention.bytes=1000000",
        "--partitions",
        "4",
        "--bootstrap-server",
        b,
    ]));
    let described = ok(skein(&["topic", "describe", "cli", "--bootstrap-server", b]));
    assert!(described.contains("4 partitions") && described.contains("retention.bytes=1000000"), "{described}");
    assert!(described.contains("retention.ms=3600000"), "alter keeps other overrides: {described}");

    ok(skein(&["topic", "delete", "cli", "--bootstrap-server", b]));
    assert!(!ok(skein(&["topic", "list", "--bootstrap-server", b])).lines().any(|l| l == "cli"));
}

// Failures say what failed and exit non-zero.
#[test]
fn failures_exit_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let b = broker.bootstrap();
    let check = |output: Output, needle: &str| {
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(needle), "{stderr}");
    };
    check(skein(&["topic", "create", "bad name", "--bootstrap-server", &b]), "cannot create topic");
    check(skein(&["topic", "delete", "absent", "--bootstrap-server", &b]), "cannot delete topic");
    check(skein(&["topic", "describe", "absent", "--bootstrap-server", &b]), "absent");
    check(skein(&["topic", "create", "x", "--config", "retention.ms", "--bootstrap-server", &b]), "NAME=VALUE");
    // Nothing listens on this port.
    let dead = format!("127.0.0.1:{}", common::free_port());
    check(skein(&["topic", "list", "--bootstrap-server", &dead, "--timeout-ms", "1500"]), "cannot reach");
    check(produce(&dead, "t", "x\n", &["--timeout-ms", "1500"]), "failed");
    check(skein(&["placement", "show", "--admin", &dead]), "cannot reach");
}

// `skein bench run --driver native` produces at the workload's rate over two shards,
// reads back every record it produced, and reports where the broker's time went from
// its stage histograms; a workload it cannot drive is refused with a clear message.
#[test]
fn bench_native_driver() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    let workload = dir.path().join("w.toml");
    std::fs::write(
        &workload,
        "name = 'native'\npartitions_per_topic = 4\nmessage_size = 200\nproducer_rate = 2000\nwarmup_secs = 1\nduration_secs = 2\n",
    )
    .unwrap();
    let out = dir.path().join("result.json");
    let metrics = format!("http://{}:{}/metrics", broker.host, broker.admin_port);
    let printed = ok(skein(&[
        "bench",
        "run",
        workload.to_str().unwrap(),
        "--bootstrap-server",
        &broker.bootstrap(),
        "--driver",
        "native",
        "--metrics-url",
        &metrics,
        "--out",
        out.to_str().unwrap(),
    ]));
    let result: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(result["driver"], "native");
    assert_eq!(result["publish_errors"], 0, "{printed}");
    // Acknowledgements are counted as they arrive in the window, so a stall of a debug
    // broker on a shared machine (CI saw 220 ms, the full suite here 460 ms) moves up
    // to a quarter of a 2 s window's acknowledgements across its edge; whether the
    // rate is met is the benchmark's question, this test asks that the generator
    // drives about the workload's rate.
    let rate = result["published_msgs_per_sec"].as_f64().unwrap();
    assert!((1500.0..2500.0).contains(&rate), "{printed}");
    // Consumers count what arrived in the window: all of it, give or take what was in
    // flight at its edges.
    let (published, consumed) = (result["published_msgs"].as_u64().unwrap(), result["consumed_msgs"].as_u64().unwrap());
    let edge = 200.max(published / 8);
    assert!(consumed + edge >= published && consumed <= published + edge, "{published} {consumed}\n{printed}");
    assert!(result["publish_latency"]["p99_us"].as_u64().unwrap() > 0);
    let stages: Vec<String> = result["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| format!("{} {}", s["api"].as_str().unwrap(), s["stage"].as_str().unwrap()))
        .collect();
    for stage in ["produce read", "produce decode", "produce handle", "produce write", "append write", "fetch handle"] {
        assert!(stages.iter().any(|s| s == stage), "{stage} missing from {stages:?}");
    }
    assert!(printed.contains("broker stages"), "{printed}");
    // The run's topic is deleted when it ends, its files too: repeated runs on one
    // broker do not fill its disk.
    let left = || -> Vec<String> {
        let entries = std::fs::read_dir(&broker.data_dir).unwrap();
        let names = entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned());
        names.filter(|name| name.starts_with("bench-native-")).collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !left().is_empty() {
        assert!(std::time::Instant::now() < deadline, "the run's partitions are still on disk: {:?}", left());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    std::fs::write(
        &workload,
        "name = 'zstd'\nmessage_size = 200\nproducer_rate = 100\nduration_secs = 1\ncompression = 'zstd'\n",
    )
    .unwrap();
    let refused = skein(&[
        "bench",
        "run",
        workload.to_str().unwrap(),
        "--bootstrap-server",
        &broker.bootstrap(),
        "--driver",
        "native",
    ]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--driver librdkafka"), "{refused:?}");
}
