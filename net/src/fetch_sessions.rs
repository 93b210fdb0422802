//! Fetch sessions (KIP-227): a consumer of many partitions names them once, then sends
//! only what changed (new fetch offsets, partitions added or forgotten) and gets back
//! only partitions with something new (records, a moved high watermark or log start,
//! an error).
//!
//! Each shard keeps the sessions of the connections it serves: `FetchSessions`, at most
//! `max.incremental.fetch.session.cache.slots` over the node (split over the shards).
//! A client that reconnects to another shard gets FETCH_SESSION_ID_NOT_FOUND and starts
//! a new session with a full fetch, which every KIP-227 client does on that error.
//!
//! Epochs: 0 opens a session (a full fetch), -1 closes one (a sessionless full fetch),
//! and an incremental fetch must carry the epoch after the last one served, else
//! INVALID_FETCH_SESSION_EPOCH.
//!
//! A consumer's session reads only what may have changed. Each read brings back its
//! log's change stamp (`skein_engine::stamp`); a partition whose read found nothing
//! new is clean at that stamp, and the session's signal watches the stamp. An
//! incremental fetch reads the partitions the request changed, those not clean, and
//! those whose stamps moved since, so a fetch of 10,000 partitions of which a few
//! changed reads those few. Everything is read again when the metadata image changed
//! (a topic, an ACL), as Kafka checks each partition at every fetch. A follower's
//! session reads every partition at every fetch: its fetch position is the leader's
//! record of it (the ISR).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use skein_control::errors::code;
use skein_engine::{Signal, Stamped};

/// A session not used for this long may be evicted to make room for a new one
/// (Kafka's `min.incremental.fetch.session.eviction.ms`).
const EVICTABLE_AFTER: Duration = Duration::from_secs(120);

/// How a request names a topic: by name before Fetch v13, by id from v13.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TopicKey {
    Name(std::rc::Rc<str>),
    Id(uuid::Uuid),
}

/// One partition of a session, as the client last described it, and what the client
/// was last told about it.
#[derive(Debug, Clone)]
pub struct SessionPartition {
    pub topic: TopicKey,
    pub partition: i32,
    pub fetch_offset: i64,
    pub max_bytes: i32,
    /// The high watermark and log start offset last sent; -1 before any.
    pub high_watermark_sent: i64,
    pub log_start_offset_sent: i64,
}

/// A session's partition and what its last read found.
#[derive(Debug)]
struct Entry {
    partition: SessionPartition,
    /// Its place in fetch order: a partition that returned data takes the next one,
    /// going behind the others, so that a response budget reaches every partition in
    /// turn.
    order: u64,
    /// The log's stamp at the last read; `None` before one, or when the read had none
    /// (an error, a consumer sent elsewhere).
    read: Option<Stamped>,
    /// The last read found nothing new, and the client's offset has not changed since.
    clean: bool,
}

#[derive(Debug)]
struct Session {
    /// The epoch the next incremental request must carry.
    next_epoch: i32,
    entries: Vec<Entry>,
    /// Where each partition stands in `entries`.
    index: HashMap<(TopicKey, i32), usize>,
    next_order: u64,
    last_used: Instant,
    /// A consumer's session reads only what may have changed, and its long poll
    /// waits on `signal`; a follower's reads everything.
    watching: bool,
    signal: Arc<Signal>,
    /// The metadata image the session last read every partition under.
    image_version: u64,
}

impl Session {
    fn new(partitions: Vec<SessionPartition>, now: Instant, image_version: Option<u64>) -> Session {
        let mut session = Session {
            next_epoch: 1,
            entries: Vec::with_capacity(partitions.len()),
            index: HashMap::with_capacity(partitions.len()),
            next_order: 0,
            last_used: now,
            watching: image_version.is_some(),
            signal: Signal::new(),
            image_version: image_version.unwrap_or(0),
        };
        session.set(partitions);
        session
    }

    /// Adds `partitions`, or takes their new offsets and maxima where present.
    fn set(&mut self, partitions: Vec<SessionPartition>) {
        for p in partitions {
            match self.index.get(&(p.topic.clone(), p.partition)) {
                Some(&at) => {
                    let entry = &mut self.entries[at];
                    entry.partition.fetch_offset = p.fetch_offset;
                    entry.partition.max_bytes = p.max_bytes;
                    entry.clean = false;
                }
                None => {
                    self.index.insert((p.topic.clone(), p.partition), self.entries.len());
                    let order = self.take_order();
                    self.entries.push(Entry { partition: p, order, read: None, clean: false });
                }
            }
        }
    }

    fn forget(&mut self, topic: &TopicKey, partition: i32) {
        let Some(at) = self.index.remove(&(topic.clone(), partition)) else { return };
        self.entries.swap_remove(at);
        if let Some(moved) = self.entries.get(at) {
            self.index.insert((moved.partition.topic.clone(), moved.partition.partition), at);
        }
    }

    fn take_order(&mut self) -> u64 {
        self.next_order += 1;
        self.next_order
    }

    /// The partitions `pick` selects, in fetch order.
    fn in_order(&self, pick: impl Fn(&Entry) -> bool) -> Vec<SessionPartition> {
        let mut picked: Vec<&Entry> = self.entries.iter().filter(|e| pick(e)).collect();
        picked.sort_unstable_by_key(|e| e.order);
        picked.into_iter().map(|e| e.partition.clone()).collect()
    }
}

/// What the request asks of the session cache.
#[derive(Debug, PartialEq, Eq)]
pub enum Mode {
    /// A full fetch without a session (epoch -1, or a client before v7).
    Sessionless,
    /// A full fetch that opens a session (epoch 0).
    Open,
    /// An incremental fetch in session `id`.
    Incremental { id: i32 },
}

/// What a fetch told its client of one partition of its session.
#[derive(Debug, Clone)]
pub struct Sent {
    pub topic: TopicKey,
    pub partition: i32,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// Whether records went out (the partition then moves to the session's back).
    pub had_records: bool,
    /// The log's stamp as the read found it.
    pub read: Option<Stamped>,
    /// The read found nothing new: none of its records are visible past the offset.
    pub clean: bool,
}

/// The sessions of one shard.
#[derive(Debug)]
pub struct FetchSessions {
    slots: usize,
    next_id: i32,
    sessions: HashMap<i32, Session>,
}

impl FetchSessions {
    pub fn new(slots: usize, shard: usize) -> FetchSessions {
        // Ids differ between shards, so a session id is never valid on two shards.
        let seed = (uuid::Uuid::new_v4().as_u128() as i32 & 0x7fff_0000) | ((shard as i32 & 0xff) << 8);
        FetchSessions { slots, next_id: seed.max(1), sessions: HashMap::new() }
    }

    /// Sessions open now.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Decides what a request with `session_id` and `epoch` does; closes the session it
    /// replaces or ends.
    ///
    /// # Errors
    /// FETCH_SESSION_ID_NOT_FOUND or INVALID_FETCH_SESSION_EPOCH.
    pub fn begin(&mut self, session_id: i32, epoch: i32) -> Result<Mode, i16> {
        match epoch {
            -1 => {
                self.sessions.remove(&session_id);
                Ok(Mode::Sessionless)
            }
            0 => {
                self.sessions.remove(&session_id);
                Ok(Mode::Open)
            }
            _ if session_id == 0 => Err(code::INVALID_FETCH_SESSION_EPOCH),
            _ => match self.sessions.get(&session_id) {
                None => Err(code::FETCH_SESSION_ID_NOT_FOUND),
                Some(s) if s.next_epoch != epoch => Err(code::INVALID_FETCH_SESSION_EPOCH),
                Some(_) => Ok(Mode::Incremental { id: session_id }),
            },
        }
    }

    /// Opens a session over `partitions`; `None` when every slot holds a session in
    /// recent use (the fetch is then answered without a session, as Kafka does). A
    /// consumer's session is opened under `image_version`, the metadata image its
    /// first fetch reads by; a follower's with `None`.
    pub fn open(&mut self, partitions: Vec<SessionPartition>, now: Instant, image_version: Option<u64>) -> Option<i32> {
        if self.slots == 0 {
            return None;
        }
        if self.sessions.len() >= self.slots {
            // Evict the least recently used session, if it has been idle long enough.
            let (&oldest, session) = self.sessions.iter().min_by_key(|(_, s)| s.last_used)?;
            if now.duration_since(session.last_used) < EVICTABLE_AFTER {
                return None;
            }
            self.sessions.remove(&oldest);
        }
        let id = self.allocate_id();
        self.sessions.insert(id, Session::new(partitions, now, image_version));
        Some(id)
    }

    fn allocate_id(&mut self) -> i32 {
        loop {
            self.next_id = self.next_id.checked_add(1).filter(|i| *i > 0).unwrap_or(1);
            if !self.sessions.contains_key(&self.next_id) {
                return self.next_id;
            }
        }
    }

    /// Applies an incremental request to session `id`: new or changed partitions, and
    /// forgotten ones. Returns the partitions to read, in fetch order: every one, or
    /// for a consumer's session under the same metadata image (`image_version`) as
    /// its last full read, those the request changed, those not clean and those
    /// whose stamps moved.
    pub fn update(
        &mut self,
        id: i32,
        changed: Vec<SessionPartition>,
        forgotten: &[(TopicKey, i32)],
        now: Instant,
        image_version: u64,
    ) -> Vec<SessionPartition> {
        let Some(session) = self.sessions.get_mut(&id) else { return Vec::new() };
        session.last_used = now;
        // The epoch moves when the request is taken, so a second request with the same
        // epoch is refused even while this one is still being served.
        session.next_epoch = if session.next_epoch == i32::MAX { 1 } else { session.next_epoch + 1 };
        for (topic, partition) in forgotten {
            session.forget(topic, *partition);
        }
        session.set(changed);
        if !session.watching || session.image_version != image_version {
            session.image_version = image_version;
            return session.in_order(|_| true);
        }
        // A stamp that moves after this look fires the signal.
        session.signal.reset();
        session.in_order(|e| !e.clean || e.read.as_ref().is_none_or(Stamped::moved))
    }

    /// The partitions of consumer session `id` whose stamps moved since they were
    /// read, in fetch order (a long poll's next read); resets its signal first.
    pub fn moved(&mut self, id: i32) -> Vec<SessionPartition> {
        let Some(session) = self.sessions.get_mut(&id).filter(|s| s.watching) else { return Vec::new() };
        session.signal.reset();
        session.in_order(|e| e.read.as_ref().is_some_and(Stamped::moved))
    }

    /// The signal consumer session `id`'s stamps fire.
    pub fn signal(&self, id: i32) -> Option<Arc<Signal>> {
        self.sessions.get(&id).filter(|s| s.watching).map(|s| Arc::clone(&s.signal))
    }

    /// Records what session `id` told its client and what each read found.
    pub fn served(&mut self, id: i32, sent: &[Sent]) {
        let Some(session) = self.sessions.get_mut(&id) else { return };
        for sent in sent {
            // A partition forgotten meanwhile (a later request of the same session) is
            // no longer the session's.
            let Some(&at) = session.index.get(&(sent.topic.clone(), sent.partition)) else { continue };
            let order = sent.had_records.then(|| session.take_order());
            let entry = &mut session.entries[at];
            entry.partition.high_watermark_sent = sent.high_watermark;
            entry.partition.log_start_offset_sent = sent.log_start_offset;
            // Partitions that returned data go to the back, keeping their relative
            // order (`sent` is in fetch order).
            if let Some(order) = order {
                entry.order = order;
            }
            entry.clean = sent.clean && sent.read.is_some();
            if session.watching {
                if let Some(read) = &sent.read {
                    let watched = entry.read.as_ref().is_some_and(|r| Arc::ptr_eq(&r.stamp, &read.stamp));
                    if !watched {
                        read.stamp.watch(&session.signal);
                    }
                }
            }
            entry.read = sent.read.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use skein_engine::Stamp;

    use super::*;

    fn sent(partition: i32, high_watermark: i64, log_start_offset: i64, had_records: bool) -> Sent {
        Sent {
            topic: TopicKey::Name("t".into()),
            partition,
            high_watermark,
            log_start_offset,
            had_records,
            read: None,
            clean: false,
        }
    }

    fn partition(p: i32, offset: i64) -> SessionPartition {
        SessionPartition {
            topic: TopicKey::Name("t".into()),
            partition: p,
            fetch_offset: offset,
            max_bytes: 1 << 20,
            high_watermark_sent: -1,
            log_start_offset_sent: -1,
        }
    }

    fn numbers(partitions: &[SessionPartition]) -> Vec<i32> {
        partitions.iter().map(|p| p.partition).collect()
    }

    // Opening, incremental updates, forgetting, epochs and their errors.
    #[test]
    fn session_lifecycle() {
        let now = Instant::now();
        let mut sessions = FetchSessions::new(2, 0);
        assert_eq!(sessions.begin(0, 0), Ok(Mode::Open));
        let id = sessions.open(vec![partition(0, 0), partition(1, 0), partition(2, 0)], now, None).unwrap();
        assert_eq!(sessions.begin(id, 2), Err(code::INVALID_FETCH_SESSION_EPOCH));
        assert_eq!(sessions.begin(id + 1, 1), Err(code::FETCH_SESSION_ID_NOT_FOUND));
        assert_eq!(sessions.begin(0, 1), Err(code::INVALID_FETCH_SESSION_EPOCH));
        assert_eq!(sessions.begin(id, 1), Ok(Mode::Incremental { id }));
        let all =
            sessions.update(id, vec![partition(1, 7), partition(3, 0)], &[(TopicKey::Name("t".into()), 0)], now, 0);
        let offsets: Vec<(i32, i64)> = all.iter().map(|p| (p.partition, p.fetch_offset)).collect();
        assert_eq!(offsets, vec![(1, 7), (2, 0), (3, 0)]);
        // Partition 1 returned data: it moves to the back.
        sessions.served(id, &[sent(1, 9, 0, true), sent(2, 0, 0, false)]);
        assert_eq!(sessions.begin(id, 1), Err(code::INVALID_FETCH_SESSION_EPOCH), "epoch 1 was taken");
        assert_eq!(sessions.begin(id, 2), Ok(Mode::Incremental { id }));
        assert_eq!(numbers(&sessions.update(id, vec![], &[], now, 0)), vec![2, 3, 1]);
        // Partition 3 had data.
        sessions.served(id, &[sent(2, 4, 0, false), sent(3, 5, 0, true), sent(1, 9, 0, false)]);
        assert_eq!(sessions.begin(id, 3), Ok(Mode::Incremental { id }));
        let all = sessions.update(id, vec![], &[], now, 0);
        let seen: Vec<(i32, i64)> = all.iter().map(|p| (p.partition, p.high_watermark_sent)).collect();
        assert_eq!(seen, vec![(2, 4), (1, 9), (3, 5)]);
        // Epoch -1 closes it.
        assert_eq!(sessions.begin(id, -1), Ok(Mode::Sessionless));
        assert_eq!(sessions.begin(id, 4), Err(code::FETCH_SESSION_ID_NOT_FOUND));
    }

    // A consumer's session reads what the request changed, what is not clean and
    // what moved; everything again under a new metadata image. Its signal fires when
    // a watched stamp moves.
    #[test]
    fn a_consumers_session_reads_what_changed() {
        let now = Instant::now();
        let mut sessions = FetchSessions::new(1, 0);
        let stamps: Vec<Arc<Stamp>> = (0..4).map(|_| Stamp::new()).collect();
        let id = sessions.open((0..4).map(|p| partition(p, 0)).collect(), now, Some(7)).unwrap();
        let clean =
            |p: i32| Sent { read: Some(Stamped::now(&stamps[p as usize])), clean: true, ..sent(p, 0, 0, false) };
        // Partition 3's read returned records, so it is not clean.
        let records = Sent { read: Some(Stamped::now(&stamps[3])), ..sent(3, 5, 0, true) };
        sessions.served(id, &[clean(0), clean(1), clean(2), records]);
        assert_eq!(numbers(&sessions.update(id, vec![], &[], now, 7)), vec![3], "only what is not clean");
        // The client moved partition 3 on; partition 1's log moved.
        sessions.served(id, &[clean(3)]);
        let signal = sessions.signal(id).unwrap();
        assert_eq!(numbers(&sessions.update(id, vec![partition(2, 0)], &[], now, 7)), vec![2]);
        stamps[1].bump();
        futures_lite::future::block_on(signal.fired());
        assert_eq!(numbers(&sessions.moved(id)), vec![1], "a long poll reads what moved");
        sessions.served(id, &[clean(1), clean(2)]);
        assert_eq!(numbers(&sessions.update(id, vec![], &[], now, 7)), Vec::<i32>::new());
        // A new metadata image: everything is read again (an ACL may have changed).
        assert_eq!(numbers(&sessions.update(id, vec![], &[], now, 8)), vec![0, 1, 2, 3]);
        // Forgotten partitions are no longer watched or read.
        sessions.update(id, vec![], &[(TopicKey::Name("t".into()), 0)], now, 8);
        stamps[0].bump();
        assert_eq!(numbers(&sessions.moved(id)), Vec::<i32>::new());
        assert_eq!(stamps[2].watchers(), 1);
        sessions.begin(id, -1).unwrap();
        drop(signal);
        assert_eq!(stamps[2].watchers(), 0, "a closed session watches nothing");
    }

    // When every slot is taken by a session in recent use, no new session opens; an
    // idle one is evicted.
    #[test]
    fn slots_bound_the_cache() {
        let now = Instant::now();
        let mut sessions = FetchSessions::new(1, 3);
        let first = sessions.open(vec![partition(0, 0)], now, None).unwrap();
        assert_eq!(sessions.open(vec![partition(0, 0)], now + Duration::from_secs(1), None), None);
        let second =
            sessions.open(vec![partition(0, 0)], now + EVICTABLE_AFTER + Duration::from_secs(1), None).unwrap();
        assert_ne!(first, second);
        assert_eq!(sessions.len(), 1);
        assert_eq!(FetchSessions::new(0, 0).open(vec![], now, None), None);
    }
}
