//! The client generations users run, each against its own Skein: librdkafka 2.0
//! (Debian's kcat, and a C program on Debian's librdkafka-dev for the admin calls kcat
//! lacks), kafka-python 2.x and 3.x, aiokafka, kafkajs 2.x, franz-go, sarama, and the
//! Java client 3.9, 4.1 and 4.4. Each client runs the same scenario (admin calls,
//! an idempotent producer, offsets earliest/latest/by time, consuming from the
//! beginning and from an offset, a 2-member group with commits) from
//! `tests/clients/<client>/`, whose `setup.sh` installs it (`.ci/run` runs them all).
//! The newest librdkafka is covered by the rdkafka-based tests. Share groups (KIP-932)
//! run with franz-go's share consumer and librdkafka 2.16's (confluent-kafka).

mod common;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{create_topic, Broker};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn start() -> (Broker, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &["--group-initial-rebalance-delay-ms", "300"]);
    (broker, dir)
}

/// Runs `tests/clients/<client>/setup.sh` (idempotent: quick once installed).
fn setup(client: &str) {
    // Tests run as threads of one process: one installer at a time.
    static SETUP: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = SETUP.lock().unwrap_or_else(|e| e.into_inner());
    let script = root().join("tests/clients").join(client).join("setup.sh");
    let status = Command::new("bash").arg(&script).stdout(Stdio::null()).status().expect("run setup.sh");
    assert!(status.success(), "{} failed", script.display());
}

/// Runs `command` with `input` on its standard input and a time limit. Its output is
/// read while it runs (a chatty client never blocks on a full pipe); a run that does
/// not end in time is killed and reported with what it printed.
fn run(mut command: Command, input: Option<&str>, limit: Duration) -> Output {
    let mut child = command
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
    if let Some(input) = input {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    let pid = child.id() as i32;
    let (done, output) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    match output.recv_timeout(limit) {
        Ok(result) => result.unwrap(),
        Err(_) => {
            // SAFETY: signalling our own child, still running.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let output = output.recv().unwrap().unwrap();
            panic!(
                "{command:?} still running after {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}

/// Runs a client's scenario against a fresh broker; it must print `OK <client>`.
fn scenario(client: &str, command: Command) {
    let (mut broker, _dir) = start();
    let mut command = command;
    command.arg(broker.bootstrap()).arg(format!("scenario-{}", client.replace(['.', ' '], "-")));
    let output = run(command, None, Duration::from_secs(180));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.lines().any(|l| l.starts_with("OK ")),
        "{client} failed ({})\nstdout:\n{stdout}\nstderr:\n{}\nbroker log (tail):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        tail(&broker.log(), 40)
    );
    println!("{}", stdout.trim());
    broker.stop();
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn java(version: &str) -> Command {
    setup("java");
    let classpath = std::fs::read_to_string(root().join(format!("target/clients/java-{version}.classpath"))).unwrap();
    let mut command = Command::new("java");
    command.arg("-cp").arg(classpath.trim()).arg(root().join("tests/clients/java/Scenario.java"));
    command
}

fn python(venv: &str, script: &str) -> Command {
    setup("python");
    let mut command = Command::new(root().join("target/clients").join(venv).join("bin/python"));
    command.arg(root().join("tests/clients/python").join(script));
    command
}

// The Java client 3.9 runs the scenario.
#[test]
fn java_3_9() {
    scenario("java 3.9", java("3.9.1"));
}

// The Java client 4.1 runs the scenario.
#[test]
fn java_4_1() {
    scenario("java 4.1", java("4.1.0"));
}

// The Java client 4.4, the reference, runs the scenario (Produce 13 and Fetch 18 by
// topic id, Metadata 13).
#[test]
fn java_4_4() {
    scenario("java 4.4", java("4.4.0"));
}

// kafka-python 2.x runs the scenario.
#[test]
fn kafka_python_2() {
    scenario("kafka-python 2", python("kafka-python-2", "scenario.py"));
}

// kafka-python 3.x runs the scenario.
#[test]
fn kafka_python_3() {
    scenario("kafka-python 3", python("kafka-python-3", "scenario.py"));
}

// aiokafka runs the scenario.
#[test]
fn aiokafka() {
    scenario("aiokafka", python("aiokafka", "aiokafka_scenario.py"));
}

// kafkajs 2.x runs the scenario.
#[test]
fn kafkajs() {
    setup("kafkajs");
    let mut command = Command::new("node");
    command.arg(root().join("tests/clients/kafkajs/scenario.js"));
    scenario("kafkajs", command);
}

// franz-go runs the scenario.
#[test]
fn franz_go() {
    setup("go");
    scenario("franz-go", Command::new(root().join("target/clients/franz")));
}

// franz-go members that commit in their revoke callback while the group prepares a
// rebalance (range and cooperative-sticky, with and without static membership): the
// commits are accepted, as Kafka accepts them, and no record is processed twice.
#[test]
fn franz_go_commits_in_revoke_callbacks() {
    setup("go");
    let mut command = Command::new(root().join("target/clients/franz"));
    command.arg("revoke-commit");
    scenario("franz-go revoke-commit", command);
}

// franz-go's share consumer (KIP-932): three members share 400 records; one fetches in
// record_limit mode and holds a record past its lock, renewing it (ShareFetch and
// ShareAcknowledge v2); released records come back once, rejected ones never, and every
// other record is accepted exactly once; kadm describes the group, its lag, and deletes
// it. The same scenario passes on Apache Kafka 4.4.
#[test]
fn franz_go_share_group() {
    setup("go");
    let mut command = Command::new(root().join("target/clients/franz"));
    command.arg("share");
    scenario("franz-go share", command);
}

// librdkafka's share consumer (KIP-932, through confluent-kafka): two consumers with
// explicit acknowledgement share 300 records; released records come back once with
// delivery count 2, rejected ones never, every other record is accepted exactly once.
// The same scenario passes on Apache Kafka 4.4.
#[test]
fn confluent_kafka_share_group() {
    scenario("confluent-kafka share", python("confluent-kafka", "share_scenario.py"));
}

// sarama runs the scenario.
#[test]
fn sarama() {
    setup("go");
    scenario("sarama", Command::new(root().join("target/clients/sarama")));
}

// Debian's librdkafka 2.0 (librdkafka-dev) creates a topic with a config, describes
// its configs, creates and deletes another (tests/clients/librdkafka/admin.c).
#[test]
fn librdkafka_2_0_admin() {
    setup("librdkafka");
    // cargo's library path would load the rdkafka crate's newer librdkafka instead.
    let mut command = Command::new(root().join("target/clients/rdkafka-admin"));
    command.env_remove("LD_LIBRARY_PATH");
    scenario("librdkafka 2.0", command);
}

fn kcat(args: &[&str], input: Option<&str>) -> String {
    let mut command = Command::new("kcat");
    // cargo's library path would load the rdkafka crate's newer librdkafka into kcat.
    command.env_remove("LD_LIBRARY_PATH").args(args);
    let output = run(command, input, Duration::from_secs(60));
    assert!(
        output.status.success(),
        "kcat {args:?} failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

// Debian's kcat 1.7.1 (librdkafka 2.0.2) produces idempotently, consumes from the
// beginning and from an offset, queries offsets by time, reads metadata, and runs a
// 2-member balanced consumer group whose commits cover everything.
#[test]
fn kcat_librdkafka_2_0() {
    let (mut broker, _dir) = start();
    let b = broker.bootstrap();
    let version = kcat(&["-V"], None);
    assert!(version.contains("librdkafka 2.0."), "{version}");
    let topic = "kcat-t";
    create_topic(&broker, topic, 3);
    let t0 = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis().to_string();
    let input: String = (0..100).map(|i| format!("k{i}:v{i}\n")).collect();
    kcat(&["-P", "-b", &b, "-t", topic, "-K:", "-X", "enable.idempotence=true", "-X", "acks=all"], Some(&input));

    let all = kcat(&["-C", "-b", &b, "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k:%s\n"], None);
    let mut got: Vec<&str> = all.lines().collect();
    got.sort();
    let mut want: Vec<&str> = input.lines().collect();
    want.sort();
    assert_eq!(got, want);

    // Offsets by time: everything was produced after t0, so each partition's answer
    // is its first offset.
    let spec: Vec<String> = (0..3).map(|p| format!("{topic}:{p}:{t0}")).collect();
    let mut args = vec!["-Q", "-b", &b];
    for s in &spec {
        args.extend(["-t", s.as_str()]);
    }
    let offsets = kcat(&args, None);
    for p in 0..3 {
        assert!(offsets.contains(&format!("{topic} [{p}] offset 0")), "{offsets}");
    }

    // From an offset: the last record of partition 0.
    let last = kcat(&["-C", "-b", &b, "-t", topic, "-p", "0", "-o", "-1", "-e", "-q", "-f", "%o %k\n"], None);
    assert_eq!(last.lines().count(), 1, "{last}");
    let counts = kcat(&["-C", "-b", &b, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q", "-f", "%o\n"], None);
    let end: u64 = counts.lines().count() as u64;
    assert!(last.starts_with(&format!("{} ", end - 1)), "{last} with {end} records");

    let metadata = kcat(&["-L", "-b", &b, "-t", topic], None);
    assert!(metadata.contains(&format!("topic \"{topic}\" with 3 partitions")), "{metadata}");

    // Two balanced consumers in one group; each exits at the end of its partitions.
    let members: Vec<_> = (0..2)
        .map(|_| {
            let b = b.clone();
            std::thread::spawn(move || {
                kcat(
                    &[
                        "-b",
                        &b,
                        "-G",
                        "kcat-g",
                        "-X",
                        "auto.offset.reset=earliest",
                        "-X",
                        "session.timeout.ms=6000",
                        "-o",
                        "beginning",
                        "-e",
                        "-q",
                        "-f",
                        "%k:%s\n",
                        topic,
                    ],
                    None,
                )
            })
        })
        .collect();
    let outputs: Vec<String> = members.into_iter().map(|m| m.join().unwrap()).collect();
    let mut union: Vec<&str> = outputs.iter().flat_map(|o| o.lines()).collect();
    union.sort();
    union.dedup();
    assert_eq!(union.len(), 100, "the group consumed {} distinct records", union.len());
    // The group's commits cover every partition's end.
    let described = Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["group", "describe", "kcat-g", "--bootstrap-server", &b])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&described.stdout);
    assert!(described.status.success(), "{text}");
    let lags: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with(topic)).collect();
    assert_eq!(lags.len(), 3, "{text}");
    for line in lags {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields[2], fields[3], "committed != end: {line}");
    }
    broker.stop();
}
