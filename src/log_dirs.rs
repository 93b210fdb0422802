//! The node's log directories at start (Kafka's `log.dirs`, KIP-858's JBOD), on the
//! main thread before any shard runs: each created, locked and given its
//! `meta.properties`, swept of what a crash left (interrupted moves,
//! `skein_engine::log_dirs::settle_moves`; stray partitions), and scanned for the
//! partitions in it.
//! The shards then share the result (`skein_engine::log_dirs::LogDirs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use skein_engine::log_dirs::{LogDir, LogDirs};
use skein_engine::manager::{partition_metadata_topic_id, topic_id_text, DELETED_SUFFIX, PARTITION_METADATA};
use skein_engine::TopicPartition;

use crate::config::NodeConfig;

/// The node's log directories, ready, and what must live as long as the node.
pub struct Prepared {
    pub dirs: Arc<LogDirs>,
    /// Each shard's home directory (`skein_engine::log_dirs::homes`).
    pub homes: Vec<usize>,
    /// Each directory's lock, held until the node stops.
    _locks: Vec<crate::exclusive::DataDirLock>,
}

/// Prepares `config.log_dirs` for a node of cluster `cluster_id`, whose data directory
/// has the directory id `data_dir_id`, against the metadata `image`.
///
/// # Errors
/// A message when a directory cannot be created, locked or read, belongs to another
/// node or cluster, or two hold the same partition.
pub fn prepare(
    config: &NodeConfig,
    cluster_id: &str,
    data_dir_id: &str,
    image: &skein_control::metadata::MetadataImage,
) -> Result<Prepared, String> {
    let data_dir = std::path::absolute(&config.data_dir).unwrap_or_else(|_| config.data_dir.clone());
    let mut dirs = Vec::new();
    let mut locks = Vec::new();
    for path in &config.log_dirs {
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.clone());
        let id = match absolute == data_dir {
            // Created, locked and identified with the node.
            true => data_dir_id.to_owned(),
            false => {
                create_durably(path)?;
                locks.push(crate::exclusive::lock_data_dir(path)?);
                crate::meta_properties::log_dir_identity(path, cluster_id, config.node_id)?
            }
        };
        dirs.push(LogDir::new(path, id));
    }
    let paths: Vec<&Path> = dirs.iter().map(LogDir::path).collect();
    skein_engine::log_dirs::settle_moves(&paths)?;
    let mut located: HashMap<TopicPartition, usize> = HashMap::new();
    for (index, dir) in dirs.iter().enumerate() {
        for partition in sweep(dir.path(), image)? {
            located.insert(partition, index);
        }
    }
    let shard_nodes: Vec<Option<u32>> = config.cpus.iter().map(|&cpu| cpu_numa_node(cpu)).collect();
    let dir_nodes: Vec<Option<u32>> = dirs.iter().map(|d| dir_numa_node(d.path())).collect();
    let homes = skein_engine::log_dirs::homes(&shard_nodes, &dir_nodes);
    if dirs.len() > 1 {
        for (dir, node) in dirs.iter().zip(&dir_nodes) {
            let shards: Vec<usize> =
                homes.iter().enumerate().filter(|(_, &h)| dirs[h].path() == dir.path()).map(|(s, _)| s).collect();
            tracing::info!(target: "skein", dir = %dir.path().display(), directory_id = %dir.id,
                numa_node = ?node, home_of_shards = ?shards, "log directory");
        }
    }
    Ok(Prepared { dirs: Arc::new(LogDirs::new(dirs, located)), homes, _locks: locks })
}

/// Creates `dir` and makes its entry in its parent durable.
fn create_durably(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create log directory {}: {e}", dir.display()))?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(parent)?;
    }
    Ok(())
}

/// Sweeps one log directory and returns its partitions. A partition directory of no
/// topic in the metadata, or of another incarnation of its topic (its
/// `partition.metadata` names another id), is renamed to Kafka's `-delete` name, as
/// Kafka removes stray replicas (KIP-858). They are left by a crash between a topic
/// deletion being recorded and its directories being renamed; a topic recreated under
/// the same name must never serve them.
fn sweep(dir: &Path, image: &skein_control::metadata::MetadataImage) -> Result<Vec<TopicPartition>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut found = Vec::new();
    let mut changed = false;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let Some(partition) = TopicPartition::from_dir_name(&name) else { continue };
        let on_disk = std::fs::read_to_string(entry.path().join(PARTITION_METADATA)).ok();
        let on_disk_id = on_disk.as_deref().and_then(partition_metadata_topic_id);
        let stray = match image.topic(&partition.topic) {
            None => true,
            Some(meta) => {
                let id = topic_id_text(*meta.id.as_bytes());
                partition.partition >= meta.partitions || on_disk_id.is_some_and(|found| found != id)
            }
        };
        if !stray {
            found.push(partition);
            continue;
        }
        rename_away(&entry.path(), DELETED_SUFFIX)?;
        tracing::warn!(target: "skein", partition = %partition, "stray partition directory (its topic was deleted or recreated) will be removed");
        changed = true;
    }
    if changed {
        sync_dir(dir)?;
    }
    Ok(found)
}

/// Renames a partition directory to `<name>.<uuid><suffix>` in its parent, durably.
fn rename_away(path: &Path, suffix: &str) -> Result<(), String> {
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let target = path.with_file_name(format!("{name}.{}{suffix}", uuid::Uuid::new_v4().simple()));
    std::fs::rename(path, &target).map_err(|e| format!("cannot rename {}: {e}", path.display()))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

fn sync_dir(dir: &Path) -> Result<(), String> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| format!("cannot sync {}: {e}", dir.display()))
}

/// The NUMA node of `cpu`, from sysfs (`/sys/devices/system/cpu/cpuN/nodeM`).
fn cpu_numa_node(cpu: usize) -> Option<u32> {
    let entries = std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{cpu}")).ok()?;
    entries.flatten().find_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
}

/// The NUMA node of the block device holding `dir`, from sysfs (its `device/numa_node`,
/// or its whole disk's for a partition); unknown (-1, or no such device: tmpfs, loop,
/// overlay) is `None`.
fn dir_numa_node(dir: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir).ok()?.dev();
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let base = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    [base.join("device/numa_node"), base.join("../device/numa_node")]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .and_then(|text| text.trim().parse::<i64>().ok())
        .and_then(|node| u32::try_from(node).ok())
}
