//! Moving a log's ends: truncation to an offset (KIP-101, a follower after a leader
//! change) and `DeleteRecords` (the log start offset).

use super::*;

impl<S: Storage> Log<S> {
    /// Removes every batch at and after the batch holding `offset` (a follower
    /// truncating to its leader, KIP-101). Offsets below `log_start_offset` empty the
    /// log and restart it at `offset`.
    ///
    /// # Errors
    /// `OffsetOutOfRange` for a negative offset; `Io` or `LogFailed` when the disk fails.
    pub async fn truncate_to(&self, offset: Offset) -> Result<()> {
        if offset < Offset::ZERO {
            return Err(Error::OffsetOutOfRange { offset, start: self.log_start_offset(), end: self.log_end_offset() });
        }
        let _maintenance = self.maintenance.lock().await;
        let ticket = self.gate.ticket();
        ticket.wait_turn().await;
        self.sealed().await?;
        let truncated = self.truncate_locked(offset).await;
        // Still ahead of every append (the ticket is held): whatever is appended at the
        // new end is dirty for the cleaner.
        self.cleaned_past(self.log_end_offset()).await?;
        truncated
    }

    /// Empties the log and restarts it at `offset` (Kafka's `truncateFullyAndStartAt`):
    /// a follower whose log ends below its leader's log start.
    ///
    /// # Errors
    /// `OffsetOutOfRange` for a negative offset; `Io` or `LogFailed` when the disk fails.
    pub async fn truncate_fully_and_start_at(&self, offset: Offset) -> Result<()> {
        if offset < Offset::ZERO {
            return Err(Error::OffsetOutOfRange { offset, start: self.log_start_offset(), end: self.log_end_offset() });
        }
        let _maintenance = self.maintenance.lock().await;
        let ticket = self.gate.ticket();
        ticket.wait_turn().await;
        self.sealed().await?;
        self.drive_until(i64::MIN, |s| s.appender.written() == s.appender.end() && s.appender.writes_in_flight() == 0)
            .await?;
        let restarted = self.restart_at(offset).await;
        self.cleaned_past(self.log_end_offset()).await?;
        restarted
    }

    /// `truncate_to` once the maintenance lock and the append gate are held.
    async fn truncate_locked(&self, offset: Offset) -> Result<()> {
        self.drive_until(i64::MIN, |s| s.appender.written() == s.appender.end() && s.appender.writes_in_flight() == 0)
            .await?;
        let (log_end, log_start) = (self.log_end_offset(), self.log_start_offset());
        self.unfence_from(offset);
        if offset >= log_end {
            // No batch goes, but an epoch started at the end with nothing written in
            // it (a leader's, `start_leader_epoch`) does, as in Kafka's `truncateTo`:
            // the follower then fetches in the epoch its last batch has.
            if self.state.borrow_mut().epochs.truncate_from(offset) {
                self.write_epochs().await?;
            }
            return Ok(());
        }
        if offset < log_start {
            return self.restart_at(offset).await;
        }
        // Drop whole segments above the target.
        let doomed: Vec<Offset> = {
            let state = self.state.borrow();
            state.segments.keys().copied().filter(|&b| b > offset).collect()
        };
        let (base, file, index, times, position_hint) = {
            let mut state = self.state.borrow_mut();
            for base in &doomed {
                state.segments.remove(base);
            }
            let (&base, seg) = state.segments.range(..=offset).next_back().expect("offset >= log start");
            let hint = seg.offset_index.lookup(seg.relative(offset)) as u64;
            (base, seg.file.clone(), seg.offset_index.clone(), seg.time_index.clone(), hint)
        };
        for base in &doomed {
            remove_segment_files(&self.ctx.storage, &self.dir, *base).await?;
        }
        // The removals durable: segments past the truncation that came back after a
        // power cut would be served again (a small log writes no checkpoint, whose
        // atomic write would sync the directory).
        if !doomed.is_empty() {
            self.ctx.storage.sync_dir(&self.dir).await.map_err(|e| Error::io("sync", &self.dir, e))?;
        }
        let path = segment::file_path(&self.dir, base, segment::LOG_SUFFIX);
        let size = self.state.borrow().segments[&base].size;
        // Find the position of the batch holding `offset`.
        let scan = segment::scan(&file, position_hint, base, size).await.map_err(|e| Error::io("read", &path, e))?;
        let cut = scan.batches.iter().find(|m| m.last_offset >= offset).map_or(size, |m| m.position);
        let mut seg = Segment::new(base, file.clone());
        seg.offset_index = index;
        seg.offset_index.truncate_to_position(cut as u32);
        seg.time_index = times;
        seg.time_index.truncate_to_offset(seg.relative(offset));
        let config = self.config();
        restore_bookkeeping(&mut seg, cut, &config).await.map_err(|e| Error::io("read", &path, e))?;
        seg.indexes_dirty = true;
        file.truncate(cut).await.map_err(|e| Error::io("truncate", &path, e))?;
        file.fdatasync().await.map_err(|e| Error::io("sync", &path, e))?;
        let tail_start = align_down(cut);
        let tail =
            file.read_at(tail_start, (cut - tail_start) as usize).await.map_err(|e| Error::io("read", &path, e))?;
        {
            let mut state = self.state.borrow_mut();
            let new_end = seg.next_offset;
            state.segments.insert(base, seg);
            state.appender = crate::appender::Appender::new(&file, self.ctx.write_shape, cut, &tail, cut);
            state.pending.clear();
            state.log_end_offset = new_end;
            // The batch holding the log start may be gone with the truncation.
            state.log_start_offset = state.log_start_offset.min(new_end);
            state.offset_written_end = new_end;
            state.offset_flushed_end = state.offset_flushed_end.min(new_end);
            state.recovery_point = state.recovery_point.min(new_end);
            state.epochs.truncate_from(new_end);
            self.ctx.cache.borrow_mut().invalidate(self.key, new_end, Offset(i64::MAX));
        }
        self.write_indexes(base).await?;
        self.write_epochs().await?;
        self.write_checkpoint(false).await?;
        let end = self.log_end_offset();
        self.remove_producer_snapshots(|o| o > end).await?;
        self.wake_all();
        Ok(())
    }

    /// Empties the log and restarts it at `offset` (Kafka's `truncateFullyAndStartAt`).
    pub(super) async fn restart_at(&self, offset: Offset) -> Result<()> {
        self.unfence_from(Offset::ZERO);
        let bases = self.segment_bases();
        let path = segment::file_path(&self.dir, offset, segment::LOG_SUFFIX);
        for base in &bases {
            remove_segment_files(&self.ctx.storage, &self.dir, *base).await?;
        }
        let file = self.ctx.storage.open_file(&path, true).await.map_err(|e| Error::io("create", &path, e))?;
        file.truncate(0).await.map_err(|e| Error::io("truncate", &path, e))?;
        self.ctx.storage.sync_dir(&self.dir).await.map_err(|e| Error::io("sync", &self.dir, e))?;
        {
            let mut state = self.state.borrow_mut();
            state.segments.clear();
            state.segments.insert(offset, Segment::new(offset, file.clone()));
            state.appender = crate::appender::Appender::new(&file, self.ctx.write_shape, 0, &[], 0);
            state.pending.clear();
            state.log_start_offset = offset;
            state.log_end_offset = offset;
            state.offset_written_end = offset;
            state.offset_flushed_end = offset;
            state.recovery_point = offset;
            state.epochs = LeaderEpochCache::default();
            self.ctx.cache.borrow_mut().invalidate_log(self.key);
        }
        self.write_epochs().await?;
        self.write_checkpoint(false).await?;
        self.remove_producer_snapshots(|_| true).await?;
        self.wake_all();
        Ok(())
    }

    /// Moves the log start offset to `offset` (DeleteRecords) and deletes the segments
    /// that lie wholly below it. Returns the new log start offset.
    ///
    /// # Errors
    /// `OffsetOutOfRange` above the log end; `Io`.
    pub async fn delete_records_before(&self, offset: Offset) -> Result<Offset> {
        let _maintenance = self.maintenance.lock().await;
        self.sealed().await?;
        {
            let mut state = self.state.borrow_mut();
            if offset > state.log_end_offset {
                return Err(Error::OffsetOutOfRange {
                    offset,
                    start: state.log_start_offset,
                    end: state.log_end_offset,
                });
            }
            state.log_start_offset = state.log_start_offset.max(offset);
        }
        self.stamp.bump();
        let start = self.log_start_offset();
        self.delete_segments_where(|_, next_base| next_base <= start).await?;
        self.write_checkpoint(false).await?;
        Ok(self.log_start_offset())
    }
}
