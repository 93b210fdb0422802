//! The metadata controller: the one writer of the node's metadata. It runs on shard 0;
//! other shards reach it by message (`Shard::control`). Each request is decided
//! against the current image (`decide`, pure), turned into records, persisted, then
//! published to every shard; the reply goes out only once every shard holds the new
//! image, so a client that created a topic finds it on any connection.
//!
//! Requests are handled one at a time. Producer ids leave in blocks of
//! `PRODUCER_ID_BLOCK_SIZE`, as Kafka's controller hands out producer-id blocks, so
//! InitProducerId costs a metadata write once per block, not per producer.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use skein_engine::TopicPartition;

use super::store::MetadataStore;
use super::{default_shard, MetadataImage, MetadataRecord, Refusal, TopicMeta};
use crate::errors::code;
use crate::shard::Shard;

/// Producer ids per block (Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`).
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// A change a handler asks of the controller. Handlers validate what they can alone
/// (names, counts, configs); the controller checks what depends on the image.
#[derive(Debug, Clone, PartialEq)]
pub enum ControllerRequest {
    CreateTopic {
        name: String,
        partitions: i32,
        configs: BTreeMap<String, String>,
    },
    DeleteTopic {
        name: String,
    },
    CreatePartitions {
        name: String,
        count: i32,
    },
    SetConfigs {
        name: String,
        configs: BTreeMap<String, String>,
    },
    MovePartition {
        partition: TopicPartition,
        target: usize,
    },
    /// Places partitions of shards this node no longer runs on the default placement.
    Reshard,
    ProducerIds,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ControllerReply {
    Topic(TopicMeta),
    /// A topic grown from `old` partitions.
    Grown {
        old: i32,
        meta: TopicMeta,
    },
    ProducerIds(std::ops::Range<i64>),
    Done,
}

/// Decides `request` against `image`: the records to apply and the reply.
///
/// # Errors
/// The Kafka error and message for a request the image refuses.
pub fn decide(
    image: &MetadataImage,
    request: &ControllerRequest,
    shards: usize,
) -> Result<(Vec<MetadataRecord>, ControllerReply), Refusal> {
    let unknown = |name: &str| (code::UNKNOWN_TOPIC_OR_PARTITION, format!("Topic {name} does not exist."));
    let topic = |name: &str| image.topic(name).cloned().ok_or_else(|| unknown(name));
    Ok(match request {
        ControllerRequest::CreateTopic { name, partitions, configs } => {
            if image.topics.contains_key(name) {
                return Err((code::TOPIC_ALREADY_EXISTS, format!("Topic '{name}' already exists.")));
            }
            // Kafka refuses names that collide once '.' and '_' are treated alike.
            let normalized = name.replace('.', "_");
            if let Some(other) = image.topics.keys().find(|t| t.replace('.', "_") == normalized) {
                return Err((
                    code::INVALID_TOPIC_EXCEPTION,
                    format!("Topic '{name}' collides with existing topic: {other}"),
                ));
            }
            let meta = TopicMeta {
                name: name.clone(),
                id: uuid::Uuid::new_v4(),
                partitions: *partitions,
                configs: configs.clone(),
                shards: (0..*partitions).map(|p| default_shard(name, p, shards)).collect(),
            };
            (vec![MetadataRecord::Topic(meta.clone())], ControllerReply::Topic(meta))
        }
        ControllerRequest::DeleteTopic { name } => {
            let meta = image.topic(name).cloned().ok_or_else(|| {
                (code::UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.".to_string())
            })?;
            (vec![MetadataRecord::RemoveTopic { name: name.clone(), id: meta.id }], ControllerReply::Topic(meta))
        }
        ControllerRequest::CreatePartitions { name, count } => {
            let mut meta = topic(name)?;
            check_growth(&meta, *count)?;
            let old = meta.partitions;
            meta.shards.extend((old..*count).map(|p| default_shard(name, p, shards)));
            meta.partitions = *count;
            (vec![MetadataRecord::Topic(meta.clone())], ControllerReply::Grown { old, meta })
        }
        ControllerRequest::SetConfigs { name, configs } => {
            let mut meta = topic(name)?;
            meta.configs = configs.clone();
            (vec![MetadataRecord::Topic(meta.clone())], ControllerReply::Topic(meta))
        }
        ControllerRequest::MovePartition { partition, target } => {
            let mut meta = topic(&partition.topic)?;
            let slot = usize::try_from(partition.partition)
                .ok()
                .and_then(|p| meta.shards.get_mut(p))
                .ok_or((code::UNKNOWN_TOPIC_OR_PARTITION, format!("no partition {partition}")))?;
            *slot = *target;
            (vec![MetadataRecord::Topic(meta.clone())], ControllerReply::Topic(meta))
        }
        ControllerRequest::Reshard => {
            let records = image
                .topics
                .values()
                .filter(|t| t.shards.iter().any(|&s| s >= shards))
                .map(|t| {
                    let mut meta = t.clone();
                    for (p, shard) in meta.shards.iter_mut().enumerate() {
                        if *shard >= shards {
                            *shard = default_shard(&meta.name, p as i32, shards);
                        }
                    }
                    MetadataRecord::Topic(meta)
                })
                .collect();
            (records, ControllerReply::Done)
        }
        ControllerRequest::ProducerIds => {
            let start = image.next_producer_id;
            let end = start + PRODUCER_ID_BLOCK_SIZE;
            (vec![MetadataRecord::ProducerIds { next: end }], ControllerReply::ProducerIds(start..end))
        }
    })
}

/// Why a topic cannot grow to `count` partitions, in Kafka's words.
///
/// # Errors
/// INVALID_PARTITIONS.
pub fn check_growth(meta: &TopicMeta, count: i32) -> Result<(), Refusal> {
    if count < meta.partitions {
        return Err((
            code::INVALID_PARTITIONS,
            format!("Topic currently has {} partitions, which is higher than the requested {count}.", meta.partitions),
        ));
    }
    if count == meta.partitions {
        return Err((code::INVALID_PARTITIONS, format!("Topic already has {count} partitions.")));
    }
    if count > 100_000 {
        return Err((code::INVALID_PARTITIONS, format!("Number of partitions {count} exceeds the limit of 100000.")));
    }
    Ok(())
}

/// The controller's state on shard 0.
pub struct Controller {
    /// Held for a whole request: decide, persist and publish never interleave.
    store: async_lock::Mutex<MetadataStore>,
}

impl Controller {
    pub fn new(store: MetadataStore) -> Controller {
        Controller { store: async_lock::Mutex::new(store) }
    }

    /// Decides, persists and publishes one request.
    ///
    /// # Errors
    /// The refusal from `decide`, or KAFKA_STORAGE_ERROR when the image cannot be
    /// persisted (then nothing is published).
    pub async fn handle(&self, shard: &Rc<Shard>, request: ControllerRequest) -> Result<ControllerReply, Refusal> {
        let mut store = self.store.lock().await;
        let current = shard.image();
        let (records, reply) = decide(&current, &request, shard.settings.shards)?;
        if records.is_empty() {
            return Ok(reply);
        }
        let mut next = (*current).clone();
        next.apply(&records);
        store
            .persist(&records, &mut next)
            .await
            .map_err(|e| (code::KAFKA_STORAGE_ERROR, format!("cannot persist metadata: {e}")))?;
        shard.publish(Arc::new(next)).await;
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(image: &mut MetadataImage, request: ControllerRequest) -> Result<ControllerReply, Refusal> {
        let (records, reply) = decide(image, &request, 2)?;
        image.apply(&records);
        Ok(reply)
    }

    // Each request as Kafka's controller answers it, and the image it leaves.
    #[test]
    fn requests_against_the_image() {
        let mut image = MetadataImage { next_producer_id: 1000, ..Default::default() };
        let create = |name: &str, partitions| ControllerRequest::CreateTopic {
            name: name.into(),
            partitions,
            configs: BTreeMap::new(),
        };
        let Ok(ControllerReply::Topic(meta)) = applied(&mut image, create("a.b", 3)) else { panic!() };
        assert_eq!((meta.partitions, meta.shards.len()), (3, 3));
        assert_eq!(applied(&mut image, create("a.b", 1)).unwrap_err().0, code::TOPIC_ALREADY_EXISTS);
        assert_eq!(applied(&mut image, create("a_b", 1)).unwrap_err().0, code::INVALID_TOPIC_EXCEPTION);
        let grow = |count| ControllerRequest::CreatePartitions { name: "a.b".into(), count };
        assert_eq!(applied(&mut image, grow(3)).unwrap_err().0, code::INVALID_PARTITIONS);
        assert_eq!(applied(&mut image, grow(2)).unwrap_err().0, code::INVALID_PARTITIONS);
        let Ok(ControllerReply::Grown { old: 3, meta }) = applied(&mut image, grow(5)) else { panic!() };
        assert_eq!(meta.shards.len(), 5);
        let moved = ControllerRequest::MovePartition { partition: TopicPartition::new("a.b", 4), target: 1 };
        applied(&mut image, moved).unwrap();
        assert_eq!(image.topic("a.b").unwrap().shards[4], 1);
        let missing = ControllerRequest::MovePartition { partition: TopicPartition::new("a.b", 9), target: 1 };
        assert_eq!(applied(&mut image, missing).unwrap_err().0, code::UNKNOWN_TOPIC_OR_PARTITION);
        // Producer ids come in disjoint blocks.
        let Ok(ControllerReply::ProducerIds(first)) = applied(&mut image, ControllerRequest::ProducerIds) else {
            panic!()
        };
        let Ok(ControllerReply::ProducerIds(second)) = applied(&mut image, ControllerRequest::ProducerIds) else {
            panic!()
        };
        assert_eq!((first.start, first.end, second.start), (1000, 2000, 2000));
        assert_eq!(image.next_producer_id, 3000);
        let delete = ControllerRequest::DeleteTopic { name: "a.b".into() };
        applied(&mut image, delete.clone()).unwrap();
        assert!(image.topic("a.b").is_none());
        assert_eq!(applied(&mut image, delete).unwrap_err().0, code::UNKNOWN_TOPIC_OR_PARTITION);
        // Partitions of shards the node no longer runs move to the default placement.
        let mut wide = MetadataImage::default();
        wide.topics.insert(
            "w".into(),
            TopicMeta {
                name: "w".into(),
                id: uuid::Uuid::new_v4(),
                partitions: 2,
                configs: BTreeMap::new(),
                shards: vec![7, 1],
            },
        );
        applied(&mut wide, ControllerRequest::Reshard).unwrap();
        assert_eq!(wide.topic("w").unwrap().shards, vec![default_shard("w", 0, 2), 1]);
    }
}
