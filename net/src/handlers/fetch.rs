//! Fetch, with fetch sessions (KIP-227, `session.rs`) and long polling.
//!
//! A first pass reads every partition within the response's `max_bytes` (the first
//! batch always goes, so a consumer progresses past a large batch). While fewer than
//! `min_bytes` came back and `max_wait_ms` allows, the partitions that are at their log
//! end wait on their owner shards (one message per shard) for data past what was read; every arrival
//! triggers another pass, until `min_bytes` is reached across all partitions or the
//! time is up. While nothing has been read, that pass reads only the partitions whose
//! waits ended (the others would read nothing again). When the request completes, the
//! waits still parked on other shards are cancelled (their owner sees the reply
//! channel close).
//!
//! A consumer's fetch in a session reads only what may have changed
//! (`fetch_sessions`): its long poll waits on the session's signal, which the
//! partitions' log stamps fire, and then reads the partitions whose stamps moved,
//! including those the first pass skipped as clean.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId, RequestHeader, TopicName};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_control::limits::{FETCH_RESPONSE_BYTES_MAX, FETCH_WAIT_MAX_MS};
use skein_control::metadata::MetadataImage;
use skein_engine::{Batch, TopicPartition};

use super::{group_by_topic, leaders, s};
use crate::authorize::{Caller, Op, TOPIC_AUTHORIZATION_FAILED};
use crate::budget::Grant;
use crate::frame::SharedRecords;
use crate::shard::ops::{self, EpochEnd, Fetched};
use crate::shard::{PartitionError, Reader, Shard, Wait};

/// One partition's read.
type FetchResult = Result<Fetched, PartitionError>;
use crate::fetch_sessions::{Mode, Sent, SessionPartition, TopicKey};

pub const VERSIONS: VersionRange = VersionRange { min: 4, max: 18 };

/// One partition to read, resolved against the metadata.
struct Wanted {
    key: TopicKey,
    /// The topic's name (empty for an unknown id) and the partition.
    tp: TopicPartition,
    topic_id: uuid::Uuid,
    offset: i64,
    max_bytes: usize,
    /// An error known before reading (unknown topic or partition).
    error: Option<i16>,
    /// What the session last told the client (-1: nothing, or no session).
    high_watermark_sent: i64,
    log_start_offset_sent: i64,
    /// A follower's fetch (Kafka's replica fetch): read to the log end.
    follower: bool,
    /// A consumer's fetch that a follower may serve (v11+, KIP-392).
    any_replica: bool,
    /// The consumer's rack, where the node picks replicas by rack.
    rack: Option<String>,
    /// read_committed (isolation level 1): up to the last stable offset.
    committed: bool,
    /// Where the follower's log diverged from this leader's (epoch, end offset).
    diverging: Option<EpochEnd>,
}

impl Wanted {
    /// Who reads, with the consumer's rack where the leader should pick a replica.
    fn reader(&self, with_rack: bool) -> Reader {
        match self.follower {
            true => Reader::Follower,
            false => Reader::Consumer {
                any_replica: self.any_replica,
                rack: self.rack.clone().filter(|_| with_rack),
                committed: self.committed,
            },
        }
    }

    /// How far it reads (`Reader::isolation`).
    fn isolation(&self) -> skein_replication::Isolation {
        self.reader(false).isolation()
    }
}

/// Answers a fetch, reading no more than its response budget `grant`; returns the
/// response with its record bytes (behind placeholders, `frame.rs`) and the grant, to
/// be held until the response is written.
pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: FetchRequest,
    mut grant: Grant,
    listener: &str,
    caller: &Caller,
) -> (FetchResponse, SharedRecords, Grant) {
    // The response may hold what the budgets granted, up to max_bytes; while a long
    // poll waits it holds only what it has read.
    let started = Instant::now();
    let max_bytes = response_max_bytes(&request);
    let version = header.request_api_version;
    let (session_id, epoch) = if version >= 7 { (request.session_id, request.session_epoch) } else { (0, -1) };
    let mode = match shard.clients.fetch_sessions.borrow_mut().begin(session_id, epoch) {
        Ok(mode) => mode,
        Err(error) => {
            grant.settle(0);
            return (FetchResponse::default().with_error_code(error), SharedRecords::default(), grant);
        }
    };
    let requested: Vec<SessionPartition> = request
        .topics
        .iter()
        .flat_map(|t| {
            let key = if version >= 13 { TopicKey::Id(t.topic_id) } else { TopicKey::Name(t.topic.0.as_str().into()) };
            t.partitions.iter().map(move |p| SessionPartition {
                topic: key.clone(),
                partition: p.partition,
                fetch_offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes,
                high_watermark_sent: -1,
                log_start_offset_sent: -1,
            })
        })
        .collect();
    // A follower's fetch was authorized whole, for CLUSTER_ACTION (`authorize`).
    let follower = request.replica_id.0 >= 0 || request.replica_state.replica_id.0 >= 0;
    let image = shard.image();
    let (partitions, response_session, incremental) = match mode {
        Mode::Sessionless => (requested, 0, false),
        Mode::Open => {
            let watching = (!follower).then_some(image.version);
            let id = shard.clients.fetch_sessions.borrow_mut().open(requested.clone(), started, watching);
            (requested, id.unwrap_or(0), false)
        }
        Mode::Incremental { id } => {
            let forgotten: Vec<(TopicKey, i32)> = request
                .forgotten_topics_data
                .iter()
                .flat_map(|t| {
                    let key = if version >= 13 {
                        TopicKey::Id(t.topic_id)
                    } else {
                        TopicKey::Name(t.topic.0.as_str().into())
                    };
                    t.partitions.iter().map(move |p| (key.clone(), *p))
                })
                .collect();
            let partitions =
                shard.clients.fetch_sessions.borrow_mut().update(id, requested, &forgotten, started, image.version);
            (partitions, id, true)
        }
    };
    shard.metrics.fetch_partitions_requested.set(
        shard.metrics.fetch_partitions_requested.get()
            + request.topics.iter().map(|t| t.partitions.len() as u64).sum::<u64>(),
    );
    let replica_id = if version >= 15 { request.replica_state.replica_id.0 } else { request.replica_id.0 };
    let consumer = Consumer::of(shard, version, &request, (!follower).then_some(caller));
    let mut wanted = consumer.wanted(&image, partitions);
    drop(image);
    if replica_id >= 0 {
        follower_fetch(shard, replica_id, version, &request, &mut wanted).await;
    }
    // A consumer's session watches its partitions' stamps (`fetch_sessions`): its long
    // poll waits on the session's signal and then reads what moved.
    let signal = shard.clients.fetch_sessions.borrow().signal(response_session);

    let min_bytes = request.min_bytes.max(0) as usize;
    let max_wait = Duration::from_millis((request.max_wait_ms.max(0) as u64).min(FETCH_WAIT_MAX_MS));
    let mut limit = grant.bytes();
    let mut results = read_all(shard, &wanted, limit).await;
    let mut positions: Option<HashMap<(TopicKey, i32), usize>> = None;
    if signal.is_some() {
        let all: Vec<usize> = (0..wanted.len()).collect();
        shard.clients.fetch_sessions.borrow_mut().served(response_session, &sent(&wanted, &all, &results));
    }
    loop {
        let bytes: usize = results.iter().map(record_bytes).sum();
        grant.settle(bytes);
        let remaining = max_wait.saturating_sub(started.elapsed());
        // A consumer sent to another replica is answered at once, as Kafka does.
        let redirected = results
            .iter()
            .any(|r| matches!(r, Ok(Fetched { preferred_read_replica, .. }) if *preferred_read_replica >= 0));
        if bytes >= min_bytes
            || bytes >= limit
            || results.iter().any(|r| r.is_err())
            || redirected
            || remaining.is_zero()
        {
            break;
        }
        if let Some(signal) = &signal {
            let moved = wait_for_moves(shard, response_session, signal, remaining).await;
            if moved.is_empty() {
                break;
            }
            grant.grow(max_bytes);
            limit = grant.bytes().max(1);
            // What moved is read again, or for the first time in this fetch (a clean
            // partition it skipped), with what the others' records left.
            let positions = positions.get_or_insert_with(|| {
                wanted.iter().enumerate().map(|(i, w)| ((w.key.clone(), w.tp.partition), i)).collect()
            });
            let mut which = Vec::with_capacity(moved.len());
            for w in consumer.wanted(&shard.image(), moved) {
                let at = *positions.entry((w.key.clone(), w.tp.partition)).or_insert(wanted.len());
                if at == wanted.len() {
                    wanted.push(w);
                    results.push(Err(PartitionError::new(code::UNKNOWN_SERVER_ERROR)));
                } else {
                    // The response is built against what the client knew before this
                    // fetch, not what its first pass recorded in the session.
                    let (high_watermark, log_start_offset) =
                        (wanted[at].high_watermark_sent, wanted[at].log_start_offset_sent);
                    wanted[at] =
                        Wanted { high_watermark_sent: high_watermark, log_start_offset_sent: log_start_offset, ..w };
                }
                which.push(at);
            }
            let mut rereading = vec![false; results.len()];
            which.iter().for_each(|&i| rereading[i] = true);
            let kept: usize =
                results.iter().zip(&rereading).filter(|(_, again)| !**again).map(|(r, _)| record_bytes(r)).sum();
            for (i, result) in which.iter().zip(read(shard, &wanted, &which, limit.saturating_sub(kept).max(1)).await) {
                results[*i] = result;
            }
            shard.clients.fetch_sessions.borrow_mut().served(response_session, &sent(&wanted, &which, &results));
            continue;
        }
        let woke = wait_for_more(shard, &wanted, &results, remaining).await;
        if woke.is_empty() {
            break;
        }
        grant.grow(max_bytes);
        limit = grant.bytes().max(1);
        if bytes == 0 {
            // Nothing read yet: the partitions that did not wake read nothing again, so
            // only those that did are read, and the others keep their first answer.
            for (i, result) in woke.iter().zip(read(shard, &wanted, &woke, limit).await) {
                results[*i] = result;
            }
        } else {
            results = read_all(shard, &wanted, limit).await;
        }
    }

    if replica_id >= 0 {
        throttle_leader(shard, &wanted, &mut results);
    }
    if response_session != 0 && signal.is_none() {
        let all: Vec<usize> = (0..wanted.len()).collect();
        shard.clients.fetch_sessions.borrow_mut().served(response_session, &sent(&wanted, &all, &results));
    }
    let (mut response, records) = build(shard, version, &wanted, results, incremental, listener);
    response.session_id = response_session;
    (response, records, grant)
}

/// How a consumer's fetch reads each partition it names (a follower's is refined by
/// `follower_fetch`).
struct Consumer<'a> {
    /// Must have READ on each topic; `None` for a follower, authorized whole.
    caller: Option<&'a Caller>,
    committed: bool,
    /// May read from a follower (v11+, KIP-392), with the rack the leader picks by.
    any_replica: bool,
    rack: Option<String>,
}

impl<'a> Consumer<'a> {
    fn of(shard: &Shard, version: i16, request: &FetchRequest, caller: Option<&'a Caller>) -> Consumer<'a> {
        let consumer = caller.is_some() && version >= 11;
        Consumer {
            caller,
            committed: request.isolation_level == 1,
            // KIP-392: consumers may read from followers, and the leader may name one
            // on the consumer's rack.
            any_replica: consumer,
            rack: (consumer && shard.settings.rack_aware_reads && !request.rack_id.is_empty())
                .then(|| request.rack_id.to_string()),
        }
    }

    /// `partitions` resolved against `image`, in order, each read as this fetch reads.
    fn wanted(&self, image: &MetadataImage, partitions: Vec<SessionPartition>) -> Vec<Wanted> {
        let mut wanted = resolve(image, partitions, self.caller);
        for w in &mut wanted {
            w.committed = self.committed;
            w.any_replica = self.any_replica;
            w.rack = self.rack.clone();
        }
        wanted
    }
}

/// What a fetch tells its session of the partitions `which` (indices into `wanted`)
/// read as `results` has them. A read is clean when it found nothing visible past its
/// offset: the session skips the partition until its stamp moves.
fn sent(wanted: &[Wanted], which: &[usize], results: &[FetchResult]) -> Vec<Sent> {
    which
        .iter()
        .map(|&i| {
            let (w, result) = (&wanted[i], &results[i]);
            let (high_watermark, log_start_offset, read, clean) = match result {
                Ok(f) => {
                    let visible_end = if w.committed { f.last_stable_offset } else { f.high_watermark };
                    let clean = f.records.is_empty()
                        && f.preferred_read_replica < 0
                        && w.diverging.is_none()
                        && w.offset >= visible_end;
                    (f.high_watermark, f.log_start_offset, f.stamp.clone(), clean)
                }
                Err(_) => (-1, -1, None, false),
            };
            Sent {
                topic: w.key.clone(),
                partition: w.tp.partition,
                high_watermark,
                log_start_offset,
                had_records: record_bytes(result) > 0,
                read,
                clean,
            }
        })
        .collect()
}

/// Waits until a stamp that consumer session `id` watches moves, or `wait` passes.
/// Returns the partitions whose stamps moved, in fetch order; none when the time ran
/// out.
async fn wait_for_moves(
    shard: &Shard,
    id: i32,
    signal: &skein_engine::Signal,
    wait: Duration,
) -> Vec<SessionPartition> {
    let deadline = Instant::now() + wait;
    loop {
        let moved = shard.clients.fetch_sessions.borrow_mut().moved(id);
        if !moved.is_empty() {
            return moved;
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return moved;
        }
        let _parked = crate::shard::Parked::new(&shard.metrics.fetch_waits_parked);
        let fired = async {
            signal.fired().await;
            true
        };
        let expired = async {
            glommio::timer::sleep(remaining).await;
            false
        };
        if !futures_lite::future::or(fired, expired).await {
            return Vec::new();
        }
    }
}

/// A leader's replication throttle: while this shard's leader quota is spent, the
/// partitions `leader.replication.throttled.replicas` names for this broker send a
/// follower no records (it asks again); otherwise what they send is counted.
fn throttle_leader(shard: &Shard, wanted: &[Wanted], results: &mut [FetchResult]) {
    use crate::throttle;
    let image = shard.image();
    let me = shard.settings.node_id;
    let Some(rate) = throttle::shard_rate(&image, me, throttle::LEADER_RATE, shard.settings.shards) else { return };
    let now = Instant::now();
    let mut quota = shard.throttles.leader.borrow_mut();
    let spent = quota.spent(rate, now);
    for (w, result) in wanted.iter().zip(results.iter_mut()) {
        let listed = image
            .topic(&w.tp.topic)
            .is_some_and(|t| throttle::throttled(&t.configs, throttle::LEADER_REPLICAS, w.tp.partition, me));
        if let (true, Ok(Fetched { records, .. })) = (listed, result) {
            match spent {
                true => records.clear(),
                false => quota.record(rate, records.iter().map(|b| b.size() as u64).sum(), now),
            }
        }
    }
}

/// The leader's side of a follower's fetch: records each partition's fetch position
/// (the high watermark may move), or the epoch where the follower's log diverged
/// (then nothing is read for it). Partitions refused get their error. Each other
/// shard gets one message for all of its partitions (`Shard::call_many`).
async fn follower_fetch(shard: &Rc<Shard>, follower: i32, version: i16, request: &FetchRequest, wanted: &mut [Wanted]) {
    let by_id = version >= 13;
    let epochs: std::collections::HashMap<(TopicKey, i32), (i32, i32)> = request
        .topics
        .iter()
        .flat_map(|t| {
            let key = if by_id { TopicKey::Id(t.topic_id) } else { TopicKey::Name(t.topic.0.as_str().into()) };
            t.partitions
                .iter()
                .map(move |p| ((key.clone(), p.partition), (p.current_leader_epoch, p.last_fetched_epoch)))
        })
        .collect();
    let calls = wanted
        .iter()
        .map(|w| {
            let (current_leader_epoch, last_fetched_epoch) =
                epochs.get(&(w.key.clone(), w.tp.partition)).copied().unwrap_or((-1, -1));
            let op = ops::FollowerFetch { follower, offset: w.offset, current_leader_epoch, last_fetched_epoch };
            match w.error {
                Some(error) => Err(PartitionError::new(error)),
                None => Ok((w.tp.clone(), op)),
            }
        })
        .collect();
    for (w, result) in wanted.iter_mut().zip(shard.call_many(calls).await) {
        w.follower = true;
        match result {
            Ok(diverging) => w.diverging = diverging,
            Err(error) => w.error = Some(error.code),
        }
    }
}

/// The most a response to `request` may carry: its `max_bytes`, within the broker's
/// bound. The connection grants response budget for this much before the fetch runs.
pub fn response_max_bytes(request: &FetchRequest) -> usize {
    (request.max_bytes.max(0) as usize).min(FETCH_RESPONSE_BYTES_MAX)
}

/// The partitions to read, in order, with what the metadata says of each.
/// A consumer's `caller` must have READ on each topic.
fn resolve(image: &MetadataImage, partitions: Vec<SessionPartition>, caller: Option<&Caller>) -> Vec<Wanted> {
    let denied = |name: &str| caller.is_some_and(|c| !c.topic(Op::Read, name));
    // A request lists a topic's partitions together: the topic is looked up and
    // authorized once per run of them.
    let mut last: Option<(TopicKey, Option<&skein_control::metadata::TopicMeta>, bool)> = None;
    partitions
        .into_iter()
        .map(|p| {
            let (meta, refused) = match &last {
                Some((key, meta, refused)) if *key == p.topic => (*meta, *refused),
                _ => {
                    let meta = match &p.topic {
                        TopicKey::Id(id) => image.topic_by_id(*id),
                        TopicKey::Name(name) => image.topic(name),
                    };
                    let refused = match (meta, &p.topic) {
                        (Some(m), _) => denied(&m.name),
                        (None, TopicKey::Name(name)) => denied(name),
                        (None, TopicKey::Id(_)) => false,
                    };
                    last = Some((p.topic.clone(), meta, refused));
                    (meta, refused)
                }
            };
            let error = match (meta, &p.topic) {
                (None, TopicKey::Id(_)) => Some(code::UNKNOWN_TOPIC_ID),
                (None, TopicKey::Name(_)) if refused => Some(TOPIC_AUTHORIZATION_FAILED),
                (Some(_), _) if refused => Some(TOPIC_AUTHORIZATION_FAILED),
                (None, TopicKey::Name(_)) => Some(code::UNKNOWN_TOPIC_OR_PARTITION),
                (Some(m), _) if p.partition < 0 || p.partition >= m.partitions => {
                    Some(code::UNKNOWN_TOPIC_OR_PARTITION)
                }
                (Some(_), _) => None,
            };
            let (topic, topic_id) = match (meta, &p.topic) {
                (Some(m), _) => (m.name.clone(), m.id),
                (None, TopicKey::Id(id)) => (String::new(), *id),
                (None, TopicKey::Name(name)) => (name.to_string(), uuid::Uuid::nil()),
            };
            Wanted {
                key: p.topic,
                tp: TopicPartition::new(topic, p.partition),
                topic_id,
                offset: p.fetch_offset,
                max_bytes: p.max_bytes.max(0) as usize,
                error,
                high_watermark_sent: p.high_watermark_sent,
                log_start_offset_sent: p.log_start_offset_sent,
                follower: false,
                any_replica: false,
                rack: None,
                committed: false,
                diverging: None,
            }
        })
        .collect()
}

fn record_bytes(result: &FetchResult) -> usize {
    match result {
        Ok(fetched) => fetched.records.iter().map(Batch::size).sum(),
        Err(_) => 0,
    }
}

/// Reads every partition once, without waiting, within the response byte budget, as
/// Kafka does: in request order each partition may read what the request has left
/// (`min(partition_max_bytes, left)`), so the bytes read stay within `max_bytes` (plus
/// the first batch, which always goes, so consumers progress). Each shard reads its
/// partitions in order within its share of what is left (`Shard::read_many`, one
/// exchange per shard); partitions a share did not reach are read again with what
/// the others left, and those the budget never reaches answer only their watermarks.
async fn read_all(shard: &Rc<Shard>, wanted: &[Wanted], max_bytes: usize) -> Vec<FetchResult> {
    let all: Vec<usize> = (0..wanted.len()).collect();
    read(shard, wanted, &all, max_bytes).await
}

/// `read_all` for the partitions `which` names (indices into `wanted`, in request
/// order); returns their results in that order.
async fn read(shard: &Rc<Shard>, wanted: &[Wanted], which: &[usize], max_bytes: usize) -> Vec<FetchResult> {
    let reads = &shard.metrics.fetch_partition_reads;
    reads.set(reads.get() + which.len() as u64);
    let mut results: Vec<Option<FetchResult>> = which.iter().map(|_| None).collect();
    let mut left = max_bytes;
    let mut first = true;
    let mut pending: Vec<usize> = (0..which.len()).collect();
    while !pending.is_empty() {
        let calls = pending
            .iter()
            .map(|&i| {
                let w = &wanted[which[i]];
                // A diverged follower reads nothing: it truncates first.
                let max_bytes = if w.diverging.is_some() { 0 } else { w.max_bytes };
                match w.error {
                    Some(error) => Err(PartitionError::new(error)),
                    None => Ok((w.tp.clone(), ops::Fetch { offset: w.offset, max_bytes, reader: w.reader(true) })),
                }
            })
            .collect();
        let mut unreached = Vec::new();
        for (&i, (mut result, reached)) in pending.iter().zip(shard.read_many(calls, left).await) {
            if let Ok(Fetched { records, .. }) = &mut result {
                let mut kept = Vec::new();
                for batch in records.drain(..) {
                    if batch.size() <= left || first {
                        left = left.saturating_sub(batch.size());
                        first = false;
                        kept.push(batch);
                    } else {
                        left = 0;
                        break;
                    }
                }
                *records = kept;
            }
            if !reached {
                unreached.push(i);
            }
            results[i] = Some(result);
        }
        // What a share left unread goes to the partitions another share did not reach.
        if left == 0 || unreached.len() == pending.len() {
            break;
        }
        pending = unreached;
    }
    results.into_iter().map(|r| r.expect("every partition read")).collect()
}

/// Waits until a partition that is at its log end gets data past what `results`
/// read, or the time is up. Returns the partitions (indices into `wanted`, in order)
/// whose waits ended by then: data may have arrived there; none when the time ran
/// out. Partitions cut short by a byte limit are not waited on: reading them again
/// gives no more. This shard's partitions are waited on where they are, each other
/// shard's in one message to it, with one timer for the fetch (`Shard::wait_any`).
async fn wait_for_more(shard: &Rc<Shard>, wanted: &[Wanted], results: &[FetchResult], wait: Duration) -> Vec<usize> {
    let (indices, waits): (Vec<usize>, Vec<Wait>) = wanted
        .iter()
        .zip(results)
        .enumerate()
        .filter_map(|(i, (w, result))| {
            let Ok(Fetched { high_watermark, last_stable_offset, records, .. }) = result else {
                return None;
            };
            let visible_end = if w.committed { *last_stable_offset } else { *high_watermark };
            let next = records.last().map_or(w.offset, |last| last.next_offset().0);
            // A follower that read nothing waits for the log end to move; one that
            // read is answered (it reads on at once).
            let waits = if w.follower { records.is_empty() && w.diverging.is_none() } else { next >= visible_end };
            waits.then(|| (i, Wait { partition: w.tp.clone(), offset: next, isolation: w.isolation() }))
        })
        .unzip();
    shard.wait_any(waits, wait).await.into_iter().map(|i| indices[i]).collect()
}

/// The pieces of `batches` in order, shared, for a response's records.
fn pieces(batches: &[Batch]) -> Vec<Bytes> {
    batches.iter().flat_map(Batch::segments).collect()
}

/// The response: every partition for a full fetch; for an incremental one only those
/// with records, an error, or a high watermark or log start offset that moved. Each
/// partition's batches stay as they were read, behind a placeholder in `records`.
fn build(
    shard: &Shard,
    version: i16,
    wanted: &[Wanted],
    results: Vec<FetchResult>,
    incremental: bool,
    listener: &str,
) -> (FetchResponse, SharedRecords) {
    let mut leaders = std::collections::BTreeSet::new();
    let partitions = wanted.iter().zip(results).filter_map(|(w, result)| {
        let mut data = PartitionData::default();
        let mut batches = Vec::new();
        data.partition_index = w.tp.partition;
        data.preferred_read_replica = BrokerId(-1);
        data.aborted_transactions = Some(Vec::new());
        match result {
            Ok(Fetched {
                high_watermark,
                log_start_offset,
                records,
                preferred_read_replica,
                last_stable_offset,
                aborted,
                ..
            }) => {
                let unchanged = preferred_read_replica < 0
                    && records.is_empty()
                    && high_watermark == w.high_watermark_sent
                    && log_start_offset == w.log_start_offset_sent;
                if incremental && unchanged {
                    return None;
                }
                data.high_watermark = high_watermark;
                data.last_stable_offset = last_stable_offset;
                // Listed for read_committed reads only; null otherwise, as Kafka.
                data.aborted_transactions = w.committed.then(|| {
                    aborted
                        .iter()
                        .map(|t| {
                            AbortedTransaction::default()
                                .with_producer_id(ProducerId(t.producer_id))
                                .with_first_offset(t.first_offset)
                        })
                        .collect()
                });
                data.log_start_offset = log_start_offset;
                batches = records;
                data.preferred_read_replica = BrokerId(preferred_read_replica);
                if let Some(diverging) = w.diverging {
                    data.diverging_epoch.epoch = diverging.leader_epoch;
                    data.diverging_epoch.end_offset = diverging.end_offset;
                }
            }
            Err(PartitionError { code: error, .. }) => {
                data.error_code = error;
                data.high_watermark = -1;
                data.last_stable_offset = -1;
                data.log_start_offset = -1;
                data.records = Some(Bytes::new());
                if version >= 12 && leaders::names_leader(error) {
                    let (leader, epoch) = leaders::current_leader(shard, &w.tp.topic, w.tp.partition, listener);
                    data.current_leader =
                        LeaderIdAndEpoch::default().with_leader_id(BrokerId(leader)).with_leader_epoch(epoch);
                    leaders.insert(leader);
                }
            }
        }
        // Topics are told apart by id from v13, by name before.
        let key = if version >= 13 { (w.topic_id, String::new()) } else { (uuid::Uuid::nil(), w.tp.topic.clone()) };
        Some((key, (data, batches)))
    });
    let partitions: Vec<_> = partitions.collect();
    let mut response = FetchResponse::default();
    if version >= 16 {
        response.node_endpoints = leaders::endpoints(shard, &leaders, listener)
            .into_iter()
            .map(|e| {
                NodeEndpoint::default()
                    .with_node_id(BrokerId(e.id))
                    .with_host(s(e.host))
                    .with_port(i32::from(e.port))
                    .with_rack(e.rack.map(s))
            })
            .collect();
    }
    // Placeholders are taken in the order the response encodes its partitions.
    let mut records = SharedRecords::default();
    response.responses = group_by_topic(partitions)
        .into_iter()
        .map(|((topic_id, topic), partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(data, batches)| data.with_records(Some(records.add(pieces(&batches)))))
                .collect();
            FetchableTopicResponse::default()
                .with_topic(TopicName(s(topic)))
                .with_topic_id(topic_id)
                .with_partitions(partitions)
        })
        .collect();
    (response, records)
}
