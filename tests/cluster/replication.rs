//! Replication on the data path: placement over brokers and racks, followers and the
//! ISR, a killed leader, eligible leader replicas, the Java client, and the group
//! coordinator moving with its partition.

use super::*;

// Partitions of a replication-factor-1 topic spread over the three brokers, each
// leading two; every node's Metadata names the three brokers and the same leaders; an
// idempotent librdkafka producer bootstrapped on one node writes to every leader and
// a consumer reads everything back; a node asked for a partition it does not hold
// answers NOT_LEADER_OR_FOLLOWER. A replication factor past the brokers is refused
// with Kafka's error.
#[test]
fn partitions_spread_over_the_brokers() {
    // Nodes 1 and 2 on rack "east", node 3 on "west".
    let rack = |id: i32| if id == 3 { "west" } else { "east" };
    let selector = "org.apache.kafka.common.replica.RackAwareReplicaSelector";
    let mut cluster = Cluster::start_each(3, |id| {
        vec!["--rack".into(), rack(id).into(), "--replica-selector-class".into(), selector.into()]
    });
    // Every broker registered: Metadata names three, with their racks.
    cluster.wait_for_brokers();
    for broker in metadata(cluster.node(1)).brokers {
        assert_eq!(broker.rack.as_ref().map(|r| r.as_str()), Some(rack(broker.node_id.0)), "{broker:?}");
    }
    create_with(cluster.node(1), "spread", 6, 1).unwrap();
    // Two replicas of each partition: one on each rack, so node 3 holds them all.
    create_with(cluster.node(1), "racked", 6, 2).unwrap();
    let response = metadata(cluster.node(1));
    let racked = response.topics.iter().find(|t| t.name.as_ref().unwrap().as_str() == "racked").unwrap();
    for partition in &racked.partitions {
        let mut racks: Vec<&str> = partition.replica_nodes.iter().map(|r| rack(r.0)).collect();
        racks.sort_unstable();
        assert_eq!(racks, ["east", "west"], "partition {}: {:?}", partition.partition_index, partition.replica_nodes);
    }
    let (code, message) = create_with(cluster.node(2), "too-many", 1, 4).unwrap_err();
    assert_eq!(code, 38, "INVALID_REPLICATION_FACTOR: {message}");
    assert!(message.contains("only 3 broker(s) are registered"), "{message}");
    let leaders = |id: i32| -> Vec<i32> {
        let response = metadata(cluster.node(id));
        let topic = response.topics.iter().find(|t| t.name.as_ref().unwrap().as_str() == "spread").unwrap();
        let mut leaders: Vec<(i32, i32)> =
            topic.partitions.iter().map(|p| (p.partition_index, p.leader_id.0)).collect();
        leaders.sort();
        leaders.into_iter().map(|(_, leader)| leader).collect()
    };
    let expected = leaders(1);
    for id in 1..=3 {
        assert_eq!(expected.iter().filter(|&&l| l == id).count(), 2, "leaders {expected:?}");
        let deadline = Instant::now() + Duration::from_secs(10);
        while leaders(id) != expected {
            assert!(Instant::now() < deadline, "node {id} names other leaders");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let brokers = metadata(cluster.node(2)).brokers;
    let ports: Vec<i32> = brokers.iter().map(|b| b.port).collect();
    for id in 1..=3 {
        assert!(ports.contains(&(cluster.node(id).port as i32)), "{ports:?}");
    }
    // A node that does not hold partition 0 answers NOT_LEADER_OR_FOLLOWER.
    let stranger = (1..=3).find(|&id| id != expected[0]).unwrap();
    let request = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
        list_offsets_request::ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("spread")))
            .with_partitions(vec![list_offsets_request::ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1)]),
    ]);
    let response: ListOffsetsResponse = RawClient::connect(&cluster.node(stranger).bootstrap()).call(&request, 7);
    assert_eq!(response.topics[0].partitions[0].error_code, 6, "NOT_LEADER_OR_FOLLOWER");
    // KIP-951: Produce v11 and Fetch v16 name the leader and its endpoint.
    let leader_port = cluster.node(expected[0]).port as i32;
    let batch = bytes::Bytes::from(skein_engine::batch::testing::batch_with(2, 16, 0, |_| None).to_vec());
    let produce = ProduceRequest::default().with_acks(-1).with_timeout_ms(5000).with_topic_data(vec![
        produce_request::TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("spread")))
            .with_partition_data(vec![produce_request::PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch))]),
    ]);
    let response: ProduceResponse = RawClient::connect(&cluster.node(stranger).bootstrap()).call(&produce, 11);
    let refused = &response.responses[0].partition_responses[0];
    assert_eq!((refused.error_code, refused.current_leader.leader_id.0), (6, expected[0]));
    assert!(refused.current_leader.leader_epoch >= 0);
    let endpoints: Vec<(i32, i32)> = response.node_endpoints.iter().map(|e| (e.node_id.0, e.port)).collect();
    assert_eq!(endpoints, vec![(expected[0], leader_port)]);
    let described = metadata(cluster.node(stranger));
    let topic_id = described.topics.iter().find(|t| t.name.as_ref().unwrap().as_str() == "spread").unwrap().topic_id;
    let fetch = FetchRequest::default().with_max_wait_ms(0).with_max_bytes(1 << 20).with_topics(vec![
        fetch_request::FetchTopic::default().with_topic_id(topic_id).with_partitions(vec![
            fetch_request::FetchPartition::default().with_partition(0).with_partition_max_bytes(1 << 20),
        ]),
    ]);
    let response: FetchResponse = RawClient::connect(&cluster.node(stranger).bootstrap()).call(&fetch, 16);
    let refused = &response.responses[0].partitions[0];
    assert_eq!((refused.error_code, refused.current_leader.leader_id.0), (6, expected[0]));
    let endpoints: Vec<(i32, i32)> = response.node_endpoints.iter().map(|e| (e.node_id.0, e.port)).collect();
    assert_eq!(endpoints, vec![(expected[0], leader_port)]);

    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", cluster.node(1).bootstrap())
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .create()
        .unwrap();
    for i in 0..600 {
        let payload = format!("m{i:04}");
        let record: BaseRecord<'_, (), str> = BaseRecord::to("spread").partition(i % 6).payload(&payload);
        producer.send(record).unwrap();
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", cluster.node(3).bootstrap())
        .set("group.id", "spread-reader")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for p in 0..6 {
        assignment.add_partition_offset("spread", p, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.len() < 600 && Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            let payload = String::from_utf8(message.payload().unwrap().to_vec()).unwrap();
            let i: i32 = payload[1..].parse().unwrap();
            assert_eq!(message.partition(), i % 6, "{payload} in partition {}", message.partition());
            assert!(seen.insert(i), "{payload} read twice");
        }
    }
    assert_eq!(seen.len(), 600, "records read");
    read_from_the_nearest_replica(&cluster, rack);
    for node in &mut cluster.nodes {
        node.stop();
    }
}

/// KIP-392 on a cluster whose nodes run the rack-aware replica selector: the leader
/// sends a consumer on another rack to an in-sync follower there
/// (`preferred_read_replica`), the follower serves it up to its high watermark (only
/// from Fetch v11, which knows to), and librdkafka with `client.rack` reads everything
/// from that follower.
fn read_from_the_nearest_replica(cluster: &Cluster, rack: impl Fn(i32) -> &'static str) {
    create_replicated(cluster.node(1), "nearby", 1);
    wait_for_isr(cluster.node(1), "nearby", 0, &[1, 2, 3], Duration::from_secs(10));
    produce_acked(cluster, 1, "nearby", 1, 0..200);
    let leader = leader_of(cluster.node(1), "nearby", 0);
    let far = if rack(leader) == "east" { "west" } else { "east" };
    let fetch = |node: i32, version: i16| -> fetch_response::PartitionData {
        let request = FetchRequest::default()
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_rack_id(StrBytes::from_static_str(far))
            .with_topics(vec![fetch_request::FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("nearby")))
                .with_partitions(vec![fetch_request::FetchPartition::default()
                    .with_partition(0)
                    .with_partition_max_bytes(1 << 20)])]);
        let response: FetchResponse = RawClient::connect(&cluster.node(node).bootstrap()).call(&request, version);
        response.responses[0].partitions[0].clone()
    };
    let sent = fetch(leader, 12);
    let nearest = sent.preferred_read_replica.0;
    assert_eq!(sent.error_code, 0);
    assert!(nearest != leader && rack(nearest) == far, "sent to {nearest} from {leader}");
    assert!(sent.records.as_ref().is_none_or(|r| r.is_empty()), "the leader sends no records with the replica");
    // The follower serves consumers up to the high watermark it learned.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let served = fetch(nearest, 12);
        assert_eq!((served.error_code, served.preferred_read_replica.0), (0, -1));
        if served.high_watermark == 200 {
            assert!(served.records.as_ref().is_some_and(|r| !r.is_empty()));
            break;
        }
        assert!(Instant::now() < deadline, "the follower's high watermark stays at {}", served.high_watermark);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(fetch(nearest, 10).error_code, 6, "Fetch v10 reads only from the leader");
    let served_before = bytes_out(cluster.node(nearest));
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", cluster.node(leader).bootstrap())
        .set("group.id", "nearby-reader")
        .set("client.rack", far)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset("nearby", 0, Offset::Beginning).unwrap();
    consumer.assign(&assignment).unwrap();
    let mut numbers = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while numbers.len() < 200 && Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            numbers.push(String::from_utf8(message.payload().unwrap().to_vec()).unwrap()[1..].parse::<i32>().unwrap());
        }
    }
    assert_eq!(numbers, (0..200).collect::<Vec<_>>(), "every record once, in order");
    assert!(bytes_out(cluster.node(nearest)) > served_before, "the consumer read from the follower on its rack");
}

// A topic of replication factor 3 with min.insync.replicas=2: acks=all produces are
// acknowledged only once the whole ISR holds them (the followers fetched them); a
// killed follower leaves the ISR after replica.lag.time.max.ms and produces go on
// with two; records the leaders delete meanwhile go from every replica; back, the
// follower catches up and rejoins the ISR; every record left is read once.
#[test]
fn followers_replicate_and_the_isr_follows_them() {
    let mut cluster = Cluster::start_with(
        3,
        &["--replica-lag-time-max-ms", "1500", "--replica-high-watermark-checkpoint-interval-ms", "200"],
    );
    cluster.wait_for_brokers();
    create_replicated(cluster.node(1), "replicated", 2);
    for p in 0..2 {
        wait_for_isr(cluster.node(2), "replicated", p, &[1, 2, 3], Duration::from_secs(10));
    }
    produce_acked(&cluster, 1, "replicated", 2, 0..500);
    // Every replica checkpoints the committed end in Kafka's
    // `replication-offset-checkpoint` (followers learn it from their next fetch).
    for node in &cluster.nodes {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(node.data_dir.join("replication-offset-checkpoint")).unwrap_or_default();
            let committed: i64 = text
                .lines()
                .filter_map(|l| l.strip_prefix("replicated "))
                .map(|l| l.split(' ').nth(1).unwrap().parse::<i64>().unwrap())
                .sum();
            if text.starts_with("0\n") && committed == 500 {
                break;
            }
            assert!(Instant::now() < deadline, "node {}'s checkpoint: {text:?}", node.port);
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    // The broker that leads neither partition follows both; it goes away.
    let response = metadata(cluster.node(1));
    let topic = response.topics.iter().find(|t| t.name.as_ref().unwrap().as_str() == "replicated").unwrap();
    let leaders: Vec<i32> = topic.partitions.iter().map(|p| p.leader_id.0).collect();
    let follower = (1..=3).find(|id| !leaders.contains(id)).unwrap();
    let remaining: Vec<i32> = (1..=3).filter(|&id| id != follower).collect();
    cluster.node_mut(follower).kill();
    for p in 0..2 {
        wait_for_isr(cluster.node(remaining[0]), "replicated", p, &remaining, Duration::from_secs(15));
    }
    // Each leader reports its partition under-replicated, the shrink, and how long the
    // lost follower has not been caught up.
    for &leader in &remaining {
        let node = cluster.node(leader);
        assert!(metric(node, "skein_under_replicated_partitions") >= 1, "{}", node.metrics());
        assert!(metric(node, "skein_isr_shrinks_total") >= 1);
        assert!(metric(node, "skein_follower_lag_ms") >= 1500, "{}", node.metrics());
    }
    produce_acked(&cluster, remaining[0], "replicated", 2, 500..1000);
    // Meanwhile the leaders delete their first 400 records of each partition: past the
    // 250 the stopped follower holds.
    for p in 0..2 {
        let leader = cluster.node(leader_of(cluster.node(remaining[0]), "replicated", p));
        let request = DeleteRecordsRequest::default().with_timeout_ms(10_000).with_topics(vec![
            delete_records_request::DeleteRecordsTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("replicated")))
                .with_partitions(vec![delete_records_request::DeleteRecordsPartition::default()
                    .with_partition_index(p)
                    .with_offset(400)]),
        ]);
        let response: DeleteRecordsResponse = RawClient::connect(&leader.bootstrap()).call(&request, 2);
        let result = &response.topics[0].partitions[0];
        assert_eq!((result.error_code, result.low_watermark), (0, 400));
    }

    // Back, the follower finds its log ends below the leaders' start: it restarts there
    // (Kafka's truncateFullyAndStartAt), catches up and rejoins the ISR; the in-sync
    // follower moved its log start with its leader's.
    cluster.node_mut(follower).restart();
    for p in 0..2 {
        wait_for_isr(cluster.node(remaining[0]), "replicated", p, &[1, 2, 3], Duration::from_secs(20));
    }
    for &leader in &remaining {
        let node = cluster.node(leader);
        let deadline = Instant::now() + Duration::from_secs(10);
        while metric(node, "skein_under_replicated_partitions") != 0 {
            assert!(Instant::now() < deadline, "{}", node.metrics());
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(metric(node, "skein_isr_expands_total") >= 1);
    }
    for node in &cluster.nodes {
        for p in 0..2 {
            let path = node.data_dir.join(format!("replicated-{p}")).join("skein-checkpoint");
            let deadline = Instant::now() + Duration::from_secs(10);
            while !std::fs::read_to_string(&path).unwrap_or_default().contains("log_start_offset 400\n") {
                assert!(Instant::now() < deadline, "{}: {:?}", path.display(), std::fs::read_to_string(&path));
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    let mut numbers = consume_numbers(cluster.node(follower), "replicated", 2, 200);
    numbers.sort_unstable();
    assert_eq!(numbers, (800..1000).collect::<Vec<_>>(), "every record past the deleted ones, once");
    for node in &mut cluster.nodes {
        node.stop();
    }
}

// kill -9 of a partition's leader while an idempotent acks=all producer writes: the
// active controller fences it once its session expires and an in-sync follower leads
// in a new epoch; the producer carries on there. Every acknowledged record is read
// back exactly once, in the order it was produced, and no record appears twice. The
// killed broker comes back as a follower, truncates what the new leader does not have,
// and rejoins the ISR.
#[test]
fn a_killed_leader_loses_no_acknowledged_record() {
    let mut cluster = Cluster::start_with(3, &FAST_FAILURE_DETECTION);
    cluster.wait_for_brokers();
    create_replicated(cluster.node(1), "failover", 1);
    wait_for_isr(cluster.node(1), "failover", 0, &[1, 2, 3], Duration::from_secs(10));
    let leader = leader_of(cluster.node(1), "failover", 0);

    let (producer, acks) = idempotent_producer(&cluster, &[("topic.metadata.refresh.interval.ms", "500")]);
    let total = 3000;
    let started = Instant::now();
    for i in 0..total {
        // About 1,000 records a second; the leader dies after the first second.
        while started.elapsed() < Duration::from_millis(i as u64) {
            producer.poll(Duration::from_millis(1));
        }
        if i == 1000 {
            cluster.node_mut(leader).kill();
        }
        let payload = format!("m{i:05}");
        let record = || BaseRecord::<'_, (), str>::to("failover").partition(0).payload(&payload);
        while let Err((e, _)) = producer.send(record()) {
            assert!(matches!(e, rdkafka::error::KafkaError::MessageProduction(_)), "{e}");
            producer.poll(Duration::from_millis(5));
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(60)).unwrap();
    let acked: Vec<i32> = acks.numbers.lock().unwrap().clone();
    let errors = acks.errors.lock().unwrap().clone();
    let survivor = (1..=3).find(|&id| id != leader).unwrap();
    let new_leader = leader_of(cluster.node(survivor), "failover", 0);
    assert!(new_leader != leader && new_leader > 0, "leader {leader} replaced by {new_leader}");
    assert!(acked.len() > 2500, "{} acknowledged; errors: {:?}", acked.len(), errors.first());

    cluster.node_mut(leader).restart();
    wait_for_isr(cluster.node(survivor), "failover", 0, &[1, 2, 3], Duration::from_secs(30));
    // Back in sync, the preferred replica (the first, which led at creation) takes
    // its leadership back through a preferred election (ElectLeaders, KIP-460).
    let elect =
        ElectLeadersRequest::default().with_election_type(0).with_timeout_ms(10_000).with_topic_partitions(Some(vec![
            elect_leaders_request::TopicPartitions::default()
                .with_topic(TopicName(StrBytes::from_static_str("failover")))
                .with_partitions(vec![0]),
        ]));
    let response: ElectLeadersResponse = RawClient::connect(&cluster.node(survivor).bootstrap()).call(&elect, 2);
    let result = &response.replica_election_results[0].partition_result[0];
    assert_eq!((response.error_code, result.error_code), (0, 0), "{:?}", result.error_message);
    assert_eq!(leader_of(cluster.node(survivor), "failover", 0), leader, "the preferred replica leads again");
    let again: ElectLeadersResponse = RawClient::connect(&cluster.node(survivor).bootstrap()).call(&elect, 2);
    assert_eq!(again.replica_election_results[0].partition_result[0].error_code, 84, "ELECTION_NOT_NEEDED");
    let read = consume_numbers(cluster.node(leader), "failover", 1, acked.len());
    let mut seen = std::collections::BTreeSet::new();
    for n in &read {
        assert!(seen.insert(*n), "record {n} read twice");
        assert!((0..total).contains(n), "record {n} was never sent");
    }
    assert!(read.windows(2).all(|w| w[0] < w[1]), "records out of order");
    let lost: Vec<i32> = acked.iter().copied().filter(|n| !seen.contains(n)).collect();
    assert!(lost.is_empty(), "{} acknowledged records lost, first {:?}", lost.len(), lost.first());
    for node in &mut cluster.nodes {
        node.stop();
    }
}

// KIP-966 on a cluster (min.insync.replicas=3 on three replicas): a follower that
// stops cleanly leaves the ISR for the ELR (DescribeTopicPartitions, through Java's
// Admin.describeTopics too); below min.insync.replicas an acks=all produce is refused
// and an acks=1 record is written but not committed (the high watermark stays, so the
// eligible replica holds every committed record); back, the follower rejoins, the ELR
// empties and the record is committed.
#[test]
fn a_replica_leaving_a_small_isr_stays_eligible() {
    let mut cluster = Cluster::start_with(3, &FAST_FAILURE_DETECTION);
    cluster.wait_for_brokers();
    let request = CreateTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![CreatableTopic::default()
        .with_name(TopicName(StrBytes::from_static_str("eligible")))
        .with_num_partitions(1)
        .with_replication_factor(3)
        .with_configs(vec![create_topics_request::CreatableTopicConfig::default()
            .with_name(StrBytes::from_static_str("min.insync.replicas"))
            .with_value(Some(StrBytes::from_static_str("3")))])]);
    let response: CreateTopicsResponse = RawClient::connect(&cluster.node(1).bootstrap()).call(&request, 7);
    assert_eq!(response.topics[0].error_code, 0);
    wait_for_isr(cluster.node(1), "eligible", 0, &[1, 2, 3], Duration::from_secs(10));
    produce_acked(&cluster, 1, "eligible", 1, 0..100);
    let leader = leader_of(cluster.node(1), "eligible", 0);
    let follower = (1..=3).find(|&id| id != leader).unwrap();
    let rest: Vec<i32> = (1..=3).filter(|&id| id != follower).collect();
    let describe = |node: &Broker| -> (Vec<i32>, Vec<i32>) {
        let request = DescribeTopicPartitionsRequest::default()
            .with_response_partition_limit(10)
            .with_topics(vec![describe_topic_partitions_request::TopicRequest::default()
                .with_name(TopicName(StrBytes::from_static_str("eligible")))]);
        let response: DescribeTopicPartitionsResponse = RawClient::connect(&node.bootstrap()).call(&request, 0);
        let p = &response.topics[0].partitions[0];
        let ids = |list: &[BrokerId]| {
            let mut ids: Vec<i32> = list.iter().map(|b| b.0).collect();
            ids.sort_unstable();
            ids
        };
        (ids(&p.isr_nodes), ids(p.eligible_leader_replicas.as_deref().unwrap_or_default()))
    };
    assert_eq!(describe(cluster.node(leader)), (vec![1, 2, 3], vec![]));

    cluster.node_mut(follower).stop();
    let deadline = Instant::now() + Duration::from_secs(10);
    while describe(cluster.node(leader)) != (rest.clone(), vec![follower]) {
        assert!(Instant::now() < deadline, "{:?}", describe(cluster.node(leader)));
        std::thread::sleep(Duration::from_millis(100));
    }
    let java = common::java_client(&["describe", &cluster.node(leader).bootstrap(), "eligible"]).output().unwrap();
    let text = String::from_utf8_lossy(&java.stdout);
    assert!(java.status.success(), "{}", String::from_utf8_lossy(&java.stderr));
    assert!(
        text.contains(&format!("PARTITION 0 leader={leader} ")) && text.contains(&format!("elr={follower}")),
        "{text}"
    );

    let produce = |acks: i16| produce_batch(cluster.node(leader), "eligible", 1, 16, acks);
    assert_eq!(produce(-1).0, 19, "NOT_ENOUGH_REPLICAS below min.insync.replicas");
    assert_eq!(produce(1), (0, 100), "acks=1 is written");
    let latest = |node: &Broker| latest_offset(node, "eligible");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(latest(cluster.node(leader)), 100, "the high watermark stays below min.insync.replicas");

    cluster.node_mut(follower).restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    while describe(cluster.node(leader)) != (vec![1, 2, 3], vec![]) || latest(cluster.node(leader)) != 101 {
        assert!(Instant::now() < deadline, "{:?} at {}", describe(cluster.node(leader)), latest(cluster.node(leader)));
        std::thread::sleep(Duration::from_millis(100));
    }
    for node in &mut cluster.nodes {
        node.stop();
    }
}

// The Java client (kafka-clients 4.1) on a three-node cluster: its Admin describes
// the metadata quorum (DescribeQuorum), and its idempotent acks=all producer writes
// through a kill -9 of the partition's leader: every record is acknowledged and read
// back exactly once, in order.
#[test]
fn the_java_client_rides_out_a_leader_kill() {
    let mut cluster = Cluster::start_with(3, &FAST_FAILURE_DETECTION);
    cluster.wait_for_brokers();
    let quorum = common::java_client(&["quorum", &cluster.node(2).bootstrap()]).output().unwrap();
    let text = String::from_utf8_lossy(&quorum.stdout);
    assert!(quorum.status.success(), "{}", String::from_utf8_lossy(&quorum.stderr));
    let controller = describe(cluster.node(1)).controller_id.0;
    assert!(text.starts_with(&format!("QUORUM leader={controller} hw=")) && text.contains("voters=1,2,3"), "{text}");

    create_replicated(cluster.node(1), "jfailover", 1);
    wait_for_isr(cluster.node(1), "jfailover", 0, &[1, 2, 3], Duration::from_secs(10));
    let leader = leader_of(cluster.node(1), "jfailover", 0);
    let bootstrap: Vec<String> = cluster.nodes.iter().map(Broker::bootstrap).collect();
    let total = 3000;
    let producer = common::java_client(&["paced", &bootstrap.join(","), "jfailover", &total.to_string(), "5"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The leader dies once a few hundred records are committed.
    let deadline = Instant::now() + Duration::from_secs(60);
    while latest_offset(cluster.node(leader), "jfailover") < 300 {
        assert!(Instant::now() < deadline, "the Java producer wrote nothing");
        std::thread::sleep(Duration::from_millis(20));
    }
    cluster.node_mut(leader).kill();
    let out = producer.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.trim(), format!("ACKED {total} FAILED 0"));
    let survivor = (1..=3).find(|&id| id != leader).unwrap();
    let read = consume_numbers(cluster.node(survivor), "jfailover", 1, total as usize);
    assert_eq!(read, (0..total).collect::<Vec<i32>>(), "every record once, in order");
    for node in &mut cluster.nodes {
        node.stop();
    }
}

// __consumer_offsets is replicated (replication factor 3 with three brokers): when
// a group's coordinator is killed, the leadership of its offsets partition moves to
// an in-sync replica that loads the group from its copy of the log, and a consumer of
// the group resumes from the offset committed before.
#[test]
fn group_offsets_survive_their_coordinator() {
    let mut cluster = Cluster::start_with(3, &FAST_FAILURE_DETECTION);
    cluster.wait_for_brokers();
    create_replicated(cluster.node(1), "grouped", 1);
    produce_acked(&cluster, 1, "grouped", 1, 0..100);
    let bootstrap: Vec<String> = cluster.nodes.iter().map(Broker::bootstrap).collect();
    let consumer = |cluster_bootstrap: &str| -> BaseConsumer {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", cluster_bootstrap)
            .set("group.id", "survivors")
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .create()
            .unwrap();
        consumer.subscribe(&["grouped"]).unwrap();
        consumer
    };
    let first = consumer(&bootstrap.join(","));
    let mut read = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while read < 40 {
        assert!(Instant::now() < deadline, "read {read} records");
        if let Some(Ok(_)) = first.poll(Duration::from_millis(200)) {
            read += 1;
        }
    }
    first.commit_consumer_state(rdkafka::consumer::CommitMode::Sync).unwrap();
    drop(first);
    let offsets = metadata(cluster.node(1));
    let internal = offsets.topics.iter().find(|t| t.name.as_ref().unwrap().as_str() == "__consumer_offsets").unwrap();
    assert_eq!(internal.partitions[0].replica_nodes.len(), 3, "the offsets topic is replicated");
    let coordinator: FindCoordinatorResponse = RawClient::connect(&cluster.node(1).bootstrap())
        .call(&FindCoordinatorRequest::default().with_key(StrBytes::from_static_str("survivors")), 3);
    let coordinator = coordinator.node_id.0;
    assert!((1..=3).contains(&coordinator), "coordinator {coordinator}");
    cluster.node_mut(coordinator).kill();
    let rest: Vec<String> = cluster.nodes.iter().filter(|n| n.child.is_some()).map(Broker::bootstrap).collect();
    let second = consumer(&rest.join(","));
    let deadline = Instant::now() + Duration::from_secs(40);
    let resumed = loop {
        assert!(Instant::now() < deadline, "the group did not resume");
        if let Some(Ok(message)) = second.poll(Duration::from_millis(200)) {
            break message.offset();
        }
    };
    assert_eq!(resumed, 40, "the group resumed from its committed offset");
    drop(second);
    cluster.node_mut(coordinator).restart();
    for node in &mut cluster.nodes {
        node.stop();
    }
}
