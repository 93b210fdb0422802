//! Compaction (`cleanup.policy=compact`) as Kafka's log cleaner does it.
//!
//! - **When.** A log's dirty ratio is the share of its cleanable bytes past the
//!   cleaner's checkpoint (`first_dirty`). Only closed segments are cleanable, and with
//!   `min.compaction.lag.ms` only those whose newest record is older than the lag. The
//!   shard's cleaner (`LogManager::clean_dirtiest`) cleans the dirtiest log whose ratio
//!   reached `min.cleanable.dirty.ratio`, or whose oldest dirty record is older than
//!   `max.compaction.lag.ms`; a look that finds none cleans nothing.
//! - **Offset map.** The dirty section is read in `io_buffer_bytes` steps and every
//!   key's latest offset put in a fixed-size `OffsetMap`
//!   (`log.cleaner.dedupe.buffer.size`). When the map fills, the pass stops mapping
//!   there and cleans up to that offset; the next pass maps the rest.
//! - **Rewrite.** Each closed segment from the log start up to where the map ends is
//!   read again in steps: a record stays unless the map holds a later offset for its
//!   key, or it is a tombstone older than `delete.retention.ms`. A segment that loses
//!   records is written to `.log.cleaned` in steps, fdatasynced, and renamed through
//!   `.log.swap` over the original (recovery finishes an interrupted swap); one that
//!   keeps everything is not rewritten. Offsets never change.
//! - **Bounds.** Memory: the map, one read step and one write step (a batch larger
//!   than the step is read whole, up to `max.message.bytes`). I/O: reads plus writes
//!   are throttled to `log.cleaner.io.max.bytes.per.second`. The cleaner yields after
//!   every step and runs in a low-priority task queue, so requests go first.
//! - **Concurrency.** The maintenance lock is held only for each swap; a segment that
//!   retention, truncation or DeleteRecords changed meanwhile is left alone.

use std::time::{Duration, Instant};

use super::*;
use crate::offset_map::OffsetMap;
use crate::time::pace;

/// The cleaner's checkpoint in a partition directory: the first dirty offset.
pub const CLEANER_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";

/// Shard-wide settings of the log cleaner (broker configs).
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerConfig {
    /// `log.cleaner.dedupe.buffer.size`, this shard's share: the offset map's memory.
    pub dedupe_buffer_bytes: usize,
    /// `log.cleaner.io.buffer.size`: bytes read, and written, per step.
    pub io_buffer_bytes: usize,
    /// `log.cleaner.io.max.bytes.per.second`: reads plus writes; infinite for no limit.
    pub io_max_bytes_per_second: f64,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            dedupe_buffer_bytes: 128 << 20,
            io_buffer_bytes: 512 << 10,
            io_max_bytes_per_second: f64::INFINITY,
        }
    }
}

/// How much of a log awaits cleaning.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dirtiness {
    /// Dirty bytes over cleanable bytes.
    pub ratio: f64,
    pub dirty_bytes: u64,
    /// The oldest dirty record is older than `max.compaction.lag.ms`, or a tombstone
    /// the last pass kept is past `delete.retention.ms`.
    pub overdue: bool,
}

impl Dirtiness {
    /// Whether the cleaner should clean the log now.
    pub fn due(&self, config: &LogConfig) -> bool {
        self.overdue || (self.dirty_bytes > 0 && self.ratio >= config.min_cleanable_dirty_ratio)
    }
}

/// Keeps the cleaner's reads plus writes under a rate, and its CPU under half of the
/// shard's: after every step it sleeps at least as long as it ran.
///
/// A sleep, not a yield: a task that only yields stays runnable, and glommio then runs
/// it again without polling io_uring, so requests whose I/O completed meanwhile wait
/// for the 100 ms preemption timer (a 2 GB clean held produce p99 at 0.4 s).
pub(crate) struct Throttle {
    rate: f64,
    started: Instant,
    bytes: f64,
    resumed: Instant,
}

impl Throttle {
    pub(crate) fn new(rate: f64) -> Throttle {
        Throttle { rate, started: Instant::now(), bytes: 0.0, resumed: Instant::now() }
    }

    pub(crate) async fn account(&mut self, bytes: usize) {
        self.bytes += bytes as f64;
        let mut pause = self.resumed.elapsed();
        if self.rate.is_finite() && self.rate > 0.0 {
            let due = Duration::from_secs_f64(self.bytes / self.rate);
            pause = pause.max(due.saturating_sub(self.started.elapsed()));
        }
        pace(pause).await;
        self.resumed = Instant::now();
    }

    /// Between batches: pauses once the cleaner has run `SLICE` since it last paused,
    /// so a step of large batches does not hold the shard for a whole step.
    async fn tick(&mut self) {
        let ran = self.resumed.elapsed();
        if ran >= SLICE {
            pace(ran).await;
            self.resumed = Instant::now();
        }
    }
}

/// The longest the cleaner runs without pausing.
const SLICE: Duration = Duration::from_millis(1);

/// A closed segment read in steps of whole batches (a batch larger than a step is one
/// step), each step counted by the throttle.
struct Steps<F: StorageFile> {
    file: F,
    path: PathBuf,
    position: u64,
    size: u64,
    step: usize,
}

impl<F: StorageFile> Steps<F> {
    async fn next(&mut self, throttle: &mut Throttle) -> Result<Option<Vec<Batch>>> {
        if self.position >= self.size {
            return Ok(None);
        }
        let (batches, read) = segment::read_batches(
            &self.file,
            &self.path,
            self.position,
            self.size,
            Offset(0),
            Offset(i64::MAX),
            self.step,
            segment::Check::Crc,
        )
        .await?;
        if batches.is_empty() {
            return Ok(None);
        }
        self.position += batches.iter().map(|b| b.size() as u64).sum::<u64>();
        throttle.account(read as usize).await;
        Ok(Some(batches))
    }
}

/// Writes a cleaned segment in aligned steps (O_DIRECT), holding at most a step plus
/// one batch.
struct StepWriter<F: StorageFile> {
    file: F,
    path: PathBuf,
    step: usize,
    /// Bytes on disk so far (a multiple of the alignment).
    written: u64,
    pending: Vec<u8>,
}

impl<F: StorageFile> StepWriter<F> {
    async fn push(&mut self, bytes: &[u8], throttle: &mut Throttle) -> Result<()> {
        self.pending.extend_from_slice(bytes);
        if self.pending.len() >= self.step {
            let len = align_down(self.pending.len() as u64) as usize;
            self.write(len).await?;
            throttle.account(len).await;
        }
        Ok(())
    }

    /// Writes the first `len` pending bytes, padded to the alignment.
    async fn write(&mut self, len: usize) -> Result<()> {
        let padded = align_up(len as u64) as usize;
        if padded == 0 {
            return Ok(());
        }
        let mut buf = self.file.alloc_buf(padded);
        buf.as_bytes_mut()[..len].copy_from_slice(&self.pending[..len]);
        buf.as_bytes_mut()[len..].fill(0);
        let written = self.file.write_at(buf, self.written).await.map_err(|e| Error::io("write", &self.path, e))?;
        if written < padded {
            let short = std::io::Error::new(std::io::ErrorKind::WriteZero, format!("{written} of {padded} bytes"));
            return Err(Error::io("write", &self.path, short));
        }
        self.pending.drain(..len);
        self.written += padded as u64;
        Ok(())
    }

    /// Writes what is left, trims the padding and makes the file durable.
    async fn finish(mut self, size: u64) -> Result<()> {
        self.write(self.pending.len()).await?;
        self.file.truncate(size).await.map_err(|e| Error::io("truncate", &self.path, e))?;
        self.file.fdatasync().await.map_err(|e| Error::io("sync", &self.path, e))
    }
}

impl<S: Storage> Log<S> {
    /// How much of the log awaits cleaning; `None` when it is not compacted, its
    /// cleaner checkpoint is not loaded yet, or nothing is cleanable.
    pub fn dirtiness(&self, now: TimestampMs) -> Option<Dirtiness> {
        let state = self.state.borrow();
        let config = &state.config;
        if !config.cleanup_policy.compact {
            return None;
        }
        let first_dirty = self.first_dirty.get()?.max(state.log_start_offset);
        let end = first_uncleanable(&state, now);
        let tombstones_expired =
            self.oldest_tombstone.get().is_some_and(|t| t < now.saturating_sub(config.delete_retention_ms));
        if first_dirty >= end {
            return tombstones_expired.then_some(Dirtiness { ratio: 0.0, dirty_bytes: 0, overdue: true });
        }
        let (mut clean, mut dirty, mut oldest) = (0u64, 0u64, None);
        for seg in state.segments.values().take_while(|s| s.base_offset < end) {
            if seg.next_offset <= first_dirty {
                clean += seg.size;
            } else {
                dirty += seg.size;
                // The time index's first entry: the largest timestamp of the segment's
                // first indexed batch, as near to its oldest record as the log knows.
                let first = seg.time_index.first().map_or(seg.max_timestamp, |(t, _)| t);
                oldest = Some(oldest.map_or(first, |o: TimestampMs| o.min(first)));
            }
        }
        let overdue =
            tombstones_expired || oldest.is_some_and(|t| now.saturating_sub(t) > config.max_compaction_lag_ms);
        let total = clean + dirty;
        let ratio = if total == 0 { 0.0 } else { dirty as f64 / total as f64 };
        Some(Dirtiness { ratio, dirty_bytes: dirty, overdue })
    }

    /// Reads the cleaner's checkpoint once; a log without one is dirty from its start.
    pub async fn load_cleaner_checkpoint(&self) {
        if self.first_dirty.get().is_some() {
            return;
        }
        let path = self.dir.join(CLEANER_CHECKPOINT_FILE);
        let stored = match io::read_whole(&self.ctx.storage, &path).await {
            Ok(Some(bytes)) => decode_cleaner_checkpoint(&bytes),
            _ => None,
        };
        let end = self.log_end_offset();
        self.first_dirty.set(Some(stored.unwrap_or(Offset(0)).min(end)));
    }

    /// Forgets cleaning past `offset` (the log is truncated there), on disk too: what is
    /// appended there next is dirty, also after a restart.
    ///
    /// # Errors
    /// `Io` when the checkpoint cannot be written.
    pub(super) async fn cleaned_past(&self, offset: Offset) -> Result<()> {
        self.load_cleaner_checkpoint().await;
        if self.first_dirty.get().is_some_and(|first_dirty| first_dirty > offset) {
            self.write_cleaner_checkpoint(offset).await?;
        }
        Ok(())
    }

    async fn write_cleaner_checkpoint(&self, first_dirty: Offset) -> Result<()> {
        self.first_dirty.set(Some(first_dirty));
        let path = self.dir.join(CLEANER_CHECKPOINT_FILE);
        io::write_whole_atomic(&self.ctx.storage, &path, &encode_cleaner_checkpoint(first_dirty))
            .await
            .map_err(|e| Error::io("write", &path, e))
    }

    /// Cleans the log once with a default cleaner and a 16 MiB offset map, whatever its
    /// dirty ratio.
    ///
    /// # Errors
    /// As `clean`.
    pub async fn compact(&self, now: TimestampMs) -> Result<CompactionStats> {
        self.clean(now, &CleanerConfig::default(), &mut OffsetMap::with_memory(16 << 20)).await
    }

    /// One cleaning pass (see the module docs) with `map` (cleared first), whatever the
    /// dirty ratio. With nothing dirty it only removes tombstones past
    /// `delete.retention.ms`.
    ///
    /// # Errors
    /// `Corruption` for undecodable batches, `Io`.
    pub async fn clean(
        &self,
        now: TimestampMs,
        cleaner: &CleanerConfig,
        map: &mut OffsetMap,
    ) -> Result<CompactionStats> {
        let config = self.config();
        if !config.cleanup_policy.compact {
            return Ok(CompactionStats::default());
        }
        self.load_cleaner_checkpoint().await;
        // What transactions say: aborted records go, and nothing at or past the first
        // open transaction is cleaned (its fate is unknown).
        let transactions = self.transactions.borrow().clone();
        let aborted = transactions.as_ref().map(|t| t.aborted()).unwrap_or_default();
        let first_unstable = transactions.as_ref().and_then(|t| t.first_unstable());
        let (first_dirty, end) = {
            let state = self.state.borrow();
            let first_dirty = self.first_dirty.get().unwrap_or(Offset(0)).max(state.log_start_offset);
            let end = first_uncleanable(&state, now);
            (first_dirty, first_unstable.map_or(end, |unstable| end.min(unstable)))
        };
        let step = cleaner.io_buffer_bytes.max(crate::limits::DMA_ALIGNMENT);
        let mut throttle = Throttle::new(cleaner.io_max_bytes_per_second);
        map.clear();
        // With nothing dirty the map stays empty: a pass for expired tombstones only.
        let mapped_end = if first_dirty < end {
            let mapped_end = self.build_offset_map(map, &aborted, first_dirty, end, step, &mut throttle).await?;
            if mapped_end <= first_dirty {
                tracing::warn!(target: "skein::engine", partition = %self.partition, "log.cleaner.dedupe.buffer.size holds no key");
                return Ok(CompactionStats::default());
            }
            mapped_end
        } else {
            first_dirty
        };
        let segments: Vec<(Offset, Offset)> = {
            let state = self.state.borrow();
            let active = state.active().base_offset;
            state
                .segments
                .values()
                .filter(|s| s.base_offset < mapped_end.max(first_dirty) && s.base_offset < active)
                .map(|s| (s.base_offset, s.next_offset))
                .collect()
        };
        let rules = Rules {
            map,
            aborted: &aborted,
            tombstone_horizon: now.saturating_sub(config.delete_retention_ms),
            oldest_tombstone: Cell::new(None),
        };
        let mut stats = CompactionStats::default();
        for (base, next) in segments {
            self.clean_segment(base, next, &rules, step, &mut throttle, &mut stats).await?;
        }
        self.oldest_tombstone.set(rules.oldest_tombstone.get());
        if self.first_dirty.get() != Some(mapped_end) {
            self.write_cleaner_checkpoint(mapped_end).await?;
        }
        let metrics = &self.ctx.metrics;
        metrics.compacted_bytes_reclaimed.set(metrics.compacted_bytes_reclaimed.get() + stats.bytes_reclaimed);
        metrics.cleaner_passes.set(metrics.cleaner_passes.get() + 1);
        Ok(stats)
    }

    /// Puts the latest offset of every key in `[first_dirty, end)` into `map` until it
    /// is full; returns the offset mapping stopped at.
    async fn build_offset_map(
        &self,
        map: &mut OffsetMap,
        aborted: &[AbortedRange],
        first_dirty: Offset,
        end: Offset,
        step: usize,
        throttle: &mut Throttle,
    ) -> Result<Offset> {
        let segments: Vec<Offset> = {
            let state = self.state.borrow();
            state
                .segments
                .values()
                .filter(|s| s.next_offset > first_dirty && s.base_offset < end)
                .map(|s| s.base_offset)
                .collect()
        };
        for base in segments {
            let Some(mut steps) = self.steps(base, step) else { continue };
            while let Some(batches) = steps.next(throttle).await? {
                // Aborted records never supersede a committed value.
                let mapped = |b: &&Batch| !b.is_control() && b.last_offset() >= first_dirty && !is_aborted(aborted, b);
                for batch in batches.iter().filter(mapped) {
                    throttle.tick().await;
                    for record in self.decode(batch)? {
                        let offset = batch.base_offset().plus(record.offset_delta as i64);
                        let Some(key) = &record.key else { continue };
                        if offset < first_dirty {
                            continue;
                        }
                        if offset >= end || !map.put(key, offset) {
                            return Ok(offset.min(end));
                        }
                    }
                }
            }
        }
        Ok(end)
    }

    /// Closed segment `base` as steps of whole batches; `None` if it is gone.
    fn steps(&self, base: Offset, step: usize) -> Option<Steps<S::File>> {
        let (file, size) = self.state.borrow().segments.get(&base).map(|s| (s.file.clone(), s.size))?;
        let path = segment::file_path(&self.dir, base, segment::LOG_SUFFIX);
        Some(Steps { file, path, position: 0, size, step })
    }

    /// Cleans closed segment `base` by `rules`: counts what would go, and rewrites the
    /// segment only if something does.
    async fn clean_segment(
        &self,
        base: Offset,
        next: Offset,
        rules: &Rules<'_>,
        step: usize,
        throttle: &mut Throttle,
        stats: &mut CompactionStats,
    ) -> Result<()> {
        let Some(mut steps) = self.steps(base, step) else { return Ok(()) };
        let before = steps.size;
        let mut removed = 0u64;
        while let Some(batches) = steps.next(throttle).await? {
            for batch in batches.iter().filter(|b| !b.is_control()) {
                throttle.tick().await;
                removed += self.decode(batch)?.iter().filter(|r| !rules.keep(batch, r)).count() as u64;
            }
        }
        if removed == 0 {
            return Ok(());
        }
        let storage = &self.ctx.storage;
        let cleaned = segment::file_path(&self.dir, base, segment::CLEANED_SUFFIX);
        let file = storage.open_file(&cleaned, true).await.map_err(|e| Error::io("open", &cleaned, e))?;
        file.truncate(0).await.map_err(|e| Error::io("truncate", &cleaned, e))?;
        // Reserved at once (what it keeps is at most the segment): the writes then never
        // extend the file, each a journal update that O_DIRECT appends of other logs
        // would queue behind on ext4.
        file.allocate(align_up(before)).await.map_err(|e| Error::io("allocate", &cleaned, e))?;
        let mut writer = StepWriter { file, path: cleaned.clone(), step, written: 0, pending: Vec::new() };
        let mut metas = Vec::new();
        let mut size = 0u64;
        let Some(mut steps) = self.steps(base, step) else { return Ok(()) };
        while let Some(batches) = steps.next(throttle).await? {
            for batch in batches {
                throttle.tick().await;
                let kept = if batch.is_control() { Some(batch) } else { self.filter(&batch, rules)? };
                if let Some(kept) = kept {
                    metas.push(BatchMeta::of(&kept, size));
                    size += kept.size() as u64;
                    writer.push(&kept.bytes(), throttle).await?;
                }
            }
        }
        writer.finish(size).await?;
        self.swap_in(base, next, before, &cleaned, &metas).await?;
        stats.segments_rewritten += 1;
        stats.records_removed += removed;
        stats.bytes_reclaimed += before.saturating_sub(size);
        Ok(())
    }

    /// `batch` with only the records `rules` keep; `None` when none stays.
    fn filter(&self, batch: &Batch, rules: &Rules<'_>) -> Result<Option<Batch>> {
        let filtered =
            crate::records::filter_batch(&batch.bytes(), DECOMPRESSED_BATCH_BYTES_MAX, |r| rules.keep(batch, r))
                .map_err(|e| Error::Corruption {
                    path: self.dir.clone(),
                    position: 0,
                    reason: format!("compacting offset {}: {e}", batch.base_offset()),
                })?;
        Ok(filtered.map(|bytes| Batch::validate(bytes.into(), crate::limits::BATCH_BYTES_MAX)).transpose()?)
    }

    /// Swaps a durable `.log.cleaned` file in for closed segment `base`, unless the
    /// segment changed since it was read (then the cleaned file is dropped).
    async fn swap_in(&self, base: Offset, next: Offset, size: u64, cleaned: &Path, metas: &[BatchMeta]) -> Result<()> {
        let _maintenance = self.maintenance.lock().await;
        self.sealed().await?;
        let unchanged = {
            let state = self.state.borrow();
            let active = state.active().base_offset;
            base < active && state.segments.get(&base).is_some_and(|s| s.size == size && s.next_offset == next)
        };
        let storage = &self.ctx.storage;
        if !unchanged {
            storage.remove_file(cleaned).await.map_err(|e| Error::io("remove", cleaned, e))?;
            return Ok(());
        }
        let swap = segment::file_path(&self.dir, base, segment::SWAP_SUFFIX);
        let target = segment::file_path(&self.dir, base, segment::LOG_SUFFIX);
        storage.rename(cleaned, &swap).await.map_err(|e| Error::io("rename", &swap, e))?;
        storage.sync_dir(&self.dir).await.map_err(|e| Error::io("sync", &self.dir, e))?;
        storage.rename(&swap, &target).await.map_err(|e| Error::io("rename", &target, e))?;
        storage.sync_dir(&self.dir).await.map_err(|e| Error::io("sync", &self.dir, e))?;
        let file = storage.open_file(&target, false).await.map_err(|e| Error::io("open", &target, e))?;
        let config = self.config();
        let mut seg = Segment::new(base, file);
        for meta in metas {
            seg.record(*meta, &config);
        }
        seg.seal_time_index();
        seg.next_offset = next;
        seg.indexes_dirty = true;
        self.state.borrow_mut().segments.insert(base, seg);
        self.ctx.cache.borrow_mut().invalidate(self.key, base, next);
        self.write_indexes(base).await
    }
}

/// What the log must know of its transactions, told by the layer that tracks them
/// (Kafka's cleaner reads the producer state and the `.txnindex`): the aborted
/// transactions, whose records the cleaner removes and which each segment's
/// `.txnindex` lists, and the first offset of a transaction still open, at or past
/// which the cleaner cleans nothing. Markers themselves are kept.
pub trait Transactions {
    fn aborted(&self) -> Vec<AbortedRange>;
    fn first_unstable(&self) -> Option<Offset>;
}

/// Whether `batch` holds records of an aborted transaction.
fn is_aborted(aborted: &[AbortedRange], batch: &Batch) -> bool {
    batch.is_transactional()
        && !batch.is_control()
        && aborted.iter().any(|t| {
            t.producer_id == batch.producer_id()
                && t.first_offset <= batch.base_offset()
                && batch.base_offset() <= t.last_offset
        })
}

/// What a cleaning pass keeps.
struct Rules<'a> {
    map: &'a OffsetMap,
    aborted: &'a [AbortedRange],
    tombstone_horizon: TimestampMs,
    /// The oldest tombstone kept, so the cleaner knows when it expires.
    oldest_tombstone: Cell<Option<TimestampMs>>,
}

impl Rules<'_> {
    /// A record stays unless its key has a later offset, or it is an expired tombstone.
    fn keep(&self, batch: &Batch, record: &crate::records::Record) -> bool {
        if is_aborted(self.aborted, batch) {
            return false;
        }
        let Some(key) = &record.key else { return true };
        let offset = batch.base_offset().plus(record.offset_delta as i64);
        if self.map.get(key).is_some_and(|latest| latest > offset) {
            return false;
        }
        if record.value.is_none() {
            let timestamp = batch.base_timestamp() + record.timestamp_delta;
            if timestamp < self.tombstone_horizon {
                return false;
            }
            let oldest = self.oldest_tombstone.get().map_or(timestamp, |t| t.min(timestamp));
            self.oldest_tombstone.set(Some(oldest));
        }
        true
    }
}

/// The first offset the cleaner may not touch: the active segment's base, or the
/// first segment holding a record younger than `min.compaction.lag.ms`.
fn first_uncleanable<F: StorageFile>(state: &LogState<F>, now: TimestampMs) -> Offset {
    let active = state.active().base_offset;
    let lag = state.config.min_compaction_lag_ms;
    if lag <= 0 {
        return active;
    }
    let horizon = now.saturating_sub(lag);
    state
        .segments
        .values()
        .take_while(|s| s.base_offset < active)
        .find(|s| s.max_timestamp > horizon)
        .map_or(active, |s| s.base_offset)
}

fn encode_cleaner_checkpoint(first_dirty: Offset) -> Vec<u8> {
    let body = format!("version 0\nfirst_dirty_offset {}\n", first_dirty.0);
    let crc = crc32c::crc32c(body.as_bytes());
    format!("{body}crc {crc}\n").into_bytes()
}

/// The first dirty offset a checkpoint holds; `None` when it is damaged.
fn decode_cleaner_checkpoint(bytes: &[u8]) -> Option<Offset> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (body, crc_line) = text.trim_end_matches('\n').rsplit_once('\n')?;
    let body = format!("{body}\n");
    if crc_line.strip_prefix("crc ")?.parse::<u32>().ok()? != crc32c::crc32c(body.as_bytes()) {
        return None;
    }
    let mut lines = body.lines();
    (lines.next()? == "version 0").then_some(())?;
    Some(Offset(lines.next()?.strip_prefix("first_dirty_offset ")?.parse().ok()?))
}
