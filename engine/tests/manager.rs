//! The per-shard log manager: creating, finding, deleting and reopening partitions, a
//! corrupt partition left offline while the others serve, and housekeeping.

mod common;

use common::*;
use skein_engine::io::dma::DmaStorage;
use skein_engine::{Error, LogConfig, LogManager, Offset, TopicPartition};

// Partitions are created once, listed, deleted with their directory, and reopened
// from disk by a new manager for the partitions it owns.
#[test]
fn create_delete_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let manager = LogManager::new(DmaStorage, dir.path(), 1 << 20);
        for p in 0..3 {
            let log = manager.create(TopicPartition::new("my-topic", p), LogConfig::default()).await.unwrap();
            log.append(tagged(p as u64, 2), LEADER).await.unwrap();
        }
        let exists = manager.create(TopicPartition::new("my-topic", 1), LogConfig::default()).await;
        assert!(matches!(exists, Err(Error::PartitionExists(_))));
        manager.delete(&TopicPartition::new("my-topic", 2)).await.unwrap();
        assert!(!dir.path().join("my-topic-2").exists());
        // Renamed to Kafka's `-delete` name, never discovered, removed by the sweep.
        let deleted: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with("my-topic-2.") && n.ends_with("-delete"))
            .collect();
        assert_eq!(deleted.len(), 1, "{deleted:?}");
        assert!(!manager.discover().await.unwrap().contains(&TopicPartition::new("my-topic", 2)));
        assert_eq!(manager.remove_deleted_dirs().await.unwrap(), 1);
        assert!(!dir.path().join(&deleted[0]).exists());
        assert!(matches!(manager.delete(&TopicPartition::new("my-topic", 2)).await, Err(Error::UnknownPartition(_))));
        assert!(manager.available_bytes().unwrap() > 0);
        assert!(manager.close_all().await.is_empty());
    });
    run(async {
        let manager = LogManager::new(DmaStorage, dir.path(), 1 << 20);
        let mut found = manager.discover().await.unwrap();
        found.sort();
        assert_eq!(found, vec![TopicPartition::new("my-topic", 0), TopicPartition::new("my-topic", 1)]);
        // This shard owns partition 1 only.
        let failed = manager.open_existing(|p| (p.partition == 1).then(LogConfig::default)).await.unwrap();
        assert!(failed.is_empty());
        assert_eq!(manager.partitions(), vec![TopicPartition::new("my-topic", 1)]);
        let log = manager.get(&TopicPartition::new("my-topic", 1)).unwrap();
        assert_eq!(log.log_end_offset(), Offset(2));
    });
}

// A partition whose flushed data is corrupt stays offline; the others open and serve.
#[test]
fn corrupt_partition_stays_offline() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let manager = LogManager::new(DmaStorage, dir.path(), 1 << 20);
        for p in 0..2 {
            let log = manager.create(TopicPartition::new("t", p), LogConfig::default()).await.unwrap();
            for tag in 0..5 {
                log.append(tagged(tag, 2), LEADER).await.unwrap();
            }
        }
        manager.close_all().await;
    });
    // Damage a CRC-covered byte in the first batch of partition 0.
    let path = dir.path().join("t-0/00000000000000000000.log");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[70] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();
    std::fs::remove_file(dir.path().join("t-0/00000000000000000000.index")).unwrap();
    run(async {
        let manager = LogManager::new(DmaStorage, dir.path(), 1 << 20);
        // The node stopped cleanly (its marker): these small logs keep no checkpoint, and
        // their data is all flushed.
        manager.set_clean_start(true);
        let failed = manager.open_existing(|_| Some(LogConfig::default())).await.unwrap();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].0, TopicPartition::new("t", 0));
        assert!(matches!(failed[0].1, Error::Corruption { .. }));
        assert_eq!(manager.metrics().corruptions.get(), 1);
        let healthy = manager.get(&TopicPartition::new("t", 1)).unwrap();
        assert_eq!(healthy.log_end_offset(), Offset(10));
    });
}

// Housekeeping applies retention and compaction and writes checkpoints.
#[test]
fn housekeeping_applies_retention() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let manager = LogManager::new(DmaStorage, dir.path(), 1 << 20);
        let config = LogConfig { retention_ms: 1_000, ..small_segments(1 << 10) };
        let log = manager.create(TopicPartition::new("t", 0), config).await.unwrap();
        for tag in 0..100 {
            log.append(tagged(tag, 2), LEADER).await.unwrap();
        }
        let before = log.segment_count();
        // Record timestamps are around 1000-1100; at now = 1 hour everything closed is old.
        manager.housekeeping(3_600_000).await;
        assert_eq!(log.segment_count(), 1, "{before} segments before");
        assert!(log.log_start_offset() > Offset(0));
        assert!(manager.metrics().segments_deleted.get() > 0);
    });
}

// A partition directory carries its topic's id (Kafka's partition.metadata): opening it
// for another incarnation of the topic is refused; the right id opens it.
#[test]
fn topic_id_guards_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = ([1u8; 16], [2u8; 16]);
    run(async {
        let manager = LogManager::new(DmaStorage, dir.path(), 1 << 20);
        let partition = TopicPartition::new("ids", 0);
        let log = manager.open_for_topic(partition.clone(), LogConfig::default(), first).await.unwrap();
        log.append(tagged(0, 1), LEADER).await.unwrap();
        assert!(manager.close_all().await.is_empty());
        let metadata = std::fs::read_to_string(dir.path().join("ids-0/partition.metadata")).unwrap();
        assert_eq!(metadata, "version: 0\ntopic_id: AQEBAQEBAQEBAQEBAQEBAQ\n");
        let manager = LogManager::new(DmaStorage, dir.path(), 1 << 20);
        let refused = manager.open_for_topic(partition.clone(), LogConfig::default(), second).await;
        assert!(matches!(refused, Err(Error::TopicIdMismatch { .. })), "{:?}", refused.err());
        let log = manager.open_for_topic(partition, LogConfig::default(), first).await.unwrap();
        assert_eq!(log.log_end_offset(), Offset(1));
    });
}

// A manager's write shape reaches its logs' appenders: with 64 KiB chunks and one
// write in flight, 4 MiB of appends take at least 64 writes; with 2 MiB chunks and 8
// in flight, fewer. Both read every batch back, in order.
#[test]
fn write_shape_reaches_the_appenders() {
    use skein_engine::records::{build_batch, Compression, Record};
    use skein_engine::{Batch, WriteShape};
    const BATCHES: u64 = 256;
    let batch = |tag: u64| {
        let records: Vec<Record> = (0..16)
            .map(|i| Record {
                offset_delta: i,
                value: Some(bytes::Bytes::from(vec![tag as u8; 1000])),
                ..Record::default()
            })
            .collect();
        Batch::validate(bytes::Bytes::from(build_batch(0, 1_000, Compression::None, &records)), usize::MAX).unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let small = WriteShape { chunk_bytes: 64 << 10, writes_in_flight: 1 };
    let large = WriteShape { chunk_bytes: 2 << 20, writes_in_flight: 8 };
    let mut writes = Vec::new();
    for shape in [small, large] {
        let path = dir.path().join(shape.chunk_bytes.to_string());
        writes.push(run(async {
            let manager = LogManager::new(DmaStorage, &path, 1 << 20).with_write_shape(shape);
            let log = manager.create(TopicPartition::new("t", 0), LogConfig::default()).await.unwrap();
            let tasks: Vec<_> = (0..BATCHES)
                .map(|tag| {
                    let (log, batch) = (log.clone(), batch(tag));
                    glommio::spawn_local(async move { log.append(batch, LEADER).await.unwrap() })
                })
                .collect();
            for task in tasks {
                task.await;
            }
            let written = log.metrics().writes.get();
            let batches = read_all(&log, Offset(0)).await;
            assert_eq!(batches.len() as u64, BATCHES, "{shape:?}");
            for (i, batch) in batches.iter().enumerate() {
                assert_eq!(batch.base_offset(), Offset(i as i64 * 16), "{shape:?}");
            }
            assert!(manager.close_all().await.is_empty());
            written
        }));
    }
    assert!(writes[0] >= 64, "{} writes of 64 KiB chunks", writes[0]);
    assert!(writes[1] < writes[0], "{} writes of 2 MiB chunks, {} of 64 KiB ones", writes[1], writes[0]);
}

/// A batch of one record of `bytes` bytes.
fn sized(bytes: usize) -> skein_engine::Batch {
    skein_engine::Batch::validate(skein_engine::batch::testing::batch_with(1, bytes, 1_000, |_| None), usize::MAX)
        .unwrap()
}

// The shard's tail budget bounds what all its logs hold appended and not written: with
// a slow device and eight logs appending at once, the charge never passes the budget
// by more than one batch per log, every append completes, and the charge drains.
#[test]
fn the_shard_tail_budget_bounds_every_log_together() {
    let dir = tempfile::tempdir().unwrap();
    let plan = skein_engine::io::fault::FaultPlan::new();
    plan.slow_writes.set(Some(std::time::Duration::from_millis(20)));
    run(async {
        const BUDGET: u64 = 1 << 20;
        const BATCH: usize = 64 << 10;
        let manager = std::rc::Rc::new(LogManager::new(faulty(&plan), dir.path(), 64 << 20).with_tail_budget(BUDGET));
        let peak = std::rc::Rc::new(std::cell::Cell::new(0u64));
        let mut tasks = Vec::new();
        for p in 0..8 {
            let log = manager.create(TopicPartition::new("t", p), LogConfig::default()).await.unwrap();
            for _ in 0..16 {
                let (log, manager, peak) = (log.clone(), manager.clone(), peak.clone());
                tasks.push(glommio::spawn_local(async move {
                    log.append(sized(BATCH), LEADER).await.unwrap();
                    peak.set(peak.get().max(manager.tail_budget().charged()));
                }));
            }
        }
        let sampler = {
            let (manager, peak) = (manager.clone(), peak.clone());
            glommio::spawn_local(async move {
                for _ in 0..200 {
                    peak.set(peak.get().max(manager.tail_budget().charged()));
                    glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
                }
            })
        };
        for task in tasks {
            task.await;
        }
        sampler.await;
        let batch = sized(BATCH).size() as u64;
        assert!(peak.get() > BUDGET / 2, "the budget was never approached: {}", peak.get());
        assert!(peak.get() <= BUDGET + 8 * batch, "{} charged against {BUDGET}", peak.get());
        assert_eq!(manager.tail_budget().charged(), 0);
        for p in 0..8 {
            assert_eq!(manager.get(&TopicPartition::new("t", p)).unwrap().offset_written_end(), Offset(16));
        }
    });
}

// An append whose task is dropped after its batch went into the tail buffer (its
// connection closed) leaves the batch to a driver task: it is written, and the shard's
// tail budget drains, with no other append to drive the log.
#[test]
fn a_dropped_append_is_still_written() {
    let dir = tempfile::tempdir().unwrap();
    let plan = skein_engine::io::fault::FaultPlan::new();
    plan.slow_writes.set(Some(std::time::Duration::from_millis(50)));
    run(async {
        let manager = LogManager::new(faulty(&plan), dir.path(), 1 << 20);
        let log = manager.create(TopicPartition::new("t", 0), LogConfig::default()).await.unwrap();
        log.append(sized(100), LEADER).await.unwrap();
        // Admitted, then dropped while its first write is in flight.
        let mut append = Box::pin(log.append(sized(300_000), LEADER));
        let finished = futures_lite::future::or(async { Some((&mut append).await) }, async {
            glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
            None
        });
        assert!(finished.await.is_none(), "the write should still be in flight");
        drop(append);
        assert_eq!(log.log_end_offset(), Offset(2));
        assert!(log.offset_written_end() < Offset(2));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while log.offset_written_end() < Offset(2) || manager.tail_budget().charged() > 0 {
            assert!(std::time::Instant::now() < deadline, "the dropped append's batch was never written");
            glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
        }
    });
}

// Two log directories: a new partition goes to the shard's home; a move copies it
// while it takes appends, finishes with the log closed, and the log reopens from the
// new directory with every record, the old one renamed for removal. A new manager
// finds it there.
#[test]
fn a_partition_moves_between_log_directories() {
    use skein_engine::log_dirs::{LogDir, LogDirs};
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let dirs = || {
        std::sync::Arc::new(LogDirs::new(
            vec![LogDir::new(a.path(), "a"), LogDir::new(b.path(), "b")],
            Default::default(),
        ))
    };
    let partition = TopicPartition::new("moving", 0);
    run(async {
        let manager = LogManager::new(DmaStorage, a.path(), 1 << 20).with_log_dirs(dirs(), 1);
        let log = manager.create(partition.clone(), small_segments(4 << 10)).await.unwrap();
        assert!(b.path().join("moving-0").is_dir(), "created in the home directory");
        for tag in 0..200 {
            log.append(tagged(tag, 2), LEADER).await.unwrap();
        }
        let precopy = manager.precopy(&partition, 0).await.unwrap();
        // Appends after the precopy, and a segment rolled meanwhile.
        for tag in 200..260 {
            log.append(tagged(tag, 2), LEADER).await.unwrap();
        }
        manager.finish_move(&partition, precopy).await.unwrap();
        assert!(manager.get(&partition).is_none(), "closed by the move");
        assert_eq!(manager.log_dir_of(&partition).as_deref(), Some(a.path()));
        let log = manager.open(partition.clone(), small_segments(4 << 10)).await.unwrap();
        assert_eq!(log.log_end_offset(), Offset(520));
        assert_eq!(read_all(&log, Offset::ZERO).await.len(), 260);
        assert_eq!(log.dir(), a.path().join("moving-0"));
        log.append(tagged(260, 2), LEADER).await.unwrap();
        let left: Vec<String> =
            std::fs::read_dir(b.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        assert!(left.iter().all(|n| n.ends_with("-delete")), "{left:?}");
        assert_eq!(manager.remove_deleted_dirs().await.unwrap(), 1);
        // A segment past what is copied whole again: the pause copies only its growth.
        let big = TopicPartition::new("moving", 1);
        let log = manager.create(big.clone(), LogConfig::default()).await.unwrap();
        for tag in 0..20_000 {
            log.append(tagged(tag, 2), LEADER).await.unwrap();
        }
        let precopy = manager.precopy(&big, 0).await.unwrap();
        assert!(precopy.bytes() > 1 << 20, "{}", precopy.bytes());
        for tag in 20_000..20_100 {
            log.append(tagged(tag, 2), LEADER).await.unwrap();
        }
        let in_pause = manager.finish_move(&big, precopy).await.unwrap();
        assert!(in_pause < 256 << 10, "copied {in_pause} bytes in the pause");
        let log = manager.open(big.clone(), LogConfig::default()).await.unwrap();
        assert_eq!(read_all(&log, Offset::ZERO).await.len(), 20_100);
        manager.close_all().await;
    });
    run(async {
        let manager = LogManager::new(DmaStorage, a.path(), 1 << 20).with_log_dirs(dirs(), 1);
        let mut found = manager.discover().await.unwrap();
        found.sort();
        assert_eq!(found, vec![partition.clone(), TopicPartition::new("moving", 1)]);
        let log = manager.open(partition.clone(), small_segments(4 << 10)).await.unwrap();
        assert_eq!(log.log_end_offset(), Offset(522));
        assert_eq!(log.dir(), a.path().join("moving-0"));
    });
}
