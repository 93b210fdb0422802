//! What handlers and brokers ask of the metadata controller (`ControllerRequest`) and
//! what it answers (`ControllerReply`, typed by its `into_*` methods), as they travel
//! between shards and, forwarded, between controllers (serde).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use skein_engine::TopicPartition;

use super::{BrokerMeta, Refusal, TopicMeta};
use crate::errors::code;

/// A topic to create, as a handler checked it (`topics::validate_new_topic`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    /// -1: Kafka's `default.replication.factor` (1).
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

/// A change a handler asks of the controller. Handlers validate what they can alone
/// (names, counts, configs); the controller checks what depends on the image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ControllerRequest {
    CreateTopic {
        name: String,
        partitions: i32,
        /// -1: Kafka's `default.replication.factor` (1).
        replication_factor: i16,
        configs: BTreeMap<String, String>,
    },
    /// The topics of one CreateTopics request, decided in order (each against the
    /// image the ones before it leave) and committed as one entry.
    CreateTopics(Vec<NewTopic>),
    DeleteTopic {
        name: String,
    },
    CreatePartitions {
        name: String,
        count: i32,
    },
    SetConfigs {
        name: String,
        configs: BTreeMap<String, String>,
    },
    MovePartition {
        #[serde(with = "partition_serde")]
        partition: TopicPartition,
        target: usize,
    },
    ProducerIds,
    /// A broker (re)starting registers its address (and is live again).
    RegisterBroker(BrokerMeta),
    /// A broker says it is alive (Kafka's BrokerHeartbeat): the active controller
    /// notes the time, and unfences it if it was fenced. A broker whose log directory
    /// takes no writes (full: Kafka's `OfflineLogDirs`) is fenced instead while that
    /// lasts, so its leaderships move to in-sync replicas and it leaves every ISR,
    /// cleanly (it lost nothing: it stays an eligible leader replica).
    BrokerHeartbeat {
        id: i32,
        #[serde(default)]
        log_dir_offline: bool,
        /// The replicas in its log directories that failed (Kafka's `OfflineLogDirs`
        /// with KIP-858's directory assignments): it leaves their ISRs and leaderships,
        /// not as a clean replica (their data is gone), and the rest of the broker
        /// serves on.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        offline_replicas: Vec<(String, i32)>,
    },
    /// The active controller found a broker's session expired.
    FenceBroker {
        id: i32,
    },
    /// Removes a broker's registration (UnregisterBroker), after taking it out of every
    /// ISR and ELR.
    UnregisterBroker {
        id: i32,
    },
    /// Leader elections (ElectLeaders): to the preferred replica, or `unclean`ly to
    /// any live replica for partitions without a leader. `None`: every partition.
    ElectLeaders {
        unclean: bool,
        partitions: Option<Vec<(String, i32)>>,
    },
    /// A partition leader changes its ISR (Kafka's AlterPartition).
    AlterPartition {
        topic: String,
        partition: i32,
        leader: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        isr: Vec<i32>,
    },
    /// The metadata quorum's state (DescribeQuorum), as the active controller knows
    /// it; answered without a record.
    DescribeQuorum,
    /// Partition reassignments (AlterPartitionReassignments, KIP-455): each to its
    /// target replicas, or `None` to cancel the one under way. `keep_factor`: refuse
    /// a target that changes the replication factor (KIP-860).
    Reassign {
        partitions: Vec<(String, i32, Option<Vec<i32>>)>,
        keep_factor: bool,
    },
    /// Replaces the dynamic configs of broker `broker` (`""`: the cluster defaults).
    SetBrokerConfigs {
        broker: String,
        configs: BTreeMap<String, String>,
    },
    /// Sets and removes SCRAM credentials (AlterUserScramCredentials), checked by the
    /// handler: (user, mechanism name, credential or `None` to remove).
    AlterScram {
        changes: Vec<(String, String, Option<crate::security::scram::ScramCredential>)>,
    },
    /// Adds ACL bindings (CreateAcls), checked by the handler; one already present
    /// is left as it is.
    CreateAcls {
        bindings: Vec<crate::security::acl::AclBinding>,
    },
    /// Removes ACL bindings (DeleteAcls: those its filters matched).
    DeleteAcls {
        bindings: Vec<crate::security::acl::AclBinding>,
    },
    /// Sets and removes client quotas (AlterClientQuotas), checked by the handler.
    AlterClientQuotas {
        changes: Vec<(crate::quota::QuotaEntity, String, Option<f64>)>,
    },
    /// Replaces the config overrides of group `group`, checked by the handler against
    /// its node's bounds (`group::configs::validate`).
    SetGroupConfigs {
        group: String,
        configs: BTreeMap<String, String>,
    },
    /// Replaces the configs of client-metrics resource `name`, checked by the handler
    /// (`client_metrics::validate`); empty removes it.
    SetClientMetrics {
        name: String,
        configs: BTreeMap<String, String>,
    },
    /// Sets feature levels (UpdateFeatures), all or none, each checked by Kafka's
    /// rules (`features::check`) against the controller's image.
    UpdateFeatures {
        updates: Vec<(String, i16, Option<crate::features::UpgradeType>)>,
    },
    /// Records a new delegation token, as the handler made it (its id fresh, its
    /// lifetimes by its node's settings).
    CreateToken(crate::security::tokens::DelegationToken),
    /// Renews token `id` for `principal` at `now_ms` to `renew_to_ms`
    /// (`tokens::renew`); the reply is its new expiry.
    RenewToken {
        id: String,
        principal: String,
        now_ms: i64,
        renew_to_ms: i64,
    },
    /// Expires token `id` for `principal` at `now_ms`: to `expire_to_ms`, or at once
    /// (`tokens::expire`); the reply is its new expiry.
    ExpireToken {
        id: String,
        principal: String,
        now_ms: i64,
        expire_to_ms: Option<i64>,
    },
    /// Removes every token expired at `now_ms` (the active controller's sweep, every
    /// `delegation.token.expiry.check.interval.ms`).
    RemoveExpiredTokens {
        now_ms: i64,
    },
    /// Adds a controller to the quorum's voters (AddRaftVoter, KIP-853): as a learner
    /// first, then, once it holds the log, as a voter. Run by the active controller
    /// (`Controller::change_voters`), not `decide`.
    AddVoter {
        member: super::QuorumMember,
        /// How long it may take to catch up.
        timeout_ms: i64,
    },
    /// Removes a controller from the quorum (RemoveRaftVoter); a directory id of zero
    /// matches any.
    RemoveVoter {
        node: i32,
        directory_id: uuid::Uuid,
    },
    /// A controller's own endpoint and directory id, sent by each controller once the
    /// quorum has a leader (as Kafka's voters send UpdateRaftVoter at start): recorded
    /// for a member whose record is missing (a voter of the first
    /// `--controller-voters`) or differs, so that the log names every member's
    /// endpoint and a node can rejoin from the log alone.
    UpdateVoter {
        member: super::QuorumMember,
    },
    /// Removes a controller's record (UnregisterController, `kafka-metadata-quorum
    /// remove-controller --unregister`): one that is no longer a member, or an observer
    /// of the log, which leaves with it. A voter is removed from the quorum first.
    UnregisterController {
        node: i32,
    },
}

/// The metadata quorum as its leader sees it (Kafka's DescribeQuorum): offsets are
/// indexes of the metadata log.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QuorumStatus {
    pub leader: i32,
    pub term: i64,
    pub high_watermark: i64,
    pub voters: Vec<VoterStatus>,
    /// Broker-only nodes following the log from the active controller.
    #[serde(default)]
    pub observers: Vec<VoterStatus>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VoterStatus {
    pub node: i32,
    /// -1: unknown.
    pub log_end_offset: i64,
    /// When the leader last heard from it, and when it last held the leader's whole
    /// log (wall-clock ms; -1: never).
    pub last_fetch_ms: i64,
    pub last_caught_up_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ControllerReply {
    Topic(TopicMeta),
    /// Each topic of a `CreateTopics`, in order: created, or why not.
    Topics(Vec<Result<TopicMeta, Refusal>>),
    /// A topic grown from `old` partitions.
    Grown {
        old: i32,
        meta: TopicMeta,
    },
    ProducerIds(std::ops::Range<i64>),
    Quorum(QuorumStatus),
    /// The outcome of each reassignment asked for, in order: an error code and message.
    Reassigned(Vec<(i16, Option<String>)>),
    /// The outcome of each election asked for.
    Elections(Vec<Election>),
    /// A delegation token's expiry (ms since the epoch) after a renewal or expiry.
    TokenExpiry(i64),
    Done,
}

/// Each reply as its request's type: another kind of reply is a broker bug, logged and
/// answered UNKNOWN_SERVER_ERROR here rather than by every caller.
impl ControllerReply {
    pub fn into_topic(self) -> Result<TopicMeta, Refusal> {
        match self {
            ControllerReply::Topic(meta) => Ok(meta),
            other => Err(other.unexpected("a topic")),
        }
    }

    /// The outcome of each topic of a `CreateTopics`, in order.
    pub fn into_topics(self) -> Result<Vec<Result<TopicMeta, Refusal>>, Refusal> {
        match self {
            ControllerReply::Topics(topics) => Ok(topics),
            other => Err(other.unexpected("topics")),
        }
    }

    /// A grown topic: its old partition count and its metadata now.
    pub fn into_grown(self) -> Result<(i32, TopicMeta), Refusal> {
        match self {
            ControllerReply::Grown { old, meta } => Ok((old, meta)),
            other => Err(other.unexpected("a grown topic")),
        }
    }

    pub fn into_producer_ids(self) -> Result<std::ops::Range<i64>, Refusal> {
        match self {
            ControllerReply::ProducerIds(block) => Ok(block),
            other => Err(other.unexpected("producer ids")),
        }
    }

    pub fn into_quorum(self) -> Result<QuorumStatus, Refusal> {
        match self {
            ControllerReply::Quorum(status) => Ok(status),
            other => Err(other.unexpected("the quorum")),
        }
    }

    pub fn into_reassigned(self) -> Result<Vec<(i16, Option<String>)>, Refusal> {
        match self {
            ControllerReply::Reassigned(outcomes) => Ok(outcomes),
            other => Err(other.unexpected("reassignments")),
        }
    }

    pub fn into_elections(self) -> Result<Vec<Election>, Refusal> {
        match self {
            ControllerReply::Elections(elections) => Ok(elections),
            other => Err(other.unexpected("elections")),
        }
    }

    pub fn into_token_expiry(self) -> Result<i64, Refusal> {
        match self {
            ControllerReply::TokenExpiry(ms) => Ok(ms),
            other => Err(other.unexpected("a token's expiry")),
        }
    }

    fn unexpected(&self, wanted: &str) -> Refusal {
        tracing::error!(target: "skein::net", wanted, reply = ?self, "the metadata controller answered another request");
        (code::UNKNOWN_SERVER_ERROR, "unexpected metadata controller reply".into())
    }
}

/// One partition's leader election and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Election {
    pub topic: String,
    pub partition: i32,
    pub error: i16,
    pub message: Option<String>,
}

/// `TopicPartition` as (topic, partition) on the wire between controllers.
mod partition_serde {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use skein_engine::TopicPartition;

    pub fn serialize<S: Serializer>(partition: &TopicPartition, out: S) -> Result<S::Ok, S::Error> {
        (&partition.topic, partition.partition).serialize(out)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<TopicPartition, D::Error> {
        let (topic, partition) = <(String, i32)>::deserialize(input)?;
        Ok(TopicPartition::new(topic, partition))
    }
}
