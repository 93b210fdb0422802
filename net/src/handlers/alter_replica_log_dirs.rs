//! AlterReplicaLogDirs v1-2 (`kafka-reassign-partitions` with `log_dirs`): moves
//! replicas between this broker's log directories. A Skein node has one data directory
//! (`--data-dir`; more than one, JBOD, is not built), so the one move there is, is to
//! the directory a replica is in already, which Kafka's ReplicaManager answers NONE
//! without moving anything. As there: another path is LOG_DIR_NOT_FOUND, and a
//! partition this node holds no replica of is REPLICA_NOT_AVAILABLE.

use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;

use futures_util::future::join_all;
use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::{AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, TopicName};
use kafka_protocol::protocol::VersionRange;
use skein_engine::TopicPartition;

use super::s;
use crate::errors::code;
use crate::shard::{ops, Shard};

pub const VERSIONS: VersionRange = VersionRange { min: 1, max: 2 };

/// Whether `path` names the directory `dir`, absolute (as absolute paths, component
/// by component: a trailing `/` or a relative spelling names the same directory).
fn names(path: &str, dir: &Path) -> bool {
    std::path::absolute(path).is_ok_and(|path| path == dir)
}

pub async fn handle(shard: &Rc<Shard>, request: AlterReplicaLogDirsRequest) -> AlterReplicaLogDirsResponse {
    let data_dir = std::path::absolute(&shard.settings.data_dir).unwrap_or_else(|_| shard.settings.data_dir.clone());
    // Where each partition is to go: a partition named under two paths keeps the last,
    // as Kafka's response map does.
    let mut named: BTreeMap<(String, i32), bool> = BTreeMap::new();
    for dir in &request.dirs {
        let known = names(dir.path.as_str(), &data_dir);
        for topic in &dir.topics {
            for &partition in &topic.partitions {
                named.insert((topic.name.to_string(), partition), known);
            }
        }
    }
    let mut outcomes: BTreeMap<(String, i32), i16> = BTreeMap::new();
    let mut here = Vec::new();
    for (key, known) in named {
        match known {
            true => here.push(key),
            false => {
                outcomes.insert(key, code::LOG_DIR_NOT_FOUND);
            }
        }
    }
    let lookups = here.iter().map(|(topic, p)| shard.call(TopicPartition::new(topic.clone(), *p), ops::Stats));
    for (key, hosted) in here.iter().cloned().zip(join_all(lookups).await) {
        let outcome = match hosted {
            Ok(_) => code::NONE,
            Err(_) => code::REPLICA_NOT_AVAILABLE,
        };
        outcomes.insert(key, outcome);
    }
    let mut by_topic: BTreeMap<String, Vec<AlterReplicaLogDirPartitionResult>> = BTreeMap::new();
    for ((topic, partition), error) in outcomes {
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

#[cfg(test)]
mod tests {
    use super::*;

    // A path names the data directory whatever its spelling.
    #[test]
    fn paths_name_the_directory() {
        let dir = Path::new("/var/lib/skein");
        let relative = std::env::current_dir().unwrap().join("skein-data");
        assert!(names("/var/lib/skein", dir));
        assert!(names("/var/lib/skein/", dir));
        assert!(!names("/var/lib/other", dir));
        assert!(!names("", dir));
        assert!(names("skein-data", &relative));
    }
}
