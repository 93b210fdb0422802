//! The records of `__transaction_state`, in Kafka's format (`TransactionLogKey` v0,
//! `TransactionLogValue` v0), so that Kafka's tools read Skein's transaction log and
//! a coordinator that takes a partition over replays it. A null value is a tombstone
//! (an expired transactional id).

use std::collections::BTreeSet;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::{TxnMeta, TxnState};
use crate::group::records::{get_string, put_string};

pub fn encode_key(transactional_id: &str) -> Bytes {
    let mut key = BytesMut::with_capacity(4 + transactional_id.len());
    key.put_i16(0);
    put_string(&mut key, transactional_id);
    key.freeze()
}

/// A value in `version` 0, or 1 (flexible, with the tagged fields of transaction
/// version 2: previous and next producer id, client transaction version), as Kafka
/// 4.4 writes them while `transaction.version` is at least 1.
pub fn encode_value(meta: &TxnMeta, version: i16) -> Bytes {
    let flexible = version >= 1;
    let mut v = BytesMut::with_capacity(64);
    v.put_i16(version);
    v.put_i64(meta.producer_id);
    v.put_i16(meta.producer_epoch);
    v.put_i32(meta.timeout_ms);
    v.put_i8(meta.state as i8);
    let mut topics: Vec<(&str, Vec<i32>)> = Vec::new();
    for (topic, partition) in &meta.partitions {
        match topics.last_mut() {
            Some((t, ids)) if *t == topic.as_str() => ids.push(*partition),
            _ => topics.push((topic, vec![*partition])),
        }
    }
    // An Empty state has no partitions: a null array, as Kafka writes it.
    let null = meta.state == TxnState::Empty;
    match (flexible, null) {
        (false, true) => v.put_i32(-1),
        (false, false) => v.put_i32(topics.len() as i32),
        (true, true) => put_uvarint(&mut v, 0),
        (true, false) => put_uvarint(&mut v, topics.len() as u64 + 1),
    }
    for (topic, ids) in topics.iter().filter(|_| !null) {
        if flexible {
            put_uvarint(&mut v, topic.len() as u64 + 1);
            v.put_slice(topic.as_bytes());
            put_uvarint(&mut v, ids.len() as u64 + 1);
        } else {
            put_string(&mut v, topic);
            v.put_i32(ids.len() as i32);
        }
        for id in ids {
            v.put_i32(*id);
        }
        if flexible {
            put_uvarint(&mut v, 0);
        }
    }
    v.put_i64(meta.update_ms);
    v.put_i64(meta.start_ms);
    if flexible {
        // Tagged fields, in tag order, each only when it is not its default.
        let mut tags: Vec<(u64, Vec<u8>)> = Vec::new();
        if meta.previous_producer_id != -1 {
            tags.push((0, meta.previous_producer_id.to_be_bytes().to_vec()));
        }
        if meta.next_producer_id != -1 {
            tags.push((1, meta.next_producer_id.to_be_bytes().to_vec()));
        }
        if meta.client_version != 0 {
            tags.push((2, meta.client_version.to_be_bytes().to_vec()));
        }
        put_uvarint(&mut v, tags.len() as u64);
        for (tag, value) in tags {
            put_uvarint(&mut v, tag);
            put_uvarint(&mut v, value.len() as u64);
            v.put_slice(&value);
        }
    }
    v.freeze()
}

fn put_uvarint(v: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        v.put_u8((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    v.put_u8(value as u8);
}

/// The transactional id of a key; `None` for a key of another version.
pub fn decode_key(key: &Bytes) -> Option<String> {
    let mut key = key.clone();
    if key.remaining() < 2 || key.get_i16() != 0 {
        return None;
    }
    get_string(&mut key)
}

/// A value of version 0 or 1 (of whose tagged fields the previous and next producer
/// ids and the client transaction version are read, the others skipped).
pub fn decode_value(value: &Bytes) -> Option<TxnMeta> {
    let mut v = value.clone();
    let need = |v: &Bytes, n: usize| (v.remaining() >= n).then_some(());
    need(&v, 2)?;
    let version = v.get_i16();
    if !(0..=1).contains(&version) {
        return None;
    }
    // Version 1 is flexible: compact strings and arrays, tagged fields.
    let flexible = version >= 1;
    need(&v, 8 + 2 + 4 + 1)?;
    let producer_id = v.get_i64();
    let producer_epoch = v.get_i16();
    let timeout_ms = v.get_i32();
    let state = TxnState::from_i8(v.get_i8())?;
    let mut partitions = BTreeSet::new();
    let count = if flexible { read_uvarint(&mut v)? as i64 - 1 } else { i64::from(get_i32(&mut v)?) };
    for _ in 0..count.max(0) {
        let topic = if flexible { compact_string(&mut v)? } else { get_string(&mut v)? };
        let ids = if flexible { read_uvarint(&mut v)? as i64 - 1 } else { i64::from(get_i32(&mut v)?) };
        if ids > v.remaining() as i64 / 4 {
            return None;
        }
        for _ in 0..ids.max(0) {
            partitions.insert((topic.clone(), v.get_i32()));
        }
        if flexible {
            skip_tags(&mut v)?;
        }
    }
    need(&v, 16)?;
    let update_ms = v.get_i64();
    let start_ms = v.get_i64();
    let mut meta = TxnMeta {
        producer_id,
        previous_producer_id: -1,
        next_producer_id: -1,
        producer_epoch,
        last_producer_epoch: -1,
        timeout_ms,
        state,
        partitions,
        start_ms,
        update_ms,
        client_version: 0,
    };
    if flexible {
        for _ in 0..read_uvarint(&mut v)? {
            let tag = read_uvarint(&mut v)?;
            let size = read_uvarint(&mut v)? as usize;
            need(&v, size)?;
            let mut field = v.split_to(size);
            match (tag, size) {
                (0, 8) => meta.previous_producer_id = field.get_i64(),
                (1, 8) => meta.next_producer_id = field.get_i64(),
                (2, 2) => meta.client_version = field.get_i16(),
                _ => {}
            }
        }
    }
    Some(meta)
}

fn get_i32(v: &mut Bytes) -> Option<i32> {
    (v.remaining() >= 4).then(|| v.get_i32())
}

fn read_uvarint(v: &mut Bytes) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..35).step_by(7) {
        if !v.has_remaining() {
            return None;
        }
        let byte = v.get_u8();
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

fn compact_string(v: &mut Bytes) -> Option<String> {
    let len = read_uvarint(v)?.checked_sub(1)? as usize;
    if v.remaining() < len {
        return None;
    }
    String::from_utf8(v.split_to(len).to_vec()).ok()
}

fn skip_tags(v: &mut Bytes) -> Option<()> {
    for _ in 0..read_uvarint(v)? {
        let _tag = read_uvarint(v)?;
        let size = read_uvarint(v)? as usize;
        if v.remaining() < size {
            return None;
        }
        v.advance(size);
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // A value reads back as written; a cut one is refused, never a panic.
    #[test]
    fn round_trip() {
        let meta = TxnMeta {
            producer_id: 4000,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: 3,
            last_producer_epoch: -1,
            timeout_ms: 60_000,
            state: TxnState::Ongoing,
            partitions: [("a".to_string(), 0), ("a".to_string(), 2), ("b".to_string(), 1)].into_iter().collect(),
            start_ms: 10,
            update_ms: 20,
            client_version: 0,
        };
        let v2 = TxnMeta { previous_producer_id: 3999, next_producer_id: 4001, client_version: 2, ..meta.clone() };
        let empty = TxnMeta { state: TxnState::Empty, partitions: Default::default(), ..v2.clone() };
        for (meta, version) in [(&meta, 0), (&meta, 1), (&v2, 1), (&empty, 0), (&empty, 1)] {
            let value = encode_value(meta, version);
            let read = decode_value(&value).unwrap();
            let expected = match version {
                0 => TxnMeta { previous_producer_id: -1, next_producer_id: -1, client_version: 0, ..meta.clone() },
                _ => meta.clone(),
            };
            assert_eq!(read, expected);
            for cut in 0..value.len() {
                assert_eq!(decode_value(&value.slice(..cut)), None, "version {version} cut at {cut}");
            }
        }
        assert_eq!(decode_key(&encode_key("app-1")).as_deref(), Some("app-1"));
    }
}
