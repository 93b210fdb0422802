//! The records of `__consumer_offsets`, in Kafka's format (`OffsetCommitKey` v1 and
//! `OffsetCommitValue` v3, `GroupMetadataKey` v2 and `GroupMetadataValue` v3 with its
//! members), so that Kafka's tools can read Skein's offsets topic and a restarted
//! coordinator knows each group's members. A null value is a tombstone: compaction then
//! removes the key.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// What a record of the offsets topic says. `None` values are tombstones.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Offset {
        group: String,
        topic: String,
        partition: i32,
        value: Option<OffsetValue>,
    },
    Group {
        group: String,
        value: Option<GroupValue>,
    },
    /// KIP-848 `ConsumerGroupMetadata` (record type 3): the group epoch.
    ConsumerGroup {
        group: String,
        epoch: Option<i32>,
    },
    /// `ConsumerGroupMemberMetadata` (type 5): a member's subscription.
    ConsumerMember {
        group: String,
        member: String,
        value: Option<ConsumerMemberValue>,
    },
    /// `ConsumerGroupTargetAssignmentMetadata` (type 6): the assignment epoch.
    TargetAssignment {
        group: String,
        epoch: Option<i32>,
    },
    /// `ConsumerGroupTargetAssignmentMember` (type 7): a member's target partitions.
    TargetMember {
        group: String,
        member: String,
        partitions: Option<Vec<TopicPartitions>>,
    },
    /// `ConsumerGroupCurrentMemberAssignment` (type 8): a member's epochs and partitions.
    CurrentAssignment {
        group: String,
        member: String,
        value: Option<CurrentAssignmentValue>,
    },
    /// `ShareGroupMetadata` (type 11): a share group's epoch.
    ShareGroup {
        group: String,
        epoch: Option<i32>,
    },
    /// `ShareGroupStatePartitionMetadata` (type 15): the topics whose share-partitions
    /// the group has state for (its InitializedTopics).
    ShareStatePartitions {
        group: String,
        topics: Option<Vec<InitializedTopic>>,
    },
    /// `ShareGroupMemberMetadata` (type 10): a share group member's subscription.
    ShareMember {
        group: String,
        member: String,
        value: Option<ShareMemberValue>,
    },
    /// `ShareGroupTargetAssignmentMetadata` (type 12): the assignment epoch.
    ShareTargetAssignment {
        group: String,
        epoch: Option<i32>,
    },
    /// `ShareGroupTargetAssignmentMember` (type 13): a member's target partitions.
    ShareTargetMember {
        group: String,
        member: String,
        partitions: Option<Vec<TopicPartitions>>,
    },
    /// `ShareGroupCurrentMemberAssignment` (type 14): a member's epochs and the
    /// partitions it was told it has.
    ShareCurrentAssignment {
        group: String,
        member: String,
        value: Option<ShareAssignmentValue>,
    },
    /// KIP-1071 `StreamsGroupMetadata` (type 17): a streams group's epoch.
    StreamsGroup {
        group: String,
        epoch: Option<i32>,
    },
    /// `StreamsGroupMemberMetadata` (type 19): a streams member's metadata.
    StreamsMember {
        group: String,
        member: String,
        value: Option<Box<crate::group::streams::records::MemberValue>>,
    },
    /// `StreamsGroupCurrentMemberAssignment` (type 22): a streams member's epochs and
    /// tasks.
    StreamsAssignment {
        group: String,
        member: String,
        value: Option<Box<crate::group::streams::records::AssignmentValue>>,
    },
    /// `StreamsGroupTopology` (type 23): the topology its members run.
    StreamsTopology {
        group: String,
        topology: Option<Box<kafka_protocol::messages::streams_group_heartbeat_request::Topology>>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct ShareMemberValue {
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ShareAssignmentValue {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub assigned: Vec<TopicPartitions>,
}

/// A topic of `ShareGroupStatePartitionMetadata`: its id, name and partitions.
pub type InitializedTopic = (uuid::Uuid, String, std::collections::BTreeSet<i32>);

impl Entry {
    /// The group the record belongs to.
    pub fn group(&self) -> &str {
        match self {
            Entry::Offset { group, .. }
            | Entry::Group { group, .. }
            | Entry::ConsumerGroup { group, .. }
            | Entry::ConsumerMember { group, .. }
            | Entry::TargetAssignment { group, .. }
            | Entry::TargetMember { group, .. }
            | Entry::CurrentAssignment { group, .. }
            | Entry::ShareGroup { group, .. }
            | Entry::ShareStatePartitions { group, .. }
            | Entry::ShareMember { group, .. }
            | Entry::ShareTargetAssignment { group, .. }
            | Entry::ShareTargetMember { group, .. }
            | Entry::ShareCurrentAssignment { group, .. }
            | Entry::StreamsGroup { group, .. }
            | Entry::StreamsMember { group, .. }
            | Entry::StreamsAssignment { group, .. }
            | Entry::StreamsTopology { group, .. } => group,
        }
    }
}

/// Partitions of one topic, by topic id, as KIP-848's records name them.
pub type TopicPartitions = (uuid::Uuid, Vec<i32>);

/// `partitions` (topic name, partition) as the records name them: by topic id, topics
/// no longer in `image` left out.
pub fn by_topic_id(
    image: &skein_control::metadata::MetadataImage,
    partitions: &std::collections::BTreeSet<(String, i32)>,
) -> Vec<TopicPartitions> {
    let mut topics: std::collections::BTreeMap<uuid::Uuid, Vec<i32>> = Default::default();
    for (topic, p) in partitions {
        if let Some(meta) = image.topic(topic) {
            topics.entry(meta.id).or_default().push(*p);
        }
    }
    topics.into_iter().collect()
}

/// The records' partitions by topic name, ids no longer in `image` left out.
pub fn by_topic_name(
    image: &skein_control::metadata::MetadataImage,
    topics: Vec<TopicPartitions>,
) -> std::collections::BTreeSet<(String, i32)> {
    topics
        .into_iter()
        .filter_map(|(id, ps)| image.topic_by_id(id).map(|m| (m.name.clone(), ps)))
        .flat_map(|(name, ps)| ps.into_iter().map(move |p| (name.clone(), p)))
        .collect()
}

#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerMemberValue {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CurrentAssignmentValue {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    /// Kafka's MemberState: 0 stable, 1 unrevoked partitions, 2 unreleased partitions.
    pub state: i8,
    pub assigned: Vec<TopicPartitions>,
    pub pending_revocation: Vec<TopicPartitions>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OffsetValue {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GroupValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub state_timestamp: i64,
    pub members: Vec<MemberValue>,
}

/// A classic group member as `GroupMetadataValue` keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberValue {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// The member's metadata for the group's protocol.
    pub subscription: Bytes,
    pub assignment: Bytes,
}

fn put_bytes(out: &mut BytesMut, b: &Bytes) {
    out.put_i32(b.len() as i32);
    out.put_slice(b);
}

fn get_bytes(buf: &mut Bytes) -> Option<Bytes> {
    if buf.remaining() < 4 {
        return None;
    }
    let len = buf.get_i32();
    if len < 0 {
        return Some(Bytes::new());
    }
    let len = len as usize;
    (buf.remaining() >= len).then(|| buf.split_to(len))
}

fn get_i32(buf: &mut Bytes) -> Option<i32> {
    (buf.remaining() >= 4).then(|| buf.get_i32())
}

/// Decodes the members of a `GroupMetadataValue` of `version` 0 to 3.
fn decode_members(v: &mut Bytes, version: i16) -> Option<Vec<MemberValue>> {
    let count = get_i32(v)?;
    // A member takes at least 18 bytes: this bounds the reservation by the input.
    let mut members = Vec::with_capacity((count.max(0) as usize).min(v.remaining() / 18));
    for _ in 0..count.max(0) {
        let member_id = get_string(v)?;
        let instance_id = if version >= 3 { get_nullable(v)? } else { None };
        let client_id = get_string(v)?;
        let client_host = get_string(v)?;
        let rebalance_timeout_ms = if version >= 1 { get_i32(v)? } else { -1 };
        let session_timeout_ms = get_i32(v)?;
        let subscription = get_bytes(v)?;
        let assignment = get_bytes(v)?;
        let rebalance_timeout_ms = if rebalance_timeout_ms < 0 { session_timeout_ms } else { rebalance_timeout_ms };
        members.push(MemberValue {
            member_id,
            instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            subscription,
            assignment,
        });
    }
    Some(members)
}

pub(crate) fn put_string(out: &mut BytesMut, s: &str) {
    out.put_i16(s.len() as i16);
    out.put_slice(s.as_bytes());
}

fn put_nullable(out: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(out, s),
        None => out.put_i16(-1),
    }
}

pub(crate) fn get_string(buf: &mut Bytes) -> Option<String> {
    if buf.remaining() < 2 {
        return None;
    }
    let len = buf.get_i16();
    if len < 0 {
        return None;
    }
    let len = len as usize;
    if buf.remaining() < len {
        return None;
    }
    String::from_utf8(buf.split_to(len).to_vec()).ok()
}

fn get_nullable(buf: &mut Bytes) -> Option<Option<String>> {
    if buf.remaining() < 2 {
        return None;
    }
    if i16::from_be_bytes([buf[0], buf[1]]) < 0 {
        buf.advance(2);
        return Some(None);
    }
    get_string(buf).map(Some)
}

/// The key of a KIP-848 record: its type, the group, and the member where it has one.
fn consumer_key(kind: i16, group: &str, member: Option<&str>) -> Bytes {
    let mut key = BytesMut::new();
    key.put_i16(kind);
    put_string(&mut key, group);
    if let Some(member) = member {
        put_string(&mut key, member);
    }
    key.freeze()
}

/// A compact array of strings (subscribed topic names).
fn put_names(out: &mut BytesMut, names: &[String]) {
    flexible::put_len(out, names.len());
    for name in names {
        flexible::put_string(out, name);
    }
}

fn get_names(v: &mut Bytes) -> Option<Vec<String>> {
    let n = flexible::get_len(v)?;
    let mut names = Vec::with_capacity(n.min(v.remaining()));
    for _ in 0..n {
        names.push(flexible::get_string(v)?);
    }
    Some(names)
}

/// A KIP-848 record value: version 0, the fields, an empty tagged-field section.
fn flexible_value(fields: impl FnOnce(&mut BytesMut)) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(0);
    fields(&mut out);
    flexible::put_no_tags(&mut out);
    out.freeze()
}

/// Encodes an entry as (key, value) record bytes.
pub fn encode(entry: &Entry) -> (Bytes, Option<Bytes>) {
    let mut key = BytesMut::new();
    match entry {
        Entry::Offset { group, topic, partition, value } => {
            key.put_i16(1);
            put_string(&mut key, group);
            put_string(&mut key, topic);
            key.put_i32(*partition);
            let value = value.as_ref().map(|v| {
                let mut out = BytesMut::new();
                out.put_i16(3);
                out.put_i64(v.offset);
                out.put_i32(v.leader_epoch);
                put_string(&mut out, &v.metadata);
                out.put_i64(v.commit_timestamp);
                out.freeze()
            });
            (key.freeze(), value)
        }
        Entry::ConsumerGroup { group, epoch } => {
            (consumer_key(3, group, None), epoch.map(|epoch| flexible_value(|out| out.put_i32(epoch))))
        }
        Entry::TargetAssignment { group, epoch } => {
            (consumer_key(6, group, None), epoch.map(|epoch| flexible_value(|out| out.put_i32(epoch))))
        }
        Entry::ConsumerMember { group, member, value } => {
            let value = value.as_ref().map(|v| {
                flexible_value(|out| {
                    flexible::put_nullable_string(out, v.instance_id.as_deref());
                    flexible::put_nullable_string(out, v.rack_id.as_deref());
                    flexible::put_string(out, &v.client_id);
                    flexible::put_string(out, &v.client_host);
                    put_names(out, &v.subscribed_topic_names);
                    flexible::put_nullable_string(out, v.subscribed_topic_regex.as_deref());
                    out.put_i32(v.rebalance_timeout_ms);
                    flexible::put_nullable_string(out, v.server_assignor.as_deref());
                })
            });
            (consumer_key(5, group, Some(member)), value)
        }
        Entry::TargetMember { group, member, partitions } => {
            let value = partitions.as_ref().map(|p| flexible_value(|out| flexible::put_topic_partitions(out, p)));
            (consumer_key(7, group, Some(member)), value)
        }
        Entry::CurrentAssignment { group, member, value } => {
            let value = value.as_ref().map(|v| {
                flexible_value(|out| {
                    out.put_i32(v.member_epoch);
                    out.put_i32(v.previous_member_epoch);
                    out.put_i8(v.state);
                    flexible::put_topic_partitions(out, &v.assigned);
                    flexible::put_topic_partitions(out, &v.pending_revocation);
                })
            });
            (consumer_key(8, group, Some(member)), value)
        }
        Entry::StreamsGroup { group, epoch } => crate::group::streams::records::encode_metadata(group, *epoch),
        Entry::StreamsMember { group, member, value } => {
            crate::group::streams::records::encode_member(group, member, value.as_deref())
        }
        Entry::StreamsAssignment { group, member, value } => {
            crate::group::streams::records::encode_assignment(group, member, value.as_deref())
        }
        Entry::StreamsTopology { group, topology } => {
            crate::group::streams::records::encode_topology(group, topology.as_deref())
        }
        Entry::ShareGroup { group, epoch } => {
            // Epoch and MetadataHash (Skein keeps no hash: 0).
            let value = epoch.map(|epoch| {
                flexible_value(|out| {
                    out.put_i32(epoch);
                    out.put_i64(0);
                })
            });
            (consumer_key(11, group, None), value)
        }
        Entry::ShareStatePartitions { group, topics } => {
            // InitializingTopics and DeletingTopics are empty: Skein initializes a
            // topic as it assigns it (its start offset is resolved by the leader).
            let value = topics.as_ref().map(|topics| {
                flexible_value(|out| {
                    flexible::put_len(out, 0);
                    flexible::put_len(out, topics.len());
                    for (id, name, partitions) in topics {
                        out.put_slice(id.as_bytes());
                        flexible::put_string(out, name);
                        flexible::put_len(out, partitions.len());
                        for p in partitions {
                            out.put_i32(*p);
                        }
                        flexible::put_no_tags(out);
                    }
                    flexible::put_len(out, 0);
                })
            });
            (consumer_key(15, group, None), value)
        }
        Entry::ShareMember { group, member, value } => {
            let value = value.as_ref().map(|v| {
                flexible_value(|out| {
                    flexible::put_nullable_string(out, v.rack_id.as_deref());
                    flexible::put_string(out, &v.client_id);
                    flexible::put_string(out, &v.client_host);
                    put_names(out, &v.subscribed_topic_names);
                })
            });
            (consumer_key(10, group, Some(member)), value)
        }
        Entry::ShareTargetAssignment { group, epoch } => {
            let value = epoch.map(|epoch| flexible_value(|out| out.put_i32(epoch)));
            (consumer_key(12, group, None), value)
        }
        Entry::ShareTargetMember { group, member, partitions } => {
            let value = partitions.as_ref().map(|p| flexible_value(|out| flexible::put_topic_partitions(out, p)));
            (consumer_key(13, group, Some(member)), value)
        }
        Entry::ShareCurrentAssignment { group, member, value } => {
            // State 0 (stable): a share group member has nothing to revoke.
            let value = value.as_ref().map(|v| {
                flexible_value(|out| {
                    out.put_i32(v.member_epoch);
                    out.put_i32(v.previous_member_epoch);
                    out.put_i8(0);
                    flexible::put_topic_partitions(out, &v.assigned);
                })
            });
            (consumer_key(14, group, Some(member)), value)
        }
        Entry::Group { group, value } => {
            key.put_i16(2);
            put_string(&mut key, group);
            let value = value.as_ref().map(|v| {
                let mut out = BytesMut::new();
                out.put_i16(3);
                put_string(&mut out, &v.protocol_type);
                out.put_i32(v.generation);
                put_nullable(&mut out, v.protocol.as_deref());
                put_nullable(&mut out, v.leader.as_deref());
                out.put_i64(v.state_timestamp);
                out.put_i32(v.members.len() as i32);
                for m in &v.members {
                    put_string(&mut out, &m.member_id);
                    put_nullable(&mut out, m.instance_id.as_deref());
                    put_string(&mut out, &m.client_id);
                    put_string(&mut out, &m.client_host);
                    out.put_i32(m.rebalance_timeout_ms);
                    out.put_i32(m.session_timeout_ms);
                    put_bytes(&mut out, &m.subscription);
                    put_bytes(&mut out, &m.assignment);
                }
                out.freeze()
            });
            (key.freeze(), value)
        }
    }
}

/// Decodes a record of the offsets topic; `None` for versions or shapes it does not
/// know (they are skipped on load, as Kafka skips unknown record types).
pub fn decode(key: &Bytes, value: Option<&Bytes>) -> Option<Entry> {
    let mut k = key.clone();
    if k.remaining() < 2 {
        return None;
    }
    match k.get_i16() {
        0 | 1 => {
            let group = get_string(&mut k)?;
            let topic = get_string(&mut k)?;
            if k.remaining() < 4 {
                return None;
            }
            let partition = k.get_i32();
            let value = match value {
                None => None,
                Some(v) => Some(decode_offset(&mut v.clone())?),
            };
            Some(Entry::Offset { group, topic, partition, value })
        }
        2 => {
            let group = get_string(&mut k)?;
            let value = match value {
                None => None,
                Some(v) => {
                    let mut v = v.clone();
                    if v.remaining() < 2 {
                        return None;
                    }
                    let version = v.get_i16();
                    // v4 and later are flexible (tagged fields): not written by Skein,
                    // skipped on load as an unknown shape.
                    if !(0..=3).contains(&version) {
                        return None;
                    }
                    let protocol_type = get_string(&mut v)?;
                    let generation = get_i32(&mut v)?;
                    let protocol = get_nullable(&mut v)?;
                    let leader = get_nullable(&mut v)?;
                    let state_timestamp = if version >= 2 {
                        if v.remaining() < 8 {
                            return None;
                        }
                        v.get_i64()
                    } else {
                        -1
                    };
                    let members = decode_members(&mut v, version)?;
                    Some(GroupValue { protocol_type, generation, protocol, leader, state_timestamp, members })
                }
            };
            Some(Entry::Group { group, value })
        }
        kind @ (3 | 5 | 6 | 7 | 8) => {
            let group = get_string(&mut k)?;
            let member = if matches!(kind, 5 | 7 | 8) { Some(get_string(&mut k)?) } else { None };
            let mut v = match value {
                None => None,
                Some(v) => {
                    let mut v = v.clone();
                    // Version 0 is the only one Kafka defines for these values.
                    if v.remaining() < 2 || v.get_i16() != 0 {
                        return None;
                    }
                    Some(v)
                }
            };
            Some(match (kind, member) {
                (3, None) => Entry::ConsumerGroup { group, epoch: optional(v.as_mut(), get_i32)? },
                (6, None) => Entry::TargetAssignment { group, epoch: optional(v.as_mut(), get_i32)? },
                (5, Some(member)) => {
                    let value = match v.as_mut() {
                        None => None,
                        Some(v) => Some(ConsumerMemberValue {
                            instance_id: flexible::get_nullable_string(v)?,
                            rack_id: flexible::get_nullable_string(v)?,
                            client_id: flexible::get_string(v)?,
                            client_host: flexible::get_string(v)?,
                            subscribed_topic_names: get_names(v)?,
                            subscribed_topic_regex: flexible::get_nullable_string(v)?,
                            rebalance_timeout_ms: get_i32(v)?,
                            server_assignor: flexible::get_nullable_string(v)?,
                        }),
                    };
                    Entry::ConsumerMember { group, member, value }
                }
                (7, Some(member)) => {
                    let partitions = optional(v.as_mut(), flexible::get_topic_partitions)?;
                    Entry::TargetMember { group, member, partitions }
                }
                (8, Some(member)) => {
                    let value = match v.as_mut() {
                        None => None,
                        Some(v) => {
                            let member_epoch = get_i32(v)?;
                            let previous_member_epoch = get_i32(v)?;
                            if v.remaining() < 1 {
                                return None;
                            }
                            let state = v.get_i8();
                            Some(CurrentAssignmentValue {
                                member_epoch,
                                previous_member_epoch,
                                state,
                                assigned: flexible::get_topic_partitions(v)?,
                                pending_revocation: flexible::get_topic_partitions(v)?,
                            })
                        }
                    };
                    Entry::CurrentAssignment { group, member, value }
                }
                _ => return None,
            })
        }
        kind @ (crate::group::streams::records::METADATA
        | crate::group::streams::records::MEMBER
        | crate::group::streams::records::ASSIGNMENT
        | crate::group::streams::records::TOPOLOGY) => crate::group::streams::records::decode(kind, &mut k, value),
        kind @ (10..=15) => {
            let group = get_string(&mut k)?;
            let member = if matches!(kind, 10 | 13 | 14) { Some(get_string(&mut k)?) } else { None };
            let mut v = match value {
                None => None,
                Some(v) => {
                    let mut v = v.clone();
                    if v.remaining() < 2 || v.get_i16() != 0 {
                        return None;
                    }
                    Some(v)
                }
            };
            Some(match (kind, member) {
                (11, None) => Entry::ShareGroup { group, epoch: optional(v.as_mut(), get_i32)? },
                (12, None) => Entry::ShareTargetAssignment { group, epoch: optional(v.as_mut(), get_i32)? },
                (15, None) => Entry::ShareStatePartitions { group, topics: optional(v.as_mut(), decode_initialized)? },
                (10, Some(member)) => {
                    let value = optional(v.as_mut(), |v| {
                        Some(ShareMemberValue {
                            rack_id: flexible::get_nullable_string(v)?,
                            client_id: flexible::get_string(v)?,
                            client_host: flexible::get_string(v)?,
                            subscribed_topic_names: get_names(v)?,
                        })
                    })?;
                    Entry::ShareMember { group, member, value }
                }
                (13, Some(member)) => {
                    let partitions = optional(v.as_mut(), flexible::get_topic_partitions)?;
                    Entry::ShareTargetMember { group, member, partitions }
                }
                (14, Some(member)) => {
                    let value = optional(v.as_mut(), |v| {
                        let member_epoch = get_i32(v)?;
                        let previous_member_epoch = get_i32(v)?;
                        if v.remaining() < 1 {
                            return None;
                        }
                        v.get_i8();
                        Some(ShareAssignmentValue {
                            member_epoch,
                            previous_member_epoch,
                            assigned: flexible::get_topic_partitions(v)?,
                        })
                    })?;
                    Entry::ShareCurrentAssignment { group, member, value }
                }
                _ => return None,
            })
        }
        _ => None,
    }
}

/// `ShareGroupStatePartitionMetadata`'s value: InitializingTopics and InitializedTopics
/// are both taken as having state (an initialization under way when the record was
/// written may have completed); DeletingTopics as having none.
fn decode_initialized(v: &mut Bytes) -> Option<Vec<InitializedTopic>> {
    let mut topics = Vec::new();
    for _ in 0..2 {
        let n = flexible::get_len(v)?;
        for _ in 0..n {
            if v.remaining() < 16 {
                return None;
            }
            let id = uuid::Uuid::from_slice(&v.split_to(16)).ok()?;
            let name = flexible::get_string(v)?;
            let count = flexible::get_len(v)?;
            if v.remaining() < count.saturating_mul(4) {
                return None;
            }
            let partitions = (0..count).map(|_| v.get_i32()).collect();
            flexible::skip_tags(v)?;
            topics.push((id, name, partitions));
        }
    }
    Some(topics)
}

/// Decodes a value that may be a tombstone: `Some(None)` for a tombstone, `None` when
/// the value does not decode.
fn optional<T>(value: Option<&mut Bytes>, decode: impl FnOnce(&mut Bytes) -> Option<T>) -> Option<Option<T>> {
    match value {
        None => Some(None),
        Some(v) => decode(v).map(Some),
    }
}

/// Kafka's flexible-version encoding (KIP-482), for the KIP-848 record values: compact
/// strings and arrays (unsigned varint length plus one, 0 for null) and a tagged-field
/// section, which Skein writes empty and skips on read.
pub(crate) mod flexible {
    use bytes::{Buf, BufMut, Bytes, BytesMut};

    use super::TopicPartitions;

    pub fn put_uvarint(out: &mut BytesMut, mut v: u64) {
        while v >= 0x80 {
            out.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        out.put_u8(v as u8);
    }

    pub fn get_uvarint(buf: &mut Bytes) -> Option<u64> {
        let mut value = 0u64;
        for i in 0..5 {
            if !buf.has_remaining() {
                return None;
            }
            let b = buf.get_u8();
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    pub fn put_len(out: &mut BytesMut, n: usize) {
        put_uvarint(out, n as u64 + 1);
    }

    /// A compact array's length; null reads as empty.
    pub fn get_len(buf: &mut Bytes) -> Option<usize> {
        let n = get_uvarint(buf)? as usize;
        Some(n.saturating_sub(1))
    }

    pub fn put_string(out: &mut BytesMut, s: &str) {
        put_len(out, s.len());
        out.put_slice(s.as_bytes());
    }

    pub fn put_nullable_string(out: &mut BytesMut, s: Option<&str>) {
        match s {
            None => put_uvarint(out, 0),
            Some(s) => put_string(out, s),
        }
    }

    pub fn get_nullable_string(buf: &mut Bytes) -> Option<Option<String>> {
        match get_uvarint(buf)? as usize {
            0 => Some(None),
            n => {
                let len = n - 1;
                if buf.remaining() < len {
                    return None;
                }
                String::from_utf8(buf.split_to(len).to_vec()).ok().map(Some)
            }
        }
    }

    pub fn get_string(buf: &mut Bytes) -> Option<String> {
        get_nullable_string(buf)?
    }

    pub fn put_topic_partitions(out: &mut BytesMut, topics: &[TopicPartitions]) {
        put_len(out, topics.len());
        for (id, partitions) in topics {
            out.put_slice(id.as_bytes());
            put_len(out, partitions.len());
            for p in partitions {
                out.put_i32(*p);
            }
            put_no_tags(out);
        }
    }

    pub fn get_topic_partitions(buf: &mut Bytes) -> Option<Vec<TopicPartitions>> {
        let n = get_len(buf)?;
        // A topic takes at least 18 bytes: the reservation is bounded by the input.
        let mut topics = Vec::with_capacity(n.min(buf.remaining() / 18));
        for _ in 0..n {
            if buf.remaining() < 16 {
                return None;
            }
            let id = uuid::Uuid::from_slice(&buf.split_to(16)).ok()?;
            let count = get_len(buf)?;
            if buf.remaining() < count.saturating_mul(4) {
                return None;
            }
            let partitions = (0..count).map(|_| buf.get_i32()).collect();
            skip_tags(buf)?;
            topics.push((id, partitions));
        }
        Some(topics)
    }

    pub fn put_no_tags(out: &mut BytesMut) {
        put_uvarint(out, 0);
    }

    /// Skips a tagged-field section (fields Skein does not use, such as Kafka 4.1's
    /// metadata hash).
    pub fn skip_tags(buf: &mut Bytes) -> Option<()> {
        for _ in 0..get_uvarint(buf)? {
            get_uvarint(buf)?;
            let size = get_uvarint(buf)? as usize;
            if buf.remaining() < size {
                return None;
            }
            buf.advance(size);
        }
        Some(())
    }
}

fn decode_offset(v: &mut Bytes) -> Option<OffsetValue> {
    if v.remaining() < 10 {
        return None;
    }
    let version = v.get_i16();
    let offset = v.get_i64();
    let leader_epoch = if version >= 3 {
        if v.remaining() < 4 {
            return None;
        }
        v.get_i32()
    } else {
        -1
    };
    let metadata = get_string(v)?;
    // Every version carries the commit timestamp: a value without it is damaged.
    if v.remaining() < 8 {
        return None;
    }
    let commit_timestamp = v.get_i64();
    Some(OffsetValue { offset, leader_epoch, metadata, commit_timestamp })
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;
