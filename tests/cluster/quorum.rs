//! The metadata quorum and node roles: a lost controller, broker-only and
//! controller-only nodes, Kafka's own cluster tools, and the controller listener's
//! refusals.

use super::*;

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
        let caught_up = quorum.current_voters.iter().all(|v| v.log_end_offset == quorum.high_watermark);
        if quorum.current_voters.len() == 3 && caught_up {
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
        "org.apache.kafka.tools.ConfigCommand",
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

// Each broker registers every listener: a client on a node's second listener is
// given every broker at its address on that listener (and the group coordinator
// too), one on the first listener at the first listener's. A SCRAM user added
// through one node authenticates on another's SASL listener: credentials travel
// with the metadata.
#[test]
fn metadata_names_the_brokers_on_the_clients_listener() {
    let internal: Vec<u16> = (0..3).map(|_| broker_port()).collect();
    let sasl: Vec<u16> = (0..3).map(|_| broker_port()).collect();
    let cluster = Cluster::start_each(3, |id| {
        let i = (id - 1) as usize;
        vec![
            "--listeners".into(),
            format!("INTERNAL://127.0.0.1:{},SASL_PLAINTEXT://127.0.0.1:{}", internal[i], sasl[i]),
            "--listener-security-protocol-map".into(),
            "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT".into(),
            "--sasl-enabled-mechanisms".into(),
            "SCRAM-SHA-512".into(),
        ]
    });
    cluster.wait_for_brokers();
    let bootstrap = cluster.node(1).bootstrap();
    let add = ["user", "add", "hana", "--mechanism", "SCRAM-SHA-512", "--password", "hana-pw", "--bootstrap-server"];
    let (added, out) = skein(&[&add[..], &[bootstrap.as_str()]].concat());
    assert!(added, "{out}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listed = std::process::Command::new("kcat")
            .env_remove("LD_LIBRARY_PATH")
            .args(["-L", "-m", "5", "-b", &format!("127.0.0.1:{}", sasl[2])])
            .args(["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-512"])
            .args(["-X", "sasl.username=hana", "-X", "sasl.password=hana-pw"])
            .output()
            .unwrap();
        if listed.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "node 3 refused hana: {}", String::from_utf8_lossy(&listed.stderr));
        std::thread::sleep(Duration::from_millis(200));
    }
    let ports = |response: &MetadataResponse| {
        let mut ports: Vec<(i32, i32)> = response.brokers.iter().map(|b| (b.node_id.0, b.port)).collect();
        ports.sort_unstable();
        ports
    };
    let want_internal: Vec<(i32, i32)> = (1..=3).map(|id| (id, internal[(id - 1) as usize] as i32)).collect();
    let want_plain: Vec<(i32, i32)> = (1..=3).map(|id| (id, cluster.node(id).port as i32)).collect();
    for id in 1..=3 {
        let mut client = RawClient::connect(&format!("127.0.0.1:{}", internal[(id - 1) as usize]));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let response = client.call(&MetadataRequest::default(), 12);
            if ports(&response) == want_internal {
                break;
            }
            assert!(Instant::now() < deadline, "node {id} on INTERNAL: {:?}", ports(&response));
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(ports(&metadata(cluster.node(id))), want_plain, "node {id} on PLAINTEXT");
        let find = FindCoordinatorRequest::default().with_key(StrBytes::from_static_str("listener-group"));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let coordinator = client.call(&find, 3);
            if coordinator.error_code == 0 {
                let expected = internal[(coordinator.node_id.0 - 1) as usize] as i32;
                assert_eq!(coordinator.port, expected, "the coordinator at its INTERNAL port");
                break;
            }
            assert!(Instant::now() < deadline, "no coordinator: {coordinator:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}
