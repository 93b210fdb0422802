//! Response frames as segments: encoded framing around record bytes sent as they are.
//!
//! A fetch response is mostly record batches that already sit in memory as `Bytes`
//! (the shard's batch cache, or a cold read's buffer). Encoded with the codec, every
//! batch would be copied into the frame, and a partition's batches joined (copied)
//! before that. Instead a frame is a list of segments: the codec writes the framing
//! (size, header, per-topic and per-partition fields) into one small buffer, each
//! partition's batches go between its pieces as they are, and the connection's writer
//! sends the segments with vectored writes (`sendmsg`), no user-space copy.
//!
//! The codec must see a `records` value of the right length to write its length
//! prefix. So each partition's `records` is a placeholder: a slice of
//! `RECORDS_PLACEHOLDER`, zeroed static memory that is never read. The `Splicer` the
//! codec writes into recognises a placeholder by its address and puts that partition's
//! batches there instead, in encode order. A frame in which a placeholder went
//! unmatched is an error (the connection's usual encode-failure path), never a frame
//! that carries the placeholder's zeros.

use std::io::IoSlice;

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::buf::ByteBufMut;
use skein_control::limits::{FETCH_RESPONSE_BYTES_MAX, FRAME_WRITE_SEGMENTS_MAX};

/// Backs the placeholders. A partition's records are never more than a response
/// holds, except a first batch larger than that, which is joined instead (and counted
/// as copied). Zeroed statics live in .bss: address space, no memory until touched,
/// and nothing touches it.
static RECORDS_PLACEHOLDER: [u8; FETCH_RESPONSE_BYTES_MAX] = [0; FETCH_RESPONSE_BYTES_MAX];

/// An encoded response frame: its segments in order, and their total length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    segments: Vec<Bytes>,
    len: usize,
}

impl Frame {
    /// A frame in one buffer.
    pub fn contiguous(bytes: Bytes) -> Frame {
        Frame { len: bytes.len(), segments: vec![bytes] }
    }

    /// The frame's bytes on the wire, size prefix included.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn segments(&self) -> &[Bytes] {
        &self.segments
    }

    /// The frame in one buffer (a copy when it has several segments): for tests and
    /// for callers that need contiguous bytes.
    pub fn to_bytes(&self) -> Bytes {
        match self.segments.as_slice() {
            [one] => one.clone(),
            segments => {
                let mut out = BytesMut::with_capacity(self.len);
                for s in segments {
                    out.extend_from_slice(s);
                }
                out.freeze()
            }
        }
    }
}

/// The record bytes of a response's partitions, in encode order, each behind the
/// placeholder that stands for it in the response.
#[derive(Debug, Default)]
pub struct SharedRecords {
    partitions: Vec<Vec<Bytes>>,
    /// Record bytes that had to be copied (joined) instead of shared.
    copied_bytes: u64,
}

impl SharedRecords {
    /// The `records` value for a partition whose batches are `batches`: a placeholder
    /// of their total length, to be replaced by the batches when the frame is built.
    /// Partitions must be added in the order the response encodes them.
    pub fn add(&mut self, batches: Vec<Bytes>) -> Bytes {
        let len: usize = batches.iter().map(Bytes::len).sum();
        if len == 0 {
            return Bytes::new();
        }
        if len > RECORDS_PLACEHOLDER.len() {
            // Only a first batch past the response's limit gets here: the codec copies
            // it into the frame as any other field (and joins several first).
            self.copied_bytes += len as u64 * if batches.len() > 1 { 2 } else { 1 };
            if let [one] = batches.as_slice() {
                return one.clone();
            }
            let mut joined = BytesMut::with_capacity(len);
            for b in &batches {
                joined.extend_from_slice(b);
            }
            return joined.freeze();
        }
        self.partitions.push(batches);
        Bytes::from_static(&RECORDS_PLACEHOLDER[..len])
    }

    /// Record bytes copied in user space to build the response (not shared).
    pub fn copied_bytes(&self) -> u64 {
        self.copied_bytes
    }

    /// Record bytes the frame will share.
    pub fn shared_bytes(&self) -> u64 {
        self.partitions.iter().flatten().map(|b| b.len() as u64).sum()
    }
}

/// A `BufMut` for the codec: framing goes into `out`; a placeholder slice closes the
/// current framing segment and puts the partition's batches after it.
pub struct Splicer {
    out: BytesMut,
    segments: Vec<Bytes>,
    pending: std::vec::IntoIter<Vec<Bytes>>,
    mismatched: bool,
}

impl Splicer {
    /// A splicer for a frame of `len` bytes whose record bytes are `records`.
    pub fn new(len: usize, records: SharedRecords) -> Splicer {
        let shared = records.shared_bytes() as usize;
        let segments = Vec::with_capacity(2 * records.partitions.len() + 1);
        Splicer {
            out: BytesMut::with_capacity(len.saturating_sub(shared)),
            segments,
            pending: records.partitions.into_iter(),
            mismatched: false,
        }
    }

    /// The frame, once the codec wrote all of it.
    ///
    /// # Errors
    /// When a placeholder went unmatched: a partition's records were left out of the
    /// encoding, encoded out of order, or with another length.
    pub fn finish(mut self) -> anyhow::Result<Frame> {
        if self.mismatched || self.pending.next().is_some() {
            anyhow::bail!("a fetch response's records did not match their placeholders");
        }
        if !self.out.is_empty() {
            self.segments.push(self.out.freeze());
        }
        let len = self.segments.iter().map(Bytes::len).sum();
        Ok(Frame { segments: self.segments, len })
    }

    fn splice(&mut self, placeholder: &[u8]) {
        let Some(batches) = self.pending.next() else {
            self.mismatched = true;
            return;
        };
        if batches.iter().map(Bytes::len).sum::<usize>() != placeholder.len() {
            self.mismatched = true;
            return;
        }
        if !self.out.is_empty() {
            self.segments.push(self.out.split().freeze());
        }
        self.segments.extend(batches);
    }
}

fn is_placeholder(src: &[u8]) -> bool {
    !src.is_empty() && std::ptr::eq(src.as_ptr(), RECORDS_PLACEHOLDER.as_ptr())
}

// SAFETY: every method delegates to the `BytesMut` that holds the framing, whose
// `chunk_mut` and `advance_mut` uphold `BufMut`'s contract; `put_slice` only decides
// whether the bytes are copied into it or shared beside it.
unsafe impl BufMut for Splicer {
    fn remaining_mut(&self) -> usize {
        self.out.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller initialised `cnt` bytes of `chunk_mut`, which is `out`'s.
        unsafe { self.out.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.out.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        match is_placeholder(src) {
            true => self.splice(src),
            false => self.out.put_slice(src),
        }
    }
}

// Seeks and ranges address the framing written since the last shared segment; the
// message codecs use neither (only record batch encoding does).
impl ByteBufMut for Splicer {
    fn offset(&self) -> usize {
        ByteBufMut::offset(&self.out)
    }

    fn seek(&mut self, offset: usize) {
        ByteBufMut::seek(&mut self.out, offset)
    }

    fn range(&mut self, r: std::ops::Range<usize>) -> &mut [u8] {
        ByteBufMut::range(&mut self.out, r)
    }
}

/// The `IoSlice`s for one vectored write of `segments`, starting `skip` bytes into the
/// first: at most `FRAME_WRITE_SEGMENTS_MAX`.
pub fn io_slices<'a>(segments: &'a [Bytes], skip: usize) -> Vec<IoSlice<'a>> {
    segments
        .iter()
        .take(FRAME_WRITE_SEGMENTS_MAX)
        .enumerate()
        .map(|(i, s)| IoSlice::new(if i == 0 { &s[skip..] } else { s }))
        .collect()
}

/// Where `(segment, skip)` stands after `written` more bytes went out.
pub fn advance(segments: &[Bytes], mut at: (usize, usize), mut written: usize) -> (usize, usize) {
    while written > 0 {
        let left = segments[at.0].len() - at.1;
        if written < left {
            return (at.0, at.1 + written);
        }
        written -= left;
        at = (at.0 + 1, 0);
    }
    // Empty segments after a completed one are passed over.
    while at.0 < segments.len() && segments[at.0].len() == at.1 {
        at = (at.0 + 1, 0);
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    // Walking a frame's segments by the bytes each write took lands on the right
    // segment and offset, across segment boundaries and over empty segments.
    #[test]
    fn advance_over_segments() {
        let segments = vec![Bytes::from_static(b"abc"), Bytes::new(), Bytes::from_static(b"defgh")];
        let check = |at, written, expected| assert_eq!(advance(&segments, at, written), expected);
        check((0, 0), 2, (0, 2));
        check((0, 0), 3, (2, 0));
        check((0, 2), 2, (2, 1));
        check((2, 1), 4, (3, 0));
        check((0, 0), 8, (3, 0));
        let slices = io_slices(&segments[2..], 3);
        assert_eq!(&*slices[0], b"gh");
    }

    // A fetch frame built from shared batches is byte for byte the codec's own
    // encoding of the same response with the batches joined, at every version, with
    // partitions of several batches, of none, and in error, across topics.
    #[test]
    fn segmented_fetch_frames_match_the_codec() {
        use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
        use kafka_protocol::messages::{ApiKey, FetchResponse, ResponseKind, TopicName};

        let batch = |tag: u8, len: usize| Bytes::from(vec![tag; len]);
        let topics: Vec<(&str, Vec<Vec<Bytes>>)> = vec![
            ("a", vec![vec![batch(1, 70), batch(2, 5), batch(3, 300)], vec![], vec![batch(4, 1)]]),
            ("b", vec![vec![batch(5, 4096)]]),
        ];
        let response = |version: i16, records: &mut dyn FnMut(Vec<Bytes>) -> Bytes| {
            // Topics are named up to v12 and identified from v13, as `build` does.
            let (named, identified) = (version < 13, version >= 13);
            let responses = topics
                .iter()
                .map(|(name, partitions)| {
                    let partitions = partitions
                        .iter()
                        .enumerate()
                        .map(|(i, batches)| {
                            PartitionData::default()
                                .with_partition_index(i as i32)
                                .with_high_watermark(1000 + i as i64)
                                .with_error_code(if batches.is_empty() { 6 } else { 0 })
                                .with_records(Some(records(batches.clone())))
                        })
                        .collect();
                    FetchableTopicResponse::default()
                        .with_topic(TopicName(if named { name.to_string() } else { String::new() }.into()))
                        .with_topic_id(uuid::Uuid::from_u128(u128::from(identified) * (name.len() as u128)))
                        .with_partitions(partitions)
                })
                .collect();
            FetchResponse::default().with_session_id(if version >= 7 { 7 } else { 0 }).with_responses(responses)
        };
        for version in 4..=16 {
            let mut shared = SharedRecords::default();
            let spliced = response(version, &mut |batches| shared.add(batches));
            assert_eq!(shared.copied_bytes(), 0);
            assert_eq!(shared.shared_bytes(), 70 + 5 + 300 + 1 + 4096);
            let frame = crate::server::encode(ApiKey::Fetch, version, 42, &ResponseKind::Fetch(spliced), shared)
                .expect("a segmented frame");
            assert!(frame.segments().len() > 4, "v{version}: records were copied into the framing");

            let joined = response(version, &mut |batches| Bytes::from(batches.concat()));
            let expected = crate::server::encode(
                ApiKey::Fetch,
                version,
                42,
                &ResponseKind::Fetch(joined),
                SharedRecords::default(),
            )
            .expect("a contiguous frame");
            assert_eq!(expected.segments().len(), 1);
            assert_eq!(frame.len(), expected.len());
            assert_eq!(frame.to_bytes(), expected.to_bytes(), "v{version}");
        }
    }

    // A placeholder that the codec never wrote, or that comes with another length,
    // fails the frame instead of sending zeros.
    #[test]
    fn unmatched_placeholders_fail() {
        let mut records = SharedRecords::default();
        let placeholder = records.add(vec![Bytes::from_static(b"12345")]);
        assert_eq!(placeholder.len(), 5);
        assert!(Splicer::new(16, records).finish().is_err());

        let mut records = SharedRecords::default();
        let _ = records.add(vec![Bytes::from_static(b"12345")]);
        let mut splicer = Splicer::new(16, records);
        splicer.put_slice(&RECORDS_PLACEHOLDER[..4]);
        assert!(splicer.finish().is_err());
    }
}
