//! Share groups' dead-letter topics (KIP-1191), as Kafka 4.4 writes them.
//!
//! In a group with `errors.deadletterqueue.topic.name`, a record a member rejects, or
//! one that comes back at `share.delivery.count.limit`, goes to ARCHIVING instead of
//! ARCHIVED. Once that state is written to the share coordinator (and the
//! acknowledgement answered), the leader writes one record per offset to the
//! dead-letter topic, off the request path: headers naming the source topic,
//! partition, offset, group, delivery count and cause, and the original key and value
//! with `errors.deadletterqueue.copy.record.enable`. Then, written or given up on, the
//! records are ARCHIVED and that state is written too. A new leader finds ARCHIVING
//! records in the state it loads and writes them again: a dead letter is written at
//! least once.
//!
//! The topic must not start with `__`, must start with the broker's
//! `errors.deadletterqueue.topic.name.prefix` (`dlq.`), and must either exist with
//! `errors.deadletterqueue.group.enable=true` or be created, with that config, when
//! `errors.deadletterqueue.auto.create.topics.enable` is true. A write that fails
//! these checks, or whose produce fails after retries, is logged (once per run of
//! failures) and counted, and its records are archived anyway, as Kafka does.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use skein_control::broker_configs::dynamic_broker_value;
use skein_control::errors::code;
use skein_engine::records::{build_batch, Compression, Record};
use skein_engine::{Offset, TopicPartition};
use skein_replication::Isolation;

use super::share::{Key, StateCall};
use super::Host;
use crate::share::partition::DeadLetters;
use crate::share::slots::Slot;
use crate::share::ShareMetrics;

/// The topic config that lets share groups use a topic as their dead-letter topic.
pub const GROUP_ENABLE: &str = "errors.deadletterqueue.group.enable";
const AUTO_CREATE: &str = "errors.deadletterqueue.auto.create.topics.enable";
const PREFIX: &str = "errors.deadletterqueue.topic.name.prefix";

/// Records per dead-letter batch, and the bytes a batch's copied records may take
/// (under the default `max.message.bytes`).
const BATCH_RECORDS_MAX: usize = 500;
const BATCH_BYTES_MAX: usize = 900 * 1024;
/// The most original bytes one write copies (past it, records go with headers only).
const COPY_BYTES_MAX: usize = 8 << 20;
/// Produce attempts for a batch, with a doubling back-off from 1 s (Kafka: 5 attempts).
const ATTEMPTS: u32 = 5;

/// Writes `letters` of `key`'s share-partition (led here in `leader_epoch`, held in
/// `slot`) to the group's dead-letter topic, then archives them and writes that state.
pub(crate) async fn deliver<H: Host>(
    host: Rc<H>,
    source: TopicPartition,
    key: Key,
    slot: Rc<Slot>,
    leader_epoch: i32,
    letters: Vec<DeadLetters>,
) {
    let metrics = host.share_metrics();
    match write(&host, &source, &key.group, &letters).await {
        Ok(records) => {
            ShareMetrics::add(&metrics.dead_letters, records);
            metrics.dead_letter_failing.set(false);
        }
        Err(text) => {
            ShareMetrics::add(&metrics.dead_letter_failures, 1);
            if !metrics.dead_letter_failing.replace(true) {
                tracing::warn!(target: "skein::net", partition = %source, group = %key.group, text,
                    "a share group's dead letters were not written; their records are archived regardless");
            }
        }
    }
    let mut guard = slot.state.lock().await;
    // Another leader epoch loads the state again, ARCHIVING records and all.
    let Some(loaded) = guard.as_mut().filter(|l| l.leader_epoch == leader_epoch) else { return };
    let mut changed = false;
    for letter in &letters {
        changed |= loaded.sp.archive_dead_letters(letter.first, letter.last);
    }
    if !changed {
        return;
    }
    let (start, batches) = loaded.sp.state_batches();
    let write = StateCall::Write { key, state_epoch: loaded.state_epoch, leader_epoch, start, batches };
    if let Err((error, text)) = host.share_state(write).await {
        // The ARCHIVING state stays written until the next write: a new leader would
        // write these dead letters again.
        ShareMetrics::add(&host.share_metrics().state_write_failures, 1);
        tracing::debug!(target: "skein::net", partition = %source, error, text, "archived dead letters not written");
    }
}

/// Checks the group's dead-letter topic (creating it where allowed) and writes one
/// record per offset of `letters` to its partition `source.partition` modulo its
/// partition count. Returns how many records it wrote.
async fn write<H: Host>(
    host: &Rc<H>,
    source: &TopicPartition,
    group: &str,
    letters: &[DeadLetters],
) -> Result<u64, String> {
    let image = host.image();
    let node = host.node_id();
    let Some((name, copy)) = crate::group::configs::share_dead_letter(&image, group) else {
        return Err(format!("Configured DLQ topic name in share group: {group} is empty."));
    };
    if name.starts_with("__") {
        return Err(format!("Configured DLQ topic name in share group: {group} cannot start with __, topic: {name}."));
    }
    let auto_create = dynamic_broker_value(&image, node, AUTO_CREATE).trim().eq_ignore_ascii_case("true");
    let prefix = dynamic_broker_value(&image, node, PREFIX).to_string();
    match image.topic(&name) {
        Some(meta) if !meta.configs.get(GROUP_ENABLE).is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) => {
            return Err(format!("DLQ is not enabled on configured DLQ topic for share group: {group}, topic: {name}."));
        }
        None if !auto_create => {
            return Err(format!(
                "DLQ topic does not exist and auto create is disabled on cluster for share group: {group}, topic: {name}."
            ));
        }
        _ => {}
    }
    if !prefix.is_empty() && !name.starts_with(&prefix) {
        return Err(format!(
            "Configured DLQ topic name does not comply with the DLQ topic prefix in share group: {group}, topic: {name}, prefix: {prefix}."
        ));
    }
    drop(image);
    let partitions = partitions_of(host, &name).await?;
    let target = TopicPartition::new(name, source.partition % partitions);
    let originals = match copy {
        true => originals(host, source, letters).await,
        false => BTreeMap::new(),
    };
    let now = skein_engine::time::now_ms();
    let header = |name: &str, value: String| (Bytes::from(name.to_string()), Some(Bytes::from(value)));
    let mut written = 0u64;
    let mut records: Vec<Record> = Vec::new();
    let mut bytes = 0usize;
    let offsets = letters.iter().flat_map(|l| (l.first..=l.last).map(move |offset| (offset, *l)));
    let mut offsets = offsets.peekable();
    while let Some((offset, letter)) = offsets.next() {
        let (key, value) = originals.get(&offset).cloned().unwrap_or((None, None));
        bytes += key.as_ref().map_or(0, Bytes::len) + value.as_ref().map_or(0, Bytes::len) + 200;
        records.push(Record {
            offset_delta: records.len() as i32,
            key,
            value,
            headers: vec![
                header("__dlq.errors.topic", source.topic.clone()),
                header("__dlq.errors.partition", source.partition.to_string()),
                header("__dlq.errors.offset", offset.to_string()),
                header("__dlq.errors.group", group.to_string()),
                header("__dlq.errors.delivery.count", letter.deliveries.to_string()),
                header("__dlq.errors.message", letter.cause.message().to_string()),
            ],
            ..Record::default()
        });
        if records.len() >= BATCH_RECORDS_MAX || bytes >= BATCH_BYTES_MAX || offsets.peek().is_none() {
            let batch = Bytes::from(build_batch(0, now, Compression::None, &records));
            produce(host, &target, batch).await?;
            written += records.len() as u64;
            records.clear();
            bytes = 0;
        }
    }
    Ok(written)
}

/// The partition count of `name`, once this node's metadata has the topic (it may
/// have just been created).
async fn partitions_of<H: Host>(host: &Rc<H>, name: &str) -> Result<i32, String> {
    let configs = BTreeMap::from([
        (GROUP_ENABLE.to_string(), "true".to_string()),
        ("message.timestamp.type".to_string(), "CreateTime".to_string()),
    ]);
    if host.image().topic(name).is_none() {
        host.create_topic(name.to_string(), configs)
            .await
            .map_err(|(error, text)| format!("the DLQ topic {name} was not created: {error} {text}"))?;
    }
    for _ in 0..50 {
        if let Some(meta) = host.image().topic(name).filter(|m| m.partitions > 0) {
            return Ok(meta.partitions);
        }
        glommio::timer::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("the DLQ topic {name} is not in this broker's metadata"))
}

/// Appends `batch` to `target`, retrying what a leader change or a lost connection
/// explains.
async fn produce<H: Host>(host: &Rc<H>, target: &TopicPartition, batch: Bytes) -> Result<(), String> {
    let mut backoff = Duration::from_secs(1);
    for attempt in 1..=ATTEMPTS {
        match host.produce(target.clone(), batch.clone()).await {
            Ok(()) => return Ok(()),
            Err((error, text)) => {
                let retriable = matches!(
                    error,
                    code::NOT_LEADER_OR_FOLLOWER
                        | code::LEADER_NOT_AVAILABLE
                        | code::NETWORK_EXCEPTION
                        | code::REQUEST_TIMED_OUT
                        | code::UNKNOWN_TOPIC_OR_PARTITION
                        | code::NOT_ENOUGH_REPLICAS
                );
                if !retriable || attempt == ATTEMPTS {
                    return Err(format!("producing to {target} failed: {error} {text}"));
                }
            }
        }
        glommio::timer::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(8));
    }
    Err(format!("producing to {target} failed"))
}

/// The keys and values of the records at the offsets of `letters`, read from the
/// source partition (this shard leads it), within `COPY_BYTES_MAX`; offsets it cannot
/// read go with headers only.
async fn originals<H: Host>(
    host: &Rc<H>,
    source: &TopicPartition,
    letters: &[DeadLetters],
) -> BTreeMap<i64, (Option<Bytes>, Option<Bytes>)> {
    let mut out = BTreeMap::new();
    let Some(state) = host.hosted(source) else { return out };
    let mut copied = 0usize;
    for letter in letters {
        let mut from = letter.first;
        while from <= letter.last && copied < COPY_BYTES_MAX {
            let Ok(batches) = state.read(Offset(from), 1 << 20, Isolation::HighWatermark).await else { break };
            let Some(last) = batches.last() else { break };
            let next = last.next_offset().0;
            for batch in batches.iter().filter(|b| !b.is_control()) {
                let limit = skein_engine::limits::DECOMPRESSED_BATCH_BYTES_MAX;
                let Ok(records) = skein_engine::records::decode_records(&batch.bytes(), limit) else { continue };
                let base = batch.base_offset().0;
                for record in records {
                    let offset = base + record.offset_delta as i64;
                    let size = record.key.as_ref().map_or(0, Bytes::len) + record.value.as_ref().map_or(0, Bytes::len);
                    if (letter.first..=letter.last).contains(&offset) && copied + size <= COPY_BYTES_MAX {
                        copied += size;
                        out.insert(offset, (record.key, record.value));
                    }
                }
            }
            if next <= from {
                break;
            }
            from = next;
        }
    }
    out
}
