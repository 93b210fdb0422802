//! Cluster metadata as the broker's handlers see it: topics, their ids, partition
//! counts, config overrides and the partition-to-shard table.
//!
//! Control plane: one writer (`MetadataStore`, driven by shard 0) publishes immutable,
//! versioned `MetadataImage`s; every shard reads the latest `Arc` and never mutates it.
//! The single-node store persists the image as JSON, atomically (temp file, fsync,
//! rename, directory fsync). A cluster controller's metadata log replaces the store
//! behind the same `MetadataImage` type without touching the handlers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};
use skein_engine::TopicPartition;

/// One topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub name: String,
    /// Kafka's topic id (KIP-516), random v4.
    pub id: uuid::Uuid,
    pub partitions: i32,
    /// Topic-level config overrides, Kafka names to values.
    pub configs: BTreeMap<String, String>,
    /// Shard of each partition (index = partition).
    pub shards: Vec<usize>,
}

/// An immutable snapshot of the metadata, with a version that only grows.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MetadataImage {
    pub version: u64,
    pub topics: BTreeMap<String, TopicMeta>,
    /// Producer ids handed out up to (excluding) this one.
    pub next_producer_id: i64,
    /// Topic ids to names, rebuilt whenever the store publishes an image, so that
    /// `topic_by_id` (every Fetch from v13) is a hash lookup, not a scan.
    #[serde(skip)]
    ids: std::collections::HashMap<uuid::Uuid, String>,
}

impl MetadataImage {
    pub fn topic(&self, name: &str) -> Option<&TopicMeta> {
        self.topics.get(name)
    }

    /// The topic with id `id`: O(1) on a published image. An image changed since it
    /// was published (inside `MetadataStore::update`) falls back to a scan.
    pub fn topic_by_id(&self, id: uuid::Uuid) -> Option<&TopicMeta> {
        match self.ids.get(&id) {
            Some(name) => self.topics.get(name).filter(|t| t.id == id),
            None if self.ids.len() == self.topics.len() => None,
            None => self.topics.values().find(|t| t.id == id),
        }
    }

    /// Rebuilds the id index after the topics changed.
    fn index_ids(&mut self) {
        self.ids = self.topics.values().map(|t| (t.id, t.name.clone())).collect();
    }

    /// The shard that owns a partition, if the partition exists.
    pub fn shard_of(&self, partition: &TopicPartition) -> Option<usize> {
        let topic = self.topics.get(&partition.topic)?;
        usize::try_from(partition.partition).ok().and_then(|p| topic.shards.get(p).copied())
    }
}

/// The default placement: partitions of a topic spread round-robin over the shards,
/// starting at a shard derived from the topic name so that topics do not all start on 0.
pub fn default_shard(topic: &str, partition: i32, shards: usize) -> usize {
    let start = crc32c::crc32c(topic.as_bytes()) as usize;
    start.wrapping_add(partition as usize) % shards
}

/// Why a topic name is invalid, in Kafka's words (`Topic.validate`).
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("Topic name is illegal, it can't be empty".into());
    }
    if name == "." || name == ".." {
        return Err("Topic name cannot be \".\" or \"..\"".into());
    }
    if name.len() > 249 {
        return Err(format!("Topic name is illegal, it can't be longer than 249 characters, topic name: {name}"));
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-') {
        return Err(format!(
            "Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// A refused change: a Kafka error code and its message.
pub type Refusal = (i16, String);

/// The single writer of metadata on a single node: applies changes, persists them,
/// publishes new images.
pub struct MetadataStore {
    path: PathBuf,
    current: RwLock<Arc<MetadataImage>>,
}

impl MetadataStore {
    /// Loads the store under `data_dir`, or starts empty.
    ///
    /// # Errors
    /// A message when the file exists but cannot be read or parsed.
    pub fn open(data_dir: &Path) -> Result<MetadataStore, String> {
        let dir = data_dir.join("__skein_metadata");
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let path = dir.join("image.json");
        let image = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| format!("cannot parse {}: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                MetadataImage { next_producer_id: 1000, ..Default::default() }
            }
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let mut image: MetadataImage = image;
        image.index_ids();
        Ok(MetadataStore { path, current: RwLock::new(Arc::new(image)) })
    }

    /// The latest image. Cheap: one uncontended read lock and an `Arc` clone.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.current.read().expect("metadata lock").clone()
    }

    /// Applies `change` to a copy of the image, persists it, then publishes it.
    /// Blocks on the file write (small, rare: topic changes only).
    ///
    /// # Errors
    /// The change's own error, or a message when the image cannot be persisted (then
    /// nothing is published).
    pub fn update<T>(
        &self,
        change: impl FnOnce(&mut MetadataImage) -> Result<T, Refusal>,
    ) -> Result<(T, Arc<MetadataImage>), Refusal> {
        let mut guard = self.current.write().expect("metadata lock");
        let mut next = (**guard).clone();
        let result = change(&mut next)?;
        next.version += 1;
        let bytes =
            serde_json::to_vec_pretty(&next).map_err(|e| (crate::errors::code::UNKNOWN_SERVER_ERROR, e.to_string()))?;
        write_atomic(&self.path, &bytes)
            .map_err(|e| (crate::errors::code::KAFKA_STORAGE_ERROR, format!("cannot persist metadata: {e}")))?;
        next.index_ids();
        let next = Arc::new(next);
        *guard = next.clone();
        Ok((result, next))
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let temp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&temp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temp, path)?;
    std::fs::File::open(path.parent().unwrap_or(Path::new(".")))?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Topic names are checked as Kafka checks them.
    #[test]
    fn topic_names() {
        let check = |name: &str, ok: bool| assert_eq!(validate_topic_name(name).is_ok(), ok, "{name}");
        check("orders", true);
        check("a.b_c-D9", true);
        check("", false);
        check(".", false);
        check("..", false);
        check("has space", false);
        check("slash/no", false);
        check("ünicode", false);
        check(&"x".repeat(249), true);
        check(&"x".repeat(250), false);
    }

    // Topic ids resolve through the index of each published image, also after a
    // topic is deleted and recreated under the same name with a new id.
    #[test]
    fn topics_by_id() {
        let dir = tempfile::tempdir().unwrap();
        let store = MetadataStore::open(dir.path()).unwrap();
        let topic = |name: &str| TopicMeta {
            name: name.into(),
            id: uuid::Uuid::new_v4(),
            partitions: 1,
            configs: BTreeMap::new(),
            shards: vec![0],
        };
        let (a, b) = (topic("a"), topic("b"));
        let (ida, idb) = (a.id, b.id);
        store
            .update(|image| {
                image.topics.insert("a".into(), a);
                image.topics.insert("b".into(), b);
                Ok(())
            })
            .unwrap();
        let image = store.image();
        assert_eq!(image.topic_by_id(ida).unwrap().name, "a");
        assert_eq!(image.topic_by_id(idb).unwrap().name, "b");
        assert!(image.topic_by_id(uuid::Uuid::new_v4()).is_none());
        let again = topic("a");
        let new_id = again.id;
        store.update(|image| Ok(image.topics.insert("a".into(), again))).unwrap();
        let image = store.image();
        assert!(image.topic_by_id(ida).is_none(), "the old id is gone");
        assert_eq!(image.topic_by_id(new_id).unwrap().name, "a");
        // Reopened from disk, the index is rebuilt.
        let reopened = MetadataStore::open(dir.path()).unwrap().image();
        assert_eq!(reopened.topic_by_id(new_id).unwrap().name, "a");
    }
}
