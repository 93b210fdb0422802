//! Adaptive group commit: an idle log holds a small write back only when appends come
//! faster than its maximum delay, and never loses or stalls an append.

mod common;

use std::rc::Rc;
use std::time::{Duration, Instant};

use common::*;
use skein_engine::io::dma::DmaStorage;
use skein_engine::log::Log;
use skein_engine::{LogConfig, Offset};

async fn open_with(dir: &std::path::Path, max_delay: Duration) -> Rc<Log<DmaStorage>> {
    let mut ctx = context(DmaStorage, 64 << 20);
    ctx.group_commit_max_delay = max_delay;
    Log::open(ctx, dir.join("t-0"), tp(), 0, LogConfig::default()).await.unwrap()
}

/// Appends `count` batches, one every `gap`, each acknowledged on its own; returns the
/// writes the log made and the slowest acknowledgement.
async fn steady(log: &Rc<Log<DmaStorage>>, count: u64, gap: Duration) -> (u64, Duration) {
    let writes = log.metrics().writes.get();
    let mut tasks = Vec::new();
    for tag in 0..count {
        let log = log.clone();
        tasks.push(glommio::spawn_local(async move {
            let started = Instant::now();
            log.append(tagged(tag, 2), LEADER).await.unwrap();
            started.elapsed()
        }));
        glommio::timer::sleep(gap).await;
    }
    let mut slowest = Duration::ZERO;
    for task in tasks {
        slowest = slowest.max(task.await);
    }
    (log.metrics().writes.get() - writes, slowest)
}

// Appends 200 µs apart: without a window each goes out nearly alone; with a 2 ms
// maximum delay, windows open and several appends share each write. Every append is
// acknowledged, in order, and none waits much past the maximum delay.
#[test]
fn windows_open_when_appends_come_fast() {
    let (plain, windowed) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let gap = Duration::from_micros(200);
    let (writes_plain, _) = run(async {
        let log = open_with(plain.path(), Duration::ZERO).await;
        let result = steady(&log, 300, gap).await;
        assert_eq!(log.metrics().coalescing_windows.get(), 0);
        result
    });
    run(async {
        let log = open_with(windowed.path(), Duration::from_millis(2)).await;
        let (writes, slowest) = steady(&log, 300, gap).await;
        let windows = log.metrics().coalescing_windows.get();
        assert!(windows > 0, "no window opened");
        assert!(writes * 10 < writes_plain * 7, "{writes} writes with windows, {writes_plain} without");
        assert!(slowest < Duration::from_millis(500), "an append waited {slowest:?}");
        let batches = read_all(&log, Offset(0)).await;
        assert_eq!(batches.len(), 300);
        for (tag, batch) in batches.iter().enumerate() {
            assert_eq!(batch.bytes()[61..], tagged(tag as u64, 2).bytes()[61..]);
        }
    });
}

// Appends further apart than the maximum delay never wait in a window.
#[test]
fn no_window_for_sparse_appends() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_with(dir.path(), Duration::from_micros(500)).await;
        steady(&log, 30, Duration::from_millis(5)).await;
        assert_eq!(log.metrics().coalescing_windows.get(), 0);
    });
}

// An append dropped while it holds a window (a produce request cancelled) closes the
// window: the next append drives the write of both, and nothing stalls.
#[test]
fn a_dropped_window_holder_does_not_stall() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_with(dir.path(), Duration::from_millis(200)).await;
        // Appends 10 ms apart make windows of about 20 ms worth opening.
        steady(&log, 20, Duration::from_millis(10)).await;
        let windows = log.metrics().coalescing_windows.get();
        let dropped = futures_lite::future::or(async { Some(log.append(tagged(100, 2), LEADER).await) }, async {
            glommio::timer::sleep(Duration::from_millis(3)).await;
            None
        })
        .await;
        assert!(dropped.is_none(), "the append finished before it was dropped");
        assert_eq!(log.metrics().coalescing_windows.get(), windows + 1, "it held a window");
        let next = futures_lite::future::or(async { Some(log.append(tagged(101, 2), LEADER).await) }, async {
            glommio::timer::sleep(Duration::from_secs(2)).await;
            None
        })
        .await;
        next.expect("the next append stalled behind the dropped window").unwrap();
        let batches = read_all(&log, Offset(0)).await;
        assert_eq!(batches.len(), 22, "the dropped append's batch was admitted and is written");
    });
}
