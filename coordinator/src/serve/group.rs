//! The group coordinator on a shard: loading an offsets partition's groups while
//! this broker leads it, running group operations against the coordinator, writing
//! its records to the offsets partition as its leader, the ticker that expires
//! sessions and completes rebalances, and the groups' consumer lag.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::Duration;

use skein_control::errors::code;
use skein_engine::io::dma::DmaStorage;
use skein_engine::records::BatchProducer;
use skein_engine::{Log, TopicPartition};

use super::{replay, write_records, Host, LoadError, Replayed};
use crate::hosted::Partition;

/// How long an offset commit waits for its record to be committed (Kafka's
/// `offsets.commit.timeout.ms` default).
const OFFSET_COMMIT_TIMEOUT: Duration = Duration::from_secs(5);

/// Loads an offsets partition's groups while this broker leads it (after a load on
/// open that failed, and when it takes the leadership over), first after `delay`,
/// then retrying with backoff, the failure logged and counted.
pub async fn load_as_leader<H: Host>(
    host: Rc<H>,
    partition: TopicPartition,
    log: Rc<Log<DmaStorage>>,
    delay: Duration,
) {
    super::load_while_leading(host, partition, log, delay, |host, partition, log, _| async move {
        let loaded = load(&*host, &log, partition.partition).await;
        if let Err(error) = &loaded {
            load_failed(&*host, &partition, error);
        }
        loaded.is_ok()
    })
    .await;
}

/// Replays an offsets partition into the group coordinator and marks it loaded.
/// Until then its groups answer COORDINATOR_LOAD_IN_PROGRESS.
///
/// # Errors
/// `LoadError` when a batch cannot be read or decoded; the partition then stays
/// unloaded.
pub async fn load<H: Host>(host: &H, log: &Log<DmaStorage>, partition: i32) -> Result<(), LoadError> {
    let started = std::time::Instant::now();
    let image = host.image();
    let groups = &host.coordinators().groups;
    let mut entries = 0u64;
    replay(log, |replayed| match replayed {
        // A transaction's offset commits wait for its marker.
        Replayed::Marker { producer_id, commit } => groups.complete_txn(partition, producer_id, commit),
        Replayed::Record { record, transactional } => {
            // Keys of unknown versions are skipped, as Kafka skips them.
            let Some(key) = &record.key else { return };
            let Some(entry) = crate::group::records::decode(key, record.value.as_ref()) else { return };
            match transactional {
                Some(producer_id) => groups.replay_pending(producer_id, entry),
                None => groups.replay(entry, &image),
            }
            entries += 1;
        }
    })
    .await?;
    groups.mark_loaded(partition, &image);
    tracing::debug!(target: "skein::net", partition, records = entries, load_ms = started.elapsed().as_millis() as u64, "groups loaded");
    Ok(())
}

/// Logs and counts a failed load of an offsets partition.
pub fn load_failed<H: Host>(host: &H, partition: &TopicPartition, error: &LoadError) {
    host.count_group_load_failure();
    tracing::error!(target: "skein::net", partition = %partition, error = %error, "cannot load groups; retrying, their coordinator answers COORDINATOR_LOAD_IN_PROGRESS meanwhile");
}

/// Writes coordinator records from the ticker (expired offsets, emptied and removed
/// groups, expired KIP-848 members) to their groups' partitions.
async fn persist_ticker_records<H: Host>(host: &H, entries: Vec<crate::group::records::Entry>) {
    let mut by_partition: BTreeMap<i32, Vec<crate::group::records::Entry>> = BTreeMap::new();
    for entry in entries {
        by_partition.entry(crate::group::partition_for(entry.group())).or_default().push(entry);
    }
    for (partition, entries) in by_partition {
        let tp = TopicPartition::new(crate::group::OFFSETS_TOPIC, partition);
        if let Some(state) = host.hosted(&tp) {
            if let Err(code) = persist(&state, entries).await {
                tracing::warn!(target: "skein::net", partition, code, "cannot persist expired offsets");
            }
        }
    }
}

/// Appends coordinator records to the group's offsets partition and waits until
/// they are written.
async fn persist(state: &Partition, entries: Vec<crate::group::records::Entry>) -> Result<(), i16> {
    persist_as(state, entries, BatchProducer::NONE).await
}

/// `persist` in a batch of `producer` (a transaction's offset commits).
async fn persist_as(
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
    write_records(state, records, producer, OFFSET_COMMIT_TIMEOUT).await
}

/// Runs a group operation on the offsets partition `state` that holds the group.
///
/// # Errors
/// The Kafka error code that answers the whole call.
pub async fn run<H: Host>(
    host: &H,
    state: &Partition,
    call: crate::group::GroupCall,
) -> Result<crate::group::GroupAnswer, i16> {
    use crate::group::{calls, GroupAnswer, GroupCall};
    let now = std::time::Instant::now();
    let groups = &host.coordinators().groups;
    Ok(match call {
        GroupCall::Join(join) => {
            use kafka_protocol::messages::JoinGroupResponse;
            let group = join.group.clone();
            match groups.join(*join, now) {
                // An answer without a rebalance (a static member that replaced
                // itself) goes once the group's members are written, as on Kafka.
                Err(response) if response.error_code == code::NONE => {
                    if let Err(error) = persist(state, groups.stale_record(&group)).await {
                        let refused = JoinGroupResponse::default().with_error_code(error).with_generation_id(-1);
                        return Ok(GroupAnswer::Join(refused));
                    }
                    GroupAnswer::Join(response)
                }
                Err(response) => GroupAnswer::Join(response),
                Ok(receiver) => GroupAnswer::Join(receiver.await.map_err(|_| code::COORDINATOR_NOT_AVAILABLE)?),
            }
        }
        GroupCall::Sync(calls::Sync { group, generation, member_id, instance_id, assignments }) => {
            let member = (member_id.as_str(), instance_id.as_deref());
            let (result, writes, deliveries) = groups.sync(&group, generation, member, assignments, now);
            if let Err(error) = persist(state, writes).await {
                // Kafka answers every waiting member with the error and rebalances.
                for (sender, _) in deliveries {
                    let _ = sender.send(kafka_protocol::messages::SyncGroupResponse::default().with_error_code(error));
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
        GroupCall::Heartbeat(calls::Heartbeat { group, generation, member_id, instance_id }) => {
            GroupAnswer::Code(groups.heartbeat(&group, generation, (&member_id, instance_id.as_deref()), now))
        }
        GroupCall::Leave(calls::Leave { group, members }) => GroupAnswer::Codes(groups.leave(&group, &members, now)),
        GroupCall::Commit(calls::Commit { group, generation, member_id, instance_id, offsets }) => {
            let verdict = groups.check_commit(&group, generation, (&member_id, instance_id.as_deref()));
            if verdict != code::NONE {
                return Ok(GroupAnswer::Codes(vec![verdict; offsets.len()]));
            }
            let writes = offsets.iter().map(|(t, p, c)| crate::group::offset_entry(&group, t, *p, c)).collect();
            match persist(state, writes).await {
                Ok(()) => {
                    let n = offsets.len();
                    groups.commit(&group, offsets);
                    GroupAnswer::Codes(vec![code::NONE; n])
                }
                Err(c) => GroupAnswer::Codes(vec![c; offsets.len()]),
            }
        }
        GroupCall::TxnCommit(calls::TxnCommit {
            group,
            producer_id,
            epoch,
            generation,
            member_id,
            instance_id,
            offsets,
        }) => {
            // Members are checked as for OffsetCommit when the client names one
            // (TxnOffsetCommit v3+); the offsets become visible at the marker.
            let checked = generation >= 0 || !member_id.is_empty() || instance_id.is_some();
            let member = (member_id.as_str(), instance_id.as_deref());
            let verdict = if checked { groups.check_commit(&group, generation, member) } else { code::NONE };
            if verdict != code::NONE {
                return Ok(GroupAnswer::Codes(vec![verdict; offsets.len()]));
            }
            let writes = offsets.iter().map(|(t, p, c)| crate::group::offset_entry(&group, t, *p, c)).collect();
            let producer =
                BatchProducer { id: producer_id, epoch, base_sequence: -1, transactional: true, control: false };
            match persist_as(state, writes, producer).await {
                Ok(()) => {
                    let n = offsets.len();
                    groups.commit_pending(&group, producer_id, offsets);
                    GroupAnswer::Codes(vec![code::NONE; n])
                }
                Err(c) => GroupAnswer::Codes(vec![c; offsets.len()]),
            }
        }
        GroupCall::Fetch(calls::Fetch { group, wanted, require_stable, member }) => {
            let verdict = groups.check_fetch(&group, member.0.as_deref(), member.1);
            if verdict != code::NONE {
                return Err(verdict);
            }
            GroupAnswer::Offsets(groups.fetch(&group, wanted, require_stable))
        }
        GroupCall::Describe(calls::Describe { group }) => GroupAnswer::Described(groups.describe(&group)),
        GroupCall::List(calls::List { states }) => GroupAnswer::Listed(groups.list(&states)),
        GroupCall::Ready(calls::Ready) => GroupAnswer::Code(code::NONE),
        GroupCall::Delete(calls::Delete { group }) => match groups.delete(&group) {
            Ok(writes) => GroupAnswer::Code(persist(state, writes).await.err().unwrap_or(code::NONE)),
            Err(c) => GroupAnswer::Code(c),
        },
        GroupCall::ConsumerHeartbeat(calls::ConsumerHeartbeat { request, client_id, client_host }) => {
            let (response, writes) = groups.consumer_heartbeat(&request, &client_id, &client_host, &host.image(), now);
            // The member learns its new epoch and assignment only once they are
            // written, as Kafka answers a heartbeat after its records are.
            if let Err(error) = persist(state, writes).await {
                groups.consumer_persist_failed(&request.group_id.0);
                return Ok(GroupAnswer::ConsumerHeartbeat(
                    kafka_protocol::messages::ConsumerGroupHeartbeatResponse::default().with_error_code(error),
                ));
            }
            GroupAnswer::ConsumerHeartbeat(response)
        }
        GroupCall::ConsumerDescribe(calls::ConsumerDescribe { group }) => {
            GroupAnswer::ConsumerDescribed(groups.consumer_describe(&group, &host.image()))
        }
        GroupCall::StreamsHeartbeat(calls::StreamsHeartbeat { request, client_id, client_host }) => {
            let beat = groups.streams_heartbeat(&request, (&client_id, &client_host), &host.image(), now);
            // As for the consumer protocol, the member learns its epoch and tasks only
            // once the group's records are written.
            if let Err(error) = persist(state, beat.writes).await {
                groups.streams_persist_failed(&request.group_id.0);
                let response =
                    kafka_protocol::messages::StreamsGroupHeartbeatResponse::default().with_error_code(error);
                return Ok(GroupAnswer::StreamsHeartbeat(Box::new(calls::StreamsAnswer {
                    response,
                    create: Vec::new(),
                })));
            }
            GroupAnswer::StreamsHeartbeat(Box::new(calls::StreamsAnswer {
                response: beat.response,
                create: beat.create,
            }))
        }
        GroupCall::StreamsDescribe(calls::StreamsDescribe { group }) => {
            GroupAnswer::StreamsDescribed(Box::new(groups.streams_describe(&group)))
        }
        GroupCall::ShareHeartbeat(calls::ShareHeartbeat { request, client_id, client_host }) => {
            let (response, writes) = groups.share_heartbeat(&request, &client_id, &client_host, &host.image(), now);
            if let Err(error) = persist(state, writes).await {
                groups.share_persist_failed(&request.group_id.0);
                return Ok(GroupAnswer::ShareHeartbeat(
                    kafka_protocol::messages::ShareGroupHeartbeatResponse::default().with_error_code(error),
                ));
            }
            GroupAnswer::ShareHeartbeat(response)
        }
        GroupCall::ShareDescribe(calls::ShareDescribe { group }) => {
            GroupAnswer::ShareDescribed(groups.share_describe(&group, &host.image()))
        }
        GroupCall::ShareTopics(calls::ShareTopics { group }) => GroupAnswer::ShareTopics(groups.share_topics(&group)),
        GroupCall::ShareInitialize(calls::ShareInitialize { group, topics }) => {
            match groups.share_initialize(&group, topics, &host.image()) {
                Ok(writes) => GroupAnswer::Code(persist(state, writes).await.err().unwrap_or(code::NONE)),
                Err(c) => GroupAnswer::Code(c),
            }
        }
        GroupCall::ShareForget(calls::ShareForget { group, topics }) => {
            match groups.share_forget(&group, &topics, &host.image()) {
                Ok((unknown, writes)) => GroupAnswer::ShareForgotten(persist(state, writes).await.map(|()| unknown)),
                Err(c) => GroupAnswer::ShareForgotten(Err(c)),
            }
        }
        GroupCall::DeleteOffsets(calls::DeleteOffsets { group, partitions }) => {
            match groups.delete_offsets(&group, &partitions) {
                Ok((codes, writes)) => GroupAnswer::PartitionCodes(persist(state, writes).await.map(|()| codes)),
                Err(c) => GroupAnswer::PartitionCodes(Err(c)),
            }
        }
    })
}

/// Expires group sessions and completes rebalances, every 100 ms.
pub async fn group_ticker<H: Host>(host: Rc<H>) {
    loop {
        glommio::timer::sleep(Duration::from_millis(100)).await;
        let now = std::time::Instant::now();
        let groups = &host.coordinators().groups;
        let mut writes = groups.tick(now);
        writes.extend(groups.tick_consumers(&host.image(), now));
        if !writes.is_empty() {
            persist_ticker_records(&*host, writes).await;
        }
    }
}

/// Recomputes the consumer lag of the groups this shard coordinates every
/// `CONSUMER_LAG_INTERVAL` (`group::lag`).
pub async fn consumer_lag_task<H: Host>(host: Rc<H>) {
    loop {
        glommio::timer::sleep(skein_control::limits::CONSUMER_LAG_INTERVAL).await;
        refresh_consumer_lag(&host).await;
    }
}

/// Replaces this shard's consumer lag table: the committed offsets of its loaded
/// groups against their partitions' high watermarks, asked of each partition's
/// owning shard one at a time (`PartitionOp::Stats`, which the load balancer's
/// per-partition request counts leave out). A partition with no replica on this
/// node is left out and counted: its high watermark lives on another broker, and
/// asking there would put a network call per partition on the coordinator; the
/// node that coordinates a group in a cluster of replicated partitions usually
/// holds a replica (a follower knows the high watermark the leader last sent it).
pub async fn refresh_consumer_lag<H: Host>(host: &Rc<H>) {
    let coordinators = host.coordinators();
    let committed = coordinators.groups.committed_offsets();
    if committed.is_empty() && coordinators.consumer_lag.borrow().groups.is_empty() {
        return;
    }
    let admitted = crate::group::lag::admit(committed, skein_control::limits::CONSUMER_LAG_SERIES_PER_SHARD_MAX);
    let hosted: Vec<(String, i32)> = {
        let image = host.image();
        let me = host.node_id();
        admitted
            .groups
            .values()
            .flat_map(|offsets| offsets.keys())
            .filter(|(topic, partition)| image.topic(topic).is_some_and(|t| t.is_replica(*partition, me)))
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    };
    let mut high_watermarks = HashMap::with_capacity(hosted.len());
    for (topic, partition) in hosted {
        let tp = TopicPartition::new(topic.clone(), partition);
        if let Some(high_watermark) = host.high_watermark(tp).await {
            high_watermarks.insert((topic, partition), high_watermark);
        }
    }
    let generation = coordinators.consumer_lag.borrow().generation + 1;
    let known = |topic: &str, partition: i32| high_watermarks.get(&(topic.to_string(), partition)).copied();
    let lag = crate::group::lag::ConsumerLag::compute(admitted, known, generation);
    *coordinators.consumer_lag.borrow_mut() = lag;
}
