//! A partition log: an ordered set of segments, the last one active.
//!
//! # Offsets and what they promise
//!
//! - `log_start_offset`: the first offset a reader may ask for.
//! - `log_end_offset`: the next offset to assign; batches below it are in the tail
//!   buffer or on disk.
//! - `offset_written_end`: every batch below it is written (O_DIRECT: out of the page
//!   cache, on the device). Readers see only what lies below it.
//! - `offset_flushed_end`: every batch below it was fdatasynced.
//! - the recovery point (persisted in the checkpoint): a flushed offset; recovery scans
//!   from the segment that holds it.
//!
//! # Appends
//!
//! An append is admitted in the order its future was first polled: a FIFO `Gate`
//! hands out tickets, and only the head of the queue is admitted. Admission is
//! synchronous when the tail buffer has room and the file has reserved space;
//! otherwise the head rolls the segment, reserves space (fallocate) or waits for
//! writes, while later appends queue behind it. After admission the append waits until
//! its bytes are written, helping to submit writes (`drive_until`): there is no writer
//! task, whoever waits drives the appender, and whatever accumulated meanwhile goes out
//! in the next write (group commit). With `flush.messages`, it then waits for an
//! fdatasync that started after its write completed; concurrent appenders share one.
//!
//! # Recovery policy
//!
//! On open, segments from the one holding the recovery point onward are scanned and
//! every batch validated (length, CRC, growing offsets). The log is truncated at the
//! first invalid batch: that is a torn or unfinished write from a crash, and no
//! acknowledged data lies beyond a flushed offset. Below the recovery point data was
//! fdatasynced and must be intact: invalid data there is *corruption*, reported as
//! `Error::Corruption` (and counted in `EngineMetrics::corruptions`), never silently
//! cut away. A missing or damaged index is rebuilt from its segment; a clean shutdown
//! (checkpoint flag) skips the scans.
//!
//! # Failures
//!
//! A failed write or fdatasync leaves the file in an unknown state: the log is marked
//! failed, every waiting and later append fails with `LogFailed`, and nothing is
//! retried as if it had succeeded. Reopening the log runs recovery. A full disk is
//! detected before data is buffered (space is reserved first), so it fails the append
//! with the retriable `DiskFull` and leaves the log healthy.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::batch::Batch;
use crate::cache::{BatchCache, LogKey};
use crate::checkpoint::{Checkpoint, LeaderEpochCache, CHECKPOINT_FILE, LEADER_EPOCH_FILE};
use crate::config::LogConfig;
use crate::error::{Error, Result};
use crate::index::{OffsetIndex, TimeIndex};
use crate::io::{self, align_down, align_up, IoBuf, Storage, StorageFile};
use crate::limits::{DECOMPRESSED_BATCH_BYTES_MAX, RESERVATION_STEP_BYTES};
use crate::metrics::EngineMetrics;
use crate::segment::{self, BatchMeta, Segment};
use crate::types::{LeaderEpoch, Offset, TimestampMs, TopicPartition};
use crate::waiters::Waiters;

/// Free space kept back when reserving, so that checkpoints and indexes can still be
/// written on a disk that appends have filled.
const DISK_HEADROOM_BYTES: u64 = 16 << 20;

/// How an append assigns offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendMode {
    /// The leader assigns the next offsets and stamps its epoch.
    Leader { epoch: LeaderEpoch },
    /// A follower appends the leader's batches with their offsets and epochs.
    Replica,
}

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: Offset,
    pub last_offset: Offset,
    pub max_timestamp: TimestampMs,
    pub log_start_offset: Offset,
}

/// A byte range of a segment file holding whole batches, for zero-copy sends
/// (sendfile/splice from the file to a socket).
pub struct FileRange<F> {
    pub file: F,
    pub path: PathBuf,
    pub position: u64,
    pub len: u64,
}

/// What compaction did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CompactionStats {
    pub segments_rewritten: usize,
    pub records_removed: u64,
    pub bytes_reclaimed: u64,
}

/// Shard-wide things every log uses.
pub struct LogContext<S> {
    pub storage: S,
    pub cache: Rc<RefCell<BatchCache>>,
    pub metrics: Rc<EngineMetrics>,
}

impl<S: Clone> Clone for LogContext<S> {
    fn clone(&self) -> Self {
        LogContext { storage: self.storage.clone(), cache: self.cache.clone(), metrics: self.metrics.clone() }
    }
}

pub struct Log<S: Storage> {
    partition: TopicPartition,
    dir: PathBuf,
    key: LogKey,
    ctx: LogContext<S>,
    state: RefCell<LogState<S::File>>,
    gate: Gate,
    /// Tasks waiting for `offset_written_end` (keyed by the offset they need), or for
    /// room in the tail buffer or drained writes (keyed `i64::MIN`: any progress).
    written_waiters: Waiters,
    /// Tasks waiting for `offset_flushed_end`, keyed by the offset they need.
    sync_waiters: Waiters,
    /// Readers waiting for data past an offset (long-polling fetches), keyed by the
    /// `offset_written_end` they need. Kept apart from `written_waiters`: a reader
    /// never drives writes, so it must not receive a hand-off.
    readers: Waiters,
    /// Serialises whole-segment maintenance (retention, compaction, truncation).
    maintenance: async_lock::Mutex<()>,
    /// What the checkpoint and epoch files hold now, so unchanged state is not
    /// rewritten (each write is a temp file, two fsyncs and a rename).
    written_checkpoint: Cell<Option<Checkpoint>>,
    written_epochs: RefCell<Option<Vec<u8>>>,
}

struct Pending {
    end_position: u64,
    batch: Batch,
}

struct LogState<F: StorageFile> {
    config: LogConfig,
    segments: BTreeMap<Offset, Segment<F>>,
    appender: crate::appender::Appender<F>,
    /// Batches admitted to the active segment whose bytes are not yet written.
    pending: VecDeque<Pending>,
    log_start_offset: Offset,
    log_end_offset: Offset,
    offset_written_end: Offset,
    offset_flushed_end: Offset,
    recovery_point: Offset,
    unflushed_records: u64,
    last_flush_ms: i64,
    sync_in_flight: bool,
    /// A reservation ahead of need is in flight.
    reserving: bool,
    epochs: LeaderEpochCache,
    failed: Option<String>,
    closed: bool,
}

impl<F: StorageFile> LogState<F> {
    fn active(&self) -> &Segment<F> {
        self.segments.values().next_back().expect("a log always has an active segment")
    }

    fn active_mut(&mut self) -> &mut Segment<F> {
        self.segments.values_mut().next_back().expect("a log always has an active segment")
    }

    fn size_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.size).sum()
    }
}

enum Admission {
    /// In the tail buffer; whether to flush, and a reservation to extend ahead of need.
    Admitted(AppendInfo, bool, Option<u64>),
    Roll,
    Reserve(u64),
    WaitForRoom(usize),
}

impl<S: Storage> Log<S> {
    /// Opens the log in `dir`, creating it if needed, and recovers it (see the module
    /// docs for the policy).
    ///
    /// # Errors
    /// `Corruption` for invalid data below the recovery point, `Io` when the disk
    /// fails, `InvalidConfig` for a bad config.
    pub async fn open(
        ctx: LogContext<S>,
        dir: PathBuf,
        partition: TopicPartition,
        key: LogKey,
        config: LogConfig,
    ) -> Result<Rc<Log<S>>> {
        config.validate()?;
        let storage = &ctx.storage;
        storage.create_dir_all(&dir).await.map_err(|e| Error::io("create", &dir, e))?;
        finish_interrupted_swaps(storage, &dir).await?;
        let names = storage.list_dir(&dir).map_err(|e| Error::io("list", &dir, e))?;
        let mut bases: Vec<Offset> =
            names.iter().filter_map(|n| segment::parse_file_name(n, segment::LOG_SUFFIX)).collect();
        bases.sort();

        let checkpoint = io::read_whole(storage, &dir.join(CHECKPOINT_FILE))
            .await
            .map_err(|e| Error::io("read", dir.join(CHECKPOINT_FILE), e))?
            .and_then(|b| Checkpoint::decode(&b));
        let mut epochs = io::read_whole(storage, &dir.join(LEADER_EPOCH_FILE))
            .await
            .map_err(|e| Error::io("read", dir.join(LEADER_EPOCH_FILE), e))?
            .and_then(|b| LeaderEpochCache::decode(&b))
            .unwrap_or_default();
        let clean = checkpoint.is_some_and(|c| c.clean_shutdown);
        let recovery_point = checkpoint.map_or(Offset::ZERO, |c| c.recovery_point);
        let mut log_start_offset = checkpoint.map_or(Offset::ZERO, |c| c.log_start_offset);
        // Scans start at the segment holding the recovery point.
        let scan_from = bases.iter().copied().rfind(|&b| b <= recovery_point).unwrap_or(Offset::ZERO);

        let started = std::time::Instant::now();
        let mut segments = BTreeMap::new();
        let mut truncated_at = None;
        for (i, &base) in bases.iter().enumerate() {
            let path = segment::file_path(&dir, base, segment::LOG_SUFFIX);
            if truncated_at.is_some() {
                // Everything after a truncation point is gone, as Kafka's recovery does.
                remove_segment_files(storage, &dir, base).await?;
                continue;
            }
            let file = storage.open_file(&path, false).await.map_err(|e| Error::io("open", &path, e))?;
            let file_len = file.size().await.map_err(|e| Error::io("stat", &path, e))?;
            let mut seg = Segment::new(base, file.clone());
            let trusted = clean || base < scan_from;
            if trusted && load_indexes(storage, &dir, &mut seg, file_len).await? {
                // Indexes loaded; the tail after the last entry is checked below.
                let (_, position) = seg.offset_index.last().expect("load_indexes wants entries");
                let tail = segment::scan(&file, position as u64, base, file_len)
                    .await
                    .map_err(|e| Error::io("read", &path, e))?;
                EngineMetrics::add(&ctx.metrics.recovery_scanned_bytes, tail.valid_bytes - position as u64);
                let first_ok = tail.batches.first().is_some_and(|m| {
                    Some(m.last_offset) == seg.offset_index.last().map(|(rel, _)| base.plus(rel as i64))
                });
                if tail.stopped.is_none() && first_ok {
                    seg.resume(&tail.batches);
                    for (epoch, start) in tail.epochs {
                        epochs.assign(epoch, start);
                    }
                    segments.insert(base, seg);
                    continue;
                }
                seg = Segment::new(base, file.clone());
            }
            // Full scan: rebuild indexes, and for untrusted segments find the valid end.
            let scan = segment::scan(&file, 0, base, file_len).await.map_err(|e| Error::io("read", &path, e))?;
            EngineMetrics::add(&ctx.metrics.recovery_scanned_bytes, scan.valid_bytes);
            for meta in &scan.batches {
                seg.record(*meta, &config);
            }
            seg.indexes_dirty = true;
            for (epoch, start) in &scan.epochs {
                epochs.assign(*epoch, *start);
            }
            if let Some((position, reason)) = scan.stopped {
                let is_last = i + 1 == bases.len();
                let below_recovery_point = seg.next_offset < recovery_point;
                // Trailing zeros of the active segment's reservation are not damage.
                let zeros = is_last && is_zero_tail(&file, position, file_len).await;
                if trusted || below_recovery_point {
                    ctx.metrics.corruptions.set(ctx.metrics.corruptions.get() + 1);
                    return Err(Error::Corruption { path, position, reason });
                }
                if !zeros {
                    tracing::warn!(target: "skein::engine", partition = %partition, position, reason, "recovery truncated a torn or corrupt tail");
                    let truncated = file_len - position;
                    ctx.metrics.recovery_truncated_bytes.set(ctx.metrics.recovery_truncated_bytes.get() + truncated);
                    truncated_at = Some(seg.next_offset);
                }
                file.truncate(position).await.map_err(|e| Error::io("truncate", &path, e))?;
                file.fdatasync().await.map_err(|e| Error::io("sync", &path, e))?;
            } else if !trusted && i + 1 == bases.len() {
                file.fdatasync().await.map_err(|e| Error::io("sync", &path, e))?;
            }
            segments.insert(base, seg);
        }
        if segments.is_empty() {
            let base = log_start_offset;
            let path = segment::file_path(&dir, base, segment::LOG_SUFFIX);
            let file = storage.open_file(&path, true).await.map_err(|e| Error::io("create", &path, e))?;
            segments.insert(base, Segment::new(base, file));
            storage.sync_dir(&dir).await.map_err(|e| Error::io("sync", &dir, e))?;
        }
        let active = segments.values().next_back().expect("at least one segment");
        let log_end_offset = active.next_offset;
        let first_base = *segments.keys().next().expect("at least one segment");
        log_start_offset = log_start_offset.max(first_base).min(log_end_offset);
        epochs.truncate_from(log_end_offset);
        let active_file = active.file.clone();
        let end = active.size;
        let tail_start = align_down(end);
        let tail = active_file
            .read_at(tail_start, (end - tail_start) as usize)
            .await
            .map_err(|e| Error::io("read", segment::file_path(&dir, active.base_offset, segment::LOG_SUFFIX), e))?;
        if tail.len() as u64 != end - tail_start {
            return Err(Error::Corruption {
                path: segment::file_path(&dir, active.base_offset, segment::LOG_SUFFIX),
                position: tail_start,
                reason: "short read of the tail block".into(),
            });
        }
        let reserved = active_file.size().await.map_err(|e| Error::io("stat", &dir, e))?;
        let appender = crate::appender::Appender::new(&active_file, end, &tail, reserved);
        tracing::info!(target: "skein::engine", partition = %partition, log_start_offset = log_start_offset.0,
            log_end_offset = log_end_offset.0, segments = segments.len(), clean, recovery_ms = started.elapsed().as_millis() as u64, "log opened");

        let log = Rc::new(Log {
            partition,
            dir,
            key,
            ctx,
            state: RefCell::new(LogState {
                config,
                segments,
                appender,
                pending: VecDeque::new(),
                log_start_offset,
                log_end_offset,
                offset_written_end: log_end_offset,
                offset_flushed_end: log_end_offset,
                recovery_point: log_end_offset,
                unflushed_records: 0,
                last_flush_ms: now_ms(),
                sync_in_flight: false,
                reserving: false,
                epochs,
                failed: None,
                closed: false,
            }),
            gate: Gate::default(),
            written_waiters: Waiters::default(),
            sync_waiters: Waiters::default(),
            readers: Waiters::default(),
            maintenance: async_lock::Mutex::new(()),
            written_checkpoint: Cell::new(None),
            written_epochs: RefCell::new(None),
        });
        // From here on a crash is not a clean shutdown.
        log.write_checkpoint(false).await?;
        log.write_epochs().await?;
        Ok(log)
    }

    pub fn partition(&self) -> &TopicPartition {
        &self.partition
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The shard's engine metrics, shared by its logs.
    pub fn metrics(&self) -> &EngineMetrics {
        &self.ctx.metrics
    }

    pub fn config(&self) -> LogConfig {
        self.state.borrow().config.clone()
    }

    /// Replaces the config; a smaller `segment.bytes` applies from the next roll.
    ///
    /// # Errors
    /// `InvalidConfig` when the new config is out of range.
    pub fn set_config(&self, config: LogConfig) -> Result<()> {
        config.validate()?;
        self.state.borrow_mut().config = config;
        Ok(())
    }

    pub fn log_start_offset(&self) -> Offset {
        self.state.borrow().log_start_offset
    }

    pub fn log_end_offset(&self) -> Offset {
        self.state.borrow().log_end_offset
    }

    pub fn offset_written_end(&self) -> Offset {
        self.state.borrow().offset_written_end
    }

    pub fn offset_flushed_end(&self) -> Offset {
        self.state.borrow().offset_flushed_end
    }

    /// Bytes of batches in all segments.
    pub fn size_bytes(&self) -> u64 {
        self.state.borrow().size_bytes()
    }

    pub fn segment_count(&self) -> usize {
        self.state.borrow().segments.len()
    }

    /// Base offsets of the segments, oldest first; the last is active.
    pub fn segment_bases(&self) -> Vec<Offset> {
        self.state.borrow().segments.keys().copied().collect()
    }

    pub fn leader_epochs(&self) -> LeaderEpochCache {
        self.state.borrow().epochs.clone()
    }

    /// The end offset of `epoch` for OffsetForLeaderEpoch (KIP-101).
    pub fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, Offset)> {
        let state = self.state.borrow();
        state.epochs.end_offset_for(epoch, state.log_end_offset)
    }

    pub fn is_failed(&self) -> bool {
        self.state.borrow().failed.is_some()
    }

    /// Wakes every waiting task: on failure, close, truncation.
    fn wake_all(&self) {
        self.written_waiters.wake_all();
        self.sync_waiters.wake_all();
        self.readers.wake_all();
        self.gate.waiters.wake_all();
    }

    fn failed_error(&self, reason: &str) -> Error {
        Error::LogFailed { partition: self.partition.clone(), reason: reason.to_owned() }
    }

    fn fail(&self, reason: String) {
        tracing::error!(target: "skein::engine", partition = %self.partition, reason, "log failed");
        self.state.borrow_mut().failed.get_or_insert(reason);
        self.wake_all();
    }

    /// Appends one validated batch and completes once it is written (and fdatasynced
    /// when `flush.messages` asks for it).
    ///
    /// # Errors
    /// `InvalidBatch(TooLarge)` over `max.message.bytes`; `DiskFull` (retriable) when
    /// space cannot be reserved; `LogFailed` when a write or sync failed; `Closed`.
    /// On any error the batch is not acknowledged, and on `DiskFull` it is not stored.
    pub async fn append(&self, batch: Batch, mode: AppendMode) -> Result<AppendInfo> {
        let max = self.state.borrow().config.max_message_bytes as usize;
        if batch.size() > max {
            return Err(crate::batch::BatchError::TooLarge { size: batch.size(), max }.into());
        }
        let ticket = self.gate.ticket();
        let (info, flush, reserve_ahead) = loop {
            ticket.wait_turn().await;
            let admission = self.admit(&batch, mode)?;
            match admission {
                Admission::Admitted(info, flush, reserve_ahead) => break (info, flush, reserve_ahead),
                Admission::Roll => self.roll_locked().await?,
                Admission::Reserve(target) => self.reserve(target).await?,
                Admission::WaitForRoom(len) => self.drive_until(i64::MIN, |s| s.appender.has_room(len)).await?,
            }
        };
        drop(ticket);
        if let Some(target) = reserve_ahead {
            // Outside the gate: later appends keep filling the current reservation.
            let reserved = self.reserve(target).await;
            self.state.borrow_mut().reserving = false;
            if let Err(e) = reserved {
                tracing::debug!(target: "skein::engine", partition = %self.partition, error = %e, "reservation ahead failed");
            }
        }
        let target = info.last_offset.plus(1);
        self.drive_until(target.0, |s| s.offset_written_end >= target).await?;
        if flush {
            self.flush_to(info.last_offset.plus(1)).await?;
        }
        Ok(info)
    }

    /// Admission of the head of the queue: either the batch goes into the tail buffer
    /// now, or the caller must first roll, reserve space, or wait for writes.
    fn admit(&self, batch: &Batch, mode: AppendMode) -> Result<Admission> {
        let mut state = self.state.borrow_mut();
        let state = &mut *state;
        if state.closed {
            return Err(Error::Closed(self.partition.clone()));
        }
        if let Some(reason) = &state.failed {
            return Err(self.failed_error(reason));
        }
        let size = batch.size();
        let (base_offset, last_offset) = match mode {
            AppendMode::Leader { .. } => {
                (state.log_end_offset, state.log_end_offset.plus(batch.last_offset_delta() as i64))
            }
            AppendMode::Replica => {
                if batch.base_offset() < state.log_end_offset {
                    return Err(Error::OffsetNotMonotonic {
                        offset: batch.base_offset(),
                        log_end: state.log_end_offset,
                    });
                }
                (batch.base_offset(), batch.last_offset())
            }
        };
        let now = now_ms();
        let active = state.active();
        let roll_ms =
            state.config.segment_ms.saturating_sub(roll_jitter_ms(&self.partition, active.base_offset, &state.config));
        let aged = active.first_append_ms.is_some_and(|t| now - t >= roll_ms.min(i64::MAX as u64) as i64);
        if active.is_full(size as u64, last_offset, &state.config) || (aged && active.size > 0) {
            return Ok(Admission::Roll);
        }
        if !state.appender.has_room(size) {
            return Ok(Admission::WaitForRoom(size));
        }
        let end = state.appender.end() + size as u64;
        if end > state.appender.reserved {
            let segment_bytes = align_up(state.config.segment_bytes);
            let stepped = end.div_ceil(RESERVATION_STEP_BYTES) * RESERVATION_STEP_BYTES;
            return Ok(Admission::Reserve(stepped.min(segment_bytes.max(align_up(end)))));
        }
        let batch = match mode {
            AppendMode::Leader { epoch } => batch.clone().with_offset_and_epoch(base_offset, epoch),
            AppendMode::Replica => batch.clone(),
        };
        // The CRC was checked on validation and patching does not touch covered bytes.
        debug_assert!(batch.crc_ok());
        let position = state.appender.end();
        let file = state.active().file.clone();
        state.appender.append(&file, batch.bytes());
        let config = state.config.clone();
        let active = state.active_mut();
        active.record(BatchMeta::of(&batch, position), &config);
        active.first_append_ms.get_or_insert(now);
        state.epochs.assign(batch.leader_epoch(), base_offset);
        state.log_end_offset = batch.next_offset();
        state.unflushed_records += batch.record_count() as u64;
        let flush = state.unflushed_records >= state.config.flush_messages;
        if flush {
            state.unflushed_records = 0;
        }
        // Extend the reservation before it runs out, so that appends rarely wait for it.
        let segment_cap = align_up(state.config.segment_bytes);
        let reserved = state.appender.reserved;
        let reserve_ahead = (!state.reserving
            && reserved < segment_cap
            && reserved - state.appender.end() < RESERVATION_STEP_BYTES / 2)
            .then(|| (reserved + RESERVATION_STEP_BYTES).min(segment_cap));
        state.reserving |= reserve_ahead.is_some();
        let info = AppendInfo {
            base_offset,
            last_offset,
            max_timestamp: batch.max_timestamp(),
            log_start_offset: state.log_start_offset,
        };
        let metrics = &self.ctx.metrics;
        metrics.appended_batches.set(metrics.appended_batches.get() + 1);
        metrics.appended_bytes.set(metrics.appended_bytes.get() + size as u64);
        state.pending.push_back(Pending { end_position: position + size as u64, batch });
        Ok(Admission::Admitted(info, flush, reserve_ahead))
    }

    /// Submits writes of the active segment until `done` holds. Whoever waits drives:
    /// a task whose write completes keeps submitting while its own condition is unmet,
    /// and on leaving hands the work over to the first remaining waiter. `key` is the
    /// offset the caller waits for (`i64::MIN` to be woken on any progress).
    async fn drive_until(&self, key: i64, done: impl Fn(&LogState<S::File>) -> bool) -> Result<()> {
        loop {
            let (write, file) = {
                let mut state = self.state.borrow_mut();
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
                let file = state.active().file.clone();
                (state.appender.take_write(&file), file)
            };
            let Some(write) = write else {
                self.written_waiters.wait(key).await;
                continue;
            };
            let len = write.buf.as_bytes().len();
            let (position, data_end, chunk) = (write.position, write.data_end, write.chunk_position());
            let metrics = &self.ctx.metrics;
            metrics.writes.set(metrics.writes.get() + 1);
            metrics.writes_in_flight.set(metrics.writes_in_flight.get() + 1);
            let result = file.write_at(write.buf, position).await;
            metrics.writes_in_flight.set(metrics.writes_in_flight.get() - 1);
            let result = match result {
                Ok(n) if n == len => Ok(()),
                Ok(n) => Err(format!("short write of {n} of {len} bytes at {position}")),
                Err(e) => Err(format!("write at {position}: {e}")),
            };
            let failure = result.clone().err();
            let written_end = {
                let mut state = self.state.borrow_mut();
                let state = &mut *state;
                if state.appender.complete_write(position, data_end, chunk, result) {
                    let written = state.appender.written();
                    let mut cache = self.ctx.cache.borrow_mut();
                    while state.pending.front().is_some_and(|p| p.end_position <= written) {
                        let pending = state.pending.pop_front().expect("checked");
                        state.offset_written_end = pending.batch.next_offset();
                        cache.insert(self.key, pending.batch);
                    }
                }
                state.offset_written_end
            };
            if let Some(reason) = failure {
                self.fail(reason);
            }
            self.written_waiters.wake_upto(written_end.0);
            self.readers.wake_upto(written_end.0);
        }
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
    async fn flush_to(&self, target: Offset) -> Result<()> {
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
                if state.sync_in_flight {
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
            let result = file.fdatasync().await;
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

    /// Reserves file space up to `target` bytes, checking free disk space first.
    async fn reserve(&self, target: u64) -> Result<()> {
        let (file, reserved, base) = {
            let state = self.state.borrow();
            (state.active().file.clone(), state.appender.reserved, state.active().base_offset)
        };
        if target <= reserved {
            return Ok(());
        }
        let needed = target - reserved;
        self.check_space(needed)?;
        match file.allocate(target).await {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(28) => {
                return Err(Error::DiskFull { path: self.dir.clone(), available_bytes: 0, needed_bytes: needed })
            }
            Err(e) => return Err(Error::io("allocate", &self.dir, e)),
        }
        let mut state = self.state.borrow_mut();
        // A roll may have replaced the active segment meanwhile; its file is not this one.
        if state.active().base_offset == base {
            state.appender.reserved = state.appender.reserved.max(target);
        }
        Ok(())
    }

    fn check_space(&self, needed: u64) -> Result<()> {
        let available = self.ctx.storage.available_bytes(&self.dir).map_err(|e| Error::io("statvfs", &self.dir, e))?;
        if available < needed + DISK_HEADROOM_BYTES {
            return Err(Error::DiskFull { path: self.dir.clone(), available_bytes: available, needed_bytes: needed });
        }
        Ok(())
    }

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
    async fn roll_locked(&self) -> Result<()> {
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
            let appender = crate::appender::Appender::new(&new_file, 0, &[], 0);
            state.appender = appender;
            state.segments.insert(next_offset, Segment::new(next_offset, new_file));
            state.recovery_point = state.recovery_point.max(next_offset);
        }
        tracing::debug!(target: "skein::engine", partition = %self.partition, base_offset = next_offset.0, "segment rolled");
        self.write_checkpoint(false).await
    }

    /// Writes a segment's indexes if they changed.
    async fn write_indexes(&self, base: Offset) -> Result<()> {
        let encoded = {
            let state = self.state.borrow();
            let Some(seg) = state.segments.get(&base) else { return Ok(()) };
            if !seg.indexes_dirty {
                return Ok(());
            }
            (seg.offset_index.encode(), seg.time_index.encode())
        };
        let storage = &self.ctx.storage;
        let index_path = segment::file_path(&self.dir, base, segment::INDEX_SUFFIX);
        io::write_whole_atomic(storage, &index_path, &encoded.0)
            .await
            .map_err(|e| Error::io("write", &index_path, e))?;
        let time_path = segment::file_path(&self.dir, base, segment::TIME_INDEX_SUFFIX);
        io::write_whole_atomic(storage, &time_path, &encoded.1).await.map_err(|e| Error::io("write", &time_path, e))?;
        if let Some(seg) = self.state.borrow_mut().segments.get_mut(&base) {
            seg.indexes_dirty = false;
        }
        Ok(())
    }

    async fn write_checkpoint(&self, clean_shutdown: bool) -> Result<()> {
        let checkpoint = {
            let state = self.state.borrow();
            Checkpoint {
                recovery_point: state.recovery_point.max(state.offset_flushed_end).min(state.log_end_offset),
                log_start_offset: state.log_start_offset,
                clean_shutdown,
            }
        };
        // Each write costs two fsyncs: skip it when nothing changed.
        if self.written_checkpoint.get() == Some(checkpoint) {
            return Ok(());
        }
        let path = self.dir.join(CHECKPOINT_FILE);
        io::write_whole_atomic(&self.ctx.storage, &path, &checkpoint.encode())
            .await
            .map_err(|e| Error::io("write", &path, e))?;
        self.written_checkpoint.set(Some(checkpoint));
        Ok(())
    }

    async fn write_epochs(&self) -> Result<()> {
        let encoded = self.state.borrow().epochs.encode();
        if self.written_epochs.borrow().as_deref() == Some(encoded.as_slice()) {
            return Ok(());
        }
        let path = self.dir.join(LEADER_EPOCH_FILE);
        io::write_whole_atomic(&self.ctx.storage, &path, &encoded).await.map_err(|e| Error::io("write", &path, e))?;
        *self.written_epochs.borrow_mut() = Some(encoded);
        Ok(())
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

    /// Clean shutdown: writes everything, trims the active segment, writes indexes and
    /// a checkpoint marked clean, so the next open skips recovery scans.
    ///
    /// # Errors
    /// `LogFailed` when the log failed earlier (no clean mark is written then, so the
    /// next open recovers); `Io` on disk errors.
    pub async fn close(&self) -> Result<()> {
        let _maintenance = self.maintenance.lock().await;
        let ticket = self.gate.ticket();
        ticket.wait_turn().await;
        if self.state.borrow().closed {
            return Ok(());
        }
        self.flush().await?;
        let (file, base, size) = {
            let mut state = self.state.borrow_mut();
            state.closed = true;
            let active = state.active_mut();
            (active.file.clone(), active.base_offset, active.size)
        };
        let path = segment::file_path(&self.dir, base, segment::LOG_SUFFIX);
        file.truncate(size).await.map_err(|e| Error::io("truncate", &path, e))?;
        file.fdatasync().await.map_err(|e| Error::io("sync", &path, e))?;
        let bases = self.segment_bases();
        for base in bases {
            self.write_indexes(base).await?;
        }
        {
            let mut state = self.state.borrow_mut();
            state.recovery_point = state.log_end_offset;
        }
        self.write_epochs().await?;
        self.write_checkpoint(true).await?;
        self.wake_all();
        Ok(())
    }

    /// Closes the log without a clean mark and renames its directory to Kafka's
    /// `<topic>-<partition>.<unique>-delete` (topic deletion); the files go later.
    ///
    /// # Errors
    /// `Io` when the directory cannot be renamed or the rename made durable.
    pub async fn delete(&self) -> Result<()> {
        let _maintenance = self.maintenance.lock().await;
        let ticket = self.gate.ticket();
        ticket.wait_turn().await;
        let _ = self.drive_until(i64::MIN, |s| s.appender.writes_in_flight() == 0).await;
        self.state.borrow_mut().closed = true;
        self.ctx.cache.borrow_mut().invalidate_log(self.key);
        self.wake_all();
        // Kafka's way: the directory is renamed out of the way (and the rename made
        // durable) before the delete is acknowledged; its files are removed later by
        // `LogManager::remove_deleted_dirs`. A crash in between leaves a `-delete`
        // directory that is never opened again, so a recreated topic never serves
        // the old records.
        let storage = &self.ctx.storage;
        let name = self.dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let unique = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let target = self.dir.with_file_name(format!("{name}.{unique:032x}{}", crate::manager::DELETED_SUFFIX));
        storage.rename(&self.dir, &target).await.map_err(|e| Error::io("rename", &self.dir, e))?;
        if let Some(parent) = self.dir.parent() {
            storage.sync_dir(parent).await.map_err(|e| Error::io("sync", parent, e))?;
        }
        Ok(())
    }

    /// Batches from the one holding `offset`, up to `max_bytes` (the first whole even if
    /// larger), with base offsets below `end` when given (e.g. the high watermark).
    /// Recent batches come from the shard's cache; others from disk, CRC-checked.
    ///
    /// # Errors
    /// `OffsetOutOfRange` outside `[log_start_offset, log_end_offset]`; `Corruption`
    /// when a stored batch fails validation; `Io`.
    pub async fn read(&self, offset: Offset, max_bytes: usize, end: Option<Offset>) -> Result<Vec<Batch>> {
        let (bound, start, log_end) = {
            let state = self.state.borrow();
            let bound = end.map_or(state.offset_written_end, |e| e.min(state.offset_written_end));
            (bound, state.log_start_offset, state.log_end_offset)
        };
        if offset < start || offset > log_end {
            return Err(Error::OffsetOutOfRange { offset, start, end: log_end });
        }
        if offset >= bound {
            return Ok(Vec::new());
        }
        let metrics = &self.ctx.metrics;
        if let Some(batches) = self.ctx.cache.borrow_mut().read(self.key, offset, bound, max_bytes) {
            metrics.cache_reads.set(metrics.cache_reads.get() + 1);
            return Ok(batches);
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
            )
            .await
            .inspect_err(|e| {
                if matches!(e, Error::Corruption { .. }) {
                    metrics.corruptions.set(metrics.corruptions.get() + 1);
                }
            })?;
            metrics.disk_read_bytes.set(metrics.disk_read_bytes.get() + bytes_read);
            if !batches.is_empty() {
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

    fn decode(&self, batch: &Batch) -> Result<Vec<crate::records::Record>> {
        crate::records::decode_records(batch.bytes(), DECOMPRESSED_BATCH_BYTES_MAX).map_err(|e| Error::Corruption {
            path: self.dir.clone(),
            position: batch.base_offset().0 as u64,
            reason: format!("undecodable batch at offset {}: {e}", batch.base_offset()),
        })
    }

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
        self.drive_until(i64::MIN, |s| s.appender.written() == s.appender.end() && s.appender.writes_in_flight() == 0)
            .await?;
        let (log_end, log_start) = (self.log_end_offset(), self.log_start_offset());
        if offset >= log_end {
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
        for base in doomed {
            remove_segment_files(&self.ctx.storage, &self.dir, base).await?;
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
            state.appender = crate::appender::Appender::new(&file, cut, &tail, cut);
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
        self.wake_all();
        Ok(())
    }

    /// Empties the log and restarts it at `offset` (Kafka's `truncateFullyAndStartAt`).
    async fn restart_at(&self, offset: Offset) -> Result<()> {
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
            state.appender = crate::appender::Appender::new(&file, 0, &[], 0);
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
        let start = self.log_start_offset();
        self.delete_segments_where(|_, next_base| next_base <= start).await?;
        self.write_checkpoint(false).await?;
        Ok(self.log_start_offset())
    }

    /// Applies `retention.ms` and `retention.bytes` to closed segments, oldest first, as
    /// Kafka does: deletion stops at the first segment that must stay. Returns the
    /// number of segments deleted.
    ///
    /// # Errors
    /// `Io` when a file cannot be removed.
    pub async fn apply_retention(&self, now: TimestampMs) -> Result<usize> {
        let _maintenance = self.maintenance.lock().await;
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
    async fn delete_segments_where(&self, mut doomed: impl FnMut(&Segment<S::File>, Offset) -> bool) -> Result<usize> {
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
    async fn segment_batches(&self, base: Offset) -> Result<Vec<Batch>> {
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
    async fn replace_segment(&self, base: Offset, next_offset: Offset, batches: &[Batch]) -> Result<()> {
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

/// Recomputes a segment's size, next offset and max timestamp up to `limit`, from its
/// (already truncated) indexes and a scan of the bytes after the last index entry.
async fn restore_bookkeeping<F: StorageFile>(
    seg: &mut Segment<F>,
    limit: u64,
    config: &LogConfig,
) -> std::io::Result<()> {
    match seg.offset_index.last() {
        Some((_, position)) => {
            let tail = segment::scan(&seg.file, position as u64, seg.base_offset, limit).await?;
            seg.resume(&tail.batches);
        }
        None => {
            let scan = segment::scan(&seg.file, 0, seg.base_offset, limit).await?;
            seg.time_index = TimeIndex::default();
            for meta in &scan.batches {
                seg.record(*meta, config);
            }
        }
    }
    Ok(())
}

/// Loads a segment's index files. Returns false when either is missing, damaged or
/// empty, so the caller rebuilds them from the log.
async fn load_indexes<S: Storage, F: StorageFile>(
    storage: &S,
    dir: &Path,
    seg: &mut Segment<F>,
    log_bytes: u64,
) -> Result<bool> {
    let index_path = segment::file_path(dir, seg.base_offset, segment::INDEX_SUFFIX);
    let time_path = segment::file_path(dir, seg.base_offset, segment::TIME_INDEX_SUFFIX);
    let read =
        |path: PathBuf| async move { io::read_whole(storage, &path).await.map_err(|e| Error::io("read", &path, e)) };
    let (Some(index), Some(times)) = (read(index_path).await?, read(time_path).await?) else { return Ok(false) };
    if index.len() > crate::limits::INDEX_BYTES_MAX || times.len() > crate::limits::INDEX_BYTES_MAX {
        return Ok(false);
    }
    match (OffsetIndex::decode(&index, log_bytes), TimeIndex::decode(&times)) {
        (Ok(index), Ok(times)) if !index.is_empty() => {
            seg.offset_index = index;
            seg.time_index = times;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Whether the file holds only zeros from `position` to `len` (unused reservation).
async fn is_zero_tail<F: StorageFile>(file: &F, position: u64, len: u64) -> bool {
    let mut at = position;
    while at < len {
        let want = (len - at).min(1 << 20) as usize;
        match file.read_at(at, want).await {
            Ok(bytes) if !bytes.is_empty() => {
                if bytes.iter().any(|&b| b != 0) {
                    return false;
                }
                at += bytes.len() as u64;
            }
            _ => return false,
        }
    }
    true
}

async fn remove_segment_files<S: Storage>(storage: &S, dir: &Path, base: Offset) -> Result<()> {
    for suffix in [segment::LOG_SUFFIX, segment::INDEX_SUFFIX, segment::TIME_INDEX_SUFFIX] {
        let path = segment::file_path(dir, base, suffix);
        match storage.remove_file(&path).await {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove", &path, e)),
        }
    }
    Ok(())
}

/// Completes compaction swaps a crash interrupted and removes unfinished temp files:
/// a `.log.swap` is a complete compacted segment, a `.log.cleaned` or `.tmp` is not.
async fn finish_interrupted_swaps<S: Storage>(storage: &S, dir: &Path) -> Result<()> {
    let names = storage.list_dir(dir).map_err(|e| Error::io("list", dir, e))?;
    for name in names {
        let path = dir.join(&name);
        if let Some(base) = segment::parse_file_name(&name, segment::SWAP_SUFFIX) {
            let target = segment::file_path(dir, base, segment::LOG_SUFFIX);
            storage.rename(&path, &target).await.map_err(|e| Error::io("rename", &path, e))?;
            // Its indexes describe the old content.
            for suffix in [segment::INDEX_SUFFIX, segment::TIME_INDEX_SUFFIX] {
                let _ = storage.remove_file(&segment::file_path(dir, base, suffix)).await;
            }
        } else if name.ends_with(segment::CLEANED_SUFFIX) || name.ends_with(".tmp") {
            storage.remove_file(&path).await.map_err(|e| Error::io("remove", &path, e))?;
        }
    }
    storage.sync_dir(dir).await.map_err(|e| Error::io("sync", dir, e))
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// A FIFO admission queue. A ticket is taken when an operation first runs and is
/// served in order; dropping a ticket (done, failed or cancelled) passes the turn on
/// and wakes only the next holder.
#[derive(Default)]
struct Gate {
    next: Cell<u64>,
    serving: Cell<u64>,
    abandoned: RefCell<BTreeSet<u64>>,
    waiters: Waiters,
}

struct Ticket<'a> {
    gate: &'a Gate,
    number: u64,
}

impl Gate {
    fn ticket(&self) -> Ticket<'_> {
        let number = self.next.get();
        self.next.set(number + 1);
        Ticket { gate: self, number }
    }
}

impl Ticket<'_> {
    async fn wait_turn(&self) {
        while self.gate.serving.get() != self.number {
            self.gate.waiters.wait(self.number as i64).await;
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let gate = self.gate;
        if gate.serving.get() == self.number {
            let mut serving = self.number + 1;
            let mut abandoned = gate.abandoned.borrow_mut();
            while abandoned.remove(&serving) {
                serving += 1;
            }
            gate.serving.set(serving);
            drop(abandoned);
            gate.waiters.wake_upto(serving as i64);
        } else {
            gate.abandoned.borrow_mut().insert(self.number);
        }
    }
}
/// Kafka's `segment.jitter.ms`: how much earlier than `segment.ms` this segment rolls,
/// in `[0, min(segment.jitter.ms, segment.ms))`. Derived from the partition and the
/// segment's base offset, so it is stable for one segment and differs between
/// partitions, which then do not all roll at once.
fn roll_jitter_ms(partition: &TopicPartition, base_offset: Offset, config: &LogConfig) -> u64 {
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
