//! A streams group's records in `__consumer_offsets`, as Kafka 4.4 writes them:
//! `StreamsGroupMetadata` (record type 17: the group epoch, then the metadata hash,
//! which Skein writes as 0 and does not read, since it configures the topology again
//! from the topics on load), `StreamsGroupTopology` (type 23), whose value has the
//! layout of StreamsGroupHeartbeat's `Topology` and is encoded with it, and per member
//! `StreamsGroupMemberMetadata` (19) and `StreamsGroupCurrentMemberAssignment` (22),
//! whose endpoint, tags and task lists have the layout of the heartbeat's structs.
//! The target assignment (20, 21) is not written: the sticky assignor computes it
//! again from the members' tasks on load.

use std::collections::BTreeMap;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::streams_group_heartbeat_request::{Endpoint, KeyValue, Topology};
use kafka_protocol::messages::streams_group_heartbeat_response::TaskIds;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::assign::{TaskSet, Tasks};
use crate::group::records::{flexible, get_string, put_string, Entry};

pub const METADATA: i16 = 17;
pub const MEMBER: i16 = 19;
pub const ASSIGNMENT: i16 = 22;
pub const TOPOLOGY: i16 = 23;

/// A member's metadata (`StreamsGroupMemberMetadataValue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberValue {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub topology_epoch: i32,
    pub process_id: String,
    pub endpoint: Option<(String, u16)>,
    pub client_tags: BTreeMap<String, String>,
}

/// A member's epochs, state and tasks (`StreamsGroupCurrentMemberAssignmentValue`);
/// the state as Kafka numbers it (1 stable, 2 unrevoked, 3 unreleased).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignmentValue {
    pub epoch: i32,
    pub previous_epoch: i32,
    pub state: i8,
    pub assigned: Tasks,
    pub pending_revocation: Tasks,
}

fn member_key(kind: i16, group: &str, member: &str) -> Bytes {
    let mut key = BytesMut::new();
    key.put_i16(kind);
    put_string(&mut key, group);
    put_string(&mut key, member);
    key.freeze()
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

/// Encodes a struct of the request or response, whose layout a record shares, into
/// memory: it cannot fail, its lengths being bounded by what was decoded.
fn put<T: Encodable>(out: &mut BytesMut, item: &T) {
    if item.encode(out, 0).is_err() {
        tracing::error!(target: "skein::net", "cannot encode a streams group record field");
    }
}

fn put_tasks(out: &mut BytesMut, set: &TaskSet) {
    flexible::put_len(out, set.len());
    for (sub, partitions) in set {
        put(out, &TaskIds::default().with_subtopology_id(s(sub)).with_partitions(partitions.iter().copied().collect()));
    }
}

fn get_tasks(buf: &mut Bytes) -> Option<TaskSet> {
    let n = flexible::get_len(buf)?;
    let mut set = TaskSet::new();
    for _ in 0..n {
        let ids = TaskIds::decode(buf, 0).ok()?;
        set.insert(ids.subtopology_id.to_string(), ids.partitions.into_iter().collect());
    }
    Some(set)
}

/// The key and value of a `StreamsGroupMemberMetadata` record (`None`: a tombstone).
pub fn encode_member(group: &str, member: &str, value: Option<&MemberValue>) -> (Bytes, Option<Bytes>) {
    let value = value.map(|v| {
        let mut out = BytesMut::new();
        out.put_i16(0);
        flexible::put_nullable_string(&mut out, v.instance_id.as_deref());
        flexible::put_nullable_string(&mut out, v.rack_id.as_deref());
        flexible::put_string(&mut out, &v.client_id);
        flexible::put_string(&mut out, &v.client_host);
        out.put_i32(v.rebalance_timeout_ms);
        out.put_i32(v.topology_epoch);
        flexible::put_string(&mut out, &v.process_id);
        // A nullable struct: -1, or 1 and the struct.
        match &v.endpoint {
            None => out.put_i8(-1),
            Some((host, port)) => {
                out.put_i8(1);
                put(&mut out, &Endpoint::default().with_host(s(host)).with_port(*port));
            }
        }
        flexible::put_len(&mut out, v.client_tags.len());
        for (key, value) in &v.client_tags {
            put(&mut out, &KeyValue::default().with_key(s(key)).with_value(s(value)));
        }
        flexible::put_no_tags(&mut out);
        out.freeze()
    });
    (member_key(MEMBER, group, member), value)
}

/// The key and value of a `StreamsGroupCurrentMemberAssignment` record (`None`: a
/// tombstone).
pub fn encode_assignment(group: &str, member: &str, value: Option<&AssignmentValue>) -> (Bytes, Option<Bytes>) {
    let value = value.map(|v| {
        let mut out = BytesMut::new();
        out.put_i16(0);
        out.put_i32(v.epoch);
        out.put_i32(v.previous_epoch);
        out.put_i8(v.state);
        for tasks in [&v.assigned, &v.pending_revocation] {
            put_tasks(&mut out, &tasks.active);
            put_tasks(&mut out, &tasks.standby);
            put_tasks(&mut out, &tasks.warmup);
        }
        flexible::put_no_tags(&mut out);
        out.freeze()
    });
    (member_key(ASSIGNMENT, group, member), value)
}

fn decode_member(v: &mut Bytes) -> Option<MemberValue> {
    let instance_id = flexible::get_nullable_string(v)?;
    let rack_id = flexible::get_nullable_string(v)?;
    let client_id = flexible::get_string(v)?;
    let client_host = flexible::get_string(v)?;
    if v.remaining() < 8 {
        return None;
    }
    let (rebalance_timeout_ms, topology_epoch) = (v.get_i32(), v.get_i32());
    let process_id = flexible::get_string(v)?;
    if v.remaining() < 1 {
        return None;
    }
    let endpoint = match v.get_i8() {
        -1 => None,
        _ => {
            let e = Endpoint::decode(v, 0).ok()?;
            Some((e.host.to_string(), e.port))
        }
    };
    let n = flexible::get_len(v)?;
    let mut client_tags = BTreeMap::new();
    for _ in 0..n {
        let kv = KeyValue::decode(v, 0).ok()?;
        client_tags.insert(kv.key.to_string(), kv.value.to_string());
    }
    flexible::skip_tags(v)?;
    Some(MemberValue {
        instance_id,
        rack_id,
        client_id,
        client_host,
        rebalance_timeout_ms,
        topology_epoch,
        process_id,
        endpoint,
        client_tags,
    })
}

fn decode_assignment(v: &mut Bytes) -> Option<AssignmentValue> {
    if v.remaining() < 9 {
        return None;
    }
    let (epoch, previous_epoch, state) = (v.get_i32(), v.get_i32(), v.get_i8());
    let mut sets = Vec::with_capacity(6);
    for _ in 0..6 {
        sets.push(get_tasks(v)?);
    }
    flexible::skip_tags(v)?;
    let mut sets = sets.into_iter();
    let mut tasks = || Tasks {
        active: sets.next().unwrap_or_default(),
        standby: sets.next().unwrap_or_default(),
        warmup: sets.next().unwrap_or_default(),
    };
    let assigned = tasks();
    let pending_revocation = tasks();
    Some(AssignmentValue { epoch, previous_epoch, state, assigned, pending_revocation })
}

fn key(kind: i16, group: &str) -> Bytes {
    let mut key = BytesMut::new();
    key.put_i16(kind);
    put_string(&mut key, group);
    key.freeze()
}

/// The key and value of a `StreamsGroupMetadata` record (`None`: a tombstone).
pub fn encode_metadata(group: &str, epoch: Option<i32>) -> (Bytes, Option<Bytes>) {
    let value = epoch.map(|epoch| {
        let mut out = BytesMut::new();
        out.put_i16(0);
        out.put_i32(epoch);
        out.put_i64(0);
        flexible::put_no_tags(&mut out);
        out.freeze()
    });
    (key(METADATA, group), value)
}

/// The key and value of a `StreamsGroupTopology` record (`None`: a tombstone).
pub fn encode_topology(group: &str, topology: Option<&Topology>) -> (Bytes, Option<Bytes>) {
    let value = topology.map(|t| {
        let mut out = BytesMut::new();
        out.put_i16(0);
        // A topology encodes into memory without error: its lengths came from a
        // decoded request.
        if t.encode(&mut out, 0).is_err() {
            tracing::error!(target: "skein::net", %group, "cannot encode a streams topology");
        }
        out.freeze()
    });
    (key(TOPOLOGY, group), value)
}

/// Decodes a record of type 17, 19, 22 or 23 whose type was read off `key`; `None`
/// for a version or shape it does not know (skipped on load, as Kafka skips them).
pub fn decode(kind: i16, key: &mut Bytes, value: Option<&Bytes>) -> Option<Entry> {
    let group = get_string(key)?;
    let member = match kind {
        MEMBER | ASSIGNMENT => Some(get_string(key)?),
        _ => None,
    };
    let mut value = match value {
        None => None,
        Some(v) => {
            let mut v = v.clone();
            if v.remaining() < 2 || v.get_i16() != 0 {
                return None;
            }
            Some(v)
        }
    };
    match (kind, member) {
        (MEMBER, Some(member)) => {
            let value = match value.as_mut() {
                None => None,
                Some(v) => Some(Box::new(decode_member(v)?)),
            };
            Some(Entry::StreamsMember { group, member, value })
        }
        (ASSIGNMENT, Some(member)) => {
            let value = match value.as_mut() {
                None => None,
                Some(v) => Some(Box::new(decode_assignment(v)?)),
            };
            Some(Entry::StreamsAssignment { group, member, value })
        }
        (METADATA, None) => {
            let epoch = match value.as_mut() {
                None => None,
                Some(v) if v.remaining() >= 12 => {
                    let epoch = v.get_i32();
                    v.advance(8);
                    flexible::skip_tags(v)?;
                    Some(epoch)
                }
                Some(_) => return None,
            };
            Some(Entry::StreamsGroup { group, epoch })
        }
        (TOPOLOGY, None) => {
            let topology = match value.as_mut() {
                None => None,
                Some(v) => Some(Box::new(Topology::decode(v, 0).ok()?)),
            };
            Some(Entry::StreamsTopology { group, topology })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::records;
    use kafka_protocol::messages::streams_group_heartbeat_request::{Subtopology, TopicInfo};
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::StrBytes;

    #[test]
    fn round_trip_and_truncations() {
        let topology = Topology::default().with_epoch(3).with_subtopologies(vec![Subtopology::default()
            .with_subtopology_id(StrBytes::from_static_str("0"))
            .with_source_topics(vec![TopicName(StrBytes::from_static_str("in"))])
            .with_state_changelog_topics(vec![
                TopicInfo::default().with_name(TopicName(StrBytes::from_static_str("app-store-changelog")))
            ])]);
        let entries = [
            Entry::StreamsGroup { group: "g".into(), epoch: Some(7) },
            Entry::StreamsGroup { group: "g".into(), epoch: None },
            Entry::StreamsTopology { group: "g".into(), topology: Some(Box::new(topology)) },
            Entry::StreamsTopology { group: "g".into(), topology: None },
            Entry::StreamsMember {
                group: "g".into(),
                member: "m".into(),
                value: Some(Box::new(MemberValue {
                    instance_id: Some("i".into()),
                    rack_id: None,
                    client_id: "c".into(),
                    client_host: "/h".into(),
                    rebalance_timeout_ms: 30_000,
                    topology_epoch: 0,
                    process_id: "p".into(),
                    endpoint: Some(("localhost".into(), 8080)),
                    client_tags: BTreeMap::from([("zone".into(), "a".into())]),
                })),
            },
            Entry::StreamsMember { group: "g".into(), member: "m".into(), value: None },
            Entry::StreamsAssignment {
                group: "g".into(),
                member: "m".into(),
                value: Some(Box::new(AssignmentValue {
                    epoch: 5,
                    previous_epoch: 4,
                    state: 2,
                    assigned: Tasks {
                        active: TaskSet::from([("0".into(), [0, 2].into())]),
                        standby: TaskSet::from([("1".into(), [1].into())]),
                        warmup: TaskSet::new(),
                    },
                    pending_revocation: Tasks {
                        active: TaskSet::from([("0".into(), [1].into())]),
                        ..Default::default()
                    },
                })),
            },
            Entry::StreamsAssignment { group: "g".into(), member: "m".into(), value: None },
        ];
        for entry in entries {
            let (key, value) = records::encode(&entry);
            assert_eq!(records::decode(&key, value.as_ref()), Some(entry.clone()));
            if let Some(value) = &value {
                for cut in 0..value.len() {
                    let short = value.slice(..cut);
                    assert_ne!(records::decode(&key, Some(&short)), Some(entry.clone()), "cut at {cut}");
                }
            }
        }
    }
}
