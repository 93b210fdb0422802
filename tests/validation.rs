//! Appends are validated as Kafka's LogValidator does, and refused batches leave the
//! log untouched: control and transactional batches from plain clients, records that
//! disagree with their header, null keys on compacted topics, CreateTime timestamps out
//! of bounds, compressed sections that do not decompress. Topic configs are accepted
//! as Kafka 4.x names them, `compression.type` recompresses, and DescribeConfigs tells
//! which configs Skein stores without acting on.

mod common;

use bytes::Bytes;
use common::{Broker, RawClient};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use skein_engine::records::{build_batch, decode_records, Compression, Record};

const INVALID_TIMESTAMP: i16 = 32;
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
const INVALID_CONFIG: i16 = 40;
const INVALID_RECORD: i16 = 87;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

fn create(client: &mut RawClient, name: &str, configs: &[(&str, &str)]) -> (i16, Option<String>) {
    let topic = common::creatable_topic(name, 1, configs);
    let response = client.call(&CreateTopicsRequest::default().with_topics(vec![topic]).with_timeout_ms(5000), 7);
    let t = &response.topics[0];
    (t.error_code, t.error_message.as_ref().map(|m| m.to_string()))
}

fn records(count: i32, key: Option<&'static [u8]>) -> Vec<Record> {
    (0..count)
        .map(|i| Record {
            offset_delta: i,
            timestamp_delta: i as i64,
            key: key.map(Bytes::from_static),
            value: Some(Bytes::from(vec![b'v'; 200])),
            ..Record::default()
        })
        .collect()
}

fn batch(count: i32, key: Option<&'static [u8]>, timestamp: i64, codec: Compression) -> Vec<u8> {
    build_batch(0, timestamp, codec, &records(count, key))
}

fn fix_crc(bytes: &mut [u8]) {
    skein_engine::batch::testing::fix_crc(bytes);
}

/// Produces one batch at v11; returns the partition's error code, message and record errors.
fn produce(
    client: &mut RawClient,
    topic: &str,
    bytes: Vec<u8>,
    transactional_id: Option<&str>,
) -> (i16, Option<String>, Vec<i32>) {
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_transactional_id(transactional_id.map(|t| TransactionalId(s(t))))
        .with_topic_data(vec![TopicProduceData::default().with_name(TopicName(s(topic))).with_partition_data(vec![
            PartitionProduceData::default().with_index(0).with_records(Some(Bytes::from(bytes))),
        ])]);
    let response = client.call(&request, 11);
    let p = &response.responses[0].partition_responses[0];
    (
        p.error_code,
        p.error_message.as_ref().map(|m| m.to_string()),
        p.record_errors.iter().map(|e| e.batch_index).collect(),
    )
}

fn latest(client: &mut RawClient, topic: &str) -> i64 {
    let request =
        ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(s(topic)))
            .with_partitions(vec![ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1)])]);
    client.call(&request, 8).topics[0].partitions[0].offset
}

/// Every batch of partition 0 from offset 0.
fn fetch_all(client: &mut RawClient, topic: &str) -> Bytes {
    let request =
        FetchRequest::default().with_max_wait_ms(0).with_max_bytes(1 << 20).with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(s(topic)))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    let response = client.call(&request, 12);
    response.responses[0].partitions[0].records.clone().unwrap_or_default()
}

// Each kind of bad batch gets Kafka's error code, and none of them reaches the log.
#[test]
fn bad_batches_are_refused_and_leave_the_log_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(create(&mut client, "plain", &[]).0, 0);
    assert_eq!(create(&mut client, "compacted", &[("cleanup.policy", "compact")]).0, 0);
    assert_eq!(
        create(
            &mut client,
            "strict",
            &[("message.timestamp.before.max.ms", "60000"), ("message.timestamp.after.max.ms", "60000")]
        )
        .0,
        0
    );
    let now = now_ms();
    // A good batch first, so that "untouched" means something.
    assert_eq!(produce(&mut client, "plain", batch(3, Some(b"k"), now, Compression::None), None).0, 0);

    // A control batch (attributes bit 5) from a client.
    let mut control = batch(1, Some(b"k"), now, Compression::None);
    control[22] |= 0x20;
    fix_crc(&mut control);
    let (code, message, _) = produce(&mut client, "plain", control, None);
    assert_eq!(code, INVALID_RECORD, "{message:?}");
    assert!(message.unwrap().contains("control records"));

    // A transactional batch (bit 4) without a transactional id.
    let mut transactional = batch(1, Some(b"k"), now, Compression::None);
    transactional[22] |= 0x10;
    skein_engine::batch::testing::set_producer(&mut transactional, 1000, 0, 0);
    assert_eq!(produce(&mut client, "plain", transactional, None).0, TRANSACTIONAL_ID_AUTHORIZATION_FAILED);

    // Offset deltas that skip (the header's last offset delta agrees with the count).
    let mut skipping = build_batch(
        0,
        now,
        Compression::None,
        &[Record { offset_delta: 0, ..Record::default() }, Record { offset_delta: 5, ..Record::default() }],
    );
    skipping[23..27].copy_from_slice(&1i32.to_be_bytes());
    fix_crc(&mut skipping);
    assert_eq!(produce(&mut client, "plain", skipping, None).0, INVALID_RECORD);

    // A header that claims one record more than the section holds.
    let mut short = batch(3, Some(b"k"), now, Compression::None);
    short[57..61].copy_from_slice(&4i32.to_be_bytes());
    short[23..27].copy_from_slice(&3i32.to_be_bytes());
    fix_crc(&mut short);
    assert_eq!(produce(&mut client, "plain", short, None).0, INVALID_RECORD);

    // A section that says zstd but is not.
    let mut garbage = batch(2, Some(b"k"), now, Compression::None);
    garbage[21..23].copy_from_slice(&(Compression::Zstd as i16).to_be_bytes());
    fix_crc(&mut garbage);
    let (code, message, _) = produce(&mut client, "plain", garbage, None);
    assert_eq!(code, INVALID_RECORD, "{message:?}");
    assert_eq!(latest(&mut client, "plain"), 3, "refused batches never reach the log");

    // Null keys on a compacted topic: the keyless records are listed (KIP-467).
    let mixed = build_batch(
        0,
        now,
        Compression::Lz4,
        &[
            Record { offset_delta: 0, key: Some(Bytes::from_static(b"a")), ..Record::default() },
            Record { offset_delta: 1, key: None, ..Record::default() },
            Record { offset_delta: 2, key: None, ..Record::default() },
        ],
    );
    let (code, _, indexes) = produce(&mut client, "compacted", mixed, None);
    assert_eq!((code, indexes), (INVALID_RECORD, vec![1, 2]));
    assert_eq!(produce(&mut client, "compacted", batch(2, Some(b"k"), now, Compression::Gzip), None).0, 0);
    assert_eq!(latest(&mut client, "compacted"), 2);

    // CreateTime bounds: an hour in the past or the future is out of a minute's range.
    for skew in [-3_600_000i64, 3_600_000] {
        let (code, _, indexes) =
            produce(&mut client, "strict", batch(2, Some(b"k"), now + skew, Compression::Snappy), None);
        assert_eq!((code, indexes), (INVALID_TIMESTAMP, vec![0, 1]), "skew {skew}");
    }
    assert_eq!(produce(&mut client, "strict", batch(2, Some(b"k"), now, Compression::None), None).0, 0);
    assert_eq!(latest(&mut client, "strict"), 2);
    // Kafka 4's default refuses timestamps more than an hour ahead, and allows any past.
    let (code, _, _) =
        produce(&mut client, "plain", batch(1, Some(b"k"), now + 2 * 3_600_000, Compression::None), None);
    assert_eq!(code, INVALID_TIMESTAMP);
    assert_eq!(produce(&mut client, "plain", batch(1, Some(b"k"), 1_000, Compression::None), None).0, 0);
}

// compression.type=zstd stores every batch as zstd whatever the producer sent, with
// the same records; producer keeps the producer's codec.
#[test]
fn compression_type_recompresses() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(create(&mut client, "zstd", &[("compression.type", "zstd"), ("compression.zstd.level", "9")]).0, 0);
    assert_eq!(create(&mut client, "as-sent", &[("compression.type", "producer")]).0, 0);
    let now = now_ms();
    for codec in [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4] {
        assert_eq!(produce(&mut client, "zstd", batch(4, Some(b"key"), now, codec), None).0, 0);
        assert_eq!(produce(&mut client, "as-sent", batch(4, Some(b"key"), now, codec), None).0, 0);
    }
    for (topic, expect) in [
        ("zstd", vec![Compression::Zstd; 4]),
        ("as-sent", vec![Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4]),
    ] {
        let bytes = fetch_all(&mut client, topic);
        let batches = skein_engine::Batch::split_all(bytes, 1 << 20).unwrap();
        let codecs: Vec<Compression> =
            batches.iter().map(|b| Compression::from_attributes(b.attributes()).unwrap()).collect();
        assert_eq!(codecs, expect, "{topic}");
        for b in &batches {
            let decoded = decode_records(&b.bytes(), 1 << 20).unwrap();
            assert_eq!(decoded.len(), 4);
            assert!(decoded
                .iter()
                .all(|r| r.key.as_deref() == Some(&b"key"[..]) && r.value.as_ref().unwrap().len() == 200));
        }
    }
}

// Every Kafka 4.x topic config is accepted with its validation; DescribeConfigs gives
// types, synonyms and documentation, says which configs are stored without effect,
// and lists the broker's settings under Kafka's names.
#[test]
fn kafka_topic_configs_and_their_description() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &["--topic-config", "retention.ms=7200000"]);
    let mut client = RawClient::connect(&broker.bootstrap());
    let all = [
        ("compression.type", "producer"),
        ("compression.gzip.level", "5"),
        ("message.timestamp.before.max.ms", "86400000"),
        ("message.timestamp.after.max.ms", "3600000"),
        ("min.compaction.lag.ms", "1000"),
        ("max.compaction.lag.ms", "600000"),
        ("min.cleanable.dirty.ratio", "0.3"),
        ("segment.jitter.ms", "1000"),
        ("preallocate", "true"),
        ("unclean.leader.election.enable", "false"),
        ("message.downconversion.enable", "false"),
        ("follower.replication.throttled.replicas", "0:1"),
        ("leader.replication.throttled.replicas", "*"),
        ("file.delete.delay.ms", "1000"),
        ("local.retention.ms", "-2"),
    ];
    assert_eq!(create(&mut client, "every-config", &all), (0, None));
    for (name, value) in [
        ("compression.type", "brotli"),
        ("min.cleanable.dirty.ratio", "2"),
        ("remote.storage.enable", "true"),
        ("segment.bytes", "1000"),
        ("no.such.config", "1"),
    ] {
        let (code, message) = create(&mut client, "refused-config", &[(name, value)]);
        assert_eq!(code, INVALID_CONFIG, "{name}={value}: {message:?}");
    }

    let request = DescribeConfigsRequest::default()
        .with_include_synonyms(true)
        .with_include_documentation(true)
        .with_resources(vec![
            DescribeConfigsResource::default().with_resource_type(2).with_resource_name(s("every-config")),
            DescribeConfigsResource::default().with_resource_type(4).with_resource_name(s("1")),
        ]);
    let response = client.call(&request, 4);
    let topic = &response.results[0].configs;
    let entry = |name: &str| topic.iter().find(|c| c.name.as_str() == name).unwrap_or_else(|| panic!("{name} missing"));
    assert_eq!(entry("min.cleanable.dirty.ratio").value.as_deref(), Some("0.3"));
    assert_eq!(entry("min.cleanable.dirty.ratio").config_type, 6, "DOUBLE");
    assert_eq!(entry("preallocate").config_type, 1, "BOOLEAN");
    assert!(entry("unclean.leader.election.enable").documentation.as_ref().unwrap().contains("does not act on it yet"));
    assert!(!entry("compression.type").documentation.as_ref().unwrap().contains("does not act on it yet"));
    let retention = entry("retention.ms");
    assert_eq!((retention.value.as_deref(), retention.config_source), (Some("7200000"), 4));
    let synonyms: Vec<(&str, i8)> = retention.synonyms.iter().map(|s| (s.name.as_str(), s.source)).collect();
    assert_eq!(synonyms, vec![("log.retention.ms", 4), ("log.retention.ms", 5)]);
    let compression = entry("compression.type");
    assert_eq!(compression.synonyms[0].source, 1, "the topic override comes first");
    assert_eq!(topic.len(), skein_control::configs::TOPIC_CONFIGS.len(), "every topic config is described");

    let broker_configs = &response.results[1].configs;
    let names: Vec<&str> = broker_configs.iter().map(|c| c.name.as_str()).collect();
    for name in ["node.id", "log.dirs", "log.retention.ms", "log.segment.bytes", "message.max.bytes", "num.partitions"]
    {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let retention = broker_configs.iter().find(|c| c.name.as_str() == "log.retention.ms").unwrap();
    assert_eq!(retention.value.as_deref(), Some("7200000"));
}
