//! The native driver's control requests on a blocking connection: ApiVersions,
//! Metadata, ListOffsets and Fetch, encoded and decoded by the `kafka-protocol` crate.
//! Produce, the hot path, is encoded by hand in `batch.rs`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, BrokerId, ListOffsetsRequest, MetadataRequest, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

/// The largest response the driver reads (a fetch answers at most `FETCH_MAX_BYTES`).
pub const RESPONSE_MAX_BYTES: usize = 64 << 20;
pub const CLIENT_ID: &str = "skein-bench-native";

/// The versions the driver speaks. Each is checked against the broker's ApiVersions;
/// every one of them is supported by Apache Kafka 4.x and by Skein.
pub const PRODUCE_VERSION: i16 = 9;
pub const FETCH_VERSION: i16 = 12;
const METADATA_VERSION: i16 = 12;
const LIST_OFFSETS_VERSION: i16 = 7;
const API_VERSIONS_VERSION: i16 = 3;

/// Connects with Nagle off (requests are whole frames; waiting for an ACK would add
/// latency to every pipelined one).
pub fn connect(address: &str) -> Result<TcpStream, String> {
    let stream = TcpStream::connect(address).map_err(|e| format!("connect {address}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| format!("{address}: TCP_NODELAY: {e}"))?;
    Ok(stream)
}

/// Reads one response frame (its size prefix removed) into `into`, reusing its buffer.
pub fn read_frame(stream: &mut impl Read, into: &mut Vec<u8>) -> std::io::Result<()> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size)?;
    let size = i32::from_be_bytes(size);
    if size < 0 || size as usize > RESPONSE_MAX_BYTES {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("response of {size} bytes")));
    }
    into.resize(size as usize, 0);
    stream.read_exact(into)
}

/// Encodes `request` as a whole frame (size prefix included).
pub fn frame<R: Request>(request: &R, version: i16, correlation: i32) -> Result<BytesMut, String> {
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation)
        .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
    let mut out = BytesMut::with_capacity(256);
    out.put_i32(0);
    header.encode(&mut out, <R as HeaderVersion>::header_version(version)).map_err(|e| e.to_string())?;
    request.encode(&mut out, version).map_err(|e| e.to_string())?;
    let length = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&length.to_be_bytes());
    Ok(out)
}

/// Decodes a response frame to `R`'s response, checking its correlation id.
pub fn decode<R: Request>(body: Bytes, version: i16, correlation: i32) -> Result<R::Response, String> {
    let mut body = body;
    let header_version = <R::Response as HeaderVersion>::header_version(version);
    let header = ResponseHeader::decode(&mut body, header_version).map_err(|e| e.to_string())?;
    if header.correlation_id != correlation {
        return Err(format!("response correlation {} for request {correlation}", header.correlation_id));
    }
    let response = R::Response::decode(&mut body, version).map_err(|e| e.to_string())?;
    if body.has_remaining() {
        return Err(format!("{} trailing bytes in a response to API {}", body.remaining(), R::KEY));
    }
    Ok(response)
}

/// One request and its response, on a connection with nothing else in flight.
pub fn exchange<R: Request>(stream: &mut TcpStream, request: &R, version: i16) -> Result<R::Response, String> {
    let correlation = 1;
    stream.write_all(&frame(request, version, correlation)?).map_err(|e| format!("send API {}: {e}", R::KEY))?;
    let mut body = Vec::new();
    read_frame(stream, &mut body).map_err(|e| format!("read response to API {}: {e}", R::KEY))?;
    decode::<R>(Bytes::from(body), version, correlation)
}

/// Checks that the broker speaks every version the driver sends.
pub fn check_versions(stream: &mut TcpStream) -> Result<(), String> {
    let request = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str(CLIENT_ID))
        .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
    let response = exchange(stream, &request, API_VERSIONS_VERSION)?;
    if response.error_code != 0 {
        return Err(format!("ApiVersions: error {}", response.error_code));
    }
    for (key, version) in [
        (ApiKey::Produce, PRODUCE_VERSION),
        (ApiKey::Fetch, FETCH_VERSION),
        (ApiKey::Metadata, METADATA_VERSION),
        (ApiKey::ListOffsets, LIST_OFFSETS_VERSION),
    ] {
        let supported = response
            .api_keys
            .iter()
            .any(|k| k.api_key == key as i16 && (k.min_version..=k.max_version).contains(&version));
        if !supported {
            return Err(format!("the broker does not speak {key:?} v{version}, which the native driver sends"));
        }
    }
    Ok(())
}

/// Where each partition of some topics is led.
#[derive(Debug, Clone, Default)]
pub struct Leaders {
    /// Broker id → "host:port".
    pub brokers: BTreeMap<i32, String>,
    /// (topic, partition) → leader id.
    pub partitions: BTreeMap<(String, i32), i32>,
}

impl Leaders {
    pub fn address(&self, topic: &str, partition: i32) -> Result<&str, String> {
        let leader =
            self.partitions.get(&(topic.to_string(), partition)).ok_or(format!("{topic}-{partition}: no leader"))?;
        self.brokers.get(leader).map(String::as_str).ok_or(format!("{topic}-{partition}: leader {leader} unknown"))
    }
}

/// The leaders of every partition of `topics`, retried for up to 30 s until each has one.
pub fn leaders(bootstrap: &str, topics: &[String], partitions: u32) -> Result<Leaders, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut stream = connect(bootstrap)?;
    check_versions(&mut stream)?;
    loop {
        let mut request = MetadataRequest::default();
        request.topics = Some(
            topics
                .iter()
                .map(|t| MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_string(t.clone())))))
                .collect(),
        );
        let response = exchange(&mut stream, &request, METADATA_VERSION)?;
        let mut found = Leaders::default();
        for broker in &response.brokers {
            found.brokers.insert(broker.node_id.0, format!("{}:{}", broker.host.as_str(), broker.port));
        }
        for topic in &response.topics {
            let Some(name) = &topic.name else { continue };
            for p in topic.partitions.iter().filter(|p| p.error_code == 0 && p.leader_id.0 >= 0) {
                found.partitions.insert((name.0.to_string(), p.partition_index), p.leader_id.0);
            }
        }
        let complete = topics.iter().all(|t| (0..partitions as i32).all(|p| found.address(t, p).is_ok()));
        if complete {
            return Ok(found);
        }
        if Instant::now() > deadline {
            return Err(format!("partitions of {topics:?} had no leader within 30 s"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The last stable offset of each of `partitions` of `topic` (read_committed "latest"),
/// from their leader at `address`.
pub fn latest_offsets(address: &str, topic: &str, partitions: &[i32]) -> Result<BTreeMap<i32, i64>, String> {
    let mut stream = connect(address)?;
    let mut request = ListOffsetsRequest::default();
    request.replica_id = BrokerId(-1);
    request.isolation_level = 1;
    request.topics = vec![ListOffsetsTopic::default()
        .with_name(TopicName(StrBytes::from_string(topic.to_string())))
        .with_partitions(
            partitions
                .iter()
                .map(|&p| {
                    ListOffsetsPartition::default()
                        .with_partition_index(p)
                        .with_current_leader_epoch(-1)
                        .with_timestamp(-1)
                })
                .collect(),
        )];
    // A new topic's partitions can answer NOT_LEADER_OR_FOLLOWER (6), LEADER_NOT_AVAILABLE
    // (5) or UNKNOWN_TOPIC_OR_PARTITION (3) until its leader has loaded them: retried.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let response = exchange(&mut stream, &request, LIST_OFFSETS_VERSION)?;
        let mut offsets = BTreeMap::new();
        let mut retry = None;
        for p in response.topics.iter().flat_map(|t| &t.partitions) {
            match p.error_code {
                0 => {
                    offsets.insert(p.partition_index, p.offset);
                }
                3 | 5 | 6 if Instant::now() < deadline => retry = Some(p.error_code),
                code => return Err(format!("ListOffsets {topic}-{}: error {code}", p.partition_index)),
            }
        }
        if retry.is_none() {
            return Ok(offsets);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
