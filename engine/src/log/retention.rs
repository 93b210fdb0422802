//! Retention by `retention.ms` and `retention.bytes`: whole closed segments go.

use super::*;

impl<S: Storage> Log<S> {
    /// Applies `retention.ms` and `retention.bytes` to closed segments, oldest first, as
    /// Kafka does: deletion stops at the first segment that must stay. Returns the
    /// number of segments deleted.
    ///
    /// # Errors
    /// `Io` when a file cannot be removed.
    pub async fn apply_retention(&self, now: TimestampMs) -> Result<usize> {
        let _maintenance = self.maintenance.lock().await;
        // Segments are removed only once sealed: a seal writes into them.
        self.sealed().await?;
        let config = self.config();
        if !config.cleanup_policy.delete {
            return Ok(0);
        }
        let mut remaining = self.size_bytes() as i64;
        let deleted = self
            .delete_segments_where(|seg, _| {
                let by_time = config.retention_ms >= 0 && seg.max_timestamp < now - config.retention_ms;
                let by_size = config.retention_bytes >= 0 && remaining - seg.size as i64 >= config.retention_bytes;
                if by_time || by_size {
                    remaining -= seg.size as i64;
                }
                by_time || by_size
            })
            .await?;
        if deleted > 0 {
            self.write_checkpoint(false).await?;
        }
        Ok(deleted)
    }

    /// Deletes the longest prefix of closed segments for which `doomed` holds; it is
    /// given each segment and the base offset of the segment after it (the segment's
    /// true end: compaction may have emptied its tail).
    pub(super) async fn delete_segments_where(
        &self,
        mut doomed: impl FnMut(&Segment<S::File>, Offset) -> bool,
    ) -> Result<usize> {
        let victims: Vec<(Offset, Offset)> = {
            let mut state = self.state.borrow_mut();
            let bases: Vec<Offset> = state.segments.keys().copied().collect();
            let mut victims = Vec::new();
            for pair in bases.windows(2) {
                let (base, next_base) = (pair[0], pair[1]);
                if !doomed(&state.segments[&base], next_base) {
                    break;
                }
                victims.push((base, next_base));
            }
            for (base, next_base) in &victims {
                state.segments.remove(base);
                state.log_start_offset = state.log_start_offset.max(*next_base);
                self.ctx.cache.borrow_mut().invalidate(self.key, *base, *next_base);
            }
            victims
        };
        if !victims.is_empty() {
            self.stamp.bump();
        }
        for (base, _) in &victims {
            remove_segment_files(&self.ctx.storage, &self.dir, *base).await?;
        }
        if !victims.is_empty() {
            self.ctx.storage.sync_dir(&self.dir).await.map_err(|e| Error::io("sync", &self.dir, e))?;
            let metrics = &self.ctx.metrics;
            metrics.segments_deleted.set(metrics.segments_deleted.get() + victims.len() as u64);
        }
        Ok(victims.len())
    }
}

pub(super) async fn remove_segment_files<S: Storage>(storage: &S, dir: &Path, base: Offset) -> Result<()> {
    for suffix in [segment::LOG_SUFFIX, segment::INDEX_SUFFIX, segment::TIME_INDEX_SUFFIX, segment::TXN_INDEX_SUFFIX] {
        let path = segment::file_path(dir, base, suffix);
        match storage.remove_file(&path).await {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove", &path, e)),
        }
    }
    Ok(())
}
