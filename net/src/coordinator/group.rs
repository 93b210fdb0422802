//! The shard's side of the group coordinator: loading an offsets partition's groups
//! while this broker leads it, running group operations against the coordinator,
//! writing its records to the offsets partition as its leader, the ticker that
//! expires sessions and completes rebalances, and the groups' consumer lag.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use skein_engine::io::dma::DmaStorage;
use skein_engine::records::BatchProducer;
use skein_engine::{Batch, Log, TopicPartition};

use crate::errors::{code, code_of_append};
use crate::shard::{ops, Partition, Shard};
use skein_engine::time::now_ms;

/// How long an offset commit waits for its record to be committed (Kafka's
/// `offsets.commit.timeout.ms` default).
const OFFSET_COMMIT_TIMEOUT: Duration = Duration::from_secs(5);

/// Loads an offsets partition's groups while this broker leads it (after a load on
/// open that failed, and when it takes the leadership over), first after `delay`,
/// then retrying with backoff, the failure logged and counted.
pub(crate) async fn load_as_leader(
    shard: Rc<Shard>,
    partition: TopicPartition,
    log: Rc<Log<DmaStorage>>,
    delay: Duration,
) {
    crate::shard::load_while_leading(shard, partition, log, delay, |shard, partition, log, _| async move {
        let loaded = shard.load_groups(&log, partition.partition).await;
        if let Err(error) = &loaded {
            shard.group_load_failed(&partition, error);
        }
        loaded.is_ok()
    })
    .await;
}

impl Shard {
    /// Replays an offsets partition into the group coordinator and marks it loaded.
    /// Until then its groups answer COORDINATOR_LOAD_IN_PROGRESS.
    ///
    /// # Errors
    /// A message when a batch cannot be read or decoded; the partition then stays
    /// unloaded (a later full replay gives the same state: records apply in order).
    pub(crate) async fn load_groups(&self, log: &Log<DmaStorage>, partition: i32) -> Result<(), String> {
        let started = std::time::Instant::now();
        let image = self.image();
        let mut offset = log.log_start_offset();
        let mut records = 0u64;
        loop {
            let batches =
                log.read(offset, 1 << 20, None).await.map_err(|e| format!("read at offset {}: {e}", offset.0))?;
            let Some(last) = batches.last() else { break };
            offset = last.next_offset();
            for batch in &batches {
                // A transaction's offset commits wait for its marker.
                if let Some((commit, _)) = skein_replication::txn::marker_of(batch) {
                    self.groups.complete_txn(partition, batch.producer_id(), commit);
                    continue;
                }
                let transactional = batch.is_transactional().then(|| batch.producer_id());
                let decoded = skein_engine::records::decode_records(
                    &batch.bytes(),
                    skein_engine::limits::DECOMPRESSED_BATCH_BYTES_MAX,
                )
                .map_err(|e| format!("batch at offset {}: {e}", batch.base_offset().0))?;
                for record in decoded {
                    // Keys of unknown versions are skipped, as Kafka skips them.
                    if let Some(key) = &record.key {
                        if let Some(entry) = crate::group::records::decode(key, record.value.as_ref()) {
                            match transactional {
                                Some(producer_id) => self.groups.replay_pending(producer_id, entry),
                                None => self.groups.replay(entry, &image),
                            }
                            records += 1;
                        }
                    }
                }
            }
        }
        self.groups.mark_loaded(partition, &image);
        tracing::debug!(target: "skein::net", partition, records, load_ms = started.elapsed().as_millis() as u64, "groups loaded");
        Ok(())
    }

    pub(crate) fn group_load_failed(&self, partition: &TopicPartition, error: &str) {
        self.metrics.group_load_failures.set(self.metrics.group_load_failures.get() + 1);
        tracing::error!(target: "skein::net", shard = self.id, partition = %partition, error, "cannot load groups; retrying, their coordinator answers COORDINATOR_LOAD_IN_PROGRESS meanwhile");
    }

    /// Writes coordinator records from the ticker (expired offsets, emptied and
    /// removed groups, expired KIP-848 members) to their groups' partitions.
    pub(crate) async fn persist_coordinator_records(&self, entries: Vec<crate::group::records::Entry>) {
        let mut by_partition: BTreeMap<i32, Vec<crate::group::records::Entry>> = BTreeMap::new();
        for entry in entries {
            by_partition.entry(crate::group::partition_for(entry.group())).or_default().push(entry);
        }
        for (partition, entries) in by_partition {
            let tp = TopicPartition::new(crate::group::OFFSETS_TOPIC, partition);
            if let Some(state) = self.partition(&tp) {
                if let Err(code) = self.persist(&state, entries).await {
                    tracing::warn!(target: "skein::net", partition, code, "cannot persist expired offsets");
                }
            }
        }
    }

    /// Appends coordinator records to the group's offsets partition and waits until
    /// they are written.
    async fn persist(&self, state: &Partition, entries: Vec<crate::group::records::Entry>) -> Result<(), i16> {
        self.persist_as(state, entries, BatchProducer::NONE).await
    }

    /// `persist` in a batch of `producer` (a transaction's offset commits).
    async fn persist_as(
        &self,
        state: &Partition,
        entries: Vec<crate::group::records::Entry>,
        producer: BatchProducer,
    ) -> Result<(), i16> {
        if entries.is_empty() {
            return Ok(());
        }
        let records: Vec<skein_engine::records::Record> = entries
            .iter()
            .map(|entry| {
                let (key, value) = crate::group::records::encode(entry);
                skein_engine::records::Record { key: Some(key), value, ..Default::default() }
            })
            .collect();
        self.write_records(state, records, producer, OFFSET_COMMIT_TIMEOUT).await
    }

    /// Appends a coordinator's records (offset deltas assigned here) to its partition
    /// as its leader, in its epoch, answered once the ISR holds them (Kafka writes
    /// coordinator records with acks=all): a new coordinator has them.
    pub(crate) async fn write_records(
        &self,
        state: &Partition,
        mut records: Vec<skein_engine::records::Record>,
        producer: BatchProducer,
        timeout: Duration,
    ) -> Result<(), i16> {
        for (i, record) in records.iter_mut().enumerate() {
            record.offset_delta = i as i32;
        }
        let compression = skein_engine::records::Compression::None;
        let bytes = skein_engine::records::build_batch_for(0, now_ms(), compression, &records, producer);
        let batch = Batch::validate(Bytes::from(bytes), usize::MAX).map_err(|_| code::UNKNOWN_SERVER_ERROR)?;
        let min_insync = state.rules.get().min_insync_replicas.max(1) as usize;
        let acks_all = skein_replication::AcksAll { min_insync, timeout };
        state.append_as_leader(batch, Some(acks_all)).await.map(|_| ()).map_err(|e| code_of_append(&e))
    }

    pub(crate) async fn group(
        &self,
        state: &Partition,
        _partition: i32,
        call: crate::group::GroupCall,
    ) -> Result<crate::group::GroupAnswer, i16> {
        use crate::group::{calls, GroupAnswer, GroupCall};
        let now = std::time::Instant::now();
        let groups = &self.groups;
        Ok(match call {
            GroupCall::Join(join) => match groups.join(*join, now) {
                Err(response) => GroupAnswer::Join(response),
                Ok(receiver) => GroupAnswer::Join(receiver.await.map_err(|_| code::COORDINATOR_NOT_AVAILABLE)?),
            },
            GroupCall::Sync(calls::Sync { group, generation, member_id, assignments }) => {
                let (result, writes, deliveries) = groups.sync(&group, generation, &member_id, assignments, now);
                if let Err(error) = self.persist(state, writes).await {
                    // Kafka answers every waiting member with the error and rebalances.
                    for (sender, _) in deliveries {
                        let _ =
                            sender.send(kafka_protocol::messages::SyncGroupResponse::default().with_error_code(error));
                    }
                    groups.sync_failed(&group, now);
                    return Err(error);
                }
                for (sender, response) in deliveries {
                    let _ = sender.send(response);
                }
                match result {
                    Err(response) => GroupAnswer::Sync(response),
                    Ok(receiver) => GroupAnswer::Sync(receiver.await.map_err(|_| code::COORDINATOR_NOT_AVAILABLE)?),
                }
            }
            GroupCall::Heartbeat(calls::Heartbeat { group, generation, member_id }) => {
                GroupAnswer::Code(groups.heartbeat(&group, generation, &member_id, now))
            }
            GroupCall::Leave(calls::Leave { group, members }) => {
                GroupAnswer::Codes(groups.leave(&group, &members, now))
            }
            GroupCall::Commit(calls::Commit { group, generation, member_id, offsets }) => {
                let verdict = groups.check_commit(&group, generation, &member_id);
                if verdict != code::NONE {
                    return Ok(GroupAnswer::Codes(vec![verdict; offsets.len()]));
                }
                let writes = offsets.iter().map(|(t, p, c)| crate::group::offset_entry(&group, t, *p, c)).collect();
                match self.persist(state, writes).await {
                    Ok(()) => {
                        let n = offsets.len();
                        groups.commit(&group, offsets);
                        GroupAnswer::Codes(vec![code::NONE; n])
                    }
                    Err(c) => GroupAnswer::Codes(vec![c; offsets.len()]),
                }
            }
            GroupCall::TxnCommit(calls::TxnCommit { group, producer_id, epoch, generation, member_id, offsets }) => {
                // Members are checked as for OffsetCommit when the client names one
                // (TxnOffsetCommit v3+); the offsets become visible at the marker.
                let checked = generation >= 0 || !member_id.is_empty();
                let verdict = if checked { groups.check_commit(&group, generation, &member_id) } else { code::NONE };
                if verdict != code::NONE {
                    return Ok(GroupAnswer::Codes(vec![verdict; offsets.len()]));
                }
                let writes = offsets.iter().map(|(t, p, c)| crate::group::offset_entry(&group, t, *p, c)).collect();
                let producer =
                    BatchProducer { id: producer_id, epoch, base_sequence: -1, transactional: true, control: false };
                match self.persist_as(state, writes, producer).await {
                    Ok(()) => {
                        let n = offsets.len();
                        groups.commit_pending(&group, producer_id, offsets);
                        GroupAnswer::Codes(vec![code::NONE; n])
                    }
                    Err(c) => GroupAnswer::Codes(vec![c; offsets.len()]),
                }
            }
            GroupCall::Fetch(calls::Fetch { group, wanted, require_stable }) => {
                GroupAnswer::Offsets(groups.fetch(&group, wanted, require_stable))
            }
            GroupCall::Describe(calls::Describe { group }) => GroupAnswer::Described(groups.describe(&group)),
            GroupCall::List(calls::List { states }) => GroupAnswer::Listed(groups.list(&states)),
            GroupCall::Ready(calls::Ready) => GroupAnswer::Code(code::NONE),
            GroupCall::Delete(calls::Delete { group }) => match groups.delete(&group) {
                Ok(writes) => GroupAnswer::Code(self.persist(state, writes).await.err().unwrap_or(code::NONE)),
                Err(c) => GroupAnswer::Code(c),
            },
            GroupCall::ConsumerHeartbeat(calls::ConsumerHeartbeat { request, client_id, client_host }) => {
                let (response, writes) =
                    groups.consumer_heartbeat(&request, &client_id, &client_host, &self.image(), now);
                // The member learns its new epoch and assignment only once they are
                // written, as Kafka answers a heartbeat after its records are.
                if let Err(error) = self.persist(state, writes).await {
                    groups.consumer_persist_failed(&request.group_id.0);
                    return Ok(GroupAnswer::ConsumerHeartbeat(
                        kafka_protocol::messages::ConsumerGroupHeartbeatResponse::default().with_error_code(error),
                    ));
                }
                GroupAnswer::ConsumerHeartbeat(response)
            }
            GroupCall::ConsumerDescribe(calls::ConsumerDescribe { group }) => {
                GroupAnswer::ConsumerDescribed(groups.consumer_describe(&group, &self.image()))
            }
            GroupCall::DeleteOffsets(calls::DeleteOffsets { group, partitions }) => {
                match groups.delete_offsets(&group, &partitions) {
                    Ok(writes) => GroupAnswer::Code(self.persist(state, writes).await.err().unwrap_or(code::NONE)),
                    Err(c) => GroupAnswer::Code(c),
                }
            }
        })
    }
}

/// Expires group sessions and completes rebalances, every 100 ms.
pub async fn group_ticker(shard: Rc<Shard>) {
    loop {
        glommio::timer::sleep(Duration::from_millis(100)).await;
        let now = std::time::Instant::now();
        let mut writes = shard.groups.tick(now);
        writes.extend(shard.groups.tick_consumers(&shard.image(), now));
        if !writes.is_empty() {
            shard.persist_coordinator_records(writes).await;
        }
    }
}

/// Recomputes the consumer lag of the groups this shard coordinates every
/// `CONSUMER_LAG_INTERVAL` (`group::lag`).
pub async fn consumer_lag_task(shard: Rc<Shard>) {
    loop {
        glommio::timer::sleep(crate::limits::CONSUMER_LAG_INTERVAL).await;
        shard.refresh_consumer_lag().await;
    }
}

impl Shard {
    /// Replaces this shard's consumer lag table: the committed offsets of its loaded
    /// groups against their partitions' high watermarks, asked of each partition's
    /// owning shard one at a time (`PartitionOp::Stats`, which the load balancer's
    /// per-partition request counts leave out). A partition with no replica on this
    /// node is left out and counted: its high watermark lives on another broker, and
    /// asking there would put a network call per partition on the coordinator; the
    /// node that coordinates a group in a cluster of replicated partitions usually
    /// holds a replica (a follower knows the high watermark the leader last sent it).
    pub async fn refresh_consumer_lag(self: &Rc<Self>) {
        let committed = self.groups.committed_offsets();
        if committed.is_empty() && self.consumer_lag.borrow().groups.is_empty() {
            return;
        }
        let admitted = crate::group::lag::admit(committed, crate::limits::CONSUMER_LAG_SERIES_PER_SHARD_MAX);
        let owners: BTreeMap<(String, i32), usize> = {
            let image = self.image();
            let me = self.settings.node_id;
            admitted
                .groups
                .values()
                .flat_map(|offsets| offsets.keys())
                .filter(|(topic, partition)| image.topic(topic).is_some_and(|t| t.is_replica(*partition, me)))
                .filter_map(|(topic, partition)| {
                    let owner = image.shard_of(&TopicPartition::new(topic.clone(), *partition))?;
                    Some(((topic.clone(), *partition), owner))
                })
                .collect()
        };
        let mut high_watermarks = HashMap::with_capacity(owners.len());
        for ((topic, partition), owner) in owners {
            let tp = TopicPartition::new(topic.clone(), partition);
            if let Ok(stats) = self.call_on(owner, tp, ops::Stats).await {
                high_watermarks.insert((topic, partition), stats.high_watermark);
            }
        }
        let generation = self.consumer_lag.borrow().generation + 1;
        let known = |topic: &str, partition: i32| high_watermarks.get(&(topic.to_string(), partition)).copied();
        let lag = crate::group::lag::ConsumerLag::compute(admitted, known, generation);
        *self.consumer_lag.borrow_mut() = lag;
    }
}
