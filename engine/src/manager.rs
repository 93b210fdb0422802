//! The per-shard log manager: owns the logs of one shard, creates and deletes their
//! directories, runs housekeeping (flush.ms, retention, compaction, checkpoints), and
//! knows the free space of the data directory.
//!
//! Partition directories live directly under the node's log directories (`log_dirs.rs`;
//! one, the data directory, unless `--log-dirs` names more), named as Kafka names them:
//! a partition stays in the directory it is in, and a new one goes to the shard's home
//! directory. A shard opens only the partitions it owns (`open_existing` takes the
//! filter); a partition that fails to open (corruption) is reported and left offline
//! while the others serve.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use crate::cache::BatchCache;
use crate::config::{LogConfig, WriteShape};
use crate::error::{Error, Result};
use crate::io::{self, Storage};
use crate::log::{CleanerConfig, CompactionStats, Dirtiness, Log, LogContext};
use crate::log_dirs::LogDirs;
use crate::metrics::EngineMetrics;
use crate::offset_map::OffsetMap;
use crate::types::{Offset, TimestampMs, TopicPartition};

/// How much the scrubber reads in one step before it paces itself.
pub const SCRUB_STEP_BYTES: usize = 1 << 20;

/// What one scrubber pass read and found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ScrubPass {
    pub bytes: u64,
    pub corrupt: u64,
}

pub struct LogManager<S: Storage> {
    /// The node's own directory: node-wide checkpoints (`write_file`).
    data_dir: PathBuf,
    /// The node's log directories, shared by its shards, and where each partition is.
    dirs: Arc<LogDirs>,
    /// The log directory this shard creates partitions in.
    home: usize,
    ctx: LogContext<S>,
    logs: RefCell<BTreeMap<TopicPartition, Rc<Log<S>>>>,
    /// The topic id each log was opened for (`open_for_topic`).
    topic_ids: RefCell<BTreeMap<TopicPartition, [u8; 16]>>,
    /// One lock per partition, held while its log is opened or deleted: a new
    /// incarnation never opens files in a directory that is being renamed away.
    partition_locks: RefCell<BTreeMap<TopicPartition, Rc<async_lock::Mutex<()>>>>,
    next_key: Cell<u64>,
    /// The log cleaner's settings for this shard.
    cleaner: RefCell<CleanerConfig>,
    /// The cleaner's offset map, allocated at its first pass and kept (taken out while
    /// a pass runs).
    offset_map: RefCell<Option<OffsetMap>>,
    /// `LogContext::clean_start` for the logs opened from now on.
    clean_start: Cell<bool>,
}

impl<S: Storage> LogManager<S> {
    /// A manager over `data_dir` with a batch cache of `cache_bytes`.
    /// Sets the adaptive group commit's maximum delay for the logs opened from now on
    /// (`log/coalesce.rs`); zero, the default, never holds a write back.
    pub fn with_group_commit(mut self, max_delay: std::time::Duration) -> LogManager<S> {
        self.ctx.group_commit_max_delay = max_delay;
        self
    }

    /// Shares the node's log directories (their free-space state, `space.rs`, and
    /// where each partition is) with its other shards; this shard creates partitions in
    /// directory `home`. For the logs opened from now on.
    ///
    /// # Panics
    /// When `home` is not one of the directories.
    pub fn with_log_dirs(mut self, dirs: Arc<LogDirs>, home: usize) -> LogManager<S> {
        self.ctx.space = dirs.get(home).expect("the home directory is a log directory").space.clone();
        self.dirs = dirs;
        self.home = home;
        self
    }

    /// The node's log directories.
    pub fn log_dirs(&self) -> &Arc<LogDirs> {
        &self.dirs
    }

    /// Sets the shard's tail-buffer budget (`log/budget.rs`) for the logs opened from
    /// now on; `LogManager::new` starts from `SHARD_TAIL_BUFFER_BYTES_MAX`.
    pub fn with_tail_budget(mut self, bytes: u64) -> LogManager<S> {
        self.ctx.tail_budget = Rc::new(crate::log::TailBudget::new(bytes));
        self
    }

    /// The shard's tail-buffer budget: what its logs hold appended and not written.
    pub fn tail_budget(&self) -> &Rc<crate::log::TailBudget> {
        &self.ctx.tail_budget
    }

    /// Whether the shard's home directory has room for appends, as they last found it.
    pub fn space(&self) -> &crate::space::SpaceWatch {
        &self.ctx.space
    }

    /// Sets the shape of the appenders' writes for the logs opened from now on (chunk
    /// size, writes in flight per file); `LogManager::new` starts from the defaults of
    /// `limits.rs`.
    ///
    /// # Panics
    /// When the shape is out of the bounds of `limits.rs` (validate it first).
    pub fn with_write_shape(mut self, shape: WriteShape) -> LogManager<S> {
        shape.validate().expect("a validated write shape");
        self.ctx.write_shape = shape;
        self
    }

    pub fn new(storage: S, data_dir: impl Into<PathBuf>, cache_bytes: usize) -> LogManager<S> {
        let data_dir = data_dir.into();
        let dirs = Arc::new(LogDirs::single(data_dir.clone()));
        let mut ctx = LogContext::new(storage, data_dir.clone(), cache_bytes);
        ctx.space = dirs.dirs()[0].space.clone();
        LogManager {
            ctx,
            data_dir,
            dirs,
            home: 0,
            logs: RefCell::new(BTreeMap::new()),
            topic_ids: RefCell::new(BTreeMap::new()),
            partition_locks: RefCell::new(BTreeMap::new()),
            next_key: Cell::new(0),
            cleaner: RefCell::new(CleanerConfig::default()),
            offset_map: RefCell::new(None),
            clean_start: Cell::new(false),
        }
    }

    /// Says whether the node stopped cleanly before this start, for the logs opened
    /// from now on (`LogContext::clean_start`); the node sets it for its start-up
    /// recovery and clears it afterwards.
    pub fn set_clean_start(&self, clean: bool) {
        self.clean_start.set(clean);
    }

    /// Sets the log cleaner's settings (broker configs, this shard's share).
    pub fn set_cleaner_config(&self, config: CleanerConfig) {
        *self.cleaner.borrow_mut() = config;
    }

    /// Cleans the dirtiest compacted log whose dirty ratio reached its
    /// `min.cleanable.dirty.ratio`, or whose `max.compaction.lag.ms` passed (those
    /// first); `None` when no log is due. One pass, bounded by the cleaner's settings.
    pub async fn clean_dirtiest(&self, now: TimestampMs) -> Option<(TopicPartition, Result<CompactionStats>)> {
        let logs: Vec<_> = self.logs.borrow().values().cloned().collect();
        let mut dirtiest: Option<(Rc<Log<S>>, Dirtiness)> = None;
        for log in logs {
            let config = log.config();
            if !config.cleanup_policy.compact {
                continue;
            }
            log.load_cleaner_checkpoint().await;
            let Some(dirtiness) = log.dirtiness(now).filter(|d| d.due(&config)) else { continue };
            let rank = |d: &Dirtiness| (d.overdue, d.ratio);
            if dirtiest.as_ref().is_none_or(|(_, best)| rank(&dirtiness) > rank(best)) {
                dirtiest = Some((log, dirtiness));
            }
        }
        let (log, _) = dirtiest?;
        let cleaner = self.cleaner.borrow().clone();
        let mut map = match self.offset_map.take() {
            Some(map) if map.memory_bytes() == OffsetMap::memory_for(cleaner.dedupe_buffer_bytes) => map,
            _ => OffsetMap::allocate(cleaner.dedupe_buffer_bytes).await,
        };
        let result = log.clean(now, &cleaner, &mut map).await;
        *self.offset_map.borrow_mut() = Some(map);
        Some((log.partition().clone(), result))
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn metrics(&self) -> &Rc<EngineMetrics> {
        &self.ctx.metrics
    }

    pub fn cache(&self) -> &Rc<RefCell<BatchCache>> {
        &self.ctx.cache
    }

    /// Free bytes on the data directory's file system.
    ///
    /// # Errors
    /// `Io` when the file system cannot be queried.
    pub fn available_bytes(&self) -> Result<u64> {
        self.ctx.storage.available_bytes(&self.data_dir).map_err(|e| Error::io("statvfs", &self.data_dir, e))
    }

    /// Partition directories present on disk, in every log directory (each recorded
    /// where it is found).
    ///
    /// # Errors
    /// `Io` when a log directory cannot be listed.
    pub async fn discover(&self) -> Result<Vec<TopicPartition>> {
        let mut found = Vec::new();
        for (index, dir) in self.dirs.dirs().iter().enumerate() {
            let names = match self.ctx.storage.list_dir(dir.path()).await {
                Ok(names) => names,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io("list", dir.path(), e)),
            };
            for partition in names.iter().filter_map(|n| TopicPartition::from_dir_name(n)) {
                self.dirs.set_located(&partition, index);
                found.push(partition);
            }
        }
        Ok(found)
    }

    /// The log directory `partition` is in, or goes to: where the node found or put
    /// it, else (with more than one directory) where a directory of its name exists,
    /// else this shard's home (or the next directory not cordoned).
    async fn dir_of(&self, partition: &TopicPartition) -> usize {
        if let Some(index) = self.dirs.located(partition) {
            return index;
        }
        let dirs = self.dirs.dirs();
        if dirs.len() > 1 {
            for (index, dir) in dirs.iter().enumerate().filter(|(_, d)| !d.space.is_failed()) {
                if self.ctx.storage.list_dir(&dir.path().join(partition.dir_name())).await.is_ok() {
                    self.dirs.set_located(partition, index);
                    return index;
                }
            }
        }
        self.dirs.for_new_partition(self.home)
    }

    /// The context and directory of `partition`'s log: its log directory's free-space
    /// state, and the path under it.
    ///
    /// # Errors
    /// `DirOffline` when that directory failed.
    async fn placed(&self, partition: &TopicPartition) -> Result<(LogContext<S>, PathBuf, usize)> {
        let index = self.dir_of(partition).await;
        let dir = &self.dirs.dirs()[index];
        if dir.space.is_failed() {
            return Err(Error::DirOffline { partition: partition.clone(), dir: dir.path().to_owned() });
        }
        let mut ctx = self.ctx.clone();
        ctx.space = dir.space.clone();
        Ok((ctx, dir.path().join(partition.dir_name()), index))
    }

    /// Forgets the logs of this shard in directories that failed, without closing
    /// them (their files take no more I/O). Returns the partitions forgotten.
    pub fn forget_offline(&self) -> Vec<TopicPartition> {
        let offline: Vec<TopicPartition> =
            self.logs.borrow().keys().filter(|p| self.dirs.is_offline(p)).cloned().collect();
        for partition in &offline {
            self.logs.borrow_mut().remove(partition);
            self.topic_ids.borrow_mut().remove(partition);
        }
        offline
    }

    /// The path of the log directory `partition` is in, when it is open or known.
    pub fn log_dir_of(&self, partition: &TopicPartition) -> Option<PathBuf> {
        self.dirs.located(partition).and_then(|i| self.dirs.get(i)).map(|d| d.path().to_owned())
    }

    /// Opens every partition on disk for which `config_of` returns a config (the
    /// partitions this shard owns). Returns the partitions that failed to open; they
    /// stay offline, the others serve.
    ///
    /// # Errors
    /// `Io` when the data directory cannot be listed.
    pub async fn open_existing(
        &self,
        config_of: impl Fn(&TopicPartition) -> Option<LogConfig>,
    ) -> Result<Vec<(TopicPartition, Error)>> {
        let mut failed = Vec::new();
        for partition in self.discover().await? {
            let Some(config) = config_of(&partition) else { continue };
            if let Err(e) = self.open(partition.clone(), config).await {
                tracing::error!(target: "skein::engine", partition = %partition, error = %e, "partition offline");
                failed.push((partition, e));
            }
        }
        Ok(failed)
    }

    /// Opens (recovering) or creates the log of `partition`.
    ///
    /// # Errors
    /// As `Log::open`.
    pub async fn open(&self, partition: TopicPartition, config: LogConfig) -> Result<Rc<Log<S>>> {
        if let Some(log) = self.get(&partition) {
            return Ok(log);
        }
        let key = self.next_key.get();
        self.next_key.set(key + 1);
        let (mut ctx, dir, index) = self.placed(&partition).await?;
        ctx.clean_start = self.clean_start.get();
        let log = Log::open(ctx, dir, partition.clone(), key, config).await?;
        self.dirs.set_located(&partition, index);
        self.logs.borrow_mut().insert(partition, log.clone());
        Ok(log)
    }

    /// Opens or creates the log of `partition` for the topic whose id is `topic_id`:
    /// the directory's `partition.metadata` (Kafka's file: version and topic id) must
    /// name that id, and is written when missing. So a directory left by another
    /// incarnation of the topic is never served as this one.
    ///
    /// An I/O error of the device (EIO, a read-only file system) while opening or
    /// creating a log fails its directory, as a failed write does (`Log::fail`).
    ///
    /// # Errors
    /// `TopicIdMismatch`, or as `Log::open`.
    pub async fn open_for_topic(
        &self,
        partition: TopicPartition,
        config: LogConfig,
        topic_id: [u8; 16],
    ) -> Result<Rc<Log<S>>> {
        let opened = self.open_for_topic_here(partition.clone(), config, topic_id).await;
        if let Err(Error::Io { source, .. }) = &opened {
            if crate::log_dirs::is_device_failure(source) {
                let index = self.dir_of(&partition).await;
                self.dirs.set_located(&partition, index);
                if let Some(dir) = self.dirs.get(index) {
                    dir.space.failed(&partition, &opened.as_ref().err().map(ToString::to_string).unwrap_or_default());
                }
            }
        }
        opened
    }

    async fn open_for_topic_here(
        &self,
        partition: TopicPartition,
        config: LogConfig,
        topic_id: [u8; 16],
    ) -> Result<Rc<Log<S>>> {
        let lock = self.partition_lock(&partition);
        let _guard = lock.lock().await;
        if let Some(log) = self.get(&partition) {
            match self.topic_ids.borrow().get(&partition) {
                Some(id) if *id != topic_id => {}
                _ => return Ok(log),
            }
            // The open log is an older incarnation of the topic, whose deletion has
            // not reached this shard yet: it goes now, and its late removal will find
            // a log of another id and leave it alone (`delete_for_topic`).
            self.delete_locked(&partition).await?;
        }
        let (_, dir, _) = self.placed(&partition).await?;
        let path = dir.join(PARTITION_METADATA);
        let expected = topic_id_text(topic_id);
        let on_disk = io::read_whole(&self.ctx.storage, &path).await.map_err(|e| Error::io("read", &path, e))?;
        let found = on_disk.as_ref().and_then(|bytes| {
            partition_metadata_topic_id(&String::from_utf8_lossy(bytes)).filter(|id| !id.is_empty()).map(str::to_owned)
        });
        let content = format!("version: 0\ntopic_id: {expected}\n");
        let log = match found {
            Some(found) if found != expected => return Err(Error::TopicIdMismatch { partition, expected, found }),
            Some(_) => self.open(partition.clone(), config).await?,
            None => {
                // A new partition: created with its file in a few operations
                // (`Log::create`).
                let identity = [(PARTITION_METADATA, content.as_bytes())];
                match self.create_with(partition.clone(), config.clone(), &identity).await {
                    Ok(log) => log,
                    // A directory without the file (a crash between its creation and
                    // the file's), or whose file names no topic: written again, whole,
                    // before the log opens.
                    Err(Error::PartitionExists(_)) => {
                        io::write_whole_atomic(&self.ctx.storage, &path, content.as_bytes())
                            .await
                            .map_err(|e| Error::io("write", &path, e))?;
                        self.open(partition.clone(), config).await?
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        self.topic_ids.borrow_mut().insert(partition, topic_id);
        Ok(log)
    }

    /// Replaces the file `name` in the data directory with `bytes`, whole and durably
    /// (a temp file, fdatasync, rename, directory sync): node-wide checkpoints.
    ///
    /// # Errors
    /// `Io` when the file cannot be written.
    pub async fn write_file(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        let path = self.data_dir.join(name);
        io::write_whole_atomic(&self.ctx.storage, &path, bytes).await.map_err(|e| Error::io("write", &path, e))
    }

    /// Removes the directories of deleted partitions (`<topic>-<partition>.<id>-delete`,
    /// renamed by `Log::delete`). Run by one shard: at start, and on its housekeeping.
    /// Returns how many were removed.
    ///
    /// # Errors
    /// `Io` when the data directory cannot be listed; a directory that cannot be
    /// removed now is retried on the next call.
    pub async fn remove_deleted_dirs(&self) -> Result<usize> {
        let mut removed = 0;
        for log_dir in self.dirs.dirs() {
            let parent = log_dir.path();
            let names = match self.ctx.storage.list_dir(parent).await {
                Ok(names) => names,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io("list", parent, e)),
            };
            let mut here = 0;
            for name in names.into_iter().filter(|n| n.ends_with(DELETED_SUFFIX)) {
                let dir = parent.join(&name);
                match crate::relocate::remove_dir_all(&self.ctx.storage, &dir).await {
                    Ok(()) => here += 1,
                    Err(e) => {
                        tracing::warn!(target: "skein::engine", dir = %dir.display(), error = %e, "cannot remove a deleted partition yet")
                    }
                }
            }
            if here > 0 {
                self.ctx.storage.sync_dir(parent).await.map_err(|e| Error::io("sync", parent, e))?;
            }
            removed += here;
        }
        Ok(removed)
    }

    /// Step 1 of moving `partition` to log directory `target` (`relocate.rs`): copies
    /// its directory there while it serves.
    ///
    /// # Errors
    /// `UnknownPartition` when it is not open here; `Io` from the copy.
    pub async fn precopy(&self, partition: &TopicPartition, target: usize) -> Result<crate::relocate::Precopy> {
        let log = self.get(partition).ok_or_else(|| Error::UnknownPartition(partition.clone()))?;
        let parent = self.dirs.get(target).ok_or_else(|| Error::UnknownPartition(partition.clone()))?.path().to_owned();
        crate::relocate::precopy(&self.ctx.storage, log.dir(), &parent).await
    }

    /// Step 2 of a move: the log closes (appends already admitted are written first),
    /// the copy catches up and replaces the original, and the partition opens from its
    /// new directory from now on (the caller opens it again). On an error the original
    /// stays where it was. Holds the partition's lock throughout, so no open comes in
    /// between.
    ///
    /// Returns the bytes this step copied.
    ///
    /// # Errors
    /// `Io` for the step that failed.
    pub async fn finish_move(&self, partition: &TopicPartition, precopy: crate::relocate::Precopy) -> Result<u64> {
        let lock = self.partition_lock(partition);
        let _guard = lock.lock().await;
        if self.get(partition).is_some() {
            self.close(partition).await?;
        }
        let (target, bytes) = crate::relocate::finish(&self.ctx.storage, precopy).await?;
        if let Some(index) = target.parent().and_then(|p| self.dirs.index_of(p)) {
            self.dirs.set_located(partition, index);
        }
        Ok(bytes)
    }

    /// Creates a new, empty log.
    ///
    /// # Errors
    /// `PartitionExists` when it is open or its directory exists.
    pub async fn create(&self, partition: TopicPartition, config: LogConfig) -> Result<Rc<Log<S>>> {
        self.create_with(partition, config, &[]).await
    }

    /// `create`, with `identity` files written into the new directory (`Log::create`).
    async fn create_with(
        &self,
        partition: TopicPartition,
        config: LogConfig,
        identity: &[(&str, &[u8])],
    ) -> Result<Rc<Log<S>>> {
        if self.get(&partition).is_some() {
            return Err(Error::PartitionExists(partition));
        }
        let key = self.next_key.get();
        self.next_key.set(key + 1);
        let (ctx, dir, index) = self.placed(&partition).await?;
        let log = Log::create(ctx, dir, partition.clone(), key, config, identity).await?;
        self.dirs.set_located(&partition, index);
        self.logs.borrow_mut().insert(partition, log.clone());
        Ok(log)
    }

    pub fn get(&self, partition: &TopicPartition) -> Option<Rc<Log<S>>> {
        self.logs.borrow().get(partition).cloned()
    }

    pub fn partitions(&self) -> Vec<TopicPartition> {
        self.logs.borrow().keys().cloned().collect()
    }

    /// Deletes a partition's log and directory.
    ///
    /// # Errors
    /// `UnknownPartition`, or `Io` when files cannot be removed.
    pub async fn delete(&self, partition: &TopicPartition) -> Result<()> {
        let lock = self.partition_lock(partition);
        let _guard = lock.lock().await;
        self.delete_locked(partition).await
    }

    /// `delete`, with the partition's lock held by the caller.
    async fn delete_locked(&self, partition: &TopicPartition) -> Result<()> {
        let log = self.logs.borrow_mut().remove(partition).ok_or_else(|| Error::UnknownPartition(partition.clone()))?;
        self.topic_ids.borrow_mut().remove(partition);
        log.delete().await?;
        self.dirs.forget(partition);
        Ok(())
    }

    fn partition_lock(&self, partition: &TopicPartition) -> Rc<async_lock::Mutex<()>> {
        self.partition_locks.borrow_mut().entry(partition.clone()).or_default().clone()
    }

    /// Deletes a partition's log if it belongs to the topic with id `topic_id`; a log
    /// of another incarnation (recreated meanwhile) is left alone.
    ///
    /// # Errors
    /// `UnknownPartition`, or as `delete`.
    pub async fn delete_for_topic(&self, partition: &TopicPartition, topic_id: [u8; 16]) -> Result<()> {
        let lock = self.partition_lock(partition);
        let _guard = lock.lock().await;
        if self.topic_ids.borrow().get(partition).is_some_and(|id| *id != topic_id) {
            return Ok(());
        }
        self.delete_locked(partition).await
    }

    /// Closes a log cleanly and forgets it (a partition moving to another shard).
    ///
    /// # Errors
    /// `UnknownPartition`, or as `Log::close`.
    pub async fn close(&self, partition: &TopicPartition) -> Result<()> {
        let log = self.logs.borrow_mut().remove(partition).ok_or_else(|| Error::UnknownPartition(partition.clone()))?;
        self.topic_ids.borrow_mut().remove(partition);
        log.close().await
    }

    /// One housekeeping pass over every log: idle tail buffers and reservations
    /// released, `flush.ms`, retention and a checkpoint. Errors are logged per log and do not stop the pass.
    /// Compaction is the cleaner's (`clean_dirtiest`), apart from housekeeping.
    pub async fn housekeeping(&self, now: TimestampMs) {
        // A full directory is looked at again here too, so that the state (and
        // `skein_log_dir_full`) clears once space is freed even while nothing appends.
        for dir in self.dirs.dirs().iter().filter(|d| d.space.is_full()) {
            if let Ok(available) = self.ctx.storage.available_bytes(dir.path()) {
                if dir.space.would_take_refused(available) {
                    dir.space.has_room(available);
                }
            }
        }
        let logs: Vec<_> = self.logs.borrow().values().cloned().collect();
        let instant = std::time::Instant::now();
        for log in logs {
            let partition = log.partition().clone();
            log.release_idle_buffers();
            let result = async {
                log.trim_idle_reservation(instant).await?;
                log.flush_if_due(now).await?;
                log.apply_retention(now).await?;
                log.checkpoint_when_due(instant).await
            }
            .await;
            if let Err(e) = result {
                tracing::warn!(target: "skein::engine", partition = %partition, error = %e, "housekeeping failed");
            }
        }
    }

    /// One scrubber pass (`log/scrub.rs`): every log's stored batches read back from
    /// disk and CRC-checked, at most `bytes_per_sec` on average, in steps of
    /// `SCRUB_STEP_BYTES`. A corrupt batch is fenced and the pass goes on; a log whose
    /// read fails is logged and skipped.
    pub async fn scrub_pass(&self, bytes_per_sec: u64) -> ScrubPass {
        let mut throttle = crate::log::Throttle::new(bytes_per_sec.max(1) as f64);
        let mut pass = ScrubPass::default();
        let metrics = self.ctx.metrics.clone();
        for partition in self.partitions() {
            let mut from = Offset::ZERO;
            // A log deleted or closed meanwhile is left.
            while let Some(log) = self.get(&partition) {
                let step = match log.scrub(from, SCRUB_STEP_BYTES).await {
                    Ok(step) => step,
                    Err(e) => {
                        tracing::warn!(target: "skein::engine", partition = %partition, error = %e, "scrubbing failed");
                        break;
                    }
                };
                pass.bytes += step.bytes;
                pass.corrupt += step.corrupt.len() as u64;
                EngineMetrics::add(&metrics.scrubbed_bytes, step.bytes);
                throttle.account(step.bytes as usize).await;
                match step.next {
                    Some(next) => from = next,
                    None => break,
                }
            }
        }
        EngineMetrics::add(&metrics.scrub_passes, 1);
        pass
    }

    /// Closes every log cleanly (shutdown). Returns the logs that failed to close.
    pub async fn close_all(&self) -> Vec<(TopicPartition, Error)> {
        use futures_util::StreamExt;
        let logs: Vec<_> = std::mem::take(&mut *self.logs.borrow_mut()).into_iter().collect();
        // `CLOSES_IN_FLIGHT` at a time: each waits on an fdatasync and a few small
        // writes, which the ring overlaps and the file system commits together (one at
        // a time, 10,000 logs took 10 s to stop).
        futures_util::stream::iter(logs)
            .map(|(partition, log)| async move { log.close().await.err().map(|e| (partition, e)) })
            .buffer_unordered(crate::limits::CLOSES_IN_FLIGHT)
            .filter_map(|failed| async move { failed })
            .collect()
            .await
    }
}

/// Kafka's per-partition identity file.
pub const PARTITION_METADATA: &str = "partition.metadata";

pub use crate::segment::DELETED_SUFFIX;

/// The topic id named by a `partition.metadata` file's text.
pub fn partition_metadata_topic_id(text: &str) -> Option<&str> {
    text.lines().find_map(|l| l.strip_prefix("topic_id:")).map(str::trim)
}

/// A topic id as Kafka prints it: URL-safe base64 without padding.
pub fn topic_id_text(id: [u8; 16]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id)
}
