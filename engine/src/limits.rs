//! Every bound the engine keeps, with what it costs. Put a limit on everything.

/// O_DIRECT alignment for positions, lengths and buffers. 4 KiB is the logical block
/// size of every device this runs on; 512-byte devices accept it too.
pub const DMA_ALIGNMENT: usize = 4096;

/// Size of one appender chunk by default: the unit of a full-block write and of the
/// tail buffer. The node may set another (`WriteShape`, from `skein iotune`'s profile).
/// An active log holds at most `APPEND_CHUNKS_MAX` of them in memory (4 MiB at this
/// size); an idle one holds none (housekeeping releases the open chunk, keeping its
/// last partial block, under 4 KiB).
/// 512 KiB writes at depth 4-8 reached the disk's sequential bandwidth in the raw sweep
/// (`SKEIN_BENCH_RAW_SWEEP=1 cargo bench -p skein-engine`).
pub const APPEND_CHUNK_BYTES_DEFAULT: usize = 512 << 10;

/// The smallest chunk a node may set: below it a sequential write is small enough that
/// per-request overhead, not bandwidth, bounds the appender, and a chunk could not take
/// a write of `APPEND_HANDOVER_MIN_BYTES` whole.
pub const APPEND_CHUNK_BYTES_MIN: usize = 64 << 10;

/// The largest chunk a node may set: `APPEND_CHUNKS_MAX` of them are 16 MiB per active
/// log (`APPEND_BUFFER_BYTES_MAX`). It is also the largest block `skein iotune` sweeps.
pub const APPEND_CHUNK_BYTES_MAX: usize = 2 << 20;

/// Chunks buffered per log before appends wait for writes to complete (backpressure),
/// unless the node lets more writes than this be in flight: then one per write.
pub const APPEND_CHUNKS_MAX: usize = 8;

/// Unwritten bytes of the open chunk from which its write takes the chunk's memory
/// even when it rewrites a few blocks already written; a fresh chunk then continues
/// from the last partial block, which is the only part copied (under `DMA_ALIGNMENT`).
/// Also the size of the chunk that continues a smaller write (a lone batch on an idle
/// device), which the next such write takes in turn.
pub const APPEND_HANDOVER_MIN_BYTES: usize = 64 << 10;

/// Writes in flight per log file by default; the node may set another (`WriteShape`).
/// Writes cover disjoint block ranges, except a partial tail block, which is never
/// rewritten while an earlier write of it is in flight.
pub const WRITES_IN_FLIGHT_DEFAULT: usize = 8;

/// The fewest writes in flight a node may set: one is a synchronous appender.
pub const WRITES_IN_FLIGHT_MIN: usize = 1;

/// The most writes in flight per log file a node may set. Each in-flight write holds a
/// chunk, so the product with the chunk size is bounded too (`APPEND_BUFFER_BYTES_MAX`);
/// a shard's io_uring ring (glommio's default depth, 128) is shared by all its logs.
pub const WRITES_IN_FLIGHT_MAX: usize = 32;

/// Tail-buffer bytes per active log at most, over every shape a node may set: its
/// chunks (`APPEND_CHUNKS_MAX`, or one per write in flight when more) times the chunk
/// size. The memory an active log may hold before its appends wait.
pub const APPEND_BUFFER_BYTES_MAX: usize = 16 << 20;

/// Tail-buffer bytes (appended, not yet written) all logs of one shard may hold
/// (`log/budget.rs`): past it, appends wait for writes of any log to complete, except
/// one batch per log with nothing buffered. Eight logs appending at full rate fill it
/// (each up to `APPEND_BUFFER_BYTES_MAX`).
pub const SHARD_TAIL_BUFFER_BYTES_MAX: u64 = 256 << 20;

/// How long a rolled segment's seal waits before its syncs (`log/roll.rs`), unless
/// someone waits for it: longer than ext4's default commit interval (5 s), so that the
/// file system has committed the segment's blocks on its own and the syncs force no
/// journal commit, which would hold the writes of the next segment. The recovery point
/// passes the segment that much later.
pub const SEAL_SYNC_DELAY: std::time::Duration = std::time::Duration::from_secs(6);

/// Logs a shard closes at once at a clean stop (`LogManager::close_all`). Each holds
/// its final writes and an index buffer while it closes.
pub const CLOSES_IN_FLIGHT: usize = 64;

/// The smallest step a log reserves ahead of its writes with fallocate (`log/reserve.rs`):
/// one block, so a log holding one small record takes one block of disk. Writes into
/// reserved space avoid the file-extending O_DIRECT path, measured 6-9x slower on
/// these machines.
pub const RESERVATION_STEP_MIN_BYTES: u64 = DMA_ALIGNMENT as u64;

/// The largest step: a log that uses its reservation up within `RESERVATION_HORIZON`
/// doubles its step up to this. At most about 1.5 steps are reserved ahead of a log's
/// appends (it extends once half a step is left), 48 MiB for the fastest log.
pub const RESERVATION_STEP_MAX_BYTES: u64 = 32 << 20;

/// How long a reservation should last: a log that used its last one up faster doubles
/// its step, one that took over four of these halves it. So a log reserves about what
/// it writes in a second or two.
pub const RESERVATION_HORIZON: std::time::Duration = std::time::Duration::from_secs(1);

/// A log with no append for this long gives its reservation back (housekeeping trims
/// the active segment to its last block) and starts again from the smallest step.
pub const RESERVATION_IDLE_MS: u64 = 10_000;

/// The largest batch the engine accepts whatever the topic says: Kafka's
/// `message.max.bytes` ceiling is an i32, and one batch must fit in one segment.
pub const BATCH_BYTES_MAX: usize = i32::MAX as usize;

/// Bytes read ahead on a cold read when the caller's `max_bytes` is smaller.
pub const COLD_READ_MIN_BYTES: usize = 64 << 10;

/// One read-ahead window (`log/read_ahead.rs`): the bytes a log reads past a cold
/// read. 4 MiB is what the appender keeps in flight by default to reach the disk's write
/// bandwidth.
pub const READ_AHEAD_BYTES: usize = 4 << 20;

/// A window goes out as reads of this size, all in flight at once: the virtio disk
/// here takes a 4 MiB read as one request (`max_sectors_kb` 4096), at a third of the
/// bandwidth of 512 KiB reads at depth 8.
pub const READ_AHEAD_READ_BYTES: usize = 512 << 10;

/// A window is at most this fraction of the shard's batch cache (where it lands), so
/// that read-ahead cannot evict what readers are about to read.
pub const READ_AHEAD_CACHE_DIVISOR: usize = 8;

/// Read-ahead bytes in flight per shard (DMA buffers): 16 windows. Past it, cold reads
/// go without read-ahead.
pub const READ_AHEAD_SHARD_BYTES_MAX: u64 = 64 << 20;

/// A log of one segment holding fewer bytes than this keeps no checkpoint or
/// leader-epoch file (`LogState::keeps_state_files`): recovery scans it whole, at most
/// this many bytes, instead of two blocks of disk per partition.
pub const CHECKPOINT_LOG_BYTES_MIN: u64 = 64 << 10;

/// Housekeeping writes the first state files of a log that has grown past
/// `CHECKPOINT_LOG_BYTES_MIN` within this long of noticing, at a point set by the
/// log's name (`Log::checkpoint_when_due`): logs that grow together (a topic of
/// thousands of partitions under an even load) then create their files over this
/// window, not all in one pass.
pub const STATE_FILES_SPREAD: std::time::Duration = std::time::Duration::from_secs(30);

/// Largest index file accepted on load (Kafka's `segment.index.bytes` default, 10 MiB).
pub const INDEX_BYTES_MAX: usize = 10 << 20;

/// Decompressed bytes one batch may expand to during compaction or a timestamp search.
/// A batch that inflates beyond this is treated as corrupt rather than allocated.
pub const DECOMPRESSED_BATCH_BYTES_MAX: usize = 256 << 20;

const _: () = assert!(APPEND_CHUNK_BYTES_DEFAULT.is_multiple_of(DMA_ALIGNMENT));
const _: () = assert!(APPEND_CHUNK_BYTES_MIN.is_power_of_two() && APPEND_CHUNK_BYTES_MAX.is_power_of_two());
const _: () = assert!(APPEND_CHUNK_BYTES_DEFAULT.is_power_of_two());
const _: () = assert!(APPEND_CHUNK_BYTES_MIN.is_multiple_of(DMA_ALIGNMENT));
const _: () = assert!(APPEND_CHUNK_BYTES_MIN >= APPEND_HANDOVER_MIN_BYTES);
const _: () = assert!(APPEND_HANDOVER_MIN_BYTES > DMA_ALIGNMENT);
const _: () = assert!(APPEND_CHUNK_BYTES_MIN <= APPEND_CHUNK_BYTES_DEFAULT);
const _: () = assert!(APPEND_CHUNK_BYTES_DEFAULT <= APPEND_CHUNK_BYTES_MAX);
const _: () = assert!(WRITES_IN_FLIGHT_MIN >= 1 && WRITES_IN_FLIGHT_MIN <= WRITES_IN_FLIGHT_DEFAULT);
const _: () = assert!(WRITES_IN_FLIGHT_DEFAULT <= WRITES_IN_FLIGHT_MAX);
const _: () = assert!(APPEND_CHUNK_BYTES_MAX * APPEND_CHUNKS_MAX <= APPEND_BUFFER_BYTES_MAX);
const _: () = assert!(APPEND_CHUNK_BYTES_DEFAULT * WRITES_IN_FLIGHT_DEFAULT <= APPEND_BUFFER_BYTES_MAX);
const _: () = assert!(READ_AHEAD_READ_BYTES.is_multiple_of(DMA_ALIGNMENT));
const _: () = assert!(RESERVATION_STEP_MIN_BYTES.is_power_of_two() && RESERVATION_STEP_MAX_BYTES.is_power_of_two());
const _: () = assert!(RESERVATION_STEP_MIN_BYTES.is_multiple_of(DMA_ALIGNMENT as u64));
const _: () = assert!(RESERVATION_STEP_MIN_BYTES <= RESERVATION_STEP_MAX_BYTES);
const _: () = assert!(SHARD_TAIL_BUFFER_BYTES_MAX >= 8 * APPEND_BUFFER_BYTES_MAX as u64);
