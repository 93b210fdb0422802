//! The per-partition checkpoint: recovery point, log start offset and whether the log
//! was closed cleanly, plus Kafka's `leader-epoch-checkpoint`.
//!
//! Both are small text files replaced atomically (`io::write_whole_atomic`). The
//! checkpoint carries a CRC32C line, so a damaged file is detected and treated as
//! absent (full recovery scan) instead of trusted.

use crate::types::{LeaderEpoch, Offset};

pub const CHECKPOINT_FILE: &str = "skein-checkpoint";
pub const LEADER_EPOCH_FILE: &str = "leader-epoch-checkpoint";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// Every batch below this offset was fdatasynced; recovery scans only from here.
    pub recovery_point: Offset,
    /// The first offset readable; moved by `DeleteRecords` and retention.
    pub log_start_offset: Offset,
    /// Whether the log was closed cleanly (indexes written, files trimmed).
    pub clean_shutdown: bool,
}

impl Checkpoint {
    pub fn encode(&self) -> Vec<u8> {
        let body = format!(
            "version 0\nrecovery_point {}\nlog_start_offset {}\nclean_shutdown {}\n",
            self.recovery_point.0, self.log_start_offset.0, self.clean_shutdown as u8
        );
        let crc = crc32c::crc32c(body.as_bytes());
        format!("{body}crc {crc}\n").into_bytes()
    }

    /// Parses a checkpoint; `None` when it is damaged in any way.
    pub fn decode(bytes: &[u8]) -> Option<Checkpoint> {
        let text = std::str::from_utf8(bytes).ok()?;
        let (body, crc_line) = text.trim_end_matches('\n').rsplit_once('\n')?;
        let body = format!("{body}\n");
        let crc: u32 = crc_line.strip_prefix("crc ")?.parse().ok()?;
        if crc != crc32c::crc32c(body.as_bytes()) {
            return None;
        }
        let mut lines = body.lines();
        if lines.next()? != "version 0" {
            return None;
        }
        let mut field = |name: &str| -> Option<i64> { lines.next()?.strip_prefix(name)?.trim().parse().ok() };
        let recovery_point = Offset(field("recovery_point")?);
        let log_start_offset = Offset(field("log_start_offset")?);
        let clean_shutdown = field("clean_shutdown")? == 1;
        Some(Checkpoint { recovery_point, log_start_offset, clean_shutdown })
    }
}

/// Kafka's leader epoch cache: for each epoch, the first offset written in it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<(LeaderEpoch, Offset)>,
}

impl LeaderEpochCache {
    pub fn entries(&self) -> &[(LeaderEpoch, Offset)] {
        &self.entries
    }

    pub fn latest(&self) -> Option<(LeaderEpoch, Offset)> {
        self.entries.last().copied()
    }

    /// Records that `epoch` starts at `offset`, if it is newer than the latest epoch.
    /// Returns whether the cache changed. Negative epochs (no leader) are ignored.
    pub fn assign(&mut self, epoch: LeaderEpoch, offset: Offset) -> bool {
        if epoch.0 < 0 {
            return false;
        }
        match self.entries.last() {
            Some(&(latest, _)) if epoch <= latest => false,
            _ => {
                self.entries.push((epoch, offset));
                true
            }
        }
    }

    /// Where `epoch` ends, as Kafka's `LeaderEpochFileCache.endOffsetFor` answers
    /// OffsetForLeaderEpoch: the latest epoch at `log_end`; an older one at the start of
    /// the next, with the largest epoch at or below it; one older than any known at the
    /// first known start, with the epoch asked; `None` (undefined) for a newer one, for
    /// no epoch (negative), or when no epoch is known.
    pub fn end_offset_for(&self, epoch: LeaderEpoch, log_end: Offset) -> Option<(LeaderEpoch, Offset)> {
        let (latest, _) = self.latest()?;
        if epoch.0 < 0 {
            return None;
        }
        if epoch == latest {
            return Some((epoch, log_end));
        }
        let at = self.entries.partition_point(|&(e, _)| e <= epoch);
        let (_, next_start) = *self.entries.get(at)?;
        match at {
            0 => Some((epoch, next_start)),
            _ => Some((self.entries[at - 1].0, next_start)),
        }
    }

    /// The epoch `offset` was written in, as Kafka's `epochForOffset`: the newest epoch
    /// starting at or before it; `None` before the first known epoch.
    pub fn epoch_for_offset(&self, offset: Offset) -> Option<LeaderEpoch> {
        let at = self.entries.partition_point(|&(_, start)| start <= offset);
        at.checked_sub(1).map(|i| self.entries[i].0)
    }

    /// Removes epochs starting at or after `offset` (truncation of the log's tail).
    pub fn truncate_from(&mut self, offset: Offset) -> bool {
        let keep = self.entries.partition_point(|&(_, start)| start < offset);
        let changed = keep != self.entries.len();
        self.entries.truncate(keep);
        changed
    }

    /// Kafka's text format: version, count, then `epoch start_offset` lines.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = format!("0\n{}\n", self.entries.len());
        for (epoch, start) in &self.entries {
            out.push_str(&format!("{} {}\n", epoch.0, start.0));
        }
        out.into_bytes()
    }

    /// Parses Kafka's format; `None` when damaged.
    pub fn decode(bytes: &[u8]) -> Option<LeaderEpochCache> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut lines = text.lines();
        if lines.next()? != "0" {
            return None;
        }
        let count: usize = lines.next()?.parse().ok()?;
        let mut cache = LeaderEpochCache::default();
        for _ in 0..count {
            let (epoch, start) = lines.next()?.split_once(' ')?;
            let epoch = LeaderEpoch(epoch.parse().ok()?);
            let start = Offset(start.parse().ok()?);
            if !cache.assign(epoch, start) {
                return None;
            }
        }
        Some(cache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checkpoints round-trip and any damaged byte makes them unreadable.
    #[test]
    fn checkpoint_round_trip_and_damage() {
        let checkpoint = Checkpoint { recovery_point: Offset(42), log_start_offset: Offset(7), clean_shutdown: true };
        let bytes = checkpoint.encode();
        assert_eq!(Checkpoint::decode(&bytes), Some(checkpoint));
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x01;
            assert_eq!(Checkpoint::decode(&bad), None, "flip at {at}");
        }
        assert_eq!(Checkpoint::decode(&bytes[..bytes.len() / 2]), None);
    }

    // The epoch cache answers end offsets as OffsetForLeaderEpoch expects.
    #[test]
    fn leader_epochs() {
        let mut cache = LeaderEpochCache::default();
        assert!(cache.assign(LeaderEpoch(1), Offset(0)));
        assert!(!cache.assign(LeaderEpoch(1), Offset(5)));
        assert!(cache.assign(LeaderEpoch(3), Offset(10)));
        assert_eq!(cache.end_offset_for(LeaderEpoch(0), Offset(20)), Some((LeaderEpoch(0), Offset(0))));
        assert_eq!(cache.end_offset_for(LeaderEpoch(1), Offset(20)), Some((LeaderEpoch(1), Offset(10))));
        assert_eq!(cache.end_offset_for(LeaderEpoch(2), Offset(20)), Some((LeaderEpoch(1), Offset(10))));
        assert_eq!(cache.end_offset_for(LeaderEpoch(3), Offset(20)), Some((LeaderEpoch(3), Offset(20))));
        assert_eq!(cache.end_offset_for(LeaderEpoch(4), Offset(20)), None, "newer than any known");
        assert_eq!(cache.end_offset_for(LeaderEpoch(-1), Offset(20)), None, "no epoch");
        // The epoch an offset was written in (ListOffsets' leader epoch).
        let later = cache.clone();
        assert_eq!(later.epoch_for_offset(Offset(0)), Some(LeaderEpoch(1)));
        assert_eq!(later.epoch_for_offset(Offset(9)), Some(LeaderEpoch(1)));
        assert_eq!(later.epoch_for_offset(Offset(10)), Some(LeaderEpoch(3)));
        assert_eq!(later.epoch_for_offset(Offset(99)), Some(LeaderEpoch(3)));
        let mut starting_late = LeaderEpochCache::default();
        starting_late.assign(LeaderEpoch(2), Offset(5));
        assert_eq!(starting_late.epoch_for_offset(Offset(4)), None, "before the first known epoch");
        assert_eq!(LeaderEpochCache::decode(&cache.encode()), Some(cache.clone()));
        assert!(cache.truncate_from(Offset(10)));
        assert_eq!(cache.latest(), Some((LeaderEpoch(1), Offset(0))));
    }
}
