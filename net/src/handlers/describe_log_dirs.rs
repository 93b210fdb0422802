//! DescribeLogDirs: the data directory, its partitions' sizes, (v4) its space and (v5,
//! KIP-1066) whether it is cordoned: named in this broker's `cordoned.log.dirs`, or
//! `*` there.

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
    let mut dir = DescribeLogDirsResult::default();
    dir.log_dir = s(shard.settings.data_dir.display().to_string());
    let stats = rustix_free_space(&shard.settings.data_dir);
    dir.total_bytes = stats.0;
    dir.usable_bytes = stats.1;
    let cordoned = crate::broker_configs::dynamic_broker_value(&image, shard.settings.node_id, "cordoned.log.dirs");
    let here = shard.settings.data_dir.display().to_string();
    dir.is_cordoned =
        cordoned.split(',').map(str::trim).any(|d| d == "*" || d.trim_end_matches('/') == here.trim_end_matches('/'));
    for (topic, partitions) in wanted {
        let lookups = partitions.iter().map(|p| shard.call(TopicPartition::new(topic.clone(), *p), ops::Stats));
        let results = join_all(lookups).await;
        let mut out = DescribeLogDirsTopic::default();
        out.name = TopicName(s(topic.clone()));
        for (p, result) in partitions.iter().zip(results) {
            if let Ok(ops::PartitionStats { size_bytes, .. }) = result {
                let mut partition = DescribeLogDirsPartition::default();
                partition.partition_index = *p;
                partition.partition_size = size_bytes as i64;
                out.partitions.push(partition);
            }
        }
        dir.topics.push(out);
    }
    let mut response = DescribeLogDirsResponse::default();
    response.results = vec![dir];
    response
}

/// (total, usable) bytes of the data directory's file system; -1 when unknown.
fn rustix_free_space(path: &std::path::Path) -> (i64, i64) {
    match skein_engine::io::free_space(path) {
        Some((total, usable)) => (total as i64, usable as i64),
        None => (-1, -1),
    }
}
