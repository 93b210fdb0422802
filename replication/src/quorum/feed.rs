//! What a voter serves an observer: a broker-only node that follows the metadata log
//! without voting (Kafka's observers, which fetch `__cluster_metadata` from the
//! quorum). An observer asks for what follows the index it holds; the voter answers
//! with committed entries only (never an entry raft could still replace), starting
//! from its snapshot when the observer holds nothing or is behind the snapshot.
//!
//! The wire form is binary and checked on decode: the snapshot and entries carry the
//! metadata image and records opaquely, as raft's entries do.

use super::{Committed, Quorum};

/// Committed metadata for an observer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Feed {
    /// The quorum's leader as the serving voter knows it.
    pub leader: Option<u64>,
    /// The serving voter's commit index.
    pub committed: u64,
    /// The snapshot to start from (its index and data), when the observer asked for
    /// what follows 0 (it holds nothing) or an index the voter has folded away.
    pub snapshot: Option<(u64, Vec<u8>)>,
    /// Committed entries with data, in order, after the asked index (or the snapshot).
    pub entries: Vec<Committed>,
    /// The last index the feed covers: the observer holds the log up to here once it
    /// applied the feed.
    pub upto: u64,
}

impl Quorum {
    /// What follows `after` for an observer: committed entries this member has made
    /// durable, up to about `max_bytes` of entry data (at least one entry).
    pub fn feed(&self, after: u64, max_bytes: usize) -> Feed {
        let durable = self.durable();
        let snapshot_index = durable.snapshot_index();
        let last_durable = durable.entries.last().map_or(snapshot_index, |e| e.index);
        let committed = self.committed();
        let end = committed.min(last_durable);
        let mut feed = Feed { leader: self.leader(), committed, ..Feed::default() };
        let mut from = after;
        if after == 0 || after < snapshot_index {
            feed.snapshot = Some((snapshot_index, durable.snapshot.data.to_vec()));
            from = snapshot_index;
        }
        feed.upto = from.max(after.min(end));
        let mut bytes = 0;
        for entry in durable.entries.iter().filter(|e| e.index > from && e.index <= end) {
            if bytes >= max_bytes {
                break;
            }
            if let Some(committed) = Committed::of(entry) {
                bytes += committed.data.len();
                feed.entries.push(committed);
            }
            feed.upto = entry.index;
        }
        feed
    }
}

impl Feed {
    pub fn encode(&self) -> Vec<u8> {
        let data: usize = self.entries.iter().map(|e| e.data.len() + 20).sum();
        let snapshot = self.snapshot.as_ref().map_or(0, |(_, d)| d.len() + 12);
        let mut out = Vec::with_capacity(29 + snapshot + 4 + data);
        out.extend_from_slice(&self.leader.unwrap_or(0).to_be_bytes());
        out.extend_from_slice(&self.committed.to_be_bytes());
        out.extend_from_slice(&self.upto.to_be_bytes());
        match &self.snapshot {
            Some((index, data)) => {
                out.push(1);
                out.extend_from_slice(&index.to_be_bytes());
                out.extend_from_slice(&(data.len() as u32).to_be_bytes());
                out.extend_from_slice(data);
            }
            None => out.push(0),
        }
        out.extend_from_slice(&(self.entries.len() as u32).to_be_bytes());
        for entry in &self.entries {
            out.extend_from_slice(&entry.index.to_be_bytes());
            out.extend_from_slice(&entry.term.to_be_bytes());
            out.extend_from_slice(&(entry.data.len() as u32).to_be_bytes());
            out.extend_from_slice(&entry.data);
        }
        out
    }

    /// # Errors
    /// A message when `bytes` is short, too long, or its entries are out of order.
    pub fn decode(bytes: &[u8]) -> Result<Feed, String> {
        let mut reader = Reader(bytes);
        let leader = reader.u64()?;
        let mut feed = Feed {
            leader: (leader != 0).then_some(leader),
            committed: reader.u64()?,
            upto: reader.u64()?,
            ..Feed::default()
        };
        match reader.take(1)?[0] {
            0 => {}
            1 => {
                let index = reader.u64()?;
                let length = reader.u32()? as usize;
                feed.snapshot = Some((index, reader.take(length)?.to_vec()));
            }
            other => return Err(format!("snapshot flag {other}")),
        }
        let count = reader.u32()? as usize;
        let mut last = feed.snapshot.as_ref().map_or(0, |(index, _)| *index);
        for _ in 0..count {
            let (index, term, length) = (reader.u64()?, reader.u64()?, reader.u32()? as usize);
            if index <= last || index > feed.upto {
                return Err(format!("entry {index} out of order"));
            }
            last = index;
            // The wire carries the data only: an observer applies both kinds alike.
            let data = reader.take(length)?.to_vec();
            feed.entries.push(Committed { index, term, data, membership: false });
        }
        if !reader.0.is_empty() {
            return Err(format!("{} bytes past the end", reader.0.len()));
        }
        Ok(feed)
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!("{n} bytes wanted, {} left", self.0.len()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feed_round_trips_and_bad_bytes_are_refused() {
        let feed = Feed {
            leader: Some(2),
            committed: 9,
            snapshot: Some((4, b"image".to_vec())),
            entries: vec![
                Committed { index: 5, term: 2, data: b"a".to_vec(), membership: false },
                Committed { index: 7, term: 3, data: b"bc".to_vec(), membership: false },
            ],
            upto: 8,
        };
        let bytes = feed.encode();
        assert_eq!(Feed::decode(&bytes), Ok(feed.clone()));
        for cut in 0..bytes.len() {
            assert!(Feed::decode(&bytes[..cut]).is_err(), "a feed cut at {cut} decoded");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Feed::decode(&longer).is_err());
        let mut disordered = feed.clone();
        disordered.entries.swap(0, 1);
        assert!(Feed::decode(&disordered.encode()).is_err());
        let empty = Feed::default();
        assert_eq!(Feed::decode(&empty.encode()), Ok(empty));
    }
}
