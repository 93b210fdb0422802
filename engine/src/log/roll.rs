//! Rolling to a new segment (size, index, age with `segment.jitter.ms`): the closed
//! segment's indexes are written and its reservation trimmed.

use super::*;

impl<S: Storage> Log<S> {
    /// Closes the active segment and starts a new one, even if it is not full (the
    /// `segment.ms` case, and tests).
    ///
    /// # Errors
    /// As a roll during `append`.
    pub async fn roll(&self) -> Result<()> {
        let ticket = self.gate.ticket();
        ticket.wait_turn().await;
        if self.state.borrow().active().size == 0 {
            return Ok(());
        }
        self.roll_locked().await
    }

    /// Rolls; the caller is at the head of the gate, so no append is admitted meanwhile.
    /// Idempotent up to the creation of the new segment, so a failed roll can be retried.
    pub(super) async fn roll_locked(&self) -> Result<()> {
        self.drive_until(i64::MIN, |s| s.appender.written() == s.appender.end() && s.appender.writes_in_flight() == 0)
            .await?;
        let (file, base, size, next_offset) = {
            let mut state = self.state.borrow_mut();
            let active = state.active_mut();
            active.seal_time_index();
            (active.file.clone(), active.base_offset, active.size, active.next_offset)
        };
        let path = segment::file_path(&self.dir, base, segment::LOG_SUFFIX);
        // Trim the reservation, then make data and size durable.
        file.truncate(size).await.map_err(|e| Error::io("truncate", &path, e))?;
        if let Err(e) = file.fdatasync().await {
            self.fail(format!("fdatasync {}: {e}", path.display()));
            return Err(Error::io("sync", &path, e));
        }
        {
            let mut state = self.state.borrow_mut();
            state.appender.reserved = size;
            state.offset_flushed_end = state.offset_flushed_end.max(next_offset);
        }
        self.write_indexes(base).await?;
        self.check_space(RESERVATION_STEP_BYTES.min(align_up(self.state.borrow().config.segment_bytes)))?;
        let new_path = segment::file_path(&self.dir, next_offset, segment::LOG_SUFFIX);
        let new_file =
            self.ctx.storage.open_file(&new_path, true).await.map_err(|e| Error::io("create", &new_path, e))?;
        // A file left by a crash in an earlier roll holds no acknowledged data.
        new_file.truncate(0).await.map_err(|e| Error::io("truncate", &new_path, e))?;
        self.ctx.storage.sync_dir(&self.dir).await.map_err(|e| Error::io("sync", &self.dir, e))?;
        {
            let mut state = self.state.borrow_mut();
            let appender = crate::appender::Appender::new(&new_file, self.ctx.write_shape, 0, &[], 0);
            state.appender = appender;
            state.segments.insert(next_offset, Segment::new(next_offset, new_file));
            state.recovery_point = state.recovery_point.max(next_offset);
        }
        tracing::debug!(target: "skein::engine", partition = %self.partition, base_offset = next_offset.0, "segment rolled");
        self.write_checkpoint(false).await
    }

    /// Writes a segment's indexes if they changed, and its `.txnindex` from what the
    /// log's owner says of its aborted transactions (none: no file).
    pub(super) async fn write_indexes(&self, base: Offset) -> Result<()> {
        let encoded = {
            let state = self.state.borrow();
            let Some(seg) = state.segments.get(&base) else { return Ok(()) };
            if !seg.indexes_dirty {
                return Ok(());
            }
            (seg.offset_index.encode(), seg.time_index.encode(), seg.next_offset)
        };
        let storage = &self.ctx.storage;
        let index_path = segment::file_path(&self.dir, base, segment::INDEX_SUFFIX);
        io::write_whole_atomic(storage, &index_path, &encoded.0)
            .await
            .map_err(|e| Error::io("write", &index_path, e))?;
        let time_path = segment::file_path(&self.dir, base, segment::TIME_INDEX_SUFFIX);
        io::write_whole_atomic(storage, &time_path, &encoded.1).await.map_err(|e| Error::io("write", &time_path, e))?;
        self.write_txn_index(base, encoded.2).await?;
        if let Some(seg) = self.state.borrow_mut().segments.get_mut(&base) {
            seg.indexes_dirty = false;
        }
        Ok(())
    }

    /// `<base>.txnindex`: the aborted transactions whose markers lie in
    /// `[base, next)`, removed when there are none.
    async fn write_txn_index(&self, base: Offset, next: Offset) -> Result<()> {
        let Some(transactions) = self.transactions.borrow().clone() else { return Ok(()) };
        let entries: Vec<_> =
            transactions.aborted().into_iter().filter(|t| t.last_offset >= base && t.last_offset < next).collect();
        let storage = &self.ctx.storage;
        let path = segment::file_path(&self.dir, base, segment::TXN_INDEX_SUFFIX);
        if entries.is_empty() {
            return match storage.remove_file(&path).await {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", &path, e)),
                _ => Ok(()),
            };
        }
        let bytes = segment::encode_txn_index(&entries);
        io::write_whole_atomic(storage, &path, &bytes).await.map_err(|e| Error::io("write", &path, e))
    }
}

/// Kafka's `segment.jitter.ms`: how much earlier than `segment.ms` this segment rolls,
/// in `[0, min(segment.jitter.ms, segment.ms))`. Derived from the partition and the
/// segment's base offset, so it is stable for one segment and differs between
/// partitions, which then do not all roll at once.
pub(super) fn roll_jitter_ms(partition: &TopicPartition, base_offset: Offset, config: &LogConfig) -> u64 {
    let bound = config.segment_jitter_ms.min(config.segment_ms);
    if bound == 0 {
        return 0;
    }
    let mut seed = crc32c::crc32c(partition.topic.as_bytes()) as u64;
    seed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (partition.partition as u64)
        ^ (base_offset.0 as u64).rotate_left(32);
    seed ^= seed >> 29;
    seed.wrapping_mul(0xBF58_476D_1CE4_E5B9) % bound
}

#[cfg(test)]
mod tests {
    use super::*;

    // segment.jitter.ms takes a stable amount below its bound off each segment's
    // segment.ms, different between partitions.
    #[test]
    fn roll_jitter_stays_in_bounds() {
        let config = LogConfig { segment_ms: 10_000, segment_jitter_ms: 4_000, ..LogConfig::default() };
        let jitters: Vec<u64> =
            (0..32).map(|p| roll_jitter_ms(&TopicPartition::new("t", p), Offset(0), &config)).collect();
        assert!(jitters.iter().all(|&j| j < 4_000));
        assert!(jitters.iter().collect::<std::collections::BTreeSet<_>>().len() > 16, "{jitters:?}");
        let p = TopicPartition::new("t", 3);
        assert_eq!(roll_jitter_ms(&p, Offset(7), &config), roll_jitter_ms(&p, Offset(7), &config));
        let none = LogConfig { segment_jitter_ms: 0, ..config.clone() };
        assert_eq!(roll_jitter_ms(&p, Offset(7), &none), 0);
        let short = LogConfig { segment_ms: 10, ..config };
        assert!((0..100).all(|o| roll_jitter_ms(&p, Offset(o), &short) < 10));
    }
}
