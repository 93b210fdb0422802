//! What OffsetCommit and TxnOffsetCommit share: each partition's error known before
//! the coordinator is asked (topic id unknown, topic not readable, unknown partition,
//! metadata too long), the offsets it is asked to commit, and the answer put back in
//! request order. From OffsetCommit v10 and TxnOffsetCommit v6 (KIP-848, KIP-1319)
//! topics are named by id; offsets are kept by name, as Kafka keeps them.

use kafka_protocol::protocol::StrBytes;
use skein_control::errors::code;
use skein_control::metadata::{MetadataImage, TopicMeta};
use skein_coordinator::group::Committed;
use uuid::Uuid;

/// A topic of a commit request as the image knows it: by id from the versions that
/// name topics by id, else by name. `None`: an id the image does not know.
pub(crate) fn resolve<'a>(
    image: &'a MetadataImage,
    by_id: bool,
    name: &str,
    id: Uuid,
) -> Option<(String, Option<&'a TopicMeta>)> {
    match by_id {
        true => image.topic_by_id(id).map(|meta| (meta.name.clone(), Some(meta))),
        false => Some((name.to_owned(), image.topic(name))),
    }
}

/// A commit's partitions in request order, and the offsets to send the coordinator.
/// A topic's name and the id the request named it by (nil before topic ids).
pub(crate) type Topic = (String, Uuid);

#[derive(Default)]
pub(crate) struct Commits {
    /// (topic and its id as the request named it, partition, error known before the
    /// coordinator is asked)
    slots: Vec<(Topic, i32, Option<i16>)>,
    pub offsets: Vec<(String, i32, Committed)>,
}

impl Commits {
    /// Takes partition `partition` of topic `name` (`meta`: as the image has it;
    /// readable by the caller or not): refused here, or `committed` goes to the
    /// coordinator.
    pub fn add(
        &mut self,
        (name, id): (&str, Uuid),
        meta: Option<&TopicMeta>,
        readable: bool,
        partition: i32,
        committed: Committed,
    ) {
        let known = meta.is_some_and(|m| partition >= 0 && partition < m.partitions);
        let refused = if !readable {
            Some(crate::authorize::TOPIC_AUTHORIZATION_FAILED)
        } else if !known {
            Some(code::UNKNOWN_TOPIC_OR_PARTITION)
        } else if committed.metadata.len() > skein_coordinator::group::OFFSET_METADATA_MAX_BYTES {
            Some(code::OFFSET_METADATA_TOO_LARGE)
        } else {
            None
        };
        self.slots.push(((name.to_string(), id), partition, refused));
        if refused.is_none() {
            self.offsets.push((name.to_string(), partition, committed));
        }
    }

    /// A partition of a topic id the image does not know: UNKNOWN_TOPIC_ID.
    pub fn unknown_id(&mut self, id: Uuid, partition: i32) {
        self.slots.push(((String::new(), id), partition, Some(code::UNKNOWN_TOPIC_ID)));
    }

    /// Each partition's error in request order: its own, or the coordinator's next.
    pub fn errors(self, coordinator: Vec<i16>) -> impl Iterator<Item = (Topic, i32, i16)> {
        let mut coordinator = coordinator.into_iter();
        self.slots.into_iter().map(move |(topic, partition, known)| {
            let error = known.unwrap_or_else(|| coordinator.next().unwrap_or(code::UNKNOWN_SERVER_ERROR));
            (topic, partition, error)
        })
    }
}

/// A committed offset's metadata as the coordinator keeps it.
pub(crate) fn metadata(metadata: Option<&StrBytes>) -> String {
    metadata.map(|m| m.to_string()).unwrap_or_default()
}
