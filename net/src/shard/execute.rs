//! A partition operation on the shard that owns it: `Shard::execute` opens, releases,
//! removes and assigns partitions and runs the Kafka operations (produce, fetch,
//! offsets, coordinators' calls) on their replicas, timing each operation's polls
//! against its partition (the load the balancer moves).

use super::*;
use skein_replication::{Isolation, OffsetSpec};

impl Shard {
    /// The replica a consumer on `rack` reading at `offset` should read from, where it
    /// is not this leader, as Kafka's `RackAwareReplicaSelector` chooses: none when this
    /// broker is on the consumer's rack; otherwise the live in-sync follower on that
    /// rack that holds `offset` and is furthest ahead.
    fn preferred_read_replica(&self, state: &Partition, offset: Offset, rack: &str) -> Option<i32> {
        let me = self.settings.node_id;
        if !self.settings.rack_aware_reads || self.settings.rack.as_deref() == Some(rack) {
            return None;
        }
        let image = self.image();
        let replica = state.replica();
        replica
            .isr()
            .iter()
            .filter(|&&id| id != me && image.is_live(id, me))
            .filter(|&&id| image.brokers.get(&id).and_then(|b| b.rack.as_deref()) == Some(rack))
            .filter_map(|&id| Some((replica.follower_log_end(id)?, id)))
            .filter(|&(end, _)| end >= offset && offset >= state.log().log_start_offset())
            .max()
            .map(|(_, id)| id)
    }

    /// Takes the controller's assignment of a hosted partition: its role, epochs and
    /// ISR. The group coordinator follows the leadership of its offsets partition:
    /// unloaded when it goes, loaded again from the log when it comes (as a follower
    /// the replica kept the log in sync).
    fn take_assignment(self: &Rc<Self>, partition: &TopicPartition, state: &Rc<Partition>, assignment: Assignment) {
        let was_leader = state.replica().role() == replication::Role::Leader;
        let was_epoch = state.replica().leader_epoch().0;
        assign(state, assignment, &self.metrics.assignments);
        let leads = state.replica().role() == replication::Role::Leader;
        if partition.topic == skein_coordinator::group::OFFSETS_TOPIC && was_leader != leads {
            self.coordinators.groups.unload(partition.partition);
            if leads {
                let load = skein_coordinator::serve::group::load_as_leader(
                    self.clone(),
                    partition.clone(),
                    state.log().clone(),
                    Duration::ZERO,
                );
                glommio::spawn_local(load).detach();
            }
        }
        // So does the transaction coordinator, loaded again in each new leader epoch
        // (its coordinator epoch, which fences markers of an older coordinator).
        let epoch = state.replica().leader_epoch().0;
        if partition.topic == skein_coordinator::txn::TRANSACTION_TOPIC && (was_leader != leads || epoch != was_epoch) {
            self.coordinators.txns.unload(partition.partition);
            if leads {
                self.spawn_txn_load(partition, state.log());
            }
        }
        if partition.topic == skein_coordinator::serve::share::STATE_TOPIC
            && (was_leader != leads || epoch != was_epoch)
        {
            self.coordinators.shares.unload(partition.partition);
            if leads {
                self.spawn_share_state_load(partition, state.log());
            }
        }
    }

    /// Loads the transactional ids of `partition` of `__transaction_state` from `log`,
    /// in a task of its own, while this shard leads it.
    fn spawn_txn_load(self: &Rc<Self>, partition: &TopicPartition, log: &Rc<skein_engine::Log<DmaStorage>>) {
        let load =
            skein_coordinator::serve::txn::load_as_leader(self.clone(), partition.clone(), log.clone(), Duration::ZERO);
        glommio::spawn_local(load).detach();
    }

    /// Loads the share-partition states of `partition` of `__share_group_state`, in
    /// a task of its own, while this shard leads it.
    fn spawn_share_state_load(self: &Rc<Self>, partition: &TopicPartition, log: &Rc<skein_engine::Log<DmaStorage>>) {
        let load = skein_coordinator::serve::share::load_as_leader(self.clone(), partition.clone(), log.clone());
        glommio::spawn_local(load).detach();
    }

    /// Opens (creating if needed) `partition`'s log as `open` says and hosts it in the
    /// role its assignment gives; a partition already hosted takes the settings and
    /// the assignment.
    pub(super) async fn open_now(self: &Rc<Self>, partition: &TopicPartition, open: ops::Open) -> OpResult {
        let ops::Open { settings, assignment, .. } = open;
        if let Some(existing) = self.partition(partition) {
            if existing.topic_id() == settings.topic_id {
                existing.apply(&settings)?;
                self.take_assignment(partition, &existing, assignment);
                return Ok(PartitionReply::Done);
            }
            // An older incarnation whose removal has not arrived yet: the
            // log manager deletes it before opening the new one.
            self.partitions.borrow_mut().remove(partition);
        }
        let log =
            Box::pin(self.logs.open_for_topic(partition.clone(), settings.log.clone(), settings.topic_id)).await?;
        // The offsets topic is written only by the coordinator: its leader
        // loads the groups from it (a follower loads them when it comes to
        // lead). Its producer state holds the transactions of offset commits
        // (TxnOffsetCommit), so that the cleaner drops aborted ones.
        let leads = assignment.leader == self.settings.node_id;
        let producers = if partition.topic == skein_coordinator::group::OFFSETS_TOPIC {
            let loaded = match leads {
                true => Box::pin(skein_coordinator::serve::group::load(&**self, &log, partition.partition)).await,
                false => Ok(()),
            };
            if let Err(error) = loaded {
                skein_coordinator::serve::group::load_failed(&**self, partition, &error);
                // Retried once the partition is hosted.
                let retry = skein_coordinator::serve::group::load_as_leader(
                    self.clone(),
                    partition.clone(),
                    log.clone(),
                    Duration::from_millis(200),
                );
                glommio::spawn_local(retry).detach();
            }
            Box::pin(replication::load_producers(&log)).await
        } else if partition.topic == skein_coordinator::txn::TRANSACTION_TOPIC
            || partition.topic == skein_coordinator::serve::share::STATE_TOPIC
        {
            // Loaded by its leader once the partition is hosted (below).
            ProducerStates::default()
        } else {
            Box::pin(replication::load_producers(&log)).await
        };
        let replica = replication::Partition::sole_leader(log, settings.topic_id, self.settings.node_id, producers);
        if let Some(&recovered) = self.settings.recovered_high_watermarks.get(partition) {
            replica.recover_high_watermark(recovered);
        }
        replica.set_min_insync(settings.append.min_insync_replicas.max(1) as usize);
        assign(&replica, assignment, &self.metrics.assignments);
        self.partitions.borrow_mut().insert(
            partition.clone(),
            Rc::new(Partition {
                replica,
                rules: Cell::new(settings.append),
                bytes_in: Cell::new(0),
                bytes_out: Cell::new(0),
                requests: Cell::new(0),
                busy_ns: Cell::new(0),
                isr_change_pending: Cell::new(false),
                follower_lag: Cell::new(0),
                shares: Default::default(),
            }),
        );
        if partition.topic == skein_coordinator::txn::TRANSACTION_TOPIC && leads {
            let hosted = self.partition(partition).expect("inserted above");
            self.spawn_txn_load(partition, hosted.log());
        }
        if partition.topic == skein_coordinator::serve::share::STATE_TOPIC && leads {
            let hosted = self.partition(partition).expect("inserted above");
            self.spawn_share_state_load(partition, hosted.log());
        }
        Ok(PartitionReply::Done)
    }

    /// Executes an operation on a partition this shard owns, counting the time its
    /// polls take against the partition (`Partition::busy_ns`: the shard's CPU
    /// attributed to it, which the load balancer moves).
    pub async fn execute(self: &Rc<Self>, partition: &TopicPartition, op: PartitionOp) -> OpResult {
        let spent = Cell::new(0u64);
        // Pinned where it is built: passed by value, the operation's future would take a
        // second slot of its size in this one.
        let result = poll_timed(std::pin::pin!(self.execute_untimed(partition, op)), &spent).await;
        if let Some(state) = self.partition(partition) {
            state.busy_ns.set(state.busy_ns.get() + spent.get());
        }
        result
    }

    async fn execute_untimed(self: &Rc<Self>, partition: &TopicPartition, op: PartitionOp) -> OpResult {
        // A partition still being opened in the background is waited for, not refused.
        if self.openings.len() > 0 {
            self.openings.opened(partition).await;
        }
        match op {
            PartitionOp::Open(open) if open.in_background && self.partition(partition).is_none() => {
                self.open_in_background(partition, open);
                return Ok(PartitionReply::Done);
            }
            PartitionOp::Open(open) => return Box::pin(self.open_now(partition, open)).await,
            PartitionOp::Release(ops::Release) => {
                let removed = self.partitions.borrow_mut().remove(partition);
                if removed.is_none() {
                    return Err(PartitionError::new(code::NOT_LEADER_OR_FOLLOWER));
                }
                Box::pin(self.logs.close(partition)).await?;
                return Ok(PartitionReply::Done);
            }
            PartitionOp::Precopy(ops::Precopy { target }) => {
                if self.partition(partition).is_none() {
                    return Err(PartitionError::new(code::REPLICA_NOT_AVAILABLE));
                }
                let precopy = Box::pin(self.logs.precopy(partition, target)).await?;
                return Ok(PartitionReply::Precopied(Box::new(precopy)));
            }
            PartitionOp::FinishMove(ops::FinishMove(precopy)) => {
                self.partitions.borrow_mut().remove(partition);
                let bytes = Box::pin(self.logs.finish_move(partition, *precopy)).await?;
                return Ok(PartitionReply::Moved(bytes));
            }
            PartitionOp::Remove(ops::Remove { topic_id }) => {
                // Only the incarnation being deleted: a topic recreated meanwhile keeps
                // its log (`delete_for_topic` checks the id).
                let current = self.partitions.borrow().get(partition).map(|p| p.topic_id());
                if current.is_none_or(|id| id == topic_id) {
                    self.partitions.borrow_mut().remove(partition);
                }
                return match Box::pin(self.logs.delete_for_topic(partition, topic_id)).await {
                    Ok(()) | Err(skein_engine::Error::UnknownPartition(_)) => Ok(PartitionReply::Done),
                    Err(e) => Err(e.into()),
                };
            }
            _ => {}
        }
        let Some(state) = self.partition(partition) else {
            if self.settings.log_dirs.is_offline(partition) {
                return Err(PartitionError::new(code::KAFKA_STORAGE_ERROR));
            }
            return Err(PartitionError::new(code::NOT_LEADER_OR_FOLLOWER));
        };
        if !matches!(op, PartitionOp::Stats(_)) {
            state.requests.set(state.requests.get() + 1);
        }
        let log = state.log();
        // Clients write, list offsets and delete records only at the leader.
        let leader_only = matches!(
            op,
            PartitionOp::Produce(_)
                | PartitionOp::ListOffsets(_)
                | PartitionOp::DeleteRecords(_)
                | PartitionOp::Group(_)
                | PartitionOp::Txn(_)
                | PartitionOp::Producers(_)
                | PartitionOp::ShareState(_)
                | PartitionOp::Share(_)
        );
        if leader_only && state.replica().role() != replication::Role::Leader {
            return Err(PartitionError::new(code::NOT_LEADER_OR_FOLLOWER));
        }
        match op {
            PartitionOp::Produce(produce) => {
                Box::pin(self.produce(partition, &state, produce)).await.map(PartitionReply::Produced)
            }
            PartitionOp::Fetch(ops::Fetch { offset, max_bytes, reader }) => {
                let offset = Offset(offset);
                if let Some(answer) = self.fetch_gate(&state, offset, &reader) {
                    return answer.map(PartitionReply::Fetched);
                }
                let isolation = reader.isolation();
                if let Some(answer) = self.fetch_now(&state, offset, max_bytes, &reader) {
                    return answer.map(PartitionReply::Fetched);
                }
                let batches = state.read(offset, max_bytes, isolation).await.inspect_err(|e| {
                    if isolation == Isolation::LogEnd {
                        tracing::debug!(target: "skein::net", partition = %partition, error = %e, "a follower's read failed");
                    }
                })?;
                Ok(PartitionReply::Fetched(self.fetched(&state, offset, batches, isolation)))
            }
            PartitionOp::FollowerFetch(ops::FollowerFetch {
                follower,
                offset,
                current_leader_epoch,
                last_fetched_epoch,
            }) => {
                // A follower whose last epoch ends before where it fetches (or that
                // the leader does not know), or that is past the log end, diverged: it
                // truncates first (KIP-320).
                let log_end = log.log_end_offset();
                let latest = log.latest_leader_epoch();
                let end_for = |epoch| log.end_offset_for_epoch(epoch);
                if let Some(diverging) =
                    replication::divergence(end_for, latest, log_end, Offset(offset), last_fetched_epoch)
                {
                    state.replica().check_epoch(current_leader_epoch)?;
                    tracing::debug!(target: "skein::net", partition = %partition, follower, offset, last_fetched_epoch,
                        log_end = log_end.0, epoch = diverging.0, end = diverging.1, "a follower's log diverged");
                    let (leader_epoch, end_offset) = diverging;
                    return Ok(PartitionReply::FollowerFetched(Some(ops::EpochEnd { leader_epoch, end_offset })));
                }
                let now = skein_engine::log::now_ms();
                let proposal = state.follower_fetched(follower, Offset(offset), current_leader_epoch, now)?;
                // A fenced follower (gone, or shutting down) is not proposed for the ISR.
                if let Some(proposal) = proposal.filter(|_| self.image().is_live(follower, self.settings.node_id)) {
                    self.propose_isr(partition, proposal);
                }
                Ok(PartitionReply::FollowerFetched(None))
            }
            PartitionOp::Assign(ops::Assign(assignment)) => {
                self.take_assignment(partition, &state, assignment);
                Ok(PartitionReply::Done)
            }
            PartitionOp::ListOffsets(ops::ListOffsets { timestamp, committed }) => {
                let Some(spec) = OffsetSpec::from_kafka(timestamp) else {
                    let message = format!("invalid timestamp {timestamp}");
                    return Err(PartitionError::with_message(code::INVALID_REQUEST, message));
                };
                let isolation = if committed { Isolation::Committed } else { Isolation::HighWatermark };
                let (offset, timestamp, leader_epoch) = state.list_offset(spec, isolation).await?;
                Ok(PartitionReply::OffsetAt(ops::OffsetAt { offset, timestamp, leader_epoch }))
            }
            PartitionOp::DeleteRecords(ops::DeleteRecords { offset }) => {
                // -1 means the high watermark.
                let before = (offset != -1).then_some(Offset(offset));
                let low = Box::pin(state.delete_records(before)).await?;
                Ok(PartitionReply::RecordsDeleted(ops::RecordsDeleted { low_watermark: low.0 }))
            }
            PartitionOp::EpochEndOffset(ops::EpochEndOffset { current_leader_epoch, leader_epoch }) => {
                let (leader_epoch, end_offset) =
                    state.epoch_end_offset(current_leader_epoch, LeaderEpoch(leader_epoch))?;
                Ok(PartitionReply::EpochEnd(ops::EpochEnd { leader_epoch: leader_epoch.0, end_offset: end_offset.0 }))
            }
            PartitionOp::Reconfigure(ops::Reconfigure(settings)) => {
                state.apply(&settings)?;
                Ok(PartitionReply::Done)
            }
            PartitionOp::Stats(ops::Stats) => Ok(PartitionReply::Stats(ops::PartitionStats {
                size_bytes: log.size_bytes(),
                log_start_offset: log.log_start_offset().0,
                log_end_offset: log.log_end_offset().0,
                high_watermark: state.high_watermark().0,
                bytes_in: state.bytes_in.get(),
                bytes_out: state.bytes_out.get(),
                requests: state.requests.get(),
                busy_us: state.busy_ns.get() / 1000,
            })),
            PartitionOp::Group(ops::Group(call)) => {
                if !self.coordinators.groups.is_loaded(partition.partition) {
                    return Err(PartitionError::new(code::COORDINATOR_LOAD_IN_PROGRESS));
                }
                let answer = Box::pin(skein_coordinator::serve::group::run(&**self, &state, *call)).await?;
                Ok(PartitionReply::Group(Box::new(answer)))
            }
            PartitionOp::Txn(ops::Txn(call)) => {
                if !self.coordinators.txns.is_loaded(partition.partition) {
                    return Err(PartitionError::new(code::COORDINATOR_LOAD_IN_PROGRESS));
                }
                let answer =
                    Box::pin(skein_coordinator::serve::txn::run(self, &state, partition.partition, *call)).await;
                Ok(PartitionReply::Txn(Box::new(answer)))
            }
            PartitionOp::WriteMarker(marker) => {
                Box::pin(self.write_marker(partition, &state, &marker)).await?;
                Ok(PartitionReply::Done)
            }
            PartitionOp::Producers(ops::Producers) => Ok(PartitionReply::Producers(state.producers().describe())),
            PartitionOp::ShareState(ops::ShareState(call)) => {
                if !self.coordinators.shares.is_loaded(partition.partition) {
                    return Err(PartitionError::new(code::COORDINATOR_LOAD_IN_PROGRESS));
                }
                match Box::pin(skein_coordinator::serve::share::run(&**self, &state, *call)).await {
                    Ok(stored) => Ok(PartitionReply::ShareState(Box::new(stored))),
                    Err((error, text)) if text.is_empty() => Err(PartitionError::new(error)),
                    Err((error, text)) => Err(PartitionError::with_message(error, text)),
                }
            }
            PartitionOp::Share(ops::Share(call)) => {
                match Box::pin(skein_coordinator::serve::share_leader::run(self, partition, &state, *call)).await {
                    Ok(answer) => Ok(PartitionReply::Share(Box::new(answer))),
                    Err(e) => Err(PartitionError { code: e.code, message: e.message }),
                }
            }
            PartitionOp::Open(_)
            | PartitionOp::Remove(_)
            | PartitionOp::Release(_)
            | PartitionOp::Precopy(_)
            | PartitionOp::FinishMove(_) => {
                unreachable!("handled above")
            }
        }
    }

    /// A fetch of `state` at `offset` that is refused or sent elsewhere before any
    /// read: a follower (not serving this reader), a replicating follower below the
    /// log start, or a consumer the leader sends to a replica on its rack.
    fn fetch_gate(&self, state: &Partition, offset: Offset, reader: &Reader) -> Option<FetchResult> {
        // The leader serves every read; a follower serves consumers that may read from
        // followers (KIP-392), up to its high watermark.
        let leads = state.replica().role() == replication::Role::Leader;
        if !leads && !matches!(reader, Reader::Consumer { any_replica: true, .. }) {
            return Some(Err(PartitionError::new(code::NOT_LEADER_OR_FOLLOWER)));
        }
        let log = state.log();
        // A follower whose log ends below this log's start reads nothing: the log start
        // it is sent tells it to restart there (Kafka answers OFFSET_OUT_OF_RANGE and
        // the follower then asks for the log start).
        if *reader == Reader::Follower && offset < log.log_start_offset() {
            return Some(Ok(self.fetched(state, offset, Vec::new(), Isolation::LogEnd)));
        }
        if let Reader::Consumer { rack: Some(rack), .. } = reader {
            let replica = leads.then(|| self.preferred_read_replica(state, offset, rack)).flatten()?;
            return Some(Ok(ops::Fetched {
                high_watermark: state.high_watermark().0,
                log_start_offset: log.log_start_offset().0,
                records: Vec::new(),
                preferred_read_replica: replica,
                last_stable_offset: state.last_stable_offset().0,
                aborted: Vec::new(),
                stamp: None,
            }));
        }
        None
    }

    /// A fetch of `state` at `offset` (past its gate) answered without waiting or I/O:
    /// watermarks only (`max_bytes` 0), nothing visible to read, or batches in the
    /// cache. `None` when the log must read from disk, or its read fails.
    fn fetch_now(&self, state: &Partition, offset: Offset, max_bytes: usize, reader: &Reader) -> Option<FetchResult> {
        let log = state.log();
        let isolation = reader.isolation();
        // A fetch the response budget did not reach asks only for watermarks; so does
        // a diverged follower's, whose position may lie past this log's end (it is
        // told where to truncate, not refused).
        if max_bytes == 0 {
            let (start, end) = (log.log_start_offset(), log.log_end_offset());
            if isolation != Isolation::LogEnd && (offset < start || offset > end) {
                return Some(Err(skein_engine::Error::OffsetOutOfRange { offset, start, end }.into()));
            }
            return Some(Ok(self.fetched(state, offset, Vec::new(), isolation)));
        }
        // Consumers never read past the high watermark (read_committed ones past the
        // last stable offset); followers read to the log end. A read's error is left
        // to the routed read, which the caller logs.
        let batches = state.read_now(offset, max_bytes, isolation)?.ok()?;
        Some(Ok(self.fetched(state, offset, batches, isolation)))
    }

    /// The reply to a fetch of `state` from `offset` that read `batches`, counted.
    fn fetched(
        &self,
        state: &Partition,
        offset: Offset,
        batches: Vec<skein_engine::Batch>,
        isolation: Isolation,
    ) -> ops::Fetched {
        let sent = batches.iter().map(|b| b.size() as u64).sum::<u64>();
        self.metrics.bytes_out.set(self.metrics.bytes_out.get() + sent);
        // Per partition too, for `skein placement show`.
        state.bytes_out.set(state.bytes_out.get() + sent);
        // What a read_committed consumer must drop: the aborted transactions the
        // records read may hold (Kafka's `collectAbortedTxns`).
        let aborted = match (isolation, batches.last()) {
            (Isolation::Committed, Some(last)) => state.aborted_between(offset, last.next_offset()),
            _ => Vec::new(),
        };
        ops::Fetched {
            high_watermark: state.high_watermark().0,
            log_start_offset: state.log().log_start_offset().0,
            records: batches,
            preferred_read_replica: -1,
            last_stable_offset: state.last_stable_offset().0,
            aborted,
            // Only this shard moves its logs' stamps: it stands where the watermarks
            // above were taken.
            stamp: Some(skein_engine::Stamped::now(state.log().stamp())),
        }
    }

    /// A fetch's read (a consumer's or a follower's) of a partition this shard hosts,
    /// whose owner the caller checked against its metadata (`call_many`,
    /// `read_many`), answered on the spot with no operation routed, when it needs no
    /// waiting and no I/O (`fetch_gate`, `fetch_now`): most reads of a long poll find
    /// nothing new, or what a write just put in the cache. `None`: run it as an
    /// operation (it is not hosted or led here, an error, or a disk read); errors are
    /// left to the operation, which counts them.
    pub(crate) fn fetch_hosted(
        &self,
        partition: &TopicPartition,
        offset: i64,
        max_bytes: usize,
        reader: &Reader,
    ) -> Option<FetchResult> {
        let state = self.partition(partition)?;
        let offset = Offset(offset);
        let answer =
            self.fetch_gate(&state, offset, reader).or_else(|| self.fetch_now(&state, offset, max_bytes, reader))?;
        if answer.is_err() {
            return None;
        }
        state.requests.set(state.requests.get() + 1);
        Some(answer)
    }

    /// `replication::Partition::wait_readable`, counted as a parked fetch wait while
    /// it waits.
    pub(crate) async fn wait_readable(&self, state: &Partition, offset: Offset, isolation: Isolation) {
        let _parked = Parked::new(&self.metrics.fetch_waits_parked);
        state.wait_readable(offset, isolation).await;
    }
}

/// A fetch's read of one partition.
pub(crate) type FetchResult = Result<ops::Fetched, PartitionError>;

/// Counts a parked fetch wait for as long as it lives, however it ends (answered,
/// timed out, or dropped when its request completed elsewhere).
pub(crate) struct Parked<'a>(&'a Cell<u64>);

impl<'a> Parked<'a> {
    pub(crate) fn new(gauge: &'a Cell<u64>) -> Parked<'a> {
        gauge.set(gauge.get() + 1);
        Parked(gauge)
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// Runs `future`, adding the time spent inside its polls to `spent` (ns): the CPU it
/// took, without the time it waited.
async fn poll_timed<F: std::future::Future>(mut future: std::pin::Pin<&mut F>, spent: &Cell<u64>) -> F::Output {
    std::future::poll_fn(|cx| {
        let started = std::time::Instant::now();
        let poll = future.as_mut().poll(cx);
        spent.set(spent.get() + started.elapsed().as_nanos() as u64);
        poll
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn future_size<F>(_: fn(&'static Rc<Shard>, &'static TopicPartition, PartitionOp) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    // `route_to` boxes a local operation's future, a copy of its whole size, for every
    // partition of every request (16 per fetch of 16 partitions): the rare operations
    // and produce's larger state are boxed inside it, so that a fetch copies 1.5 KiB,
    // not the 7.5 KiB it did (memmove was 6-8% of the broker at 10 000 msg/s).
    #[test]
    fn a_partition_operation_future_stays_small() {
        let size = future_size(|shard, partition, op| shard.execute(partition, op));
        assert!(size <= 2048, "execute's future is {size} bytes");
    }
}
