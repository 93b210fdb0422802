//! ShareFetch (KIP-932): a share consumer's fetch. The share session (`share::sessions`)
//! says which partitions it covers; each partition's leader applies the
//! acknowledgements that came with it and acquires records for the member
//! (`serve::share_leader`), the request's MaxRecords shared by the partitions in order.
//! While nothing was acquired and MaxWaitMs allows, it waits for new records on the
//! partitions (one wait per owner shard) and tries again.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, LeaderIdAndEpoch, NodeEndpoint, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::{BrokerId, ShareFetchRequest, ShareFetchResponse};
use kafka_protocol::protocol::{StrBytes, VersionRange};
use skein_control::errors::code;
use skein_control::limits::{FETCH_RESPONSE_BYTES_MAX, FETCH_WAIT_MAX_MS};
use skein_coordinator::serve::share_leader::{AckBatch, ShareAnswer, ShareCall};
use skein_coordinator::share::partition::Acknowledge;
use skein_coordinator::share::sessions::{SessionPartition, Step};
use skein_engine::TopicPartition;

use crate::authorize::{Caller, Op, GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED};
use crate::shard::{ops, Shard, Wait};

/// Version 1 is Kafka's first stable version; version 2 adds renew acknowledgements
/// (KIP-1222) and record-limit acquisition (KIP-1206).
pub const VERSIONS: VersionRange = VersionRange { min: 1, max: 2 };

fn s(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

/// The group and member a ShareFetch or ShareAcknowledge names, checked as Kafka
/// checks them: a group id, READ on the group, a member id of 1 to 36 characters.
///
/// # Errors
/// INVALID_REQUEST or GROUP_AUTHORIZATION_FAILED, with Kafka's message.
pub fn caller_member(
    group: Option<&kafka_protocol::messages::GroupId>,
    member: Option<&StrBytes>,
    caller: &Caller,
) -> Result<(String, String), (i16, &'static str)> {
    let group = group.map(|g| g.0.to_string()).ok_or((code::INVALID_REQUEST, "The group id is missing."))?;
    if !caller.group(Op::Read, &group) {
        return Err((GROUP_AUTHORIZATION_FAILED, "Group authorization failed."));
    }
    let member = member
        .filter(|m| !m.is_empty() && m.chars().count() <= 36)
        .map(|m| m.to_string())
        .ok_or((code::INVALID_REQUEST, "Invalid member id in the request."))?;
    Ok((group, member))
}

/// Checks one partition's acknowledgement batches as Kafka does (ascending, each
/// well formed, types 0-3, and 4 (renew) only in a request that says it renews);
/// `Err` is INVALID_REQUEST.
pub fn ack_batches(batches: &[(i64, i64, &[i8])], renewing: bool) -> Result<Vec<AckBatch>, i16> {
    let mut previous = -1i64;
    let mut out = Vec::with_capacity(batches.len());
    for &(first, last, types) in batches {
        let count = last.checked_sub(first).and_then(|d| d.checked_add(1)).filter(|n| *n > 0);
        let Some(count) = count else { return Err(code::INVALID_REQUEST) };
        if first < previous || types.is_empty() || (types.len() != 1 && types.len() as i64 != count) {
            return Err(code::INVALID_REQUEST);
        }
        let types: Option<Vec<Acknowledge>> =
            types.iter().map(|t| Acknowledge::from_code(*t).filter(|a| renewing || *a != Acknowledge::Renew)).collect();
        out.push(AckBatch { first, last, types: types.ok_or(code::INVALID_REQUEST)? });
        previous = last;
    }
    Ok(out)
}

/// One partition of the response as it is built.
#[derive(Default)]
struct Part {
    error: i16,
    ack_error: i16,
    records: Vec<skein_engine::Batch>,
    acquired: Vec<AcquiredRecords>,
    /// Where a long poll waits, once the partition was read with nothing acquired.
    wait: Option<Wait>,
    /// Shown in the response even with nothing in it (a new session, acknowledgements).
    shown: bool,
}

pub async fn handle(
    shard: &Rc<Shard>,
    request: ShareFetchRequest,
    caller: &Caller,
    listener: &str,
    connection: u64,
) -> ShareFetchResponse {
    let started = Instant::now();
    let refuse = |c: i16, m: &str| ShareFetchResponse::default().with_error_code(c).with_error_message(Some(s(m)));
    let (group, member) = match caller_member(request.group_id.as_ref(), request.member_id.as_ref(), caller) {
        Ok(named) => named,
        Err((c, m)) => return refuse(c, m),
    };
    let has_acks = request.topics.iter().flat_map(|t| &t.partitions).any(|p| !p.acknowledgement_batches.is_empty());
    if request.share_session_epoch == 0 && has_acks {
        return refuse(code::INVALID_REQUEST, "Acknowledge data present on initial fetch request.");
    }
    // A renewing request only acknowledges (KIP-1222): it fetches nothing.
    let renewing = request.is_renew_ack;
    if renewing && (request.max_bytes, request.min_bytes, request.max_records, request.max_wait_ms) != (0, 0, 0, 0) {
        return refuse(
            code::INVALID_REQUEST,
            "MaxBytes, MinBytes, MaxRecords and MaxWaitMs must be 0 when renewing acknowledgements.",
        );
    }
    let record_limit = match request.share_acquire_mode {
        0 => false,
        1 => true,
        _ => return refuse(code::INVALID_REQUEST, "Unknown share acquire mode."),
    };
    let image = shard.image();
    // The acknowledgements of each partition named, checked before anything is applied.
    let mut acks: BTreeMap<SessionPartition, Result<Vec<AckBatch>, i16>> = BTreeMap::new();
    let mut added = Vec::new();
    for topic in &request.topics {
        for p in &topic.partitions {
            let key = (topic.topic_id, p.partition_index);
            added.push(key);
            let batches: Vec<(i64, i64, &[i8])> = p
                .acknowledgement_batches
                .iter()
                .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.as_slice()))
                .collect();
            if !batches.is_empty() {
                acks.insert(key, ack_batches(&batches, renewing));
            }
        }
    }
    let forgotten: Vec<SessionPartition> =
        request.forgotten_topics_data.iter().flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p))).collect();
    let step = shard.clients.share_sessions.borrow_mut().fetch(
        &group,
        &member,
        request.share_session_epoch,
        &added,
        &forgotten,
        connection,
    );
    let (partitions, opened, closed) = match step {
        Err(c) => return ShareFetchResponse::default().with_error_code(c),
        Ok(Step::Fetch { partitions, opened }) => (partitions, opened, None),
        Ok(Step::Close(closed)) => (acks.keys().copied().collect(), false, Some(closed)),
    };
    let mut parts: BTreeMap<SessionPartition, Part> = BTreeMap::new();
    let mut lock_ms = skein_coordinator::share::partition::ShareSettings::default().lock_duration.as_millis() as i32;
    let fetching = closed.is_none() && request.max_records > 0 && request.max_bytes > 0;
    let max_bytes = (request.max_bytes.max(0) as usize).min(FETCH_RESPONSE_BYTES_MAX);
    let deadline = started + Duration::from_millis(request.max_wait_ms.clamp(0, FETCH_WAIT_MAX_MS as i32) as u64);
    let mut first_pass = true;
    let mut woke_at_once = false;
    loop {
        let mut records_left = if fetching { request.max_records.max(0) as usize } else { 0 };
        let mut bytes_left = max_bytes;
        let order: Vec<SessionPartition> =
            partitions.iter().chain(acks.keys()).copied().collect::<BTreeSet<_>>().into_iter().collect();
        for key in order {
            let part = parts.entry(key).or_default();
            part.shown |= opened;
            let ack = if first_pass { acks.get(&key).cloned() } else { None };
            if ack.is_some() {
                part.shown = true;
            }
            let ack = match ack {
                Some(Err(c)) => {
                    part.ack_error = c;
                    Some(Vec::new())
                }
                Some(Ok(batches)) => Some(batches),
                None => None,
            };
            let reading = records_left > 0 && bytes_left > 0 && partitions.contains(&key);
            if ack.as_ref().is_none_or(Vec::is_empty) && !reading {
                continue;
            }
            let had_ack = ack.as_ref().is_some_and(|a| !a.is_empty());
            let Some(tp) = resolve(&image, caller, key, part) else { continue };
            let call = ShareCall::Fetch {
                group: group.clone(),
                member: member.clone(),
                topic_id: key.0,
                acks: ack.unwrap_or_default(),
                max_records: if reading { records_left } else { 0 },
                max_bytes: if reading { bytes_left } else { 0 },
                record_limit,
            };
            match shard.call(tp.clone(), ops::Share(Box::new(call))).await {
                Ok(answer) => {
                    let ShareAnswer { ack_error, batches, acquired, wait_from, committed, lock_ms: lock } = answer;
                    lock_ms = lock;
                    if part.ack_error == code::NONE {
                        part.ack_error = ack_error;
                    }
                    let taken: usize = acquired.iter().map(|a| (a.last - a.first + 1) as usize).sum();
                    records_left = records_left.saturating_sub(taken);
                    bytes_left = bytes_left.saturating_sub(batches.iter().map(|b| b.size()).sum());
                    part.acquired.extend(acquired.iter().map(|a| {
                        AcquiredRecords::default()
                            .with_first_offset(a.first)
                            .with_last_offset(a.last)
                            .with_delivery_count(a.deliveries.min(i16::MAX as u16) as i16)
                    }));
                    part.records.extend(batches);
                    let isolation = match committed {
                        true => skein_replication::Isolation::Committed,
                        false => skein_replication::Isolation::HighWatermark,
                    };
                    part.wait = (reading && taken == 0).then_some(Wait { partition: tp, offset: wait_from, isolation });
                }
                Err(e) => {
                    part.error = e.code;
                    part.shown = true;
                    if had_ack {
                        part.ack_error = e.code;
                    }
                    part.wait = None;
                }
            }
        }
        first_pass = false;
        let acquired = parts.values().any(|p| !p.acquired.is_empty());
        let now = Instant::now();
        if acquired || !fetching || now >= deadline {
            break;
        }
        let waits: Vec<Wait> = parts.values().filter_map(|p| p.wait.clone()).collect();
        if waits.is_empty() {
            glommio::timer::sleep((deadline - now).min(Duration::from_millis(100))).await;
            continue;
        }
        // Records that are there but not for this member (key-ordered groups, their
        // keys held by others) end a wait at once, and the pass after it takes
        // nothing: then look again a little later, not in a loop.
        if woke_at_once {
            glommio::timer::sleep((deadline - now).min(Duration::from_millis(25))).await;
        }
        // Locks that run out make records available too: look again within a second.
        let waited = Instant::now();
        shard.wait_any(waits, (deadline - now).min(Duration::from_secs(1))).await;
        woke_at_once = waited.elapsed() < Duration::from_millis(2);
    }
    if let Some(closed) = closed {
        release(shard, closed).await;
    }
    build(shard, parts, &image, listener, lock_ms)
}

/// The partition a session entry names, or its error recorded in `part`.
fn resolve(
    image: &skein_control::metadata::MetadataImage,
    caller: &Caller,
    key: SessionPartition,
    part: &mut Part,
) -> Option<TopicPartition> {
    let Some(meta) = image.topic_by_id(key.0) else {
        part.error = code::UNKNOWN_TOPIC_ID;
        part.shown = true;
        return None;
    };
    if !caller.topic(Op::Read, &meta.name) {
        part.error = TOPIC_AUTHORIZATION_FAILED;
        part.shown = true;
        return None;
    }
    if !(0..meta.partitions).contains(&key.1) {
        part.error = code::UNKNOWN_TOPIC_OR_PARTITION;
        part.shown = true;
        return None;
    }
    Some(TopicPartition::new(meta.name.clone(), key.1))
}

/// The endpoints of `leaders` for a response's NodeEndpoints, built by `make` (node,
/// host, port, rack): ShareFetch's and ShareAcknowledge's are types of their own.
pub fn node_endpoints<T>(
    shard: &Shard,
    leaders: &BTreeSet<i32>,
    listener: &str,
    make: impl Fn(BrokerId, StrBytes, i32, Option<StrBytes>) -> T,
) -> Vec<T> {
    super::leaders::endpoints(shard, leaders, listener)
        .into_iter()
        .map(|b| make(BrokerId(b.id), s(b.host), b.port as i32, b.rack.map(s)))
        .collect()
}

/// Releases what a closed session's member holds on the session's partitions that
/// this node leads.
pub async fn release(shard: &Rc<Shard>, closed: skein_coordinator::share::sessions::Closed) {
    let image = shard.image();
    let skein_coordinator::share::sessions::Closed { group, member, partitions } = closed;
    for (topic_id, partition) in partitions {
        let Some(meta) = image.topic_by_id(topic_id) else { continue };
        let tp = TopicPartition::new(meta.name.clone(), partition);
        let call = ShareCall::Release { group: group.clone(), member: member.clone(), topic_id };
        if let Err(e) = shard.call(tp, ops::Share(Box::new(call))).await {
            tracing::debug!(target: "skein::net", topic = %meta.name, partition, error = e.code, "a closed share session's records were not released");
        }
    }
}

fn build(
    shard: &Shard,
    parts: BTreeMap<SessionPartition, Part>,
    image: &skein_control::metadata::MetadataImage,
    listener: &str,
    lock_ms: i32,
) -> ShareFetchResponse {
    let mut leaders = BTreeSet::new();
    let mut topics: BTreeMap<uuid::Uuid, Vec<PartitionData>> = BTreeMap::new();
    for ((topic_id, partition), part) in parts {
        let has_records = !part.acquired.is_empty();
        if !(part.shown || has_records || part.error != code::NONE || part.ack_error != code::NONE) {
            continue;
        }
        let mut data = PartitionData::default()
            .with_partition_index(partition)
            .with_error_code(part.error)
            .with_acknowledge_error_code(part.ack_error)
            .with_acquired_records(part.acquired);
        let mut bytes = BytesMut::new();
        for batch in &part.records {
            for piece in batch.segments() {
                bytes.extend_from_slice(&piece);
            }
        }
        data.records = Some(Bytes::from(bytes));
        if super::leaders::names_leader(part.error) {
            let name = image.topic_by_id(topic_id).map(|m| m.name.clone()).unwrap_or_default();
            let (leader, epoch) = super::leaders::current_leader(shard, &name, partition, listener);
            data.current_leader = LeaderIdAndEpoch::default().with_leader_id(leader).with_leader_epoch(epoch);
            if leader >= 0 {
                leaders.insert(leader);
            }
        } else {
            data.current_leader = LeaderIdAndEpoch::default().with_leader_id(-1).with_leader_epoch(-1);
        }
        topics.entry(topic_id).or_default().push(data);
    }
    let node_endpoints = node_endpoints(shard, &leaders, listener, |id, host, port, rack| {
        NodeEndpoint::default().with_node_id(id).with_host(host).with_port(port).with_rack(rack)
    });
    ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(lock_ms)
        .with_responses(
            topics
                .into_iter()
                .map(|(topic_id, partitions)| {
                    ShareFetchableTopicResponse::default().with_topic_id(topic_id).with_partitions(partitions)
                })
                .collect(),
        )
        .with_node_endpoints(node_endpoints)
}
