//! Reads are served from the buffer the device wrote into (`io::dma`): the bytes can
//! travel to another thread, and a buffer whose last reference goes there is sent home
//! and released by its own shard.

mod common;

use std::sync::mpsc;

use common::run;
use skein_engine::io::dma::{returned_pending, DmaStorage};
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
