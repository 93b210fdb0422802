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
use skein_control::errors::code;
pub use skein_control::errors::code::{
    CLUSTER_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
};
pub use skein_control::security::acl::Operation as Op;
use skein_control::security::acl::{Authorizer, Operation, ResourceType, Session, CLUSTER_NAME};

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

/// How a request refused whole is answered.
pub enum Denial {
    /// Its API's error response with the refusal's code.
    Answer(Box<ResponseKind>),
    /// Its API has no error shape (a broker bug, logged): the connection is closed
    /// rather than the request served.
    Close,
}

/// The answer to `request` when the caller lacks what the whole request needs (its
/// API's error shape, `error_response::for_request`); `None` when it may go on
/// (per-resource checks are the handler's).
pub fn denied(caller: &Caller, request: &RequestKind, version: i16) -> Option<Denial> {
    let code = refusal(caller, request, version)?;
    Some(
        crate::error_response::for_request(request, version, code)
            .map_or(Denial::Close, |r| Denial::Answer(Box::new(r))),
    )
}

/// The error that refuses `request` whole, if the caller lacks what it needs.
fn refusal(caller: &Caller, request: &RequestKind, version: i16) -> Option<i16> {
    if !caller.checked() {
        return None;
    }
    // Each is true when the caller lacks the operation.
    let no_cluster = |operation| !caller.cluster(operation);
    let no_group = |operation, id: &str| !caller.group(operation, id);
    let no_txn = |operation, id: &str| !caller.transactional_id(operation, id);
    match request {
        RequestKind::Produce(r) => {
            let id = r.transactional_id.as_deref()?;
            no_txn(Op::Write, id).then_some(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        }
        RequestKind::Fetch(r) if r.replica_id.0 >= 0 || r.replica_state.replica_id.0 >= 0 => {
            no_cluster(Op::ClusterAction).then_some(TOPIC_AUTHORIZATION_FAILED)
        }
        RequestKind::InitProducerId(r) => match r.transactional_id.as_deref() {
            Some(id) => no_txn(Op::Write, id).then_some(TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            None => {
                let allowed = caller.cluster(Op::IdempotentWrite) || caller.may_any(Op::Write, ResourceType::Topic);
                (!allowed).then_some(CLUSTER_AUTHORIZATION_FAILED)
            }
        },
        RequestKind::JoinGroup(r) if no_group(Op::Read, &r.group_id) => Some(GROUP_AUTHORIZATION_FAILED),
        RequestKind::SyncGroup(r) if no_group(Op::Read, &r.group_id) => Some(GROUP_AUTHORIZATION_FAILED),
        RequestKind::Heartbeat(r) if no_group(Op::Read, &r.group_id) => Some(GROUP_AUTHORIZATION_FAILED),
        RequestKind::LeaveGroup(r) if no_group(Op::Read, &r.group_id) => Some(GROUP_AUTHORIZATION_FAILED),
        RequestKind::ConsumerGroupHeartbeat(r) if no_group(Op::Read, &r.group_id) => Some(GROUP_AUTHORIZATION_FAILED),
        // A member may subscribe only to topics it may describe (Kafka 4).
        RequestKind::ConsumerGroupHeartbeat(r)
            if r.subscribed_topic_names.iter().flatten().any(|t| !caller.topic(Op::Describe, t)) =>
        {
            Some(TOPIC_AUTHORIZATION_FAILED)
        }
        RequestKind::ShareGroupHeartbeat(r) if no_group(Op::Read, &r.group_id) => Some(GROUP_AUTHORIZATION_FAILED),
        RequestKind::StreamsGroupHeartbeat(r) if no_group(Op::Read, &r.group_id) => Some(GROUP_AUTHORIZATION_FAILED),
        // A joining member may name only topics it may describe (Kafka 4.4's
        // KafkaApis checks the topology's topics).
        RequestKind::StreamsGroupHeartbeat(r)
            if r.topology.iter().any(|t| {
                skein_coordinator::group::streams::topology::required_topics(t)
                    .iter()
                    .any(|name| !caller.topic(Op::Describe, name))
            }) =>
        {
            Some(TOPIC_AUTHORIZATION_FAILED)
        }
        RequestKind::ShareGroupHeartbeat(r)
            if r.subscribed_topic_names.iter().flatten().any(|t| !caller.topic(Op::Describe, t)) =>
        {
            Some(TOPIC_AUTHORIZATION_FAILED)
        }
        RequestKind::OffsetCommit(r) if no_group(Op::Read, &r.group_id) => Some(GROUP_AUTHORIZATION_FAILED),
        RequestKind::OffsetDelete(r) if no_group(Op::Delete, &r.group_id) => Some(GROUP_AUTHORIZATION_FAILED),
        RequestKind::EndTxn(r) if no_txn(Op::Write, &r.transactional_id) => Some(TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        // WRITE on the transactional id, then READ on the group.
        RequestKind::AddOffsetsToTxn(r) if no_txn(Op::Write, &r.transactional_id) => {
            Some(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        }
        RequestKind::TxnOffsetCommit(r) if no_txn(Op::Write, &r.transactional_id) => {
            Some(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        }
        RequestKind::AddOffsetsToTxn(r) if no_group(Op::Read, &r.group_id) => Some(GROUP_AUTHORIZATION_FAILED),
        RequestKind::TxnOffsetCommit(r) if no_group(Op::Read, &r.group_id) => Some(GROUP_AUTHORIZATION_FAILED),
        RequestKind::AddPartitionsToTxn(r) if version <= 3 && no_txn(Op::Write, &r.v3_and_below_transactional_id) => {
            Some(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        }
        RequestKind::AddPartitionsToTxn(_) if version >= 4 && no_cluster(Op::ClusterAction) => {
            Some(CLUSTER_AUTHORIZATION_FAILED)
        }
        RequestKind::WriteTxnMarkers(_) if no_cluster(Op::ClusterAction) => Some(CLUSTER_AUTHORIZATION_FAILED),
        RequestKind::DescribeLogDirs(_)
        | RequestKind::DescribeQuorum(_)
        | RequestKind::ListPartitionReassignments(_)
        | RequestKind::DescribeUserScramCredentials(_)
        | RequestKind::DescribeAcls(_)
            if no_cluster(Op::Describe) =>
        {
            Some(CLUSTER_AUTHORIZATION_FAILED)
        }
        RequestKind::ElectLeaders(_)
        | RequestKind::AlterReplicaLogDirs(_)
        | RequestKind::UpdateFeatures(_)
        | RequestKind::UnregisterBroker(_)
        | RequestKind::AddRaftVoter(_)
        | RequestKind::RemoveRaftVoter(_)
        | RequestKind::UnregisterController(_)
        | RequestKind::AlterPartitionReassignments(_)
        | RequestKind::AlterUserScramCredentials(_)
        | RequestKind::CreateAcls(_)
        | RequestKind::DeleteAcls(_)
            if no_cluster(Op::Alter) =>
        {
            Some(CLUSTER_AUTHORIZATION_FAILED)
        }
        RequestKind::DescribeClientQuotas(_) | RequestKind::ListConfigResources(_)
            if no_cluster(Op::DescribeConfigs) =>
        {
            Some(CLUSTER_AUTHORIZATION_FAILED)
        }
        RequestKind::AlterClientQuotas(_) if no_cluster(Op::AlterConfigs) => Some(CLUSTER_AUTHORIZATION_FAILED),
        _ => None,
    }
}

/// The refusal of a config resource (`resource_type` 2 topic, 4 broker, 8 broker
/// logger) that the caller may not `operation` (DESCRIBE_CONFIGS or ALTER_CONFIGS).
pub fn config_denied(
    caller: &Caller,
    resource_type: i8,
    name: &str,
    operation: Operation,
) -> Option<skein_control::errors::Refusal> {
    match resource_type {
        2 if !caller.topic(operation, name) => Some((TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.".into())),
        4 | 8 | 16 if !caller.cluster(operation) => {
            Some((CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.".into()))
        }
        32 if !caller.group(operation, name) => {
            Some((GROUP_AUTHORIZATION_FAILED, "Group authorization failed.".into()))
        }
        _ => None,
    }
}
