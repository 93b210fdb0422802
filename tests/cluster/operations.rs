//! Operations on a running cluster: reassignments (throttled too), controlled
//! shutdown, and preferred leaders coming back.

use super::*;

// AlterPartitionReassignments moves a partition to other brokers (KIP-455): the new
// replica catches up as a follower and joins the ISR, the reassignment completes, the
// replica that left deletes its log, and every record stays readable.
// ListPartitionReassignments shows a reassignment that cannot complete (its new
// replica is down), and a cancel takes the partition back.
#[test]
fn reassignments_move_partitions_between_brokers() {
    let mut cluster = Cluster::start_with(3, &["--replica-lag-time-max-ms", "2000"]);
    cluster.wait_for_brokers();
    create_with(cluster.node(1), "moved", 1, 2).unwrap();
    produce_acked(&cluster, 1, "moved", 1, 0..300);
    let replicas = |node: &Broker| -> Vec<i32> {
        let response = metadata(node);
        let topic = response.topics.iter().find(|t| t.name.as_ref().unwrap().as_str() == "moved").unwrap();
        topic.partitions[0].replica_nodes.iter().map(|r| r.0).collect()
    };
    let before = replicas(cluster.node(1));
    let (leaving, staying) = (before[0], before[1]);
    let joining = (1..=3).find(|r| !before.contains(r)).unwrap();
    let reassign = |node: &Broker, target: Option<Vec<i32>>| -> (i16, i16) {
        let request = AlterPartitionReassignmentsRequest::default().with_timeout_ms(10_000).with_topics(vec![
            alter_partition_reassignments_request::ReassignableTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("moved")))
                .with_partitions(vec![alter_partition_reassignments_request::ReassignablePartition::default()
                    .with_partition_index(0)
                    .with_replicas(target.map(|t| t.into_iter().map(BrokerId).collect()))]),
        ]);
        // A controller that was just lost answers NOT_CONTROLLER or REQUEST_TIMED_OUT
        // until the quorum elects another; clients retry, as Kafka's Admin does.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let response: AlterPartitionReassignmentsResponse = RawClient::connect(&node.bootstrap()).call(&request, 1);
            if response.error_code == 0 || Instant::now() > deadline {
                let partition = response.responses.first().and_then(|t| t.partitions.first());
                return (response.error_code, partition.map_or(-1, |p| p.error_code));
            }
            assert!([NOT_CONTROLLER, REQUEST_TIMED_OUT].contains(&response.error_code), "{response:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let ongoing = |node: &Broker| -> Vec<(Vec<i32>, Vec<i32>, Vec<i32>)> {
        let request = ListPartitionReassignmentsRequest::default().with_timeout_ms(10_000);
        let response: ListPartitionReassignmentsResponse = RawClient::connect(&node.bootstrap()).call(&request, 0);
        let ids = |list: &[BrokerId]| list.iter().map(|b| b.0).collect::<Vec<_>>();
        response
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .map(|p| (ids(&p.replicas), ids(&p.adding_replicas), ids(&p.removing_replicas)))
            .collect()
    };

    // Through `skein cluster reassign`.
    let bootstrap = cluster.node(2).bootstrap();
    let target = format!("{staying},{joining}");
    let (ok, out) = skein(&["cluster", "reassign", "moved:0", "--replicas", &target, "--bootstrap-server", &bootstrap]);
    assert!(ok && out.contains("moving to"), "{out}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(ongoing(cluster.node(1)).is_empty() && replicas(cluster.node(1)) == [staying, joining]) {
        assert!(Instant::now() < deadline, "the reassignment did not complete: {:?}", ongoing(cluster.node(1)));
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_for_isr(cluster.node(1), "moved", 0, &[staying, joining], Duration::from_secs(10));
    let gone = cluster.node(leaving).data_dir.join("moved-0");
    let deadline = Instant::now() + Duration::from_secs(10);
    while gone.exists() {
        assert!(Instant::now() < deadline, "the replica that left kept its log");
        std::thread::sleep(Duration::from_millis(100));
    }
    produce_acked(&cluster, 1, "moved", 1, 300..600);
    assert_eq!(consume_numbers(cluster.node(leaving), "moved", 1, 600), (0..600).collect::<Vec<_>>());

    // Back to the broker that left while it is down: the move waits for it, shows in
    // ListPartitionReassignments, and a cancel ends it where it began.
    cluster.node_mut(leaving).kill();
    let asker = cluster.node(staying);
    assert_eq!(reassign(asker, Some(vec![staying, leaving])), (0, 0));
    let (merged, adding, removing) = ongoing(asker).pop().expect("a reassignment under way");
    assert_eq!((merged, adding, removing), (vec![staying, leaving, joining], vec![leaving], vec![joining]));
    // `skein cluster` shows it, with the quorum, the brokers and what is under-replicated.
    let (ok, listed) = skein(&["cluster", "reassign", "--bootstrap-server", &asker.bootstrap()]);
    assert!(
        ok && listed.contains(&format!("moved-0: replicas [{staying}, {leaving}, {joining}], adding [{leaving}]")),
        "{listed}"
    );
    let (ok, status) = skein(&["cluster", "status", "--bootstrap-server", &asker.bootstrap()]);
    assert!(ok && status.contains("quorum: leader") && status.contains("reassignments under way: 1"), "{status}");
    // The partition being moved is under-replicated (its joining replica is down);
    // on a loaded machine a follower may briefly lag on another partition too.
    assert!(status.lines().any(|l| l.trim_start().starts_with("moved-0:")), "{status}");
    assert!(!status.contains("under-replicated 0,"), "{status}");
    let (ok, brokers) = skein(&["cluster", "brokers", "--bootstrap-server", &asker.bootstrap()]);
    let listed = brokers.lines().filter(|l| l.contains("127.0.0.1:")).count();
    assert!(ok && brokers.contains("(controller)") && (2..=3).contains(&listed), "{brokers}");
    let (ok, refused) = skein(&["cluster", "reassign", "moved", "--cancel", "--bootstrap-server", &asker.bootstrap()]);
    assert!(!ok && refused.contains("TOPIC:PARTITION"), "{refused}");
    let (ok, unreachable) = skein(&["cluster", "status", "--bootstrap-server", "127.0.0.1:1", "--timeout-ms", "500"]);
    assert!(!ok && unreachable.contains("cannot reach"), "{unreachable}");
    assert_eq!(reassign(asker, None), (0, 0));
    assert!(ongoing(asker).is_empty());
    let mut now = replicas(asker);
    now.sort_unstable();
    let mut expected = vec![staying, joining];
    expected.sort_unstable();
    assert_eq!(now, expected);
    assert_eq!(reassign(asker, None), (0, 85), "NO_REASSIGNMENT_IN_PROGRESS");
    let (ok, elected) =
        skein(&["cluster", "elect-leaders", "--topic", "moved", "--bootstrap-server", &asker.bootstrap()]);
    assert!(ok && elected.starts_with("moved-0: "), "{elected}");
    let (ok, unknown) =
        skein(&["cluster", "elect-leaders", "--topic", "absent", "--bootstrap-server", &asker.bootstrap()]);
    assert!(!ok && unknown.contains("absent does not exist"), "{unknown}");
    for node in &mut cluster.nodes {
        node.stop();
    }
}

// Replication throttles as kafka-reassign-partitions --throttle sets them: a dynamic
// `follower.replication.throttled.rate` on the broker a partition moves to, with the
// topic's `follower.replication.throttled.replicas=*`, holds the move's catch-up to
// that rate; DescribeConfigs shows the dynamic value, and a delete brings the default
// back. Bad dynamic broker configs get Kafka's errors.
#[test]
fn a_throttled_move_keeps_to_its_rate() {
    use incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let mut cluster = Cluster::start(3);
    cluster.wait_for_brokers();
    create_with(cluster.node(1), "slow", 1, 1).unwrap();
    let source = leader_of(cluster.node(1), "slow", 0);
    let target = (1..=3).find(|&id| id != source).unwrap();
    // 2.4 MB in eight batches of 300 records of 1,000 bytes: more than the 1 MiB one
    // replica fetch may carry, so the quota holds back the fetches after the first.
    for _ in 0..8 {
        assert_eq!(produce_batch(cluster.node(source), "slow", 300, 1000, -1).0, 0);
    }
    let alter = |node: &Broker, kind: i8, name: &str, configs: Vec<AlterableConfig>| -> (i16, String) {
        let request = IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(kind)
            .with_resource_name(StrBytes::from_string(name.to_string()))
            .with_configs(configs)]);
        let response: IncrementalAlterConfigsResponse = RawClient::connect(&node.bootstrap()).call(&request, 1);
        let result = &response.responses[0];
        (result.error_code, result.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default())
    };
    let set = |name: &str, value: &str| {
        AlterableConfig::default()
            .with_name(StrBytes::from_string(name.to_string()))
            .with_value(Some(StrBytes::from_string(value.to_string())))
            .with_config_operation(0)
    };
    let rate = "follower.replication.throttled.rate";
    let node = cluster.node(1);
    assert_eq!(alter(node, 4, &target.to_string(), vec![set("num.partitions", "9")]).0, 42, "not dynamic on Kafka");
    assert_eq!(alter(node, 4, &target.to_string(), vec![set(rate, "-5")]).0, 40, "INVALID_CONFIG");
    assert_eq!(alter(node, 4, &target.to_string(), vec![set(rate, "600000")]), (0, String::new()));
    assert_eq!(alter(node, 2, "slow", vec![set("follower.replication.throttled.replicas", "*")]).0, 0);
    let described = |node: &Broker| -> (String, i8) {
        let request = DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(StrBytes::from_string(target.to_string()))
                .with_configuration_keys(Some(vec![StrBytes::from_static_str(rate)])),
        ]);
        let response: DescribeConfigsResponse = RawClient::connect(&node.bootstrap()).call(&request, 4);
        let entry = &response.results[0].configs[0];
        (entry.value.as_ref().unwrap().to_string(), entry.config_source)
    };
    assert_eq!(described(cluster.node(target)), ("600000".to_string(), 2), "DYNAMIC_BROKER_CONFIG");

    // Moves "slow" to `replicas` and waits until they are all in sync: how long it took.
    let move_to = |replicas: Vec<i32>| -> Duration {
        let request = AlterPartitionReassignmentsRequest::default().with_timeout_ms(10_000).with_topics(vec![
            alter_partition_reassignments_request::ReassignableTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("slow")))
                .with_partitions(vec![alter_partition_reassignments_request::ReassignablePartition::default()
                    .with_partition_index(0)
                    .with_replicas(Some(replicas.iter().copied().map(BrokerId).collect()))]),
        ]);
        let started = Instant::now();
        let response: AlterPartitionReassignmentsResponse = RawClient::connect(&node.bootstrap()).call(&request, 0);
        assert_eq!(response.responses[0].partitions[0].error_code, 0);
        let mut sorted = replicas.clone();
        sorted.sort_unstable();
        wait_for_isr(cluster.node(1), "slow", 0, &sorted, Duration::from_secs(30));
        started.elapsed()
    };
    let took = move_to(vec![source, target]);
    // 2.4 MB at 600 KB/s in fetches of up to 1 MiB, the first one free: over two
    // seconds (unthrottled, well under one).
    assert!(took >= Duration::from_millis(1500), "a follower-throttled catch-up of 2.4 MB took {took:?}");

    // The leader's side: a cluster-wide default rate ("" names every broker) on the
    // replicas the topic's leader list names holds the next move as well.
    let leader_rate = "leader.replication.throttled.rate";
    assert_eq!(alter(node, 4, "", vec![set(leader_rate, "600000")]).0, 0);
    assert_eq!(alter(node, 2, "slow", vec![set("leader.replication.throttled.replicas", "*")]).0, 0);
    let third = (1..=3).find(|&id| id != source && id != target).unwrap();
    let took = move_to(vec![source, target, third]);
    assert!(took >= Duration::from_millis(1500), "a leader-throttled catch-up of 2.4 MB took {took:?}");

    let delete = AlterableConfig::default().with_name(StrBytes::from_static_str(rate)).with_config_operation(1);
    assert_eq!(alter(node, 4, &target.to_string(), vec![delete]).0, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while described(cluster.node(target)) != ("9223372036854775807".to_string(), 5) {
        assert!(Instant::now() < deadline, "{:?}", described(cluster.node(target)));
        std::thread::sleep(Duration::from_millis(100));
    }
    for node in &mut cluster.nodes {
        node.stop();
    }
}

// SIGTERM of a partition's leader is a controlled shutdown: the node has its
// leaderships moved to in-sync replicas before it stops, so with a 30 s session
// timeout a new leader is there as soon as it has stopped, and an idempotent acks=all
// producer never stalls for the session timeout: every record is acknowledged within
// seconds and read back once.
#[test]
fn a_stopped_leader_hands_its_leaderships_over() {
    let mut cluster =
        Cluster::start_with(3, &["--broker-session-timeout-ms", "30000", "--broker-heartbeat-interval-ms", "300"]);
    cluster.wait_for_brokers();
    create_with(cluster.node(1), "handover", 1, 3).unwrap();
    wait_for_isr(cluster.node(1), "handover", 0, &[1, 2, 3], Duration::from_secs(10));
    let leader = leader_of(cluster.node(1), "handover", 0);
    let survivor = (1..=3).find(|&id| id != leader).unwrap();
    let (producer, acks) = idempotent_producer(&cluster, &[]);
    let started = Instant::now();
    for i in 0..2000 {
        while started.elapsed() < Duration::from_millis(i as u64) {
            producer.poll(Duration::from_millis(1));
        }
        if i == 1000 {
            let stopping = Instant::now();
            cluster.node_mut(leader).stop();
            let stopped_in = stopping.elapsed();
            let now_leader = leader_of(cluster.node(survivor), "handover", 0);
            assert!(now_leader != leader && now_leader > 0, "no new leader once {leader} stopped: {now_leader}");
            assert!(stopped_in < Duration::from_secs(15), "the stop took {stopped_in:?}");
        }
        let payload = format!("m{i:05}");
        let record = || BaseRecord::<'_, (), str>::to("handover").partition(0).payload(&payload);
        while producer.send(record()).is_err() {
            producer.poll(Duration::from_millis(5));
        }
        producer.poll(Duration::ZERO);
    }
    if producer.flush(Duration::from_secs(20)).is_err() {
        for node in &cluster.nodes {
            let path = format!("/tmp/cluster-node-{}.log", node.port);
            std::fs::write(&path, node.log()).unwrap();
        }
        panic!(
            "not flushed: {} acknowledged, errors {:?}",
            acks.acked.load(std::sync::atomic::Ordering::Relaxed),
            acks.errors.lock().unwrap().first()
        );
    }
    let took = started.elapsed();
    assert!(acks.errors.lock().unwrap().is_empty(), "{:?}", acks.errors.lock().unwrap().first());
    assert_eq!(acks.acked.load(std::sync::atomic::Ordering::Relaxed), 2000);
    assert!(took < Duration::from_secs(20), "the producer stalled: {took:?} for 2 s of records");
    let mut numbers = consume_numbers(cluster.node(survivor), "handover", 1, 2000);
    numbers.sort_unstable();
    assert_eq!(numbers, (0..2000).collect::<Vec<_>>());
    cluster.node_mut(leader).restart();
    wait_for_isr(cluster.node(survivor), "handover", 0, &[1, 2, 3], Duration::from_secs(20));
    for node in &mut cluster.nodes {
        node.stop();
    }
}

// auto.leader.rebalance.enable: once a killed leader is back in sync, the active
// controller gives it its preferred leaderships back by itself (checking every
// second here, every five minutes by default).
#[test]
fn leaders_return_to_preferred_replicas() {
    let mut flags = FAST_FAILURE_DETECTION.to_vec();
    flags.extend(["--leader-imbalance-check-interval-seconds", "1"]);
    let mut cluster = Cluster::start_with(3, &flags);
    cluster.wait_for_brokers();
    create_replicated(cluster.node(1), "balanced", 3);
    wait_until_healed(&cluster, "balanced", 3, Duration::from_secs(10));
    let preferred: Vec<i32> = (0..3).map(|p| leader_of(cluster.node(1), "balanced", p)).collect();
    let victim = preferred[0];
    let witness = (1..=3).find(|&id| id != victim).unwrap();
    cluster.node_mut(victim).kill();
    let deadline = Instant::now() + Duration::from_secs(15);
    while leader_of(cluster.node(witness), "balanced", 0) == victim {
        assert!(Instant::now() < deadline, "partition 0 kept its dead leader");
        std::thread::sleep(Duration::from_millis(100));
    }
    cluster.node_mut(victim).restart();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let leaders: Vec<i32> = (0..3).map(|p| leader_of(cluster.node(witness), "balanced", p)).collect();
        if leaders == preferred {
            break;
        }
        assert!(Instant::now() < deadline, "leaders {leaders:?}, preferred {preferred:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    for node in &mut cluster.nodes {
        node.stop();
    }
}

// A rolling restart that gives every node a second shard spreads each node's
// replicas over its shards, and a shard move made on one node is followed by the
// others (the shard table is the cluster's): followers keep fetching from the new
// shard, acks=all keeps completing, and every record is read once.
#[test]
fn shard_moves_are_followed_across_the_cluster() {
    let mut cluster = Cluster::start_with(3, &FAST_FAILURE_DETECTION);
    cluster.wait_for_brokers();
    create_replicated(cluster.node(1), "shifted", 4);
    wait_until_healed(&cluster, "shifted", 4, Duration::from_secs(10));
    produce_acked(&cluster, 1, "shifted", 4, 0..400);
    for id in 1..=3 {
        let node = cluster.node_mut(id);
        node.stop();
        node.cores = "2".into();
        node.restart();
        wait_until_healed(&cluster, "shifted", 4, Duration::from_secs(30));
    }
    let placement = |id: i32| -> Vec<u64> {
        let (ok, out) = skein(&["placement", "show", "--interval-ms", "10", "--admin", &admin(cluster.node(id))]);
        assert!(ok, "{out}");
        let mut rows: Vec<(u64, u64)> = out
            .lines()
            .filter(|l| l.starts_with("shifted "))
            .map(|l| {
                let fields: Vec<&str> = l.split_whitespace().collect();
                (fields[1].parse().unwrap(), fields[2].parse().unwrap())
            })
            .collect();
        rows.sort_unstable();
        rows.into_iter().map(|(_, shard)| shard).collect()
    };
    let spread = placement(1);
    assert!(spread.contains(&0) && spread.contains(&1), "two shards, yet {spread:?}");
    let target = 1 - spread[0];
    let (ok, out) = skein(&[
        "placement",
        "move",
        "shifted",
        "0",
        "--shard",
        &target.to_string(),
        "--admin",
        &admin(cluster.node(1)),
    ]);
    assert!(ok, "{out}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while (1..=3).any(|id| placement(id)[0] != target) {
        assert!(Instant::now() < deadline, "{:?}", (1..=3).map(placement).collect::<Vec<_>>());
        std::thread::sleep(Duration::from_millis(100));
    }
    produce_acked(&cluster, 1, "shifted", 4, 400..800);
    wait_until_healed(&cluster, "shifted", 4, Duration::from_secs(20));
    let mut numbers = consume_numbers(cluster.node(2), "shifted", 4, 800);
    numbers.sort_unstable();
    assert_eq!(numbers, (0..800).collect::<Vec<_>>());
    for node in &mut cluster.nodes {
        node.stop();
    }
}

fn admin(node: &Broker) -> String {
    format!("127.0.0.1:{}", node.admin_port)
}

// `kafka-cluster unregister` (UnregisterBroker) removes a decommissioned broker: a
// broker-only node is stopped for good, fenced once its session expires, and after
// the command no node lists it, fenced or not; the partition it held a replica of is
// led by the other. Started again, it registers and is listed again.
#[test]
fn a_dead_broker_is_unregistered() {
    let mut cluster = Cluster::start_roles(2, 1, |_| FAST_FAILURE_DETECTION.iter().map(|s| s.to_string()).collect());
    cluster.wait_for_brokers();
    create_with(cluster.node(1), "kept", 1, 2).unwrap();
    cluster.node_mut(2).kill();
    cluster.wait_for_brokers_named(1, &[1]);
    let listed = |node: &Broker| -> Vec<i32> {
        let request = DescribeClusterRequest::default().with_include_fenced_brokers(true);
        let response: DescribeClusterResponse = RawClient::connect(&node.bootstrap()).call(&request, 2);
        response.brokers.iter().map(|b| b.broker_id.0).collect()
    };
    let wait_listed = |node: &Broker, expected: &[i32]| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while listed(node) != expected {
            assert!(Instant::now() < deadline, "listed {:?}, not {expected:?}", listed(node));
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    assert_eq!(listed(cluster.node(1)), vec![1, 2], "fenced, still registered");
    let b = cluster.node(1).bootstrap();
    let (ok, out) =
        common::kafka_tool("org.apache.kafka.tools.ClusterTool", &["unregister", "-b", &b, "--id", "2"], "");
    assert!(ok && out.contains("Broker 2 is no longer registered."), "{out}");
    wait_listed(cluster.node(1), &[1]);
    assert_eq!(leader_of(cluster.node(1), "kept", 0), 1);
    cluster.node_mut(2).restart();
    wait_listed(cluster.node(1), &[1, 2]);
}
