//! Share sessions (KIP-932) of a shard's connections: which partitions a member's
//! ShareFetch covers, and the epochs that order its requests, keyed by (group,
//! member) as Kafka keys them. Epoch 0 opens a session (replacing one of the same
//! key), -1 closes it (and what the member holds on its partitions is released),
//! any other must be the session's next epoch. A session closes too when the
//! connection that opened it does.

use std::collections::{BTreeSet, HashMap};

use skein_control::errors::code;

/// A partition of a session: topic id and partition.
pub type SessionPartition = (uuid::Uuid, i32);

/// Kafka's `group.share.max.share.sessions`, split over the node's shards.
pub const SESSIONS_PER_NODE_MAX: usize = 2000;

struct Session {
    /// The epoch the next request must carry.
    epoch: i32,
    partitions: BTreeSet<SessionPartition>,
    /// The connection that opened it.
    connection: u64,
}

/// A closed session: the member and the partitions it may hold records of.
#[derive(Debug, Clone, PartialEq)]
pub struct Closed {
    pub group: String,
    pub member: String,
    pub partitions: Vec<SessionPartition>,
}

/// What a ShareFetch's session step decided.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Fetch these partitions (the whole session); `opened`: a new session.
    Fetch { partitions: Vec<SessionPartition>, opened: bool },
    /// The session closed: apply the acknowledgements, then release what it held.
    Close(Closed),
}

pub struct ShareSessions {
    sessions: HashMap<(String, String), Session>,
    limit: usize,
}

impl ShareSessions {
    pub fn new(limit: usize) -> ShareSessions {
        ShareSessions { sessions: HashMap::new(), limit: limit.max(1) }
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// ShareFetch's step: opens, continues or closes the session of (`group`,
    /// `member`) at `epoch`, adding `added` and removing `forgotten`.
    ///
    /// # Errors
    /// SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH or
    /// SHARE_SESSION_LIMIT_REACHED, as Kafka answers them.
    pub fn fetch(
        &mut self,
        group: &str,
        member: &str,
        epoch: i32,
        added: &[SessionPartition],
        forgotten: &[SessionPartition],
        connection: u64,
    ) -> Result<Step, i16> {
        let key = (group.to_owned(), member.to_owned());
        match epoch {
            0 => {
                if !self.sessions.contains_key(&key) && self.sessions.len() >= self.limit {
                    return Err(code::SHARE_SESSION_LIMIT_REACHED);
                }
                let partitions: BTreeSet<SessionPartition> = added.iter().copied().collect();
                let listed = partitions.iter().copied().collect();
                self.sessions.insert(key, Session { epoch: 1, partitions, connection });
                Ok(Step::Fetch { partitions: listed, opened: true })
            }
            -1 => self.close(key).map(Step::Close),
            epoch => {
                let session = self.sessions.get_mut(&key).ok_or(code::SHARE_SESSION_NOT_FOUND)?;
                if session.epoch != epoch {
                    return Err(code::INVALID_SHARE_SESSION_EPOCH);
                }
                session.partitions.extend(added.iter().copied());
                for p in forgotten {
                    session.partitions.remove(p);
                }
                session.epoch = next_epoch(epoch);
                Ok(Step::Fetch { partitions: session.partitions.iter().copied().collect(), opened: false })
            }
        }
    }

    /// ShareAcknowledge's step: `None` continues the session, `Some` closed it.
    ///
    /// # Errors
    /// INVALID_SHARE_SESSION_EPOCH for epoch 0 (an acknowledgement opens no session)
    /// or the wrong epoch; SHARE_SESSION_NOT_FOUND.
    pub fn acknowledge(&mut self, group: &str, member: &str, epoch: i32) -> Result<Option<Closed>, i16> {
        let key = (group.to_owned(), member.to_owned());
        match epoch {
            0 => Err(code::INVALID_SHARE_SESSION_EPOCH),
            -1 => self.close(key).map(Some),
            epoch => {
                let session = self.sessions.get_mut(&key).ok_or(code::SHARE_SESSION_NOT_FOUND)?;
                if session.epoch != epoch {
                    return Err(code::INVALID_SHARE_SESSION_EPOCH);
                }
                session.epoch = next_epoch(epoch);
                Ok(None)
            }
        }
    }

    fn close(&mut self, key: (String, String)) -> Result<Closed, i16> {
        let session = self.sessions.remove(&key).ok_or(code::SHARE_SESSION_NOT_FOUND)?;
        let (group, member) = key;
        Ok(Closed { group, member, partitions: session.partitions.into_iter().collect() })
    }

    /// Closes the sessions `connection` opened (it closed).
    pub fn connection_closed(&mut self, connection: u64) -> Vec<Closed> {
        let keys: Vec<(String, String)> =
            self.sessions.iter().filter(|(_, s)| s.connection == connection).map(|(k, _)| k.clone()).collect();
        keys.into_iter().filter_map(|key| self.close(key).ok()).collect()
    }
}

/// The epoch after `epoch`: wraps from the largest to 1.
fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A session opens at 0, continues at each next epoch with what was added and
    // without what was forgotten, refuses a stale or unknown epoch, and closes at -1
    // with its partitions; its connection's end closes it too.
    #[test]
    fn sessions_follow_kafkas_epochs() {
        let t = uuid::Uuid::new_v4();
        let mut sessions = ShareSessions::new(2);
        let opened = sessions.fetch("g", "m", 0, &[(t, 0)], &[], 7).unwrap();
        assert_eq!(opened, Step::Fetch { partitions: vec![(t, 0)], opened: true });
        assert_eq!(sessions.fetch("g", "m", 2, &[], &[], 7), Err(code::INVALID_SHARE_SESSION_EPOCH));
        let next = sessions.fetch("g", "m", 1, &[(t, 1)], &[(t, 0)], 7).unwrap();
        assert_eq!(next, Step::Fetch { partitions: vec![(t, 1)], opened: false });
        assert_eq!(sessions.acknowledge("g", "m", 0), Err(code::INVALID_SHARE_SESSION_EPOCH));
        assert_eq!(sessions.acknowledge("g", "m", 2), Ok(None));
        assert_eq!(sessions.fetch("g", "x", 1, &[], &[], 7), Err(code::SHARE_SESSION_NOT_FOUND));
        sessions.fetch("g", "n", 0, &[], &[], 8).unwrap();
        assert_eq!(sessions.fetch("g", "o", 0, &[], &[], 8), Err(code::SHARE_SESSION_LIMIT_REACHED));
        let closed = sessions.fetch("g", "m", -1, &[], &[], 7).unwrap();
        assert_eq!(closed, Step::Close(Closed { group: "g".into(), member: "m".into(), partitions: vec![(t, 1)] }));
        assert_eq!(sessions.connection_closed(8).len(), 1);
        assert!(sessions.is_empty());
        assert_eq!(next_epoch(i32::MAX), 1);
    }
}
