//! Compaction (`cleanup.policy=compact`): the last record per key is kept, tombstones
//! until `delete.retention.ms`; the cleaned segment replaces the old one through
//! `.cleaned` and `.swap` files, so a crash leaves one or the other.

use super::*;

impl<S: Storage> Log<S> {
    /// Compacts closed segments (`cleanup.policy=compact`): keeps the latest record of
    /// each key, drops tombstones older than `delete.retention.ms`, preserves offsets.
    /// Segments are rewritten to `.log.cleaned`, then renamed over the original through
    /// `.log.swap`, so a crash leaves either the old or the new segment.
    ///
    /// # Errors
    /// `Corruption` for undecodable batches, `Io`.
    pub async fn compact(&self, now: TimestampMs) -> Result<CompactionStats> {
        let _maintenance = self.maintenance.lock().await;
        let config = self.config();
        if !config.cleanup_policy.compact {
            return Ok(CompactionStats::default());
        }
        let closed: Vec<(Offset, Offset)> = {
            let state = self.state.borrow();
            let all: Vec<_> = state.segments.values().map(|s| (s.base_offset, s.next_offset)).collect();
            all[..all.len() - 1].to_vec()
        };
        if closed.is_empty() {
            return Ok(CompactionStats::default());
        }
        // Pass 1: the latest offset of every key in the closed segments.
        let mut latest: std::collections::HashMap<bytes::Bytes, Offset> = std::collections::HashMap::new();
        for &(base, _) in &closed {
            for batch in self.segment_batches(base).await? {
                if batch.is_control() {
                    continue;
                }
                for record in self.decode(&batch)? {
                    if let Some(key) = record.key {
                        latest.insert(key, batch.base_offset().plus(record.offset_delta as i64));
                    }
                }
            }
        }
        // Pass 2: rewrite each segment that loses records.
        let mut stats = CompactionStats::default();
        let tombstone_horizon = now - config.delete_retention_ms;
        for &(base, next) in &closed {
            let batches = self.segment_batches(base).await?;
            let mut kept = Vec::with_capacity(batches.len());
            let mut removed = 0u64;
            for batch in batches {
                if batch.is_control() {
                    kept.push(batch);
                    continue;
                }
                let (base_offset, base_ts) = (batch.base_offset(), batch.base_timestamp());
                let filtered = crate::records::filter_batch(batch.bytes(), DECOMPRESSED_BATCH_BYTES_MAX, |record| {
                    let offset = base_offset.plus(record.offset_delta as i64);
                    let Some(key) = &record.key else { return true };
                    let is_latest = latest.get(key) == Some(&offset);
                    let expired_tombstone =
                        record.value.is_none() && base_ts + record.timestamp_delta < tombstone_horizon;
                    let keep = is_latest && !expired_tombstone;
                    removed += u64::from(!keep);
                    keep
                })
                .map_err(|e| Error::Corruption {
                    path: self.dir.clone(),
                    position: 0,
                    reason: format!("compacting offset {base_offset}: {e}"),
                })?;
                if let Some(bytes) = filtered {
                    kept.push(Batch::validate(bytes.into(), crate::limits::BATCH_BYTES_MAX)?);
                }
            }
            if removed == 0 {
                continue;
            }
            let before = self.state.borrow().segments.get(&base).map_or(0, |s| s.size);
            self.replace_segment(base, next, &kept).await?;
            stats.segments_rewritten += 1;
            stats.records_removed += removed;
            stats.bytes_reclaimed += before - kept.iter().map(|b| b.size() as u64).sum::<u64>();
            self.ctx.cache.borrow_mut().invalidate(self.key, base, next);
        }
        let metrics = &self.ctx.metrics;
        metrics.compacted_bytes_reclaimed.set(metrics.compacted_bytes_reclaimed.get() + stats.bytes_reclaimed);
        Ok(stats)
    }

    /// Every batch of a closed segment.
    pub(super) async fn segment_batches(&self, base: Offset) -> Result<Vec<Batch>> {
        let (file, size) = {
            let state = self.state.borrow();
            let seg = &state.segments[&base];
            (seg.file.clone(), seg.size)
        };
        let path = segment::file_path(&self.dir, base, segment::LOG_SUFFIX);
        let (batches, _) = segment::read_batches(&file, &path, 0, size, base, Offset(i64::MAX), usize::MAX).await?;
        Ok(batches)
    }

    /// Writes `batches` as the new content of closed segment `base` and swaps it in.
    pub(super) async fn replace_segment(&self, base: Offset, next_offset: Offset, batches: &[Batch]) -> Result<()> {
        let storage = &self.ctx.storage;
        let cleaned = segment::file_path(&self.dir, base, segment::CLEANED_SUFFIX);
        let swap = segment::file_path(&self.dir, base, segment::SWAP_SUFFIX);
        let target = segment::file_path(&self.dir, base, segment::LOG_SUFFIX);
        let data = segment::concat(batches);
        io::write_whole_atomic(storage, &cleaned, &data).await.map_err(|e| Error::io("write", &cleaned, e))?;
        storage.rename(&cleaned, &swap).await.map_err(|e| Error::io("rename", &swap, e))?;
        storage.sync_dir(&self.dir).await.map_err(|e| Error::io("sync", &self.dir, e))?;
        storage.rename(&swap, &target).await.map_err(|e| Error::io("rename", &target, e))?;
        storage.sync_dir(&self.dir).await.map_err(|e| Error::io("sync", &self.dir, e))?;
        let file = storage.open_file(&target, false).await.map_err(|e| Error::io("open", &target, e))?;
        let config = self.config();
        let mut seg = Segment::new(base, file);
        let mut position = 0;
        for batch in batches {
            seg.record(BatchMeta::of(batch, position), &config);
            position += batch.size() as u64;
        }
        seg.seal_time_index();
        seg.next_offset = next_offset;
        seg.indexes_dirty = true;
        self.state.borrow_mut().segments.insert(base, seg);
        self.write_indexes(base).await
    }
}
