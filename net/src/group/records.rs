//! The records of `__consumer_offsets`, in Kafka's format (`OffsetCommitKey` v1 and
//! `OffsetCommitValue` v3, `GroupMetadataKey` v2 and `GroupMetadataValue` v3 with its
//! members), so that Kafka's tools can read Skein's offsets topic and a restarted
//! coordinator knows each group's members. A null value is a tombstone: compaction then
//! removes the key.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// What a record of the offsets topic says.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Offset { group: String, topic: String, partition: i32, value: Option<OffsetValue> },
    Group { group: String, value: Option<GroupValue> },
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

fn put_string(out: &mut BytesMut, s: &str) {
    out.put_i16(s.len() as i16);
    out.put_slice(s.as_bytes());
}

fn put_nullable(out: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(out, s),
        None => out.put_i16(-1),
    }
}

fn get_string(buf: &mut Bytes) -> Option<String> {
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
        _ => None,
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
    let commit_timestamp = if v.remaining() >= 8 { v.get_i64() } else { -1 };
    Some(OffsetValue { offset, leader_epoch, metadata, commit_timestamp })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Entries round-trip; tombstones and damaged keys are handled.
    #[test]
    fn round_trip() {
        let entries = [
            Entry::Offset {
                group: "g".into(),
                topic: "t".into(),
                partition: 3,
                value: Some(OffsetValue { offset: 42, leader_epoch: 0, metadata: "m".into(), commit_timestamp: 7 }),
            },
            Entry::Offset { group: "g".into(), topic: "t".into(), partition: 3, value: None },
            Entry::Group {
                group: "g".into(),
                value: Some(GroupValue {
                    protocol_type: "consumer".into(),
                    generation: 5,
                    protocol: Some("range".into()),
                    leader: Some("m1".into()),
                    state_timestamp: 9,
                    members: vec![MemberValue {
                        member_id: "m1".into(),
                        instance_id: Some("i1".into()),
                        client_id: "c".into(),
                        client_host: "/127.0.0.1".into(),
                        rebalance_timeout_ms: 30_000,
                        session_timeout_ms: 10_000,
                        subscription: Bytes::from_static(b"sub"),
                        assignment: Bytes::from_static(b"assigned"),
                    }],
                }),
            },
            Entry::Group { group: "g".into(), value: None },
        ];
        for entry in entries {
            let (key, value) = encode(&entry);
            assert_eq!(decode(&key, value.as_ref()), Some(entry));
        }
        assert_eq!(decode(&Bytes::from_static(&[0, 9, 0]), None), None);
        assert_eq!(decode(&Bytes::from_static(&[0, 1, 0, 50]), None), None);
    }
}
