//! What the controller decides, as a pure function of the metadata image: the records
//! each request (`requests.rs`) turns into and the reply (`decide`): topics and the placement of their replicas (leaders
//! spread over the live brokers), broker registration and fencing (a fenced broker's
//! leaderships move to in-sync replicas), ISR changes (AlterPartition), leader
//! elections and producer-id blocks. `controller` runs these one at a time against the
//! applied image and proposes the records to the metadata log.

use std::collections::BTreeMap;

use super::elections::{complete_reassignment, elect_leaders, elect_offline, leave_partitions, min_insync, reassign};
pub use super::requests::{ControllerReply, ControllerRequest, Election, NewTopic, QuorumStatus, VoterStatus};
use super::{default_shard, Assignment, MetadataImage, MetadataRecord, Refusal, TopicMeta};
use crate::errors::code;

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
        ControllerRequest::BrokerHeartbeat { id, log_dir_offline: true } => match image.brokers.get(id) {
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
        ControllerRequest::BrokerHeartbeat { id, log_dir_offline: false } => match image.brokers.get(id) {
            Some(broker) if broker.fenced => {
                let mut records = vec![MetadataRecord::BrokerFencing { id: *id, fenced: false }];
                records.extend(elect_offline(image, *id, local));
                (records, ControllerReply::Done)
            }
            Some(_) => (Vec::new(), ControllerReply::Done),
            None => return Err((code::BROKER_NOT_AVAILABLE, format!("broker {id} is not registered"))),
        },
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
mod tests {
    use super::*;
    use crate::metadata::BrokerMeta;
    use skein_engine::TopicPartition;

    /// Broker `id` registering from a process started as `incarnation`.
    fn started(id: i32, incarnation: u64) -> ControllerRequest {
        ControllerRequest::RegisterBroker(BrokerMeta {
            id,
            epoch: 0,
            host: "127.0.0.1".into(),
            port: 9000 + id as u16,
            rack: None,
            fenced: false,
            incarnation,
            clean_restart: true,
            listeners: Vec::new(),
            virtual_brokers: None,
        })
    }

    fn applied(image: &mut MetadataImage, request: ControllerRequest) -> Result<ControllerReply, Refusal> {
        let (records, reply) = decide(image, &request, &Local { node: 1, broker: true, shards: 2, min_insync: 1 })?;
        image.apply(&records);
        Ok(reply)
    }

    // ISR changes decided together see each other: one record for their topic with
    // every change, and a second change made from the same partition epoch refused.
    #[test]
    fn isr_changes_decided_together_make_one_record() {
        let mut image = MetadataImage::default();
        for id in [1, 2, 3] {
            applied(&mut image, started(id, 0)).unwrap();
        }
        let create = ControllerRequest::CreateTopic {
            name: "r".into(),
            partitions: 3,
            replication_factor: 3,
            configs: BTreeMap::new(),
        };
        let Ok(ControllerReply::Topic(meta)) = applied(&mut image, create) else { panic!() };
        let shrink = |p: i32| {
            let a = meta.assignment(p, 9);
            ControllerRequest::AlterPartition {
                topic: "r".into(),
                partition: p,
                leader: a.leader,
                leader_epoch: a.leader_epoch,
                partition_epoch: a.partition_epoch,
                isr: vec![a.leader],
            }
        };
        let local = Local { node: 1, broker: true, shards: 2, min_insync: 1 };
        let (records, replies) = decide_all(&image, &[shrink(0), shrink(2), shrink(0)], &local);
        assert_eq!(records.len(), 1, "one record for the topic");
        let codes: Vec<i16> = replies.iter().map(|r| r.as_ref().map_or_else(|e| e.0, |_| 0)).collect();
        assert_eq!(codes, vec![0, 0, code::INVALID_UPDATE_VERSION]);
        image.apply(&records);
        for (p, isr_len, epoch) in [(0, 1, 1), (1, 3, 0), (2, 1, 1)] {
            let a = image.topic("r").unwrap().assignment(p, 9);
            assert_eq!((a.isr.len(), a.partition_epoch), (isr_len, epoch), "partition {p}");
        }
    }

    // A CreateTopics request's topics are decided in order, each against what the
    // ones before it left: one record per created topic, the others refused alone.
    #[test]
    fn topics_created_together_see_each_other() {
        let mut image = MetadataImage::default();
        applied(
            &mut image,
            ControllerRequest::CreateTopic {
                name: "old".into(),
                partitions: 1,
                replication_factor: -1,
                configs: BTreeMap::new(),
            },
        )
        .unwrap();
        let new = |name: &str, partitions| NewTopic {
            name: name.into(),
            partitions,
            replication_factor: -1,
            configs: BTreeMap::new(),
        };
        let request = ControllerRequest::CreateTopics(vec![new("a.b", 3), new("old", 1), new("a_b", 1), new("c", 2)]);
        let local = Local { node: 1, broker: true, shards: 2, min_insync: 1 };
        let (records, reply) = decide(&image, &request, &local).unwrap();
        assert_eq!(records.len(), 2);
        let outcomes = reply.into_topics().unwrap();
        let codes: Vec<i16> = outcomes.iter().map(|o| o.as_ref().err().map_or(code::NONE, |e| e.0)).collect();
        assert_eq!(codes, [code::NONE, code::TOPIC_ALREADY_EXISTS, code::INVALID_TOPIC_EXCEPTION, code::NONE]);
        assert_eq!(outcomes[3].as_ref().unwrap().shards.len(), 2);
        // The image is left as it was: the records change it once committed.
        assert!(image.topic("a.b").is_none());
        image.apply(&records);
        assert_eq!(image.topic("a.b").unwrap().partitions, 3);
        assert!(image.topic("c").is_some());
    }

    // Each request as Kafka's controller answers it, and the image it leaves.
    #[test]
    fn requests_against_the_image() {
        let mut image = MetadataImage { next_producer_id: 1000, ..Default::default() };
        let create = |name: &str, partitions| ControllerRequest::CreateTopic {
            name: name.into(),
            partitions,
            replication_factor: -1,
            configs: BTreeMap::new(),
        };
        let Ok(ControllerReply::Topic(meta)) = applied(&mut image, create("a.b", 3)) else { panic!() };
        assert_eq!((meta.partitions, meta.shards.len()), (3, 3));
        assert_eq!(applied(&mut image, create("a.b", 1)).unwrap_err().0, code::TOPIC_ALREADY_EXISTS);
        assert_eq!(applied(&mut image, create("a_b", 1)).unwrap_err().0, code::INVALID_TOPIC_EXCEPTION);
        let grow = |count| ControllerRequest::CreatePartitions { name: "a.b".into(), count };
        assert_eq!(applied(&mut image, grow(3)).unwrap_err().0, code::INVALID_PARTITIONS);
        assert_eq!(applied(&mut image, grow(2)).unwrap_err().0, code::INVALID_PARTITIONS);
        let Ok(ControllerReply::Grown { old: 3, meta }) = applied(&mut image, grow(5)) else { panic!() };
        assert_eq!(meta.shards.len(), 5);
        let moved = ControllerRequest::MovePartition { partition: TopicPartition::new("a.b", 4), target: 1 };
        applied(&mut image, moved).unwrap();
        assert_eq!(image.topic("a.b").unwrap().shards[4], 1);
        let missing = ControllerRequest::MovePartition { partition: TopicPartition::new("a.b", 9), target: 1 };
        assert_eq!(applied(&mut image, missing).unwrap_err().0, code::UNKNOWN_TOPIC_OR_PARTITION);
        // Producer ids come in disjoint blocks.
        let Ok(ControllerReply::ProducerIds(first)) = applied(&mut image, ControllerRequest::ProducerIds) else {
            panic!()
        };
        let Ok(ControllerReply::ProducerIds(second)) = applied(&mut image, ControllerRequest::ProducerIds) else {
            panic!()
        };
        assert_eq!((first.start, first.end, second.start), (1000, 2000, 2000));
        assert_eq!(image.next_producer_id, 3000);
        let delete = ControllerRequest::DeleteTopic { name: "a.b".into() };
        applied(&mut image, delete.clone()).unwrap();
        assert!(image.topic("a.b").is_none());
        assert_eq!(applied(&mut image, delete).unwrap_err().0, code::UNKNOWN_TOPIC_OR_PARTITION);
    }

    // Registered brokers share the partitions' leadership evenly; a registration bumps
    // the broker's epoch; a replication factor past the brokers is refused.
    #[test]
    fn partitions_spread_over_the_brokers() {
        let mut image = MetadataImage::default();
        let register = |id: i32| started(id, 0);
        for id in [2, 3] {
            applied(&mut image, register(id)).unwrap();
        }
        // The same process registering again changes nothing; a new one bumps the epoch.
        applied(&mut image, register(2)).unwrap();
        assert_eq!(image.brokers[&2].epoch, 0);
        applied(&mut image, started(2, 7)).unwrap();
        assert_eq!(image.brokers[&2].epoch, 1);
        let create = |replication_factor| ControllerRequest::CreateTopic {
            name: "spread".into(),
            partitions: 6,
            replication_factor,
            configs: BTreeMap::new(),
        };
        assert_eq!(applied(&mut image, create(4)).unwrap_err().0, code::INVALID_REPLICATION_FACTOR);
        let Ok(ControllerReply::Topic(meta)) = applied(
            &mut image,
            ControllerRequest::CreateTopic {
                name: "replicated".into(),
                partitions: 3,
                replication_factor: 3,
                configs: BTreeMap::new(),
            },
        ) else {
            panic!()
        };
        for p in 0..3 {
            let a = meta.assignment(p, 9);
            let mut replicas = a.replicas.clone();
            replicas.sort_unstable();
            assert_eq!((replicas, a.isr.len(), a.leader), (vec![1, 2, 3], 3, a.replicas[0]));
        }
        // An ISR change from the current leader and partition epoch is taken once.
        let first = meta.assignment(0, 9);
        let shrink = ControllerRequest::AlterPartition {
            topic: "replicated".into(),
            partition: 0,
            leader: first.leader,
            leader_epoch: 0,
            partition_epoch: 0,
            isr: vec![first.leader],
        };
        applied(&mut image, shrink.clone()).unwrap();
        let after = image.topic("replicated").unwrap().assignment(0, 9);
        assert_eq!((after.isr.clone(), after.partition_epoch), (vec![first.leader], 1));
        assert_eq!(applied(&mut image, shrink).unwrap_err().0, code::INVALID_UPDATE_VERSION);
        let Ok(ControllerReply::Topic(meta)) = applied(&mut image, create(1)) else { panic!() };
        let mut led = BTreeMap::new();
        for p in 0..6 {
            let assignment = meta.assignment(p, 9);
            assert_eq!((assignment.replicas.len(), assignment.isr.clone()), (1, vec![assignment.leader]));
            *led.entry(assignment.leader).or_insert(0) += 1;
        }
        assert_eq!(led, BTreeMap::from([(1, 2), (2, 2), (3, 2)]), "the deciding node 1 counts as a broker");
        // Fencing a leader moves its leadership to the next in-sync replica in a new
        // epoch; with no live replica in the ISR the partition goes offline, and the
        // first of its ISR to come back leads it again.
        applied(&mut image, register(1)).unwrap();
        let before = image.topic("replicated").unwrap().assignment(1, 9);
        let gone = before.leader;
        applied(&mut image, ControllerRequest::FenceBroker { id: gone }).unwrap();
        let after = image.topic("replicated").unwrap().assignment(1, 9);
        assert_ne!(after.leader, gone);
        assert_eq!((after.leader_epoch, after.isr.contains(&gone)), (before.leader_epoch + 1, false));
        assert!(image.brokers[&gone].fenced);
        for id in [1, 2, 3].into_iter().filter(|&id| id != gone) {
            applied(&mut image, ControllerRequest::FenceBroker { id }).unwrap();
        }
        let offline = image.topic("replicated").unwrap().assignment(1, 9);
        assert_eq!((offline.leader, offline.isr.len()), (-1, 1));
        let last = offline.isr[0];
        applied(&mut image, ControllerRequest::BrokerHeartbeat { id: last, log_dir_offline: false }).unwrap();
        let back = image.topic("replicated").unwrap().assignment(1, 9);
        assert_eq!((back.leader, back.leader_epoch), (last, offline.leader_epoch + 1));
        assert!(!image.brokers[&last].fenced);
    }

    // A reassignment adds its target replicas as followers, completes once the ISR
    // holds them all (the leaving leader hands over in a new epoch), and a cancel goes
    // back to the replicas before it; bad targets get Kafka's errors.
    #[test]
    fn reassignments_move_replicas() {
        let mut image = MetadataImage::default();
        for id in [1, 2, 3, 4] {
            applied(&mut image, started(id, 0)).unwrap();
        }
        let create = ControllerRequest::CreateTopic {
            name: "moving".into(),
            partitions: 1,
            replication_factor: 2,
            configs: BTreeMap::new(),
        };
        applied(&mut image, create).unwrap();
        let now = |image: &MetadataImage| image.topic("moving").unwrap().assignment(0, 9);
        let before = now(&image);
        let (a, b) = (before.replicas[0], before.replicas[1]);
        let c = (1..=4).find(|r| !before.replicas.contains(r)).unwrap();
        let reassign = |target: Option<Vec<i32>>, keep_factor| ControllerRequest::Reassign {
            partitions: vec![("moving".into(), 0, target)],
            keep_factor,
        };
        let outcome = |reply: Result<ControllerReply, Refusal>| match reply {
            Ok(ControllerReply::Reassigned(outcomes)) => outcomes[0].0,
            other => panic!("{other:?}"),
        };
        assert_eq!(outcome(applied(&mut image, reassign(None, false))), code::NO_REASSIGNMENT_IN_PROGRESS);
        for bad in [vec![], vec![b, b], vec![b, 42]] {
            assert_eq!(outcome(applied(&mut image, reassign(Some(bad), false))), code::INVALID_REPLICA_ASSIGNMENT);
        }
        assert_eq!(outcome(applied(&mut image, reassign(Some(vec![b]), true))), code::INVALID_REPLICATION_FACTOR);
        assert_eq!(now(&image), before, "refused targets change nothing");

        // [a, b] to [b, c], then cancelled: back to [a, b].
        assert_eq!(outcome(applied(&mut image, reassign(Some(vec![b, c]), false))), code::NONE);
        let moving = now(&image);
        assert_eq!(
            (moving.replicas.clone(), moving.adding.clone(), moving.removing.clone()),
            (vec![b, c, a], vec![c], vec![a])
        );
        assert_eq!((moving.leader, moving.isr.len()), (a, 2), "the leader stays until the target is in sync");
        assert_eq!(outcome(applied(&mut image, reassign(None, false))), code::NONE);
        // As in Kafka, the replicas before it are the current ones less those joining
        // (b first now, as in the target); a still leads.
        let back = now(&image);
        assert_eq!((back.replicas.clone(), back.reassigning(), back.leader), (vec![b, a], false, a));

        // Again, and this time c catches up: the ISR change completes it, and a, which
        // led, hands over to b in a new epoch.
        applied(&mut image, reassign(Some(vec![b, c]), false)).unwrap();
        let moving = now(&image);
        let join = ControllerRequest::AlterPartition {
            topic: "moving".into(),
            partition: 0,
            leader: a,
            leader_epoch: moving.leader_epoch,
            partition_epoch: moving.partition_epoch,
            isr: vec![a, b, c],
        };
        applied(&mut image, join).unwrap();
        let done = now(&image);
        assert_eq!((done.replicas.clone(), done.isr.clone(), done.reassigning()), (vec![b, c], vec![b, c], false));
        assert_eq!((done.leader, done.leader_epoch), (b, moving.leader_epoch + 1));
    }

    // KIP-966: a replica that leaves an ISR smaller than min.insync.replicas becomes an
    // eligible leader replica, and leads when no ISR member can; an ISR back at
    // min.insync.replicas empties the ELR; a broker that restarted uncleanly leaves it.
    #[test]
    fn eligible_leader_replicas_lead_when_the_isr_cannot() {
        let mut image = MetadataImage::default();
        for id in [1, 2, 3] {
            applied(&mut image, started(id, 0)).unwrap();
        }
        let create = ControllerRequest::CreateTopic {
            name: "elr".into(),
            partitions: 1,
            replication_factor: 3,
            configs: BTreeMap::from([("min.insync.replicas".to_string(), "2".to_string())]),
        };
        applied(&mut image, create).unwrap();
        let now = |image: &MetadataImage| image.topic("elr").unwrap().assignment(0, 9);
        let start = now(&image);
        let (l, x, y) = (start.leader, start.replicas[1], start.replicas[2]);
        let shrink = |image: &mut MetadataImage, isr: Vec<i32>| {
            let a = now(image);
            let request = ControllerRequest::AlterPartition {
                topic: "elr".into(),
                partition: 0,
                leader: a.leader,
                leader_epoch: a.leader_epoch,
                partition_epoch: a.partition_epoch,
                isr,
            };
            applied(image, request).unwrap();
        };
        // y lags while two stay in sync: not eligible (the high watermark moved on).
        shrink(&mut image, vec![l, x]);
        assert_eq!((now(&image).isr, now(&image).elr), (vec![l, x], vec![]));
        // x lags too: the ISR is below min.insync.replicas, x is eligible.
        shrink(&mut image, vec![l]);
        assert_eq!(now(&image).elr, vec![x]);
        // The leader is fenced: x leads from the ELR, and l, which left cleanly, is
        // eligible in its place.
        applied(&mut image, ControllerRequest::FenceBroker { id: l }).unwrap();
        let after = now(&image);
        assert_eq!((after.leader, after.isr.clone(), after.elr.clone()), (x, vec![x], vec![l]));
        assert_eq!(after.leader_epoch, start.leader_epoch + 1);
        // x is fenced too: nobody live is in the ISR or the ELR, the partition is
        // offline; l coming back leads it from the ELR.
        applied(&mut image, ControllerRequest::FenceBroker { id: x }).unwrap();
        assert_eq!(now(&image).leader, -1);
        applied(&mut image, ControllerRequest::BrokerHeartbeat { id: l, log_dir_offline: false }).unwrap();
        let back = now(&image);
        assert_eq!((back.leader, back.isr.clone()), (l, vec![l]));
        assert!(back.elr.contains(&x), "{back:?}");
        // x restarts without a controlled shutdown: it may have lost its tail, so it
        // is no longer eligible.
        let mut unclean = started(x, 7);
        if let ControllerRequest::RegisterBroker(broker) = &mut unclean {
            broker.clean_restart = false;
        }
        applied(&mut image, unclean).unwrap();
        assert!(!now(&image).elr.contains(&x), "{:?}", now(&image));
        // The ISR grows back to min.insync.replicas: the ELR empties.
        shrink(&mut image, vec![l, y]);
        assert_eq!((now(&image).isr, now(&image).elr), (vec![l, y], vec![]));
    }

    // The cluster's dynamic min.insync.replicas (kafka-configs --entity-default) is the
    // default of topics without their own: an ISR shrinking below it makes the replica
    // that left eligible (KIP-966), where the static default of 1 would not.
    #[test]
    fn the_dynamic_cluster_min_insync_replicas_applies() {
        let mut image = MetadataImage::default();
        for id in [1, 2, 3] {
            applied(&mut image, started(id, 0)).unwrap();
        }
        let create = ControllerRequest::CreateTopic {
            name: "d".into(),
            partitions: 1,
            replication_factor: 3,
            configs: BTreeMap::new(),
        };
        applied(&mut image, create).unwrap();
        let configs = BTreeMap::from([("min.insync.replicas".to_string(), "2".to_string())]);
        applied(&mut image, ControllerRequest::SetBrokerConfigs { broker: String::new(), configs }).unwrap();
        let a = image.topic("d").unwrap().assignment(0, 9);
        let (l, x) = (a.leader, a.replicas[1]);
        let request = ControllerRequest::AlterPartition {
            topic: "d".into(),
            partition: 0,
            leader: l,
            leader_epoch: a.leader_epoch,
            partition_epoch: a.partition_epoch,
            isr: vec![l],
        };
        applied(&mut image, request).unwrap();
        let after = image.topic("d").unwrap().assignment(0, 9);
        assert_eq!(after.isr, vec![l]);
        assert!(after.elr.contains(&x), "{after:?}");
    }

    // Replicas spread over racks as Kafka places them: every partition on as many racks
    // as it can, leaders evenly over the brokers; without racks, consecutive brokers.
    #[test]
    fn replicas_spread_over_racks() {
        let mut image = MetadataImage::default();
        let racks = [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")];
        for (id, rack) in racks {
            let ControllerRequest::RegisterBroker(mut broker) = started(id, 0) else { unreachable!() };
            broker.rack = Some(rack.into());
            applied(&mut image, ControllerRequest::RegisterBroker(broker)).unwrap();
        }
        let rack_of = |id: i32| racks.iter().find(|(b, _)| *b == id).unwrap().1;
        let create = |name: &str, replication_factor| ControllerRequest::CreateTopic {
            name: name.into(),
            partitions: 12,
            replication_factor,
            configs: BTreeMap::new(),
        };
        let Ok(ControllerReply::Topic(meta)) = applied(&mut image, create("three", 3)) else { panic!() };
        let mut led = BTreeMap::new();
        for p in 0..12 {
            let a = meta.assignment(p, 9);
            let mut used: Vec<&str> = a.replicas.iter().map(|&r| rack_of(r)).collect();
            used.sort_unstable();
            assert_eq!(used, ["a", "b", "c"], "partition {p}: {:?}", a.replicas);
            *led.entry(a.leader).or_insert(0) += 1;
        }
        assert_eq!(led, (1..=6).map(|id| (id, 2)).collect::<BTreeMap<_, _>>(), "leaders spread");
        // Five replicas over three racks: no rack holds more than two of them.
        let Ok(ControllerReply::Topic(meta)) = applied(&mut image, create("five", 5)) else { panic!() };
        for p in 0..12 {
            let a = meta.assignment(p, 9);
            for rack in ["a", "b", "c"] {
                assert!(a.replicas.iter().filter(|&&r| rack_of(r) == rack).count() <= 2, "{:?}", a.replicas);
            }
        }
        assert_eq!(
            rack_alternated(vec![(4, "b".into()), (1, "a".into()), (2, "a".into()), (3, "a".into()), (5, "c".into())])
                .iter()
                .map(|(id, _)| *id)
                .collect::<Vec<_>>(),
            [1, 4, 5, 2, 3]
        );
    }

    // A broker that restarts without a controlled shutdown, before its session
    // expired, leaves the ISRs and its leaderships move on (it may have lost its
    // unwritten tail); where it was the only one in sync it leads again in a new epoch.
    #[test]
    fn an_unclean_restart_moves_leaderships_away() {
        let mut image = MetadataImage::default();
        for id in [1, 2, 3] {
            applied(&mut image, started(id, 0)).unwrap();
        }
        let create = |name: &str, replication_factor| ControllerRequest::CreateTopic {
            name: name.into(),
            partitions: 3,
            replication_factor,
            configs: BTreeMap::new(),
        };
        applied(&mut image, create("three", 3)).unwrap();
        applied(&mut image, create("one", 1)).unwrap();
        let before = image.clone();
        applied(&mut image, started(2, 1)).unwrap();
        for p in 0..3 {
            let (was, now) =
                (before.topic("three").unwrap().assignment(p, 9), image.topic("three").unwrap().assignment(p, 9));
            assert!(!now.isr.contains(&2) && now.leader != 2, "{now:?}");
            assert_eq!(now.leader_epoch, was.leader_epoch + i32::from(was.leader == 2));
            let (was, now) =
                (before.topic("one").unwrap().assignment(p, 9), image.topic("one").unwrap().assignment(p, 9));
            if was.leader == 2 {
                assert_eq!((now.leader, now.isr.clone()), (2, vec![2]));
                assert!(now.leader_epoch > was.leader_epoch);
            } else {
                assert_eq!(now, was);
            }
        }
        // After a controlled shutdown (fenced), a restart changes no ISR.
        applied(&mut image, ControllerRequest::FenceBroker { id: 3 }).unwrap();
        let fenced = image.clone();
        applied(&mut image, started(3, 1)).unwrap();
        assert!(!image.brokers[&3].fenced);
        assert_eq!(image.topic("three").unwrap().assignments, fenced.topic("three").unwrap().assignments);
    }
}
