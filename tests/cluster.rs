//! Three-node clusters on loopback: each node its own ports and data directory, all
//! started and stopped here. So far the metadata quorum: topics created through any
//! node reach every node, the quorum survives losing its leader, and a node that was
//! down catches up when it returns.

mod common;

use std::time::{Duration, Instant};

use common::{broker_port, Broker, RawClient};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const NOT_CONTROLLER: i16 = 41;
const REQUEST_TIMED_OUT: i16 = 7;

struct Cluster {
    nodes: Vec<Broker>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts nodes 1 to `size`, each a voter of the controller quorum.
    fn start(size: i32) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let mut ports: Vec<u16> = Vec::new();
        while ports.len() < size as usize {
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
                Broker::start(&home, "1", &["--node-id", &id.to_string(), "--controller-voters", &voters])
            })
            .collect();
        Cluster { nodes, _dir: dir }
    }

    fn node(&self, id: i32) -> &Broker {
        &self.nodes[(id - 1) as usize]
    }

    fn node_mut(&mut self, id: i32) -> &mut Broker {
        &mut self.nodes[(id - 1) as usize]
    }
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
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let request =
            CreateTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(name.to_string())))
                .with_num_partitions(2)
                .with_replication_factor(1)]);
        let response: CreateTopicsResponse = RawClient::connect(&node.bootstrap()).call(&request, 7);
        let code = response.topics[0].error_code;
        if code == 0 {
            return;
        }
        assert!(code == NOT_CONTROLLER || code == REQUEST_TIMED_OUT, "create {name}: error {code}");
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
