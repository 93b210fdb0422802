//! Share groups (KIP-932) with Apache Kafka 4.4's own share consumer and tools
//! (kafka-clients and kafka-tools 4.4, resolved by Maven: tests/share/pom.xml), run
//! through tests/share/Share.java. Each expectation was first checked against Kafka
//! 4.4 itself (bench-harness/peers/kafka/run-kafka.sh): records split between two
//! members of a group, RELEASE and REJECT, lock expiry, release at a disconnect,
//! `kafka-share-groups` and `kafka-console-share-consumer`, state kept across a
//! kill -9.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::Broker;

fn java(main: &str, args: &[&str]) -> (bool, String) {
    common::kafka_share(main, args)
}

fn share(args: &[&str]) -> String {
    let (ok, out) = java("", args);
    assert!(ok, "Share.java {args:?} failed:\n{out}");
    out
}

fn tool(args: &[&str]) -> String {
    java("org.apache.kafka.tools.consumer.group.ShareGroupCommand", args).1
}

fn records(out: &str) -> Vec<(i32, i64, i32, String)> {
    common::share_records(out)
}

/// Waits (at most 90 s: JVMs start slowly on a loaded machine) until `group` has
/// `members` members.
fn wait_for_members(bootstrap: &str, group: &str, members: usize) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let wanted = format!("GROUP {group} Stable {members}");
    loop {
        let (_, described) = java("", &["describe", bootstrap, group]);
        if described.lines().any(|l| l == wanted) {
            return;
        }
        assert!(Instant::now() < deadline, "{group} never had {members} members: {described}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn setup(broker: &Broker, topic: &str, partitions: &str, count: &str) {
    let b = broker.bootstrap();
    share(&["create", &b, topic, partitions]);
    assert!(share(&["produce", &b, topic, count]).contains(&format!("PRODUCED {count}")));
}

// Two members of one group share a topic's 2 partitions: each record reaches one of
// them once, none is lost. Explicit acknowledgement: REJECT finishes a record,
// RELEASE brings it back with its delivery count 2, and an accepted record is not
// delivered again. The group's offsets end past everything.
#[test]
fn members_share_the_records_and_acknowledge_them() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let b = broker.bootstrap();
    share(&["create", &b, "t2", "2"]);
    share(&["set-reset", &b, "g", "earliest"]);
    // The records come once both members have joined (each then has a partition):
    // otherwise whichever JVM starts first on a loaded machine may take them all.
    let member = |client: &'static str| {
        let b = b.clone();
        std::thread::spawn(move || {
            let client = format!("client.id={client}");
            share(&["consume", &b, "t2", "g", "2000", "45", &client, "pause.ms=200", "max.poll.records=100"])
        })
    };
    let (first, second) = (member("c1"), member("c2"));
    wait_for_members(&b, "g", 2);
    assert!(share(&["produce", &b, "t2", "2000"]).contains("PRODUCED 2000"));
    let (first, second) = (first.join().unwrap(), second.join().unwrap());
    let (one, two) = (records(&first), records(&second));
    let mut seen: BTreeMap<(i32, i64), usize> = BTreeMap::new();
    for (p, o, _, _) in one.iter().chain(two.iter()) {
        *seen.entry((*p, *o)).or_default() += 1;
    }
    assert_eq!(seen.len(), 2000, "every record delivered:\n{first}\n{second}");
    assert!(seen.values().all(|n| *n == 1), "no record delivered twice");
    assert!(!one.is_empty() && !two.is_empty(), "both members got records: {} and {}", one.len(), two.len());
    assert!(broker.metric_sum("skein_share_acquired_records_total") >= 2000);
    assert!(broker.metric_sum("skein_share_acknowledged_records_total") >= 2000);
    assert_eq!(broker.metric_sum("skein_share_state_write_failures_total"), 0);

    // Explicit acknowledgement on a new group.
    share(&["set-reset", &b, "x", "earliest"]);
    let out = share(&["explicit", &b, "t2", "x", "2000", "30"]);
    let acked = records(&out);
    let count = |deliveries: i32, ack: &str| acked.iter().filter(|r| r.2 == deliveries && r.3 == ack).count();
    assert_eq!(count(1, "REJECT"), 200, "{out}");
    assert_eq!(count(1, "RELEASE"), 200);
    assert_eq!(count(2, "ACCEPT"), 200, "released records come back once, delivered twice");
    assert_eq!(count(1, "ACCEPT"), 1600);
    let described = share(&["describe", &b, "x"]);
    assert!(described.contains("GROUP x Empty 0"), "{described}");
}

// A lock that runs out makes its records available to another member, delivered a
// second time (share.record.lock.duration.ms at its 15 s minimum); a member whose
// connection closes gives its records back at once, as Kafka 4.4 does.
#[test]
fn locks_expire_and_a_closed_connection_releases_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let b = broker.bootstrap();
    setup(&broker, "t1", "1", "20");

    share(&["set-reset", &b, "gone", "earliest"]);
    assert!(share(&["hold", &b, "t1", "gone", "1"]).contains("HELD 20"));
    let started = Instant::now();
    let out = share(&["consume", &b, "t1", "gone", "20", "20"]);
    let got = records(&out);
    assert_eq!(got.len(), 20, "{out}");
    assert!(got.iter().all(|r| r.2 == 2), "delivered a second time: {out}");
    assert!(started.elapsed() < Duration::from_secs(14), "released at the disconnect, not at the lock's end");

    share(&["set-reset", &b, "slow", "earliest"]);
    share(&["set-config", &b, "slow", "share.record.lock.duration.ms", "15000"]);
    let holder = {
        let b = b.clone();
        std::thread::spawn(move || share(&["hold", &b, "t1", "slow", "30", "client.id=holder"]))
    };
    std::thread::sleep(Duration::from_secs(5));
    let started = Instant::now();
    let out = share(&["consume", &b, "t1", "slow", "20", "40", "client.id=taker"]);
    let got = records(&out);
    assert_eq!(got.len(), 20, "{out}");
    assert!(got.iter().all(|r| r.2 == 2), "{out}");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(5), "the taker waited for the lock: {waited:?}");
    assert!(holder.join().unwrap().contains("HELD 20"));
}

// Kafka 4.4's kafka-share-groups (list, describe, reset-offsets, delete-offsets,
// delete) and kafka-console-share-consumer; a share group's state after a kill -9.
#[test]
fn share_group_tools_and_state_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path(), "1", &[]);
    let b = broker.bootstrap();
    setup(&broker, "t2", "2", "100");
    share(&["set-reset", &b, "g", "earliest"]);
    let out = share(&["consume", &b, "t2", "g", "100", "20"]);
    assert_eq!(records(&out).len(), 100, "{out}");

    let listed = tool(&["--bootstrap-server", &b, "--list"]);
    assert!(listed.lines().any(|l| l == "g"), "{listed}");
    let described = tool(&["--bootstrap-server", &b, "--describe", "--group", "g"]);
    let starts: BTreeSet<String> = described
        .lines()
        .filter(|l| l.starts_with("g "))
        .map(|l| l.split_whitespace().take(5).collect::<Vec<_>>().join(" "))
        .collect();
    let (p0, p1) = {
        let got = records(&out);
        (got.iter().filter(|r| r.0 == 0).count(), got.iter().filter(|r| r.0 == 1).count())
    };
    // Start offsets past everything, and no lag (DescribeShareGroupOffsets v1).
    assert_eq!(starts, BTreeSet::from([format!("g t2 0 {p0} 0"), format!("g t2 1 {p1} 0")]), "{described}");
    let members = tool(&["--bootstrap-server", &b, "--describe", "--group", "g", "--members"]);
    assert!(members.contains("Share group 'g' has no active members."), "{members}");
    let missing = java(
        "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
        &["--bootstrap-server", &b, "--describe", "--group", "nosuch"],
    );
    assert!(missing.1.contains("GroupIdNotFoundException: Group nosuch not found."), "{}", missing.1);

    // The state outlives a kill -9.
    broker.kill();
    broker.restart();
    let described = tool(&["--bootstrap-server", &b, "--describe", "--group", "g"]);
    assert!(described.contains(&format!("t2              0          {p0}")), "{described}");
    let again = share(&["consume", &b, "t2", "g", "1", "5"]);
    assert!(records(&again).is_empty(), "nothing is delivered again after a restart: {again}");

    // Reset to the earliest: everything is delivered again, once.
    let reset = tool(&[
        "--bootstrap-server",
        &b,
        "--reset-offsets",
        "--to-earliest",
        "--group",
        "g",
        "--topic",
        "t2",
        "--execute",
    ]);
    assert!(reset.contains("NEW-OFFSET"), "{reset}");
    let described = tool(&["--bootstrap-server", &b, "--describe", "--group", "g"]);
    let lags: BTreeSet<String> = described
        .lines()
        .filter(|l| l.starts_with("g "))
        .map(|l| l.split_whitespace().take(5).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(lags, BTreeSet::from([format!("g t2 0 0 {p0}"), format!("g t2 1 0 {p1}")]), "{described}");
    let out = share(&["consume", &b, "t2", "g", "100", "20"]);
    let got = records(&out);
    assert_eq!(got.len(), 100, "{out}");
    assert!(got.iter().all(|r| r.2 == 1), "a reset starts the records' delivery counts over: {out}");

    let console = java(
        "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
        &["--bootstrap-server", &b, "--topic", "t2", "--group", "g", "--max-messages", "1", "--timeout-ms", "5000"],
    );
    assert!(console.1.contains("Processed a total of 0 messages"), "everything was accepted: {}", console.1);
    share(&["set-reset", &b, "c", "earliest"]);
    let console = java(
        "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
        &[
            "--bootstrap-server",
            &b,
            "--topic",
            "t2",
            "--group",
            "c",
            "--max-messages",
            "5",
            "--formatter-property",
            "print.delivery=true",
        ],
    );
    assert!(console.1.contains("Processed a total of 5 messages"), "{}", console.1);
    assert_eq!(console.1.matches("Delivery:1").count(), 5, "{}", console.1);

    let deleted = tool(&["--bootstrap-server", &b, "--delete-offsets", "--group", "g", "--topic", "t2"]);
    assert!(deleted.contains("Successful"), "{deleted}");
    let described = tool(&["--bootstrap-server", &b, "--describe", "--group", "g"]);
    assert!(described.contains("Share group 'g' has no offset information."), "{described}");
    let deleted = tool(&["--bootstrap-server", &b, "--delete", "--group", "g"]);
    assert!(deleted.contains("Deletion of requested share groups ('g') was successful."), "{deleted}");
    let listed = tool(&["--bootstrap-server", &b, "--list"]);
    assert!(!listed.lines().any(|l| l == "g"), "{listed}");
}

// share.isolation.level=read_committed: a share group reads only committed
// transactions' records (an aborted transaction's are never delivered); the default,
// read_uncommitted, delivers them all. Transaction markers are gaps, acknowledged by
// the client and never handed to the application.
#[test]
fn read_committed_share_groups_skip_aborted_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let b = broker.bootstrap();
    share(&["create", &b, "txn", "1"]);
    assert!(share(&["produce-txn", &b, "txn", "50"]).contains("TXN 100 50"));
    for (group, isolation, expected) in [("committed", "read_committed", 100), ("everything", "read_uncommitted", 150)]
    {
        share(&["set-reset", &b, group, "earliest"]);
        share(&["set-config", &b, group, "share.isolation.level", isolation]);
        let out = share(&["consume", &b, "txn", group, &expected.to_string(), "20"]);
        let got = records(&out);
        assert_eq!(got.len(), expected, "{group}: {out}");
        if isolation == "read_committed" {
            assert!(got.iter().all(|r| r.3.starts_with('c')), "only committed records: {out}");
        }
        // Nothing more comes: the markers and, for read_committed, the aborted
        // records are finished without a delivery.
        let again = share(&["consume", &b, "txn", group, "1", "3"]);
        assert!(records(&again).is_empty(), "{group}: {again}");
        let described = share(&["describe", &b, group]);
        assert!(described.contains("OFFSET txn 0 "), "{described}");
    }
}

// Dead-letter topics (KIP-1191): with `errors.deadletterqueue.topic.name`, rejected
// records (copied whole with `errors.deadletterqueue.copy.record.enable`) and records
// given up on at `share.delivery.count.limit` (here: two members that each hold them
// and go away) are written to the topic with Kafka 4.4's headers, then archived. A
// topic without the `dlq.` prefix is refused, logged and counted, and the records are
// archived anyway; a missing topic is created when the broker allows it. The expected
// DLQ records are what Kafka 4.4 wrote for the same script.
#[test]
fn rejected_and_exhausted_records_go_to_the_dead_letter_topic() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let b = broker.bootstrap();
    setup(&broker, "dsrc", "2", "100");
    setup(&broker, "dsmall", "1", "5");
    share(&["create", &b, "dlq.dsrc", "1", "topic.errors.deadletterqueue.group.enable=true"]);
    for (group, name, value) in [
        ("g", "errors.deadletterqueue.topic.name", "dlq.dsrc"),
        ("g", "errors.deadletterqueue.copy.record.enable", "true"),
        ("h", "errors.deadletterqueue.topic.name", "dlq.dsrc"),
        ("h", "share.delivery.count.limit", "2"),
        ("n", "errors.deadletterqueue.topic.name", "nodlq"),
        ("a", "errors.deadletterqueue.topic.name", "dlq.auto"),
    ] {
        share(&["set-reset", &b, group, "earliest"]);
        share(&["set-config", &b, group, name, value]);
    }
    // g rejects every value ending in 3: 10 records, all on partition 0 (key k3).
    assert!(share(&["explicit", &b, "dsrc", "g", "100", "30"]).contains("DONE 100 110 90 10 10"));
    // h's records come back twice, and so reach the limit of 2.
    for _ in 0..2 {
        assert!(share(&["hold", &b, "dsmall", "h", "1"]).contains("HELD 5"));
    }
    assert!(share(&["explicit", &b, "dsmall", "n", "5", "20"]).contains("DONE 5 5 4 1 0"));
    share(&["set-broker-config", &b, "errors.deadletterqueue.auto.create.topics.enable", "true"]);
    assert!(share(&["explicit", &b, "dsmall", "a", "5", "20"]).contains("DONE 5 5 4 1 0"));

    let out = share(&["read", &b, "dlq.dsrc", "15", "20"]);
    let letters: Vec<Vec<&str>> = out.lines().filter(|l| l.starts_with("M ")).map(|l| l.split(' ').collect()).collect();
    assert_eq!(letters.len(), 15, "{out}");
    let header = |fields: &[&str], name: &str| -> String {
        let headers = fields[5..].join(" ");
        let found = headers.split(';').find_map(|h| h.strip_prefix(&format!("{name}=")).map(str::to_string));
        found.unwrap_or_else(|| panic!("no header {name} in {headers}"))
    };
    let names: Vec<String> =
        letters[0][5..].join(" ").split(';').map(|h| h.split('=').next().unwrap().to_string()).collect();
    assert_eq!(
        names,
        ["topic", "partition", "offset", "group", "delivery.count", "message"].map(|n| format!("__dlq.errors.{n}")),
        "Kafka 4.4's headers, in its order"
    );
    let (rejected, exhausted): (Vec<_>, Vec<_>) = letters.iter().partition(|f| header(f, "__dlq.errors.group") == "g");
    assert_eq!(rejected.len(), 10, "{out}");
    for f in &rejected {
        assert_eq!(f[3], "k3", "the key copied: {f:?}");
        assert!(f[4].ends_with('3'), "the value copied: {f:?}");
        assert_eq!(header(f, "__dlq.errors.topic"), "dsrc");
        assert_eq!(header(f, "__dlq.errors.delivery.count"), "1");
        assert_eq!(header(f, "__dlq.errors.message"), "Offset rejected by client.");
    }
    let offsets: Vec<String> = exhausted.iter().map(|f| header(f, "__dlq.errors.offset")).collect();
    assert_eq!(offsets, ["0", "1", "2", "3", "4"], "{out}");
    for f in &exhausted {
        assert_eq!((f[3], f[4]), ("null", "null"), "headers only without copy: {f:?}");
        assert_eq!(header(f, "__dlq.errors.group"), "h");
        assert_eq!(header(f, "__dlq.errors.delivery.count"), "2");
        assert_eq!(header(f, "__dlq.errors.message"), "Offset delivery count exceeded the threshold.");
    }
    let auto = share(&["read", &b, "dlq.auto", "1", "20"]);
    assert!(auto.contains("DONE 1") && auto.contains("__dlq.errors.group=a") && auto.contains("offset=3;"), "{auto}");
    // Every group finished its records, the refused dead letters included.
    for group in ["g", "h", "n", "a"] {
        let described = share(&["describe", &b, group]);
        let lags: Vec<&str> = described.lines().filter(|l| l.starts_with("LAG ")).collect();
        assert!(!lags.is_empty() && lags.iter().all(|l| l.ends_with(" 0")), "{group}: {described}");
    }
    assert_eq!(broker.metric_sum("skein_share_dead_letter_records_total"), 16);
    assert_eq!(broker.metric_sum("skein_share_dead_letter_failures_total"), 1);
    assert_eq!(broker.log().matches("dead letters were not written").count(), 1, "logged once");
}

// A share group's members outlive a kill -9 of their coordinator, as on Kafka 4.4
// (its ShareGroupMemberMetadata, TargetAssignmentMember and CurrentMemberAssignment
// records in __consumer_offsets): a member heartbeats on with the epoch it had and
// keeps its partitions, where without them it would have to join again.
#[test]
fn share_group_members_outlive_a_coordinator_restart() {
    use kafka_protocol::messages::{
        GroupId, ShareGroupDescribeRequest, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, TopicName,
    };
    use kafka_protocol::protocol::StrBytes;
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path(), "1", &[]);
    setup(&broker, "kept", "2", "10");
    let heartbeat = |client: &mut common::RawClient, epoch: i32| -> ShareGroupHeartbeatResponse {
        let topics = (epoch == 0).then(|| vec![TopicName(StrBytes::from_static_str("kept"))]);
        let request = ShareGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("keep")))
            .with_member_id(StrBytes::from_static_str("member-one"))
            .with_member_epoch(epoch)
            .with_subscribed_topic_names(topics);
        client.call(&request, 1)
    };
    let mut client = common::RawClient::connect(&broker.bootstrap());
    let joined = heartbeat(&mut client, 0);
    assert_eq!(joined.error_code, 0, "{joined:?}");
    let epoch = joined.member_epoch;
    assert!(epoch > 0 && joined.assignment.is_some(), "{joined:?}");
    broker.kill();
    broker.restart();
    let mut client = common::RawClient::connect(&broker.bootstrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    let again = loop {
        let answer = heartbeat(&mut client, epoch);
        // COORDINATOR_LOAD_IN_PROGRESS and COORDINATOR_NOT_AVAILABLE while it loads.
        if !matches!(answer.error_code, 14 | 15) || Instant::now() > deadline {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!((again.error_code, again.member_epoch), (0, epoch), "{again:?}");
    let described = client.call(
        &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(StrBytes::from_static_str("keep"))]),
        1,
    );
    let group = &described.groups[0];
    assert_eq!(group.members.len(), 1, "{group:?}");
    let member = &group.members[0];
    assert_eq!((member.member_id.as_str(), member.member_epoch), ("member-one", epoch));
    let partitions: usize = member.assignment.topic_partitions.iter().map(|t| t.partitions.len()).sum();
    assert_eq!(partitions, 2, "it keeps both partitions: {member:?}");
}

// ApiVersions (v3+) finalizes share.version 2 (share groups with dead-letter topics),
// as a freshly formatted Kafka 4.4 node does.
#[test]
fn api_versions_finalize_share_version_2() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let mut client = common::RawClient::connect(&broker.bootstrap());
    let response = client.call(&common::api_versions_request(), 3);
    let finalized: Vec<(String, i16)> =
        response.finalized_features.iter().map(|f| (f.name.to_string(), f.max_version_level)).collect();
    assert!(finalized.contains(&("share.version".to_string(), 2)), "{response:?}");
    let supported = response.supported_features.iter().find(|f| f.name.as_str() == "share.version").unwrap();
    assert_eq!((supported.min_version, supported.max_version), (0, 2));
    assert!(client.call(&common::api_versions_request(), 2).finalized_features.is_empty(), "none before v3");
}

/// When each record of a `checked` run arrived and when its acknowledgement was sent,
/// by offset.
fn timeline(out: &str) -> BTreeMap<i64, (u64, u64)> {
    let mut arrived: BTreeMap<i64, u64> = BTreeMap::new();
    let mut times = BTreeMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["AT", ms, _, o] => {
                arrived.insert(o.parse().unwrap(), ms.parse().unwrap());
            }
            ["ACKED", _, o, ms] => {
                let offset: i64 = o.parse().unwrap();
                times.insert(offset, (arrived[&offset], ms.parse().unwrap()));
            }
            _ => {}
        }
    }
    times
}

// Skein's key-ordered share groups (`skein.share.key.ordered`): two members of a
// group consume one partition of 10 keys; each takes a share, no record is lost or
// delivered twice, and a key's next record reaches a member only after the key's
// earlier records were acknowledged (so a key's records are processed in offset
// order across the members).
#[test]
fn key_ordered_share_groups_keep_each_key_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let b = broker.bootstrap();
    share(&["create", &b, "keyed", "1"]);
    share(&["set-reset", &b, "k", "earliest"]);
    share(&["set-config", &b, "k", "skein.share.key.ordered", KEY_ORDERED]);
    let run = |client: &str| {
        let b = b.clone();
        let client = format!("client.id={client}");
        std::thread::spawn(move || {
            share(&["checked", &b, "keyed", "k", "0", "45", &client, "max.poll.records=20", "ack.delay.ms=50"])
        })
    };
    let (one, two) = (run("c1"), run("c2"));
    // The records come once both members have joined and fetch the partition: a
    // member alone acquires every key it reads, and holds them until it has
    // acknowledged its records.
    wait_for_members(&b, "k", 2);
    let deadline = Instant::now() + Duration::from_secs(60);
    while java("", &["describe", &b, "k"])
        .1
        .lines()
        .filter(|l| l.starts_with("MEMBER ") && l.ends_with(" keyed-0"))
        .count()
        < 2
    {
        assert!(Instant::now() < deadline, "both members never had the partition");
        std::thread::sleep(Duration::from_millis(200));
    }
    // A member polls at once with its assignment; its fetches count it among those
    // that share the keys.
    std::thread::sleep(Duration::from_secs(1));
    assert!(share(&["produce", &b, "keyed", "600"]).contains("PRODUCED 600"));
    let (one, two) = (one.join().unwrap(), two.join().unwrap());
    let (a, b_) = (timeline(&one), timeline(&two));
    assert!(!a.is_empty() && !b_.is_empty(), "both members took records: {} and {}", a.len(), b_.len());
    let mut all: BTreeMap<i64, (usize, u64, u64)> = BTreeMap::new();
    for (member, times) in [(0, &a), (1, &b_)] {
        for (offset, (arrived, acked)) in times {
            assert!(all.insert(*offset, (member, *arrived, *acked)).is_none(), "offset {offset} acknowledged twice");
        }
    }
    assert_eq!(all.len(), 600, "every record acknowledged once");
    // Value i (offset i) has key i % 10.
    for (offset, (member, arrived, _)) in &all {
        let earlier = offset - 10;
        if let Some((other, _, acked)) = all.get(&earlier) {
            if other != member {
                assert!(
                    arrived >= acked,
                    "offset {offset} reached member {member} before {earlier} (same key) was acknowledged"
                );
            }
        }
    }
}

/// The group config the key-ordered test sets (a mutation test sets "false" and
/// sees it fail).
const KEY_ORDERED: &str = "true";
