//! A `Storage` that wraps another and injects the faults a disk can produce: EIO and
//! ENOSPC on write, fsync or allocation, torn (short) writes, a crash after a given
//! number of mutating operations, and power loss.
//!
//! Tests hold the `FaultPlan` and arm faults while the engine runs, then reopen the
//! same directory with the plain storage to check what survived.
//!
//! # Crash and power loss
//!
//! A crash (`crash_after_ops`) stops every operation but leaves the disk as the kernel
//! has it: every completed write, rename and directory entry stays, as after a process
//! crash. Power loss keeps less. After `FaultPlan::model_power_loss(root)` the plan
//! keeps a model of what is durable under `root`, and `FaultPlan::power_loss` rewrites
//! `root` to what a power cut at that moment could leave. The model assumes:
//!
//! - A file's data and size are durable as of its last successful fdatasync, which
//!   covers the writes, truncations and allocations that had completed when it was
//!   issued (a write still in flight is not covered).
//! - Of what happened to a file since, any subset may land: each write whole, not at
//!   all, or torn (some of its `SECTOR_BYTES` sectors new, the others old); each size
//!   change (truncate, allocate, the growth of a write past the end) independently, so
//!   a file may grow while the data in the new part reads as zeros.
//! - A sector write is atomic: after a power cut a sector holds its old or its new
//!   bytes, never a mix or garbage. This is the atomic write unit NVMe and SCSI
//!   devices guarantee for one logical block; devices that can leave a partly written
//!   sector are not supported (ARCHITECTURE.md, "Power loss").
//! - A directory entry (a file or directory created, removed or renamed) is durable
//!   once its parent directory is synced (`sync_dir`); fdatasync of a new file does not
//!   make its name durable (ext4, XFS). Of a directory's unsynced entry operations a
//!   prefix survives, as a journal commits them in order; directories are independent.
//!   A rename within one directory is atomic; across directories it is a removal and a
//!   creation that survive independently (the engine renames within one directory).
//! - `root` itself is durable. A file whose removal is undone comes back with its
//!   durable content: the model keeps the content of every file it has seen.
//!
//! With the model on, the operation at `crash_after_ops` is the one in flight when
//! power goes: a write there may land, in part or whole; a sync there covers nothing.
//! Syncs of modelled files and directories do not reach the disk: the model decides
//! what is durable, and real syncs would only cost time.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;

use super::{IoBuf, Storage, StorageFile};

/// The unit a power cut tears writes at: each sector of a write lands whole or not.
pub const SECTOR_BYTES: usize = 512;

/// What to break, shared by a `FaultStorage` and all files it opened.
#[derive(Default, Debug)]
pub struct FaultPlan {
    /// Fail every data write with this errno (EIO = 5, ENOSPC = 28) while set.
    pub fail_writes: Cell<Option<i32>>,
    /// Fail every fdatasync with this errno while set.
    pub fail_syncs: Cell<Option<i32>>,
    /// Fail every read of at least `.0` bytes with errno `.1` while set.
    pub fail_reads: Cell<Option<(usize, i32)>>,
    /// Fail every allocation (fallocate) with this errno while set.
    pub fail_allocates: Cell<Option<i32>>,
    /// Write only the first half of the next write, then report EIO (a torn write).
    pub tear_next_write: Cell<bool>,
    /// Mutating operations allowed before a simulated crash (or power cut, with the
    /// power-loss model on); `None` for no crash. Mutating operations are writes,
    /// syncs, size changes, file creation (open with `create`) and directory changes.
    pub crash_after_ops: Cell<Option<u64>>,
    /// Reported free space, overriding the real file system's.
    pub available_bytes: Cell<Option<u64>>,
    /// Reads of at least this many bytes complete this much later than they read (a
    /// slow device, or a read that loses a race with a change of the log).
    pub slow_reads: Cell<Option<(usize, std::time::Duration)>>,
    /// Every fdatasync of a file completes this much later (a journal commit holding
    /// it up); what it covers is fixed when it is issued.
    pub slow_syncs: Cell<Option<std::time::Duration>>,
    /// Every write completes this much later than it landed (a device that cannot keep
    /// up).
    pub slow_writes: Cell<Option<std::time::Duration>>,
    /// Every allocation (fallocate) completes this much later (a file system slow to
    /// find free extents).
    pub slow_allocates: Cell<Option<std::time::Duration>>,
    /// Allocations started.
    pub allocates: Cell<u64>,
    ops: Cell<u64>,
    syncs: Cell<u64>,
    crashed: Cell<bool>,
    /// What is durable under a root directory, when power loss is modelled.
    model: RefCell<Option<Model>>,
}

/// Which of the operations not made durable a power cut lets land.
#[derive(Clone, Copy, Debug)]
pub enum PowerCut {
    /// Drawn from the seed: each unsynced write lands whole, tears or is lost, each
    /// size change lands or not, and a prefix of each directory's unsynced entry
    /// operations survives.
    Seeded(u64),
    /// Only what was synced survives: every unsynced write, size change and directory
    /// entry operation is lost.
    SyncedOnly,
}

/// What a power cut did to the operations that were not durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PowerLossReport {
    /// Unsynced writes that landed whole.
    pub writes_landed: u64,
    /// Unsynced writes torn: each of their sectors landed or not.
    pub writes_torn: u64,
    /// Unsynced writes of which nothing landed.
    pub writes_lost: u64,
    /// Unsynced truncations and allocations that did not land.
    pub size_changes_lost: u64,
    /// Unsynced directory entry operations that did not survive.
    pub dir_ops_lost: u64,
}

impl FaultPlan {
    /// A plan that breaks nothing until armed.
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

    /// fdatasync and directory syncs the engine asked for, up to a crash.
    pub fn syncs(&self) -> u64 {
        self.syncs.get()
    }

    /// Starts modelling durability under `root` (see the module docs). Everything
    /// under `root` now counts as durable. Call it before the engine runs; it reads
    /// the tree with blocking calls.
    ///
    /// # Errors
    /// Any error reading the tree.
    pub fn model_power_loss(&self, root: &Path) -> io::Result<()> {
        *self.model.borrow_mut() = Some(Model::snapshot(root)?);
        Ok(())
    }

    /// Cuts the power: every later operation fails, and the modelled root is rewritten
    /// to what the cut leaves, as `cut` chooses. Blocking (tests only); call it when no
    /// operation is in flight on the storage.
    ///
    /// # Errors
    /// `Other` when the model is off; any error rewriting the directory.
    pub fn power_loss(&self, cut: PowerCut) -> io::Result<PowerLossReport> {
        self.crashed.set(true);
        let model = self.model.borrow();
        let model = model.as_ref().ok_or_else(|| io::Error::other("power loss needs model_power_loss"))?;
        let mut chooser = match cut {
            PowerCut::Seeded(seed) => Chooser::Seeded(seed),
            PowerCut::SyncedOnly => Chooser::SyncedOnly,
        };
        for entry in std::fs::read_dir(&model.root)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                std::fs::remove_dir_all(entry.path())?;
            } else {
                std::fs::remove_file(entry.path())?;
            }
        }
        let mut report = PowerLossReport::default();
        model.materialize(ROOT, &model.root, &mut chooser, &mut report)?;
        Ok(report)
    }

    /// A process crash and restart: operations work again and `crash_after_ops` is
    /// cleared. The model keeps what was not durable yet, as the page cache outlives a
    /// process, except writes that never completed (the one the crash interrupted was
    /// never issued), so a power cut later can still lose what the crashed run left.
    pub fn restart(&self) {
        self.crashed.set(false);
        self.crash_after_ops.set(None);
        self.with_model(Model::restart);
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

    /// Runs `f` on the model when it is on. Never held across an await.
    fn with_model<R>(&self, f: impl FnOnce(&mut Model) -> R) -> Option<R> {
        self.model.borrow_mut().as_mut().map(f)
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

/// The storage that injects what `FaultPlan` asks for into `inner`.
#[derive(Clone)]
pub struct FaultStorage<S: Storage> {
    inner: S,
    plan: Rc<FaultPlan>,
}

impl<S: Storage> FaultStorage<S> {
    /// Wraps `inner`; `plan` is shared with the test that arms it.
    pub fn new(inner: S, plan: Rc<FaultPlan>) -> Self {
        FaultStorage { inner, plan }
    }
}

/// A file of a `FaultStorage`.
#[derive(Clone)]
pub struct FaultFile<F: StorageFile> {
    inner: F,
    plan: Rc<FaultPlan>,
    /// The file in the power-loss model; `None` when the model is off.
    node: Option<NodeId>,
}

impl<S: Storage> Storage for FaultStorage<S> {
    type File = FaultFile<S::File>;

    async fn open_file(&self, path: &Path, create: bool) -> io::Result<Self::File> {
        if create {
            self.plan.mutate()?;
        } else {
            self.plan.check_crashed()?;
        }
        let inner = self.inner.open_file(path, create).await?;
        let node = self.plan.with_model(|m| m.file_opened(path)).transpose()?.flatten();
        Ok(FaultFile { inner, plan: self.plan.clone(), node })
    }

    async fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.plan.mutate()?;
        self.inner.create_dir_all(path).await?;
        self.plan.with_model(|m| m.dir_created(path)).transpose()?;
        Ok(())
    }

    async fn create_dir(&self, path: &Path) -> io::Result<bool> {
        self.plan.mutate()?;
        let created = self.inner.create_dir(path).await?;
        if created {
            self.plan.with_model(|m| m.dir_created(path)).transpose()?;
        }
        Ok(created)
    }

    async fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.plan.mutate()?;
        self.inner.remove_file(path).await?;
        self.plan.with_model(|m| m.removed(path));
        Ok(())
    }

    async fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.plan.mutate()?;
        self.inner.remove_dir(path).await?;
        self.plan.with_model(|m| m.removed(path));
        Ok(())
    }

    async fn rename(&self, source: &Path, target: &Path) -> io::Result<()> {
        self.plan.mutate()?;
        self.inner.rename(source, target).await?;
        self.plan.with_model(|m| m.renamed(source, target));
        Ok(())
    }

    async fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.plan.mutate()?;
        self.plan.syncs.set(self.plan.syncs.get() + 1);
        errno(self.plan.fail_syncs.get())?;
        // The model decides what is durable; the real disk's sync would only cost time.
        match self.plan.with_model(|m| m.dir_synced(path)) {
            Some(true) => Ok(()),
            _ => self.inner.sync_dir(path).await,
        }
    }

    async fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.plan.check_crashed()?;
        self.inner.list_dir(path).await
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + 'static) {
        self.inner.spawn(task);
    }

    fn available_bytes(&self, path: &Path) -> io::Result<u64> {
        match self.plan.available_bytes.get() {
            Some(bytes) => Ok(bytes),
            None => self.inner.available_bytes(path),
        }
    }
}

impl<F: StorageFile> FaultFile<F> {
    /// Records a write in the model before it is submitted; returns its id.
    fn write_started(&self, pos: u64, data: &[u8]) -> Option<u64> {
        let node = self.node?;
        self.plan.with_model(|m| m.file_changed(node, FileOp::Write { pos, data: data.to_vec() }, false))
    }

    /// Records a completed size change in the model.
    fn size_changed(&self, op: FileOp) {
        if let Some(node) = self.node {
            self.plan.with_model(|m| m.file_changed(node, op, true));
        }
    }
}

impl<F: StorageFile> StorageFile for FaultFile<F> {
    type Buf = F::Buf;

    fn alloc_buf(&self, len: usize) -> Self::Buf {
        self.inner.alloc_buf(len)
    }

    async fn write_at(&self, buf: Self::Buf, pos: u64) -> io::Result<usize> {
        let len = buf.as_bytes().len();
        self.write_shared_at(Rc::new(buf), 0..len, pos).await
    }

    async fn write_shared_at(&self, buf: Rc<Self::Buf>, range: Range<usize>, pos: u64) -> io::Result<usize> {
        let was_crashed = self.plan.crashed();
        if let Err(e) = self.plan.mutate() {
            if !was_crashed {
                // The write the power cut interrupted: any part of it may have landed.
                self.write_started(pos, &buf.as_bytes()[range]);
            }
            return Err(e);
        }
        errno(self.plan.fail_writes.get())?;
        if self.plan.tear_next_write.replace(false) {
            // Keep the first half (rounded to a block) and lose the rest, as a device
            // that lost power mid-write may.
            let kept = super::align_down(range.len() as u64 / 2) as usize;
            if kept > 0 {
                let mut head = self.inner.alloc_buf(kept);
                head.as_bytes_mut().copy_from_slice(&buf.as_bytes()[range.start..range.start + kept]);
                let id = self.write_started(pos, head.as_bytes());
                self.inner.write_at(head, pos).await?;
                self.complete(id);
            }
            return Err(io::Error::from_raw_os_error(5));
        }
        let id = self.write_started(pos, &buf.as_bytes()[range.clone()]);
        let written = self.inner.write_shared_at(buf, range, pos).await?;
        self.complete(id);
        if let Some(delay) = self.plan.slow_writes.get() {
            glommio::timer::sleep(delay).await;
        }
        Ok(written)
    }

    async fn read_at(&self, pos: u64, len: usize) -> io::Result<Bytes> {
        self.plan.check_crashed()?;
        errno(self.plan.fail_reads.get().filter(|&(min_len, _)| len >= min_len).map(|(_, code)| code))?;
        let read = self.inner.read_at(pos, len).await;
        // The bytes are read now; the reader sees them later.
        if let Some((_, delay)) = self.plan.slow_reads.get().filter(|&(min_len, _)| len >= min_len) {
            glommio::timer::sleep(delay).await;
        }
        read
    }

    async fn fdatasync(&self) -> io::Result<()> {
        self.plan.mutate()?;
        self.plan.syncs.set(self.plan.syncs.get() + 1);
        errno(self.plan.fail_syncs.get())?;
        let synced = match self.node {
            None => self.inner.fdatasync().await,
            // As for directories, the model decides: the sync covers the writes
            // completed before it was issued, and takes no time, so nothing completes
            // meanwhile (a slow sync only reports late).
            Some(node) => {
                self.plan.with_model(|m| m.file_synced(node));
                Ok(())
            }
        };
        if let Some(delay) = self.plan.slow_syncs.get() {
            glommio::timer::sleep(delay).await;
        }
        synced
    }

    async fn allocate(&self, len: u64) -> io::Result<()> {
        self.plan.mutate()?;
        errno(self.plan.fail_allocates.get())?;
        self.plan.allocates.set(self.plan.allocates.get() + 1);
        if let Some(delay) = self.plan.slow_allocates.get() {
            glommio::timer::sleep(delay).await;
        }
        self.inner.allocate(len).await?;
        self.size_changed(FileOp::Allocate(len));
        Ok(())
    }

    async fn truncate(&self, len: u64) -> io::Result<()> {
        self.plan.mutate()?;
        self.inner.truncate(len).await?;
        self.size_changed(FileOp::SetLen(len));
        Ok(())
    }

    async fn size(&self) -> io::Result<u64> {
        self.plan.check_crashed()?;
        self.inner.size().await
    }
}

impl<F: StorageFile> FaultFile<F> {
    /// Marks a write complete, so that a later fdatasync covers it.
    fn complete(&self, id: Option<u64>) {
        if let (Some(node), Some(id)) = (self.node, id) {
            self.plan.with_model(|m| m.write_completed(node, id));
        }
    }
}

type NodeId = usize;

/// The model's node of the root directory.
const ROOT: NodeId = 0;

#[path = "fault_model.rs"]
mod model;
use model::*;

#[cfg(test)]
mod tests {
    use super::*;

    // A torn write leaves each sector old or new; size changes cut and zero the tail.
    #[test]
    fn image_tears_at_sectors() {
        let mut image = Image::from_bytes(&[1; 1000]);
        assert_eq!(image.len, 1000);
        let landed = image.write(512, &[2; 1024], |index| index == 2);
        assert!(landed);
        let bytes = image.to_bytes();
        assert_eq!(bytes.len(), 1536);
        assert!(bytes[..1000].iter().all(|&b| b == 1));
        assert!(bytes[1000..1024].iter().all(|&b| b == 0));
        assert!(bytes[1024..].iter().all(|&b| b == 2));
        image.set_len(700);
        image.len = 1200;
        let bytes = image.to_bytes();
        assert!(bytes[..700].iter().all(|&b| b == 1));
        assert!(bytes[700..].iter().all(|&b| b == 0));
    }

    // Of a directory's unsynced operations only a prefix applies, and a rename is one
    // operation.
    #[test]
    fn dir_ops_apply_in_order() {
        let mut entries = BTreeMap::new();
        for op in [DirOp::Link("a.tmp".into(), 1), DirOp::Rename("a.tmp".into(), "a".into()), DirOp::Unlink("b".into())]
        {
            op.apply(&mut entries);
        }
        assert_eq!(entries, BTreeMap::from([("a".to_owned(), 1)]));
    }
}
