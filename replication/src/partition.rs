//! A partition replica: its log, its idempotent producers' state, its replica state and
//! the produces waiting on its high watermark. Appends as leader go through
//! `append_as_leader`, which deduplicates retried batches, stamps the leader epoch,
//! keeps the producer snapshots, and with `acks=all` answers only once the high
//! watermark passes the batch.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use skein_engine::io::Storage;
use skein_engine::{AppendMode, Batch, LeaderEpoch, Log, Offset, Waiters};

use crate::delayed::HighWatermarkWaiters;
use crate::producer::{Check, ProducerStates};
use crate::refusal::Refusal;
use crate::replica::{BrokerId, IsrProposal, ReplicaState, Role};

pub struct Partition<S: Storage> {
    log: Rc<Log<S>>,
    /// Shared with the log's cleaner (`skein_engine::log::Transactions`).
    producers: Rc<RefCell<ProducerStates>>,
    /// The id of the topic incarnation this partition belongs to.
    topic_id: [u8; 16],
    /// The replica's role, epoch, ISR and high watermark.
    replica_state: RefCell<ReplicaState>,
    /// `acks=all` produces waiting for the high watermark to pass their batch.
    acks: RefCell<HighWatermarkWaiters>,
    /// Consumer fetches waiting for the high watermark to pass their offset (Kafka's
    /// DelayedFetch), keyed by the high watermark each needs: woken when it gets there,
    /// and all when the role changes. Wakers, not channels: a long poll waits on every
    /// partition it reads, and most of those waits end unwoken.
    reads: Waiters,
    /// read_committed fetches waiting for the last stable offset to pass their offset.
    stable_reads: Waiters,
    /// Producer snapshots: the active segment base last seen, the snapshot owed since
    /// a roll (its offset and the last reservation ticket before it), and whether one
    /// is being written.
    snapshot_base: Cell<Offset>,
    snapshot_due: Cell<Option<(Offset, u64)>>,
    snapshot_writing: Rc<Cell<bool>>,
    /// Whether the controller's assignment reached this replica since it was opened.
    assigned: Cell<bool>,
    /// The high watermark of `replication-offset-checkpoint` when it was opened.
    recovered_high_watermark: Cell<Option<Offset>>,
}

/// What `acks=all` asks of a leader append: the ISR it needs to be acknowledged
/// (`min.insync.replicas`) and how long the producer waits for the commit (the
/// Produce request's `timeout_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcksAll {
    pub min_insync: usize,
    pub timeout: std::time::Duration,
}

/// How far a read may go (Kafka's `FetchIsolation`): a follower to the log's written
/// end, a consumer to the high watermark, a read_committed one to the last stable
/// offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    LogEnd,
    HighWatermark,
    Committed,
}

/// What ListOffsets asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    Earliest,
    Latest,
    /// The offset of the record with the largest timestamp (KIP-734).
    MaxTimestamp,
    /// The first offset on local storage (KIP-405).
    EarliestLocal,
    /// The last offset in remote storage (KIP-1005), or the first waiting to be
    /// uploaded (KIP-1023): none, with no tiered storage, answered as Kafka answers a
    /// topic without it (offset and timestamp -1).
    Tiered,
    /// The first offset whose record's timestamp is at least this.
    Timestamp(i64),
}

impl OffsetSpec {
    /// A ListOffsets timestamp as Kafka reads it: -2 earliest, -1 latest, -3 max
    /// timestamp, -4 earliest local, -5 latest tiered, -6 earliest pending upload, a
    /// timestamp otherwise; `None` for another negative.
    pub fn from_kafka(timestamp: i64) -> Option<OffsetSpec> {
        match timestamp {
            -2 => Some(OffsetSpec::Earliest),
            -1 => Some(OffsetSpec::Latest),
            -3 => Some(OffsetSpec::MaxTimestamp),
            -4 => Some(OffsetSpec::EarliestLocal),
            -5 | -6 => Some(OffsetSpec::Tiered),
            t if t >= 0 => Some(OffsetSpec::Timestamp(t)),
            _ => None,
        }
    }
}

/// What a leader append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: Offset,
    pub log_start_offset: Offset,
    /// A retry of a batch already in the log: answered with its first offset.
    pub duplicate: bool,
}

/// Why a leader append failed.
#[derive(Debug)]
pub enum AppendError {
    /// Refused by the producer state, the role or the ISR.
    Refused(Refusal),
    /// The log failed it.
    Log(skein_engine::Error),
}

impl<S: Storage> Partition<S> {
    /// The sole leader of `log` on broker `broker` (one node), with producer state
    /// rebuilt from snapshots and the log (`load_producers`), or none for a log no
    /// idempotent producer writes.
    pub fn sole_leader(log: Rc<Log<S>>, topic_id: [u8; 16], broker: BrokerId, producers: ProducerStates) -> Self {
        let replica = ReplicaState::sole_leader(broker, LeaderEpoch(0), log.offset_written_end());
        let producers = Rc::new(RefCell::new(producers));
        log.set_transactions(Rc::new(crate::txn::CleanerView(producers.clone())));
        Partition {
            snapshot_base: Cell::new(log.active_segment_base()),
            log,
            producers,
            topic_id,
            replica_state: RefCell::new(replica),
            acks: RefCell::new(HighWatermarkWaiters::default()),
            reads: Waiters::default(),
            stable_reads: Waiters::default(),
            snapshot_due: Cell::new(None),
            snapshot_writing: Rc::new(Cell::new(false)),
            assigned: Cell::new(false),
            recovered_high_watermark: Cell::new(None),
        }
    }

    /// The partition's log.
    pub fn log(&self) -> &Rc<Log<S>> {
        &self.log
    }

    /// The offset the next record appended gets.
    pub fn log_end_offset(&self) -> Offset {
        self.log.log_end_offset()
    }

    /// The id of the topic incarnation this partition belongs to.
    pub fn topic_id(&self) -> [u8; 16] {
        self.topic_id
    }

    /// The replica's role, epochs, ISR and high watermark, to read (changed only
    /// through this partition's methods).
    pub fn replica(&self) -> std::cell::Ref<'_, ReplicaState> {
        self.replica_state.borrow()
    }

    /// The idempotent and transactional producers' state, to read.
    pub fn producers(&self) -> std::cell::Ref<'_, ProducerStates> {
        self.producers.borrow()
    }

    /// Forgets producers silent for `expiration_ms`; returns how many.
    pub fn expire_producers(&self, now_ms: i64, expiration_ms: i64) -> usize {
        self.producers.borrow_mut().expire(now_ms, expiration_ms)
    }

    /// Records that the leader sent `proposal` (an ISR change) to the controller: until
    /// it commits or fails, a joining follower counts for the high watermark (KIP-497).
    pub fn proposing(&self, proposal: &IsrProposal) {
        self.replica_state.borrow_mut().proposing(proposal);
    }

    /// Whether an `acks=all` append may start: the ISR holds at least `min_insync`
    /// replicas (Kafka checks this before the batch is validated or written).
    ///
    /// # Errors
    /// `NotEnoughReplicas`.
    pub fn check_insync(&self, min_insync: usize) -> Result<(), Refusal> {
        match self.replica_state.borrow().isr().len() < min_insync {
            true => Err(Refusal::NotEnoughReplicas),
            false => Ok(()),
        }
    }

    /// How far `isolation` may read: the log's written end, the high watermark, or
    /// the last stable offset.
    pub fn visible_end(&self, isolation: Isolation) -> Offset {
        match isolation {
            Isolation::LogEnd => self.log.offset_written_end(),
            Isolation::HighWatermark => self.high_watermark(),
            Isolation::Committed => self.last_stable_offset(),
        }
    }

    /// What `isolation` may read from `offset` (at most `max_bytes`, but always a
    /// whole first batch) without I/O: `None` when the log must go to disk.
    pub fn read_now(
        &self,
        offset: Offset,
        max_bytes: usize,
        isolation: Isolation,
    ) -> Option<Result<Vec<Batch>, skein_engine::Error>> {
        let limit = (isolation != Isolation::LogEnd).then(|| self.visible_end(isolation));
        self.log.read_now(offset, max_bytes, limit)
    }

    /// What `isolation` may read from `offset`, as `read_now`, going to disk if needed.
    ///
    /// # Errors
    /// The log's (`OffsetOutOfRange` outside it).
    pub async fn read(
        &self,
        offset: Offset,
        max_bytes: usize,
        isolation: Isolation,
    ) -> Result<Vec<Batch>, skein_engine::Error> {
        let limit = (isolation != Isolation::LogEnd).then(|| self.visible_end(isolation));
        self.log.read(offset, max_bytes, limit).await
    }

    /// Completes when a reader at `offset` may have more to read, or the log closed: a
    /// follower at the next write; a consumer when the high watermark passes its offset
    /// (written records the followers have not caught up with are not for it yet), a
    /// read_committed one the last stable offset.
    pub async fn wait_readable(&self, offset: Offset, isolation: Isolation) {
        match isolation {
            Isolation::LogEnd => self.log.wait_for_data(offset).await,
            Isolation::Committed => {
                while self.last_stable_offset() <= offset && !self.log.is_closed() {
                    self.wait_for_stable(offset).await;
                }
            }
            Isolation::HighWatermark => {
                while self.high_watermark() <= offset && !self.log.is_closed() {
                    self.wait_for_high_watermark(offset).await;
                }
            }
        }
    }

    /// ListOffsets: the offset `spec` names, its record's timestamp and the leader
    /// epoch it was written in (-1, -1, -1 where there is none); `Latest` is the last
    /// stable offset for read_committed (`Isolation::Committed`), the high watermark
    /// otherwise, with the latest epoch, as Kafka answers.
    ///
    /// # Errors
    /// The log's, when it cannot read its indexes.
    pub async fn list_offset(
        &self,
        spec: OffsetSpec,
        isolation: Isolation,
    ) -> Result<(i64, i64, i32), skein_engine::Error> {
        let found = match spec {
            // Earliest local is earliest without tiered storage (KIP-405).
            OffsetSpec::Earliest | OffsetSpec::EarliestLocal => Some((self.log.log_start_offset(), -1)),
            OffsetSpec::Latest => Some((self.visible_end(isolation), -1)),
            OffsetSpec::Tiered => None,
            OffsetSpec::MaxTimestamp => Box::pin(self.log.max_timestamp_offset()).await?,
            OffsetSpec::Timestamp(timestamp) => Box::pin(self.log.offset_for_timestamp(timestamp)).await?,
        };
        let epochs = self.log.leader_epochs();
        let epoch = |offset: Offset| match spec {
            OffsetSpec::Latest => epochs.latest().map(|(epoch, _)| epoch),
            _ => epochs.epoch_for_offset(offset),
        };
        Ok(found.map_or((-1, -1, -1), |(offset, timestamp)| (offset.0, timestamp, epoch(offset).map_or(-1, |e| e.0))))
    }

    /// DeleteRecords: moves the log start to `before` (the high watermark when
    /// `None`); returns the new log start.
    ///
    /// # Errors
    /// `Refused(OffsetOutOfRange)` past the high watermark or below zero; the log's.
    pub async fn delete_records(&self, before: Option<Offset>) -> Result<Offset, AppendError> {
        let high_watermark = self.high_watermark();
        let target = before.unwrap_or(high_watermark);
        if target > high_watermark || target < Offset::ZERO {
            return Err(AppendError::Refused(Refusal::OffsetOutOfRange));
        }
        Box::pin(self.log.delete_records_before(target)).await.map_err(AppendError::Log)
    }

    /// The high watermark this replica had when its broker last checkpointed it
    /// (`replication-offset-checkpoint`): a replicated partition starts from it,
    /// within its log, when its first assignment arrives.
    pub fn recover_high_watermark(&self, offset: Offset) {
        self.recovered_high_watermark.set(Some(offset));
    }

    /// The high watermark, after taking in what the log has written since the last
    /// look (the sole leader's ISR is itself), completing `acks=all` waiters it passes.
    pub fn high_watermark(&self) -> Offset {
        let mut replica = self.replica_state.borrow_mut();
        if replica.local_append(self.log.offset_written_end()) {
            // Not a change a reader has not been told of: the written end it follows
            // moved the log's stamp when it moved.
            self.complete_through(replica.high_watermark());
        }
        replica.high_watermark()
    }

    /// The high watermark may have moved to `high_watermark` (the ISR acknowledged,
    /// or the role changed): the log's stamp moves, and what it satisfies completes.
    fn high_watermark_moved(&self, high_watermark: Offset) {
        self.log.stamp().bump();
        self.complete_through(high_watermark);
    }

    /// Completes the `acks=all` produces and consumer fetches the high watermark
    /// `high_watermark` satisfies.
    fn complete_through(&self, high_watermark: Offset) {
        self.acks.borrow_mut().complete_through(high_watermark);
        self.reads.wake_upto(high_watermark.0);
        self.stable_moved(high_watermark);
    }

    /// Completes the read_committed fetches the last stable offset under
    /// `high_watermark` satisfies (computed only when one waits).
    fn stable_moved(&self, high_watermark: Offset) {
        if !self.stable_reads.is_empty() {
            let stable = self.stable_below(high_watermark);
            self.stable_reads.wake_upto(stable.0);
        }
    }

    /// The last stable offset under `high_watermark`: read_committed consumers read
    /// below the first transaction not known complete on the whole ISR.
    fn stable_below(&self, high_watermark: Offset) -> Offset {
        match self.producers.borrow().txns.first_unstable_offset(high_watermark.0) {
            Some(first) => Offset(first.min(high_watermark.0)),
            None => high_watermark,
        }
    }

    /// The last stable offset (LSO): what read_committed consumers may read, and
    /// what ListOffsets answers them for the latest offset.
    pub fn last_stable_offset(&self) -> Offset {
        let high_watermark = self.high_watermark();
        self.stable_below(high_watermark)
    }

    /// The aborted transactions a read_committed read from `from` up to `upper` may
    /// meet (Fetch's `aborted_transactions`).
    pub fn aborted_between(&self, from: Offset, upper: Offset) -> Vec<crate::txn::AbortedTxn> {
        self.producers.borrow().txns.aborted_between(from.0, upper.0)
    }

    /// `wait_for_high_watermark` for a read_committed consumer: until the last stable
    /// offset passes `offset`, the log takes a new write, or the role changes.
    pub async fn wait_for_stable(&self, offset: Offset) {
        let written = self.log.offset_written_end();
        let stable = self.last_stable_offset();
        self.wait_on(&self.stable_reads, offset, stable, written).await;
    }

    /// Waits until the high watermark passes `offset` (a consumer's fetch at the end of
    /// what it may read), until the log takes a new write (a sole leader's high
    /// watermark follows its writes, seen on the next look), or until this replica's
    /// role changes. The caller bounds the wait with the fetch's `max_wait_ms` and
    /// reads again. Waiting for the write alone would answer a consumer at once, again
    /// and again, while the followers have not caught up.
    pub async fn wait_for_high_watermark(&self, offset: Offset) {
        let written = self.log.offset_written_end();
        let high_watermark = self.high_watermark();
        self.wait_on(&self.reads, offset, high_watermark, written).await;
    }

    /// A wait of `waiters` until their value (`current`, looked at after the log's
    /// written end was `written`) passes `offset`, or the log writes past `written`
    /// (then the high watermark is looked at again), or the role changes.
    async fn wait_on(&self, waiters: &Waiters, offset: Offset, current: Offset, written: Offset) {
        if current > offset {
            return;
        }
        let wrote = async {
            self.log.wait_for_data(written).await;
            // Taken in now: a sole leader's high watermark moves with it.
            self.high_watermark();
        };
        futures_lite::future::or(waiters.wait(offset.0.saturating_add(1)), wrote).await;
    }

    /// Where `epoch` ends, as the leader answers OffsetForLeaderEpoch (KIP-101): the
    /// current epoch at the log end, an older one where the next began (with the
    /// largest known epoch at or below it), one older than any known where the first
    /// known began, and an unknown newer one at (-1, -1).
    ///
    /// # Errors
    /// NOT_LEADER_OR_FOLLOWER when this replica does not lead; FENCED_LEADER_EPOCH or
    /// UNKNOWN_LEADER_EPOCH when `current_leader_epoch` is not this replica's.
    pub fn epoch_end_offset(
        &self,
        current_leader_epoch: i32,
        epoch: LeaderEpoch,
    ) -> Result<(LeaderEpoch, Offset), Refusal> {
        let replica = self.replica_state.borrow();
        if replica.role() != crate::Role::Leader {
            return Err(Refusal::NotLeaderOrFollower);
        }
        replica.check_epoch(current_leader_epoch)?;
        if epoch == replica.leader_epoch() {
            return Ok((epoch, self.log.log_end_offset()));
        }
        Ok(self.log.end_offset_for_epoch(epoch).unwrap_or((LeaderEpoch(-1), Offset(-1))))
    }

    /// Appends `batch` as leader. A retried batch of an idempotent producer is
    /// answered with its original offset; with `acks_all` (min.insync.replicas), the
    /// answer waits until the high watermark passes the batch (the whole ISR holds it).
    ///
    /// # Errors
    /// `Refused` with the producer check's code, NOT_LEADER_OR_FOLLOWER when this
    /// replica does not lead or stops leading before the batch is committed, or
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR that committed it is below
    /// `acks_all`, REQUEST_TIMED_OUT when it is not committed within the timeout (it
    /// stays in the log); `Log` when the log fails.
    pub async fn append_as_leader(&self, batch: Batch, acks_all: Option<AcksAll>) -> Result<Appended, AppendError> {
        if self.replica_state.borrow().role() != Role::Leader {
            return Err(AppendError::Refused(Refusal::NotLeaderOrFollower));
        }
        let (pid, first_seq, transactional) = (batch.producer_id(), batch.base_sequence(), batch.is_transactional());
        let verdict = self.producers.borrow_mut().check_and_reserve(&batch);
        match verdict {
            // A transaction's first batch here opens it, at the log end until it lands.
            Check::Append if transactional => {
                self.producers.borrow_mut().txns.begin(pid, self.log.log_end_offset().0, false);
            }
            Check::Append => {}
            Check::Duplicate(seq) => {
                // A retry of a batch in the log is answered with its offset, but with
                // acks=all only once it is committed, as the original would have been
                // (Kafka's duplicate still waits in the produce purgatory): the first
                // attempt may have failed because it was not.
                let epoch = self.replica_state.borrow().leader_epoch();
                self.committed(Offset(seq.last_offset).plus(1), epoch, acks_all).await?;
                return Ok(Appended {
                    base_offset: Offset(seq.base_offset),
                    log_start_offset: self.log.log_start_offset(),
                    duplicate: true,
                });
            }
            Check::Reject(code) => return Err(AppendError::Refused(code)),
        }
        let epoch = self.replica_state.borrow().leader_epoch();
        let info = match self.log.append(batch, AppendMode::Leader { epoch }).await {
            Ok(info) => info,
            Err(e) => {
                self.producers.borrow_mut().forget(pid, first_seq);
                self.snapshot_after_roll();
                return Err(AppendError::Log(e));
            }
        };
        {
            let mut producers = self.producers.borrow_mut();
            producers.complete(pid, first_seq, info.base_offset.0, info.last_offset.0);
            if transactional {
                producers.txns.landed(pid, info.base_offset.0);
            }
        }
        self.snapshot_after_roll();
        self.committed(info.last_offset.plus(1), epoch, acks_all).await?;
        Ok(Appended { base_offset: info.base_offset, log_start_offset: info.log_start_offset, duplicate: false })
    }

    /// Writes a transaction marker as leader (WriteTxnMarkers): COMMIT or ABORT for
    /// `producer_id`'s transaction, in `epoch`, from the coordinator in
    /// `coordinator_epoch`; `tv2` for a transaction of transaction version 2, whose
    /// marker carries a bumped epoch. With `acks_all`, answered once the ISR holds it.
    /// Returns the marker's offset.
    ///
    /// # Errors
    /// NOT_LEADER_OR_FOLLOWER; INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED
    /// for a stale marker; those of `committed`; the log's.
    pub async fn write_marker(
        &self,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
        tv2: bool,
        acks_all: Option<AcksAll>,
    ) -> Result<Offset, AppendError> {
        if self.replica_state.borrow().role() != Role::Leader {
            return Err(AppendError::Refused(Refusal::NotLeaderOrFollower));
        }
        let check = self.producers.borrow().check_marker(producer_id, epoch, coordinator_epoch, tv2);
        check.map_err(AppendError::Refused)?;
        let now = skein_engine::log::now_ms();
        let batch = crate::txn::marker_batch(producer_id, epoch, coordinator_epoch, commit, now);
        let leader_epoch = self.replica_state.borrow().leader_epoch();
        let info =
            self.log.append(batch, AppendMode::Leader { epoch: leader_epoch }).await.map_err(AppendError::Log)?;
        self.producers.borrow_mut().end_txn(producer_id, epoch, coordinator_epoch, info.base_offset.0, commit, now);
        self.snapshot_after_roll();
        self.committed(info.last_offset.plus(1), leader_epoch, acks_all).await?;
        Ok(info.base_offset)
    }

    /// With `acks_all` (min.insync.replicas), waits until the high watermark reaches
    /// `end`, written as leader in `epoch`; at once otherwise.
    ///
    /// # Errors
    /// NOT_LEADER_OR_FOLLOWER, with any acks, when this replica no longer leads in
    /// `epoch`: it stepped down while the records were being written (the step down
    /// failed the waiters before this one waited, and the new leader's log may cut
    /// them), or, with `acks_all`, stops leading while waiting;
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR that committed it is below
    /// `acks_all` (Kafka's checkEnoughReplicasReachOffset): too few copies to
    /// acknowledge; REQUEST_TIMED_OUT past the producer's timeout (Kafka's delayed
    /// produce expiring), as while the ISR is below `min.insync.replicas` the high
    /// watermark does not move.
    async fn committed(&self, end: Offset, epoch: LeaderEpoch, acks_all: Option<AcksAll>) -> Result<(), AppendError> {
        {
            let replica = self.replica_state.borrow();
            if replica.role() != Role::Leader || replica.leader_epoch() != epoch {
                return Err(AppendError::Refused(Refusal::NotLeaderOrFollower));
            }
        }
        let Some(AcksAll { min_insync, timeout }) = acks_all else { return Ok(()) };
        let high_watermark = self.high_watermark();
        let committed = self.acks.borrow_mut().wait_for(end, high_watermark);
        let expired = async {
            glommio::timer::sleep(timeout).await;
            Err(AppendError::Refused(Refusal::RequestTimedOut))
        };
        let waited = async { committed.await.map_err(|_| AppendError::Refused(Refusal::NotLeaderOrFollower)) };
        futures_lite::future::or(waited, expired).await?;
        if self.replica_state.borrow().isr().len() < min_insync {
            return Err(AppendError::Refused(Refusal::NotEnoughReplicasAfterAppend));
        }
        Ok(())
    }

    /// Takes the controller's view of this partition: lead in `epoch` with `replicas`
    /// and `isr` when `leader` is this broker, follow `leader` otherwise. The same
    /// leader epoch again only updates the ISR (an AlterPartition committed). Produces
    /// waiting for the high watermark fail when this replica stops leading.
    pub fn assign(
        &self,
        leader: BrokerId,
        epoch: LeaderEpoch,
        partition_epoch: i32,
        replicas: Vec<BrokerId>,
        isr: Vec<BrokerId>,
        now_ms: i64,
    ) {
        let mut replica = self.replica_state.borrow_mut();
        let log_end = self.log.offset_written_end();
        if epoch < replica.leader_epoch() {
            return;
        }
        // Opened as the sole leader of its log, the replica took the log end for its
        // high watermark; with other replicas, what lies past the committed end may
        // not be on the ISR: consumers wait until the ISR (or the leader) says. What
        // the last checkpoint recorded was committed (within what the log still holds:
        // unsynced records may have gone with a power loss).
        if !self.assigned.replace(true) && replicas.len() > 1 {
            let (start, end) = (self.log.log_start_offset(), self.log.offset_written_end());
            let recovered = self.recovered_high_watermark.get().unwrap_or(start);
            replica.restart_high_watermark(recovered.clamp(start, end.max(start)));
        }
        let same_term = epoch == replica.leader_epoch();
        if leader == replica.broker() {
            if same_term && replica.role() == Role::Leader && replica.replicas() == replicas.as_slice() {
                replica.apply_isr(isr, partition_epoch);
            } else {
                self.log.start_leader_epoch(epoch);
                replica.become_leader(epoch, partition_epoch, replicas, isr, log_end, now_ms);
            }
            let high_watermark = replica.high_watermark();
            self.high_watermark_moved(high_watermark);
        } else {
            if !(same_term && replica.role() == (Role::Follower { leader })) {
                replica.become_follower(leader, epoch, partition_epoch, log_end);
            } else {
                replica.apply_isr(isr, partition_epoch);
            }
            self.acks.borrow_mut().fail_all();
            self.log.stamp().bump();
            self.reads.wake_all();
            self.stable_reads.wake_all();
        }
    }

    /// A follower fetched at `fetch_offset` in `epoch` (the leader's side of a replica
    /// fetch): the high watermark may move, completing `acks=all` produces. Returns an
    /// ISR expansion to propose when the follower caught up.
    ///
    /// # Errors
    /// NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH.
    pub fn follower_fetched(
        &self,
        follower: BrokerId,
        fetch_offset: Offset,
        epoch: i32,
        now_ms: i64,
    ) -> Result<Option<IsrProposal>, Refusal> {
        let mut replica = self.replica_state.borrow_mut();
        replica.local_append(self.log.offset_written_end());
        let (_, proposal) = replica.follower_fetch(follower, fetch_offset, epoch, now_ms)?;
        let high_watermark = replica.high_watermark();
        self.high_watermark_moved(high_watermark);
        Ok(proposal)
    }

    /// Takes the topic's `min.insync.replicas`: the high watermark moves only while
    /// the ISR has that many members (KIP-966); `acks=all` waiters it passes complete.
    pub fn set_min_insync(&self, min_insync: usize) {
        let mut replica = self.replica_state.borrow_mut();
        if replica.set_min_insync(min_insync) {
            self.high_watermark_moved(replica.high_watermark());
        }
    }

    /// An ISR change this leader proposed ended without a change: followers it would
    /// have added stop holding the high watermark back (`acks=all` waiters it passes
    /// complete).
    pub fn isr_proposal_failed(&self) {
        let mut replica = self.replica_state.borrow_mut();
        replica.proposal_failed();
        let high_watermark = replica.high_watermark();
        self.high_watermark_moved(high_watermark);
    }

    /// Appends the leader's batches with their offsets and epochs (a follower), keeps
    /// the producers' state as the leader's, and takes the leader's high watermark
    /// (never past this replica's own log end).
    ///
    /// # Errors
    /// NOT_LEADER_OR_FOLLOWER when this replica leads; the log's error.
    pub async fn append_as_follower(
        &self,
        batches: Vec<Batch>,
        leader_high_watermark: Offset,
    ) -> Result<(), AppendError> {
        if self.replica_state.borrow().role() == Role::Leader {
            return Err(AppendError::Refused(Refusal::NotLeaderOrFollower));
        }
        for batch in batches {
            let (start, end) = (self.log.log_start_offset(), self.log.log_end_offset());
            if batch.next_offset() <= end {
                continue;
            }
            // An empty log whose start falls inside the leader's batch (it restarted
            // at a log start the leader's DeleteRecords put mid-batch) starts at the
            // batch instead, as Kafka's follower does; the leader's log start then
            // moves it up again (`follow_log_start`).
            if batch.base_offset() < end && start == end {
                self.log.truncate_fully_and_start_at(batch.base_offset()).await.map_err(AppendError::Log)?;
                self.replica_state.borrow_mut().truncated(self.log.offset_written_end());
            }
            let recorded = batch.clone();
            self.log.append(batch, AppendMode::Replica).await.map_err(AppendError::Log)?;
            self.producers.borrow_mut().record(&recorded);
            self.snapshot_after_roll();
        }
        let mut replica = self.replica_state.borrow_mut();
        replica.local_append(self.log.offset_written_end());
        replica.follower_high_watermark(leader_high_watermark);
        let high_watermark = replica.high_watermark();
        drop(replica);
        // Consumers reading from this follower (KIP-392) see the new high watermark.
        self.log.stamp().bump();
        self.reads.wake_upto(high_watermark.0);
        self.stable_moved(high_watermark);
        Ok(())
    }

    /// Truncates a follower whose leader answered that their logs diverged with
    /// `(leader_epoch, leader_end)` (`truncation_offset`). Returns where it cut.
    ///
    /// # Errors
    /// The log's error.
    pub async fn truncate_diverged(&self, leader_epoch: i32, leader_end: i64) -> Result<Offset, skein_engine::Error> {
        let own_end_for =
            (leader_epoch >= 0).then(|| self.log.end_offset_for_epoch(LeaderEpoch(leader_epoch))).flatten();
        let high_watermark = self.replica_state.borrow().high_watermark();
        let target =
            crate::truncation_offset(own_end_for, self.log.log_end_offset(), high_watermark, leader_epoch, leader_end);
        self.truncate_to(target).await?;
        Ok(target)
    }

    /// Cuts a follower's log where it diverged from the leader's (KIP-101, KIP-320),
    /// and rebuilds the producers' state from what is left.
    ///
    /// # Errors
    /// The log's error.
    pub async fn truncate_to(&self, offset: Offset) -> Result<(), skein_engine::Error> {
        self.log.truncate_to(offset).await?;
        let producers = load_producers(&self.log).await;
        *self.producers.borrow_mut() = producers;
        self.replica_state.borrow_mut().truncated(self.log.offset_written_end());
        Ok(())
    }

    /// Follows the leader's log start (Kafka's follower does at every fetch): a
    /// follower whose log ends below it restarts there, empty, with no producer state
    /// (Kafka's `truncateFullyAndStartAt`); one that holds it moves its own log start
    /// up, so records the leader deleted (DeleteRecords, retention) go here too.
    ///
    /// # Errors
    /// The log's error.
    pub async fn follow_log_start(&self, leader_start: Offset) -> Result<(), skein_engine::Error> {
        if leader_start <= self.log.log_start_offset() {
            return Ok(());
        }
        if leader_start > self.log.log_end_offset() {
            self.log.truncate_fully_and_start_at(leader_start).await?;
            *self.producers.borrow_mut() = ProducerStates::default();
            self.replica_state.borrow_mut().truncated(self.log.offset_written_end());
        } else {
            self.log.delete_records_before(leader_start).await?;
        }
        Ok(())
    }

    /// After an append settles: notes a roll, and writes the snapshot owed since one
    /// once every batch below the new segment is settled (in the background; one at a
    /// time per partition).
    fn snapshot_after_roll(&self) {
        let base = self.log.active_segment_base();
        if base != self.snapshot_base.get() {
            self.snapshot_base.set(base);
            let ticket = self.producers.borrow().last_ticket();
            self.snapshot_due.set(Some((base, ticket)));
        }
        // Ended transactions are kept while a snapshot may be taken below their
        // marker (it shows them open) or the high watermark has not passed it.
        let floor = self.snapshot_due.get().map_or(base, |(at, _)| at);
        let high_watermark = self.replica_state.borrow().high_watermark();
        self.producers.borrow_mut().txns.prune_completed(floor.min(high_watermark).0);
        let producers = self.producers.borrow();
        let Some((at, ticket)) = self.snapshot_due.get() else { return };
        if self.snapshot_writing.get() || !producers.settled_through(ticket) {
            return;
        }
        self.snapshot_due.set(None);
        self.snapshot_writing.set(true);
        let bytes = producers.snapshot_below(at);
        let (log, writing) = (self.log.clone(), self.snapshot_writing.clone());
        glommio::spawn_local(async move {
            if let Err(error) = log.write_producer_snapshot(at, &bytes).await {
                tracing::warn!(target: "skein::replication", partition = %log.partition(), offset = at.0, error = %error, "producer snapshot not written");
            }
            writing.set(false);
        })
        .detach();
    }

    /// Writes a snapshot at the log end when every append is settled (clean shutdown).
    /// A small log (`Log::keeps_state_files`) writes none: replaying it whole at open
    /// costs less than the snapshot's block of disk.
    pub async fn snapshot_at_end(&self) {
        if !self.log.keeps_state_files() {
            return;
        }
        let (at, bytes) = {
            let producers = self.producers.borrow();
            if !producers.settled_through(producers.last_ticket()) {
                return;
            }
            let at = self.log.log_end_offset();
            (at, producers.snapshot_below(at))
        };
        if let Err(error) = self.log.write_producer_snapshot(at, &bytes).await {
            tracing::warn!(target: "skein::replication", partition = %self.log.partition(), offset = at.0, error = %error, "producer snapshot not written");
        }
    }
}

/// Rebuilds a log's producer state: the newest readable snapshot, then the batches
/// after it. Unreadable snapshots are removed; producers wholly below the log start
/// are gone, as in Kafka.
pub async fn load_producers<S: Storage>(log: &Log<S>) -> ProducerStates {
    let mut states = ProducerStates::default();
    let mut start = log.log_start_offset();
    let snapshots = log.producer_snapshots().await.unwrap_or_default();
    for &at in snapshots.iter().rev() {
        let loaded = match log.read_producer_snapshot(at).await {
            Ok(Some(bytes)) => ProducerStates::from_snapshot(&bytes),
            Ok(None) => continue,
            Err(e) => Err(e.to_string()),
        };
        match loaded {
            Ok(loaded) => {
                states = loaded;
                start = start.max(at);
                break;
            }
            Err(error) => {
                tracing::warn!(target: "skein::replication", partition = %log.partition(), snapshot = at.0, error, "producer snapshot unreadable; using an older one or the log");
                let _ = log.remove_producer_snapshots(|o| o == at).await;
            }
        }
    }
    states.truncate_head(log.log_start_offset());
    let mut offset = start;
    loop {
        let Ok(batches) = log.read(offset, 1 << 20, None).await else { break };
        let Some(last) = batches.last() else { break };
        offset = last.next_offset();
        for batch in &batches {
            states.record(batch);
        }
    }
    states
}
