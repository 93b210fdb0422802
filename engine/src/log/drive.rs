//! Driving a log's tail to disk: submitting the active segment's writes (whoever
//! waits drives, `drive_until`), completing them, waiting for readable data, and the
//! syncs that make appends durable (`flush`, `flush.ms`, `flush_to`).

use super::*;

impl<S: Storage> Log<S> {
    /// Submits writes of the active segment until `done` holds. Whoever waits drives:
    /// a task whose write completes keeps submitting while its own condition is unmet,
    /// and on leaving hands the work over to the first remaining waiter. `key` is the
    /// offset the caller waits for (`i64::MIN` to be woken on any progress).
    pub(super) async fn drive_until(&self, key: i64, done: impl Fn(&LogState<S::File>) -> bool) -> Result<()> {
        loop {
            let coalesce = {
                let state = self.state.borrow();
                if let Some(reason) = &state.failed {
                    return Err(self.failed_error(reason));
                }
                if done(&state) {
                    let pending = state.appender.end() > state.appender.written();
                    drop(state);
                    if pending {
                        self.written_waiters.wake_first();
                    }
                    return Ok(());
                }
                state.coalescing.wants(&state.appender, self.ctx.group_commit_max_delay)
            };
            if coalesce {
                self.coalesce(key).await;
                continue;
            }
            let (write, next, file) = {
                let mut state = self.state.borrow_mut();
                let file = state.active().file.clone();
                let write = state.appender.take_write(&file);
                // A head's write goes out with the write after it, if one may start.
                let next = write.as_ref().filter(|w| w.head).and_then(|_| state.appender.take_write(&file));
                (write, next, file)
            };
            let Some(write) = write else {
                self.written_waiters.wait(key).await;
                continue;
            };
            match next {
                None => {
                    self.submit_write(&file, write).await;
                }
                Some(next) => {
                    futures_util::future::join(self.submit_write(&file, write), self.submit_write(&file, next)).await;
                }
            }
        }
    }

    /// Submits one write from `take_write`, records its outcome, and moves what it made
    /// contiguous on disk into the cache, waking the appends and readers it reached.
    /// Returns the offset written up to. Seen through if the caller is dropped
    /// (`see_through.rs`): the appender must learn how every write it handed out ended.
    pub(super) async fn submit_write(
        &self,
        file: &S::File,
        write: crate::appender::Write<<S::File as StorageFile>::Buf>,
    ) -> Offset {
        let metrics = &self.ctx.metrics;
        metrics.append_copied_bytes.set(metrics.append_copied_bytes.get() + write.copied as u64);
        metrics.writes.set(metrics.writes.get() + 1);
        metrics.writes_in_flight.set(metrics.writes_in_flight.get() + 1);
        let done = WriteDone {
            len: write.range.len(),
            position: write.position,
            data_end: write.data_end,
            chunk: write.chunk_position(),
            submitted: std::time::Instant::now(),
        };
        let file = file.clone();
        let (buf, range, position) = (write.buf, write.range, write.position);
        let io = async move { file.write_shared_at(buf, range, position).await };
        see_through::SeeThrough::new(self, io, move |log: &Log<S>, result| log.write_done(done, result)).await
    }

    /// Records how a write ended (`submit_write`).
    pub(super) fn write_done(&self, done: WriteDone, result: std::io::Result<usize>) -> Offset {
        let WriteDone { len, position, data_end, chunk, submitted } = done;
        let metrics = &self.ctx.metrics;
        metrics.write_latency.observe_since(submitted);
        metrics.writes_in_flight.set(metrics.writes_in_flight.get() - 1);
        let result = match result {
            Ok(n) if n == len => Ok(()),
            Ok(n) => Err(format!("short write of {n} of {len} bytes at {position}")),
            Err(e) => Err(format!("write at {position}: {e}")),
        };
        let failure = result.clone().err();
        let (written_before, written_end) = {
            let mut state = self.state.borrow_mut();
            let state = &mut *state;
            let before = state.offset_written_end;
            if state.appender.complete_write(position, data_end, chunk, result) {
                let written = state.appender.written();
                let mut cache = self.ctx.cache.borrow_mut();
                while state.pending.front().is_some_and(|p| p.end_position <= written) {
                    let pending = state.pending.pop_front().expect("checked");
                    state.offset_written_end = pending.batch.next_offset();
                    cache.insert(self.key, pending.batch);
                }
                drop(cache);
                self.recharge(state);
            }
            (before, state.offset_written_end)
        };
        if let Some(reason) = failure {
            self.fail(reason);
        }
        if written_end != written_before {
            self.stamp.bump();
        }
        self.written_waiters.wake_upto(written_end.0);
        self.readers.wake_upto(written_end.0);
        written_end
    }

    /// Completes once a batch at or after `offset` is readable (`offset_written_end >
    /// offset`), or the log closes, fails or is truncated. Callers bound the wait with
    /// their own timeout (a fetch's `max_wait_ms`) and re-read.
    pub async fn wait_for_data(&self, offset: Offset) {
        loop {
            {
                let state = self.state.borrow();
                if state.offset_written_end > offset || state.closed || state.failed.is_some() {
                    return;
                }
            }
            self.readers.wait(offset.0 + 1).await;
        }
    }

    /// Waits until every batch below `target` is written and fdatasynced. Syncs are
    /// shared: one that starts after a write completed covers every waiter of it, and
    /// its issuer hands the next sync over to the first waiter it did not cover.
    pub(super) async fn flush_to(&self, target: Offset) -> Result<()> {
        loop {
            self.drive_until(target.0, |s| s.offset_written_end >= target).await?;
            let sync = {
                let mut state = self.state.borrow_mut();
                if let Some(reason) = &state.failed {
                    return Err(self.failed_error(reason));
                }
                if state.offset_flushed_end >= target {
                    return Ok(());
                }
                // A sync of the active file says nothing of a rolled segment whose seal
                // has not synced it yet: wait for the seal (it wakes the sync waiters).
                if state.sync_in_flight || !state.seals.is_empty() {
                    if !state.seals.is_empty() {
                        self.hurry_seals();
                    }
                    None
                } else {
                    state.sync_in_flight = true;
                    Some((state.active().file.clone(), state.offset_written_end))
                }
            };
            let Some((file, covered)) = sync else {
                self.sync_waiters.wait(target.0).await;
                continue;
            };
            let metrics = &self.ctx.metrics;
            metrics.syncs.set(metrics.syncs.get() + 1);
            let started = std::time::Instant::now();
            // Seen through if this task is dropped: `sync_in_flight` must clear.
            let io = async move { file.fdatasync().await };
            see_through::SeeThrough::new(self, io, move |log: &Log<S>, result| log.sync_done(covered, started, result))
                .await;
        }
    }

    /// Records how an fdatasync covering everything below `covered` ended (`flush_to`).
    pub(super) fn sync_done(&self, covered: Offset, started: std::time::Instant, result: std::io::Result<()>) {
        self.ctx.metrics.sync_latency.observe_since(started);
        let flushed = {
            let mut state = self.state.borrow_mut();
            state.sync_in_flight = false;
            if result.is_ok() {
                state.offset_flushed_end = state.offset_flushed_end.max(covered);
                state.last_flush_ms = now_ms();
            }
            state.offset_flushed_end
        };
        if let Err(e) = result {
            // Never retried: the kernel may have dropped the dirty state (fsyncgate).
            self.fail(format!("fdatasync: {e}"));
        }
        self.sync_waiters.wake_upto(flushed.0);
        self.sync_waiters.wake_first();
    }

    /// Writes and fdatasyncs everything appended so far.
    ///
    /// # Errors
    /// `LogFailed` when a write or the sync fails.
    pub async fn flush(&self) -> Result<()> {
        let end = self.log_end_offset();
        self.flush_to(end).await
    }

    /// Releases the tail buffer of an idle log (everything written, nothing in flight).
    pub fn release_idle_buffers(&self) -> bool {
        self.state.borrow_mut().appender.release_idle()
    }

    /// Flushes if `flush.ms` has passed since the last flush and data is unflushed.
    ///
    /// # Errors
    /// As `flush`.
    pub async fn flush_if_due(&self, now: i64) -> Result<()> {
        let due = {
            let state = self.state.borrow();
            state.config.flush_ms != u64::MAX
                && state.offset_flushed_end < state.log_end_offset
                && now - state.last_flush_ms >= state.config.flush_ms as i64
        };
        if due {
            self.flush().await?;
        }
        Ok(())
    }
}
