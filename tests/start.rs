//! End-to-end: `skein start` with its defaults, a clean stop on SIGTERM that marks
//! every log clean, and flags that are refused with a clear error.

mod common;

use std::process::Command;

use common::{Broker, RawClient};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{CreateTopicsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

fn skein() -> Command {
    Command::new(env!("CARGO_BIN_EXE_skein"))
}

// SIGTERM closes every log cleanly and exits 0, leaving Kafka's clean-shutdown marker;
// the restart opens every log as cleanly closed and logs how long recovery took.
#[test]
fn sigterm_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path(), "2", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    let topic = CreatableTopic::default()
        .with_name(TopicName(StrBytes::from_static_str("clean")))
        .with_num_partitions(4)
        .with_replication_factor(1);
    let response = client.call(&CreateTopicsRequest::default().with_topics(vec![topic]), 7);
    assert_eq!(response.topics[0].error_code, 0);
    drop(client);
    broker.stop();
    assert!(broker.log().contains("stopped cleanly"), "{}", broker.log());
    // Kafka's clean-shutdown marker says it for the node; these small logs keep no
    // checkpoint of their own (their data is all flushed at the stop).
    assert!(broker.data_dir.join(".kafka_cleanshutdown").exists());
    for p in 0..4 {
        assert!(!broker.data_dir.join(format!("clean-{p}/skein-checkpoint")).exists(), "partition {p}");
    }
    broker.restart();
    assert!(broker.log().contains("recovery_ms"));
    assert!(broker.log().matches("shard ready").count() >= 4);
    let reopened = broker.log().lines().filter(|l| l.contains("log opened") && l.contains("clean-")).count();
    let clean = broker
        .log()
        .lines()
        .filter(|l| l.contains("log opened") && l.contains("clean-") && l.contains("clean=true"))
        .count();
    assert_eq!((reopened, clean), (4, 4), "{}", broker.log());
}

// A node runs without transparent huge pages (the kernel would zero 2 MiB on the
// request path at a buffer's first touch), unless MIMALLOC_ALLOW_THP asks for them.
#[test]
fn a_node_runs_without_huge_pages() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let pid = broker.child.as_ref().expect("running").id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("THP_enabled:")).expect("a kernel that reports THP_enabled");
    assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
}

// Invalid flags and config files are refused with a message naming the setting.
#[test]
fn bad_flags_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "listener = 9092\n").unwrap();
    let unknown = dir.path().join("unknown.toml");
    std::fs::write(&unknown, "no_such_setting = 1\n").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--cores".into(), "0".into()], "invalid --cores"),
        (vec!["--cores".into(), "99999".into()], "invalid --cores"),
        (vec!["--cores".into(), "banana".into()], "invalid --cores"),
        (vec!["--cache-mb-per-shard".into(), "0".into()], "--cache-mb-per-shard"),
        (vec!["--group-commit-max-delay-us".into(), "100001".into()], "--group-commit-max-delay-us"),
        (vec!["--listener".into(), "localhost".into()], "invalid listener"),
        (vec!["--topic-config".into(), "retention.ms=soon".into()], "retention.ms"),
        (vec!["--config".into(), config.display().to_string()], "invalid config file"),
        (vec!["--config".into(), unknown.display().to_string()], "no_such_setting"),
        (vec!["--config".into(), "/nonexistent.toml".into()], "cannot read config file"),
    ];
    for (args, expected) in cases {
        let output = skein().arg("start").args(&args).arg("--data-dir").arg(dir.path().join("d")).output().unwrap();
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

// A config file sets what flags set; flags win over the file.
#[test]
fn config_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("skein.toml");
    std::fs::write(
        &config,
        "num_partitions = 3\nadmin_listener = \"off\"\n[topic_defaults]\n\"retention.ms\" = \"7777\"\n",
    )
    .unwrap();
    let broker = Broker::start(dir.path(), "1", &["--config", config.to_str().unwrap()]);
    let out = Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["topic", "create", "fromfile", "--bootstrap-server", &broker.bootstrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let described = Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["topic", "describe", "fromfile", "--bootstrap-server", &broker.bootstrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&described.stdout);
    assert!(text.contains("retention.ms=7777"), "{text}");
}

// One node per data directory and per port, as Kafka refuses a second broker: a second
// `skein start` on a locked data directory, or on an address another node listens on
// (which SO_REUSEPORT would otherwise let it share), exits non-zero with a clear error.
#[test]
fn second_node_on_same_data_dir_or_port_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let pid = broker.child.as_ref().unwrap().id();

    let other = tempfile::tempdir().unwrap();
    let free = format!("127.0.0.1:{}", common::free_port());
    let same_dir = skein()
        .args(["start", "--cores", "1", "--admin-listener", "off", "--listener", &free, "--data-dir"])
        .arg(&broker.data_dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&same_dir.stderr);
    assert!(!same_dir.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("in use by process {pid}")), "{stderr}");

    let same_port = skein()
        .args(["start", "--cores", "1", "--admin-listener", "off", "--listener", &broker.bootstrap(), "--data-dir"])
        .arg(other.path().join("data"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&same_port.stderr);
    assert!(!same_port.status.success(), "{stderr}");
    assert!(stderr.contains("another process already listens"), "{stderr}");

    // The first node is untouched and still serves.
    let mut client = RawClient::connect(&broker.bootstrap());
    let versions = client.call(&common::api_versions_request(), 3);
    assert_eq!(versions.error_code, 0);
}
