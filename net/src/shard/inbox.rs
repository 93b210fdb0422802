//! What a shard does with the messages other shards send it (`router` carries them):
//! partition operations and batches of them run as tasks, bounded; long-poll waits
//! and group joins parked; images installed in order; controller requests and
//! high-watermark gathering answered.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use glommio::channels::shared_channel::ConnectedReceiver;
use skein_control::limits::{PEER_PARKED_MAX, PEER_TASKS_MAX};

use super::ops::{Group, PartitionOp, ShardMessage};
use super::Shard;

/// Serves messages sent by one peer shard. Each partition operation or batch runs as
/// its own task, started in arrival order, at most `PEER_TASKS_MAX` at once (long-poll
/// waits and group joins count against `PEER_PARKED_MAX` instead); metadata publications are installed inline, in
/// order, and controller requests run as tasks of their own.
pub async fn serve_peer(shard: Rc<Shard>, receiver: ConnectedReceiver<ShardMessage>) {
    let tasks = Arc::new(async_lock::Semaphore::new(PEER_TASKS_MAX));
    let parked = Rc::new(Cell::new(0usize));
    while let Some(message) = receiver.recv().await {
        shard.router.taken(shard.id);
        let (partition, op, reply) = match message {
            ShardMessage::Partition { partition, op, reply, sent } => {
                shard.metrics.cross_shard_wait.observe_since(sent);
                if let Some(stages) = op.api_key().and_then(|api| shard.metrics.stages(api)) {
                    stages.route.observe_since(sent);
                }
                (partition, op, reply)
            }
            ShardMessage::Batch { ops, reply, sent } => {
                shard.metrics.cross_shard_wait.observe_since(sent);
                let waited = sent.elapsed();
                for api in ops.iter().filter_map(|(_, op)| op.api_key()) {
                    if let Some(stages) = shard.metrics.stages(api) {
                        stages.route.observe(waited);
                    }
                }
                // A batch is one task, however many partitions it carries.
                let permit = tasks.acquire_arc().await;
                let shard = shard.clone();
                glommio::spawn_local(async move {
                    let _permit = permit;
                    let _ = reply.send(shard.execute_all(ops).await);
                })
                .detach();
                continue;
            }
            ShardMessage::Reads { reads, budget, reply, sent } => {
                shard.metrics.cross_shard_wait.observe_since(sent);
                if let Some(stages) = shard.metrics.stages(1) {
                    let waited = sent.elapsed();
                    for _ in &reads {
                        stages.route.observe(waited);
                    }
                }
                let permit = tasks.acquire_arc().await;
                let shard = shard.clone();
                glommio::spawn_local(async move {
                    let _permit = permit;
                    let _ = reply.send(shard.execute_reads(reads, budget).await);
                })
                .detach();
                continue;
            }
            ShardMessage::WaitAny { waits, wait_ms, mut reply } => {
                // Past the parking limit the waits end at once with nothing woken:
                // the poll waits on its other shards, or for its time to run out.
                if parked.get() >= PEER_PARKED_MAX {
                    let _ = reply.send(Vec::new());
                    continue;
                }
                let park = Parking::new(&parked);
                let shard = shard.clone();
                glommio::spawn_local(async move {
                    let _park = park;
                    // The wait stops as soon as its requester is gone (the request
                    // completed through another shard's partitions).
                    let cancelled = reply.cancellation();
                    let expired = async {
                        glommio::timer::sleep(Duration::from_millis(wait_ms)).await;
                        Some(Vec::new())
                    };
                    let woke = futures_lite::future::or(async { Some(shard.wait_here(&waits).await) }, expired);
                    let woke = futures_lite::future::or(woke, async {
                        cancelled.await;
                        None
                    })
                    .await;
                    if let Some(woke) = woke {
                        let _ = reply.send(woke);
                    }
                })
                .detach();
                continue;
            }
            ShardMessage::HighWatermarks { reply } => {
                let _ = reply.send(shard.high_watermarks());
                continue;
            }
            ShardMessage::Publish { image, reply } => {
                shard.install(image);
                let _ = reply.send(());
                continue;
            }
            ShardMessage::Control { request, reply } => {
                let shard = shard.clone();
                glommio::spawn_local(async move {
                    let _ = reply.send(shard.control(request).await);
                })
                .detach();
                continue;
            }
        };
        // Group joins and syncs, which last until the rebalance completes, park if a
        // parking slot is free; otherwise they take a task slot like any operation.
        let waits = matches!(&op, PartitionOp::Group(Group(call)) if call.waits());
        let park = (waits && parked.get() < PEER_PARKED_MAX).then(|| Parking::new(&parked));
        let permit = if park.is_none() { Some(tasks.acquire_arc().await) } else { None };
        let shard = shard.clone();
        glommio::spawn_local(async move {
            let _permit = permit;
            let _park = park;
            let _ = reply.send(shard.execute(&partition, op).await);
        })
        .detach();
    }
}

/// A parked long poll, counted while it lives.
struct Parking(Rc<Cell<usize>>);

impl Parking {
    fn new(count: &Rc<Cell<usize>>) -> Parking {
        count.set(count.get() + 1);
        Parking(count.clone())
    }
}

impl Drop for Parking {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}
