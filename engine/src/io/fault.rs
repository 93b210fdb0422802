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

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.plan.check_crashed()?;
        self.inner.list_dir(path)
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

/// Durable and current state of every file and directory seen under a root.
#[derive(Debug)]
struct Model {
    root: PathBuf,
    nodes: Vec<Node>,
    next_op: u64,
}

#[derive(Debug)]
enum Node {
    File(FileNode),
    Dir(DirNode),
}

#[derive(Debug, Default)]
struct FileNode {
    /// Content and size as of the last fdatasync.
    durable: Image,
    /// Changes since, in the order they were issued.
    pending: Vec<PendingOp>,
}

#[derive(Debug)]
struct PendingOp {
    id: u64,
    completed: bool,
    op: FileOp,
}

#[derive(Debug)]
enum FileOp {
    Write {
        pos: u64,
        data: Vec<u8>,
    },
    /// `truncate`: the size becomes exactly this.
    SetLen(u64),
    /// `allocate`: the size becomes at least this.
    Allocate(u64),
}

#[derive(Debug, Default)]
struct DirNode {
    /// Entries as the file system shows them now.
    current: BTreeMap<String, NodeId>,
    /// Entries as of the last directory sync.
    durable: BTreeMap<String, NodeId>,
    /// Entry operations since, in order.
    pending: Vec<DirOp>,
}

#[derive(Debug)]
enum DirOp {
    Link(String, NodeId),
    Unlink(String),
    Rename(String, String),
}

impl DirOp {
    fn apply(&self, entries: &mut BTreeMap<String, NodeId>) {
        match self {
            DirOp::Link(name, node) => {
                entries.insert(name.clone(), *node);
            }
            DirOp::Unlink(name) => {
                entries.remove(name);
            }
            DirOp::Rename(source, target) => {
                if let Some(node) = entries.remove(source) {
                    entries.insert(target.clone(), node);
                }
            }
        }
    }
}

/// A file's content as sectors; missing sectors read as zeros.
#[derive(Debug, Default, Clone)]
struct Image {
    len: u64,
    sectors: BTreeMap<u64, Box<[u8]>>,
}

impl Image {
    fn from_bytes(bytes: &[u8]) -> Image {
        let mut image = Image::default();
        image.write(0, bytes, |_| true);
        image
    }

    /// Writes the sectors of `data` at `pos` for which `lands` (given the sector
    /// index) holds; returns whether any landed. The size grows to cover them.
    fn write(&mut self, pos: u64, data: &[u8], mut lands: impl FnMut(u64) -> bool) -> bool {
        let sector = SECTOR_BYTES as u64;
        let end = pos + data.len() as u64;
        let mut landed = false;
        let mut at = pos;
        while at < end {
            let index = at / sector;
            let to = ((index + 1) * sector).min(end);
            if lands(index) {
                let bytes = self.sectors.entry(index).or_insert_with(|| vec![0; SECTOR_BYTES].into_boxed_slice());
                let from = (at - index * sector) as usize;
                bytes[from..from + (to - at) as usize].copy_from_slice(&data[(at - pos) as usize..(to - pos) as usize]);
                self.len = self.len.max(to);
                landed = true;
            }
            at = to;
        }
        landed
    }

    fn set_len(&mut self, len: u64) {
        let sector = SECTOR_BYTES as u64;
        self.sectors.retain(|&index, _| index * sector < len);
        if let Some(bytes) = self.sectors.get_mut(&(len / sector)) {
            // Bytes past the new end read as zeros if the file grows again.
            bytes[(len % sector) as usize..].fill(0);
        }
        self.len = len;
    }

    /// Writes the image as a new file; missing sectors stay holes.
    fn write_to(&self, path: &Path) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let file = std::fs::File::create(path)?;
        file.set_len(self.len)?;
        for (&index, bytes) in &self.sectors {
            let at = index * SECTOR_BYTES as u64;
            file.write_all_at(&bytes[..(self.len - at).min(SECTOR_BYTES as u64) as usize], at)?;
        }
        Ok(())
    }

    #[cfg(test)]
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![0; self.len as usize];
        for (&index, bytes) in &self.sectors {
            let from = index as usize * SECTOR_BYTES;
            let to = (from + SECTOR_BYTES).min(out.len());
            out[from..to].copy_from_slice(&bytes[..to - from]);
        }
        out
    }
}

impl FileOp {
    /// Applies the operation as it completed.
    fn apply(&self, image: &mut Image) {
        match self {
            FileOp::Write { pos, data } => {
                image.write(*pos, data, |_| true);
            }
            FileOp::SetLen(len) => image.set_len(*len),
            FileOp::Allocate(len) => image.len = image.len.max(*len),
        }
    }
}

/// Draws what a power cut keeps.
enum Chooser {
    Seeded(u64),
    SyncedOnly,
}

impl Chooser {
    /// A number below `n` (splitmix64); 0 when only synced state survives.
    fn below(&mut self, n: u64) -> u64 {
        match self {
            Chooser::SyncedOnly => 0,
            Chooser::Seeded(state) => {
                *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = *state;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                (z ^ (z >> 31)) % n
            }
        }
    }

    fn lands(&mut self) -> bool {
        self.below(2) == 1
    }
}

impl Model {
    /// A model of the tree under `root` as it is now, all of it durable.
    fn snapshot(root: &Path) -> io::Result<Model> {
        let mut model = Model { root: root.to_owned(), nodes: vec![Node::Dir(DirNode::default())], next_op: 0 };
        model.load(ROOT, root)?;
        Ok(model)
    }

    fn load(&mut self, dir: NodeId, path: &Path) -> io::Result<()> {
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
            let node = if entry.file_type()?.is_dir() {
                let node = self.add(Node::Dir(DirNode::default()));
                self.load(node, &entry.path())?;
                node
            } else {
                let durable = Image::from_bytes(&std::fs::read(entry.path())?);
                self.add(Node::File(FileNode { durable, pending: Vec::new() }))
            };
            let dir = self.dir_mut(dir);
            dir.current.insert(name.clone(), node);
            dir.durable.insert(name, node);
        }
        Ok(())
    }

    fn add(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn dir_mut(&mut self, node: NodeId) -> &mut DirNode {
        match &mut self.nodes[node] {
            Node::Dir(dir) => dir,
            Node::File(_) => unreachable!("node {node} is a directory"),
        }
    }

    fn file_mut(&mut self, node: NodeId) -> &mut FileNode {
        match &mut self.nodes[node] {
            Node::File(file) => file,
            Node::Dir(_) => unreachable!("node {node} is a file"),
        }
    }

    /// The names of `path` below the root; `None` outside it.
    fn components(&self, path: &Path) -> Option<Vec<String>> {
        let relative = path.strip_prefix(&self.root).ok()?;
        relative.components().map(|c| c.as_os_str().to_str().map(str::to_owned)).collect()
    }

    /// The node at `path` now, if the model knows it.
    fn lookup(&self, path: &Path) -> Option<NodeId> {
        let mut node = ROOT;
        for name in self.components(path)? {
            let Node::Dir(dir) = &self.nodes[node] else { return None };
            node = *dir.current.get(&name)?;
        }
        Some(node)
    }

    /// The directory holding `path` now and the name in it.
    fn parent_of(&self, path: &Path) -> Option<(NodeId, String)> {
        let name = self.components(path)?.pop()?;
        let parent = self.lookup(path.parent()?)?;
        matches!(self.nodes[parent], Node::Dir(_)).then_some((parent, name))
    }

    /// A file was opened: its node, created when the open created the file; `None`
    /// outside the root.
    fn file_opened(&mut self, path: &Path) -> io::Result<Option<NodeId>> {
        if self.components(path).is_none() {
            return Ok(None);
        }
        if let Some(node) = self.lookup(path) {
            return Ok(Some(node));
        }
        let Some((parent, name)) = self.parent_of(path) else {
            return Err(io::Error::other(format!("power-loss model: {} is not tracked", path.display())));
        };
        let node = self.add(Node::File(FileNode::default()));
        let dir = self.dir_mut(parent);
        dir.current.insert(name.clone(), node);
        dir.pending.push(DirOp::Link(name, node));
        Ok(Some(node))
    }

    /// `create_dir_all` succeeded: the missing directories on the way are new.
    fn dir_created(&mut self, path: &Path) -> io::Result<()> {
        let Some(names) = self.components(path) else { return Ok(()) };
        let mut node = ROOT;
        for name in names {
            let existing = match &self.nodes[node] {
                Node::Dir(dir) => dir.current.get(&name).copied(),
                Node::File(_) => return Err(io::Error::other("power-loss model: a file on a directory's path")),
            };
            node = match existing {
                Some(child) => child,
                None => {
                    let child = self.add(Node::Dir(DirNode::default()));
                    let dir = self.dir_mut(node);
                    dir.current.insert(name.clone(), child);
                    dir.pending.push(DirOp::Link(name, child));
                    child
                }
            };
        }
        Ok(())
    }

    fn removed(&mut self, path: &Path) {
        if let Some((parent, name)) = self.parent_of(path) {
            let dir = self.dir_mut(parent);
            dir.current.remove(&name);
            dir.pending.push(DirOp::Unlink(name));
        }
    }

    fn renamed(&mut self, source: &Path, target: &Path) {
        let (Some((from_dir, from)), Some((to_dir, to))) = (self.parent_of(source), self.parent_of(target)) else {
            return;
        };
        let Some(node) = self.dir_mut(from_dir).current.remove(&from) else { return };
        self.dir_mut(to_dir).current.insert(to.clone(), node);
        if from_dir == to_dir {
            self.dir_mut(from_dir).pending.push(DirOp::Rename(from, to));
        } else {
            self.dir_mut(from_dir).pending.push(DirOp::Unlink(from));
            self.dir_mut(to_dir).pending.push(DirOp::Link(to, node));
        }
    }

    /// A directory sync; returns whether the model holds the directory.
    fn dir_synced(&mut self, path: &Path) -> bool {
        let Some(node) = self.lookup(path) else { return false };
        let Node::Dir(dir) = &mut self.nodes[node] else { return false };
        for op in dir.pending.drain(..) {
            op.apply(&mut dir.durable);
        }
        true
    }

    /// Records a change to a file; returns its id.
    fn file_changed(&mut self, node: NodeId, op: FileOp, completed: bool) -> u64 {
        self.next_op += 1;
        let id = self.next_op;
        self.file_mut(node).pending.push(PendingOp { id, completed, op });
        id
    }

    fn write_completed(&mut self, node: NodeId, id: u64) {
        if let Some(op) = self.file_mut(node).pending.iter_mut().find(|p| p.id == id) {
            op.completed = true;
        }
    }

    /// An fdatasync: the changes completed by now become durable.
    fn file_synced(&mut self, node: NodeId) {
        let file = self.file_mut(node);
        let (synced, rest): (Vec<PendingOp>, Vec<PendingOp>) = file.pending.drain(..).partition(|p| p.completed);
        for op in synced {
            op.op.apply(&mut file.durable);
        }
        file.pending = rest;
    }

    fn restart(&mut self) {
        for node in &mut self.nodes {
            if let Node::File(file) = node {
                file.pending.retain(|p| p.completed);
            }
        }
    }

    /// Writes what survives of directory `node` to `path` (which exists), recursively.
    fn materialize(
        &self,
        node: NodeId,
        path: &Path,
        chooser: &mut Chooser,
        report: &mut PowerLossReport,
    ) -> io::Result<()> {
        let Node::Dir(dir) = &self.nodes[node] else { unreachable!("materialize a directory") };
        let mut entries = dir.durable.clone();
        let kept = chooser.below(dir.pending.len() as u64 + 1) as usize;
        for op in &dir.pending[..kept] {
            op.apply(&mut entries);
        }
        report.dir_ops_lost += (dir.pending.len() - kept) as u64;
        for (name, &child) in &entries {
            let child_path = path.join(name);
            match &self.nodes[child] {
                Node::Dir(_) => {
                    std::fs::create_dir(&child_path)?;
                    self.materialize(child, &child_path, chooser, report)?;
                }
                Node::File(file) => file.after_cut(chooser, report).write_to(&child_path)?,
            }
        }
        Ok(())
    }
}

impl FileNode {
    /// The content a power cut leaves: the durable image and what lands of the rest.
    fn after_cut(&self, chooser: &mut Chooser, report: &mut PowerLossReport) -> Image {
        let mut image = self.durable.clone();
        for pending in &self.pending {
            match &pending.op {
                FileOp::Write { pos, data } => {
                    let end = pos + data.len() as u64;
                    match chooser.below(3) {
                        0 => report.writes_lost += 1,
                        1 => {
                            image.write(*pos, data, |_| true);
                            report.writes_landed += 1;
                        }
                        _ => {
                            image.write(*pos, data, |_| chooser.lands());
                            report.writes_torn += 1;
                        }
                    }
                    // The size may have grown without the data: the new part reads
                    // as zeros.
                    if end > image.len && chooser.lands() {
                        image.len = end;
                    }
                }
                op => {
                    if chooser.lands() {
                        op.apply(&mut image);
                    } else {
                        report.size_changes_lost += 1;
                    }
                }
            }
        }
        image
    }
}

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
