//! Cross-shard routes: a full mesh of bounded glommio shared channels, one per ordered
//! pair of shards. A full channel makes the sender wait (backpressure), never grow.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use glommio::channels::shared_channel::{self, ConnectedReceiver, ConnectedSender, SharedReceiver, SharedSender};

use crate::limits::{CROSS_SHARD_CHANNEL_CAPACITY, PEER_PARKED_MAX, PEER_TASKS_MAX};
use crate::shard::{PartitionOp, Shard, ShardMessage};

/// The ends of the mesh that belong to one shard, created before the executors start.
pub struct RouterWiring {
    senders: Vec<Option<SharedSender<ShardMessage>>>,
    receivers: Vec<SharedReceiver<ShardMessage>>,
    queued: Arc<[AtomicU64]>,
}

/// Creates the mesh for `shards` shards; element `i` goes to shard `i`.
pub fn wire(shards: usize) -> Vec<RouterWiring> {
    let queued: Arc<[AtomicU64]> = (0..shards).map(|_| AtomicU64::new(0)).collect();
    let mut wirings: Vec<RouterWiring> = (0..shards)
        .map(|_| RouterWiring {
            senders: (0..shards).map(|_| None).collect(),
            receivers: Vec::new(),
            queued: queued.clone(),
        })
        .collect();
    for from in 0..shards {
        for to in 0..shards {
            if from == to {
                continue;
            }
            let (sender, receiver) = shared_channel::new_bounded(CROSS_SHARD_CHANNEL_CAPACITY);
            wirings[from].senders[to] = Some(sender);
            wirings[to].receivers.push(receiver);
        }
    }
    wirings
}

/// This shard's senders to every other shard.
pub struct Router {
    senders: Vec<Option<ConnectedSender<ShardMessage>>>,
    /// Messages sent to each shard that it has not taken yet (waiting for room in a
    /// full channel included), shared by every shard's router: one atomic per shard,
    /// added to by senders and taken from by the receiving shard.
    queued: Arc<[AtomicU64]>,
}

impl Router {
    /// A router for a node of one shard (nothing to route to).
    pub fn alone() -> Router {
        Router { senders: vec![None], queued: Arc::new([AtomicU64::new(0)]) }
    }

    /// Sends a message to `shard`, waiting while its channel is full.
    ///
    /// # Errors
    /// Hands the message back when the shard is gone.
    pub async fn send(&self, shard: usize, message: ShardMessage) -> Result<(), ShardMessage> {
        let Some(sender) = self.senders.get(shard).and_then(Option::as_ref) else { return Err(message) };
        self.queued[shard].fetch_add(1, Ordering::Relaxed);
        sender.send(message).await.map_err(|e| {
            self.queued[shard].fetch_sub(1, Ordering::Relaxed);
            match e {
                glommio::GlommioError::Closed(glommio::ResourceType::Channel(message)) => message,
                glommio::GlommioError::WouldBlock(glommio::ResourceType::Channel(message)) => message,
                other => panic!("unexpected channel error: {other}"),
            }
        })
    }

    /// Messages sent to `shard` that it has not taken yet: its cross-shard queue depth.
    pub fn queued(&self, shard: usize) -> u64 {
        self.queued.get(shard).map_or(0, |q| q.load(Ordering::Relaxed))
    }

    /// Counts a message `shard` took from its queue.
    fn taken(&self, shard: usize) {
        self.queued[shard].fetch_sub(1, Ordering::Relaxed);
    }
}

impl RouterWiring {
    /// Connects this shard's ends; must run on the shard's executor. A sender's
    /// connect waits for its receiver's, so all ends connect at once (connecting the
    /// senders first would deadlock two shards waiting on each other).
    pub async fn connect(self) -> (Router, Vec<ConnectedReceiver<ShardMessage>>) {
        let senders = futures_util::future::join_all(self.senders.into_iter().map(|sender| async move {
            match sender {
                Some(s) => Some(s.connect().await),
                None => None,
            }
        }));
        let receivers = futures_util::future::join_all(self.receivers.into_iter().map(|r| r.connect()));
        let (senders, receivers) = futures_util::future::join(senders, receivers).await;
        (Router { senders, queued: self.queued }, receivers)
    }
}

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
        let polls = matches!(&op, PartitionOp::Fetch { wait_ms, .. } if *wait_ms > 0);
        let waits = polls || matches!(&op, PartitionOp::Group(call) if call.waits());
        let mut park = None;
        if waits && parked.get() < PEER_PARKED_MAX {
            park = Some(Parking::new(&parked));
        } else if let PartitionOp::Fetch { wait_ms, .. } = &mut op {
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
