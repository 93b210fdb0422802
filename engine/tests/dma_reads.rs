//! DMA files (`io::dma`). Reads are served from the buffer the device wrote into: the
//! bytes can travel to another thread, and a buffer whose last reference goes there is
//! sent home and released by its own shard. A shard keeps a budget of open files
//! (`io::open_files`): idle ones are closed and opened again by path.

mod common;

use std::sync::mpsc;

use common::run;
use skein_engine::io::dma::{returned_pending, DmaStorage};
use skein_engine::io::open_files;
use skein_engine::io::{IoBuf, Storage, StorageFile};

#[test]
fn a_read_dropped_on_another_thread_is_released_at_home() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    let (to_main, from_shard) = mpsc::channel();
    let (to_shard, from_main) = mpsc::channel::<()>();
    let shard = std::thread::spawn(move || {
        run(async move {
            let file = DmaStorage.open_file(&path, true).await.unwrap();
            let mut buf = file.alloc_buf(64 << 10);
            for (i, byte) in buf.as_bytes_mut().iter_mut().enumerate() {
                *byte = (i % 251) as u8;
            }
            file.write_at(buf, 0).await.unwrap();
            // Unaligned, as a fetch's range is.
            let read = file.read_at(1000, 40_000).await.unwrap();
            let kept = read.slice(100..200);
            to_main.send(read).unwrap();
            from_main.recv().unwrap();
            // The other thread dropped its reference, but this slice holds the buffer.
            assert_eq!(returned_pending(), 0);
            assert!(kept.iter().enumerate().all(|(i, &b)| b == ((1100 + i) % 251) as u8));
            to_main.send(kept).unwrap();
            from_main.recv().unwrap();
            // Now the last reference went on the other thread: the buffer came home...
            assert_eq!(returned_pending(), 1);
            // ...and the next read releases it.
            let again = file.read_at(0, 4096).await.unwrap();
            assert_eq!(returned_pending(), 0);
            assert_eq!(again[5], 5);
        })
    });
    let read = from_shard.recv().unwrap();
    assert_eq!(read.len(), 40_000);
    assert!(read.iter().enumerate().all(|(i, &b)| b == ((1000 + i) % 251) as u8));
    drop(read);
    to_shard.send(()).unwrap();
    let kept = from_shard.recv().unwrap();
    assert_eq!(kept.len(), 100);
    drop(kept);
    to_shard.send(()).unwrap();
    shard.join().unwrap();
}

/// Writes 4 KiB of `tag` at the start of `file`.
async fn fill(file: &skein_engine::io::dma::DmaStorageFile, tag: u8) {
    let mut buf = file.alloc_buf(4096);
    buf.as_bytes_mut().fill(tag);
    assert_eq!(file.write_at(buf, 0).await.unwrap(), 4096);
}

/// The whole budget test runs on one thread of its own: the budget is the process's,
/// the table of open files the thread's.
#[test]
fn idle_files_past_the_budget_are_closed_and_opened_again_by_path() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_owned();
    std::thread::spawn(move || {
        run(async move {
            open_files::set_budget(4);
            let before = open_files::stats();
            let mut files = Vec::new();
            for tag in 0..20u8 {
                let file = DmaStorage.open_file(&root.join(format!("f{tag}")), true).await.unwrap();
                fill(&file, tag).await;
                files.push(file);
                assert!(open_files::stats().open <= 4, "{:?}", open_files::stats());
            }
            let opened = open_files::stats();
            assert_eq!(opened.open, 4);
            assert!(opened.closed - before.closed >= 16, "{opened:?}");
            // Each reads back its own bytes, syncs and reports its size through a
            // descriptor opened again, never another file's.
            for (tag, file) in files.iter().enumerate() {
                let read = file.read_at(0, 4096).await.unwrap();
                assert!(read.iter().all(|&b| b == tag as u8), "file {tag}");
                file.fdatasync().await.unwrap();
                assert_eq!(file.size().await.unwrap(), 4096);
            }
            let reread = open_files::stats();
            assert_eq!(reread.open, 4);
            assert!(reread.reopened - opened.reopened >= 16, "{reread:?}");
            assert_eq!(reread.over_budget, before.over_budget);

            // A closed file replaced under its name (compaction renames a cleaned copy
            // over a segment), or removed (retention), is not found again.
            let (replaced, removed) = (&files[0], &files[1]);
            let other = DmaStorage.open_file(&root.join("other"), true).await.unwrap();
            fill(&other, 0xee).await;
            drop(other);
            for file in &files[10..16] {
                file.read_at(0, 1).await.unwrap();
            }
            DmaStorage.rename(&root.join("other"), &root.join("f0")).await.unwrap();
            DmaStorage.remove_file(&root.join("f1")).await.unwrap();
            for file in [replaced, removed] {
                let e = file.read_at(0, 4096).await.unwrap_err();
                assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
            }
            // Dropped handles give their descriptors back.
            drop(files);
            assert_eq!(open_files::stats().open, 0);
            open_files::set_budget(usize::MAX);
        })
    })
    .join()
    .unwrap();
}
