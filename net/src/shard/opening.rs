//! Partitions being opened in the background. A topic's new partitions are opened
//! after the controller answers (`ops::Open::in_background`), as Kafka's brokers create
//! a new topic's logs after its CreateTopics is answered: 10,000 new logs take seconds
//! of file creation and syncs. Meanwhile each is registered here, and an operation on
//! it (`Shard::execute`) waits for its open instead of being refused, so that a
//! produce or a fetch sent as soon as the answer came finds the partition.

use std::rc::Rc;

use event_listener::Event;
use skein_engine::TopicPartition;

use super::*;

/// The partitions of a shard being opened, each with the event its waiters listen on,
/// and the slots that bound how many open at once.
pub(crate) struct Openings {
    opening: RefCell<fxhash::FxHashMap<TopicPartition, Rc<Event>>>,
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
            slots: glommio::sync::Semaphore::new(OPENS_IN_FLIGHT),
            queue: Cell::new(None),
        }
    }
}

/// Background opens in flight per shard: more than recovery's
/// `PARTITION_OPENS_IN_FLIGHT`, as a new log is a few creations and syncs the file
/// system commits together (10,000 new partitions on two shards: served after 2.5 s
/// with 512, 3.4 s with 64).
const OPENS_IN_FLIGHT: u64 = 512;

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

    /// Waits until `partition` is not being opened (at once when it is not).
    pub(crate) async fn opened(&self, partition: &TopicPartition) {
        loop {
            let Some(event) = self.opening.borrow().get(partition).cloned() else { return };
            let listener = event.listen();
            if !self.opening.borrow().contains_key(partition) {
                return;
            }
            listener.await;
        }
    }

    /// Partitions being opened.
    pub(crate) fn len(&self) -> usize {
        self.opening.borrow().len()
    }
}

impl Shard {
    /// Opens `partition` as `open` says in a task of its own, `OPENS_IN_FLIGHT` at a
    /// time on this shard; operations on it wait until it is open (or its open failed,
    /// logged here: then they find no partition, as after a failed open).
    pub(super) fn open_in_background(self: &Rc<Self>, partition: &TopicPartition, open: ops::Open) {
        let event = Rc::new(Event::new());
        self.openings.opening.borrow_mut().insert(partition.clone(), event.clone());
        let task =
            glommio::spawn_local_into(self.clone().open_when_free(partition.clone(), open), self.openings.queue());
        match task {
            Ok(task) => {
                task.detach();
            }
            // Only when the queue is gone, which it never is while the shard runs.
            Err(error) => {
                tracing::error!(target: "skein::net", partition = %partition, %error, "cannot start a partition open");
                self.openings.opening.borrow_mut().remove(partition);
                event.notify(usize::MAX);
            }
        }
    }

    /// Opens `partition` once a slot is free, then wakes the operations waiting for it.
    async fn open_when_free(self: Rc<Self>, partition: TopicPartition, open: ops::Open) {
        let opened = {
            let _slot = self.openings.slots.acquire_permit(1).await;
            Box::pin(self.open_now(&partition, open)).await
        };
        if let Some(event) = self.openings.opening.borrow_mut().remove(&partition) {
            event.notify(usize::MAX);
        }
        if let Err(PartitionError { code, message }) = opened {
            tracing::error!(target: "skein::net", partition = %partition, code, message, "partition open failed");
        }
    }
}
