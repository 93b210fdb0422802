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

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::errors::code;

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

#[derive(Debug)]
struct Session {
    /// The epoch the next incremental request must carry.
    next_epoch: i32,
    /// In fetch order: partitions that returned data move to the back, so that a
    /// response budget reaches every partition in turn.
    partitions: Vec<SessionPartition>,
    last_used: Instant,
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
    /// recent use (the fetch is then answered without a session, as Kafka does).
    pub fn open(&mut self, partitions: Vec<SessionPartition>, now: Instant) -> Option<i32> {
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
        self.sessions.insert(id, Session { next_epoch: 1, partitions, last_used: now });
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
    /// forgotten ones. Returns the session's partitions, in fetch order.
    pub fn update(
        &mut self,
        id: i32,
        changed: Vec<SessionPartition>,
        forgotten: &[(TopicKey, i32)],
        now: Instant,
    ) -> Vec<SessionPartition> {
        let Some(session) = self.sessions.get_mut(&id) else { return Vec::new() };
        session.last_used = now;
        // The epoch moves when the request is taken, so a second request with the same
        // epoch is refused even while this one is still being served.
        session.next_epoch = if session.next_epoch == i32::MAX { 1 } else { session.next_epoch + 1 };
        // Indexed, not searched: a follower's session holds thousands of partitions.
        if !forgotten.is_empty() {
            let gone: std::collections::HashSet<(&TopicKey, i32)> = forgotten.iter().map(|(t, i)| (t, *i)).collect();
            session.partitions.retain(|p| !gone.contains(&(&p.topic, p.partition)));
        }
        if !changed.is_empty() {
            // The changed partitions are few and the session's many: the session is
            // walked once against an index of the changed, and what is left is new.
            let order: Vec<(TopicKey, i32)> = changed.iter().map(|p| (p.topic.clone(), p.partition)).collect();
            let mut at: HashMap<(TopicKey, i32), SessionPartition> =
                changed.into_iter().map(|p| ((p.topic.clone(), p.partition), p)).collect();
            for existing in &mut session.partitions {
                if at.is_empty() {
                    break;
                }
                if let Some(new) = at.remove(&(existing.topic.clone(), existing.partition)) {
                    existing.fetch_offset = new.fetch_offset;
                    existing.max_bytes = new.max_bytes;
                }
            }
            session.partitions.extend(order.into_iter().filter_map(|key| at.remove(&key)));
        }
        session.partitions.clone()
    }

    /// Records what session `id` told its client (the partitions, in the order fetched).
    pub fn served(&mut self, id: i32, sent: &[Sent]) {
        let Some(session) = self.sessions.get_mut(&id) else { return };
        // A fetch reads the session's partitions in the session's order, so what it
        // sent lines up with them, unless the session changed meanwhile: then each is
        // found by its key.
        let aligned = sent.len() == session.partitions.len()
            && sent.iter().zip(&session.partitions).all(|(s, p)| s.partition == p.partition && s.topic == p.topic);
        let positions: Vec<(usize, &Sent)> = if aligned {
            sent.iter().enumerate().collect()
        } else {
            let index: HashMap<(&TopicKey, i32), usize> =
                session.partitions.iter().enumerate().map(|(i, p)| ((&p.topic, p.partition), i)).collect();
            sent.iter().filter_map(|s| index.get(&(&s.topic, s.partition)).map(|&at| (at, s))).collect()
        };
        let mut moved = Vec::new();
        for (at, sent) in positions {
            let p = &mut session.partitions[at];
            p.high_watermark_sent = sent.high_watermark;
            p.log_start_offset_sent = sent.log_start_offset;
            if sent.had_records {
                moved.push(at);
            }
        }
        // Partitions that returned data go to the back, keeping their relative order
        // (in fetch order: `sent` follows the session's order).
        moved.sort_unstable();
        let mut back = Vec::with_capacity(moved.len());
        let mut moved = moved.into_iter().peekable();
        let mut at = 0;
        session.partitions.retain(|p| {
            let leaving = moved.peek() == Some(&at);
            if leaving {
                moved.next();
                back.push(p.clone());
            }
            at += 1;
            !leaving
        });
        session.partitions.extend(back);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(partition: i32, high_watermark: i64, log_start_offset: i64, had_records: bool) -> Sent {
        Sent { topic: TopicKey::Name("t".into()), partition, high_watermark, log_start_offset, had_records }
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

    // Opening, incremental updates, forgetting, epochs and their errors.
    #[test]
    fn session_lifecycle() {
        let now = Instant::now();
        let mut sessions = FetchSessions::new(2, 0);
        assert_eq!(sessions.begin(0, 0), Ok(Mode::Open));
        let id = sessions.open(vec![partition(0, 0), partition(1, 0), partition(2, 0)], now).unwrap();
        assert_eq!(sessions.begin(id, 2), Err(code::INVALID_FETCH_SESSION_EPOCH));
        assert_eq!(sessions.begin(id + 1, 1), Err(code::FETCH_SESSION_ID_NOT_FOUND));
        assert_eq!(sessions.begin(0, 1), Err(code::INVALID_FETCH_SESSION_EPOCH));
        assert_eq!(sessions.begin(id, 1), Ok(Mode::Incremental { id }));
        let all = sessions.update(id, vec![partition(1, 7), partition(3, 0)], &[(TopicKey::Name("t".into()), 0)], now);
        let offsets: Vec<(i32, i64)> = all.iter().map(|p| (p.partition, p.fetch_offset)).collect();
        assert_eq!(offsets, vec![(1, 7), (2, 0), (3, 0)]);
        // Partition 1 returned data: it moves to the back.
        sessions.served(id, &[sent(1, 9, 0, true), sent(2, 0, 0, false)]);
        assert_eq!(sessions.begin(id, 1), Err(code::INVALID_FETCH_SESSION_EPOCH), "epoch 1 was taken");
        assert_eq!(sessions.begin(id, 2), Ok(Mode::Incremental { id }));
        let order: Vec<i32> = sessions.update(id, vec![], &[], now).iter().map(|p| p.partition).collect();
        assert_eq!(order, vec![2, 3, 1]);
        // What a fetch sent lines up with the session: partition 3 had data.
        sessions.served(id, &[sent(2, 4, 0, false), sent(3, 5, 0, true), sent(1, 9, 0, false)]);
        assert_eq!(sessions.begin(id, 3), Ok(Mode::Incremental { id }));
        let all = sessions.update(id, vec![], &[], now);
        let seen: Vec<(i32, i64)> = all.iter().map(|p| (p.partition, p.high_watermark_sent)).collect();
        assert_eq!(seen, vec![(2, 4), (1, 9), (3, 5)]);
        // Epoch -1 closes it.
        assert_eq!(sessions.begin(id, -1), Ok(Mode::Sessionless));
        assert_eq!(sessions.begin(id, 4), Err(code::FETCH_SESSION_ID_NOT_FOUND));
    }

    // When every slot is taken by a session in recent use, no new session opens; an
    // idle one is evicted.
    #[test]
    fn slots_bound_the_cache() {
        let now = Instant::now();
        let mut sessions = FetchSessions::new(1, 3);
        let first = sessions.open(vec![partition(0, 0)], now).unwrap();
        assert_eq!(sessions.open(vec![partition(0, 0)], now + Duration::from_secs(1)), None);
        let second = sessions.open(vec![partition(0, 0)], now + EVICTABLE_AFTER + Duration::from_secs(1)).unwrap();
        assert_ne!(first, second);
        assert_eq!(sessions.len(), 1);
        assert_eq!(FetchSessions::new(0, 0).open(vec![], now), None);
    }
}
