//! Every bound the engine keeps, with what it costs. Put a limit on everything.

/// O_DIRECT alignment for positions, lengths and buffers. 4 KiB is the logical block
/// size of every device this runs on; 512-byte devices accept it too.
pub const DMA_ALIGNMENT: usize = 4096;

/// Size of one appender chunk: the unit of a full-block write and of the tail buffer.
/// An active log holds at most `APPEND_CHUNKS_MAX` of them in memory (4 MiB); an idle
/// one holds none (housekeeping releases the open chunk, keeping its last partial
/// block, under 4 KiB).
/// 512 KiB writes at depth 4-8 reached the disk's sequential bandwidth in the raw sweep
/// (`SKEIN_BENCH_RAW_SWEEP=1 cargo bench -p skein-engine`).
pub const APPEND_CHUNK_BYTES: usize = 512 << 10;

/// Chunks buffered per log before appends wait for writes to complete (backpressure).
pub const APPEND_CHUNKS_MAX: usize = 8;

/// Unwritten bytes of the open chunk from which its write takes the chunk's memory
/// instead of a copy; a fresh chunk then continues from the last partial block, which
/// is the only part copied (under `DMA_ALIGNMENT`). Smaller writes (a lone batch on an
/// idle device) copy their few blocks and keep the chunk.
pub const APPEND_HANDOVER_MIN_BYTES: usize = 64 << 10;

/// Writes in flight per log file. Writes cover disjoint block ranges, except a partial
/// tail block, which is never rewritten while an earlier write of it is in flight.
pub const WRITES_IN_FLIGHT_MAX: usize = 8;

/// Space reserved ahead of the writes with fallocate. Writes into reserved space avoid
/// the file-extending O_DIRECT path, measured 6-9x slower on these machines.
pub const RESERVATION_STEP_BYTES: u64 = 32 << 20;

/// The largest batch the engine accepts whatever the topic says: Kafka's
/// `message.max.bytes` ceiling is an i32, and one batch must fit in one segment.
pub const BATCH_BYTES_MAX: usize = i32::MAX as usize;

/// Bytes read ahead on a cold read when the caller's `max_bytes` is smaller.
pub const COLD_READ_MIN_BYTES: usize = 64 << 10;

/// One read-ahead window (`log/read_ahead.rs`): the bytes a log reads past a cold
/// read. 4 MiB is what the appender keeps in flight to reach the disk's write bandwidth.
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

/// Largest index file accepted on load (Kafka's `segment.index.bytes` default, 10 MiB).
pub const INDEX_BYTES_MAX: usize = 10 << 20;

/// Decompressed bytes one batch may expand to during compaction or a timestamp search.
/// A batch that inflates beyond this is treated as corrupt rather than allocated.
pub const DECOMPRESSED_BATCH_BYTES_MAX: usize = 256 << 20;

const _: () = assert!(APPEND_CHUNK_BYTES.is_multiple_of(DMA_ALIGNMENT));
const _: () = assert!(READ_AHEAD_READ_BYTES.is_multiple_of(DMA_ALIGNMENT));
const _: () = assert!(RESERVATION_STEP_BYTES.is_multiple_of(APPEND_CHUNK_BYTES as u64));
