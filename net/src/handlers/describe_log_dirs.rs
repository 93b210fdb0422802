//! DescribeLogDirs: each of this broker's log directories (`--log-dirs`), the
//! partitions in it with their sizes, a replica being moved into it as a future one
//! (AlterReplicaLogDirs), (v4) its space and (v5, KIP-1066) whether it is cordoned:
//! named in this broker's `cordoned.log.dirs`, or `*` there.

use std::collections::BTreeMap;
use std::rc::Rc;

use futures_util::future::join_all;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use kafka_protocol::protocol::VersionRange;
use skein_engine::TopicPartition;

use super::s;
use crate::shard::{ops, Shard};

pub const VERSIONS: VersionRange = VersionRange { min: 1, max: 5 };

pub async fn handle(shard: &Rc<Shard>, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse {
    let image = shard.image();
    let wanted: Vec<(String, Vec<i32>)> = match request.topics {
        None => image.topics.values().map(|t| (t.name.clone(), (0..t.partitions).collect())).collect(),
        Some(list) => list
            .iter()
            .filter_map(|t| {
                let meta = image.topic(t.topic.0.as_str())?;
                Some((
                    meta.name.clone(),
                    t.partitions.iter().copied().filter(|p| *p >= 0 && *p < meta.partitions).collect(),
                ))
            })
            .collect(),
    };
    let log_dirs = shard.settings.log_dirs.clone();
    // Per directory, per topic: its partitions here, and those moving here (future).
    let mut placed: Vec<BTreeMap<String, Vec<DescribeLogDirsPartition>>> = vec![BTreeMap::new(); log_dirs.dirs().len()];
    for (topic, partitions) in wanted {
        let lookups = partitions.iter().map(|p| shard.call(TopicPartition::new(topic.clone(), *p), ops::Stats));
        let results = join_all(lookups).await;
        for (p, result) in partitions.iter().zip(results) {
            let Ok(ops::PartitionStats { size_bytes, .. }) = result else { continue };
            let tp = TopicPartition::new(topic.clone(), *p);
            let mut partition = DescribeLogDirsPartition::default();
            partition.partition_index = *p;
            partition.partition_size = size_bytes as i64;
            if let Some(target) = log_dirs.moving_to(&tp).filter(|&t| Some(t) != log_dirs.located(&tp)) {
                let mut future = partition.clone();
                future.is_future_key = true;
                placed[target].entry(topic.clone()).or_default().push(future);
            }
            let here = log_dirs.located(&tp).unwrap_or(0).min(placed.len() - 1);
            placed[here].entry(topic.clone()).or_default().push(partition);
        }
    }
    let cordoned =
        skein_control::broker_configs::dynamic_broker_value(&image, shard.settings.node_id, "cordoned.log.dirs");
    let cordoned = skein_control::broker_configs::cordoned(cordoned, &log_dirs);
    let results = log_dirs
        .dirs()
        .iter()
        .zip(placed)
        .zip(cordoned)
        .map(|((log_dir, topics), is_cordoned)| {
            let mut dir = DescribeLogDirsResult::default();
            if log_dir.space.is_failed() {
                // As Kafka answers for an offline log directory.
                dir.error_code = skein_control::errors::code::KAFKA_STORAGE_ERROR;
                dir.log_dir = s(log_dir.path().display().to_string());
                (dir.total_bytes, dir.usable_bytes) = (-1, -1);
                return dir;
            }
            (dir.total_bytes, dir.usable_bytes) = free_space(log_dir.path());
            dir.is_cordoned = is_cordoned;
            dir.log_dir = s(log_dir.path().display().to_string());
            dir.topics = topics
                .into_iter()
                .map(|(name, partitions)| {
                    let mut out = DescribeLogDirsTopic::default();
                    out.name = TopicName(s(name));
                    out.partitions = partitions;
                    out
                })
                .collect();
            dir
        })
        .collect();
    let mut response = DescribeLogDirsResponse::default();
    response.results = results;
    response
}

/// (total, usable) bytes of the data directory's file system; -1 when unknown.
fn free_space(path: &std::path::Path) -> (i64, i64) {
    match skein_engine::io::free_space(path) {
        Some((total, usable)) => (total as i64, usable as i64),
        None => (-1, -1),
    }
}
