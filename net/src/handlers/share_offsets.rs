//! DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets
//! (KIP-932): a share group's start offset on each partition it has state for, as the
//! share coordinator keeps it; set (the group must be empty: the state of each
//! partition is replaced in a new state epoch, which fences the leaders' cached
//! state) or deleted (a later subscription starts where `share.auto.offset.reset`
//! says).

use std::collections::BTreeSet;
use std::rc::Rc;

use kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic;
use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse, DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, TopicName,
};
use kafka_protocol::protocol::{StrBytes, VersionRange};
use skein_control::errors::code;
use skein_coordinator::group::calls;
use skein_coordinator::serve::share::{Key, StateCall};

use crate::authorize::{Caller, Op, GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED};
use crate::shard::Shard;

/// v1 adds each partition's lag (KIP-1226).
pub const DESCRIBE_VERSIONS: VersionRange = VersionRange { min: 0, max: 1 };
pub const ALTER_VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };
pub const DELETE_VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };

fn s(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

pub async fn describe(
    shard: &Rc<Shard>,
    request: DescribeShareGroupOffsetsRequest,
    caller: &Caller,
) -> DescribeShareGroupOffsetsResponse {
    let mut response = DescribeShareGroupOffsetsResponse::default();
    let image = shard.image();
    for wanted in request.groups {
        let group = wanted.group_id.0.to_string();
        let mut out = DescribeShareGroupOffsetsResponseGroup::default().with_group_id(wanted.group_id.clone());
        if !caller.group(Op::Describe, &group) {
            response.groups.push(out.with_error_code(GROUP_AUTHORIZATION_FAILED));
            continue;
        }
        let known = match crate::topics::group_call(shard, &group, calls::ShareTopics { group: group.clone() }).await {
            Ok(known) => known.unwrap_or_default(),
            Err(c) => {
                response.groups.push(out.with_error_code(c));
                continue;
            }
        };
        // (name, id, partitions): all the group has state for, or what was asked.
        let topics: Vec<(String, Option<uuid::Uuid>, Vec<i32>)> = match wanted.topics {
            None => known.into_iter().map(|(id, name, ps)| (name, Some(id), ps.into_iter().collect())).collect(),
            Some(topics) => topics
                .into_iter()
                .map(|t| {
                    let name = t.topic_name.0.to_string();
                    let id = image.topic(&name).map(|m| m.id);
                    (name, id, t.partitions)
                })
                .collect(),
        };
        for (name, id, partitions) in topics {
            let mut topic = DescribeShareGroupOffsetsResponseTopic::default()
                .with_topic_name(TopicName(s(name.clone())))
                .with_topic_id(id.unwrap_or_default());
            let allowed = caller.topic(Op::Describe, &name);
            for partition in partitions {
                let mut p = DescribeShareGroupOffsetsResponsePartition::default()
                    .with_partition_index(partition)
                    .with_start_offset(-1)
                    .with_leader_epoch(-1);
                match id {
                    _ if !allowed => p.error_code = TOPIC_AUTHORIZATION_FAILED,
                    None => {}
                    Some(topic_id) => {
                        let key = Key { group: group.clone(), topic_id, partition };
                        match shard.share_state(StateCall::Summary { key: key.clone() }).await {
                            Ok(stored) => {
                                p.start_offset = stored.start;
                                p.leader_epoch = if stored.start < 0 { -1 } else { stored.leader_epoch };
                                p.lag = lag(shard, &name, &key, &stored).await;
                            }
                            Err((error, text)) => {
                                p.error_code = error;
                                p.error_message = (!text.is_empty()).then(|| s(text));
                            }
                        }
                    }
                }
                topic.partitions.push(p);
            }
            out.topics.push(topic);
        }
        response.groups.push(out);
    }
    response
}

/// A share-partition's lag as Kafka 4.4 reports it: the high watermark less the start
/// offset less the records finished past the start; -1 when unknown (no state yet, or
/// the partition's leader or the state's coordinator unreachable).
async fn lag(shard: &Rc<Shard>, topic: &str, key: &Key, stored: &skein_coordinator::serve::share::Stored) -> i64 {
    if stored.start < 0 {
        return -1;
    }
    match high_watermark(shard, topic, key.partition).await {
        Some(high_watermark) => (high_watermark - stored.start - stored.delivery_complete()).max(0),
        None => -1,
    }
}

/// A partition's high watermark from its leader: this node's owner shard, else a
/// ListOffsets (latest) to the leading broker.
async fn high_watermark(shard: &Rc<Shard>, topic: &str, partition: i32) -> Option<i64> {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::{BrokerId, ListOffsetsRequest, TopicName};
    let node = shard.settings.node_id;
    let leader = shard.image().topic(topic).map(|t| t.assignment(partition, node).leader)?;
    if leader == node {
        let tp = skein_engine::TopicPartition::new(topic, partition);
        return shard.call(tp, crate::shard::ops::Stats).await.ok().map(|stats| stats.high_watermark);
    }
    let (host, port) = shard.broker_address(leader)?;
    let wanted = ListOffsetsPartition::default().with_partition_index(partition).with_timestamp(-1);
    let request =
        ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![wanted])]);
    let client = format!("skein-{node}");
    let timeout = std::time::Duration::from_secs(10);
    let response =
        skein_control::peer::pooled_call(&shard.settings.security, &host, port, &client, &request, 7, timeout).await;
    let answered = response.ok()?.topics.into_iter().flat_map(|t| t.partitions).next()?;
    (answered.error_code == code::NONE).then_some(answered.offset)
}

pub async fn alter(
    shard: &Rc<Shard>,
    request: AlterShareGroupOffsetsRequest,
    caller: &Caller,
) -> AlterShareGroupOffsetsResponse {
    let group = request.group_id.0.to_string();
    let refuse =
        |c: i16, m: String| AlterShareGroupOffsetsResponse::default().with_error_code(c).with_error_message(Some(s(m)));
    if group.is_empty() {
        return refuse(code::INVALID_GROUP_ID, "The group id is empty.".into());
    }
    if !caller.group(Op::Read, &group) {
        return refuse(GROUP_AUTHORIZATION_FAILED, "Group authorization failed.".into());
    }
    let image = shard.image();
    let mut response = AlterShareGroupOffsetsResponse::default();
    // Each topic's partitions to set, with their errors known before anything is done.
    let mut plan = Vec::new();
    let mut initialized = Vec::new();
    for topic in request.topics {
        let name = topic.topic_name.0.to_string();
        let meta = image.topic(&name);
        let allowed = caller.topic(Op::Read, &name);
        let mut settable = BTreeSet::new();
        let partitions: Vec<(i32, i64, i16)> = topic
            .partitions
            .iter()
            .map(|p| {
                let error = match meta {
                    _ if !allowed => TOPIC_AUTHORIZATION_FAILED,
                    Some(m) if (0..m.partitions).contains(&p.partition_index) && p.start_offset >= 0 => code::NONE,
                    Some(m) if (0..m.partitions).contains(&p.partition_index) => code::INVALID_REQUEST,
                    _ => code::UNKNOWN_TOPIC_OR_PARTITION,
                };
                if error == code::NONE {
                    settable.insert(p.partition_index);
                }
                (p.partition_index, p.start_offset, error)
            })
            .collect();
        if let (Some(m), false) = (meta, settable.is_empty()) {
            initialized.push((m.id, name.clone(), settable));
        }
        plan.push((name, meta.map(|m| m.id), partitions));
    }
    // Topics the caller may not read (or that do not exist) are answered without
    // asking the coordinator.
    let asked = match initialized.is_empty() {
        false => {
            let call = calls::ShareInitialize { group: group.clone(), topics: initialized };
            crate::topics::group_call(shard, &group, call).await
        }
        true => Ok(code::NONE),
    };
    match asked {
        Ok(code::NONE) => {}
        Ok(code::NON_EMPTY_GROUP) | Err(code::NON_EMPTY_GROUP) => {
            let message = format!("The group {group} is not empty; its members must leave first.");
            return refuse(code::NON_EMPTY_GROUP, message);
        }
        Ok(c) | Err(c) => return refuse(c, String::new()),
    }
    for (name, id, partitions) in plan {
        let mut topic = AlterShareGroupOffsetsResponseTopic::default()
            .with_topic_name(TopicName(s(name)))
            .with_topic_id(id.unwrap_or_default());
        for (partition, start, mut error) in partitions {
            let mut message = None;
            if let (code::NONE, Some(topic_id)) = (error, id) {
                let key = Key { group: group.clone(), topic_id, partition };
                // A new state epoch: the leaders' cached state is fenced at its next write.
                let state_epoch = match shard.share_state(StateCall::Summary { key: key.clone() }).await {
                    Ok(stored) => stored.state_epoch + 1,
                    Err(_) => 1,
                };
                if let Err((c, text)) = shard.share_state(StateCall::Initialize { key, state_epoch, start }).await {
                    error = c;
                    message = (!text.is_empty()).then(|| s(text));
                }
            }
            topic.partitions.push(
                AlterShareGroupOffsetsResponsePartition::default()
                    .with_partition_index(partition)
                    .with_error_code(error)
                    .with_error_message(message),
            );
        }
        response.responses.push(topic);
    }
    response
}

pub async fn delete(
    shard: &Rc<Shard>,
    request: DeleteShareGroupOffsetsRequest,
    caller: &Caller,
) -> DeleteShareGroupOffsetsResponse {
    let group = request.group_id.0.to_string();
    let refuse = |c: i16, m: String| {
        DeleteShareGroupOffsetsResponse::default().with_error_code(c).with_error_message(Some(s(m)))
    };
    if !caller.group(Op::Delete, &group) {
        return refuse(GROUP_AUTHORIZATION_FAILED, "Group authorization failed.".into());
    }
    let image = shard.image();
    // Each topic: its name, its id and partition count if it exists, whether the caller
    // may read it.
    type Named = (String, Option<(uuid::Uuid, i32)>, bool);
    let named: Vec<Named> = request
        .topics
        .iter()
        .map(|t| {
            let name = t.topic_name.0.to_string();
            let meta = image.topic(&name).map(|m| (m.id, m.partitions));
            let allowed = caller.topic(Op::Read, &name);
            (name, meta, allowed)
        })
        .collect();
    let ids: Vec<uuid::Uuid> = named.iter().filter(|(_, _, ok)| *ok).filter_map(|(_, m, _)| m.map(|m| m.0)).collect();
    let forget = calls::ShareForget { group: group.clone(), topics: ids };
    // Topics the caller may not read are answered without asking the coordinator.
    let asked = match named.iter().any(|(_, _, ok)| *ok) {
        true => crate::topics::group_call(shard, &group, forget).await,
        false => Ok(Ok(Vec::new())),
    };
    let unknown = match asked {
        Ok(Ok(unknown)) => unknown,
        Ok(Err(c)) | Err(c) => {
            let message = match c {
                code::GROUP_ID_NOT_FOUND => format!("Group {group} not found."),
                code::NON_EMPTY_GROUP => format!("The group {group} is not empty; its members must leave first."),
                _ => String::new(),
            };
            return refuse(c, message);
        }
    };
    let mut response = DeleteShareGroupOffsetsResponse::default();
    for (name, meta, allowed) in named {
        let mut topic = DeleteShareGroupOffsetsResponseTopic::default()
            .with_topic_name(TopicName(s(name)))
            .with_topic_id(meta.map(|m| m.0).unwrap_or_default());
        match meta {
            _ if !allowed => topic.error_code = TOPIC_AUTHORIZATION_FAILED,
            Some((id, _)) if unknown.contains(&id) => {
                topic.error_code = code::UNKNOWN_TOPIC_OR_PARTITION;
                topic.error_message = Some(s("There is no offset information to delete."));
            }
            None => {
                topic.error_code = code::UNKNOWN_TOPIC_OR_PARTITION;
                topic.error_message = Some(s("There is no offset information to delete."));
            }
            Some((topic_id, partitions)) => {
                for partition in 0..partitions {
                    let key = Key { group: group.clone(), topic_id, partition };
                    if let Err((c, text)) = shard.share_state(StateCall::Delete { key }).await {
                        topic.error_code = c;
                        topic.error_message = (!text.is_empty()).then(|| s(text));
                    }
                }
            }
        }
        response.responses.push(topic);
    }
    response
}
