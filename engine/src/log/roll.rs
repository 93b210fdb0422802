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
    ///
    /// Appends wait only for what the next segment needs: the closed segment's writes
    /// drained, and the new file created. Sealing the closed segment (trimming its
    /// reservation, fdatasync, its indexes, the directory sync) goes on behind them in
    /// a task of its own, after the file system's own commit (`settle_before_sync`):
    /// each of those calls can take hundreds of milliseconds behind a journal commit or
    /// a device flush, and appends waited for all of them at every roll. Until a seal finishes, `offset_flushed_end` stays below the closed
    /// segment, a flush waits for it (`sealed`), and so do the operations that rewrite
    /// or remove segments. The recovery point it moves is persisted by the next
    /// periodic checkpoint (`Log::checkpoint`, every housekeeping interval).
    pub(super) async fn roll_locked(&self) -> Result<()> {
        let started = std::time::Instant::now();
        self.drive_until(i64::MIN, |s| s.appender.written() == s.appender.end() && s.appender.writes_in_flight() == 0)
            .await?;
        let (file, base, size, next_offset) = {
            let state = self.state.borrow();
            let active = state.active();
            (active.file.clone(), active.base_offset, active.size, active.next_offset)
        };
        let step = self.state.borrow().reservation.step();
        self.check_space(step.min(align_up(self.state.borrow().config.segment_bytes)))?;
        let new_path = segment::file_path(&self.dir, next_offset, segment::LOG_SUFFIX);
        let new_file =
            self.ctx.storage.open_file(&new_path, true).await.map_err(|e| Error::io("create", &new_path, e))?;
        // A file left by a crash in an earlier roll holds no acknowledged data.
        new_file.truncate(0).await.map_err(|e| Error::io("truncate", &new_path, e))?;
        {
            let mut state = self.state.borrow_mut();
            state.active_mut().seal_time_index();
            let appender = crate::appender::Appender::new(&new_file, self.ctx.write_shape, 0, &[], 0);
            state.appender = appender;
            state.segments.insert(next_offset, Segment::new(next_offset, new_file));
            state.seals.push_back(base);
        }
        self.ctx.metrics.roll_latency.observe_since(started);
        tracing::debug!(target: "skein::engine", partition = %self.partition, base_offset = next_offset.0, "segment rolled");
        let Some(me) = self.me.upgrade() else {
            // Every log lives in an `Rc` (`Log::open`); were one not, it seals in place.
            self.seal(file, base, size, next_offset).await;
            return Ok(());
        };
        self.ctx.storage.spawn(async move { me.seal(file, base, size, next_offset).await });
        Ok(())
    }

    /// Seals the segment `[base, next_offset)` that a roll closed: trims its
    /// reservation to `size`, fdatasyncs it, writes its indexes (without syncs of their
    /// own), syncs the directory (the new segment's name and the indexes'), then moves
    /// the flushed offset and the recovery point past it. Seals run in roll order: each
    /// starts once the seals before it finish.
    /// A failed trim or sync fails the log (the file's state is unknown); a failed
    /// index write only leaves them to the next attempt (close rewrites dirty indexes;
    /// recovery rebuilds missing ones).
    async fn seal(&self, file: S::File, base: Offset, size: u64, next_offset: Offset) {
        let started = std::time::Instant::now();
        // Seals run in roll order, each behind the ones before it.
        while self.state.borrow().seals.front() != Some(&base) {
            self.seal_waiters.wait(i64::MIN).await;
        }
        self.settle_before_sync().await;
        // A failed log writes nothing more; its seals only leave the queue.
        if self.state.borrow().failed.is_none() {
            let path = segment::file_path(&self.dir, base, segment::LOG_SUFFIX);
            let synced = async {
                file.truncate(size).await.map_err(|e| format!("truncate {}: {e}", path.display()))?;
                file.fdatasync().await.map_err(|e| format!("fdatasync {}: {e}", path.display()))?;
                if let Err(e) = self.write_indexes_durably(base, false).await {
                    tracing::warn!(target: "skein::engine", partition = %self.partition, error = %e, "indexes of a rolled segment not written");
                }
                self.ctx.storage.sync_dir(&self.dir).await.map_err(|e| format!("sync {}: {e}", self.dir.display()))
            };
            match synced.await {
                Ok(()) => {
                    let mut state = self.state.borrow_mut();
                    state.offset_flushed_end = state.offset_flushed_end.max(next_offset);
                    state.recovery_point = state.recovery_point.max(next_offset);
                }
                Err(reason) => self.fail(reason),
            }
        }
        {
            let mut state = self.state.borrow_mut();
            state.seals.pop_front();
            if state.seals.is_empty() {
                self.seal_hurry.set(false);
            }
        }
        self.ctx.metrics.seal_latency.observe_since(started);
        self.seal_waiters.wake_all();
        self.sync_waiters.wake_all();
    }

    /// Waits, before a seal's syncs, until the file system's own periodic commit has
    /// made the closed segment durable (`LogContext::seal_sync_delay`), unless someone waits for
    /// the seal (`hurry_seals`). A sync forced while appends write into the freshly
    /// reserved (unwritten) blocks of the next segment holds their writes for the whole
    /// journal commit and device flush: after every roll of a log appending at full
    /// rate, writes stopped for about a second (one appender at 0.44-0.58 of the raw
    /// write bandwidth). After the file system's commit the same syncs find nothing to
    /// commit and only flush the device, which holds no write.
    async fn settle_before_sync(&self) {
        let deadline = std::time::Instant::now() + self.ctx.seal_sync_delay;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let stopped = { self.state.borrow().failed.is_some() };
            if self.seal_hurry.get() || stopped || left.is_zero() {
                return;
            }
            futures_lite::future::or(glommio::timer::sleep(left), self.seal_urgent.wait(i64::MIN)).await;
        }
    }

    /// Pending seals sync now: someone waits for them.
    pub(super) fn hurry_seals(&self) {
        if !self.seal_hurry.replace(true) {
            self.seal_urgent.wake_all();
        }
    }

    /// Completes once every rolled segment is sealed (hurrying the seals).
    ///
    /// # Errors
    /// `LogFailed` when a seal (or anything else) failed the log.
    pub(super) async fn sealed(&self) -> Result<()> {
        if !self.state.borrow().seals.is_empty() {
            self.hurry_seals();
        }
        loop {
            {
                let state = self.state.borrow();
                if let Some(reason) = &state.failed {
                    return Err(self.failed_error(reason));
                }
                if state.seals.is_empty() {
                    return Ok(());
                }
            }
            self.seal_waiters.wait(i64::MIN).await;
        }
    }

    /// Writes a segment's indexes if they changed, and its `.txnindex` from what the
    /// log's owner says of its aborted transactions (none: no file).
    pub(super) async fn write_indexes(&self, base: Offset) -> Result<()> {
        self.write_indexes_durably(base, true).await
    }

    /// `write_indexes`; with `durable` false the offset and time indexes are written
    /// without syncs of their own (`io::write_whole`): a seal's directory sync makes
    /// their names durable, and recovery rebuilds an index a power cut damaged.
    async fn write_indexes_durably(&self, base: Offset, durable: bool) -> Result<()> {
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
        io::write_whole(storage, &index_path, &encoded.0, durable)
            .await
            .map_err(|e| Error::io("write", &index_path, e))?;
        let time_path = segment::file_path(&self.dir, base, segment::TIME_INDEX_SUFFIX);
        io::write_whole(storage, &time_path, &encoded.1, durable)
            .await
            .map_err(|e| Error::io("write", &time_path, e))?;
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
