//! Apache Kafka 4.1's own command-line tools, run unchanged (their main classes on a
//! Maven-resolved classpath, as the `kafka-*.sh` scripts run them) against a Skein
//! node: the commands a Kafka operator types. `kafka-dump-log` then decodes the
//! segment, offset index and time index files Skein wrote. The cluster tools
//! (`kafka-reassign-partitions`, `kafka-leader-election`, `kafka-metadata-quorum`)
//! are in tests/cluster.rs.

mod common;

use common::{kafka_tool, Broker};

/// Runs a tool that must succeed; returns its output.
fn ok(main: &str, args: &[&str]) -> String {
    ok_with(main, args, "")
}

fn ok_with(main: &str, args: &[&str], stdin: &str) -> String {
    let (success, output) = kafka_tool(main, args, stdin);
    assert!(success, "{main} {args:?} failed:\n{output}");
    output
}

const TOPICS: &str = "org.apache.kafka.tools.TopicCommand";
const CONFIGS: &str = "org.apache.kafka.tools.ConfigCommand";
const GROUPS: &str = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand";

// kafka-topics, kafka-configs, kafka-console-producer and -consumer (keys and
// headers), kafka-consumer-groups, kafka-get-offsets, kafka-delete-records,
// kafka-log-dirs, kafka-producer-perf-test and kafka-consumer-perf-test, each as an
// operator runs it; then, with the node stopped, kafka-dump-log decodes its files and
// agrees with what was produced.
#[test]
fn kafka_tools_work_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Broker::start(dir.path(), "2", &[]);
    let bootstrap = node.bootstrap();
    let b = bootstrap.as_str();

    // kafka-topics: create (with a topic config Kafka's own tool sets), describe, alter,
    // list, delete; a duplicate is refused with Kafka's message.
    let created = ok(
        TOPICS,
        &["--bootstrap-server", b, "--create", "--topic", "orders", "--partitions", "3", "--replication-factor", "1"]
            .iter()
            .chain(&["--config", "compression.type=producer", "--config", "retention.ms=86400000"])
            .copied()
            .collect::<Vec<_>>(),
    );
    assert!(created.contains("Created topic orders."), "{created}");
    let (duplicate, output) =
        kafka_tool(TOPICS, &["--bootstrap-server", b, "--create", "--topic", "orders", "--partitions", "1"], "");
    assert!(!duplicate && output.contains("already exists"), "{output}");
    let described = ok(TOPICS, &["--bootstrap-server", b, "--describe", "--topic", "orders"]);
    assert!(described.contains("PartitionCount: 3") && described.contains("ReplicationFactor: 1"), "{described}");
    assert!(described.contains("compression.type=producer") && described.contains("retention.ms=86400000"));
    assert_eq!(described.matches("Leader: 1").count(), 3, "{described}");
    ok(TOPICS, &["--bootstrap-server", b, "--alter", "--topic", "orders", "--partitions", "4"]);
    let described = ok(TOPICS, &["--bootstrap-server", b, "--describe", "--topic", "orders"]);
    assert!(described.contains("PartitionCount: 4"), "{described}");
    ok(TOPICS, &["--bootstrap-server", b, "--create", "--topic", "doomed", "--partitions", "1"]);
    assert!(ok(TOPICS, &["--bootstrap-server", b, "--list"]).lines().any(|l| l == "doomed"));
    ok(TOPICS, &["--bootstrap-server", b, "--delete", "--topic", "doomed"]);
    assert!(!ok(TOPICS, &["--bootstrap-server", b, "--list"]).lines().any(|l| l == "doomed"));

    // kafka-configs: topic overrides added and removed; the broker's configs described.
    let topic = ["--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "orders"];
    let alter = [&topic[..], &["--alter", "--add-config", "retention.ms=3600000,max.message.bytes=2000000"]].concat();
    assert!(ok(CONFIGS, &alter).contains("Completed updating config for topic orders."));
    ok(CONFIGS, &[&topic[..], &["--alter", "--delete-config", "compression.type"]].concat());
    let configs = ok(CONFIGS, &[&topic[..], &["--describe"]].concat());
    assert!(configs.contains("retention.ms=3600000") && configs.contains("max.message.bytes=2000000"), "{configs}");
    assert!(!configs.contains("compression.type="), "{configs}");
    let broker = ok(
        CONFIGS,
        &["--bootstrap-server", b, "--entity-type", "brokers", "--entity-name", "1", "--describe", "--all"],
    );
    assert!(broker.contains("All configs for broker 1 are:") && broker.contains("log.retention.bytes=-1"), "{broker}");

    // kafka-console-producer with keys and headers, kafka-console-consumer printing them.
    let lines = "trace:a1,tenant:x\tk1\tfirst\ntrace:a2\tk2\tsecond\n";
    let properties = ["--property", "parse.key=true", "--property", "parse.headers=true"];
    ok_with(
        "org.apache.kafka.tools.ConsoleProducer",
        &[&["--bootstrap-server", b, "--topic", "orders"][..], &properties].concat(),
        lines,
    );
    let consumed = ok(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        &["--bootstrap-server", b, "--topic", "orders", "--from-beginning", "--max-messages", "2", "--group", "ops"]
            .iter()
            .chain(&["--property", "print.key=true", "--property", "print.headers=true"])
            .copied()
            .collect::<Vec<_>>(),
    );
    assert!(consumed.contains("trace:a1,tenant:x\tk1\tfirst"), "{consumed}");
    assert!(consumed.contains("trace:a2\tk2\tsecond"), "{consumed}");
    assert!(consumed.contains("Processed a total of 2 messages"), "{consumed}");

    // kafka-consumer-groups: list, describe (committed offsets and lag), reset, delete.
    assert!(ok(GROUPS, &["--bootstrap-server", b, "--list"]).lines().any(|l| l.trim() == "ops"));
    let group = ok(GROUPS, &["--bootstrap-server", b, "--describe", "--group", "ops"]);
    let committed: i64 = group
        .lines()
        .filter(|l| l.starts_with("ops "))
        .map(|l| l.split_whitespace().nth(3).unwrap().parse::<i64>().unwrap_or(0))
        .sum();
    assert_eq!(committed, 2, "{group}");
    let reset = ok(
        GROUPS,
        &["--bootstrap-server", b, "--reset-offsets", "--group", "ops", "--topic", "orders"]
            .iter()
            .chain(&["--to-earliest", "--execute"])
            .copied()
            .collect::<Vec<_>>(),
    );
    assert!(reset.lines().filter(|l| l.starts_with("ops ")).all(|l| l.trim_end().ends_with(" 0")), "{reset}");
    let deleted = ok(GROUPS, &["--bootstrap-server", b, "--delete", "--group", "ops"]);
    assert!(deleted.contains("Deletion of requested consumer groups ('ops') was successful."), "{deleted}");

    // kafka-producer-perf-test and kafka-consumer-perf-test on a one-partition topic.
    ok(TOPICS, &["--bootstrap-server", b, "--create", "--topic", "perf", "--partitions", "1"]);
    let props = format!("bootstrap.servers={b}");
    let produced = ok(
        "org.apache.kafka.tools.ProducerPerformance",
        &["--topic", "perf", "--num-records", "2000", "--record-size", "100", "--throughput", "-1"]
            .iter()
            .chain(&["--producer-props", props.as_str(), "acks=all"])
            .copied()
            .collect::<Vec<_>>(),
    );
    assert!(produced.contains("2000 records sent"), "{produced}");
    let read = ok(
        "org.apache.kafka.tools.ConsumerPerformance",
        &["--bootstrap-server", b, "--topic", "perf", "--messages", "2000", "--timeout", "30000"],
    );
    let data = read.lines().last().unwrap_or_default();
    assert_eq!(data.split(',').nth(4).map(str::trim), Some("2000"), "{read}");

    // kafka-get-offsets, kafka-delete-records, kafka-log-dirs.
    let offsets = ok("org.apache.kafka.tools.GetOffsetShell", &["--bootstrap-server", b, "--topic", "perf"]);
    assert_eq!(offsets.trim(), "perf:0:2000");
    let plan = dir.path().join("delete.json");
    std::fs::write(&plan, r#"{"partitions":[{"topic":"perf","partition":0,"offset":500}],"version":1}"#).unwrap();
    let plan = plan.to_str().unwrap();
    let deleted =
        ok("org.apache.kafka.tools.DeleteRecordsCommand", &["--bootstrap-server", b, "--offset-json-file", plan]);
    assert!(deleted.contains("partition: perf-0\tlow_watermark: 500"), "{deleted}");
    let earliest =
        ok("org.apache.kafka.tools.GetOffsetShell", &["--bootstrap-server", b, "--topic", "perf", "--time", "-2"]);
    assert_eq!(earliest.trim(), "perf:0:500");
    let dirs =
        ok("org.apache.kafka.tools.LogDirsCommand", &["--bootstrap-server", b, "--describe", "--topic-list", "perf"]);
    let json = dirs.lines().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("{dirs}"));
    let json: serde_json::Value = serde_json::from_str(json).unwrap();
    let partition = &json["brokers"][0]["logDirs"][0]["partitions"][0];
    assert_eq!(partition["partition"], "perf-0", "{json}");
    assert!(partition["size"].as_u64().unwrap() > 200_000, "{json}");

    // kafka-dump-log decodes what Skein wrote: every batch valid, the records from
    // the log start on, and offset and time index entries that point into the log.
    node.stop();
    let partition_dir = node.data_dir.join("perf-0");
    let mut segments: Vec<_> = std::fs::read_dir(&partition_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    let segment = segments[0].to_str().unwrap().to_string();
    let dump = ok("org.apache.kafka.tools.DumpLogSegments", &["--files", &segment, "--print-data-log"]);
    let batches: Vec<&str> = dump.lines().filter(|l| l.starts_with("baseOffset:")).collect();
    assert!(!batches.is_empty() && batches.iter().all(|l| l.contains("isvalid: true")), "{dump}");
    let records: Vec<&str> = dump.lines().filter(|l| l.starts_with("| offset:")).collect();
    assert_eq!(records.len(), 2000, "the segment holds every record produced (DeleteRecords moves only the log start)");
    assert!(records.iter().all(|l| l.contains("valueSize: 100")));
    let index = segment.replace(".log", ".index");
    let time_index = segment.replace(".log", ".timeindex");
    let dump = ok("org.apache.kafka.tools.DumpLogSegments", &["--files", &format!("{index},{time_index}")]);
    let offsets: Vec<u64> = dump
        .lines()
        .filter(|l| l.starts_with("offset:"))
        .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
        .collect();
    assert!(!offsets.is_empty() && offsets.windows(2).all(|w| w[0] < w[1]), "{dump}");
    assert!(offsets.iter().all(|&o| o < 2000), "{dump}");
    assert!(dump.lines().any(|l| l.starts_with("timestamp:")), "{dump}");
    assert!(!dump.contains("Mismatches") && !dump.contains("is corrupt"), "{dump}");
}

const TRANSACTIONS: &str = "org.apache.kafka.tools.TransactionsCommand";

/// A read_committed consumer's view of `topic`'s partition 0 end (its last stable
/// offset), through librdkafka.
fn last_stable_offset(bootstrap: &str, topic: &str) -> i64 {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "lso-probe")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    consumer.fetch_watermarks(topic, 0, std::time::Duration::from_secs(10)).unwrap().1
}

fn skein(args: &[&str]) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_skein")).args(args).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "skein {args:?} failed:\n{text}");
    text
}

// kafka-transactions (list, describe, describe-producers, abort) and
// `skein txn` over a transaction left open by a producer that stopped talking: both
// see it, and aborting it at the partition (the path for hanging transactions)
// releases read_committed consumers; kafka-dump-log then reads the segment's
// `.txnindex` and its ABORT marker.
#[test]
fn kafka_transactions_tool_and_skein_txn() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let dir = tempfile::tempdir().unwrap();
    let mut node = Broker::start(dir.path(), "2", &[]);
    let bootstrap = node.bootstrap();
    let b = bootstrap.as_str();
    ok(TOPICS, &["--bootstrap-server", b, "--create", "--topic", "ledger", "--partitions", "1"]);
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", b)
        .set("transactional.id", "ledger-writer")
        .set("transaction.timeout.ms", "900000")
        .create()
        .unwrap();
    producer.init_transactions(std::time::Duration::from_secs(30)).unwrap();
    producer.begin_transaction().unwrap();
    for n in 0..3 {
        producer.send(BaseRecord::<(), str>::to("ledger").partition(0).payload(&format!("entry-{n}"))).unwrap();
    }
    producer.flush(std::time::Duration::from_secs(10)).unwrap();
    assert_eq!(last_stable_offset(b, "ledger"), 0, "the open transaction holds read_committed back");

    let listed = ok(TRANSACTIONS, &["--bootstrap-server", b, "list"]);
    assert!(listed.contains("ledger-writer") && listed.contains("Ongoing"), "{listed}");
    let described = ok(TRANSACTIONS, &["--bootstrap-server", b, "describe", "--transactional-id", "ledger-writer"]);
    assert!(described.contains("Ongoing") && described.contains("ledger-0"), "{described}");
    let producers =
        ok(TRANSACTIONS, &["--bootstrap-server", b, "describe-producers", "--topic", "ledger", "--partition", "0"]);
    let row = producers.lines().find(|l| l.split_whitespace().next().is_some_and(|w| w.parse::<i64>().is_ok()));
    let row: Vec<&str> = row.unwrap_or_else(|| panic!("no producer row:\n{producers}")).split_whitespace().collect();
    // ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence LastTimestamp CurrentTransactionStartOffset
    assert_eq!(row.last(), Some(&"0"), "the transaction starts at offset 0: {producers}");
    let ours = skein(&["txn", "list", "--bootstrap-server", b]);
    assert!(ours.contains("ledger-writer") && ours.contains("Ongoing"), "{ours}");
    let ours = skein(&["txn", "describe", "ledger-writer", "--bootstrap-server", b]);
    assert!(ours.contains("state: Ongoing") && ours.contains("partition: ledger:0"), "{ours}");
    let ours = skein(&["txn", "producers", "ledger:0", "--bootstrap-server", b]);
    assert!(ours.contains("open transaction from offset 0"), "{ours}");

    // The producer goes silent; an operator aborts its transaction where it hangs.
    drop(producer);
    let aborted = ok(
        TRANSACTIONS,
        &["--bootstrap-server", b, "abort", "--topic", "ledger", "--partition", "0", "--start-offset", "0"],
    );
    assert!(!aborted.to_lowercase().contains("error"), "{aborted}");
    assert_eq!(last_stable_offset(b, "ledger"), 4, "three records and the abort marker");
    let producers = skein(&["txn", "producers", "ledger:0", "--bootstrap-server", b]);
    assert!(producers.contains("open transaction from none"), "{producers}");
    // `skein txn abort` refuses what is not there.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["txn", "abort", "ledger:0", "--start-offset", "0", "--bootstrap-server", b])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("no open transaction starts at offset 0"));
    node.stop();
    // The segment's `.txnindex` lists the aborted transaction as Kafka's tools read it,
    // and kafka-dump-log shows the marker as a control batch.
    let partition_dir = node.data_dir.join("ledger-0");
    let txn_index = partition_dir.join("00000000000000000000.txnindex");
    let dump = ok("org.apache.kafka.tools.DumpLogSegments", &["--files", txn_index.to_str().unwrap()]);
    let entry = dump.lines().find(|l| l.contains("producerId:")).unwrap_or_else(|| panic!("{dump}"));
    assert!(entry.contains("firstOffset: 0") && entry.contains("lastOffset: 3"), "{dump}");
    assert!(entry.contains("lastStableOffset: 4"), "{dump}");
    let segment = partition_dir.join("00000000000000000000.log");
    let dump =
        ok("org.apache.kafka.tools.DumpLogSegments", &["--files", segment.to_str().unwrap(), "--print-data-log"]);
    assert!(dump.lines().any(|l| l.contains("isControl: true") && l.contains("isTransactional: true")), "{dump}");
    assert!(dump.contains("endTxnMarker: ABORT"), "{dump}");
}

const ACLS: &str = "org.apache.kafka.tools.AclCommand";

// kafka-acls and kafka-configs' client quotas, unchanged, against a node with the
// standard authorizer, as its super user over SASL_PLAINTEXT (`--command-config`):
// ACLs added, listed and removed, and they take effect for another user; quotas set
// for a user and a client id, described, and removed.
#[test]
fn kafka_acls_and_quotas_tools() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("plain-users");
    std::fs::write(&users, "admin:admin-secret\nalice:alice-secret\n").unwrap();
    let port = common::broker_port();
    let listeners = format!("SASL_PLAINTEXT://127.0.0.1:{port}");
    let _node = Broker::start(
        dir.path(),
        "1",
        &[
            "--listeners",
            &listeners,
            "--sasl-enabled-mechanisms",
            "PLAIN",
            "--sasl-plain-users",
            users.to_str().unwrap(),
            "--authorizer",
            "standard",
            "--super-users",
            "User:admin",
        ],
    );
    let client = |user: &str| {
        let path = dir.path().join(format!("{user}.properties"));
        let jaas = format!(
            "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"{user}\" password=\"{user}-secret\";"
        );
        std::fs::write(
            &path,
            format!("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config={jaas}\n"),
        )
        .unwrap();
        path.to_str().unwrap().to_string()
    };
    let (admin, alice) = (client("admin"), client("alice"));
    let b = format!("127.0.0.1:{port}");
    let b = b.as_str();
    ok(
        TOPICS,
        &["--bootstrap-server", b, "--command-config", &admin, "--create", "--topic", "audit", "--partitions", "1"],
    );
    // alice sees nothing and may create nothing until the ACLs say so.
    let listed = ok(TOPICS, &["--bootstrap-server", b, "--command-config", &alice, "--list"]);
    assert!(!listed.contains("audit"), "{listed}");
    let added = ok(
        ACLS,
        &[
            "--bootstrap-server",
            b,
            "--command-config",
            &admin,
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Describe",
            "--operation",
            "Read",
            "--topic",
            "audit",
        ],
    );
    assert!(added.contains("User:alice") && added.contains("READ"), "{added}");
    ok(
        ACLS,
        &[
            "--bootstrap-server",
            b,
            "--command-config",
            &admin,
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Create",
            "--topic",
            "team-",
            "--resource-pattern-type",
            "prefixed",
        ],
    );
    let listed = ok(TOPICS, &["--bootstrap-server", b, "--command-config", &alice, "--list"]);
    assert!(listed.contains("audit"), "{listed}");
    ok(TOPICS, &["--bootstrap-server", b, "--command-config", &alice, "--create", "--topic", "team-a"]);
    let (created, output) =
        kafka_tool(TOPICS, &["--bootstrap-server", b, "--command-config", &alice, "--create", "--topic", "other"], "");
    assert!(!created && output.contains("Authorization failed"), "{output}");
    let acls = ok(ACLS, &["--bootstrap-server", b, "--command-config", &admin, "--list", "--topic", "audit"]);
    assert!(acls.contains("principal=User:alice") && acls.contains("operation=DESCRIBE"), "{acls}");
    let (listed_as_alice, output) =
        kafka_tool(ACLS, &["--bootstrap-server", b, "--command-config", &alice, "--list"], "");
    assert!(!listed_as_alice && output.contains("ClusterAuthorizationException"), "{output}");
    ok(
        ACLS,
        &[
            "--bootstrap-server",
            b,
            "--command-config",
            &admin,
            "--remove",
            "--force",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Describe",
            "--operation",
            "Read",
            "--topic",
            "audit",
        ],
    );
    let acls = ok(ACLS, &["--bootstrap-server", b, "--command-config", &admin, "--list", "--topic", "audit"]);
    assert!(!acls.contains("User:alice"), "{acls}");

    // kafka-configs' client quotas (AlterClientQuotas, DescribeClientQuotas).
    let config = |args: &[&str]| {
        let mut all = vec!["--bootstrap-server", b, "--command-config", &admin];
        all.extend_from_slice(args);
        ok(CONFIGS, &all)
    };
    config(&[
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--entity-type",
        "clients",
        "--entity-default",
        "--add-config",
        "producer_byte_rate=1048576,consumer_byte_rate=2097152",
    ]);
    config(&[
        "--alter",
        "--entity-type",
        "clients",
        "--entity-name",
        "reporter",
        "--add-config",
        "request_percentage=50",
    ]);
    let described = config(&[
        "--describe",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--entity-type",
        "clients",
        "--entity-default",
    ]);
    assert!(
        described.contains("producer_byte_rate=1048576.0") && described.contains("consumer_byte_rate=2097152.0"),
        "{described}"
    );
    let described = config(&["--describe", "--entity-type", "clients", "--entity-name", "reporter"]);
    assert!(described.contains("request_percentage=50.0"), "{described}");
    config(&[
        "--alter",
        "--entity-type",
        "clients",
        "--entity-name",
        "reporter",
        "--delete-config",
        "request_percentage",
    ]);
    let described = config(&["--describe", "--entity-type", "clients", "--entity-name", "reporter"]);
    assert!(!described.contains("request_percentage"), "{described}");
}

/// The heartbeat interval a consumer-protocol (KIP-848) group's coordinator gives a
/// new member of `group`, once the coordinator is ready.
fn heartbeat_interval_ms(bootstrap: &str, group: &str) -> i32 {
    use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, GroupId, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let mut client = common::RawClient::connect(bootstrap);
    let request = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_static_str("orders"))]))
        .with_topic_partitions(Some(vec![]));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let response = client.call(&request, 0);
        if response.error_code == 0 {
            return response.heartbeat_interval_ms;
        }
        assert!(std::time::Instant::now() < deadline, "heartbeat of {group}: {response:?}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

// kafka-configs on GROUP resources: a group's overrides are set, checked as Kafka 4.4
// checks them (its message for a value out of range), shown with every group config
// Kafka 4.4 has, kept across a restart, and acted on: the group's coordinator gives
// its members the overridden heartbeat interval, and other groups the node's.
#[test]
fn kafka_configs_for_groups() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Broker::start(dir.path(), "1", &[]);
    let bootstrap = node.bootstrap();
    let b = bootstrap.as_str();
    let group = ["--bootstrap-server", b, "--entity-type", "groups", "--entity-name", "billing"];
    let alter = [
        &group[..],
        &["--alter", "--add-config", "consumer.heartbeat.interval.ms=6000,share.auto.offset.reset=earliest"],
    ]
    .concat();
    assert!(ok(CONFIGS, &alter).contains("Completed updating config for group billing."));
    let (refused, output) = kafka_tool(
        CONFIGS,
        &[&group[..], &["--alter", "--add-config", "consumer.session.timeout.ms=1000"]].concat(),
        "",
    );
    assert!(
        !refused && output.contains("consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive"),
        "{output}"
    );
    let (refused, output) =
        kafka_tool(CONFIGS, &[&group[..], &["--alter", "--add-config", "share.fetch.max.bytes=1"]].concat(), "");
    assert!(!refused && output.contains("Unknown group config name: share.fetch.max.bytes"), "{output}");
    let described = ok(CONFIGS, &[&group[..], &["--describe"]].concat());
    assert!(described.contains("consumer.heartbeat.interval.ms=6000"), "{described}");
    assert!(described.contains("share.auto.offset.reset=earliest"), "{described}");
    assert!(!described.contains("consumer.session.timeout.ms"), "{described}");
    let all = ok(CONFIGS, &[&group[..], &["--describe", "--all"]].concat());
    for config in [
        "share.record.lock.duration.ms=30000",
        "streams.num.standby.replicas=0",
        "share.isolation.level=read_uncommitted",
        "consumer.session.timeout.ms=45000",
    ] {
        assert!(all.contains(config), "{config} in {all}");
    }
    // Kafka 4.4's 21 group configs and Skein's own skein.share.key.ordered.
    assert!(all.contains("skein.share.key.ordered=false"), "{all}");
    assert_eq!(all.lines().filter(|l| l.contains("sensitive=")).count(), 22, "{all}");
    assert_eq!(heartbeat_interval_ms(b, "billing"), 6000);
    assert_eq!(heartbeat_interval_ms(b, "shipping"), 5000);

    node.stop();
    node.restart();
    let bootstrap = node.bootstrap();
    let group = ["--bootstrap-server", bootstrap.as_str(), "--entity-type", "groups", "--entity-name", "billing"];
    let described = ok(CONFIGS, &[&group[..], &["--describe"]].concat());
    assert!(described.contains("consumer.heartbeat.interval.ms=6000"), "{described}");
    ok(CONFIGS, &[&group[..], &["--alter", "--delete-config", "consumer.heartbeat.interval.ms"]].concat());
    let described = ok(CONFIGS, &[&group[..], &["--describe"]].concat());
    assert!(!described.contains("consumer.heartbeat.interval.ms"), "{described}");
    assert_eq!(heartbeat_interval_ms(bootstrap.as_str(), "billing"), 5000);
}

// kafka-client-metrics (KIP-714): a subscription altered, listed, described, refused an
// interval out of bounds with Kafka's message, and deleted; `kafka-configs` sees the
// same resource. The outputs are those of Kafka 4.4 for the same commands.
#[test]
fn kafka_client_metrics_manages_subscriptions() {
    const METRICS: &str = "org.apache.kafka.tools.ClientMetricsCommand";
    let dir = tempfile::tempdir().unwrap();
    let node = Broker::start(dir.path(), "1", &[]);
    let bootstrap = node.bootstrap();
    let b = bootstrap.as_str();
    let run = |args: &[&str]| kafka_tool(METRICS, &[&["--bootstrap-server", b][..], args].concat(), "");
    let (ok, altered) =
        run(&["--alter", "--name", "apps", "--metrics", "org.apache.kafka.producer.", "--interval", "1000"]);
    assert!(ok && altered.contains("Altered client metrics config for apps."), "{altered}");
    let (ok, altered) = run(&["--alter", "--name", "apps", "--match", "client_id=app-.*"]);
    assert!(ok && altered.contains("Altered client metrics config for apps."), "{altered}");
    let (ok, listed) = run(&["--list"]);
    assert!(ok && listed.lines().any(|l| l.trim() == "apps"), "{listed}");
    let (ok, described) = run(&["--describe", "--name", "apps"]);
    assert!(ok && described.contains("Client metrics configs for apps are:"), "{described}");
    for line in ["  interval.ms=1000", "  match=client_id=app-.*", "  metrics=org.apache.kafka.producer."] {
        assert!(described.lines().any(|l| l == line), "{line} in {described}");
    }
    let (ok, refused) = run(&["--alter", "--name", "apps", "--interval", "50"]);
    assert!(
        !ok || refused.contains("Invalid value 50 for interval.ms, interval must be between 100 and 3600000 (1 hour)"),
        "{refused}"
    );
    assert!(refused.contains("interval must be between 100 and 3600000"), "{refused}");
    let (_, bad) = run(&["--alter", "--name", "apps", "--match", "client_colour=x"]);
    assert!(bad.contains("Illegal client matching pattern: client_colour=x"), "{bad}");
    let configs = ok_with(
        CONFIGS,
        &["--bootstrap-server", b, "--entity-type", "client-metrics", "--entity-name", "apps", "--describe", "--all"],
        "",
    );
    assert!(configs.contains("All configs for client-metric apps are:"), "{configs}");
    let line = "  interval.ms=1000 sensitive=false synonyms={DYNAMIC_CLIENT_METRICS_CONFIG:interval.ms=1000}";
    assert!(configs.lines().any(|l| l == line), "{configs}");
    let (ok, deleted) = run(&["--delete", "--name", "apps"]);
    assert!(ok && deleted.contains("Deleted client metrics config for apps."), "{deleted}");
    let (_, listed) = run(&["--list"]);
    assert!(!listed.lines().any(|l| l.trim() == "apps"), "{listed}");
}

const CLUSTER: &str = "org.apache.kafka.tools.ClusterTool";

/// The brokers a node's Metadata names, and the leader of `topic`'s partition 0.
fn brokers_and_leader(bootstrap: &str, topic: &str) -> (Vec<i32>, i32) {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{MetadataRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let request = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_string(topic.to_string()))))
    ]));
    let response = common::RawClient::connect(bootstrap).call(&request, 12);
    let brokers = response.brokers.iter().map(|b| b.node_id.0).collect();
    let leader = response.topics.first().and_then(|t| t.partitions.first()).map_or(-1, |p| p.leader_id.0);
    (brokers, leader)
}

// kafka-cluster (Kafka 4.4's ClusterTool): cluster-id; `unregister` of an id no broker
// has, refused with Kafka's message; and of the running node itself, which leaves the
// cluster (its partition loses its leader) and registers again with its next
// heartbeat, as a Kafka broker does, its partition led again.
#[test]
fn kafka_cluster_unregisters_brokers() {
    let dir = tempfile::tempdir().unwrap();
    let node = Broker::start(dir.path(), "1", &[]);
    let bootstrap = node.bootstrap();
    let b = bootstrap.as_str();
    let id = ok(CLUSTER, &["cluster-id", "--bootstrap-server", b]);
    assert!(id.starts_with("Cluster ID: "), "{id}");
    ok(TOPICS, &["--bootstrap-server", b, "--create", "--topic", "stays", "--partitions", "1"]);
    let (ok_, refused) = kafka_tool(CLUSTER, &["unregister", "--bootstrap-server", b, "--id", "7"], "");
    assert!(!ok_ && refused.contains("Broker ID 7 is not currently registered"), "{refused}");
    let unregistered = ok(CLUSTER, &["unregister", "--bootstrap-server", b, "--id", "1"]);
    assert!(unregistered.contains("Broker 1 is no longer registered."), "{unregistered}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (brokers, leader) = brokers_and_leader(b, "stays");
        if brokers == [1] && leader == 1 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never registered again: {brokers:?}, leader {leader}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

// kafka-reassign-partitions with `log_dirs` (AlterReplicaLogDirs): a replica "moved"
// to the node's data directory, where it is, completes; another directory is refused
// as Kafka refuses a log directory it does not have; `kafka-log-dirs` names the one
// directory, holding the partition.
#[test]
fn reassignments_name_the_log_directory() {
    let dir = tempfile::tempdir().unwrap();
    let node = Broker::start(dir.path(), "1", &[]);
    let bootstrap = node.bootstrap();
    let b = bootstrap.as_str();
    ok(TOPICS, &["--bootstrap-server", b, "--create", "--topic", "placed", "--partitions", "2"]);
    let reassign = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand";
    let data_dir = std::path::absolute(&node.data_dir).unwrap();
    let plan = |log_dir: &str| {
        let path = dir.path().join(format!("plan-{}.json", log_dir.len()));
        let json = format!(
            r#"{{"version":1,"partitions":[{{"topic":"placed","partition":1,"replicas":[1],"log_dirs":["{log_dir}"]}}]}}"#
        );
        std::fs::write(&path, json).unwrap();
        path.to_str().unwrap().to_string()
    };
    let here = plan(data_dir.to_str().unwrap());
    let executed = ok(reassign, &["--bootstrap-server", b, "--execute", "--reassignment-json-file", &here]);
    let started = format!(
        "Successfully started moving log directory to {} for replica placed-1 with broker 1",
        data_dir.display()
    );
    assert!(executed.contains(&started), "{executed}");
    let verified = ok(reassign, &["--bootstrap-server", b, "--verify", "--reassignment-json-file", &here]);
    assert!(verified.contains("Reassignment of replica placed-1-1 completed successfully."), "{verified}");
    let (moved, refused) = kafka_tool(
        reassign,
        &["--bootstrap-server", b, "--execute", "--reassignment-json-file", &plan("/nowhere/skein-logs")],
        "",
    );
    assert!(!moved && refused.contains("LogDirNotFoundException"), "{refused}");
    let described = ok(
        "org.apache.kafka.tools.LogDirsCommand",
        &["--bootstrap-server", b, "--describe", "--topic-list", "placed", "--broker-list", "1"],
    );
    assert!(described.contains(&format!("\"logDir\":\"{}\"", node.data_dir.display())), "{described}");
}
