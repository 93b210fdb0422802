//! A node's log directories (Kafka's `log.dirs`, KIP-858's JBOD): where each
//! partition's directory lives, shared by every shard of the node.
//!
//! Each directory has its free-space watch (`space.rs`) and the directory id of its
//! `meta.properties`. Each shard has a home directory, where the partitions it creates
//! go (`LogManager::with_log_dirs`); a partition found on disk at start stays in the
//! directory it is in, and AlterReplicaLogDirs moves it (`LogManager::move_dir`).
//!
//! Where each partition is, is one map for the node, behind a mutex: it is read and
//! written only when a log is opened, created, moved or deleted, never per request,
//! and a partition that moves to another shard must be found where it is.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::space::SpaceWatch;
use crate::types::TopicPartition;

/// Kafka's suffix for a replica being copied into another directory
/// (`topic-0.<uuid>-future`): left by a crash mid-move, it is removed at start.
pub const FUTURE_SUFFIX: &str = "-future";

/// Written into a partition's old directory, durably, before a move makes the copy
/// live: a crash between the two renames leaves both directories, and the one with
/// this file is the stale one (`moved_away`).
pub const MOVED_MARKER: &str = "partition.moved";

/// One log directory.
#[derive(Debug)]
pub struct LogDir {
    /// Its path and free-space state.
    pub space: SpaceWatch,
    /// The `directory.id` of its `meta.properties` (Kafka's base64 UUID).
    pub id: String,
}

impl LogDir {
    /// A directory at `path` with the id `id`.
    pub fn new(path: impl Into<std::path::PathBuf>, id: impl Into<String>) -> LogDir {
        LogDir { space: SpaceWatch::new(path), id: id.into() }
    }
}

impl LogDir {
    pub fn path(&self) -> &Path {
        self.space.dir()
    }
}

/// The node's log directories and where each partition is.
#[derive(Debug)]
pub struct LogDirs {
    dirs: Vec<LogDir>,
    located: Mutex<HashMap<TopicPartition, usize>>,
    /// The partitions being moved, with the directory each is wanted in: shown as
    /// future replicas by DescribeLogDirs, from any shard.
    moving: Mutex<HashMap<TopicPartition, usize>>,
    /// Which directories are cordoned (KIP-1066's `cordoned.log.dirs`): no new
    /// partition goes there while another one is not.
    cordoned: Vec<AtomicBool>,
}

impl LogDirs {
    /// `dirs` (at least one), with the partitions found in each at start.
    ///
    /// # Panics
    /// When `dirs` is empty.
    pub fn new(dirs: Vec<LogDir>, located: HashMap<TopicPartition, usize>) -> LogDirs {
        assert!(!dirs.is_empty(), "a node has at least one log directory");
        let cordoned = dirs.iter().map(|_| AtomicBool::new(false)).collect();
        LogDirs { dirs, located: Mutex::new(located), moving: Mutex::default(), cordoned }
    }

    /// One directory, `path`, with no id and no partitions known (tests, tools).
    pub fn single(path: impl Into<std::path::PathBuf>) -> LogDirs {
        LogDirs::new(vec![LogDir::new(path, "")], HashMap::new())
    }

    pub fn dirs(&self) -> &[LogDir] {
        &self.dirs
    }

    pub fn get(&self, index: usize) -> Option<&LogDir> {
        self.dirs.get(index)
    }

    /// The index of the directory whose path is `path` (absolute, compared component by
    /// component).
    pub fn index_of(&self, path: &Path) -> Option<usize> {
        let wanted = std::path::absolute(path).ok()?;
        self.dirs.iter().position(|d| std::path::absolute(d.path()).is_ok_and(|p| p == wanted))
    }

    /// The directory `partition` is in, when known.
    pub fn located(&self, partition: &TopicPartition) -> Option<usize> {
        self.lock().get(partition).copied()
    }

    /// Records that `partition` is in directory `index`.
    pub fn set_located(&self, partition: &TopicPartition, index: usize) {
        self.lock().insert(partition.clone(), index);
    }

    /// Forgets where `partition` is (its log was deleted).
    pub fn forget(&self, partition: &TopicPartition) {
        self.lock().remove(partition);
    }

    /// Sets which directories are cordoned (one flag per directory, in order).
    pub fn set_cordoned(&self, cordoned: &[bool]) {
        for (flag, &value) in self.cordoned.iter().zip(cordoned) {
            flag.store(value, Ordering::Relaxed);
        }
    }

    /// Where a shard at home in `home` creates a partition: its home, unless that is
    /// failed or cordoned and another directory is neither (then the first such after
    /// it); else the first that has not failed.
    pub fn for_new_partition(&self, home: usize) -> usize {
        let count = self.dirs.len();
        let ring = || (0..count).map(|step| (home + step) % count);
        let live = |d: usize| !self.dirs[d].space.is_failed();
        let open = |d: usize| live(d) && !self.cordoned[d].load(Ordering::Relaxed);
        ring().find(|&d| open(d)).or_else(|| ring().find(|&d| live(d))).unwrap_or(home)
    }

    /// The directories that failed, by index.
    pub fn failed(&self) -> Vec<usize> {
        (0..self.dirs.len()).filter(|&d| self.dirs[d].space.is_failed()).collect()
    }

    /// The partitions located in directory `index`.
    pub fn partitions_in(&self, index: usize) -> Vec<TopicPartition> {
        self.lock().iter().filter(|(_, &d)| d == index).map(|(p, _)| p.clone()).collect()
    }

    /// Whether `partition` is in a directory that failed.
    pub fn is_offline(&self, partition: &TopicPartition) -> bool {
        self.located(partition).is_some_and(|d| self.dirs[d].space.is_failed())
    }

    /// Whether every directory is full or failed: the node can take no write at all.
    pub fn none_writable(&self) -> bool {
        self.dirs.iter().all(|d| d.space.is_full() || d.space.is_failed())
    }

    /// Asks for `partition` to be moved to directory `target`. Returns true when no
    /// move of it was under way, and the caller starts one; otherwise the move under
    /// way goes on to `target` once it ends.
    pub fn want_move(&self, partition: &TopicPartition, target: usize) -> bool {
        lock(&self.moving).insert(partition.clone(), target).is_none()
    }

    /// The directory `partition` is being moved to.
    pub fn moving_to(&self, partition: &TopicPartition) -> Option<usize> {
        lock(&self.moving).get(partition).copied()
    }

    /// Ends the move of `partition` if it is still wanted in `target` (returns true);
    /// otherwise another directory was asked for meanwhile, and the move goes on.
    pub fn end_move(&self, partition: &TopicPartition, target: usize) -> bool {
        let mut moving = lock(&self.moving);
        let done = moving.get(partition) == Some(&target);
        if done {
            moving.remove(partition);
        }
        done
    }

    /// Gives up the move of `partition` (it failed, or the partition went).
    pub fn cancel_move(&self, partition: &TopicPartition) {
        lock(&self.moving).remove(partition);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TopicPartition, usize>> {
        lock(&self.located)
    }
}

/// A map's lock: a panic elsewhere while holding it left a map that is still whole.
fn lock(map: &Mutex<HashMap<TopicPartition, usize>>) -> std::sync::MutexGuard<'_, HashMap<TopicPartition, usize>> {
    map.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether `error` says the device under a directory failed (EIO, ENXIO, ENODEV, a
/// file system gone read-only or found corrupt), not that a file is missing or the
/// disk full.
pub fn is_device_failure(error: &std::io::Error) -> bool {
    const EIO: i32 = 5;
    const ENXIO: i32 = 6;
    const ENODEV: i32 = 19;
    const EROFS: i32 = 30;
    const EUCLEAN: i32 = 117;
    matches!(error.raw_os_error(), Some(EIO | ENXIO | ENODEV | EROFS | EUCLEAN))
}

/// Which directory each shard calls home: among the directories on the NUMA node of
/// the shard's core (any, when either is unknown), the one fewest shards have chosen
/// so far, the lowest index on a tie. So shards spread over the drives nearest them,
/// and over all drives when nothing is known.
pub fn homes(shard_nodes: &[Option<u32>], dir_nodes: &[Option<u32>]) -> Vec<usize> {
    let mut chosen = vec![0usize; dir_nodes.len()];
    let near = |shard: Option<u32>, dir: Option<u32>| shard.is_none() || dir.is_none() || shard == dir;
    shard_nodes
        .iter()
        .map(|&node| {
            let candidates: Vec<usize> = (0..dir_nodes.len()).filter(|&d| near(node, dir_nodes[d])).collect();
            let pool = if candidates.is_empty() { (0..dir_nodes.len()).collect() } else { candidates };
            let home = pool.into_iter().min_by_key(|&d| (chosen[d], d)).unwrap_or(0);
            if let Some(count) = chosen.get_mut(home) {
                *count += 1;
            }
            home
        })
        .collect()
}

/// Finishes or undoes the moves a crash interrupted (`relocate.rs`), in `dirs`, at
/// start, before any shard runs (it uses `std::fs`: never on an executor thread):
/// - a `-future` directory (a copy that never went live) is removed;
/// - a partition in two directories keeps the one without `MOVED_MARKER` (the marked
///   one was copied and its copy went live), the other renamed to `-delete`; with no
///   marker, or both marked, it is an error naming both;
/// - a marker in a partition's only directory (the crash came before its copy went
///   live) is removed.
///
/// # Errors
/// A message when a directory cannot be read, renamed or synced, or for a duplicate.
pub fn settle_moves(dirs: &[&Path]) -> Result<(), String> {
    let mut seen: HashMap<String, &Path> = HashMap::new();
    for &dir in dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot list {}: {e}", dir.display())),
        };
        let mut changed = false;
        for entry in entries {
            let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
            let name = entry.file_name().to_string_lossy().to_string();
            if name.ends_with(FUTURE_SUFFIX) {
                std::fs::remove_dir_all(entry.path()).map_err(|e| format!("cannot remove {name}: {e}"))?;
                tracing::warn!(target: "skein::engine", dir = %entry.path().display(), "an interrupted move's copy removed");
                changed = true;
                continue;
            }
            if TopicPartition::from_dir_name(&name).is_none() {
                continue;
            }
            let Some(&other) = seen.get(&name) else {
                seen.insert(name, dir);
                continue;
            };
            let (first, second) = (other.join(&name), entry.path());
            let stale = match (first.join(MOVED_MARKER).exists(), second.join(MOVED_MARKER).exists()) {
                (true, false) => {
                    seen.insert(name.clone(), dir);
                    first
                }
                (false, true) => second,
                _ => {
                    return Err(format!(
                        "duplicate log directories for {name} are found in both {} and {}: remove one of them",
                        first.display(),
                        second.display()
                    ))
                }
            };
            let target = stale.with_file_name(format!(
                "{name}.{}{}",
                uuid::Uuid::new_v4().simple(),
                crate::segment::DELETED_SUFFIX
            ));
            std::fs::rename(&stale, &target).map_err(|e| format!("cannot rename {}: {e}", stale.display()))?;
            sync(stale.parent().unwrap_or(Path::new(".")))?;
            tracing::warn!(target: "skein::engine", dir = %stale.display(), "an interrupted move's original removed");
        }
        if changed {
            sync(dir)?;
        }
    }
    for (name, dir) in seen {
        let marker = dir.join(&name).join(MOVED_MARKER);
        if marker.exists() {
            std::fs::remove_file(&marker).map_err(|e| format!("cannot remove {}: {e}", marker.display()))?;
        }
    }
    Ok(())
}

fn sync(dir: &Path) -> Result<(), String> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| format!("cannot sync {}: {e}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shards spread over the directories on their NUMA node, evenly, and over all of
    // them when the nodes are unknown.
    #[test]
    fn shards_choose_the_nearest_least_chosen_directory() {
        assert_eq!(homes(&[None, None, None, None], &[None, None]), vec![0, 1, 0, 1]);
        assert_eq!(homes(&[Some(0), Some(0), Some(1), Some(1)], &[Some(1), Some(0), Some(0)]), vec![1, 2, 0, 0]);
        // No directory on a shard's node: the least chosen of all.
        assert_eq!(homes(&[Some(2), Some(2)], &[Some(0), Some(1)]), vec![0, 1]);
        assert_eq!(homes(&[Some(0)], &[Some(0)]), vec![0]);
    }

    #[test]
    fn partitions_are_located_node_wide() {
        let dirs = LogDirs::new(
            vec![LogDir::new("/a", "x"), LogDir::new("/b", "y")],
            HashMap::from([(TopicPartition::new("t", 0), 1)]),
        );
        assert_eq!(dirs.located(&TopicPartition::new("t", 0)), Some(1));
        dirs.set_located(&TopicPartition::new("t", 1), 0);
        dirs.forget(&TopicPartition::new("t", 0));
        assert_eq!(dirs.located(&TopicPartition::new("t", 0)), None);
        assert_eq!(dirs.located(&TopicPartition::new("t", 1)), Some(0));
        assert_eq!(dirs.index_of(Path::new("/b/")), Some(1));
        assert_eq!(dirs.index_of(Path::new("/c")), None);
        // A cordoned home sends new partitions to the next directory that is not.
        assert_eq!(dirs.for_new_partition(0), 0);
        dirs.set_cordoned(&[true, false]);
        assert_eq!(dirs.for_new_partition(0), 1);
        dirs.set_cordoned(&[true, true]);
        assert_eq!(dirs.for_new_partition(0), 0);
    }
}
