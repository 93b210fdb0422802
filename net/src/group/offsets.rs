//! Committed offsets of both protocols: Kafka's commit rules, OffsetFetch and
//! OffsetDelete, and the record an offset is persisted as.

use super::*;

impl Coordinator {
    /// Validates an offset commit. Simple commits (generation -1, no member) are
    /// accepted for groups without members, as assign-mode consumers make them.
    pub fn check_commit(&self, group_id: &str, generation: i32, member_id: &str) -> i16 {
        if let Some(group) = self.consumer_groups.borrow().get(group_id).filter(|g| !g.is_empty()) {
            if !member_id.is_empty() {
                return group.check_commit(member_id, generation);
            }
            return code::UNKNOWN_MEMBER_ID;
        }
        let groups = self.groups.borrow();
        let Some(group) = groups.get(group_id) else {
            return if generation < 0 { code::NONE } else { code::ILLEGAL_GENERATION };
        };
        if generation < 0 && member_id.is_empty() {
            return if group.members.is_empty() { code::NONE } else { code::UNKNOWN_MEMBER_ID };
        }
        // Kafka's classic-group rule: while assignments are being handed out nobody may
        // commit; while the group prepares a rebalance, members of the current
        // generation still may (a consumer commits in its revoke callback then).
        if group.state == State::CompletingRebalance {
            return code::REBALANCE_IN_PROGRESS;
        }
        if !group.members.contains_key(member_id) {
            return code::UNKNOWN_MEMBER_ID;
        }
        if generation != group.generation {
            return code::ILLEGAL_GENERATION;
        }
        code::NONE
    }

    /// Records committed offsets (after they were persisted).
    pub fn commit(&self, group_id: &str, offsets: Vec<(String, i32, Committed)>) {
        let mut groups = self.groups.borrow_mut();
        let group = groups.entry(group_id.to_owned()).or_insert_with(|| Group::new(group_id));
        for (topic, partition, committed) in offsets {
            group.offsets.insert((topic, partition), committed);
        }
    }

    /// Committed offsets of a group: all, or those asked for (`None` when absent).
    pub fn fetch(&self, group_id: &str, wanted: Option<Vec<(String, i32)>>) -> Vec<(String, i32, Option<Committed>)> {
        let groups = self.groups.borrow();
        let group = groups.get(group_id);
        match wanted {
            Some(list) => list
                .into_iter()
                .map(|(t, p)| {
                    let c = group.and_then(|g| g.offsets.get(&(t.clone(), p)).cloned());
                    (t, p, c)
                })
                .collect(),
            None => group
                .map(|g| g.offsets.iter().map(|((t, p), c)| (t.clone(), *p, Some(c.clone()))).collect())
                .unwrap_or_default(),
        }
    }

    /// Deletes committed offsets of a group that has no members.
    pub fn delete_offsets(&self, group_id: &str, partitions: &[(String, i32)]) -> Result<Writes, i16> {
        let mut groups = self.groups.borrow_mut();
        let Some(group) = groups.get_mut(group_id) else { return Err(code::GROUP_ID_NOT_FOUND) };
        if !group.members.is_empty() {
            return Err(code::GROUP_SUBSCRIBED_TO_TOPIC);
        }
        let mut writes = Vec::new();
        for (t, p) in partitions {
            if group.offsets.remove(&(t.clone(), *p)).is_some() {
                writes.push(Entry::Offset { group: group_id.to_owned(), topic: t.clone(), partition: *p, value: None });
            }
        }
        Ok(writes)
    }
}

/// An offset-commit record for persistence.
pub fn offset_entry(group: &str, topic: &str, partition: i32, committed: &Committed) -> Entry {
    Entry::Offset {
        group: group.to_owned(),
        topic: topic.to_owned(),
        partition,
        value: Some(OffsetValue {
            offset: committed.offset,
            leader_epoch: committed.leader_epoch,
            metadata: committed.metadata.clone(),
            commit_timestamp: crate::shard::now_ms(),
        }),
    }
}
