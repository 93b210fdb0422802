//! Consumer groups with librdkafka (classic protocol): members split the partitions,
//! a leaving member's partitions move to the others, two groups each read everything,
//! committed offsets survive clean and unclean restarts.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{create_topic as create, Broker};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

fn fill(broker: &Broker, topic: &str, partitions: i32, per_partition: usize) {
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", broker.bootstrap()).create().unwrap();
    for i in 0..per_partition * partitions as usize {
        let value = format!("r{i}");
        producer
            .send(BaseRecord::<(), str>::to(topic).partition((i % partitions as usize) as i32).payload(&value))
            .unwrap();
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

fn consumer(broker: &Broker, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "300")
        .create()
        .unwrap()
}

fn assignment<C: rdkafka::consumer::ConsumerContext>(c: &BaseConsumer<C>) -> BTreeSet<i32> {
    c.assignment().unwrap().elements().iter().map(|e| e.partition()).collect()
}

/// Polls all consumers until `done` holds for their assignments, or 30 s pass.
fn poll_until<C: rdkafka::consumer::ConsumerContext>(
    consumers: &[BaseConsumer<C>],
    done: impl Fn(&[BTreeSet<i32>]) -> bool,
) -> Vec<BTreeSet<i32>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for c in consumers {
            let _ = c.poll(Duration::from_millis(20));
        }
        let sets: Vec<BTreeSet<i32>> = consumers.iter().map(assignment).collect();
        if done(&sets) || Instant::now() > deadline {
            return sets;
        }
    }
}

fn disjoint_cover(sets: &[BTreeSet<i32>], partitions: i32) -> bool {
    let total: usize = sets.iter().map(BTreeSet::len).sum();
    let union: BTreeSet<i32> = sets.iter().flatten().copied().collect();
    sets.iter().all(|s| !s.is_empty()) && total == partitions as usize && union.len() == partitions as usize
}

// Three members split six partitions; when one leaves, the other two take them all.
#[test]
fn members_split_partitions_and_take_over() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &["--group-initial-rebalance-delay-ms", "300"]);
    create(&broker, "split", 6);
    let mut members: Vec<BaseConsumer> = (0..3).map(|_| consumer(&broker, "splitters")).collect();
    for m in &members {
        m.subscribe(&["split"]).unwrap();
    }
    let started = Instant::now();
    let sets = poll_until(&members, |s| disjoint_cover(s, 6));
    assert!(disjoint_cover(&sets, 6), "{sets:?}");
    eprintln!("three members assigned after {:?}", started.elapsed());
    // One leaves (close sends LeaveGroup): the other two cover everything.
    let leaving = members.pop().unwrap();
    let started = Instant::now();
    drop(leaving);
    let sets = poll_until(&members, |s| disjoint_cover(s, 6));
    assert!(disjoint_cover(&sets, 6), "{sets:?}");
    eprintln!("rebalance after a leave took {:?}", started.elapsed());
}

// Two groups read the same topic; each gets every record exactly once.
#[test]
fn two_groups_each_get_everything() {
    let dir = tempfile::tempdir().unwrap();
    // Both members join the first generation within the initial delay, even on a
    // loaded machine: a later join moves partitions one member already read from the
    // beginning (nothing is committed), which are then read twice, as in Kafka.
    let broker = Broker::start(dir.path(), "2", &["--group-initial-rebalance-delay-ms", "1500"]);
    create(&broker, "shared", 4);
    fill(&broker, "shared", 4, 250);
    for group in ["g-one", "g-two"] {
        let members: Vec<BaseConsumer> = (0..2).map(|_| consumer(&broker, group)).collect();
        for m in &members {
            m.subscribe(&["shared"]).unwrap();
        }
        let mut seen: BTreeMap<(i32, i64), usize> = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen.len() < 1000 && Instant::now() < deadline {
            for m in &members {
                if let Some(Ok(msg)) = m.poll(Duration::from_millis(20)) {
                    *seen.entry((msg.partition(), msg.offset())).or_default() += 1;
                }
            }
        }
        assert_eq!(seen.len(), 1000, "{group}");
        assert!(seen.values().all(|&n| n == 1), "{group}: duplicates");
    }
}

// Committed offsets survive a clean restart and a kill -9.
#[test]
fn committed_offsets_survive_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path(), "2", &["--group-initial-rebalance-delay-ms", "100"]);
    create(&broker, "kept", 3);
    fill(&broker, "kept", 3, 10);
    let commit = |broker: &Broker, offsets: &[(i32, i64)]| {
        let c = consumer(broker, "keepers");
        let mut list = TopicPartitionList::new();
        for (p, o) in offsets {
            list.add_partition_offset("kept", *p, Offset::Offset(*o)).unwrap();
        }
        // A simple commit, as an assign-mode consumer makes it.
        c.commit(&list, CommitMode::Sync).unwrap();
    };
    let committed = |broker: &Broker| -> Vec<(i32, i64)> {
        let c = consumer(broker, "keepers");
        let mut list = TopicPartitionList::new();
        for p in 0..3 {
            list.add_partition("kept", p);
        }
        let got = c.committed_offsets(list, Duration::from_secs(10)).unwrap();
        got.elements().iter().map(|e| (e.partition(), e.offset().to_raw().unwrap_or(-9))).collect()
    };
    commit(&broker, &[(0, 3), (1, 5), (2, 7)]);
    assert_eq!(committed(&broker), vec![(0, 3), (1, 5), (2, 7)]);
    broker.stop();
    broker.restart();
    assert_eq!(committed(&broker), vec![(0, 3), (1, 5), (2, 7)], "after a clean restart");
    commit(&broker, &[(0, 9), (1, 10)]);
    broker.kill();
    broker.restart();
    assert_eq!(committed(&broker), vec![(0, 9), (1, 10), (2, 7)], "after kill -9");
    // A consumer of the group resumes from the committed offsets.
    let c = consumer(&broker, "keepers");
    c.subscribe(&["kept"]).unwrap();
    let first: Arc<Mutex<BTreeMap<i32, i64>>> = Arc::default();
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs(30);
    while first.lock().unwrap().len() < 2 && Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(50)) {
            first.lock().unwrap().entry(m.partition()).or_insert(m.offset());
        }
    }
    let first = first.lock().unwrap();
    assert_eq!(first.get(&0), Some(&9));
    assert_eq!(first.get(&2), Some(&7));
}

fn skein(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_skein")).args(args).output().unwrap()
}

/// Runs `skein consume --group` until it printed `kill_after` records, then kill -9.
/// Returns the records it printed.
fn consume_then_kill(broker: &Broker, group: &str, commit: &str, kill_after: usize) -> Vec<String> {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_skein"))
        .args([
            "consume",
            "delivery",
            "--group",
            group,
            "--from-beginning",
            "--commit",
            commit,
            "-X",
            "session.timeout.ms=6000",
        ])
        .args(["--bootstrap-server", &broker.bootstrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    while printed.len() < kill_after {
        match lines.next() {
            Some(Ok(line)) => printed.push(line),
            _ => break,
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // What it printed while the kill was on its way was processed too (and, committing
    // after, committed): it still sits in the pipe.
    printed.extend(lines.map_while(Result::ok));
    printed
}

// The delivery patterns of a consumer killed mid-stream: committing after processing
// loses nothing (duplicates possible); committing before processing duplicates
// nothing (losses possible). The dead member leaves at its session timeout.
#[test]
fn delivery_patterns_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &["--group-initial-rebalance-delay-ms", "100"]);
    create(&broker, "delivery", 2);
    fill(&broker, "delivery", 2, 200);
    let all: BTreeSet<String> = (0..400).map(|i| format!("r{i}")).collect();
    for (group, commit) in [("at-least-once", "after"), ("at-most-once", "before")] {
        let first = consume_then_kill(&broker, group, commit, 150);
        assert!((150..400).contains(&first.len()), "{group}: {}", first.len());
        let started = Instant::now();
        let out = skein(&[
            "consume",
            "delivery",
            "--group",
            group,
            "--from-beginning",
            "--commit",
            commit,
            "--idle-timeout-ms",
            "9000",
            "-X",
            "session.timeout.ms=6000",
            "--bootstrap-server",
            &broker.bootstrap(),
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let second: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
        eprintln!(
            "{group}: the killed member printed {}, the restarted one consumed again after {:?}",
            first.len(),
            started.elapsed()
        );
        let mut counts: BTreeMap<&String, usize> = BTreeMap::new();
        for r in first.iter().chain(second.iter()) {
            *counts.entry(r).or_default() += 1;
        }
        if commit == "after" {
            assert!(all.iter().all(|r| counts.contains_key(r)), "{group}: a record was lost");
        } else {
            assert!(counts.values().all(|&n| n == 1), "{group}: a record was delivered twice");
            assert!(counts.len() >= 398, "{group}: lost more than the in-flight records: {}", counts.len());
        }
    }
}

/// Counts the assignments a consumer receives (every rebalance ends in one).
#[derive(Clone, Default)]
struct Rebalances(Arc<std::sync::atomic::AtomicUsize>);

impl rdkafka::ClientContext for Rebalances {}

impl rdkafka::consumer::ConsumerContext for Rebalances {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &rdkafka::consumer::Rebalance<'_>) {
        if matches!(rebalance, rdkafka::consumer::Rebalance::Assign(_)) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

// A static member (group.instance.id) that restarts within its session keeps its
// partitions without a rebalance: the other member is not reassigned.
#[test]
fn static_member_restart_without_rebalance() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &["--group-initial-rebalance-delay-ms", "100"]);
    create(&broker, "static", 4);
    let make = |instance: &str, rebalances: &Rebalances| -> BaseConsumer<Rebalances> {
        ClientConfig::new()
            .set("bootstrap.servers", broker.bootstrap())
            .set("group.id", "statics")
            .set("group.instance.id", instance)
            .set("session.timeout.ms", "10000")
            .set("enable.auto.commit", "false")
            .create_with_context(rebalances.clone())
            .unwrap()
    };
    let (a_rebalances, b_rebalances) = (Rebalances::default(), Rebalances::default());
    let mut members = vec![make("a", &a_rebalances), make("b", &b_rebalances)];
    for m in &members {
        m.subscribe(&["static"]).unwrap();
    }
    let before = poll_until(&members, |s| disjoint_cover(s, 4));
    assert!(disjoint_cover(&before, 4), "{before:?}");
    let a_before = a_rebalances.0.load(Ordering::SeqCst);
    // Member b "restarts": a static member's close does not leave the group.
    drop(members.pop());
    members.push(make("b", &b_rebalances));
    members[1].subscribe(&["static"]).unwrap();
    let after = poll_until(&members, |s| disjoint_cover(s, 4));
    assert_eq!(after, before, "partitions moved");
    // Keep polling a while: a rebalance would reach member a as a new assignment.
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        for m in &members {
            let _ = m.poll(Duration::from_millis(20));
        }
    }
    assert_eq!(a_rebalances.0.load(Ordering::SeqCst), a_before, "member a went through a rebalance");
}

// The coordinator persists the classic group's members: after a broker restart,
// static members carry on with their generation and assignment, without a rebalance.
#[test]
fn static_members_survive_a_broker_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path(), "1", &["--group-initial-rebalance-delay-ms", "100"]);
    create(&broker, "kept", 4);
    let make = |instance: &str, rebalances: &Rebalances| -> BaseConsumer<Rebalances> {
        ClientConfig::new()
            .set("bootstrap.servers", broker.bootstrap())
            .set("group.id", "keepers")
            .set("group.instance.id", instance)
            .set("session.timeout.ms", "15000")
            .set("heartbeat.interval.ms", "500")
            .set("enable.auto.commit", "false")
            .create_with_context(rebalances.clone())
            .unwrap()
    };
    let (a_rebalances, b_rebalances) = (Rebalances::default(), Rebalances::default());
    let members = vec![make("a", &a_rebalances), make("b", &b_rebalances)];
    for m in &members {
        m.subscribe(&["kept"]).unwrap();
    }
    let before = poll_until(&members, |s| disjoint_cover(s, 4));
    assert!(disjoint_cover(&before, 4), "{before:?}");
    // Let the group record of the completed rebalance be written.
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        for m in &members {
            let _ = m.poll(Duration::from_millis(20));
        }
    }
    let counts = (a_rebalances.0.load(Ordering::SeqCst), b_rebalances.0.load(Ordering::SeqCst));
    broker.stop();
    broker.restart();
    // Heartbeats resume against the restarted coordinator; a rebalance would show as
    // a new assignment on either member.
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        for m in &members {
            let _ = m.poll(Duration::from_millis(20));
        }
    }
    let after = poll_until(&members, |s| disjoint_cover(s, 4));
    assert_eq!(after, before, "partitions moved");
    let now = (a_rebalances.0.load(Ordering::SeqCst), b_rebalances.0.load(Ordering::SeqCst));
    assert_eq!(now, counts, "the members went through a rebalance after the restart");
    let described = String::from_utf8_lossy(
        &skein(&["group", "describe", "keepers", "--bootstrap-server", &broker.bootstrap()]).stdout,
    )
    .to_string();
    assert!(described.contains("Stable") && described.contains("members 2"), "{described}");
}

// `skein group list|describe|reset-offsets|delete`.
#[test]
fn group_cli() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &["--group-initial-rebalance-delay-ms", "100"]);
    let b = broker.bootstrap();
    create(&broker, "tools", 2);
    fill(&broker, "tools", 2, 50);
    let member = consumer(&broker, "toolers");
    member.subscribe(&["tools"]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    while n < 100 && Instant::now() < deadline {
        if let Some(Ok(_)) = member.poll(Duration::from_millis(50)) {
            n += 1;
        }
    }
    member.commit_consumer_state(CommitMode::Sync).unwrap();
    let list = String::from_utf8_lossy(&skein(&["group", "list", "--bootstrap-server", &b]).stdout).to_string();
    assert!(list.contains("toolers Stable consumer"), "{list}");
    let described =
        String::from_utf8_lossy(&skein(&["group", "describe", "toolers", "--bootstrap-server", &b]).stdout).to_string();
    assert!(described.contains("members 1") && described.contains("tools"), "{described}");
    assert!(
        described
            .lines()
            .any(|l| l.contains("tools") && l.contains(" 50 ") && l.trim_end().ends_with(|c: char| c != '-')),
        "{described}"
    );
    // Refused while the member is active.
    let refused =
        skein(&["group", "reset-offsets", "toolers", "--topic", "tools", "--to-earliest", "--bootstrap-server", &b]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("active members"));
    drop(member);
    std::thread::sleep(Duration::from_millis(500));
    let reset = |how: &[&str]| {
        let mut args = vec!["group", "reset-offsets", "toolers", "--topic", "tools"];
        args.extend_from_slice(how);
        args.extend_from_slice(&["--bootstrap-server", &b]);
        let out = skein(&args);
        assert!(out.status.success(), "{how:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    assert_eq!(reset(&["--to-earliest"]), "tools 0 0\ntools 1 0\n");
    assert_eq!(reset(&["--shift-by", "7"]), "tools 0 7\ntools 1 7\n");
    assert_eq!(reset(&["--shift-by", "-3"]), "tools 0 4\ntools 1 4\n");
    assert_eq!(reset(&["--to-latest"]), "tools 0 50\ntools 1 50\n");
    assert_eq!(reset(&["--to-datetime", "1970-01-01T00:00:00Z"]), "tools 0 0\ntools 1 0\n");
    let out = skein(&["group", "delete", "toolers", "--bootstrap-server", &b]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list = String::from_utf8_lossy(&skein(&["group", "list", "--bootstrap-server", &b]).stdout).to_string();
    assert!(!list.contains("toolers"), "{list}");
}

// Cooperative-sticky (incremental rebalancing) works: a second member joins and the
// two end up with disjoint halves, the first keeping what it still owns.
#[test]
fn cooperative_sticky() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &["--group-initial-rebalance-delay-ms", "100"]);
    create(&broker, "coop", 4);
    let make = || -> BaseConsumer {
        ClientConfig::new()
            .set("bootstrap.servers", broker.bootstrap())
            .set("group.id", "coopers")
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set("session.timeout.ms", "6000")
            .set("heartbeat.interval.ms", "300")
            .create()
            .unwrap()
    };
    let first = vec![make()];
    first[0].subscribe(&["coop"]).unwrap();
    let alone = poll_until(&first, |s| s[0].len() == 4);
    assert_eq!(alone[0].len(), 4);
    let mut members = first;
    members.push(make());
    members[1].subscribe(&["coop"]).unwrap();
    let both = poll_until(&members, |s| disjoint_cover(s, 4) && s[0].len() == 2);
    assert!(disjoint_cover(&both, 4), "{both:?}");
    assert!(both[0].is_subset(&alone[0]));
}

// Bad group requests get Kafka's errors and leave a live group intact.
#[test]
fn bad_group_requests() {
    use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &["--group-initial-rebalance-delay-ms", "100"]);
    create(&broker, "guarded", 2);
    let live = consumer(&broker, "live");
    live.subscribe(&["guarded"]).unwrap();
    let sets = poll_until(std::slice::from_ref(&live), |s| s[0].len() == 2);
    assert_eq!(sets[0].len(), 2);

    let mut raw = common::RawClient::connect(&broker.bootstrap());
    let group = |g: &str| GroupId(StrBytes::from_string(g.to_string()));
    let hb = raw.call(
        &HeartbeatRequest::default()
            .with_group_id(group("no-such-group"))
            .with_generation_id(1)
            .with_member_id(StrBytes::from_static_str("m")),
        4,
    );
    assert_eq!(hb.error_code, 25, "UNKNOWN_MEMBER_ID");
    let hb = raw.call(
        &HeartbeatRequest::default()
            .with_group_id(group("live"))
            .with_generation_id(1)
            .with_member_id(StrBytes::from_static_str("intruder")),
        4,
    );
    assert_eq!(hb.error_code, 25);
    let sync = raw.call(
        &SyncGroupRequest::default()
            .with_group_id(group("live"))
            .with_generation_id(99)
            .with_member_id(StrBytes::from_static_str("intruder")),
        5,
    );
    assert_eq!(sync.error_code, 25);
    let join = raw.call(
        &JoinGroupRequest::default()
            .with_group_id(group("live"))
            .with_session_timeout_ms(10)
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(vec![
                join_group_request::JoinGroupRequestProtocol::default().with_name(StrBytes::from_static_str("range"))
            ]),
        9,
    );
    assert_eq!(join.error_code, 26, "INVALID_SESSION_TIMEOUT");
    let join = raw.call(
        &JoinGroupRequest::default()
            .with_group_id(group("live"))
            .with_session_timeout_ms(10000)
            .with_protocol_type(StrBytes::from_static_str("connect"))
            .with_protocols(vec![
                join_group_request::JoinGroupRequestProtocol::default().with_name(StrBytes::from_static_str("x"))
            ]),
        5,
    );
    assert_eq!(join.error_code, 23, "INCONSISTENT_GROUP_PROTOCOL");
    let commit = |topic: &str, partition: i32, metadata: String| {
        OffsetCommitRequest::default().with_group_id(group("loose")).with_generation_id_or_member_epoch(-1).with_topics(
            vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(partition)
                    .with_committed_offset(1)
                    .with_committed_metadata(Some(StrBytes::from_string(metadata)))])],
        )
    };
    let r = raw.call(&commit("guarded", 9, String::new()), 8);
    assert_eq!(r.topics[0].partitions[0].error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION");
    let r = raw.call(&commit("guarded", 0, "x".repeat(5000)), 8);
    assert_eq!(r.topics[0].partitions[0].error_code, 12, "OFFSET_METADATA_TOO_LARGE");
    let r = raw.call(&commit("guarded", 0, "ok".into()), 8);
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    // The live member still heartbeats normally and keeps its partitions.
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let _ = live.poll(Duration::from_millis(50));
    }
    assert_eq!(assignment(&live).len(), 2);
    let described = String::from_utf8_lossy(
        &skein(&["group", "describe", "live", "--bootstrap-server", &broker.bootstrap()]).stdout,
    )
    .to_string();
    assert!(described.contains("state Stable") && described.contains("members 1"), "{described}");
}

// offsets.retention.minutes: offsets of a group that stays empty are deleted.
#[test]
fn offsets_retention_for_empty_groups() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &["--offsets-retention-minutes", "0"]);
    create(&broker, "fleeting", 1);
    let c = consumer(&broker, "fleeters");
    let mut list = TopicPartitionList::new();
    list.add_partition_offset("fleeting", 0, Offset::Offset(0)).unwrap();
    c.commit(&list, CommitMode::Sync).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let mut wanted = TopicPartitionList::new();
    wanted.add_partition("fleeting", 0);
    let got = c.committed_offsets(wanted, Duration::from_secs(10)).unwrap();
    assert_eq!(got.elements()[0].offset(), Offset::Invalid, "expired offsets are gone");
}

// Clients that race to find their coordinators on a fresh broker (the offsets topic
// is created by the first of them) are named one only once it can answer: a commit
// sent straight after never meets COORDINATOR_LOAD_IN_PROGRESS.
#[test]
fn coordinators_are_named_only_once_loaded() {
    use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
    use kafka_protocol::messages::{FindCoordinatorRequest, GroupId, OffsetCommitRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;

    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    create(&broker, "raced", 1);
    let clients: Vec<_> = (0..8)
        .map(|i| {
            let bootstrap = broker.bootstrap();
            std::thread::spawn(move || {
                let group = format!("racer-{i}");
                let mut client = common::RawClient::connect(&bootstrap);
                let find = FindCoordinatorRequest::default().with_key(StrBytes::from_string(group.clone()));
                let deadline = Instant::now() + Duration::from_secs(20);
                while client.call(&find, 3).error_code != 0 {
                    assert!(Instant::now() < deadline, "no coordinator for {group}");
                    std::thread::sleep(Duration::from_millis(5));
                }
                let commit = OffsetCommitRequest::default()
                    .with_group_id(GroupId(StrBytes::from_string(group)))
                    .with_generation_id_or_member_epoch(-1)
                    .with_topics(vec![OffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_static_str("raced")))
                        .with_partitions(vec![OffsetCommitRequestPartition::default().with_committed_offset(1)])]);
                client.call(&commit, 8).topics[0].partitions[0].error_code
            })
        })
        .collect();
    for client in clients {
        assert_eq!(client.join().unwrap(), 0, "commit right after FindCoordinator");
    }
}

// An offsets partition that cannot be loaded (here a batch whose CRC holds but whose
// zstd section does not decompress) is never marked loaded: its groups answer
// COORDINATOR_LOAD_IN_PROGRESS, the failure is logged and counted, and the load is
// retried.
#[test]
fn offsets_partition_that_fails_to_load_stays_unloaded() {
    use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
    use kafka_protocol::messages::{GroupId, OffsetCommitRequest, OffsetFetchRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;

    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path(), "1", &[]);
    create(&broker, "loaded", 1);
    let group = GroupId(StrBytes::from_static_str("unloadable"));
    let commit = OffsetCommitRequest::default()
        .with_group_id(group.clone())
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("loaded")))
            .with_partitions(vec![OffsetCommitRequestPartition::default().with_committed_offset(3)])]);
    let mut client = common::RawClient::connect(&broker.bootstrap());
    let response = client.call(&commit, 8);
    assert_eq!(response.topics[0].partitions[0].error_code, 0);
    broker.kill();

    // Append a batch with a valid CRC and an undecodable zstd section at the log's end.
    let segment = broker
        .data_dir
        .join(format!("__consumer_offsets-{}", skein_coordinator::group::partition_for("unloadable")))
        .join(format!("{:020}.log", 0));
    let mut bytes = std::fs::read(&segment).unwrap();
    let (mut position, mut next_offset) = (0usize, 0i64);
    while position + 61 <= bytes.len() {
        let length = i32::from_be_bytes(bytes[position + 8..position + 12].try_into().unwrap());
        if length <= 0 {
            break;
        }
        let base = i64::from_be_bytes(bytes[position..position + 8].try_into().unwrap());
        let delta = i32::from_be_bytes(bytes[position + 23..position + 27].try_into().unwrap());
        next_offset = base + delta as i64 + 1;
        position += 12 + length as usize;
    }
    let mut bad = skein_engine::records::build_batch(
        next_offset,
        1_700_000_000_000,
        skein_engine::records::Compression::None,
        &[skein_engine::records::Record { key: Some(bytes::Bytes::from_static(b"k")), ..Default::default() }],
    );
    bad[21..23].copy_from_slice(&(skein_engine::records::Compression::Zstd as i16).to_be_bytes());
    skein_engine::batch::testing::fix_crc(&mut bad);
    if bytes.len() < position + bad.len() {
        bytes.resize(position + bad.len(), 0);
    }
    bytes[position..position + bad.len()].copy_from_slice(&bad);
    std::fs::write(&segment, &bytes).unwrap();

    broker.restart();
    let mut client = common::RawClient::connect(&broker.bootstrap());
    let fetch =
        OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default().with_group_id(group)]);
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let response = client.call(&fetch, 8);
        assert_eq!(response.groups[0].error_code, COORDINATOR_LOAD_IN_PROGRESS, "{response:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(broker.metric_sum("skein_group_load_failures_total") >= 2, "the load was retried");
    assert!(broker.log().contains("cannot load groups"));
}

// A second consumer started with a running static member's `group.instance.id` takes
// the instance over, and the first is fenced: librdkafka raises FENCED_INSTANCE_ID as
// a fatal error, and the group keeps one member, the newcomer, with the partitions.
// (Skein had given the newcomer the same member id, and both heartbeated on.)
#[test]
fn a_second_static_member_fences_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &["--group-initial-rebalance-delay-ms", "100"]);
    create(&broker, "fenced", 2);
    let make = || -> BaseConsumer {
        ClientConfig::new()
            .set("bootstrap.servers", broker.bootstrap())
            .set("group.id", "fencing")
            .set("group.instance.id", "only")
            .set("session.timeout.ms", "10000")
            .set("heartbeat.interval.ms", "300")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap()
    };
    let first = make();
    first.subscribe(&["fenced"]).unwrap();
    let sets = poll_until(std::slice::from_ref(&first), |s| s[0].len() == 2);
    assert_eq!(sets[0].len(), 2, "the first member got both partitions");
    let second = make();
    second.subscribe(&["fenced"]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while first.client().fatal_error().is_none() && Instant::now() < deadline {
        let _ = first.poll(Duration::from_millis(20));
        let _ = second.poll(Duration::from_millis(20));
    }
    let (error, reason) = first.client().fatal_error().expect("the first member is fenced");
    assert_eq!(error, rdkafka::types::RDKafkaErrorCode::FencedInstanceId, "{reason}");
    let sets = poll_until(std::slice::from_ref(&second), |s| s[0].len() == 2);
    assert_eq!(sets[0].len(), 2, "the newcomer holds the partitions");
    let (ok, out) = common::kafka_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        &["--bootstrap-server", &broker.bootstrap(), "--describe", "--group", "fencing", "--members"],
        "",
    );
    assert!(ok, "{out}");
    let members: Vec<&str> = out.lines().filter(|l| l.starts_with("fencing ")).collect();
    assert_eq!(members.len(), 1, "one member: {out}");
    assert!(members[0].contains("only-"), "the member id names the instance: {out}");
}

// OffsetDelete as Kafka answers it (kafka-consumer-groups --delete-offsets): a group
// with a member deletes the offsets of a topic it does not subscribe to, and each
// partition of a subscribed topic gets GROUP_SUBSCRIBED_TO_TOPIC, with no error for
// the whole request. (Skein had refused the whole request.)
#[test]
fn offset_delete_answers_per_partition() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &["--group-initial-rebalance-delay-ms", "100"]);
    create(&broker, "kept", 1);
    create(&broker, "dropped", 1);
    let member = consumer(&broker, "deleting");
    member.subscribe(&["kept"]).unwrap();
    assert_eq!(poll_until(std::slice::from_ref(&member), |s| s[0].len() == 1)[0].len(), 1);
    let mut offsets = TopicPartitionList::new();
    offsets.add_partition_offset("kept", 0, Offset::Offset(3)).unwrap();
    offsets.add_partition_offset("dropped", 0, Offset::Offset(5)).unwrap();
    member.commit(&offsets, CommitMode::Sync).unwrap();
    let groups = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand";
    let b = broker.bootstrap();
    let args =
        ["--bootstrap-server", &b, "--delete-offsets", "--group", "deleting", "--topic", "kept", "--topic", "dropped"];
    let (_, out) = common::kafka_tool(groups, &args, "");
    let row = |topic: &str| out.lines().find(|l| l.starts_with(topic)).unwrap_or_else(|| panic!("{topic}: {out}"));
    assert!(row("kept").contains("actively subscribed"), "{out}");
    assert!(row("dropped").contains("Successful"), "{out}");
    // The deleted offset is gone, the other stays.
    let mut wanted = TopicPartitionList::new();
    wanted.add_partition("kept", 0);
    wanted.add_partition("dropped", 0);
    let committed = member.committed_offsets(wanted, Duration::from_secs(10)).unwrap();
    let at = |topic: &str| committed.find_partition(topic, 0).unwrap().offset();
    assert_eq!((at("kept"), at("dropped")), (Offset::Offset(3), Offset::Invalid));
}
