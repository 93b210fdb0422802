//! The controller listener: the connections other voters dial to this one (raft
//! messages for the quorum loop, controller requests forwarded to the active
//! controller, the answers to this node's forwards) and those observers dial to follow
//! the metadata log (`transport.rs` has the frames and the outgoing side).

use std::rc::Rc;

use futures_lite::AsyncReadExt;
use glommio::channels::local_channel::{self, LocalSender};
use protobuf::Message as _;
use raft::prelude::Message;

use super::controller::ControllerRequest;
use super::host::Host;
use super::log::Input;
use super::transport::{
    accept, frame, invalid, read_frame, write_frame, Forwarded, DESCRIBE, FETCH, FETCH_REPLY, FORWARD, FORWARD_REPLY,
    HELLO, OBSERVE, OBSERVER_FORWARDS, QUEUE, RAFT, RECONNECT,
};
use crate::peer::PeerStream;

/// Accepts the other voters' connections on the controller listener; on an SSL one,
/// each completes a TLS handshake with a certificate the trust store signed first.
pub async fn serve<H: Host>(host: H, listener: glommio::net::TcpListener, cluster_id: String) {
    loop {
        match listener.accept().await {
            Ok(tcp) => {
                let (host, cluster_id) = (host.clone(), cluster_id.clone());
                glommio::spawn_local(async move {
                    let stream = match accept(host.security(), tcp).await {
                        Ok(stream) => stream,
                        Err(e) => {
                            tracing::warn!(target: "skein::net", error = %e, "controller connection refused at the TLS handshake");
                            return;
                        }
                    };
                    if let Err(e) = read_from(&host, stream, &cluster_id).await {
                        tracing::debug!(target: "skein::net", error = %e, "controller connection closed");
                    }
                })
                .detach();
            }
            Err(e) => {
                tracing::warn!(target: "skein::net", error = %e, "controller listener accept failed");
                glommio::timer::sleep(RECONNECT).await;
            }
        }
    }
}

/// Reads one peer's frames: raft messages go to the quorum loop, forwarded requests
/// run as tasks of their own, answers complete this node's forwards.
async fn read_from<H: Host>(host: &H, mut stream: PeerStream, cluster_id: &str) -> std::io::Result<()> {
    let controller = host.controller().ok_or_else(|| invalid("no controller on this shard"))?;
    let (kind, hello) = read_frame(&mut stream).await?;
    if kind == DESCRIBE {
        write_frame(&mut stream, &super::bootstrap::answer(host)).await?;
        return Ok(());
    }
    let (from, cluster) = hello.split_first_chunk::<8>().ok_or_else(|| invalid("short hello"))?;
    let from = u64::from_be_bytes(*from);
    if !matches!(kind, HELLO | OBSERVE) || cluster != cluster_id.as_bytes() {
        tracing::warn!(target: "skein::net", from = from.wrapping_sub(1), cluster = %String::from_utf8_lossy(cluster), "controller connection from another cluster refused");
        return Err(invalid("hello of another cluster"));
    }
    if kind == OBSERVE {
        return serve_observer(host, stream, from).await;
    }
    loop {
        let (kind, payload) = read_frame(&mut stream).await?;
        match kind {
            RAFT => {
                let message = Message::parse_from_bytes(&payload).map_err(|_| invalid("raft message"))?;
                if message.from != from {
                    return Err(invalid("raft message from another sender"));
                }
                controller.input(Input::Raft(Box::new(message))).await;
            }
            FORWARD | FORWARD_REPLY => {
                let (id, body) = payload.split_first_chunk::<8>().ok_or_else(|| invalid("short forward"))?;
                let id = u64::from_be_bytes(*id);
                if kind == FORWARD_REPLY {
                    let answer: Forwarded = serde_json::from_slice(body).map_err(|_| invalid("forward reply"))?;
                    controller.forward_done(id, answer);
                    continue;
                }
                let request: ControllerRequest = serde_json::from_slice(body).map_err(|_| invalid("forward"))?;
                let host = host.clone();
                glommio::spawn_local(async move {
                    let Some(controller) = host.controller() else { return };
                    let answer = controller.handle_here(&host, request).await;
                    if let Some(peers) = controller.peers() {
                        peers.answer(from, id, &answer);
                    }
                })
                .detach();
            }
            _ => return Err(invalid("unknown frame kind")),
        }
    }
}

/// Serves observer `from` (a quorum id) on its connection: one fetch at a time,
/// answered with what follows the index it names, and its forwarded controller
/// requests, run here (this voter forwards them on to the active controller) and
/// answered with the index that holds their records.
async fn serve_observer<H: Host>(host: &H, stream: PeerStream, from: u64) -> std::io::Result<()> {
    let node = from.wrapping_sub(1) as i32;
    tracing::debug!(target: "skein::net", observer = node, "observer connected");
    let (mut reader, mut writer) = futures_lite::io::split(stream);
    let (replies, outgoing) = local_channel::new_bounded::<Vec<u8>>(QUEUE);
    let replies = Rc::new(replies);
    let writing = glommio::spawn_local(async move {
        while let Some(bytes) = outgoing.recv().await {
            if write_frame(&mut writer, &bytes).await.is_err() {
                return;
            }
        }
    });
    let ended = serve_observer_requests(host, &mut reader, node, &replies).await;
    // The socket closes now, not once the requests in flight are answered.
    writing.cancel().await;
    ended
}

async fn serve_observer_requests<H: Host>(
    host: &H,
    reader: &mut (impl AsyncReadExt + Unpin),
    node: i32,
    replies: &Rc<LocalSender<Vec<u8>>>,
) -> std::io::Result<()> {
    // Fetches in flight (at most one), and forwards in flight.
    let in_flight = Rc::new((std::cell::Cell::new(false), std::cell::Cell::new(0usize)));
    loop {
        let (kind, payload) = read_frame(reader).await?;
        match kind {
            FETCH => {
                let after = payload.first_chunk::<8>().map(|b| u64::from_be_bytes(*b));
                let Some(after) = after.filter(|_| payload.len() == 8 && !in_flight.0.replace(true)) else {
                    return Err(invalid("fetch while another is in flight, or malformed"));
                };
                let (host, replies, in_flight) = (host.clone(), replies.clone(), in_flight.clone());
                glommio::spawn_local(async move {
                    let Some(controller) = host.controller() else { return };
                    let Some(feed) = controller.feed(node, after).await else { return };
                    in_flight.0.set(false);
                    let _ = replies.send(frame(FETCH_REPLY, &feed.encode())).await;
                })
                .detach();
            }
            FORWARD => {
                let (id, body) = payload.split_first_chunk::<8>().ok_or_else(|| invalid("short forward"))?;
                let id = u64::from_be_bytes(*id);
                let request: ControllerRequest = serde_json::from_slice(body).map_err(|_| invalid("forward"))?;
                if in_flight.1.get() >= OBSERVER_FORWARDS {
                    return Err(invalid("too many forwarded requests in flight"));
                }
                in_flight.1.set(in_flight.1.get() + 1);
                let (host, replies, in_flight) = (host.clone(), replies.clone(), in_flight.clone());
                glommio::spawn_local(async move {
                    let Some(controller) = host.controller() else { return };
                    let answer = controller.handle_indexed(&host, request).await;
                    in_flight.1.set(in_flight.1.get() - 1);
                    let mut payload = id.to_be_bytes().to_vec();
                    payload.extend(serde_json::to_vec(&answer).expect("controller replies always serialise"));
                    let _ = replies.send(frame(FORWARD_REPLY, &payload)).await;
                })
                .detach();
            }
            _ => return Err(invalid("unknown frame kind from an observer")),
        }
    }
}
