//! A broker-only node (`--roles broker`, not among `--controller-voters`) follows the
//! metadata log as an observer, as Kafka's brokers fetch `__cluster_metadata`
//! without voting. It dials one voter's controller listener (the active controller
//! when it knows it), asks for what follows the index it holds, applies the committed
//! entries (or the snapshot it is sent) to its image and publishes it to every shard
//! through the same applier a voter uses. Its controller requests (registration,
//! heartbeats, AlterPartition, CreateTopics...) go over the same connection.
//!
//! Before the shards start, `catch_up` (blocking, for the main thread) fetches the
//! image as the quorum holds it now, so that the node opens and sweeps its partitions
//! against the cluster's metadata rather than an empty image.

use std::io::Write;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use glommio::channels::local_channel;
use skein_replication::quorum::Feed;

use super::host::Host;
use super::log::{decode_image, quorum_id, Applied, Proposal};
use super::transport::{
    frame, invalid, read_frame, CONNECT_TIMEOUT, FETCH, FETCH_REPLY, FORWARD_REPLY, OBSERVE, QUEUE, RECONNECT,
};
use super::MetadataImage;
use crate::security::Security;

/// A voter that answers nothing for this long (its fetches are answered within a
/// second even when nothing is new) is left for another.
const SILENT: Duration = Duration::from_secs(5);

fn hello(node: i32, cluster_id: &str) -> Vec<u8> {
    frame(OBSERVE, &[&quorum_id(node).to_be_bytes()[..], cluster_id.as_bytes()].concat())
}

/// Applies `feed` to `image`; returns whether anything changed.
fn apply(image: &mut MetadataImage, applied: &mut u64, feed: Feed) -> Result<bool, String> {
    let mut changed = false;
    if let Some((index, data)) = feed.snapshot {
        *image = decode_image(&data)?;
        *applied = index;
        changed = true;
    }
    for entry in feed.entries.into_iter().filter(|e| e.index > *applied) {
        let proposal: Proposal = serde_json::from_slice(&entry.data)
            .map_err(|e| format!("metadata log entry {} does not parse: {e}", entry.index))?;
        image.apply(&proposal.records);
        changed = true;
    }
    if feed.upto > *applied {
        *applied = feed.upto;
        changed = true;
    }
    Ok(changed)
}

/// Fetches the metadata image from the voters, trying each in turn, until it holds
/// what one of them had committed when it first answered. Blocking: for the main
/// thread, before the shards start. Waits (logging) while no voter answers, until
/// `stop` is raised.
///
/// # Errors
/// A message when a voter's answer cannot be applied, or on `stop`.
pub fn catch_up(
    node: i32,
    cluster_id: &str,
    voters: &[(i32, SocketAddr)],
    shards: usize,
    stop: &Arc<AtomicBool>,
    security: &Security,
) -> Result<(MetadataImage, u64), String> {
    let mut attempt = 0usize;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err("stopped before the metadata log was reached".into());
        }
        let (voter, address) = voters[attempt % voters.len()];
        attempt += 1;
        match fetch_all(node, cluster_id, address, security) {
            Ok((mut image, applied)) => {
                image.place_within(shards);
                tracing::info!(target: "skein::net", voter, index = applied, "metadata caught up from the quorum");
                return Ok((image, applied));
            }
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(format!("controller {voter} at {address}: {e}"));
            }
            Err(e) => {
                if attempt.is_multiple_of(voters.len()) {
                    tracing::warn!(target: "skein::net", error = %e, "no controller voter answers yet; retrying");
                }
                std::thread::sleep(RECONNECT);
            }
        }
    }
}

/// A blocking connection to a voter's controller listener, secured as it is.
pub(super) trait Connection: std::io::Read + std::io::Write {}
impl<T: std::io::Read + std::io::Write> Connection for T {}

/// Dials the controller listener at `address` (TLS when the quorum's listeners use
/// it), with `SILENT` as the read and write timeouts. Blocking.
pub(super) fn connect_blocking(address: SocketAddr, security: &Security) -> std::io::Result<Box<dyn Connection>> {
    let tcp = std::net::TcpStream::connect_timeout(&address, CONNECT_TIMEOUT)?;
    tcp.set_read_timeout(Some(SILENT))?;
    tcp.set_write_timeout(Some(SILENT))?;
    tcp.set_nodelay(true)?;
    Ok(match security.controller_protocol.tls() {
        false => Box::new(tcp),
        true => {
            let name = rustls::pki_types::ServerName::IpAddress(address.ip().into());
            let tls = rustls::ClientConnection::new(crate::peer::peer_tls(security)?, name)
                .map_err(|e| std::io::Error::other(format!("TLS: {e}")))?;
            Box::new(rustls::StreamOwned::new(tls, tcp))
        }
    })
}

fn fetch_all(
    node: i32,
    cluster_id: &str,
    address: SocketAddr,
    security: &Security,
) -> std::io::Result<(MetadataImage, u64)> {
    let mut stream = connect_blocking(address, security)?;
    stream.write_all(&hello(node, cluster_id))?;
    let (mut image, mut applied) = (MetadataImage::default(), 0u64);
    let mut target = None;
    loop {
        stream.write_all(&frame(FETCH, &applied.to_be_bytes()))?;
        stream.flush()?;
        // The transport's frame reader, over the blocking socket.
        let mut reader = futures_lite::io::AssertAsync::new(&mut stream);
        let (kind, payload) = futures_lite::future::block_on(read_frame(&mut reader))?;
        if kind != FETCH_REPLY {
            return Err(invalid("unexpected frame from the controller"));
        }
        let feed = Feed::decode(&payload).map_err(|e| invalid(&e))?;
        let committed = *target.get_or_insert(feed.committed);
        apply(&mut image, &mut applied, feed).map_err(|e| invalid(&e))?;
        if applied >= committed {
            return Ok((image, applied));
        }
    }
}

/// Follows the metadata log on shard 0 of a broker-only node, from `image` at index
/// `applied` (what `catch_up` fetched), for as long as the shard runs.
pub async fn run<H: Host>(host: H, mut image: MetadataImage, mut applied: u64) {
    let Some(controller) = host.controller() else { return };
    let Some(link) = controller.observer_link() else { return };
    let (applier, images) = local_channel::new_bounded(64);
    glommio::spawn_local(super::quorum::run_applier(host.clone(), images)).detach();
    controller.set_applied(applied);
    let voters = host.voters().to_vec();
    let hello = hello(host.local().node, host.cluster_id());
    let mut next = 0usize;
    loop {
        // The active controller when known (its answers are the freshest), else the
        // next voter in turn.
        let known = controller.active().and_then(|leader| voters.iter().find(|(id, _)| *id == leader));
        let &(voter, address) = known.unwrap_or_else(|| &voters[next % voters.len()]);
        next += 1;
        let Ok(stream) = super::transport::dial(host.security(), address).await else {
            controller.set_leader(false, None);
            glommio::timer::sleep(RECONNECT).await;
            continue;
        };
        let (mut reader, mut writer) = futures_lite::io::split(stream);
        let (queue, outgoing) = local_channel::new_bounded::<Vec<u8>>(QUEUE);
        if queue.try_send(hello.clone()).is_err() || queue.try_send(frame(FETCH, &applied.to_be_bytes())).is_err() {
            continue;
        }
        let queue = Rc::new(queue);
        *link.queue.borrow_mut() = Some(queue.clone());
        let writing = glommio::spawn_local(async move {
            while let Some(bytes) = outgoing.recv().await {
                if super::transport::write_frame(&mut writer, &bytes).await.is_err() {
                    return;
                }
            }
        });
        tracing::debug!(target: "skein::net", voter, %address, "following the metadata log");
        let ended = loop {
            let read = futures_lite::future::or(async { Some(read_frame(&mut reader).await) }, async {
                glommio::timer::sleep(SILENT).await;
                None
            })
            .await;
            let (kind, payload) = match read {
                Some(Ok(frame)) => frame,
                Some(Err(e)) => break e.to_string(),
                None => break format!("no answer in {SILENT:?}"),
            };
            match kind {
                FETCH_REPLY => {
                    let feed = match Feed::decode(&payload) {
                        Ok(feed) => feed,
                        Err(e) => break e,
                    };
                    let leader = feed.leader;
                    match apply(&mut image, &mut applied, feed) {
                        Ok(true) => {
                            image.place_within(host.local().shards);
                            let next = Applied { image: Arc::new(image.clone()), index: applied, answered: Vec::new() };
                            let _ = applier.send(next).await;
                        }
                        Ok(false) => {}
                        Err(e) => break e,
                    }
                    controller.set_leader(false, leader);
                    let active = leader.map_or(-1, |l| (l - 1) as i32);
                    host.active_controller().store(active, Ordering::Relaxed);
                    // Follow the active controller once it is known and is not this voter.
                    if leader.is_some_and(|l| l != quorum_id(voter) && voters.iter().any(|(id, _)| quorum_id(*id) == l))
                    {
                        break "the active controller is another voter".into();
                    }
                    if queue.try_send(frame(FETCH, &applied.to_be_bytes())).is_err() {
                        break "the connection's queue is full".into();
                    }
                }
                FORWARD_REPLY => {
                    let Some((id, body)) = payload.split_first_chunk::<8>() else { break "short forward reply".into() };
                    match serde_json::from_slice(body) {
                        Ok(answer) => controller.forward_done(u64::from_be_bytes(*id), answer),
                        Err(_) => break "malformed forward reply".into(),
                    }
                }
                _ => break "unknown frame kind".into(),
            }
        };
        tracing::debug!(target: "skein::net", voter, reason = %ended, "metadata connection closed");
        link.queue.borrow_mut().take();
        drop(queue);
        writing.cancel().await;
        controller.forwards_lost();
    }
}
