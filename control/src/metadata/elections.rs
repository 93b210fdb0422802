//! Who leads and who is in sync, as the controller decides it (pure functions of the
//! image, called by `decide`): leaderships moving off a broker that left (fenced, or
//! restarted uncleanly), partitions without a leader taken back by a returning broker,
//! eligible leader replicas (KIP-966), leader elections (ElectLeaders), and partition
//! reassignments (KIP-455).

use std::collections::BTreeMap;

use super::decide::{ControllerReply, Election, Local};
use super::{Assignment, MetadataImage, MetadataRecord, TopicMeta};
use crate::errors::code;

/// Starts or cancels reassignments, as Kafka's controller does (KIP-455): the target
/// replicas join as followers (`replicas` is the target followed by the leaving
/// ones), and once the ISR holds every target replica the reassignment completes
/// (`complete_reassignment`); a cancel goes back to the replicas before it. A new
/// target for a partition already moving replaces the old one, from the replicas
/// before it.
pub(super) fn reassign(
    image: &MetadataImage,
    partitions: &[(String, i32, Option<Vec<i32>>)],
    keep_factor: bool,
) -> (Vec<MetadataRecord>, ControllerReply) {
    let live = |id: &i32| image.brokers.get(id).is_some_and(|b| !b.fenced);
    let mut changed: BTreeMap<String, TopicMeta> = BTreeMap::new();
    let mut outcomes = Vec::new();
    for (topic, partition, target) in partitions {
        let meta = changed.get(topic).cloned().or_else(|| image.topic(topic).cloned());
        let Some(mut meta) = meta.filter(|m| *partition >= 0 && (*partition as usize) < m.assignments.len()) else {
            outcomes.push((code::UNKNOWN_TOPIC_OR_PARTITION, Some(format!("Unknown partition {topic}-{partition}"))));
            continue;
        };
        let assignment = &mut meta.assignments[*partition as usize];
        let original = assignment.original();
        let target = match target {
            Some(target) => target.clone(),
            None if !assignment.reassigning() => {
                outcomes.push((
                    code::NO_REASSIGNMENT_IN_PROGRESS,
                    Some(format!("No ongoing reassignment for {topic}-{partition}")),
                ));
                continue;
            }
            None => original.clone(),
        };
        let mut seen = std::collections::BTreeSet::new();
        let refusal = if target.is_empty() {
            Some((
                code::INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list.".to_string(),
            ))
        } else if let Some(dup) = target.iter().find(|r| !seen.insert(**r)) {
            Some((
                code::INVALID_REPLICA_ASSIGNMENT,
                format!("The manual partition assignment includes the broker {dup} more than once."),
            ))
        } else if let Some(unknown) = target.iter().find(|r| !image.brokers.contains_key(r)) {
            Some((
                code::INVALID_REPLICA_ASSIGNMENT,
                format!("The manual partition assignment includes broker {unknown}, but no such broker is registered."),
            ))
        } else if keep_factor && target.len() != original.len() {
            Some((
                code::INVALID_REPLICATION_FACTOR,
                format!(
                    "The replication factor is changed from {} to {} but allowReplicationFactorChange is false",
                    original.len(),
                    target.len()
                ),
            ))
        } else {
            None
        };
        if let Some((error, message)) = refusal {
            outcomes.push((error, Some(message)));
            continue;
        }
        if target == assignment.replicas && !assignment.reassigning() {
            outcomes.push((code::NONE, None));
            continue;
        }
        let mut replicas = target.clone();
        replicas.extend(original.iter().copied().filter(|r| !target.contains(r)));
        assignment.adding = target.iter().copied().filter(|r| !original.contains(r)).collect();
        assignment.removing = original.iter().copied().filter(|r| !target.contains(r)).collect();
        assignment.replicas = replicas;
        // Replicas that left take no place in the ISR or ELR (a cancel drops the joiners).
        let kept = assignment.replicas.clone();
        assignment.isr.retain(|r| kept.contains(r));
        assignment.elr.retain(|r| kept.contains(r));
        if !assignment.replicas.contains(&assignment.leader) || !assignment.isr.contains(&assignment.leader) {
            let next = assignment.replicas.iter().copied().find(|r| assignment.isr.contains(r) && live(r));
            assignment.leader = next.unwrap_or(-1);
            assignment.leader_epoch += 1;
        }
        assignment.partition_epoch += 1;
        complete_reassignment(assignment, &live);
        outcomes.push((code::NONE, None));
        changed.insert(topic.clone(), meta);
    }
    let records = changed.into_values().map(MetadataRecord::Topic).collect();
    (records, ControllerReply::Reassigned(outcomes))
}

/// Completes the reassignment under way once the ISR holds every target replica:
/// the leaving replicas go from the replicas and the ISR, and if the leader leaves,
/// the first live in-sync target replica leads in a new epoch.
pub(super) fn complete_reassignment(assignment: &mut Assignment, live: &impl Fn(&i32) -> bool) {
    let target = assignment.target();
    if !assignment.reassigning() || !target.iter().all(|r| assignment.isr.contains(r)) {
        return;
    }
    assignment.isr.retain(|r| target.contains(r));
    assignment.elr.retain(|r| target.contains(r));
    assignment.replicas = target;
    assignment.adding.clear();
    assignment.removing.clear();
    if !assignment.replicas.contains(&assignment.leader) {
        let next = assignment.replicas.iter().copied().find(|r| assignment.isr.contains(r) && live(r));
        assignment.leader = next.unwrap_or(-1);
        assignment.leader_epoch += 1;
    }
}

/// Partitions changed by broker `gone` leaving (fenced, or `!clean`: restarted
/// without a controlled shutdown, so it may have lost its unwritten tail). Those it
/// led get a new leader in a new leader epoch: the first live replica of the rest of
/// the ISR, else the first live eligible leader replica (KIP-966), else none (the
/// partition is offline; unclean election is off). Those it followed in sync drop it
/// from the ISR, into the ELR where the ISR falls below `min.insync.replicas` and it
/// left cleanly; the last ISR member stays in the ISR. A broker that left uncleanly
/// leaves every ELR too.
pub(super) fn leave_partitions(image: &MetadataImage, gone: i32, clean: bool, local: &Local) -> Vec<MetadataRecord> {
    leave_partitions_where(image, gone, clean, local, |_, _| true)
}

/// `leave_partitions` for the partitions `which` names (topic, partition) only: the
/// replicas of a broker's failed log directory.
pub(super) fn leave_partitions_where(
    image: &MetadataImage,
    gone: i32,
    clean: bool,
    local: &Local,
    which: impl Fn(&str, i32) -> bool,
) -> Vec<MetadataRecord> {
    let live = |id: i32| id != gone && image.brokers.get(&id).is_some_and(|b| !b.fenced);
    let mut records = Vec::new();
    for topic in image.topics.values() {
        let mut meta = topic.clone();
        let min_insync = min_insync(image, topic, local);
        let mut changed = false;
        for (p, assignment) in meta.assignments.iter_mut().enumerate() {
            if !which(&topic.name, p as i32) {
                continue;
            }
            let in_elr = assignment.elr.contains(&gone);
            let concerned = assignment.isr.contains(&gone) || assignment.leader == gone || (in_elr && !clean);
            if !concerned {
                continue;
            }
            let before = assignment.clone();
            if !clean {
                assignment.elr.retain(|&r| r != gone);
            }
            let rest: Vec<i32> = assignment.isr.iter().copied().filter(|&r| r != gone).collect();
            if !rest.is_empty() && rest.len() != assignment.isr.len() {
                assignment.set_isr(rest, min_insync(p), clean);
            }
            if assignment.leader == gone {
                elect_after_loss(assignment, min_insync(p), live);
            }
            if *assignment != before {
                assignment.partition_epoch += 1;
                changed = true;
            }
        }
        if changed {
            records.push(MetadataRecord::Topic(meta));
        }
    }
    records
}

/// A new leader for a partition whose leader is gone, in a new leader epoch: the
/// first live replica in the ISR, else the first live one in the ELR (it then is the
/// ISR, and the ISR it replaces becomes eligible where it is too small), else none.
fn elect_after_loss(assignment: &mut Assignment, min_insync: usize, live: impl Fn(i32) -> bool) {
    let from_isr = assignment.replicas.iter().copied().find(|r| assignment.isr.contains(r) && live(*r));
    let from_elr = assignment.replicas.iter().copied().find(|r| assignment.elr.contains(r) && live(*r));
    assignment.leader = match (from_isr, from_elr) {
        (Some(leader), _) => leader,
        (None, Some(leader)) => {
            assignment.set_isr(vec![leader], min_insync, true);
            leader
        }
        (None, None) => -1,
    };
    assignment.leader_epoch += 1;
}

/// Partitions without a leader that broker `back` can lead again: it is in their ISR,
/// or in their ELR (it then is the ISR).
pub(super) fn elect_offline(image: &MetadataImage, back: i32, local: &Local) -> Vec<MetadataRecord> {
    let mut records = Vec::new();
    for topic in image.topics.values() {
        let mut meta = topic.clone();
        let min_insync = min_insync(image, topic, local);
        let mut changed = false;
        for (p, assignment) in meta.assignments.iter_mut().enumerate() {
            if assignment.leader != -1 {
                continue;
            }
            if assignment.isr.contains(&back) {
                assignment.leader = back;
            } else if assignment.elr.contains(&back) {
                assignment.set_isr(vec![back], min_insync(p), true);
                assignment.leader = back;
            } else {
                continue;
            }
            assignment.leader_epoch += 1;
            assignment.partition_epoch += 1;
            changed = true;
        }
        if changed {
            records.push(MetadataRecord::Topic(meta));
        }
    }
    records
}

/// A topic's effective `min.insync.replicas` for each partition: its config, else the
/// broker default, capped at the partition's replicas (as Kafka's `effectiveMinIsr`).
pub(super) fn min_insync<'a>(
    image: &MetadataImage,
    meta: &'a TopicMeta,
    local: &Local,
) -> impl Fn(usize) -> usize + 'a {
    // The topic's own value, else the cluster's dynamic default, else the static one.
    let parse = |v: &String| v.trim().parse::<usize>().ok();
    let cluster = image.broker_configs.get("").and_then(|c| c.get("min.insync.replicas")).and_then(parse);
    let configured =
        meta.configs.get("min.insync.replicas").and_then(parse).or(cluster).unwrap_or(local.min_insync).max(1);
    move |p: usize| configured.min(meta.assignments.get(p).map_or(1, |a| a.replicas.len()).max(1))
}

/// Elects leaders: the preferred replica (the first) where it is live and in sync
/// and does not lead yet, or (`unclean`) the first live replica of a partition without
/// a leader, which then is the whole ISR. Without `partitions`, every partition whose
/// election would change something.
pub(super) fn elect_leaders(
    image: &MetadataImage,
    unclean: bool,
    partitions: Option<&[(String, i32)]>,
) -> (Vec<MetadataRecord>, ControllerReply) {
    let live = |id: i32| image.brokers.get(&id).is_some_and(|b| !b.fenced);
    let wanted: Vec<(String, i32)> = match partitions {
        Some(list) => list.to_vec(),
        None => image
            .topics
            .values()
            .flat_map(|t| {
                t.assignments.iter().enumerate().filter_map(|(p, a)| {
                    let due = if unclean { a.leader < 0 } else { a.replicas.first() != Some(&a.leader) };
                    due.then(|| (t.name.clone(), p as i32))
                })
            })
            .collect(),
    };
    let mut changed: BTreeMap<String, TopicMeta> = BTreeMap::new();
    let mut elections = Vec::new();
    for (topic, partition) in wanted {
        let outcome =
            |error: i16, message: Option<String>| Election { topic: topic.clone(), partition, error, message };
        let meta = changed.get(&topic).cloned().or_else(|| image.topic(&topic).cloned());
        let Some(mut meta) = meta.filter(|m| partition >= 0 && (partition as usize) < m.assignments.len()) else {
            elections
                .push(outcome(code::UNKNOWN_TOPIC_OR_PARTITION, Some(format!("no partition {topic}-{partition}"))));
            continue;
        };
        let assignment = &mut meta.assignments[partition as usize];
        let chosen = if unclean {
            if assignment.leader >= 0 {
                elections.push(outcome(code::ELECTION_NOT_NEEDED, None));
                continue;
            }
            assignment.replicas.iter().copied().find(|&r| live(r))
        } else {
            let preferred = assignment.replicas[0];
            if assignment.leader == preferred {
                elections.push(outcome(code::ELECTION_NOT_NEEDED, None));
                continue;
            }
            Some(preferred).filter(|&p| live(p) && assignment.isr.contains(&p))
        };
        let Some(leader) = chosen else {
            let error =
                if unclean { code::ELIGIBLE_LEADERS_NOT_AVAILABLE } else { code::PREFERRED_LEADER_NOT_AVAILABLE };
            elections.push(outcome(error, Some(format!("no eligible leader for {topic}-{partition}"))));
            continue;
        };
        assignment.leader = leader;
        if unclean {
            assignment.isr = vec![leader];
            assignment.elr.clear();
        }
        assignment.leader_epoch += 1;
        assignment.partition_epoch += 1;
        elections.push(outcome(code::NONE, None));
        changed.insert(topic.clone(), meta);
    }
    let records = changed.into_values().map(MetadataRecord::Topic).collect();
    (records, ControllerReply::Elections(elections))
}
