//! Cross-shard routes: a full mesh of bounded glommio shared channels, one per ordered
//! pair of shards. A full channel makes the sender wait (backpressure), never grow.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use glommio::channels::shared_channel::{self, ConnectedReceiver, ConnectedSender, SharedReceiver, SharedSender};
use skein_control::limits::CROSS_SHARD_CHANNEL_CAPACITY;

use super::ops::ShardMessage;

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
    pub(crate) fn taken(&self, shard: usize) {
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
