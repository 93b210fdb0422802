//! MirrorMaker 2 (connect-mirror 4.3.1 from Maven Central, unchanged, tests/connect/)
//! between two Skein nodes, `primary` and `backup`, run as the dedicated
//! `org.apache.kafka.connect.mirror.MirrorMaker` with an mm2.properties written here:
//! the default replication policy mirrors `orders` to `primary.orders` with its
//! topic config; MirrorCheckpointConnector translates consumer group offsets and,
//! with sync.group.offsets.enabled, commits them on the backup, where the group
//! resumes with no gap; MM2 killed with kill -9 mid-stream and restarted loses
//! nothing and repeats only what it replicated after its last offset commit; the
//! heartbeat and checkpoint topics exist and decode.

mod common;
#[path = "connect/support.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Broker;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, TopicPartitionList};
use support::{committed_offsets, read_topic, wait_for, Jvm, Record, CLIENT_TIMEOUT};

const TOPIC: &str = "orders";
const MIRRORED: &str = "primary.orders";
const PARTITIONS: i32 = 2;

/// mm2.properties: primary->backup with the default replication policy, every interval
/// at 1 s so that the test sees offsets, checkpoints and configs move quickly. Worker
/// settings (offset flushes, the worker group's session) go under the target
/// cluster's prefix, `backup.`: MM2 ignores them at the top level.
fn mm2_properties(primary: &str, backup: &str) -> String {
    format!(
        "clusters=primary,backup\n\
         primary.bootstrap.servers={primary}\n\
         backup.bootstrap.servers={backup}\n\
         primary->backup.enabled=true\n\
         primary->backup.topics={TOPIC}\n\
         backup->primary.enabled=false\n\
         replication.policy.class=org.apache.kafka.connect.mirror.DefaultReplicationPolicy\n\
         replication.factor=1\n\
         checkpoints.topic.replication.factor=1\n\
         heartbeats.topic.replication.factor=1\n\
         offset-syncs.topic.replication.factor=1\n\
         offset.storage.replication.factor=1\n\
         status.storage.replication.factor=1\n\
         config.storage.replication.factor=1\n\
         sync.group.offsets.enabled=true\n\
         sync.group.offsets.interval.seconds=1\n\
         emit.checkpoints.interval.seconds=1\n\
         emit.heartbeats.interval.seconds=1\n\
         refresh.topics.interval.seconds=1\n\
         refresh.groups.interval.seconds=1\n\
         sync.topic.configs.interval.seconds=1\n\
         offset.lag.max=10\n\
         backup.offset.flush.interval.ms=1000\n\
         backup.session.timeout.ms=6000\n\
         backup.heartbeat.interval.ms=2000\n\
         backup.scheduled.rebalance.max.delay.ms=5000\n\
         primary.plugin.discovery=service_load\n\
         backup.plugin.discovery=service_load\n"
    )
}

/// Records `range` to `orders`: record n to partition n % 2, so that its offset there
/// is n / 2; `chunk` records every 50 ms, or all at once with `chunk` 0.
fn produce(bootstrap: &str, range: std::ops::Range<usize>, chunk: usize) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .unwrap();
    for n in range {
        let (key, value) = (n.to_string(), n.to_string());
        let record = BaseRecord::to(TOPIC).partition((n % 2) as i32).key(&key).payload(&value);
        producer.send(record).unwrap();
        producer.poll(Duration::ZERO);
        if chunk > 0 && n % chunk == chunk - 1 {
            producer.flush(Duration::from_secs(30)).unwrap();
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

fn number(record: &Record) -> usize {
    std::str::from_utf8(&record.value).unwrap().parse().unwrap()
}

/// A member of consumer group `group` on `bootstrap` reads the first `per_partition`
/// records of each partition of `topic` (pausing each partition there), commits its
/// position and leaves; returns the committed offsets.
fn consume_and_commit(bootstrap: &str, group: &str, topic: &str, per_partition: i64) -> BTreeMap<i32, i64> {
    let consumer = group_consumer(bootstrap, group, "earliest");
    consumer.subscribe(&[topic]).unwrap();
    let mut read = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while read.len() < PARTITIONS as usize || read.values().any(|&n| n < per_partition) {
        assert!(Instant::now() < deadline, "group {group} read {read:?}, {per_partition} a partition wanted");
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let count = read.entry(m.partition()).or_insert(0);
                *count += 1;
                assert!(*count <= per_partition, "partition {} read past its pause", m.partition());
                if *count == per_partition {
                    let mut partition = TopicPartitionList::new();
                    partition.add_partition(topic, m.partition());
                    consumer.pause(&partition).unwrap();
                }
            }
            Some(Err(e)) => panic!("group {group}: {e}"),
            None => {}
        }
    }
    consumer.commit_consumer_state(CommitMode::Sync).unwrap();
    let committed = committed(bootstrap, group, topic);
    consumer.unsubscribe();
    committed
}

/// A consumer of `group` that starts where the group's committed offsets say, and
/// where it has none, at `reset` (`error`: a failure).
fn group_consumer(bootstrap: &str, group: &str, reset: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", reset)
        .create()
        .unwrap()
}

/// The offsets `group` has committed on `topic`'s partitions (those it has).
fn committed(bootstrap: &str, group: &str, topic: &str) -> BTreeMap<i32, i64> {
    committed_offsets(bootstrap, group, topic, PARTITIONS)
}

/// The records `group` reads on `bootstrap` from its committed offsets until each
/// partition's last record is `last[p]`, as numbers per partition.
fn resume_group(bootstrap: &str, group: &str, topic: &str, last: [usize; 2]) -> [Vec<usize>; 2] {
    // Never reset: a group that starts without committed offsets fails the test.
    let consumer = group_consumer(bootstrap, group, "error");
    consumer.subscribe(&[topic]).unwrap();
    let mut numbers = [Vec::new(), Vec::new()];
    let deadline = Instant::now() + Duration::from_secs(60);
    while (0..2).any(|p| numbers[p].last() != Some(&last[p])) {
        assert!(Instant::now() < deadline, "group {group} on {topic} read {numbers:?}, expected up to {last:?}");
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let n = std::str::from_utf8(m.payload().unwrap()).unwrap().parse().unwrap();
                numbers[m.partition() as usize].push(n);
            }
            Some(Err(e)) => panic!("group {group} on {topic}: {e}"),
            None => {}
        }
    }
    consumer.unsubscribe();
    numbers
}

/// Records in `topic` on `bootstrap` (the high watermarks' sum).
fn record_count(bootstrap: &str, topic: &str) -> Result<i64, String> {
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", bootstrap).create().unwrap();
    let mut count = 0;
    for p in 0..PARTITIONS {
        let (_, high) = consumer.fetch_watermarks(topic, p, CLIENT_TIMEOUT).map_err(|e| e.to_string())?;
        count += high;
    }
    Ok(count)
}

/// `skein topic describe`'s output for `topic`, or its error.
fn describe(bootstrap: &str, topic: &str) -> Result<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["topic", "describe", topic, "--bootstrap-server", bootstrap])
        .output()
        .unwrap();
    match out.status.success() {
        true => Ok(String::from_utf8(out.stdout).unwrap()),
        false => Err(String::from_utf8_lossy(&out.stderr).to_string()),
    }
}

/// Reads a string of the protocol's schema type STRING (i16 length, UTF-8) at `at`.
fn read_string(bytes: &[u8], at: &mut usize) -> String {
    let len = i16::from_be_bytes([bytes[*at], bytes[*at + 1]]) as usize;
    let text = String::from_utf8(bytes[*at + 2..*at + 2 + len].to_vec()).unwrap();
    *at += 2 + len;
    text
}

fn read_i64(bytes: &[u8], at: &mut usize) -> i64 {
    let value = i64::from_be_bytes(bytes[*at..*at + 8].try_into().unwrap());
    *at += 8;
    value
}

/// A heartbeat: its (source, target) cluster aliases and timestamp (ms).
fn heartbeat(record: &Record) -> (String, String, i64) {
    let mut at = 0;
    let (source, target) = (read_string(&record.key, &mut at), read_string(&record.key, &mut at));
    // The value: a version (i16, 0) and the timestamp.
    assert_eq!(&record.value[..2], &[0, 0]);
    (source, target, i64::from_be_bytes(record.value[2..10].try_into().unwrap()))
}

/// A checkpoint: (group, topic, partition) -> (upstream offset, downstream offset).
fn checkpoint(record: &Record) -> ((String, String, i32), (i64, i64)) {
    let mut at = 0;
    let (group, topic) = (read_string(&record.key, &mut at), read_string(&record.key, &mut at));
    let partition = i32::from_be_bytes(record.key[at..at + 4].try_into().unwrap());
    assert_eq!(&record.value[..2], &[0, 0], "checkpoint version 0");
    let mut at = 2;
    let (upstream, downstream) = (read_i64(&record.value, &mut at), read_i64(&record.value, &mut at));
    ((group, topic, partition), (upstream, downstream))
}

/// The source offsets MirrorSourceConnector last committed for `orders`' partitions,
/// from its Connect offsets topic on the backup: the upstream offset of the last
/// record whose replication it recorded.
fn committed_source_offsets(backup: &str) -> BTreeMap<i32, i64> {
    let mut offsets = BTreeMap::new();
    for record in read_topic(backup, "mm2-offsets.primary.internal", 25, "read_uncommitted") {
        let key: serde_json::Value = serde_json::from_slice(&record.key).unwrap();
        let partition = &key[1];
        if key[0] == "MirrorSourceConnector" && partition["topic"] == TOPIC {
            let value: serde_json::Value = serde_json::from_slice(&record.value).unwrap();
            offsets.insert(partition["partition"].as_i64().unwrap() as i32, value["offset"].as_i64().unwrap());
        }
    }
    offsets
}

/// MirrorMaker 2, dedicated mode.
fn start_mm2(dir: &Path, primary: &str, backup: &str) -> Jvm {
    let properties = dir.join("mm2.properties");
    std::fs::write(&properties, mm2_properties(primary, backup)).unwrap();
    Jvm::start("org.apache.kafka.connect.mirror.MirrorMaker", &[properties.to_str().unwrap()], &dir.join("mm2.log"))
}

#[test]
fn mirror_maker_fails_over_a_group_and_survives_kill_9() {
    const FIRST: usize = 1000;
    const SECOND: usize = 2000;
    const THIRD: usize = 5000;
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (primary_dir, backup_dir) = (dir.path().join("primary"), dir.path().join("backup"));
    std::fs::create_dir_all(&primary_dir).unwrap();
    std::fs::create_dir_all(&backup_dir).unwrap();
    // Groups form at once: the test's own, MM2's and its workers'.
    let no_delay = ["--group-initial-rebalance-delay-ms", "0"];
    let primary_node = Broker::start(&primary_dir, "2", &no_delay);
    let backup_node = Broker::start(&backup_dir, "2", &no_delay);
    let (primary, backup) = (primary_node.bootstrap(), backup_node.bootstrap());
    // A topic config that is not the default, to be mirrored with the topic.
    let out = Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["topic", "create", TOPIC, "--partitions", &PARTITIONS.to_string()])
        .args(["--config", "retention.ms=123456789", "--bootstrap-server", &primary])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let mut mm2 = start_mm2(dir.path(), &primary, &backup);
    println!("{:?}: brokers up, MM2 starting", started.elapsed());
    // The mirrored topic appears on the backup with the source's partitions and config.
    wait_for(Duration::from_secs(90), "primary.orders with retention.ms on the backup", || {
        mm2.assert_alive();
        let description = describe(&backup, MIRRORED)?;
        match description.starts_with(&format!("topic {MIRRORED}: {PARTITIONS} partitions"))
            && description.contains("retention.ms=123456789 (DynamicTopic)")
        {
            true => Ok(()),
            false => Err(description),
        }
    });

    println!("{:?}: primary.orders mirrored with its config", started.elapsed());
    // Records flow while MM2 runs; group `failover` reads all of them and `lagging` a
    // part, each commits and leaves. Then more records come that neither has read.
    produce(&primary, 0..FIRST, 20);
    let failover = consume_and_commit(&primary, "failover", TOPIC, FIRST as i64 / 2);
    let lagging = consume_and_commit(&primary, "lagging", TOPIC, 150);
    assert_eq!(failover, BTreeMap::from([(0, FIRST as i64 / 2), (1, FIRST as i64 / 2)]));
    assert_eq!(lagging, BTreeMap::from([(0, 150), (1, 150)]));
    println!("{:?}: {FIRST} records produced, read by the groups", started.elapsed());
    let replicated = |count: usize| {
        wait_for(Duration::from_secs(60), &format!("{count} records on the backup"), || {
            match record_count(&backup, MIRRORED)? {
                n if n == count as i64 => Ok(()),
                n => Err(format!("{n} records")),
            }
        })
    };
    replicated(FIRST);
    // Before any fault the mirrored partitions hold the same records at the same
    // offsets, so a translated offset can be compared with the upstream one directly.
    // A group caught up with the replicated stream translates exactly: its offset is
    // one past the last offset sync (the last record, synced at the next commit).
    wait_for(Duration::from_secs(60), "failover's offsets synced to the backup", || {
        match committed(&backup, "failover", MIRRORED) {
            synced if synced == failover => Ok(()),
            synced => Err(format!("{synced:?}, upstream {failover:?}")),
        }
    });
    // A lagging group translates to the last offset sync at or before its offset that
    // MM2's OffsetSyncStore still holds (it keeps syncs at power-of-two spacings back
    // from the newest): never past its offset, often well before it.
    let lagging_synced =
        wait_for(Duration::from_secs(60), "lagging's offsets synced to the backup", || {
            match committed(&backup, "lagging", MIRRORED) {
                synced if synced.len() == PARTITIONS as usize => Ok(synced),
                synced => Err(format!("{synced:?}")),
            }
        });
    for (p, offset) in &lagging_synced {
        assert!(*offset <= lagging[p], "lagging translated past its offset: {lagging_synced:?} > {lagging:?}");
    }
    println!("{:?}: offsets translated: failover {failover:?}, lagging {lagging_synced:?}", started.elapsed());
    produce(&primary, FIRST..SECOND, 20);
    replicated(SECOND);

    // Fail over: on the backup each group resumes from its translated offsets. The
    // caught-up one reads exactly what it had not read; the lagging one reads again
    // from its translated offset, with no gap.
    let last = [SECOND - 2, SECOND - 1];
    let resumed = resume_group(&backup, "failover", MIRRORED, last);
    for (p, numbers) in resumed.iter().enumerate() {
        let expected: Vec<usize> = (FIRST..SECOND).filter(|n| n % 2 == p).collect();
        assert_eq!(numbers, &expected, "failover on the backup, partition {p}");
    }
    let resumed = resume_group(&backup, "lagging", MIRRORED, last);
    let mut repeated = 0;
    for (p, numbers) in resumed.iter().enumerate() {
        let next_unread = 2 * lagging[&(p as i32)] as usize + p;
        let first = numbers[0];
        assert!(first <= next_unread, "lagging on the backup starts at {first}, past {next_unread}");
        let expected: Vec<usize> = (first..SECOND).filter(|n| n % 2 == p).collect();
        assert_eq!(numbers, &expected, "lagging on the backup, partition {p}");
        repeated += (next_unread - first) / 2;
    }
    println!("failover: the caught-up group repeated nothing, the lagging one {repeated} records");

    // A config changed on the primary later follows (MirrorSourceConnector syncs topic
    // configs with IncrementalAlterConfigs every sync.topic.configs.interval.seconds).
    // Kafka 4.1.0's MM2 logs "Could not alter configuration of topic" at WARN after
    // every sync, successful or not (it lacks the `e != null` check later versions
    // have): the describe below is what tells.
    let out = Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["topic", "alter", TOPIC, "--config", "retention.ms=987654321", "--bootstrap-server", &primary])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_for(Duration::from_secs(30), "the changed retention.ms on the backup", || {
        let description = describe(&backup, MIRRORED)?;
        match description.contains("retention.ms=987654321 (DynamicTopic)") {
            true => Ok(()),
            false => Err(description),
        }
    });

    // The checkpoints say the same; the heartbeats flow both ways.
    let checkpoints: BTreeMap<_, _> =
        read_topic(&backup, "primary.checkpoints.internal", 1, "read_uncommitted").iter().map(checkpoint).collect();
    for (p, offset) in &failover {
        let key = ("failover".to_string(), MIRRORED.to_string(), *p);
        assert_eq!(checkpoints.get(&key), Some(&(*offset, *offset)), "{checkpoints:?}");
    }
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    // `heartbeats` is written on the backup by the primary->backup flow; the
    // `heartbeats` the backup->primary flow writes on the primary (every flow emits
    // them, enabled or not) is mirrored as `primary.heartbeats`.
    for (topic, source, target) in [("heartbeats", "primary", "backup"), ("primary.heartbeats", "backup", "primary")] {
        let beats = wait_for(Duration::from_secs(30), &format!("heartbeats in {topic}"), || {
            describe(&backup, topic)?;
            match read_topic(&backup, topic, 1, "read_uncommitted").iter().map(heartbeat).collect::<Vec<_>>() {
                beats if beats.is_empty() => Err("none".to_string()),
                beats => Ok(beats),
            }
        });
        for (s, t, at) in &beats {
            assert_eq!((s.as_str(), t.as_str()), (source, target), "{topic}");
            assert!((now_ms - 300_000..=now_ms + 1000).contains(at), "{topic}: heartbeat at {at}, now {now_ms}");
        }
    }

    // kill -9 MM2 while records flow, and restart it: it resumes each partition after
    // the source offset it last committed (every offset.flush.interval.ms, 1 s).
    let producing = {
        let primary = primary.clone();
        std::thread::spawn(move || produce(&primary, SECOND..THIRD, 20))
    };
    std::thread::sleep(Duration::from_secs(2));
    assert!(!producing.is_finished(), "the kill comes while records flow");
    mm2.kill();
    // What it had committed (a request it sent just before dying has had time to land).
    std::thread::sleep(Duration::from_millis(500));
    let before_kill = record_count(&backup, MIRRORED).unwrap();
    let committed_at_kill = committed_source_offsets(&backup);
    mm2.restart();
    println!("{:?}: MM2 killed with {before_kill} records mirrored, restarted", started.elapsed());
    producing.join().unwrap();
    let records = wait_for(Duration::from_secs(90), "every record on the backup after the restart", || {
        mm2.assert_alive();
        let records = read_topic(&backup, MIRRORED, PARTITIONS, "read_uncommitted");
        let tops = [THIRD - 2, THIRD - 1];
        match (0..2).all(|p| records.iter().rfind(|r| r.partition == p as i32).map(number) == Some(tops[p])) {
            true => Ok(records),
            false => Err(format!("{} records", records.len())),
        }
    });
    let mut duplicates = 0;
    for p in 0..2 {
        let numbers: Vec<usize> = records.iter().filter(|r| r.partition == p as i32).map(number).collect();
        // Upstream offsets: contiguous from 0, going back at most once, to one past
        // the committed source offset.
        let upstream: Vec<i64> = numbers.iter().map(|n| (n / 2) as i64).collect();
        assert!(numbers.iter().all(|n| n % 2 == p));
        assert_eq!(upstream[0], 0);
        let mut rewinds = Vec::new();
        for pair in upstream.windows(2) {
            match (pair[0], pair[1]) {
                (before, o) if o <= before => rewinds.push((before, o)),
                (before, o) => assert_eq!(o, before + 1, "gap in partition {p}: {before} then {o}"),
            }
        }
        assert_eq!(*upstream.last().unwrap(), ((THIRD - 1) / 2) as i64);
        match rewinds.as_slice() {
            [] => {}
            [(before, o)] => {
                let last_committed = committed_at_kill[&(p as i32)];
                assert_eq!(*o, last_committed + 1, "partition {p} replays from its committed source offset");
                duplicates += before - last_committed;
            }
            more => panic!("partition {p} went back {} times: {more:?}", more.len()),
        }
    }
    // Bounded by the offset flush interval: what MM2 mirrors in two of them at the
    // producer's pace (at most 400 records/s) is 800 records.
    assert!(duplicates <= 800, "{duplicates} records mirrored twice");
    println!(
        "kill -9 of MM2 with {before_kill} records mirrored: {duplicates} records mirrored twice \
         (committed source offsets {committed_at_kill:?}); took {:?}",
        started.elapsed()
    );
}
