//! The controller quorum between nodes, on shard 0 of each voter: raft messages, and
//! controller requests a node forwards to the active controller (as Kafka brokers
//! forward CreateTopics and the like to theirs).
//!
//! Each node dials every other voter's controller listener and sends all it has for
//! that voter over that one connection; what it receives comes in on the
//! connections the others dialed. A connection starts with a hello naming the sender
//! and the cluster id, then carries frames: a 4-byte length, a kind, the payload.
//! A broker-only node (an observer) dials one voter and says so in its hello
//! (`OBSERVE`): on that one connection it asks for what follows the log index it
//! holds (`FETCH`, answered with a `Feed` once there is something or after a long
//! poll) and forwards its controller requests, answered on the same connection.
//! Raft tolerates lost messages, so a full queue or a broken connection drops them
//! and tells raft the peer is unreachable; a snapshot's fate is reported to raft,
//! which holds that peer's appends until it knows.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use protobuf::Message as _;
use raft::prelude::{Message, MessageType};

use super::decide::{ControllerReply, ControllerRequest};
use super::log::Input;
use super::Refusal;
use crate::limits::TLS_HANDSHAKE_TIMEOUT;
use crate::peer::PeerStream;
use crate::security::Security;

pub(super) const HELLO: u8 = 0;
pub(super) const RAFT: u8 = 1;
pub(super) const FORWARD: u8 = 2;
pub(super) const FORWARD_REPLY: u8 = 3;
pub(super) const OBSERVE: u8 = 4;
pub(super) const FETCH: u8 = 5;
pub(super) const FETCH_REPLY: u8 = 6;
/// The first frame of a node that looks for the quorum (`bootstrap.rs`), instead of a
/// hello; answered with `DESCRIBE_REPLY`, then the connection closes.
pub(super) const DESCRIBE: u8 = 7;
pub(super) const DESCRIBE_REPLY: u8 = 8;
/// Forwarded requests an observer may have in flight on its connection.
pub(super) const OBSERVER_FORWARDS: usize = 256;
/// The largest frame: a snapshot of the metadata image travels whole.
const FRAME_MAX: usize = 256 << 20;
/// Frames queued per peer before raft messages are dropped.
pub(super) const QUEUE: usize = 1024;
pub(super) const RECONNECT: Duration = Duration::from_millis(200);
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A forwarded request's answer: the reply and the log index that holds its records
/// (the forwarder answers its client once it applied that far).
pub type Forwarded = Result<(ControllerReply, u64), Refusal>;

struct Outgoing {
    bytes: Vec<u8>,
    /// Raft waits to hear whether a snapshot arrived.
    snapshot: bool,
}

/// The queues to the other members of the quorum. The members change with the
/// quorum's configuration (`reconcile`): a writer starts for each new member and
/// ends when its queue is dropped.
pub struct Peers {
    me: u64,
    hello: Vec<u8>,
    inputs: Rc<LocalSender<Input>>,
    security: Arc<Security>,
    /// Where the voters of `--controller-voters` listen, by quorum id.
    configured: HashMap<u64, SocketAddr>,
    queues: RefCell<HashMap<u64, (SocketAddr, LocalSender<Outgoing>)>>,
    /// The queues of members just taken out, kept `LEAVING` for the answers to their
    /// last forwarded requests (a controller that asked for its own removal hears
    /// that it is done); nothing else goes to them.
    leaving: RefCell<HashMap<u64, (std::time::Instant, LocalSender<Outgoing>)>>,
}

/// How long a member taken out of the quorum still gets answers.
const LEAVING: Duration = Duration::from_secs(10);

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peers").field("peers", &self.queues.borrow().keys().collect::<Vec<_>>()).finish()
    }
}

pub(super) fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + payload.len());
    out.extend_from_slice(&((payload.len() + 1) as u32).to_be_bytes());
    out.push(kind);
    out.extend_from_slice(payload);
    out
}

impl Peers {
    /// Starts a writer for each voter other than `me` (quorum ids with their
    /// controller addresses); their reports go to the quorum loop through `inputs`.
    pub fn start(
        me: u64,
        cluster_id: &str,
        voters: &[(u64, SocketAddr)],
        inputs: &Rc<LocalSender<Input>>,
        security: &Arc<Security>,
    ) -> Peers {
        let peers = Peers {
            me,
            hello: frame(HELLO, &[&me.to_be_bytes()[..], cluster_id.as_bytes()].concat()),
            inputs: inputs.clone(),
            security: security.clone(),
            configured: voters.iter().copied().collect(),
            queues: RefCell::new(HashMap::new()),
            leaving: RefCell::new(HashMap::new()),
        };
        for &(peer, address) in voters {
            peers.connect(peer, address);
        }
        peers
    }

    fn connect(&self, peer: u64, address: SocketAddr) {
        if peer == self.me {
            return;
        }
        let (queue, receiver) = local_channel::new_bounded(QUEUE);
        self.queues.borrow_mut().insert(peer, (address, queue));
        let (hello, inputs, security) = (self.hello.clone(), self.inputs.clone(), self.security.clone());
        glommio::spawn_local(write_to(peer, address, hello, receiver, inputs, security)).detach();
    }

    /// Follows the quorum's configuration: a writer for each of `members` (quorum
    /// ids) at its address in `image` (a member added with AddRaftVoter) or in
    /// `--controller-voters`; the writers of others end. A member with no known
    /// address is left out until the image names one.
    pub fn reconcile(&self, members: &[u64], image: &super::MetadataImage) {
        let address = |peer: u64| -> Option<SocketAddr> {
            match image.quorum.get(&((peer - 1) as i32)) {
                Some(member) => member.address(),
                None => self.configured.get(&peer).copied(),
            }
        };
        let wanted: HashMap<u64, SocketAddr> =
            members.iter().filter(|&&m| m != self.me).filter_map(|&m| Some((m, address(m)?))).collect();
        let stale: Vec<u64> = self
            .queues
            .borrow()
            .iter()
            .filter(|(peer, (at, _))| wanted.get(peer) != Some(at))
            .map(|(peer, _)| *peer)
            .collect();
        let now = std::time::Instant::now();
        // Dropping a queue ends its writer.
        self.leaving.borrow_mut().retain(|_, (since, _)| now.duration_since(*since) < LEAVING);
        for peer in stale {
            if let Some((_, queue)) = self.queues.borrow_mut().remove(&peer) {
                self.leaving.borrow_mut().insert(peer, (now, queue));
            }
            tracing::info!(target: "skein::net", peer = peer - 1, "no longer a quorum member here: its connection closes");
        }
        for (peer, at) in wanted {
            if !self.queues.borrow().contains_key(&peer) {
                self.leaving.borrow_mut().remove(&peer);
                tracing::info!(target: "skein::net", peer = peer - 1, address = %at, "connecting to a new quorum member");
                self.connect(peer, at);
            }
        }
    }

    /// Queues a raft message; false when it was dropped (the peer's queue is full).
    pub fn send(&self, message: &Message) -> bool {
        let queues = self.queues.borrow();
        let Some((_, queue)) = queues.get(&message.to) else { return false };
        let bytes = frame(RAFT, &message.write_to_bytes().expect("raft messages always encode"));
        let snapshot = message.get_msg_type() == MessageType::MsgSnapshot;
        queue.try_send(Outgoing { bytes, snapshot }).is_ok()
    }

    /// Queues a controller request for the active controller `to`.
    pub fn forward(&self, to: u64, id: u64, request: &ControllerRequest) -> bool {
        let queues = self.queues.borrow();
        let Some((_, queue)) = queues.get(&to) else { return false };
        let mut payload = id.to_be_bytes().to_vec();
        payload.extend(serde_json::to_vec(request).expect("controller requests always serialise"));
        queue.try_send(Outgoing { bytes: frame(FORWARD, &payload), snapshot: false }).is_ok()
    }

    /// Queues the answer to request `id` that `to` forwarded.
    pub(super) fn answer(&self, to: u64, id: u64, answer: &Forwarded) -> bool {
        let (queues, leaving) = (self.queues.borrow(), self.leaving.borrow());
        let queue = match queues.get(&to) {
            Some((_, queue)) => queue,
            None => match leaving.get(&to) {
                Some((since, queue)) if since.elapsed() < LEAVING => queue,
                _ => return false,
            },
        };
        let mut payload = id.to_be_bytes().to_vec();
        payload.extend(serde_json::to_vec(answer).expect("controller replies always serialise"));
        queue.try_send(Outgoing { bytes: frame(FORWARD_REPLY, &payload), snapshot: false }).is_ok()
    }
}

/// Sends everything queued for `peer`, reconnecting whenever the connection breaks.
async fn write_to(
    peer: u64,
    address: SocketAddr,
    hello: Vec<u8>,
    queue: LocalReceiver<Outgoing>,
    inputs: Rc<LocalSender<Input>>,
    security: Arc<Security>,
) {
    loop {
        let mut stream = match dial(&security, address).await {
            Ok(stream) => stream,
            Err(e) => {
                tracing::debug!(target: "skein::net", peer = peer - 1, %address, error = %e, "cannot reach a controller");
                // Nobody to send to: what waits is dropped, raft resends.
                let _ = inputs.send(Input::Unreachable(peer)).await;
                while let Some(Some(dropped)) = futures_lite::future::poll_once(queue.recv()).await {
                    if dropped.snapshot {
                        let _ = inputs.send(Input::SnapshotSent(peer, false)).await;
                    }
                }
                glommio::timer::sleep(RECONNECT).await;
                continue;
            }
        };
        if write_frame(&mut stream, &hello).await.is_err() {
            continue;
        }
        tracing::debug!(target: "skein::net", peer = peer - 1, %address, "controller connection open");
        loop {
            // The controller is gone: so is this writer.
            let Some(outgoing) = queue.recv().await else { return };
            let written = write_frame(&mut stream, &outgoing.bytes).await;
            if outgoing.snapshot {
                let _ = inputs.send(Input::SnapshotSent(peer, written.is_ok())).await;
            }
            if written.is_err() {
                let _ = inputs.send(Input::Unreachable(peer)).await;
                break;
            }
        }
    }
}

/// Opens a connection to another node's controller listener at `address`, within
/// `CONNECT_TIMEOUT`: TLS with this node's certificate when the controller listener
/// is SSL, the other node's certificate checked against the trust store and its
/// address.
///
/// # Errors
/// The connection's or the handshake's error, or `TimedOut`.
pub(super) async fn dial(security: &Security, address: SocketAddr) -> std::io::Result<PeerStream> {
    let connecting = async {
        let tcp = glommio::net::TcpStream::connect(address).await?;
        match security.controller_protocol.tls() {
            false => Ok(PeerStream::plain(tcp)),
            true => {
                let name = rustls::pki_types::ServerName::IpAddress(address.ip().into());
                PeerStream::tls_client(crate::peer::peer_tls(security)?, name, tcp).await
            }
        }
    };
    let timeout = async {
        glommio::timer::sleep(CONNECT_TIMEOUT).await;
        Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "connecting to a controller timed out"))
    };
    futures_lite::future::or(connecting, timeout).await
}

/// Writes a frame whole, flushed (TLS holds records until then).
pub(super) async fn write_frame(stream: &mut (impl AsyncWriteExt + Unpin), bytes: &[u8]) -> std::io::Result<()> {
    stream.write_all(bytes).await?;
    stream.flush().await
}

/// A connection accepted on the controller listener, secured as the listener is.
pub(super) async fn accept(security: &Security, tcp: glommio::net::TcpStream) -> std::io::Result<PeerStream> {
    if !security.controller_protocol.tls() {
        return Ok(PeerStream::plain(tcp));
    }
    let config = security.tls.as_ref().and_then(|tls| tls.controller_config()).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "an SSL controller listener needs --ssl-truststore-pem")
    })?;
    let handshake = PeerStream::tls_server(config, tcp);
    let timeout = async {
        glommio::timer::sleep(TLS_HANDSHAKE_TIMEOUT).await;
        Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the TLS handshake timed out"))
    };
    futures_lite::future::or(handshake, timeout).await
}

pub(super) async fn read_frame(stream: &mut (impl AsyncReadExt + Unpin)) -> std::io::Result<(u8, Vec<u8>)> {
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).await?;
    let length = u32::from_be_bytes(length) as usize;
    if length == 0 || length > FRAME_MAX {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("frame of {length} bytes")));
    }
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await?;
    let kind = body.remove(0);
    Ok((kind, body))
}

pub(super) fn invalid(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

/// The observer's current connection, for its forwarded requests.
#[derive(Default)]
pub struct Link {
    pub(super) queue: RefCell<Option<Rc<LocalSender<Vec<u8>>>>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("connected", &self.queue.borrow().is_some()).finish()
    }
}

impl Link {
    /// Queues controller request `id` for the voter this node follows; false when
    /// there is no connection (the caller answers NOT_CONTROLLER and is retried).
    pub fn forward(&self, id: u64, request: &ControllerRequest) -> bool {
        let Some(queue) = self.queue.borrow().clone() else { return false };
        let mut payload = id.to_be_bytes().to_vec();
        payload.extend(serde_json::to_vec(request).expect("controller requests always serialise"));
        queue.try_send(frame(FORWARD, &payload)).is_ok()
    }
}
