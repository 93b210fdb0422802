//! Brokers that reach each other over SASL_SSL with mutual TLS, as a secured Kafka
//! cluster runs (`inter.broker.listener.name=SASL_SSL`,
//! `sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512`, `ssl.client.auth=required`),
//! and the controller quorum over SSL with certificates both ways (`CONTROLLER:SSL`),
//! under the standard authorizer with only the broker and admin users as super users:
//! followers replicate (acks=all with min.insync.replicas=3 completes), transaction
//! markers travel between brokers, and a broker with a wrong password is refused and
//! says so, while `User:ANONYMOUS` on the PLAINTEXT listener cannot fetch as a follower.
//! A delegation token made through one node authenticates on another.

use std::path::Path;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;

use super::*;
use common::pki::{pki, Pki};

const TOPIC: &str = "secured-replicated";

/// librdkafka settings for the test's client: SASL_SSL as `admin`, with a client
/// certificate (the listener requires one).
fn client(pki: &Pki, bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("security.protocol", "SASL_SSL")
        .set("sasl.mechanisms", "SCRAM-SHA-512")
        .set("sasl.username", "admin")
        .set("sasl.password", "admin-pw")
        .set("ssl.ca.location", pki.ca.to_str().unwrap())
        .set("ssl.certificate.location", pki.client_cert.to_str().unwrap())
        .set("ssl.key.location", pki.client_key.to_str().unwrap())
        .set("message.timeout.ms", "30000");
    config
}

fn stage(data_dir: &Path, user: &str, password: &str) {
    let dir = data_dir.to_str().unwrap();
    let (ok, out) =
        skein(&["user", "add", user, "--mechanism", "SCRAM-SHA-512", "--password", password, "--data-dir", dir]);
    assert!(ok, "{out}");
}

/// The node flags: the harness's PLAINTEXT listener plus a SASL_SSL one, which the
/// brokers use between themselves with `password`.
fn flags(pki: &Pki, port: u16, password: &str) -> Vec<String> {
    [
        "--listeners",
        &format!("SASL_SSL://127.0.0.1:{port}"),
        "--inter-broker-listener-name",
        "SASL_SSL",
        "--listener-security-protocol-map",
        "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:SSL",
        "--ssl-keystore-pem",
        pki.server_cert.to_str().unwrap(),
        "--ssl-key-pem",
        pki.server_key.to_str().unwrap(),
        "--ssl-truststore-pem",
        pki.ca.to_str().unwrap(),
        "--ssl-client-auth",
        "required",
        "--sasl-enabled-mechanisms",
        "SCRAM-SHA-512",
        "--sasl-mechanism-inter-broker-protocol",
        "SCRAM-SHA-512",
        "--inter-broker-sasl-username",
        "broker",
        "--inter-broker-sasl-password",
        password,
        "--authorizer",
        "standard",
        "--super-users",
        "User:broker;User:admin",
        "--delegation-token-secret-key",
        "cluster-token-key",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

// Replication, transaction markers and a refused broker login, all over SASL_SSL with
// mutual TLS between the brokers.
#[test]
fn brokers_replicate_over_sasl_ssl_with_mtls() {
    let certificates = tempfile::tempdir().unwrap();
    let pki = pki(certificates.path(), "inter-broker");
    // Nodes 1-3 are the controller quorum's voters, node 4 a broker-only node that
    // follows the metadata log over the same SSL controller listener.
    let ports: Vec<u16> = (0..4).map(|_| broker_port()).collect();
    let mut cluster = Cluster::start_prepared(
        4,
        3,
        |id| flags(&pki, ports[(id - 1) as usize], "broker-pw"),
        |_, data_dir| {
            stage(data_dir, "broker", "broker-pw");
            stage(data_dir, "admin", "admin-pw");
        },
    );
    cluster.wait_for_brokers();
    let bootstrap: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let bootstrap = bootstrap.join(",");

    // A topic every replica must hold before a write counts.
    let admin: AdminClient<DefaultClientContext> = client(&pki, &bootstrap).create().unwrap();
    let topic = NewTopic::new(TOPIC, 3, TopicReplication::Fixed(3)).set("min.insync.replicas", "3");
    let created =
        futures_lite::future::block_on(admin.create_topics([&topic], &AdminOptions::new())).expect("create topics");
    assert!(created.iter().all(Result::is_ok), "{created:?}");

    // acks=all completes only once both followers fetched over SASL_SSL as User:broker.
    let acks = Acks::default();
    let producer: BaseProducer<Acks> = client(&pki, &bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create_with_context(acks.clone())
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    for i in 0..300 {
        let payload = format!("m{i:05}");
        loop {
            match producer.send(BaseRecord::<(), str>::to(TOPIC).partition(i % 3).payload(&payload)) {
                Ok(()) => break,
                Err((e, _)) => {
                    assert!(Instant::now() < deadline, "cannot queue: {e}");
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(40)).unwrap();
    let acked = acks.acked.load(std::sync::atomic::Ordering::Relaxed);
    let errors = acks.errors.lock().unwrap().clone();
    assert!(acked == 300 && errors.is_empty(), "{acked} of 300 acknowledged; errors: {:?}", errors.first());

    // A transaction whose coordinator and partitions sit on different brokers: its
    // markers go over SASL_SSL too, and a read_committed reader sees it.
    let transactional: BaseProducer = client(&pki, &bootstrap)
        .set("transactional.id", "secured-txn")
        .set("transaction.timeout.ms", "60000")
        .create()
        .unwrap();
    transactional.init_transactions(Duration::from_secs(60)).unwrap();
    transactional.begin_transaction().unwrap();
    for p in 0..3 {
        transactional.send(BaseRecord::<(), str>::to(TOPIC).partition(p).payload(&format!("t{p:05}"))).unwrap();
    }
    transactional.commit_transaction(Duration::from_secs(60)).unwrap();

    let consumer: BaseConsumer = client(&pki, &bootstrap)
        .set("group.id", "secured-reader")
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for p in 0..3 {
        assignment.add_partition_offset(TOPIC, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.len() < 303 && Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
            seen.insert(String::from_utf8(message.payload().unwrap().to_vec()).unwrap());
        }
    }
    assert_eq!(seen.len(), 303, "read back {} of 303 records", seen.len());
    assert!(seen.contains("t00002"));

    // A delegation token created through node 1 is in the metadata log: the
    // broker-only node 4 authenticates it (as its owner, admin) with the same key.
    let java_tls = |name: &str, sasl_jaas: &str| {
        let pem = |path: &Path| std::fs::read_to_string(path).unwrap().trim().replace('\n', "\\n");
        let path = certificates.path().join(format!("{name}.properties"));
        let properties = format!(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config={sasl_jaas}\n\
             ssl.truststore.type=PEM\nssl.truststore.certificates={}\nssl.keystore.type=PEM\n\
             ssl.keystore.certificate.chain={}\nssl.keystore.key={}\n",
            pem(&pki.ca),
            pem(&pki.client_cert),
            pem(&pki.client_key)
        );
        std::fs::write(&path, properties).unwrap();
        path.to_str().unwrap().to_string()
    };
    let scram = "org.apache.kafka.common.security.scram.ScramLoginModule required";
    let admin_config = java_tls("admin", &format!("{scram} username=\"admin\" password=\"admin-pw\";"));
    let node1 = format!("127.0.0.1:{}", ports[0]);
    let (ok, out) = common::kafka_share(
        "org.apache.kafka.tools.DelegationTokenCommand",
        &["--bootstrap-server", &node1, "--command-config", &admin_config, "--create", "--max-life-time-period", "-1"],
    );
    assert!(ok, "kafka-delegation-tokens --create:\n{out}");
    let token = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() >= 2 && f[1].len() == 88)
        .unwrap_or_else(|| panic!("no token in:\n{out}"));
    let token_config =
        java_tls("token", &format!("{scram} username=\"{}\" password=\"{}\" tokenauth=\"true\";", token[0], token[1]));
    let node4 = format!("127.0.0.1:{}", ports[3]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out) = common::kafka_share(
            "org.apache.kafka.tools.TopicCommand",
            &["--bootstrap-server", &node4, "--command-config", &token_config, "--list"],
        );
        if ok && out.lines().any(|l| l == TOPIC) {
            break;
        }
        assert!(Instant::now() < deadline, "node 4 never took the token:\n{out}");
        std::thread::sleep(Duration::from_millis(500));
    }

    // User:ANONYMOUS, on the PLAINTEXT listener, is no broker: a follower's fetch
    // from it lacks CLUSTER_ACTION, and each partition is refused as Kafka refuses
    // it, with TOPIC_AUTHORIZATION_FAILED.
    let follower_fetch = FetchRequest::default().with_replica_id(BrokerId(3)).with_max_wait_ms(0).with_topics(vec![
        fetch_request::FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(vec![fetch_request::FetchPartition::default().with_partition(0)]),
    ]);
    let refused: FetchResponse = RawClient::connect(&cluster.node(1).bootstrap()).call(&follower_fetch, 12);
    let codes: Vec<i16> = refused.responses.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect();
    assert_eq!(codes, [29], "a follower fetch as User:ANONYMOUS: {refused:?}");

    // The controller listener is SSL with certificates both ways: a stranger's
    // plaintext hello is not taken, however well it names the cluster.
    let voters = cluster.node(1).extra.iter().skip_while(|a| *a != "--controller-voters").nth(1).unwrap().clone();
    let controller = voters.split(',').next().unwrap().split_once('@').unwrap().1.to_string();
    let mut stranger = std::net::TcpStream::connect(&controller).unwrap();
    stranger.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut hello = vec![0, 0, 0, 9, 0];
    hello.extend_from_slice(&99u64.to_be_bytes());
    std::io::Write::write_all(&mut stranger, &hello).unwrap();
    let mut answer = Vec::new();
    let _ = std::io::Read::read_to_end(&mut stranger, &mut answer);
    assert!(answer.is_empty() || answer[0] == 0x15, "a plaintext hello got {answer:?}, not a TLS alert or a close");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cluster.node(1).log().contains("controller connection refused at the TLS handshake") {
        assert!(Instant::now() < deadline, "node 1 did not refuse the stranger at the TLS handshake");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Node 3 back with a wrong password: the leaders it follows refuse its login, it
    // says so, and they count the failures.
    let failures_before: i64 =
        [1, 2, 4].iter().map(|&id| metric(cluster.node(id), "skein_sasl_authentication_failures_total")).sum();
    let node = cluster.node_mut(3);
    node.stop();
    for arg in node.extra.iter_mut().filter(|arg| *arg == "broker-pw") {
        *arg = "wrong-pw".into();
    }
    node.restart();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cluster.node(3).log().contains("the leader refused this broker's login") {
        assert!(Instant::now() < deadline, "node 3 never reported a refused login:\n{}", cluster.node(3).log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let failures: i64 =
        [1, 2, 4].iter().map(|&id| metric(cluster.node(id), "skein_sasl_authentication_failures_total")).sum();
    assert!(failures > failures_before, "no failed login counted: {failures_before} then {failures}");
}
