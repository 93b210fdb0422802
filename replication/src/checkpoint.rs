//! Kafka's `replication-offset-checkpoint`: the high watermark of every partition a
//! broker hosts, in the data directory, so that a restarted replica serves what was
//! committed before it stopped instead of starting from its log start.
//!
//! The format is Kafka's: a version line (`0`), a count line, then one
//! `topic partition offset` line per partition. Written whole and atomically (a temp
//! file, fdatasync, rename, directory sync); a value it holds is never above the
//! committed end at the time it was written, so a stale file only makes a restarted
//! replica more careful.

use std::collections::HashMap;

use skein_engine::{Offset, TopicPartition};

pub const HIGH_WATERMARK_FILE: &str = "replication-offset-checkpoint";

/// Kafka's text for `high_watermarks`, sorted by partition.
pub fn encode(high_watermarks: &[(TopicPartition, Offset)]) -> Vec<u8> {
    let mut sorted: Vec<_> = high_watermarks.iter().collect();
    sorted.sort_by(|a, b| (&a.0.topic, a.0.partition).cmp(&(&b.0.topic, b.0.partition)));
    let mut out = format!("0\n{}\n", sorted.len());
    for (partition, offset) in sorted {
        out.push_str(&format!("{} {} {}\n", partition.topic, partition.partition, offset.0));
    }
    out.into_bytes()
}

/// Parses Kafka's format; `None` when the file is damaged in any way (a wrong
/// version, a count that does not match its lines, a line that does not parse).
pub fn decode(bytes: &[u8]) -> Option<HashMap<TopicPartition, Offset>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.lines();
    if lines.next()? != "0" {
        return None;
    }
    let count: usize = lines.next()?.parse().ok()?;
    let mut out = HashMap::new();
    for _ in 0..count {
        let mut fields = lines.next()?.split(' ');
        let (topic, partition, offset) = (fields.next()?, fields.next()?, fields.next()?);
        if topic.is_empty() || fields.next().is_some() {
            return None;
        }
        let partition = TopicPartition::new(topic, partition.parse().ok()?);
        let offset: i64 = offset.parse().ok()?;
        if partition.partition < 0 || offset < 0 {
            return None;
        }
        out.insert(partition, Offset(offset));
    }
    if lines.any(|line| !line.is_empty()) {
        return None;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The checkpoint round-trips in Kafka's layout, and a damaged one is refused
    // rather than trusted.
    #[test]
    fn round_trip_and_damage() {
        let entries = vec![
            (TopicPartition::new("orders", 2), Offset(40)),
            (TopicPartition::new("__consumer_offsets", 0), Offset(7)),
        ];
        let bytes = encode(&entries);
        assert_eq!(String::from_utf8(bytes.clone()).unwrap(), "0\n2\n__consumer_offsets 0 7\norders 2 40\n");
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded.len(), 2);
        assert_eq!(decoded[&TopicPartition::new("orders", 2)], Offset(40));
        assert_eq!(decode(b"0\n0\n").unwrap().len(), 0);
        for bad in [
            &b"1\n1\norders 0 5\n"[..],
            b"0\n2\norders 0 5\n",
            b"0\n1\norders 0\n",
            b"0\n1\norders 0 -3\n",
            b"0\n1\norders x 5\n",
            b"0\n1\norders 0 5 6\n",
            b"0\n1\norders 0 5\nextra 1 1\n",
            b"",
        ] {
            assert_eq!(decode(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
