//! A randomised model test: random sequences of appends, rolls, truncations, deletions,
//! retention, compaction and restarts (clean and crash), checked after every step
//! against a simple in-memory model of the log. Bounded: 24 seeds of 80 steps by
//! default; `MODEL_SEEDS=1000` soaks longer, `MODEL_SEED=n` replays one seed with
//! `MODEL_TRACE=1` printing each step.

mod common;

use std::collections::HashMap;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use skein_engine::records::{decode_records, Compression};
use skein_engine::{CleanupPolicy, LogConfig, Offset};

#[derive(Clone, Debug)]
struct ModelBatch {
    last: i64,
    records: Vec<(i64, String, Option<String>)>,
}

#[derive(Default, Debug)]
struct Model {
    batches: Vec<ModelBatch>,
    start: i64,
    end: i64,
}

impl Model {
    fn visible(&self) -> Vec<(i64, String, Option<String>)> {
        self.batches.iter().flat_map(|b| b.records.iter().cloned()).filter(|r| r.0 >= self.start).collect()
    }
}

async fn visible<S: skein_engine::io::Storage>(log: &skein_engine::Log<S>) -> Vec<(i64, String, Option<String>)> {
    let mut out = Vec::new();
    for batch in read_all(log, log.log_start_offset()).await {
        for record in decode_records(&batch.bytes(), 1 << 30).unwrap() {
            let offset = batch.base_offset().0 + record.offset_delta as i64;
            if offset >= log.log_start_offset().0 {
                let key = String::from_utf8(record.key.unwrap().to_vec()).unwrap();
                out.push((offset, key, record.value.map(|v| String::from_utf8(v.to_vec()).unwrap())));
            }
        }
    }
    out
}

fn config() -> LogConfig {
    LogConfig {
        cleanup_policy: CleanupPolicy { delete: true, compact: true },
        delete_retention_ms: i64::MAX / 4,
        retention_ms: -1,
        ..small_segments(1 << 10)
    }
}

// The log always equals the model, whatever the sequence of operations.
#[test]
fn log_matches_model() {
    // MODEL_SEED=n replays one seed; MODEL_SEEDS=n runs more seeds (a longer soak).
    let seeds = match (std::env::var("MODEL_SEED"), std::env::var("MODEL_SEEDS")) {
        (Ok(one), _) => one.parse::<u64>().unwrap()..one.parse::<u64>().unwrap() + 1,
        (_, Ok(count)) => 0..count.parse::<u64>().unwrap(),
        _ => 0..24,
    };
    for seed in seeds {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut model = Model::default();
        let mut restarts = 0;
        let mut steps = 0;
        while steps < 80 {
            let crash = rng.random_bool(0.5);
            let ops_this_run = rng.random_range(5..30);
            run(async {
                let log = open_dma(dir.path(), config()).await;
                assert_eq!(visible(&log).await, model.visible(), "seed {seed} after restart {restarts}");
                assert_eq!((log.log_start_offset().0, log.log_end_offset().0), (model.start, model.end), "seed {seed}");
                for _ in 0..ops_this_run {
                    steps += 1;
                    let op = rng.random_range(0..100);
                    let what;
                    if op < 55 {
                        what = "append";
                        let n = rng.random_range(1..6);
                        let values: Vec<String> = (0..n).map(|i| format!("s{steps}-{i}")).collect();
                        let keys: Vec<String> = (0..n).map(|_| format!("k{}", rng.random_range(0..8))).collect();
                        let tombstone: Vec<bool> = (0..n).map(|_| rng.random_bool(0.1)).collect();
                        let pairs: Vec<(&str, Option<&str>)> = (0..n)
                            .map(|i| (keys[i].as_str(), if tombstone[i] { None } else { Some(values[i].as_str()) }))
                            .collect();
                        let compression =
                            [Compression::None, Compression::Lz4, Compression::Zstd][rng.random_range(0..3)];
                        let info = log.append(keyed(1_000, compression, &pairs), LEADER).await.unwrap();
                        assert_eq!(info.base_offset.0, model.end);
                        let records = (0..n)
                            .map(|i| (model.end + i as i64, keys[i].clone(), pairs[i].1.map(str::to_owned)))
                            .collect();
                        model.batches.push(ModelBatch { last: model.end + n as i64 - 1, records });
                        model.end += n as i64;
                    } else if op < 62 {
                        what = "roll";
                        log.roll().await.unwrap();
                    } else if op < 70 {
                        what = "truncate";
                        let target = rng.random_range(model.start.saturating_sub(2).max(0)..=model.end);
                        log.truncate_to(Offset(target)).await.unwrap();
                        if target >= model.end {
                        } else if target < model.start {
                            model.batches.clear();
                            model.start = target;
                            model.end = target;
                        } else {
                            model.batches.retain(|b| b.last < target);
                            let end = log.log_end_offset().0;
                            let floor = model.batches.last().map_or(0, |b| b.last + 1);
                            assert!(
                                end >= floor.min(target) && end <= target,
                                "seed {seed}: end {end} floor {floor} target {target}"
                            );
                            model.end = end;
                            model.start = model.start.min(end);
                        }
                    } else if op < 78 {
                        what = "delete records";
                        let target = rng.random_range(model.start..=model.end);
                        assert_eq!(log.delete_records_before(Offset(target)).await.unwrap().0, target.max(model.start));
                        model.start = model.start.max(target);
                    } else if op < 85 {
                        what = "retention";
                        let bases_before = log.segment_bases();
                        let mut c = config();
                        c.retention_bytes = (log.size_bytes() / 2) as i64;
                        log.set_config(c).unwrap();
                        log.apply_retention(0).await.unwrap();
                        log.set_config(config()).unwrap();
                        let start = log.log_start_offset().0;
                        assert!(start >= model.start, "seed {seed}");
                        assert!(
                            start == model.start || bases_before.contains(&Offset(start)),
                            "seed {seed}: start {start}"
                        );
                        model.start = start;
                    } else if op < 93 {
                        what = "compact";
                        let active = log.segment_bases().last().unwrap().0;
                        let mut latest: HashMap<String, i64> = HashMap::new();
                        for b in &model.batches {
                            for (o, k, _) in &b.records {
                                if *o < active {
                                    latest.insert(k.clone(), *o);
                                }
                            }
                        }
                        log.compact(0).await.unwrap();
                        for b in &mut model.batches {
                            b.records.retain(|(o, k, _)| *o >= active || latest[k] == *o);
                        }
                        model.batches.retain(|b| !b.records.is_empty());
                    } else {
                        what = "flush and release the idle tail buffer";
                        log.flush().await.unwrap();
                        log.release_idle_buffers();
                    }
                    if std::env::var("MODEL_TRACE").is_ok() {
                        eprintln!(
                            "step {steps} {what}: bases {:?} start {} end {} batches {:?}",
                            log.segment_bases(),
                            log.log_start_offset(),
                            log.log_end_offset(),
                            read_all(&log, log.log_start_offset())
                                .await
                                .iter()
                                .map(|b| (b.base_offset().0, b.last_offset().0))
                                .collect::<Vec<_>>()
                        );
                    }
                    assert_eq!(visible(&log).await, model.visible(), "seed {seed} step {steps} after {what}");
                    assert_eq!(
                        (log.log_start_offset().0, log.log_end_offset().0),
                        (model.start, model.end),
                        "seed {seed} step {steps} after {what}"
                    );
                }
                if !crash {
                    log.close().await.unwrap();
                }
            });
            restarts += 1;
        }
    }
}
