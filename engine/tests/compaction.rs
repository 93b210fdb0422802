//! Log compaction: the latest record per key survives with its offset, tombstones go
//! after delete.retention.ms, compressed batches are rewritten with their own codec.

mod common;

use std::collections::BTreeMap;

use common::*;
use skein_engine::records::{decode_records, Compression};
use skein_engine::{CleanupPolicy, LogConfig, Offset};

/// (offset, key, value) of every record in the log.
async fn records<S: skein_engine::io::Storage>(log: &skein_engine::Log<S>) -> Vec<(i64, String, Option<String>)> {
    let mut out = Vec::new();
    for batch in read_all(log, log.log_start_offset()).await {
        for record in decode_records(batch.bytes(), 1 << 30).unwrap() {
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
