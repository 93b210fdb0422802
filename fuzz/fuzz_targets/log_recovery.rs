//! A partition log opened again after damage, as a node's start recovers it. The
//! target writes a real log through the engine (on io_uring and O_DIRECT, in a temp
//! directory): batches of every codec, some idempotent or transactional, in small
//! segments with their indexes, a producer snapshot, and a clean close or none (a
//! crash). Then it damages the files as the input says (cuts them, flips bytes,
//! appends garbage, deletes them, replaces them whole) and opens the log again: the
//! open must succeed or refuse with an error, every batch it serves must read back,
//! and the producer state must load (`load_producers`). Never a panic.
//!
//! Input: a shape byte (batches, close or crash, segment size), then damage steps of
//! four bytes (file, operation, position, value); a replacing step takes the rest of
//! the input as the file's new contents.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use skein_engine::io::dma::DmaStorage;
use skein_engine::log::{Log, LogContext};
use skein_engine::records::{build_batch_for, BatchProducer, Compression, Record};
use skein_engine::{AppendMode, Batch, LeaderEpoch, LogConfig, TopicPartition};

const CODECS: [Compression; 5] =
    [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];

fn batch(i: u8, shape: u8) -> Batch {
    let count = i32::from(i % 5) + 1;
    let records: Vec<Record> = (0..count)
        .map(|r| Record {
            timestamp_delta: r as i64,
            offset_delta: r,
            key: (i % 3 == 0).then(|| Bytes::from(format!("k{}", r % 2))),
            value: Some(Bytes::from(vec![i.wrapping_add(r as u8); usize::from(shape % 7) * 40])),
            ..Record::default()
        })
        .collect();
    let producer = match i % 4 {
        0 => BatchProducer::NONE,
        n => BatchProducer {
            id: 7,
            epoch: 0,
            base_sequence: i32::from(i) * 5,
            transactional: n == 3,
            control: false,
        },
    };
    let codec = CODECS[usize::from(i) % CODECS.len()];
    let bytes = build_batch_for(0, 1_700_000_000_000 + i64::from(i), codec, &records, producer);
    Batch::validate(Bytes::from(bytes), usize::MAX).expect("a built batch validates")
}

async fn open(dir: &std::path::Path, config: &LogConfig) -> skein_engine::Result<std::rc::Rc<Log<DmaStorage>>> {
    let ctx = LogContext::new(DmaStorage, dir.to_path_buf(), 8 << 20);
    Log::open(ctx, dir.join("t-0"), TopicPartition::new("t", 0), 0, config.clone()).await
}

/// Damages the files of `partition` as `steps` say: four bytes each (file, operation,
/// position, value); a replacing step takes the rest as the file's new contents.
fn damage(partition: &std::path::Path, steps: &[u8]) {
    let mut rest = steps;
    while let [file, op, position, value, tail @ ..] = rest {
        rest = tail;
        let mut names: Vec<_> = std::fs::read_dir(partition).unwrap().flatten().map(|e| e.path()).collect();
        names.sort();
        let Some(path) = names.get(usize::from(*file) % names.len().max(1)).cloned() else { break };
        let mut bytes = std::fs::read(&path).unwrap_or_default();
        let at = if bytes.is_empty() { 0 } else { usize::from(*position) * 7 % bytes.len() };
        match op % 5 {
            0 => bytes.truncate(at),
            1 => {
                if let Some(byte) = bytes.get_mut(at) {
                    *byte ^= value | 1;
                }
            }
            2 => bytes.extend(std::iter::repeat_n(*value, usize::from(*position % 64) + 1)),
            3 => {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            _ => {
                bytes = rest.to_vec();
                rest = &[];
            }
        }
        std::fs::write(&path, bytes).unwrap();
    }
}

thread_local! {
    static EXECUTOR: glommio::LocalExecutor = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("glommio executor (io_uring must be available)");
}

fuzz_target!(|data: &[u8]| {
    let [shape, steps @ ..] = data else { return };
    let shape = *shape;
    let dir = std::env::temp_dir().join(format!("skein-fuzz-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = LogConfig { segment_bytes: 512 << (shape % 4), index_interval_bytes: 128, ..LogConfig::default() };
    // One executor for the fuzzer's life (glommio leaks an eventfd for each executor
    // dropped), running each input whole: the writes, the damage (plain file calls
    // between the two opens) and the open after it.
    EXECUTOR.with(|executor| executor.run(async {
        let log = open(&dir, &config).await.expect("a new log opens");
        let batches = shape % 24 + 1;
        for i in 0..batches {
            log.append(batch(i, shape), AppendMode::Leader { epoch: LeaderEpoch(i32::from(i / 8)) }).await.unwrap();
        }
        let snapshot = skein_replication::load_producers(&log).await.snapshot_below(log.log_end_offset());
        log.write_producer_snapshot(log.log_end_offset(), &snapshot).await.unwrap();
        if shape & 0x80 == 0 {
            log.close().await.unwrap();
        } else {
            // A crash: what was flushed stays, the log is never closed.
            log.flush().await.unwrap();
        }
        drop(log);
        glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
        damage(&dir.join("t-0"), steps);

        let Ok(log) = open(&dir, &config).await else { return };
        let mut next = log.log_start_offset();
        let mut read = 0usize;
        loop {
            let Ok(batches) = log.read(next, 1 << 20, None).await else { break };
            let Some(last) = batches.last() else { break };
            assert!(last.next_offset() > next, "reads move forward");
            next = last.next_offset();
            read += batches.len();
        }
        if steps.len() < 4 {
            assert_eq!(read, usize::from(batches), "an undamaged log reads back whole");
            assert_eq!(next, log.log_end_offset());
        }
        let producers = skein_replication::load_producers(&log).await;
        let _ = producers.describe();
        let _ = log.close().await;
        drop(log);
        // Dropped files close on the ring: let those closes run before the input ends.
        glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
    }));
    let _ = std::fs::remove_dir_all(&dir);
});
