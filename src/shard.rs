//! Shard bootstrap: one glommio executor per core, pinned, each owning a log manager
//! for the partitions assigned to it. The default assignment is deterministic: a hash
//! of the partition over the shards.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use skein_engine::io::dma::DmaStorage;
use skein_engine::{LogConfig, LogManager, TopicPartition};

use crate::config::NodeConfig;

/// The shard that owns `partition` among `shards`.
pub fn shard_of(partition: &TopicPartition, shards: usize) -> usize {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    partition.topic.hash(&mut hasher);
    (hasher.finish() as usize).wrapping_add(partition.partition as usize) % shards
}

/// Runs the node until SIGINT or SIGTERM, then closes every log cleanly.
///
/// # Errors
/// A message when the data directory cannot be prepared or a shard fails to start.
pub fn run_node(config: NodeConfig) -> Result<(), String> {
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| format!("cannot create data directory {}: {e}", config.data_dir.display()))?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).map_err(|e| format!("cannot install signal handler: {e}"))?;
    }
    let shards = config.cpus.len();
    tracing::info!(target: "skein", data_dir = %config.data_dir.display(), shards, "starting");
    let mut handles = Vec::new();
    for (shard, &cpu) in config.cpus.iter().enumerate() {
        let (config, stop) = (config.clone(), stop.clone());
        let handle = glommio::LocalExecutorBuilder::new(glommio::Placement::Fixed(cpu))
            .name(&format!("shard-{shard}"))
            .spawn(move || async move { shard_task(shard, shards, config, stop).await })
            .map_err(|e| format!("cannot start shard {shard} on cpu {cpu} (io_uring must be available): {e}"))?;
        handles.push(handle);
    }
    let mut failure = None;
    for handle in handles {
        match handle.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = Some(e),
            Err(e) => failure = Some(format!("shard thread failed: {e}")),
        }
    }
    match failure {
        Some(e) => Err(e),
        None => {
            tracing::info!(target: "skein", "stopped cleanly");
            Ok(())
        }
    }
}

async fn shard_task(shard: usize, shards: usize, config: NodeConfig, stop: Arc<AtomicBool>) -> Result<(), String> {
    let started = std::time::Instant::now();
    let manager = LogManager::new(DmaStorage, config.data_dir.clone(), config.cache_bytes_per_shard);
    let offline = manager
        .open_existing(|p| (shard_of(p, shards) == shard).then(LogConfig::default))
        .await
        .map_err(|e| format!("shard {shard}: {e}"))?;
    tracing::info!(target: "skein", shard, partitions = manager.partitions().len(), offline = offline.len(),
        recovery_ms = started.elapsed().as_millis() as u64, "shard ready");
    let tick = Duration::from_millis(config.housekeeping_interval_ms.min(100));
    let mut since_housekeeping = Duration::ZERO;
    while !stop.load(Ordering::Relaxed) {
        glommio::timer::sleep(tick).await;
        since_housekeeping += tick;
        if since_housekeeping >= Duration::from_millis(config.housekeeping_interval_ms) {
            since_housekeeping = Duration::ZERO;
            manager.housekeeping(skein_engine::log::now_ms()).await;
        }
    }
    let failed = manager.close_all().await;
    for (partition, error) in &failed {
        tracing::error!(target: "skein", shard, partition = %partition, error = %error, "close failed");
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("shard {shard}: {} logs failed to close", failed.len()))
    }
}
