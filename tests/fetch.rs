//! Fetch as Kafka serves it: fetch sessions (KIP-227) with incremental requests and
//! responses, their epochs and errors; `min_bytes` honoured across the partitions of a
//! request; and long polls on other shards cancelled when the request completes.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{create_topic, Broker, RawClient};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
const INVALID_FETCH_SESSION_EPOCH: i16 = 71;

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

fn produce(client: &mut RawClient, topic: &str, partition: i32, records: i32) {
    let batch = skein_engine::batch::testing::batch(records, 100);
    let request =
        ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![TopicProduceData::default().with_name(name(topic)).with_partition_data(vec![
                PartitionProduceData::default().with_index(partition).with_records(Some(batch)),
            ])]);
    let response = client.call(&request, 9);
    assert_eq!(response.responses[0].partition_responses[0].error_code, 0);
}

/// Produces one record to `topic`'s `partition` 300 ms from now, on its own connection.
fn produce_later(broker: &Broker, topic: &'static str, partition: i32) -> std::thread::JoinHandle<()> {
    let bootstrap = broker.bootstrap();
    std::thread::spawn(move || {
        let mut client = RawClient::connect(&bootstrap);
        std::thread::sleep(Duration::from_millis(300));
        produce(&mut client, topic, partition, 1);
    })
}

fn partition(p: i32, offset: i64) -> FetchPartition {
    FetchPartition::default().with_partition(p).with_fetch_offset(offset).with_partition_max_bytes(1 << 20)
}

fn fetch(session: i32, epoch: i32, topic: &str, partitions: Vec<FetchPartition>) -> FetchRequest {
    let topics = if partitions.is_empty() {
        vec![]
    } else {
        vec![FetchTopic::default().with_topic(name(topic)).with_partitions(partitions)]
    };
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_session_id(session)
        .with_session_epoch(epoch)
        .with_topics(topics)
}

/// (partition, high watermark, record bytes) of every partition in a response.
fn answered(response: &FetchResponse) -> Vec<(i32, i64, usize)> {
    response
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| (p.partition_index, p.high_watermark, p.records.as_ref().map_or(0, Bytes::len)))
        .collect()
}

// A session opens with a full fetch; incremental fetches name only what changed and
// get back only partitions with news; epochs are checked; forgotten partitions leave
// the session; epoch -1 closes it.
#[test]
fn fetch_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    create_topic(&broker, "s", 4);
    let mut client = RawClient::connect(&broker.bootstrap());
    produce(&mut client, "s", 0, 3);

    let all = (0..4).map(|p| partition(p, 0)).collect();
    let opened = client.call(&fetch(0, 0, "s", all), 12);
    assert_eq!(opened.error_code, 0);
    let id = opened.session_id;
    assert_ne!(id, 0, "a session was opened");
    assert_eq!(answered(&opened).len(), 4, "a full response names every partition");
    assert!(answered(&opened)[0].2 > 0);

    // Nothing new: an empty incremental response.
    let quiet = client.call(&fetch(id, 1, "s", vec![partition(0, 3)]), 12);
    assert_eq!((quiet.error_code, quiet.session_id), (0, id));
    assert_eq!(answered(&quiet), vec![]);

    // New data on partition 2 only: only it comes back, with the records.
    produce(&mut client, "s", 2, 2);
    let news = client.call(&fetch(id, 2, "s", vec![]), 12);
    let parts = answered(&news);
    assert_eq!(parts.len(), 1, "{parts:?}");
    assert_eq!((parts[0].0, parts[0].1), (2, 2));
    assert!(parts[0].2 > 0);

    // The same epoch again, an unknown session, and epoch > 0 without a session.
    assert_eq!(client.call(&fetch(id, 2, "s", vec![]), 12).error_code, INVALID_FETCH_SESSION_EPOCH);
    assert_eq!(client.call(&fetch(id.wrapping_add(7), 1, "s", vec![]), 12).error_code, FETCH_SESSION_ID_NOT_FOUND);
    assert_eq!(client.call(&fetch(0, 3, "s", vec![]), 12).error_code, INVALID_FETCH_SESSION_EPOCH);

    // Forget partition 2 (and move its offset on for the record): new data there is
    // no longer reported; partition 1 still is.
    let mut forget = fetch(id, 3, "s", vec![]);
    forget.forgotten_topics_data = vec![ForgottenTopic::default().with_topic(name("s")).with_partitions(vec![2])];
    assert_eq!(client.call(&forget, 12).error_code, 0);
    produce(&mut client, "s", 2, 1);
    produce(&mut client, "s", 1, 1);
    let after = client.call(&fetch(id, 4, "s", vec![]), 12);
    assert_eq!(answered(&after).iter().map(|p| p.0).collect::<Vec<_>>(), vec![1]);

    // Epoch -1 closes the session and answers as a sessionless full fetch.
    let closing = client.call(&fetch(id, -1, "s", (0..4).map(|p| partition(p, 0)).collect()), 12);
    assert_eq!((closing.error_code, closing.session_id, answered(&closing).len()), (0, 0, 4));
    assert_eq!(client.call(&fetch(id, 5, "s", vec![]), 12).error_code, FETCH_SESSION_ID_NOT_FOUND);

    // From v13 a session names topics by id.
    let metadata = client.call(&MetadataRequest::default().with_topics(None), 12);
    let topic_id = metadata.topics.iter().find(|t| t.name.as_ref().unwrap().0.as_str() == "s").unwrap().topic_id;
    let by_id = |session, epoch, partitions: Vec<FetchPartition>| {
        let mut request = fetch(session, epoch, "s", vec![]);
        if !partitions.is_empty() {
            request.topics = vec![FetchTopic::default().with_topic_id(topic_id).with_partitions(partitions)];
        }
        request
    };
    // Positions at each partition's end: 3, 1, 3 and 0 records.
    let ends = [3, 1, 3, 0];
    let opened = client.call(&by_id(0, 0, (0..4).map(|p| partition(p, ends[p as usize])).collect()), 16);
    assert_ne!(opened.session_id, 0);
    produce(&mut client, "s", 3, 1);
    let news = client.call(&by_id(opened.session_id, 1, vec![]), 16);
    assert_eq!(news.responses.len(), 1);
    assert_eq!(news.responses[0].topic_id, topic_id);
    assert_eq!(answered(&news).iter().map(|p| p.0).collect::<Vec<_>>(), vec![3]);
}

// A consumer's session reads only the partitions that may have changed: an idle
// partition costs no read at an incremental fetch, and yet every change to one is
// seen: new records (a long poll wakes for them), a log start that DeleteRecords
// moved, and a new metadata image (read whole again, as ACLs may have changed).
#[test]
fn an_incremental_session_reads_only_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    create_topic(&broker, "i", 100);
    let mut client = RawClient::connect(&broker.bootstrap());
    produce(&mut client, "i", 7, 3);
    let opened = client.call(&fetch(0, 0, "i", (0..100).map(|p| partition(p, 0)).collect()), 12);
    let id = opened.session_id;
    assert_ne!(id, 0);
    assert_eq!(answered(&opened).len(), 100);
    // Partition 7's records were taken: its offset moves to its end.
    assert_eq!(answered(&client.call(&fetch(id, 1, "i", vec![partition(7, 3)]), 12)), vec![]);

    // Shards publish their metrics every 100 ms.
    let reads = || {
        std::thread::sleep(Duration::from_millis(400));
        broker.metric_sum("skein_fetch_partition_reads_total")
    };
    let before = reads();
    for epoch in 2..12 {
        assert_eq!(answered(&client.call(&fetch(id, epoch, "i", vec![]), 12)), vec![]);
    }
    assert_eq!(reads() - before, 0, "ten fetches with nothing new read nothing (100 partitions each before)");

    // Records on an idle partition end a long poll at once.
    let producer = produce_later(&broker, "i", 42);
    let started = Instant::now();
    let woke = client.call(&fetch(id, 12, "i", vec![]).with_max_wait_ms(10_000).with_min_bytes(1), 12);
    producer.join().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    let parts = answered(&woke);
    assert_eq!(parts.len(), 1, "{parts:?}");
    assert_eq!((parts[0].0, parts[0].1), (42, 1));
    assert!(parts[0].2 > 0);

    // DeleteRecords moves partition 7's log start: the session reports it.
    use delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
    let delete = DeleteRecordsRequest::default().with_timeout_ms(5000).with_topics(vec![DeleteRecordsTopic::default()
        .with_name(name("i"))
        .with_partitions(vec![DeleteRecordsPartition::default().with_partition_index(7).with_offset(2)])]);
    let deleted = client.call(&delete, 2);
    assert_eq!(deleted.topics[0].partitions[0].error_code, 0);
    let moved = client.call(&fetch(id, 13, "i", vec![partition(42, 1)]), 12);
    let starts: Vec<(i32, i64)> =
        moved.responses.iter().flat_map(|t| &t.partitions).map(|p| (p.partition_index, p.log_start_offset)).collect();
    assert_eq!(starts, vec![(7, 2)]);

    // A new metadata image: the next fetch reads every partition again.
    create_topic(&broker, "other", 1);
    let before = reads();
    assert_eq!(answered(&client.call(&fetch(id, 14, "i", vec![]), 12)), vec![]);
    assert_eq!(reads() - before, 100);
}

// min_bytes counts bytes over every partition of the request, on both shards: the
// answer waits until the second partition's data makes up the minimum.
#[test]
fn min_bytes_across_partitions_and_cancelled_waits() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    create_topic(&broker, "m", 2);
    let mut client = RawClient::connect(&broker.bootstrap());
    let one_batch = skein_engine::batch::testing::batch(1, 100).len() as i32;
    let request = fetch(0, -1, "m", vec![partition(0, 0), partition(1, 0)])
        .with_max_wait_ms(10_000)
        .with_min_bytes(one_batch + 1);
    let bootstrap = broker.bootstrap();
    let producer = std::thread::spawn(move || {
        let mut client = RawClient::connect(&bootstrap);
        std::thread::sleep(Duration::from_millis(300));
        produce(&mut client, "m", 0, 1);
        std::thread::sleep(Duration::from_millis(500));
        produce(&mut client, "m", 1, 1);
    });
    let started = Instant::now();
    let response = client.call(&request, 12);
    let waited = started.elapsed();
    producer.join().unwrap();
    let parts = answered(&response);
    assert!(waited >= Duration::from_millis(700), "answered after {waited:?}, before min_bytes was there: {parts:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert!(parts.iter().all(|p| p.2 > 0), "both partitions' records: {parts:?}");

    // min_bytes 1: the first arrival answers, and the wait parked on the other
    // partition (and shard) is dropped at once, not left for max_wait_ms.
    let request = fetch(0, -1, "m", vec![partition(0, 1), partition(1, 1)]).with_max_wait_ms(20_000).with_min_bytes(1);
    let producer = produce_later(&broker, "m", 0);
    let started = Instant::now();
    let response = client.call(&request, 12);
    producer.join().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(answered(&response).iter().filter(|p| p.2 > 0).count(), 1);
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let parked = broker.metric_sum("skein_fetch_waits_parked");
        if parked == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{parked} fetch waits still parked after their request was answered");
        std::thread::sleep(Duration::from_millis(100));
    }

    // min_bytes 0 answers at once, data or not.
    let started = Instant::now();
    client.call(&fetch(0, -1, "m", vec![partition(0, 99)]).with_max_wait_ms(5_000).with_min_bytes(0), 12);
    assert!(started.elapsed() < Duration::from_secs(2));
}

// A long poll over 8 partitions (on both shards) that wakes on one reads that one
// again, not all 8: 9 partition reads in all, where re-reading everything made 16.
// The others are answered with what their first read found.
#[test]
fn a_woken_long_poll_reads_again_only_what_woke() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    create_topic(&broker, "w", 8);
    let mut client = RawClient::connect(&broker.bootstrap());
    produce(&mut client, "w", 5, 2);
    let before = broker.metric_sum("skein_fetch_partition_reads_total");
    let offsets = |p: i32| if p == 5 { 2 } else { 0 };
    let request = fetch(0, -1, "w", (0..8).map(|p| partition(p, offsets(p))).collect())
        .with_max_wait_ms(10_000)
        .with_min_bytes(1);
    let producer = produce_later(&broker, "w", 3);
    let started = Instant::now();
    let response = client.call(&request, 12);
    producer.join().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    let mut parts = answered(&response);
    parts.sort();
    assert_eq!(parts.len(), 8, "{parts:?}");
    for (p, high_watermark, bytes) in parts {
        match p {
            3 => assert!(high_watermark == 1 && bytes > 0, "partition 3: {high_watermark}, {bytes} bytes"),
            5 => assert!(high_watermark == 2 && bytes == 0, "partition 5: {high_watermark}, {bytes} bytes"),
            _ => assert!(high_watermark == 0 && bytes == 0, "partition {p}: {high_watermark}, {bytes} bytes"),
        }
    }
    // Shards publish their metrics every 100 ms: wait for the count to settle.
    let reads = || broker.metric_sum("skein_fetch_partition_reads_total") - before;
    let deadline = Instant::now() + Duration::from_secs(3);
    while reads() < 9 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(reads(), 9);
}

// The response's max_bytes bounds what is read, not just what is sent: 40 partitions
// of 110 KB each under a 256 KiB max_bytes read about 256 KiB (not 4.4 MB), and a
// partition the first round's budget did not reach still gets data when the earlier
// ones are empty (the unused budget moves on, as in Kafka's sequential reads), on one
// shard and on two (each reading its partitions within its share of the budget).
#[test]
fn max_bytes_bounds_the_reads() {
    for shards in ["1", "2"] {
        max_bytes_bounds_the_reads_on(shards);
    }
}

fn max_bytes_bounds_the_reads_on(shards: &str) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), shards, &[]);
    create_topic(&broker, "wide", 40);
    let mut client = RawClient::connect(&broker.bootstrap());
    for p in 0..40 {
        produce(&mut client, "wide", p, 1000); // 1,000 records of 100 bytes: one ~110 KB batch
    }
    let bytes_out = |broker: &Broker| -> u64 {
        let metrics = broker.metrics();
        let line = metrics.lines().find(|l| l.starts_with("skein_bytes_out_total")).unwrap().to_string();
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let before = bytes_out(&broker);
    let all: Vec<FetchPartition> = (0..40).map(|p| partition(p, 0)).collect();
    let response = client.call(&fetch(0, -1, "wide", all).with_max_bytes(256 << 10), 12);
    let got = answered(&response);
    assert_eq!(got.len(), 40, "every partition answers, with its high watermark");
    assert!(got.iter().all(|&(_, hw, _)| hw == 1000));
    let sent: usize = got.iter().map(|&(_, _, bytes)| bytes).sum();
    assert!(sent > 0 && sent <= 256 << 10, "sent {sent}");
    let read = bytes_out(&broker) - before;
    // At most one batch past the budget is read (a read returns whole batches).
    assert!(read <= (256 << 10) + 2 * 110_000, "read {read} bytes for a 256 KiB response");
    // Only the last partition has data past these offsets: it is reached in a later round.
    let mut wanted: Vec<FetchPartition> = (0..39).map(|p| partition(p, 1000)).collect();
    wanted.push(partition(39, 0));
    let response = client.call(&fetch(0, -1, "wide", wanted).with_max_bytes(4 << 20), 12);
    let got = answered(&response);
    assert!(got.iter().find(|&&(p, _, _)| p == 39).unwrap().2 > 0, "the last partition got its data");
}

// On two shards, a share of the budget that its shard's partitions leave unused goes
// to the other shard's: with data only in the partitions of one shard (the even ones),
// a 256 KiB fetch still returns close to 256 KiB, not only that shard's half.
#[test]
fn an_unused_share_of_the_budget_goes_to_the_other_shard() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    create_topic(&broker, "halves", 40);
    let mut client = RawClient::connect(&broker.bootstrap());
    for p in (0..40).step_by(2) {
        produce(&mut client, "halves", p, 300); // one ~33 KB batch
    }
    let all: Vec<FetchPartition> = (0..40).map(|p| partition(p, 0)).collect();
    let response = client.call(&fetch(0, -1, "halves", all).with_max_bytes(256 << 10), 12);
    let got = answered(&response);
    assert_eq!(got.len(), 40);
    let sent: usize = got.iter().map(|&(_, _, bytes)| bytes).sum();
    assert!(sent > 200 << 10 && sent <= 256 << 10, "sent {sent}");
}

// A fetch response far larger than the socket takes at once reaches a reader that
// pauses before reading, whole and in order: 4 partitions of 16 distinct batches
// (about 7 MB, sent as shared segments with vectored writes) decode into exactly the
// batches produced, at their offsets. With a 1 MiB cache the data is read back cold,
// and no record byte is copied: the response is made of slices of the buffers the
// device read into.
#[test]
fn large_responses_reach_slow_readers_intact() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &["--cache-mb-per-shard", "1"]);
    create_topic(&broker, "large", 4);
    let mut client = RawClient::connect(&broker.bootstrap());
    let mut produced: Vec<Vec<Bytes>> = vec![Vec::new(); 4];
    for b in 0..16 {
        for (p, batches) in produced.iter_mut().enumerate() {
            let key = move |i: i32| Some(format!("p{p}-b{b}-{i}").into_bytes());
            let batch = skein_engine::batch::testing::batch_with(1000, 100, 1_700_000_000_000, key);
            let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(5000).with_topic_data(vec![
                TopicProduceData::default().with_name(name("large")).with_partition_data(vec![
                    PartitionProduceData::default().with_index(p as i32).with_records(Some(batch.clone())),
                ]),
            ]);
            let response = client.call(&request, 9);
            assert_eq!(response.responses[0].partition_responses[0].error_code, 0);
            batches.push(batch);
        }
    }
    let copied_fetch = |broker: &Broker| -> u64 {
        let metrics = broker.metrics();
        let line = metrics.lines().find(|l| l.starts_with("skein_copied_bytes_total") && l.contains("fetch"));
        line.unwrap().rsplit(' ').next().unwrap().parse().unwrap()
    };
    let (copied_before, cold_before) = (copied_fetch(&broker), broker.metric_sum("skein_disk_read_bytes_total"));
    let all = (0..4).map(|p| partition(p, 0).with_partition_max_bytes(4 << 20)).collect();
    let request = fetch(0, -1, "large", all).with_max_bytes(16 << 20);
    let frame = client.frame(&request, 12);
    client.send_bytes(&frame);
    std::thread::sleep(Duration::from_millis(500));
    let mut body = client.read_frame().expect("a response");
    let response = client.decode::<FetchRequest>(&mut body, 12);
    let partitions: Vec<_> = response.responses.iter().flat_map(|t| t.partitions.iter()).collect();
    assert_eq!(partitions.len(), 4);
    let mut sent = 0;
    for data in partitions {
        let expected = &produced[data.partition_index as usize];
        let mut records = data.records.clone().expect("records");
        sent += records.len();
        for (b, original) in expected.iter().enumerate() {
            let size = skein_engine::batch::peek_size(&records).expect("a batch header");
            let batch = skein_engine::batch::Batch::validate(records.split_to(size), 1 << 20).expect("a valid batch");
            assert_eq!(batch.base_offset().0, b as i64 * 1000, "partition {}", data.partition_index);
            // The stored batch is the produced one with its base offset and leader
            // epoch set: every other byte is the client's.
            assert_eq!(batch.bytes()[8..12], original[8..12]);
            assert_eq!(batch.bytes()[16..], original[16..], "partition {} batch {b}", data.partition_index);
        }
        assert!(records.is_empty(), "partition {}: bytes past the last batch", data.partition_index);
    }
    assert!(sent > 6 << 20, "sent {sent} record bytes");
    let cold = broker.metric_sum("skein_disk_read_bytes_total") - cold_before;
    assert!(cold >= sent as u64 / 2, "{cold} bytes read cold for {sent} sent");
    assert_eq!(copied_fetch(&broker) - copied_before, 0, "record bytes copied for a cold fetch");
}

// Clients that pipeline large fetches and never read the responses hold only their
// response budget: the broker's memory stays bounded, and a client that reads keeps
// being served meanwhile. Without response budgets, each of these 48 fetches built a
// 40 MB response in memory (about 1.9 GB).
#[test]
fn slow_readers_hold_only_their_budget() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    create_topic(&broker, "deep", 8);
    let mut client = RawClient::connect(&broker.bootstrap());
    for p in 0..8 {
        for _ in 0..5 {
            let batch = skein_engine::batch::testing::batch(1000, 1000); // ~1 MB
            let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(5000).with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(name("deep"))
                    .with_partition_data(vec![PartitionProduceData::default().with_index(p).with_records(Some(batch))]),
            ]);
            assert_eq!(client.call(&request, 9).responses[0].partition_responses[0].error_code, 0);
        }
    }
    let everything = || {
        let partitions: Vec<FetchPartition> =
            (0..8).map(|p| partition(p, 0).with_partition_max_bytes(64 << 20)).collect();
        fetch(0, -1, "deep", partitions).with_max_bytes(64 << 20)
    };
    // A reading client gets what the connection budget allows, whole batches.
    let response = client.call(&everything(), 12);
    let sent: usize = answered(&response).iter().map(|&(_, _, bytes)| bytes).sum();
    assert!(sent > 1 << 20 && sent <= (16 << 20) + (1 << 20), "a reading client got {sent} bytes");

    let baseline = broker.rss_bytes();
    let mut hostile: Vec<RawClient> = (0..12).map(|_| RawClient::connect(&broker.bootstrap())).collect();
    for connection in &mut hostile {
        let mut frames = Vec::new();
        for _ in 0..4 {
            frames.extend(connection.frame(&everything(), 12));
        }
        connection.send_bytes(&frames);
    }
    let mut peak = baseline;
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        peak = peak.max(broker.rss_bytes());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Meanwhile others are served: metadata, and a fetch that reads.
    let mut other = RawClient::connect(&broker.bootstrap());
    let started = Instant::now();
    let metadata = other.call(&MetadataRequest::default().with_topics(None), 9);
    assert_eq!(metadata.topics.len(), 1);
    let one = fetch(0, -1, "deep", vec![partition(3, 0)]);
    assert!(answered(&other.call(&one, 12))[0].2 > 0, "a reading client gets data");
    assert!(started.elapsed() < Duration::from_secs(2), "others waited {:?}", started.elapsed());
    peak = peak.max(broker.rss_bytes());
    let held = broker.metric_sum("skein_response_bytes_held");
    // The shard's 64 MiB, plus at most one 256 KiB floor (and one batch past it) per connection.
    assert!(held <= (64 << 20) + 12 * (2 << 20), "responses held: {held}");
    assert!(broker.metric_sum("skein_fetch_budget_waits_total") > 0);
    let growth = peak.saturating_sub(baseline);
    assert!(growth < 300 << 20, "RSS grew by {} MiB", growth >> 20);
    // Gone clients release what they held.
    drop(hostile);
    let deadline = Instant::now() + Duration::from_secs(10);
    while broker.metric_sum("skein_response_bytes_held") > 0 {
        assert!(Instant::now() < deadline, "responses of closed connections still held");
        std::thread::sleep(Duration::from_millis(50));
    }
}

// OffsetForLeaderEpoch answers as a Kafka leader (KIP-101, KIP-320): the current epoch
// ends at the log end, a newer one is undefined, a wrong current epoch is fenced or
// unknown, a missing partition is unknown.
#[test]
fn offset_for_leader_epoch() {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    create_topic(&broker, "epochs", 2);
    let mut client = RawClient::connect(&broker.bootstrap());
    produce(&mut client, "epochs", 0, 7);
    produce(&mut client, "epochs", 0, 3);
    let ask = |partition: i32, current: i32, epoch: i32| {
        OffsetForLeaderPartition::default()
            .with_partition(partition)
            .with_current_leader_epoch(current)
            .with_leader_epoch(epoch)
    };
    let request = OffsetForLeaderEpochRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
        OffsetForLeaderTopic::default().with_topic(name("epochs")).with_partitions(vec![
            ask(0, 0, 0),
            ask(1, -1, 0),
            ask(0, -1, 4),
            ask(0, -1, -1),
            ask(0, 1, 0),
            ask(0, -2, 0),
            ask(7, -1, 0),
        ]),
    ]);
    let response = client.call(&request, 4);
    let answers: Vec<(i16, i32, i64)> =
        response.topics[0].partitions.iter().map(|p| (p.error_code, p.leader_epoch, p.end_offset)).collect();
    assert_eq!(
        answers,
        vec![
            (0, 0, 10),   // the current epoch ends at the log end
            (0, 0, 0),    // an empty partition in its first epoch
            (0, -1, -1),  // a newer epoch than any known
            (0, -1, -1),  // no epoch
            (75, -1, -1), // UNKNOWN_LEADER_EPOCH: the client is ahead
            (74, -1, -1), // FENCED_LEADER_EPOCH: the client is behind
            (3, -1, -1),  // UNKNOWN_TOPIC_OR_PARTITION
        ]
    );
}
