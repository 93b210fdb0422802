//! Committed offsets of both protocols: Kafka's commit rules, OffsetFetch and
//! OffsetDelete, and the record an offset is persisted as.

use super::*;

impl Coordinator {
    /// Validates an offset commit. Simple commits (generation -1, no member) are
    /// accepted for groups without members, as assign-mode consumers make them.
    pub fn check_commit(&self, group_id: &str, generation: i32, (member_id, instance): (&str, Option<&str>)) -> i16 {
        if let Some(verdict) = self.check_streams_commit(group_id, generation, member_id) {
            return verdict;
        }
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
        if generation < 0 && member_id.is_empty() && instance.is_none() {
            return if group.members.is_empty() { code::NONE } else { code::UNKNOWN_MEMBER_ID };
        }
        // Kafka's classic-group rule: while assignments are being handed out nobody may
        // commit; while the group prepares a rebalance, members of the current
        // generation still may (a consumer commits in its revoke callback then).
        if group.state == State::CompletingRebalance {
            return code::REBALANCE_IN_PROGRESS;
        }
        let member = group.validate_member(member_id, instance);
        if member != code::NONE {
            return member;
        }
        if generation != group.generation {
            return code::ILLEGAL_GENERATION;
        }
        code::NONE
    }

    /// OffsetFetch v9+'s member check, as Kafka's `validateOffsetFetch`: in a consumer
    /// group a named member (or any epoch) must exist and be at that epoch
    /// (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH); in a streams group too once a member or
    /// an epoch is named. Classic groups and a caller naming no member pass.
    pub fn check_fetch(&self, group_id: &str, member: Option<&str>, epoch: i32) -> i16 {
        let known = |current: Option<i32>| match current {
            None => code::UNKNOWN_MEMBER_ID,
            Some(current) if current != epoch => super::consumer::STALE_MEMBER_EPOCH,
            Some(_) => code::NONE,
        };
        if let Some(group) = self.consumer_groups.borrow().get(group_id) {
            if member.is_none() && epoch < 0 {
                return code::NONE;
            }
            return known(member.and_then(|m| group.has_member(m)));
        }
        if let Some(group) = self.streams_groups.borrow().get(group_id) {
            if member.is_none() && epoch < 0 {
                return code::NONE;
            }
            return known(member.and_then(|m| group.member_epoch(m)));
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

    /// Every group's committed offsets on the offsets partitions loaded here (not
    /// those of open transactions), for the consumer lag (`lag`). Costs a copy of
    /// each committed (topic, partition).
    pub fn committed_offsets(&self) -> BTreeMap<String, lag::GroupOffsets> {
        let loaded = self.loaded.borrow();
        self.groups
            .borrow()
            .values()
            .filter(|g| !g.offsets.is_empty() && loaded.contains(&partition_for(&g.id)))
            .map(|g| {
                let offsets = g
                    .offsets
                    .iter()
                    .filter(|(_, c)| c.offset >= 0)
                    .map(|((t, p), c)| ((t.clone(), *p), c.offset))
                    .collect();
                (g.id.clone(), offsets)
            })
            .collect()
    }

    /// Committed offsets of a group: all, or those asked for (`None` when absent).
    /// With `require_stable`, a partition with offsets of an open transaction answers
    /// UNSTABLE_OFFSET_COMMIT (the client retries), as Kafka.
    pub fn fetch(
        &self,
        group_id: &str,
        wanted: Option<Vec<(String, i32)>>,
        require_stable: bool,
    ) -> Vec<PartitionOffset> {
        let groups = self.groups.borrow();
        let group = groups.get(group_id);
        let answer = |t: String, p: i32| {
            let pending = group.is_some_and(|g| g.pending_txn.values().any(|o| o.contains_key(&(t.clone(), p))));
            if require_stable && pending {
                return PartitionOffset {
                    topic: t,
                    partition: p,
                    committed: None,
                    error: code::UNSTABLE_OFFSET_COMMIT,
                };
            }
            let committed = group.and_then(|g| g.offsets.get(&(t.clone(), p)).cloned());
            PartitionOffset { topic: t, partition: p, committed, error: code::NONE }
        };
        match wanted {
            Some(list) => list.into_iter().map(|(t, p)| answer(t, p)).collect(),
            None => group.map(|g| g.offsets.keys().map(|(t, p)| answer(t.clone(), *p)).collect()).unwrap_or_default(),
        }
    }

    /// Records offsets of `producer_id`'s open transaction (after they were
    /// persisted): visible once its COMMIT marker arrives.
    pub fn commit_pending(&self, group_id: &str, producer_id: i64, offsets: Vec<(String, i32, Committed)>) {
        let mut groups = self.groups.borrow_mut();
        let group = groups.entry(group_id.to_owned()).or_insert_with(|| Group::new(group_id));
        let pending = group.pending_txn.entry(producer_id).or_default();
        for (topic, partition, committed) in offsets {
            pending.insert((topic, partition), committed);
        }
    }

    /// A transactional offset commit replayed from the log.
    pub fn replay_pending(&self, producer_id: i64, entry: Entry) {
        if let Entry::Offset { group, topic, partition, value: Some(v) } = entry {
            let committed = Committed { offset: v.offset, leader_epoch: v.leader_epoch, metadata: v.metadata };
            self.commit_pending(&group, producer_id, vec![(topic, partition, committed)]);
        }
    }

    /// A marker of `producer_id` reached offsets partition `partition`: its pending
    /// offsets there become committed (COMMIT) or are dropped (ABORT).
    pub fn complete_txn(&self, partition: i32, producer_id: i64, commit: bool) {
        let mut groups = self.groups.borrow_mut();
        for group in groups.values_mut().filter(|g| super::partition_for(&g.id) == partition) {
            if let Some(pending) = group.pending_txn.remove(&producer_id) {
                if commit {
                    group.offsets.extend(pending);
                }
            }
        }
    }

    /// OffsetDelete (KIP-496), by Kafka's rules: the offsets of topics the group is
    /// not subscribed to go (with tombstones); each partition of a subscribed topic
    /// answers GROUP_SUBSCRIBED_TO_TOPIC. A classic group of another protocol type
    /// than `consumer` must be empty (NON_EMPTY_GROUP); an unknown group is
    /// GROUP_ID_NOT_FOUND. Returns a code per partition, in order.
    pub fn delete_offsets(&self, group_id: &str, partitions: &[(String, i32)]) -> Result<(Vec<i16>, Writes), i16> {
        if let Some(g) = self.streams_groups.borrow().get(group_id) {
            let mut groups = self.groups.borrow_mut();
            let Some(group) = groups.get_mut(group_id) else { return Err(code::GROUP_ID_NOT_FOUND) };
            let mut codes = Vec::with_capacity(partitions.len());
            let mut writes = Vec::new();
            for (t, p) in partitions {
                let subscribed = g.subscribes(t);
                codes.push(subscribed_code(subscribed));
                if !subscribed && group.offsets.remove(&(t.clone(), *p)).is_some() {
                    writes.push(Entry::Offset {
                        group: group_id.to_owned(),
                        topic: t.clone(),
                        partition: *p,
                        value: None,
                    });
                }
            }
            return Ok((codes, writes));
        }
        let consumers = self.consumer_groups.borrow();
        let consumer = consumers.get(group_id).filter(|g| !g.is_empty());
        let mut groups = self.groups.borrow_mut();
        let Some(group) = groups.get_mut(group_id) else {
            return match consumer {
                Some(g) => Ok((partitions.iter().map(|(t, _)| subscribed_code(g.subscribes(t))).collect(), Vec::new())),
                None => Err(code::GROUP_ID_NOT_FOUND),
            };
        };
        let classic = match consumer {
            Some(_) => None,
            None => Some(group.subscribed_topics()?),
        };
        let mut codes = Vec::with_capacity(partitions.len());
        let mut writes = Vec::new();
        for (t, p) in partitions {
            let subscribed = match (&classic, consumer) {
                (Some(topics), _) => topics.as_ref().is_none_or(|topics| topics.contains(t)),
                (None, Some(g)) => g.subscribes(t),
                (None, None) => false,
            };
            codes.push(subscribed_code(subscribed));
            let pending = group.pending_txn.values().any(|o| o.contains_key(&(t.clone(), *p)));
            if !subscribed && (group.offsets.remove(&(t.clone(), *p)).is_some() || pending) {
                writes.push(Entry::Offset { group: group_id.to_owned(), topic: t.clone(), partition: *p, value: None });
            }
        }
        Ok((codes, writes))
    }
}

fn subscribed_code(subscribed: bool) -> i16 {
    if subscribed {
        code::GROUP_SUBSCRIBED_TO_TOPIC
    } else {
        code::NONE
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
            commit_timestamp: skein_engine::time::now_ms(),
        }),
    }
}
