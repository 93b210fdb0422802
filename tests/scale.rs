//! Costs that follow the data, not the partition count: thousands of partitions
//! holding one record each take a few blocks of disk and KiB of memory apiece and
//! recover in seconds after a kill -9; a full disk is refused at once, loudly, and
//! survived, on a file system of the test's own. The full-size runs (10,000
//! partitions, against Apache Kafka) are `bench-harness/scale.sh`'s.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Broker, LoopFs, RawClient};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const NONE: i16 = 0;
const KAFKA_STORAGE_ERROR: i16 = 56;

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

/// Creates `topics` (name, partitions, configs) in one CreateTopics request.
fn create(client: &mut RawClient, topics: &[(String, i32)], configs: &[(&str, &str)]) {
    let topics: Vec<CreatableTopic> = topics
        .iter()
        .map(|(topic, partitions)| {
            CreatableTopic::default()
                .with_name(name(topic))
                .with_num_partitions(*partitions)
                .with_replication_factor(1)
                .with_configs(
                    configs
                        .iter()
                        .map(|(k, v)| {
                            CreatableTopicConfig::default()
                                .with_name(StrBytes::from_string(k.to_string()))
                                .with_value(Some(StrBytes::from_string(v.to_string())))
                        })
                        .collect(),
                )
        })
        .collect();
    let response = client.call(&CreateTopicsRequest::default().with_topics(topics).with_timeout_ms(60_000), 7);
    for topic in &response.topics {
        assert_eq!(topic.error_code, NONE, "{:?}: {:?}", topic.name, topic.error_message);
    }
}

/// A batch of `count` records of `value_bytes` each, stamped now.
fn batch(count: i32, value_bytes: usize) -> Bytes {
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    skein_engine::batch::testing::batch_with(count, value_bytes, stamp, |_| None)
}

/// One Produce (acks=all) of `records` to each of `partitions` of `topic`; the error
/// code and base offset of each partition.
fn produce(client: &mut RawClient, topic: &str, partitions: &[i32], records: &Bytes) -> Vec<(i16, i64)> {
    let data = partitions
        .iter()
        .map(|&p| PartitionProduceData::default().with_index(p).with_records(Some(records.clone())))
        .collect();
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default().with_name(name(topic)).with_partition_data(data)]);
    let response = client.call(&request, 9);
    response.responses[0].partition_responses.iter().map(|p| (p.error_code, p.base_offset)).collect()
}

/// The latest offset of each of `partitions` of `topic`, `None` where the partition
/// answers an error (not served yet).
fn latest(client: &mut RawClient, topic: &str, partitions: &[i32]) -> Vec<Option<i64>> {
    let request =
        ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![ListOffsetsTopic::default()
            .with_name(name(topic))
            .with_partitions(
                partitions
                    .iter()
                    .map(|&p| ListOffsetsPartition::default().with_partition_index(p).with_timestamp(-1))
                    .collect(),
            )]);
    let response = client.call(&request, 7);
    let answered = &response.topics[0].partitions;
    partitions
        .iter()
        .map(|p| answered.iter().find(|a| a.partition_index == *p).filter(|a| a.error_code == NONE).map(|a| a.offset))
        .collect()
}

/// Bytes of disk a directory tree takes (allocated blocks, as `du` counts them).
fn disk_bytes(path: &Path) -> u64 {
    let meta = std::fs::symlink_metadata(path).unwrap();
    let mut total = meta.blocks() * 512;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            total += disk_bytes(&entry.unwrap().path());
        }
    }
    total
}

/// Waits until every partition of `topics` answers ListOffsets with `expected`
/// (one record each); returns how long that took from `since`.
fn wait_served(broker: &Broker, topics: &[String], partitions: i32, expected: i64, since: Instant) -> Duration {
    let all: Vec<i32> = (0..partitions).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut client = RawClient::connect(&broker.bootstrap());
    for topic in topics {
        loop {
            let offsets = latest(&mut client, topic, &all);
            if offsets.iter().all(|o| *o == Some(expected)) {
                break;
            }
            assert!(Instant::now() < deadline, "{topic} not served: {offsets:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    since.elapsed()
}

// 2,000 partitions holding one record each: each takes at most 12 KiB of disk (its
// directory, one block of log, its `partition.metadata`; Kafka 4.4 took 16.8 KiB) and
// at most 16 KiB of memory; after a kill -9 the node listens and serves every one of
// them again within seconds, and after a clean stop faster still.
#[test]
fn two_thousand_partitions_cost_what_their_data_costs() {
    const TOPICS: usize = 20;
    const PARTITIONS: i32 = 100;
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path(), "2", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    let topics: Vec<String> = (0..TOPICS).map(|t| format!("scale-{t:02}")).collect();
    // One partition first, so the node's fixed costs (the offsets topic aside) are in
    // the baseline.
    create(&mut client, &[("warm".to_string(), 1)], &[]);
    assert_eq!(produce(&mut client, "warm", &[0], &batch(1, 100)), vec![(NONE, 0)]);
    std::thread::sleep(Duration::from_millis(1500));
    let (disk_before, rss_before) = (disk_bytes(&broker.data_dir), broker.rss_bytes());
    let listing: Vec<(String, i32)> = topics.iter().map(|t| (t.clone(), PARTITIONS)).collect();
    // Answered before the logs are open: each produce below waits for its partition's
    // open, none is refused.
    create(&mut client, &listing, &[]);
    let all: Vec<i32> = (0..PARTITIONS).collect();
    let record = batch(1, 100);
    for topic in &topics {
        let answers = produce(&mut client, topic, &all, &record);
        assert!(answers.iter().all(|&(code, offset)| code == NONE && offset == 0), "{topic}: {answers:?}");
    }
    // Housekeeping (every second) writes whatever state the partitions keep.
    std::thread::sleep(Duration::from_millis(2500));
    let count = (TOPICS as u64) * PARTITIONS as u64;
    let disk = disk_bytes(&broker.data_dir).saturating_sub(disk_before);
    let rss = broker.rss_bytes().saturating_sub(rss_before);
    println!(
        "2,000 one-record partitions: {} KiB of disk, {} KiB of memory each",
        (disk / count) >> 10,
        (rss / count) >> 10
    );
    // The metadata log's records of the new topics come on top of the 12 KiB.
    assert!(disk <= count * 13 * 1024, "{} KiB of disk per partition", (disk / count) >> 10);
    assert!(rss <= count * 16 * 1024, "{} KiB of memory per partition", (rss / count) >> 10);
    drop(client);

    broker.kill();
    let started = Instant::now();
    broker.restart();
    let listening = started.elapsed();
    let served = wait_served(&broker, &topics, PARTITIONS, 1, started);
    println!("after kill -9: listening in {listening:?}, every partition served in {served:?}");
    // Bounds for the test (debug) build on a loaded 2-core machine; release builds
    // take about a tenth (`bench-harness/scale.sh`).
    assert!(listening < Duration::from_secs(20), "listening after {listening:?}");
    assert!(served < Duration::from_secs(30), "served after {served:?}");

    broker.stop();
    let started = Instant::now();
    broker.restart();
    let clean_listening = started.elapsed();
    let clean_served = wait_served(&broker, &topics, PARTITIONS, 1, started);
    println!("after a clean stop: listening in {clean_listening:?}, every partition served in {clean_served:?}");
    assert!(clean_served < Duration::from_secs(30), "served after {clean_served:?}");
}

/// Fetches every one of `partitions` of `topic` from offset 0 in one request; the
/// partitions that answered no error and no records.
fn unread(client: &mut RawClient, topic: &str, partitions: i32, expected: i64) -> Vec<(i32, i16)> {
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(64 << 20)
        .with_topics(vec![FetchTopic::default().with_topic(name(topic)).with_partitions(
            (0..partitions)
                .map(|p| {
                    FetchPartition::default().with_partition(p).with_fetch_offset(0).with_partition_max_bytes(1 << 20)
                })
                .collect(),
        )]);
    let response = client.call(&request, 12);
    let mut missing = Vec::new();
    for partition in &response.responses[0].partitions {
        let records = partition.records.clone().unwrap_or_default();
        // Each record was sent as a batch of its own: count the batches (61 bytes of
        // header and a length each).
        let mut batches = 0;
        let mut rest = &records[..];
        while rest.len() >= 12 {
            let length = i32::from_be_bytes(rest[8..12].try_into().unwrap()) as usize;
            rest = &rest[(12 + length).min(rest.len())..];
            batches += 1;
        }
        if partition.error_code != NONE || batches != expected {
            missing.push((partition.partition_index, partition.error_code));
        }
    }
    assert_eq!(response.responses[0].partitions.len(), partitions as usize);
    missing
}

// More partitions than the node may open files (`ulimit -n` 700, so a budget of 444
// open files on its one shard): every partition takes records, serves them, recovers
// after a kill -9 and takes more, while the files of idle segments are closed and
// opened again on their next use. Without the budget, a partition past the limit
// failed to open (KAFKA_STORAGE_ERROR).
#[test]
fn more_partitions_than_open_files_are_served() {
    const TOPICS: usize = 12;
    const PARTITIONS: i32 = 100;
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_with_open_files(dir.path(), "1", &[], 700);
    let mut client = RawClient::connect(&broker.bootstrap());
    let topics: Vec<String> = (0..TOPICS).map(|t| format!("files-{t:02}")).collect();
    let listing: Vec<(String, i32)> = topics.iter().map(|t| (t.clone(), PARTITIONS)).collect();
    create(&mut client, &listing, &[]);
    let all: Vec<i32> = (0..PARTITIONS).collect();
    let record = batch(1, 100);
    let broker_log = || std::fs::read_to_string(dir.path().join("broker.log")).unwrap_or_default();
    let produce_all = |client: &mut RawClient, offset: i64| {
        for topic in &topics {
            let answers = produce(client, topic, &all, &record);
            let answered = answers.iter().all(|&(code, base)| code == NONE && base == offset);
            assert!(answered, "{topic}: {answers:?}\n{}", broker_log());
        }
    };
    let read_all = |client: &mut RawClient, expected: i64| {
        for topic in &topics {
            assert_eq!(unread(client, topic, PARTITIONS, expected), vec![], "{topic}");
        }
    };
    produce_all(&mut client, 0);
    read_all(&mut client, 1);
    assert_eq!(metric(&broker, "skein_open_files_budget"), 444);
    let files = || broker.metrics().lines().filter(|l| l.contains("open_files")).collect::<Vec<_>>().join("\n");
    assert!(broker.metric_sum("skein_open_files") <= 444, "{}", files());
    assert!(broker.metric_sum("skein_open_files_closed_total") > 0, "{}", files());
    assert!(broker.metric_sum("skein_open_files_reopened_total") > 0, "{}", files());
    assert!(!broker.log().contains("Too many open files"), "{}", broker.log());

    broker.kill();
    broker.restart();
    wait_served(&broker, &topics, PARTITIONS, 1, Instant::now());
    let mut client = RawClient::connect(&broker.bootstrap());
    read_all(&mut client, 1);
    produce_all(&mut client, 1);
    read_all(&mut client, 2);
    assert!(metric(&broker, "skein_open_files") <= 444);
    assert!(!broker.log().contains("Too many open files"), "{}", broker.log());
    broker.stop();
}

/// Reads `topic`-0 from `from` to `to` with Fetch and returns the batches read that
/// start below `to` (each batch's first offset and its record count).
fn read_range(client: &mut RawClient, topic: &str, from: i64, to: i64) -> Vec<(i64, i64)> {
    let mut batches = Vec::new();
    let mut next = from;
    while next < to {
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_max_bytes(8 << 20)
            .with_topics(vec![FetchTopic::default().with_topic(name(topic)).with_partitions(vec![
                FetchPartition::default().with_fetch_offset(next).with_partition_max_bytes(8 << 20),
            ])]);
        let response = client.call(&request, 12);
        let partition = &response.responses[0].partitions[0];
        assert_eq!(partition.error_code, NONE, "fetch of {topic} at {next}");
        let mut records = partition.records.clone().expect("records");
        assert!(!records.is_empty(), "nothing at {next} below {to}");
        while records.len() >= 61 {
            let base = i64::from_be_bytes(records[0..8].try_into().unwrap());
            let length = i32::from_be_bytes(records[8..12].try_into().unwrap()) as usize;
            let last_delta = i32::from_be_bytes(records[23..27].try_into().unwrap()) as i64;
            if records.len() < 12 + length || base >= to {
                break;
            }
            if base + last_delta >= next {
                batches.push((base, last_delta + 1));
            }
            next = base + last_delta + 1;
            let _ = records.split_to(12 + length);
        }
    }
    batches
}

/// Records of 16 KiB in each batch `fill` sends: under Kafka's default
/// `max.message.bytes` (1 MiB and 12 bytes).
const BATCH_RECORDS: i32 = 60;

/// Produces batches of nearly 1 MiB to `topic`-0 until the broker refuses one; returns the end
/// offset of what was acknowledged and how long the refusal took to come.
fn fill(client: &mut RawClient, topic: &str) -> (i64, Duration) {
    let record = batch(BATCH_RECORDS, 16 << 10);
    let mut end = 0;
    for _ in 0..1000 {
        let sent = Instant::now();
        let answer = produce(client, topic, &[0], &record)[0];
        match answer {
            (NONE, base) => end = base + BATCH_RECORDS as i64,
            (code, _) => {
                assert_eq!(code, KAFKA_STORAGE_ERROR);
                return (end, sent.elapsed());
            }
        }
    }
    panic!("the disk never filled");
}

fn metric(broker: &Broker, name: &str) -> u64 {
    // Shards publish their figures every 100 ms.
    std::thread::sleep(Duration::from_millis(300));
    broker.metric_sum(name)
}

// A full disk (a 128 MiB file system of the test's own): a produce is refused at once
// with KAFKA_STORAGE_ERROR, which librdkafka and the Java client retry; the node logs
// it once and shows `skein_log_dir_full`; Metadata and reads keep working; once a topic deletion or DeleteRecords frees space, produces succeed
// again without a restart; and after a kill -9 every acknowledged record is there.
#[test]
fn a_full_disk_is_refused_at_once_and_survived() {
    let dir = tempfile::tempdir().unwrap();
    let fs = LoopFs::new(dir.path(), 128 << 20);
    let data = fs.mountpoint.join("data");
    let mut broker = Broker::start_at(dir.path(), &data, "1", &["--housekeeping-interval-ms", "200"]);
    let mut client = RawClient::connect(&broker.bootstrap());
    let segments = [("segment.bytes", "4194304")];
    create(&mut client, &[("ballast".to_string(), 1), ("fill".to_string(), 1)], &segments);
    for _ in 0..24 {
        assert_eq!(produce(&mut client, "ballast", &[0], &batch(BATCH_RECORDS, 16 << 10))[0].0, NONE);
    }
    let (mut acked_end, refused_after) = fill(&mut client, "fill");
    assert!(refused_after < Duration::from_secs(2), "the refusal took {refused_after:?}");
    assert!(acked_end > 0);
    // Still full: refused again, at once. (A batch or two may still fit: a log gives
    // back the space it reserved ahead when a segment rolls or it falls idle, so the
    // refusal comes once that is used up.)
    let (end, refused_again) = fill(&mut client, "fill");
    assert!(refused_again < Duration::from_secs(2), "the refusal took {refused_again:?}");
    acked_end = acked_end.max(end);
    assert_eq!(metric(&broker, "skein_log_dir_full"), 1);
    assert!(metric(&broker, "skein_disk_full_refusals_total") >= 2);
    let full_lines = |broker: &Broker| broker.log().lines().filter(|l| l.contains("log directory full")).count();
    assert_eq!(full_lines(&broker), 1, "{}", broker.log());
    // Metadata and reads work.
    let metadata = client.call(&MetadataRequest::default().with_topics(None), 12);
    assert_eq!(metadata.topics.len(), 2);
    assert_eq!(latest(&mut client, "fill", &[0]), vec![Some(acked_end)]);
    assert_eq!(read_range(&mut client, "fill", 0, 1), vec![(0, BATCH_RECORDS as i64)]);

    // Deleting the ballast topic frees its segments: produces go on without a restart.
    let delete = DeleteTopicsRequest::default().with_topic_names(vec![name("ballast")]).with_timeout_ms(10_000);
    assert_eq!(client.call(&delete, 4).responses[0].error_code, NONE);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match produce(&mut client, "fill", &[0], &batch(BATCH_RECORDS, 16 << 10))[0] {
            (NONE, base) => {
                assert_eq!(base, acked_end, "no gap, nothing stored twice");
                acked_end = base + BATCH_RECORDS as i64;
                break;
            }
            (code, _) => assert_eq!(code, KAFKA_STORAGE_ERROR),
        }
        assert!(Instant::now() < deadline, "produces did not resume after the deletion");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(metric(&broker, "skein_log_dir_full"), 0);
    assert!(broker.log().contains("log directory has room again"));

    // Full again; DeleteRecords frees whole segments below the new log start.
    let (end, _) = fill(&mut client, "fill");
    acked_end = acked_end.max(end);
    let start = acked_end / 2;
    let request =
        DeleteRecordsRequest::default().with_timeout_ms(10_000).with_topics(vec![DeleteRecordsTopic::default()
            .with_name(name("fill"))
            .with_partitions(vec![DeleteRecordsPartition::default().with_partition_index(0).with_offset(start)])]);
    let answer = &client.call(&request, 2).topics[0].partitions[0];
    assert_eq!((answer.error_code, answer.low_watermark), (NONE, start));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match produce(&mut client, "fill", &[0], &batch(BATCH_RECORDS, 16 << 10))[0] {
            (NONE, base) => {
                assert_eq!(base, acked_end);
                acked_end = base + BATCH_RECORDS as i64;
                break;
            }
            (code, _) => assert_eq!(code, KAFKA_STORAGE_ERROR),
        }
        assert!(Instant::now() < deadline, "produces did not resume after DeleteRecords");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Every acknowledged record from the log start on is there, in order, after a
    // kill -9 too.
    drop(client);
    broker.kill();
    broker.restart();
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(latest(&mut client, "fill", &[0]), vec![Some(acked_end)]);
    let batches = read_range(&mut client, "fill", start, acked_end);
    let mut next = batches[0].0;
    assert!(next <= start);
    for (base, count) in batches {
        assert_eq!(base, next, "a gap before {base}");
        next = base + count;
    }
    assert_eq!(next, acked_end);
    drop(client);
    broker.stop();
    drop(fs);
}
