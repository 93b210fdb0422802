//! Fault injection: each fault is followed by a restart that checks exactly which
//! offsets survive. Faults come from editing files after a simulated crash (the log
//! dropped without `close`) or from `FaultStorage` between the engine and the disk.

mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use common::*;
use rand::{Rng, SeedableRng};
use skein_engine::io::fault::FaultPlan;
use skein_engine::{Error, LogConfig, Offset};

const EIO: i32 = 5;
const ENOSPC: i32 = 28;

fn segment_file(dir: &Path, base: i64) -> PathBuf {
    dir.join("t-0").join(format!("{base:020}.log"))
}

/// Appends `count` batches of 3 records (tags 0..count) and crashes (drops the log).
/// Returns the end position of each batch in the first segment.
fn write_and_crash(dir: &Path, count: u64, flush: bool) -> Vec<u64> {
    run(async {
        let log = open_dma(dir, LogConfig::default()).await;
        let mut ends = Vec::new();
        let mut end = 0;
        for tag in 0..count {
            let batch = tagged(tag, 3);
            end += batch.size() as u64;
            log.append(batch, LEADER).await.unwrap();
            ends.push(end);
        }
        if flush {
            // A flush, then the periodic checkpoint that records the recovery point.
            log.flush().await.unwrap();
            log.checkpoint().await.unwrap();
        }
        ends
    })
}

fn surviving(dir: &Path) -> Vec<i64> {
    run(async {
        let log = open_dma(dir, LogConfig::default()).await;
        let found = bases(&log).await;
        // The log accepts appends right after the surviving prefix.
        let next = log.append(tagged(999, 1), LEADER).await.unwrap();
        assert_eq!(next.base_offset, Offset(found.len() as i64 * 3));
        found
    })
}

fn prefix(n: usize) -> Vec<i64> {
    (0..n as i64).map(|i| i * 3).collect()
}

// A tail torn at a random byte (the rest lost or zeroed) keeps exactly the batches
// that were whole before the tear.
#[test]
fn torn_tail_at_random_byte() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for round in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        let ends = write_and_crash(dir.path(), 30, false);
        let total = *ends.last().unwrap();
        let cut = rng.random_range(ends[10]..total);
        let path = segment_file(dir.path(), 0);
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        if round % 2 == 0 {
            file.set_len(cut).unwrap();
        } else {
            file.write_all_at(&vec![0u8; (total - cut) as usize], cut).unwrap();
        }
        let whole = ends.iter().filter(|&&e| e <= cut).count();
        assert_eq!(surviving(dir.path()), prefix(whole), "round {round}, cut at {cut}");
    }
}

/// Flips one CRC-covered byte of batch `index` (header fields outside the CRC, the
/// base offset and leader epoch, are left alone: Kafka cannot detect those either).
fn flip_in_batch(dir: &Path, ends: &[u64], index: usize, rng: &mut impl Rng) {
    let start = if index == 0 { 0 } else { ends[index - 1] };
    let at = rng.random_range(start + 17..ends[index]);
    let path = segment_file(dir, 0);
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).unwrap();
    file.write_all_at(&[byte[0] ^ 0x10], at).unwrap();
}

// A bit flip in the last batch (not yet flushed) loses that batch only.
#[test]
fn bit_flip_in_last_batch() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    for _ in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let ends = write_and_crash(dir.path(), 20, false);
        flip_in_batch(dir.path(), &ends, 19, &mut rng);
        assert_eq!(surviving(dir.path()), prefix(19));
    }
}

// A bit flip in an older batch above the recovery point cuts the log there: the torn
// batch and everything after it are gone, nothing before it is.
#[test]
fn bit_flip_in_older_unflushed_batch() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(13);
    let dir = tempfile::tempdir().unwrap();
    let ends = write_and_crash(dir.path(), 20, false);
    flip_in_batch(dir.path(), &ends, 6, &mut rng);
    assert_eq!(surviving(dir.path()), prefix(6));
}

/// A batch of one record with a value of `bytes` bytes.
fn large(tag: u64, bytes: usize) -> skein_engine::Batch {
    let value = vec![tag as u8; bytes];
    keyed(
        1_000 + tag as i64,
        skein_engine::records::Compression::None,
        &[("k", Some(std::str::from_utf8(&value).unwrap_or("")))],
    )
}

// Below the recovery point a flipped bit is corruption: the log refuses to open and
// counts it, instead of silently cutting acknowledged, flushed data. (The log holds
// more than `CHECKPOINT_LOG_BYTES_MIN`, so it keeps its checkpoint.)
#[test]
fn bit_flip_below_recovery_point_is_reported() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    let dir = tempfile::tempdir().unwrap();
    let ends = write_and_crash(dir.path(), 20, false);
    run(async {
        let log = open_dma(dir.path(), LogConfig::default()).await;
        for tag in 0..4 {
            log.append(large(tag, 20 << 10), LEADER).await.unwrap();
        }
        assert!(log.size_bytes() >= skein_engine::limits::CHECKPOINT_LOG_BYTES_MIN);
        log.flush().await.unwrap();
        log.checkpoint().await.unwrap();
    });
    assert!(dir.path().join("t-0").join(skein_engine::checkpoint::CHECKPOINT_FILE).exists());
    flip_in_batch(dir.path(), &ends, 6, &mut rng);
    run(async {
        let ctx = context(skein_engine::io::dma::DmaStorage, 1 << 20);
        let metrics = ctx.metrics.clone();
        let result = skein_engine::Log::open(ctx, dir.path().join("t-0"), tp(), 0, LogConfig::default()).await;
        assert!(matches!(result, Err(Error::Corruption { .. })), "{:?}", result.err());
        assert_eq!(metrics.corruptions.get(), 1);
    });
    // The bytes are still there for an operator to inspect.
    assert!(std::fs::metadata(segment_file(dir.path(), 0)).unwrap().len() >= *ends.last().unwrap());
}

// A small log (one segment under `CHECKPOINT_LOG_BYTES_MIN`) keeps no checkpoint or
// epoch file, even flushed and closed. After a clean stop of the node its data is all
// flushed, so a flipped bit is corruption as below a recovery point; after a crash,
// recovery cannot tell it from a torn tail and cuts the log there, counting the bytes
// (as Kafka's recovery of unflushed segments does).
#[test]
fn bit_flip_in_a_small_log() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(19);
    for clean_start in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let ends = write_and_crash(dir.path(), 20, true);
        run(async { open_dma(dir.path(), LogConfig::default()).await.close().await.unwrap() });
        for file in [skein_engine::checkpoint::CHECKPOINT_FILE, skein_engine::checkpoint::LEADER_EPOCH_FILE] {
            assert!(!dir.path().join("t-0").join(file).exists(), "{file}");
        }
        flip_in_batch(dir.path(), &ends, 6, &mut rng);
        run(async {
            let mut ctx = context(skein_engine::io::dma::DmaStorage, 1 << 20);
            ctx.clean_start = clean_start;
            let metrics = ctx.metrics.clone();
            let result = skein_engine::Log::open(ctx, dir.path().join("t-0"), tp(), 0, LogConfig::default()).await;
            match clean_start {
                true => {
                    assert!(matches!(result, Err(Error::Corruption { .. })), "{:?}", result.err());
                    assert_eq!(metrics.corruptions.get(), 1);
                }
                false => {
                    let log = result.expect("opened");
                    assert_eq!(bases(&log).await, prefix(6));
                    assert_eq!(metrics.recovery_truncated_bytes.get(), ends[19] - ends[5]);
                }
            }
        });
    }
}

fn rolled_log(dir: &Path) -> Vec<i64> {
    run(async {
        let log = open_dma(dir, small_segments(2 << 10)).await;
        for tag in 0..100 {
            log.append(tagged(tag, 3), LEADER).await.unwrap();
        }
        log.close().await.unwrap();
        bases(&log).await
    })
}

fn check_lookups(dir: &Path, expected: &[i64]) {
    run(async {
        let log = open_dma(dir, small_segments(2 << 10)).await;
        assert_eq!(bases(&log).await, expected);
        for offset in 0..300 {
            let batch = &log.read(Offset(offset), 1, None).await.unwrap()[0];
            assert_eq!(batch.base_offset(), Offset(offset / 3 * 3));
        }
        log.close().await.unwrap();
    });
}

// A missing index is rebuilt from its segment; every offset is still found.
#[test]
fn missing_index_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let expected = rolled_log(dir.path());
    std::fs::remove_file(dir.path().join("t-0/00000000000000000000.index")).unwrap();
    std::fs::remove_file(dir.path().join("t-0/00000000000000000000.timeindex")).unwrap();
    check_lookups(dir.path(), &expected);
    // The rebuilt index was written back by the clean close of the check.
    assert!(dir.path().join("t-0/00000000000000000000.index").exists());
}

// A corrupt index, garbage or plausible but wrong, is detected and rebuilt.
#[test]
fn corrupt_index_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let expected = rolled_log(dir.path());
    let index = dir.path().join("t-0/00000000000000000000.index");
    std::fs::write(&index, b"garbage, not 8-byte entries").unwrap();
    check_lookups(dir.path(), &expected);

    // Entries that grow but point into the middle of batches.
    let dir = tempfile::tempdir().unwrap();
    let expected = rolled_log(dir.path());
    let index = dir.path().join("t-0/00000000000000000000.index");
    let mut entries = Vec::new();
    for (offset, position) in [(5u32, 7u32), (11, 301), (20, 555)] {
        entries.extend_from_slice(&offset.to_be_bytes());
        entries.extend_from_slice(&position.to_be_bytes());
    }
    std::fs::write(&index, entries).unwrap();
    check_lookups(dir.path(), &expected);
}

// A crash at every step of a segment roll loses no acknowledged batch, and the log
// reopens and accepts appends.
#[test]
fn crash_in_the_middle_of_a_roll() {
    for crash_after in 0..14 {
        let dir = tempfile::tempdir().unwrap();
        let plan = FaultPlan::new();
        let config = small_segments(2 << 10);
        let (acked, attempted) = run(async {
            let log = open(faulty(&plan), dir.path(), config.clone()).await.unwrap();
            let mut acked = Vec::new();
            let mut tag = 0;
            while log.segment_count() == 1 {
                log.append(tagged(tag, 3), LEADER).await.unwrap();
                acked.push(tag as i64 * 3);
                tag += 1;
            }
            // Fill the new segment up to the next roll, then crash inside it.
            let first_roll_tags = tag;
            while log.segment_count() == 2 && tag < first_roll_tags * 3 {
                log.append(tagged(tag, 3), LEADER).await.unwrap();
                acked.push(tag as i64 * 3);
                tag += 1;
            }
            plan.crash_after_ops.set(Some(plan.ops() + crash_after));
            let mut attempted = acked.clone();
            for _ in 0..first_roll_tags {
                attempted.push(tag as i64 * 3);
                match log.append(tagged(tag, 3), LEADER).await {
                    Ok(_) => acked.push(tag as i64 * 3),
                    Err(_) => break,
                }
                tag += 1;
            }
            assert!(plan.crashed() || crash_after > 10, "crash point {crash_after} never reached");
            (acked, attempted)
        });
        let recovered = run(async {
            let log = open_dma(dir.path(), config.clone()).await;
            let found = bases(&log).await;
            log.append(tagged(5000, 1), LEADER).await.unwrap();
            found
        });
        assert!(recovered.len() >= acked.len(), "crash point {crash_after}: lost acknowledged batches");
        assert_eq!(&recovered[..], &attempted[..recovered.len()], "crash point {crash_after}");
    }
}

// A roll holds appends only while it drains the closed segment's writes and creates
// the next one. The closed segment's fdatasync (slow here, as under a journal commit)
// goes on behind them: the flushed offset passes the segment only once it completes,
// a flush waits for it, and every batch is there after a restart.
#[test]
fn a_roll_does_not_wait_for_the_closed_segments_sync() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new();
    let config = small_segments(2 << 10);
    let appended = run(async {
        let log = open(faulty(&plan), dir.path(), config.clone()).await.unwrap();
        plan.slow_syncs.set(Some(Duration::from_millis(1_200)));
        let (mut tag, mut slowest) = (0, Duration::ZERO);
        while log.segment_count() < 3 {
            let started = Instant::now();
            log.append(tagged(tag, 3), LEADER).await.unwrap();
            slowest = slowest.max(started.elapsed());
            tag += 1;
        }
        assert!(slowest < Duration::from_millis(600), "an append waited {slowest:?} for a roll");
        assert!(log.offset_flushed_end() < log.active_segment_base(), "flushed before its sync completed");
        let started = Instant::now();
        log.flush().await.unwrap();
        // Two seals in turn, then the active segment's own sync.
        assert!(started.elapsed() >= Duration::from_millis(2_000), "flushed after {:?}", started.elapsed());
        assert_eq!(log.offset_flushed_end(), log.log_end_offset());
        plan.slow_syncs.set(None);
        log.close().await.unwrap();
        tag
    });
    let recovered = run(async { bases(&*open_dma(dir.path(), config).await).await });
    assert_eq!(recovered, (0..appended as i64).map(|t| t * 3).collect::<Vec<_>>());
}

// A rolled segment's seal syncs only after the file system's own commit would have
// (`seal_sync_delay`; a sync forced at once held the next segment's writes for a
// second), or at once when something waits for it: a flush goes out without the delay.
#[test]
fn a_seal_syncs_after_its_delay_or_when_hurried() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new();
    run(async {
        let mut ctx = context(faulty(&plan), 64 << 20);
        ctx.seal_sync_delay = Duration::from_millis(300);
        let log = skein_engine::Log::open(ctx, dir.path().join("t-0"), tp(), 0, small_segments(2 << 10)).await.unwrap();
        let mut tag = 0;
        while log.segment_count() < 2 {
            log.append(tagged(tag, 3), LEADER).await.unwrap();
            tag += 1;
        }
        let (rolled, syncs) = (Instant::now(), plan.syncs());
        glommio::timer::sleep(Duration::from_millis(100)).await;
        assert_eq!(plan.syncs(), syncs, "the seal synced before its delay");
        assert!(log.offset_flushed_end() < log.active_segment_base());
        while log.offset_flushed_end() < log.active_segment_base() {
            glommio::timer::sleep(Duration::from_millis(10)).await;
        }
        assert!(rolled.elapsed() >= Duration::from_millis(300), "sealed after {:?}", rolled.elapsed());
        assert!(rolled.elapsed() < Duration::from_secs(3), "sealed after {:?}", rolled.elapsed());
        // The next roll's seal is hurried by a flush.
        while log.segment_count() < 3 {
            log.append(tagged(tag, 3), LEADER).await.unwrap();
            tag += 1;
        }
        let flushed = Instant::now();
        log.flush().await.unwrap();
        assert!(flushed.elapsed() < Duration::from_millis(250), "the flush waited {:?}", flushed.elapsed());
        assert_eq!(log.offset_flushed_end(), log.log_end_offset());
    });
}

// A follower's truncation into a segment whose seal is still running waits for the
// seal: the seal never trims the truncated file back up, nor marks flushed past the
// new log end, and the restarted log ends where the truncation left it.
#[test]
fn truncation_waits_for_a_pending_seal() {
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new();
    let config = small_segments(2 << 10);
    run(async {
        let log = open(faulty(&plan), dir.path(), config.clone()).await.unwrap();
        plan.slow_syncs.set(Some(Duration::from_millis(300)));
        let mut tag = 0;
        while log.segment_count() < 2 {
            log.append(tagged(tag, 3), LEADER).await.unwrap();
            tag += 1;
        }
        log.truncate_to(Offset(6)).await.unwrap();
        plan.slow_syncs.set(None);
        log.flush().await.unwrap();
        assert_eq!(log.log_end_offset(), Offset(6));
        assert!(log.offset_flushed_end() <= log.log_end_offset(), "flushed past the log end");
        log.close().await.unwrap();
    });
    let recovered = run(async { bases(&*open_dma(dir.path(), config).await).await });
    assert_eq!(recovered, vec![0, 3]);
}

// An fdatasync that fails while a rolled segment is sealed fails the log, though no
// append waited for it: later appends and flushes fail, and a restart keeps every
// acknowledged batch. (Seals sync 50 ms after their roll here, not 6 s.)
#[test]
fn a_failed_seal_fails_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new();
    let config = small_segments(2 << 10);
    let (acked, attempted) = run(async {
        let mut ctx = context(faulty(&plan), 64 << 20);
        ctx.seal_sync_delay = std::time::Duration::from_millis(50);
        let log = skein_engine::Log::open(ctx, dir.path().join("t-0"), tp(), 0, config.clone()).await.unwrap();
        plan.fail_syncs.set(Some(EIO));
        let (mut acked, mut attempted) = (Vec::new(), Vec::new());
        for tag in 0..1_000 {
            attempted.push(tag * 3);
            match log.append(tagged(tag as u64, 3), LEADER).await {
                Ok(_) => acked.push(tag * 3),
                Err(e) => {
                    assert!(matches!(e, Error::LogFailed { .. }), "{e}");
                    break;
                }
            }
            // A little time between appends, for the seals' delay to pass.
            glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert!(log.is_failed(), "the seal's failed sync did not fail the log");
        assert!(log.segment_count() >= 2);
        plan.fail_syncs.set(None);
        assert!(matches!(log.flush().await, Err(Error::LogFailed { .. })));
        (acked, attempted)
    });
    assert_recovered(dir.path(), &acked, &attempted);
}

/// Appends 10 batches, arms a fault, appends until one fails, then disarms it.
/// Returns (acknowledged, attempted) base offsets and the error seen.
fn fault_during_appends(
    dir: &Path,
    config: LogConfig,
    arm: impl Fn(&FaultPlan),
    disarm: impl Fn(&FaultPlan),
) -> (Vec<i64>, Vec<i64>, Error) {
    let plan = FaultPlan::new();
    run(async {
        let log = open(faulty(&plan), dir, config).await.unwrap();
        let mut acked = Vec::new();
        for tag in 0..10 {
            log.append(tagged(tag, 3), LEADER).await.unwrap();
            acked.push(tag as i64 * 3);
        }
        arm(&plan);
        let mut attempted = acked.clone();
        let error = log.append(tagged(10, 3), LEADER).await.unwrap_err();
        attempted.push(30);
        disarm(&plan);
        // Nothing is retried as if it had succeeded: the log stays failed.
        if matches!(error, Error::LogFailed { .. }) {
            assert!(log.is_failed());
            assert!(matches!(log.append(tagged(11, 3), LEADER).await, Err(Error::LogFailed { .. })));
            assert!(matches!(log.flush().await, Err(Error::LogFailed { .. })));
        }
        (acked, attempted, error)
    })
}

fn assert_recovered(dir: &Path, acked: &[i64], attempted: &[i64]) {
    let recovered = run(async {
        let log = open_dma(dir, LogConfig::default()).await;
        bases(&log).await
    });
    assert!(recovered.starts_with(acked), "lost acknowledged data: {recovered:?}");
    assert!(attempted.starts_with(&recovered), "{recovered:?} is not a prefix of {attempted:?}");
}

// EIO or ENOSPC on a data write fails the append and the log; a restart recovers every
// acknowledged batch and nothing that was not attempted.
#[test]
fn write_errors_fail_the_log() {
    for errno in [EIO, ENOSPC] {
        let dir = tempfile::tempdir().unwrap();
        let (acked, attempted, error) = fault_during_appends(
            dir.path(),
            LogConfig::default(),
            |p| p.fail_writes.set(Some(errno)),
            |p| p.fail_writes.set(None),
        );
        assert!(matches!(error, Error::LogFailed { .. }), "{error}");
        assert_recovered(dir.path(), &acked, &attempted);
    }
}

// EIO or ENOSPC on fdatasync with flush.messages=1: the append is not acknowledged,
// the sync is not retried as if it had worked, and a restart loses nothing acknowledged.
#[test]
fn fsync_errors_fail_the_log() {
    for errno in [EIO, ENOSPC] {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { flush_messages: 1, ..LogConfig::default() };
        let (acked, attempted, error) =
            fault_during_appends(dir.path(), config, |p| p.fail_syncs.set(Some(errno)), |p| p.fail_syncs.set(None));
        assert!(matches!(error, Error::LogFailed { .. }), "{error}");
        assert_recovered(dir.path(), &acked, &attempted);
    }
}

// A torn write (half a write reaches the disk) followed by a crash keeps the
// acknowledged prefix.
#[test]
fn torn_write_then_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (acked, attempted, error) =
        fault_during_appends(dir.path(), LogConfig::default(), |p| p.tear_next_write.set(true), |_| {});
    assert!(matches!(error, Error::LogFailed { .. }), "{error}");
    assert_recovered(dir.path(), &acked, &attempted);
}

// ENOSPC while reserving space is a retriable DiskFull: nothing is stored, the log
// stays healthy, and the same append succeeds once space is back.
#[test]
fn enospc_on_reservation_is_retriable() {
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new();
    run(async {
        let log = open(faulty(&plan), dir.path(), LogConfig::default()).await.unwrap();
        plan.fail_allocates.set(Some(ENOSPC));
        let error = log.append(tagged(0, 3), LEADER).await.unwrap_err();
        assert!(matches!(error, Error::DiskFull { .. }) && error.is_retriable(), "{error}");
        assert!(!log.is_failed());
        assert_eq!(log.log_end_offset(), Offset(0));
        plan.fail_allocates.set(None);
        assert_eq!(log.append(tagged(0, 3), LEADER).await.unwrap().base_offset, Offset(0));
    });
}

// A log extends its reservation ahead of need in a task of its own: the append whose
// admission starts that fallocate does not wait for it, however slow it is, and nor do
// the appends after it while the space already reserved lasts.
#[test]
fn appends_do_not_wait_for_the_reservation_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new();
    run(async {
        let log = open(faulty(&plan), dir.path(), LogConfig::default()).await.unwrap();
        plan.slow_allocates.set(Some(std::time::Duration::from_millis(500)));
        // The first append must reserve: it waits for its fallocate.
        log.append(tagged(0, 3), LEADER).await.unwrap();
        let first = plan.allocates.get();
        assert!(first >= 1, "the first append reserved nothing");
        let mut tag = 1;
        let mut slowest = std::time::Duration::ZERO;
        // Appends until one starts an extension ahead of need, then a few more.
        let mut after_ahead = None;
        while after_ahead.is_none_or(|n| tag < n) {
            let started = std::time::Instant::now();
            log.append(tagged(tag, 3), LEADER).await.unwrap();
            slowest = slowest.max(started.elapsed());
            if after_ahead.is_none() && plan.allocates.get() > first {
                after_ahead = Some(tag + 3);
            }
            tag += 1;
            assert!(tag < 10_000, "no extension ahead of need after {tag} appends");
        }
        assert!(slowest < std::time::Duration::from_millis(250), "an append waited {slowest:?} for a 500 ms fallocate");
    });
}

// On a full disk appends fail with DiskFull while reads, DeleteRecords and retention
// keep working.
#[test]
fn full_disk_keeps_reads_and_deletes_working() {
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new();
    run(async {
        let config = LogConfig { retention_ms: 0, ..small_segments(1 << 10) };
        let log = open(faulty(&plan), dir.path(), config).await.unwrap();
        for tag in 0..60 {
            log.append(tagged(tag, 3), LEADER).await.unwrap();
        }
        plan.available_bytes.set(Some(0));
        let mut full = None;
        for tag in 60..200 {
            if let Err(e) = log.append(tagged(tag, 3), LEADER).await {
                full = Some(e);
                break;
            }
        }
        assert!(matches!(full, Some(Error::DiskFull { .. })), "{full:?}");
        assert!(!log.is_failed());
        let end = log.log_end_offset();
        assert!(!log.read(Offset(0), 1 << 20, None).await.unwrap().is_empty());
        log.delete_records_before(Offset(9)).await.unwrap();
        assert_eq!(log.log_start_offset(), Offset(9));
        assert!(log.apply_retention(i64::MAX / 2).await.unwrap() > 0);
        plan.available_bytes.set(None);
        assert_eq!(log.append(tagged(1000, 1), LEADER).await.unwrap().base_offset, end);
    });
}
