//! Virtual brokers in a cluster: each node registers its shards' ports, and every node
//! lists every shard of every node as a broker, naming each partition's leader and
//! replicas by the shard that owns the partition on each replica's node. Clients then
//! reach the owning core of each leader directly, across nodes.

use super::*;

fn virtual_id(node: i32, shard: i32) -> i32 {
    (1 << 24) + node * 1024 + shard
}

// Two nodes of two shards, each with its own virtual brokers: either node's Metadata
// lists the four shard brokers at their ports, and leaders and replicas (factor 2)
// are shard brokers. An idempotent acks=all librdkafka producer and a consumer group,
// bootstrapped on one node, move 2,000 records through leaders on both nodes with no
// cross-shard hop on either, losing nothing.
#[test]
fn every_node_lists_every_shard_of_every_node() {
    let bases: Vec<u16> = (0..2).map(|_| common::port_pair()).collect();
    let flags = |id: i32| vec!["--virtual-brokers".to_string(), bases[(id - 1) as usize].to_string()];
    let cluster = Cluster::start_sharded(2, 2, "2", flags, |_, _| {});
    let expected: Vec<(i32, u16)> = (1..=2)
        .flat_map(|node| (0..2).map(move |shard| (node, shard)))
        .map(|(node, shard)| (virtual_id(node, shard), bases[(node - 1) as usize] + shard as u16))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in 1..=2 {
        loop {
            let mut named: Vec<(i32, u16)> =
                metadata(cluster.node(node)).brokers.iter().map(|b| (b.node_id.0, b.port as u16)).collect();
            named.sort_unstable();
            if named == expected {
                break;
            }
            assert!(Instant::now() < deadline, "node {node} lists {named:?}, not {expected:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    create_with(cluster.node(1), "spread", 4, 2).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let leaders = loop {
        let response = metadata(cluster.node(2));
        let topic = response.topics.iter().find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == "spread"));
        let partitions = topic.map(|t| t.partitions.clone()).unwrap_or_default();
        let ready =
            partitions.len() == 4 && partitions.iter().all(|p| p.leader_id.0 >= 1 << 24 && p.isr_nodes.len() == 2);
        if ready {
            for p in &partitions {
                // Each replica is named by its node and the same shard: the shard table
                // is the cluster's.
                let shard = (p.leader_id.0 - (1 << 24)) % 1024;
                for replica in &p.replica_nodes {
                    assert_eq!((replica.0 - (1 << 24)) % 1024, shard, "{p:?}");
                    assert!(expected.iter().any(|(id, _)| *id == replica.0), "{p:?}");
                }
            }
            break partitions.iter().map(|p| (p.leader_id.0 - (1 << 24)) / 1024).collect::<Vec<_>>();
        }
        assert!(Instant::now() < deadline, "partitions not led by shard brokers: {partitions:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(leaders.contains(&1) && leaders.contains(&2), "leaders on both nodes: {leaders:?}");

    // The data path, on a topic of one replica per partition (followers' fetches land
    // on the shard that accepted their connection and cross to the owner: they are
    // inter-broker traffic, which keeps real ids).
    create_with(cluster.node(2), "direct", 4, 1).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let response = metadata(cluster.node(1));
        let topic = response.topics.iter().find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == "direct"));
        if topic.is_some_and(|t| t.partitions.len() == 4 && t.partitions.iter().all(|p| p.leader_id.0 >= 1 << 24)) {
            break;
        }
        assert!(Instant::now() < deadline, "direct not led by shard brokers");
        std::thread::sleep(Duration::from_millis(200));
    }

    let bootstrap = cluster.node(1).bootstrap();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "spread-readers")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&["direct"]).unwrap();
    let hops_before: u64 = (1..=2).map(|n| cluster.node(n).metric_sum("skein_cross_shard_client_messages_total")).sum();
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .create()
        .unwrap();
    for i in 0..2000 {
        let payload = format!("v{i:04}");
        let key = i.to_string();
        let mut record = BaseRecord::to("direct").payload(&payload).key(&key).partition(i % 4);
        while let Err((e, back)) = producer.send(record) {
            assert!(matches!(e.rdkafka_error_code(), Some(rdkafka::types::RDKafkaErrorCode::QueueFull)), "{e}");
            producer.poll(Duration::from_millis(10));
            record = back;
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    while seen.len() < 2000 && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            seen.push(String::from_utf8_lossy(m.payload().unwrap()).to_string());
        }
    }
    seen.sort();
    assert_eq!(seen, (0..2000).map(|i| format!("v{i:04}")).collect::<Vec<_>>());
    let hops: u64 = (1..=2).map(|n| cluster.node(n).metric_sum("skein_cross_shard_client_messages_total")).sum::<u64>()
        - hops_before;
    // Clients' produce and fetch requests went to the owning shards (followers'
    // fetches, inter-broker traffic under real ids, are not counted here).
    assert_eq!(hops, 0, "{hops} client partition operations crossed shards");
}
