//! `Storage` on glommio: O_DIRECT files driven by the shard's io_uring ring.
//!
//! Must be used from inside a glommio executor. glommio allocates DMA buffers from
//! memory registered with the ring, so `write_at` of a buffer from `alloc_buf` is a
//! fixed-buffer write with no copy.
//!
//! A read is served from the buffer the device wrote into, with no copy: the `Bytes`
//! it returns own glommio's read buffer (`ShardRead`). That buffer's handles are
//! shard-local (`Rc`), while the bytes may travel to a connection on another shard; a
//! last reference dropped there sends the buffer home, untouched, and its shard
//! releases it.

#![allow(unsafe_code)]

use std::io;
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use glommio::io::{DmaBuffer, DmaFile, OpenOptions, ReadResult};

use super::open_files::{self, Slot};
use super::{IoBuf, Storage, StorageFile};

/// The production storage: real files through io_uring.
#[derive(Clone, Copy, Debug, Default)]
pub struct DmaStorage;

/// A file by path, whose descriptor the shard may close while it is idle and opens
/// again on its next use (`open_files`). Clones share the descriptor.
#[derive(Clone)]
pub struct DmaStorageFile {
    handle: Rc<Handle>,
}

struct Handle {
    /// Absolute (see `absolute`).
    path: PathBuf,
    /// The file first opened: a reopen that finds another one under the path refuses it.
    inode: u64,
    slot: Rc<Slot>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        // glommio closes a dropped file on its ring.
        drop(self.slot.release());
    }
}

impl DmaStorageFile {
    /// The open descriptor, opened again first when the shard closed it.
    async fn file(&self) -> io::Result<Rc<DmaFile>> {
        let handle = &self.handle;
        if let Some(file) = handle.slot.get() {
            return Ok(file);
        }
        let room = open_files::make_room().await;
        let file = OpenOptions::new().read(true).write(true).dma_open(&handle.path).await.map_err(to_io)?;
        if file.inode() != handle.inode {
            let _ = file.close().await;
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} was replaced since it was opened", handle.path.display()),
            ));
        }
        open_files::count_reopen();
        let (file, surplus) = handle.slot.put(file);
        drop(room);
        if let Some(surplus) = surplus {
            let _ = surplus.close().await;
        }
        Ok(file)
    }
}

/// Transparent, so that an `Rc<DmaBuf>` is an `Rc<DmaBuffer>` for glommio
/// (`write_shared_at`).
#[repr(transparent)]
pub struct DmaBuf(DmaBuffer);

impl IoBuf for DmaBuf {
    fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.0.as_bytes_mut()
    }
    fn truncate(&mut self, len: usize) {
        debug_assert_eq!(len % crate::limits::DMA_ALIGNMENT, 0);
        self.0.trim_to_size(len);
    }
}

/// glommio opens directories relative to descriptor -1 rather than the working
/// directory, so every path handed to it is made absolute first.
fn absolute(path: &Path) -> io::Result<PathBuf> {
    std::path::absolute(path)
}

fn to_io(e: glommio::GlommioError<()>) -> io::Error {
    match e {
        glommio::GlommioError::IoError(e) => e,
        glommio::GlommioError::EnhancedIoError { source, .. } => source,
        other => io::Error::other(other.to_string()),
    }
}

thread_local! {
    /// Devices whose io_uring poll-ring support this thread has probed correctly.
    static PROBED_DEVICES: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// glommio decides once per thread and device whether O_DIRECT I/O goes to its
/// IOPOLL ring, by reading the first block of the first file opened there. When that
/// file is empty the read ends at EOF without reaching the device, the probe passes,
/// and every later read fails with EOPNOTSUPP on devices without polled I/O (virtio
/// disks). So before the first open on a device, open a file that holds a block of
/// data: the probe then exercises the device and answers correctly.
async fn probe_device(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let device = std::fs::metadata(dir)?.dev();
    if PROBED_DEVICES.with(|p| p.borrow().contains(&device)) {
        return Ok(());
    }
    // A name per probe: two files of one directory opened at once probe concurrently.
    static NEXT_PROBE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT_PROBE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let probe = dir.join(format!(".skein-iopoll-probe-{}-{n}", std::process::id()));
    // Written and synced on the blocking thread pool: an fsync must not stall the reactor.
    let written = probe.clone();
    glommio::executor()
        .spawn_blocking(move || {
            std::fs::write(&written, [0xa5u8; crate::limits::DMA_ALIGNMENT])?;
            std::fs::File::open(&written)?.sync_all()
        })
        .await?;
    let result = OpenOptions::new().read(true).dma_open(&probe).await.map_err(to_io);
    let _ = glommio::io::remove(&probe).await;
    result?.close().await.map_err(to_io)?;
    PROBED_DEVICES.with(|p| p.borrow_mut().push(device));
    Ok(())
}

impl Storage for DmaStorage {
    type File = DmaStorageFile;

    async fn open_file(&self, path: &Path, create: bool) -> io::Result<DmaStorageFile> {
        let path = absolute(path)?;
        probe_device(path.parent().unwrap_or(Path::new("/"))).await?;
        let room = open_files::make_room().await;
        let file = OpenOptions::new().read(true).write(true).create(create).dma_open(&path).await.map_err(to_io)?;
        let inode = file.inode();
        let slot = Rc::new(Slot::default());
        slot.put(file);
        drop(room);
        Ok(DmaStorageFile { handle: Rc::new(Handle { path, inode, slot }) })
    }

    async fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        // glommio has an async mkdir of one directory (`Directory::create`) but none of
        // a path; the blocking thread pool runs std's, off the reactor.
        let path = path.to_owned();
        glommio::executor().spawn_blocking(move || std::fs::create_dir_all(path)).await
    }

    async fn create_dir(&self, path: &Path) -> io::Result<bool> {
        // Through the ring (openat, then mkdirat), not the blocking thread pool, which
        // thousands of partitions created at once would queue on. The caller holds the
        // partition's lock, so nothing creates it in between.
        let path = absolute(path)?;
        match glommio::io::Directory::open(&path).await.map_err(to_io) {
            Ok(dir) => {
                dir.close().await.map_err(to_io)?;
                Ok(false)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                glommio::io::Directory::create(&path).await.map_err(to_io)?.close().await.map_err(to_io)?;
                Ok(true)
            }
            Err(e) => Err(e),
        }
    }

    async fn remove_file(&self, path: &Path) -> io::Result<()> {
        glommio::io::remove(absolute(path)?).await.map_err(to_io)
    }

    async fn remove_dir(&self, path: &Path) -> io::Result<()> {
        // glommio has no rmdir: the blocking thread pool runs it, off the reactor.
        let path = path.to_owned();
        glommio::executor().spawn_blocking(move || std::fs::remove_dir(path)).await
    }

    async fn rename(&self, source: &Path, target: &Path) -> io::Result<()> {
        glommio::io::rename(absolute(source)?, absolute(target)?).await.map_err(to_io)
    }

    async fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let dir = glommio::io::Directory::open(absolute(path)?).await.map_err(to_io)?;
        dir.sync().await.map_err(to_io)?;
        dir.close().await.map_err(to_io)
    }

    async fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let path = path.to_owned();
        glommio::executor()
            .spawn_blocking(move || {
                let mut names = Vec::new();
                for entry in std::fs::read_dir(path)? {
                    if let Some(name) = entry?.file_name().to_str() {
                        names.push(name.to_owned());
                    }
                }
                Ok(names)
            })
            .await
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + 'static) {
        glommio::spawn_local(task).detach();
    }

    fn available_bytes(&self, path: &Path) -> io::Result<u64> {
        let stat = rustix::fs::statvfs(path)?;
        Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
    }
}

impl StorageFile for DmaStorageFile {
    type Buf = DmaBuf;

    fn alloc_buf(&self, len: usize) -> DmaBuf {
        debug_assert_eq!(len % crate::limits::DMA_ALIGNMENT, 0);
        DmaBuf(glommio::allocate_dma_buffer(len))
    }

    async fn write_at(&self, buf: DmaBuf, pos: u64) -> io::Result<usize> {
        self.file().await?.write_at(buf.0, pos).await.map_err(to_io)
    }

    async fn write_shared_at(&self, buf: Rc<DmaBuf>, range: std::ops::Range<usize>, pos: u64) -> io::Result<usize> {
        // SAFETY: `DmaBuf` is `repr(transparent)` over `DmaBuffer`, so the allocation
        // behind the `Rc` holds a `DmaBuffer` laid out exactly as `Rc<DmaBuffer>` expects;
        // the count moves from one handle to the other, unchanged.
        let buf: Rc<DmaBuffer> = unsafe { Rc::from_raw(Rc::into_raw(buf).cast::<DmaBuffer>()) };
        self.file().await?.write_rc_range_at(buf, range, pos).await.map_err(to_io)
    }

    async fn read_at(&self, pos: u64, len: usize) -> io::Result<Bytes> {
        if len == 0 {
            return Ok(Bytes::new());
        }
        let home = Returns::here();
        home.release();
        let read = self.file().await?.read_at(pos, len).await.map_err(to_io)?;
        Ok(Bytes::from_owner(ShardRead { read: ManuallyDrop::new(read), home }))
    }

    async fn fdatasync(&self) -> io::Result<()> {
        self.file().await?.fdatasync().await.map_err(to_io)
    }

    async fn allocate(&self, len: u64) -> io::Result<()> {
        self.file().await?.pre_allocate(len, false).await.map_err(to_io)
    }

    async fn truncate(&self, len: u64) -> io::Result<()> {
        self.file().await?.truncate(len).await.map_err(to_io)
    }

    async fn size(&self) -> io::Result<u64> {
        self.file().await?.file_size().await.map_err(to_io)
    }
}

/// A finished read's buffer, owned by the `Bytes` that serve it.
struct ShardRead {
    read: ManuallyDrop<ReadResult>,
    home: Arc<Returns>,
}

// SAFETY: once the read has completed, its bytes are plain memory that nothing writes
// again, so they may be read from any thread (`Bytes` takes the slice once, on the
// home shard, at creation). The `ReadResult`'s handles (`Rc`s into the home shard's
// reactor and buffer pool) are touched only on the home thread: `drop` releases the
// buffer there, and anywhere else moves it, untouched, into the home's queue.
unsafe impl Send for ShardRead {}

impl AsRef<[u8]> for ShardRead {
    fn as_ref(&self) -> &[u8] {
        &self.read
    }
}

impl Drop for ShardRead {
    fn drop(&mut self) {
        // SAFETY: `read` is taken once, here, and never used again.
        let read = unsafe { ManuallyDrop::take(&mut self.read) };
        match Returns::is_home(&self.home) {
            true => drop(read),
            false => self.home.send(read),
        }
    }
}

/// A read buffer on its way home, not to be touched on the way (only dropped).
struct Returned(#[allow(dead_code)] ReadResult);

// SAFETY: a `Returned` is only moved between threads, never used, and dropped only on
// its home thread (`Returns::release`) or leaked (`Returns`'s drop).
unsafe impl Send for Returned {}

/// One shard's read buffers released on other shards, waiting to be dropped at home.
/// The lock is the shard's own and taken by a drop elsewhere only for a push.
struct Returns {
    queue: Mutex<Vec<Returned>>,
    pending: AtomicBool,
}

thread_local! {
    static HOME: std::cell::OnceCell<Arc<Returns>> = const { std::cell::OnceCell::new() };
}

/// How often a shard releases the buffers sent home even when it reads nothing.
const RETURNS_RELEASE_INTERVAL: Duration = Duration::from_millis(100);

impl Returns {
    /// This shard's queue; the first call starts its periodic release.
    fn here() -> Arc<Returns> {
        HOME.with(|home| {
            home.get_or_init(|| {
                let returns = Arc::new(Returns { queue: Mutex::new(Vec::new()), pending: AtomicBool::new(false) });
                let periodic = returns.clone();
                glommio::spawn_local(async move {
                    loop {
                        glommio::timer::sleep(RETURNS_RELEASE_INTERVAL).await;
                        periodic.release();
                    }
                })
                .detach();
                returns
            })
            .clone()
        })
    }

    fn is_home(returns: &Arc<Returns>) -> bool {
        HOME.try_with(|home| home.get().is_some_and(|h| Arc::ptr_eq(h, returns))).unwrap_or(false)
    }

    fn send(&self, read: ReadResult) {
        let mut queue = self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        queue.push(Returned(read));
        self.pending.store(true, Ordering::Release);
    }

    /// Drops the buffers sent home. Called on the home thread only.
    fn release(&self) {
        if !self.pending.swap(false, Ordering::Acquire) {
            return;
        }
        let returned = std::mem::take(&mut *self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        drop(returned);
    }
}

/// Read buffers this shard has been sent home and not yet released (for tests).
pub fn returned_pending() -> usize {
    HOME.with(|home| home.get().map_or(0, |r| r.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()))
}

impl Drop for Returns {
    /// The last handle can go on any thread, after the home shard has stopped: the
    /// buffers still queued are leaked, never dropped away from home.
    fn drop(&mut self) {
        let queue = self.queue.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        for returned in queue.drain(..) {
            std::mem::forget(returned);
        }
    }
}
