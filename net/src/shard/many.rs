//! Operations and waits on many partitions at once, as a fetch or a produce over
//! thousands of partitions makes them: each other shard gets one message carrying all
//! of its partitions' operations (`ShardMessage::Batch`), or all of their waits
//! (`ShardMessage::WaitAny`), not one message and one task each.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use futures_channel::oneshot;
use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use skein_control::errors::code;
use skein_engine::{Offset, TopicPartition};
use skein_replication::Isolation;

use super::ops::{self, Fetch, OpResult, PartitionError, PartitionOp, PartitionReply, Reader, ShardMessage, ShardOp};
use super::Shard;

/// Reads `execute_reads` answers on the spot before it lets the shard's other ready
/// tasks run (glommio's own preemption comes only after 100 ms).
const READS_BETWEEN_YIELDS: usize = 256;

/// What goes to one shard, with where each item stands in the caller's list.
struct ForShard<T> {
    indices: Vec<usize>,
    items: Vec<T>,
}

impl<T> Default for ForShard<T> {
    fn default() -> ForShard<T> {
        ForShard { indices: Vec::new(), items: Vec::new() }
    }
}

impl<T> ForShard<T> {
    fn push(&mut self, index: usize, item: T) {
        self.indices.push(index);
        self.items.push(item);
    }
}

/// A long poll's wait on one partition: until it can read past `offset` as
/// `isolation` reads.
#[derive(Debug, Clone)]
pub struct Wait {
    pub partition: TopicPartition,
    pub offset: i64,
    pub isolation: Isolation,
}

impl Shard {
    /// Runs each of `calls` on its partition's shard and answers in their order:
    /// this shard's concurrently here, each other shard's in one message to it. A
    /// call its caller refused before routing (`Err`) is answered with that error.
    /// Operations that wait (a group join or sync) do not belong here: they would hold
    /// the whole batch.
    pub async fn call_many<O: ShardOp>(
        self: &Rc<Self>,
        calls: Vec<Result<(TopicPartition, O), PartitionError>>,
    ) -> Vec<Result<O::Reply, PartitionError>> {
        let mut results: Vec<Option<OpResult>> = (0..calls.len()).map(|_| None).collect();
        let mut by_owner: BTreeMap<usize, ForShard<(TopicPartition, PartitionOp)>> = BTreeMap::new();
        {
            let image = self.image();
            for (i, call) in calls.into_iter().enumerate() {
                match call.and_then(|(partition, op)| Ok((self.owner(&image, &partition)?, partition, op))) {
                    Ok((owner, partition, op)) => {
                        by_owner.entry(owner).or_default().push(i, (partition, op.into_message()))
                    }
                    Err(error) => results[i] = Some(Err(error)),
                }
            }
        }
        let runs = by_owner.into_iter().map(|(owner, ForShard { indices, items: ops })| async move {
            let apis: Vec<Option<i16>> = ops.iter().map(|(_, op)| op.api_key()).collect();
            let answers = self.run_on(owner, ops).await;
            for (answer, api) in answers.iter().zip(apis) {
                // Partition-level errors, counted by the API that caused them.
                if let (Err(_), Some(api)) = (answer, api) {
                    self.metrics.count_error(api);
                }
            }
            indices.into_iter().zip(answers)
        });
        for (i, answer) in join_all(runs).await.into_iter().flatten() {
            results[i] = Some(answer);
        }
        results.into_iter().map(|r| ops::typed::<O>(r.expect("every call answered"))).collect()
    }

    /// Runs `ops` on shard `owner` (this one or another, in one message), answering in
    /// their order.
    async fn run_on(self: &Rc<Self>, owner: usize, ops: Vec<(TopicPartition, PartitionOp)>) -> Vec<OpResult> {
        if owner == self.id {
            return self.execute_all(ops).await;
        }
        // What virtual brokers take off the cross-shard route: clients' data.
        let client = ops.iter().any(|(_, op)| {
            matches!(op, PartitionOp::Produce(_) | PartitionOp::Fetch(Fetch { reader: Reader::Consumer { .. }, .. }))
        });
        let count = ops.len();
        let message = |reply| ShardMessage::Batch { ops, reply, sent: std::time::Instant::now() };
        self.exchange(owner, client, count, message, Err).await
    }

    /// Sends shard `owner` the message `message` makes around its reply channel,
    /// counted (`client`: it carries clients' data), and waits for its `count`
    /// answers; each is `failed` with NOT_LEADER_OR_FOLLOWER when the shard cannot
    /// take or answer it.
    async fn exchange<T>(
        &self,
        owner: usize,
        client: bool,
        count: usize,
        message: impl FnOnce(oneshot::Sender<Vec<T>>) -> ShardMessage,
        failed: impl Fn(PartitionError) -> T,
    ) -> Vec<T> {
        let metrics = &self.metrics;
        metrics.cross_shard_messages.set(metrics.cross_shard_messages.get() + 1);
        if client {
            metrics.cross_shard_client_messages.set(metrics.cross_shard_client_messages.get() + 1);
        }
        let (reply, answer) = oneshot::channel();
        let all_failed = |message: &str| (0..count).map(|_| failed(unavailable(message))).collect();
        if self.router.send(owner, message(reply)).await.is_err() {
            return all_failed("shard unavailable");
        }
        answer.await.unwrap_or_else(|_| all_failed("shard dropped the request"))
    }

    /// Runs `ops` on this shard's partitions concurrently, answering in their order.
    /// Reads that need no I/O are answered on the spot (`fetch_hosted`), as a fetch
    /// answers its own shard's: a fetch over thousands of partitions mostly asks
    /// partitions with nothing new for their watermarks.
    pub(crate) async fn execute_all(self: &Rc<Self>, ops: Vec<(TopicPartition, PartitionOp)>) -> Vec<OpResult> {
        let mut results: Vec<Option<OpResult>> = Vec::with_capacity(ops.len());
        let mut pending = Vec::new();
        for (partition, op) in ops {
            let now = match &op {
                PartitionOp::Fetch(Fetch { offset, max_bytes, reader }) => {
                    self.fetch_hosted(&partition, *offset, *max_bytes, reader)
                }
                _ => None,
            };
            match now {
                Some(answer) => results.push(Some(answer.map(PartitionReply::Fetched))),
                None => {
                    pending.push((results.len(), partition, op));
                    results.push(None);
                }
            }
        }
        // Boxed: the operation's future is large, and a batch may hold thousands.
        let run = pending
            .into_iter()
            .map(|(i, partition, op)| Box::pin(async move { (i, self.execute(&partition, op).await) }));
        for (i, result) in join_all(run).await {
            results[i] = Some(result);
        }
        results.into_iter().map(|r| r.expect("every operation answered")).collect()
    }

    /// A fetch's reads (`reads`, in request order) within `max_bytes` over all of
    /// them: each shard reads its partitions in order there within its share of the
    /// budget (in proportion to its partitions, at least a byte), reads that need no
    /// I/O on the spot and the others concurrently with their allotment set aside, and
    /// answers in one message. Each answer says whether its shard's share reached it:
    /// one it did not is answered with its watermarks only (read with no bytes), and
    /// the caller may read it again with what the others left. So a fetch of 10,000
    /// partitions takes one exchange per shard, not one per partition maximum's worth
    /// of the budget (50 at Kafka's default 1 MiB and 50 MiB).
    pub async fn read_many(
        self: &Rc<Self>,
        reads: Vec<Result<(TopicPartition, Fetch), PartitionError>>,
        max_bytes: usize,
    ) -> Vec<(Result<ops::Fetched, PartitionError>, bool)> {
        let total = reads.len().max(1);
        let mut results: Vec<Option<(Result<ops::Fetched, PartitionError>, bool)>> =
            (0..reads.len()).map(|_| None).collect();
        let mut by_owner: BTreeMap<usize, ForShard<(TopicPartition, Fetch)>> = BTreeMap::new();
        {
            let image = self.image();
            // A fetch lists a topic's partitions together: its metadata is looked up
            // once per run of them, not once per partition.
            let mut last: Option<&skein_control::metadata::TopicMeta> = None;
            for (i, read) in reads.into_iter().enumerate() {
                let owned = read.and_then(|(partition, fetch)| {
                    let topic = match last.filter(|t| t.name == partition.topic) {
                        Some(topic) => Some(topic),
                        None => image.topic(&partition.topic),
                    };
                    last = topic;
                    Ok((self.owner_in(topic, &partition)?, partition, fetch))
                });
                match owned {
                    Ok((owner, partition, fetch)) => by_owner.entry(owner).or_default().push(i, (partition, fetch)),
                    Err(error) => {
                        self.metrics.count_error(1);
                        results[i] = Some((Err(error), true));
                    }
                }
            }
        }
        let runs = by_owner.into_iter().map(|(owner, ForShard { indices, items })| async move {
            let share = ((max_bytes as u128 * items.len() as u128 / total as u128) as usize).max(1);
            let answers = self.reads_on(owner, items, share).await;
            indices.into_iter().zip(answers)
        });
        for (i, answer) in join_all(runs).await.into_iter().flatten() {
            if answer.0.is_err() {
                self.metrics.count_error(1);
            }
            results[i] = Some(answer);
        }
        results.into_iter().map(|r| r.expect("every read answered")).collect()
    }

    /// `execute_reads` on shard `owner`, this one or another (in one message).
    async fn reads_on(
        self: &Rc<Self>,
        owner: usize,
        reads: Vec<(TopicPartition, Fetch)>,
        budget: usize,
    ) -> Vec<(Result<ops::Fetched, PartitionError>, bool)> {
        if owner == self.id {
            return self.execute_reads(reads, budget).await;
        }
        let client = reads.iter().any(|(_, fetch)| matches!(fetch.reader, Reader::Consumer { .. }));
        let count = reads.len();
        let message = |reply| ShardMessage::Reads { reads, budget, reply, sent: std::time::Instant::now() };
        self.exchange(owner, client, count, message, |error| (Err(error), true)).await
    }

    /// Reads `reads` of this shard's partitions in order within `budget` bytes: each
    /// may read what is left of it (up to its own maximum), a read that needs I/O with
    /// that much set aside while it runs; once nothing is left the rest are not
    /// reached and read only their watermarks. Answers each read with whether the
    /// budget reached it.
    pub(crate) async fn execute_reads(
        self: &Rc<Self>,
        reads: Vec<(TopicPartition, Fetch)>,
        budget: usize,
    ) -> Vec<(Result<ops::Fetched, PartitionError>, bool)> {
        let mut results = Vec::with_capacity(reads.len());
        let mut pending = Vec::new();
        let mut left = budget;
        for (n, (partition, mut fetch)) in reads.into_iter().enumerate() {
            // Thousands of reads in a row would hold the shard for milliseconds: the
            // produce requests queued behind them go between.
            if n % READS_BETWEEN_YIELDS == READS_BETWEEN_YIELDS - 1 {
                futures_lite::future::yield_now().await;
            }
            let reached = left > 0 || fetch.max_bytes == 0;
            fetch.max_bytes = fetch.max_bytes.min(left);
            match self.fetch_hosted(&partition, fetch.offset, fetch.max_bytes, &fetch.reader) {
                Some(answer) => {
                    let read: usize = answer.as_ref().map_or(0, |f| f.records.iter().map(|b| b.size()).sum());
                    left = left.saturating_sub(read);
                    results.push(Some((answer, reached)));
                }
                None => {
                    left -= fetch.max_bytes;
                    pending.push((results.len(), partition, fetch, reached));
                    results.push(None);
                }
            }
        }
        // Boxed: the operation's future is large, and a fetch may hold thousands.
        let run = pending.into_iter().map(|(i, partition, fetch, reached)| {
            Box::pin(async move {
                let answer = ops::typed::<Fetch>(self.execute(&partition, PartitionOp::Fetch(fetch)).await);
                (i, (answer, reached))
            })
        });
        for (i, answer) in join_all(run).await {
            results[i] = Some(answer);
        }
        results.into_iter().map(|r| r.expect("every read answered")).collect()
    }

    /// Waits until one of `waits` can read past its offset, or `timeout` passes.
    /// Returns the indices (into `waits`, ascending) whose waits ended: the first and
    /// any that ended beside it; none when the time ran out. A partition that cannot
    /// be waited on (unknown here, past its log end) ends its wait at once: reading it
    /// says why. This shard's partitions are waited on in place, each other shard's
    /// in one message to it.
    pub async fn wait_any(self: &Rc<Self>, waits: Vec<Wait>, timeout: Duration) -> Vec<usize> {
        let mut by_owner: BTreeMap<usize, ForShard<Wait>> = BTreeMap::new();
        {
            let image = self.image();
            for (i, wait) in waits.into_iter().enumerate() {
                let Ok(owner) = self.owner(&image, &wait.partition) else {
                    return vec![i];
                };
                by_owner.entry(owner).or_default().push(i, wait);
            }
        }
        let wait_ms = timeout.as_millis() as u64;
        let mut pending: FuturesUnordered<_> = by_owner
            .into_iter()
            .map(|(owner, ForShard { indices, items: waits })| async move {
                let woke = if owner == self.id {
                    self.wait_here(&waits).await
                } else {
                    let count = waits.len();
                    let (reply, answer) = oneshot::channel();
                    let message = ShardMessage::WaitAny { waits, wait_ms, reply };
                    self.metrics.cross_shard_messages.set(self.metrics.cross_shard_messages.get() + 1);
                    if self.router.send(owner, message).await.is_err() {
                        // Reading them gives their error.
                        (0..count).collect()
                    } else {
                        answer.await.unwrap_or_else(|_| (0..count).collect())
                    }
                };
                woke.into_iter().map(|i| indices[i]).collect::<Vec<usize>>()
            })
            .collect();
        // Returning drops the other waits; another shard's sees its reply channel close
        // and stops (`inbox::serve_peer`).
        let first = async {
            while let Some(woke) = pending.next().await {
                if !woke.is_empty() {
                    return woke;
                }
            }
            Vec::new()
        };
        let expired = async {
            glommio::timer::sleep(timeout).await;
            Vec::new()
        };
        let mut woke = futures_lite::future::or(first, expired).await;
        if woke.is_empty() {
            return woke;
        }
        while let Some(Some(more)) = pending.next().now_or_never() {
            woke.extend(more);
        }
        woke.sort_unstable();
        woke
    }

    /// `wait_any` over partitions this shard owns, without a time limit (the caller
    /// sets one): the indices into `waits` whose waits ended first, ascending.
    pub(crate) async fn wait_here(&self, waits: &[Wait]) -> Vec<usize> {
        let mut pending: FuturesUnordered<_> = waits
            .iter()
            .enumerate()
            .map(|(i, wait)| {
                let offset = Offset(wait.offset);
                let state = self.partition(&wait.partition).filter(|state| offset <= state.log_end_offset());
                async move {
                    if let Some(state) = state {
                        self.wait_readable(&state, offset, wait.isolation).await;
                    }
                    i
                }
            })
            .collect();
        let Some(first) = pending.next().await else {
            return std::future::pending().await;
        };
        let mut woke = vec![first];
        while let Some(Some(more)) = pending.next().now_or_never() {
            woke.push(more);
        }
        woke.sort_unstable();
        woke
    }

    /// The shard that owns `partition` here, or why no operation on it can run here:
    /// an unknown partition, or one another broker holds (the client's metadata is
    /// stale).
    pub(super) fn owner(
        &self,
        image: &skein_control::metadata::MetadataImage,
        partition: &TopicPartition,
    ) -> Result<usize, PartitionError> {
        self.owner_in(image.topic(&partition.topic), partition)
    }

    /// `owner`, with the partition's topic as the image has it (`None`: unknown).
    fn owner_in(
        &self,
        topic: Option<&skein_control::metadata::TopicMeta>,
        partition: &TopicPartition,
    ) -> Result<usize, PartitionError> {
        let unknown = PartitionError::new(code::UNKNOWN_TOPIC_OR_PARTITION);
        let topic = topic.ok_or_else(|| unknown.clone())?;
        let owner = usize::try_from(partition.partition).ok().and_then(|p| topic.shards.get(p).copied());
        let owner = owner.ok_or(unknown)?;
        if !topic.is_replica(partition.partition, self.settings.node_id) {
            return Err(PartitionError::new(code::NOT_LEADER_OR_FOLLOWER));
        }
        Ok(owner)
    }
}

/// An operation that never reached its shard, as Kafka's clients retry it.
pub(super) fn unavailable(message: &str) -> PartitionError {
    PartitionError::with_message(code::NOT_LEADER_OR_FOLLOWER, message)
}
