//! Reading request frames (a 4-byte size, then the body) off a plain connection with
//! as few `recv` calls as the bytes allow.
//!
//! Reading the size with one call, the body with another, then finding the socket
//! empty with a third (before waiting for it) cost three system calls a request. Here
//! each `recv` also takes the start of what follows: the body's read takes the next
//! frame's size and a short prefix of its body (into `carry`), and a read that comes
//! back short says the socket is drained, so the next one waits for it to be readable
//! (a poll on the shard's ring, `glommio::net::readable`) instead of failing first.
//! A connection of small requests (fetches, metadata) so reads each in one call, a
//! produce in two. Bodies are read into their own allocation, unzeroed; only the
//! carried prefix (at most `CARRY` bytes) is copied, and after a produce request no
//! more than the fields every produce request has before its records
//! (`PRODUCE_RECORDS_AT_LEAST`): record bytes are never copied on the way in.

use std::io;
use std::os::fd::AsRawFd;

/// The most read ahead of a frame's size.
pub const CARRY: usize = 2048;
/// The fewest body bytes before a produce request's first record byte, over every
/// version: request header v2 (api key 2, version 2, correlation id 4, a null client
/// id 2, no tagged fields 1) and produce v9's flexible fields (a null transactional id
/// 1, acks 2, timeout 4, one topic 1, an empty name 1, one partition 1, its index 4,
/// the records' length 1). Older versions and real topic names only add to it.
const PRODUCE_RECORDS_AT_LEAST: usize = 26;
/// What a read takes past a produce request's size (`ahead`): the next frame's size
/// and no more of its body than comes before any records, so that a produce after a
/// produce copies no record byte.
const PRODUCE_CARRY: usize = 4 + PRODUCE_RECORDS_AT_LEAST;
const PRODUCE: i16 = 0;

/// The read state of one plain connection.
pub struct Frames<'a> {
    socket: &'a socket2::Socket,
    /// Bytes read past the last frame: `carry[at..len]`.
    carry: [u8; CARRY],
    at: usize,
    len: usize,
    /// The last read came back short: the socket had nothing more.
    drained: bool,
    /// The last frame's size and API key, which size the next first read.
    last_size: usize,
    last_api: i16,
    /// Record bytes of produce requests that may have been copied out of `carry`: what
    /// was carried past `PRODUCE_RECORDS_AT_LEAST` (an upper bound; `/metrics`' copies).
    pub produce_copied: u64,
}

impl<'a> Frames<'a> {
    pub fn new(socket: &'a socket2::Socket) -> Frames<'a> {
        Frames {
            socket,
            carry: [0; CARRY],
            at: 0,
            len: 0,
            drained: false,
            last_size: 0,
            last_api: -1,
            produce_copied: 0,
        }
    }

    /// The next frame's size. An error when the peer closed (between frames too).
    pub async fn size(&mut self) -> io::Result<i32> {
        while self.len - self.at < 4 {
            self.carry.copy_within(self.at..self.len, 0);
            self.len -= self.at;
            self.at = 0;
            let want = ahead(self.last_api, self.last_size).max(self.len + 1);
            let read = self.recv(&mut Vec::new(), 0, want).await?;
            self.len += read;
        }
        let size = i32::from_be_bytes(self.carry[self.at..self.at + 4].try_into().expect("4 bytes"));
        self.at += 4;
        Ok(size)
    }

    /// The body of the frame whose size `size` returned: `size` bytes.
    pub async fn body(&mut self, size: usize) -> io::Result<Vec<u8>> {
        let mut body = Vec::with_capacity(size);
        let carried = (self.len - self.at).min(size);
        body.extend_from_slice(&self.carry[self.at..self.at + carried]);
        self.at += carried;
        if self.at == self.len {
            (self.at, self.len) = (0, 0);
        }
        while body.len() < size {
            // The rest of the body, and after it the start of the next frame, which
            // the connection's requests so far size.
            let room = size - body.len();
            let want = ahead(api_of(&body).unwrap_or(self.last_api), size);
            let read = self.recv(&mut body, room, want).await?;
            self.len += read;
        }
        let api = api_of(&body).unwrap_or(-1);
        if api == PRODUCE {
            self.produce_copied += carried.saturating_sub(PRODUCE_RECORDS_AT_LEAST) as u64;
        }
        (self.last_size, self.last_api) = (size, api);
        Ok(body)
    }

    /// One `recv` into `room` bytes of `body`'s spare capacity and then
    /// `carry[len..want]`, waiting until the socket has data; returns how many bytes
    /// went into `carry` (the body's length grows by the rest). A short read marks the
    /// socket drained.
    async fn recv(&mut self, body: &mut Vec<u8>, room: usize, want: usize) -> io::Result<usize> {
        loop {
            if self.drained {
                glommio::net::readable(self.socket.as_raw_fd()).await?;
                self.drained = false;
            }
            let spare = &mut body.spare_capacity_mut()[..room];
            let tail = &mut self.carry[self.len..want];
            let asked = spare.len() + tail.len();
            let mut iov = [
                libc::iovec { iov_base: spare.as_mut_ptr().cast(), iov_len: spare.len() },
                libc::iovec { iov_base: tail.as_mut_ptr().cast(), iov_len: tail.len() },
            ];
            // SAFETY: an all-zero `msghdr` is valid (no address, no control data).
            let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
            message.msg_iov = iov.as_mut_ptr();
            message.msg_iovlen = iov.len();
            // SAFETY: both vectors point into memory this call borrows mutably (the
            // body's spare capacity and the carry buffer), for their lengths; the
            // kernel only writes bytes there, and `set_len` below covers only what it
            // wrote.
            let read = unsafe { libc::recvmsg(self.socket.as_raw_fd(), &mut message, libc::MSG_DONTWAIT) };
            if read < 0 {
                let error = io::Error::last_os_error();
                match error.kind() {
                    io::ErrorKind::WouldBlock => self.drained = true,
                    io::ErrorKind::Interrupted => {}
                    _ => return Err(error),
                }
                continue;
            }
            let read = read as usize;
            if read == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.drained = read < asked;
            let into_body = read.min(iov[0].iov_len);
            // SAFETY: the kernel wrote `into_body` bytes at the start of the spare
            // capacity (the first vector fills before the second).
            unsafe { body.set_len(body.len() + into_body) };
            return Ok(read - into_body);
        }
    }
}

/// A request body's API key, once its first two bytes are in.
fn api_of(body: &[u8]) -> Option<i16> {
    body.get(..2).map(|key| i16::from_be_bytes([key[0], key[1]]))
}

/// How far to read past a frame's size, after a frame of `size` bytes of API `api`:
/// like a frame of that size, with room for some more, except after a produce: its
/// header and little else, so that record bytes come straight into the body.
fn ahead(api: i16, size: usize) -> usize {
    match api {
        PRODUCE => PRODUCE_CARRY,
        _ => (size + 4 + 64).clamp(PRODUCE_CARRY, CARRY),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn frame(api: i16, body_len: usize, fill: u8) -> Vec<u8> {
        let mut out = (body_len as i32).to_be_bytes().to_vec();
        out.extend_from_slice(&api.to_be_bytes());
        out.extend(std::iter::repeat_n(fill, body_len - 2));
        out
    }

    /// Reads frames with `Frames` (on an executor of its own) from a peer that `write`
    /// drives on its thread, until the peer closes: each body (or the error a body
    /// ended in, then no more), and the produce bytes copied.
    fn read_all(write: impl FnOnce(&mut std::net::TcpStream) + Send + 'static) -> (Vec<io::Result<Vec<u8>>>, u64) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let writer = std::thread::spawn(move || write(&mut std::net::TcpStream::connect(address).unwrap()));
        let (stream, _) = listener.accept().unwrap();
        stream.set_nonblocking(true).unwrap();
        let socket = socket2::Socket::from(stream);
        let read = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .spawn(move || async move {
                let mut frames = Frames::new(&socket);
                let mut bodies = Vec::new();
                while let Ok(size) = frames.size().await {
                    let body = frames.body(size as usize).await;
                    let failed = body.is_err();
                    bodies.push(body);
                    if failed {
                        break;
                    }
                }
                (bodies, frames.produce_copied)
            })
            .unwrap()
            .join()
            .unwrap();
        writer.join().unwrap();
        read
    }

    /// Frames written in pieces, pipelined, and larger than the carry, each read
    /// whole and in order; the peer's close reads as an error between frames.
    #[test]
    fn frames_come_whole_however_the_bytes_arrive() {
        let sizes = [(1i16, 10usize), (PRODUCE, 70_000), (1, 300), (1, 2), (PRODUCE, 40), (3, 5_000), (1, 511)];
        let (read, copied) = read_all(move |stream| {
            let mut all = Vec::new();
            for (i, &(api, len)) in sizes.iter().enumerate() {
                all.extend(frame(api, len, i as u8));
            }
            // Byte by byte, then in odd pieces, then everything at once.
            for byte in &all[..50] {
                stream.write_all(std::slice::from_ref(byte)).unwrap();
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            for piece in all[50..].chunks(997) {
                stream.write_all(piece).unwrap();
            }
            stream.write_all(&all).unwrap();
        });
        assert_eq!(read.len(), 2 * sizes.len());
        for (i, body) in read.iter().enumerate() {
            let body = body.as_ref().unwrap();
            let (api, len) = sizes[i % sizes.len()];
            assert_eq!(body.len(), len, "frame {i}");
            assert_eq!(i16::from_be_bytes([body[0], body[1]]), api, "frame {i}");
            assert!(body[2..].iter().all(|&b| b == (i % sizes.len()) as u8), "frame {i}");
        }
        // Produce bodies copied from the carry: at most its read of each.
        assert!(copied <= 4 * CARRY as u64, "{copied} bytes copied");
    }

    /// Produce requests pipelined back to back: each body's read carries only the
    /// next one's size and the fields before its records, so no record byte is copied
    /// after the first (a read of a full `CARRY` ahead would copy about 2 KiB of each,
    /// one of 64 bytes 38 bytes).
    #[test]
    fn pipelined_produce_bodies_are_not_copied() {
        let (read, copied) = read_all(|stream| {
            let all: Vec<u8> = (0..20).flat_map(|i| frame(PRODUCE, 10_000, i)).collect();
            stream.write_all(&all).unwrap();
        });
        assert_eq!(read.len(), 20);
        assert!(read.iter().all(|body| body.as_ref().unwrap().len() == 10_000));
        // The first read knows nothing of the connection yet: at most `ahead(-1, 0)`.
        let bound = (ahead(-1, 0) - 4 - PRODUCE_RECORDS_AT_LEAST) as u64;
        assert!(copied <= bound, "{copied} bytes copied, more than {bound}");
    }

    /// `PRODUCE_RECORDS_AT_LEAST` is no more than the bytes before the records of the
    /// shortest produce request of every version the codec knows (one topic with an
    /// empty name or topic id, one partition, null client and transactional ids), and
    /// equal to it for some: a carry of that much after the size holds no record byte.
    #[test]
    fn no_produce_request_has_records_before_the_carry_ends() {
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        use kafka_protocol::messages::{ApiKey, ProduceRequest, RequestHeader};
        use kafka_protocol::protocol::{Encodable, HeaderVersion, Message};
        let records = bytes::Bytes::from_static(b"RECORDS-MARKER");
        let mut shortest = usize::MAX;
        let versions = ProduceRequest::VERSIONS;
        for version in versions.min..=versions.max {
            let mut body = bytes::BytesMut::new();
            RequestHeader::default()
                .with_request_api_key(ApiKey::Produce as i16)
                .with_request_api_version(version)
                .encode(&mut body, ProduceRequest::header_version(version))
                .unwrap();
            let partition = PartitionProduceData::default().with_records(Some(records.clone()));
            let topic = TopicProduceData::default().with_partition_data(vec![partition]);
            ProduceRequest::default().with_acks(1).with_topic_data(vec![topic]).encode(&mut body, version).unwrap();
            let at = body.windows(records.len()).position(|w| w == &records[..]).expect("the records are encoded");
            assert!(at >= PRODUCE_RECORDS_AT_LEAST, "version {version}: records at {at}");
            shortest = shortest.min(at);
        }
        assert_eq!(shortest, PRODUCE_RECORDS_AT_LEAST, "the bound is not tight");
    }

    /// A peer that closes inside a frame's body: the body is an error (the server
    /// closes the connection as truncated), not a short frame.
    #[test]
    fn a_body_cut_short_is_an_error() {
        let (read, _) = read_all(|stream| {
            let mut bytes = frame(1, 3_000, 7);
            bytes.truncate(1_000);
            stream.write_all(&bytes).unwrap();
        });
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].as_ref().unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }
}
