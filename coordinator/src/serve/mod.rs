//! The group and transaction coordinators at work on a shard: loading their state
//! from their internal topic's partitions while this broker leads them, running calls
//! against that state, writing each change to the partition as its leader before the
//! answer that depends on it, and their tickers. Their state and rules, which know no
//! shard, are `group` and `txn`.
//!
//! A coordinator sees the shard it runs on only through `Host`: the metadata image,
//! the node id, its own state (`Coordinators`), the internal-topic partitions it
//! writes, and the few services it asks of the rest of the broker (producer ids,
//! markers to partitions, high watermarks). The plumbing the coordinators share is
//! written here once: loading while leading (`load_while_leading`), replaying a
//! partition (`replay`), and writing before answering (`write_records`).

pub mod dead_letter;
pub mod group;
pub mod share;
pub mod share_leader;
pub mod txn;

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use skein_control::errors::{code, code_of_append};
use skein_control::metadata::MetadataImage;
use skein_engine::io::dma::DmaStorage;
use skein_engine::records::{BatchProducer, Record};
use skein_engine::time::now_ms;
use skein_engine::{Batch, Log, TopicPartition};

use crate::hosted::Partition;
use crate::txn::calls::WriteMarker;

/// The coordinators' state on one shard.
#[derive(Default)]
pub struct Coordinators {
    /// The groups whose offsets partitions this shard owns.
    pub groups: crate::group::Coordinator,
    /// Their consumer lag as of the last refresh (`group::consumer_lag_task`), for `/metrics`.
    pub consumer_lag: RefCell<crate::group::lag::ConsumerLag>,
    /// The transactional ids whose `__transaction_state` partitions this shard owns.
    pub txns: crate::txn::Coordinator,
    /// The share-partition states whose `__share_group_state` partitions this shard owns.
    pub shares: share::ShareStates,
}

/// What a coordinator sees of the shard it runs on (implemented by `Shard`). The
/// futures it returns run on the shard's executor and are never sent.
pub trait Host: 'static {
    /// This node's id.
    fn node_id(&self) -> i32;
    /// The metadata image the shard last installed.
    fn image(&self) -> Arc<MetadataImage>;
    /// The coordinators' state on this shard.
    fn coordinators(&self) -> &Coordinators;
    /// A partition this shard hosts: a coordinator's internal-topic partition.
    fn hosted(&self, partition: &TopicPartition) -> Option<Rc<Partition>>;
    /// Counts a failed load of an offsets partition (`skein_group_load_failures_total`).
    fn count_group_load_failure(&self);
    /// A new producer id from the controller's blocks.
    fn next_producer_id(self: &Rc<Self>) -> impl Future<Output = Result<i64, i16>>;
    /// Writes `marker` to a partition this node leads, on the shard that owns it.
    fn write_marker(
        self: &Rc<Self>,
        partition: TopicPartition,
        marker: WriteMarker,
    ) -> impl Future<Output = Result<(), i16>>;
    /// The high watermark of a partition this node hosts, asked of its owner shard.
    fn high_watermark(self: &Rc<Self>, partition: TopicPartition) -> impl Future<Output = Option<i64>>;
    /// Another broker's inter-broker address, while it is registered and not fenced.
    fn broker_address(&self, broker: i32) -> Option<(String, u16)>;
    /// The node's TLS and SASL settings, for requests to other brokers.
    fn security(&self) -> &Arc<skein_control::security::Security>;
    /// The counters of the share-partitions this shard leads.
    fn share_metrics(&self) -> &crate::share::ShareMetrics;
    /// Runs a call on the share coordinator of its key, on this node or another.
    fn share_state(
        self: &Rc<Self>,
        call: share::StateCall,
    ) -> impl Future<Output = Result<share::Stored, skein_control::errors::Refusal>>;
    /// Appends `batch` (one record batch, no producer) to `partition` with acks=all,
    /// on its leader: a shard of this node, or another broker.
    fn produce(
        self: &Rc<Self>,
        partition: TopicPartition,
        batch: bytes::Bytes,
    ) -> impl Future<Output = Result<(), skein_control::errors::Refusal>>;
    /// Creates a topic with the cluster's default partitions and replication.
    fn create_topic(
        self: &Rc<Self>,
        name: String,
        configs: std::collections::BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), skein_control::errors::Refusal>>;
}

/// Runs `load` for an internal-topic partition while this shard leads it (after a
/// load on open that failed, and when it takes the leadership over): first after
/// `delay`, then again with backoff until it succeeds, stopping once the shard no
/// longer leads the partition in `log`. `load` gets the leader epoch it loads in.
pub async fn load_while_leading<H, F, Fut>(
    host: Rc<H>,
    partition: TopicPartition,
    log: Rc<Log<DmaStorage>>,
    delay: Duration,
    load: F,
) where
    H: Host,
    F: Fn(Rc<H>, TopicPartition, Rc<Log<DmaStorage>>, i32) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut backoff = Duration::from_millis(200);
    glommio::timer::sleep(delay).await;
    loop {
        let leader_epoch = host.hosted(&partition).and_then(|p| {
            let replica = p.replica();
            let leads = replica.role() == skein_replication::Role::Leader;
            (Rc::ptr_eq(p.log(), &log) && leads).then(|| replica.leader_epoch().0)
        });
        let Some(epoch) = leader_epoch else { return };
        if load(host.clone(), partition.clone(), log.clone(), epoch).await {
            return;
        }
        glommio::timer::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

/// Why a coordinator could not load its partition; it stays unloaded and the load is
/// tried again (a later full replay gives the same state: records apply in order).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("read at offset {offset}: {source}")]
    Read { offset: i64, source: skein_engine::Error },
    #[error("batch at offset {offset}: {source}")]
    Decode { offset: i64, source: skein_engine::records::RecordsError },
}

/// What `replay` hands over from a coordinator's partition, in log order.
pub enum Replayed {
    /// A transaction marker: `producer_id`'s transaction committed or aborted.
    Marker { producer_id: i64, commit: bool },
    /// A record, with the producer id of its batch when the batch is transactional.
    Record { record: Record, transactional: Option<i64> },
}

/// Reads `log` from its start to its end and hands each marker and record to
/// `apply`, returning the number of records.
///
/// # Errors
/// `LoadError` when a batch cannot be read or decoded.
pub async fn replay(log: &Log<DmaStorage>, mut apply: impl FnMut(Replayed)) -> Result<u64, LoadError> {
    let mut offset = log.log_start_offset();
    let mut records = 0u64;
    loop {
        let batches =
            log.read(offset, 1 << 20, None).await.map_err(|source| LoadError::Read { offset: offset.0, source })?;
        let Some(last) = batches.last() else { return Ok(records) };
        offset = last.next_offset();
        for batch in &batches {
            if batch.is_control() {
                if let Some((commit, _)) = skein_replication::txn::marker_of(batch) {
                    apply(Replayed::Marker { producer_id: batch.producer_id(), commit });
                }
                continue;
            }
            let transactional = batch.is_transactional().then(|| batch.producer_id());
            let limit = skein_engine::limits::DECOMPRESSED_BATCH_BYTES_MAX;
            let decoded = skein_engine::records::decode_records(&batch.bytes(), limit)
                .map_err(|source| LoadError::Decode { offset: batch.base_offset().0, source })?;
            for record in decoded {
                records += 1;
                apply(Replayed::Record { record, transactional });
            }
        }
    }
}

/// Appends a coordinator's records (offset deltas assigned here) to its partition
/// as its leader, in its epoch, answered once the ISR holds them (Kafka writes
/// coordinator records with acks=all): a new coordinator has them.
///
/// # Errors
/// The append's Kafka error code.
pub(crate) async fn write_records(
    state: &Partition,
    mut records: Vec<Record>,
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
