//! Reads: batches by offset (the shard's cache, else the segment files, framed but not
//! CRC-checked again: `log/scrub.rs` checks data at rest), the file range for zero-copy
//! sends, and offsets by timestamp (ListOffsets).

use super::*;

impl<S: Storage> Log<S> {
    /// Batches from the one holding `offset`, up to `max_bytes` (the first whole even if
    /// larger), with base offsets below `end` when given (e.g. the high watermark).
    /// Recent batches come from the shard's cache; others from disk, whose CRCs were
    /// checked when they entered the log.
    ///
    /// # Errors
    /// `OffsetOutOfRange` outside `[log_start_offset, log_end_offset]`; `Corruption`
    /// when a stored batch is not framed as one, or overlaps a range the scrubber found
    /// corrupt; `Io`.
    pub async fn read(&self, offset: Offset, max_bytes: usize, end: Option<Offset>) -> Result<Vec<Batch>> {
        if let Some(answer) = self.read_now(offset, max_bytes, end) {
            return answer;
        }
        let bound = {
            let state = self.state.borrow();
            end.map_or(state.offset_written_end, |e| e.min(state.offset_written_end))
        };
        let metrics = &self.ctx.metrics;
        if self.await_read_ahead(offset).await {
            // Bound first: the cache's borrow must end before `cache_hit` looks again.
            let cached = self.ctx.cache.borrow_mut().read(self.key, offset, bound, max_bytes);
            if let Some(batches) = cached {
                return self.cache_hit(offset, batches);
            }
        }
        metrics.disk_reads.set(metrics.disk_reads.get() + 1);
        let mut from = offset;
        loop {
            let Some(range) = self.locate(from) else { return Ok(Vec::new()) };
            let (batches, bytes_read) = segment::read_batches(
                &range.file,
                &range.path,
                range.position,
                range.position + range.len,
                offset,
                bound,
                max_bytes,
                segment::Check::Frame,
            )
            .await
            .inspect_err(|e| {
                if matches!(e, Error::Corruption { .. }) {
                    metrics.corruptions.set(metrics.corruptions.get() + 1);
                }
            })
            .map_err(|e| self.gone_below_start(offset, e))?;
            // Served from the buffer the device wrote into: no copy (`io/dma.rs`).
            metrics.disk_read_bytes.set(metrics.disk_read_bytes.get() + bytes_read);
            if let Some(last) = batches.last() {
                self.check_fenced(&batches)?;
                self.start_read_ahead(last.next_offset());
                return Ok(batches);
            }
            // Nothing at or after `from` in this segment (compaction can empty a tail):
            // continue with the next segment.
            let next = {
                let state = self.state.borrow();
                state.segments.range(from.plus(1)..).next().map(|(base, _)| *base)
            };
            match next {
                Some(next) if next < bound => from = next,
                _ => return Ok(Vec::new()),
            }
        }
    }

    /// A read's error, or `OffsetOutOfRange` when the segment it read was deleted
    /// under it (retention moved the log start past `offset`): a closed descriptor
    /// is opened again by name, and a deleted file has none.
    fn gone_below_start(&self, offset: Offset, e: Error) -> Error {
        let (start, end) = {
            let state = self.state.borrow();
            (state.log_start_offset, state.log_end_offset)
        };
        match &e {
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound && offset < start => {
                Error::OffsetOutOfRange { offset, start, end }
            }
            _ => e,
        }
    }

    /// `read`, where it needs no I/O: an offset out of range, nothing below `end`, or
    /// batches in the shard's cache. `None`: the batches are on disk only, or a
    /// read-ahead is bringing them in (`read` waits for it).
    ///
    /// # Errors
    /// As `read`.
    pub fn read_now(&self, offset: Offset, max_bytes: usize, end: Option<Offset>) -> Option<Result<Vec<Batch>>> {
        let (bound, start, log_end) = {
            let state = self.state.borrow();
            let bound = end.map_or(state.offset_written_end, |e| e.min(state.offset_written_end));
            (bound, state.log_start_offset, state.log_end_offset)
        };
        if offset < start || offset > log_end {
            return Some(Err(Error::OffsetOutOfRange { offset, start, end: log_end }));
        }
        if offset >= bound {
            return Some(Ok(Vec::new()));
        }
        let batches = self.ctx.cache.borrow_mut().read(self.key, offset, bound, max_bytes)?;
        Some(self.cache_hit(offset, batches))
    }

    /// Batches `read` found in the cache, from `offset`.
    fn cache_hit(&self, offset: Offset, batches: Vec<Batch>) -> Result<Vec<Batch>> {
        let metrics = &self.ctx.metrics;
        metrics.cache_reads.set(metrics.cache_reads.get() + 1);
        self.check_fenced(&batches)?;
        self.follow_read_ahead(offset);
        Ok(batches)
    }

    /// The file range from the batch holding `offset` (located by the offset index) to
    /// the written end of its segment: the interface for zero-copy file-to-socket sends.
    /// The caller sends whole batches from `position`, skipping those below `offset`.
    pub fn locate(&self, offset: Offset) -> Option<FileRange<S::File>> {
        let state = self.state.borrow();
        let (&base, seg) = state.segments.range(..=offset).next_back()?;
        let is_active = base == *state.segments.keys().next_back().expect("active");
        let limit = if is_active { state.appender.written() } else { seg.size };
        let position = seg.offset_index.lookup(seg.relative(offset)) as u64;
        Some(FileRange {
            file: seg.file.clone(),
            path: segment::file_path(&self.dir, base, segment::LOG_SUFFIX),
            position,
            len: limit.saturating_sub(position),
        })
    }

    /// The first offset whose record timestamp is >= `timestamp`, with that timestamp
    /// (ListOffsets by time). `None` when every record is older.
    ///
    /// # Errors
    /// `Corruption` or `Io` from reading; a batch that cannot be decoded is corruption.
    pub async fn offset_for_timestamp(&self, timestamp: TimestampMs) -> Result<Option<(Offset, TimestampMs)>> {
        let start = {
            let state = self.state.borrow();
            let seg = state.segments.values().find(|s| s.max_timestamp >= timestamp);
            match seg {
                None => return Ok(None),
                Some(seg) => seg.base_offset.plus(seg.time_index.lookup(timestamp) as i64).max(state.log_start_offset),
            }
        };
        let mut from = start;
        loop {
            let batches = self.read(from, 1 << 20, None).await?;
            let Some(last) = batches.last() else { return Ok(None) };
            from = last.next_offset();
            for batch in batches.iter().filter(|b| b.max_timestamp() >= timestamp) {
                if batch.is_log_append_time() {
                    return Ok(Some((batch.base_offset().max(start), batch.max_timestamp())));
                }
                for record in self.decode(batch)? {
                    let ts = batch.base_timestamp() + record.timestamp_delta;
                    let offset = batch.base_offset().plus(record.offset_delta as i64);
                    if ts >= timestamp && offset >= start {
                        return Ok(Some((offset, ts)));
                    }
                }
            }
        }
    }

    /// The offset and timestamp of the record with the largest timestamp (ListOffsets
    /// MAX_TIMESTAMP, KIP-734); the earliest such record when several share it.
    ///
    /// # Errors
    /// As `offset_for_timestamp`.
    pub async fn max_timestamp_offset(&self) -> Result<Option<(Offset, TimestampMs)>> {
        let max = {
            let state = self.state.borrow();
            state.segments.values().map(|s| s.max_timestamp).max().unwrap_or(-1)
        };
        if max < 0 {
            return Ok(None);
        }
        self.offset_for_timestamp(max).await
    }

    /// The records of `batch`; one that cannot be decoded is corruption of this log.
    pub(super) fn decode(&self, batch: &Batch) -> Result<Vec<crate::records::Record>> {
        crate::records::decode_records(&batch.bytes(), DECOMPRESSED_BATCH_BYTES_MAX).map_err(|e| Error::Corruption {
            path: self.dir.clone(),
            position: batch.base_offset().0 as u64,
            reason: format!("undecodable batch at offset {}: {e}", batch.base_offset()),
        })
    }
}
