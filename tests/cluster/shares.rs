//! A share group (KIP-932) on three nodes, consumed by Kafka 4.4's share consumer
//! (tests/share/Share.java) while the partition's leader and then the share
//! coordinator of its state are killed with SIGKILL: delivery stays at least once.
//! And a group's dead letters written to partitions led by other nodes.

use std::collections::BTreeMap;

use super::*;

/// The checker of a `checked` run (every record accepted, each acknowledgement the
/// broker answered printed `ACKED`): every record is acknowledged in the end; none is
/// delivered again once its acknowledgement was answered; a record's delivery count
/// never goes backwards.
fn check_at_least_once(out: &str, partition: i32, count: i64) {
    let mut acked: BTreeMap<i64, usize> = BTreeMap::new();
    let mut deliveries: BTreeMap<i64, i32> = BTreeMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["R", p, o, d, _] if p.parse::<i32>() == Ok(partition) => {
                let (offset, count): (i64, i32) = (o.parse().unwrap(), d.parse().unwrap());
                assert!(!acked.contains_key(&offset), "offset {offset} delivered again after its acknowledgement");
                let last = deliveries.entry(offset).or_insert(0);
                assert!(count >= *last, "offset {offset}: delivery count {count} after {last}");
                *last = count;
            }
            ["ACKED", p, o, _] if p.parse::<i32>() == Ok(partition) => {
                *acked.entry(o.parse().unwrap()).or_default() += 1;
            }
            _ => {}
        }
    }
    let counted_twice = deliveries.values().filter(|d| **d > 1).count();
    let mut arrivals: BTreeMap<i64, usize> = BTreeMap::new();
    for line in out.lines() {
        if let ["R", p, o, _, _] = line.split_whitespace().collect::<Vec<_>>().as_slice() {
            if p.parse::<i32>() == Ok(partition) {
                *arrivals.entry(o.parse().unwrap()).or_default() += 1;
            }
        }
    }
    let redelivered = arrivals.values().filter(|n| **n > 1).count();
    let refused = out.lines().filter(|l| l.starts_with("ACKFAIL")).count();
    // A record acquired past the last state the old leader wrote starts again at
    // delivery count 1 on the new one, as on Kafka (acquisitions are not persisted).
    println!(
        "{} records delivered, {redelivered} more than once ({counted_twice} with a delivery count above 1); \
         {refused} acknowledgements refused",
        deliveries.len()
    );
    let missing: Vec<i64> = (0..count).filter(|o| !acked.contains_key(o)).collect();
    assert!(
        missing.is_empty(),
        "{} records never acknowledged, first {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
}

/// Why a `checked` run did not finish every record: its last line, the
/// acknowledgements the brokers refused, and the deliveries of the first offsets never
/// acknowledged (2950 of 3000 finished, twice under a loaded full suite: not yet
/// explained).
fn unfinished(out: &str, count: i64) -> String {
    let acked: std::collections::BTreeSet<i64> =
        out.lines().filter_map(|l| l.strip_prefix("ACKED 0 ")?.split_whitespace().next()?.parse().ok()).collect();
    let missing: Vec<i64> = (0..count).filter(|o| !acked.contains(o)).collect();
    let mut why = format!(
        "{}\n{} offsets never acknowledged, from {:?}\n",
        out.lines().last().unwrap_or(""),
        missing.len(),
        missing.first()
    );
    for line in out.lines().filter(|l| l.starts_with("ACKFAIL")) {
        why.push_str(line);
        why.push('\n');
    }
    for offset in missing.iter().take(3) {
        // "R partition offset deliveries ACCEPT" and "AT ms partition offset".
        let mentions = |l: &&str| {
            let at = if l.starts_with("AT ") { 3 } else { 2 };
            l.split_whitespace().nth(at) == Some(offset.to_string().as_str())
        };
        for line in out.lines().filter(|l| l.starts_with("R 0 ") || l.starts_with("AT ")).filter(mentions) {
            why.push_str(line);
            why.push('\n');
        }
    }
    why
}

#[test]
fn a_share_group_survives_its_leader_and_its_share_coordinator() {
    let mut cluster = Cluster::start(3);
    cluster.wait_for_brokers();
    create_replicated(cluster.node(1), "s", 1);
    let all: Vec<String> = cluster.nodes.iter().map(|n| n.bootstrap()).collect();
    let bootstrap = all.join(",");
    const COUNT: i64 = 3000;
    // Batches of a record or two: a share consumer acquires whole batches, and the
    // consumer below is to take about 50 records a poll, holding them 400 ms.
    let (ok, out) =
        common::kafka_share("", &["produce", &bootstrap, "s", &COUNT.to_string(), "batch.size=64", "linger.ms=0"]);
    assert!(ok && out.contains("PRODUCED 3000"), "{out}");
    let (ok, out) = common::kafka_share("", &["set-reset", &bootstrap, "g", "earliest"]);
    assert!(ok, "{out}");
    let consumer = {
        let bootstrap = bootstrap.clone();
        std::thread::spawn(move || {
            common::kafka_share(
                "",
                // At most 240 s: under a loaded machine's full suite, 150 s once ended
                // with 50 records still to finish (2950 of 3000).
                &["checked", &bootstrap, "s", "g", "3000", "240", "max.poll.records=50", "ack.delay.ms=400"],
            )
        })
    };
    // Mid-stream, the partition's leader goes.
    std::thread::sleep(Duration::from_secs(8));
    let leader = leader_of(cluster.node(1), "s", 0);
    let now_ms = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let first_kill = now_ms();
    cluster.node_mut(leader).kill();
    let other = (1..=3).find(|&n| n != leader).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while leader_of(cluster.node(other), "s", 0) == leader || leader_of(cluster.node(other), "s", 0) < 0 {
        assert!(Instant::now() < deadline, "no new leader");
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(5));
    cluster.node_mut(leader).restart();
    cluster.wait_for_brokers();
    // Then the share coordinator of the share-partition's state.
    let topic_id = topics(cluster.node(other)).into_iter().find(|(name, _)| name == "s").unwrap().1;
    let key = skein_coordinator::serve::share::Key { group: "g".into(), topic_id, partition: 0 };
    let state = leader_of(cluster.node(other), skein_coordinator::serve::share::STATE_TOPIC, key.state_partition());
    std::thread::sleep(Duration::from_secs(5));
    cluster.node_mut(state).kill();
    std::thread::sleep(Duration::from_secs(5));
    cluster.node_mut(state).restart();
    let (ok, out) = consumer.join().unwrap();
    assert!(ok, "{out}");
    // The kill came mid-stream: records arrived before it and after.
    let arrivals: Vec<u64> = out
        .lines()
        .filter_map(|l| l.strip_prefix("AT ").and_then(|r| r.split_whitespace().next()?.parse().ok()))
        .collect();
    let before = arrivals.iter().filter(|t| **t < first_kill).count();
    println!("{before} of {} records arrived before the leader's kill", arrivals.len());
    assert!(before > 0 && before < arrivals.len(), "the kill came mid-stream");
    assert!(out.contains("DONE 3000"), "every record finished: {}", unfinished(&out, COUNT));
    check_at_least_once(&out, 0, COUNT);
    // kafka-share-groups' lag, known wherever the group's coordinator, the state's
    // coordinator and the partition's leader are (ReadShareGroupStateSummary v1 and a
    // ListOffsets to the leader when they are on other nodes).
    let group_coordinator =
        leader_of(cluster.node(other), "__consumer_offsets", skein_coordinator::group::partition_for("g"));
    let state = leader_of(cluster.node(other), skein_coordinator::serve::share::STATE_TOPIC, key.state_partition());
    println!(
        "group coordinator {group_coordinator}, share coordinator {state}, leader {}",
        leader_of(cluster.node(other), "s", 0)
    );
    let (ok, described) = common::kafka_share("", &["describe", &bootstrap, "g"]);
    assert!(ok && described.lines().any(|l| l == "LAG s 0 0"), "{described}");
}

// Dead letters (KIP-1191) go to the dead-letter topic's partition (the source
// partition modulo its count) wherever its leader is: 3 source partitions on 3 nodes
// and 2 dead-letter partitions, so at least one source partition's leader writes to
// another node's partition.
#[test]
fn dead_letters_reach_partitions_led_elsewhere() {
    let cluster = Cluster::start(3);
    cluster.wait_for_brokers();
    let bootstrap: String = cluster.nodes.iter().map(|n| n.bootstrap()).collect::<Vec<_>>().join(",");
    let share = |args: &[&str]| {
        let (ok, out) = common::kafka_share("", args);
        assert!(ok, "Share.java {args:?} failed:\n{out}");
        out
    };
    share(&["create", &bootstrap, "src", "3"]);
    share(&["create", &bootstrap, "dlq.src", "2", "topic.errors.deadletterqueue.group.enable=true"]);
    let leaders = |topic: &str, partitions: i32| -> Vec<i32> {
        (0..partitions).map(|p| leader_of(cluster.node(1), topic, p)).collect()
    };
    let (sources, letters) = (leaders("src", 3), leaders("dlq.src", 2));
    println!("source leaders {sources:?}, dead-letter leaders {letters:?}");
    let remote = (0..3).filter(|&p| sources[p] != letters[p % 2]).count();
    assert!(remote > 0, "no source partition writes to another node: {sources:?} {letters:?}");
    assert!(share(&["produce", &bootstrap, "src", "30"]).contains("PRODUCED 30"));
    share(&["set-reset", &bootstrap, "g", "earliest"]);
    share(&["set-config", &bootstrap, "g", "errors.deadletterqueue.topic.name", "dlq.src"]);
    // Values ending in 3 are rejected: v3, v13 and v23.
    let out = share(&["explicit", &bootstrap, "src", "g", "30", "60"]);
    assert!(out.contains("DONE 30 33 27 3 3"), "{out}");
    let out = share(&["read", &bootstrap, "dlq.src", "3", "30"]);
    let mut written = Vec::new();
    for line in out.lines().filter(|l| l.starts_with("M ")) {
        let fields: Vec<&str> = line.split(' ').collect();
        let header = |name: &str| {
            fields[5].split(';').find_map(|h| h.strip_prefix(&format!("{name}="))).unwrap().parse::<i32>().unwrap()
        };
        let (partition, source) = (fields[1].parse::<i32>().unwrap(), header("__dlq.errors.partition"));
        assert_eq!(partition, source % 2, "{line}");
        written.push((source, header("__dlq.errors.offset")));
    }
    assert_eq!(written.len(), 3, "{out}");
    let total: i64 = cluster.nodes.iter().map(|n| metric(n, "skein_share_dead_letter_records_total")).sum();
    assert_eq!(total, 3);
    let failures: i64 = cluster.nodes.iter().map(|n| metric(n, "skein_share_dead_letter_failures_total")).sum();
    assert_eq!(failures, 0);
}
