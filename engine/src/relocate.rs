//! Moving a partition's directory to another log directory of the node
//! (AlterReplicaLogDirs, KIP-858), in two steps so that the partition stops serving
//! only for the last one:
//!
//! 1. `precopy`, while the log serves: every file is copied into
//!    `<target>/<topic>-<partition>.<uuid>-future` (Kafka's future replica name).
//! 2. `finish`, with the log closed: what changed since is copied again (a segment
//!    that only grew gets its new bytes; an index or checkpoint is small and copied
//!    whole; a file that was rewritten, truncated or removed is copied whole or
//!    removed), every file and the directory are synced, and the copy replaces the
//!    original:
//!    - `MOVED_MARKER` is written into the original, durably;
//!    - the copy is renamed to its final name and its parent synced: it is live;
//!    - the original is renamed to Kafka's `-delete` name, for removal.
//!
//! A crash before the copy is live leaves a `-future` directory, removed at start, and
//! the original serves. A crash between the two renames leaves both directories; the
//! marker says which one is stale (the node's start renames it away).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::io::{self, IoBuf, Storage, StorageFile};
use crate::log_dirs::{FUTURE_SUFFIX, MOVED_MARKER};
use crate::segment::{CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX};

/// The bytes copied per read and write.
const COPY_CHUNK_BYTES: usize = 1 << 20;

/// Files at most this long are copied whole again in `finish`; longer ones only when
/// they changed other than by growing.
const RECOPY_WHOLE_BYTES: u64 = 1 << 20;

/// The bytes compared at each end of a file's copied part to tell whether it changed
/// other than by growing.
const PROBE_BYTES: u64 = 64 << 10;

/// A copy under way: its directory, and for each file copied so far its length and
/// the part of it that stays as it is if the file only grows (`Copied::stable`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Precopy {
    pub source: PathBuf,
    pub future: PathBuf,
    pub target: PathBuf,
    copied: BTreeMap<String, Copied>,
}

/// One file copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Copied {
    len: u64,
    /// Up to the block that holds the file's last non-zero byte. An active segment
    /// is longer than what was written into it (its reservation, zeros that appends
    /// overwrite later) and its last block is written again as it fills: the blocks
    /// before this one are final while the segment only grows.
    stable: u64,
}

impl Precopy {
    /// The bytes the precopy copied.
    pub fn bytes(&self) -> u64 {
        self.copied.values().map(|c| c.len).sum()
    }
}

/// Whether a partition directory's file takes part in a move: temp files, compaction
/// leftovers and deleted segments do not.
fn moves(name: &str) -> bool {
    !(name.ends_with(".tmp")
        || name.ends_with(CLEANED_SUFFIX)
        || name.ends_with(SWAP_SUFFIX)
        || name.ends_with(DELETED_SUFFIX)
        || name.ends_with(".deleted")
        || name == MOVED_MARKER)
}

/// Step 1: copies `source` (a partition directory) into a new future directory in
/// `target_parent`, while the log serves. A file removed meanwhile (retention) is left.
///
/// # Errors
/// `Io` when the directory cannot be listed or a file not copied.
pub async fn precopy<S: Storage>(storage: &S, source: &Path, target_parent: &Path) -> Result<Precopy> {
    let name = source.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
    let future = target_parent.join(format!("{name}.{}{FUTURE_SUFFIX}", unique()));
    storage.create_dir_all(&future).await.map_err(|e| Error::io("create", &future, e))?;
    let mut precopy =
        Precopy { source: source.to_owned(), future, target: target_parent.join(&name), copied: BTreeMap::new() };
    let names = storage.list_dir(source).await.map_err(|e| Error::io("list", source, e))?;
    for name in names.into_iter().filter(|n| moves(n)) {
        match copy_file(storage, &source.join(&name), &precopy.future.join(&name), 0).await {
            Ok(copied) => {
                precopy.copied.insert(name, copied);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("copy", source.join(&name), e)),
        }
    }
    Ok(precopy)
}

/// Step 2, with the log closed: brings the copy up to date and makes it the partition's
/// directory, as the module says. Returns the copy's path. On an error before the copy
/// is live, the future directory is removed and the original stays. Also returns the
/// bytes this step copied.
///
/// # Errors
/// `Io` for the step that failed.
pub async fn finish<S: Storage>(storage: &S, precopy: Precopy) -> Result<(PathBuf, u64)> {
    let caught_up = match catch_up(storage, &precopy).await {
        Ok(bytes) => bytes,
        Err(e) => {
            let _ = remove_dir_all(storage, &precopy.future).await;
            return Err(e);
        }
    };
    let Precopy { source, future, target, .. } = precopy;
    let marker = source.join(MOVED_MARKER);
    io::write_whole_atomic(storage, &marker, b"moved\n").await.map_err(|e| Error::io("write", &marker, e))?;
    storage.rename(&future, &target).await.map_err(|e| Error::io("rename", &future, e))?;
    let target_parent = target.parent().unwrap_or(Path::new("."));
    storage.sync_dir(target_parent).await.map_err(|e| Error::io("sync", target_parent, e))?;
    let source_parent = source.parent().unwrap_or(Path::new("."));
    let name = source.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let deleted = source_parent.join(format!("{name}.{}{DELETED_SUFFIX}", unique()));
    storage.rename(&source, &deleted).await.map_err(|e| Error::io("rename", &source, e))?;
    storage.sync_dir(source_parent).await.map_err(|e| Error::io("sync", source_parent, e))?;
    Ok((target, caught_up))
}

/// Copies what changed since the precopy, removes what went, and syncs the copy.
/// Returns the bytes copied.
async fn catch_up<S: Storage>(storage: &S, precopy: &Precopy) -> Result<u64> {
    let mut bytes = 0;
    let source = &precopy.source;
    let names = storage.list_dir(source).await.map_err(|e| Error::io("list", source, e))?;
    for name in names.iter().filter(|n| moves(n)) {
        let (from, to) = (source.join(name), precopy.future.join(name));
        let start = match precopy.copied.get(name) {
            Some(&Copied { stable, .. }) if stable > RECOPY_WHOLE_BYTES => {
                match only_grew(storage, &from, &to, stable).await {
                    Ok(true) => stable,
                    Ok(false) => 0,
                    Err(e) => return Err(Error::io("read", &from, e)),
                }
            }
            _ => 0,
        };
        let end = copy_file(storage, &from, &to, start).await.map_err(|e| Error::io("copy", &from, e))?.len;
        bytes += end - io::align_down(start.min(end));
    }
    for gone in precopy.copied.keys().filter(|n| !names.contains(n)) {
        let path = precopy.future.join(gone);
        storage.remove_file(&path).await.map_err(|e| Error::io("remove", &path, e))?;
    }
    storage.sync_dir(&precopy.future).await.map_err(|e| Error::io("sync", &precopy.future, e))?;
    Ok(bytes)
}

/// Whether `source` holds at least `copied` bytes and its first and last bytes of that
/// part are still those copied to `target`: it only grew (a segment appended to). A
/// segment truncated and written again, or replaced by compaction, differs there.
async fn only_grew<S: Storage>(storage: &S, source: &Path, target: &Path, copied: u64) -> std::io::Result<bool> {
    let (source, target) = (storage.open_file(source, false).await?, storage.open_file(target, false).await?);
    if source.size().await? < copied {
        return Ok(false);
    }
    let probe = PROBE_BYTES.min(copied);
    for at in [0, copied - probe] {
        let (a, b) = (source.read_at(at, probe as usize).await?, target.read_at(at, probe as usize).await?);
        if a != b {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Copies `source` into `target` from byte `start` (0: the whole file, `target`
/// created or cut), and fdatasyncs `target`. Returns the length copied to, and the
/// stable part (`Copied::stable`) of what this call read.
async fn copy_file<S: Storage>(storage: &S, source: &Path, target: &Path, start: u64) -> std::io::Result<Copied> {
    let input = storage.open_file(source, false).await?;
    let len = input.size().await?;
    let output = storage.open_file(target, true).await?;
    if start == 0 {
        output.truncate(0).await?;
    }
    // O_DIRECT writes start on a block: the block holding `start` is written again.
    let mut pos = io::align_down(start.min(len));
    let mut nonzero_end = pos;
    while pos < len {
        let data = input.read_at(pos, COPY_CHUNK_BYTES.min((len - pos) as usize)).await?;
        if data.is_empty() {
            break;
        }
        if let Some(last) = data.iter().rposition(|&b| b != 0) {
            nonzero_end = pos + last as u64 + 1;
        }
        let padded = io::align_up(data.len() as u64) as usize;
        let mut buf = output.alloc_buf(padded);
        buf.as_bytes_mut()[..data.len()].copy_from_slice(&data);
        buf.as_bytes_mut()[data.len()..].fill(0);
        let written = output.write_at(buf, pos).await?;
        if written < padded {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                format!("short write of {}", target.display()),
            ));
        }
        pos += data.len() as u64;
    }
    output.truncate(pos).await?;
    output.fdatasync().await?;
    Ok(Copied { len: pos, stable: io::align_down(nonzero_end) })
}

/// A name part no other directory of the node has: random, as Kafka's UUIDs.
fn unique() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Removes a directory and the files in it.
pub(crate) async fn remove_dir_all<S: Storage>(storage: &S, dir: &Path) -> std::io::Result<()> {
    for name in storage.list_dir(dir).await? {
        match storage.remove_file(&dir.join(name)).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    storage.remove_dir(dir).await
}
