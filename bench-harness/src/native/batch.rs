//! Pre-built record batches and the produce frame, encoded by hand so that a request
//! costs one copy of its payload bytes and no allocation: a template of `capacity`
//! records is built once, and each batch is a prefix of it with the due times stamped
//! in and the header and CRC written. Also the reader of fetched batches.

/// The fixed part of a v2 record batch, up to its first record.
pub const BATCH_HEADER: usize = 61;
/// Where the CRC-covered part of a batch starts (the attributes).
const CRC_FROM: usize = 21;
/// Attributes bit of a control batch (transaction marker).
const CONTROL: i16 = 0x20;

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The records of one batch, ready to be stamped.
#[derive(Debug)]
pub struct Template {
    /// Records 0..capacity, each with offset delta = its index and the payload.
    records: Vec<u8>,
    /// `ends[i]`: where record i ends in `records`.
    ends: Vec<usize>,
    /// `values[i]`: where record i's value starts in `records`.
    values: Vec<usize>,
}

impl Template {
    /// `capacity` records of `payload` (at least 8 bytes: the due time goes first).
    pub fn new(payload: &[u8], capacity: usize) -> Template {
        let capacity = capacity.max(1);
        let mut records = Vec::new();
        let (mut ends, mut values) = (Vec::with_capacity(capacity), Vec::with_capacity(capacity));
        let mut body = Vec::new();
        for delta in 0..capacity {
            body.clear();
            body.push(0); // attributes
            put_uvarint(&mut body, zigzag(0)); // timestamp delta
            put_uvarint(&mut body, zigzag(delta as i64)); // offset delta
            put_uvarint(&mut body, zigzag(-1)); // null key
            put_uvarint(&mut body, zigzag(payload.len() as i64));
            let value_at = body.len();
            body.extend_from_slice(payload);
            put_uvarint(&mut body, 0); // no headers
            put_uvarint(&mut records, zigzag(body.len() as i64));
            values.push(records.len() + value_at);
            records.extend_from_slice(&body);
            ends.push(records.len());
        }
        Template { records, ends, values }
    }

    pub fn capacity(&self) -> usize {
        self.ends.len()
    }

    /// The size of a batch of `count` records.
    pub fn batch_len(&self, count: usize) -> usize {
        BATCH_HEADER + self.ends[count - 1]
    }

    /// Appends a batch of `count` records to `out`, record `i` carrying `due(i)`
    /// (µs since the epoch, big-endian, first 8 bytes of its value).
    pub fn write_batch(&self, out: &mut Vec<u8>, count: usize, timestamp_ms: i64, due: impl Fn(usize) -> u64) {
        debug_assert!(count >= 1 && count <= self.capacity());
        let start = out.len();
        let len = self.batch_len(count);
        out.extend_from_slice(&0i64.to_be_bytes()); // base offset
        out.extend_from_slice(&((len - 12) as i32).to_be_bytes());
        out.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
        out.push(2); // magic
        out.extend_from_slice(&[0; 4]); // crc, below
        out.extend_from_slice(&0i16.to_be_bytes()); // attributes: no compression, create time
        out.extend_from_slice(&((count - 1) as i32).to_be_bytes());
        out.extend_from_slice(&timestamp_ms.to_be_bytes());
        out.extend_from_slice(&timestamp_ms.to_be_bytes());
        out.extend_from_slice(&(-1i64).to_be_bytes()); // producer id
        out.extend_from_slice(&(-1i16).to_be_bytes()); // producer epoch
        out.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
        out.extend_from_slice(&(count as i32).to_be_bytes());
        let records = out.len();
        out.extend_from_slice(&self.records[..self.ends[count - 1]]);
        for (i, &at) in self.values[..count].iter().enumerate() {
            out[records + at..records + at + 8].copy_from_slice(&due(i).to_be_bytes());
        }
        let crc = crc32c::crc32c(&out[start + CRC_FROM..]);
        out[start + 17..start + 21].copy_from_slice(&crc.to_be_bytes());
    }
}

/// A produce request (v9, flexible) being written into a reused buffer: the header,
/// then one topic with one batch per partition.
#[derive(Debug)]
pub struct ProduceFrame<'a> {
    out: &'a mut Vec<u8>,
    partitions_at: usize,
    partitions: usize,
}

impl<'a> ProduceFrame<'a> {
    /// Starts a request for `topic` with room for `partitions` partition entries
    /// (exactly that many must be added).
    pub fn start(
        out: &'a mut Vec<u8>,
        correlation: i32,
        acks: i16,
        timeout_ms: i32,
        topic: &str,
        partitions: usize,
    ) -> ProduceFrame<'a> {
        out.clear();
        out.extend_from_slice(&[0; 4]); // size, in finish
        out.extend_from_slice(&0i16.to_be_bytes()); // api key: Produce
        out.extend_from_slice(&super::client::PRODUCE_VERSION.to_be_bytes());
        out.extend_from_slice(&correlation.to_be_bytes());
        let client = super::client::CLIENT_ID.as_bytes();
        out.extend_from_slice(&(client.len() as i16).to_be_bytes());
        out.extend_from_slice(client);
        put_uvarint(out, 0); // header tagged fields
        put_uvarint(out, 0); // transactional id: null
        out.extend_from_slice(&acks.to_be_bytes());
        out.extend_from_slice(&timeout_ms.to_be_bytes());
        put_uvarint(out, 2); // one topic
        put_uvarint(out, topic.len() as u64 + 1);
        out.extend_from_slice(topic.as_bytes());
        put_uvarint(out, partitions as u64 + 1);
        let partitions_at = out.len();
        ProduceFrame { out, partitions_at, partitions }
    }

    /// Adds `partition` with one batch of `count` records from `template`.
    pub fn add(
        &mut self,
        partition: i32,
        template: &Template,
        count: usize,
        timestamp_ms: i64,
        due: impl Fn(usize) -> u64,
    ) {
        self.out.extend_from_slice(&partition.to_be_bytes());
        put_uvarint(self.out, template.batch_len(count) as u64 + 1);
        template.write_batch(self.out, count, timestamp_ms, due);
        put_uvarint(self.out, 0); // partition tagged fields
    }

    /// Closes the request; the buffer then holds the whole frame.
    pub fn finish(self) {
        debug_assert!(self.out.len() > self.partitions_at || self.partitions == 0);
        put_uvarint(self.out, 0); // topic tagged fields
        put_uvarint(self.out, 0); // request tagged fields
        let size = (self.out.len() - 4) as i32;
        self.out[..4].copy_from_slice(&size.to_be_bytes());
    }
}

/// What a fetch's records held: data records with their values' due times.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Walked {
    /// The offset after the last whole batch (the next fetch offset), if any batch was whole.
    pub next_offset: Option<i64>,
    pub records: u64,
    pub value_bytes: u64,
}

fn read_varint(data: &[u8], at: &mut usize) -> Option<i64> {
    let (mut v, mut shift) = (0u64, 0);
    loop {
        let b = *data.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(((v >> 1) as i64) ^ -((v & 1) as i64));
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

/// Walks the whole v2 batches of a fetch response's records, calling `each(due_us,
/// value_len)` for every data record at or after `from` (control batches skipped; a
/// compressed batch counts its records with no due time, as 0).
pub fn walk(data: &[u8], from: i64, mut each: impl FnMut(u64, usize)) -> Walked {
    let mut walked = Walked::default();
    let mut at = 0;
    while data.len() - at >= BATCH_HEADER {
        let be_i64 = |i: usize| i64::from_be_bytes(data[i..i + 8].try_into().unwrap_or([0; 8]));
        let be_i32 = |i: usize| i32::from_be_bytes(data[i..i + 4].try_into().unwrap_or([0; 4]));
        let base = be_i64(at);
        let len = be_i32(at + 8);
        if len < (BATCH_HEADER - 12) as i32 || data.len() - at - 12 < len as usize {
            break; // a partial batch at the end of the response
        }
        let end = at + 12 + len as usize;
        let attributes = i16::from_be_bytes([data[at + 21], data[at + 22]]);
        let last_delta = be_i32(at + 23);
        let count = be_i32(at + 57).max(0) as usize;
        walked.next_offset = Some(base + i64::from(last_delta) + 1);
        if attributes & CONTROL == 0 {
            if attributes & 0x7 != 0 {
                walked.records += count as u64;
                for _ in 0..count {
                    each(0, 0);
                }
            } else {
                let mut r = at + BATCH_HEADER;
                for _ in 0..count {
                    let Some(size) = read_varint(data, &mut r) else { break };
                    let next = r + size.max(0) as usize;
                    let mut f = r + 1; // attributes
                    let fields = read_varint(data, &mut f)
                        .and_then(|_| read_varint(data, &mut f))
                        .zip(read_varint(data, &mut f).map(|k| f + k.max(0) as usize));
                    let Some((offset_delta, key_end)) = fields else { break };
                    f = key_end;
                    let Some(value_len) = read_varint(data, &mut f) else { break };
                    if base + offset_delta >= from && value_len >= 8 && f + 8 <= end {
                        let due = u64::from_be_bytes(data[f..f + 8].try_into().unwrap_or([0; 8]));
                        each(due, value_len as usize);
                        walked.records += 1;
                        walked.value_bytes += value_len as u64;
                    }
                    r = next;
                }
            }
        }
        at = end;
    }
    walked
}

#[cfg(test)]
mod tests {
    use bytes::{Buf, Bytes};
    use kafka_protocol::messages::{ProduceRequest, RequestHeader};
    use kafka_protocol::protocol::Decodable;
    use kafka_protocol::records::RecordBatchDecoder;

    use super::*;

    // The hand-written produce frame decodes with the kafka-protocol crate, and its
    // batches with the crate's record decoder (which checks the CRC), carrying the
    // due times given.
    #[test]
    fn produce_frame_decodes_as_kafka_protocol() {
        let payload = vec![7u8; 100];
        let template = Template::new(&payload, 200);
        let mut buf = Vec::new();
        let mut frame = ProduceFrame::start(&mut buf, 42, -1, 30_000, "bench-topic", 2);
        frame.add(3, &template, 1, 1_700_000_000_000, |i| 1000 + i as u64);
        frame.add(5, &template, 200, 1_700_000_000_001, |i| 5000 + i as u64);
        frame.finish();
        let size = i32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
        assert_eq!(size, buf.len() - 4);
        let mut body = Bytes::from(buf[4..].to_vec());
        let header = RequestHeader::decode(&mut body, 2).unwrap();
        assert_eq!((header.request_api_key, header.request_api_version, header.correlation_id), (0, 9, 42));
        let request = ProduceRequest::decode(&mut body, 9).unwrap();
        assert!(!body.has_remaining());
        assert_eq!((request.acks, request.timeout_ms, request.topic_data.len()), (-1, 30_000, 1));
        let topic = &request.topic_data[0];
        assert_eq!(topic.name.0.as_str(), "bench-topic");
        let parts: Vec<i32> = topic.partition_data.iter().map(|p| p.index).collect();
        assert_eq!(parts, vec![3, 5]);
        for (p, (count, first_due)) in topic.partition_data.iter().zip([(1usize, 1000u64), (200, 5000)]) {
            let mut records = p.records.clone().unwrap();
            let decoded = RecordBatchDecoder::decode(&mut records).unwrap();
            assert_eq!(decoded.records.len(), count);
            for (i, r) in decoded.records.iter().enumerate() {
                assert_eq!(r.offset, i as i64);
                let value = r.value.as_ref().unwrap();
                assert_eq!(value.len(), 100);
                assert_eq!(u64::from_be_bytes(value[..8].try_into().unwrap()), first_due + i as u64);
                assert_eq!(&value[8..], &payload[8..]);
            }
            // The walker reads the same due times.
            let mut dues = Vec::new();
            let walked = walk(p.records.as_ref().unwrap(), 0, |due, len| dues.push((due, len)));
            assert_eq!(walked.next_offset, Some(count as i64));
            assert_eq!(dues, (0..count).map(|i| (first_due + i as u64, 100)).collect::<Vec<_>>());
        }
    }

    // A batch cut off at the end of a fetch is left for the next fetch, and records
    // before `from` are not counted.
    #[test]
    fn walk_stops_at_a_partial_batch_and_skips_earlier_offsets() {
        let template = Template::new(&[1u8; 16], 10);
        let mut data = Vec::new();
        template.write_batch(&mut data, 10, 0, |i| i as u64);
        let whole = data.len();
        template.write_batch(&mut data, 10, 0, |i| 100 + i as u64);
        data[whole..whole + 8].copy_from_slice(&10i64.to_be_bytes());
        let mut seen = Vec::new();
        let walked = walk(&data[..data.len() - 5], 4, |due, _| seen.push(due));
        assert_eq!(walked.next_offset, Some(10));
        assert_eq!(seen, vec![4, 5, 6, 7, 8, 9]);
        let mut seen = 0;
        assert_eq!(walk(&data, 0, |_, _| seen += 1).next_offset, Some(20));
        assert_eq!(seen, 20);
    }
}
