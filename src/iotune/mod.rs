//! `skein iotune`: measures the data directory's device through Skein's own I/O path
//! and writes a profile (`iotune.json`) that `skein start` reads.
//!
//! Why: the appender's write size and depth (`skein_engine::WriteShape`) and the
//! adaptive group commit's window suit one device and not another. The defaults were
//! measured on one virtio disk; an NVMe drive may want deeper queues, a network disk
//! larger writes. As Seastar's `iotune` and Redpanda's `rpk iotune`, the measurement is
//! taken once per host and read at every start.
//!
//! How: one glommio executor (a shard's io_uring ring, with the broker's ring settings)
//! drives the engine's own storage (`skein_engine::io::dma::DmaStorage`: O_DIRECT files,
//! DMA buffers) on a scratch file in the data directory, removed at the end, on error
//! and on SIGINT/SIGTERM. Each step keeps `depth` operations in flight (closed loop) for
//! `--duration-ms`:
//!
//! 1. sequential writes of each block size at each depth, into space fallocated just
//!    before (as the appender writes a segment's reserved space), one pass of the file
//!    at most;
//! 2. the file written whole, then sequential reads of each block size at each depth;
//! 3. 4 KiB random reads and overwrites at depths 1 to 64;
//! 4. 4 KiB writes at depth 1 into fresh space, alone (small-write latency) and each
//!    followed by fdatasync (an append with `flush.messages=1`).
//!
//! The figures are one shard's, on one core: what a shard can drive, not what the
//! device gives many threads (`bench-harness/iotune-vs-fio.sh` compares them with fio).
//! The recommendations are derived by `recommend`, whose docs state the rules.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use clap::Args;
use serde::{Deserialize, Serialize};
use skein_engine::io::dma::{DmaStorage, DmaStorageFile};
use skein_engine::io::{IoBuf, Storage, StorageFile};
use skein_engine::limits::{
    APPEND_BUFFER_BYTES_MAX, APPEND_CHUNK_BYTES_MAX, APPEND_CHUNK_BYTES_MIN, WRITES_IN_FLIGHT_MAX, WRITES_IN_FLIGHT_MIN,
};
use skein_engine::WriteShape;

mod profile;
pub use profile::{group_commit_cap, knee, load_for_start, recommend, write_shape};
pub use skein_tuning::profile::{Recommended, FORMAT_VERSION, GROUP_COMMIT_WINDOW_US_MAX};

/// The profile's name in the data directory, where `skein start` looks for it.
pub const PROFILE_FILE: &str = "iotune.json";

/// Block sizes of the sequential steps: the chunk sizes the appender may use, powers
/// of two from 128 KiB (smaller writes never reached a disk's bandwidth here) to the
/// engine's largest chunk.
const SEQUENTIAL_BLOCK_BYTES: [usize; 5] = [128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20];

/// Depths of the sequential steps: the writes in flight the appender may keep.
const SEQUENTIAL_DEPTHS: [usize; 6] = [1, 2, 4, 8, 16, 32];

/// Depths of the 4 KiB random steps.
const RANDOM_DEPTHS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];

/// Block size of the random and latency steps: the engine's DMA alignment, the
/// smallest write the appender makes.
const SMALL_BLOCK_BYTES: usize = skein_engine::limits::DMA_ALIGNMENT;

/// The share of the best figure that counts as reaching it: the knee of a curve is the
/// smallest depth (or block size) at or above it. Past it, more depth buys under 10%
/// and costs memory and queueing latency.
const KNEE_SHARE: f64 = 0.9;

/// Operations timed per latency step at most, so a fast device's step ends early.
const LATENCY_ROUNDS_MAX: usize = 10_000;

/// Block size and depth of the pass that writes the whole file before the reads.
const FILL_BLOCK_BYTES: usize = 1 << 20;
const FILL_DEPTH: usize = 8;

/// Free space left to the file system beyond the scratch file.
const FREE_SPACE_HEADROOM_BYTES: u64 = 64 << 20;

/// The smallest scratch file: the largest block at depth 4. Figures need more (the
/// default, 1 GiB, lets the deepest steps keep their depth).
const FILE_MIB_MIN: u64 = 8;

/// The largest scratch file, 1 TiB: a device's figures settle well below it, and the
/// free-space check bounds it first on most disks.
const FILE_MIB_MAX: u64 = 1 << 20;

const _: () = assert!(SEQUENTIAL_BLOCK_BYTES[0] >= APPEND_CHUNK_BYTES_MIN);
const _: () = assert!(SEQUENTIAL_BLOCK_BYTES[SEQUENTIAL_BLOCK_BYTES.len() - 1] <= APPEND_CHUNK_BYTES_MAX);
const _: () = assert!(SEQUENTIAL_DEPTHS[SEQUENTIAL_DEPTHS.len() - 1] <= WRITES_IN_FLIGHT_MAX);
const _: () = assert!(FILE_MIB_MIN << 20 >= 4 * APPEND_CHUNK_BYTES_MAX as u64);
const _: () = assert!(FILL_BLOCK_BYTES.is_multiple_of(SMALL_BLOCK_BYTES));

#[derive(Args, Debug)]
pub struct IotuneArgs {
    /// The node's data directory: the scratch file goes there, and the profile by
    /// default.
    #[arg(long, env = "SKEIN_DATA_DIR", default_value = "./skein-data")]
    data_dir: PathBuf,
    /// Size of the scratch file, in MiB: the sequential write steps write it once at
    /// most, the others stay inside it.
    #[arg(long, default_value_t = 1024)]
    size_mib: u64,
    /// How long each step runs, in milliseconds (76 steps, and a pass that writes the
    /// file whole before the reads).
    #[arg(long, default_value_t = 1000)]
    duration_ms: u64,
    /// Where the profile goes [default: <data-dir>/iotune.json].
    #[arg(long)]
    out: Option<PathBuf>,
}

/// What `skein iotune` measured and what it recommends: the file `skein start` reads.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Profile {
    pub format_version: u32,
    /// When it was measured, RFC 3339 in UTC.
    pub measured_at: String,
    pub skein_version: String,
    pub data_dir: PathBuf,
    pub device: Device,
    pub file_bytes: u64,
    pub step_ms: u64,
    pub sequential_write: Vec<Bandwidth>,
    pub sequential_read: Vec<Bandwidth>,
    pub random_read: Vec<Iops>,
    pub random_write: Vec<Iops>,
    /// The smallest depth whose 4 KiB random IOPS reach 90% of the best.
    pub random_read_knee_depth: usize,
    pub random_write_knee_depth: usize,
    /// A 4 KiB O_DIRECT write at depth 1 into fallocated space.
    pub small_write_latency: Latency,
    /// The same write followed by fdatasync, timed together.
    pub fdatasync_latency: Latency,
    pub recommended: Recommended,
}

/// The data directory's device, as far as `/sys` and `/proc/mounts` tell.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Device {
    /// The whole disk's name (`nvme0n1`, `vda`), not a partition's.
    pub name: Option<String>,
    pub model: Option<String>,
    pub rotational: Option<bool>,
    pub logical_block_bytes: Option<u64>,
    pub filesystem: Option<String>,
}

/// One sequential step: block size, depth, bandwidth (MB/s, 10^6 bytes, as fio's
/// MB/s) and each operation's latency.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Bandwidth {
    pub block_bytes: usize,
    pub depth: usize,
    pub mb_per_s: f64,
    pub latency_us_p50: u64,
    pub latency_us_p99: u64,
}

/// One random step.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Iops {
    pub block_bytes: usize,
    pub depth: usize,
    pub iops: f64,
    pub latency_us_p50: u64,
    pub latency_us_p99: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Latency {
    pub rounds: usize,
    pub latency_us_p50: u64,
    pub latency_us_p99: u64,
}

/// A profile as `skein start` applies it.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub path: PathBuf,
    pub recommended: Recommended,
}

/// Runs `skein iotune`.
///
/// # Errors
/// A message for a directory that cannot be measured (missing, not a directory, on
/// tmpfs, refusing O_DIRECT, not writable, in use by a node, too full), an I/O error
/// during a step, or an interruption; the scratch file is removed in every case.
pub fn run(args: IotuneArgs) -> Result<(), String> {
    let dir = &args.data_dir;
    check_dir(dir)?;
    if !(FILE_MIB_MIN..=FILE_MIB_MAX).contains(&args.size_mib) {
        return Err(format!("invalid --size-mib {}: must be in [{FILE_MIB_MIN}, {FILE_MIB_MAX}]", args.size_mib));
    }
    if args.duration_ms == 0 || args.duration_ms > 600_000 {
        return Err(format!("invalid --duration-ms {}: must be in [1, 600000]", args.duration_ms));
    }
    let file_bytes = args.size_mib << 20;
    // A node on this directory would be measured with the device: refuse, as a second
    // node is refused, and keep one from starting meanwhile.
    let _lock = crate::exclusive::lock_data_dir(dir).map_err(|e| match e.contains("in use by") {
        true => format!("cannot measure {} while a node uses it: {e}", dir.display()),
        false => format!("cannot write to {}: {e}", dir.display()),
    })?;
    let available = skein_engine::io::free_space(dir).map_or(u64::MAX, |(_, available)| available);
    if available < file_bytes + FREE_SPACE_HEADROOM_BYTES {
        return Err(format!(
            "{} has {} MiB free: a {} MiB scratch file needs {} MiB (--size-mib sets its size)",
            dir.display(),
            available >> 20,
            args.size_mib,
            (file_bytes + FREE_SPACE_HEADROOM_BYTES) >> 20
        ));
    }
    let interrupted = interrupt_flag()?;
    let scratch = Scratch(
        std::path::absolute(dir.join(format!(".skein-iotune-{}.tmp", std::process::id())))
            .map_err(|e| format!("cannot resolve {}: {e}", dir.display()))?,
    );
    let step = Duration::from_millis(args.duration_ms);
    eprintln!(
        "skein iotune: {} MiB scratch file in {}, {} ms per step, about {} s",
        args.size_mib,
        dir.display(),
        args.duration_ms,
        (step * steps_total()).as_secs() + 1
    );
    let path = scratch.0.clone();
    let measured = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .name("iotune")
        .make()
        .map_err(|e| format!("cannot start an io_uring executor: {e}"))?
        .run(async move { measure(&path, file_bytes, step, interrupted).await });
    drop(scratch);
    let measured = measured?;
    let recommended = recommend(&measured.sequential_write, &measured.small_write_latency);
    let random_read_knee_depth = knee(measured.random_read.iter().map(|s| (s.depth, s.iops))).unwrap_or(1);
    let random_write_knee_depth = knee(measured.random_write.iter().map(|s| (s.depth, s.iops))).unwrap_or(1);
    let profile = Profile {
        format_version: FORMAT_VERSION,
        measured_at: utc_rfc3339(SystemTime::now()),
        skein_version: env!("CARGO_PKG_VERSION").to_string(),
        data_dir: std::path::absolute(dir).unwrap_or_else(|_| dir.clone()),
        device: device_of(dir),
        file_bytes,
        step_ms: args.duration_ms,
        sequential_write: measured.sequential_write,
        sequential_read: measured.sequential_read,
        random_read: measured.random_read,
        random_write: measured.random_write,
        random_read_knee_depth,
        random_write_knee_depth,
        small_write_latency: measured.small_write_latency,
        fdatasync_latency: measured.fdatasync_latency,
        recommended,
    };
    let out = args.out.clone().unwrap_or_else(|| dir.join(PROFILE_FILE));
    print!("{}", render(&profile, &out));
    write_profile(&out, &profile)
}

/// Refuses a data directory iotune cannot measure, with the reason.
fn check_dir(dir: &Path) -> Result<(), String> {
    let metadata = std::fs::metadata(dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("data directory {} does not exist", dir.display()),
        _ => format!("cannot read data directory {}: {e}", dir.display()),
    })?;
    if !metadata.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    if let Some((point, kind, _)) = skein_tuning::host::mount_of(&mounts, dir) {
        if matches!(kind.as_str(), "tmpfs" | "ramfs") {
            return Err(format!(
                "{} is on {kind} ({point}): memory, not a device; point --data-dir at the disk `skein start` uses",
                dir.display()
            ));
        }
    }
    Ok(())
}

/// Set on SIGINT or SIGTERM: the steps stop and the scratch file is removed.
fn interrupt_flag() -> Result<Arc<AtomicBool>, String> {
    let flag = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, flag.clone()).map_err(|e| format!("cannot handle signals: {e}"))?;
    }
    Ok(flag)
}

/// The scratch file, removed when dropped: after the executor ends, on the main
/// thread (a blocking unlink is fine in a tool that serves nothing).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn steps_total() -> u32 {
    (2 * SEQUENTIAL_BLOCK_BYTES.len() * SEQUENTIAL_DEPTHS.len() + 2 * RANDOM_DEPTHS.len() + 2) as u32
}

/// Every step's figures.
struct Measured {
    sequential_write: Vec<Bandwidth>,
    sequential_read: Vec<Bandwidth>,
    random_read: Vec<Iops>,
    random_write: Vec<Iops>,
    small_write_latency: Latency,
    fdatasync_latency: Latency,
}

/// Runs the steps on the scratch file at `path` (module docs).
async fn measure(path: &Path, file_bytes: u64, step: Duration, stop: Arc<AtomicBool>) -> Result<Measured, String> {
    let file = DmaStorage.open_file(path, true).await.map_err(|e| open_error(path, e))?;
    let io = Io { file, path: path.to_path_buf(), pattern: Rc::new(pattern(APPEND_CHUNK_BYTES_MAX)), stop };
    let mut sequential_write = Vec::new();
    eprint!("sequential write");
    for block in SEQUENTIAL_BLOCK_BYTES {
        for depth in SEQUENTIAL_DEPTHS {
            io.fresh_space(file_bytes).await?;
            let positions = Positions::Sequential { next: 0, end: file_bytes, wrap: false };
            let sample = io.step(Op::Write, block, depth, positions, step, usize::MAX).await?;
            sequential_write.push(sample.bandwidth(block, depth));
        }
        eprint!(".");
    }
    eprint!("\nfilling the file for the reads");
    io.fresh_space(file_bytes).await?;
    let fill = Positions::Sequential { next: 0, end: file_bytes, wrap: false };
    io.step(Op::Write, FILL_BLOCK_BYTES, FILL_DEPTH, fill, Duration::MAX, usize::MAX).await?;
    io.file.fdatasync().await.map_err(|e| io.error("fdatasync", e))?;
    let mut sequential_read = Vec::new();
    eprint!("\nsequential read");
    for block in SEQUENTIAL_BLOCK_BYTES {
        for depth in SEQUENTIAL_DEPTHS {
            let positions = Positions::Sequential { next: 0, end: file_bytes, wrap: true };
            let sample = io.step(Op::Read, block, depth, positions, step, usize::MAX).await?;
            sequential_read.push(sample.bandwidth(block, depth));
        }
        eprint!(".");
    }
    let (mut random_read, mut random_write) = (Vec::new(), Vec::new());
    eprint!("\n4 KiB random read and write");
    for (op, results) in [(Op::Read, &mut random_read), (Op::Write, &mut random_write)] {
        for depth in RANDOM_DEPTHS {
            let positions = Positions::Random { state: 0x9e37_79b9_7f4a_7c15 ^ depth as u64, end: file_bytes };
            let sample = io.step(op, SMALL_BLOCK_BYTES, depth, positions, step, usize::MAX).await?;
            results.push(sample.iops(SMALL_BLOCK_BYTES, depth));
            eprint!(".");
        }
    }
    eprintln!("\nlatency of 4 KiB writes, alone and with fdatasync");
    let mut latencies = Vec::new();
    for op in [Op::Write, Op::WriteSync] {
        io.fresh_space(file_bytes).await?;
        let positions = Positions::Sequential { next: 0, end: file_bytes, wrap: false };
        let sample = io.step(op, SMALL_BLOCK_BYTES, 1, positions, step, LATENCY_ROUNDS_MAX).await?;
        latencies.push(sample.latency());
    }
    let fdatasync_latency = latencies.pop().expect("two latency steps");
    let small_write_latency = latencies.pop().expect("two latency steps");
    Ok(Measured {
        sequential_write,
        sequential_read,
        random_read,
        random_write,
        small_write_latency,
        fdatasync_latency,
    })
}

/// An open error in the words an operator needs.
fn open_error(path: &Path, e: std::io::Error) -> String {
    let dir = path.parent().unwrap_or(Path::new("/")).display();
    let code = e.raw_os_error();
    if code == Some(rustix::io::Errno::INVAL.raw_os_error()) {
        format!("the file system of {dir} refuses O_DIRECT ({e}): Skein writes its logs with O_DIRECT")
    } else if e.kind() == std::io::ErrorKind::PermissionDenied || code == Some(rustix::io::Errno::ROFS.raw_os_error()) {
        format!("cannot write to {dir}: {e}")
    } else {
        format!("cannot create the scratch file {}: {e}", path.display())
    }
}

/// What a step does at each position.
#[derive(Clone, Copy, Debug)]
enum Op {
    Read,
    Write,
    /// A write, then fdatasync, timed together.
    WriteSync,
}

/// Where a step's next operation goes.
#[derive(Clone, Copy, Debug)]
enum Positions {
    /// Block after block from 0; at `end`, from 0 again (`wrap`) or done.
    Sequential { next: u64, end: u64, wrap: bool },
    /// Uniformly random aligned blocks below `end` (xorshift64*).
    Random { state: u64, end: u64 },
}

impl Positions {
    fn next(&mut self, block: u64) -> Option<u64> {
        match self {
            Positions::Sequential { next, end, wrap } => {
                if *next + block > *end {
                    if !*wrap || block > *end {
                        return None;
                    }
                    *next = 0;
                }
                let position = *next;
                *next += block;
                Some(position)
            }
            Positions::Random { state, end } => {
                *state ^= *state >> 12;
                *state ^= *state << 25;
                *state ^= *state >> 27;
                let random = state.wrapping_mul(0x2545_f491_4f6c_dd1d);
                Some(random % (*end / block) * block)
            }
        }
    }
}

/// The scratch file and what every step shares.
struct Io {
    file: DmaStorageFile,
    path: PathBuf,
    /// Bytes written (not zeros: a device or a thin volume may skip those).
    pattern: Rc<Vec<u8>>,
    stop: Arc<AtomicBool>,
}

/// One step's outcome.
struct Sample {
    bytes: u64,
    elapsed: Duration,
    /// Each operation's latency, sorted.
    latencies_us: Vec<u32>,
}

impl Io {
    fn error(&self, what: &str, e: std::io::Error) -> String {
        format!("{what} of {}: {e}", self.path.display())
    }

    /// Empties the file and reserves `bytes` again, so that writes go into fallocated,
    /// never-written space, as the appender's do.
    async fn fresh_space(&self, bytes: u64) -> Result<(), String> {
        self.file.truncate(0).await.map_err(|e| self.error("truncate", e))?;
        self.file.allocate(bytes).await.map_err(|e| self.error("fallocate", e))
    }

    /// Keeps `depth` operations in flight until `duration` passed, `rounds` completed,
    /// or the positions run out. An I/O error or an interruption ends it with an error.
    async fn step(
        &self,
        op: Op,
        block: usize,
        depth: usize,
        positions: Positions,
        duration: Duration,
        rounds: usize,
    ) -> Result<Sample, String> {
        struct Shared {
            positions: Positions,
            rounds_left: usize,
            bytes: u64,
            latencies_us: Vec<u32>,
            error: Option<String>,
        }
        let shared = Rc::new(RefCell::new(Shared {
            positions,
            rounds_left: rounds,
            bytes: 0,
            latencies_us: Vec::new(),
            error: None,
        }));
        let started = Instant::now();
        let deadline = started.checked_add(duration);
        let workers: Vec<_> = (0..depth)
            .map(|_| {
                let (shared, file, pattern, stop) =
                    (shared.clone(), self.file.clone(), self.pattern.clone(), self.stop.clone());
                let path = self.path.clone();
                glommio::spawn_local(async move {
                    loop {
                        if deadline.is_some_and(|d| Instant::now() >= d) {
                            return;
                        }
                        let position = {
                            let mut s = shared.borrow_mut();
                            if stop.load(Ordering::Relaxed) {
                                s.error.get_or_insert_with(|| "interrupted".to_string());
                            }
                            if s.error.is_some() || s.rounds_left == 0 {
                                return;
                            }
                            let Some(position) = s.positions.next(block as u64) else { return };
                            s.rounds_left -= 1;
                            position
                        };
                        let began = Instant::now();
                        let result = one(&file, op, block, position, &pattern).await;
                        let took_us = began.elapsed().as_micros().min(u32::MAX as u128) as u32;
                        let mut s = shared.borrow_mut();
                        match result {
                            Ok(()) => {
                                s.bytes += block as u64;
                                s.latencies_us.push(took_us);
                            }
                            Err((what, e)) => {
                                s.error
                                    .get_or_insert_with(|| format!("{what} at {position} of {}: {e}", path.display()));
                                return;
                            }
                        }
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.await;
        }
        let elapsed = started.elapsed();
        let mut shared = shared.borrow_mut();
        if let Some(error) = shared.error.take() {
            return Err(error);
        }
        let mut latencies_us = std::mem::take(&mut shared.latencies_us);
        latencies_us.sort_unstable();
        Ok(Sample { bytes: shared.bytes, elapsed, latencies_us })
    }
}

/// One operation of a step. A short transfer is an error: the file holds every block.
async fn one(
    file: &DmaStorageFile,
    op: Op,
    block: usize,
    position: u64,
    pattern: &[u8],
) -> Result<(), (&'static str, std::io::Error)> {
    let short = |what, n: usize| (what, std::io::Error::other(format!("{n} of {block} bytes")));
    match op {
        Op::Read => {
            let read = file.read_at(position, block).await.map_err(|e| ("read", e))?;
            if read.len() < block {
                return Err(short("short read", read.len()));
            }
        }
        Op::Write | Op::WriteSync => {
            let mut buf = file.alloc_buf(block);
            // A different slice of the pattern for each block of a 2 MiB stretch.
            let start = (position as usize / block % (pattern.len() / block).max(1)) * block;
            let take = block.min(pattern.len() - start);
            buf.as_bytes_mut()[..take].copy_from_slice(&pattern[start..start + take]);
            buf.as_bytes_mut()[take..].fill(0x5a);
            let written = file.write_at(buf, position).await.map_err(|e| ("write", e))?;
            if written < block {
                return Err(short("short write", written));
            }
            if matches!(op, Op::WriteSync) {
                file.fdatasync().await.map_err(|e| ("fdatasync", e))?;
            }
        }
    }
    Ok(())
}

/// `len` bytes that no device compresses away (xorshift64).
fn pattern(len: usize) -> Vec<u8> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// The value at quantile `q` of sorted `values` (nearest rank); 0 when empty.
fn percentile(values: &[u32], q: f64) -> u64 {
    if values.is_empty() {
        return 0;
    }
    let rank = ((values.len() as f64 * q).ceil() as usize).clamp(1, values.len());
    u64::from(values[rank - 1])
}

impl Sample {
    fn seconds(&self) -> f64 {
        self.elapsed.as_secs_f64().max(1e-9)
    }

    fn bandwidth(&self, block_bytes: usize, depth: usize) -> Bandwidth {
        Bandwidth {
            block_bytes,
            depth,
            mb_per_s: round2(self.bytes as f64 / self.seconds() / 1e6),
            latency_us_p50: percentile(&self.latencies_us, 0.5),
            latency_us_p99: percentile(&self.latencies_us, 0.99),
        }
    }

    fn iops(&self, block_bytes: usize, depth: usize) -> Iops {
        Iops {
            block_bytes,
            depth,
            iops: round2(self.latencies_us.len() as f64 / self.seconds()),
            latency_us_p50: percentile(&self.latencies_us, 0.5),
            latency_us_p99: percentile(&self.latencies_us, 0.99),
        }
    }

    fn latency(&self) -> Latency {
        Latency {
            rounds: self.latencies_us.len(),
            latency_us_p50: percentile(&self.latencies_us, 0.5),
            latency_us_p99: percentile(&self.latencies_us, 0.99),
        }
    }
}

fn round2(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

/// The data directory's device and file system, where `/sys` and `/proc` tell.
fn device_of(dir: &Path) -> Device {
    let host = skein_tuning::Host::new("/");
    let filesystem = host.read("/proc/mounts").and_then(|mounts| skein_tuning::host::mount_of(&mounts, dir));
    let mut device = Device { filesystem: filesystem.map(|(_, kind, _)| kind), ..Device::default() };
    if let Some((name, sys)) = skein_tuning::host::block_device(&host, dir) {
        device.model = host.read(&format!("{sys}/device/model")).filter(|m| !m.is_empty());
        device.rotational = host.read(&format!("{sys}/queue/rotational")).map(|r| r == "1");
        device.logical_block_bytes = host.read(&format!("{sys}/queue/logical_block_size")).and_then(|b| b.parse().ok());
        device.name = Some(name);
    }
    device
}

/// Writes the profile whole: a temp file, synced, renamed over `out`.
fn write_profile(out: &Path, profile: &Profile) -> Result<(), String> {
    let text = serde_json::to_string_pretty(profile).map_err(|e| format!("cannot encode the profile: {e}"))? + "\n";
    let temp = out.with_extension("json.tmp");
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&temp)?;
        std::io::Write::write_all(&mut file, text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temp, out)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        format!("cannot write {}: {e}", out.display())
    })
}

/// The profile as tables, for a person.
fn render(profile: &Profile, out: &Path) -> String {
    let mut text = String::new();
    let device = &profile.device;
    let _ = writeln!(
        text,
        "\nskein iotune: {} on {} ({}{}), {} MiB file, {} ms per step",
        profile.data_dir.display(),
        device.name.as_deref().unwrap_or("an unknown device"),
        device.filesystem.as_deref().unwrap_or("unknown file system"),
        device.model.as_deref().map(|m| format!(", {m}")).unwrap_or_default(),
        profile.file_bytes >> 20,
        profile.step_ms
    );
    for (title, rows) in
        [("sequential write", &profile.sequential_write), ("sequential read", &profile.sequential_read)]
    {
        let _ = writeln!(text, "\n{title}, MB/s");
        let _ = write!(text, "{:<10}", "block");
        for depth in SEQUENTIAL_DEPTHS {
            let _ = write!(text, "{:>9}", format!("qd {depth}"));
        }
        text.push('\n');
        for block in SEQUENTIAL_BLOCK_BYTES {
            let _ = write!(text, "{:<10}", format!("{} KiB", block >> 10));
            for depth in SEQUENTIAL_DEPTHS {
                let figure = rows.iter().find(|r| r.block_bytes == block && r.depth == depth);
                let _ = write!(text, "{:>9}", figure.map_or("-".to_string(), |r| format!("{:.0}", r.mb_per_s)));
            }
            text.push('\n');
        }
    }
    let _ = writeln!(text, "\n4 KiB random, IOPS (p50/p99 µs)");
    let _ = writeln!(text, "{:<6}{:>24}{:>24}", "qd", "read", "write");
    for depth in RANDOM_DEPTHS {
        let cell = |rows: &[Iops]| {
            rows.iter()
                .find(|r| r.depth == depth)
                .map_or("-".to_string(), |r| format!("{:.0} ({}/{})", r.iops, r.latency_us_p50, r.latency_us_p99))
        };
        let _ = writeln!(text, "{:<6}{:>24}{:>24}", depth, cell(&profile.random_read), cell(&profile.random_write));
    }
    let _ = writeln!(
        text,
        "knee (90% of the best): read qd {}, write qd {}",
        profile.random_read_knee_depth, profile.random_write_knee_depth
    );
    let _ = writeln!(text, "\nlatency, µs{:>22}{:>8}{:>8}", "rounds", "p50", "p99");
    for (name, latency) in
        [("4 KiB write", &profile.small_write_latency), ("4 KiB write + fdatasync", &profile.fdatasync_latency)]
    {
        let _ =
            writeln!(text, "{name:<25}{:>8}{:>8}{:>8}", latency.rounds, latency.latency_us_p50, latency.latency_us_p99);
    }
    let r = &profile.recommended;
    let _ = writeln!(text, "\nrecommended, applied by `skein start` from {}:", out.display());
    let _ = writeln!(text, "append_chunk_bytes      {} ({} KiB)", r.append_chunk_bytes, r.append_chunk_bytes >> 10);
    let _ = writeln!(text, "writes_in_flight        {}", r.writes_in_flight);
    let _ = writeln!(
        text,
        "group_commit_window_us  {} (caps --group-commit-max-delay-us when group commit is on)",
        r.group_commit_window_us
    );
    text
}

/// `time` as RFC 3339 in UTC, to the second (Howard Hinnant's civil-from-days).
fn utc_rfc3339(time: SystemTime) -> String {
    let seconds = time.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rest) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rest / 3600, rest % 3600 / 60, rest % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Positions: sequential ones stop (or wrap) at the end, random ones stay aligned
    // and inside the file.
    #[test]
    fn positions() {
        let mut once = Positions::Sequential { next: 0, end: 10, wrap: false };
        assert_eq!((once.next(4), once.next(4), once.next(4)), (Some(0), Some(4), None));
        let mut wrapping = Positions::Sequential { next: 0, end: 8, wrap: true };
        assert_eq!((wrapping.next(4), wrapping.next(4), wrapping.next(4)), (Some(0), Some(4), Some(0)));
        let mut random = Positions::Random { state: 7, end: 1 << 20 };
        for _ in 0..1000 {
            let position = random.next(4096).unwrap();
            assert!(position.is_multiple_of(4096) && position + 4096 <= 1 << 20, "{position}");
        }
    }

    // Opening the scratch file: EINVAL is a file system refusing O_DIRECT (tmpfs before
    // Linux 6.6, some FUSE and network file systems), said in those words.
    #[test]
    fn open_errors() {
        let path = Path::new("/data/.skein-iotune-1.tmp");
        let error = |code| open_error(path, std::io::Error::from_raw_os_error(code));
        assert!(error(rustix::io::Errno::INVAL.raw_os_error()).contains("/data refuses O_DIRECT"));
        assert!(error(rustix::io::Errno::ACCESS.raw_os_error()).starts_with("cannot write to /data"));
        assert!(error(rustix::io::Errno::ROFS.raw_os_error()).starts_with("cannot write to /data"));
        assert!(error(rustix::io::Errno::NOSPC.raw_os_error()).starts_with("cannot create the scratch file"));
    }

    // Percentiles by nearest rank, and dates as RFC 3339.
    #[test]
    fn percentiles_and_dates() {
        let values: Vec<u32> = (1..=100).collect();
        assert_eq!((percentile(&values, 0.5), percentile(&values, 0.99), percentile(&[], 0.5)), (50, 99, 0));
        assert_eq!(percentile(&[7], 0.99), 7);
        let at = |s: u64| utc_rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_767_225_599), "2025-12-31T23:59:59Z");
    }
}
