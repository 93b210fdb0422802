//! The transaction coordinator on a shard: loading a `__transaction_state`
//! partition's transactional ids while this broker leads it, running coordinator
//! requests against `txn::Coordinator` (each state written to the partition, as its
//! leader, before the answer that depends on it), sending the markers of a
//! transaction being completed to its partitions' leaders (this node's through their
//! owner shards, other brokers' with WriteTxnMarkers), and the ticker that aborts
//! timed-out transactions and expires idle ids.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use futures_util::future::join_all;
use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest};
use kafka_protocol::protocol::StrBytes;
use skein_control::errors::code;
use skein_engine::io::dma::DmaStorage;
use skein_engine::records::{BatchProducer, Record};
use skein_engine::time::now_ms;
use skein_engine::{Log, TopicPartition};

use super::{replay, write_records, Host, LoadError, Replayed};
use crate::hosted::Partition;
use crate::txn::calls::{AddMode, WriteMarker};
use crate::txn::{self, calls, records, EndPlan, InitPlan, Transit, TxnAnswer, TxnCall, TxnMeta, TxnState};

/// How long a coordinator write waits for the ISR (Kafka's
/// `transaction.state.log` writes time out with the request timeout).
pub const TXN_WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long EndTxn waits for its markers before it answers anyway (they go on).
const END_TXN_MARKER_WAIT: Duration = Duration::from_secs(2);
/// How long a marker write waits for the partition's ISR.
pub const MARKER_TIMEOUT: Duration = Duration::from_secs(30);
/// Kafka's `transaction.abort.timed.out.transaction.cleanup.interval.ms` is 10 s;
/// Skein looks every second, so a timed-out transaction holds the LSO back less.
const TICK: Duration = Duration::from_secs(1);

/// Loads a `__transaction_state` partition while this broker leads it, in its leader
/// epoch, retrying with backoff (as `group::load_as_leader`).
pub async fn load_as_leader<H: Host>(
    host: Rc<H>,
    partition: TopicPartition,
    log: Rc<Log<DmaStorage>>,
    delay: Duration,
) {
    super::load_while_leading(host, partition, log, delay, |host, partition, log, epoch| async move {
        let loaded = load(&host, &log, partition.partition, epoch).await;
        if let Err(error) = &loaded {
            tracing::error!(target: "skein::net", partition = %partition, error = %error, "cannot load transactions; retrying, their coordinator answers COORDINATOR_LOAD_IN_PROGRESS meanwhile");
        }
        loaded.is_ok()
    })
    .await;
}

/// Replays a `__transaction_state` partition into the coordinator, marks it loaded
/// in `coordinator_epoch`, and sends again the markers of transactions it left in a
/// Prepare state.
///
/// # Errors
/// `LoadError` when a batch cannot be read or decoded.
async fn load<H: Host>(
    host: &Rc<H>,
    log: &Log<DmaStorage>,
    partition: i32,
    coordinator_epoch: i32,
) -> Result<(), LoadError> {
    let txns = &host.coordinators().txns;
    replay(log, |replayed| {
        let Replayed::Record { record, .. } = replayed else { return };
        let Some(id) = record.key.as_ref().and_then(records::decode_key) else { return };
        let meta = record.value.as_ref().and_then(records::decode_value);
        txns.replay(partition, id, meta);
    })
    .await?;
    txns.mark_loaded(partition, coordinator_epoch);
    let resumed: Vec<String> = txns
        .all()
        .into_iter()
        .filter(|(id, m)| {
            txn::partition_for(id) == partition && matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort)
        })
        .map(|(id, _)| id)
        .collect();
    tracing::debug!(target: "skein::net", partition, coordinator_epoch, resumed = resumed.len(), "transactions loaded");
    for id in resumed {
        glommio::spawn_local(send_markers(host.clone(), id, partition)).detach();
    }
    Ok(())
}

/// The finalized `transaction.version`: from 1 the `__transaction_state` values are
/// written in version 1 (flexible, with the fields of transaction version 2), as Kafka
/// 4.4 writes them; at 2 an open transaction that InitProducerId aborts is aborted in
/// transaction version 2.
fn transaction_version<H: Host>(host: &H) -> i16 {
    skein_control::features::level(&host.image(), skein_control::features::TRANSACTION_VERSION)
}

/// Writes `id`'s state (a tombstone for `None`) to its partition and waits until the
/// ISR holds it.
async fn write_state<H: Host>(host: &H, state: &Partition, id: &str, meta: Option<&TxnMeta>) -> Result<(), i16> {
    let version = i16::from(transaction_version(host) >= 1);
    let record = Record {
        key: Some(records::encode_key(id)),
        value: meta.map(|m| records::encode_value(m, version)),
        ..Default::default()
    };
    write_records(state, vec![record], BatchProducer::NONE, TXN_WRITE_TIMEOUT).await
}

/// Writes `next` for `id` (marked busy by the caller) and ends the write.
async fn commit_state<H: Host>(
    host: &H,
    state: &Partition,
    partition: i32,
    id: &str,
    next: TxnMeta,
) -> Result<(), i16> {
    let txns = &host.coordinators().txns;
    match write_state(host, state, id, Some(&next)).await {
        Ok(()) => {
            txns.end_write(id, partition, Some(next));
            Ok(())
        }
        Err(error) => {
            txns.end_write(id, partition, None);
            Err(error)
        }
    }
}

/// Allocates the producer id a transit needs, if any, then writes it (as
/// `commit_state`), returning the state written.
async fn commit_transit<H: Host>(
    host: &Rc<H>,
    state: &Partition,
    partition: i32,
    id: &str,
    transit: Transit,
) -> Result<TxnMeta, i16> {
    let next = match transit.allocate {
        None => transit.meta,
        Some(_) => match host.next_producer_id().await {
            Ok(producer_id) => transit.with_producer_id(producer_id),
            Err(error) => {
                host.coordinators().txns.end_write(id, partition, None);
                return Err(error);
            }
        },
    };
    commit_state(&**host, state, partition, id, next.clone()).await?;
    Ok(next)
}

/// Runs a coordinator request on the partition `state` that holds its id.
pub async fn run<H: Host>(host: &Rc<H>, state: &Partition, partition: i32, call: TxnCall) -> TxnAnswer {
    let now = now_ms();
    let txns = &host.coordinators().txns;
    match call {
        TxnCall::Init(calls::Init { id, timeout_ms, producer_id, epoch }) => {
            if !txns.begin_write(&id) {
                return TxnAnswer::Code(code::CONCURRENT_TRANSACTIONS);
            }
            let max = txns.settings.get().max_timeout_ms;
            let current = txns.get(&id);
            let tv2 = transaction_version(&**host) >= 2;
            let plan = match txn::plan_init(current.as_ref(), timeout_ms, max, (producer_id, epoch), tv2, now) {
                Ok(plan) => plan,
                Err(error) => {
                    txns.end_write(&id, partition, None);
                    return TxnAnswer::Code(error);
                }
            };
            let transit = match plan {
                InitPlan::AbortOpen(transit) => {
                    // The open transaction is aborted in the new epoch; the client
                    // retries until that completes.
                    if let Err(error) = commit_transit(host, state, partition, &id, transit).await {
                        return TxnAnswer::Code(error);
                    }
                    glommio::spawn_local(send_markers(host.clone(), id, partition)).detach();
                    return TxnAnswer::Code(code::CONCURRENT_TRANSACTIONS);
                }
                InitPlan::Write(transit) => transit,
            };
            match commit_transit(host, state, partition, &id, transit).await {
                Ok(next) => TxnAnswer::Producer(calls::ProducerIdAndEpoch {
                    producer_id: next.producer_id,
                    epoch: next.producer_epoch,
                }),
                Err(error) => TxnAnswer::Code(error),
            }
        }
        TxnCall::Add(calls::Add { id, producer_id, epoch, partitions, mode }) => {
            if mode == AddMode::Verify {
                // KIP-890: a partition leader (or the group coordinator) asks
                // whether a transactional write belongs to the open transaction.
                let verdict = txn::plan_verify(txns.get(&id).as_ref(), producer_id, epoch, &partitions);
                return TxnAnswer::Code(verdict.err().unwrap_or(code::NONE));
            }
            if !txns.begin_write(&id) {
                return TxnAnswer::Code(code::CONCURRENT_TRANSACTIONS);
            }
            let client_version = mode.client_version();
            match txn::plan_add(txns.get(&id).as_ref(), producer_id, epoch, &partitions, client_version, now) {
                Err(error) => {
                    txns.end_write(&id, partition, None);
                    TxnAnswer::Code(error)
                }
                Ok(None) => {
                    txns.end_write(&id, partition, None);
                    TxnAnswer::Code(code::NONE)
                }
                Ok(Some(next)) => {
                    let written = commit_state(&**host, state, partition, &id, next).await;
                    TxnAnswer::Code(written.err().unwrap_or(code::NONE))
                }
            }
        }
        TxnCall::End(calls::End { id, producer_id, epoch, commit, tv2 }) => {
            if !txns.begin_write(&id) {
                return TxnAnswer::Code(code::CONCURRENT_TRANSACTIONS);
            }
            match txn::plan_end(txns.get(&id).as_ref(), producer_id, epoch, commit, tv2, now) {
                Err(error) => {
                    txns.end_write(&id, partition, None);
                    TxnAnswer::Code(error)
                }
                Ok(EndPlan::Done(producer)) => {
                    txns.end_write(&id, partition, None);
                    TxnAnswer::Producer(producer)
                }
                Ok(EndPlan::Prepare(transit)) => {
                    let prepared = match commit_transit(host, state, partition, &id, transit).await {
                        Ok(prepared) => prepared,
                        Err(error) => return TxnAnswer::Code(error),
                    };
                    // The decision is written: the transaction will complete, in the
                    // producer id and epoch answered (transaction version 2 bumped
                    // it). Kafka answers now and the producer's next transaction
                    // meets CONCURRENT_TRANSACTIONS until the markers are written,
                    // then backs off (librdkafka 100 ms, Java 20 ms). Skein answers
                    // once they are, within `END_TXN_MARKER_WAIT`, so the next one
                    // starts at once.
                    let next = txn::plan::completed(&prepared, now);
                    let (done, completed) = futures_channel::oneshot::channel();
                    let markers = send_markers(host.clone(), id, partition);
                    glommio::spawn_local(async move {
                        markers.await;
                        let _ = done.send(());
                    })
                    .detach();
                    let waited = async {
                        let _ = completed.await;
                    };
                    futures_lite::future::or(waited, glommio::timer::sleep(END_TXN_MARKER_WAIT)).await;
                    TxnAnswer::Producer(calls::ProducerIdAndEpoch {
                        producer_id: next.producer_id,
                        epoch: next.producer_epoch,
                    })
                }
            }
        }
        TxnCall::Describe(calls::Describe { id }) => TxnAnswer::Described(txns.get(&id)),
        TxnCall::List(calls::List) => TxnAnswer::Listed(txns.all()),
        TxnCall::Ready(calls::Ready) => TxnAnswer::Code(code::NONE),
    }
}

/// Sends the markers of `id`'s transaction, in a Prepare state, to every partition in
/// it until each took its marker (a partition whose topic is gone needs none), then
/// writes the Complete state. Stops when this shard no longer coordinates `id`.
async fn send_markers<H: Host>(host: Rc<H>, id: String, partition: i32) {
    let txns = &host.coordinators().txns;
    let mut done: BTreeSet<(String, i32)> = BTreeSet::new();
    let mut backoff = Duration::from_millis(20);
    loop {
        let Some(meta) = txns.get(&id) else { return };
        let commit = match meta.state {
            TxnState::PrepareCommit => true,
            TxnState::PrepareAbort => false,
            _ => return,
        };
        let Some(coordinator_epoch) = txns.coordinator_epoch(partition) else { return };
        let pending: Vec<(String, i32)> = meta.partitions.iter().filter(|p| !done.contains(*p)).cloned().collect();
        let marker = WriteMarker {
            producer_id: meta.producer_id,
            epoch: meta.producer_epoch,
            coordinator_epoch,
            commit,
            transaction_version: if meta.client_version >= 2 { 2 } else { 0 },
        };
        for (target, result) in write_markers(&host, &pending, marker).await {
            let gone = host.image().topic(&target.0).is_none_or(|t| target.1 >= t.partitions);
            match result {
                Ok(()) => {
                    done.insert(target);
                }
                Err(_) if gone => {
                    done.insert(target);
                }
                Err(error) => {
                    tracing::debug!(target: "skein::net", id, topic = target.0, partition = target.1, error, "transaction marker not written; retrying");
                }
            }
        }
        if meta.partitions.iter().all(|p| done.contains(p)) && txns.begin_write(&id) {
            let txn_partition = TopicPartition::new(txn::TRANSACTION_TOPIC, partition);
            let Some(state) = host.hosted(&txn_partition) else {
                txns.end_write(&id, partition, None);
                return;
            };
            let next = txn::plan::completed(&meta, now_ms());
            if commit_state(&*host, &state, partition, &id, next).await.is_ok() {
                return;
            }
        }
        glommio::timer::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// Writes `marker` (producer id, epoch, coordinator epoch, commit) to `partitions`:
/// those this broker leads through their owner shards, the others with one
/// WriteTxnMarkers request per leader broker.
async fn write_markers<H: Host>(
    host: &Rc<H>,
    partitions: &[(String, i32)],
    marker: WriteMarker,
) -> Vec<((String, i32), Result<(), i16>)> {
    let image = host.image();
    let me = host.node_id();
    let mut remote: BTreeMap<i32, Vec<(String, i32)>> = BTreeMap::new();
    let mut local = Vec::new();
    for (topic, p) in partitions {
        match image.topic(topic).map(|t| t.assignment(*p, me).leader) {
            Some(leader) if leader != me && leader >= 0 => remote.entry(leader).or_default().push((topic.clone(), *p)),
            _ => local.push((topic.clone(), *p)),
        }
    }
    drop(image);
    let local_writes = local.into_iter().map(|(topic, p)| async move {
        let result = host.write_marker(TopicPartition::new(topic.clone(), p), marker).await;
        vec![((topic, p), result)]
    });
    let remote_writes = remote.into_iter().map(|(broker, targets)| write_remote(&**host, broker, targets, marker));
    let (mut results, remote_results) =
        futures_lite::future::zip(join_all(local_writes), join_all(remote_writes)).await;
    results.extend(remote_results);
    results.into_iter().flatten().collect()
}

/// WriteTxnMarkers to another broker, on a connection of its own.
async fn write_remote<H: Host>(
    host: &H,
    broker: i32,
    targets: Vec<(String, i32)>,
    marker: WriteMarker,
) -> Vec<((String, i32), Result<(), i16>)> {
    let failed = |targets: &[(String, i32)], error: i16| targets.iter().map(|t| (t.clone(), Err(error))).collect();
    let Some((address, port)) = host.broker_address(broker) else {
        return failed(&targets, code::BROKER_NOT_AVAILABLE);
    };
    let WriteMarker { producer_id, epoch, coordinator_epoch, commit, transaction_version } = marker;
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, p) in &targets {
        by_topic.entry(topic).or_default().push(*p);
    }
    let topics = by_topic
        .into_iter()
        .map(|(topic, ids)| {
            WritableTxnMarkerTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partition_indexes(ids)
        })
        .collect();
    let request = WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(epoch)
        .with_transaction_result(commit)
        .with_coordinator_epoch(coordinator_epoch)
        .with_transaction_version(transaction_version)
        .with_topics(topics)]);
    let client = format!("skein-txn-coordinator-{}", host.node_id());
    let security = host.security();
    let response = match skein_control::peer::call(security, &address, port, &client, &request, 2, MARKER_TIMEOUT).await
    {
        Ok(response) => response,
        Err(error) => {
            tracing::debug!(target: "skein::net", broker, error = %error, "WriteTxnMarkers failed");
            return failed(&targets, code::REQUEST_TIMED_OUT);
        }
    };
    let mut answered: BTreeMap<(String, i32), i16> = BTreeMap::new();
    for result in response.markers {
        for topic in result.topics {
            for p in topic.partitions {
                answered.insert((topic.name.0.to_string(), p.partition_index), p.error_code);
            }
        }
    }
    targets
        .into_iter()
        .map(|t| {
            let error = answered.get(&t).copied().unwrap_or(code::UNKNOWN_SERVER_ERROR);
            (t, if error == code::NONE { Ok(()) } else { Err(error) })
        })
        .collect()
}

/// Aborts transactions open past their timeout (in a new epoch, fencing their
/// producer) and removes ids idle past `transactional.id.expiration.ms`, every second.
pub async fn txn_ticker<H: Host>(host: Rc<H>) {
    let txns = &host.coordinators().txns;
    loop {
        glommio::timer::sleep(TICK).await;
        let (timed_out, expired) = txns.due(now_ms());
        for id in timed_out {
            let partition = txn::partition_for(&id);
            let txn_partition = TopicPartition::new(txn::TRANSACTION_TOPIC, partition);
            let (Some(state), Some(meta)) = (host.hosted(&txn_partition), txns.get(&id)) else { continue };
            if !txns.begin_write(&id) {
                continue;
            }
            tracing::info!(target: "skein::net", id, producer_id = meta.producer_id, "aborting a transaction past its timeout");
            let fence = txn::plan::fence(&meta, meta.client_version >= 2, now_ms());
            if commit_transit(&host, &state, partition, &id, fence).await.is_ok() {
                glommio::spawn_local(send_markers(host.clone(), id, partition)).detach();
            }
        }
        for id in expired {
            let partition = txn::partition_for(&id);
            let txn_partition = TopicPartition::new(txn::TRANSACTION_TOPIC, partition);
            let Some(state) = host.hosted(&txn_partition) else { continue };
            if !txns.begin_write(&id) {
                continue;
            }
            match write_state(&*host, &state, &id, None).await {
                Ok(()) => txns.replay(partition, id, None),
                Err(_) => txns.end_write(&id, partition, None),
            }
        }
    }
}
