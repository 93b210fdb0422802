//! Partitions being opened in the background. A topic's new partitions are opened
//! after the controller answers (`ops::Open::in_background`), as Kafka's brokers create
//! a new topic's logs after its CreateTopics is answered: 10,000 new logs take seconds
//! of file creation and syncs. Meanwhile each is registered here, and an operation on
//! it (`Shard::execute`) waits for its open instead of being refused, so that a
//! produce or a fetch sent as soon as the answer came finds the partition. The
//! waiters go on in the order they came, and an operation that arrives while they are
//! still being woken goes after them: pipelined produces keep their order.

use std::rc::Rc;

use event_listener::Event;
use skein_engine::TopicPartition;

use super::*;

/// One partition being opened: the event its waiters listen on (woken in the order
/// they listened), how many have not yet gone on, and whether the open ended.
#[derive(Default)]
struct Opening {
    event: Event,
    waiting: Cell<usize>,
    ended: Cell<bool>,
}

/// The partitions of a shard being opened, and the slots that bound how many open at
/// once.
pub(crate) struct Openings {
    /// Each partition stays here until its open ended and every waiter went on.
    opening: RefCell<fxhash::FxHashMap<TopicPartition, Rc<Opening>>>,
    slots: glommio::sync::Semaphore,
    /// The task queue the opens run in (made at the first), with a smaller share of
    /// the shard than requests: the messages that register more partitions, and the
    /// requests on partitions already open, go first.
    queue: Cell<Option<glommio::TaskQueueHandle>>,
}

impl Default for Openings {
    fn default() -> Openings {
        Openings {
            opening: RefCell::default(),
            slots: glommio::sync::Semaphore::new(opens_in_flight()),
            queue: Cell::new(None),
        }
    }
}

/// Background opens in flight per shard: more than recovery's
/// `PARTITION_OPENS_IN_FLIGHT`, as a new log is a few creations and syncs the file
/// system commits together (10,000 new partitions on two shards: served after 2.5 s
/// with 512, 3.4 s with 64).
const OPENS_IN_FLIGHT: u64 = 512;

/// `OPENS_IN_FLIGHT`, or fewer on a shard with a small budget of open files: each open
/// holds a few descriptors for a moment (directories it creates and syncs, the files
/// it writes), which the budget leaves outside (`open_files`), so an eighth of it.
fn opens_in_flight() -> u64 {
    let budget = skein_engine::io::open_files::stats().budget as u64;
    OPENS_IN_FLIGHT.min(budget / 8).max(1)
}

/// The opens' share of their shard, against a request queue's default 1,000.
const OPEN_SHARES: usize = 250;

impl Openings {
    /// The task queue background opens run in.
    fn queue(&self) -> glommio::TaskQueueHandle {
        if let Some(queue) = self.queue.get() {
            return queue;
        }
        let queue = glommio::executor().create_task_queue(
            glommio::Shares::Static(OPEN_SHARES),
            glommio::Latency::NotImportant,
            "partition-opens",
        );
        self.queue.set(Some(queue));
        queue
    }

    /// Waits until `partition` is not being opened (at once when it is not), after
    /// every operation that waited for it before.
    pub(crate) async fn opened(&self, partition: &TopicPartition) {
        let Some(opening) = self.opening.borrow().get(partition).cloned() else { return };
        if opening.ended.get() {
            // The earlier waiters were woken and wait to run (in this connection's
            // task, or queued on the shard): once behind them, go on. One that is not
            // polled meanwhile (its connection is stalled) holds nobody else up.
            futures_lite::future::yield_now().await;
            return;
        }
        let _waiting = Waiting::new(self, partition, opening.clone());
        opening.event.listen().await;
    }

    /// The open of `partition` ended (opened or failed): its waiters go on, in order.
    fn end(&self, partition: &TopicPartition) {
        let Some(opening) = self.opening.borrow().get(partition).cloned() else { return };
        opening.ended.set(true);
        if opening.waiting.get() == 0 {
            self.remove(partition, &opening);
        }
        opening.event.notify(usize::MAX);
    }

    /// Forgets `opening` of `partition`, unless a later open replaced it.
    fn remove(&self, partition: &TopicPartition, opening: &Rc<Opening>) {
        let mut all = self.opening.borrow_mut();
        if all.get(partition).is_some_and(|current| Rc::ptr_eq(current, opening)) {
            all.remove(partition);
        }
    }

    /// Partitions being opened.
    pub(crate) fn len(&self) -> usize {
        self.opening.borrow().len()
    }
}

/// A waiter counted in its `Opening` while it lives, however it ends (the open ended,
/// or its request went away): the last one out of an ended open removes it.
struct Waiting<'a> {
    openings: &'a Openings,
    partition: &'a TopicPartition,
    opening: Rc<Opening>,
}

impl<'a> Waiting<'a> {
    fn new(openings: &'a Openings, partition: &'a TopicPartition, opening: Rc<Opening>) -> Waiting<'a> {
        opening.waiting.set(opening.waiting.get() + 1);
        Waiting { openings, partition, opening }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.opening.waiting.set(self.opening.waiting.get() - 1);
        if self.opening.waiting.get() == 0 && self.opening.ended.get() {
            self.openings.remove(self.partition, &self.opening);
        }
    }
}

impl Shard {
    /// Opens `partition` as `open` says in a task of its own, `OPENS_IN_FLIGHT` at a
    /// time on this shard; operations on it wait until it is open (or its open failed,
    /// logged here: then they find no partition, as after a failed open).
    pub(super) fn open_in_background(self: &Rc<Self>, partition: &TopicPartition, open: ops::Open) {
        self.openings.opening.borrow_mut().insert(partition.clone(), Rc::default());
        let task =
            glommio::spawn_local_into(self.clone().open_when_free(partition.clone(), open), self.openings.queue());
        match task {
            Ok(task) => {
                task.detach();
            }
            // Only when the queue is gone, which it never is while the shard runs.
            Err(error) => {
                tracing::error!(target: "skein::net", partition = %partition, %error, "cannot start a partition open");
                self.openings.end(partition);
            }
        }
    }

    /// Opens `partition` once a slot is free, then wakes the operations waiting for it.
    async fn open_when_free(self: Rc<Self>, partition: TopicPartition, open: ops::Open) {
        let opened = {
            let _slot = self.openings.slots.acquire_permit(1).await;
            Box::pin(self.open_now(&partition, open)).await
        };
        self.openings.end(&partition);
        if let Err(PartitionError { code, message }) = opened {
            tracing::error!(target: "skein::net", partition = %partition, code, message, "partition open failed");
        }
    }
}
