//! The share coordinator (KIP-932) on a shard: the state of each share-partition (a
//! share group's progress through one topic partition), kept in `__share_group_state`
//! as Kafka's records, loaded by each new leader of a partition of that topic, and
//! read and written by the share-partitions' leaders (Initialize, Read, Write,
//! Delete and ReadSummary: Kafka's RPCs 83-87, or the same calls routed between
//! shards when the leader and the coordinator are one node).
//!
//! A share-partition's state lives in partition `abs(hash("group:topicId:partition"))
//! % 50`, as in Kafka. Skein writes every change as a whole `ShareSnapshot` (the
//! window is bounded by `share.partition.max.record.locks`), and the topic is
//! compacted, so its size follows the share-partitions, not their history. It reads
//! Kafka's `ShareUpdate` records too, laid over the snapshot before them.
//!
//! Fencing, as Kafka's: a write from a leader epoch older than the stored one is
//! refused with FENCED_LEADER_EPOCH; one of an older state epoch (the offsets were
//! reset since) with FENCED_STATE_EPOCH. A read raises the stored leader epoch, so a
//! deposed leader's later writes are refused.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use skein_control::errors::code;
use skein_engine::io::dma::DmaStorage;
use skein_engine::records::{BatchProducer, Record};
use skein_engine::{Log, TopicPartition};

use super::{replay, write_records, Host, LoadError, Replayed};
use crate::group::records::flexible::{get_uvarint, put_uvarint, skip_tags};
use crate::hosted::Partition;
use crate::share::partition::{RecordState, StateBatch};

/// The share coordinator's topic and its partition count
/// (`share.coordinator.state.topic.num.partitions`).
pub const STATE_TOPIC: &str = "__share_group_state";
pub const STATE_TOPIC_PARTITIONS: i32 = 50;

/// How long a state write waits for the ISR.
const STATE_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// One share-partition: a share group's view of a topic partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub group: String,
    pub topic_id: uuid::Uuid,
    pub partition: i32,
}

impl Key {
    /// Kafka's share coordinator key, `group:topicId:partition`, with the topic id as
    /// Kafka prints a Uuid (URL-safe base64, unpadded).
    pub fn coordinator_key(&self) -> String {
        use base64::Engine;
        let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.topic_id.as_bytes());
        format!("{}:{}:{}", self.group, id, self.partition)
    }

    /// The partition of `__share_group_state` that holds this share-partition.
    pub fn state_partition(&self) -> i32 {
        crate::group::key_partition(&self.coordinator_key(), STATE_TOPIC_PARTITIONS)
    }
}

/// What the coordinator keeps of a share-partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub snapshot_epoch: i32,
    pub state_epoch: i32,
    pub leader_epoch: i32,
    /// The share-partition start offset; -1: not chosen yet (the leader applies
    /// `share.auto.offset.reset`).
    pub start: i64,
    pub batches: Vec<StateBatch>,
    /// Another broker's summary (ReadShareGroupStateSummary v1) carries the count of
    /// finished records, not the batches.
    pub complete: Option<i64>,
}

impl Stored {
    /// A share-partition with no state: start -1, epochs 0.
    pub fn none() -> Stored {
        Stored { snapshot_epoch: 0, state_epoch: 0, leader_epoch: 0, start: -1, batches: Vec::new(), complete: None }
    }

    /// Records at or past the start that are finished (Kafka's DeliveryCompleteCount).
    pub fn delivery_complete(&self) -> i64 {
        if let Some(complete) = self.complete {
            return complete;
        }
        self.batches
            .iter()
            .filter(|b| matches!(b.state, RecordState::Acknowledged | RecordState::Archived))
            .map(|b| (b.last - b.first.max(self.start) + 1).max(0))
            .sum()
    }
}

/// A call to the share coordinator.
#[derive(Debug, Clone)]
pub enum StateCall {
    /// Sets a share-partition's start and state epoch, dropping its records' state
    /// (AlterShareGroupOffsets).
    Initialize {
        key: Key,
        state_epoch: i32,
        start: i64,
    },
    /// A new leader loads the state, raising the stored leader epoch.
    Read {
        key: Key,
        leader_epoch: i32,
    },
    /// A leader's new state.
    Write {
        key: Key,
        state_epoch: i32,
        leader_epoch: i32,
        start: i64,
        batches: Vec<StateBatch>,
    },
    Delete {
        key: Key,
    },
    /// The start and epochs, for DescribeShareGroupOffsets.
    Summary {
        key: Key,
    },
}

impl StateCall {
    pub fn key(&self) -> &Key {
        match self {
            StateCall::Initialize { key, .. }
            | StateCall::Read { key, .. }
            | StateCall::Write { key, .. }
            | StateCall::Delete { key }
            | StateCall::Summary { key } => key,
        }
    }
}

/// The share coordinator's state on one shard: the share-partitions of the
/// `__share_group_state` partitions it leads and has loaded.
#[derive(Default)]
pub struct ShareStates {
    states: RefCell<HashMap<Key, Stored>>,
    loaded: RefCell<BTreeSet<i32>>,
}

impl ShareStates {
    pub fn is_loaded(&self, partition: i32) -> bool {
        self.loaded.borrow().contains(&partition)
    }

    /// Forgets a partition this shard no longer leads.
    pub fn unload(&self, partition: i32) {
        self.states.borrow_mut().retain(|key, _| key.state_partition() != partition);
        self.loaded.borrow_mut().remove(&partition);
    }

    /// Share-partitions held here, for `/metrics`.
    pub fn len(&self) -> usize {
        self.states.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Applies a replayed record.
    fn apply(&self, entry: Entry) {
        let mut states = self.states.borrow_mut();
        match entry {
            Entry::Snapshot(key, stored) => {
                states.insert(key, stored);
            }
            Entry::Update { key, snapshot_epoch, leader_epoch, start, batches } => {
                if let Some(stored) = states.get_mut(&key) {
                    stored.snapshot_epoch = snapshot_epoch;
                    stored.leader_epoch = leader_epoch;
                    stored.start = stored.start.max(start);
                    stored.batches = overlay(&stored.batches, &batches, stored.start);
                }
            }
            Entry::Tombstone(key) => {
                states.remove(&key);
            }
        }
    }
}

/// Lays `newer` batches over `older` and drops what lies below `start`.
pub fn overlay(older: &[StateBatch], newer: &[StateBatch], start: i64) -> Vec<StateBatch> {
    let mut out: Vec<StateBatch> = Vec::new();
    for batch in older {
        let mut pieces = vec![*batch];
        for cover in newer {
            pieces = pieces
                .into_iter()
                .flat_map(|p| {
                    let mut left = Vec::new();
                    if p.first < cover.first {
                        left.push(StateBatch { last: p.last.min(cover.first - 1), ..p });
                    }
                    if p.last > cover.last {
                        left.push(StateBatch { first: p.first.max(cover.last + 1), ..p });
                    }
                    left
                })
                .collect();
        }
        out.extend(pieces);
    }
    out.extend(newer.iter().copied());
    out.retain(|b| b.last >= start);
    for b in &mut out {
        b.first = b.first.max(start);
    }
    out.sort_by_key(|b| b.first);
    out
}

/// Loads a `__share_group_state` partition while this shard leads it, retrying with
/// backoff, in each new leader epoch.
pub async fn load_as_leader<H: Host>(host: Rc<H>, partition: TopicPartition, log: Rc<Log<DmaStorage>>) {
    super::load_while_leading(host, partition, log, Duration::ZERO, |host, partition, log, _| async move {
        match load(&*host, &log, partition.partition).await {
            Ok(()) => true,
            Err(error) => {
                host.count_group_load_failure();
                tracing::error!(target: "skein::net", partition = %partition, error = %error, "cannot load share-partition states; retrying");
                false
            }
        }
    })
    .await;
}

async fn load<H: Host>(host: &H, log: &Log<DmaStorage>, partition: i32) -> Result<(), LoadError> {
    let states = &host.coordinators().shares;
    states.unload(partition);
    let mut entries = 0u64;
    replay(log, |replayed| {
        if let Replayed::Record { record, .. } = replayed {
            let Some(key) = &record.key else { return };
            if let Some(entry) = decode(key, record.value.as_ref()) {
                states.apply(entry);
                entries += 1;
            }
        }
    })
    .await?;
    states.loaded.borrow_mut().insert(partition);
    tracing::debug!(target: "skein::net", partition, records = entries, "share-partition states loaded");
    Ok(())
}

/// Runs a call on the `__share_group_state` partition `state` that holds its key.
///
/// # Errors
/// A Kafka error code, with Kafka's message where it has one.
pub async fn run<H: Host>(
    host: &H,
    state: &Partition,
    call: StateCall,
) -> Result<Stored, skein_control::errors::Refusal> {
    let states = &host.coordinators().shares;
    let key = call.key().clone();
    let current = states.states.borrow().get(&key).cloned();
    let next = match call {
        StateCall::Summary { .. } => return Ok(current.unwrap_or_else(Stored::none)),
        StateCall::Read { leader_epoch, .. } => {
            let Some(mut stored) = current else { return Ok(Stored::none()) };
            if leader_epoch < 0 {
                return Err((code::INVALID_REQUEST, "Invalid leader epoch.".into()));
            }
            if stored.leader_epoch > leader_epoch {
                return Err((code::FENCED_LEADER_EPOCH, "Leader epoch is older than the stored one.".into()));
            }
            if stored.leader_epoch == leader_epoch {
                return Ok(stored);
            }
            stored.leader_epoch = leader_epoch;
            stored
        }
        StateCall::Write { state_epoch, leader_epoch, start, batches, .. } => {
            if leader_epoch < 0 || state_epoch < 0 {
                return Err((code::INVALID_REQUEST, "Invalid epochs.".into()));
            }
            let stored = current.unwrap_or_else(Stored::none);
            if stored.leader_epoch > leader_epoch {
                return Err((code::FENCED_LEADER_EPOCH, "Leader epoch is older than the stored one.".into()));
            }
            if stored.state_epoch > state_epoch {
                return Err((code::FENCED_STATE_EPOCH, "State epoch is older than the stored one.".into()));
            }
            let start = start.max(stored.start);
            let batches = overlay(&[], &batches, start);
            Stored {
                snapshot_epoch: stored.snapshot_epoch + 1,
                state_epoch,
                leader_epoch,
                start,
                batches,
                complete: None,
            }
        }
        StateCall::Initialize { state_epoch, start, .. } => {
            let stored = current.unwrap_or_else(Stored::none);
            if stored.state_epoch > state_epoch {
                return Err((code::FENCED_STATE_EPOCH, "State epoch is older than the stored one.".into()));
            }
            Stored {
                snapshot_epoch: stored.snapshot_epoch + 1,
                state_epoch,
                leader_epoch: stored.leader_epoch,
                start,
                batches: Vec::new(),
                complete: None,
            }
        }
        StateCall::Delete { .. } => {
            if current.is_none() {
                return Ok(Stored::none());
            }
            persist(state, &Entry::Tombstone(key.clone())).await.map_err(|c| (c, String::new()))?;
            states.states.borrow_mut().remove(&key);
            return Ok(Stored::none());
        }
    };
    persist(state, &Entry::Snapshot(key.clone(), next.clone())).await.map_err(|c| (c, String::new()))?;
    states.states.borrow_mut().insert(key, next.clone());
    Ok(next)
}

async fn persist(state: &Partition, entry: &Entry) -> Result<(), i16> {
    let (key, value) = encode(entry);
    let record = Record { key: Some(key), value, ..Default::default() };
    write_records(state, vec![record], BatchProducer::NONE, STATE_WRITE_TIMEOUT).await
}

/// A record of `__share_group_state`.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// `ShareSnapshot` (type 0): the whole state.
    Snapshot(Key, Stored),
    /// `ShareUpdate` (type 1), which Kafka writes between snapshots.
    Update { key: Key, snapshot_epoch: i32, leader_epoch: i32, start: i64, batches: Vec<StateBatch> },
    /// A snapshot's tombstone: the state is deleted.
    Tombstone(Key),
}

fn put_string(out: &mut BytesMut, s: &str) {
    out.put_i16(s.len() as i16);
    out.put_slice(s.as_bytes());
}

fn key_bytes(kind: i16, key: &Key) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(kind);
    put_string(&mut out, &key.group);
    out.put_slice(key.topic_id.as_bytes());
    out.put_i32(key.partition);
    out.freeze()
}

fn put_batches(out: &mut BytesMut, batches: &[StateBatch]) {
    put_uvarint(out, batches.len() as u64 + 1);
    for b in batches {
        out.put_i64(b.first);
        out.put_i64(b.last);
        out.put_i8(b.state as i8);
        out.put_i16(b.deliveries.min(i16::MAX as u16) as i16);
        put_uvarint(out, 0);
    }
}

/// Encodes a record as Kafka's share coordinator writes it: the key's type and
/// fields (non-flexible, version 0), the value's version 0 and flexible fields.
pub fn encode(entry: &Entry) -> (Bytes, Option<Bytes>) {
    match entry {
        Entry::Snapshot(key, stored) => {
            let now = skein_engine::time::now_ms();
            let mut v = BytesMut::new();
            v.put_i16(0);
            v.put_i32(stored.snapshot_epoch);
            v.put_i32(stored.state_epoch);
            v.put_i32(stored.leader_epoch);
            v.put_i64(stored.start);
            v.put_i64(now);
            v.put_i64(now);
            put_batches(&mut v, &stored.batches);
            put_uvarint(&mut v, 0);
            (key_bytes(0, key), Some(v.freeze()))
        }
        Entry::Update { key, snapshot_epoch, leader_epoch, start, batches } => {
            let mut v = BytesMut::new();
            v.put_i16(0);
            v.put_i32(*snapshot_epoch);
            v.put_i32(*leader_epoch);
            v.put_i64(*start);
            put_batches(&mut v, batches);
            put_uvarint(&mut v, 0);
            (key_bytes(1, key), Some(v.freeze()))
        }
        Entry::Tombstone(key) => (key_bytes(0, key), None),
    }
}

fn get_batches(v: &mut Bytes) -> Option<Vec<StateBatch>> {
    let n = (get_uvarint(v)? as usize).saturating_sub(1);
    // A batch takes at least 20 bytes: the reservation is bounded by the input.
    let mut batches = Vec::with_capacity(n.min(v.remaining() / 20));
    for _ in 0..n {
        if v.remaining() < 19 {
            return None;
        }
        let first = v.get_i64();
        let last = v.get_i64();
        let state = match v.get_i8() {
            0 => RecordState::Available,
            1 => RecordState::Acquired,
            2 => RecordState::Acknowledged,
            // A dead-letter write under way (KIP-1191).
            3 => RecordState::Archiving,
            4 => RecordState::Archived,
            _ => return None,
        };
        let deliveries = v.get_i16().max(0) as u16;
        skip_tags(v)?;
        if last < first {
            return None;
        }
        batches.push(StateBatch { first, last, state, deliveries });
    }
    Some(batches)
}

/// Decodes a record of `__share_group_state`; `None` for a type or version it does
/// not know, or a damaged record (skipped, as Kafka skips unknown types).
pub fn decode(key: &Bytes, value: Option<&Bytes>) -> Option<Entry> {
    let mut k = key.clone();
    if k.remaining() < 2 {
        return None;
    }
    let kind = k.get_i16();
    let group = crate::group::records::get_string(&mut k)?;
    if k.remaining() < 20 {
        return None;
    }
    let topic_id = uuid::Uuid::from_slice(&k.split_to(16)).ok()?;
    let key = Key { group, topic_id, partition: k.get_i32() };
    let Some(value) = value else {
        return (kind == 0).then_some(Entry::Tombstone(key));
    };
    let mut v = value.clone();
    if v.remaining() < 2 || v.get_i16() != 0 {
        return None;
    }
    match kind {
        0 => {
            if v.remaining() < 36 {
                return None;
            }
            let snapshot_epoch = v.get_i32();
            let state_epoch = v.get_i32();
            let leader_epoch = v.get_i32();
            let start = v.get_i64();
            let _created = v.get_i64();
            let _written = v.get_i64();
            let batches = get_batches(&mut v)?;
            let stored = Stored { snapshot_epoch, state_epoch, leader_epoch, start, batches, complete: None };
            Some(Entry::Snapshot(key, stored))
        }
        1 => {
            if v.remaining() < 16 {
                return None;
            }
            let snapshot_epoch = v.get_i32();
            let leader_epoch = v.get_i32();
            let start = v.get_i64();
            let batches = get_batches(&mut v)?;
            Some(Entry::Update { key, snapshot_epoch, leader_epoch, start, batches })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(first: i64, last: i64, state: RecordState, deliveries: u16) -> StateBatch {
        StateBatch { first, last, state, deliveries }
    }

    // Records come back as they were written; damaged ones are refused, not trusted.
    #[test]
    fn records_round_trip_and_damage_is_refused() {
        let key = Key { group: "g:1".into(), topic_id: uuid::Uuid::new_v4(), partition: 3 };
        let stored = Stored {
            snapshot_epoch: 4,
            state_epoch: 1,
            leader_epoch: 7,
            start: 10,
            batches: vec![batch(10, 12, RecordState::Available, 2), batch(13, 13, RecordState::Archived, 5)],
            complete: None,
        };
        for entry in [
            Entry::Snapshot(key.clone(), stored.clone()),
            Entry::Tombstone(key.clone()),
            Entry::Update {
                key: key.clone(),
                snapshot_epoch: 4,
                leader_epoch: 7,
                start: 11,
                batches: stored.batches.clone(),
            },
        ] {
            let (k, v) = encode(&entry);
            assert_eq!(decode(&k, v.as_ref()), Some(entry.clone()));
            if let Some(v) = v {
                for cut in 0..v.len() {
                    let _ = decode(&k, Some(&v.slice(..cut)));
                }
            }
        }
        assert_eq!(stored.delivery_complete(), 1);
    }

    // An update laid over a snapshot replaces the offsets it covers and the start
    // drops what lies below it.
    #[test]
    fn updates_overlay_snapshots() {
        let older = [batch(0, 9, RecordState::Available, 1)];
        let newer = [batch(3, 4, RecordState::Acknowledged, 1)];
        assert_eq!(
            overlay(&older, &newer, 2),
            vec![
                batch(2, 2, RecordState::Available, 1),
                batch(3, 4, RecordState::Acknowledged, 1),
                batch(5, 9, RecordState::Available, 1),
            ]
        );
    }

    // Kafka's key: the group, the topic id as Kafka prints it, the partition.
    #[test]
    fn the_coordinator_key_is_kafkas() {
        let key = Key { group: "g".into(), topic_id: uuid::Uuid::nil(), partition: 0 };
        assert_eq!(key.coordinator_key(), "g:AAAAAAAAAAAAAAAAAAAAAA:0");
        assert!((0..STATE_TOPIC_PARTITIONS).contains(&key.state_partition()));
    }
}
