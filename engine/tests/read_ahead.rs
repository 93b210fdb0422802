//! Read-ahead for readers behind the tail: what it serves, what it costs, and that it
//! never serves bytes the log let go of.

mod common;

use common::*;
use skein_engine::io::dma::DmaStorage;
use skein_engine::log::Log;
use skein_engine::{Batch, LogConfig, Offset};

/// A batch of 16 records of 1 KiB whose values name the batch.
fn big(tag: u64) -> Batch {
    sized(tag, 16)
}

/// A batch of `count` records of 1 KiB whose values name the batch.
fn sized(tag: u64, count: i32) -> Batch {
    let records: Vec<skein_engine::records::Record> = (0..count)
        .map(|i| skein_engine::records::Record {
            offset_delta: i,
            value: Some(bytes::Bytes::from(format!("{tag:08}-{i:04}-").repeat(73))),
            ..Default::default()
        })
        .collect();
    let bytes = skein_engine::records::build_batch(0, 1_000, skein_engine::records::Compression::None, &records);
    Batch::validate(bytes::Bytes::from(bytes), usize::MAX).unwrap()
}

fn config() -> LogConfig {
    LogConfig { segment_bytes: 3 << 20, ..LogConfig::default() }
}

async fn reopen(dir: &std::path::Path, cache_bytes: usize) -> std::rc::Rc<Log<DmaStorage>> {
    Log::open(context(DmaStorage, cache_bytes), dir.join("t-0"), tp(), 0, config()).await.unwrap()
}

/// Writes `count` batches `big(0..count)` into a log of `dir` and closes it, so that
/// the next open starts with nothing cached.
fn write_closed(dir: &std::path::Path, count: u64) {
    run(async {
        let log = reopen(dir, 0).await;
        for tag in 0..count {
            log.append(big(tag), LEADER).await.unwrap();
        }
        log.close().await.unwrap();
    });
}

/// Reads from `from` to the log end in reads of `max_bytes`, checking that each batch
/// is the one appended at its offset (`tag_at`).
async fn read_through<S: skein_engine::io::Storage>(
    log: &Log<S>,
    from: Offset,
    max_bytes: usize,
    tag_at: impl Fn(i64) -> Batch,
) -> usize {
    let (mut next, mut reads) = (from, 0);
    while next < log.log_end_offset() {
        let batches = log.read(next, max_bytes, None).await.unwrap();
        reads += 1;
        for batch in &batches {
            assert_eq!(batch.base_offset(), next, "batches follow each other");
            assert_eq!(batch.bytes()[61..], tag_at(next.0).bytes()[61..], "batch at {}", next.0);
            next = batch.next_offset();
        }
    }
    reads
}

// A reader that starts behind the tail (a reopened log, nothing cached) is served from
// windows read ahead: across segments, byte for byte, with most reads never touching
// the disk, the disk read about once, and no byte copied.
#[test]
fn readers_behind_the_tail_read_from_windows_read_ahead() {
    let dir = tempfile::tempdir().unwrap();
    write_closed(dir.path(), 600);
    run(async {
        // An 8 MiB cache: windows of 1 MiB.
        let log = reopen(dir.path(), 8 << 20).await;
        let reads = read_through(&log, Offset(0), 64 << 10, |offset| big(offset as u64 / 16)).await;
        let m = log.metrics();
        let size = big(0).size() as u64;
        assert!(m.read_ahead_bytes.get() > 8 << 20, "read ahead {} bytes", m.read_ahead_bytes.get());
        assert!(m.disk_reads.get() * 4 < reads as u64, "{} of {reads} reads went to disk", m.disk_reads.get());
        assert!(m.disk_read_bytes.get() < 600 * size * 3 / 2, "read {} bytes from disk", m.disk_read_bytes.get());
        assert_eq!(m.read_ahead_bytes_in_flight.get(), 0);
        // A window's reads are cut where batches start (the offset index): no batch
        // spans two reads, so none is joined in a copy.
        assert_eq!(m.read_copied_bytes.get(), 0, "bytes copied joining batches across reads");
    });
}

// Without a cache there is no read-ahead: every read goes to disk, as before.
#[test]
fn no_cache_no_read_ahead() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = reopen(dir.path(), 0).await;
        for tag in 0..100 {
            log.append(big(tag), LEADER).await.unwrap();
        }
        let reads = read_through(&log, Offset(0), 64 << 10, |offset| big(offset as u64 / 16)).await;
        assert_eq!(log.metrics().read_ahead_bytes.get(), 0);
        assert_eq!(log.metrics().disk_reads.get(), reads as u64);
    });
}

// A truncation while a window is read ahead loses the window: the batches appended
// after it (of another size, so at other offsets) are what readers get, never the
// truncated ones, even once the slow window has landed.
#[test]
fn truncation_drops_windows_read_ahead() {
    let dir = tempfile::tempdir().unwrap();
    write_closed(dir.path(), 400);
    run(async {
        // Windows (2 MiB) are slow: the first is still in flight when the log truncates
        // (the truncation's own reads are smaller, and quick).
        let plan = skein_engine::io::fault::FaultPlan::new();
        plan.slow_reads.set(Some((2 << 20, std::time::Duration::from_millis(300))));
        let log = Log::open(context(faulty(&plan), 16 << 20), dir.path().join("t-0"), tp(), 0, config()).await.unwrap();
        // Start reading: a window after offset 16 is on its way.
        let first = log.read(Offset(0), 1, None).await.unwrap();
        assert_eq!(first.len(), 1);
        assert!(log.metrics().read_ahead_bytes_in_flight.get() > 0, "a window is in flight");
        // Its bytes are read before the truncation; they land after it.
        glommio::timer::sleep(std::time::Duration::from_millis(50)).await;
        log.truncate_to(Offset(160)).await.unwrap();
        for tag in 1000..1040 {
            log.append(sized(tag, 10), LEADER).await.unwrap();
        }
        glommio::timer::sleep(std::time::Duration::from_millis(500)).await;
        assert_eq!(log.metrics().read_ahead_bytes_in_flight.get(), 0, "the window landed");
        let tag_at = |offset: i64| match offset {
            ..160 => big(offset as u64 / 16),
            _ => sized(1000 + (offset as u64 - 160) / 10, 10),
        };
        read_through(&log, Offset(16), 64 << 10, tag_at).await;
        read_through(&log, Offset(0), 1 << 20, tag_at).await;
    });
}

// A window whose reads fail caches nothing and stalls no one: the reader's own read
// reports the error, and once the disk reads again the reader gets every batch.
#[test]
fn a_failed_window_caches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    write_closed(dir.path(), 200);
    run(async {
        let plan = skein_engine::io::fault::FaultPlan::new();
        let log = Log::open(context(faulty(&plan), 16 << 20), dir.path().join("t-0"), tp(), 0, config()).await.unwrap();
        // The window's reads (about 512 KiB, cut at batch starts) fail (EIO); the
        // reader's first read, 64 KiB, does not.
        plan.fail_reads.set(Some((256 << 10, 5)));
        let first = log.read(Offset(0), 1, None).await.unwrap();
        assert_eq!(first.len(), 1);
        glommio::timer::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(log.metrics().read_ahead_bytes.get(), 0, "nothing was read ahead");
        assert_eq!(log.metrics().read_ahead_bytes_in_flight.get(), 0, "the failed window is not counted in flight");
        // The next read is a cold read of its own (1 MiB: it fails too, and says so).
        assert!(log.read(Offset(16), 1 << 20, None).await.is_err());
        plan.fail_reads.set(None);
        read_through(&log, Offset(16), 64 << 10, |offset| big(offset as u64 / 16)).await;
    });
}

// `read_now` answers what needs no I/O, the same as `read` would: an offset out of
// range, nothing past the bound, batches in the cache; batches on disk only are left
// to `read` (`None`), and once `read` has brought them in, `read_now` serves them.
#[test]
fn read_now_answers_only_what_needs_no_io() {
    let dir = tempfile::tempdir().unwrap();
    write_closed(dir.path(), 4);
    run(async {
        let log = reopen(dir.path(), 8 << 20).await;
        let end = log.log_end_offset();
        assert!(matches!(
            log.read_now(end.plus(1), 1 << 20, None),
            Some(Err(skein_engine::Error::OffsetOutOfRange { .. }))
        ));
        assert!(log.read_now(end, 1 << 20, None).unwrap().unwrap().is_empty(), "nothing at the log end");
        assert!(
            log.read_now(Offset(0), 1 << 20, Some(Offset(0))).unwrap().unwrap().is_empty(),
            "nothing below the bound"
        );
        assert!(log.read_now(Offset(0), 1 << 20, None).is_none(), "a reopened log's batches are on disk only");
        let read = log.read(Offset(0), 1 << 20, None).await.unwrap();
        assert!(!read.is_empty());
        let appended = log.append(big(4), LEADER).await.unwrap();
        let cached = log.read_now(appended.base_offset, 1 << 20, None).expect("a fresh append is cached").unwrap();
        assert_eq!(cached[0].base_offset(), appended.base_offset);
        assert_eq!(cached[0].bytes()[61..], big(4).bytes()[61..]);
    });
}
