//! The engine's only door to the disk: a small storage trait, its io_uring
//! implementation on glommio DMA files (`dma`), and a fault-injecting wrapper (`fault`)
//! that tests put between the engine and the disk.
//!
//! Everything that touches glommio or raw io_uring lives under this module. The rest of
//! the engine is generic over `Storage`, so the same appender and recovery code runs on
//! the real disk and on a disk that tears writes or fails with EIO or ENOSPC.
//!
//! Files are opened with O_DIRECT: positions and lengths of writes are multiples of
//! `DMA_ALIGNMENT`, buffers come from `StorageFile::alloc_buf`. Reads may be unaligned;
//! the implementation widens them.

pub mod dma;
pub mod fault;
pub mod open_files;

use std::io;
use std::ops::Range;
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;

use crate::limits::DMA_ALIGNMENT;

/// An aligned buffer that a `StorageFile` can write without copying.
pub trait IoBuf {
    fn as_bytes(&self) -> &[u8];
    fn as_bytes_mut(&mut self) -> &mut [u8];
    /// Shortens the buffer to its first `len` bytes (a multiple of `DMA_ALIGNMENT`), so
    /// that a write of it stops there.
    fn truncate(&mut self, len: usize);
}

/// A directory tree of O_DIRECT files. Implementations are cheap to clone and used from
/// one thread (one shard).
#[allow(async_fn_in_trait)]
pub trait Storage: Clone + 'static {
    type File: StorageFile;

    /// Opens a file for reading and O_DIRECT writing.
    ///
    /// # Errors
    /// `NotFound` when the file is missing and `create` is false.
    async fn open_file(&self, path: &Path, create: bool) -> io::Result<Self::File>;
    async fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Creates one directory (its parent exists). Returns false, creating nothing, when
    /// it exists already.
    async fn create_dir(&self, path: &Path) -> io::Result<bool>;
    async fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Removes an empty directory.
    async fn remove_dir(&self, path: &Path) -> io::Result<()>;
    async fn rename(&self, source: &Path, target: &Path) -> io::Result<()>;
    /// Makes creations, renames and removals in a directory durable.
    async fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Names in a directory (io_uring has no getdents: the blocking thread pool lists
    /// it, off the reactor).
    async fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    /// Runs `task` on the shard's executor, detached (background reads).
    fn spawn(&self, task: impl std::future::Future<Output = ()> + 'static);
    /// Bytes an unprivileged writer can still allocate on the file system of `path`.
    fn available_bytes(&self, path: &Path) -> io::Result<u64>;
}

/// One open file. Clones share the descriptor.
#[allow(async_fn_in_trait)]
pub trait StorageFile: Clone + 'static {
    type Buf: IoBuf;

    /// An aligned buffer of `len` bytes, `len` a multiple of `DMA_ALIGNMENT`. Its
    /// contents are unspecified: callers write every byte they submit (padding too).
    fn alloc_buf(&self, len: usize) -> Self::Buf;
    /// Writes the whole buffer at `pos` (aligned). Returns the bytes written.
    async fn write_at(&self, buf: Self::Buf, pos: u64) -> io::Result<usize>;
    /// Writes the bytes `range` of `buf` (aligned, as `pos`), a buffer the caller keeps
    /// a reference to. The caller writes into it again only through `Rc::get_mut`,
    /// which fails until this write completed and dropped its reference: the bytes
    /// under the device never change, and the next write of the same memory needs no
    /// copy. Returns the bytes written.
    async fn write_shared_at(&self, buf: Rc<Self::Buf>, range: Range<usize>, pos: u64) -> io::Result<usize>;
    /// Reads up to `len` bytes at `pos`; fewer at the end of the file.
    async fn read_at(&self, pos: u64, len: usize) -> io::Result<Bytes>;
    async fn fdatasync(&self) -> io::Result<()>;
    /// Reserves blocks so that the file is at least `len` bytes long (fallocate without
    /// KEEP_SIZE: the size grows, so later writes do not extend the file).
    async fn allocate(&self, len: u64) -> io::Result<()>;
    async fn truncate(&self, len: u64) -> io::Result<()>;
    async fn size(&self) -> io::Result<u64>;
}

/// (total, available) bytes of the file system holding `path`.
pub fn free_space(path: &Path) -> Option<(u64, u64)> {
    let stat = rustix::fs::statvfs(path).ok()?;
    Some((stat.f_blocks.saturating_mul(stat.f_frsize), stat.f_bavail.saturating_mul(stat.f_frsize)))
}

/// Rounds `n` up to the DMA alignment.
pub fn align_up(n: u64) -> u64 {
    n.div_ceil(DMA_ALIGNMENT as u64) * DMA_ALIGNMENT as u64
}

/// Rounds `n` down to the DMA alignment.
pub fn align_down(n: u64) -> u64 {
    n / DMA_ALIGNMENT as u64 * DMA_ALIGNMENT as u64
}

/// Reads a whole file, or `None` when it does not exist.
///
/// # Errors
/// Any I/O error other than a missing file.
pub async fn read_whole<S: Storage>(storage: &S, path: &Path) -> io::Result<Option<Bytes>> {
    let file = match storage.open_file(path, false).await {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let size = file.size().await?;
    Ok(Some(file.read_at(0, size as usize).await?))
}

/// Writes `data` as the whole content of `path` in place (created or cut to it), with
/// no temp file, and fdatasyncs it when `durable`. A crash in between may leave it
/// empty or torn, so only for files nobody reads until they are whole (in a directory
/// being created), or whose readers take a damaged one for a missing one.
///
/// # Errors
/// The first failing step.
pub async fn write_in_place<S: Storage>(storage: &S, path: &Path, data: &[u8], durable: bool) -> io::Result<()> {
    let file = storage.open_file(path, true).await?;
    file.truncate(0).await?;
    let padded = align_up(data.len() as u64) as usize;
    if padded > 0 {
        let mut buf = file.alloc_buf(padded);
        buf.as_bytes_mut()[..data.len()].copy_from_slice(data);
        buf.as_bytes_mut()[data.len()..].fill(0);
        let written = file.write_at(buf, 0).await?;
        if written < padded {
            return Err(io::Error::new(io::ErrorKind::WriteZero, format!("short write of {}", path.display())));
        }
    }
    file.truncate(data.len() as u64).await?;
    if durable {
        file.fdatasync().await?;
    }
    Ok(())
}

/// Replaces `path` atomically with `data`: temp file, write, fsync, rename, fsync of
/// the directory. A crash leaves either the old or the new file, never a mix.
///
/// # Errors
/// The first failing step; the old file is then still in place.
pub async fn write_whole_atomic<S: Storage>(storage: &S, path: &Path, data: &[u8]) -> io::Result<()> {
    write_whole(storage, path, data, true).await
}

/// `write_whole_atomic`, or with `durable` false without its fdatasync and directory
/// sync: the file is then replaced whole for readers and across a process crash, but a
/// power cut may leave the old file, the new one, or an empty or partial one. Only for
/// files recovery checks and rebuilds (a rolled segment's indexes), and a later sync
/// of the directory makes the name durable, as the seal of a roll does.
pub async fn write_whole<S: Storage>(storage: &S, path: &Path, data: &[u8], durable: bool) -> io::Result<()> {
    // Each call gets its own temp file, so two writers of the same file (a roll and
    // housekeeping writing one checkpoint) never write into each other's temp file;
    // the last rename wins, whole. Leftovers end in `.tmp` and recovery removes them.
    static NEXT_TEMP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut temp = path.as_os_str().to_owned();
    temp.push(format!(".{}.tmp", NEXT_TEMP.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    let temp = std::path::PathBuf::from(temp);
    let file = storage.open_file(&temp, true).await?;
    file.truncate(0).await?;
    let padded = align_up(data.len() as u64) as usize;
    if padded > 0 {
        let mut buf = file.alloc_buf(padded);
        buf.as_bytes_mut()[..data.len()].copy_from_slice(data);
        buf.as_bytes_mut()[data.len()..].fill(0);
        let written = file.write_at(buf, 0).await?;
        if written < padded {
            drop(file);
            let _ = storage.remove_file(&temp).await;
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write of {}: {written} of {padded} bytes", temp.display()),
            ));
        }
    }
    file.truncate(data.len() as u64).await?;
    if !durable {
        drop(file);
        return storage.rename(&temp, path).await;
    }
    file.fdatasync().await?;
    drop(file);
    storage.rename(&temp, path).await?;
    storage.sync_dir(dir).await
}

/// Shared syncs of the directories of one shard (`DirSync`), by path.
#[derive(Default)]
pub struct DirSyncs {
    dirs: std::cell::RefCell<std::collections::HashMap<std::path::PathBuf, Rc<DirSync>>>,
}

impl DirSyncs {
    /// Completes once a sync of `dir` that started after this call finished; callers
    /// that ask at the same time share syncs.
    ///
    /// # Errors
    /// That sync's error.
    pub async fn sync<S: Storage>(&self, storage: &S, dir: &Path) -> io::Result<()> {
        let shared =
            self.dirs.borrow_mut().entry(dir.to_path_buf()).or_insert_with(|| Rc::new(DirSync::new(dir))).clone();
        shared.sync(storage).await
    }
}

/// Syncs of one directory shared by everyone who needs one: a caller waits for a sync
/// that started after it asked (so it covers the caller's changes), and callers that
/// ask while one runs share the next. 10,000 partitions created at once then make the
/// data directory's new entries durable in a handful of syncs, not 10,000.
pub struct DirSync {
    dir: std::path::PathBuf,
    state: std::cell::RefCell<DirSyncState>,
    waiters: crate::waiters::Waiters,
}

#[derive(Default)]
struct DirSyncState {
    /// Syncs started and finished so far (the numbers of the last of each).
    started: u64,
    finished: u64,
    /// The last sync that failed, with its error.
    failed: Option<(u64, String)>,
}

impl DirSync {
    pub fn new(dir: impl Into<std::path::PathBuf>) -> DirSync {
        DirSync { dir: dir.into(), state: Default::default(), waiters: Default::default() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Completes once a sync of the directory that started after this call finished.
    ///
    /// # Errors
    /// That sync's error.
    pub async fn sync<S: Storage>(&self, storage: &S) -> io::Result<()> {
        let wanted = self.state.borrow().started + 1;
        loop {
            let start = {
                let mut state = self.state.borrow_mut();
                if state.finished >= wanted {
                    return match &state.failed {
                        Some((number, error)) if *number >= wanted => Err(io::Error::other(error.clone())),
                        _ => Ok(()),
                    };
                }
                // None in flight: this caller runs the next one.
                let idle = state.started == state.finished;
                if idle {
                    state.started += 1;
                }
                idle.then_some(state.started)
            };
            let Some(number) = start else {
                self.waiters.wait(wanted as i64).await;
                continue;
            };
            let result = storage.sync_dir(&self.dir).await;
            {
                let mut state = self.state.borrow_mut();
                state.finished = number;
                if let Err(e) = &result {
                    state.failed = Some((number, e.to_string()));
                }
            }
            self.waiters.wake_upto(number as i64 + 1);
        }
    }
}
