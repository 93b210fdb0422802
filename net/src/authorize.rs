//! What each API requires of its caller, and the checks Kafka's KafkaApis makes
//! before a request does any work. `registry::APIS` names every API's `Access`, so
//! an API cannot be served without saying what it checks.
//!
//! Checks on the whole request (a cluster operation, the request's group or
//! transactional id) are made here, in `denied`, which answers a refused request
//! with the error in every place its response has one. Checks on each topic, group
//! or transactional id a request names are made by the handlers, through `Caller`,
//! so that the resources allowed are served and the others get their error.

use std::rc::Rc;

use kafka_protocol::messages::*;

use crate::errors::code;
use crate::security::acl::{Authorizer, Operation, ResourceType, Session, CLUSTER_NAME};

pub use crate::security::acl::Operation as Op;

pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
pub const GROUP_AUTHORIZATION_FAILED: i16 = 30;
pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;

/// What an API requires: the resources it checks, in the order Kafka checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Nothing: ApiVersions, the SASL exchange, DescribeCluster.
    Open,
    /// An operation on the cluster.
    Cluster(Operation),
    /// An operation on each topic the request names.
    Topics(Operation),
    /// An operation on each group (or the one group) the request names.
    Groups(Operation),
    /// An operation on each transactional id the request names.
    TransactionalIds(Operation),
    /// Two checks, both needed.
    Both(&'static Access, &'static Access),
    /// CREATE on the cluster, else on each topic (CreateTopics, and Metadata's
    /// auto-creation).
    CreateTopics,
    /// A group or a transactional id, by the key type (FindCoordinator).
    CoordinatorKey,
    /// A transactional id's WRITE, or for an idempotent producer IDEMPOTENT_WRITE on
    /// the cluster or WRITE on some topic (InitProducerId).
    ProducerId,
    /// A topic config's DESCRIBE_CONFIGS or ALTER_CONFIGS, a broker's on the cluster.
    Configs(Operation),
}

impl Access {
    /// The error a caller without the access gets.
    pub fn error(self) -> i16 {
        match self {
            Access::Open => code::NONE,
            Access::Cluster(_) => CLUSTER_AUTHORIZATION_FAILED,
            Access::Topics(_) | Access::CreateTopics | Access::Configs(_) => TOPIC_AUTHORIZATION_FAILED,
            Access::Groups(_) | Access::CoordinatorKey => GROUP_AUTHORIZATION_FAILED,
            Access::TransactionalIds(_) | Access::ProducerId => TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            Access::Both(first, _) => first.error(),
        }
    }
}

/// The caller of one request: its session and the shard's ACL index.
pub struct Caller {
    pub session: Rc<Session>,
    authorizer: Option<Rc<Authorizer>>,
    /// Checks refused so far, for the metrics.
    pub denials: std::cell::Cell<u64>,
}

impl Caller {
    pub fn new(session: Rc<Session>, authorizer: Option<Rc<Authorizer>>) -> Caller {
        Caller { session, authorizer, denials: Default::default() }
    }

    /// A caller that may do everything (no authorizer configured).
    pub fn unchecked() -> Caller {
        Caller::new(Session::new("User:ANONYMOUS".into(), String::new()), None)
    }

    pub fn may(&self, operation: Operation, kind: ResourceType, name: &str) -> bool {
        let allowed = self.session.allows(self.authorizer.as_deref(), operation, kind, name);
        if !allowed {
            self.denials.set(self.denials.get() + 1);
        }
        allowed
    }

    pub fn topic(&self, operation: Operation, name: &str) -> bool {
        self.may(operation, ResourceType::Topic, name)
    }

    pub fn group(&self, operation: Operation, name: &str) -> bool {
        self.may(operation, ResourceType::Group, name)
    }

    pub fn cluster(&self, operation: Operation) -> bool {
        self.may(operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    pub fn transactional_id(&self, operation: Operation, id: &str) -> bool {
        self.may(operation, ResourceType::TransactionalId, id)
    }

    /// Whether a topic may be created: CREATE on the cluster or on the topic.
    pub fn may_create_topic(&self, name: &str) -> bool {
        self.cluster(Operation::Create) || self.topic(Operation::Create, name)
    }

    /// Whether the caller may perform `operation` on some resource of `kind`.
    pub fn may_any(&self, operation: Operation, kind: ResourceType) -> bool {
        match &self.authorizer {
            None => true,
            Some(authorizer) => authorizer.authorize_any(&self.session.principal, &self.session.host, operation, kind),
        }
    }

    /// Whether ACLs are checked at all.
    pub fn checked(&self) -> bool {
        self.authorizer.is_some()
    }
}

/// The response to `request` when the caller lacks what the whole request needs;
/// `None` when it may go on (per-resource checks are the handler's).
pub fn denied(caller: &Caller, request: &RequestKind, version: i16) -> Option<ResponseKind> {
    if !caller.checked() {
        return None;
    }
    // Each is true when the caller lacks the operation.
    let no_cluster = |operation| !caller.cluster(operation);
    let no_group = |operation, id: &str| !caller.group(operation, id);
    let no_txn = |operation, id: &str| !caller.transactional_id(operation, id);
    Some(match request {
        RequestKind::Produce(r) => {
            let id = r.transactional_id.as_deref()?;
            if !no_txn(Op::Write, id) {
                return None;
            }
            ResponseKind::Produce(produce(r, TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        }
        RequestKind::Fetch(r) if r.replica_id.0 >= 0 || r.replica_state.replica_id.0 >= 0 => {
            if !no_cluster(Op::ClusterAction) {
                return None;
            }
            ResponseKind::Fetch(fetch(r, TOPIC_AUTHORIZATION_FAILED))
        }
        RequestKind::InitProducerId(r) => {
            let allowed = match r.transactional_id.as_deref() {
                Some(id) => caller.transactional_id(Op::Write, id),
                None => caller.cluster(Op::IdempotentWrite) || caller.may_any(Op::Write, ResourceType::Topic),
            };
            let code = match r.transactional_id.is_some() {
                true => TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                false => CLUSTER_AUTHORIZATION_FAILED,
            };
            match allowed {
                true => return None,
                false => ResponseKind::InitProducerId(
                    InitProducerIdResponse::default().with_error_code(code).with_producer_id(ProducerId(-1)),
                ),
            }
        }
        RequestKind::JoinGroup(r) if no_group(Op::Read, &r.group_id) => ResponseKind::JoinGroup(
            JoinGroupResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED).with_generation_id(-1),
        ),
        RequestKind::SyncGroup(r) if no_group(Op::Read, &r.group_id) => {
            ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED))
        }
        RequestKind::Heartbeat(r) if no_group(Op::Read, &r.group_id) => {
            ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED))
        }
        RequestKind::LeaveGroup(r) if no_group(Op::Read, &r.group_id) => {
            ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED))
        }
        RequestKind::ConsumerGroupHeartbeat(r) if no_group(Op::Read, &r.group_id) => {
            ResponseKind::ConsumerGroupHeartbeat(
                ConsumerGroupHeartbeatResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED),
            )
        }
        // A member may subscribe only to topics it may describe (Kafka 4).
        RequestKind::ConsumerGroupHeartbeat(r)
            if r.subscribed_topic_names.iter().flatten().any(|t| !caller.topic(Op::Describe, t)) =>
        {
            ResponseKind::ConsumerGroupHeartbeat(
                ConsumerGroupHeartbeatResponse::default().with_error_code(TOPIC_AUTHORIZATION_FAILED),
            )
        }
        RequestKind::OffsetCommit(r) if no_group(Op::Read, &r.group_id) => {
            ResponseKind::OffsetCommit(offset_commit(r, GROUP_AUTHORIZATION_FAILED))
        }
        RequestKind::OffsetDelete(r) if no_group(Op::Delete, &r.group_id) => {
            ResponseKind::OffsetDelete(OffsetDeleteResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED))
        }
        RequestKind::EndTxn(r) if no_txn(Op::Write, &r.transactional_id) => {
            ResponseKind::EndTxn(EndTxnResponse::default().with_error_code(TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        }
        RequestKind::AddOffsetsToTxn(r) => {
            let code = match (no_txn(Op::Write, &r.transactional_id), no_group(Op::Read, &r.group_id)) {
                (true, _) => TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                (false, true) => GROUP_AUTHORIZATION_FAILED,
                (false, false) => return None,
            };
            ResponseKind::AddOffsetsToTxn(AddOffsetsToTxnResponse::default().with_error_code(code))
        }
        RequestKind::TxnOffsetCommit(r) => {
            let code = match (no_txn(Op::Write, &r.transactional_id), no_group(Op::Read, &r.group_id)) {
                (true, _) => TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                (false, true) => GROUP_AUTHORIZATION_FAILED,
                (false, false) => return None,
            };
            ResponseKind::TxnOffsetCommit(txn_offset_commit(r, code))
        }
        RequestKind::AddPartitionsToTxn(r) if version <= 3 && no_txn(Op::Write, &r.v3_and_below_transactional_id) => {
            ResponseKind::AddPartitionsToTxn(add_partitions_v3(r, TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        }
        RequestKind::AddPartitionsToTxn(_) if version >= 4 && no_cluster(Op::ClusterAction) => {
            ResponseKind::AddPartitionsToTxn(
                AddPartitionsToTxnResponse::default().with_error_code(CLUSTER_AUTHORIZATION_FAILED),
            )
        }
        RequestKind::WriteTxnMarkers(r) if no_cluster(Op::ClusterAction) => {
            ResponseKind::WriteTxnMarkers(write_txn_markers(r, CLUSTER_AUTHORIZATION_FAILED))
        }
        RequestKind::DescribeLogDirs(_) if no_cluster(Op::Describe) => ResponseKind::DescribeLogDirs(
            DescribeLogDirsResponse::default().with_error_code(CLUSTER_AUTHORIZATION_FAILED),
        ),
        RequestKind::DescribeQuorum(_) if no_cluster(Op::Describe) => ResponseKind::DescribeQuorum(
            DescribeQuorumResponse::default().with_error_code(CLUSTER_AUTHORIZATION_FAILED),
        ),
        RequestKind::ElectLeaders(_) if no_cluster(Op::Alter) => {
            ResponseKind::ElectLeaders(ElectLeadersResponse::default().with_error_code(CLUSTER_AUTHORIZATION_FAILED))
        }
        RequestKind::AlterPartitionReassignments(_) if no_cluster(Op::Alter) => {
            ResponseKind::AlterPartitionReassignments(
                AlterPartitionReassignmentsResponse::default().with_error_code(CLUSTER_AUTHORIZATION_FAILED),
            )
        }
        RequestKind::ListPartitionReassignments(_) if no_cluster(Op::Describe) => {
            ResponseKind::ListPartitionReassignments(
                ListPartitionReassignmentsResponse::default().with_error_code(CLUSTER_AUTHORIZATION_FAILED),
            )
        }
        RequestKind::DescribeUserScramCredentials(_) if no_cluster(Op::Describe) => {
            ResponseKind::DescribeUserScramCredentials(
                DescribeUserScramCredentialsResponse::default().with_error_code(CLUSTER_AUTHORIZATION_FAILED),
            )
        }
        RequestKind::AlterUserScramCredentials(r) if no_cluster(Op::Alter) => {
            let users = r.deletions.iter().map(|d| &d.name).chain(r.upsertions.iter().map(|u| &u.name));
            let mut names: Vec<_> = users.cloned().collect();
            names.sort();
            names.dedup();
            let results = names
                .into_iter()
                .map(|user| {
                    alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default()
                        .with_user(user)
                        .with_error_code(CLUSTER_AUTHORIZATION_FAILED)
                })
                .collect();
            ResponseKind::AlterUserScramCredentials(AlterUserScramCredentialsResponse::default().with_results(results))
        }
        RequestKind::CreateAcls(r) if no_cluster(Op::Alter) => {
            let result =
                create_acls_response::AclCreationResult::default().with_error_code(CLUSTER_AUTHORIZATION_FAILED);
            ResponseKind::CreateAcls(CreateAclsResponse::default().with_results(vec![result; r.creations.len()]))
        }
        RequestKind::DescribeAcls(_) if no_cluster(Op::Describe) => {
            ResponseKind::DescribeAcls(DescribeAclsResponse::default().with_error_code(CLUSTER_AUTHORIZATION_FAILED))
        }
        RequestKind::DeleteAcls(r) if no_cluster(Op::Alter) => {
            let result =
                delete_acls_response::DeleteAclsFilterResult::default().with_error_code(CLUSTER_AUTHORIZATION_FAILED);
            ResponseKind::DeleteAcls(DeleteAclsResponse::default().with_filter_results(vec![result; r.filters.len()]))
        }
        RequestKind::DescribeClientQuotas(_) if no_cluster(Op::DescribeConfigs) => ResponseKind::DescribeClientQuotas(
            DescribeClientQuotasResponse::default().with_error_code(CLUSTER_AUTHORIZATION_FAILED),
        ),
        RequestKind::AlterClientQuotas(r) if no_cluster(Op::AlterConfigs) => {
            let entries = r
                .entries
                .iter()
                .map(|e| {
                    let entity = e
                        .entity
                        .iter()
                        .map(|d| {
                            alter_client_quotas_response::EntityData::default()
                                .with_entity_type(d.entity_type.clone())
                                .with_entity_name(d.entity_name.clone())
                        })
                        .collect();
                    alter_client_quotas_response::EntryData::default()
                        .with_error_code(CLUSTER_AUTHORIZATION_FAILED)
                        .with_entity(entity)
                })
                .collect();
            ResponseKind::AlterClientQuotas(AlterClientQuotasResponse::default().with_entries(entries))
        }
        _ => return None,
    })
}

fn produce(request: &ProduceRequest, code: i16) -> ProduceResponse {
    use produce_response::{PartitionProduceResponse, TopicProduceResponse};
    let responses = request
        .topic_data
        .iter()
        .map(|t| {
            let partitions = t
                .partition_data
                .iter()
                .map(|p| {
                    PartitionProduceResponse::default()
                        .with_index(p.index)
                        .with_error_code(code)
                        .with_base_offset(-1)
                        .with_log_append_time_ms(-1)
                })
                .collect();
            TopicProduceResponse::default()
                .with_name(t.name.clone())
                .with_topic_id(t.topic_id)
                .with_partition_responses(partitions)
        })
        .collect();
    ProduceResponse::default().with_responses(responses)
}

fn fetch(request: &FetchRequest, code: i16) -> FetchResponse {
    use fetch_response::{FetchableTopicResponse, PartitionData};
    let responses = request
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    PartitionData::default()
                        .with_partition_index(p.partition)
                        .with_error_code(code)
                        .with_high_watermark(-1)
                        .with_last_stable_offset(-1)
                })
                .collect();
            FetchableTopicResponse::default()
                .with_topic(t.topic.clone())
                .with_topic_id(t.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    FetchResponse::default().with_responses(responses)
}

fn offset_commit(request: &OffsetCommitRequest, code: i16) -> OffsetCommitResponse {
    use offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_topic_id(t.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

fn txn_offset_commit(request: &TxnOffsetCommitRequest, code: i16) -> TxnOffsetCommitResponse {
    use txn_offset_commit_response::{TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic};
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            TxnOffsetCommitResponseTopic::default().with_name(t.name.clone()).with_partitions(partitions)
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

fn add_partitions_v3(request: &AddPartitionsToTxnRequest, code: i16) -> AddPartitionsToTxnResponse {
    use add_partitions_to_txn_response::{AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult};
    let topics = request
        .v3_and_below_topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(*p)
                        .with_partition_error_code(code)
                })
                .collect();
            AddPartitionsToTxnTopicResult::default().with_name(t.name.clone()).with_results_by_partition(partitions)
        })
        .collect();
    AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(topics)
}

fn write_txn_markers(request: &WriteTxnMarkersRequest, code: i16) -> WriteTxnMarkersResponse {
    use write_txn_markers_response::{
        WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    };
    let markers = request
        .markers
        .iter()
        .map(|m| {
            let topics = m
                .topics
                .iter()
                .map(|t| {
                    let partitions = t
                        .partition_indexes
                        .iter()
                        .map(|p| {
                            WritableTxnMarkerPartitionResult::default().with_partition_index(*p).with_error_code(code)
                        })
                        .collect();
                    WritableTxnMarkerTopicResult::default().with_name(t.name.clone()).with_partitions(partitions)
                })
                .collect();
            WritableTxnMarkerResult::default().with_producer_id(m.producer_id).with_topics(topics)
        })
        .collect();
    WriteTxnMarkersResponse::default().with_markers(markers)
}

/// The refusal of a config resource (`resource_type` 2 topic, 4 broker, 8 broker
/// logger) that the caller may not `operation` (DESCRIBE_CONFIGS or ALTER_CONFIGS).
pub fn config_denied(caller: &Caller, resource_type: i8, name: &str, operation: Operation) -> Option<(i16, String)> {
    match resource_type {
        2 if !caller.topic(operation, name) => Some((TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.".into())),
        4 | 8 if !caller.cluster(operation) => {
            Some((CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.".into()))
        }
        _ => None,
    }
}
