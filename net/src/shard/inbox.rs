//! What a shard does with the messages other shards send it (`router` carries them):
//! partition operations run as tasks, bounded, long polls parked; images installed in
//! order; controller requests and high-watermark gathering answered.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use glommio::channels::shared_channel::ConnectedReceiver;

use super::ops::{Fetch, Group, PartitionOp, ShardMessage};
use super::Shard;
use crate::limits::{PEER_PARKED_MAX, PEER_TASKS_MAX};

/// Serves messages sent by one peer shard. Each partition operation runs as its own
/// task, started in arrival order, at most `PEER_TASKS_MAX` at once (long polls count
/// against `PEER_PARKED_MAX` instead); metadata publications are installed inline, in
/// order, and controller requests run as tasks of their own.
pub async fn serve_peer(shard: Rc<Shard>, receiver: ConnectedReceiver<ShardMessage>) {
    let tasks = Arc::new(async_lock::Semaphore::new(PEER_TASKS_MAX));
    let parked = Rc::new(Cell::new(0usize));
    while let Some(message) = receiver.recv().await {
        shard.router.taken(shard.id);
        let (partition, mut op, mut reply) = match message {
            ShardMessage::Partition { partition, op, reply, sent } => {
                shard.metrics.cross_shard_wait.observe_since(sent);
                if let Some(stages) = op.api_key().and_then(|api| shard.metrics.stages(api)) {
                    stages.route.observe_since(sent);
                }
                (partition, op, reply)
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
        // Operations that wait (long polls, group joins and syncs that last until the
        // rebalance completes) park if a parking slot is free; otherwise a long poll
        // answers at once, and a join takes a task slot like any operation.
        let polls = matches!(&op, PartitionOp::Fetch(Fetch { wait_ms, .. }) if *wait_ms > 0);
        let waits = polls || matches!(&op, PartitionOp::Group(Group(call)) if call.waits());
        let mut park = None;
        if waits && parked.get() < PEER_PARKED_MAX {
            park = Some(Parking::new(&parked));
        } else if let PartitionOp::Fetch(Fetch { wait_ms, .. }) = &mut op {
            *wait_ms = 0;
        }
        let permit = if park.is_none() { Some(tasks.acquire_arc().await) } else { None };
        let shard = shard.clone();
        glommio::spawn_local(async move {
            let _permit = permit;
            // A long poll stops as soon as its requester is gone (the request completed
            // through another partition); every other operation runs to completion.
            let result = if polls && park.is_some() {
                let cancelled = reply.cancellation();
                futures_lite::future::or(async { Some(shard.execute(&partition, op).await) }, async {
                    cancelled.await;
                    None
                })
                .await
            } else {
                Some(shard.execute(&partition, op).await)
            };
            drop(park);
            if let Some(result) = result {
                let _ = reply.send(result);
            }
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
