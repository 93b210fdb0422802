//! The metadata log: the controller's decisions (`MetadataRecord`s) as entries of the
//! raft-rs quorum (`skein_replication::quorum`), and the loop on shard 0 that drives
//! it. A single node is a quorum of one voter, itself.
//!
//! `open` (main thread, before the shards start) recovers the journal and rebuilds
//! the image from its snapshot and the entries its durable commit covers. `run` then
//! owns the quorum: it ticks every 100 ms, takes proposals from `Controller::handle`,
//! does raft's work in order (send, install, apply, persist with one fdatasync,
//! advance), applies committed entries to the image and publishes it to every shard,
//! and only then completes the proposals. Every 1,000 entries it folds the log into a
//! snapshot of the image (rkyv, validated when read).

use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use glommio::channels::local_channel::{LocalReceiver, LocalSender};
use serde::{Deserialize, Serialize};
use skein_replication::quorum::{Committed, Durable, Feed, Journal, Quorum, QuorumConfig, Work};

use super::{MetadataImage, MetadataRecord};
use crate::errors::code;
use crate::shard::Shard;

/// The quorum's clock tick.
pub const TICK: Duration = Duration::from_millis(100);
/// Entries applied past the snapshot before the log is folded into a new one.
pub const COMPACT_EVERY: u64 = 1000;

/// Entry data served to an observer in one answer.
const FEED_MAX_BYTES: usize = 4 << 20;

/// A broker's id in the quorum: raft-rs reserves 0, Kafka allows node id 0.
pub fn quorum_id(node: i32) -> u64 {
    node as u64 + 1
}

/// The cluster id every voter derives from the same `voters` (ids and addresses, in
/// any order): 22 characters, as Kafka's base64 cluster ids.
pub fn cluster_id_of(voters: &[(i32, std::net::SocketAddr)]) -> String {
    let mut sorted = voters.to_vec();
    sorted.sort();
    let text: String = sorted.iter().map(|(id, address)| format!("{id}@{address},")).collect();
    let mut bytes = Vec::with_capacity(16);
    for seed in 0u32..4 {
        bytes.extend_from_slice(&crc32c::crc32c_append(seed, text.as_bytes()).to_be_bytes());
    }
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// One entry's data: the records a controller decided, and which of its proposals
/// they answer.
#[derive(Debug, Serialize, Deserialize)]
pub struct Proposal {
    pub node: u64,
    pub id: u64,
    pub records: Vec<MetadataRecord>,
}

/// The metadata log as recovered on the main thread.
pub struct Opened {
    pub quorum: Quorum,
    pub journal: Journal,
    pub image: MetadataImage,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened").field("quorum", &self.quorum).field("version", &self.image.version).finish()
    }
}

/// What starts a snapshot of the image in rkyv's form.
const RKYV_SNAPSHOT: &[u8; 8] = b"SKEINRK5";

/// A snapshot of `image` (the data of the quorum's snapshots): `RKYV_SNAPSHOT`, the
/// CRC-32C of the archive (a cut or damaged archive can still validate as rkyv), then
/// rkyv's archive.
pub fn encode_image(image: &MetadataImage) -> Vec<u8> {
    let archive = rkyv::to_bytes::<rkyv::rancor::Error>(image).expect("a metadata image always serialises");
    let crc = crc32c::crc32c(&archive).to_be_bytes();
    [&RKYV_SNAPSHOT[..], &crc[..], &archive[..]].concat()
}

/// The image a snapshot holds, checked (its checksum, then rkyv's validation) before
/// it is read.
pub(crate) fn decode_image(bytes: &[u8]) -> Result<MetadataImage, String> {
    let framed = bytes.strip_prefix(&RKYV_SNAPSHOT[..]).ok_or("not a metadata snapshot of this version")?;
    let (crc, archive) = framed.split_at_checked(4).ok_or("the metadata snapshot is cut short")?;
    if crc32c::crc32c(archive).to_be_bytes() != crc {
        return Err("the metadata snapshot does not match its checksum".into());
    }
    let mut aligned = rkyv::util::AlignedVec::<16>::with_capacity(archive.len());
    aligned.extend_from_slice(archive);
    let mut image = rkyv::from_bytes::<MetadataImage, rkyv::rancor::Error>(&aligned)
        .map_err(|e| format!("the metadata snapshot does not validate: {e}"))?;
    image.index_ids();
    Ok(image)
}

/// Recovers the metadata log under `data_dir` for node `node` among `voters`, and the
/// image it holds. Blocking: for the main thread.
///
/// # Errors
/// A message when the files cannot be read or written, or were made for other voters.
pub fn open(data_dir: &Path, node: i32, voters: &[i32], shards: usize) -> Result<Opened, String> {
    let dir = data_dir.join("__skein_metadata");
    let mut ids: Vec<u64> = voters.iter().map(|&v| quorum_id(v)).collect();
    ids.sort_unstable();
    ids.dedup();
    let (journal, durable) = Journal::open(&dir, || {
        let image = MetadataImage { next_producer_id: 1000, ..Default::default() };
        Durable::bootstrap(&ids, encode_image(&image))
    })?;
    let recorded = Quorum::voters_of(&durable);
    if recorded != ids {
        let show = |ids: &[u64]| ids.iter().map(|id| (id - 1).to_string()).collect::<Vec<_>>().join(",");
        return Err(format!(
            "{} belongs to a quorum of voters {}, but this node was started with voters {}",
            dir.display(),
            show(&recorded),
            show(&ids)
        ));
    }
    let mut durable = durable;
    if ids.len() == 1 {
        // A sole voter's entry is committed once it is durable (it is its own
        // majority), but the commit index reaches the journal only with the next
        // frame: without this, a change acknowledged just before a crash would be
        // missing from the image until raft commits it again, after the shards opened
        // their partitions.
        let last = durable.entries.last().map_or(durable.hard_state.commit, |e| e.index);
        durable.hard_state.commit = durable.hard_state.commit.max(last);
    }
    let mut image = decode_image(&durable.snapshot.data)?;
    let commit = durable.hard_state.commit;
    for entry in durable.entries.iter().filter(|e| e.index <= commit && !e.data.is_empty()) {
        let proposal: Proposal = serde_json::from_slice(&entry.data)
            .map_err(|e| format!("metadata log entry {} does not parse: {e}", entry.index))?;
        image.apply(&proposal.records);
    }
    image.place_within(shards);
    let quorum = Quorum::new(&QuorumConfig::new(quorum_id(node), ids), durable)?;
    Ok(Opened { quorum, journal, image })
}

/// What the loop takes from handlers and the transport.
pub enum Input {
    Propose {
        id: u64,
        data: Vec<u8>,
    },
    Raft(Box<raft::prelude::Message>),
    Unreachable(u64),
    SnapshotSent(u64, bool),
    /// What follows `after` for an observer (`Quorum::feed`).
    Feed {
        after: u64,
        reply: futures_channel::oneshot::Sender<Feed>,
    },
    /// Hand the leadership to another voter (this node is stopping).
    TransferLeader,
}

/// Drives the quorum on shard 0 until the shard stops or the journal fails.
pub async fn run(shard: Rc<Shard>, opened: Opened, inputs: glommio::channels::local_channel::LocalReceiver<Input>) {
    let Some(controller) = shard.controller() else { return };
    let Opened { mut quorum, mut journal, mut image } = opened;
    let (applier, images) = glommio::channels::local_channel::new_bounded(64);
    glommio::spawn_local(run_applier(shard.clone(), images)).detach();
    let mut applied = quorum.committed();
    controller.set_applied(applied);
    let mut next_tick = Instant::now() + TICK;
    let mut seen = VoterTimes::default();
    let mut described_leader = None;
    loop {
        let wait = next_tick.saturating_duration_since(Instant::now());
        // A tick that is due goes first: `or` polls the inputs first, and a steady
        // stream of them would otherwise hold ticks (raft's timers) back.
        let input = match wait.is_zero() {
            true => Some(None),
            false => {
                futures_lite::future::or(async { inputs.recv().await.map(Some) }, async {
                    glommio::timer::sleep(wait).await;
                    Some(None)
                })
                .await
            }
        };
        match input {
            None => return,
            Some(None) => {
                quorum.tick();
                // DescribeQuorum's view, refreshed once a tick rather than per message.
                controller.set_quorum_status(seen.status(&quorum));
                described_leader = quorum.leader();
                next_tick += TICK;
                if next_tick < Instant::now() {
                    next_tick = Instant::now() + TICK;
                }
            }
            Some(Some(Input::Propose { id, data })) => {
                if let Err(not_leader) = quorum.propose(data) {
                    controller.complete(id, Err(not_controller(not_leader.leader)));
                }
            }
            Some(Some(Input::Raft(message))) => {
                seen.heard_from(message.from);
                quorum.step(*message);
            }
            Some(Some(Input::Unreachable(peer))) => quorum.unreachable(peer),
            Some(Some(Input::SnapshotSent(peer, delivered))) => quorum.snapshot_sent(peer, delivered),
            Some(Some(Input::Feed { after, reply })) => {
                let _ = reply.send(quorum.feed(after, FEED_MAX_BYTES));
            }
            Some(Some(Input::TransferLeader)) => {
                if let Some(peer) = quorum.successor() {
                    quorum.transfer_leader(peer);
                }
            }
        }
        while let Some(work) = quorum.ready() {
            let Work { messages, snapshot, committed, entries, hard_state } = work;
            let mut lost = send(controller, &messages);
            if let Some(snapshot) = &snapshot {
                match decode_image(&snapshot.data) {
                    Ok(mut installed) => {
                        installed.place_within(shard.settings.shards);
                        image = installed;
                        applied = snapshot.get_metadata().index;
                        let installed =
                            Applied { image: Arc::new(image.clone()), index: applied, answered: Vec::new() };
                        let _ = applier.send(installed).await;
                    }
                    Err(e) => tracing::error!(target: "skein::net", error = %e, "snapshot from the leader refused"),
                }
            }
            applied = apply(&shard, &applier, &mut image, committed, applied).await;
            let durable = quorum.durable();
            if let Err(e) = journal.persist(&entries, hard_state.as_ref(), snapshot.as_ref(), durable).await {
                tracing::error!(target: "skein::net", error = %e, "cannot persist the metadata log; this controller stops");
                controller.fail((code::KAFKA_STORAGE_ERROR, format!("cannot persist the metadata log: {e}")));
                return;
            }
            let advanced = quorum.advance();
            lost.extend(send(controller, &advanced.messages));
            applied = apply(&shard, &applier, &mut image, advanced.committed, applied).await;
            for (peer, snapshot) in lost {
                quorum.unreachable(peer);
                if snapshot {
                    quorum.snapshot_sent(peer, false);
                }
            }
        }
        // A change of leader refreshes DescribeQuorum's view at once: a new leader
        // must not describe the quorum as the follower it was a tick ago (no leader,
        // no voters' progress).
        if quorum.leader() != described_leader {
            described_leader = quorum.leader();
            controller.set_quorum_status(seen.status(&quorum));
        }
        controller.set_leader(quorum.is_leader(), quorum.leader());
        controller.check_sessions(&shard);
        controller.check_balance(&shard);
        let active = controller.active().unwrap_or(-1);
        shard.settings.active_controller.store(active, std::sync::atomic::Ordering::Relaxed);
        if applied >= quorum.durable().snapshot_index() + COMPACT_EVERY {
            quorum.compact(applied, encode_image(&image));
            if let Err(e) = journal.fold(quorum.durable()).await {
                tracing::error!(target: "skein::net", error = %e, "cannot fold the metadata log; this controller stops");
                controller.fail((code::KAFKA_STORAGE_ERROR, format!("cannot persist the metadata log: {e}")));
                return;
            }
        }
    }
}

/// When the leader last heard from each voter and when each last held its whole log
/// (wall-clock ms), for DescribeQuorum.
#[derive(Default)]
struct VoterTimes {
    heard: std::collections::HashMap<u64, i64>,
    caught_up: std::collections::HashMap<u64, i64>,
}

impl VoterTimes {
    fn heard_from(&mut self, member: u64) {
        self.heard.insert(member, crate::shard::now_ms());
    }

    /// The quorum as `quorum` sees it; voters' progress only where it leads.
    fn status(&mut self, quorum: &Quorum) -> super::controller::QuorumStatus {
        use super::controller::{QuorumStatus, VoterStatus};
        let now = crate::shard::now_ms();
        let node = |id: u64| id as i32 - 1;
        let last = quorum.last_index();
        let voters = quorum
            .voter_progress()
            .into_iter()
            .map(|(id, matched)| {
                let me = id == quorum.id();
                if me || matched >= last {
                    self.caught_up.insert(id, now);
                }
                let heard = if me { now } else { self.heard.get(&id).copied().unwrap_or(-1) };
                VoterStatus {
                    node: node(id),
                    log_end_offset: matched as i64,
                    last_fetch_ms: heard,
                    last_caught_up_ms: self.caught_up.get(&id).copied().unwrap_or(-1),
                }
            })
            .collect();
        QuorumStatus {
            leader: quorum.leader().map(node).unwrap_or(-1),
            term: quorum.term() as i64,
            high_watermark: quorum.committed() as i64,
            voters,
            observers: Vec::new(),
        }
    }
}

/// Sends `messages` to the other voters; returns the peers whose message was dropped
/// (and whether it was a snapshot), for raft to hear of.
fn send(controller: &super::controller::Controller, messages: &[raft::prelude::Message]) -> Vec<(u64, bool)> {
    let Some(peers) = controller.peers() else { return Vec::new() };
    messages
        .iter()
        .filter(|m| !peers.send(m))
        .map(|m| (m.to, m.get_msg_type() == raft::prelude::MessageType::MsgSnapshot))
        .collect()
}

pub(crate) fn not_controller(leader: Option<u64>) -> super::Refusal {
    let leader = leader.map_or("none".to_string(), |l| (l - 1).to_string());
    (code::NOT_CONTROLLER, format!("this node is not the active controller (the leader is {leader})"))
}

/// Applies committed entries to `image` and hands the result to the applier; returns
/// the index applied.
async fn apply(
    shard: &Rc<Shard>,
    applier: &LocalSender<Applied>,
    image: &mut MetadataImage,
    committed: Vec<Committed>,
    applied: u64,
) -> u64 {
    let Some(last) = committed.last().map(|c| c.index) else { return applied };
    let me = shard.controller().map(|c| c.quorum_id());
    let mut answered = Vec::new();
    for entry in committed {
        match serde_json::from_slice::<Proposal>(&entry.data) {
            Ok(proposal) => {
                image.apply(&proposal.records);
                if Some(proposal.node) == me {
                    answered.push(proposal.id);
                }
            }
            Err(e) => {
                tracing::error!(target: "skein::net", index = entry.index, error = %e, "metadata log entry skipped")
            }
        }
    }
    image.place_within(shard.settings.shards);
    let _ = applier.send(Applied { image: Arc::new(image.clone()), index: last, answered }).await;
    last
}

/// An applied image on its way to the shards.
pub struct Applied {
    pub(crate) image: Arc<MetadataImage>,
    pub(crate) index: u64,
    /// This node's proposals it holds.
    pub(crate) answered: Vec<u64>,
}

/// Takes applied images in log order: publishes each to every shard, brings this
/// node's partitions in line with it (`topics::reconcile`), then completes this
/// node's proposals. A task of its own, so that opening many partitions never holds
/// up the quorum's ticks and messages.
pub async fn run_applier(shard: Rc<Shard>, images: LocalReceiver<Applied>) {
    let mut last = shard.image();
    while let Some(applied) = images.recv().await {
        shard.publish(applied.image.clone()).await;
        crate::topics::reconcile(&shard, &last, &applied.image).await;
        last = applied.image;
        let Some(controller) = shard.controller() else { continue };
        controller.set_applied(applied.index);
        for id in applied.answered {
            controller.complete(id, Ok(applied.index));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::TopicMeta;

    // Snapshots are rkyv archives that hold the whole image (topics with their
    // assignments, brokers, broker configs, SCRAM credentials, ACLs, quotas, topic
    // ids); a cut, damaged or foreign snapshot is refused with a message, never a panic.
    #[test]
    fn snapshots_round_trip_and_damage_is_refused() {
        use crate::metadata::{Assignment, BrokerMeta};
        let mut image = MetadataImage { next_producer_id: 7000, version: 9, ..Default::default() };
        let mut assignment = Assignment::new(vec![1, 2, 3]);
        assignment.elr = vec![3];
        assignment.leader_epoch = 4;
        let topic = TopicMeta {
            name: "orders".into(),
            id: uuid::Uuid::new_v4(),
            partitions: 1,
            configs: [("min.insync.replicas".to_string(), "2".to_string())].into(),
            shards: vec![1],
            assignments: vec![assignment],
        };
        let broker = BrokerMeta {
            id: 2,
            epoch: 5,
            host: "127.0.0.1".into(),
            port: 9092,
            rack: Some("east".into()),
            fenced: true,
            incarnation: 77,
            clean_restart: true,
            listeners: vec![crate::security::Endpoint { listener: "SASL_SSL".into(), host: "h".into(), port: 9094 }],
            virtual_brokers: Some(crate::virtual_brokers::VirtualBrokers {
                listener: "SASL_SSL".into(),
                port_base: 20000,
                shards: 4,
            }),
        };
        image.apply(&[
            MetadataRecord::Topic(topic.clone()),
            MetadataRecord::RegisterBroker(broker.clone()),
            MetadataRecord::ScramCredential {
                user: "alice".into(),
                mechanism: "SCRAM-SHA-512".into(),
                credential: Some(crate::security::scram::ScramCredential::from_password(
                    crate::security::scram::ScramMechanism::Sha512,
                    "pw",
                    b"salt",
                    4096,
                )),
            },
            MetadataRecord::AclAdded(crate::security::acl::AclBinding {
                resource_type: crate::security::acl::ResourceType::Topic,
                name: "orders".into(),
                pattern: crate::security::acl::PatternType::Prefixed,
                principal: "User:alice".into(),
                host: "*".into(),
                operation: crate::security::acl::Operation::Read,
                permission: crate::security::acl::Permission::Allow,
            }),
            MetadataRecord::ClientQuota {
                entity: crate::quota::QuotaEntity {
                    user: Some(crate::quota::EntityName::Default),
                    ..Default::default()
                },
                key: "producer_byte_rate".into(),
                value: Some(1048576.0),
            },
        ]);
        image.broker_configs.insert("".into(), [("follower.replication.throttled.rate".into(), "10".into())].into());
        let json = |image: &MetadataImage| serde_json::to_value(image).unwrap();
        let bytes = encode_image(&image);
        assert!(bytes.starts_with(RKYV_SNAPSHOT));
        let decoded = decode_image(&bytes).unwrap();
        assert_eq!(json(&decoded), json(&image));
        assert_eq!(decoded.topic_by_id(topic.id), Some(&topic));
        assert_eq!(decoded.brokers.get(&2), Some(&broker));
        for cut in [0, RKYV_SNAPSHOT.len(), bytes.len() / 2, bytes.len() - 1] {
            assert!(decode_image(&bytes[..cut]).is_err(), "a snapshot cut at {cut} was read");
        }
        let mut damaged = bytes.clone();
        let last = damaged.len() - 4;
        damaged[last..].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_image(&damaged).is_err(), "a damaged snapshot was read");
        let foreign = decode_image(&serde_json::to_vec(&image).unwrap()).unwrap_err();
        assert!(foreign.contains("not a metadata snapshot"), "{foreign}");
    }

    // A metadata log started again with other voters is refused with both lists named.
    #[test]
    fn other_voters_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let opened = open(dir.path(), 1, &[1], 2).unwrap();
        assert_eq!(opened.image.next_producer_id, 1000);
        drop(opened);
        assert!(open(dir.path(), 1, &[1], 2).is_ok());
        let error = open(dir.path(), 1, &[1, 2, 3], 2).unwrap_err();
        assert!(error.contains("voters 1, but this node was started with voters 1,2,3"), "{error}");
    }
}
