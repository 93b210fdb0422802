//! Fetch with long polling. A first pass reads every partition; if fewer than
//! `min_bytes` came back and `max_wait_ms` allows, each partition's owner waits for
//! new data (the log wakes it on append) and the request is answered as soon as one
//! has some, after a final pass that reads them all. Sessions (KIP-227) are not kept:
//! the response carries session id 0, so clients send full requests.

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, RequestHeader, TopicName};
use kafka_protocol::protocol::VersionRange;
use skein_engine::TopicPartition;

use super::s;
use crate::errors::code;
use crate::limits::{FETCH_RESPONSE_BYTES_MAX, FETCH_WAIT_MAX_MS};
use crate::shard::{OpResult, PartitionOp, PartitionReply, Shard};

pub const VERSIONS: VersionRange = VersionRange { min: 4, max: 16 };

/// One requested partition, resolved against the metadata.
struct Wanted {
    topic: String,
    topic_id: uuid::Uuid,
    partition: i32,
    offset: i64,
    max_bytes: usize,
    /// An error known before reading (unknown topic or partition).
    error: Option<i16>,
}

pub async fn handle(shard: &Rc<Shard>, header: &RequestHeader, request: FetchRequest) -> FetchResponse {
    let started = Instant::now();
    let version = header.request_api_version;
    let image = shard.image();
    let mut wanted = Vec::new();
    for topic in &request.topics {
        let meta = if version >= 13 { image.topic_by_id(topic.topic_id) } else { image.topic(topic.topic.0.as_str()) };
        for p in &topic.partitions {
            let error = match meta {
                None if version >= 13 => Some(code::UNKNOWN_TOPIC_ID),
                None => Some(code::UNKNOWN_TOPIC_OR_PARTITION),
                Some(m) if p.partition < 0 || p.partition >= m.partitions => Some(code::UNKNOWN_TOPIC_OR_PARTITION),
                Some(_) => None,
            };
            wanted.push(Wanted {
                topic: meta.map_or_else(|| topic.topic.0.to_string(), |m| m.name.clone()),
                topic_id: meta.map_or(topic.topic_id, |m| m.id),
                partition: p.partition,
                offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes.max(0) as usize,
                error,
            });
        }
    }
    let max_bytes = (request.max_bytes.max(0) as usize).min(FETCH_RESPONSE_BYTES_MAX);
    let min_bytes = request.min_bytes.max(0) as usize;
    let max_wait = Duration::from_millis((request.max_wait_ms.max(0) as u64).min(FETCH_WAIT_MAX_MS));

    let mut results = read_all(shard, &wanted, max_bytes).await;
    let bytes: usize = results.iter().map(record_bytes).sum();
    let any_error = results.iter().any(|r| r.is_err());
    if bytes < min_bytes.max(1) && !any_error && !max_wait.is_zero() {
        let remaining = max_wait.saturating_sub(started.elapsed());
        if wait_for_any(shard, &wanted, remaining).await {
            results = read_all(shard, &wanted, max_bytes).await;
        }
    }
    build(version, &wanted, results)
}

fn record_bytes(result: &OpResult) -> usize {
    match result {
        Ok(PartitionReply::Fetch { records, .. }) => records.iter().map(Bytes::len).sum(),
        _ => 0,
    }
}

/// Reads every partition once, without waiting, within the response byte budget.
async fn read_all(shard: &Rc<Shard>, wanted: &[Wanted], max_bytes: usize) -> Vec<OpResult> {
    // Partitions are read concurrently; the budget is applied in request order after.
    let reads = wanted.iter().map(|w| {
        let shard = shard.clone();
        async move {
            if let Some(error) = w.error {
                return Err((error, None));
            }
            let op = PartitionOp::Fetch { offset: w.offset, max_bytes: w.max_bytes.min(max_bytes), wait_ms: 0 };
            shard.route(TopicPartition::new(w.topic.clone(), w.partition), op).await
        }
    });
    let mut results = join_all(reads).await;
    let mut budget = max_bytes;
    let mut first = true;
    for result in &mut results {
        if let Ok(PartitionReply::Fetch { records, .. }) = result {
            let mut kept = Vec::new();
            for batch in records.drain(..) {
                // The first batch of the response always goes, so consumers progress.
                if batch.len() <= budget || first {
                    budget = budget.saturating_sub(batch.len());
                    first = false;
                    kept.push(batch);
                } else {
                    budget = 0;
                    break;
                }
            }
            *records = kept;
        }
    }
    results
}

/// Waits until one partition has data past its fetch offset, or the time is up.
/// Returns whether data arrived.
async fn wait_for_any(shard: &Rc<Shard>, wanted: &[Wanted], wait: Duration) -> bool {
    if wait.is_zero() {
        return false;
    }
    let wait_ms = wait.as_millis() as u64;
    let mut waits: FuturesUnordered<_> = wanted
        .iter()
        .filter(|w| w.error.is_none())
        .map(|w| {
            let shard = shard.clone();
            let partition = TopicPartition::new(w.topic.clone(), w.partition);
            let op = PartitionOp::Fetch { offset: w.offset, max_bytes: 1, wait_ms };
            async move { shard.route(partition, op).await }
        })
        .collect();
    while let Some(result) = waits.next().await {
        if record_bytes(&result) > 0 || result.is_err() {
            return true;
        }
    }
    false
}

fn build(version: i16, wanted: &[Wanted], results: Vec<OpResult>) -> FetchResponse {
    let mut response = FetchResponse::default();
    for (w, result) in wanted.iter().zip(results) {
        let mut data = PartitionData::default();
        data.partition_index = w.partition;
        data.preferred_read_replica = BrokerId(-1);
        data.aborted_transactions = if version >= 4 { Some(Vec::new()) } else { None };
        match result {
            Ok(PartitionReply::Fetch { high_watermark, log_start_offset, records }) => {
                data.high_watermark = high_watermark;
                data.last_stable_offset = high_watermark;
                data.log_start_offset = log_start_offset;
                data.records = Some(concat(records));
            }
            Ok(_) => data.error_code = code::UNKNOWN_SERVER_ERROR,
            Err((error, _)) => {
                data.error_code = error;
                data.high_watermark = -1;
                data.last_stable_offset = -1;
                data.log_start_offset = -1;
                data.records = Some(Bytes::new());
            }
        }
        let same_topic = |t: &FetchableTopicResponse| {
            if version >= 13 {
                t.topic_id == w.topic_id
            } else {
                t.topic.0.as_str() == w.topic
            }
        };
        match response.responses.iter_mut().find(|t| same_topic(t)) {
            Some(topic) => topic.partitions.push(data),
            None => {
                let mut topic = FetchableTopicResponse::default();
                topic.topic = TopicName(s(w.topic.clone()));
                topic.topic_id = w.topic_id;
                topic.partitions.push(data);
                response.responses.push(topic);
            }
        }
    }
    response
}

fn concat(batches: Vec<Bytes>) -> Bytes {
    match batches.len() {
        0 => Bytes::new(),
        1 => batches.into_iter().next().expect("one batch"),
        _ => {
            let mut out = BytesMut::with_capacity(batches.iter().map(Bytes::len).sum());
            for b in batches {
                out.extend_from_slice(&b);
            }
            out.freeze()
        }
    }
}
