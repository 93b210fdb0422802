//! Log compaction: the latest record per key survives with its offset, tombstones go
//! after delete.retention.ms, compressed batches are rewritten with their own codec.

mod common;

use std::collections::BTreeMap;

use common::*;
use skein_engine::offset_map::OffsetMap;
use skein_engine::records::{decode_records, Compression};
use skein_engine::{CleanupPolicy, LogConfig, Offset};

/// (offset, key, value) of every record in the log.
async fn records<S: skein_engine::io::Storage>(log: &skein_engine::Log<S>) -> Vec<(i64, String, Option<String>)> {
    let mut out = Vec::new();
    for batch in read_all(log, log.log_start_offset()).await {
        for record in decode_records(&batch.bytes(), 1 << 30).unwrap() {
            let key = String::from_utf8(record.key.unwrap().to_vec()).unwrap();
            let value = record.value.map(|v| String::from_utf8(v.to_vec()).unwrap());
            out.push((batch.base_offset().0 + record.offset_delta as i64, key, value));
        }
    }
    out
}

fn compact_config() -> LogConfig {
    LogConfig { cleanup_policy: CleanupPolicy::COMPACT, delete_retention_ms: 1_000, ..small_segments(1 << 10) }
}

// Every codec: closed segments keep the newest record per key at its original offset;
// the active segment is untouched; a restart sees the compacted log.
#[test]
fn keeps_latest_per_key_for_every_codec() {
    for compression in [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd]
    {
        let dir = tempfile::tempdir().unwrap();
        let expected = run(async {
            let log = open_dma(dir.path(), compact_config()).await;
            let mut all = Vec::new();
            let mut offset = 0;
            for round in 0..40 {
                let values: Vec<String> = (0..4).map(|i| format!("v{round}-{i}")).collect();
                let pairs: Vec<(String, Option<&str>)> =
                    (0..4).map(|i| (format!("k{}", (round * 4 + i) % 7), Some(values[i].as_str()))).collect();
                let refs: Vec<(&str, Option<&str>)> = pairs.iter().map(|(k, v)| (k.as_str(), *v)).collect();
                log.append(keyed(10_000 + round as i64, compression, &refs), LEADER).await.unwrap();
                for (k, v) in &pairs {
                    all.push((offset, k.clone(), v.map(str::to_owned)));
                    offset += 1;
                }
            }
            assert!(log.segment_count() > 3, "{compression:?}: {} segments", log.segment_count());
            let active = log.segment_bases().last().unwrap().0;
            let before = records(&log).await;
            assert_eq!(before, all);
            let stats = log.compact(20_000).await.unwrap();
            assert!(stats.records_removed > 0 && stats.segments_rewritten > 0, "{compression:?}: {stats:?}");
            // Model: in closed segments (offsets below the active base) keep a record
            // only if no later record in closed segments has its key.
            let mut latest = BTreeMap::new();
            for (o, k, _) in all.iter().filter(|(o, _, _)| *o < active) {
                latest.insert(k.clone(), *o);
            }
            let expected: Vec<_> = all.iter().filter(|(o, k, _)| *o >= active || latest[k] == *o).cloned().collect();
            assert_eq!(records(&log).await, expected, "{compression:?}");
            // Offsets are preserved and appends continue after the old end.
            assert_eq!(log.log_end_offset(), Offset(160));
            log.close().await.unwrap();
            expected
        });
        run(async {
            let log = open_dma(dir.path(), compact_config()).await;
            assert_eq!(records(&log).await, expected, "{compression:?} after restart");
        });
    }
}

// Tombstones stay until delete.retention.ms has passed, then compaction removes them.
#[test]
fn tombstones_expire() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_dma(dir.path(), compact_config()).await;
        log.append(keyed(5_000, Compression::None, &[("a", Some("1")), ("b", Some("1"))]), LEADER).await.unwrap();
        log.append(keyed(5_000, Compression::None, &[("a", None)]), LEADER).await.unwrap();
        // Padding with other keys so that the tombstone's segment closes.
        for i in 0..40 {
            let key = format!("pad{i}");
            log.append(keyed(9_000, Compression::None, &[(key.as_str(), Some("x"))]), LEADER).await.unwrap();
        }
        log.roll().await.unwrap();
        log.compact(5_500).await.unwrap();
        let kept = records(&log).await;
        assert!(kept.iter().any(|(o, k, v)| *o == 2 && k == "a" && v.is_none()), "tombstone kept while young");
        assert!(!kept.iter().any(|(o, _, _)| *o == 0), "the value it deletes is gone");
        log.compact(7_000).await.unwrap();
        let kept = records(&log).await;
        assert!(!kept.iter().any(|(_, k, _)| k == "a"), "expired tombstone removed: {kept:?}");
        assert!(kept.iter().any(|(o, k, _)| *o == 1 && k == "b"));
        // Reads across the emptied range continue with the next batch.
        let next = log.read(Offset(0), 1, None).await.unwrap();
        assert_eq!(next[0].base_offset(), Offset(0));
    });
}

// A crash after the compacted copy is complete but before it replaced the segment:
// recovery finishes the swap; an unfinished copy is discarded.
#[test]
fn interrupted_swap_is_finished_or_discarded() {
    let dir = tempfile::tempdir().unwrap();
    let config = compact_config();
    let part = dir.path().join("t-0");
    let expected = run(async {
        let log = open_dma(dir.path(), config.clone()).await;
        for i in 0..60 {
            let key = format!("k{}", i % 3);
            log.append(keyed(10_000, Compression::None, &[(key.as_str(), Some("v"))]), LEADER).await.unwrap();
        }
        log.close().await.unwrap();
        records(&log).await
    });
    // An unfinished copy (garbage) must not replace anything.
    std::fs::write(part.join("00000000000000000000.log.cleaned"), b"partial").unwrap();
    let segment = std::fs::read(part.join("00000000000000000000.log")).unwrap();
    // A finished copy identical to the segment is swapped in.
    std::fs::write(part.join("00000000000000000000.log.swap"), &segment).unwrap();
    run(async {
        let log = open_dma(dir.path(), config).await;
        assert_eq!(records(&log).await, expected);
    });
    assert!(!part.join("00000000000000000000.log.cleaned").exists());
    assert!(!part.join("00000000000000000000.log.swap").exists());
}

/// Appends `rounds` batches of four records over `keys` keys, timestamped `timestamp`.
async fn churn<S: skein_engine::io::Storage>(log: &skein_engine::Log<S>, rounds: usize, keys: usize, timestamp: i64) {
    for round in 0..rounds {
        let values: Vec<String> = (0..4).map(|i| format!("v{round}-{i}")).collect();
        let pairs: Vec<(String, Option<&str>)> =
            (0..4).map(|i| (format!("k{}", (round * 4 + i) % keys), Some(values[i].as_str()))).collect();
        let refs: Vec<(&str, Option<&str>)> = pairs.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        log.append(keyed(timestamp, Compression::None, &refs), LEADER).await.unwrap();
    }
}

/// What full compaction leaves: in closed segments, the newest record of each key.
fn compacted(all: &[(i64, String, Option<String>)], active: i64) -> Vec<(i64, String, Option<String>)> {
    let mut latest = BTreeMap::new();
    for (o, k, _) in all.iter().filter(|(o, _, _)| *o < active) {
        latest.insert(k.clone(), *o);
    }
    all.iter().filter(|(o, k, _)| *o >= active || latest[k] == *o).cloned().collect()
}

// The shard's cleaner cleans a log only once its dirty ratio reaches
// min.cleanable.dirty.ratio, never on every look; what it cleaned stays clean across
// a restart (the cleaner checkpoint).
#[test]
fn the_dirty_ratio_decides() {
    let dir = tempfile::tempdir().unwrap();
    let partition = skein_engine::TopicPartition::new("t", 0);
    let config = LogConfig { min_cleanable_dirty_ratio: 0.5, ..compact_config() };
    run(async {
        let manager = skein_engine::LogManager::new(skein_engine::io::dma::DmaStorage, dir.path(), 1 << 20);
        let log = manager.create(partition.clone(), config.clone()).await.unwrap();
        churn(&log, 40, 100, 10_000).await;
        // Never cleaned: all dirty.
        let (cleaned, stats) = manager.clean_dirtiest(20_000).await.expect("a fully dirty log is due");
        assert_eq!(cleaned, partition);
        assert!(stats.unwrap().records_removed > 0);
        assert!(manager.clean_dirtiest(20_000).await.is_none(), "a clean log is not cleaned again");
        // A little new data: below the ratio.
        churn(&log, 3, 100, 10_000).await;
        log.roll().await.unwrap();
        let dirtiness = log.dirtiness(20_000).unwrap();
        assert!(dirtiness.ratio > 0.0 && dirtiness.ratio < 0.5, "{dirtiness:?}");
        assert!(manager.clean_dirtiest(20_000).await.is_none());
        assert!(manager.close_all().await.is_empty());
    });
    run(async {
        let manager = skein_engine::LogManager::new(skein_engine::io::dma::DmaStorage, dir.path(), 1 << 20);
        let log = manager.open(partition.clone(), config.clone()).await.unwrap();
        let dirtiness = log.dirtiness(20_000).unwrap();
        assert!(dirtiness.ratio < 0.5, "cleaning survives a restart: {dirtiness:?}");
        // Enough new data: due.
        churn(&log, 40, 100, 10_000).await;
        assert!(log.dirtiness(20_000).unwrap().due(&config));
        assert!(manager.clean_dirtiest(20_000).await.is_some());
    });
}

// An offset map too small for the dirty keys cleans in several passes, each up to
// where the map filled; together they leave what one unbounded pass would.
#[test]
fn a_small_offset_map_cleans_in_passes() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_dma(dir.path(), compact_config()).await;
        churn(&log, 60, 40, 10_000).await;
        let all = records(&log).await;
        let active = log.segment_bases().last().unwrap().0;
        // 16 slots: 14 keys a pass; one map for every pass, as the shard's cleaner keeps it.
        let mut map = OffsetMap::with_memory(0);
        let mut passes = 0;
        while log.dirtiness(20_000).is_some_and(|d| d.dirty_bytes > 0) {
            log.clean(20_000, &Default::default(), &mut map).await.unwrap();
            passes += 1;
            assert!(passes < 100, "no progress");
        }
        assert!(passes > 2, "{passes} passes");
        assert_eq!(records(&log).await, compacted(&all, active));
    });
}

// min.compaction.lag.ms keeps young records out of the cleaner's reach;
// max.compaction.lag.ms makes a log due whatever its dirty ratio.
#[test]
fn compaction_lags() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let config = LogConfig { min_compaction_lag_ms: 5_000, ..compact_config() };
        let log = open_dma(dir.path(), config).await;
        churn(&log, 40, 100, 10_000).await;
        let before = records(&log).await;
        assert!(log.dirtiness(12_000).is_none(), "every closed segment is younger than the lag");
        assert_eq!(
            log.clean(12_000, &Default::default(), &mut OffsetMap::with_memory(1 << 20)).await.unwrap().records_removed,
            0
        );
        assert_eq!(records(&log).await, before);
        assert!(
            log.clean(16_000, &Default::default(), &mut OffsetMap::with_memory(1 << 20)).await.unwrap().records_removed
                > 0
        );

        let config = LogConfig {
            min_compaction_lag_ms: 0,
            min_cleanable_dirty_ratio: 0.9,
            max_compaction_lag_ms: 150_000,
            ..compact_config()
        };
        log.set_config(config.clone()).unwrap();
        churn(&log, 3, 100, 100_000).await;
        log.roll().await.unwrap();
        let young = log.dirtiness(110_000).unwrap();
        assert!(!young.due(&config), "{young:?}");
        let old = log.dirtiness(200_000).unwrap();
        assert!(old.overdue && old.due(&config), "{old:?}");
    });
}

// log.cleaner.io.max.bytes.per.second holds a pass's reads and writes to the rate.
#[test]
fn cleaner_io_is_throttled() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_dma(dir.path(), compact_config()).await;
        churn(&log, 40, 100, 10_000).await;
        log.roll().await.unwrap();
        // Every segment closed: a pass reads them all at least twice (map, then the
        // count before a rewrite), so at `bytes` a second it takes two seconds or more.
        let bytes = log.size_bytes();
        let rate = bytes as f64;
        let cleaner = skein_engine::CleanerConfig { io_max_bytes_per_second: rate, ..Default::default() };
        let started = std::time::Instant::now();
        assert!(log.clean(20_000, &cleaner, &mut OffsetMap::with_memory(1 << 20)).await.unwrap().records_removed > 0);
        assert!(
            started.elapsed() >= std::time::Duration::from_millis(900),
            "{:?} for {bytes} bytes",
            started.elapsed()
        );
    });
}

/// The transactions of `aborted_or_open` as the cleaner sees them.
struct Txns {
    aborted: Vec<skein_engine::log::AbortedRange>,
    first_unstable: Option<Offset>,
}

impl skein_engine::log::Transactions for Txns {
    fn aborted(&self) -> Vec<skein_engine::log::AbortedRange> {
        self.aborted.clone()
    }

    fn first_unstable(&self) -> Option<Offset> {
        self.first_unstable
    }
}

/// A batch of `pairs` from transactional producer `pid` (a marker when `control`).
fn transactional(pid: i64, control: bool, pairs: &[(&str, Option<&str>)]) -> skein_engine::Batch {
    let plain = keyed(10_000, Compression::None, pairs);
    let records = decode_records(&plain.bytes(), 1 << 20).unwrap();
    let producer = skein_engine::records::BatchProducer {
        id: pid,
        epoch: 0,
        base_sequence: if control { -1 } else { 0 },
        transactional: true,
        control,
    };
    let bytes = skein_engine::records::build_batch_for(0, 10_000, Compression::None, &records, producer);
    skein_engine::Batch::validate(bytes::Bytes::from(bytes), usize::MAX).unwrap()
}

// As Kafka's cleaner: an aborted transaction's records go and never supersede a
// committed value of their key; markers stay; nothing at or past the first open
// transaction is cleaned.
#[test]
fn aborted_transactions_are_cleaned_and_open_ones_wait() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_dma(dir.path(), compact_config()).await;
        let append = |batch| log.append(batch, LEADER);
        append(keyed(10_000, Compression::None, &[("k", Some("committed"))])).await.unwrap();
        let aborted_at = append(transactional(7, false, &[("k", Some("aborted"))])).await.unwrap().base_offset;
        let marker_at = append(transactional(7, true, &[("\0\0\0\0", Some("marker"))])).await.unwrap().base_offset;
        for round in 0..20 {
            let value = format!("old-{round}");
            append(keyed(10_000, Compression::None, &[("filler", Some(value.as_str()))])).await.unwrap();
        }
        let open_at = append(transactional(8, false, &[("o", Some("open"))])).await.unwrap().base_offset;
        for round in 0..30 {
            let value = format!("new-{round}");
            append(keyed(10_000, Compression::None, &[("late", Some(value.as_str()))])).await.unwrap();
        }
        assert!(log.segment_count() > 4, "{} segments", log.segment_count());
        let aborted = skein_engine::log::AbortedRange {
            producer_id: 7,
            first_offset: aborted_at,
            last_offset: marker_at,
            last_stable_offset: marker_at.plus(1),
        };
        let txns = Txns { aborted: vec![aborted], first_unstable: Some(open_at) };
        log.set_transactions(std::rc::Rc::new(txns));
        log.compact(20_000).await.unwrap();
        let after = records(&log).await;
        let values = |key: &str| -> Vec<String> {
            after.iter().filter(|(_, k, _)| k == key).map(|(_, _, v)| v.clone().unwrap_or_default()).collect()
        };
        assert_eq!(values("k"), ["committed"], "the aborted value neither stays nor wins");
        assert_eq!(values("\0\0\0\0"), ["marker"], "the marker stays");
        assert_eq!(values("o"), ["open"]);
        // Fillers below the open transaction were compacted; the "late" records past
        // it were not touched, duplicates and all.
        assert_eq!(values("filler").len(), 1);
        assert!(values("late").len() > 1);
        assert!(after.iter().any(|(o, _, _)| *o == marker_at.0));
        log.close().await.unwrap();
    });
}
