//! Peak broker memory under hostile and idle clients (node-bounds issue, section 1),
//! each scenario on a fresh one-shard broker (release build), with a normal client's
//! Metadata and Fetch latency measured while the scenario holds:
//!
//! - `idle`: 10,000 connections that send nothing;
//! - `fetch`: 100 connections each pipelining eight fetches of 500 partitions with
//!   64 MiB `max_bytes`, never reading a response;
//! - `prefixes`: 1,000 connections sending 2 GiB size prefixes and 2^31-element arrays.
//!
//! `cargo bench --bench node_bounds`. Knobs: `SKEIN_BOUNDS_IDLE` (connections, default
//! 10000), `SKEIN_BOUNDS_FETCHERS` (default 100). Prints each scenario's resident
//! memory after setup, its peak (VmHWM), the growth, and the stated budget for it.

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{create_topic, Broker, RawClient};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const MIB: u64 = 1 << 20;
/// Response bytes one shard holds unwritten (control/src/limits.rs).
const SHARD_RESPONSE_BYTES: u64 = 64 * MIB;
/// The smallest fetch grant, which a connection holding nothing always gets.
const FETCH_GRANT_FLOOR: u64 = MIB / 4;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// (resident, peak resident) of the broker, in bytes.
fn memory(broker: &Broker) -> (u64, u64) {
    let pid = broker.child.as_ref().unwrap().id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn topic(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// Milliseconds a new client waits for Metadata, then for a one-partition Fetch.
fn served(broker: &Broker) -> (f64, f64) {
    let mut client = RawClient::connect(&broker.bootstrap());
    let started = Instant::now();
    client.call(&MetadataRequest::default().with_topics(None), 9);
    let metadata = started.elapsed();
    let started = Instant::now();
    let partition = FetchPartition::default().with_partition(0).with_fetch_offset(0).with_partition_max_bytes(1 << 20);
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default().with_topic(topic("wide")).with_partitions(vec![partition])]);
    client.call(&request, 12);
    (metadata.as_secs_f64() * 1e3, started.elapsed().as_secs_f64() * 1e3)
}

/// Prints the scenario's memory: growth is measured past the resident memory after
/// setup and the batch cache's growth (the cache has its own bound, 256 MiB a shard).
fn report(name: &str, broker: &Broker, setup: (u64, u64), budget: u64, note: &str) {
    let (metadata_ms, fetch_ms) = served(broker);
    let held = broker.metric_sum("skein_response_bytes_held");
    let cache = broker.metric_sum("skein_batch_cache_bytes");
    let (_, peak) = memory(broker);
    let growth = peak.saturating_sub(setup.0).saturating_sub(cache.saturating_sub(setup.1));
    println!(
        "{name:9} rss after setup {:4} MiB  peak {:4} MiB  cache {:4} -> {:4} MiB  growth past the cache {:4} MiB  \
         budget {:4} MiB  {}  responses held {:3} MiB  new client: metadata {metadata_ms:.1} ms, fetch {fetch_ms:.1} ms  \
         ({note})",
        setup.0 / MIB,
        peak / MIB,
        setup.1 / MIB,
        cache / MIB,
        growth / MIB,
        budget / MIB,
        if growth <= budget { "within" } else { "OVER" },
        held / MIB,
    );
}

/// Resident memory and batch cache bytes once a scenario's data is loaded.
fn setup(broker: &Broker) -> (u64, u64) {
    (memory(broker).0, broker.metric_sum("skein_batch_cache_bytes"))
}

/// A broker with topic `wide`: `partitions` partitions of `batches` ~100 KB batches.
fn broker_with_data(dir: &std::path::Path, partitions: i32, batches: usize) -> Broker {
    let broker = Broker::start(dir, "1", &[]);
    create_topic(&broker, "wide", partitions);
    let mut client = RawClient::connect(&broker.bootstrap());
    for p in 0..partitions {
        for _ in 0..batches {
            let batch = skein_engine::batch::testing::batch(100, 1000);
            let request = ProduceRequest::default().with_acks(1).with_timeout_ms(5000).with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(topic("wide"))
                    .with_partition_data(vec![PartitionProduceData::default().with_index(p).with_records(Some(batch))]),
            ]);
            client.call(&request, 9);
        }
    }
    broker
}

fn idle(connections: u64) {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker_with_data(dir.path(), 1, 1);
    let setup = setup(&broker);
    let mut held = Vec::new();
    for _ in 0..connections {
        held.push(TcpStream::connect(broker.bootstrap()).unwrap());
    }
    // Every connection accepted: a metadata answer on a new one comes after them.
    served(&broker);
    let per_connection = 16 * 1024;
    report(
        "idle",
        &broker,
        setup,
        connections * per_connection,
        &format!("{connections} connections, budget 16 KiB each"),
    );
}

fn fetch_storm(fetchers: u64) {
    let dir = tempfile::tempdir().unwrap();
    // 500 partitions of 200 KB: 100 MB a hostile fetch could ask for at once.
    let broker = broker_with_data(dir.path(), 500, 2);
    let setup = setup(&broker);
    let partitions: Vec<FetchPartition> = (0..500)
        .map(|p| FetchPartition::default().with_partition(p).with_fetch_offset(0).with_partition_max_bytes(64 << 20))
        .collect();
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_bytes(64 << 20)
        .with_topics(vec![FetchTopic::default().with_topic(topic("wide")).with_partitions(partitions)]);
    let mut held = Vec::new();
    for _ in 0..fetchers {
        let mut client = RawClient::connect(&broker.bootstrap());
        let mut frames = Vec::new();
        for _ in 0..8 {
            frames.extend(client.frame(&request, 12));
        }
        client.send_bytes(&frames);
        held.push(client);
    }
    std::thread::sleep(Duration::from_secs(3));
    // The shard's response budget; one floor and one batch past it per connection;
    // and per connection the working memory of a 500-partition fetch (its decoded
    // request, per-partition reads and the response before encoding, about 1 KB a
    // partition), since every connection's first fetch runs at once.
    let budget = SHARD_RESPONSE_BYTES + fetchers * (FETCH_GRANT_FLOOR + MIB / 8 + MIB / 2);
    report(
        "fetch",
        &broker,
        setup,
        budget,
        &format!("{fetchers} connections x 8 fetches x 500 partitions, never read"),
    );
}

fn prefixes() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker_with_data(dir.path(), 1, 1);
    let setup = setup(&broker);
    let header = |key: i16, version: i16| {
        let mut h = Vec::new();
        h.extend_from_slice(&key.to_be_bytes());
        h.extend_from_slice(&version.to_be_bytes());
        h.extend_from_slice(&7i32.to_be_bytes());
        h.extend_from_slice(&(-1i16).to_be_bytes());
        h
    };
    let mut held = Vec::new();
    for n in 0..1000 {
        let mut stream = TcpStream::connect(broker.bootstrap()).unwrap();
        let frame = if n % 2 == 0 {
            // A 2 GiB size prefix, then a few bytes of the promised body.
            [(i32::MAX).to_be_bytes().to_vec(), header(0, 9)].concat()
        } else {
            // Metadata v1 whose topics array claims 2^31 - 1 elements.
            let body = [header(3, 1), i32::MAX.to_be_bytes().to_vec()].concat();
            [(body.len() as i32).to_be_bytes().to_vec(), body].concat()
        };
        let _ = stream.write_all(&frame);
        held.push(stream);
    }
    std::thread::sleep(Duration::from_secs(1));
    report("prefixes", &broker, setup, 16 * MIB, "1,000 connections: 2 GiB prefixes and 2^31-element arrays");
}

fn main() {
    idle(env("SKEIN_BOUNDS_IDLE", 10_000));
    fetch_storm(env("SKEIN_BOUNDS_FETCHERS", 100));
    prefixes();
}
