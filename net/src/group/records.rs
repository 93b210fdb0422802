//! The records of `__consumer_offsets`, in Kafka's format (`OffsetCommitKey` v1 and
//! `OffsetCommitValue` v3, `GroupMetadataKey` v2 and a `GroupMetadataValue` v3 without
//! members), so that Kafka's tools can read Skein's offsets topic. A null value is a
//! tombstone: compaction then removes the key.

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
                out.put_i32(0); // members: restored by rejoining, not from the log
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
                    let _version = v.get_i16();
                    let protocol_type = get_string(&mut v)?;
                    if v.remaining() < 4 {
                        return None;
                    }
                    let generation = v.get_i32();
                    let protocol = get_nullable(&mut v)?;
                    let leader = get_nullable(&mut v)?;
                    let state_timestamp = if v.remaining() >= 8 { v.get_i64() } else { -1 };
                    Some(GroupValue { protocol_type, generation, protocol, leader, state_timestamp })
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
                    leader: None,
                    state_timestamp: 9,
                }),
            },
        ];
        for entry in entries {
            let (key, value) = encode(&entry);
            assert_eq!(decode(&key, value.as_ref()), Some(entry));
        }
        assert_eq!(decode(&Bytes::from_static(&[0, 9, 0]), None), None);
        assert_eq!(decode(&Bytes::from_static(&[0, 1, 0, 50]), None), None);
    }
}
