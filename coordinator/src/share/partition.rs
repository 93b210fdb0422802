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

use skein_control::errors::code;

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
    /// Key-ordered groups: the members that fetched lately, with when, so that each
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

    /// `member` fetched this share-partition at `now`, whether or not there was
    /// anything to take: in a key-ordered group it counts among the members that share
    /// the keys for a lock duration. (A member waiting for records when they arrive
    /// must not leave them all to whichever member fetches first.)
    pub fn fetched_by(&mut self, member: &str, now: Instant) {
        if !self.settings.key_ordered {
            return;
        }
        match self.members.get_mut(member) {
            Some(seen) => *seen = now,
            None => {
                self.members.insert(Rc::from(member), now);
            }
        }
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
    /// keys over the members that fetched within the last lock duration.
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
#[path = "partition_tests.rs"]
mod tests;
