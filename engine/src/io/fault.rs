//! A `Storage` that wraps another and injects the faults a disk can produce: EIO and
//! ENOSPC on write, fsync or allocation, torn (short) writes, and a crash after a
//! given number of mutating operations, after which every operation fails.
//!
//! Tests hold the `FaultPlan` and arm faults while the engine runs, then reopen the
//! same directory with the plain storage to check what survived.

use std::cell::Cell;
use std::io;
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;

use super::{IoBuf, Storage, StorageFile};

/// What to break, shared by a `FaultStorage` and all files it opened.
#[derive(Default, Debug)]
pub struct FaultPlan {
    /// Fail every data write with this errno (EIO = 5, ENOSPC = 28) while set.
    pub fail_writes: Cell<Option<i32>>,
    /// Fail every fdatasync with this errno while set.
    pub fail_syncs: Cell<Option<i32>>,
    /// Fail every allocation (fallocate) with this errno while set.
    pub fail_allocates: Cell<Option<i32>>,
    /// Write only the first half of the next write, then report EIO (a torn write).
    pub tear_next_write: Cell<bool>,
    /// Mutating operations allowed before a simulated crash; `None` for no crash.
    pub crash_after_ops: Cell<Option<u64>>,
    /// Reported free space, overriding the real file system's.
    pub available_bytes: Cell<Option<u64>>,
    ops: Cell<u64>,
    crashed: Cell<bool>,
}

impl FaultPlan {
    pub fn new() -> Rc<FaultPlan> {
        Rc::new(FaultPlan::default())
    }

    /// Whether the simulated crash has happened.
    pub fn crashed(&self) -> bool {
        self.crashed.get()
    }

    /// Mutating operations seen so far.
    pub fn ops(&self) -> u64 {
        self.ops.get()
    }

    /// Counts a mutating operation, failing it if the crash point has passed.
    fn mutate(&self) -> io::Result<()> {
        self.check_crashed()?;
        let n = self.ops.get() + 1;
        self.ops.set(n);
        if let Some(limit) = self.crash_after_ops.get() {
            if n > limit {
                self.crashed.set(true);
                return Err(crash_error());
            }
        }
        Ok(())
    }

    fn check_crashed(&self) -> io::Result<()> {
        if self.crashed.get() {
            return Err(crash_error());
        }
        Ok(())
    }
}

fn crash_error() -> io::Error {
    io::Error::other("simulated crash")
}

fn errno(code: Option<i32>) -> io::Result<()> {
    match code {
        Some(code) => Err(io::Error::from_raw_os_error(code)),
        None => Ok(()),
    }
}

#[derive(Clone)]
pub struct FaultStorage<S: Storage> {
    inner: S,
    plan: Rc<FaultPlan>,
}

impl<S: Storage> FaultStorage<S> {
    pub fn new(inner: S, plan: Rc<FaultPlan>) -> Self {
        FaultStorage { inner, plan }
    }
}

#[derive(Clone)]
pub struct FaultFile<F: StorageFile> {
    inner: F,
    plan: Rc<FaultPlan>,
}

impl<S: Storage> Storage for FaultStorage<S> {
    type File = FaultFile<S::File>;

    async fn open_file(&self, path: &Path, create: bool) -> io::Result<Self::File> {
        self.plan.check_crashed()?;
        let inner = self.inner.open_file(path, create).await?;
        Ok(FaultFile { inner, plan: self.plan.clone() })
    }

    async fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.plan.mutate()?;
        self.inner.create_dir_all(path).await
    }

    async fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.plan.mutate()?;
        self.inner.remove_file(path).await
    }

    async fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.plan.mutate()?;
        self.inner.remove_dir(path).await
    }

    async fn rename(&self, source: &Path, target: &Path) -> io::Result<()> {
        self.plan.mutate()?;
        self.inner.rename(source, target).await
    }

    async fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.plan.mutate()?;
        errno(self.plan.fail_syncs.get())?;
        self.inner.sync_dir(path).await
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.plan.check_crashed()?;
        self.inner.list_dir(path)
    }

    fn available_bytes(&self, path: &Path) -> io::Result<u64> {
        match self.plan.available_bytes.get() {
            Some(bytes) => Ok(bytes),
            None => self.inner.available_bytes(path),
        }
    }
}

impl<F: StorageFile> StorageFile for FaultFile<F> {
    type Buf = F::Buf;

    fn alloc_buf(&self, len: usize) -> Self::Buf {
        self.inner.alloc_buf(len)
    }

    async fn write_at(&self, mut buf: Self::Buf, pos: u64) -> io::Result<usize> {
        self.plan.mutate()?;
        errno(self.plan.fail_writes.get())?;
        if self.plan.tear_next_write.replace(false) {
            // Keep the first half (rounded to a block) and lose the rest, as a device
            // that lost power mid-write may.
            let len = buf.as_bytes().len();
            let kept = super::align_down(len as u64 / 2) as usize;
            buf.as_bytes_mut()[kept..].fill(0);
            if kept > 0 {
                let mut head = self.inner.alloc_buf(kept);
                head.as_bytes_mut().copy_from_slice(&buf.as_bytes()[..kept]);
                self.inner.write_at(head, pos).await?;
            }
            return Err(io::Error::from_raw_os_error(5));
        }
        self.inner.write_at(buf, pos).await
    }

    async fn read_at(&self, pos: u64, len: usize) -> io::Result<Bytes> {
        self.plan.check_crashed()?;
        self.inner.read_at(pos, len).await
    }

    async fn fdatasync(&self) -> io::Result<()> {
        self.plan.mutate()?;
        errno(self.plan.fail_syncs.get())?;
        self.inner.fdatasync().await
    }

    async fn allocate(&self, len: u64) -> io::Result<()> {
        self.plan.mutate()?;
        errno(self.plan.fail_allocates.get())?;
        self.inner.allocate(len).await
    }

    async fn truncate(&self, len: u64) -> io::Result<()> {
        self.plan.mutate()?;
        self.inner.truncate(len).await
    }

    async fn size(&self) -> io::Result<u64> {
        self.plan.check_crashed()?;
        self.inner.size().await
    }
}
