//! Three-node clusters on loopback: each node its own ports and data directory, all
//! started and stopped here: the metadata quorum (topics created through any node
//! reach every node, the quorum survives losing its leader, and a node that was down
//! catches up when it returns), partitions spread over the brokers, which real clients
//! find through Metadata, and followers replicating with the ISR following them.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::lan::Lan;
use common::{broker_port, Broker, RawClient};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const NOT_CONTROLLER: i16 = 41;
const REQUEST_TIMED_OUT: i16 = 7;

struct Cluster {
    nodes: Vec<Broker>,
    _dir: tempfile::TempDir,
    /// The network namespaces the nodes run in, if any (dropped after the nodes).
    lan: Option<Lan>,
}

/// A failed test leaves the nodes' logs in `/tmp/cluster-node-<port>.log` (their data
/// directories go with the cluster).
impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for node in &self.nodes {
                let path = format!("/tmp/cluster-node-{}.log", node.port);
                if std::fs::write(&path, node.log()).is_ok() {
                    eprintln!("node log: {path}");
                }
            }
        }
    }
}

impl Cluster {
    /// Starts nodes 1 to `size`, each a voter of the controller quorum.
    fn start(size: i32) -> Cluster {
        Cluster::start_with(size, &[])
    }

    /// As `start`, with `extra` flags for every node.
    fn start_with(size: i32, extra: &[&str]) -> Cluster {
        Cluster::start_each(size, |_| extra.iter().map(|s| s.to_string()).collect())
    }

    /// As `start`, with `extra(id)` flags for node `id`.
    fn start_each(size: i32, extra: impl Fn(i32) -> Vec<String>) -> Cluster {
        Cluster::start_roles(size, size, extra)
    }

    /// Starts nodes 1 to `size`, of which 1 to `voters` are the controller quorum's
    /// voters and the others broker-only nodes, with `extra(id)` flags for node `id`.
    fn start_roles(size: i32, voters: i32, extra: impl Fn(i32) -> Vec<String>) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let mut ports: Vec<u16> = Vec::new();
        while ports.len() < voters as usize {
            let port = broker_port();
            if !ports.contains(&port) {
                ports.push(port);
            }
        }
        let voters: Vec<String> = ports.iter().enumerate().map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1)).collect();
        let voters = voters.join(",");
        let nodes = (1..=size)
            .map(|id| {
                let home = dir.path().join(format!("n{id}"));
                std::fs::create_dir_all(&home).unwrap();
                let own = extra(id);
                let id = id.to_string();
                let mut args = vec!["--node-id", &id, "--controller-voters", &voters];
                args.extend(own.iter().map(String::as_str));
                Broker::start(&home, "1", &args)
            })
            .collect();
        Cluster { nodes, _dir: dir, lan: None }
    }

    /// As `start_with`, each node in a network namespace of its own (`Lan`), so that
    /// faults can partition the network.
    ///
    /// # Errors
    /// Why the machine refuses network namespaces.
    fn start_partitionable(size: i32, extra: &[&str]) -> Result<Cluster, String> {
        let lan = Lan::create(size as usize)?;
        let dir = tempfile::tempdir().unwrap();
        let controller_port = broker_port();
        let voters: Vec<String> =
            (1..=size).map(|id| format!("{id}@{}:{controller_port}", lan.host(id as usize))).collect();
        let voters = voters.join(",");
        let nodes = (1..=size)
            .map(|id| {
                let home = dir.path().join(format!("n{id}"));
                std::fs::create_dir_all(&home).unwrap();
                let node = id.to_string();
                let mut args = vec!["--node-id", &node, "--controller-voters", &voters];
                args.extend(extra);
                Broker::start_in(&home, "1", &args, &lan.netns(id as usize), &lan.host(id as usize))
            })
            .collect();
        Ok(Cluster { nodes, _dir: dir, lan: Some(lan) })
    }

    /// Waits until `node`'s Metadata names exactly the brokers `expected`.
    fn wait_for_brokers_named(&self, node: i32, expected: &[i32]) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut named: Vec<i32> = metadata(self.node(node)).brokers.iter().map(|b| b.node_id.0).collect();
            named.sort_unstable();
            if named == expected {
                return;
            }
            assert!(Instant::now() < deadline, "node {node} names brokers {named:?}, not {expected:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until every node's Metadata names every broker (all registered).
    fn wait_for_brokers(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.nodes.iter().any(|n| metadata(n).brokers.len() < self.nodes.len()) {
            assert!(Instant::now() < deadline, "brokers did not register");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn node(&self, id: i32) -> &Broker {
        &self.nodes[(id - 1) as usize]
    }

    fn node_mut(&mut self, id: i32) -> &mut Broker {
        &mut self.nodes[(id - 1) as usize]
    }
}

fn describe_quorum(node: &Broker, topic: &str, version: i16) -> DescribeQuorumResponse {
    let request = DescribeQuorumRequest::default().with_topics(vec![describe_quorum_request::TopicData::default()
        .with_topic_name(TopicName(StrBytes::from_string(topic.to_string())))
        .with_partitions(vec![describe_quorum_request::PartitionData::default().with_partition_index(0)])]);
    RawClient::connect(&node.bootstrap()).call(&request, version)
}

fn describe(node: &Broker) -> DescribeClusterResponse {
    RawClient::connect(&node.bootstrap()).call(&DescribeClusterRequest::default(), 0)
}

/// The topic names and ids a node's Metadata lists.
fn topics(node: &Broker) -> Vec<(String, uuid::Uuid)> {
    let response: MetadataResponse =
        RawClient::connect(&node.bootstrap()).call(&MetadataRequest::default().with_topics(None), 12);
    let mut out: Vec<_> = response.topics.iter().map(|t| (t.name.as_ref().unwrap().to_string(), t.topic_id)).collect();
    out.sort();
    out
}

/// Creates `name` through `node`, retrying while the quorum elects a leader.
fn create(node: &Broker, name: &str) {
    create_with(node, name, 2, 1).unwrap();
}

/// Creates `name` with `partitions` and `factor` through `node`, retrying while the
/// quorum elects a leader; other errors are returned with their message.
fn create_with(node: &Broker, name: &str, partitions: i32, factor: i16) -> Result<(), (i16, String)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let request =
            CreateTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(name.to_string())))
                .with_num_partitions(partitions)
                .with_replication_factor(factor)]);
        let response: CreateTopicsResponse = RawClient::connect(&node.bootstrap()).call(&request, 7);
        let topic = &response.topics[0];
        if topic.error_code == 0 {
            return Ok(());
        }
        if topic.error_code != NOT_CONTROLLER && topic.error_code != REQUEST_TIMED_OUT {
            return Err((topic.error_code, topic.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default()));
        }
        assert!(Instant::now() < deadline, "no controller took {name} in 30 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until `node` lists `expected`.
fn wait_for_topics(node: &Broker, expected: &[(String, uuid::Uuid)]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = topics(node);
        if listed == expected {
            return;
        }
        assert!(Instant::now() < deadline, "node on {} lists {listed:?}, not {expected:?}", node.bootstrap());
        std::thread::sleep(Duration::from_millis(100));
    }
}

// Topics created through any node reach every node with the same id; the quorum
// elects a new controller when its leader is killed and keeps taking changes with
// two of three voters; the killed node catches up when it returns. Every node
// derives the same cluster id and names the same active controller.
#[test]
fn metadata_quorum_survives_a_lost_controller() {
    let mut cluster = Cluster::start(3);
    create(cluster.node(2), "first");
    let expected = topics(cluster.node(2));
    assert_eq!(expected.len(), 1);
    for id in 1..=3 {
        wait_for_topics(cluster.node(id), &expected);
    }
    let cluster_ids: Vec<_> = (1..=3).map(|id| describe(cluster.node(id)).cluster_id.to_string()).collect();
    assert!(cluster_ids.iter().all(|c| *c == cluster_ids[0] && c.len() == 22), "{cluster_ids:?}");
    let leader = describe(cluster.node(1)).controller_id.0;
    assert!((1..=3).contains(&leader), "no active controller: {leader}");
    for id in 2..=3 {
        assert_eq!(describe(cluster.node(id)).controller_id.0, leader);
    }
    cluster.wait_for_brokers();
    assert_eq!(describe(cluster.node(2)).brokers.len(), 3, "DescribeCluster names every live broker");
    // DescribeQuorum at a node that does not lead the quorum: the active controller's
    // view, every voter caught up, and the voters' controller endpoints (v2).
    let follower = if leader == 1 { 2 } else { 1 };
    let deadline = Instant::now() + Duration::from_secs(10);
    let (quorum, nodes) = loop {
        let response = describe_quorum(cluster.node(follower), "__cluster_metadata", 2);
        assert_eq!(response.error_code, 0, "{:?}", response.error_message);
        let quorum = response.topics[0].partitions[0].clone();
        if quorum.current_voters.iter().all(|v| v.log_end_offset == quorum.high_watermark) {
            break (quorum, response.nodes);
        }
        assert!(Instant::now() < deadline, "voters do not catch up: {quorum:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(quorum.leader_id.0, leader);
    assert!(quorum.high_watermark > 0 && quorum.leader_epoch > 0, "{quorum:?}");
    let mut voters: Vec<i32> = quorum.current_voters.iter().map(|v| v.replica_id.0).collect();
    voters.sort_unstable();
    assert_eq!(voters, [1, 2, 3]);
    assert!(quorum.current_voters.iter().all(|v| v.last_caught_up_timestamp > 0), "{quorum:?}");
    assert_eq!(nodes.len(), 3);
    assert!(nodes.iter().all(|n| n.listeners[0].name.as_str() == "CONTROLLER" && n.listeners[0].port > 0));
    let v0 = describe_quorum(cluster.node(follower), "__cluster_metadata", 0);
    assert_eq!((v0.error_code, v0.topics[0].partitions[0].current_voters.len()), (0, 3));
    assert_eq!(describe_quorum(cluster.node(follower), "first", 1).error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION");

    cluster.node_mut(leader).kill();
    let survivor = if leader == 1 { 2 } else { 1 };
    create(cluster.node(survivor), "second");
    let expected = topics(cluster.node(survivor));
    assert_eq!(expected.len(), 2);
    for id in (1..=3).filter(|&id| id != leader) {
        wait_for_topics(cluster.node(id), &expected);
        let controller = describe(cluster.node(id)).controller_id.0;
        assert!(controller != leader && controller > 0, "node {id} names controller {controller}");
    }

    cluster.node_mut(leader).restart();
    wait_for_topics(cluster.node(leader), &expected);
    for node in &mut cluster.nodes {
        node.stop();
    }
}

// Kafka's process.roles: node 3 is a controller-only voter, node 4 a broker-only node
// that follows the quorum's log without voting. The brokers are 1, 2 and 4, so a
// replication-factor-3 topic created through node 4 (its request forwarded to the
// quorum) lives on them; records produced with acks=all through node 4 are read back.
// DescribeQuorum lists node 4 as an observer. When the active controller is killed,
// node 4 follows its successor and its requests still commit. Killed and restarted,
// node 4 fetches the image before it opens its partitions: it keeps its replicas,
// learns of a topic created while it was down, and rejoins the ISR.
#[test]
fn broker_only_and_controller_only_nodes() {
    let mut cluster = Cluster::start_roles(4, 3, |id| {
        let mut flags: Vec<String> = FAST_FAILURE_DETECTION.iter().map(|s| s.to_string()).collect();
        if id == 3 {
            flags.extend(["--roles".to_string(), "controller".to_string()]);
        }
        flags
    });
    cluster.wait_for_brokers_named(4, &[1, 2, 4]);
    cluster.wait_for_brokers_named(3, &[1, 2, 4]);
    create_replicated(cluster.node(4), "observed", 3);
    let response = metadata(cluster.node(4));
    let topic = response.topics.iter().find(|t| t.name.as_ref().unwrap().as_str() == "observed").unwrap();
    for partition in &topic.partitions {
        let mut replicas: Vec<i32> = partition.replica_nodes.iter().map(|b| b.0).collect();
        replicas.sort_unstable();
        assert_eq!(replicas, [1, 2, 4], "partition {}", partition.partition_index);
    }
    for p in 0..3 {
        wait_for_isr(cluster.node(4), "observed", p, &[1, 2, 4], Duration::from_secs(20));
    }
    produce_acked(&cluster, 4, "observed", 3, 0..300);
    assert_eq!(consume_numbers(cluster.node(4), "observed", 3, 300).len(), 300);

    // The active controller sees node 4 fetch its log as an observer.
    let deadline = Instant::now() + Duration::from_secs(10);
    let active = loop {
        let response = describe_quorum(cluster.node(4), "__cluster_metadata", 2);
        assert_eq!(response.error_code, 0, "{:?}", response.error_message);
        let quorum = &response.topics[0].partitions[0];
        let mut voters: Vec<i32> = quorum.current_voters.iter().map(|v| v.replica_id.0).collect();
        voters.sort_unstable();
        assert_eq!(voters, [1, 2, 3]);
        let observers: Vec<i32> = quorum.observers.iter().map(|o| o.replica_id.0).collect();
        if observers == [4] && quorum.observers[0].log_end_offset > 0 {
            break quorum.leader_id.0;
        }
        assert!(Instant::now() < deadline, "node 4 is not an observer: {quorum:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(describe(cluster.node(4)).controller_id.0, active);

    cluster.node_mut(active).kill();
    create_with(cluster.node(4), "after-failover", 1, 1).unwrap();
    let survivor = (1..=3).find(|&id| id != active).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while describe(cluster.node(4)).controller_id.0 == active {
        assert!(Instant::now() < deadline, "node 4 still names the killed controller {active}");
        std::thread::sleep(Duration::from_millis(100));
    }
    cluster.node_mut(active).restart();
    wait_for_topics(cluster.node(active), &topics(cluster.node(survivor)));

    cluster.node_mut(4).kill();
    create_with(cluster.node(survivor), "while-away", 1, 1).unwrap();
    cluster.node_mut(4).restart();
    let expected = topics(cluster.node(survivor));
    assert!(expected.iter().any(|(name, _)| name == "while-away"), "{expected:?}");
    wait_for_topics(cluster.node(4), &expected);
    for p in 0..3 {
        wait_for_isr(cluster.node(survivor), "observed", p, &[1, 2, 4], Duration::from_secs(30));
    }
    assert_eq!(consume_numbers(cluster.node(4), "observed", 3, 300).len(), 300);
    for node in &mut cluster.nodes {
        node.stop();
    }
}

// Apache Kafka 4.1's own cluster tools, unchanged, against three voters and a
// broker-only node: kafka-metadata-quorum names the voters, the active controller
// and node 4 as an observer; kafka-reassign-partitions generates a plan, executes a
// move onto node 4 with a throttle (set on the brokers and topic as Kafka's tool sets
// it) and verifies it until complete (the throttle then removed); kafka-leader-election
// then makes node 4, the new preferred replica, the leader.
#[test]
fn kafka_cluster_tools_work_unchanged() {
    use common::kafka_tool;
    let tool = |main: &str, args: &[&str]| {
        let (ok, output) = kafka_tool(main, args, "");
        assert!(ok, "{main} {args:?} failed:\n{output}");
        output
    };
    let mut cluster = Cluster::start_roles(4, 3, |_| FAST_FAILURE_DETECTION.iter().map(|s| s.to_string()).collect());
    cluster.wait_for_brokers_named(4, &[1, 2, 3, 4]);
    let bootstrap = cluster.node(4).bootstrap();
    let b = bootstrap.as_str();

    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        let status =
            tool("org.apache.kafka.tools.MetadataQuorumCommand", &["--bootstrap-server", b, "describe", "--status"]);
        if status.contains("CurrentObservers:       [{\"id\": 4") {
            break status;
        }
        assert!(Instant::now() < deadline, "node 4 is not an observer:\n{status}");
        std::thread::sleep(Duration::from_millis(300));
    };
    for voter in 1..=3 {
        assert!(status.contains(&format!("{{\"id\": {voter}")), "{status}");
    }
    let leader = describe(cluster.node(1)).controller_id.0;
    assert!(status.contains(&format!("LeaderId:               {leader}")), "{status}");
    let replication =
        tool("org.apache.kafka.tools.MetadataQuorumCommand", &["--bootstrap-server", b, "describe", "--replication"]);
    let roles: Vec<(String, String)> = replication
        .lines()
        .skip(1)
        .filter_map(|l| Some((l.split_whitespace().next()?.to_string(), l.split_whitespace().last()?.to_string())))
        .collect();
    assert!(roles.contains(&(leader.to_string(), "Leader".into())), "{replication}");
    assert!(roles.contains(&("4".into(), "Observer".into())), "{replication}");

    create_with(cluster.node(4), "moving", 1, 2).unwrap();
    let replicas = || -> Vec<i32> {
        let response = metadata(cluster.node(4));
        let topic = response.topics.iter().find(|t| t.name.as_ref().unwrap().as_str() == "moving").unwrap();
        topic.partitions[0].replica_nodes.iter().map(|r| r.0).collect()
    };
    let before = replicas();
    let target: Vec<i32> = vec![4, *before.iter().find(|&&r| r != 4).unwrap()];
    produce_acked(&cluster, 4, "moving", 1, 0..200);

    let work = tempfile::tempdir().unwrap();
    let topics = work.path().join("topics.json");
    std::fs::write(&topics, r#"{"topics":[{"topic":"moving"}],"version":1}"#).unwrap();
    let reassign = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand";
    let generated = tool(
        reassign,
        &["--bootstrap-server", b, "--generate", "--topics-to-move-json-file", topics.to_str().unwrap()]
            .iter()
            .chain(&["--broker-list", "1,2,4"])
            .copied()
            .collect::<Vec<_>>(),
    );
    assert!(
        generated.contains("Current partition replica assignment")
            && generated.contains("Proposed partition reassignment configuration"),
        "{generated}"
    );
    let plan = work.path().join("plan.json");
    let json = format!(r#"{{"version":1,"partitions":[{{"topic":"moving","partition":0,"replicas":{target:?}}}]}}"#);
    std::fs::write(&plan, json).unwrap();
    let plan = plan.to_str().unwrap();
    let executed = tool(
        reassign,
        &["--bootstrap-server", b, "--execute", "--reassignment-json-file", plan, "--throttle", "10000000"],
    );
    assert!(executed.contains("Successfully started partition reassignment for moving-0"), "{executed}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let verified = tool(reassign, &["--bootstrap-server", b, "--verify", "--reassignment-json-file", plan]);
        if verified.contains("Reassignment of partition moving-0 is completed.") {
            assert!(verified.contains("Clearing broker-level throttles on brokers"), "{verified}");
            assert!(verified.contains("Clearing topic-level throttles on topic moving"), "{verified}");
            break;
        }
        assert!(Instant::now() < deadline, "the move did not complete:\n{verified}");
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(replicas(), target);
    let broker_configs = tool(
        "kafka.admin.ConfigCommand",
        &["--bootstrap-server", b, "--entity-type", "brokers", "--entity-name", "4", "--describe"],
    );
    assert!(!broker_configs.contains("throttled.rate"), "the throttle stayed:\n{broker_configs}");

    wait_for_isr(
        cluster.node(4),
        "moving",
        0,
        &{
            let mut t = target.clone();
            t.sort_unstable();
            t
        },
        Duration::from_secs(20),
    );
    let elected = tool(
        "org.apache.kafka.tools.LeaderElectionCommand",
        &["--bootstrap-server", b, "--election-type", "preferred", "--topic", "moving", "--partition", "0"],
    );
    assert!(
        elected.contains("Successfully completed leader election (PREFERRED) for partitions moving-0")
            || elected.contains("Valid replica already elected for partitions moving-0"),
        "{elected}"
    );
    assert_eq!(leader_of(cluster.node(1), "moving", 0), 4);
    assert_eq!(consume_numbers(cluster.node(4), "moving", 1, 200).len(), 200);
    for node in &mut cluster.nodes {
        node.stop();
    }
}

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

/// Writes one batch of `count` records of `value_bytes` to partition 0 of `topic` at
/// `node` with `acks`: the error code and base offset.
fn produce_batch(node: &Broker, topic: &str, count: i32, value_bytes: usize, acks: i16) -> (i16, i64) {
    let batch = bytes::Bytes::from(skein_engine::batch::testing::batch_with(count, value_bytes, 0, |_| None).to_vec());
    let request = ProduceRequest::default().with_acks(acks).with_timeout_ms(10_000).with_topic_data(vec![
        produce_request::TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![produce_request::PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch))]),
    ]);
    let response: ProduceResponse = RawClient::connect(&node.bootstrap()).call(&request, 9);
    let p = &response.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// ListOffsets latest (the high watermark) of partition 0 of `topic` at `node`.
fn latest_offset(node: &Broker, topic: &str) -> i64 {
    let request = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
        list_offsets_request::ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![list_offsets_request::ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1)]),
    ]);
    let response: ListOffsetsResponse = RawClient::connect(&node.bootstrap()).call(&request, 7);
    response.topics[0].partitions[0].offset
}

/// Runs the `skein` binary: whether it succeeded, and its stdout and stderr.
fn skein(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_skein")).args(args).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// The bytes a node served to readers (`skein_bytes_out_total` over its shards).
fn bytes_out(node: &Broker) -> u64 {
    metric(node, "skein_bytes_out_total") as u64
}

/// A `/metrics` series of `node`, summed over its shards.
fn metric(node: &Broker, name: &str) -> i64 {
    node.metrics()
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<i64>().unwrap())
        .sum()
}

/// An idempotent acks=all producer bootstrapped on every node (60 s message timeout,
/// plus `extra` settings), with its delivery counts.
fn idempotent_producer(cluster: &Cluster, extra: &[(&str, &str)]) -> (BaseProducer<Acks>, Acks) {
    let bootstrap: Vec<String> = cluster.nodes.iter().map(Broker::bootstrap).collect();
    let acks = Acks::default();
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap.join(","))
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "2")
        .set("message.timeout.ms", "60000");
    for (key, value) in extra {
        config.set(*key, *value);
    }
    (config.create_with_context(acks.clone()).unwrap(), acks)
}

/// Creates `name` with `partitions`, replication factor 3 and min.insync.replicas=2
/// through `node`.
fn create_replicated(node: &Broker, name: &str, partitions: i32) {
    let request = CreateTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![CreatableTopic::default()
        .with_name(TopicName(StrBytes::from_string(name.to_string())))
        .with_num_partitions(partitions)
        .with_replication_factor(3)
        .with_configs(vec![create_topics_request::CreatableTopicConfig::default()
            .with_name(StrBytes::from_static_str("min.insync.replicas"))
            .with_value(Some(StrBytes::from_static_str("2")))])]);
    let response: CreateTopicsResponse = RawClient::connect(&node.bootstrap()).call(&request, 7);
    assert_eq!(response.topics[0].error_code, 0, "{:?}", response.topics[0].error_message);
}

/// Counts a producer's acknowledged records (and keeps their numbers) and its errors.
#[derive(Clone, Default)]
struct Acks {
    acked: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    numbers: std::sync::Arc<std::sync::Mutex<Vec<i32>>>,
    errors: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl rdkafka::ClientContext for Acks {}

impl rdkafka::producer::ProducerContext for Acks {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &rdkafka::producer::DeliveryResult<'_>, _: ()) {
        match result {
            Ok(message) => {
                self.acked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let payload = String::from_utf8_lossy(message.payload().unwrap_or_default()).to_string();
                if let Ok(n) = payload[1..].parse() {
                    self.numbers.lock().unwrap().push(n);
                }
            }
            Err((e, _)) => self.errors.lock().unwrap().push(e.to_string()),
        }
    }
}

/// Sends records `range` to `topic` (partition `i % partitions`) with acks=all and an
/// idempotent producer bootstrapped on `node`; all must be acknowledged (the nodes'
/// logs are shown if not).
fn produce_acked(cluster: &Cluster, node: i32, topic: &str, partitions: i32, range: std::ops::Range<i32>) {
    let node = cluster.node(node);
    let acks = Acks::default();
    let producer: BaseProducer<Acks> = ClientConfig::new()
        .set("bootstrap.servers", node.bootstrap())
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .create_with_context(acks.clone())
        .unwrap();
    let count = range.len();
    for i in range {
        let payload = format!("m{i:05}");
        let record: BaseRecord<'_, (), str> = BaseRecord::to(topic).partition(i % partitions).payload(&payload);
        producer.send(record).unwrap();
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(40)).unwrap();
    let errors = acks.errors.lock().unwrap();
    let acked = acks.acked.load(std::sync::atomic::Ordering::Relaxed);
    if !errors.is_empty() || acked != count {
        for node in &cluster.nodes {
            let path = format!("/tmp/cluster-node-{}.log", node.port);
            std::fs::write(&path, node.log()).unwrap();
            eprintln!("--- node on {}: {path}\n{}", node.bootstrap(), common_tail(&node.log(), 60));
        }
        panic!("{acked} of {count} acknowledged; {} errors, first: {:?}", errors.len(), errors.first());
    }
}

fn common_tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The ISR of `topic`'s partition `partition` as `node` names it.
fn isr(node: &Broker, topic: &str, partition: i32) -> Vec<i32> {
    let response = metadata(node);
    let topic = response.topics.iter().find(|t| t.name.as_ref().unwrap().as_str() == topic).unwrap();
    let mut isr: Vec<i32> = topic
        .partitions
        .iter()
        .find(|p| p.partition_index == partition)
        .unwrap()
        .isr_nodes
        .iter()
        .map(|b| b.0)
        .collect();
    isr.sort_unstable();
    isr
}

fn wait_for_isr(node: &Broker, topic: &str, partition: i32, expected: &[i32], within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let now = isr(node, topic, partition);
        if now == expected {
            return;
        }
        assert!(Instant::now() < deadline, "ISR of {topic}-{partition} is {now:?}, not {expected:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Reads `topic` from the beginning through `node` until at least `expected` records
/// and nothing more for a second (or 30 s); returns the record numbers read, in order.
/// What a consumer read: the record's number at each (partition, offset), and the
/// offsets where it read two different records.
#[derive(Default)]
struct Reads {
    at: BTreeMap<(i32, i64), i32>,
    conflicts: Vec<String>,
}

impl Reads {
    fn record(&mut self, partition: i32, offset: i64, number: i32) {
        if let Some(&before) = self.at.get(&(partition, offset)) {
            if before != number {
                self.conflicts.push(format!("{partition}@{offset}: m{before} then m{number}"));
            }
        }
        self.at.insert((partition, offset), number);
    }
}

/// Reads `topic` from the beginning through every node until `done` says so, recording
/// what each offset held.
fn read_offsets(bootstrap: Vec<String>, topic: &str, partitions: i32, mut done: impl FnMut(&Reads) -> bool) -> Reads {
    let consumer = reader(&bootstrap.join(","), &format!("{topic}-watcher"), topic, partitions);
    let mut reads = Reads::default();
    while !done(&reads) {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
            let payload = String::from_utf8(message.payload().unwrap().to_vec()).unwrap();
            reads.record(message.partition(), message.offset(), payload[1..].parse().unwrap());
        }
    }
    reads
}

/// A consumer in `group` assigned every partition of `topic` from the beginning.
fn reader(bootstrap: &str, group: &str, topic: &str, partitions: i32) -> BaseConsumer {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("topic.metadata.refresh.interval.ms", "500")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    consumer
}

fn consume_numbers(node: &Broker, topic: &str, partitions: i32, expected: usize) -> Vec<i32> {
    let consumer = reader(&node.bootstrap(), &format!("{topic}-reader"), topic, partitions);
    let mut numbers = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = Instant::now();
    while Instant::now() < deadline && (numbers.len() < expected || last.elapsed() < Duration::from_secs(1)) {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
            let payload = String::from_utf8(message.payload().unwrap().to_vec()).unwrap();
            numbers.push(payload[1..].parse().unwrap());
            last = Instant::now();
        }
    }
    numbers
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
    assert!(status.contains("under-replicated 1"), "{status}");
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
    assert_eq!(alter(node, 4, &target.to_string(), vec![set("num.io.threads", "9")]).0, 42, "not dynamic here");
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

/// Flags for clusters under faults: short sessions and lag bounds, so a fault is
/// noticed within seconds.
const FAST_FAILURE_DETECTION: [&str; 6] = [
    "--replica-lag-time-max-ms",
    "2000",
    "--broker-session-timeout-ms",
    "2000",
    "--broker-heartbeat-interval-ms",
    "300",
];

/// Waits until every partition of `topic` has a live leader and its full ISR, as the
/// running nodes say.
fn wait_until_healed(cluster: &Cluster, topic: &str, partitions: i32, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let healed = cluster
            .nodes
            .iter()
            .filter(|n| n.child.is_some())
            .all(|node| (0..partitions).all(|p| isr(node, topic, p) == [1, 2, 3] && leader_of(node, topic, p) > 0));
        if healed {
            return;
        }
        if Instant::now() > deadline {
            let mut views = String::new();
            for node in cluster.nodes.iter().filter(|n| n.child.is_some()) {
                let path = format!("/tmp/cluster-node-{}.log", node.port);
                std::fs::write(&path, node.log()).unwrap();
                for p in 0..partitions {
                    views += &format!(
                        "\n{} ({path}): {topic}-{p} leader {} isr {:?}",
                        node.bootstrap(),
                        leader_of(node, topic, p),
                        isr(node, topic, p)
                    );
                }
            }
            panic!("{topic} did not heal in {within:?}:{views}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn signal(node: &Broker, signal: i32) {
    let pid = node.child.as_ref().expect("running").id() as i32;
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, signal) };
}

// Faults in a loop under an idempotent acks=all producer writing three partitions of
// replication factor 3 (min.insync.replicas=2): kill -9 of a leader, kill -9 of a
// follower, SIGSTOP of a leader past its session timeout then SIGCONT, a clean stop
// and restart, and, where the machine allows network namespaces (root), a network
// partition that cuts the leader off from the other nodes (not from the clients) past
// its session timeout; each cycle waits until every partition has its full ISR again.
// A consumer reads throughout. Then the checker reads everything: every acknowledged
// record is there exactly once, each partition holds its records in the order they
// were produced, none appears that was never sent, no offset ever held two records,
// and every record the consumer read during the faults is still at its offset (it
// never read past a high watermark). `FAULT_CYCLES` sets the cycles (30 by default;
// `FAULT_CYCLES=1000` is the long run). It found two losses of acknowledged records (a
// retried batch acknowledged before it was committed, a follower joining the ISR
// behind the high watermark), fixed since; it then passed ten runs of 30 cycles in a
// row before it joined the default run.
#[test]
fn faults_lose_no_acknowledged_record() {
    let cycles: usize = std::env::var("FAULT_CYCLES").ok().and_then(|c| c.parse().ok()).unwrap_or(30);
    let mut cluster = match Cluster::start_partitionable(3, &FAST_FAILURE_DETECTION) {
        Ok(cluster) => cluster,
        Err(why) => {
            eprintln!("network namespaces refused ({why}): the fault loop runs without partitions");
            Cluster::start_with(3, &FAST_FAILURE_DETECTION)
        }
    };
    let kinds = if cluster.lan.is_some() { 5 } else { 4 };
    cluster.wait_for_brokers();
    let partitions = 3;
    create_replicated(cluster.node(1), "faults", partitions);
    wait_until_healed(&cluster, "faults", partitions, Duration::from_secs(10));

    let (producer, acks) = idempotent_producer(
        &cluster,
        &[("message.timeout.ms", "120000"), ("topic.metadata.refresh.interval.ms", "500")],
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicI32::new(0));
    let producer_thread = {
        let (stop, sent) = (stop.clone(), sent.clone());
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // About 500 records a second.
                while started.elapsed() < Duration::from_millis(2 * i as u64) {
                    producer.poll(Duration::from_millis(1));
                }
                let payload = format!("m{i:07}");
                let record = || BaseRecord::<'_, (), str>::to("faults").partition(i % 3).payload(&payload);
                while let Err((error, _)) = producer.send(record()) {
                    // Only a full queue is waited out; an idempotent producer's fatal
                    // error (Skein answered something no Kafka broker would) fails.
                    let fatal = producer.client().fatal_error();
                    assert!(
                        fatal.is_none()
                            && error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::QueueFull),
                        "the producer failed: {error}, fatal: {fatal:?}"
                    );
                    producer.poll(Duration::from_millis(5));
                }
                producer.poll(Duration::ZERO);
                i += 1;
                sent.store(i, std::sync::atomic::Ordering::Relaxed);
            }
            producer.flush(Duration::from_secs(120)).unwrap();
        })
    };

    // A consumer reads throughout: what it saw at an offset must still be there at the
    // end (it never read past a high watermark; no offset held two records).
    let watcher = {
        let (stop, bootstrap) = (stop.clone(), cluster.nodes.iter().map(Broker::bootstrap).collect());
        std::thread::spawn(move || {
            read_offsets(bootstrap, "faults", partitions, |_| stop.load(std::sync::atomic::Ordering::Relaxed))
        })
    };

    for cycle in 0..cycles {
        let partition = (cycle % partitions as usize) as i32;
        let any = cluster.nodes.iter().position(|n| n.child.is_some()).unwrap() as i32 + 1;
        let leader = leader_of(cluster.node(any), "faults", partition);
        let follower = (1..=3).find(|&id| id != leader).unwrap();
        match cycle % kinds {
            0 => {
                cluster.node_mut(leader).kill();
                std::thread::sleep(Duration::from_millis(2500));
                cluster.node_mut(leader).restart();
            }
            1 => {
                cluster.node_mut(follower).kill();
                std::thread::sleep(Duration::from_millis(1000));
                cluster.node_mut(follower).restart();
            }
            2 => {
                signal(cluster.node(leader), libc::SIGSTOP);
                std::thread::sleep(Duration::from_millis(3000));
                signal(cluster.node(leader), libc::SIGCONT);
            }
            4 => {
                // The leader cut off from the other nodes past its session timeout,
                // while clients still reach it.
                let lan = cluster.lan.as_ref().expect("partitions need namespaces");
                let others: Vec<usize> = (1..=3).filter(|&id| id != leader).map(|id| id as usize).collect();
                lan.partition(leader as usize, &others);
                std::thread::sleep(Duration::from_millis(3000));
                // The others fence it and elect another leader (after electing another
                // active controller, which gives every broker a full session first,
                // when the cut-off node was the active controller): the cut is real.
                let deadline = Instant::now() + Duration::from_secs(20);
                let mut moved = leader;
                while moved == leader && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(200));
                    moved = leader_of(cluster.node(others[0] as i32), "faults", partition);
                }
                lan.heal(leader as usize, &others);
                assert!(moved != leader && moved > 0, "the partitioned leader {leader} still leads ({moved})");
            }
            _ => {
                cluster.node_mut(leader).stop();
                cluster.node_mut(leader).restart();
            }
        }
        wait_until_healed(&cluster, "faults", partitions, Duration::from_secs(60));
    }

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    producer_thread.join().unwrap();
    let watched = watcher.join().unwrap();
    let errors = acks.errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "{} records failed, first: {:?}", errors.len(), errors.first());
    let total = sent.load(std::sync::atomic::Ordering::Relaxed);
    let acked: Vec<i32> = acks.numbers.lock().unwrap().clone();
    assert!(acked.len() > total as usize / 2, "{} of {total} acknowledged", acked.len());
    // The whole log, read once the faults are over.
    let mut quiet = Instant::now();
    let mut count = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    let bootstrap = cluster.nodes.iter().map(Broker::bootstrap).collect();
    let last = read_offsets(bootstrap, "faults", partitions, |reads| {
        if reads.at.len() != count {
            (count, quiet) = (reads.at.len(), Instant::now());
        }
        Instant::now() > deadline || (count >= acked.len() && quiet.elapsed() > Duration::from_secs(1))
    });
    assert!(last.conflicts.is_empty(), "offsets read twice with different records: {:?}", last.conflicts);
    assert!(watched.conflicts.is_empty(), "offsets that held two records: {:?}", watched.conflicts);
    let vanished: Vec<String> = watched
        .at
        .iter()
        .filter(|(at, n)| last.at.get(at) != Some(n))
        .map(|((p, o), n)| format!("m{n} at {p}@{o}, now {:?}", last.at.get(&(*p, *o))))
        .collect();
    assert!(vanished.is_empty(), "records read during the faults are gone (read past a high watermark): {vanished:?}");
    let mut seen = std::collections::BTreeSet::new();
    let mut previous: BTreeMap<i32, i32> = BTreeMap::new();
    for (&(partition, offset), &n) in &last.at {
        assert_eq!(n % partitions, partition, "m{n} at {partition}@{offset}");
        assert!(previous.insert(partition, n).is_none_or(|p| p < n), "partition {partition} out of order at {offset}");
        assert!(seen.insert(n), "record {n} read twice");
        assert!((0..total).contains(&n), "record {n} was never sent");
    }
    let lost: Vec<i32> = acked.iter().copied().filter(|n| !seen.contains(n)).collect();
    assert!(lost.is_empty(), "{} of {} acknowledged records lost, first {:?}", lost.len(), acked.len(), lost.first());
    println!(
        "{cycles} fault cycles: {total} sent, {} acknowledged, {} read, {} read during the faults",
        acked.len(),
        seen.len(),
        watched.at.len()
    );
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

// The controller listener refuses what is not a voter of this cluster: a hello with
// another cluster id, a frame past the size bound, and garbage each close the
// connection, and the node goes on answering its clients and changing its metadata.
// An observer (a broker-only node) of this cluster is answered its fetch with a feed;
// one that breaks the protocol (a short fetch, a second fetch while one waits, a
// forward that does not parse) is cut off.
#[test]
fn the_controller_listener_refuses_strangers() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let port = broker_port();
    let voters = format!("1@127.0.0.1:{port}");
    let mut node = Broker::start(dir.path(), "1", &["--node-id", "1", "--controller-voters", &voters]);
    let frame = |kind: u8, payload: &[u8]| {
        let mut frame = ((1 + payload.len()) as u32).to_be_bytes().to_vec();
        frame.push(kind);
        frame.extend_from_slice(payload);
        frame
    };
    let hello = |cluster: &[u8]| frame(0, &[&2u64.to_be_bytes()[..], cluster].concat());
    let cluster_id = describe(&node).cluster_id.to_string();
    let observe = frame(4, &[&5u64.to_be_bytes()[..], cluster_id.as_bytes()].concat());
    let fetch = |after: u64| frame(5, &after.to_be_bytes());
    create(&node, "before-observer");
    let mut observer = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    observer.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    observer.write_all(&[&observe[..], &fetch(0)[..]].concat()).unwrap();
    let mut head = [0u8; 5];
    observer.read_exact(&mut head).unwrap();
    assert_eq!(head[4], 6, "an observer's fetch is answered with a feed");
    let mut feed = vec![0u8; u32::from_be_bytes(head[..4].try_into().unwrap()) as usize - 1];
    observer.read_exact(&mut feed).unwrap();
    let feed = skein_replication::quorum::Feed::decode(&feed).unwrap();
    assert!(feed.snapshot.is_some() && !feed.entries.is_empty() && feed.upto == feed.committed, "{feed:?}");
    drop(observer);
    let strangers: Vec<Vec<u8>> = vec![
        hello(b"another-cluster-id-xyz"),
        // This cluster's hello, then a frame of 4 GiB, and one of an unknown kind.
        [&hello(cluster_id.as_bytes())[..], &u32::MAX.to_be_bytes()].concat(),
        [&hello(cluster_id.as_bytes())[..], &[0, 0, 0, 1, 9]].concat(),
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        [&observe[..], &frame(5, &[1, 2, 3])].concat(),
        [&observe[..], &fetch(u64::MAX / 2), &fetch(u64::MAX / 2)].concat(),
        [&observe[..], &frame(2, &[&7u64.to_be_bytes()[..], b"{not json"].concat())].concat(),
        u32::MAX.to_be_bytes().to_vec(),
    ];
    for bytes in strangers {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        stream.write_all(&bytes).unwrap();
        let mut buf = [0u8; 16];
        assert!(matches!(stream.read(&mut buf), Ok(0) | Err(_)), "connection kept open after {bytes:?}");
    }
    create(&node, "after-strangers");
    assert!(topics(&node).iter().any(|(name, _)| name == "after-strangers"));
    node.stop();
}

fn leader_of(node: &Broker, topic: &str, partition: i32) -> i32 {
    let response = metadata(node);
    let topic = response.topics.iter().find(|t| t.name.as_ref().unwrap().as_str() == topic).unwrap();
    topic.partitions.iter().find(|p| p.partition_index == partition).unwrap().leader_id.0
}

fn metadata(node: &Broker) -> MetadataResponse {
    RawClient::connect(&node.bootstrap()).call(&MetadataRequest::default().with_topics(None), 12)
}
