//! Topic identity on disk: each partition directory names its topic's id
//! (`partition.metadata`); a deleted topic's directories are renamed `-delete` before
//! the delete is answered and removed later; a recreated topic never serves the old
//! incarnation's records, whether the broker crashed after the rename or before it.

mod common;

use std::time::{Duration, Instant};

use common::{Broker, RawClient};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

fn create(client: &mut RawClient, topic: &str, partitions: i32) -> i16 {
    let request = CreateTopicsRequest::default()
        .with_topics(vec![common::creatable_topic(topic, partitions, &[])])
        .with_timeout_ms(5000);
    client.call(&request, 7).topics[0].error_code
}

fn delete(client: &mut RawClient, topic: &str) -> i16 {
    let request = DeleteTopicsRequest::default()
        .with_topics(vec![DeleteTopicState::default().with_name(Some(name(topic)))])
        .with_timeout_ms(5000);
    client.call(&request, 6).responses[0].error_code
}

fn produce(client: &mut RawClient, topic: &str, partition: i32, records: i32) -> i16 {
    let request =
        ProduceRequest::default().with_acks(-1).with_timeout_ms(5000).with_topic_data(vec![TopicProduceData::default(
        )
        .with_name(name(topic))
        .with_partition_data(vec![PartitionProduceData::default()
            .with_index(partition)
            .with_records(Some(skein_engine::batch::testing::batch(records, 50)))])]);
    client.call(&request, 9).responses[0].partition_responses[0].error_code
}

/// (error, latest offset) of a partition.
fn latest(client: &mut RawClient, topic: &str, partition: i32) -> (i16, i64) {
    let request =
        ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![ListOffsetsTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_timestamp(-1)])]);
    let response = client.call(&request, 8);
    let p = &response.topics[0].partitions[0];
    (p.error_code, p.offset)
}

fn dirs(broker: &Broker) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(&broker.data_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    names
}

// A delete renames the partition directories before it is answered; a crash right
// after leaves `-delete` directories that are removed at the next start, and the
// recreated topic starts empty.
#[test]
fn delete_then_crash_then_recreate_serves_nothing_old() {
    let dir = tempfile::tempdir().unwrap();
    // Housekeeping far away: only the start removes deleted directories here.
    let mut broker = Broker::start(dir.path(), "2", &["--housekeeping-interval-ms", "600000"]);
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(create(&mut client, "gone", 2), 0);
    for p in 0..2 {
        assert_eq!(produce(&mut client, "gone", p, 10), 0);
    }
    let id_file = std::fs::read_to_string(broker.data_dir.join("gone-0/partition.metadata")).unwrap();
    assert!(id_file.starts_with("version: 0\ntopic_id: "), "{id_file}");
    assert_eq!(delete(&mut client, "gone"), 0);
    let after = dirs(&broker);
    assert!(!after.iter().any(|d| d == "gone-0" || d == "gone-1"), "{after:?}");
    assert_eq!(after.iter().filter(|d| d.starts_with("gone-") && d.ends_with("-delete")).count(), 2, "{after:?}");
    broker.kill();
    broker.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    while dirs(&broker).iter().any(|d| d.ends_with("-delete")) {
        assert!(Instant::now() < deadline, "deleted directories left: {:?}", dirs(&broker));
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(create(&mut client, "gone", 2), 0);
    for p in 0..2 {
        assert_eq!(latest(&mut client, "gone", p), (0, 0), "partition {p} serves old records");
    }
}

// A directory of another incarnation of a topic (what a crash between recording a
// delete and renaming its directories leaves, then a recreate) is never served: the
// ids differ, the directory is set aside at start, and the topic opens empty.
#[test]
fn directory_of_another_incarnation_is_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path(), "1", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(create(&mut client, "old", 1), 0);
    assert_eq!(produce(&mut client, "old", 0, 25), 0);
    assert_eq!(create(&mut client, "new", 1), 0);
    broker.stop();
    // "new-0" now holds the files (and topic id) of "old".
    let (source, target) = (broker.data_dir.join("old-0"), broker.data_dir.join("new-0"));
    std::fs::remove_dir_all(&target).unwrap();
    std::fs::create_dir(&target).unwrap();
    for entry in std::fs::read_dir(&source).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), target.join(entry.file_name())).unwrap();
    }
    broker.restart();
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(latest(&mut client, "new", 0), (0, 0), "the other incarnation's records were served");
    assert_eq!(latest(&mut client, "old", 0), (0, 25));
    assert!(broker.log().contains("stray partition directory"));
}

// Deletes racing auto-creation of the same topic leave a consistent state: whatever
// the metadata says at the end is served, and a restart opens every partition.
#[test]
fn delete_racing_auto_creation_stays_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path(), "2", &["--num-partitions", "2"]);
    let bootstrap = broker.bootstrap();
    let until = Instant::now() + Duration::from_secs(3);
    let deleter = std::thread::spawn(move || {
        let mut client = RawClient::connect(&bootstrap);
        while Instant::now() < until {
            let _ = delete(&mut client, "racy");
            std::thread::sleep(Duration::from_millis(15));
        }
    });
    let mut client = RawClient::connect(&broker.bootstrap());
    let mut produced = 0;
    while Instant::now() < until {
        // Metadata auto-creates the topic; the produce may meet a delete.
        let _ = client.call(
            &MetadataRequest::default()
                .with_topics(Some(
                    vec![metadata_request::MetadataRequestTopic::default().with_name(Some(name("racy")))],
                ))
                .with_allow_auto_topic_creation(true),
            12,
        );
        if produce(&mut client, "racy", 0, 1) == 0 {
            produced += 1;
        }
    }
    deleter.join().unwrap();
    assert!(produced > 0, "no produce succeeded between deletes");
    // Settle: the topic exists once more and serves reads and writes.
    let _ = client.call(
        &MetadataRequest::default()
            .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default().with_name(Some(name("racy")))]))
            .with_allow_auto_topic_creation(true),
        12,
    );
    let before = latest(&mut client, "racy", 0);
    assert_eq!(before.0, 0);
    assert_eq!(produce(&mut client, "racy", 0, 3), 0);
    assert_eq!(latest(&mut client, "racy", 0), (0, before.1 + 3));
    broker.stop();
    broker.restart();
    assert!(!broker.log().contains("partition offline"), "{}", broker.log());
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(latest(&mut client, "racy", 0), (0, before.1 + 3));
}
