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

pub fn encode_value(meta: &TxnMeta) -> Bytes {
    let mut v = BytesMut::with_capacity(64);
    v.put_i16(0);
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
    v.put_i32(topics.len() as i32);
    for (topic, ids) in topics {
        put_string(&mut v, topic);
        v.put_i32(ids.len() as i32);
        for id in ids {
            v.put_i32(id);
        }
    }
    v.put_i64(meta.update_ms);
    v.put_i64(meta.start_ms);
    v.freeze()
}

/// The transactional id of a key; `None` for a key of another version.
pub fn decode_key(key: &Bytes) -> Option<String> {
    let mut key = key.clone();
    if key.remaining() < 2 || key.get_i16() != 0 {
        return None;
    }
    get_string(&mut key)
}

/// A value of version 0 or 1 (the tagged fields of 1 are skipped).
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
    Some(TxnMeta {
        producer_id,
        producer_epoch,
        last_producer_epoch: -1,
        timeout_ms,
        state,
        partitions,
        start_ms,
        update_ms,
    })
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
            producer_epoch: 3,
            last_producer_epoch: -1,
            timeout_ms: 60_000,
            state: TxnState::Ongoing,
            partitions: [("a".to_string(), 0), ("a".to_string(), 2), ("b".to_string(), 1)].into_iter().collect(),
            start_ms: 10,
            update_ms: 20,
        };
        let value = encode_value(&meta);
        assert_eq!(decode_value(&value), Some(meta));
        assert_eq!(decode_key(&encode_key("app-1")).as_deref(), Some("app-1"));
        for cut in 0..value.len() {
            assert_eq!(decode_value(&value.slice(..cut)), None);
        }
    }
}
