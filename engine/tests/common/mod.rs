//! Helpers shared by the engine's integration tests: a glommio executor per test, a
//! temp data directory, and batch builders.
#![allow(dead_code)]

use std::future::Future;
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use skein_engine::io::dma::DmaStorage;
use skein_engine::io::fault::{FaultPlan, FaultStorage};
use skein_engine::io::Storage;
use skein_engine::log::{Log, LogContext};
use skein_engine::records::{build_batch, Compression, Record};
use skein_engine::{AppendMode, Batch, LeaderEpoch, LogConfig, Offset, TopicPartition};

/// Runs `f` on a fresh glommio executor on this thread.
pub fn run<T>(f: impl Future<Output = T>) -> T {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("glommio executor (io_uring must be available)")
        .run(f)
}

pub fn context<S: Storage>(storage: S, cache_bytes: usize) -> LogContext<S> {
    LogContext::new(storage, std::env::temp_dir(), cache_bytes)
}

pub fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

pub async fn open<S: Storage>(storage: S, dir: &Path, config: LogConfig) -> skein_engine::Result<Rc<Log<S>>> {
    Log::open(context(storage, 64 << 20), dir.join("t-0"), tp(), 0, config).await
}

pub async fn open_dma(dir: &Path, config: LogConfig) -> Rc<Log<DmaStorage>> {
    open(DmaStorage, dir, config).await.expect("open")
}

pub fn faulty(plan: &Rc<FaultPlan>) -> FaultStorage<DmaStorage> {
    FaultStorage::new(DmaStorage, plan.clone())
}

/// A batch of `count` records whose values name their batch: `value-<tag>-<i>`.
pub fn tagged(tag: u64, count: i32) -> Batch {
    let records: Vec<Record> = (0..count)
        .map(|i| Record {
            timestamp_delta: i as i64,
            offset_delta: i,
            value: Some(Bytes::from(format!("value-{tag}-{i}"))),
            ..Record::default()
        })
        .collect();
    Batch::validate(Bytes::from(build_batch(0, 1_000 + tag as i64, Compression::None, &records)), usize::MAX).unwrap()
}

/// A batch of keyed records `(key, value)`; `None` values are tombstones.
pub fn keyed(base_timestamp: i64, compression: Compression, pairs: &[(&str, Option<&str>)]) -> Batch {
    let records: Vec<Record> = pairs
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            timestamp_delta: i as i64,
            offset_delta: i as i32,
            key: Some(Bytes::copy_from_slice(k.as_bytes())),
            value: v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
            ..Record::default()
        })
        .collect();
    Batch::validate(Bytes::from(build_batch(0, base_timestamp, compression, &records)), usize::MAX).unwrap()
}

pub const LEADER: AppendMode = AppendMode::Leader { epoch: LeaderEpoch(0) };

/// Reads every batch from `from` to the written end.
pub async fn read_all<S: Storage>(log: &Log<S>, from: Offset) -> Vec<Batch> {
    let mut out: Vec<Batch> = Vec::new();
    let mut next = from;
    loop {
        let batches = log.read(next, 1 << 20, None).await.expect("read");
        let Some(last) = batches.last() else { return out };
        next = last.next_offset();
        out.extend(batches);
    }
}

/// Base offsets of every batch from the log start.
pub async fn bases<S: Storage>(log: &Log<S>) -> Vec<i64> {
    read_all(log, log.log_start_offset()).await.iter().map(|b| b.base_offset().0).collect()
}

/// Small segments so tests roll often.
pub fn small_segments(segment_bytes: u64) -> LogConfig {
    LogConfig { segment_bytes, index_interval_bytes: 256, ..LogConfig::default() }
}
