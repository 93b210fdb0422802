//! Power loss at every I/O point: a seeded workload of appends, flushes, rolls,
//! checkpoints, compaction, DeleteRecords and topic deletion runs on `FaultStorage`
//! with the power-loss model; power is cut at a seeded mutating operation, the data
//! directory is rewritten to what the cut leaves (`FaultPlan::power_loss`), and a
//! plain storage reopens it.
//!
//! What "acknowledged" means, per operation (the call completed with `Ok` before the
//! cut):
//! - a record is *durable* when its append returned with `flush.messages=1`, or a
//!   `flush` called after its append returned completed; it must survive with its
//!   offset and bytes, unless compaction superseded it (a later record of its key
//!   survives) or a DeleteRecords at least attempted moved the log start past it;
//! - `delete_records_before(s)`: the log start is at least `s` after recovery, so no
//!   record below it reappears;
//! - a topic delete (`LogManager::delete`): no record of that incarnation reappears;
//! - `open_for_topic`: the partition and its `partition.metadata` exist after recovery
//!   (unless a delete was attempted since).
//!
//! One seed in four crashes the process at the cut instead, restarts it and recovers
//! on the same model, appends and flushes on, and cuts power during or after that;
//! every record the restarted open recovered is then durable too (the open says so:
//! its recovery point is the log end).
//!
//! Recovery must return `Ok` (power loss alone is never corruption) and the log must
//! take appends right after it. `SKEIN_POWER_LOSS_SEEDS` sets the number of seeds
//! (default 200; the soak is 10,000), `SKEIN_POWER_LOSS_SEED=n` replays one.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use skein_engine::io::dma::DmaStorage;
use skein_engine::io::fault::{FaultPlan, FaultStorage, PowerCut};
use skein_engine::io::Storage;
use skein_engine::records::{build_batch, decode_records, Compression, Record};
use skein_engine::{Batch, CleanupPolicy, Log, LogConfig, LogManager, Offset};

const SEEDS_DEFAULT: u64 = 200;

/// One life of the partition, between a creation and a deletion.
#[derive(Debug, Default)]
struct Incarnation {
    config: LogConfig,
    /// `open_for_topic` returned.
    created: bool,
    /// Every record appended (attempted), by value: its key.
    appended: HashMap<String, Option<String>>,
    /// Records whose append returned: offset -> (key, value).
    acked: BTreeMap<i64, (Option<String>, String)>,
    /// Offsets of durable records (see the module docs).
    durable: BTreeSet<i64>,
    /// The highest start offset a DeleteRecords asked for, and the highest one
    /// acknowledged.
    start_attempted: i64,
    start_acked: i64,
    delete_attempted: bool,
    deleted: bool,
}

/// What the workload did before the cut.
#[derive(Debug, Default)]
struct History {
    incarnations: Vec<Incarnation>,
}

fn topic_id(incarnation: usize) -> [u8; 16] {
    [incarnation as u8 + 1; 16]
}

fn config(rng: &mut StdRng) -> LogConfig {
    LogConfig {
        segment_bytes: [1 << 10, 2 << 10, 4 << 10][rng.random_range(0..3)],
        index_interval_bytes: 256,
        cleanup_policy: CleanupPolicy::COMPACT,
        delete_retention_ms: i64::MAX / 4,
        flush_messages: if rng.random_bool(0.5) { 1 } else { u64::MAX },
        ..LogConfig::default()
    }
}

/// The (key, value) of each record of a batch, in order.
type Records = Vec<(Option<String>, String)>;

/// A batch of 1-3 records whose values name the incarnation and tag; most are keyed
/// from a small set, so compaction finds superseded records.
fn batch(rng: &mut StdRng, incarnation: usize, tag: u64) -> (Batch, Records) {
    let count = rng.random_range(1..=3);
    let mut records = Vec::new();
    let mut model = Vec::new();
    for i in 0..count {
        let key = rng.random_bool(0.8).then(|| format!("k{}", rng.random_range(0..6)));
        let filler = "x".repeat(rng.random_range(0..200));
        let value = format!("i{incarnation}-{tag}-{i}-{filler}");
        records.push(Record {
            timestamp_delta: i64::from(i),
            offset_delta: i,
            key: key.clone().map(Bytes::from),
            value: Some(Bytes::from(value.clone())),
            ..Record::default()
        });
        model.push((key, value));
    }
    let bytes = build_batch(0, 1_000 + tag as i64, Compression::None, &records);
    (Batch::validate(Bytes::from(bytes), usize::MAX).unwrap(), model)
}

/// Runs the seed's workload until it ends or an operation fails (the cut). Returns
/// whether it ended.
async fn workload<S: Storage>(manager: &LogManager<S>, rng: &mut StdRng, history: &mut History) -> bool {
    let mut tag = 0u64;
    let mut incarnation = 0;
    history.incarnations.push(Incarnation { config: config(rng), ..Incarnation::default() });
    let Ok(mut log) = manager.open_for_topic(tp(), history.incarnations[0].config.clone(), topic_id(0)).await else {
        return false;
    };
    history.incarnations[0].created = true;
    for _ in 0..30 {
        let inc = &mut history.incarnations[incarnation];
        let ok = match rng.random_range(0..100) {
            0..50 => {
                let burst = rng.random_range(1..=3);
                let mut batches = Vec::new();
                for _ in 0..burst {
                    let (batch, records) = batch(rng, incarnation, tag);
                    tag += 1;
                    for (key, value) in &records {
                        inc.appended.insert(value.clone(), key.clone());
                    }
                    batches.push((batch, records));
                }
                append_burst(&log, batches, inc).await
            }
            50..62 => {
                let acked: Vec<i64> = inc.acked.keys().copied().collect();
                let ok = log.flush().await.is_ok();
                if ok {
                    inc.durable.extend(acked);
                }
                ok
            }
            62..68 => log.roll().await.is_ok(),
            68..76 => log.checkpoint().await.is_ok(),
            76..84 => log.compact(i64::MAX / 2).await.is_ok(),
            84..92 => {
                let (start, end) = (log.log_start_offset().0, log.log_end_offset().0);
                let target = rng.random_range(start..=end);
                inc.start_attempted = inc.start_attempted.max(target);
                let ok = log.delete_records_before(Offset(target)).await.is_ok();
                if ok {
                    inc.start_acked = inc.start_acked.max(target);
                }
                ok
            }
            92..96 => manager.remove_deleted_dirs().await.is_ok(),
            _ => {
                inc.delete_attempted = true;
                if manager.delete(&tp()).await.is_err() {
                    return false;
                }
                inc.deleted = true;
                incarnation += 1;
                history.incarnations.push(Incarnation { config: config(rng), ..Incarnation::default() });
                let config = history.incarnations[incarnation].config.clone();
                match manager.open_for_topic(tp(), config, topic_id(incarnation)).await {
                    Ok(new) => log = new,
                    Err(_) => return false,
                }
                history.incarnations[incarnation].created = true;
                true
            }
        };
        if !ok {
            return false;
        }
    }
    true
}

/// Appends the batches concurrently (one group commit); returns whether all were
/// acknowledged.
async fn append_burst<S: Storage>(log: &Rc<Log<S>>, batches: Vec<(Batch, Records)>, inc: &mut Incarnation) -> bool {
    let flush_each = inc.config.flush_messages == 1;
    let tasks: Vec<_> = batches
        .into_iter()
        .map(|(batch, records)| {
            let log = log.clone();
            glommio::spawn_local(async move { (log.append(batch, LEADER).await, records) })
        })
        .collect();
    let mut all = true;
    for task in tasks {
        let (result, records) = task.await;
        match result {
            Ok(info) => {
                for (i, (key, value)) in records.into_iter().enumerate() {
                    let offset = info.base_offset.0 + i as i64;
                    inc.acked.insert(offset, (key, value));
                    if flush_each {
                        inc.durable.insert(offset);
                    }
                }
            }
            Err(_) => all = false,
        }
    }
    all
}

/// The records a log serves from its start: (offset, key, value).
async fn records_of<S: Storage>(log: &Log<S>) -> Vec<(i64, Option<String>, String)> {
    let mut out = Vec::new();
    let start = log.log_start_offset();
    for batch in read_all(log, start).await {
        for record in decode_records(&batch.bytes(), 1 << 30).unwrap() {
            let offset = batch.base_offset().0 + record.offset_delta as i64;
            if offset >= start.0 {
                let text = |b: Bytes| String::from_utf8(b.to_vec()).unwrap();
                out.push((offset, record.key.map(text), record.value.map(text).expect("no tombstones")));
            }
        }
    }
    out
}

/// Which incarnation wrote a value (`i<n>-...`).
fn incarnation_of(value: &str) -> usize {
    value[1..value.find('-').unwrap()].parse().unwrap()
}

/// Reopens the cut directory with the plain storage and checks the promises.
async fn check(root: &Path, history: &History, context: &str) {
    // A `partition.metadata` torn by the cut (written in place before the directory's
    // sync) names no topic and counts as missing: the next open writes it again. One
    // naming a topic must name one the workload created.
    let metadata = std::fs::read_to_string(root.join("t-0").join(skein_engine::manager::PARTITION_METADATA)).ok();
    let named = metadata.as_deref().and_then(|text| {
        skein_engine::manager::partition_metadata_topic_id(text).filter(|id| !id.is_empty()).map(|id| (id, text))
    });
    let on_disk = named.map(|(id, text)| {
        (0..history.incarnations.len())
            .find(|&i| skein_engine::manager::topic_id_text(topic_id(i)) == id)
            .unwrap_or_else(|| panic!("{context}: partition.metadata names no topic the workload created: {text:?}"))
    });
    let last = history.incarnations.len() - 1;
    let current = &history.incarnations[last];
    let manager = LogManager::new(DmaStorage, root, 1 << 20);
    let found = manager.discover().await.unwrap();
    if current.created && !current.delete_attempted {
        assert_eq!(found, vec![tp()], "{context}: the created partition is gone");
        assert_eq!(on_disk, Some(last), "{context}: partition.metadata of the created partition");
    }
    if found.is_empty() {
        return;
    }
    // Open as whichever incarnation the directory holds.
    let config = on_disk.map_or(current.config.clone(), |i| history.incarnations[i].config.clone());
    let log = match manager.open(tp(), config).await {
        Ok(log) => log,
        Err(e) => panic!("{context}: recovery failed: {e}"),
    };
    let records = records_of(&log).await;
    let mut owner = on_disk;
    for (offset, key, value) in &records {
        let i = incarnation_of(value);
        assert!(owner.is_none_or(|o| o == i), "{context}: offset {offset} of incarnation {i} in {owner:?}'s log");
        owner = Some(i);
        let inc = &history.incarnations[i];
        assert!(!inc.deleted, "{context}: offset {offset} of deleted incarnation {i} reappeared");
        assert_eq!(inc.appended.get(value), Some(key), "{context}: offset {offset} holds a record never appended");
        if let Some((_, acked)) = inc.acked.get(offset) {
            assert_eq!(acked, value, "{context}: offset {offset} holds another record");
        }
    }
    if let Some(i) = owner {
        let inc = &history.incarnations[i];
        let start = log.log_start_offset().0;
        assert!(start >= inc.start_acked, "{context}: log start {start} below acknowledged {}", inc.start_acked);
        let by_offset: BTreeMap<i64, &String> = records.iter().map(|(o, _, v)| (*o, v)).collect();
        for &offset in inc.durable.range(inc.start_attempted..) {
            let (key, value) = &inc.acked[&offset];
            match by_offset.get(&offset) {
                Some(found) => assert_eq!(*found, value, "{context}: durable offset {offset} changed"),
                None => {
                    let superseded =
                        key.is_some() && records.iter().any(|(o, k, _)| *o > offset && k.as_ref() == key.as_ref());
                    assert!(superseded, "{context}: durable offset {offset} lost");
                }
            }
        }
    }
    // The log takes appends right after what it recovered.
    let end = log.log_end_offset();
    let info = log.append(tagged(1, 1), LEADER).await.expect("append after recovery");
    assert_eq!(info.base_offset, end, "{context}");
}

/// Runs the workload of `seed` in `root` with power cut after `cut` mutating
/// operations (`None`: never). Returns what it did, its plan and its logs.
async fn run_workload(
    root: &Path,
    seed: u64,
    cut: Option<u64>,
) -> (History, Rc<FaultPlan>, LogManager<FaultStorage<DmaStorage>>) {
    let plan = FaultPlan::new();
    plan.model_power_loss(root).unwrap();
    plan.crash_after_ops.set(cut);
    let mut history = History::default();
    let manager = LogManager::new(FaultStorage::new(DmaStorage, plan.clone()), root, 1 << 20);
    let ended = workload(&manager, &mut StdRng::seed_from_u64(seed), &mut history).await;
    assert!(ended || plan.crashed(), "workload {seed}: an operation failed before the cut");
    (history, plan, manager)
}

/// A directory for one run: on tmpfs (`/dev/shm`) when it takes O_DIRECT files
/// (Linux 6.6 and later), as the model, not the disk, decides what is durable, and
/// tmpfs runs the workloads several times faster; elsewhere the default temp dir.
fn scratch_dir() -> tempfile::TempDir {
    use std::os::unix::fs::OpenOptionsExt;
    thread_local! {
        static SHM_TAKES_O_DIRECT: bool = tempfile::tempdir_in("/dev/shm").is_ok_and(|dir| {
            let path = dir.path().join("probe");
            std::fs::OpenOptions::new().write(true).create(true).custom_flags(libc::O_DIRECT).open(path).is_ok()
        });
    }
    if SHM_TAKES_O_DIRECT.with(|ok| *ok) {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

/// Cuts of one workload: seed `s` runs workload `s / CUTS_PER_WORKLOAD`, cut in the
/// `s % CUTS_PER_WORKLOAD`-th slice of its operations, so one dry run (which counts
/// them) serves several cuts.
const CUTS_PER_WORKLOAD: u64 = 8;

async fn one_seed(seed: u64, totals: &mut HashMap<u64, u64>) {
    let workload_seed = seed / CUTS_PER_WORKLOAD;
    let total = match totals.get(&workload_seed) {
        Some(&total) => total,
        None => {
            let dry = scratch_dir();
            let (_, plan, manager) = run_workload(dry.path(), workload_seed, None).await;
            let total = plan.ops();
            // Seals of the workload's rolls run on behind it: they end before their
            // directory goes (one panicked in glommio, opening a file in it, before).
            manager.close_all().await;
            totals.insert(workload_seed, total);
            total
        }
    };
    let slice = seed % CUTS_PER_WORKLOAD;
    let cut = StdRng::seed_from_u64(seed)
        .random_range(total * slice / CUTS_PER_WORKLOAD..=total * (slice + 1) / CUTS_PER_WORKLOAD);
    let dir = scratch_dir();
    let (mut history, plan, _) = run_workload(dir.path(), workload_seed, Some(cut)).await;
    // One seed in four crashes the process at the cut instead, restarts it (recovery
    // and a few appends on the same model), and cuts power during or after that.
    let restarted = seed % 4 == 3;
    if restarted {
        restart_and_continue(dir.path(), &plan, &mut history, seed).await;
    }
    let report = plan.power_loss(PowerCut::Seeded(seed)).unwrap();
    let context = format!("seed {seed}, cut after {cut} of {total} operations, restarted {restarted}, {report:?}");
    check(dir.path(), &history, &context).await;
}

/// After a process crash: restarts the plan, reopens the partition (recovery) and
/// appends, with power cut at a seeded operation of that. Once the reopen returns,
/// every record it recovered is durable: the open claims so (its recovery point is
/// the log end).
async fn restart_and_continue(root: &Path, plan: &Rc<FaultPlan>, history: &mut History, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xc0ffee);
    plan.restart();
    plan.crash_after_ops.set(Some(plan.ops() + rng.random_range(0..60)));
    let last = history.incarnations.len() - 1;
    let inc = &mut history.incarnations[last];
    if !inc.created || inc.delete_attempted {
        return;
    }
    let manager = LogManager::new(FaultStorage::new(DmaStorage, plan.clone()), root, 1 << 20);
    let log = match manager.open_for_topic(tp(), inc.config.clone(), topic_id(last)).await {
        Ok(log) => log,
        Err(e) => {
            assert!(plan.crashed(), "seed {seed}: recovery after a process crash failed: {e}");
            return;
        }
    };
    let recovered: Vec<i64> = inc.acked.keys().copied().filter(|&o| o < log.log_end_offset().0).collect();
    inc.durable.extend(recovered);
    for tag in 1_000_000..1_000_004 {
        let (batch, records) = batch(&mut rng, last, tag);
        for (key, value) in &records {
            inc.appended.insert(value.clone(), key.clone());
        }
        if !append_burst(&log, vec![(batch, records)], inc).await {
            return;
        }
        if rng.random_bool(0.5) {
            let acked: Vec<i64> = inc.acked.keys().copied().collect();
            if log.flush().await.is_err() {
                return;
            }
            inc.durable.extend(acked);
        }
    }
}

// Every promise holds after a power cut at any mutating operation of the workload.
#[test]
fn power_loss_at_every_io_point() {
    let seeds = match std::env::var("SKEIN_POWER_LOSS_SEED") {
        Ok(seed) => {
            let seed = seed.parse().expect("SKEIN_POWER_LOSS_SEED is a number");
            seed..seed + 1
        }
        Err(_) => 0..std::env::var("SKEIN_POWER_LOSS_SEEDS").map_or(SEEDS_DEFAULT, |s| s.parse().expect("a number")),
    };
    // One executor for every seed: setting one up costs more than a workload.
    run(async {
        let mut totals = HashMap::new();
        for seed in seeds {
            one_seed(seed, &mut totals).await;
        }
    });
}

/// A plan modelling power loss under a fresh scratch directory.
fn modelled() -> (tempfile::TempDir, Rc<FaultPlan>) {
    let dir = scratch_dir();
    let plan = FaultPlan::new();
    plan.model_power_loss(dir.path()).unwrap();
    (dir, plan)
}

/// Base offsets of the batches `tags` appended as 3-record batches from offset 0.
fn prefix(n: i64) -> Vec<i64> {
    (0..n).map(|i| i * 3).collect()
}

// The appender rewrites the partial last block in place. A power cut tearing that
// rewrite at any sectors leaves the fdatasynced bytes of the block intact, because the
// rewrite carries them unchanged and each sector lands whole or not at all
// (ARCHITECTURE.md, "Power loss").
#[test]
fn torn_rewrite_of_the_last_block_keeps_synced_bytes() {
    let config = LogConfig { flush_messages: 1, ..small_segments(64 << 10) };
    let mut torn = 0;
    run(async {
        for seed in 0..64 {
            let (dir, plan) = modelled();
            let log = open(FaultStorage::new(DmaStorage, plan.clone()), dir.path(), config.clone()).await.unwrap();
            for tag in 0..10 {
                log.append(tagged(tag, 3), LEADER).await.unwrap();
            }
            assert_ne!(log.size_bytes() % 4096, 0, "the last block is partial");
            // The next operation is the write of the next append, which rewrites the
            // last block from its start: synced bytes, then new ones.
            plan.crash_after_ops.set(Some(plan.ops()));
            assert!(log.append(tagged(10, 3), LEADER).await.is_err());
            drop(log);
            let report = plan.power_loss(PowerCut::Seeded(seed)).unwrap();
            assert_eq!(report.writes_landed + report.writes_torn + report.writes_lost, 1, "{report:?}");
            torn += report.writes_torn;
            let log = open(DmaStorage, dir.path(), config.clone()).await.unwrap();
            let found = bases(&log).await;
            assert!(found.starts_with(&prefix(10)), "seed {seed}: {found:?}, {report:?}");
        }
    });
    assert!(torn > 10, "only {torn} torn rewrites");
}

/// A log of ten batches flushed, then five acknowledged (written) but not flushed.
async fn flushed_then_written(
    plan: &Rc<FaultPlan>,
    dir: &Path,
    config: &LogConfig,
) -> Rc<Log<FaultStorage<DmaStorage>>> {
    let log = open(FaultStorage::new(DmaStorage, plan.clone()), dir, config.clone()).await.unwrap();
    for tag in 0..10 {
        log.append(tagged(tag, 3), LEADER).await.unwrap();
    }
    log.flush().await.unwrap();
    for tag in 10..15 {
        log.append(tagged(tag, 3), LEADER).await.unwrap();
    }
    log
}

// Records written without a flush that read back as zeros after a power loss are cut
// by recovery, which counts the zero tail (and logs it) instead of dropping it silently.
#[test]
fn lost_unflushed_records_are_counted() {
    let (dir, plan) = modelled();
    let config = small_segments(64 << 10);
    run(async {
        let _log = flushed_then_written(&plan, dir.path(), &config).await;
    });
    let report = plan.power_loss(PowerCut::SyncedOnly).unwrap();
    assert!(report.writes_lost > 0 && report.writes_landed == 0, "{report:?}");
    run(async {
        let ctx = context(DmaStorage, 1 << 20);
        let metrics = ctx.metrics.clone();
        let log = Log::open(ctx, dir.path().join("t-0"), tp(), 0, config).await.unwrap();
        assert_eq!(bases(&log).await, prefix(10));
        assert_eq!(metrics.recovery_zero_tails.get(), 1);
        let unflushed: u64 = (10..15).map(|tag| tagged(tag, 3).size() as u64).sum();
        assert!(metrics.recovery_zero_tail_bytes.get() >= unflushed);
        assert_eq!(metrics.recovery_truncated_bytes.get(), 0);
    });
}

// A new partition's directory is synced into the data directory: a record flushed
// into it survives a power cut that keeps only what was synced. (It did not: the
// partition directory's own name was never synced.)
#[test]
fn flushed_record_of_a_new_partition_survives() {
    let (dir, plan) = modelled();
    let config = LogConfig { flush_messages: 1, ..small_segments(64 << 10) };
    run(async {
        let manager = LogManager::new(FaultStorage::new(DmaStorage, plan.clone()), dir.path(), 1 << 20);
        let log = manager.open(tp(), config.clone()).await.unwrap();
        log.append(tagged(0, 3), LEADER).await.unwrap();
    });
    plan.power_loss(PowerCut::SyncedOnly).unwrap();
    run(async {
        let manager = LogManager::new(DmaStorage, dir.path(), 1 << 20);
        assert_eq!(manager.discover().await.unwrap(), vec![tp()]);
        let log = manager.open(tp(), config).await.unwrap();
        assert_eq!(bases(&log).await, prefix(1));
    });
}

// A DeleteRecords acknowledged past records that a power cut then loses keeps its
// log start: recovery restarts the log empty there, as Kafka's does, instead of
// lowering the start to what survived and handing those offsets out again.
#[test]
fn delete_records_past_lost_records_keeps_the_log_start() {
    let (dir, plan) = modelled();
    let config = small_segments(64 << 10);
    run(async {
        let log = flushed_then_written(&plan, dir.path(), &config).await;
        assert_eq!(log.delete_records_before(Offset(42)).await.unwrap(), Offset(42));
    });
    plan.power_loss(PowerCut::SyncedOnly).unwrap();
    run(async {
        let log = open(DmaStorage, dir.path(), config).await.unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (Offset(42), Offset(42)));
        assert!(read_all(&log, Offset(42)).await.is_empty());
        assert_eq!(log.append(tagged(99, 1), LEADER).await.unwrap().base_offset, Offset(42));
    });
}

// Opening a new partition syncs twice: the partition directory (the name of its first
// segment) and the data directory (the partition's name); the checkpoint and epoch
// files it would write say what their absence says, so they are not written. A reopen
// after a clean close of the node syncs nothing: a small log keeps no checkpoint whose
// clean mark must go. (After a crash it syncs its directory, the data directory and
// its segment.)
#[test]
fn opening_a_partition_syncs_only_what_changed() {
    let dir = scratch_dir();
    let plan = FaultPlan::new();
    run(async {
        let manager = LogManager::new(FaultStorage::new(DmaStorage, plan.clone()), dir.path(), 1 << 20);
        let log = manager.open(tp(), LogConfig::default()).await.unwrap();
        assert_eq!(plan.syncs(), 2);
        log.append(tagged(0, 3), LEADER).await.unwrap();
        assert!(manager.close_all().await.is_empty());
        let before = plan.syncs();
        let manager = LogManager::new(FaultStorage::new(DmaStorage, plan.clone()), dir.path(), 1 << 20);
        manager.set_clean_start(true);
        let log = manager.open(tp(), LogConfig::default()).await.unwrap();
        assert_eq!(plan.syncs() - before, 0);
        assert_eq!(bases(&log).await, prefix(1));
        drop(log);
        let before = plan.syncs();
        let manager = LogManager::new(FaultStorage::new(DmaStorage, plan.clone()), dir.path(), 1 << 20);
        let log = manager.open(tp(), LogConfig::default()).await.unwrap();
        assert_eq!(plan.syncs() - before, 3);
        assert_eq!(bases(&log).await, prefix(1));
    });
}

// A process crash at any operation of opening a new partition or of a roll, then a
// restart that recovers and flushes more records, then a power cut that keeps only
// what was synced: every record the restarted log holds after its flush survives. The
// crashed run may have left directory entries unsynced (the partition directory, a
// new segment); the unclean open syncs them before the log is used.
#[test]
fn crash_then_restart_then_power_loss() {
    let config = small_segments(64 << 10);
    run(async {
        for phase in ["open", "roll"] {
            for k in 0..40 {
                let (dir, plan) = modelled();
                let storage = || FaultStorage::new(DmaStorage, plan.clone());
                if phase == "open" {
                    plan.crash_after_ops.set(Some(k));
                    let _ = open(storage(), dir.path(), config.clone()).await;
                } else {
                    let log = open(storage(), dir.path(), config.clone()).await.unwrap();
                    for tag in 0..3 {
                        log.append(tagged(tag, 3), LEADER).await.unwrap();
                    }
                    log.flush().await.unwrap();
                    // The recovery point is the log end: a restart finds nothing to change.
                    log.checkpoint().await.unwrap();
                    plan.crash_after_ops.set(Some(plan.ops() + k));
                    let _ = log.roll().await;
                    // The roll's seal runs on behind it; the crashed run ends with it (a
                    // flush waits for the seal, done or failed), as a process's tasks
                    // end with the process.
                    let _ = log.flush().await;
                }
                let crashed = plan.crashed();
                plan.restart();
                let log = open(storage(), dir.path(), config.clone()).await.unwrap();
                log.append(tagged(100, 3), LEADER).await.unwrap();
                log.flush().await.unwrap();
                let durable = bases(&log).await;
                drop(log);
                plan.power_loss(PowerCut::SyncedOnly).unwrap();
                let log = open(DmaStorage, dir.path(), config.clone()).await.unwrap();
                assert_eq!(bases(&log).await, durable, "{phase}, crash after {k} operations");
                if !crashed {
                    break;
                }
            }
        }
    });
}

// A move between log directories (`relocate.rs`) cut by a power loss at every one of
// its operations: after the start's `settle_moves`, the partition is in exactly one
// directory, with every record it had synced before the move.
#[test]
fn a_move_between_log_directories_survives_power_loss_at_every_point() {
    use skein_engine::log_dirs::{settle_moves, LogDir, LogDirs};
    let config = LogConfig { flush_messages: 1, ..small_segments(2 << 10) };
    let (mut cut, mut finished) = (0, false);
    while !finished {
        let root = scratch_dir();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let dirs =
            || std::sync::Arc::new(LogDirs::new(vec![LogDir::new(&a, "a"), LogDir::new(&b, "b")], HashMap::new()));
        let plan = FaultPlan::new();
        plan.model_power_loss(root.path()).unwrap();
        run(async {
            let storage = FaultStorage::new(DmaStorage, plan.clone());
            let manager = LogManager::new(storage, &a, 1 << 20).with_log_dirs(dirs(), 0);
            let log = manager.create(tp(), config.clone()).await.unwrap();
            for tag in 0..30 {
                log.append(tagged(tag, 3), LEADER).await.unwrap();
            }
            let precopy = manager.precopy(&tp(), 1).await.unwrap();
            for tag in 30..40 {
                log.append(tagged(tag, 3), LEADER).await.unwrap();
            }
            plan.crash_after_ops.set(Some(plan.ops() + cut));
            finished = manager.finish_move(&tp(), precopy).await.is_ok();
        });
        plan.power_loss(PowerCut::Seeded(cut)).unwrap();
        settle_moves(&[a.as_path(), b.as_path()]).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        let holders: Vec<&std::path::PathBuf> = [&a, &b].into_iter().filter(|d| d.join("t-0").exists()).collect();
        assert_eq!(holders.len(), 1, "cut {cut}: the partition is in {holders:?}");
        if finished {
            assert_eq!(holders, [&b], "a finished move ends in the target");
        }
        run(async {
            let manager = LogManager::new(DmaStorage, &a, 1 << 20).with_log_dirs(dirs(), 0);
            manager.discover().await.unwrap();
            let log = manager.open(tp(), config.clone()).await.unwrap();
            assert_eq!(bases(&log).await, prefix(40), "cut {cut}");
        });
        cut += 1;
        assert!(cut < 10_000, "the move never finished");
    }
    // Each cut one operation further: the close, the copy of each file, the syncs,
    // the marker and the two renames.
    assert!(cut > 30, "only {cut} operations");
}
