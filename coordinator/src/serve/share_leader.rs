//! A topic partition's leader as its share groups see it: for each share group that
//! consumes the partition, its share-partition (`partition::SharePartition`), loaded
//! from the share coordinator in this leader epoch, and the operations ShareFetch and
//! ShareAcknowledge run on it on the partition's owner shard (`ShareCall`).
//!
//! One operation at a time holds a share-partition: it applies the acknowledgements
//! and the locks that ran out, writes the new state to the share coordinator before it
//! answers (on a failed write the state is put back as it was), then reads the log
//! from the first available offset and acquires what it read. A leader that lost the
//! partition, or whose write was fenced by a newer leader or a reset of the group's
//! offsets, forgets the share-partition: the next operation loads it again.
//!
//! A new share-partition starts where the share coordinator says; with no state there
//! yet, where `share.auto.offset.reset` says (the high watermark by default), as
//! Kafka's leader resolves it.

use std::rc::Rc;
use std::time::Instant;

use skein_control::errors::code;
use skein_engine::{Batch, Offset, TopicPartition};
use skein_replication::{Isolation, OffsetSpec, Role};

use super::share::{Key, StateCall};
use super::Host;
use crate::group::configs::ShareReset;
use crate::hosted::Partition;
use crate::share::partition::{Acknowledge, Acquired, SharePartition, ShareSettings};
use crate::share::slots::Loaded;

/// A share-partition operation's Kafka error, with a message where there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareError {
    pub code: i16,
    pub message: Option<String>,
}

impl ShareError {
    fn new(code: i16) -> ShareError {
        ShareError { code, message: None }
    }
}

impl From<skein_engine::Error> for ShareError {
    fn from(error: skein_engine::Error) -> ShareError {
        ShareError { code: skein_control::errors::code_of(&error), message: Some(error.to_string()) }
    }
}

/// Acknowledgements of one range: one type for the range, or one per offset
/// (checked by the handler as Kafka checks them).
#[derive(Debug, Clone)]
pub struct AckBatch {
    pub first: i64,
    pub last: i64,
    pub types: Vec<Acknowledge>,
}

/// A share-partition operation on the partition's leader.
#[derive(Debug)]
pub enum ShareCall {
    /// ShareFetch: applies `acks`, then acquires up to `max_records` (rounded up to
    /// the end of a log batch, unless `record_limit`) within `max_bytes`; nothing when
    /// either is 0.
    Fetch {
        group: String,
        member: String,
        topic_id: uuid::Uuid,
        acks: Vec<AckBatch>,
        max_records: usize,
        max_bytes: usize,
        /// KIP-1206's record_limit mode: at most `max_records`, batches split.
        record_limit: bool,
    },
    /// ShareAcknowledge.
    Acknowledge { group: String, member: String, topic_id: uuid::Uuid, acks: Vec<AckBatch> },
    /// The member's share session closed: what it holds is available again.
    Release { group: String, member: String, topic_id: uuid::Uuid },
}

/// What a share-partition operation answers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShareAnswer {
    /// The acknowledgements' error (NONE: applied, or none sent).
    pub ack_error: i16,
    /// The log batches holding the acquired records, whole.
    pub batches: Vec<Batch>,
    pub acquired: Vec<Acquired>,
    /// Where a long poll waits for new records: past this offset.
    pub wait_from: i64,
    /// Whether the group reads committed records only.
    pub committed: bool,
    /// The acquisition lock's duration (ShareFetch's AcquisitionLockTimeoutMs).
    pub lock_ms: i32,
}

/// The most a share-partition reads from its log for one acquisition: enough for a
/// full window of small records (Kafka's default `share.partition.max.record.locks`,
/// 2,000) in a few batches, and a bound on the work a fetch does whatever its
/// MaxBytes (a 50 MiB read to acquire 500 records would be thrown away).
const SHARE_READ_BYTES_MAX: usize = 1 << 20;

/// A share coordinator's error as the leader's caller hears it (Kafka's
/// `fetchPersisterError`).
fn persister_error(error: i16) -> i16 {
    match error {
        code::COORDINATOR_LOAD_IN_PROGRESS | code::COORDINATOR_NOT_AVAILABLE | code::NOT_COORDINATOR => {
            code::COORDINATOR_NOT_AVAILABLE
        }
        code::GROUP_ID_NOT_FOUND | code::UNKNOWN_TOPIC_OR_PARTITION => error,
        code::FENCED_LEADER_EPOCH | code::FENCED_STATE_EPOCH => code::NOT_LEADER_OR_FOLLOWER,
        _ => code::UNKNOWN_SERVER_ERROR,
    }
}

/// Runs `call` on the share-partition of `partition` (hosted as `state`, led here).
///
/// # Errors
/// NOT_LEADER_OR_FOLLOWER when this replica does not lead it (any more); the share
/// coordinator's error when the share-partition cannot be loaded.
pub async fn run<H: Host>(
    host: &Rc<H>,
    partition: &TopicPartition,
    state: &Partition,
    call: ShareCall,
) -> Result<ShareAnswer, ShareError> {
    let (group, member, topic_id) = match &call {
        ShareCall::Fetch { group, member, topic_id, .. }
        | ShareCall::Acknowledge { group, member, topic_id, .. }
        | ShareCall::Release { group, member, topic_id } => (group.clone(), member.clone(), *topic_id),
    };
    let key = Key { group: group.clone(), topic_id, partition: partition.partition };
    let (settings, reset, committed) = crate::group::configs::share_partition_settings(&host.image(), &group);
    let slot = state.shares.slot(&group);
    let mut guard = slot.state.lock().await;
    let leader_epoch = state.replica().leader_epoch().0;
    if state.replica().role() != Role::Leader {
        *guard = None;
        return Err(ShareError::new(code::NOT_LEADER_OR_FOLLOWER));
    }
    if guard.as_ref().is_none_or(|l| l.leader_epoch != leader_epoch) {
        *guard = None;
        *guard = Some(load(host, state, key.clone(), leader_epoch, settings, reset).await?);
    }
    let loaded = guard.as_mut().expect("loaded above");
    loaded.sp.set_settings(settings);
    loaded.sp.truncate_below(state.log().log_start_offset().0);
    let now = Instant::now();
    // The state as it was, to put back if its write fails: copied only when this
    // operation may change it (acknowledgements, a release, a lock run out), not for
    // a plain fetch.
    let releasing = matches!(call, ShareCall::Release { .. });
    let acknowledging = match &call {
        ShareCall::Fetch { acks, .. } | ShareCall::Acknowledge { acks, .. } => !acks.is_empty(),
        ShareCall::Release { .. } => false,
    };
    let expiring = loaded.sp.next_expiry().is_some_and(|at| at <= now);
    let before = (releasing || acknowledging || expiring).then(|| loaded.sp.clone());
    let metrics = host.share_metrics();
    let expired = loaded.sp.expire(now);
    crate::share::ShareMetrics::add(&metrics.expired, expired as u64);
    let mut changed = expired > 0;
    let mut ack_error = code::NONE;
    let (acks, fetch) = match call {
        ShareCall::Fetch { acks, max_records, max_bytes, record_limit, .. } => {
            (acks, Some((max_records, max_bytes, record_limit)))
        }
        ShareCall::Acknowledge { acks, .. } => (acks, None),
        ShareCall::Release { .. } => {
            changed |= loaded.sp.release_member(&member) > 0;
            (Vec::new(), None)
        }
    };
    for ack in acks {
        let records = (ack.last - ack.first + 1).max(0) as u64;
        let renews = ack.types.iter().all(|t| *t == Acknowledge::Renew);
        match apply(&mut loaded.sp, &member, ack, now) {
            Ok(applied) => {
                changed |= applied;
                if !renews {
                    crate::share::ShareMetrics::add(&metrics.acknowledged, records);
                }
            }
            Err(error) if ack_error == code::NONE => ack_error = error,
            Err(_) => {}
        }
    }
    if changed {
        let (start, batches) = loaded.sp.state_batches();
        let write =
            StateCall::Write { key: key.clone(), state_epoch: loaded.state_epoch, leader_epoch, start, batches };
        let written = host.share_state(write).await;
        let metrics = host.share_metrics();
        if let Err((error, text)) = written {
            crate::share::ShareMetrics::add(&metrics.state_write_failures, 1);
            // Logged once per run of failures; each is counted.
            if !metrics.failing.replace(true) {
                tracing::warn!(target: "skein::net", partition = %partition, group = %group, error, text,
                    "a share-partition's state was not written; its acknowledgements are answered with an error");
            }
            if matches!(error, code::FENCED_LEADER_EPOCH | code::FENCED_STATE_EPOCH) {
                *guard = None;
                return Err(ShareError::new(code::NOT_LEADER_OR_FOLLOWER));
            }
            loaded.sp = before.expect("copied before any change");
            let error = persister_error(error);
            return Ok(ShareAnswer { ack_error: error, ..answer(loaded, committed) });
        }
    }
    if changed {
        host.share_metrics().failing.set(false);
    }
    // Records now ARCHIVING (written so) go to the group's dead-letter topic, off the
    // request path; so do those a new leader found ARCHIVING.
    let letters = loaded.sp.take_dead_letters();
    if !letters.is_empty() {
        let deliver =
            super::dead_letter::deliver(host.clone(), partition.clone(), key, slot.clone(), leader_epoch, letters);
        glommio::spawn_local(deliver).detach();
    }
    let mut out = ShareAnswer { ack_error, ..answer(loaded, committed) };
    if let Some((max_records, max_bytes, record_limit)) = fetch.filter(|(r, b, _)| *r > 0 && *b > 0) {
        let limit = Limit { max_records, max_bytes, record_limit };
        let (batches, acquired) = acquire(state, &mut loaded.sp, &member, limit, committed, now).await?;
        let taken: i64 = acquired.iter().map(|a| a.last - a.first + 1).sum();
        crate::share::ShareMetrics::add(&host.share_metrics().acquired, taken as u64);
        out.batches = batches;
        out.acquired = acquired;
        out.wait_from = loaded.sp.next_fetch_offset();
    }
    // A closed session that leaves nothing acquired lets the share-partition go (as
    // Kafka's leader drops a group's share-partitions when its sessions end): the next
    // session loads it again, and so sees an offset reset made meanwhile. Not while
    // dead letters are being written: their end archives them here.
    if releasing && loaded.sp.acquired() == 0 && !loaded.sp.archiving() {
        *guard = None;
        drop(guard);
        drop(slot);
        state.shares.forget_idle(&group);
    }
    Ok(out)
}

fn answer(loaded: &Loaded, committed: bool) -> ShareAnswer {
    let lock_ms = loaded.sp.settings().lock_duration.as_millis().min(i32::MAX as u128) as i32;
    ShareAnswer { wait_from: loaded.sp.next_fetch_offset(), committed, lock_ms, ..ShareAnswer::default() }
}

/// Applies one acknowledgement range; offsets below the start are ignored (they
/// are finished), as Kafka ignores them. Returns whether anything to persist changed
/// (a renewed lock is not persisted).
///
/// # Errors
/// INVALID_RECORD_STATE for a renew when the group's `share.renew.acknowledge.enable`
/// is false, and as `SharePartition::acknowledge`.
fn apply(sp: &mut SharePartition, member: &str, ack: AckBatch, now: Instant) -> Result<bool, i16> {
    let renews_only = ack.types.iter().all(|t| *t == Acknowledge::Renew);
    if !sp.settings().renew_enabled && ack.types.contains(&Acknowledge::Renew) {
        return Err(code::INVALID_RECORD_STATE);
    }
    let start = sp.start_offset();
    if ack.last < start {
        return Ok(false);
    }
    let first = ack.first.max(start);
    let types: Vec<Acknowledge> = match ack.types.len() {
        1 => ack.types,
        _ => ack.types[(first - ack.first) as usize..].to_vec(),
    };
    sp.acknowledge(member, first, ack.last, &types, now).map(|()| !renews_only)
}

/// Loads the share-partition from its coordinator in `leader_epoch`.
async fn load<H: Host>(
    host: &Rc<H>,
    state: &Partition,
    key: Key,
    leader_epoch: i32,
    settings: ShareSettings,
    reset: ShareReset,
) -> Result<Loaded, ShareError> {
    let stored = host.share_state(StateCall::Read { key, leader_epoch }).await.map_err(|(error, text)| ShareError {
        code: persister_error(error),
        message: Some(text).filter(|t| !t.is_empty()),
    })?;
    let log_start = state.log().log_start_offset().0;
    let start = match stored.start {
        start if start >= 0 => start.max(log_start),
        _ => reset_offset(state, reset).await?,
    };
    let sp = SharePartition::restore(start, &stored.batches, settings);
    Ok(Loaded { sp, leader_epoch, state_epoch: stored.state_epoch })
}

/// Where a share-partition with no state starts: `share.auto.offset.reset`.
async fn reset_offset(state: &Partition, reset: ShareReset) -> Result<i64, ShareError> {
    let spec = match reset {
        ShareReset::Earliest => OffsetSpec::Earliest,
        ShareReset::Latest => OffsetSpec::Latest,
        ShareReset::ByDuration(ms) => OffsetSpec::Timestamp(skein_engine::time::now_ms() - ms as i64),
    };
    let (offset, _, _) = state.list_offset(spec, Isolation::HighWatermark).await?;
    // No record that recent: the share-partition starts at the end.
    Ok(if offset < 0 { state.high_watermark().0 } else { offset })
}

/// The offsets of a batch's records with a hash of each key (`None`: no key), for
/// key-ordered groups. A batch that does not decode gives its offsets without keys
/// (delivered unordered rather than held back for good).
fn keys(batch: &Batch) -> Vec<(i64, Option<u64>)> {
    use std::hash::{Hash, Hasher};
    let base = batch.base_offset().0;
    match skein_engine::records::decode_records(&batch.bytes(), skein_engine::limits::DECOMPRESSED_BATCH_BYTES_MAX) {
        Ok(records) => records
            .into_iter()
            .map(|r| {
                let key = r.key.map(|k| {
                    let mut hasher = std::collections::hash_map::DefaultHasher::new();
                    k.hash(&mut hasher);
                    hasher.finish()
                });
                (base + i64::from(r.offset_delta), key)
            })
            .collect(),
        Err(_) => (base..batch.next_offset().0).map(|o| (o, None)).collect(),
    }
}

/// How much one acquisition may take.
#[derive(Debug, Clone, Copy)]
struct Limit {
    max_records: usize,
    max_bytes: usize,
    /// At most `max_records` exactly (KIP-1206's record_limit), not rounded up to
    /// whole log batches.
    record_limit: bool,
}

/// Reads the log from the share-partition's first available offset and acquires for
/// `member` the records read: whole log batches while fewer than `max_records` are
/// taken (Kafka's batch-optimized acquisition), or exactly up to `max_records` in
/// record_limit mode. Batches of aborted transactions (read_committed) become gaps.
async fn acquire(
    state: &Partition,
    sp: &mut SharePartition,
    member: &str,
    limit: Limit,
    committed: bool,
    now: Instant,
) -> Result<(Vec<Batch>, Vec<Acquired>), ShareError> {
    let Limit { max_records, max_bytes, record_limit } = limit;
    sp.fetched_by(member, now);
    let isolation = if committed { Isolation::Committed } else { Isolation::HighWatermark };
    let from = sp.next_fetch_offset();
    let visible = if committed { state.last_stable_offset() } else { state.high_watermark() };
    if from >= visible.0 || (from >= sp.end_offset() && !sp.has_room()) {
        return Ok((Vec::new(), Vec::new()));
    }
    // A read past what the window can take is wasted: at most a share-partition read's
    // worth, the first batch always (a larger batch still goes whole).
    let read_bytes = max_bytes.min(SHARE_READ_BYTES_MAX);
    let batches = match state.read(Offset(from), read_bytes, isolation).await {
        Ok(batches) => batches,
        // Below the log start (retention): the share-partition moves to it.
        Err(skein_engine::Error::OffsetOutOfRange { .. }) => {
            sp.truncate_below(state.log().log_start_offset().0);
            return Ok((Vec::new(), Vec::new()));
        }
        Err(e) => return Err(e.into()),
    };
    let Some(last) = batches.last() else { return Ok((Vec::new(), Vec::new())) };
    let aborted = match committed {
        true => state.aborted_between(Offset(from), last.next_offset()),
        false => Vec::new(),
    };
    let is_aborted = |batch: &Batch| {
        batch.is_transactional()
            && !batch.is_control()
            && aborted.iter().any(|a| {
                a.producer_id == batch.producer_id()
                    && a.first_offset <= batch.base_offset().0
                    && batch.base_offset().0 <= a.last_offset
            })
    };
    let keyed = sp.settings().key_ordered;
    let mut offsets: Vec<(i64, Option<u64>)> = Vec::new();
    let mut read_to = from;
    // Offsets past the window's bound cannot be taken this time.
    let bound = sp.start_offset().saturating_add(sp.settings().max_in_flight as i64);
    for batch in &batches {
        if offsets.len() >= max_records || batch.base_offset().0 >= bound {
            break;
        }
        read_to = batch.next_offset().0;
        if is_aborted(batch) {
            continue;
        }
        let first = batch.base_offset().0.max(from);
        match keyed && !batch.is_control() {
            true => offsets.extend(keys(batch).into_iter().filter(|(o, _)| *o >= first)),
            false => offsets.extend((first..batch.next_offset().0).map(|o| (o, None))),
        }
    }
    let cap = if record_limit { max_records } else { usize::MAX };
    let (acquired, complete) = sp.acquire_offered(member, offsets, cap, now);
    // Every offset read was offered: what was not taken within the window's bound
    // (aborted batches, offsets compacted away) is a gap, so no read passes it again.
    // An acquisition that stopped early (record_limit's cap, throttled near the
    // delivery limit) considered only what it took.
    if complete {
        sp.skip_to(read_to);
    }
    let wanted = |batch: &Batch| {
        let (base, last) = (batch.base_offset().0, batch.last_offset().0);
        acquired.iter().any(|a| a.first <= last && base <= a.last)
    };
    let batches = batches.into_iter().filter(|b| wanted(b)).collect();
    Ok((batches, acquired))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(first: i64, last: i64, types: &[Acknowledge]) -> AckBatch {
        AckBatch { first, last, types: types.to_vec() }
    }

    // A renewal changes nothing to persist; with `share.renew.acknowledge.enable` false
    // it is refused (INVALID_RECORD_STATE) and the lock is left as it was.
    #[test]
    fn renewals_are_not_persisted_and_can_be_turned_off() {
        let now = Instant::now();
        let mut sp = SharePartition::new(0, ShareSettings::default());
        sp.acquire("m", 0..2, 10, now);
        assert_eq!(apply(&mut sp, "m", batch(0, 1, &[Acknowledge::Renew]), now), Ok(false));
        assert_eq!(apply(&mut sp, "m", batch(0, 0, &[Acknowledge::Accept]), now), Ok(true));
        let expiry = sp.next_expiry();
        sp.set_settings(ShareSettings { renew_enabled: false, ..ShareSettings::default() });
        let later = now + std::time::Duration::from_secs(10);
        assert_eq!(apply(&mut sp, "m", batch(1, 1, &[Acknowledge::Renew]), later), Err(code::INVALID_RECORD_STATE));
        assert_eq!(sp.next_expiry(), expiry, "the lock is not extended");
    }
}
