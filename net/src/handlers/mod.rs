//! One module per Kafka API, each declaring the versions it implements (`VERSIONS`)
//! and a `handle` function. `registry` maps API keys to them.

pub mod acls;
pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod alter_configs;
pub mod alter_partition_reassignments;
pub mod alter_replica_log_dirs;
pub mod api_versions;
pub mod client_quotas;
mod commits;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod create_partitions;
pub mod create_topics;
pub mod delegation_tokens;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_quorum;
pub mod describe_topic_partitions;
pub mod describe_transactions;
pub mod elect_leaders;
pub mod end_txn;
pub mod fetch;
pub mod find_coordinator;
pub mod get_telemetry_subscriptions;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leaders;
pub mod leave_group;
pub mod list_config_resources;
pub mod list_groups;
pub mod list_offsets;
pub mod list_partition_reassignments;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod push_telemetry;
pub mod raft_voters;
pub mod sasl;
pub mod share_acknowledge;
pub mod share_fetch;
pub mod share_group_describe;
pub mod share_group_heartbeat;
pub mod share_offsets;
pub mod share_state;
pub mod streams_group_describe;
pub mod streams_group_heartbeat;
pub mod sync_group;
pub mod txn_offset_commit;
pub mod unregister_broker;
pub mod update_features;
pub mod user_scram_credentials;
pub mod write_txn_markers;

use std::rc::Rc;

use kafka_protocol::protocol::StrBytes;
use skein_control::errors::code;
use skein_control::metadata::MetadataImage;
use skein_engine::TopicPartition;

use crate::shard::{PartitionError, Shard, ShardOp};

/// Runs one operation per partition of topic `name` on the partitions' owner shards,
/// concurrently, one message per other shard (`Shard::call_many`); a partition the topic does not have (or an unknown topic) answers
/// UNKNOWN_TOPIC_OR_PARTITION. Results come back in the order of `ops`.
pub(crate) async fn route_partitions<O: ShardOp>(
    shard: &Rc<Shard>,
    image: &MetadataImage,
    name: &str,
    ops: impl Iterator<Item = (i32, O)>,
    authorized: bool,
) -> Vec<Result<O::Reply, PartitionError>> {
    let meta = image.topic(name);
    let calls = ops
        .map(|(index, op)| {
            if !authorized {
                return Err(PartitionError::new(crate::authorize::TOPIC_AUTHORIZATION_FAILED));
            }
            if !meta.is_some_and(|m| index >= 0 && index < m.partitions) {
                return Err(PartitionError::new(code::UNKNOWN_TOPIC_OR_PARTITION));
            }
            Ok((TopicPartition::new(name.to_owned(), index), op))
        })
        .collect();
    shard.call_many(calls).await
}

/// A `StrBytes` from an owned string.
pub(crate) fn s(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

/// Groups per-partition results by topic, keeping the order in which topics first
/// appear: `O(n)` with a hash index, where a search of the topics list for each
/// partition would be `O(n²)` on requests naming thousands of topics. A partition of
/// the topic before it (the usual order) joins its group without hashing.
pub(crate) fn group_by_topic<K, T>(items: impl IntoIterator<Item = (K, T)>) -> Vec<(K, Vec<T>)>
where
    K: std::hash::Hash + Eq + Clone,
{
    let mut index: std::collections::HashMap<K, usize> = std::collections::HashMap::new();
    let mut groups: Vec<(K, Vec<T>)> = Vec::new();
    for (key, item) in items {
        if let Some((_, group)) = groups.last_mut().filter(|(last, _)| *last == key) {
            group.push(item);
            continue;
        }
        match index.get(&key) {
            Some(&at) => groups[at].1.push(item),
            None => {
                index.insert(key.clone(), groups.len());
                groups.push((key, vec![item]));
            }
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    // Items are grouped by key in first-seen order, each group in arrival order.
    #[test]
    fn group_by_topic_keeps_order() {
        let grouped = super::group_by_topic([("b", 1), ("a", 2), ("b", 3), ("c", 4), ("a", 5)]);
        assert_eq!(grouped, vec![("b", vec![1, 3]), ("a", vec![2, 5]), ("c", vec![4])]);
        // Runs of one key (the usual order), then a key seen before.
        let grouped = super::group_by_topic([("b", 1), ("b", 2), ("a", 3), ("a", 4), ("b", 5)]);
        assert_eq!(grouped, vec![("b", vec![1, 2, 5]), ("a", vec![3, 4])]);
    }
}
