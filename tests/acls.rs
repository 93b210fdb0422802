//! ACLs with `--authorizer standard`: the matrix of every API Skein serves, driven by
//! `registry::APIS` (an API without a sample here fails the test), each called by a
//! principal without the access its entry names (it gets Kafka's authorization
//! error, or sees nothing where Kafka filters) and again once the ACLs are granted
//! (no authorization error); then real clients (Debian's kcat, the `skein acl` CLI
//! over SASL) denied and allowed, Metadata filtered, and ACLs kept across a restart.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use bytes::Bytes;
use common::{broker_port, Broker, RawClient};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use skein_control::security::acl::{Operation, PatternType, Permission, ResourceType, CLUSTER_NAME};
use skein_net::authorize::Access;

const TOPIC: &str = "acl-t";
const GROUP: &str = "acl-g";
const TXN: &str = "acl-tx";
/// The fixture topic's id (it is recreated when a call deletes it).
static TOPIC_ID: std::sync::Mutex<uuid::Uuid> = std::sync::Mutex::new(uuid::Uuid::nil());

/// Kafka's authorization error codes.
const AUTHORIZATION_ERRORS: [i16; 4] = [29, 30, 31, 53];

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// A node with a SASL_PLAINTEXT listener (PLAIN users admin, alice, bob) beside the
/// harness's PLAINTEXT one, the standard authorizer and `User:admin` as super user.
fn secured(dir: &Path, extra: &[&str]) -> (Broker, u16) {
    let users = dir.join("plain-users");
    std::fs::write(&users, "admin:admin-secret\nalice:alice-secret\nbob:bob-secret\n").unwrap();
    let port = broker_port();
    let listeners = format!("SASL_PLAINTEXT://127.0.0.1:{port}");
    let mut flags = vec![
        "--listeners",
        &listeners,
        "--sasl-plain-users",
        users.to_str().unwrap(),
        "--sasl-enabled-mechanisms",
        "PLAIN,SCRAM-SHA-512",
        "--authorizer",
        "standard",
        "--super-users",
        "User:admin",
        "--group-initial-rebalance-delay-ms",
        "0",
    ];
    flags.extend_from_slice(extra);
    (Broker::start(dir, "1", &flags), port)
}

/// A connection authenticated with PLAIN as `user`.
fn login(port: u16, user: &str) -> RawClient {
    let mut client = RawClient::connect(&format!("127.0.0.1:{port}"));
    let handshake = client.call(&SaslHandshakeRequest::default().with_mechanism(s("PLAIN")), 1);
    assert_eq!(handshake.error_code, 0);
    let token = format!("\0{user}\0{user}-secret");
    let answer = client.call(&SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)), 2);
    assert_eq!(answer.error_code, 0, "{user} authenticates");
    client
}

/// The ACLs `access` needs, on the fixture's resources.
fn grants(access: Access) -> Vec<(ResourceType, &'static str, Operation)> {
    match access {
        Access::Open => Vec::new(),
        Access::Cluster(op) => vec![(ResourceType::Cluster, CLUSTER_NAME, op)],
        Access::Topics(op) | Access::Configs(op) => vec![(ResourceType::Topic, TOPIC, op)],
        Access::Groups(op) => vec![(ResourceType::Group, GROUP, op)],
        Access::TransactionalIds(op) => vec![(ResourceType::TransactionalId, TXN, op)],
        Access::Both(a, b) => [grants(*a), grants(*b)].concat(),
        Access::CreateTopics => vec![(ResourceType::Cluster, CLUSTER_NAME, Operation::Create)],
        Access::CoordinatorKey => vec![(ResourceType::Group, GROUP, Operation::Describe)],
        Access::ProducerId => vec![(ResourceType::TransactionalId, TXN, Operation::Write)],
    }
}

fn create_acls(admin: &mut RawClient, principal: &str, acls: &[(ResourceType, &str, Operation)]) {
    use create_acls_request::AclCreation;
    let creations = acls
        .iter()
        .map(|(kind, name, op)| {
            AclCreation::default()
                .with_resource_type(kind.code())
                .with_resource_name(s(name))
                .with_resource_pattern_type(PatternType::Literal.code())
                .with_principal(s(principal))
                .with_host(s("*"))
                .with_operation(op.code())
                .with_permission_type(Permission::Allow.code())
        })
        .collect();
    let response = admin.call(&CreateAclsRequest::default().with_creations(creations), 3);
    assert!(response.results.iter().all(|r| r.error_code == 0), "{response:?}");
}

fn delete_acls_of(admin: &mut RawClient, principal: &str) {
    let filter = delete_acls_request::DeleteAclsFilter::default()
        .with_resource_type_filter(ResourceType::Any.code())
        .with_resource_name_filter(None)
        .with_host_filter(None)
        .with_pattern_type_filter(PatternType::Any.code())
        .with_principal_filter(Some(s(principal)))
        .with_operation(Operation::Any.code())
        .with_permission_type(Permission::Any.code());
    let response = admin.call(&DeleteAclsRequest::default().with_filters(vec![filter]), 3);
    assert_eq!(response.filter_results[0].error_code, 0, "{response:?}");
    let left = admin.call(
        &DescribeAclsRequest::default()
            .with_resource_type_filter(1)
            .with_resource_name_filter(None)
            .with_host_filter(None)
            .with_pattern_type_filter(1)
            .with_principal_filter(Some(s(principal)))
            .with_operation(1)
            .with_permission_type(1),
        3,
    );
    assert!(left.resources.is_empty(), "{principal}'s ACLs are gone: {left:?} after {response:?}");
}

fn batch() -> Bytes {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    Bytes::from(skein_engine::batch::testing::batch_with(2, 32, now, |_| None).to_vec())
}

/// Sends the sample request of `key` at `version`: the response, as Debug text.
fn sample(client: &mut RawClient, key: ApiKey, v: i16) -> Option<String> {
    macro_rules! call {
        ($request:expr) => {
            format!("{:?}", client.call(&$request, v))
        };
    }
    let topic = || TopicName(s(TOPIC));
    let group = || GroupId(s(GROUP));
    let txn = || TransactionalId(s(TXN));
    Some(match key {
        ApiKey::Produce => {
            use produce_request::{PartitionProduceData, TopicProduceData};
            let data = PartitionProduceData::default().with_index(0).with_records(Some(batch()));
            // From v13 the topic is named by id.
            let topic_id = *TOPIC_ID.lock().unwrap();
            let named = TopicProduceData::default().with_name(topic()).with_topic_id(topic_id);
            call!(ProduceRequest::default()
                .with_acks(1)
                .with_timeout_ms(5000)
                .with_topic_data(vec![named.with_partition_data(vec![data])]))
        }
        ApiKey::Fetch => {
            use fetch_request::{FetchPartition, FetchTopic};
            let partition = FetchPartition::default().with_partition(0).with_partition_max_bytes(1 << 20);
            let topic_id = *TOPIC_ID.lock().unwrap();
            call!(FetchRequest::default().with_replica_id(BrokerId(-1)).with_max_bytes(1 << 20).with_topics(vec![
                FetchTopic::default().with_topic(topic()).with_topic_id(topic_id).with_partitions(vec![partition])
            ]))
        }
        ApiKey::ListOffsets => {
            use list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
            let partition = ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1);
            call!(ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![ListOffsetsTopic::default().with_name(topic()).with_partitions(vec![partition])]))
        }
        ApiKey::Metadata => call!(MetadataRequest::default()
            .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default().with_name(Some(topic()))]))),
        ApiKey::ApiVersions => call!(common::api_versions_request()),
        ApiKey::CreateTopics => call!(CreateTopicsRequest::default().with_timeout_ms(5000).with_topics(vec![
            create_topics_request::CreatableTopic::default()
                .with_name(TopicName(s("acl-created")))
                .with_num_partitions(1)
                .with_replication_factor(1)
        ])),
        ApiKey::DeleteTopics => call!(DeleteTopicsRequest::default()
            .with_timeout_ms(5000)
            .with_topics(vec![delete_topics_request::DeleteTopicState::default().with_name(Some(topic()))])
            .with_topic_names(vec![topic()])),
        ApiKey::DeleteRecords => {
            use delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
            let partition = DeleteRecordsPartition::default().with_partition_index(0).with_offset(0);
            call!(DeleteRecordsRequest::default()
                .with_timeout_ms(5000)
                .with_topics(vec![DeleteRecordsTopic::default().with_name(topic()).with_partitions(vec![partition])]))
        }
        ApiKey::OffsetForLeaderEpoch => {
            use offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
            let partition = OffsetForLeaderPartition::default().with_partition(0).with_current_leader_epoch(-1);
            call!(OffsetForLeaderEpochRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
                OffsetForLeaderTopic::default().with_topic(topic()).with_partitions(vec![partition])
            ]))
        }
        ApiKey::InitProducerId => call!(InitProducerIdRequest::default()
            .with_transactional_id(Some(txn()))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)),
        ApiKey::DescribeConfigs => call!(DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s(TOPIC))
        ])),
        ApiKey::AlterConfigs => {
            use alter_configs_request::{AlterConfigsResource, AlterableConfig};
            let config = AlterableConfig::default().with_name(s("retention.ms")).with_value(Some(s("86400000")));
            call!(AlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s(TOPIC))
                .with_configs(vec![config])]))
        }
        ApiKey::IncrementalAlterConfigs => {
            use incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
            let config = AlterableConfig::default().with_name(s("retention.ms")).with_value(Some(s("86400000")));
            call!(IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s(TOPIC))
                .with_configs(vec![config])]))
        }
        ApiKey::DescribeLogDirs => call!(DescribeLogDirsRequest::default().with_topics(None)),
        ApiKey::CreatePartitions => call!(CreatePartitionsRequest::default().with_timeout_ms(5000).with_topics(vec![
            create_partitions_request::CreatePartitionsTopic::default().with_name(topic()).with_count(3)
        ])),
        ApiKey::DescribeCluster => call!(DescribeClusterRequest::default()),
        ApiKey::DescribeQuorum => call!(DescribeQuorumRequest::default()),
        // An id no broker has: BROKER_ID_NOT_REGISTERED once allowed.
        ApiKey::UnregisterBroker => call!(UnregisterBrokerRequest::default().with_broker_id(BrokerId(999))),
        // A single node's quorum cannot change: INVALID_REQUEST once allowed.
        ApiKey::AddRaftVoter => call!(AddRaftVoterRequest::default()
            .with_cluster_id(None)
            .with_voter_id(5)
            .with_listeners(vec![add_raft_voter_request::Listener::default()
                .with_name(s("CONTROLLER"))
                .with_host(s("127.0.0.1"))
                .with_port(1)])),
        ApiKey::RemoveRaftVoter => call!(RemoveRaftVoterRequest::default().with_cluster_id(None).with_voter_id(5)),
        ApiKey::UnregisterController => call!(UnregisterControllerRequest::default().with_controller_id(5)),
        // A directory the node does not have: LOG_DIR_NOT_FOUND once allowed.
        ApiKey::AlterReplicaLogDirs => {
            use alter_replica_log_dirs_request::{AlterReplicaLogDir, AlterReplicaLogDirTopic};
            let topic = AlterReplicaLogDirTopic::default().with_name(topic()).with_partitions(vec![0]);
            call!(AlterReplicaLogDirsRequest::default()
                .with_dirs(vec![AlterReplicaLogDir::default().with_path(s("/nowhere")).with_topics(vec![topic])]))
        }
        ApiKey::UpdateFeatures => {
            // The level share.version has already: allowed, and changes nothing.
            let update = update_features_request::FeatureUpdateKey::default()
                .with_feature(s("share.version"))
                .with_max_version_level(2)
                .with_upgrade_type(1);
            call!(UpdateFeaturesRequest::default().with_feature_updates(vec![update]))
        }
        ApiKey::DescribeTopicPartitions => call!(DescribeTopicPartitionsRequest::default()
            .with_response_partition_limit(100)
            .with_topics(vec![describe_topic_partitions_request::TopicRequest::default().with_name(topic())])),
        ApiKey::ElectLeaders => call!(ElectLeadersRequest::default().with_timeout_ms(5000).with_topic_partitions(None)),
        ApiKey::AlterPartitionReassignments => {
            call!(AlterPartitionReassignmentsRequest::default().with_timeout_ms(5000))
        }
        ApiKey::ListPartitionReassignments => {
            call!(ListPartitionReassignmentsRequest::default().with_timeout_ms(5000).with_topics(None))
        }
        ApiKey::FindCoordinator => {
            let request = match v >= 4 {
                true => FindCoordinatorRequest::default().with_coordinator_keys(vec![s(GROUP)]),
                false => FindCoordinatorRequest::default().with_key(s(GROUP)),
            };
            call!(request)
        }
        ApiKey::JoinGroup => call!(JoinGroupRequest::default()
            .with_group_id(group())
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default().with_name(s("range"))])),
        ApiKey::SyncGroup => call!(SyncGroupRequest::default().with_group_id(group()).with_member_id(s("nobody"))),
        ApiKey::Heartbeat => call!(HeartbeatRequest::default().with_group_id(group()).with_member_id(s("nobody"))),
        ApiKey::LeaveGroup => call!(LeaveGroupRequest::default()
            .with_group_id(group())
            .with_members(vec![leave_group_request::MemberIdentity::default().with_member_id(s("nobody"))])),
        ApiKey::OffsetCommit => call!(offset_commit(GROUP, 0)),
        ApiKey::OffsetFetch => {
            use offset_fetch_request::OffsetFetchRequestGroup;
            let request = match v >= 8 {
                true => OffsetFetchRequest::default()
                    .with_groups(vec![OffsetFetchRequestGroup::default().with_group_id(group()).with_topics(None)]),
                false => OffsetFetchRequest::default().with_group_id(group()).with_topics(None),
            };
            call!(request)
        }
        ApiKey::ListGroups => call!(ListGroupsRequest::default()),
        ApiKey::ListConfigResources => call!(ListConfigResourcesRequest::default()),
        ApiKey::DescribeGroups => call!(DescribeGroupsRequest::default().with_groups(vec![group()])),
        ApiKey::DeleteGroups => call!(DeleteGroupsRequest::default().with_groups_names(vec![group()])),
        ApiKey::OffsetDelete => {
            use offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic};
            let partition = OffsetDeleteRequestPartition::default().with_partition_index(0);
            call!(OffsetDeleteRequest::default().with_group_id(group()).with_topics(vec![
                OffsetDeleteRequestTopic::default().with_name(topic()).with_partitions(vec![partition])
            ]))
        }
        ApiKey::ConsumerGroupHeartbeat => call!(ConsumerGroupHeartbeatRequest::default()
            .with_group_id(group())
            .with_member_id(s(&uuid::Uuid::new_v4().to_string()))
            .with_rebalance_timeout_ms(10_000)
            .with_subscribed_topic_names(Some(vec![topic()]))
            .with_topic_partitions(Some(Vec::new()))),
        ApiKey::ConsumerGroupDescribe => call!(ConsumerGroupDescribeRequest::default().with_group_ids(vec![group()])),
        ApiKey::ShareGroupHeartbeat => call!(ShareGroupHeartbeatRequest::default()
            .with_group_id(group())
            .with_member_id(s("acl-member"))
            .with_subscribed_topic_names(Some(vec![topic()]))),
        ApiKey::ShareGroupDescribe => call!(ShareGroupDescribeRequest::default().with_group_ids(vec![group()])),
        ApiKey::StreamsGroupHeartbeat => {
            use streams_group_heartbeat_request::{Subtopology, Topology};
            let topology = Topology::default().with_subtopologies(vec![Subtopology::default()
                .with_subtopology_id(s("0"))
                .with_source_topics(vec![topic()])]);
            call!(StreamsGroupHeartbeatRequest::default()
                .with_group_id(group())
                .with_member_id(s("acl-member"))
                .with_rebalance_timeout_ms(10_000)
                .with_process_id(Some(s("acl-process")))
                .with_topology(Some(topology))
                .with_active_tasks(Some(Vec::new()))
                .with_standby_tasks(Some(Vec::new()))
                .with_warmup_tasks(Some(Vec::new())))
        }
        ApiKey::StreamsGroupDescribe => call!(StreamsGroupDescribeRequest::default().with_group_ids(vec![group()])),
        ApiKey::ShareFetch | ApiKey::ShareAcknowledge => {
            let topic_id = *TOPIC_ID.lock().unwrap();
            let fetch = ShareFetchRequest::default()
                .with_group_id(Some(group()))
                .with_member_id(Some(s("acl-member")))
                .with_max_records(10)
                .with_max_bytes(1 << 20)
                .with_topics(vec![share_fetch_request::FetchTopic::default()
                    .with_topic_id(topic_id)
                    .with_partitions(vec![share_fetch_request::FetchPartition::default().with_partition_index(0)])]);
            let fetched = format!("{:?}", client.call(&fetch, 1));
            if key == ApiKey::ShareFetch {
                return Some(fetched);
            }
            // An acknowledgement continues the session the fetch opened.
            let batch = share_acknowledge_request::AcknowledgementBatch::default()
                .with_first_offset(0)
                .with_last_offset(0)
                .with_acknowledge_types(vec![1]);
            call!(ShareAcknowledgeRequest::default()
                .with_group_id(Some(group()))
                .with_member_id(Some(s("acl-member")))
                .with_share_session_epoch(1)
                .with_topics(vec![share_acknowledge_request::AcknowledgeTopic::default()
                    .with_topic_id(topic_id)
                    .with_partitions(vec![share_acknowledge_request::AcknowledgePartition::default()
                        .with_partition_index(0)
                        .with_acknowledgement_batches(vec![batch])])]))
        }
        ApiKey::DescribeShareGroupOffsets => call!(DescribeShareGroupOffsetsRequest::default().with_groups(vec![
            describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default()
                .with_group_id(group())
                .with_topics(Some(vec![
                    describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(topic())
                        .with_partitions(vec![0])
                ]))
        ])),
        ApiKey::AlterShareGroupOffsets => call!(AlterShareGroupOffsetsRequest::default()
            .with_group_id(group())
            .with_topics(vec![alter_share_group_offsets_request::AlterShareGroupOffsetsRequestTopic::default()
                .with_topic_name(topic())
                .with_partitions(vec![
                    alter_share_group_offsets_request::AlterShareGroupOffsetsRequestPartition::default()
                        .with_partition_index(0)
                        .with_start_offset(0)
                ])])),
        ApiKey::DeleteShareGroupOffsets => call!(DeleteShareGroupOffsetsRequest::default()
            .with_group_id(group())
            .with_topics(vec![delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic::default()
                .with_topic_name(topic())])),
        ApiKey::InitializeShareGroupState => call!(InitializeShareGroupStateRequest::default()
            .with_group_id(s("acl-share"))
            .with_topics(vec![initialize_share_group_state_request::InitializeStateData::default()
                .with_topic_id(*TOPIC_ID.lock().unwrap())
                .with_partitions(vec![initialize_share_group_state_request::PartitionData::default()
                    .with_partition(0)
                    .with_state_epoch(1)])])),
        ApiKey::ReadShareGroupState => call!(ReadShareGroupStateRequest::default()
            .with_group_id(s("acl-share"))
            .with_topics(vec![read_share_group_state_request::ReadStateData::default()
                .with_topic_id(*TOPIC_ID.lock().unwrap())
                .with_partitions(vec![read_share_group_state_request::PartitionData::default().with_partition(0)])])),
        ApiKey::WriteShareGroupState => call!(WriteShareGroupStateRequest::default()
            .with_group_id(s("acl-share"))
            .with_topics(vec![write_share_group_state_request::WriteStateData::default()
                .with_topic_id(*TOPIC_ID.lock().unwrap())
                .with_partitions(vec![write_share_group_state_request::PartitionData::default()
                    .with_partition(0)
                    .with_state_epoch(1)])])),
        ApiKey::DeleteShareGroupState => call!(DeleteShareGroupStateRequest::default()
            .with_group_id(s("acl-share"))
            .with_topics(vec![delete_share_group_state_request::DeleteStateData::default()
                .with_topic_id(*TOPIC_ID.lock().unwrap())
                .with_partitions(vec![delete_share_group_state_request::PartitionData::default().with_partition(0)])])),
        ApiKey::ReadShareGroupStateSummary => call!(ReadShareGroupStateSummaryRequest::default()
            .with_group_id(s("acl-share"))
            .with_topics(vec![read_share_group_state_summary_request::ReadStateSummaryData::default()
                .with_topic_id(*TOPIC_ID.lock().unwrap())
                .with_partitions(vec![
                    read_share_group_state_summary_request::PartitionData::default().with_partition(0)
                ])])),
        ApiKey::AddPartitionsToTxn => {
            let topics = vec![add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(topic())
                .with_partitions(vec![0])];
            call!(AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(txn())
                .with_v3_and_below_producer_id(ProducerId(1))
                .with_v3_and_below_topics(topics))
        }
        ApiKey::AddOffsetsToTxn => call!(AddOffsetsToTxnRequest::default()
            .with_transactional_id(txn())
            .with_producer_id(ProducerId(1))
            .with_group_id(group())),
        ApiKey::EndTxn => call!(EndTxnRequest::default().with_transactional_id(txn()).with_producer_id(ProducerId(1))),
        ApiKey::WriteTxnMarkers => {
            use write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
            let marker = WritableTxnMarker::default().with_producer_id(ProducerId(777)).with_topics(vec![
                WritableTxnMarkerTopic::default().with_name(topic()).with_partition_indexes(vec![0]),
            ]);
            call!(WriteTxnMarkersRequest::default().with_markers(vec![marker]))
        }
        ApiKey::TxnOffsetCommit => {
            use txn_offset_commit_request::{TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic};
            let partition = TxnOffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(1);
            call!(TxnOffsetCommitRequest::default()
                .with_transactional_id(txn())
                .with_group_id(group())
                .with_producer_id(ProducerId(1))
                .with_generation_id_or_member_epoch(-1)
                .with_member_id(s(""))
                .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                    .with_name(topic())
                    .with_topic_id(*TOPIC_ID.lock().unwrap())
                    .with_partitions(vec![partition])]))
        }
        ApiKey::DescribeTransactions => {
            call!(DescribeTransactionsRequest::default().with_transactional_ids(vec![txn()]))
        }
        ApiKey::ListTransactions => call!(ListTransactionsRequest::default().with_duration_filter(-1)),
        ApiKey::DescribeProducers => call!(DescribeProducersRequest::default().with_topics(vec![
            describe_producers_request::TopicRequest::default().with_name(topic()).with_partition_indexes(vec![0])
        ])),
        ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => return Some(String::new()),
        ApiKey::DescribeUserScramCredentials => call!(DescribeUserScramCredentialsRequest::default()),
        ApiKey::AlterUserScramCredentials => {
            call!(AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                    .with_name(s("carol"))
                    .with_mechanism(2)
                    .with_iterations(4096)
                    .with_salt(Bytes::from_static(b"salt"))
                    .with_salted_password(Bytes::from(vec![1u8; 64]))
            ]))
        }
        ApiKey::CreateAcls => {
            call!(CreateAclsRequest::default().with_creations(vec![create_acls_request::AclCreation::default()
                .with_resource_type(2)
                .with_resource_name(s("other"))
                .with_resource_pattern_type(3)
                .with_principal(s("User:nobody"))
                .with_host(s("*"))
                .with_operation(3)
                .with_permission_type(3)]))
        }
        ApiKey::DescribeAcls => call!(DescribeAclsRequest::default()
            .with_resource_type_filter(1)
            .with_resource_name_filter(None)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_pattern_type_filter(1)
            .with_operation(1)
            .with_permission_type(1)),
        ApiKey::DeleteAcls => {
            call!(DeleteAclsRequest::default().with_filters(vec![delete_acls_request::DeleteAclsFilter::default()
                .with_resource_type_filter(1)
                .with_resource_name_filter(None)
                .with_host_filter(None)
                .with_pattern_type_filter(1)
                .with_principal_filter(Some(s("User:nobody")))
                .with_operation(1)
                .with_permission_type(1)]))
        }
        ApiKey::DescribeClientQuotas => call!(DescribeClientQuotasRequest::default()),
        ApiKey::AlterClientQuotas => {
            use alter_client_quotas_request::{EntityData, EntryData, OpData};
            let entity = EntityData::default().with_entity_type(s("user")).with_entity_name(Some(s("carol")));
            let op = OpData::default().with_key(s("producer_byte_rate")).with_value(1e6);
            call!(AlterClientQuotasRequest::default()
                .with_entries(vec![EntryData::default().with_entity(vec![entity]).with_ops(vec![op])]))
        }
        _ => return None,
    })
}

/// Creates `name` (an existing one is left as it is) over an admin's connection.
fn create_topic_at(admin: &mut RawClient, name: &str, partitions: i32) {
    let request = CreateTopicsRequest::default().with_timeout_ms(5000).with_topics(vec![common::creatable_topic(
        name,
        partitions,
        &[],
    )]);
    let response = admin.call(&request, 7);
    assert!(matches!(response.topics[0].error_code, 0 | 36), "{response:?}");
    let listed = admin.call(&MetadataRequest::default().with_topics(None), 12);
    if let Some(topic) = listed.topics.iter().find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == TOPIC)) {
        *TOPIC_ID.lock().unwrap() = topic.topic_id;
    }
}

fn offset_commit(group: &str, offset: i64) -> OffsetCommitRequest {
    use offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
    let partition = OffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(offset);
    OffsetCommitRequest::default().with_group_id(GroupId(s(group))).with_generation_id_or_member_epoch(-1).with_topics(
        // From v10 the topic is named by id.
        vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(s(TOPIC)))
            .with_topic_id(*TOPIC_ID.lock().unwrap())
            .with_partitions(vec![partition])],
    )
}

/// Whether `debug` holds one of Kafka's authorization errors.
fn authorization_error(debug: &str) -> Option<i16> {
    AUTHORIZATION_ERRORS
        .into_iter()
        .find(|code| [",", " "].iter().any(|end| debug.contains(&format!("error_code: {code}{end}"))))
}

// Every API in the registry refuses a principal without the access its entry names,
// with Kafka's error (or filters what it lists), and serves it once the ACLs exist.
#[test]
fn every_api_checks_its_acls() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, port) = secured(dir.path(), &[]);
    let mut admin = login(port, "admin");
    create_topic_at(&mut admin, TOPIC, 2);
    // The fixture's group and transactional id exist, for the listings.
    let committed = admin.call(&offset_commit(GROUP, 1), 8);
    assert_eq!(committed.topics[0].partitions[0].error_code, 0, "{committed:?}");
    let init = admin.call(
        &InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(s(TXN))))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
        4,
    );
    assert_eq!(init.error_code, 0, "{init:?}");
    let mut alice = login(port, "alice");
    let mut failures = Vec::new();
    for (key, range, access) in skein_net::registry::APIS {
        if *access == Access::Open {
            continue;
        }
        // Clients send AddPartitionsToTxn up to v3; v4+ is a broker's (CLUSTER_ACTION).
        let version = if *key == ApiKey::AddPartitionsToTxn { 3 } else { range.max };
        let Some(denied) = sample(&mut alice, *key, version) else {
            failures.push(format!("{key:?}: no sample request in tests/acls.rs"));
            continue;
        };
        let listed = |debug: &str| match key {
            ApiKey::ListGroups => Some(debug.contains(&format!("\"{GROUP}\""))),
            ApiKey::ListTransactions => Some(debug.contains(&format!("\"{TXN}\""))),
            _ => None,
        };
        match listed(&denied) {
            Some(true) => failures.push(format!("{key:?} v{version} lists what alice may not see: {denied}")),
            Some(false) => {}
            None if authorization_error(&denied) != Some(access.error()) => {
                failures.push(format!("{key:?} v{version} without ACLs: want {}: {denied}", access.error()))
            }
            None => {}
        }
        // Two checks: with only the first granted, the second refuses (OffsetFetch of
        // all topics leaves out those it may not describe).
        if let Access::Both(first, second) = access {
            create_acls(&mut admin, "User:alice", &grants(**first));
            let half = sample(&mut alice, *key, version).unwrap_or_default();
            let refused = match key {
                ApiKey::OffsetFetch => {
                    let id = TOPIC_ID.lock().unwrap().to_string();
                    !half.contains(&format!("\"{TOPIC}\"")) && !half.contains(&id)
                }
                _ => authorization_error(&half) == Some(second.error()),
            };
            if !refused {
                failures.push(format!(
                    "{key:?} v{version} with only {:?}: want {}: {half}",
                    grants(**first),
                    second.error()
                ));
            }
            delete_acls_of(&mut admin, "User:alice");
        }
        create_acls(&mut admin, "User:alice", &grants(*access));
        let allowed = sample(&mut alice, *key, version).unwrap_or_default();
        if let Some(code) = authorization_error(&allowed) {
            failures.push(format!("{key:?} v{version} with {:?}: still {code}: {allowed}", grants(*access)));
        }
        if listed(&allowed) == Some(false) {
            failures.push(format!("{key:?} v{version} with ACLs lists nothing: {allowed}"));
        }
        delete_acls_of(&mut admin, "User:alice");
        // The fixture stays: the topic, group and transactional id are recreated if
        // the allowed call removed them.
        create_topic_at(&mut admin, TOPIC, 2);
        admin.call(&offset_commit(GROUP, 1), 8);
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    assert!(broker.metric_sum("skein_authorization_denials_total") > 0);
}

fn run(mut command: Command) -> Output {
    command.output().unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"))
}

fn kcat(port: u16, user: &str, args: &[&str], input: Option<&str>) -> Output {
    let mut command = Command::new("kcat");
    let password = format!("sasl.password={user}-secret");
    let username = format!("sasl.username={user}");
    command.args(["-b", &format!("127.0.0.1:{port}"), "-X", "security.protocol=SASL_PLAINTEXT"]);
    command.args(["-X", "sasl.mechanism=PLAIN", "-X", &username, "-X", &password]);
    command.args(args);
    match input {
        Some(text) => {
            use std::io::Write;
            command.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
            command.stderr(std::process::Stdio::piped());
            let mut child = command.spawn().expect("kcat runs");
            child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
            child.wait_with_output().unwrap()
        }
        None => run(command),
    }
}

fn acl(port: u16, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_skein"));
    command.arg("acl").args(args).args(["--bootstrap-server", &format!("127.0.0.1:{port}")]);
    command.args(["--sasl-mechanism", "PLAIN", "--sasl-username", "admin", "--sasl-password", "admin-secret"]);
    run(command)
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

// kcat as alice is refused until `skein acl add` grants it, sees only the topics it
// may describe, and the ACLs survive a restart; `skein acl remove` takes them away.
#[test]
fn real_clients_denied_then_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let (mut broker, port) = secured(dir.path(), &[]);
    let mut admin = login(port, "admin");
    create_topic_at(&mut admin, "orders", 1);
    create_topic_at(&mut admin, "secret", 1);
    let produce =
        |input: &str| kcat(port, "alice", &["-P", "-t", "orders", "-X", "message.timeout.ms=5000"], Some(input));
    let refused = produce("one\n");
    assert!(text(&refused).to_lowercase().contains("authorization failed"), "{}", text(&refused));
    // The CLI without SASL is ANONYMOUS on PLAINTEXT, and refused.
    let mut anonymous = Command::new(env!("CARGO_BIN_EXE_skein"));
    anonymous.args(["acl", "list", "--bootstrap-server", &broker.bootstrap()]);
    let anonymous = run(anonymous);
    assert!(
        !anonymous.status.success() && text(&anonymous).contains("ClusterAuthorizationFailed"),
        "{}",
        text(&anonymous)
    );
    let added = acl(
        port,
        &["add", "--principal", "User:alice", "--operation", "Write", "--operation", "Read", "--topic", "orders"],
    );
    assert!(added.status.success(), "{}", text(&added));
    let group = acl(
        port,
        &[
            "add",
            "--principal",
            "User:alice",
            "--operation",
            "Read",
            "--group",
            "readers",
            "--resource-pattern-type",
            "prefixed",
        ],
    );
    assert!(group.status.success(), "{}", text(&group));
    let sent = produce("one\ntwo\n");
    assert!(sent.status.success(), "{}", text(&sent));
    let read = kcat(port, "alice", &["-G", "readers-1", "-o", "beginning", "-e", "-q", "-f", "%s\n", "orders"], None);
    assert_eq!(String::from_utf8_lossy(&read.stdout).lines().collect::<Vec<_>>(), ["one", "two"], "{}", text(&read));
    // Metadata shows alice only the topic she may describe.
    let listing = text(&kcat(port, "alice", &["-L"], None));
    assert!(listing.contains("\"orders\"") && !listing.contains("\"secret\""), "{listing}");
    let listed = text(&acl(port, &["list", "--principal", "User:alice"]));
    assert_eq!(listed.lines().count(), 3, "{listed}");
    assert!(listed.contains("operation=WRITE, permissionType=ALLOW) on ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)"), "{listed}");
    // A DENY wins over the ALLOW.
    let deny = acl(port, &["add", "--principal", "User:alice", "--operation", "Write", "--topic", "orders", "--deny"]);
    assert!(deny.status.success(), "{}", text(&deny));
    assert!(text(&produce("three\n")).to_lowercase().contains("authorization failed"));
    broker.stop();
    broker.restart();
    let listed = text(&acl(port, &["list", "--topic", "orders"]));
    assert_eq!(listed.lines().count(), 3, "the ACLs survive a restart: {listed}");
    let removed = acl(port, &["remove", "--principal", "User:alice", "--topic", "orders", "--deny"]);
    assert!(text(&removed).contains("removed") && removed.status.success(), "{}", text(&removed));
    assert!(produce("four\n").status.success());
    let bad = acl(port, &["add", "--principal", "alice", "--operation", "Read", "--topic", "x"]);
    assert!(!bad.status.success() && text(&bad).contains("principal"), "{}", text(&bad));
}
