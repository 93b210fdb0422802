//! Cluster metadata as the broker's handlers see it: topics, their ids, partition
//! counts, config overrides and the partition-to-shard table.
//!
//! Control plane: one writer, the `controller` on shard 0, turns requests (create a
//! topic, hand out producer ids) into `MetadataRecord`s and proposes them to the
//! metadata log (`quorum`, raft-rs); committed records are applied to the image, which
//! is published to every shard by message. Each shard holds its own
//! `Arc<MetadataImage>`: the request path reads it with no lock shared between shards.

use std::collections::BTreeMap;

pub mod bootstrap;
pub mod controller;
pub mod decide;
mod elections;
pub mod host;
pub mod listener;
pub mod log;
pub mod observer;
pub mod quorum;
pub mod requests;
pub mod transport;

use serde::{Deserialize, Serialize};
use skein_engine::TopicPartition;

/// One topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct TopicMeta {
    pub name: String,
    /// Kafka's topic id (KIP-516), random v4.
    pub id: uuid::Uuid,
    pub partitions: i32,
    /// Topic-level config overrides, Kafka names to values.
    pub configs: BTreeMap<String, String>,
    /// Shard of each partition (index = partition).
    pub shards: Vec<usize>,
    /// Replicas of each partition (index = partition), as the controller assigned
    /// them. Empty in images written by single-node versions: every partition then
    /// lives on the node that reads the image.
    #[serde(default)]
    pub assignments: Vec<Assignment>,
}

impl TopicMeta {
    /// Partition `partition`'s replicas; a topic without assignments has one replica,
    /// on `local`.
    pub fn assignment(&self, partition: i32, local: i32) -> Assignment {
        usize::try_from(partition)
            .ok()
            .and_then(|p| self.assignments.get(p))
            .cloned()
            .unwrap_or_else(|| Assignment::sole(local))
    }

    /// Whether node `node` holds a replica of `partition`.
    pub fn is_replica(&self, partition: i32, node: i32) -> bool {
        // Without an assignment the partition's one replica is on `node` (`assignment`).
        usize::try_from(partition).ok().and_then(|p| self.assignments.get(p)).is_none_or(|a| a.replicas.contains(&node))
    }
}

/// Where a partition's replicas live and who leads them (Kafka's PartitionRecord).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Assignment {
    pub replicas: Vec<i32>,
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
    /// An ongoing reassignment (KIP-455): the replicas joining and leaving. Until it
    /// completes, `replicas` holds the target followed by the leaving ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding: Vec<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing: Vec<i32>,
    /// Eligible leader replicas (KIP-966): replicas that left an ISR smaller than
    /// `min.insync.replicas`. The high watermark does not move while the ISR is that
    /// small, so they hold every committed record and may lead when no ISR member can.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub elr: Vec<i32>,
}

impl Assignment {
    /// One replica, on `node`, leading.
    pub fn sole(node: i32) -> Assignment {
        Assignment::new(vec![node])
    }

    /// Replicas `replicas`, all in sync, the first leading, in epoch 0.
    pub fn new(replicas: Vec<i32>) -> Assignment {
        Assignment {
            leader: replicas[0],
            leader_epoch: 0,
            partition_epoch: 0,
            isr: replicas.clone(),
            replicas,
            adding: Vec::new(),
            removing: Vec::new(),
            elr: Vec::new(),
        }
    }

    /// Replaces the ISR with `isr`, keeping the ELR as KIP-966 does: below
    /// `min_insync` members, those leaving (when `clean`: they hold their data) become
    /// eligible; at `min_insync` or more the ELR empties; members of the ISR are never
    /// in the ELR.
    pub fn set_isr(&mut self, isr: Vec<i32>, min_insync: usize, clean: bool) {
        if isr.len() >= min_insync {
            self.elr.clear();
        } else if clean {
            let leaving: Vec<i32> = self.isr.iter().copied().filter(|r| !isr.contains(r)).collect();
            for replica in leaving {
                if !self.elr.contains(&replica) && self.replicas.contains(&replica) {
                    self.elr.push(replica);
                }
            }
        }
        self.elr.retain(|r| !isr.contains(r));
        self.isr = isr;
    }

    /// Whether a reassignment is under way.
    pub fn reassigning(&self) -> bool {
        !self.adding.is_empty() || !self.removing.is_empty()
    }

    /// The replicas a reassignment moves to (all of them when none is under way).
    pub fn target(&self) -> Vec<i32> {
        self.replicas.iter().copied().filter(|r| !self.removing.contains(r)).collect()
    }

    /// The replicas before the reassignment under way (all of them when none is).
    pub fn original(&self) -> Vec<i32> {
        self.replicas.iter().copied().filter(|r| !self.adding.contains(r)).collect()
    }
}

/// A member of the controller quorum added with AddRaftVoter (KIP-853's VotersRecord
/// entry): its directory id and where its controller listens. A voter of the
/// initial `--controller-voters` has none until it is added again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct QuorumMember {
    pub node: i32,
    pub directory_id: uuid::Uuid,
    pub host: String,
    pub port: u16,
    /// A voter, or a learner catching up to become one.
    pub voter: bool,
}

impl QuorumMember {
    /// Where its controller listens: its host is an IP address (or `localhost`), so
    /// that no executor thread waits on a name lookup.
    pub fn address(&self) -> Option<std::net::SocketAddr> {
        let ip = match self.host.as_str() {
            "localhost" => std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            host => host.trim_start_matches('[').trim_end_matches(']').parse().ok()?,
        };
        Some(std::net::SocketAddr::new(ip, self.port))
    }
}

/// A broker as it registered with the controller (Kafka's RegisterBrokerRecord).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct BrokerMeta {
    pub id: i32,
    /// Bumped at each registration (each start).
    pub epoch: u64,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
    /// Missed its session timeout: it leads nothing and clients are not sent to it
    /// until it heartbeats again (Kafka's BrokerRegistrationChangeRecord).
    #[serde(default)]
    pub fenced: bool,
    /// Drawn at each start of the process (Kafka's incarnation id): a registration
    /// with a new one while the last is still live is a restart without a controlled
    /// shutdown.
    #[serde(default)]
    pub incarnation: u64,
    /// The registering process found its data directory closed cleanly (Kafka's
    /// `.kafka_cleanshutdown`); one that did not leaves every ELR (KIP-966).
    #[serde(default)]
    pub clean_restart: bool,
    /// Its advertised endpoint on each listener, so that Metadata answers a client
    /// with the addresses of the listener it connected to. `host` and `port` are the
    /// inter-broker listener's.
    #[serde(default)]
    pub listeners: Vec<crate::security::Endpoint>,
    /// Its virtual brokers (`--virtual-brokers`), if it runs them: each node lists
    /// them to that listener's clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_brokers: Option<crate::virtual_brokers::VirtualBrokers>,
}

impl BrokerMeta {
    /// Its virtual brokers, when clients on listener `name` see them.
    pub fn virtual_on(&self, name: &str) -> Option<&crate::virtual_brokers::VirtualBrokers> {
        self.virtual_brokers.as_ref().filter(|v| v.listener == name)
    }

    /// Its endpoint on listener `name`: the registered one, or `host:port` for a
    /// broker that registered no listeners (an earlier version, one listener).
    pub fn endpoint(&self, name: &str) -> Option<(String, u16)> {
        match self.listeners.is_empty() {
            true => Some((self.host.clone(), self.port)),
            false => self.listeners.iter().find(|l| l.listener == name).map(|l| (l.host.clone(), l.port)),
        }
    }
}

/// An immutable snapshot of the metadata, with a version that only grows.
#[derive(Debug, Clone, Default, Serialize, Deserialize, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct MetadataImage {
    pub version: u64,
    pub topics: BTreeMap<String, TopicMeta>,
    /// Producer ids handed out up to (excluding) this one.
    pub next_producer_id: i64,
    /// Registered brokers by id.
    #[serde(default)]
    pub brokers: BTreeMap<i32, BrokerMeta>,
    /// Dynamic broker configs (Kafka's ConfigRecord for BROKER resources): by broker
    /// id, `""` holding the cluster-wide defaults.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// SCRAM credentials by user, then by mechanism name (Kafka's
    /// UserScramCredentialRecord).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scram: BTreeMap<String, BTreeMap<String, crate::security::scram::ScramCredential>>,
    /// ACL bindings, sorted, each once (Kafka's AccessControlEntryRecord).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acls: Vec<crate::security::acl::AclBinding>,
    /// Client quotas by entity (Kafka's ClientQuotaRecord).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_quotas: Vec<crate::quota::ClientQuota>,
    /// Group configs by group (Kafka's ConfigRecord for GROUP resources).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub group_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Client-metrics subscriptions by name (Kafka's ConfigRecord for CLIENT_METRICS
    /// resources, KIP-714).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub client_metrics: BTreeMap<String, BTreeMap<String, String>>,
    /// Feature levels set with UpdateFeatures (Kafka's FeatureLevelRecord); a feature
    /// not here is at its default level (`features`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub features: BTreeMap<String, i16>,
    /// The image version of the last feature change: ApiVersions' finalized features
    /// epoch (0: never changed).
    #[serde(default)]
    pub features_epoch: i64,
    /// Delegation tokens by id (Kafka's DelegationTokenRecord).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tokens: BTreeMap<String, crate::security::tokens::DelegationToken>,
    /// Controller quorum members added or changed since the quorum began, by node id
    /// (a membership change's record; raft's configuration says who votes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub quorum: BTreeMap<i32, QuorumMember>,
    /// Topic ids to names, rebuilt whenever an image is published, so that
    /// `topic_by_id` (every Fetch from v13) is a hash lookup, not a scan.
    #[serde(skip)]
    #[rkyv(with = rkyv::with::Skip)]
    ids: std::collections::HashMap<uuid::Uuid, String>,
}

impl MetadataImage {
    /// Where quorum member `node`'s controller listens: as the log records it, else as
    /// `configured` (the first `--controller-voters`) puts it.
    pub fn controller_address(
        &self,
        node: i32,
        configured: &[(i32, std::net::SocketAddr)],
    ) -> Option<std::net::SocketAddr> {
        let recorded = self.quorum.get(&node).and_then(QuorumMember::address);
        recorded.or_else(|| configured.iter().find(|(id, _)| *id == node).map(|(_, at)| *at))
    }

    /// Broker `broker`'s dynamic config `name`: its own value, else the cluster
    /// default, with whether it is its own.
    pub fn broker_config(&self, broker: i32, name: &str) -> Option<(&str, bool)> {
        let own = self.broker_configs.get(&broker.to_string()).and_then(|c| c.get(name));
        match own {
            Some(value) => Some((value, true)),
            None => self.broker_configs.get("").and_then(|c| c.get(name)).map(|v| (v.as_str(), false)),
        }
    }

    pub fn topic(&self, name: &str) -> Option<&TopicMeta> {
        self.topics.get(name)
    }

    /// The topic with id `id`: O(1) on an image whose index is current (every image
    /// `apply` made or a snapshot loaded); otherwise a scan.
    pub fn topic_by_id(&self, id: uuid::Uuid) -> Option<&TopicMeta> {
        match self.ids.get(&id) {
            Some(name) => self.topics.get(name).filter(|t| t.id == id),
            None if self.ids.len() == self.topics.len() => None,
            None => self.topics.values().find(|t| t.id == id),
        }
    }

    /// Moves partitions placed on shards this node does not run (it runs fewer than
    /// when they were placed, or the leader that placed them runs more) to the default
    /// placement. Every node places partitions within its own shards.
    pub fn place_within(&mut self, shards: usize) {
        for meta in self.topics.values_mut() {
            for (p, shard) in meta.shards.iter_mut().enumerate() {
                if *shard >= shards {
                    *shard = default_shard(&meta.name, p as i32, shards);
                }
            }
        }
    }

    /// Sets or removes one of an entity's quotas; an entity left without any is gone.
    fn set_client_quota(&mut self, entity: &crate::quota::QuotaEntity, key: &str, value: Option<f64>) {
        let at = self.client_quotas.iter().position(|q| q.entity == *entity);
        match (at, value) {
            (Some(at), Some(value)) => {
                self.client_quotas[at].values.insert(key.to_string(), value);
            }
            (Some(at), None) => {
                self.client_quotas[at].values.remove(key);
                if self.client_quotas[at].values.is_empty() {
                    self.client_quotas.remove(at);
                }
            }
            (None, Some(value)) => self
                .client_quotas
                .push(crate::quota::ClientQuota { entity: entity.clone(), values: [(key.to_string(), value)].into() }),
            (None, None) => {}
        }
    }

    /// Rebuilds the id index after the topics changed.
    pub(crate) fn index_ids(&mut self) {
        self.ids = self.topics.values().map(|t| (t.id, t.name.clone())).collect();
    }

    /// Whether broker `id` may lead and be sent clients: registered and not fenced
    /// (`local`, the node asking, counts as live).
    pub fn is_live(&self, id: i32, local: i32) -> bool {
        id == local || self.brokers.get(&id).is_some_and(|b| !b.fenced)
    }

    /// The shard that owns a partition, if the partition exists.
    pub fn shard_of(&self, partition: &TopicPartition) -> Option<usize> {
        let topic = self.topics.get(&partition.topic)?;
        usize::try_from(partition.partition).ok().and_then(|p| topic.shards.get(p).copied())
    }
}

/// The default placement: partitions of a topic spread round-robin over the shards,
/// starting at a shard derived from the topic name so that topics do not all start on 0.
pub fn default_shard(topic: &str, partition: i32, shards: usize) -> usize {
    let start = crc32c::crc32c(topic.as_bytes()) as usize;
    start.wrapping_add(partition as usize) % shards
}

/// Why a topic name is invalid, in Kafka's words (`Topic.validate`).
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("Topic name is illegal, it can't be empty".into());
    }
    if name == "." || name == ".." {
        return Err("Topic name cannot be \".\" or \"..\"".into());
    }
    if name.len() > 249 {
        return Err(format!("Topic name is illegal, it can't be longer than 249 characters, topic name: {name}"));
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-') {
        return Err(format!(
            "Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

pub use crate::errors::Refusal;

/// One change to the metadata, as the controller decides it and every shard applies
/// it. The single-node controller persists the image these records produce; the
/// cluster controller's metadata log will carry them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum MetadataRecord {
    /// A new topic, or a new state of one (more partitions, configs, placement).
    Topic(TopicMeta),
    RemoveTopic {
        name: String,
        id: uuid::Uuid,
    },
    /// Producer ids below `next` are handed out (Kafka's ProducerIdsRecord).
    ProducerIds {
        next: i64,
    },
    /// A broker registered (Kafka's RegisterBrokerRecord).
    RegisterBroker(BrokerMeta),
    /// A broker fenced or unfenced (Kafka's BrokerRegistrationChangeRecord).
    BrokerFencing {
        id: i32,
        fenced: bool,
    },
    /// A broker's registration removed (Kafka's UnregisterBrokerRecord).
    UnregisterBroker {
        id: i32,
    },
    /// The dynamic configs of broker `broker` (`""`: the cluster defaults), whole.
    BrokerConfigs {
        broker: String,
        configs: BTreeMap<String, String>,
    },
    /// A user's SCRAM credential for one mechanism, set or (`None`) removed.
    ScramCredential {
        user: String,
        mechanism: String,
        credential: Option<crate::security::scram::ScramCredential>,
    },
    /// An ACL added (Kafka's AccessControlEntryRecord).
    AclAdded(crate::security::acl::AclBinding),
    /// An ACL removed (Kafka's RemoveAccessControlEntryRecord).
    AclRemoved(crate::security::acl::AclBinding),
    /// An entity's quota `key` set or (`None`) removed (Kafka's ClientQuotaRecord).
    ClientQuota {
        entity: crate::quota::QuotaEntity,
        key: String,
        value: Option<f64>,
    },
    /// The config overrides of group `group`, whole (Kafka's ConfigRecord for GROUP
    /// resources); empty removes them.
    GroupConfigs {
        group: String,
        configs: BTreeMap<String, String>,
    },
    /// A feature's finalized level (Kafka's FeatureLevelRecord); 0 turns it off.
    FeatureLevel {
        name: String,
        level: i16,
    },
    /// The configs of client-metrics resource `name`, whole (Kafka's ConfigRecord for
    /// CLIENT_METRICS resources); empty removes it.
    ClientMetrics {
        name: String,
        configs: BTreeMap<String, String>,
    },
    /// A delegation token created or renewed, whole (Kafka's DelegationTokenRecord).
    DelegationToken(crate::security::tokens::DelegationToken),
    /// A delegation token expired (Kafka's RemoveDelegationTokenRecord).
    RemoveDelegationToken {
        id: String,
    },
    /// A quorum member added, or promoted to voter; carried by the membership change
    /// itself.
    QuorumMember(QuorumMember),
    /// A quorum member removed; carried by the membership change itself.
    RemoveQuorumMember {
        node: i32,
    },
}

/// A resource's configs replaced whole; an empty set removes the resource's entry.
fn replace_configs(
    all: &mut BTreeMap<String, BTreeMap<String, String>>,
    resource: &str,
    configs: &BTreeMap<String, String>,
) {
    match configs.is_empty() {
        true => {
            all.remove(resource);
        }
        false => {
            all.insert(resource.to_string(), configs.clone());
        }
    }
}

impl MetadataImage {
    /// Applies `records` and bumps the version once.
    pub fn apply(&mut self, records: &[MetadataRecord]) {
        for record in records {
            match record {
                MetadataRecord::Topic(meta) => {
                    self.topics.insert(meta.name.clone(), meta.clone());
                }
                MetadataRecord::RemoveTopic { name, id } => {
                    if self.topics.get(name).is_some_and(|t| t.id == *id) {
                        self.topics.remove(name);
                    }
                }
                MetadataRecord::ProducerIds { next } => self.next_producer_id = self.next_producer_id.max(*next),
                MetadataRecord::RegisterBroker(broker) => {
                    self.brokers.insert(broker.id, broker.clone());
                }
                MetadataRecord::BrokerFencing { id, fenced } => {
                    if let Some(broker) = self.brokers.get_mut(id) {
                        broker.fenced = *fenced;
                    }
                }
                MetadataRecord::UnregisterBroker { id } => {
                    self.brokers.remove(id);
                }
                MetadataRecord::GroupConfigs { group, configs } => {
                    replace_configs(&mut self.group_configs, group, configs)
                }
                MetadataRecord::ClientMetrics { name, configs } => {
                    replace_configs(&mut self.client_metrics, name, configs)
                }
                MetadataRecord::BrokerConfigs { broker, configs } => {
                    replace_configs(&mut self.broker_configs, broker, configs)
                }
                MetadataRecord::ScramCredential { user, mechanism, credential } => match credential {
                    Some(credential) => {
                        self.scram.entry(user.clone()).or_default().insert(mechanism.clone(), credential.clone());
                    }
                    None => {
                        if let Some(mechanisms) = self.scram.get_mut(user) {
                            mechanisms.remove(mechanism);
                            if mechanisms.is_empty() {
                                self.scram.remove(user);
                            }
                        }
                    }
                },
                MetadataRecord::AclAdded(acl) => {
                    if let Err(at) = self.acls.binary_search(acl) {
                        self.acls.insert(at, acl.clone());
                    }
                }
                MetadataRecord::AclRemoved(acl) => {
                    if let Ok(at) = self.acls.binary_search(acl) {
                        self.acls.remove(at);
                    }
                }
                MetadataRecord::ClientQuota { entity, key, value } => self.set_client_quota(entity, key, *value),
                MetadataRecord::DelegationToken(token) => {
                    self.tokens.insert(token.id.clone(), token.clone());
                }
                MetadataRecord::RemoveDelegationToken { id } => {
                    self.tokens.remove(id);
                }
                MetadataRecord::QuorumMember(member) => {
                    self.quorum.insert(member.node, member.clone());
                }
                MetadataRecord::RemoveQuorumMember { node } => {
                    self.quorum.remove(node);
                }
                MetadataRecord::FeatureLevel { name, level } => {
                    self.features.insert(name.clone(), *level);
                    self.features_epoch = self.version as i64 + 1;
                }
            }
        }
        self.version += 1;
        self.index_ids();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Topic names are checked as Kafka checks them.
    #[test]
    fn topic_names() {
        let check = |name: &str, ok: bool| assert_eq!(validate_topic_name(name).is_ok(), ok, "{name}");
        check("orders", true);
        check("a.b_c-D9", true);
        check("", false);
        check(".", false);
        check("..", false);
        check("has space", false);
        check("slash/no", false);
        check("ünicode", false);
        check(&"x".repeat(249), true);
        check(&"x".repeat(250), false);
    }

    // Topic ids resolve through the index of each image, also after a topic is
    // deleted and recreated under the same name with a new id.
    #[test]
    fn topics_by_id() {
        let topic = |name: &str| TopicMeta {
            name: name.into(),
            id: uuid::Uuid::new_v4(),
            partitions: 1,
            configs: BTreeMap::new(),
            shards: vec![0],
            assignments: Vec::new(),
        };
        let (a, b) = (topic("a"), topic("b"));
        let (ida, idb) = (a.id, b.id);
        let mut image = MetadataImage::default();
        image.apply(&[MetadataRecord::Topic(a), MetadataRecord::Topic(b)]);
        assert_eq!(image.version, 1);
        assert_eq!(image.topic_by_id(ida).unwrap().name, "a");
        assert_eq!(image.topic_by_id(idb).unwrap().name, "b");
        assert!(image.topic_by_id(uuid::Uuid::new_v4()).is_none());
        let again = topic("a");
        let new_id = again.id;
        image.apply(&[MetadataRecord::RemoveTopic { name: "a".into(), id: ida }, MetadataRecord::Topic(again)]);
        assert!(image.topic_by_id(ida).is_none(), "the old id is gone");
        assert_eq!(image.topic_by_id(new_id).unwrap().name, "a");
        // A removal naming an old incarnation leaves the new one alone.
        image.apply(&[MetadataRecord::RemoveTopic { name: "a".into(), id: ida }]);
        assert_eq!(image.topic("a").unwrap().id, new_id);
    }

    // Partitions of shards the node does not run move to the default placement.
    #[test]
    fn placed_within_the_shards() {
        let mut image = MetadataImage::default();
        let meta = TopicMeta {
            name: "w".into(),
            id: uuid::Uuid::new_v4(),
            partitions: 2,
            configs: BTreeMap::new(),
            shards: vec![7, 1],
            assignments: Vec::new(),
        };
        image.apply(&[MetadataRecord::Topic(meta)]);
        image.place_within(2);
        assert_eq!(image.topic("w").unwrap().shards, vec![default_shard("w", 0, 2), 1]);
    }
}
