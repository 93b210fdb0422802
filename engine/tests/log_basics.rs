//! Append, read, roll, restart and maintenance of one partition log on real files.

mod common;

use common::*;
use skein_engine::{LogConfig, Offset};

// Appends get consecutive offsets and read back byte for byte, from cache and disk.
#[test]
fn append_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_dma(dir.path(), LogConfig::default()).await;
        let mut expected = Vec::new();
        for tag in 0..20 {
            let info = log.append(tagged(tag, 3), LEADER).await.unwrap();
            assert_eq!(info.base_offset, Offset(tag as i64 * 3));
            assert_eq!(info.last_offset, Offset(tag as i64 * 3 + 2));
            expected.push(tagged(tag, 3));
        }
        assert_eq!(log.log_end_offset(), Offset(60));
        assert_eq!(log.offset_written_end(), Offset(60));
        let batches = read_all(&log, Offset(0)).await;
        assert_eq!(batches.len(), 20);
        for (got, want) in batches.iter().zip(&expected) {
            assert_eq!(got.bytes()[61..], want.bytes()[61..]);
            assert!(got.crc_ok());
        }
        // A read inside a batch returns the whole batch holding it.
        let from_middle = log.read(Offset(31), 1, None).await.unwrap();
        assert_eq!(from_middle.len(), 1);
        assert_eq!(from_middle[0].base_offset(), Offset(30));
        assert!(log.read(Offset(61), 100, None).await.is_err());
        assert!(log.read(Offset(60), 100, None).await.unwrap().is_empty());
        // An upper bound (a high watermark) hides batches at and above it.
        assert_eq!(log.read(Offset(0), 1 << 20, Some(Offset(6))).await.unwrap().len(), 2);
        log.close().await.unwrap();
    });
}

// Concurrent appends are assigned offsets in the order they were issued, and all are
// written by shared (coalesced) writes.
#[test]
fn concurrent_appends_keep_issue_order_and_coalesce() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_dma(dir.path(), LogConfig::default()).await;
        let tasks: Vec<_> = (0..200u64)
            .map(|tag| {
                let log = log.clone();
                glommio::spawn_local(async move { (tag, log.append(tagged(tag, 2), LEADER).await.unwrap()) })
            })
            .collect();
        for task in tasks {
            let (tag, info) = task.await;
            assert_eq!(info.base_offset, Offset(tag as i64 * 2));
        }
        let writes = log.metrics().writes.get();
        assert!(writes < 200, "200 appends took {writes} writes: nothing was coalesced");
        let batches = read_all(&log, Offset(0)).await;
        assert_eq!(batches.len(), 200);
        for (tag, batch) in batches.iter().enumerate() {
            assert_eq!(batch.base_offset(), Offset(tag as i64 * 2));
            assert_eq!(batch.bytes()[61..], tagged(tag as u64, 2).bytes()[61..]);
        }
    });
}

// Segments roll at segment.bytes, carry Kafka's names and indexes, and a clean restart
// reopens them without a recovery scan while lookups still land on the right batch.
#[test]
fn roll_and_clean_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_segments(2 << 10);
    run(async {
        let log = open_dma(dir.path(), config.clone()).await;
        for tag in 0..100 {
            log.append(tagged(tag, 5), LEADER).await.unwrap();
        }
        assert!(log.segment_count() > 3, "{} segments", log.segment_count());
        log.close().await.unwrap();
        assert!(log.append(tagged(0, 1), LEADER).await.is_err());
    });
    let part = dir.path().join("t-0");
    let mut names: Vec<String> =
        std::fs::read_dir(&part).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert!(names.contains(&"00000000000000000000.log".to_string()));
    assert!(names.contains(&"00000000000000000000.index".to_string()));
    assert!(names.contains(&"00000000000000000000.timeindex".to_string()));
    assert!(names.contains(&"skein-checkpoint".to_string()));
    // Closed segments hold exactly their batches: the reservation was trimmed.
    let first = std::fs::metadata(part.join("00000000000000000000.log")).unwrap().len();
    assert!(first <= 2 << 10 && first > 0);
    run(async {
        let log = open_dma(dir.path(), config).await;
        assert_eq!(log.metrics().recovery_truncated_bytes.get(), 0);
        assert_eq!(log.log_end_offset(), Offset(500));
        for offset in [0, 1, 4, 5, 133, 250, 499] {
            let batches = log.read(Offset(offset), 1, None).await.unwrap();
            assert_eq!(batches[0].base_offset(), Offset(offset / 5 * 5), "offset {offset}");
        }
        assert_eq!(bases(&log).await, (0..100).map(|i| i * 5).collect::<Vec<_>>());
        let info = log.append(tagged(100, 1), LEADER).await.unwrap();
        assert_eq!(info.base_offset, Offset(500));
    });
}

// After a crash (no clean close) every written batch is recovered and appends continue.
#[test]
fn crash_restart_recovers_written_batches() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_segments(16 << 10);
    run(async {
        let log = open_dma(dir.path(), config.clone()).await;
        for tag in 0..60 {
            log.append(tagged(tag, 4), LEADER).await.unwrap();
        }
        // Dropped without close: the checkpoint still says "not clean".
    });
    run(async {
        let log = open_dma(dir.path(), config).await;
        assert_eq!(log.log_end_offset(), Offset(240));
        assert_eq!(bases(&log).await, (0..60).map(|i| i * 4).collect::<Vec<_>>());
        assert_eq!(log.append(tagged(60, 1), LEADER).await.unwrap().base_offset, Offset(240));
    });
}

// With no cache every read goes to disk and still returns the same batches.
#[test]
fn cold_reads_match_cached_reads() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = skein_engine::Log::open(
            context(skein_engine::io::dma::DmaStorage, 0),
            dir.path().join("t-0"),
            tp(),
            0,
            small_segments(32 << 10),
        )
        .await
        .unwrap();
        for tag in 0..50 {
            log.append(tagged(tag, 10), LEADER).await.unwrap();
        }
        let batches = read_all(&log, Offset(0)).await;
        assert_eq!(batches.len(), 50);
        assert_eq!(log.metrics().cache_reads.get(), 0);
        assert!(log.metrics().disk_reads.get() > 0);
        let limited = log.read(Offset(0), 1, None).await.unwrap();
        assert_eq!(limited.len(), 1, "max_bytes below one batch returns exactly the first batch");
    });
}

// Timestamp lookups find the first record at or after a time, and the max timestamp.
#[test]
fn timestamp_lookups() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_dma(dir.path(), small_segments(4 << 10)).await;
        // Batch `tag` has base timestamp 1000 + tag and records at +0..+4.
        for tag in 0..40 {
            log.append(tagged(tag * 10, 5), LEADER).await.unwrap();
        }
        let check = |t: i64, expected: Option<(i64, i64)>| {
            let log = log.clone();
            async move {
                let got = log.offset_for_timestamp(t).await.unwrap().map(|(o, ts)| (o.0, ts));
                assert_eq!(got, expected, "timestamp {t}");
            }
        };
        check(0, Some((0, 1000))).await;
        check(1000, Some((0, 1000))).await;
        check(1003, Some((3, 1003))).await;
        check(1005, Some((5, 1010))).await;
        check(1012, Some((7, 1012))).await;
        check(1394, Some((199, 1394))).await;
        check(1395, None).await;
        let max = log.max_timestamp_offset().await.unwrap();
        assert_eq!(max, Some((Offset(199), 1394)));
    });
}

// Retention deletes whole closed segments by age and by size; DeleteRecords moves the
// log start offset and reads below it are out of range.
#[test]
fn retention_and_delete_records() {
    let dir = tempfile::tempdir().unwrap();
    let target = run(async {
        let mut config = small_segments(1 << 10);
        config.retention_ms = 1_000;
        let log = open_dma(dir.path(), config.clone()).await;
        // Batch k holds offsets 2k, 2k+1 with timestamps 1000 + 10k (+1).
        for tag in 0..200 {
            log.append(tagged(tag * 10, 2), LEADER).await.unwrap();
        }
        assert!(log.segment_count() > 4, "{} segments", log.segment_count());
        // At now=2500, segments whose newest record is older than 1500 go: those hold
        // only batches k < 50, so the log starts after 0 and at most at offset 100.
        let deleted = log.apply_retention(2_500).await.unwrap();
        assert!(deleted > 0);
        let start = log.log_start_offset();
        assert!(start > Offset(0) && start <= Offset(100), "start {start}");
        assert_eq!(log.segment_bases()[0], start);
        assert!(matches!(log.read(Offset(0), 1, None).await, Err(skein_engine::Error::OffsetOutOfRange { .. })));
        assert_eq!(log.read(start, 1, None).await.unwrap()[0].base_offset(), start);

        // Size: keep at most 4 KiB, so at most 4 KiB plus the active segment remain.
        config.retention_ms = -1;
        config.retention_bytes = 4 << 10;
        log.set_config(config).unwrap();
        log.apply_retention(2_500).await.unwrap();
        assert!(log.size_bytes() <= (4 << 10) + (1 << 10), "{}", log.size_bytes());
        assert!(log.log_start_offset() > start);

        // DeleteRecords in the middle of a segment.
        let target = Offset(log.log_end_offset().0 - 3);
        assert_eq!(log.delete_records_before(target).await.unwrap(), target);
        assert_eq!(log.log_start_offset(), target);
        assert!(log.read(Offset(target.0 - 1), 1, None).await.is_err());
        assert!(log.delete_records_before(Offset(1_000)).await.is_err());
        target
    });
    // The log start offset survives a restart.
    run(async {
        let log = open_dma(dir.path(), small_segments(1 << 10)).await;
        assert_eq!(log.log_start_offset(), target);
    });
}

// Truncation removes the batch holding the offset and everything after, across
// segments; appends continue from there and a restart sees the same log.
#[test]
fn truncation() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_dma(dir.path(), small_segments(4 << 10)).await;
        for tag in 0..60 {
            log.append(tagged(tag, 3), LEADER).await.unwrap();
        }
        log.truncate_to(Offset(100)).await.unwrap();
        // 100 is inside batch 99..=101, which goes too.
        assert_eq!(log.log_end_offset(), Offset(99));
        assert_eq!(bases(&log).await.last(), Some(&96));
        assert_eq!(log.append(tagged(1000, 2), LEADER).await.unwrap().base_offset, Offset(99));
        log.truncate_to(Offset(30)).await.unwrap();
        assert_eq!(log.log_end_offset(), Offset(30));
        log.append(tagged(1001, 2), LEADER).await.unwrap();
    });
    run(async {
        let log = open_dma(dir.path(), small_segments(4 << 10)).await;
        assert_eq!(log.log_end_offset(), Offset(32));
        let all = bases(&log).await;
        assert_eq!(all.len(), 11);
        assert_eq!(all.last(), Some(&30));
        log.truncate_to(Offset(0)).await.unwrap();
        assert_eq!(log.log_end_offset(), Offset(0));
        assert_eq!(log.append(tagged(0, 1), LEADER).await.unwrap().base_offset, Offset(0));
    });
}

// The leader epoch cache follows appends and truncation, as OffsetForLeaderEpoch needs.
#[test]
fn leader_epochs_follow_appends() {
    use skein_engine::{AppendMode, LeaderEpoch};
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_dma(dir.path(), LogConfig::default()).await;
        for (epoch, n) in [(1, 3), (2, 2), (5, 4)] {
            for tag in 0..n {
                log.append(tagged(tag, 1), AppendMode::Leader { epoch: LeaderEpoch(epoch) }).await.unwrap();
            }
        }
        assert_eq!(log.end_offset_for_epoch(LeaderEpoch(1)), Some((LeaderEpoch(1), Offset(3))));
        assert_eq!(log.end_offset_for_epoch(LeaderEpoch(3)), Some((LeaderEpoch(2), Offset(5))));
        assert_eq!(log.end_offset_for_epoch(LeaderEpoch(5)), Some((LeaderEpoch(5), Offset(9))));
        log.truncate_to(Offset(5)).await.unwrap();
        // Epoch 5 is gone with its records: newer than any known, so undefined.
        assert_eq!(log.end_offset_for_epoch(LeaderEpoch(5)), None);
        assert_eq!(log.end_offset_for_epoch(LeaderEpoch(2)), Some((LeaderEpoch(2), Offset(5))));
        // A follower append keeps the leader's offsets and epoch.
        let batch = tagged(9, 2).with_offset_and_epoch(Offset(5), LeaderEpoch(7));
        log.append(batch, AppendMode::Replica).await.unwrap();
        assert_eq!(log.end_offset_for_epoch(LeaderEpoch(7)), Some((LeaderEpoch(7), Offset(7))));
        let stale = tagged(9, 2).with_offset_and_epoch(Offset(3), LeaderEpoch(7));
        assert!(matches!(
            log.append(stale, AppendMode::Replica).await,
            Err(skein_engine::Error::OffsetNotMonotonic { .. })
        ));
        // A new leader's epoch starts at the log end before anything is written in it:
        // epoch 7 ends there; a truncation to the end (nothing to cut) drops it again.
        log.start_leader_epoch(LeaderEpoch(8));
        assert_eq!(log.end_offset_for_epoch(LeaderEpoch(7)), Some((LeaderEpoch(7), Offset(7))));
        assert_eq!(log.leader_epochs().latest(), Some((LeaderEpoch(8), Offset(7))));
        log.truncate_to(Offset(7)).await.unwrap();
        assert_eq!(log.leader_epochs().latest(), Some((LeaderEpoch(7), Offset(5))));
    });
    run(async {
        let log = open_dma(dir.path(), LogConfig::default()).await;
        assert_eq!(log.end_offset_for_epoch(LeaderEpoch(2)), Some((LeaderEpoch(2), Offset(5))));
        assert_eq!(log.end_offset_for_epoch(LeaderEpoch(7)), Some((LeaderEpoch(7), Offset(7))));
    });
}

// A batch over max.message.bytes is refused and nothing is stored.
#[test]
fn oversized_batch_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let config = LogConfig { max_message_bytes: 200, ..LogConfig::default() };
        let log = open_dma(dir.path(), config).await;
        let big = tagged(0, 20);
        let err = log.append(big, LEADER).await.unwrap_err();
        assert!(matches!(err, skein_engine::Error::InvalidBatch(skein_engine::BatchError::TooLarge { .. })), "{err}");
        assert_eq!(log.log_end_offset(), Offset(0));
    });
}

// A clean restart reads only the tail after each segment's last index entry; a crash
// restart scans the unflushed segments in full. (A log of a few segments: one under
// `CHECKPOINT_LOG_BYTES_MIN` keeps no checkpoint and is scanned whole.)
#[test]
fn clean_restart_skips_the_recovery_scan() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_segments(64 << 10);
    let size = run(async {
        let log = open_dma(dir.path(), config.clone()).await;
        for tag in 0..1000 {
            log.append(tagged(tag, 5), LEADER).await.unwrap();
        }
        assert!(log.segment_count() > 1);
        log.close().await.unwrap();
        log.size_bytes()
    });
    run(async {
        let log = open_dma(dir.path(), config.clone()).await;
        let scanned = log.metrics().recovery_scanned_bytes.get();
        // At most one index interval (plus one batch) per segment.
        let segments = log.segment_count() as u64;
        assert!(scanned <= segments * (256 + 200), "clean restart scanned {scanned} of {size} bytes");
        log.append(tagged(1000, 1), LEADER).await.unwrap();
        // Dropped without close: a crash.
    });
    run(async {
        let log = open_dma(dir.path(), config).await;
        assert!(log.metrics().recovery_scanned_bytes.get() > 0);
        assert_eq!(log.log_end_offset(), Offset(5001));
    });
}

// segment.ms rolls a segment whose first append is old enough; a full index rolls too.
#[test]
fn time_and_index_rolls() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let config = LogConfig { segment_ms: 1, ..LogConfig::default() };
        let log = open_dma(dir.path(), config).await;
        log.append(tagged(0, 1), LEADER).await.unwrap();
        glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
        log.append(tagged(1, 1), LEADER).await.unwrap();
        assert_eq!(log.segment_bases(), vec![Offset(0), Offset(1)]);
    });
    let dir = tempfile::tempdir().unwrap();
    run(async {
        // Two offset index entries at most; an entry every 64 bytes.
        let config = LogConfig { segment_index_bytes: 16, index_interval_bytes: 64, ..LogConfig::default() };
        let log = open_dma(dir.path(), config).await;
        for tag in 0..10 {
            log.append(tagged(tag, 1), LEADER).await.unwrap();
        }
        assert!(log.segment_count() >= 3, "{:?}", log.segment_bases());
        assert_eq!(bases(&log).await, (0..10).collect::<Vec<_>>());
    });
}

// flush.ms: housekeeping flushes once the interval has passed, not before.
#[test]
fn flush_ms_flushes_when_due() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let config = LogConfig { flush_ms: 50, ..LogConfig::default() };
        let log = open_dma(dir.path(), config).await;
        log.append(tagged(0, 3), LEADER).await.unwrap();
        assert_eq!(log.offset_flushed_end(), Offset(0));
        let now = skein_engine::log::now_ms();
        log.flush_if_due(now).await.unwrap();
        assert_eq!(log.offset_flushed_end(), Offset(0), "flushed before flush.ms passed");
        log.flush_if_due(now + 100).await.unwrap();
        assert_eq!(log.offset_flushed_end(), Offset(3));
        assert_eq!(log.metrics().syncs.get(), 1);
    });
}

// flush.messages=1: every acknowledged append is fdatasynced, and concurrent appends
// share syncs.
#[test]
fn flush_messages_syncs_before_acknowledging() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let config = LogConfig { flush_messages: 1, ..LogConfig::default() };
        let log = open_dma(dir.path(), config).await;
        let tasks: Vec<_> = (0..100u64)
            .map(|tag| {
                let log = log.clone();
                glommio::spawn_local(async move {
                    let info = log.append(tagged(tag, 1), LEADER).await.unwrap();
                    assert!(log.offset_flushed_end() > info.last_offset);
                })
            })
            .collect();
        for task in tasks {
            task.await;
        }
        let syncs = log.metrics().syncs.get();
        assert!((1..100).contains(&syncs), "{syncs} syncs for 100 concurrent appends");
    });
}

// An append cancelled while queued behind another does not stall the queue, and the
// ones after it keep their order.
#[test]
fn cancelled_append_does_not_stall_the_queue() {
    use futures_lite::future;
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_dma(dir.path(), LogConfig::default()).await;
        // The first append must reserve space (fallocate): it waits at the head.
        let mut first = Box::pin(log.append(tagged(0, 2), LEADER));
        assert!(future::poll_once(&mut first).await.is_none());
        let mut second = Box::pin(log.append(tagged(1, 2), LEADER));
        assert!(future::poll_once(&mut second).await.is_none());
        drop(second);
        let third = log.append(tagged(2, 2), LEADER);
        assert_eq!(first.await.unwrap().base_offset, Offset(0));
        assert_eq!(third.await.unwrap().base_offset, Offset(2));
        assert_eq!(log.log_end_offset(), Offset(4));
    });
}

// An idle log gives its tail buffer back; the next append takes a new one and the
// partial block it rewrites keeps the earlier bytes.
#[test]
fn idle_logs_release_their_tail_buffer() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_dma(dir.path(), LogConfig::default()).await;
        for round in 0..5u64 {
            for tag in 0..7 {
                log.append(tagged(round * 10 + tag, 3), LEADER).await.unwrap();
            }
            assert!(log.release_idle_buffers(), "round {round}");
            assert!(!log.release_idle_buffers(), "nothing left to release");
        }
        log.close().await.unwrap();
    });
    run(async {
        let log = open_dma(dir.path(), LogConfig::default()).await;
        let batches = read_all(&log, Offset(0)).await;
        assert_eq!(batches.len(), 35);
        for (i, b) in batches.iter().enumerate() {
            let tag = (i / 7) as u64 * 10 + (i % 7) as u64;
            assert_eq!(b.bytes()[61..], tagged(tag, 3).bytes()[61..]);
        }
    });
}

// Two writers replacing the same file at once (a roll and housekeeping writing one
// checkpoint) each use their own temp file: the result is one whole version, and no
// temp file is left behind.
#[test]
fn concurrent_atomic_writes_of_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint");
    run(async {
        let storage = skein_engine::io::dma::DmaStorage;
        let a = vec![b'a'; 10_000];
        let b = vec![b'b'; 3_000];
        let (ra, rb) = futures_lite::future::zip(
            skein_engine::io::write_whole_atomic(&storage, &path, &a),
            skein_engine::io::write_whole_atomic(&storage, &path, &b),
        )
        .await;
        ra.unwrap();
        rb.unwrap();
        let content = std::fs::read(&path).unwrap();
        assert!(content == a || content == b, "a mix of both writers: {} bytes", content.len());
    });
    let leftovers: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

// Producer snapshots: the newest two stay, truncation and recovery remove those past
// the log end, a full restart removes all.
#[test]
fn producer_snapshots_follow_the_log_ends() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_dma(dir.path(), LogConfig::default()).await;
        for tag in 0..10 {
            log.append(tagged(tag, 1), LEADER).await.unwrap();
        }
        for at in [2, 5, 8] {
            log.write_producer_snapshot(Offset(at), format!("state-{at}").as_bytes()).await.unwrap();
        }
        assert_eq!(log.producer_snapshots().await.unwrap(), vec![Offset(5), Offset(8)]);
        assert_eq!(&log.read_producer_snapshot(Offset(8)).await.unwrap().unwrap()[..], b"state-8");
        assert!(log.read_producer_snapshot(Offset(2)).await.unwrap().is_none());
        // A snapshot past the end describes nothing the log holds.
        log.write_producer_snapshot(Offset(11), b"ahead").await.unwrap();
        assert_eq!(log.producer_snapshots().await.unwrap(), vec![Offset(5), Offset(8)]);
        log.truncate_to(Offset(6)).await.unwrap();
        assert_eq!(log.producer_snapshots().await.unwrap(), vec![Offset(5)]);
        log.close().await.unwrap();
    });
    // A snapshot written past what a crash left is removed when the log opens.
    std::fs::write(dir.path().join("t-0").join(format!("{:020}.snapshot", 40)), b"lost").unwrap();
    run(async {
        let log = open_dma(dir.path(), LogConfig::default()).await;
        assert_eq!(log.log_end_offset(), Offset(6));
        assert_eq!(log.producer_snapshots().await.unwrap(), vec![Offset(5)]);
        log.truncate_to(Offset(0)).await.unwrap();
        assert!(log.producer_snapshots().await.unwrap().is_empty());
        log.close().await.unwrap();
    });
}

// A log that grows past CHECKPOINT_LOG_BYTES_MIN writes its first state files at a
// point within STATE_FILES_SPREAD set by its name, not in the housekeeping pass that
// notices (for "t-0" that point is later), and by the end of the window it has them.
#[test]
fn first_state_files_wait_for_their_point_in_the_spread() {
    use skein_engine::limits::{CHECKPOINT_LOG_BYTES_MIN, STATE_FILES_SPREAD};
    let dir = tempfile::tempdir().unwrap();
    let part = dir.path().join("t-0");
    run(async {
        let log = open_dma(dir.path(), LogConfig::default()).await;
        let mut tag = 0;
        while log.size_bytes() < CHECKPOINT_LOG_BYTES_MIN {
            log.append(tagged(tag, 20), LEADER).await.unwrap();
            tag += 1;
        }
        assert!(log.keeps_state_files());
        let noticed = std::time::Instant::now();
        log.checkpoint_when_due(noticed).await.unwrap();
        assert!(!part.join("skein-checkpoint").exists(), "written in the pass that noticed");
        assert!(!part.join("leader-epoch-checkpoint").exists());
        log.checkpoint_when_due(noticed + STATE_FILES_SPREAD).await.unwrap();
        assert!(part.join("skein-checkpoint").exists(), "not written by the end of the spread");
        assert!(part.join("leader-epoch-checkpoint").exists());
    });
}
