//! What the controller decides, as a pure function of the metadata image: the records
//! each request (`requests.rs`) turns into and the reply (`decide`): topics and the placement of their replicas (leaders
//! spread over the live brokers), broker registration and fencing (a fenced broker's
//! leaderships move to in-sync replicas), ISR changes (AlterPartition), leader
//! elections, producer-id blocks and delegation tokens. `controller` runs these one at a time against the
//! applied image and proposes the records to the metadata log.

use std::collections::BTreeMap;

use super::elections::{
    complete_reassignment, elect_leaders, elect_offline, leave_partitions, leave_partitions_where, min_insync, reassign,
};
pub use super::requests::{ControllerReply, ControllerRequest, Election, NewTopic, QuorumStatus, VoterStatus};
use super::{default_shard, Assignment, MetadataImage, MetadataRecord, Refusal, TopicMeta};
use crate::errors::code;
use crate::limits;
use crate::security::tokens;

/// A new topic `name` in `image`, its replicas placed and each partition given a shard.
///
/// # Errors
/// TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION for a name that collides with another
/// once '.' and '_' are alike, INVALID_REPLICATION_FACTOR for more replicas than
/// brokers.
fn new_topic(
    image: &MetadataImage,
    local: &Local,
    name: &str,
    partitions: i32,
    replication_factor: i16,
    configs: &BTreeMap<String, String>,
) -> Result<TopicMeta, Refusal> {
    if image.topics.contains_key(name) {
        return Err((code::TOPIC_ALREADY_EXISTS, format!("Topic '{name}' already exists.")));
    }
    // Kafka refuses names that collide once '.' and '_' are treated alike.
    let normalized = name.replace('.', "_");
    if let Some(other) = image.topics.keys().find(|t| t.replace('.', "_") == normalized) {
        return Err((code::INVALID_TOPIC_EXCEPTION, format!("Topic '{name}' collides with existing topic: {other}")));
    }
    Ok(TopicMeta {
        name: name.to_owned(),
        id: uuid::Uuid::new_v4(),
        partitions,
        configs: configs.clone(),
        shards: (0..partitions).map(|p| default_shard(name, p, local.shards)).collect(),
        assignments: assign(image, local, name, 0..partitions, replication_factor)?,
    })
}

/// Producer ids per block (Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`).
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// Decides `request` against `image`: the records to apply and the reply.
///
/// # Errors
/// The Kafka error and message for a request the image refuses.
pub fn decide(
    image: &MetadataImage,
    request: &ControllerRequest,
    local: &Local,
) -> Result<(Vec<MetadataRecord>, ControllerReply), Refusal> {
    let shards = local.shards;
    let unknown = |name: &str| (code::UNKNOWN_TOPIC_OR_PARTITION, format!("Topic {name} does not exist."));
    let topic = |name: &str| image.topic(name).cloned().ok_or_else(|| unknown(name));
    Ok(match request {
        // The quorum's state is the controller's, not the image's (`Controller::handle_here`).
        ControllerRequest::DescribeQuorum => {
            return Err((code::NOT_CONTROLLER, "the quorum is described by its controller".into()))
        }
        // Membership changes are raft's, not the image's (`Controller::change_voters`).
        ControllerRequest::AddVoter { .. }
        | ControllerRequest::RemoveVoter { .. }
        | ControllerRequest::UpdateVoter { .. }
        | ControllerRequest::UnregisterController { .. } => {
            return Err((code::NOT_CONTROLLER, "the quorum's voters are changed by its controller".into()))
        }
        ControllerRequest::CreateTopic { name, partitions, replication_factor, configs } => {
            let meta = new_topic(image, local, name, *partitions, *replication_factor, configs)?;
            (vec![MetadataRecord::Topic(meta.clone())], ControllerReply::Topic(meta))
        }
        ControllerRequest::CreateTopics(topics) => {
            // Each topic is decided against the image the ones before it leave (a
            // name taken twice, replicas spread over all of them); the image is
            // copied once, at the first topic created.
            let mut after: Option<MetadataImage> = None;
            let mut records = Vec::new();
            let mut outcomes = Vec::with_capacity(topics.len());
            for t in topics {
                let current = after.as_ref().unwrap_or(image);
                let decided = new_topic(current, local, &t.name, t.partitions, t.replication_factor, &t.configs);
                if let Ok(meta) = &decided {
                    let record = MetadataRecord::Topic(meta.clone());
                    after.get_or_insert_with(|| image.clone()).apply(std::slice::from_ref(&record));
                    records.push(record);
                }
                outcomes.push(decided);
            }
            (records, ControllerReply::Topics(outcomes))
        }
        ControllerRequest::DeleteTopic { name } => {
            let meta = image.topic(name).cloned().ok_or_else(|| {
                (code::UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.".to_string())
            })?;
            (vec![MetadataRecord::RemoveTopic { name: name.clone(), id: meta.id }], ControllerReply::Topic(meta))
        }
        ControllerRequest::CreatePartitions { name, count } => {
            let mut meta = topic(name)?;
            check_growth(&meta, *count)?;
            let old = meta.partitions;
            meta.shards.extend((old..*count).map(|p| default_shard(name, p, shards)));
            if !meta.assignments.is_empty() {
                let factor = meta.assignments[0].replicas.len() as i16;
                meta.assignments.extend(assign(image, local, name, old..*count, factor)?);
            }
            meta.partitions = *count;
            (vec![MetadataRecord::Topic(meta.clone())], ControllerReply::Grown { old, meta })
        }
        ControllerRequest::SetConfigs { name, configs } => {
            let mut meta = topic(name)?;
            meta.configs = configs.clone();
            (vec![MetadataRecord::Topic(meta.clone())], ControllerReply::Topic(meta))
        }
        ControllerRequest::MovePartition { partition, target } => {
            let mut meta = topic(&partition.topic)?;
            let slot = usize::try_from(partition.partition)
                .ok()
                .and_then(|p| meta.shards.get_mut(p))
                .ok_or((code::UNKNOWN_TOPIC_OR_PARTITION, format!("no partition {partition}")))?;
            *slot = *target;
            (vec![MetadataRecord::Topic(meta.clone())], ControllerReply::Topic(meta))
        }
        ControllerRequest::RegisterBroker(broker) => {
            let previous = image.brokers.get(&broker.id);
            if previous.is_some_and(|p| p.incarnation == broker.incarnation && !p.fenced) {
                // The same process again (its first answer was lost): nothing changes.
                return Ok((Vec::new(), ControllerReply::Done));
            }
            let mut records = Vec::new();
            let mut next = image.clone();
            if previous.is_some_and(|p| !p.fenced) {
                // A restart the controller did not see coming (no controlled shutdown,
                // the session not yet expired): the broker may have lost the tail it
                // had not written, so it leaves every ISR and its leaderships move to
                // in-sync replicas, as Kafka's handleBrokerUncleanShutdown does. Where
                // it was the only one in sync it leads again, in a new epoch.
                records = leave_partitions(image, broker.id, false, local);
                next.apply(&records);
            } else if previous.is_some() && !broker.clean_restart {
                // Back after a crash: it was out of every ISR already, but its tail
                // may be gone, so it is no longer an eligible leader (KIP-966).
                records = leave_partitions(image, broker.id, false, local);
                next.apply(&records);
            }
            let mut broker = broker.clone();
            broker.epoch = previous.map_or(0, |b| b.epoch + 1);
            broker.fenced = false;
            records.push(MetadataRecord::RegisterBroker(broker.clone()));
            next.apply(&records[records.len() - 1..]);
            records.extend(elect_offline(&next, broker.id, local));
            (records, ControllerReply::Done)
        }
        ControllerRequest::BrokerHeartbeat { id, log_dir_offline: true, .. } => match image.brokers.get(id) {
            Some(broker) if !broker.fenced => {
                tracing::warn!(target: "skein::net", broker = id,
                    "broker's log directory takes no writes: fenced, its leaderships move");
                let mut records = vec![MetadataRecord::BrokerFencing { id: *id, fenced: true }];
                records.extend(leave_partitions(image, *id, true, local));
                (records, ControllerReply::Done)
            }
            Some(_) => (Vec::new(), ControllerReply::Done),
            None => return Err((code::BROKER_NOT_AVAILABLE, format!("broker {id} is not registered"))),
        },
        ControllerRequest::BrokerHeartbeat { id, log_dir_offline: false, offline_replicas } => {
            match image.brokers.get(id) {
                Some(broker) => {
                    // Its replicas in failed directories leave first, so that no election
                    // below gives one of them back to it.
                    let offline: std::collections::HashSet<(&str, i32)> =
                        offline_replicas.iter().map(|(t, p)| (t.as_str(), *p)).collect();
                    let mut records = match offline.is_empty() {
                        true => Vec::new(),
                        false => leave_partitions_where(image, *id, false, local, |t, p| offline.contains(&(t, p))),
                    };
                    if broker.fenced {
                        let mut next = image.clone();
                        next.apply(&records);
                        records.push(MetadataRecord::BrokerFencing { id: *id, fenced: false });
                        next.apply(&records[records.len() - 1..]);
                        records.extend(elect_offline(&next, *id, local));
                    }
                    (records, ControllerReply::Done)
                }
                None => return Err((code::BROKER_NOT_AVAILABLE, format!("broker {id} is not registered"))),
            }
        }
        ControllerRequest::UnregisterBroker { id } => {
            if !image.brokers.contains_key(id) {
                return Err((code::BROKER_ID_NOT_REGISTERED, format!("Broker ID {id} is not currently registered")));
            }
            let mut records = leave_partitions(image, *id, false, local);
            records.push(MetadataRecord::UnregisterBroker { id: *id });
            (records, ControllerReply::Done)
        }
        ControllerRequest::FenceBroker { id } => {
            if image.brokers.get(id).is_none_or(|b| b.fenced) {
                return Ok((Vec::new(), ControllerReply::Done));
            }
            let mut records = vec![MetadataRecord::BrokerFencing { id: *id, fenced: true }];
            records.extend(leave_partitions(image, *id, true, local));
            (records, ControllerReply::Done)
        }
        ControllerRequest::AlterPartition { topic: name, partition, leader, leader_epoch, partition_epoch, isr } => {
            let mut meta = topic(name)?;
            let slot = usize::try_from(*partition)
                .ok()
                .filter(|&p| p < meta.assignments.len())
                .ok_or((code::UNKNOWN_TOPIC_OR_PARTITION, format!("no partition {name}-{partition}")))?;
            let assignment = &mut meta.assignments[slot];
            if assignment.leader != *leader || assignment.leader_epoch != *leader_epoch {
                return Err((
                    code::FENCED_LEADER_EPOCH,
                    format!("leader {leader} in epoch {leader_epoch} is not current"),
                ));
            }
            if assignment.partition_epoch != *partition_epoch {
                return Err((
                    code::INVALID_UPDATE_VERSION,
                    format!("partition epoch {partition_epoch} is not current"),
                ));
            }
            if !isr.contains(leader) || isr.iter().any(|r| !assignment.replicas.contains(r)) {
                return Err((code::INVALID_REQUEST, format!("ISR {isr:?} must hold the leader and only replicas")));
            }
            // A fenced broker (gone, or shutting down) does not join an ISR.
            let live = |id: &i32| image.brokers.get(id).is_none_or(|b| !b.fenced);
            if let Some(fenced) = isr.iter().find(|r| !assignment.isr.contains(r) && !live(r)) {
                return Err((code::INELIGIBLE_REPLICA, format!("broker {fenced} is fenced: it cannot join the ISR")));
            }
            let min_insync = min_insync(image, image.topic(name).expect("checked above"), local)(slot);
            assignment.set_isr(isr.clone(), min_insync, true);
            assignment.partition_epoch += 1;
            // The ISR now holding every target replica completes a reassignment.
            complete_reassignment(assignment, &live);
            (vec![MetadataRecord::Topic(meta.clone())], ControllerReply::Done)
        }
        ControllerRequest::Reassign { partitions, keep_factor } => reassign(image, partitions, *keep_factor),
        ControllerRequest::ElectLeaders { unclean, partitions } => {
            elect_leaders(image, *unclean, partitions.as_deref())
        }
        ControllerRequest::SetBrokerConfigs { broker, configs } => {
            if !broker.is_empty() && broker.parse::<i32>().is_err() {
                return Err((code::INVALID_REQUEST, format!("Invalid broker id {broker}")));
            }
            for (name, value) in configs {
                crate::broker_configs::validate_broker_config(broker, name, value)?;
            }
            let record = MetadataRecord::BrokerConfigs { broker: broker.clone(), configs: configs.clone() };
            (vec![record], ControllerReply::Done)
        }
        ControllerRequest::UpdateFeatures { updates } => {
            let mut records = Vec::new();
            for (name, level, upgrade) in updates {
                crate::features::check(image, local.node, name, *level, *upgrade)?;
                records.push(MetadataRecord::FeatureLevel { name: name.clone(), level: *level });
            }
            (records, ControllerReply::Done)
        }
        ControllerRequest::SetGroupConfigs { group, configs } => {
            if group.is_empty() {
                return Err((code::INVALID_REQUEST, "Default group resources are not allowed.".into()));
            }
            let record = MetadataRecord::GroupConfigs { group: group.clone(), configs: configs.clone() };
            (vec![record], ControllerReply::Done)
        }
        ControllerRequest::SetClientMetrics { name, configs } => {
            let record = MetadataRecord::ClientMetrics { name: name.clone(), configs: configs.clone() };
            (vec![record], ControllerReply::Done)
        }
        ControllerRequest::AlterScram { changes } => {
            let records = changes
                .iter()
                .map(|(user, mechanism, credential)| MetadataRecord::ScramCredential {
                    user: user.clone(),
                    mechanism: mechanism.clone(),
                    credential: credential.clone(),
                })
                .collect();
            (records, ControllerReply::Done)
        }
        ControllerRequest::CreateAcls { bindings } => {
            let added: std::collections::BTreeSet<_> =
                bindings.iter().filter(|b| image.acls.binary_search(b).is_err()).collect();
            if image.acls.len() + added.len() > crate::limits::ACL_BINDINGS_MAX {
                let message = format!("The cluster holds at most {} ACLs", crate::limits::ACL_BINDINGS_MAX);
                return Err((code::POLICY_VIOLATION, message));
            }
            (added.into_iter().cloned().map(MetadataRecord::AclAdded).collect(), ControllerReply::Done)
        }
        ControllerRequest::DeleteAcls { bindings } => {
            let removed = bindings.iter().filter(|b| image.acls.binary_search(b).is_ok()).cloned();
            (removed.map(MetadataRecord::AclRemoved).collect(), ControllerReply::Done)
        }
        ControllerRequest::AlterClientQuotas { changes } => {
            let records = changes
                .iter()
                .map(|(entity, key, value)| MetadataRecord::ClientQuota {
                    entity: entity.clone(),
                    key: key.clone(),
                    value: *value,
                })
                .collect();
            (records, ControllerReply::Done)
        }
        ControllerRequest::CreateToken(token) => {
            if image.tokens.contains_key(&token.id) {
                return Err((code::INVALID_REQUEST, format!("Delegation token {} exists already", token.id)));
            }
            if image.tokens.len() >= limits::DELEGATION_TOKENS_MAX {
                let message = format!("The cluster holds at most {} delegation tokens", limits::DELEGATION_TOKENS_MAX);
                return Err((code::POLICY_VIOLATION, message));
            }
            let reply = ControllerReply::TokenExpiry(token.expiry_ms);
            (vec![MetadataRecord::DelegationToken(token.clone())], reply)
        }
        ControllerRequest::RenewToken { id, principal, now_ms, renew_to_ms } => {
            let renewed = tokens::renew(image.tokens.get(id), principal, *now_ms, *renew_to_ms)?;
            let reply = ControllerReply::TokenExpiry(renewed.expiry_ms);
            (vec![MetadataRecord::DelegationToken(renewed)], reply)
        }
        ControllerRequest::ExpireToken { id, principal, now_ms, expire_to_ms } => {
            match tokens::expire(image.tokens.get(id), principal, *now_ms, *expire_to_ms)? {
                None => {
                    let record = MetadataRecord::RemoveDelegationToken { id: id.clone() };
                    (vec![record], ControllerReply::TokenExpiry(*now_ms))
                }
                Some(expired) => {
                    let reply = ControllerReply::TokenExpiry(expired.expiry_ms);
                    (vec![MetadataRecord::DelegationToken(expired)], reply)
                }
            }
        }
        ControllerRequest::RemoveExpiredTokens { now_ms } => {
            let expired = image.tokens.values().filter(|t| t.expired(*now_ms));
            let records = expired.map(|t| MetadataRecord::RemoveDelegationToken { id: t.id.clone() }).collect();
            (records, ControllerReply::Done)
        }
        ControllerRequest::ProducerIds => {
            let start = image.next_producer_id;
            let end = start + PRODUCER_ID_BLOCK_SIZE;
            (vec![MetadataRecord::ProducerIds { next: end }], ControllerReply::ProducerIds(start..end))
        }
    })
}

/// What `decide` needs to know of the node deciding.
#[derive(Debug, Clone, Copy)]
pub struct Local {
    /// The deciding node (the active controller), and whether it is itself a broker
    /// (a live one: it is deciding) or controller-only.
    pub node: i32,
    pub broker: bool,
    pub shards: usize,
    /// The broker default of `min.insync.replicas`.
    pub min_insync: usize,
}

impl Local {
    /// Node `node` (a broker or not) of `shards` shards, with these broker-level topic
    /// config defaults.
    pub fn new(node: i32, broker: bool, shards: usize, topic_defaults: &BTreeMap<String, String>) -> Local {
        let min_insync = crate::configs::effective("min.insync.replicas", &BTreeMap::new(), topic_defaults)
            .and_then(|(value, _)| value.trim().parse::<usize>().ok())
            .unwrap_or(1);
        Local { node, broker, shards, min_insync }
    }
}

/// Places `replication_factor` replicas of each partition in `partitions` on distinct
/// brokers: the registered unfenced ones, and the deciding node when it is a broker
/// (it is live). Rack-aware, as Kafka places replicas: the brokers are listed alternating
/// racks (`rack_alternated`); the first replica (the preferred leader) moves one
/// broker on along that list per partition, starting at a broker derived from the topic
/// name, so leaders spread over brokers and racks; each next replica is the next
/// broker in the list on a rack the partition does not use yet, until every rack holds
/// one, then the next broker not holding one. Brokers without a rack form one rack.
///
/// # Errors
/// INVALID_REPLICATION_FACTOR, in Kafka's words.
fn assign(
    image: &MetadataImage,
    local: &Local,
    topic: &str,
    partitions: std::ops::Range<i32>,
    replication_factor: i16,
) -> Result<Vec<Assignment>, Refusal> {
    let factor = if replication_factor == -1 { 1 } else { replication_factor };
    let mut brokers: Vec<i32> = image.brokers.values().filter(|b| !b.fenced).map(|b| b.id).collect();
    if local.broker && !brokers.contains(&local.node) {
        brokers.push(local.node);
        brokers.sort_unstable();
    }
    if factor < 1 || factor as usize > brokers.len() {
        return Err((
            code::INVALID_REPLICATION_FACTOR,
            format!("Unable to replicate the partition {factor} time(s): The target replication factor of {factor} cannot be reached because only {} broker(s) are registered.", brokers.len()),
        ));
    }
    let rack_of = |id: i32| image.brokers.get(&id).and_then(|b| b.rack.clone()).unwrap_or_default();
    let brokers = rack_alternated(brokers.into_iter().map(|id| (id, rack_of(id))).collect());
    let racks = brokers.iter().map(|(_, rack)| rack).collect::<std::collections::BTreeSet<_>>().len();
    let start = crc32c::crc32c(topic.as_bytes()) as usize;
    Ok(partitions
        .map(|p| {
            let first = start.wrapping_add(p as usize) % brokers.len();
            let mut replicas = vec![brokers[first].0];
            let mut used_racks = vec![&brokers[first].1];
            while replicas.len() < factor as usize {
                let every_rack_used = used_racks.len() >= racks;
                let next = (1..brokers.len())
                    .map(|step| &brokers[(first + step) % brokers.len()])
                    .find(|(id, rack)| !replicas.contains(id) && (every_rack_used || !used_racks.contains(&rack)))
                    .expect("a broker left: the factor is at most the brokers");
                replicas.push(next.0);
                used_racks.push(&next.1);
            }
            Assignment::new(replicas)
        })
        .collect())
}

/// `brokers` (id, rack) listed alternating racks, as Kafka's rack-aware placement
/// starts: the first broker of each rack (racks by name, brokers by id), then the
/// second of each, and so on. Without racks, the brokers by id.
fn rack_alternated(mut brokers: Vec<(i32, String)>) -> Vec<(i32, String)> {
    brokers.sort_by(|a, b| (&a.1, a.0).cmp(&(&b.1, b.0)));
    let mut by_rack: Vec<std::collections::VecDeque<(i32, String)>> = Vec::new();
    for broker in brokers {
        match by_rack.last_mut() {
            Some(rack) if rack.front().is_some_and(|(_, r)| *r == broker.1) => rack.push_back(broker),
            _ => by_rack.push(std::collections::VecDeque::from([broker])),
        }
    }
    let mut out = Vec::new();
    while by_rack.iter().any(|rack| !rack.is_empty()) {
        out.extend(by_rack.iter_mut().filter_map(|rack| rack.pop_front()));
    }
    out
}

/// Why a topic cannot grow to `count` partitions, in Kafka's words.
///
/// # Errors
/// INVALID_PARTITIONS.
pub fn check_growth(meta: &TopicMeta, count: i32) -> Result<(), Refusal> {
    if count < meta.partitions {
        return Err((
            code::INVALID_PARTITIONS,
            format!("Topic currently has {} partitions, which is higher than the requested {count}.", meta.partitions),
        ));
    }
    if count == meta.partitions {
        return Err((code::INVALID_PARTITIONS, format!("Topic already has {count} partitions.")));
    }
    if count > 100_000 {
        return Err((code::INVALID_PARTITIONS, format!("Number of partitions {count} exceeds the limit of 100000.")));
    }
    Ok(())
}

/// Decides `requests` in order, each against the image the ones before it leave
/// (a batch of ISR changes, `Controller::alter_all`). Returns their records, with
/// only the last record of each topic (each holds its topic whole, with every change
/// before it), and each request's reply or refusal.
pub fn decide_all(
    image: &MetadataImage,
    requests: &[ControllerRequest],
    local: &Local,
) -> (Vec<MetadataRecord>, Vec<Result<ControllerReply, Refusal>>) {
    let mut image = image.clone();
    let mut records: Vec<MetadataRecord> = Vec::new();
    let replies = requests
        .iter()
        .map(|request| {
            let (changes, reply) = decide(&image, request, local)?;
            image.apply(&changes);
            records.extend(changes);
            Ok(reply)
        })
        .collect();
    let mut last: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, record) in records.iter().enumerate() {
        if let MetadataRecord::Topic(meta) = record {
            last.insert(&meta.name, i);
        }
    }
    let keep: Vec<bool> = records
        .iter()
        .enumerate()
        .map(|(i, r)| !matches!(r, MetadataRecord::Topic(meta) if last.get(meta.name.as_str()) != Some(&i)))
        .collect();
    let records = records.into_iter().zip(keep).filter_map(|(r, keep)| keep.then_some(r)).collect();
    (records, replies)
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
