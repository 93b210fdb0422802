//! The group coordinator's streams groups (`streams/`): heartbeats, describes,
//! deletes and the ticker, beside the classic, consumer and share groups of the same
//! shard, whose ids they must not take.

use std::time::Instant;

use kafka_protocol::messages::streams_group_describe_response::DescribedGroup;
use kafka_protocol::messages::{GroupId, StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse};
use kafka_protocol::protocol::StrBytes;
use skein_control::errors::code;
use skein_control::metadata::MetadataImage;

use super::streams::topology::InternalTopic;
use super::streams::{self, StreamsGroup};
use super::{partition_for, Coordinator, Writes};
use crate::group::records::Entry;

fn s(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

/// A streams heartbeat's outcome on the coordinator: its answer, the internal topics
/// to create, and the records to write before the answer goes.
pub struct StreamsBeat {
    pub response: StreamsGroupHeartbeatResponse,
    pub create: Vec<InternalTopic>,
    pub writes: Writes,
}

impl Coordinator {
    /// Whether `group` is a group of another type that a streams group may not take
    /// over: a classic group with members, a consumer group with members, or a share
    /// group.
    fn taken_by_other_type(&self, group: &str) -> bool {
        self.groups.borrow().get(group).is_some_and(|g| g.member_count() > 0)
            || self.consumer_groups.borrow().get(group).is_some_and(|g| !g.is_empty())
            || self.share_groups.borrow().contains_key(group)
    }

    /// Whether `group` is a streams group with members (other group types refuse it).
    pub fn streams_active(&self, group: &str) -> bool {
        self.streams_groups.borrow().get(group).is_some_and(|g| !g.is_empty())
    }

    /// StreamsGroupHeartbeat (KIP-1071).
    pub fn streams_heartbeat(
        &self,
        request: &StreamsGroupHeartbeatRequest,
        client: (&str, &str),
        image: &MetadataImage,
        now: Instant,
    ) -> StreamsBeat {
        let refuse = |(c, message): (i16, String)| StreamsBeat {
            response: StreamsGroupHeartbeatResponse::default().with_error_code(c).with_error_message(Some(s(message))),
            create: Vec::new(),
            writes: Vec::new(),
        };
        if let Err(refused) = streams::check_request(request) {
            return refuse(refused);
        }
        let id = request.group_id.0.to_string();
        if self.taken_by_other_type(&id) {
            return refuse((code::GROUP_ID_NOT_FOUND, format!("Group {id} is not a streams group.")));
        }
        let mut groups = self.streams_groups.borrow_mut();
        if !groups.contains_key(&id) && request.member_epoch != 0 {
            return refuse((code::GROUP_ID_NOT_FOUND, format!("Streams group {id} not found.")));
        }
        let settings = streams::settings(self.streams_settings.get(), image, &id);
        let group = groups.entry(id.clone()).or_insert_with(|| StreamsGroup::new(&id));
        match group.heartbeat(request, client, image, settings, now) {
            Ok(beat) => StreamsBeat { response: beat.response, create: beat.create, writes: group.changes() },
            Err(refused) => {
                if group.is_empty() && group.never_written() {
                    groups.remove(&id);
                }
                refuse(refused)
            }
        }
    }

    pub fn streams_describe(&self, group: &str) -> DescribedGroup {
        match self.streams_groups.borrow().get(group) {
            Some(g) => g.describe(),
            None => {
                let other =
                    self.groups.borrow().get(group).is_some_and(|g| g.member_count() > 0 || !g.offsets.is_empty())
                        || self.consumer_groups.borrow().contains_key(group)
                        || self.share_groups.borrow().contains_key(group);
                let message = match other {
                    true => format!("Group {group} is not a streams group."),
                    false => format!("Group {group} not found."),
                };
                DescribedGroup::default()
                    .with_group_id(GroupId(s(group)))
                    .with_group_state(s("Dead"))
                    .with_error_code(code::GROUP_ID_NOT_FOUND)
                    .with_error_message(Some(s(message)))
            }
        }
    }

    /// A streams group's records could not be written: write them whole next time.
    pub fn streams_persist_failed(&self, group: &str) {
        if let Some(g) = self.streams_groups.borrow_mut().get_mut(group) {
            g.forget_persisted();
        }
    }

    /// Runs the streams groups' timers (`StreamsGroup::tick`); returns the records to
    /// write.
    pub fn tick_streams(&self, image: &MetadataImage, now: Instant) -> Writes {
        let loaded = self.loaded.borrow();
        let mut writes = Vec::new();
        for group in self.streams_groups.borrow_mut().values_mut() {
            if !loaded.contains(&partition_for(&group.id)) {
                continue;
            }
            let settings = streams::settings(self.streams_settings.get(), image, &group.id);
            if group.tick(settings, now) {
                writes.extend(group.changes());
            }
        }
        writes
    }

    /// Deletes an empty streams group: `None` when `group` is not one, else the
    /// tombstones of its records, or NON_EMPTY_GROUP.
    pub(in crate::group) fn delete_streams(&self, group: &str) -> Option<Result<Writes, i16>> {
        let mut groups = self.streams_groups.borrow_mut();
        let g = groups.get(group)?;
        if !g.is_empty() {
            return Some(Err(code::NON_EMPTY_GROUP));
        }
        groups.remove(group);
        Some(Ok(vec![
            Entry::StreamsTopology { group: group.to_owned(), topology: None },
            Entry::StreamsGroup { group: group.to_owned(), epoch: None },
        ]))
    }

    /// Applies a streams group record replayed from the offsets topic.
    pub(in crate::group) fn replay_streams(&self, entry: Entry) {
        let mut groups = self.streams_groups.borrow_mut();
        match entry {
            Entry::StreamsGroup { group, epoch: None } => {
                groups.remove(&group);
            }
            entry => {
                let id = entry.group().to_owned();
                groups.entry(id.clone()).or_insert_with(|| StreamsGroup::new(&id)).replay(entry, Instant::now());
            }
        }
    }

    /// The streams groups of an offsets partition resume here (`StreamsGroup::loaded`).
    pub(in crate::group) fn streams_loaded(&self, partition: i32, image: &MetadataImage) {
        let now = Instant::now();
        for group in self.streams_groups.borrow_mut().values_mut() {
            if partition_for(&group.id) == partition {
                let settings = streams::settings(self.streams_settings.get(), image, &group.id);
                group.loaded(image, settings, now);
            }
        }
    }

    /// A streams group's answer to an offset commit by `member_id` in `epoch`; `None`
    /// when `group` is not a streams group.
    pub(in crate::group) fn check_streams_commit(&self, group: &str, epoch: i32, member_id: &str) -> Option<i16> {
        self.streams_groups.borrow().get(group).map(|g| g.check_commit(member_id, epoch, false))
    }
}
