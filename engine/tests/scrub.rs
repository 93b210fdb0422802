//! CRC-once reads and the scrubber: a read frames stored batches without checking
//! their CRC again; the scrubber finds corruption at rest, fences it, and from then on
//! reads of those offsets fail instead of serving the bytes.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;

use common::*;
use skein_engine::{Error, LogManager, Offset};

/// 100 batches of 3 records (offsets 3*tag ..= 3*tag + 2) in one segment, closed
/// cleanly (so opening after a clean stop, `clean_context`, scans only the tail after
/// the last index entry). Returns each batch's end position.
fn write_closed(dir: &Path) -> Vec<u64> {
    run(async {
        let log = open_dma(dir, small_segments(1 << 20)).await;
        for tag in 0..100 {
            log.append(tagged(tag, 3), LEADER).await.unwrap();
        }
        log.close().await.unwrap();
    });
    (0..100)
        .scan(0, |end, tag| {
            *end += tagged(tag, 3).size() as u64;
            Some(*end)
        })
        .collect()
}

/// A shard's context after a clean stop of the node: the small log above keeps no
/// checkpoint, and its data is all flushed.
fn clean_context() -> skein_engine::LogContext<skein_engine::io::dma::DmaStorage> {
    let mut ctx = context(skein_engine::io::dma::DmaStorage, 0);
    ctx.clean_start = true;
    ctx
}

fn flip(dir: &Path, at: u64) {
    let path = dir.join("t-0").join(format!("{:020}.log", 0));
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).unwrap();
    file.write_all_at(&[byte[0] ^ 0x10], at).unwrap();
}

// A flipped byte in a batch's records is served by a read (framing holds; the client's
// CRC check is what catches it, as with Kafka's sendfile reads) until the scrubber
// finds it. Then exactly that batch's offsets are fenced: reads of them fail with
// Corruption, reads around them still work, and the counters show it.
#[test]
fn scrubber_fences_a_batch_corrupt_at_rest() {
    let dir = tempfile::tempdir().unwrap();
    let ends = write_closed(dir.path());
    flip(dir.path(), ends[4] - 1);
    run(async {
        let log = skein_engine::Log::open(clean_context(), dir.path().join("t-0"), tp(), 0, small_segments(1 << 20))
            .await
            .unwrap();
        assert_eq!(log.read(Offset(12), 1, None).await.unwrap()[0].base_offset(), Offset(12));
        assert_eq!(log.metrics().corruptions.get(), 0);

        let (mut from, mut corrupt, mut steps) = (Offset::ZERO, Vec::new(), 0);
        loop {
            // Small steps: the scrub resumes where the last one stopped.
            let step = log.scrub(from, 1000).await.unwrap();
            corrupt.extend(step.corrupt);
            steps += 1;
            match step.next {
                Some(next) => from = next,
                None => break,
            }
        }
        assert!(steps > 5, "{steps} steps");
        assert_eq!(corrupt, vec![(Offset(12), Offset(14))]);
        assert_eq!(log.fenced(), corrupt);
        assert_eq!(log.metrics().corruptions.get(), 1);
        assert_eq!(log.metrics().scrub_corrupt_batches.get(), 1);

        assert_eq!(log.read(Offset(0), 1, None).await.unwrap()[0].base_offset(), Offset(0));
        let bad = log.read(Offset(12), 1, None).await;
        assert!(matches!(bad, Err(Error::Corruption { .. })), "{bad:?}");
        // A read starting below the fence that would include it fails too.
        let spanning = log.read(Offset(9), 1 << 20, None).await;
        assert!(matches!(spanning, Err(Error::Corruption { .. })), "{spanning:?}");
        assert_eq!(log.read(Offset(15), 1, None).await.unwrap()[0].base_offset(), Offset(15));
    });
}

// A flip that breaks a batch's frame (its length) leaves no trustworthy boundary after
// it: the rest of the segment is fenced. Truncating below the fence (a follower about
// to refetch from its leader) lifts it, and what is appended again is served.
// (Truncating *at* the broken batch fails: its frame cannot be stepped over.)
#[test]
fn broken_frame_fences_the_rest_and_truncation_lifts_it() {
    let dir = tempfile::tempdir().unwrap();
    let ends = write_closed(dir.path());
    // The batch length field of batch 10 (bytes 8..12 of the batch).
    flip(dir.path(), ends[9] + 9);
    run(async {
        let log = skein_engine::Log::open(clean_context(), dir.path().join("t-0"), tp(), 0, small_segments(1 << 20))
            .await
            .unwrap();
        let step = log.scrub(Offset::ZERO, 1 << 20).await.unwrap();
        assert_eq!(step.corrupt, vec![(Offset(30), Offset(299))]);
        assert_eq!(step.next, None);
        assert!(matches!(log.read(Offset(45), 1, None).await, Err(Error::Corruption { .. })));
        assert_eq!(log.read(Offset(27), 1, None).await.unwrap()[0].base_offset(), Offset(27));

        log.truncate_to(Offset(27)).await.unwrap();
        assert!(log.fenced().is_empty());
        log.append(tagged(500, 3), LEADER).await.unwrap();
        log.append(tagged(501, 3), LEADER).await.unwrap();
        let again = log.read(Offset(30), 1, None).await.unwrap();
        assert_eq!(again[0].base_offset(), Offset(30));
        assert!(again[0].crc_ok());
    });
}

// The manager's pass covers every log at a bounded rate and counts what it read.
#[test]
fn a_pass_reads_every_log_at_its_rate() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let manager = LogManager::new(skein_engine::io::dma::DmaStorage, dir.path(), 1 << 20);
        let mut total = 0u64;
        for partition in 0..3 {
            let tp = skein_engine::TopicPartition::new("scrubbed", partition);
            let log = manager.create(tp, small_segments(64 << 10)).await.unwrap();
            for tag in 0..200 {
                let batch = tagged(tag, 3);
                total += batch.size() as u64;
                log.append(batch, LEADER).await.unwrap();
            }
        }
        // Segments of 64 KiB: a log spans several, and the pass crosses them.
        let started = std::time::Instant::now();
        let rate = 2 * total;
        let pass = manager.scrub_pass(rate).await;
        let elapsed = started.elapsed();
        assert_eq!(pass.corrupt, 0);
        assert!(pass.bytes >= total, "read {} of {total}", pass.bytes);
        assert!(elapsed.as_secs_f64() >= pass.bytes as f64 / rate as f64 * 0.9, "{elapsed:?} for {} bytes", pass.bytes);
        assert_eq!(manager.metrics().scrub_passes.get(), 1);
        assert_eq!(manager.metrics().scrubbed_bytes.get(), pass.bytes);
    });
}

// A disk that fails reads (EIO) fails only the scrub: each log is skipped with a
// warning, the pass completes, nothing is fenced or counted corrupt, and the next pass
// once the disk reads again covers everything.
#[test]
fn a_failing_disk_skips_logs_without_fencing() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let plan = skein_engine::io::fault::FaultPlan::new();
        let manager = LogManager::new(faulty(&plan), dir.path(), 1 << 20);
        let mut total = 0u64;
        for partition in 0..2 {
            let log = manager.create(skein_engine::TopicPartition::new("failing", partition), small_segments(1 << 20));
            let log = log.await.unwrap();
            for tag in 0..50 {
                let batch = tagged(tag, 3);
                total += batch.size() as u64;
                log.append(batch, LEADER).await.unwrap();
            }
        }
        plan.fail_reads.set(Some((0, 5)));
        let failed = manager.scrub_pass(u64::MAX).await;
        assert_eq!((failed.bytes, failed.corrupt), (0, 0));
        assert_eq!(manager.metrics().corruptions.get(), 0);
        for partition in 0..2 {
            let log = manager.get(&skein_engine::TopicPartition::new("failing", partition)).unwrap();
            assert!(log.fenced().is_empty());
        }
        plan.fail_reads.set(None);
        let pass = manager.scrub_pass(u64::MAX).await;
        assert_eq!(pass.corrupt, 0);
        assert!(pass.bytes >= total, "read {} of {total}", pass.bytes);
        assert_eq!(manager.metrics().scrub_passes.get(), 2);
    });
}
