//! Producer-state snapshots, Kafka's `<offset>.snapshot` files: bytes the broker
//! writes (at a roll, at clean shutdown) that describe the producer state of every
//! batch below `offset`, so that opening a log replays only the batches from the
//! newest snapshot on, not the whole log. Their content is the broker's; the log keeps
//! them consistent with its ends: a snapshot above the log end (data lost to a crash
//! or truncated away) is removed, and only the newest `SNAPSHOTS_KEPT` stay.

use super::*;

/// File suffix of producer snapshots, as Kafka names them.
pub const SNAPSHOT_SUFFIX: &str = ".snapshot";

/// Snapshots kept per log: the newest, and one before it in case the newest cannot
/// be read.
pub const SNAPSHOTS_KEPT: usize = 2;

impl<S: Storage> Log<S> {
    /// Offsets of the producer snapshots on disk, oldest first.
    ///
    /// # Errors
    /// `Io` when the directory cannot be listed.
    pub async fn producer_snapshots(&self) -> Result<Vec<Offset>> {
        snapshot_offsets(&self.ctx.storage, &self.dir).await
    }

    /// The bytes of the snapshot at `offset`, `None` when it is gone.
    ///
    /// # Errors
    /// `Io` when it exists but cannot be read.
    pub async fn read_producer_snapshot(&self, offset: Offset) -> Result<Option<bytes::Bytes>> {
        let path = segment::file_path(&self.dir, offset, SNAPSHOT_SUFFIX);
        crate::io::read_whole(&self.ctx.storage, &path).await.map_err(|e| Error::io("read", &path, e))
    }

    /// Writes the snapshot at `offset` atomically, then removes all but the newest
    /// `SNAPSHOTS_KEPT`. A snapshot above the log end (the log was truncated meanwhile)
    /// is removed again at once.
    ///
    /// # Errors
    /// `Io` when a file cannot be written or removed.
    pub async fn write_producer_snapshot(&self, offset: Offset, bytes: &[u8]) -> Result<()> {
        let path = segment::file_path(&self.dir, offset, SNAPSHOT_SUFFIX);
        crate::io::write_whole_atomic(&self.ctx.storage, &path, bytes)
            .await
            .map_err(|e| Error::io("write", &path, e))?;
        if offset > self.log_end_offset() {
            return self.remove_producer_snapshots(|o| o > self.log_end_offset()).await;
        }
        let offsets = self.producer_snapshots().await?;
        let keep_from = offsets.len().saturating_sub(SNAPSHOTS_KEPT);
        let old: Vec<Offset> = offsets[..keep_from].to_vec();
        self.remove_producer_snapshots(|o| old.contains(&o)).await
    }

    /// Removes the snapshots whose offset satisfies `doomed`.
    ///
    /// # Errors
    /// `Io` when one cannot be removed.
    pub async fn remove_producer_snapshots(&self, doomed: impl Fn(Offset) -> bool) -> Result<()> {
        remove_snapshots(&self.ctx.storage, &self.dir, doomed).await
    }
}

pub(super) async fn snapshot_offsets<S: Storage>(storage: &S, dir: &Path) -> Result<Vec<Offset>> {
    let names = storage.list_dir(dir).await.map_err(|e| Error::io("list", dir, e))?;
    let mut offsets: Vec<Offset> = names.iter().filter_map(|n| segment::parse_file_name(n, SNAPSHOT_SUFFIX)).collect();
    offsets.sort();
    Ok(offsets)
}

pub(super) async fn remove_snapshots<S: Storage>(
    storage: &S,
    dir: &Path,
    doomed: impl Fn(Offset) -> bool,
) -> Result<()> {
    let mut removed = false;
    for offset in snapshot_offsets(storage, dir).await?.into_iter().filter(|&o| doomed(o)) {
        let path = segment::file_path(dir, offset, SNAPSHOT_SUFFIX);
        match storage.remove_file(&path).await {
            Ok(()) => removed = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove", &path, e)),
        }
    }
    if removed {
        storage.sync_dir(dir).await.map_err(|e| Error::io("sync", dir, e))?;
    }
    Ok(())
}
