//! Virtual brokers (`--virtual-brokers BASE_PORT`): each shard is a broker of its own to
//! clients, so librdkafka producers and a consumer group send every partition's
//! requests to the shard that owns it, with no cross-shard hop, and lose nothing; a
//! partition moved to another shard is still served and then found at its new broker.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{broker_port, port_pair, Broker};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

fn skein(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_skein")).args(args).output().unwrap()
}

/// The sum of a counter over the shards.
fn total(broker: &Broker, name: &str) -> u64 {
    broker
        .metrics()
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The shard of each partition of `topic` (admin endpoint).
fn placement(broker: &Broker, topic: &str) -> BTreeMap<i32, u16> {
    let admin = format!("127.0.0.1:{}", broker.admin_port);
    let mut stream = std::net::TcpStream::connect(admin).unwrap();
    std::io::Write::write_all(&mut stream, b"GET /v1/placement HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut response = String::new();
    std::io::Read::read_to_string(&mut stream, &mut response).unwrap();
    let rows: Vec<serde_json::Value> = serde_json::from_str(&response[response.find('[').unwrap()..]).unwrap();
    rows.iter()
        .filter(|r| r["topic"] == topic)
        .map(|r| (r["partition"].as_i64().unwrap() as i32, r["shard"].as_u64().unwrap() as u16))
        .collect()
}

/// Each partition's leader as Metadata names it: (id, port).
fn leaders(bootstrap: &str, topic: &str) -> BTreeMap<i32, (i32, u16)> {
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", bootstrap).create().unwrap();
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    let ports: BTreeMap<i32, u16> = metadata.brokers().iter().map(|b| (b.id(), b.port() as u16)).collect();
    let topic = &metadata.topics()[0];
    topic.partitions().iter().map(|p| (p.id(), (p.leader(), ports[&p.leader()]))).collect()
}

#[test]
fn each_shard_is_a_broker_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let base = port_pair();
    let broker = Broker::start(dir.path(), "2", &["--virtual-brokers", &base.to_string()]);
    let b = broker.bootstrap();
    common::create_topic(&broker, "direct", 4);

    // Metadata lists one broker per shard, and names as each partition's leader the
    // broker of the shard that owns it.
    let placed = placement(&broker, "direct");
    let led = leaders(&b, "direct");
    for (p, shard) in &placed {
        let (id, port) = led[p];
        assert_eq!(port, base + shard, "partition {p}: leader {id} on port {port}, owned by shard {shard}");
        assert_eq!(id, (1 << 24) + 1024 + i32::from(*shard), "node 1's shard {shard}");
    }
    assert!(placed.values().any(|&s| s == 0) && placed.values().any(|&s| s == 1), "{placed:?}");

    // A consumer group joins first (its coordinator is a shard's broker too).
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &b)
        .set("group.id", "direct-readers")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "200")
        .create()
        .unwrap();
    consumer.subscribe(&["direct"]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while consumer.assignment().unwrap().count() < 4 {
        assert!(Instant::now() < deadline, "the group never got its partitions");
        consumer.poll(Duration::from_millis(100));
    }

    // Producing and consuming then takes no cross-shard hop.
    let hops_before = total(&broker, "skein_cross_shard_messages_total");
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &b)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .create()
        .unwrap();
    let count = 4000;
    for i in 0..count {
        let value = format!("{i:05}");
        let record = BaseRecord::<str, str>::to("direct").partition(i % 4).key("k").payload(&value);
        producer.send(record).unwrap();
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.len() < count as usize && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            seen.push(String::from_utf8_lossy(m.payload().unwrap()).to_string());
        }
    }
    let hops = total(&broker, "skein_cross_shard_messages_total") - hops_before;
    seen.sort();
    let expected: Vec<String> = (0..count).map(|i| format!("{i:05}")).collect();
    assert!(seen == expected, "{} records read of {count}", seen.len());
    // Offset commits go to the coordinator's shard and heartbeats are answered there;
    // every produce and fetch went to its partition's own shard.
    assert_eq!(hops, 0, "{hops} partition operations crossed shards");

    // A partition moved to the other shard is still served, then found at its new
    // broker once the client refreshes its metadata.
    let (&moved, &from) = placed.iter().next().unwrap();
    let to = 1 - from;
    let admin = format!("127.0.0.1:{}", broker.admin_port);
    let out =
        skein(&["placement", "move", "direct", &moved.to_string(), "--shard", &to.to_string(), "--admin", &admin]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let value = "after-move".to_string();
    producer.send(BaseRecord::<str, str>::to("direct").partition(moved).key("k").payload(&value)).unwrap();
    producer.flush(Duration::from_secs(30)).unwrap();
    assert_eq!(leaders(&b, "direct")[&moved].1, base + to);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "the record produced after the move was not read");
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            if m.payload() == Some(value.as_bytes()) {
                assert_eq!(m.partition(), moved);
                break;
            }
        }
    }
}

// A transactional producer finds its transaction coordinator (the shard that owns
// its `__transaction_state` partition) among the virtual brokers, commits across
// partitions on both shards, and a read_committed reader sees every record.
#[test]
fn transactions_find_their_coordinator_shard() {
    let dir = tempfile::tempdir().unwrap();
    let base = port_pair();
    let broker = Broker::start(dir.path(), "2", &["--virtual-brokers", &base.to_string()]);
    let b = broker.bootstrap();
    common::create_topic(&broker, "txn-direct", 4);
    let producer: BaseProducer =
        ClientConfig::new().set("bootstrap.servers", &b).set("transactional.id", "virtual-writer").create().unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    producer.begin_transaction().unwrap();
    for i in 0..200 {
        let value = format!("t{i:03}");
        producer.send(BaseRecord::<str, str>::to("txn-direct").partition(i % 4).key("k").payload(&value)).unwrap();
    }
    producer.commit_transaction(Duration::from_secs(30)).unwrap();
    // FindCoordinator names the virtual broker of the shard that owns the
    // transactional id's `__transaction_state` partition.
    let request = kafka_protocol::messages::FindCoordinatorRequest::default()
        .with_key_type(1)
        .with_coordinator_keys(vec![kafka_protocol::protocol::StrBytes::from_static_str("virtual-writer")]);
    let response = common::RawClient::connect(&b).call(&request, 4);
    let coordinator = &response.coordinators[0];
    let partition = skein_coordinator::txn::partition_for("virtual-writer");
    let shard = placement(&broker, "__transaction_state")[&partition];
    assert_eq!(coordinator.error_code, 0, "{coordinator:?}");
    assert_eq!(coordinator.node_id.0, (1 << 24) + 1024 + i32::from(shard), "{coordinator:?}");
    assert_eq!(coordinator.port, i32::from(base + shard), "{coordinator:?}");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &b)
        .set("group.id", "txn-direct-readers")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    consumer.subscribe(&["txn-direct"]).unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.len() < 200 && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            seen.push(String::from_utf8_lossy(m.payload().unwrap()).to_string());
        }
    }
    seen.sort();
    assert_eq!(seen, (0..200).map(|i| format!("t{i:03}")).collect::<Vec<_>>());
}

// A port range that meets a listener, and ports past 65535, are refused at start with
// the reason.
#[test]
fn refused_where_it_cannot_work() {
    let dir = tempfile::tempdir().unwrap();
    let port = broker_port();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--virtual-brokers".into(), port.to_string()], "already uses port"),
        (vec!["--virtual-brokers".into(), "65535".into()], "not all valid ports"),
    ];
    for (extra, reason) in cases {
        let listener = format!("127.0.0.1:{port}");
        let data = dir.path().join("data");
        let mut args = vec!["start", "--cores", "2", "--listener", &listener, "--admin-listener", "off", "--data-dir"];
        args.push(data.to_str().unwrap());
        args.extend(extra.iter().map(String::as_str));
        let out = skein(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(reason), "{extra:?}: {stderr}");
    }
}
