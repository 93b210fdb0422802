//! A streams group's records in `__consumer_offsets`, as Kafka 4.4 writes them:
//! `StreamsGroupMetadata` (record type 17: the group epoch, then the metadata hash,
//! which Skein writes as 0 and does not read, since it configures the topology again
//! from the topics on load) and `StreamsGroupTopology` (type 23), whose value has the
//! layout of StreamsGroupHeartbeat's `Topology` and is encoded with it.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::streams_group_heartbeat_request::Topology;
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::group::records::{flexible, get_string, put_string, Entry};

pub const METADATA: i16 = 17;
pub const TOPOLOGY: i16 = 23;

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

/// Decodes a record of type 17 or 23 whose type was read off `key`; `None` for a
/// version or shape it does not know (skipped on load, as Kafka skips them).
pub fn decode(kind: i16, key: &mut Bytes, value: Option<&Bytes>) -> Option<Entry> {
    let group = get_string(key)?;
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
    match kind {
        METADATA => {
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
        TOPOLOGY => {
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
