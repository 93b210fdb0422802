//! A log's state files beside its segments: the recovery checkpoint
//! (`skein-checkpoint`) and the leader epochs (`leader-epoch-checkpoint`), written by
//! housekeeping and at close, and removed again while the log is small
//! (`LogState::keeps_state_files`).

use super::*;

impl<S: Storage> Log<S> {
    pub(super) async fn write_checkpoint(&self, clean_shutdown: bool) -> Result<()> {
        let (checkpoint, keep) = {
            let state = self.state.borrow();
            let checkpoint = Checkpoint {
                recovery_point: state.recovery_point.max(state.offset_flushed_end).min(state.log_end_offset),
                log_start_offset: state.log_start_offset,
                clean_shutdown,
            };
            (checkpoint, state.keeps_state_files())
        };
        if !keep {
            if self.written_checkpoint.get() != OnDisk::Absent {
                self.remove_state_file(CHECKPOINT_FILE).await?;
                self.written_checkpoint.set(OnDisk::Absent);
            }
            return Ok(());
        }
        // Each write costs two fsyncs: skip it when nothing changed.
        if self.written_checkpoint.get() == OnDisk::Written(checkpoint) {
            return Ok(());
        }
        let path = self.dir.join(CHECKPOINT_FILE);
        io::write_whole_atomic(&self.ctx.storage, &path, &checkpoint.encode())
            .await
            .map_err(|e| Error::io("write", &path, e))?;
        self.written_checkpoint.set(OnDisk::Written(checkpoint));
        Ok(())
    }

    pub(super) async fn write_epochs(&self) -> Result<()> {
        if !self.state.borrow().keeps_state_files() {
            if *self.written_epochs.borrow() != OnDisk::Absent {
                self.remove_state_file(LEADER_EPOCH_FILE).await?;
                *self.written_epochs.borrow_mut() = OnDisk::Absent;
            }
            return Ok(());
        }
        // Compared as entries, not encoded: housekeeping asks every log every pass.
        let epochs = {
            let state = self.state.borrow();
            if matches!(&*self.written_epochs.borrow(), OnDisk::Written(on_disk) if *on_disk == state.epochs) {
                return Ok(());
            }
            state.epochs.clone()
        };
        let path = self.dir.join(LEADER_EPOCH_FILE);
        io::write_whole_atomic(&self.ctx.storage, &path, &epochs.encode())
            .await
            .map_err(|e| Error::io("write", &path, e))?;
        *self.written_epochs.borrow_mut() = OnDisk::Written(epochs);
        Ok(())
    }

    /// Removes a state file the log no longer keeps (`keeps_state_files`), durably: a
    /// stale checkpoint that came back after a power cut could name a recovery point
    /// past what a truncation left.
    pub(super) async fn remove_state_file(&self, name: &str) -> Result<()> {
        let path = self.dir.join(name);
        match self.ctx.storage.remove_file(&path).await {
            Ok(()) => self.ctx.storage.sync_dir(&self.dir).await.map_err(|e| Error::io("sync", &self.dir, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("remove", &path, e)),
        }
    }

    /// `checkpoint` as housekeeping runs it every pass. A log that has just come to
    /// keep state files (grown past `CHECKPOINT_LOG_BYTES_MIN`) writes them first at a
    /// time within `STATE_FILES_SPREAD` set by its name, so that thousands of logs
    /// growing together do not create their files in the same pass (two atomic writes
    /// of two fsyncs each per log); until then a restart scans it, as a small log.
    ///
    /// # Errors
    /// As `checkpoint`.
    pub async fn checkpoint_when_due(&self, now: std::time::Instant) -> Result<()> {
        if self.keeps_state_files() && self.written_checkpoint.get() == OnDisk::Absent {
            let due = self.state_files_due.get().unwrap_or_else(|| {
                let spread = crate::limits::STATE_FILES_SPREAD.as_millis().max(1) as u64;
                let name = self.partition().to_string();
                let due = now + std::time::Duration::from_millis(u64::from(crc32c::crc32c(name.as_bytes())) % spread);
                self.state_files_due.set(Some(due));
                due
            });
            if now < due {
                return Ok(());
            }
        }
        self.checkpoint().await
    }

    /// Persists the recovery point (the flushed offset), log start and leader epochs.
    /// Called periodically by the log manager; a restart then scans less.
    ///
    /// # Errors
    /// `Io` when a checkpoint cannot be written.
    pub async fn checkpoint(&self) -> Result<()> {
        // Under the maintenance lock, as deletion and close: a closed log's directory
        // may be gone (renamed `-delete`), and nothing is written into it any more.
        let _maintenance = self.maintenance.lock().await;
        {
            let mut state = self.state.borrow_mut();
            if state.closed {
                return Ok(());
            }
            state.recovery_point = state.recovery_point.max(state.offset_flushed_end);
        }
        self.write_checkpoint(false).await?;
        self.write_epochs().await
    }
}
