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
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::batch::Batch;
use crate::cache::{BatchCache, LogKey};
use crate::checkpoint::{Checkpoint, LeaderEpochCache, CHECKPOINT_FILE, LEADER_EPOCH_FILE};
use crate::config::LogConfig;
use crate::error::{Error, Result};
use crate::index::{OffsetIndex, TimeIndex};
use crate::io::{self, align_down, align_up, IoBuf, Storage, StorageFile};
use crate::limits::DECOMPRESSED_BATCH_BYTES_MAX;
use crate::metrics::EngineMetrics;
use crate::segment::{self, BatchMeta, Segment};
use crate::types::{LeaderEpoch, Offset, TimestampMs, TopicPartition};
use crate::waiters::Waiters;

mod budget;
mod coalesce;
mod compaction;
mod drive;
mod gate;
mod read;
mod read_ahead;
mod recovery;
mod reserve;
mod retention;
mod roll;
mod scrub;
mod see_through;
pub mod snapshots;
mod state_files;
mod truncation;

pub use crate::segment::AbortedRange;
pub use crate::time::now_ms;
pub use budget::TailBudget;
pub(crate) use compaction::Throttle;
pub use compaction::{CleanerConfig, Dirtiness, Transactions, CLEANER_CHECKPOINT_FILE};
use gate::Gate;
use recovery::restore_bookkeeping;
use retention::remove_segment_files;
use roll::roll_jitter_ms;
pub use scrub::ScrubStep;

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
    /// The longest an idle log holds a write back to coalesce appends (`coalesce.rs`);
    /// zero never does.
    pub group_commit_max_delay: std::time::Duration,
    /// The appenders' chunk size and writes in flight per file (validated).
    pub write_shape: crate::config::WriteShape,
    /// Directory syncs shared by the shard's logs (new partition directories in the
    /// data directory).
    pub dir_syncs: Rc<io::DirSyncs>,
    /// The node stopped cleanly before this start (every log closed, flushed): a log
    /// opened now without a checkpoint file (a small one, `keeps_state_files`) holds
    /// only flushed data, so invalid data in it is corruption, not a torn tail.
    pub clean_start: bool,
    /// Whether the data directory has room (`space.rs`), shared by the node's shards.
    pub space: crate::space::SpaceWatch,
    /// The shard's tail-buffer budget over all its logs (`budget.rs`).
    pub tail_budget: Rc<TailBudget>,
    /// How long a rolled segment's seal waits for the file system's own commit before
    /// its syncs (`roll.rs`, `SEAL_SYNC_DELAY`).
    pub seal_sync_delay: std::time::Duration,
}

impl<S: Storage> LogContext<S> {
    /// A context of its own for logs under `data_dir`: a batch cache of `cache_bytes`,
    /// fresh metrics, the default write shape, no group commit delay, not a clean start.
    pub fn new(storage: S, data_dir: impl Into<PathBuf>, cache_bytes: usize) -> LogContext<S> {
        LogContext {
            storage,
            cache: Rc::new(RefCell::new(BatchCache::new(cache_bytes))),
            metrics: Rc::new(EngineMetrics::default()),
            group_commit_max_delay: std::time::Duration::ZERO,
            write_shape: crate::config::WriteShape::default(),
            dir_syncs: Default::default(),
            clean_start: false,
            space: crate::space::SpaceWatch::new(data_dir),
            tail_budget: Rc::default(),
            seal_sync_delay: crate::limits::SEAL_SYNC_DELAY,
        }
    }
}

impl<S: Clone> Clone for LogContext<S> {
    fn clone(&self) -> Self {
        LogContext {
            storage: self.storage.clone(),
            cache: self.cache.clone(),
            metrics: self.metrics.clone(),
            group_commit_max_delay: self.group_commit_max_delay,
            write_shape: self.write_shape,
            dir_syncs: self.dir_syncs.clone(),
            clean_start: self.clean_start,
            space: self.space.clone(),
            tail_budget: self.tail_budget.clone(),
            seal_sync_delay: self.seal_sync_delay,
        }
    }
}

pub struct Log<S: Storage> {
    /// The log itself, for the tasks it spawns (a rolled segment's seal).
    me: std::rc::Weak<Log<S>>,
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
    /// Moves whenever a reader could see something new (`crate::stamp`): the
    /// written end or log start moved, or the log closed, failed or was truncated.
    stamp: std::sync::Arc<crate::Stamp>,
    /// Tasks waiting for the rolled segments' seals to finish (`roll.rs`).
    seal_waiters: Waiters,
    /// Someone waits for the pending seals (a flush, retention, truncation, close):
    /// they sync now instead of after the file system's own commit (`roll.rs`).
    seal_hurry: Cell<bool>,
    /// Seals waiting for the file system's commit, woken when someone hurries them.
    seal_urgent: Waiters,
    /// The last read-ahead window (`read_ahead.rs`), shared with its read task.
    read_ahead: Rc<read_ahead::ReadAhead>,
    /// Serialises whole-segment maintenance (retention, compaction, truncation).
    maintenance: async_lock::Mutex<()>,
    /// What the checkpoint and epoch files hold now, so unchanged state is not
    /// rewritten (each write is a temp file, two fsyncs and a rename).
    written_checkpoint: Cell<OnDisk<Checkpoint>>,
    written_epochs: RefCell<OnDisk<LeaderEpochCache>>,
    /// The cleaner's checkpoint: offsets below it were cleaned (`None` until read).
    first_dirty: Cell<Option<Offset>>,
    /// When housekeeping first writes the state files of a log that has come to keep
    /// them (`checkpoint_when_due`).
    state_files_due: Cell<Option<std::time::Instant>>,
    /// The oldest tombstone the last cleaning pass kept, to clean again once it
    /// expires (not persisted: after a restart, the next dirty pass finds it).
    oldest_tombstone: Cell<Option<TimestampMs>>,
    /// The log's transactions as its owner tracks them, for the cleaner.
    transactions: RefCell<Option<std::rc::Rc<dyn Transactions>>>,
    /// Offset ranges (first to last, inclusive) the scrubber found corrupt at rest:
    /// reads overlapping them answer `Corruption` instead of serving the bytes.
    fenced: RefCell<BTreeMap<Offset, Offset>>,
}

struct Pending {
    end_position: u64,
    batch: Batch,
}

/// What `Log::write_done` needs to know of a write.
#[derive(Debug, Clone, Copy)]
struct WriteDone {
    len: usize,
    position: u64,
    data_end: u64,
    chunk: u64,
    submitted: std::time::Instant,
}

/// What a small state file of the log holds on disk, as far as the log knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnDisk<T> {
    /// Not known (damaged when read): the next write goes out whatever it holds.
    Unknown,
    Absent,
    Written(T),
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
    /// How far ahead of the appends the active segment is reserved (`reserve.rs`).
    reservation: reserve::Reservation,
    /// When the last append was admitted (`None` since the log opened): a log idle
    /// for `RESERVATION_IDLE_MS` gives its reservation back.
    last_append: Option<std::time::Instant>,
    /// Base offsets of the rolled segments whose seal (trim, fdatasync, indexes) has
    /// not finished, in roll order: until then they do not count as flushed (`roll.rs`).
    seals: VecDeque<Offset>,
    epochs: LeaderEpochCache,
    failed: Option<String>,
    closed: bool,
    /// Adaptive group commit: the mean gap between appends, and the open window.
    coalescing: coalesce::Coalescing,
    /// What the log charges the shard's tail budget: its appended, unwritten bytes.
    charged: u64,
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

    /// Whether the log keeps its checkpoint and leader-epoch files. A log of one
    /// segment that starts at its log start and holds under `CHECKPOINT_LOG_BYTES_MIN`
    /// keeps neither: recovery scans it whole (a read of a few blocks), which finds
    /// its end and its epochs again, so the two files would only cost two blocks of
    /// disk per partition. A log with more segments or data, or whose log start lies
    /// inside its first segment (DeleteRecords), keeps both.
    fn keeps_state_files(&self) -> bool {
        let first = self.segments.keys().next().copied().unwrap_or(Offset::ZERO);
        self.segments.len() > 1
            || self.log_start_offset > first
            || self.size_bytes() >= crate::limits::CHECKPOINT_LOG_BYTES_MIN
    }
}

enum Admission {
    /// In the tail buffer; whether to flush, and a reservation to extend ahead of need.
    Admitted(AppendInfo, bool, Option<u64>),
    Roll,
    Reserve(u64),
    WaitForRoom(usize),
    /// The shard's tail budget is spent: wait until another log's writes complete.
    WaitForShardRoom,
}

impl<S: Storage> Log<S> {
    /// Tells the cleaner about this log's transactions (`compaction::Transactions`).
    pub fn set_transactions(&self, transactions: std::rc::Rc<dyn Transactions>) {
        *self.transactions.borrow_mut() = Some(transactions);
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

    /// The log's change stamp (`crate::stamp`), which `replication` also moves when
    /// the partition's high watermark or role moves.
    pub fn stamp(&self) -> &std::sync::Arc<crate::Stamp> {
        &self.stamp
    }

    pub fn log_end_offset(&self) -> Offset {
        self.state.borrow().log_end_offset
    }

    /// Whether the log is closed or failed: nothing will be written to it any more.
    pub fn is_closed(&self) -> bool {
        let state = self.state.borrow();
        state.closed || state.failed.is_some()
    }

    pub fn offset_written_end(&self) -> Offset {
        self.state.borrow().offset_written_end
    }

    pub fn offset_flushed_end(&self) -> Offset {
        self.state.borrow().offset_flushed_end
    }

    /// Whether the log keeps state files beside its segments (checkpoint, leader
    /// epochs): a log of one segment under `CHECKPOINT_LOG_BYTES_MIN` that starts at
    /// its log start keeps none, because scanning it whole at open costs less than
    /// their blocks of disk. Files that only save a scan (producer snapshots) follow it.
    pub fn keeps_state_files(&self) -> bool {
        self.state.borrow().keeps_state_files()
    }

    /// Bytes of batches in all segments.
    pub fn size_bytes(&self) -> u64 {
        self.state.borrow().size_bytes()
    }

    pub fn segment_count(&self) -> usize {
        self.state.borrow().segments.len()
    }

    /// Base offset of the active segment: it changes when the log rolls.
    pub fn active_segment_base(&self) -> Offset {
        self.state.borrow().active().base_offset
    }

    /// Base offsets of the segments, oldest first; the last is active.
    pub fn segment_bases(&self) -> Vec<Offset> {
        self.state.borrow().segments.keys().copied().collect()
    }

    pub fn leader_epochs(&self) -> LeaderEpochCache {
        self.state.borrow().epochs.clone()
    }

    /// The newest leader epoch in the log (of its last batch, or a leader's started
    /// epoch), without copying the cache.
    pub fn latest_leader_epoch(&self) -> Option<LeaderEpoch> {
        self.state.borrow().epochs.latest().map(|(epoch, _)| epoch)
    }

    /// Records that `epoch` starts at the log end, as a new leader does before its
    /// first append (Kafka's `makeLeader`): a follower of an older epoch then learns
    /// where that epoch ended even while nothing is written in the new one. Persisted
    /// with the next checkpoint; a restart rebuilds it from the batches otherwise.
    pub fn start_leader_epoch(&self, epoch: LeaderEpoch) {
        let mut state = self.state.borrow_mut();
        let end = state.log_end_offset;
        state.epochs.assign(epoch, end);
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
        self.stamp.bump();
        self.written_waiters.wake_all();
        self.sync_waiters.wake_all();
        self.seal_waiters.wake_all();
        self.seal_urgent.wake_all();
        self.readers.wake_all();
        self.gate.waiters.wake_all();
    }

    fn failed_error(&self, reason: &str) -> Error {
        Error::LogFailed { partition: self.partition.clone(), reason: reason.to_owned() }
    }

    fn fail(&self, reason: String) {
        tracing::error!(target: "skein::engine", partition = %self.partition, reason, "log failed");
        self.ctx.space.failed(&self.partition, &reason);
        {
            let mut state = self.state.borrow_mut();
            state.failed.get_or_insert(reason);
            self.recharge(&mut state);
        }
        self.wake_all();
    }

    /// Brings the log's charge on the shard's tail budget to what it holds unwritten
    /// (nothing once failed or closed: those bytes will never be written).
    fn recharge(&self, state: &mut LogState<S::File>) {
        let after = match state.failed.is_some() || state.closed {
            true => 0,
            false => state.appender.end() - state.appender.written(),
        };
        if after != state.charged {
            self.ctx.tail_budget.recharge(state.charged, after);
            state.charged = after;
        }
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
        let arrived = std::time::Instant::now();
        let mut first_turn = true;
        let (info, flush, reserve_ahead) = loop {
            ticket.wait_turn().await;
            if std::mem::take(&mut first_turn) {
                self.ctx.metrics.gate_wait.observe_since(arrived);
            }
            let admission = self.admit(&batch, mode)?;
            match admission {
                Admission::Admitted(info, flush, reserve_ahead) => break (info, flush, reserve_ahead),
                Admission::Roll => self.roll_locked().await?,
                Admission::Reserve(target) => self.reserve(target).await?,
                Admission::WaitForRoom(len) => self.drive_until(i64::MIN, |s| s.appender.has_room(len)).await?,
                Admission::WaitForShardRoom => self.ctx.tail_budget.wait().await,
            }
        };
        drop(ticket);
        // Admitted bytes must be written whatever becomes of this append: if its task
        // is dropped before they are (its connection closed), a driver task takes over,
        // so that they never strand the log or the shard's tail budget.
        let driven = Driven { log: self, armed: true };
        if let Some(target) = reserve_ahead {
            self.reserve_ahead(target);
        }
        let target = info.last_offset.plus(1);
        let written = self.drive_until(target.0, |s| s.offset_written_end >= target).await;
        driven.disarm();
        written?;
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
        // A log with nothing buffered always takes one batch: every log progresses.
        if state.appender.end() > state.appender.written() && !self.ctx.tail_budget.has_room(size) {
            return Ok(Admission::WaitForShardRoom);
        }
        let end = state.appender.end() + size as u64;
        let admitted_at = std::time::Instant::now();
        if end > state.appender.reserved {
            let (reserved, cap) = (state.appender.reserved, state.config.segment_bytes);
            return Ok(Admission::Reserve(state.reservation.extend(admitted_at, end, reserved, cap)));
        }
        // A leader's batch is a slice of its request with a patched head beside it (no
        // copy); every batch is then copied into the tail buffer, once.
        let mut copied = size;
        let batch = match mode {
            AppendMode::Leader { epoch } => batch.clone().with_offset_and_epoch(base_offset, epoch),
            AppendMode::Replica => batch.clone(),
        };
        // The CRC was checked on validation and patching does not touch covered bytes.
        debug_assert!(batch.crc_ok());
        let position = state.appender.end();
        let file = state.active().file.clone();
        copied += state.appender.append(&file, batch.pieces());
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
        let (end, reserved, cap) = (state.appender.end(), state.appender.reserved, state.config.segment_bytes);
        let reserve_ahead = state
            .reservation
            .wants_ahead(end, reserved, cap)
            .then(|| state.reservation.extend(admitted_at, end, reserved, cap));
        state.reservation.ahead_in_flight |= reserve_ahead.is_some();
        state.last_append = Some(admitted_at);
        let info = AppendInfo {
            base_offset,
            last_offset,
            max_timestamp: batch.max_timestamp(),
            log_start_offset: state.log_start_offset,
        };
        if !self.ctx.group_commit_max_delay.is_zero() {
            let cap = (4 * self.ctx.group_commit_max_delay).max(std::time::Duration::from_millis(1));
            state.coalescing.arrived(std::time::Instant::now(), cap);
        }
        let metrics = &self.ctx.metrics;
        metrics.appended_batches.set(metrics.appended_batches.get() + 1);
        metrics.appended_bytes.set(metrics.appended_bytes.get() + size as u64);
        metrics.append_copied_bytes.set(metrics.append_copied_bytes.get() + copied as u64);
        state.pending.push_back(Pending { end_position: position + size as u64, batch });
        self.recharge(state);
        Ok(Admission::Admitted(info, flush, reserve_ahead))
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
        self.sealed().await?;
        self.flush().await?;
        let (file, base, size) = {
            let mut state = self.state.borrow_mut();
            state.closed = true;
            self.recharge(&mut state);
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
        let _ = self.sealed().await;
        {
            let mut state = self.state.borrow_mut();
            state.closed = true;
            self.recharge(&mut state);
        }
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
        let target = self.dir.with_file_name(format!("{name}.{unique:032x}{}", crate::segment::DELETED_SUFFIX));
        storage.rename(&self.dir, &target).await.map_err(|e| Error::io("rename", &self.dir, e))?;
        if let Some(parent) = self.dir.parent() {
            storage.sync_dir(parent).await.map_err(|e| Error::io("sync", parent, e))?;
        }
        Ok(())
    }
}

impl<S: Storage> Drop for Log<S> {
    fn drop(&mut self) {
        let charged = self.state.get_mut().charged;
        self.ctx.tail_budget.recharge(charged, 0);
    }
}

/// Hands a log to a driver task when the append that admitted bytes into it is
/// dropped before they were written (`Log::append`).
struct Driven<'a, S: Storage> {
    log: &'a Log<S>,
    armed: bool,
}

impl<S: Storage> Driven<'_, S> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl<S: Storage> Drop for Driven<'_, S> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let pending = {
            let state = self.log.state.borrow();
            state.failed.is_none() && state.appender.written() < state.appender.end()
        };
        let Some(log) = self.log.me.upgrade().filter(|_| pending) else { return };
        self.log.ctx.storage.spawn(async move {
            let _ = log.drive_until(i64::MIN, |s| s.appender.written() == s.appender.end()).await;
        });
    }
}
