//! One module per Kafka API, each declaring the versions it implements (`VERSIONS`)
//! and a `handle` function. `registry` maps API keys to them.

pub mod alter_configs;
pub mod api_versions;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod produce;
pub mod sync_group;

use kafka_protocol::protocol::StrBytes;

/// A `StrBytes` from an owned string.
pub(crate) fn s(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}
