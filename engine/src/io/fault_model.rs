//! The power-loss model of `FaultPlan::model_power_loss`: what each file and
//! directory under the modelled root holds durably, what is pending since, and what a
//! power cut could leave (see the parent module's documentation).

use super::*;

/// Durable and current state of every file and directory seen under a root.
#[derive(Debug)]
pub(super) struct Model {
    pub(super) root: PathBuf,
    pub(super) nodes: Vec<Node>,
    pub(super) next_op: u64,
}

#[derive(Debug)]
pub(super) enum Node {
    File(FileNode),
    Dir(DirNode),
}

#[derive(Debug, Default)]
pub(super) struct FileNode {
    /// Content and size as of the last fdatasync.
    pub(super) durable: Image,
    /// Changes since, in the order they were issued.
    pub(super) pending: Vec<PendingOp>,
}

#[derive(Debug)]
pub(super) struct PendingOp {
    pub(super) id: u64,
    pub(super) completed: bool,
    pub(super) op: FileOp,
}

#[derive(Debug)]
pub(super) enum FileOp {
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
pub(super) struct DirNode {
    /// Entries as the file system shows them now.
    pub(super) current: BTreeMap<String, NodeId>,
    /// Entries as of the last directory sync.
    pub(super) durable: BTreeMap<String, NodeId>,
    /// Entry operations since, in order.
    pub(super) pending: Vec<DirOp>,
}

#[derive(Debug)]
pub(super) enum DirOp {
    Link(String, NodeId),
    Unlink(String),
    Rename(String, String),
}

impl DirOp {
    pub(super) fn apply(&self, entries: &mut BTreeMap<String, NodeId>) {
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
pub(super) struct Image {
    pub(super) len: u64,
    pub(super) sectors: BTreeMap<u64, Box<[u8]>>,
}

impl Image {
    pub(super) fn from_bytes(bytes: &[u8]) -> Image {
        let mut image = Image::default();
        image.write(0, bytes, |_| true);
        image
    }

    /// Writes the sectors of `data` at `pos` for which `lands` (given the sector
    /// index) holds; returns whether any landed. The size grows to cover them.
    pub(super) fn write(&mut self, pos: u64, data: &[u8], mut lands: impl FnMut(u64) -> bool) -> bool {
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

    pub(super) fn set_len(&mut self, len: u64) {
        let sector = SECTOR_BYTES as u64;
        self.sectors.retain(|&index, _| index * sector < len);
        if let Some(bytes) = self.sectors.get_mut(&(len / sector)) {
            // Bytes past the new end read as zeros if the file grows again.
            bytes[(len % sector) as usize..].fill(0);
        }
        self.len = len;
    }

    /// Writes the image as a new file; missing sectors stay holes.
    pub(super) fn write_to(&self, path: &Path) -> io::Result<()> {
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
    pub(super) fn to_bytes(&self) -> Vec<u8> {
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
    pub(super) fn apply(&self, image: &mut Image) {
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
pub(super) enum Chooser {
    Seeded(u64),
    SyncedOnly,
}

impl Chooser {
    /// A number below `n` (splitmix64); 0 when only synced state survives.
    pub(super) fn below(&mut self, n: u64) -> u64 {
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

    pub(super) fn lands(&mut self) -> bool {
        self.below(2) == 1
    }
}

impl Model {
    /// A model of the tree under `root` as it is now, all of it durable.
    pub(super) fn snapshot(root: &Path) -> io::Result<Model> {
        let mut model = Model { root: root.to_owned(), nodes: vec![Node::Dir(DirNode::default())], next_op: 0 };
        model.load(ROOT, root)?;
        Ok(model)
    }

    pub(super) fn load(&mut self, dir: NodeId, path: &Path) -> io::Result<()> {
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

    pub(super) fn add(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    pub(super) fn dir_mut(&mut self, node: NodeId) -> &mut DirNode {
        match &mut self.nodes[node] {
            Node::Dir(dir) => dir,
            Node::File(_) => unreachable!("node {node} is a directory"),
        }
    }

    pub(super) fn file_mut(&mut self, node: NodeId) -> &mut FileNode {
        match &mut self.nodes[node] {
            Node::File(file) => file,
            Node::Dir(_) => unreachable!("node {node} is a file"),
        }
    }

    /// The names of `path` below the root; `None` outside it.
    pub(super) fn components(&self, path: &Path) -> Option<Vec<String>> {
        let relative = path.strip_prefix(&self.root).ok()?;
        relative.components().map(|c| c.as_os_str().to_str().map(str::to_owned)).collect()
    }

    /// The node at `path` now, if the model knows it.
    pub(super) fn lookup(&self, path: &Path) -> Option<NodeId> {
        let mut node = ROOT;
        for name in self.components(path)? {
            let Node::Dir(dir) = &self.nodes[node] else { return None };
            node = *dir.current.get(&name)?;
        }
        Some(node)
    }

    /// The directory holding `path` now and the name in it.
    pub(super) fn parent_of(&self, path: &Path) -> Option<(NodeId, String)> {
        let name = self.components(path)?.pop()?;
        let parent = self.lookup(path.parent()?)?;
        matches!(self.nodes[parent], Node::Dir(_)).then_some((parent, name))
    }

    /// A file was opened: its node, created when the open created the file; `None`
    /// outside the root.
    pub(super) fn file_opened(&mut self, path: &Path) -> io::Result<Option<NodeId>> {
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
    pub(super) fn dir_created(&mut self, path: &Path) -> io::Result<()> {
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

    pub(super) fn removed(&mut self, path: &Path) {
        if let Some((parent, name)) = self.parent_of(path) {
            let dir = self.dir_mut(parent);
            dir.current.remove(&name);
            dir.pending.push(DirOp::Unlink(name));
        }
    }

    pub(super) fn renamed(&mut self, source: &Path, target: &Path) {
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
    pub(super) fn dir_synced(&mut self, path: &Path) -> bool {
        let Some(node) = self.lookup(path) else { return false };
        let Node::Dir(dir) = &mut self.nodes[node] else { return false };
        for op in dir.pending.drain(..) {
            op.apply(&mut dir.durable);
        }
        true
    }

    /// Records a change to a file; returns its id.
    pub(super) fn file_changed(&mut self, node: NodeId, op: FileOp, completed: bool) -> u64 {
        self.next_op += 1;
        let id = self.next_op;
        self.file_mut(node).pending.push(PendingOp { id, completed, op });
        id
    }

    pub(super) fn write_completed(&mut self, node: NodeId, id: u64) {
        if let Some(op) = self.file_mut(node).pending.iter_mut().find(|p| p.id == id) {
            op.completed = true;
        }
    }

    /// An fdatasync: the changes completed by now become durable.
    pub(super) fn file_synced(&mut self, node: NodeId) {
        let file = self.file_mut(node);
        let (synced, rest): (Vec<PendingOp>, Vec<PendingOp>) = file.pending.drain(..).partition(|p| p.completed);
        for op in synced {
            op.op.apply(&mut file.durable);
        }
        file.pending = rest;
    }

    pub(super) fn restart(&mut self) {
        for node in &mut self.nodes {
            if let Node::File(file) = node {
                file.pending.retain(|p| p.completed);
            }
        }
    }

    /// Writes what survives of directory `node` to `path` (which exists), recursively.
    pub(super) fn materialize(
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
    pub(super) fn after_cut(&self, chooser: &mut Chooser, report: &mut PowerLossReport) -> Image {
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
