//! The loop on shard 0 that drives the metadata log (`log.rs`): the controller's
//! decisions (`MetadataRecord`s) as entries of the raft-rs quorum
//! (`skein_replication::quorum`). A single node is a quorum of one voter, itself.
//!
//! `log::open` (main thread, before the shards start) recovers the journal and rebuilds
//! the image from its snapshot and the entries its durable commit covers. `run` then
//! owns the quorum: it ticks every 100 ms, takes proposals from `Controller::handle`,
//! does raft's work in order (send, install, apply, persist with one fdatasync,
//! advance), applies committed entries to the image and publishes it to every shard,
//! and only then completes the proposals. Every 1,000 entries it folds the log into a
//! snapshot of the image (rkyv, validated when read).

use std::sync::Arc;
use std::time::{Duration, Instant};

use glommio::channels::local_channel::{LocalReceiver, LocalSender};
use skein_replication::quorum::{ChangeRefused, Committed, Quorum, Work};

use super::host::Host;
use super::log::{decode_image, encode_image, not_controller, Applied, Input, Opened, Proposal};
use super::MetadataImage;
use crate::errors::code;

/// The quorum's clock tick.
pub const TICK: Duration = Duration::from_millis(100);
/// Entries applied past the snapshot before the log is folded into a new one.
pub const COMPACT_EVERY: u64 = 1000;

/// Entry data served to an observer in one answer.
const FEED_MAX_BYTES: usize = 4 << 20;

/// Drives the quorum on shard 0 until the shard stops or the journal fails.
pub async fn run<H: Host>(host: H, opened: Opened, inputs: glommio::channels::local_channel::LocalReceiver<Input>) {
    let Some(controller) = host.controller() else { return };
    let Opened { mut quorum, mut journal, mut image } = opened;
    let (applier, images) = glommio::channels::local_channel::new_bounded(64);
    glommio::spawn_local(run_applier(host.clone(), images)).detach();
    let mut applied = quorum.committed();
    controller.set_applied(applied);
    glommio::spawn_local(announce(host.clone())).detach();
    let mut next_tick = Instant::now() + TICK;
    let mut seen = VoterTimes::default();
    let mut described_leader = None;
    // The connections follow the configuration: at start, and after each change.
    let mut members_changed = true;
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
            Some(Some(Input::Change { id, change, data })) => {
                if let Err(refused) = quorum.propose_change(change, data) {
                    let refusal = match refused {
                        ChangeRefused::NotLeader(leader) => not_controller(leader),
                        ChangeRefused::Pending => (
                            code::REQUEST_TIMED_OUT,
                            "another change of the quorum's voters is not committed yet; retry".into(),
                        ),
                        ChangeRefused::Leader => (
                            code::NOT_CONTROLLER,
                            "the active controller cannot remove itself; leadership moves first".into(),
                        ),
                    };
                    controller.complete(id, Err(refusal));
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
                        members_changed = true;
                        installed.place_within(host.local().shards);
                        image = installed;
                        applied = snapshot.get_metadata().index;
                        let installed =
                            Applied { image: Arc::new(image.clone()), index: applied, answered: Vec::new() };
                        let _ = applier.send(installed).await;
                    }
                    Err(e) => tracing::error!(target: "skein::net", error = %e, "snapshot from the leader refused"),
                }
            }
            applied = apply(&host, &applier, &mut image, committed, applied).await;
            let durable = quorum.durable();
            if let Err(e) = journal.persist(&entries, hard_state.as_ref(), snapshot.as_ref(), durable).await {
                tracing::error!(target: "skein::net", error = %e, "cannot persist the metadata log; this controller stops");
                controller.fail((code::KAFKA_STORAGE_ERROR, format!("cannot persist the metadata log: {e}")));
                return;
            }
            let advanced = quorum.advance();
            lost.extend(send(controller, &advanced.messages));
            applied = apply(&host, &applier, &mut image, advanced.committed, applied).await;
            for (peer, snapshot) in lost {
                quorum.unreachable(peer);
                if snapshot {
                    quorum.snapshot_sent(peer, false);
                }
            }
        }
        // The snapshot a new member is sent must name it (raft-rs refuses one that
        // does not): a membership change folds the log (below).
        let membership_changed = quorum.membership_changed();
        if std::mem::take(&mut members_changed) || membership_changed {
            let (voters, learners) = quorum.members();
            controller.set_members(&voters, &learners);
            if let Some(peers) = controller.peers() {
                peers.reconcile(&[voters, learners].concat(), &image);
            }
            controller.set_quorum_status(seen.status(&quorum));
        }
        // A change of leader refreshes DescribeQuorum's view at once: a new leader
        // must not describe the quorum as the follower it was a tick ago (no leader,
        // no voters' progress).
        if quorum.leader() != described_leader {
            described_leader = quorum.leader();
            controller.set_quorum_status(seen.status(&quorum));
        }
        controller.set_leader(quorum.is_leader(), quorum.leader());
        controller.check_sessions(&host);
        controller.check_balance(&host);
        controller.check_tokens(&host);
        let active = controller.active().unwrap_or(-1);
        host.active_controller().store(active, std::sync::atomic::Ordering::Relaxed);
        let snapshot_index = quorum.durable().snapshot_index();
        if applied >= snapshot_index + COMPACT_EVERY || (membership_changed && applied > snapshot_index) {
            quorum.compact(applied, encode_image(&image));
            if let Err(e) = journal.fold(quorum.durable()).await {
                tracing::error!(target: "skein::net", error = %e, "cannot fold the metadata log; this controller stops");
                controller.fail((code::KAFKA_STORAGE_ERROR, format!("cannot persist the metadata log: {e}")));
                return;
            }
        }
    }
}

/// How often a controller tries to record its endpoint while the quorum has no
/// leader or does not count it a member yet.
const ANNOUNCE_EVERY: Duration = Duration::from_secs(1);

/// Records this controller's endpoint and directory id in the log once the quorum
/// has a leader (as Kafka's voters send UpdateRaftVoter at start), so that the log
/// names every member's endpoint: a voter of the first `--controller-voters` has no
/// record otherwise, and a node started with `--controller-quorum-bootstrap-servers`
/// finds the quorum from the log. A controller not yet added is recorded by the add
/// itself; this one keeps asking, less often, until it is a member.
async fn announce<H: Host>(host: H) {
    let Some(member) = host.member() else { return };
    let mut wait = ANNOUNCE_EVERY;
    loop {
        glommio::timer::sleep(wait).await;
        let Some(controller) = host.controller() else { return };
        if controller.is_shutting_down() || !controller.clustered() {
            return;
        }
        if controller.active().is_none() || controller.is_removed() {
            continue;
        }
        let update = super::controller::ControllerRequest::UpdateVoter { member: member.clone() };
        match controller.handle_indexed(&host, update).await {
            Ok(_) => return,
            // A quorum that cannot change its voters records no endpoints.
            Err((code::UNSUPPORTED_VERSION, _)) => return,
            Err((code::VOTER_NOT_FOUND, _)) => wait = (wait * 2).min(Duration::from_secs(10)),
            Err((error, message)) => {
                tracing::debug!(target: "skein::net", error, message, "cannot record this controller's endpoint yet")
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
        self.heard.insert(member, skein_engine::time::now_ms());
    }

    /// The quorum as `quorum` sees it; voters' progress only where it leads.
    fn status(&mut self, quorum: &Quorum) -> super::controller::QuorumStatus {
        use super::controller::{QuorumStatus, VoterStatus};
        let now = skein_engine::time::now_ms();
        let node = |id: u64| id as i32 - 1;
        let last = quorum.last_index();
        let (mut voters, mut learners) = (Vec::new(), Vec::new());
        for progress in quorum.progress() {
            let id = progress.id;
            let me = id == quorum.id();
            if me || progress.matched >= last {
                self.caught_up.insert(id, now);
            }
            let heard = if me { now } else { self.heard.get(&id).copied().unwrap_or(-1) };
            let status = VoterStatus {
                node: node(id),
                log_end_offset: progress.matched as i64,
                last_fetch_ms: heard,
                last_caught_up_ms: self.caught_up.get(&id).copied().unwrap_or(-1),
            };
            match progress.voter {
                true => voters.push(status),
                false => learners.push(status),
            }
        }
        // A learner (a controller catching up before it votes) is an observer, as
        // Kafka lists it.
        QuorumStatus {
            leader: quorum.leader().map(node).unwrap_or(-1),
            term: quorum.term() as i64,
            high_watermark: quorum.committed() as i64,
            voters,
            observers: learners,
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

/// Applies committed entries to `image` and hands the result to the applier; returns
/// the index applied.
async fn apply<H: Host>(
    host: &H,
    applier: &LocalSender<Applied>,
    image: &mut MetadataImage,
    committed: Vec<Committed>,
    applied: u64,
) -> u64 {
    let Some(last) = committed.last().map(|c| c.index) else { return applied };
    let me = host.controller().map(|c| c.quorum_id());
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
    image.place_within(host.local().shards);
    let _ = applier.send(Applied { image: Arc::new(image.clone()), index: last, answered }).await;
    last
}

/// Takes applied images in log order: publishes each to every shard, brings this
/// node's partitions in line with it (`topics::reconcile`), then completes this
/// node's proposals. A task of its own, so that opening many partitions never holds
/// up the quorum's ticks and messages.
pub async fn run_applier<H: Host>(host: H, images: LocalReceiver<Applied>) {
    let mut last = host.image();
    while let Some(applied) = images.recv().await {
        host.install(&last, applied.image.clone()).await;
        last = applied.image;
        let Some(controller) = host.controller() else { continue };
        controller.set_applied(applied.index);
        for id in applied.answered {
            controller.complete(id, Ok(applied.index));
        }
    }
}
