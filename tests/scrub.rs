//! The scrubber on a running node: reads that serve fetches do not re-check CRCs (they
//! were checked when the records came in), so corruption at rest is the scrubber's to
//! find. Once it has, a fetch of the corrupt batch's offsets gets
//! KAFKA_STORAGE_ERROR instead of the bytes, and the rest of the partition is served.

mod common;

use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use common::{create_topic, Broker, RawClient};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const KAFKA_STORAGE_ERROR: i16 = 56;

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

fn fetch_at(client: &mut RawClient, offset: i64) -> (i16, usize) {
    let request =
        FetchRequest::default().with_replica_id(BrokerId(-1)).with_max_wait_ms(0).with_max_bytes(1 << 20).with_topics(
            vec![FetchTopic::default().with_topic(name("scrubbed")).with_partitions(vec![FetchPartition::default()
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1)])],
        );
    let response = client.call(&request, 12);
    let partition = &response.responses[0].partitions[0];
    (partition.error_code, partition.records.as_ref().map_or(0, |r| r.len()))
}

#[test]
fn the_scrubber_finds_a_flipped_byte_and_fetches_of_it_fail() {
    let dir = tempfile::tempdir().unwrap();
    let scrub = ["--log-scrub-bytes-per-second", "50000000", "--log-scrub-interval-ms", "500"];
    let mut broker = Broker::start(dir.path(), "1", &scrub);
    create_topic(&broker, "scrubbed", 1);
    let mut client = RawClient::connect(&broker.bootstrap());
    for _ in 0..10 {
        let batch = skein_engine::batch::testing::batch(20, 100);
        let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(5000).with_topic_data(vec![
            TopicProduceData::default()
                .with_name(name("scrubbed"))
                .with_partition_data(vec![PartitionProduceData::default().with_index(0).with_records(Some(batch))]),
        ]);
        assert_eq!(client.call(&request, 9).responses[0].partition_responses[0].error_code, 0);
    }
    drop(client);
    // A clean stop: the restart scans nothing, so only the scrubber can find the flip.
    broker.stop();
    let segment = dir.path().join("data/scrubbed-0/00000000000000000000.log");
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&segment).unwrap();
    let mut position = 0u64;
    for _ in 0..6 {
        let mut head = [0u8; 12];
        file.read_exact_at(&mut head, position).unwrap();
        position += 12 + i32::from_be_bytes(head[8..12].try_into().unwrap()) as u64;
    }
    // The last byte of the sixth batch (offsets 100 to 119): inside its records, so
    // the batch's frame still holds and only its CRC tells.
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, position - 1).unwrap();
    file.write_all_at(&[byte[0] ^ 0x10], position - 1).unwrap();
    drop(file);

    broker.restart();
    let deadline = Instant::now() + Duration::from_secs(30);
    while broker.metric_sum("skein_scrub_corrupt_batches_total") == 0 {
        assert!(Instant::now() < deadline, "the scrubber found nothing:\n{}", broker.metrics());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(broker.metric_sum("skein_scrub_corrupt_batches_total"), 1);
    assert!(broker.metric_sum("skein_corruptions_total") >= 1);
    assert!(broker.metric_sum("skein_scrub_bytes_total") >= position);

    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(fetch_at(&mut client, 110).0, KAFKA_STORAGE_ERROR);
    let (before, before_bytes) = fetch_at(&mut client, 0);
    assert_eq!((before, before_bytes > 0), (0, true));
    let (after, after_bytes) = fetch_at(&mut client, 120);
    assert_eq!((after, after_bytes > 0), (0, true));
    // Later passes find the same batch, already fenced: not counted again.
    let passes = broker.metric_sum("skein_scrub_passes_total");
    while broker.metric_sum("skein_scrub_passes_total") < passes + 1 {
        assert!(Instant::now() < deadline + Duration::from_secs(10), "no second pass");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(broker.metric_sum("skein_scrub_corrupt_batches_total"), 1);
    assert_eq!(fetch_at(&mut client, 100).0, KAFKA_STORAGE_ERROR);
    broker.stop();
}
