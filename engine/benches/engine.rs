//! Engine benchmark: raw O_DIRECT io_uring bandwidth against the engine's appends and
//! reads, in one run on one file system, so the ratios hold on a noisy machine.
//!
//! `cargo bench -p skein-engine` prints, for the file system of `SKEIN_BENCH_DIR`
//! (default `target/skein-bench`):
//! (a) raw sequential O_DIRECT write bandwidth through plain io_uring, with the
//!     appender's default write size (`APPEND_CHUNK_BYTES_DEFAULT`) and depth
//!     (`WRITES_IN_FLIGHT_DEFAULT`);
//! (b) engine append throughput, 1 KiB records in 16 KiB batches on one shard, with 1
//!     and 8 partitions appending concurrently (256 appends in flight in total, as a
//!     broker with many producers has: 4 MiB, what the raw run keeps in flight), without a forced flush and with
//!     `flush.messages=1`;
//! (c) p50 and p99 append latency of each (b) run;
//! (d) cold-read (disk, DMA) and cached-read (batch cache) throughput.
//! It ends with `key=value` lines. `SKEIN_BENCH_BYTES` sets the bytes per run
//! (default 2 GiB); `SKEIN_BENCH_ROUNDS` repeats (a) and (b) to show the spread;
//! `SKEIN_BENCH_ONLY=p1_noflush` runs only the appends named (and no reads);
//! `SKEIN_BENCH_SEGMENT_BYTES` sets the logs' `segment.bytes` (default 1 GiB: a run
//! of 2 GiB rolls twice).
//!
//! `SKEIN_BENCH_VALIDATE=1` instead measures record validation (`validate_records`,
//! what a leader does to every produced batch, as Kafka's LogValidator) on one core,
//! for uncompressed and compressed batches of the same shape, beside a plain CRC pass
//! over the same bytes (what `Batch::validate` already did per batch).

use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use skein_engine::io::dma::DmaStorage;
use skein_engine::limits::{APPEND_CHUNK_BYTES_DEFAULT, DMA_ALIGNMENT, WRITES_IN_FLIGHT_DEFAULT};
use skein_engine::{AppendMode, Batch, LeaderEpoch, LogConfig, LogManager, Offset, TopicPartition};

const RECORD_BYTES: usize = 1024;
const RECORDS_PER_BATCH: i32 = 16;
/// Appends in flight (`SKEIN_BENCH_APPENDS_IN_FLIGHT`, default 256: 256 appends of
/// 16 KiB keep 4 MiB in flight, what the raw run keeps in flight).
fn appends_in_flight() -> usize {
    std::env::var("SKEIN_BENCH_APPENDS_IN_FLIGHT").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument filters nothing here.
    let dir =
        std::env::var("SKEIN_BENCH_DIR").map(PathBuf::from).unwrap_or_else(|_| PathBuf::from("target/skein-bench"));
    let total: u64 = std::env::var("SKEIN_BENCH_BYTES").ok().and_then(|v| v.parse().ok()).unwrap_or(2 << 30);
    let rounds: usize = std::env::var("SKEIN_BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    if std::env::var("SKEIN_BENCH_VALIDATE").is_ok() {
        validation(total.min(1 << 30));
        return;
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("bench dir");
    if std::env::var("SKEIN_BENCH_RAW_SWEEP").is_ok() {
        // Raw bandwidth by write size and depth, to choose the appender's limits.
        for size_kib in [128usize, 256, 512, 1024] {
            let line: Vec<String> = [1usize, 2, 4, 8, 16]
                .iter()
                .map(|&depth| format!("qd{depth} {:.0}", raw_write(&dir.join("sweep"), total, size_kib << 10, depth)))
                .collect();
            println!("raw {size_kib:>4} KiB writes, MB/s: {}", line.join(", "));
        }
        return;
    }
    println!("skein engine benchmark: {} MiB per run, dir {}", total >> 20, dir.display());
    println!(
        "write size {} KiB, writes in flight {WRITES_IN_FLIGHT_DEFAULT}, {} appends in flight, batches of {RECORDS_PER_BATCH} x {RECORD_BYTES} B",
        APPEND_CHUNK_BYTES_DEFAULT >> 10,
        appends_in_flight()
    );

    // `SKEIN_BENCH_ONLY=p1_noflush,p8_flush` runs only those appends (and no reads).
    let only = std::env::var("SKEIN_BENCH_ONLY").ok();
    let mut raw = Vec::new();
    let mut runs: Vec<(String, Vec<AppendRun>)> = Vec::new();
    for round in 0..rounds {
        raw.push(raw_write(&dir.join("raw.data"), total, APPEND_CHUNK_BYTES_DEFAULT, WRITES_IN_FLIGHT_DEFAULT));
        for (partitions, flush) in [(1, false), (8, false), (1, true), (8, true)] {
            let name = format!("append_p{partitions}_{}", if flush { "flush" } else { "noflush" });
            if only.as_ref().is_some_and(|only| !only.split(',').any(|o| name.ends_with(o))) {
                continue;
            }
            let result = append_run(&dir.join(format!("{name}-{round}")), total, partitions, flush);
            match runs.iter_mut().find(|(n, _)| *n == name) {
                Some((_, list)) => list.push(result),
                None => runs.push((name, vec![result])),
            }
        }
    }
    let raw_mbps = median(&raw);
    println!();
    println!("(a) raw O_DIRECT io_uring write: {:.0} MB/s (rounds: {})", raw_mbps, list(&raw));
    let mut keys = vec![format!("raw_write_mbps={raw_mbps:.0}")];
    for (name, results) in &runs {
        let mbps: Vec<f64> = results.iter().map(|r| r.mbps).collect();
        let m = median(&mbps);
        let last = results.last().expect("a run");
        println!(
            "(b) {name}: {m:.0} MB/s = {:.2} x raw (rounds: {}); (c) latency p50 {} us, p99 {} us; {} writes of {} KiB avg, {} syncs, shard cpu {:.0}% busy",
            m / raw_mbps,
            list(&mbps),
            last.p50_us,
            last.p99_us,
            last.writes,
            last.avg_write_kib,
            last.syncs,
            last.cpu_busy * 100.0
        );
        keys.push(format!("{name}_mbps={m:.0}"));
        keys.push(format!("{name}_ratio={:.2}", m / raw_mbps));
        keys.push(format!("{name}_p50_us={}", last.p50_us));
        keys.push(format!("{name}_p99_us={}", last.p99_us));
    }
    if only.is_some() {
        return;
    }
    let reads = read_run(&dir.join("reads"), total);
    println!(
        "(d) raw O_DIRECT io_uring read of the log's segment files ({} KiB at depth {WRITES_IN_FLIGHT_DEFAULT}): {:.0} MB/s",
        APPEND_CHUNK_BYTES_DEFAULT >> 10,
        reads.raw
    );
    println!(
        "(d) cold read with read-ahead (a reader behind the tail, 1 MiB reads, CRC checked): {:.0} MB/s = {:.2} x raw read",
        reads.read_ahead,
        reads.read_ahead / reads.raw
    );
    println!(
        "(d) cold read without a cache (no read-ahead, one read at a time): {:.0} MB/s = {:.2} x raw read; cached read: {:.0} MB/s",
        reads.uncached,
        reads.uncached / reads.raw,
        reads.cached
    );
    keys.push(format!("raw_read_mbps={:.0}", reads.raw));
    keys.push(format!("cold_read_mbps={:.0}", reads.read_ahead));
    keys.push(format!("cold_read_ratio={:.2}", reads.read_ahead / reads.raw));
    keys.push(format!("uncached_read_mbps={:.0}", reads.uncached));
    keys.push(format!("cached_read_mbps={:.0}", reads.cached));
    let noflush = runs
        .iter()
        .find(|(n, _)| n == "append_p1_noflush")
        .map(|(_, r)| median(&r.iter().map(|r| r.mbps).collect::<Vec<_>>()));
    let flush8 = runs
        .iter()
        .find(|(n, _)| n == "append_p8_flush")
        .map(|(_, r)| median(&r.iter().map(|r| r.mbps).collect::<Vec<_>>()));
    if let (Some(noflush), Some(flush8)) = (noflush, flush8) {
        keys.push(format!("append_ratio_noflush={:.2}", noflush / raw_mbps));
        keys.push(format!("append_ratio_flush8={:.2}", flush8 / raw_mbps));
    }
    println!();
    for key in keys {
        println!("{key}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Flushes the file system (untimed) so that one run's write-back does not slow the
/// next: the device caches what the previous run wrote.
fn settle(file: &std::fs::File) {
    // SAFETY: plain syscall on an open descriptor.
    unsafe { libc::syncfs(file.as_raw_fd()) };
    std::thread::sleep(Duration::from_millis(200));
}

/// CPU time consumed by the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    sorted[sorted.len() / 2]
}

fn list(values: &[f64]) -> String {
    values.iter().map(|v| format!("{v:.0}")).collect::<Vec<_>>().join(", ")
}

fn mbps(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / elapsed.as_secs_f64() / 1e6
}

/// An aligned heap buffer for the raw io_uring writes.
struct Aligned {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let layout = std::alloc::Layout::from_size_align(len, DMA_ALIGNMENT).expect("layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        Aligned { ptr, layout }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with the same layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// (a): sequential O_DIRECT writes of `write_bytes` at `depth` into space reserved
/// with fallocate, as the appender writes.
fn raw_write(path: &Path, total: u64, write_bytes: usize, depth: usize) -> f64 {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .expect("open raw file");
    let fd = file.as_raw_fd();
    // SAFETY: plain syscall on an open descriptor.
    let rc = unsafe { libc::fallocate(fd, 0, 0, total as i64) };
    assert_eq!(rc, 0, "fallocate");
    let mut ring = io_uring::IoUring::new(64).expect("io_uring (the kernel must allow it)");
    let buffers: Vec<Aligned> = (0..depth).map(|_| Aligned::new(write_bytes)).collect();
    for (i, b) in buffers.iter().enumerate() {
        // SAFETY: the buffer is `write_bytes` long.
        unsafe { std::ptr::write_bytes(b.ptr, i as u8 + 1, write_bytes) };
    }
    let started = Instant::now();
    let mut next: u64 = 0;
    let mut in_flight = 0;
    let mut free: Vec<usize> = (0..buffers.len()).collect();
    while next < total || in_flight > 0 {
        while next < total && !free.is_empty() {
            let slot = free.pop().expect("free slot");
            let entry = io_uring::opcode::Write::new(io_uring::types::Fd(fd), buffers[slot].ptr, write_bytes as u32)
                .offset(next)
                .build()
                .user_data(slot as u64);
            // SAFETY: the buffer outlives the operation (it is reused only after its
            // completion is reaped).
            unsafe { ring.submission().push(&entry).expect("submission queue") };
            next += write_bytes as u64;
            in_flight += 1;
        }
        ring.submit_and_wait(1).expect("submit");
        let completions: Vec<(u64, i32)> = ring.completion().map(|c| (c.user_data(), c.result())).collect();
        for (slot, result) in completions {
            assert_eq!(result, write_bytes as i32, "raw write failed");
            free.push(slot as usize);
            in_flight -= 1;
        }
    }
    let elapsed = started.elapsed();
    settle(&file);
    drop(file);
    let _ = std::fs::remove_file(path);
    mbps(total, elapsed)
}

/// (d): MB/s of each way of reading the same log.
struct Reads {
    raw: f64,
    read_ahead: f64,
    uncached: f64,
    cached: f64,
}

/// Sequential O_DIRECT reads of whole files, `read_bytes` at `depth`, through plain
/// io_uring: the device's read bandwidth for the bytes the engine then reads.
fn raw_read(files: &[PathBuf], read_bytes: usize, depth: usize) -> f64 {
    let mut ring = io_uring::IoUring::new(64).expect("io_uring (the kernel must allow it)");
    let buffers: Vec<Aligned> = (0..depth).map(|_| Aligned::new(read_bytes)).collect();
    let mut bytes = 0u64;
    let started = Instant::now();
    for path in files {
        let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path).expect("open");
        let (fd, size) = (file.as_raw_fd(), file.metadata().expect("size").len());
        let (mut next, mut in_flight) = (0u64, 0);
        let mut free: Vec<usize> = (0..buffers.len()).collect();
        while next < size || in_flight > 0 {
            while next < size && !free.is_empty() {
                let slot = free.pop().expect("free slot");
                let entry = io_uring::opcode::Read::new(io_uring::types::Fd(fd), buffers[slot].ptr, read_bytes as u32)
                    .offset(next)
                    .build()
                    .user_data(slot as u64);
                // SAFETY: the buffer outlives the operation (it is reused only after
                // its completion is reaped).
                unsafe { ring.submission().push(&entry).expect("submission queue") };
                next += read_bytes as u64;
                in_flight += 1;
            }
            ring.submit_and_wait(1).expect("submit");
            let completions: Vec<(u64, i32)> = ring.completion().map(|c| (c.user_data(), c.result())).collect();
            for (slot, result) in completions {
                assert!(result >= 0, "raw read failed: {result}");
                bytes += result as u64;
                free.push(slot as usize);
                in_flight -= 1;
            }
        }
    }
    mbps(bytes, started.elapsed())
}

struct AppendRun {
    mbps: f64,
    /// CPU time of this thread per wall second of the run.
    cpu_busy: f64,
    p50_us: u64,
    p99_us: u64,
    writes: u64,
    avg_write_kib: u64,
    syncs: u64,
}

fn batch() -> Batch {
    Batch::validate(skein_engine::batch::testing::batch(RECORDS_PER_BATCH, RECORD_BYTES - 20), usize::MAX)
        .expect("batch")
}

fn executor() -> glommio::LocalExecutor {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Fixed(0))
        .make()
        .expect("glommio executor (io_uring must be available)")
}

/// (b) and (c): `APPENDS_IN_FLIGHT` appender tasks spread over `partitions` logs.
fn append_run(dir: &Path, total: u64, partitions: usize, flush: bool) -> AppendRun {
    let result = executor().run(async {
        let manager = Rc::new(LogManager::new(DmaStorage, dir, 256 << 20));
        let mut config = LogConfig { flush_messages: if flush { 1 } else { u64::MAX }, ..LogConfig::default() };
        if let Some(bytes) = std::env::var("SKEIN_BENCH_SEGMENT_BYTES").ok().and_then(|v| v.parse().ok()) {
            config.segment_bytes = bytes;
        }
        let mut logs = Vec::new();
        for p in 0..partitions {
            logs.push(manager.create(TopicPartition::new("bench", p as i32), config.clone()).await.expect("create"));
        }
        let batch = batch();
        let per_task = total / batch.size() as u64 / appends_in_flight() as u64;
        let started = Instant::now();
        let cpu_started = thread_cpu();
        let tasks: Vec<_> = (0..appends_in_flight())
            .map(|t| {
                let log = logs[t % partitions].clone();
                let batch = batch.clone();
                glommio::spawn_local(async move {
                    let mut histogram = Histogram::<u64>::new(3).expect("histogram");
                    for _ in 0..per_task {
                        let begin = Instant::now();
                        log.append(batch.clone(), AppendMode::Leader { epoch: LeaderEpoch(0) }).await.expect("append");
                        histogram.record(begin.elapsed().as_micros() as u64).expect("record");
                    }
                    histogram
                })
            })
            .collect();
        let mut histogram = Histogram::<u64>::new(3).expect("histogram");
        for task in tasks {
            histogram.add(task.await).expect("merge");
        }
        let elapsed = started.elapsed();
        let cpu_busy = (thread_cpu() - cpu_started).as_secs_f64() / elapsed.as_secs_f64();
        let bytes = per_task * appends_in_flight() as u64 * batch.size() as u64;
        let metrics = manager.metrics();
        let writes = metrics.writes.get();
        let appended = metrics.appended_bytes.get();
        let run = AppendRun {
            mbps: mbps(bytes, elapsed),
            cpu_busy,
            p50_us: histogram.value_at_quantile(0.5),
            p99_us: histogram.value_at_quantile(0.99),
            writes,
            avg_write_kib: appended / writes.max(1) / 1024,
            syncs: metrics.syncs.get(),
        };
        for log in &logs {
            manager.delete(log.partition()).await.expect("delete");
        }
        run
    });
    settle(&std::fs::File::open(dir.parent().expect("bench dir")).expect("bench dir"));
    let _ = std::fs::remove_dir_all(dir);
    result
}

/// (d): writes `total` bytes to one log, reads it all back from disk (no cache), then
/// reads the cached tail repeatedly.
fn read_run(dir: &Path, total: u64) -> Reads {
    let result = executor().run(async {
        let batch = batch();
        let count = total / batch.size() as u64;
        {
            let manager = LogManager::new(DmaStorage, dir, 0);
            let log = manager.create(TopicPartition::new("bench", 0), LogConfig::default()).await.expect("create");
            let tasks: Vec<_> = (0..appends_in_flight())
                .map(|_| {
                    let (log, batch) = (log.clone(), batch.clone());
                    glommio::spawn_local(async move {
                        for _ in 0..count / appends_in_flight() as u64 {
                            log.append(batch.clone(), AppendMode::Leader { epoch: LeaderEpoch(0) })
                                .await
                                .expect("append");
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await;
            }
            manager.close_all().await;
        }
        // Raw: the segment files as the device gives them, read as the appender writes.
        let partition_dir = dir.join("bench-0");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&partition_dir)
            .expect("partition dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        files.sort();
        let raw = raw_read(&files, APPEND_CHUNK_BYTES_DEFAULT, WRITES_IN_FLIGHT_DEFAULT);
        // Cold with read-ahead: reopened, so the cache starts empty; it holds 256 MiB.
        let cold_read = |cache_bytes: usize| async move {
            let manager = LogManager::new(DmaStorage, dir, cache_bytes);
            let log = manager.open(TopicPartition::new("bench", 0), LogConfig::default()).await.expect("open");
            let end = log.log_end_offset();
            let started = Instant::now();
            let mut offset = Offset(0);
            let mut bytes = 0u64;
            while offset < end {
                let batches = log.read(offset, 1 << 20, None).await.expect("cold read");
                for b in &batches {
                    bytes += b.size() as u64;
                }
                offset = batches.last().expect("progress").next_offset();
            }
            let result = mbps(bytes, started.elapsed());
            manager.close_all().await;
            result
        };
        let read_ahead = cold_read(256 << 20).await;
        // Cold without a cache: every read goes to disk, one at a time.
        let uncached = cold_read(0).await;
        // Cached: the last 256 MiB appended into a cache that holds them, read 8 times.
        let cache_bytes = 256 << 20;
        let manager = LogManager::new(DmaStorage, dir.join("cached"), cache_bytes + (1 << 20));
        let log = manager.create(TopicPartition::new("bench", 1), LogConfig::default()).await.expect("create");
        let cached_count = cache_bytes as u64 / batch.size() as u64;
        for _ in 0..cached_count {
            log.append(batch.clone(), AppendMode::Leader { epoch: LeaderEpoch(0) }).await.expect("append");
        }
        let end = log.log_end_offset();
        let reads_before = log.metrics().disk_reads.get();
        let started = Instant::now();
        let mut bytes = 0u64;
        for _ in 0..8 {
            let mut offset = Offset(0);
            while offset < end {
                // The pieces a fetch response would send, none copied.
                let batches = log.read(offset, 1 << 20, None).await.expect("cached read");
                let pieces: Vec<Bytes> = batches.iter().flat_map(Batch::segments).collect();
                bytes += pieces.iter().map(|b| b.len() as u64).sum::<u64>();
                offset = batches.last().expect("progress").next_offset();
            }
        }
        let cached = mbps(bytes, started.elapsed());
        assert_eq!(log.metrics().disk_reads.get(), reads_before, "cached reads touched the disk");
        Reads { raw, read_ahead, uncached, cached }
    });
    let _ = std::fs::remove_dir_all(dir);
    result
}

/// Record validation throughput by codec, in MB/s of batch bytes as produced (for a
/// compressed batch, its compressed size) and of record bytes (uncompressed size).
fn validation(total: u64) {
    use skein_engine::records::{build_batch, Compression, Record};
    use skein_engine::validate::{validate_records, RecordRules};
    let now = 1_700_000_000_000i64;
    // JSON-like values of RECORD_BYTES, compressible as event payloads are.
    let records: Vec<Record> = (0..RECORDS_PER_BATCH)
        .map(|i| {
            let mut value = String::new();
            while value.len() < RECORD_BYTES {
                value.push_str(&format!(
                    "{{\"id\":{},\"user\":\"u{}\",\"event\":\"click\",\"ts\":{}}}",
                    i,
                    i * 7919 % 1000,
                    now + i as i64
                ));
            }
            value.truncate(RECORD_BYTES);
            Record {
                offset_delta: i,
                timestamp_delta: i as i64,
                key: Some(Bytes::from(format!("key-{i}"))),
                value: Some(Bytes::from(value)),
                ..Record::default()
            }
        })
        .collect();
    let raw_bytes = (RECORDS_PER_BATCH as usize * RECORD_BYTES) as u64;
    let rules = RecordRules {
        key_required: true,
        timestamp_range: Some((now - 3_600_000, now + 3_600_000)),
        decompressed_bytes_max: 1 << 20,
    };
    println!(
        "record validation, one core, batches of {RECORDS_PER_BATCH} x {RECORD_BYTES} B, {} MiB of records per codec",
        total >> 20
    );
    for codec in [Compression::None, Compression::Lz4, Compression::Snappy, Compression::Zstd, Compression::Gzip] {
        let batch = Batch::validate_fresh(Bytes::from(build_batch(0, now, codec, &records)), 1 << 20).expect("batch");
        let batches = (total / raw_bytes).max(1);
        let started = Instant::now();
        for _ in 0..batches {
            let violations = validate_records(std::hint::black_box(&batch), &rules).expect("valid");
            assert!(violations.is_empty());
        }
        let validate = started.elapsed();
        let started = Instant::now();
        for _ in 0..batches {
            std::hint::black_box(crc32c::crc32c(std::hint::black_box(&batch.bytes()[21..])));
        }
        let crc = started.elapsed();
        let per_batch_ns = validate.as_nanos() as f64 / batches as f64;
        let records_mbps = (batches * raw_bytes) as f64 / validate.as_secs_f64() / 1e6;
        let wire_mbps = (batches * batch.size() as u64) as f64 / validate.as_secs_f64() / 1e6;
        let crc_mbps = (batches * batch.size() as u64) as f64 / crc.as_secs_f64() / 1e6;
        println!(
            "validate_{codec:?}: {per_batch_ns:.0} ns per batch ({} B on the wire), {records_mbps:.0} MB/s of records, {wire_mbps:.0} MB/s on the wire; crc alone {crc_mbps:.0} MB/s",
            batch.size()
        );
    }
}
