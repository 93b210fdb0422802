//! The Java Kafka client (kafka-clients 4.1, resolved by Maven: tests/java/pom.xml)
//! against Skein: its idempotent producer, a classic consumer group, and the KIP-848
//! consumer protocol (`group.protocol=consumer`): join, rebalance when a member is
//! killed, resume from committed offsets.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use common::{create_topic as create, Broker};

fn java(args: &[&str]) -> Command {
    common::java_client(args)
}

struct Member {
    child: Child,
    lines: Receiver<String>,
}

impl Member {
    fn start(broker: &Broker, topic: &str, group: &str, protocol: &str, expect: usize, seconds: u64) -> Member {
        let mut child =
            java(&["member", &broker.bootstrap(), topic, group, protocol, &expect.to_string(), &seconds.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Member { child, lines }
    }

    /// Waits for a line matching `pred`, returning it.
    fn wait_for(&self, timeout: Duration, pred: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(100)) {
                if pred(&line) {
                    return Some(line);
                }
            }
        }
        None
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn partitions(line: &str) -> Vec<i32> {
    line.trim_start_matches("ASSIGNED ").split(',').filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect()
}

fn produce(broker: &Broker, topic: &str, count: usize, start: usize) {
    let out = java(&["produce", &broker.bootstrap(), topic, &count.to_string(), &start.to_string()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("PRODUCED {count}")));
}

// The Java producer (idempotent by default) and a classic-protocol group consumer.
#[test]
fn java_producer_and_classic_group() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &["--group-initial-rebalance-delay-ms", "100"]);
    create(&broker, "jclassic", 3);
    produce(&broker, "jclassic", 300, 0);
    let member = Member::start(&broker, "jclassic", "jc", "classic", 300, 60);
    let done = member.wait_for(Duration::from_secs(60), |l| l.starts_with("RECORDS"));
    assert_eq!(done.as_deref(), Some("RECORDS 300"));
    member.kill();
}

// With virtual brokers (each shard a broker of its own), the Java producer and a
// KIP-848 group member find each partition's shard and its group's coordinator.
#[test]
fn java_clients_with_virtual_brokers() {
    let dir = tempfile::tempdir().unwrap();
    let base = common::port_pair().to_string();
    let broker = Broker::start(dir.path(), "2", &["--virtual-brokers", &base]);
    create(&broker, "jvirtual", 4);
    produce(&broker, "jvirtual", 400, 0);
    let member = Member::start(&broker, "jvirtual", "jv", "consumer", 400, 60);
    let done = member.wait_for(Duration::from_secs(60), |l| l.starts_with("RECORDS"));
    assert_eq!(done.as_deref(), Some("RECORDS 400"));
    member.kill();
}

// group.protocol=consumer (KIP-848): two members split the partitions; when one is
// killed, its session expires and the other takes everything; a new member resumes
// from the committed offsets.
#[test]
fn java_consumer_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(
        dir.path(),
        "2",
        &["--group-consumer-session-timeout-ms", "4000", "--group-consumer-heartbeat-interval-ms", "500"],
    );
    create(&broker, "jnew", 4);
    produce(&broker, "jnew", 400, 0);
    let a = Member::start(&broker, "jnew", "j848", "consumer", 0, 120);
    assert!(
        a.wait_for(Duration::from_secs(60), |l| l.starts_with("ASSIGNED") && partitions(l).len() == 4).is_some(),
        "a alone gets all"
    );
    let b = Member::start(&broker, "jnew", "j848", "consumer", 0, 120);
    let b_line = b
        .wait_for(Duration::from_secs(60), |l| l.starts_with("ASSIGNED") && !partitions(l).is_empty())
        .expect("b gets partitions");
    let a_line = a
        .wait_for(Duration::from_secs(60), |l| l.starts_with("ASSIGNED") && partitions(l).len() < 4)
        .expect("a gives some up");
    let mut both: Vec<i32> = partitions(&a_line).into_iter().chain(partitions(&b_line)).collect();
    both.sort();
    assert!(both.len() <= 4, "a partition assigned twice: {a_line} / {b_line}");
    std::thread::sleep(Duration::from_secs(2));
    let killed = Instant::now();
    b.kill();
    let took_over = a.wait_for(Duration::from_secs(30), |l| l.starts_with("ASSIGNED") && partitions(l).len() == 4);
    if took_over.is_none() {
        let log = broker.log();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        panic!(
            "a did not take over the killed member's partitions; broker log:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    eprintln!("consumer protocol: member loss to full reassignment took {:?}", killed.elapsed());
    a.kill();
    // Everything so far was committed; a new member sees only new records.
    produce(&broker, "jnew", 40, 1000);
    let c = Member::start(&broker, "jnew", "j848", "consumer", 40, 60);
    let first = c.wait_for(Duration::from_secs(60), |l| l.starts_with("FIRST")).expect("c consumes");
    let value: usize = first.trim_start_matches("FIRST v").parse().unwrap();
    assert!(value >= 1000, "resumed before the committed offsets: {first}");
    assert_eq!(c.wait_for(Duration::from_secs(60), |l| l.starts_with("RECORDS")).as_deref(), Some("RECORDS 40"));
    c.kill();
}

// KIP-848 groups are persisted (member metadata, target and current assignments):
// after a broker restart the members carry on with their epochs and partitions,
// without rejoining or moving partitions.
#[test]
fn java_consumer_protocol_survives_a_broker_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(
        dir.path(),
        "2",
        &["--group-consumer-session-timeout-ms", "15000", "--group-consumer-heartbeat-interval-ms", "500"],
    );
    create(&broker, "jkept", 4);
    let a = Member::start(&broker, "jkept", "j848kept", "consumer", 0, 120);
    assert!(a.wait_for(Duration::from_secs(60), |l| l.starts_with("ASSIGNED") && partitions(l).len() == 4).is_some());
    let b = Member::start(&broker, "jkept", "j848kept", "consumer", 0, 120);
    let b_line = b
        .wait_for(Duration::from_secs(60), |l| l.starts_with("ASSIGNED") && !partitions(l).is_empty())
        .expect("b gets partitions");
    a.wait_for(Duration::from_secs(60), |l| {
        l.starts_with("ASSIGNED") && partitions(l).len() + partitions(&b_line).len() == 4
    })
    .expect("a keeps the rest");
    // Let the group settle and its records be written.
    std::thread::sleep(Duration::from_secs(2));
    broker.stop();
    broker.restart();
    // Any assignment change on either member within several heartbeats would show.
    let changed_a = a.wait_for(Duration::from_secs(6), |l| l.starts_with("ASSIGNED"));
    let changed_b = b.wait_for(Duration::from_millis(100), |l| l.starts_with("ASSIGNED"));
    assert_eq!((changed_a, changed_b), (None, None), "the members' partitions moved after the restart");
    let log = broker.log();
    let restarted = &log[log.rfind("listening").unwrap_or(0)..];
    assert!(!restarted.contains("UNKNOWN_MEMBER_ID"), "members were unknown after the restart");
    a.kill();
    b.kill();
}

// A Java consumer of 1,000 partitions uses a fetch session (KIP-227): after the first
// full fetch it names only the partitions whose position moved, so the partitions per
// request stay far below 1,000 while it polls.
#[test]
fn java_fetch_session_sends_only_changes() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    create(&broker, "wide", 1000);
    produce(&broker, "wide", 50, 0);
    let (requests_before, partitions_before) =
        (broker.metric_api("skein_requests_total", 1), broker.metric_sum("skein_fetch_partitions_requested_total"));
    let output = java(&["assigned", &broker.bootstrap(), "wide", "1000", "12"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("RECORDS 50"), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    std::thread::sleep(Duration::from_millis(300));
    let requests = broker.metric_api("skein_requests_total", 1) - requests_before;
    let partitions = broker.metric_sum("skein_fetch_partitions_requested_total") - partitions_before;
    println!("{requests} fetch requests named {partitions} partitions in all");
    assert!(requests >= 10, "the consumer polled: {requests} fetches");
    assert!(partitions / requests < 100, "{partitions} partitions over {requests} fetches");
    assert!(broker.metric_sum("skein_fetch_sessions") <= 1);
}
