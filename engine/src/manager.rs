//! The per-shard log manager: owns the logs of one shard, creates and deletes their
//! directories, runs housekeeping (flush.ms, retention, compaction, checkpoints), and
//! knows the free space of the data directory.
//!
//! Partition directories live directly under the data directory, named as Kafka names
//! them. A shard opens only the partitions it owns (`open_existing` takes the filter);
//! a partition that fails to open (corruption) is reported and left offline while the
//! others serve.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::cache::BatchCache;
use crate::config::LogConfig;
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::log::{Log, LogContext};
use crate::metrics::EngineMetrics;
use crate::types::{TimestampMs, TopicPartition};

pub struct LogManager<S: Storage> {
    data_dir: PathBuf,
    ctx: LogContext<S>,
    logs: RefCell<BTreeMap<TopicPartition, Rc<Log<S>>>>,
    next_key: Cell<u64>,
}

impl<S: Storage> LogManager<S> {
    /// A manager over `data_dir` with a batch cache of `cache_bytes`.
    pub fn new(storage: S, data_dir: impl Into<PathBuf>, cache_bytes: usize) -> LogManager<S> {
        LogManager {
            data_dir: data_dir.into(),
            ctx: LogContext {
                storage,
                cache: Rc::new(RefCell::new(BatchCache::new(cache_bytes))),
                metrics: Rc::new(EngineMetrics::default()),
            },
            logs: RefCell::new(BTreeMap::new()),
            next_key: Cell::new(0),
        }
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

    /// Partition directories present on disk. Blocks the reactor briefly: start-up only.
    ///
    /// # Errors
    /// `Io` when the data directory cannot be listed.
    pub fn discover(&self) -> Result<Vec<TopicPartition>> {
        match self.ctx.storage.list_dir(&self.data_dir) {
            Ok(names) => Ok(names.iter().filter_map(|n| TopicPartition::from_dir_name(n)).collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(Error::io("list", &self.data_dir, e)),
        }
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
        for partition in self.discover()? {
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
        let dir = self.data_dir.join(partition.dir_name());
        let log = Log::open(self.ctx.clone(), dir, partition.clone(), key, config).await?;
        self.logs.borrow_mut().insert(partition, log.clone());
        Ok(log)
    }

    /// Creates a new, empty log.
    ///
    /// # Errors
    /// `PartitionExists` when it is open or its directory exists.
    pub async fn create(&self, partition: TopicPartition, config: LogConfig) -> Result<Rc<Log<S>>> {
        if self.get(&partition).is_some() || self.discover()?.contains(&partition) {
            return Err(Error::PartitionExists(partition));
        }
        self.open(partition, config).await
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
        let log = self.logs.borrow_mut().remove(partition).ok_or_else(|| Error::UnknownPartition(partition.clone()))?;
        log.delete().await
    }

    /// Closes a log cleanly and forgets it (a partition moving to another shard).
    ///
    /// # Errors
    /// `UnknownPartition`, or as `Log::close`.
    pub async fn close(&self, partition: &TopicPartition) -> Result<()> {
        let log = self.logs.borrow_mut().remove(partition).ok_or_else(|| Error::UnknownPartition(partition.clone()))?;
        log.close().await
    }

    /// One housekeeping pass over every log: idle tail buffers released, `flush.ms`,
    /// retention, compaction and a checkpoint. Errors are logged per log and do not stop the pass.
    pub async fn housekeeping(&self, now: TimestampMs) {
        let logs: Vec<_> = self.logs.borrow().values().cloned().collect();
        for log in logs {
            let partition = log.partition().clone();
            log.release_idle_buffers();
            let result = async {
                log.flush_if_due(now).await?;
                log.apply_retention(now).await?;
                log.compact(now).await?;
                log.checkpoint().await
            }
            .await;
            if let Err(e) = result {
                tracing::warn!(target: "skein::engine", partition = %partition, error = %e, "housekeeping failed");
            }
        }
    }

    /// Closes every log cleanly (shutdown). Returns the logs that failed to close.
    pub async fn close_all(&self) -> Vec<(TopicPartition, Error)> {
        let logs: Vec<_> = std::mem::take(&mut *self.logs.borrow_mut()).into_iter().collect();
        let mut failed = Vec::new();
        for (partition, log) in logs {
            if let Err(e) = log.close().await {
                failed.push((partition, e));
            }
        }
        failed
    }
}
