//! One share-partition (KIP-932): the records of a topic partition that the members of
//! one share group are consuming, and the state of each.
//!
//! The share-partition start offset (SPSO) is the first offset not yet finished, and
//! `end` is one past the last offset taken into the window. Each record between them is
//! in one of Kafka's states:
//! - AVAILABLE: it may be delivered again;
//! - ACQUIRED: a member holds it under a time-limited lock;
//! - ACKNOWLEDGED: a member accepted it;
//! - ARCHIVING: it was rejected, or reached the delivery count limit, in a group with a
//!   dead-letter topic (KIP-1191), and is on its way there;
//! - ARCHIVED: it was rejected, or reached the delivery count limit (and, with a
//!   dead-letter topic, was written there or given up on).
//!
//! An offset of the window with no record (compacted away, or a control record) is a
//! gap: never delivered, finished as if archived. The start moves past every finished
//! record at its front, and their state is dropped. So a partition's state is bounded by
//! the window, which `max_in_flight` (`group.share.partition.max.record.locks`) bounds.
//!
//! A record's delivery count grows at each acquisition. A record that comes back
//! (RELEASE, an expired lock, its member gone) is archived once it reached
//! `delivery_limit` (`share.delivery.count.limit`); otherwise it is available again.
//!
//! This is the state machine alone: no I/O and no clock of its own (callers pass
//! `now`), so that the leader's share-partition, its persistence to
//! `__share_group_state` and the tests all drive the same code.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::errors::code;

/// A record's state, with the ids Kafka persists in `__share_group_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    Available = 0,
    Acquired = 1,
    Acknowledged = 2,
    /// On its way to the group's dead-letter topic: not delivered again, not finished.
    Archiving = 3,
    Archived = 4,
}

/// Why a record goes to the dead-letter topic (the `__dlq.errors.message` header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterCause {
    Rejected,
    DeliveryLimit,
}

impl DeadLetterCause {
    /// Kafka 4.4's words for it.
    pub fn message(self) -> &'static str {
        match self {
            DeadLetterCause::Rejected => "Offset rejected by client.",
            DeadLetterCause::DeliveryLimit => "Offset delivery count exceeded the threshold.",
        }
    }
}

/// Consecutive ARCHIVING records handed to the dead-letter writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadLetters {
    pub first: i64,
    pub last: i64,
    pub deliveries: u16,
    pub cause: DeadLetterCause,
}

/// An acknowledgement type, with ShareFetch's and ShareAcknowledge's codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acknowledge {
    /// An offset with no record: finished without a delivery.
    Gap = 0,
    Accept = 1,
    Release = 2,
    Reject = 3,
    /// Extends the acquisition lock (KIP-1222).
    Renew = 4,
}

impl Acknowledge {
    pub fn from_code(code: i8) -> Option<Acknowledge> {
        Some(match code {
            0 => Acknowledge::Gap,
            1 => Acknowledge::Accept,
            2 => Acknowledge::Release,
            3 => Acknowledge::Reject,
            4 => Acknowledge::Renew,
            _ => return None,
        })
    }
}

/// The largest window a restored share-partition takes: Kafka 4.4's highest
/// `group.share.partition.max.record.locks`.
pub const RESTORED_WINDOW_MAX: usize = 4_000;

/// A group's settings for its share-partitions.
#[derive(Debug, Clone, Copy)]
pub struct ShareSettings {
    /// `group.share.partition.max.record.locks`: the most offsets in the window.
    pub max_in_flight: usize,
    /// `share.delivery.count.limit`.
    pub delivery_limit: u16,
    /// `share.record.lock.duration.ms`.
    pub lock_duration: Duration,
    /// `skein.share.key.ordered` (Skein's own): a key's records go to one member at a
    /// time, in offset order.
    pub key_ordered: bool,
    /// `share.renew.acknowledge.enable`: whether RENEW acknowledgements are taken.
    pub renew_enabled: bool,
    /// The group has a dead-letter topic (`errors.deadletterqueue.topic.name`): what
    /// would be archived goes through ARCHIVING.
    pub dead_letter: bool,
}

impl Default for ShareSettings {
    /// Kafka 4.4's defaults.
    fn default() -> ShareSettings {
        ShareSettings {
            max_in_flight: 2000,
            delivery_limit: 5,
            lock_duration: Duration::from_secs(30),
            key_ordered: false,
            renew_enabled: true,
            dead_letter: false,
        }
    }
}

/// Consecutive records of one state and delivery count, as `__share_group_state`
/// keeps them (Kafka's StateBatch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateBatch {
    pub first: i64,
    pub last: i64,
    pub state: RecordState,
    pub deliveries: u16,
}

/// Records acquired together: `first..=last`, each delivered `deliveries` times now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    pub first: i64,
    pub last: i64,
    pub deliveries: u16,
}

#[derive(Debug, Clone)]
struct InFlight {
    state: RecordState,
    deliveries: u16,
    /// The member holding it, while acquired.
    member: Option<Rc<str>>,
    /// When its lock runs out, while acquired.
    expires: Option<Instant>,
    /// A hash of its key, when key-ordered delivery needs it and the key is known
    /// (`None`: no key, or not read since a restore).
    key: Option<u64>,
    /// While ARCHIVING: why, and whether its dead-letter write was started (not
    /// persisted: a new leader starts it again).
    dead_letter: Option<(DeadLetterCause, bool)>,
}

impl InFlight {
    fn finished(&self) -> bool {
        matches!(self.state, RecordState::Acknowledged | RecordState::Archived)
    }

    fn held_by(&self, member: &str) -> bool {
        self.state == RecordState::Acquired && self.member.as_deref() == Some(member)
    }
}

/// A share-partition's records between its start and end offsets.
#[derive(Debug, Clone)]
pub struct SharePartition {
    start: i64,
    end: i64,
    /// The records of `start..end`; an offset missing here is a gap.
    records: BTreeMap<i64, InFlight>,
    settings: ShareSettings,
    /// Key-ordered groups: the members that acquired lately, with when, so that each
    /// acquisition takes its share of the keys and leaves the rest to the others.
    members: std::collections::HashMap<Rc<str>, Instant>,
}

impl SharePartition {
    /// A share-partition that starts at `start` (the offset `share.auto.offset.reset`
    /// chose, or the persisted start) with nothing in flight.
    pub fn new(start: i64, settings: ShareSettings) -> SharePartition {
        SharePartition { start, end: start, records: BTreeMap::new(), settings, members: Default::default() }
    }

    pub fn start_offset(&self) -> i64 {
        self.start
    }

    pub fn end_offset(&self) -> i64 {
        self.end
    }

    pub fn settings(&self) -> ShareSettings {
        self.settings
    }

    /// The group's settings changed (its configs were altered): new locks, releases
    /// and the window follow them.
    pub fn set_settings(&mut self, settings: ShareSettings) {
        self.settings = settings;
    }

    /// Whether a new record may enter the window.
    pub fn has_room(&self) -> bool {
        ((self.end - self.start) as usize) < self.settings.max_in_flight
    }

    /// Offsets up to `offset` that a read passed without delivering (aborted
    /// transactions, compacted away) become gaps, so that the next read starts past
    /// them; within the window's bound.
    pub fn skip_to(&mut self, offset: i64) {
        let bound = self.start.saturating_add(self.settings.max_in_flight as i64);
        let offset = offset.min(bound);
        if offset > self.end {
            self.end = offset;
            self.advance_start();
        }
    }

    /// The offset a fetch for this share-partition reads from: its first available
    /// record, else the end of the window.
    pub fn next_fetch_offset(&self) -> i64 {
        self.records.iter().find(|(_, r)| r.state == RecordState::Available).map_or(self.end, |(offset, _)| *offset)
    }

    /// Records acquired now.
    pub fn acquired(&self) -> usize {
        self.records.values().filter(|r| r.state == RecordState::Acquired).count()
    }

    /// The state and delivery count of `offset`; `None` outside the window or for a gap.
    pub fn state(&self, offset: i64) -> Option<(RecordState, u16)> {
        self.records.get(&offset).map(|r| (r.state, r.deliveries))
    }

    /// When the first acquisition lock runs out, for the caller's timer.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.records.values().filter_map(|r| r.expires).min()
    }

    /// Acquires for `member` the records at `offsets`: the offsets of the records a read
    /// of the log returned from `next_fetch_offset`, ascending. Takes available records
    /// of the window and new records past it, at most `max_records`, and new ones only
    /// while the window holds fewer than `max_in_flight` offsets. Offsets the read
    /// skipped past the window's end become gaps.
    pub fn acquire(
        &mut self,
        member: &str,
        offsets: impl IntoIterator<Item = i64>,
        max_records: usize,
        now: Instant,
    ) -> Vec<Acquired> {
        self.acquire_keyed(member, offsets.into_iter().map(|o| (o, None)), max_records, now)
    }

    /// `acquire`, each offset with a hash of its record's key. With `key_ordered`, a
    /// record is not taken while an earlier record of its key is unfinished (held by
    /// a member, or available and not taken by this acquisition): it stays available
    /// in the window, and only its key waits. So that the group still spreads the load,
    /// one acquisition takes the records of at most its share of the keys offered: the
    /// keys over the members that acquired within the last lock duration.
    pub fn acquire_keyed(
        &mut self,
        member: &str,
        offsets: impl IntoIterator<Item = (i64, Option<u64>)>,
        max_records: usize,
        now: Instant,
    ) -> Vec<Acquired> {
        self.acquire_offered(member, offsets, max_records, now).0
    }

    /// `acquire_keyed`, and whether every offset offered was considered (`false`: it
    /// stopped early, at `max_records` or throttled near the delivery limit, so the
    /// offsets after it must be offered again, not skipped as gaps).
    ///
    /// Near the delivery limit Kafka 4.4 hands records out in smaller acquisitions: a
    /// record delivered at least `max(2, ceil(limit / 2))` times starts an acquisition of
    /// its own, which takes at most the run of such records halved once per delivery
    /// past that threshold (at least one); with a limit above 2, a record on its last
    /// attempt is delivered alone.
    pub fn acquire_offered(
        &mut self,
        member: &str,
        offsets: impl IntoIterator<Item = (i64, Option<u64>)>,
        max_records: usize,
        now: Instant,
    ) -> (Vec<Acquired>, bool) {
        let member: Rc<str> = Rc::from(member);
        let limit = self.settings.delivery_limit;
        let throttle_from = limit.div_ceil(2).max(2);
        let mut throttled: Option<usize> = None;
        let mut complete = true;
        let expires = now + self.settings.lock_duration;
        let ordered = self.settings.key_ordered;
        let offsets: Vec<(i64, Option<u64>)> = offsets.into_iter().collect();
        // Keys with an unfinished record that this acquisition does not take.
        let mut blocked: std::collections::HashSet<u64> = match ordered {
            true => self.records.values().filter(|r| r.state == RecordState::Acquired).filter_map(|r| r.key).collect(),
            false => Default::default(),
        };
        let mut mine: std::collections::HashSet<u64> = Default::default();
        let max_keys = match ordered {
            true => {
                let lock = self.settings.lock_duration;
                self.members.retain(|_, seen| now.duration_since(*seen) < lock);
                self.members.insert(member.clone(), now);
                let offered: std::collections::HashSet<u64> =
                    offsets.iter().filter_map(|(_, k)| *k).filter(|k| !blocked.contains(k)).collect();
                offered.len().div_ceil(self.members.len()).max(1)
            }
            false => usize::MAX,
        };
        let mut taken: Vec<(i64, u16)> = Vec::new();
        for (offset, key) in offsets {
            if taken.len() >= max_records {
                complete = false;
                break;
            }
            if offset < self.start {
                continue;
            }
            let in_window = offset < self.end;
            let key = match in_window {
                true => {
                    let Some(record) = self.records.get_mut(&offset).filter(|r| r.state == RecordState::Available)
                    else {
                        continue;
                    };
                    record.key = record.key.or(key);
                    record.key
                }
                false if (offset - self.start) as usize >= self.settings.max_in_flight => break,
                false => key,
            };
            let waits = ordered
                && key.is_some_and(|k| {
                    // A key beyond this acquisition's share waits, with its later records.
                    if !blocked.contains(&k) && !mine.contains(&k) && mine.len() >= max_keys {
                        blocked.insert(k);
                    }
                    blocked.contains(&k)
                });
            if let (false, Some(k), true) = (waits, key, ordered) {
                mine.insert(k);
            }
            if in_window {
                if waits {
                    continue;
                }
                let delivered = self.records[&offset].deliveries;
                let last_attempt = limit > 2 && delivered == limit - 1;
                if !taken.is_empty() && (last_attempt || (delivered >= throttle_from && throttled.is_none())) {
                    complete = false;
                    break;
                }
                if delivered >= throttle_from && throttled.is_none() {
                    let run = self.available_run(offset, delivered);
                    throttled = Some((run >> (delivered - throttle_from + 1)).max(1));
                }
                let record = self.records.get_mut(&offset).expect("available above");
                record.state = RecordState::Acquired;
                record.deliveries = record.deliveries.saturating_add(1);
                record.member = Some(member.clone());
                record.expires = Some(expires);
                taken.push((offset, record.deliveries));
                if last_attempt || throttled == Some(taken.len()) {
                    complete = false;
                    break;
                }
                continue;
            }
            let record = match waits {
                // It enters the window available, to go once its key is free.
                true => InFlight {
                    state: RecordState::Available,
                    deliveries: 0,
                    member: None,
                    expires: None,
                    key,
                    dead_letter: None,
                },
                false => InFlight {
                    state: RecordState::Acquired,
                    deliveries: 1,
                    member: Some(member.clone()),
                    expires: Some(expires),
                    key,
                    dead_letter: None,
                },
            };
            self.records.insert(offset, record);
            self.end = offset + 1;
            if !waits {
                taken.push((offset, 1));
            }
        }
        let mut ranges: Vec<Acquired> = Vec::new();
        for (offset, deliveries) in taken {
            match ranges.last_mut() {
                Some(last) if last.last + 1 == offset && last.deliveries == deliveries => last.last = offset,
                _ => ranges.push(Acquired { first: offset, last: offset, deliveries }),
            }
        }
        (ranges, complete)
    }

    /// How many available records from `offset` on, consecutive, were delivered
    /// `deliveries` times: the records that came back together (Kafka's in-flight batch).
    fn available_run(&self, offset: i64, deliveries: u16) -> usize {
        self.records
            .range(offset..)
            .take_while(|(o, r)| r.state == RecordState::Available && r.deliveries == deliveries && **o >= offset)
            .count()
    }

    /// Applies `member`'s acknowledgement of `first..=last`: one type for the whole
    /// range, or one per offset. Checked whole before anything changes, as Kafka does a
    /// batch.
    ///
    /// # Errors
    /// INVALID_REQUEST for a malformed range; INVALID_RECORD_STATE when an offset is
    /// not a record `member` holds (a gap may be acknowledged only as GAP).
    pub fn acknowledge(
        &mut self,
        member: &str,
        first: i64,
        last: i64,
        types: &[Acknowledge],
        now: Instant,
    ) -> Result<(), i16> {
        let count = last.checked_sub(first).map(|d| d + 1).filter(|n| *n > 0).ok_or(code::INVALID_REQUEST)?;
        if types.is_empty() || (types.len() != 1 && types.len() as i64 != count) {
            return Err(code::INVALID_REQUEST);
        }
        let kind = |offset: i64| if types.len() == 1 { types[0] } else { types[(offset - first) as usize] };
        if first < self.start || last >= self.end {
            return Err(code::INVALID_RECORD_STATE);
        }
        for offset in first..=last {
            let fine = match (self.records.get(&offset), kind(offset)) {
                (None, Acknowledge::Gap) => true,
                (None, _) => false,
                (Some(record), _) => record.held_by(member),
            };
            if !fine {
                return Err(code::INVALID_RECORD_STATE);
            }
        }
        let (limit, dead_letter) = (self.settings.delivery_limit, self.settings.dead_letter);
        let lock = self.settings.lock_duration;
        for offset in first..=last {
            let Some(record) = self.records.get_mut(&offset) else { continue };
            match kind(offset) {
                Acknowledge::Accept => settle(record, RecordState::Acknowledged),
                Acknowledge::Reject if dead_letter => archiving(record, DeadLetterCause::Rejected),
                Acknowledge::Reject | Acknowledge::Gap => settle(record, RecordState::Archived),
                Acknowledge::Release => release(record, limit, dead_letter),
                Acknowledge::Renew => record.expires = Some(now + lock),
            }
        }
        self.advance_start();
        Ok(())
    }

    /// Releases the records whose lock ran out by `now`; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let (limit, dead_letter) = (self.settings.delivery_limit, self.settings.dead_letter);
        let mut released = 0;
        for record in self.records.values_mut() {
            if record.state == RecordState::Acquired && record.expires.is_some_and(|at| at <= now) {
                release(record, limit, dead_letter);
                released += 1;
            }
        }
        self.advance_start();
        released
    }

    /// Releases every record `member` holds (it left the group, or its share session
    /// closed); returns how many.
    pub fn release_member(&mut self, member: &str) -> usize {
        let (limit, dead_letter) = (self.settings.delivery_limit, self.settings.dead_letter);
        let mut released = 0;
        for record in self.records.values_mut().filter(|r| r.held_by(member)) {
            release(record, limit, dead_letter);
            released += 1;
        }
        self.advance_start();
        released
    }

    /// The ARCHIVING records whose dead-letter write has not started, as ranges of one
    /// delivery count and cause; marked started.
    pub fn take_dead_letters(&mut self) -> Vec<DeadLetters> {
        let mut out: Vec<DeadLetters> = Vec::new();
        for (&offset, record) in self.records.iter_mut() {
            let Some((cause, false)) = record.dead_letter.filter(|_| record.state == RecordState::Archiving) else {
                continue;
            };
            record.dead_letter = Some((cause, true));
            match out.last_mut() {
                Some(l) if l.last + 1 == offset && l.deliveries == record.deliveries && l.cause == cause => {
                    l.last = offset
                }
                _ => out.push(DeadLetters { first: offset, last: offset, deliveries: record.deliveries, cause }),
            }
        }
        out
    }

    /// Whether any record is ARCHIVING (its dead-letter write not ended).
    pub fn archiving(&self) -> bool {
        self.records.values().any(|r| r.state == RecordState::Archiving)
    }

    /// The dead-letter write of `first..=last` ended (written or given up on): its
    /// ARCHIVING records are archived. Returns whether any was.
    pub fn archive_dead_letters(&mut self, first: i64, last: i64) -> bool {
        let mut changed = false;
        for record in self.records.range_mut(first..=last).map(|(_, r)| r) {
            if record.state == RecordState::Archiving {
                settle(record, RecordState::Archived);
                changed = true;
            }
        }
        self.advance_start();
        changed
    }

    /// The log's start moved to `log_start` (retention, DeleteRecords): records below
    /// it are gone, delivered or not.
    pub fn truncate_below(&mut self, log_start: i64) {
        if log_start <= self.start {
            return;
        }
        self.records = self.records.split_off(&log_start);
        self.start = log_start;
        self.end = self.end.max(log_start);
        self.advance_start();
    }

    /// What `__share_group_state` keeps of this share-partition (Kafka's
    /// ShareSnapshotValue): its start, and its window as batches of consecutive
    /// records with one state and delivery count. An acquired record is kept as
    /// available: locks do not outlive the leader that granted them, and its delivery
    /// counts. Gaps are kept as archived.
    pub fn state_batches(&self) -> (i64, Vec<StateBatch>) {
        let mut batches: Vec<StateBatch> = Vec::new();
        for offset in self.start..self.end {
            let (state, deliveries) = match self.records.get(&offset) {
                Some(r) if r.state == RecordState::Acquired => (RecordState::Available, r.deliveries),
                Some(r) => (r.state, r.deliveries),
                None => (RecordState::Archived, 0),
            };
            match batches.last_mut() {
                Some(b) if b.state == state && b.deliveries == deliveries && b.last + 1 == offset => b.last = offset,
                _ => batches.push(StateBatch { first: offset, last: offset, state, deliveries }),
            }
        }
        (self.start, batches)
    }

    /// A share-partition as `state_batches` left it (a new leader loading it). Batches
    /// below `start` are dropped; one that claims an acquired state is taken as
    /// available. State read from disk is not trusted to be small: offsets more than
    /// `RESTORED_WINDOW_MAX` past the start are left out, and are delivered as new
    /// records (again, at worst: never lost).
    pub fn restore(start: i64, batches: &[StateBatch], settings: ShareSettings) -> SharePartition {
        let mut sp = SharePartition::new(start, settings);
        let bound = start.saturating_add(RESTORED_WINDOW_MAX.max(settings.max_in_flight) as i64);
        for batch in batches {
            let state = match batch.state {
                RecordState::Acquired => RecordState::Available,
                other => other,
            };
            for offset in batch.first.max(start)..=batch.last.min(bound - 1) {
                // The cause of a dead letter is not persisted: Kafka tells it by the count.
                let cause = match batch.deliveries >= settings.delivery_limit {
                    true => DeadLetterCause::DeliveryLimit,
                    false => DeadLetterCause::Rejected,
                };
                let record = InFlight {
                    state,
                    deliveries: batch.deliveries,
                    member: None,
                    expires: None,
                    key: None,
                    dead_letter: (state == RecordState::Archiving).then_some((cause, false)),
                };
                sp.records.insert(offset, record);
                sp.end = sp.end.max(offset + 1);
            }
        }
        sp.advance_start();
        sp
    }

    /// Moves the start past the finished records and gaps at the front of the window.
    fn advance_start(&mut self) {
        while self.start < self.end {
            match self.records.get(&self.start) {
                Some(record) if !record.finished() => break,
                Some(_) => {
                    self.records.remove(&self.start);
                }
                None => {}
            }
            self.start += 1;
        }
    }
}

fn settle(record: &mut InFlight, state: RecordState) {
    record.state = state;
    record.member = None;
    record.expires = None;
    record.dead_letter = None;
}

fn archiving(record: &mut InFlight, cause: DeadLetterCause) {
    settle(record, RecordState::Archiving);
    record.dead_letter = Some((cause, false));
}

/// A record back from its member: available again, or archived at the delivery limit
/// (through ARCHIVING with a dead-letter topic).
fn release(record: &mut InFlight, limit: u16, dead_letter: bool) {
    match (record.deliveries >= limit, dead_letter) {
        (false, _) => settle(record, RecordState::Available),
        (true, true) => archiving(record, DeadLetterCause::DeliveryLimit),
        (true, false) => settle(record, RecordState::Archived),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(max_in_flight: usize, delivery_limit: u16) -> ShareSettings {
        ShareSettings {
            max_in_flight,
            delivery_limit,
            lock_duration: Duration::from_secs(30),
            key_ordered: false,
            renew_enabled: true,
            dead_letter: false,
        }
    }

    fn range(first: i64, last: i64, deliveries: u16) -> Acquired {
        Acquired { first, last, deliveries }
    }

    use Acknowledge::*;

    // Near the delivery limit (5: records delivered 3 times or more), records go out in
    // smaller acquisitions, as Kafka 4.4 hands them out: the run of records that came
    // back halved once per delivery past the threshold, and a record on its last
    // attempt alone. An acquisition cut short leaves the rest to be offered again.
    #[test]
    fn records_near_the_delivery_limit_go_out_in_smaller_acquisitions() {
        let now = Instant::now();
        let mut sp = SharePartition::new(0, settings(100, 5));
        for _ in 0..3 {
            let (got, complete) = sp.acquire_offered("m", (0..8).map(|o| (o, None)), 100, now);
            assert_eq!(got.iter().map(|a| a.last - a.first + 1).sum::<i64>(), 8);
            assert!(complete);
            sp.acknowledge("m", 0, 7, &[Release], now).unwrap();
        }
        let next = |sp: &mut SharePartition| {
            let from = sp.next_fetch_offset();
            sp.acquire_offered("n", (from..10).map(|o| (o, None)), 100, now)
        };
        assert_eq!(next(&mut sp), (vec![range(0, 3, 4)], false), "half the run of 8");
        sp.acknowledge("n", 0, 3, &[Release], now).unwrap();
        assert_eq!(next(&mut sp), (vec![range(0, 0, 5)], false), "its last attempt, alone");
        assert_eq!(next(&mut sp), (vec![range(1, 1, 5)], false));
        assert_eq!(next(&mut sp).0, vec![range(2, 2, 5)]);
        assert_eq!(next(&mut sp).0, vec![range(3, 3, 5)]);
        assert_eq!(next(&mut sp).0, vec![range(4, 5, 4)], "half the run of 4");
        assert_eq!(next(&mut sp).0, vec![range(6, 6, 4)]);
        assert_eq!(next(&mut sp).0, vec![range(7, 7, 4)]);
        assert_eq!(next(&mut sp), (vec![range(8, 9, 1)], true), "new records are not throttled");
    }

    // With a dead-letter topic, a rejected record and one released at the delivery
    // limit go ARCHIVING: not delivered again, not finished (the start waits for them),
    // handed to the dead-letter writer once, persisted as state 3 and handed again
    // after a restore (a new leader), then archived.
    #[test]
    fn dead_letters_are_archiving_until_written() {
        let now = Instant::now();
        let mut with_dlq = settings(100, 2);
        with_dlq.dead_letter = true;
        let mut sp = SharePartition::new(0, with_dlq);
        assert_eq!(sp.acquire("m", 0..4, 100, now), vec![range(0, 3, 1)]);
        sp.acknowledge("m", 0, 0, &[Reject], now).unwrap();
        sp.acknowledge("m", 1, 3, &[Release], now).unwrap();
        assert_eq!(sp.acquire("m", 1..4, 100, now), vec![range(1, 3, 2)]);
        sp.acknowledge("m", 1, 1, &[Accept], now).unwrap();
        assert_eq!(sp.release_member("m"), 2, "2 and 3 come back at the limit");
        assert_eq!(sp.state(2), Some((RecordState::Archiving, 2)));
        assert_eq!(sp.start_offset(), 0, "ARCHIVING records are not finished");
        assert!(sp.acquire("n", 0..4, 100, now).is_empty(), "nor delivered again");
        let letters = sp.take_dead_letters();
        let cause = |first, last, deliveries, cause| DeadLetters { first, last, deliveries, cause };
        assert_eq!(
            letters,
            vec![cause(0, 0, 1, DeadLetterCause::Rejected), cause(2, 3, 2, DeadLetterCause::DeliveryLimit)]
        );
        assert!(sp.take_dead_letters().is_empty(), "handed out once");
        let (start, batches) = sp.state_batches();
        assert_eq!(batches[0].state as i8, 3, "persisted as Kafka's ARCHIVING");
        let mut restored = SharePartition::restore(start, &batches, with_dlq);
        assert_eq!(restored.take_dead_letters(), letters, "a new leader writes them again");
        assert!(sp.archive_dead_letters(0, 0));
        assert_eq!(sp.start_offset(), 2);
        assert!(sp.archive_dead_letters(2, 3));
        assert_eq!(sp.start_offset(), 4);
        assert!(!sp.archive_dead_letters(2, 3));
        // Without a dead-letter topic the same records are archived at once.
        let mut plain = SharePartition::new(0, settings(100, 2));
        plain.acquire("m", 0..1, 100, now);
        plain.acknowledge("m", 0, 0, &[Reject], now).unwrap();
        assert_eq!(plain.start_offset(), 1);
        assert!(plain.take_dead_letters().is_empty());
    }

    // Key-ordered delivery: while a member holds a key's record, no other member gets
    // that key's later records, and they come in offset order once it is finished;
    // other keys go on meanwhile. A released record goes out again before its key's
    // later records.
    #[test]
    fn a_key_goes_to_one_member_at_a_time_in_order() {
        let now = Instant::now();
        let mut ordered = settings(100, 5);
        ordered.key_ordered = true;
        let mut sp = SharePartition::new(0, ordered);
        // Offsets 0..6 with keys a b a b c a.
        let keys = [1u64, 2, 1, 2, 3, 1];
        let read = |from: i64| (from..6).map(|o| (o, Some(keys[o as usize])));
        assert_eq!(sp.acquire_keyed("m", read(0), 1, now), vec![range(0, 0, 1)]);
        // n gets b and nothing of a (held by m); with two members acquiring, it takes
        // half the keys offered (b and c), so c is left for another.
        let got = sp.acquire_keyed("n", read(sp.next_fetch_offset()), 100, now);
        assert_eq!(got, vec![range(1, 1, 1), range(3, 3, 1)]);
        assert_eq!(sp.acquire_keyed("m", read(sp.next_fetch_offset()), 100, now), vec![range(4, 4, 1)]);
        sp.acknowledge("m", 4, 4, &[Accept], now).unwrap();
        assert_eq!(sp.state(2), Some((RecordState::Available, 0)), "a's next record waits");
        // m releases a: a's records go out again in order, the released one first.
        sp.acknowledge("m", 0, 0, &[Release], now).unwrap();
        let got = sp.acquire_keyed("n", read(sp.next_fetch_offset()), 100, now);
        assert_eq!(got, vec![range(0, 0, 2), range(2, 2, 1), range(5, 5, 1)]);
        // 500 random schedules: no key is ever held by two members.
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for _ in 0..500 {
            let mut sp = SharePartition::new(0, ordered);
            let keys: Vec<u64> = (0..40).map(|_| next(5)).collect();
            for _ in 0..30 {
                let member = ["x", "y", "z"][next(3) as usize];
                let from = sp.next_fetch_offset();
                sp.acquire_keyed(member, (from..40).map(|o| (o, Some(keys[o as usize]))), 1 + next(4) as usize, now);
                let held: Vec<(i64, String)> = (0..40)
                    .filter_map(|o| {
                        sp.records
                            .get(&o)
                            .filter(|r| r.state == RecordState::Acquired)
                            .map(|r| (o, r.member.as_deref().unwrap().to_string()))
                    })
                    .collect();
                for (o, m) in &held {
                    for (p, n) in &held {
                        if keys[*o as usize] == keys[*p as usize] {
                            assert_eq!(m, n, "key {} held by two members", keys[*o as usize]);
                        }
                    }
                }
                if let Some((o, m)) = held.first() {
                    let ack = if next(2) == 0 { Accept } else { Release };
                    sp.acknowledge(m, *o, *o, &[ack], now).unwrap();
                }
            }
        }
    }

    #[test]
    fn records_are_acquired_once_and_the_start_follows_what_is_finished() {
        let now = Instant::now();
        let mut sp = SharePartition::new(0, settings(100, 5));
        assert_eq!(sp.acquire("a", 0..5, 3, now), vec![range(0, 2, 1)]);
        assert_eq!(sp.next_fetch_offset(), 3);
        // What a first member holds is not acquired again by another.
        assert_eq!(sp.acquire("b", 0..10, 100, now), vec![range(3, 9, 1)]);
        assert_eq!((sp.start_offset(), sp.end_offset(), sp.acquired()), (0, 10, 10));
        // Acknowledged out of order: the start waits for the front.
        sp.acknowledge("b", 3, 9, &[Accept], now).unwrap();
        assert_eq!(sp.start_offset(), 0);
        sp.acknowledge("a", 0, 2, &[Accept, Reject, Accept], now).unwrap();
        assert_eq!((sp.start_offset(), sp.acquired()), (10, 0));
        assert_eq!(sp.state(1), None, "finished records leave the window");
    }

    #[test]
    fn released_records_come_back_until_the_delivery_limit_archives_them() {
        let now = Instant::now();
        let mut sp = SharePartition::new(0, settings(100, 3));
        sp.acquire("a", 0..2, 10, now);
        sp.acknowledge("a", 0, 1, &[Release], now).unwrap();
        assert_eq!(sp.next_fetch_offset(), 0);
        assert_eq!(sp.acquire("b", 0..2, 10, now), vec![range(0, 1, 2)]);
        sp.acknowledge("b", 0, 1, &[Release], now).unwrap();
        // Each on its last attempt goes out alone.
        assert_eq!(sp.acquire("a", 0..2, 10, now), vec![range(0, 0, 3)]);
        assert_eq!(sp.acquire("a", 1..2, 10, now), vec![range(1, 1, 3)]);
        // The third delivery was the last: released again, the records are archived
        // and the start moves past them.
        sp.acknowledge("a", 0, 1, &[Release], now).unwrap();
        assert_eq!((sp.start_offset(), sp.next_fetch_offset()), (2, 2));
        assert!(sp.acquire("a", 0..2, 10, now).is_empty());
    }

    #[test]
    fn an_expired_lock_makes_records_available_and_a_renewal_keeps_them() {
        let now = Instant::now();
        let mut sp = SharePartition::new(0, settings(100, 5));
        sp.acquire("a", 0..4, 10, now);
        assert_eq!(sp.next_expiry(), Some(now + Duration::from_secs(30)));
        sp.acknowledge("a", 2, 3, &[Renew], now + Duration::from_secs(20)).unwrap();
        assert_eq!(sp.expire(now + Duration::from_secs(31)), 2);
        assert_eq!(sp.state(0), Some((RecordState::Available, 1)));
        assert_eq!(sp.state(2), Some((RecordState::Acquired, 1)));
        // The expired records are fetched again; the renewed ones are still held.
        assert_eq!(sp.next_fetch_offset(), 0);
        assert_eq!(sp.acquire("b", 0..4, 10, now + Duration::from_secs(31)), vec![range(0, 1, 2)]);
        // A member whose lock ran out can no longer acknowledge.
        assert_eq!(sp.acknowledge("a", 0, 0, &[Accept], now), Err(code::INVALID_RECORD_STATE));
        // The renewed locks (from 20 s) run out at 50 s; b's (from 31 s) at 61 s.
        assert_eq!(sp.expire(now + Duration::from_secs(51)), 2);
    }

    #[test]
    fn an_acknowledgement_is_checked_whole_before_anything_changes() {
        let now = Instant::now();
        let mut sp = SharePartition::new(0, settings(100, 5));
        sp.acquire("a", 0..3, 10, now);
        sp.acquire("b", 3..5, 10, now);
        // 0..=4 spans b's records: refused, and a's 0..=2 stay acquired.
        assert_eq!(sp.acknowledge("a", 0, 4, &[Accept], now), Err(code::INVALID_RECORD_STATE));
        assert_eq!(sp.state(0), Some((RecordState::Acquired, 1)));
        assert_eq!(sp.acknowledge("a", 0, 5, &[Accept], now), Err(code::INVALID_RECORD_STATE), "past the end");
        assert_eq!(sp.acknowledge("a", 2, 1, &[Accept], now), Err(code::INVALID_REQUEST));
        assert_eq!(sp.acknowledge("a", 0, 2, &[Accept, Accept], now), Err(code::INVALID_REQUEST));
        sp.acknowledge("a", 0, 2, &[Accept], now).unwrap();
        assert_eq!(sp.acknowledge("a", 0, 0, &[Accept], now), Err(code::INVALID_RECORD_STATE), "twice");
    }

    #[test]
    fn the_window_bounds_new_records_but_not_redeliveries() {
        let now = Instant::now();
        let mut sp = SharePartition::new(100, settings(4, 5));
        assert_eq!(sp.acquire("a", 100..110, 100, now), vec![range(100, 103, 1)]);
        assert!(sp.acquire("b", 104..110, 100, now).is_empty());
        sp.acknowledge("a", 100, 101, &[Accept, Release], now).unwrap();
        // One offset finished at the front: one new record fits, and the released
        // one is delivered again.
        assert_eq!(sp.acquire("b", 101..110, 100, now), vec![range(101, 101, 2), range(104, 104, 1)]);
        assert_eq!((sp.start_offset(), sp.end_offset()), (101, 105));
    }

    #[test]
    fn gaps_are_never_delivered_and_finish_as_gaps() {
        let now = Instant::now();
        let mut sp = SharePartition::new(0, settings(100, 5));
        // Compaction left records at 0, 3 and 4 only.
        assert_eq!(sp.acquire("a", [0, 3, 4], 10, now), vec![range(0, 0, 1), range(3, 4, 1)]);
        assert_eq!(sp.acknowledge("a", 1, 1, &[Accept], now), Err(code::INVALID_RECORD_STATE));
        sp.acknowledge("a", 0, 4, &[Accept, Gap, Gap, Accept, Accept], now).unwrap();
        assert_eq!(sp.start_offset(), 5);
    }

    #[test]
    fn a_member_that_leaves_gives_its_records_back() {
        let now = Instant::now();
        let mut sp = SharePartition::new(0, settings(100, 1));
        sp.acquire("a", 0..2, 10, now);
        sp.acquire("b", 2..4, 10, now);
        // A delivery limit of one: what a leaving member held is archived.
        assert_eq!(sp.release_member("a"), 2);
        assert_eq!((sp.start_offset(), sp.acquired()), (2, 2));
        assert_eq!(sp.release_member("nobody"), 0);
    }

    #[test]
    fn the_persisted_state_restores_the_window_without_its_locks() {
        let now = Instant::now();
        let mut sp = SharePartition::new(10, settings(100, 3));
        sp.acquire("a", [10, 11, 12, 14, 15, 16], 10, now);
        sp.acknowledge("a", 11, 11, &[Accept], now).unwrap();
        sp.acknowledge("a", 12, 13, &[Release, Gap], now).unwrap();
        sp.acknowledge("a", 15, 15, &[Reject], now).unwrap();
        let (start, batches) = sp.state_batches();
        let batch = |first, last, state, deliveries| StateBatch { first, last, state, deliveries };
        assert_eq!(start, 10);
        assert_eq!(
            batches,
            vec![
                batch(10, 10, RecordState::Available, 1),
                batch(11, 11, RecordState::Acknowledged, 1),
                batch(12, 12, RecordState::Available, 1),
                batch(13, 13, RecordState::Archived, 0),
                batch(14, 14, RecordState::Available, 1),
                batch(15, 15, RecordState::Archived, 1),
                batch(16, 16, RecordState::Available, 1),
            ]
        );
        // A new leader: what was acquired is available, with its delivery counted.
        let mut restored = SharePartition::restore(start, &batches, sp.settings());
        assert_eq!((restored.start_offset(), restored.end_offset(), restored.acquired()), (10, 17, 0));
        assert_eq!(restored.state_batches(), (start, batches.clone()));
        assert_eq!(
            restored.acquire("b", 10..17, 10, now),
            vec![range(10, 10, 2), range(12, 12, 2), range(14, 14, 2), range(16, 16, 2)]
        );
        restored.acknowledge("b", 10, 10, &[Accept], now).unwrap();
        restored.acknowledge("b", 12, 12, &[Accept], now).unwrap();
        assert_eq!(restored.start_offset(), 14);
        // Batches below the start are dropped.
        let moved = SharePartition::restore(13, &batches, sp.settings());
        assert_eq!((moved.start_offset(), moved.next_fetch_offset()), (14, 14));
        // A damaged batch claiming the whole offset range takes a bounded window.
        let huge = [batch(0, i64::MAX, RecordState::Available, 1)];
        let bounded = SharePartition::restore(0, &huge, sp.settings());
        assert_eq!(bounded.end_offset(), RESTORED_WINDOW_MAX as i64);
    }

    #[test]
    fn records_removed_from_the_log_leave_the_window() {
        let now = Instant::now();
        let mut sp = SharePartition::new(0, settings(100, 5));
        sp.acquire("a", 0..6, 10, now);
        sp.truncate_below(4);
        assert_eq!((sp.start_offset(), sp.end_offset(), sp.acquired()), (4, 6, 2));
        sp.truncate_below(10);
        assert_eq!((sp.start_offset(), sp.end_offset(), sp.next_fetch_offset()), (10, 10, 10));
        assert_eq!(Acknowledge::from_code(4), Some(Renew));
        assert_eq!(Acknowledge::from_code(5), None);
    }

    /// Random acquisitions, acknowledgements of every kind, expiries and departures
    /// over 200 records, 500 seeds: a delivery count never goes backwards, an accepted
    /// or archived record is never acquired again, nothing past the delivery limit is
    /// delivered, the start never moves back, and in the end every record is accepted
    /// or archived exactly once (what a checker of at-least-once delivery asks).
    #[test]
    fn random_schedules_keep_at_least_once_delivery() {
        const RECORDS: i64 = 200;
        for seed in 0..500u64 {
            let mut rng = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let mut next = |n: u64| {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (rng >> 33) % n
            };
            let start = Instant::now();
            let mut now = start;
            let limit = 1 + next(4) as u16;
            let mut sp = SharePartition::new(0, settings(1 + next(60) as usize, limit));
            let members = ["a", "b", "c"];
            let mut held: Vec<(String, i64)> = Vec::new();
            let mut deliveries = vec![0u16; RECORDS as usize];
            let mut finished = vec![0u32; RECORDS as usize];
            let mut last_start = 0;
            for _ in 0..2_000 {
                match next(10) {
                    0..=3 => {
                        let member = members[next(3) as usize];
                        let from = sp.next_fetch_offset();
                        let got = sp.acquire(member, from..RECORDS, 1 + next(20) as usize, now);
                        for range in got {
                            for offset in range.first..=range.last {
                                let i = offset as usize;
                                assert_eq!(finished[i], 0, "seed {seed}: {offset} acquired after it finished");
                                assert!(range.deliveries > deliveries[i], "seed {seed}: count went back");
                                assert!(range.deliveries <= limit, "seed {seed}: delivered past the limit");
                                deliveries[i] = range.deliveries;
                                held.push((member.to_string(), offset));
                            }
                        }
                    }
                    4..=7 if !held.is_empty() => {
                        let (member, offset) = held.swap_remove(next(held.len() as u64) as usize);
                        let kind = [Accept, Release, Reject, Renew][next(4) as usize];
                        // Acknowledging after the lock ran out or the member left is refused.
                        match sp.acknowledge(&member, offset, offset, &[kind], now) {
                            Ok(()) if matches!(kind, Accept | Reject) => finished[offset as usize] += 1,
                            Ok(()) if kind == Renew => held.push((member, offset)),
                            Ok(()) => {}
                            Err(e) => assert_eq!(e, code::INVALID_RECORD_STATE),
                        }
                    }
                    8 => {
                        now += Duration::from_secs(next(40));
                        sp.expire(now);
                    }
                    _ => {
                        sp.release_member(members[next(3) as usize]);
                    }
                }
                assert!(sp.start_offset() >= last_start, "seed {seed}: the start moved back");
                last_start = sp.start_offset();
            }
            // Drain: every record left is delivered until accepted or archived.
            for _ in 0..(RECORDS as usize * limit as usize + 10) {
                now += Duration::from_secs(60);
                sp.expire(now);
                let from = sp.next_fetch_offset();
                for range in sp.acquire("d", from..RECORDS, RECORDS as usize, now) {
                    for offset in range.first..=range.last {
                        assert_eq!(finished[offset as usize], 0, "seed {seed}: {offset} delivered after it finished");
                        sp.acknowledge("d", offset, offset, &[Accept], now).unwrap();
                        finished[offset as usize] += 1;
                    }
                }
            }
            assert_eq!(sp.start_offset(), RECORDS, "seed {seed}");
            // Records archived at the limit by an expiry or a release were finished by
            // the share-partition, not by a member: count them from the counts.
            for offset in 0..RECORDS as usize {
                let archived_at_limit = finished[offset] == 0 && deliveries[offset] >= limit;
                assert!(
                    finished[offset] == 1 || archived_at_limit,
                    "seed {seed}: {offset} finished {} times",
                    finished[offset]
                );
            }
        }
    }
}
