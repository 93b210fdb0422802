//! Bad input over a raw socket gets the answer a Java broker gives, and the broker
//! keeps serving: malformed frames, unknown APIs and versions, truncated bodies,
//! oversized and corrupt batches, bad topic names, missing partitions. Also: pipelined
//! requests are answered in order, and idempotent produce drops duplicates.

mod common;

use bytes::Bytes;
use common::{correlation_of, Broker, RawClient};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const NONE: i16 = 0;
const CORRUPT_MESSAGE: i16 = 2;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const MESSAGE_TOO_LARGE: i16 = 10;
const INVALID_TOPIC_EXCEPTION: i16 = 17;
const UNSUPPORTED_VERSION: i16 = 35;
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
const INVALID_PRODUCER_EPOCH: i16 = 47;

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

fn create(client: &mut RawClient, name: &str, partitions: i32, configs: &[(&str, &str)]) -> i16 {
    let mut topic = CreatableTopic::default()
        .with_name(topic_name(name))
        .with_num_partitions(partitions)
        .with_replication_factor(1);
    for (k, v) in configs {
        topic.configs.push(
            kafka_protocol::messages::create_topics_request::CreatableTopicConfig::default()
                .with_name(StrBytes::from_string(k.to_string()))
                .with_value(Some(StrBytes::from_string(v.to_string()))),
        );
    }
    let response = client.call(&CreateTopicsRequest::default().with_topics(vec![topic]).with_timeout_ms(5000), 7);
    response.topics[0].error_code
}

fn produce_request(topic: &str, partition: i32, records: Bytes) -> ProduceRequest {
    ProduceRequest::default().with_acks(-1).with_timeout_ms(5000).with_topic_data(vec![TopicProduceData::default()
        .with_name(topic_name(topic))
        .with_partition_data(vec![PartitionProduceData::default().with_index(partition).with_records(Some(records))])])
}

/// A valid batch of `count` records, optionally from an idempotent producer, stamped
/// now: a producer's expiry (`producer.id.expiration.ms`, checked every housekeeping
/// tick) counts from its latest batch timestamp, and one stamped years ago expires at
/// the next tick, as in Kafka.
fn batch(count: i32, value_bytes: usize, producer: Option<(i64, i16, i32)>) -> Bytes {
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let mut bytes = skein_engine::batch::testing::batch_with(count, value_bytes, stamp, |_| None).to_vec();
    if let Some((pid, epoch, seq)) = producer {
        skein_engine::batch::testing::set_producer(&mut bytes, pid, epoch, seq);
    }
    Bytes::from(bytes)
}

fn produce(client: &mut RawClient, topic: &str, partition: i32, records: Bytes) -> (i16, i64) {
    let response = client.call(&produce_request(topic, partition, records), 9);
    let p = &response.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// The broker still answers a new connection.
fn alive(broker: &Broker) {
    let mut client = RawClient::connect(&broker.bootstrap());
    let response = client.call(&common::api_versions_request(), 3);
    assert_eq!(response.error_code, NONE);
}

// Thousands of idle connections cost a few KiB each, and a new client is answered
// at once (`cargo bench --bench node_bounds` runs 10,000).
#[test]
fn idle_connections_cost_little() {
    let dir = tempfile::tempdir().unwrap();
    // Without stall detection: in a debug build the burst of 4,000 accepts can overrun
    // the reactor's budget, and the stall report then loads the binary's symbols
    // (about 100 MiB in the test build, once), which is not what a connection costs.
    let broker = Broker::start(dir.path(), "1", &["--stall-threshold-ms", "0"]);
    alive(&broker);
    let before = broker.rss_bytes();
    let idle: Vec<std::net::TcpStream> =
        (0..4000).map(|_| std::net::TcpStream::connect(broker.bootstrap()).unwrap()).collect();
    let started = std::time::Instant::now();
    alive(&broker); // answered after every earlier connection was accepted
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "waited {:?}", started.elapsed());
    let growth = broker.rss_bytes().saturating_sub(before);
    assert!(growth < 4000 * 32 * 1024, "4,000 idle connections cost {} KiB", growth >> 10);
    assert!(broker.metric_sum("skein_connections") >= 4000, "every idle connection is held");
    drop(idle);
}

// Frames with an impossible size close the connection before anything is allocated.
#[test]
fn malformed_frames_close_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &["--socket-request-max-bytes", "1048576"]);
    for size in [-1i32, 0, 3, 1048577, i32::MAX] {
        let mut client = RawClient::connect(&broker.bootstrap());
        client.send_bytes(&size.to_be_bytes());
        client.send_bytes(&[0u8; 16]);
        assert!(client.is_closed(), "frame size {size}");
    }
    alive(&broker);
}

// An unknown API key and an unsupported version close the connection, as a Java
// broker does; ApiVersions at an unknown version gets the v0 UNSUPPORTED_VERSION reply.
#[test]
fn unknown_apis_and_versions() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    client.send_bytes(&[0, 0, 0, 10, 0x7f, 0x00, 0, 0, 0, 0, 0, 1, 0xff, 0xff]);
    assert!(client.is_closed(), "unknown api key");

    let mut client = RawClient::connect(&broker.bootstrap());
    let frame = client.frame(&MetadataRequest::default(), 12);
    let mut frame = frame.clone();
    frame[6..8].copy_from_slice(&99i16.to_be_bytes());
    client.send_bytes(&frame);
    assert!(client.is_closed(), "unsupported version");

    let mut client = RawClient::connect(&broker.bootstrap());
    let mut frame = client.frame(&common::api_versions_request(), 3);
    frame[6..8].copy_from_slice(&99i16.to_be_bytes());
    client.send_bytes(&frame);
    let mut body = client.read_frame().expect("v0 reply");
    assert_eq!(correlation_of(&body), 1);
    let _ = bytes::Buf::get_i32(&mut body);
    let response = <ApiVersionsResponse as kafka_protocol::protocol::Decodable>::decode(&mut body, 0).unwrap();
    assert_eq!(response.error_code, UNSUPPORTED_VERSION);
    assert!(response.api_keys.iter().any(|k| k.api_key == 18));
    alive(&broker);
}

// ApiVersions lists exactly what is implemented, with the required ranges.
#[test]
fn api_versions_lists_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    let response = client.call(&common::api_versions_request(), 3);
    let range = |key: i16| response.api_keys.iter().find(|k| k.api_key == key).map(|k| (k.min_version, k.max_version));
    assert_eq!(range(0), Some((3, 13)), "Produce");
    assert_eq!(range(1), Some((4, 18)), "Fetch");
    assert_eq!(range(2), Some((1, 11)), "ListOffsets");
    assert_eq!(range(3), Some((0, 13)), "Metadata");
    assert_eq!(range(57), Some((0, 2)), "UpdateFeatures");
    assert_eq!(range(18), Some((0, 5)), "ApiVersions");
    assert_eq!(range(22), Some((0, 5)), "InitProducerId");
    assert_eq!(range(10), Some((0, 6)), "FindCoordinator");
    assert_eq!(range(68), Some((0, 1)), "ConsumerGroupHeartbeat");
    assert_eq!(range(24), Some((0, 5)), "AddPartitionsToTxn");
    // KIP-890 part 2 (transactions v2) and topic ids (KIP-848, KIP-1319) at Kafka 4.4's
    // versions.
    assert_eq!(range(26), Some((0, 5)), "EndTxn");
    assert_eq!(range(27), Some((1, 2)), "WriteTxnMarkers");
    assert_eq!(range(28), Some((0, 6)), "TxnOffsetCommit");
    assert_eq!(range(8), Some((2, 10)), "OffsetCommit");
    assert_eq!(range(9), Some((1, 10)), "OffsetFetch");
    assert_eq!(range(42), Some((0, 3)), "DeleteGroups");
    assert_eq!(range(35), Some((1, 5)), "DescribeLogDirs");
    // Streams groups (KIP-1071).
    assert_eq!(range(88), Some((0, 1)), "StreamsGroupHeartbeat");
    assert_eq!(range(89), Some((0, 1)), "StreamsGroupDescribe");
    // The ACL APIs at Kafka 4's versions (v0 was removed by KIP-896).
    assert_eq!(range(29), Some((1, 3)), "DescribeAcls");
    assert_eq!(range(30), Some((1, 3)), "CreateAcls");
    // Delegation tokens at Kafka 4's versions (v0 was removed by KIP-896).
    assert_eq!(range(38), Some((1, 3)), "CreateDelegationToken");
    assert_eq!(range(39), Some((1, 2)), "RenewDelegationToken");
    assert_eq!(range(40), Some((1, 2)), "ExpireDelegationToken");
    assert_eq!(range(41), Some((1, 3)), "DescribeDelegationToken");
    assert_eq!(range(34), Some((1, 2)), "AlterReplicaLogDirs");
    // Nothing unimplemented is advertised: no controller-only APIs.
    assert_eq!(range(52), None, "Vote");
}

// ApiVersions v3+ names its client software as Kafka's pattern allows, or is answered
// INVALID_REQUEST with no APIs (as Kafka 4.4 does); v0-2 carry no name.
#[test]
fn api_versions_needs_a_client_software_name_from_v3() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    let unnamed = ApiVersionsRequest::default();
    let response = client.call(&unnamed, 3);
    assert_eq!((response.error_code, response.api_keys.len()), (42, 0), "INVALID_REQUEST");
    let spaced = common::api_versions_request().with_client_software_name(StrBytes::from_static_str("my client"));
    assert_eq!(client.call(&spaced, 4).error_code, 42);
    assert_eq!(client.call(&unnamed, 2).error_code, 0);
    assert_eq!(client.call(&common::api_versions_request(), 4).error_code, 0);
    alive(&broker);
}

// ApiVersions v5 (KIP-1242): a client naming another cluster or another node is told
// to rebootstrap (REBOOTSTRAP_REQUIRED); naming this one, or nothing, it gets the list.
#[test]
fn api_versions_v5_checks_cluster_and_node() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    let cluster = client.call(&MetadataRequest::default(), 12).cluster_id.expect("a cluster id");
    let ask = |client: &mut RawClient, cluster: Option<&str>, node: i32| {
        let request = common::api_versions_request()
            .with_cluster_id(cluster.map(|c| StrBytes::from_string(c.to_string())))
            .with_node_id(node);
        let response = client.call(&request, 5);
        (response.error_code, response.api_keys.len())
    };
    let listed = ask(&mut client, None, -1);
    assert_eq!(listed.0, 0);
    assert!(listed.1 > 50, "{listed:?}");
    assert_eq!(ask(&mut client, Some(&cluster), 1), listed, "this cluster and node");
    assert_eq!(ask(&mut client, Some("another-cluster"), 1).0, 129, "another cluster");
    assert_eq!(ask(&mut client, Some(&cluster), 7).0, 129, "another node");
    alive(&broker);
}

// A body cut short, and an array count far beyond the frame, close the connection
// without a panic or a large allocation.
#[test]
fn truncated_bodies_close_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    let frame = client.frame(&produce_request("t", 0, batch(1, 10, None)), 9);
    let mut cut = frame[..frame.len() - 20].to_vec();
    let len = (cut.len() - 4) as i32;
    cut[..4].copy_from_slice(&len.to_be_bytes());
    client.send_bytes(&cut);
    assert!(client.is_closed());

    // Produce v3 with a topic array claiming 2^31-1 entries.
    let mut client = RawClient::connect(&broker.bootstrap());
    let mut body = vec![0, 0, 0, 3, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, b'x'];
    body.extend_from_slice(&[0xff, 0xff, 0, 1, 0, 0, 3, 0xe8, 0x7f, 0xff, 0xff, 0xff]);
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    client.send_bytes(&frame);
    assert!(client.is_closed());
    alive(&broker);
}

// Produce errors: oversized batch, corrupt CRC, missing topic or partition.
#[test]
fn produce_errors() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(create(&mut client, "small", 2, &[("max.message.bytes", "1000")]), NONE);
    assert_eq!(produce(&mut client, "small", 0, batch(5, 10, None)), (NONE, 0));
    assert_eq!(produce(&mut client, "small", 1, batch(50, 100, None)).0, MESSAGE_TOO_LARGE);
    let mut corrupt = batch(3, 10, None).to_vec();
    corrupt[70] ^= 0x55;
    assert_eq!(produce(&mut client, "small", 0, Bytes::from(corrupt)).0, CORRUPT_MESSAGE);
    assert_eq!(produce(&mut client, "small", 7, batch(1, 10, None)).0, UNKNOWN_TOPIC_OR_PARTITION);
    assert_eq!(produce(&mut client, "absent", 0, batch(1, 10, None)).0, UNKNOWN_TOPIC_OR_PARTITION);
    // The coordinator's topic is not writable by clients.
    let find = FindCoordinatorRequest::default().with_key(StrBytes::from_static_str("g"));
    assert_eq!(client.call(&find, 3).error_code, NONE);
    assert_eq!(produce(&mut client, "__consumer_offsets", 0, batch(1, 10, None)).0, INVALID_TOPIC_EXCEPTION);
    // Nothing bad was stored: the next offset is still 5.
    assert_eq!(produce(&mut client, "small", 0, batch(1, 10, None)), (NONE, 5));
    // The five refusals are counted as produce errors (shards publish every 100 ms).
    std::thread::sleep(std::time::Duration::from_millis(300));
    let metrics = broker.metrics();
    let produce_errors: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("skein_request_errors_total{") && l.contains("api_key=\"0\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(produce_errors, 5, "{metrics}");
    alive(&broker);
}

// Bad topic names are refused by CreateTopics and Metadata with Kafka's error.
#[test]
fn bad_topic_names() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    for name in ["bad name", "slash/x", "..", &"x".repeat(250)] {
        assert_eq!(create(&mut client, name, 1, &[]), INVALID_TOPIC_EXCEPTION, "{name}");
        let request = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(topic_name(name)))]))
            .with_allow_auto_topic_creation(true);
        let response = client.call(&request, 12);
        assert_eq!(response.topics[0].error_code, INVALID_TOPIC_EXCEPTION, "{name}");
    }
    assert_eq!(create(&mut client, "fine.name_1-x", 1, &[]), NONE);
    assert_eq!(create(&mut client, "fine.name_1-x", 1, &[]), 36);
}

// Deeply pipelined produce requests on one connection are answered in request order.
#[test]
fn pipelined_requests_answer_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(create(&mut client, "pipe", 4, &[]), NONE);
    let mut frames = Vec::new();
    for i in 0..200 {
        frames.extend(client.frame(&produce_request("pipe", i % 4, batch(2, 50, None)), 9));
    }
    client.send_bytes(&frames);
    let mut next_offset = [0i64; 4];
    for i in 0..200 {
        let mut body = client.read_frame().expect("response");
        assert_eq!(correlation_of(&body), i + 2, "responses out of order");
        let response = client.decode::<ProduceRequest>(&mut body, 9);
        let p = &response.responses[0].partition_responses[0];
        assert_eq!(p.error_code, NONE);
        assert_eq!(p.base_offset, next_offset[(i % 4) as usize], "order kept per partition");
        next_offset[(i % 4) as usize] += 2;
    }
}

// A frame that arrives in pieces (the size with the first 1000 bytes, then the rest
// in two) is read whole: the broker takes what has arrived and waits for the rest (its
// CRC would catch a hole), and the frame sent after it is answered too. A client that
// leaves halfway through a body is closed, and the broker goes on.
#[test]
fn frames_arriving_in_pieces_are_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(create(&mut client, "pieces", 1, &[]), NONE);
    let first = client.frame(&produce_request("pieces", 0, batch(20, 10_000, None)), 9);
    let second = client.frame(&produce_request("pieces", 0, batch(3, 100, None)), 9);
    let cuts = [0, 4 + 1000, first.len() / 2, first.len()];
    for piece in cuts.windows(2) {
        client.send_bytes(&first[piece[0]..piece[1]]);
        std::thread::sleep(std::time::Duration::from_millis(150));
    }
    client.send_bytes(&second);
    for expected in [0, 20] {
        let mut body = client.read_frame().expect("response");
        let response = client.decode::<ProduceRequest>(&mut body, 9);
        let p = &response.responses[0].partition_responses[0];
        assert_eq!((p.error_code, p.base_offset), (NONE, expected));
    }
    let mut leaving = RawClient::connect(&broker.bootstrap());
    leaving.send_bytes(&first[..first.len() / 2]);
    leaving.stream.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(leaving.is_closed(), "a half-sent frame was not closed");
    alive(&broker);
}

// Idempotent produce: a retried batch gets its original offset, a gap and an old
// epoch are refused; the producer state survives a restart.
#[test]
fn idempotent_produce() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path(), "1", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(create(&mut client, "idem", 1, &[]), NONE);
    let init = client
        .call(&InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60000), 4);
    assert_eq!(init.error_code, NONE);
    let pid = init.producer_id.0;
    assert!(pid >= 0);
    assert_eq!(produce(&mut client, "idem", 0, batch(3, 10, Some((pid, 0, 0)))), (NONE, 0));
    assert_eq!(produce(&mut client, "idem", 0, batch(2, 10, Some((pid, 0, 3)))), (NONE, 3));
    // The retry of the second batch is not stored again.
    assert_eq!(produce(&mut client, "idem", 0, batch(2, 10, Some((pid, 0, 3)))), (NONE, 3));
    assert_eq!(produce(&mut client, "idem", 0, batch(1, 10, Some((pid, 0, 9)))).0, OUT_OF_ORDER_SEQUENCE_NUMBER);
    drop(client);
    broker.kill();
    broker.restart();
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(produce(&mut client, "idem", 0, batch(2, 10, Some((pid, 0, 3)))), (NONE, 3), "duplicate after restart");
    assert_eq!(produce(&mut client, "idem", 0, batch(1, 10, Some((pid, 0, 5)))), (NONE, 5));
    assert_eq!(produce(&mut client, "idem", 0, batch(1, 10, Some((pid, 1, 0)))), (NONE, 6));
    assert_eq!(produce(&mut client, "idem", 0, batch(1, 10, Some((pid, 0, 6)))).0, INVALID_PRODUCER_EPOCH);
    let init2 = client
        .call(&InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60000), 4);
    assert!(init2.producer_id.0 > pid, "producer ids are not reused after a restart");
}

// Lengths that claim more than the frame holds (2^31-element arrays, 4 GiB strings and
// byte fields) are refused before anything is allocated: the connection closes, and
// the broker, under an address-space limit where such an allocation would abort it,
// keeps serving.
#[test]
fn impossible_lengths_allocate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_limited(dir.path(), "1", &[], 16 << 30);
    let header = |key: i16, version: i16, flexible: bool| {
        let mut h = Vec::new();
        h.extend_from_slice(&key.to_be_bytes());
        h.extend_from_slice(&version.to_be_bytes());
        h.extend_from_slice(&7i32.to_be_bytes());
        h.extend_from_slice(&1i16.to_be_bytes());
        h.push(b'x');
        if flexible {
            h.push(0); // no tagged fields
        }
        h
    };
    let varint = |mut n: u64| {
        let mut out = Vec::new();
        while n >= 0x80 {
            out.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
        out
    };
    let mut frames = Vec::new();
    // Metadata v1: topics array of i32::MAX elements.
    frames.push([header(3, 1, false), i32::MAX.to_be_bytes().to_vec()].concat());
    // Metadata v12: compact topics array of u32::MAX - 1 elements.
    frames.push([header(3, 12, true), varint(u32::MAX as u64)].concat());
    // Produce v9: compact transactional id of 4 GiB.
    frames.push([header(0, 9, true), varint(u32::MAX as u64)].concat());
    // Produce v3: a topic whose record bytes claim i32::MAX bytes.
    let mut produce = header(0, 3, false);
    produce.extend_from_slice(&(-1i16).to_be_bytes()); // null transactional id
    produce.extend_from_slice(&(-1i16).to_be_bytes()); // acks
    produce.extend_from_slice(&5000i32.to_be_bytes()); // timeout
    produce.extend_from_slice(&1i32.to_be_bytes()); // one topic
    produce.extend_from_slice(&1i16.to_be_bytes());
    produce.push(b't');
    produce.extend_from_slice(&1i32.to_be_bytes()); // one partition
    produce.extend_from_slice(&0i32.to_be_bytes());
    produce.extend_from_slice(&i32::MAX.to_be_bytes()); // records length
    frames.push(produce);
    for frame in frames {
        let mut client = RawClient::connect(&broker.bootstrap());
        client.send_bytes(&[(frame.len() as i32).to_be_bytes().to_vec(), frame].concat());
        assert!(client.is_closed(), "a malformed frame closes the connection");
        alive(&broker);
    }
    assert!(!broker.log().contains("memory allocation"), "{}", broker.log());
}

// Producer state lives in `<offset>.snapshot` files: an idempotent producer whose
// last write is three segments back keeps deduplicating after a crash (snapshots
// written at each roll) and after a clean restart (a snapshot at the log end).
#[test]
fn producer_state_survives_three_segments_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path(), "1", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(create(&mut client, "far", 1, &[("segment.bytes", "1048576")]), NONE);
    let init = |client: &mut RawClient| {
        let request = InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60000);
        client.call(&request, 4).producer_id.0
    };
    let pid = init(&mut client);
    assert_eq!(produce(&mut client, "far", 0, batch(3, 10, Some((pid, 0, 0)))), (NONE, 0));
    assert_eq!(produce(&mut client, "far", 0, batch(2, 10, Some((pid, 0, 3)))), (NONE, 3));
    // Three and a half segments of other writes.
    for _ in 0..36 {
        assert_eq!(produce(&mut client, "far", 0, batch(10, 10_000, None)).0, NONE);
    }
    let segments = |broker: &Broker| {
        std::fs::read_dir(broker.data_dir.join("far-0"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".log"))
            .count()
    };
    assert!(segments(&broker) >= 4, "the producer's batches are three segments back");
    // Roll snapshots are written in the background; give them a moment, then crash.
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(client);
    broker.kill();
    broker.restart();
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(produce(&mut client, "far", 0, batch(2, 10, Some((pid, 0, 3)))), (NONE, 3), "duplicate after a crash");
    assert_eq!(produce(&mut client, "far", 0, batch(1, 10, Some((pid, 0, 9)))).0, OUT_OF_ORDER_SEQUENCE_NUMBER);
    let (error, fifth) = produce(&mut client, "far", 0, batch(1, 10, Some((pid, 0, 5))));
    assert_eq!(error, NONE);
    for _ in 0..12 {
        assert_eq!(produce(&mut client, "far", 0, batch(10, 10_000, None)).0, NONE);
    }
    drop(client);
    broker.stop();
    let snapshots: Vec<String> = std::fs::read_dir(broker.data_dir.join("far-0"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".snapshot"))
        .collect();
    assert_eq!(snapshots.len(), 2, "the newest two snapshots stay: {snapshots:?}");
    broker.restart();
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(produce(&mut client, "far", 0, batch(1, 10, Some((pid, 0, 5)))), (NONE, fifth), "after a clean stop");
    assert_eq!(produce(&mut client, "far", 0, batch(1, 10, Some((pid, 0, 6)))).0, NONE);
}

// As Apache Kafka 4.1 answers (checked against it): a producer the partition has no
// state for starts at any sequence; one silent for `producer.id.expiration.ms` is
// forgotten, so it may then resume at any sequence too. Never UNKNOWN_PRODUCER_ID.
#[test]
fn unknown_and_expired_producers() {
    let dir = tempfile::tempdir().unwrap();
    let extra = [
        "--producer-id-expiration-ms",
        "1000",
        "--producer-id-expiration-check-interval-ms",
        "100",
        "--housekeeping-interval-ms",
        "100",
    ];
    let broker = Broker::start(dir.path(), "1", &extra);
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(create(&mut client, "idle", 1, &[]), NONE);
    let request = InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60000);
    let (fresh, idle) = (client.call(&request, 4).producer_id.0, client.call(&request, 4).producer_id.0);
    let now = |pid: i64, seq: i32| batch(1, 10, Some((pid, 0, seq)));
    assert_eq!(produce(&mut client, "idle", 0, now(fresh, 5)), (NONE, 0));
    assert_eq!(produce(&mut client, "idle", 0, now(fresh, 0)).0, OUT_OF_ORDER_SEQUENCE_NUMBER);
    assert_eq!(produce(&mut client, "idle", 0, now(fresh, 6)), (NONE, 1));
    assert_eq!(produce(&mut client, "idle", 0, now(idle, 0)), (NONE, 2));
    assert_eq!(produce(&mut client, "idle", 0, now(idle, 7)).0, OUT_OF_ORDER_SEQUENCE_NUMBER);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(produce(&mut client, "idle", 0, now(idle, 7)), (NONE, 3), "expired: any sequence");
}

// acks=0 gets no response at all, yet the record is stored; acks outside -1/0/1 get
// INVALID_REQUIRED_ACKS.
#[test]
fn acks_zero_and_invalid_acks() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let mut client = RawClient::connect(&broker.bootstrap());
    assert_eq!(create(&mut client, "fire", 1, &[]), NONE);
    let silent = client.frame(&produce_request("fire", 0, batch(3, 10, None)).with_acks(0), 9);
    client.send_bytes(&silent);
    // The next response is for the next request: nothing came for acks=0.
    let (error, offset) = produce(&mut client, "fire", 0, batch(1, 10, None));
    assert_eq!((error, offset), (NONE, 3));
    let response = client.call(&produce_request("fire", 0, batch(1, 10, None)).with_acks(2), 9);
    assert_eq!(response.responses[0].partition_responses[0].error_code, 21);
}

/// Sends `request` at `version` and checks that an answer comes back (a default
/// request may carry errors, but the broker must decode it, answer and stay up).
fn answers<R: kafka_protocol::protocol::Request + Default>(client: &mut RawClient, version: i16) -> bool {
    let frame = client.frame(&R::default(), version);
    client.send_bytes(&frame);
    client.read_frame().is_some()
}

// Every advertised API answers a default request at its lowest and highest advertised
// version: nothing is advertised that the broker cannot decode, handle and encode.
#[test]
fn every_advertised_version_answers() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &["--group-initial-rebalance-delay-ms", "0"]);
    let mut client = RawClient::connect(&broker.bootstrap());
    let advertised = client.call(&common::api_versions_request(), 3);
    for api in &advertised.api_keys {
        for version in [api.min_version, api.max_version] {
            let mut client = RawClient::connect(&broker.bootstrap());
            let ok = match api.api_key {
                0 => {
                    // The default has acks=0, which gets no answer: ask with acks=1.
                    let frame = client.frame(&ProduceRequest::default().with_acks(1), version);
                    client.send_bytes(&frame);
                    client.read_frame().is_some()
                }
                1 => answers::<FetchRequest>(&mut client, version),
                2 => answers::<ListOffsetsRequest>(&mut client, version),
                3 => answers::<MetadataRequest>(&mut client, version),
                8 => answers::<OffsetCommitRequest>(&mut client, version),
                9 => answers::<OffsetFetchRequest>(&mut client, version),
                10 => answers::<FindCoordinatorRequest>(&mut client, version),
                11 => answers::<JoinGroupRequest>(&mut client, version),
                12 => answers::<HeartbeatRequest>(&mut client, version),
                13 => answers::<LeaveGroupRequest>(&mut client, version),
                14 => answers::<SyncGroupRequest>(&mut client, version),
                15 => answers::<DescribeGroupsRequest>(&mut client, version),
                16 => answers::<ListGroupsRequest>(&mut client, version),
                17 => answers::<SaslHandshakeRequest>(&mut client, version),
                18 => answers::<ApiVersionsRequest>(&mut client, version),
                19 => answers::<CreateTopicsRequest>(&mut client, version),
                20 => answers::<DeleteTopicsRequest>(&mut client, version),
                21 => answers::<DeleteRecordsRequest>(&mut client, version),
                22 => answers::<InitProducerIdRequest>(&mut client, version),
                23 => answers::<OffsetForLeaderEpochRequest>(&mut client, version),
                24 => answers::<AddPartitionsToTxnRequest>(&mut client, version),
                25 => answers::<AddOffsetsToTxnRequest>(&mut client, version),
                26 => answers::<EndTxnRequest>(&mut client, version),
                27 => answers::<WriteTxnMarkersRequest>(&mut client, version),
                28 => answers::<TxnOffsetCommitRequest>(&mut client, version),
                29 => answers::<DescribeAclsRequest>(&mut client, version),
                30 => answers::<CreateAclsRequest>(&mut client, version),
                31 => answers::<DeleteAclsRequest>(&mut client, version),
                32 => answers::<DescribeConfigsRequest>(&mut client, version),
                33 => answers::<AlterConfigsRequest>(&mut client, version),
                34 => answers::<AlterReplicaLogDirsRequest>(&mut client, version),
                35 => answers::<DescribeLogDirsRequest>(&mut client, version),
                36 => answers::<SaslAuthenticateRequest>(&mut client, version),
                37 => answers::<CreatePartitionsRequest>(&mut client, version),
                38 => answers::<CreateDelegationTokenRequest>(&mut client, version),
                39 => answers::<RenewDelegationTokenRequest>(&mut client, version),
                40 => answers::<ExpireDelegationTokenRequest>(&mut client, version),
                41 => answers::<DescribeDelegationTokenRequest>(&mut client, version),
                42 => answers::<DeleteGroupsRequest>(&mut client, version),
                43 => answers::<ElectLeadersRequest>(&mut client, version),
                44 => answers::<IncrementalAlterConfigsRequest>(&mut client, version),
                45 => answers::<AlterPartitionReassignmentsRequest>(&mut client, version),
                46 => answers::<ListPartitionReassignmentsRequest>(&mut client, version),
                47 => answers::<OffsetDeleteRequest>(&mut client, version),
                48 => answers::<DescribeClientQuotasRequest>(&mut client, version),
                49 => answers::<AlterClientQuotasRequest>(&mut client, version),
                50 => answers::<DescribeUserScramCredentialsRequest>(&mut client, version),
                51 => answers::<AlterUserScramCredentialsRequest>(&mut client, version),
                55 => answers::<DescribeQuorumRequest>(&mut client, version),
                57 => answers::<UpdateFeaturesRequest>(&mut client, version),
                60 => answers::<DescribeClusterRequest>(&mut client, version),
                61 => answers::<DescribeProducersRequest>(&mut client, version),
                64 => answers::<UnregisterBrokerRequest>(&mut client, version),
                65 => answers::<DescribeTransactionsRequest>(&mut client, version),
                66 => answers::<ListTransactionsRequest>(&mut client, version),
                68 => answers::<ConsumerGroupHeartbeatRequest>(&mut client, version),
                69 => answers::<ConsumerGroupDescribeRequest>(&mut client, version),
                71 => answers::<GetTelemetrySubscriptionsRequest>(&mut client, version),
                72 => answers::<PushTelemetryRequest>(&mut client, version),
                74 => answers::<ListConfigResourcesRequest>(&mut client, version),
                75 => answers::<DescribeTopicPartitionsRequest>(&mut client, version),
                76 => answers::<ShareGroupHeartbeatRequest>(&mut client, version),
                77 => answers::<ShareGroupDescribeRequest>(&mut client, version),
                78 => answers::<ShareFetchRequest>(&mut client, version),
                79 => answers::<ShareAcknowledgeRequest>(&mut client, version),
                80 => answers::<AddRaftVoterRequest>(&mut client, version),
                81 => answers::<RemoveRaftVoterRequest>(&mut client, version),
                83 => answers::<InitializeShareGroupStateRequest>(&mut client, version),
                84 => answers::<ReadShareGroupStateRequest>(&mut client, version),
                85 => answers::<WriteShareGroupStateRequest>(&mut client, version),
                86 => answers::<DeleteShareGroupStateRequest>(&mut client, version),
                87 => answers::<ReadShareGroupStateSummaryRequest>(&mut client, version),
                88 => answers::<StreamsGroupHeartbeatRequest>(&mut client, version),
                89 => answers::<StreamsGroupDescribeRequest>(&mut client, version),
                90 => answers::<DescribeShareGroupOffsetsRequest>(&mut client, version),
                91 => answers::<AlterShareGroupOffsetsRequest>(&mut client, version),
                92 => answers::<DeleteShareGroupOffsetsRequest>(&mut client, version),
                94 => answers::<UnregisterControllerRequest>(&mut client, version),
                other => panic!("api key {other} is advertised but missing from this test"),
            };
            assert!(ok, "api key {} v{version} got no answer", api.api_key);
        }
    }
    alive(&broker);
}

// Kafka's connections.max.idle.ms: a connection that sends nothing (not even a
// handshake) is closed once it has been idle that long; a busy one is not.
#[test]
fn idle_connections_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &["--connections-max-idle-ms", "500"]);
    let mut idle = RawClient::connect(&broker.bootstrap());
    let mut busy = RawClient::connect(&broker.bootstrap());
    for _ in 0..6 {
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(busy.call(&common::api_versions_request(), 3).error_code, 0);
    }
    idle.stream.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    assert!(idle.is_closed(), "the idle connection was closed");
    assert_eq!(busy.call(&common::api_versions_request(), 3).error_code, 0, "the busy one was not");
}

// Kafka's max.connections.per.ip: the connection past the limit is closed on accept,
// counted, and a place frees when a connection closes.
#[test]
fn connections_past_the_limit_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &["--max-connections-per-ip", "3"]);
    // The start's readiness probe is a connection too: wait until it is gone.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while broker.metric_sum("skein_connections") > 0 {
        assert!(std::time::Instant::now() < deadline, "connections left open");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Even then the broker may accept the probe's connection late (a loaded machine):
    // a connection closed at once is retried until three are served.
    let mut open: Vec<RawClient> = Vec::new();
    while open.len() < 3 {
        let mut client = RawClient::connect(&broker.bootstrap());
        let frame = client.frame(&common::api_versions_request(), 3);
        let sent = client.try_send_bytes(&frame);
        match client.read_frame().filter(|_| sent) {
            Some(mut body) => {
                assert_eq!(client.decode::<ApiVersionsRequest>(&mut body, 3).error_code, NONE);
                open.push(client);
            }
            None => {
                assert!(std::time::Instant::now() < deadline, "only {} connections were served", open.len());
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }
    let mut refused = RawClient::connect(&broker.bootstrap());
    assert!(refused.is_closed(), "a fourth connection was served");
    drop(open.pop());
    // The place frees once the broker sees the close.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let mut client = RawClient::connect(&broker.bootstrap());
        let frame = client.frame(&common::api_versions_request(), 3);
        client.send_bytes(&frame);
        if client.read_frame().is_some() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the freed place was not given back");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(broker.metric_sum("skein_connections_refused_total") >= 1);
}
