//! AlterReplicaLogDirs v1-2 (`kafka-reassign-partitions` with `log_dirs`): moves
//! replicas between this broker's log directories (`--log-dirs`, JBOD). As Kafka's
//! ReplicaManager: the move runs in the background (`topics::move_to_log_dir`) and the
//! answer is NONE at once; a replica already there is NONE; a path that is not one of
//! this broker's log directories is LOG_DIR_NOT_FOUND, and a partition this broker
//! holds no replica of is REPLICA_NOT_AVAILABLE.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::{AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, TopicName};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_engine::TopicPartition;

use super::s;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 1, max: 2 };

pub async fn handle(shard: &Rc<Shard>, request: AlterReplicaLogDirsRequest) -> AlterReplicaLogDirsResponse {
    let dirs = shard.settings.log_dirs.clone();
    // Where each partition is to go: a partition named under two paths keeps the last,
    // as Kafka's response map does.
    let mut named: BTreeMap<(String, i32), Option<usize>> = BTreeMap::new();
    for dir in &request.dirs {
        let index = dirs.index_of(std::path::Path::new(dir.path.as_str())).filter(|_| !dir.path.is_empty());
        for topic in &dir.topics {
            for &partition in &topic.partitions {
                named.insert((topic.name.to_string(), partition), index);
            }
        }
    }
    let mut by_topic: BTreeMap<String, Vec<AlterReplicaLogDirPartitionResult>> = BTreeMap::new();
    for ((topic, partition), index) in named {
        let error = match index {
            None => code::LOG_DIR_NOT_FOUND,
            Some(target) => {
                let tp = TopicPartition::new(topic.clone(), partition);
                match crate::topics::move_to_log_dir(shard, &tp, target).await {
                    true => code::NONE,
                    false => code::REPLICA_NOT_AVAILABLE,
                }
            }
        };
        let result =
            AlterReplicaLogDirPartitionResult::default().with_partition_index(partition).with_error_code(error);
        by_topic.entry(topic).or_default().push(result);
    }
    let results = by_topic
        .into_iter()
        .map(|(topic, partitions)| {
            AlterReplicaLogDirTopicResult::default().with_topic_name(TopicName(s(topic))).with_partitions(partitions)
        })
        .collect();
    AlterReplicaLogDirsResponse::default().with_results(results)
}
