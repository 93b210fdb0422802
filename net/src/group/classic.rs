//! The classic group protocol's requests on the coordinator: JoinGroup (member ids,
//! static members, the initial delay), SyncGroup (answers held until the group record
//! is written), Heartbeat and LeaveGroup. The state machine is `Group`'s.

use super::*;

impl Coordinator {
    /// Starts or continues a join. Returns the immediate answer (`Err`, errors and
    /// answers without a rebalance alike), or a receiver that gets the answer when the
    /// rebalance completes.
    #[allow(clippy::result_large_err)]
    pub fn join(&self, request: Join, now: Instant) -> Result<oneshot::Receiver<JoinGroupResponse>, JoinGroupResponse> {
        let error = |c: i16| JoinGroupResponse::default().with_error_code(c).with_generation_id(-1);
        if !(SESSION_TIMEOUT_MIN_MS..=SESSION_TIMEOUT_MAX_MS).contains(&request.session_timeout_ms) {
            return Err(error(code::INVALID_SESSION_TIMEOUT));
        }
        if request.protocols.is_empty() || request.protocol_type.is_empty() {
            return Err(error(code::INCONSISTENT_GROUP_PROTOCOL));
        }
        if self.consumer_groups.borrow().get(&request.group).is_some_and(|g| !g.is_empty())
            || self.share_groups.borrow().contains_key(&request.group)
        {
            return Err(error(code::INCONSISTENT_GROUP_PROTOCOL));
        }
        let initial_delay = self.initial_rebalance_delay.get();
        let mut groups = self.groups.borrow_mut();
        let group = groups.entry(request.group.clone()).or_insert_with(|| Group::new(&request.group));
        if let Some(existing) = &group.protocol_type {
            if !group.members.is_empty() && *existing != request.protocol_type {
                return Err(error(code::INCONSISTENT_GROUP_PROTOCOL));
            }
        }
        if !group.members.is_empty()
            && !request
                .protocols
                .iter()
                .any(|(n, _)| group.members.values().all(|m| m.protocols.iter().any(|(p, _)| p == n)))
        {
            return Err(error(code::INCONSISTENT_GROUP_PROTOCOL));
        }
        // Static members keep their member id across restarts (KIP-345).
        let static_id = request
            .instance_id
            .as_ref()
            .and_then(|i| group.members.values().find(|m| m.instance_id.as_ref() == Some(i)).map(|m| m.id.clone()));
        let mut member_id = request.member_id.clone();
        if member_id.is_empty() {
            match (&static_id, &request.instance_id) {
                (Some(id), _) => member_id = id.clone(),
                (None, Some(instance)) => member_id = format!("{instance}-{}", uuid::Uuid::new_v4()),
                (None, None) => {
                    let id = format!("{}-{}", request.client_id, uuid::Uuid::new_v4());
                    if request.require_known_member_id {
                        if group.pending.len() >= crate::limits::GROUP_PENDING_MEMBERS_MAX {
                            return Err(error(code::GROUP_MAX_SIZE_REACHED));
                        }
                        let expiry = now + Duration::from_millis(request.session_timeout_ms as u64);
                        group.pending.insert(id.clone(), expiry);
                        return Err(error(code::MEMBER_ID_REQUIRED).with_member_id(s(id)));
                    }
                    member_id = id;
                }
            }
        } else if !group.members.contains_key(&member_id) && !group.pending.contains_key(&member_id) {
            if let (Some(id), Some(_)) = (&static_id, &request.instance_id) {
                // A restarted static member presenting a stale id is fenced.
                if *id != member_id {
                    return Err(error(code::FENCED_INSTANCE_ID));
                }
            }
            return Err(error(code::UNKNOWN_MEMBER_ID));
        }
        group.pending.remove(&member_id);
        if !group.members.contains_key(&member_id) && group.members.len() >= self.max_size.get() {
            return Err(error(code::GROUP_MAX_SIZE_REACHED));
        }
        let (sender, receiver) = oneshot::channel();
        let session_timeout = Duration::from_millis(request.session_timeout_ms as u64);
        let rebalance_timeout =
            Duration::from_millis(request.rebalance_timeout_ms.max(request.session_timeout_ms) as u64);
        let known = group.members.get(&member_id).map(|m| m.protocols.clone());
        let newcomer = known.is_none();
        let unchanged = known.as_ref() == Some(&request.protocols);
        group.protocol_type = Some(request.protocol_type.clone());
        let member = group.members.entry(member_id.clone()).or_insert_with(|| Member {
            id: member_id.clone(),
            instance_id: request.instance_id.clone(),
            client_id: request.client_id.clone(),
            client_host: request.client_host.clone(),
            session_timeout,
            rebalance_timeout,
            protocols: request.protocols.clone(),
            assignment: Bytes::new(),
            last_seen: now,
            join: None,
            sync: None,
        });
        member.protocols = request.protocols;
        member.session_timeout = session_timeout;
        member.rebalance_timeout = rebalance_timeout;
        member.last_seen = now;
        // A static member that rejoins with unchanged metadata in a stable group gets
        // the current generation back without a rebalance.
        if unchanged
            && group.state == State::Stable
            && (request.instance_id.is_some() || group.leader.as_deref() != Some(member_id.as_str()))
        {
            let protocol = group.protocol.clone().unwrap_or_default();
            return Err(JoinGroupResponse::default()
                .with_generation_id(group.generation)
                .with_protocol_type(group.protocol_type.clone().map(s))
                .with_protocol_name(Some(s(protocol)))
                .with_leader(s(group.leader.clone().unwrap_or_default()))
                .with_member_id(s(member_id)));
        }
        if let Some(old) = member.join.replace(sender) {
            drop(old);
        }
        if group.state != State::PreparingRebalance {
            group.prepare_rebalance(now, initial_delay);
        } else if let (true, Some((started, bound))) = (newcomer, group.initial_join) {
            group.rebalance_deadline = Some((now + initial_delay).min(started + bound));
        }
        if group.all_joined() && group.rebalance_deadline.is_some_and(|d| d <= now || group.generation > 0) {
            group.complete_join();
        }
        Ok(receiver)
    }

    /// SyncGroup: the leader's assignments end the rebalance; followers wait for them.
    /// The answers come back as `Deliveries`, to be sent once `Writes` (the group
    /// record with the new assignments) is persisted, so that no member acts on an
    /// assignment a restarted coordinator would not know.
    pub fn sync(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        assignments: Vec<(String, Bytes)>,
        now: Instant,
    ) -> (Result<oneshot::Receiver<SyncGroupResponse>, SyncGroupResponse>, Writes, Deliveries) {
        let error = |c: i16| SyncGroupResponse::default().with_error_code(c);
        let mut groups = self.groups.borrow_mut();
        let Some(group) = groups.get_mut(group_id) else {
            return (Err(error(code::UNKNOWN_MEMBER_ID)), Vec::new(), Vec::new());
        };
        if !group.members.contains_key(member_id) {
            return (Err(error(code::UNKNOWN_MEMBER_ID)), Vec::new(), Vec::new());
        }
        if generation != group.generation {
            return (Err(error(code::ILLEGAL_GENERATION)), Vec::new(), Vec::new());
        }
        let protocol = group.protocol.clone();
        let protocol_type = group.protocol_type.clone();
        match group.state {
            State::PreparingRebalance | State::Empty => {
                (Err(error(code::REBALANCE_IN_PROGRESS)), Vec::new(), Vec::new())
            }
            State::Stable => {
                let member = &group.members[member_id];
                (
                    Err(SyncGroupResponse::default()
                        .with_assignment(member.assignment.clone())
                        .with_protocol_name(protocol.map(s))
                        .with_protocol_type(protocol_type.map(s))),
                    Vec::new(),
                    Vec::new(),
                )
            }
            State::CompletingRebalance => {
                let (sender, receiver) = oneshot::channel();
                let member = group.members.get_mut(member_id).expect("checked");
                member.last_seen = now;
                member.sync = Some(sender);
                let mut writes = Vec::new();
                let mut deliveries = Vec::new();
                if group.leader.as_deref() == Some(member_id) {
                    let assigned: HashMap<String, Bytes> = assignments.into_iter().collect();
                    group.state = State::Stable;
                    for member in group.members.values_mut() {
                        member.assignment = assigned.get(&member.id).cloned().unwrap_or_default();
                        if let Some(sync) = member.sync.take() {
                            deliveries.push((
                                sync,
                                SyncGroupResponse::default()
                                    .with_assignment(member.assignment.clone())
                                    .with_protocol_name(protocol.clone().map(s))
                                    .with_protocol_type(protocol_type.clone().map(s)),
                            ));
                        }
                    }
                    writes.push(Entry::Group { group: group.id.clone(), value: Some(group.value()) });
                }
                (Ok(receiver), writes, deliveries)
            }
        }
    }

    /// The group record of a completed sync could not be written: the group rebalances.
    pub fn sync_failed(&self, group_id: &str, now: Instant) {
        let delay = self.initial_rebalance_delay.get();
        if let Some(group) = self.groups.borrow_mut().get_mut(group_id) {
            if group.state == State::Stable {
                group.prepare_rebalance(now, delay);
            }
        }
    }

    pub fn heartbeat(&self, group_id: &str, generation: i32, member_id: &str, now: Instant) -> i16 {
        let mut groups = self.groups.borrow_mut();
        let Some(group) = groups.get_mut(group_id) else { return code::UNKNOWN_MEMBER_ID };
        let state = group.state;
        let current = group.generation;
        let Some(member) = group.members.get_mut(member_id) else { return code::UNKNOWN_MEMBER_ID };
        member.last_seen = now;
        match state {
            State::PreparingRebalance => code::REBALANCE_IN_PROGRESS,
            _ if generation != current => code::ILLEGAL_GENERATION,
            _ => code::NONE,
        }
    }

    /// Removes members; returns an error code per member (by id or instance id).
    pub fn leave(&self, group_id: &str, members: &[(String, Option<String>)], now: Instant) -> Vec<i16> {
        let delay = self.initial_rebalance_delay.get();
        let mut groups = self.groups.borrow_mut();
        let Some(group) = groups.get_mut(group_id) else { return vec![code::UNKNOWN_MEMBER_ID; members.len()] };
        members
            .iter()
            .map(|(id, instance)| {
                let found = if id.is_empty() {
                    instance.as_ref().and_then(|i| {
                        group.members.values().find(|m| m.instance_id.as_ref() == Some(i)).map(|m| m.id.clone())
                    })
                } else {
                    group.members.contains_key(id).then(|| id.clone())
                };
                match found {
                    Some(id) => {
                        group.remove_member(&id, now, delay);
                        code::NONE
                    }
                    None => code::UNKNOWN_MEMBER_ID,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Group partitions match Kafka's `abs(hashCode) % 50`.
    #[test]
    fn partitions_match_kafka() {
        // Values computed with Java: Math.abs("...".hashCode()) % 50 (& 0x7fffffff).
        assert_eq!(partition_for(""), 0);
        assert_eq!(partition_for("a"), 97 % 50);
        assert_eq!(
            partition_for("group"),
            ("group".chars().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32)) & 0x7fffffff) % 50
        );
    }

    #[allow(clippy::result_large_err)]
    fn join(
        c: &Coordinator,
        member: &str,
        now: Instant,
    ) -> Result<oneshot::Receiver<JoinGroupResponse>, JoinGroupResponse> {
        c.join(
            Join {
                group: "g".into(),
                member_id: member.into(),
                instance_id: None,
                client_id: "c".into(),
                client_host: "h".into(),
                session_timeout_ms: 10_000,
                rebalance_timeout_ms: 10_000,
                protocol_type: "consumer".into(),
                protocols: vec![("range".into(), Bytes::from_static(b"md"))],
                require_known_member_id: true,
            },
            now,
        )
    }

    // Two members join, the leader syncs, both get assignments; a missed session
    // expires a member and the group rebalances.
    #[test]
    fn join_sync_expire() {
        let c = Coordinator::default();
        c.initial_rebalance_delay.set(Duration::from_millis(5));
        let now = Instant::now();
        let first = join(&c, "", now).unwrap_err();
        assert_eq!(first.error_code, code::MEMBER_ID_REQUIRED);
        let a = first.member_id.to_string();
        let mut rx_a = join(&c, &a, now).unwrap();
        let b = join(&c, "", now).unwrap_err().member_id.to_string();
        let mut rx_b = join(&c, &b, now).unwrap();
        // Both joined within the initial delay; it passes on the next tick.
        c.tick(now + Duration::from_millis(10));
        let ra = rx_a.try_recv().unwrap().unwrap();
        let rb = rx_b.try_recv().unwrap().unwrap();
        assert_eq!(ra.generation_id, 1);
        assert_eq!(ra.leader, rb.leader);
        let leader = ra.leader.to_string();
        let follower = if leader == a { b.clone() } else { a.clone() };
        let (follower_sync, _, none) = c.sync("g", 1, &follower, vec![], now);
        assert!(none.is_empty());
        let mut follower_sync = follower_sync.unwrap();
        let (leader_sync, writes, deliveries) = c.sync(
            "g",
            1,
            &leader,
            vec![(follower.clone(), Bytes::from_static(b"f")), (leader.clone(), Bytes::from_static(b"l"))],
            now,
        );
        assert_eq!(writes.len(), 1);
        // Nobody is answered before the group record is written.
        assert!(follower_sync.try_recv().unwrap().is_none());
        for (sender, response) in deliveries {
            let _ = sender.send(response);
        }
        assert_eq!(leader_sync.unwrap().try_recv().unwrap().unwrap().assignment, Bytes::from_static(b"l"));
        assert_eq!(follower_sync.try_recv().unwrap().unwrap().assignment, Bytes::from_static(b"f"));
        assert_eq!(c.heartbeat("g", 1, &leader, now), code::NONE);
        assert_eq!(c.heartbeat("g", 0, &leader, now), code::ILLEGAL_GENERATION);
        assert_eq!(c.heartbeat("g", 1, "nobody", now), code::UNKNOWN_MEMBER_ID);
        // The follower stops heartbeating: after its session it is removed.
        let later = now + Duration::from_secs(11);
        assert_eq!(c.heartbeat("g", 1, &leader, later - Duration::from_secs(1)), code::NONE);
        c.tick(later);
        assert_eq!(c.heartbeat("g", 1, &leader, later), code::REBALANCE_IN_PROGRESS);
        assert_eq!(c.describe("g").members.len(), 1);
        // Preparing a rebalance: the current generation may still commit, as in Kafka.
        assert_eq!(c.check_commit("g", 1, &leader), code::NONE);
        assert_eq!(c.check_commit("g", 0, &leader), code::ILLEGAL_GENERATION);
        // The leader rejoins: the join completes and, until the leader syncs, commits
        // are refused.
        let _rejoin = join(&c, &leader, later).unwrap();
        assert_eq!(c.check_commit("g", 2, &leader), code::REBALANCE_IN_PROGRESS);
        assert_eq!(c.check_commit("g", 1, &leader), code::REBALANCE_IN_PROGRESS);
    }

    // Member ids handed out with MEMBER_ID_REQUIRED expire when their holder never
    // joins; an empty group without offsets is then removed, with a tombstone.
    #[test]
    fn pending_members_expire_and_empty_groups_go() {
        let c = Coordinator::default();
        let now = Instant::now();
        let pending = join(&c, "", now).unwrap_err().member_id.to_string();
        let writes = c.tick(now + Duration::from_secs(1));
        assert!(writes.is_empty(), "a pending member keeps the group: {writes:?}");
        let later = now + Duration::from_secs(11);
        let writes = c.tick(later);
        assert_eq!(writes, vec![Entry::Group { group: "g".into(), value: None }]);
        assert_eq!(c.describe("g").group_state.as_str(), "Dead");
        assert_eq!(join(&c, &pending, later).unwrap_err().error_code, code::UNKNOWN_MEMBER_ID);
    }

    // A group whose last member leaves writes its (empty) record on the next tick,
    // and keeps its committed offsets until they expire.
    #[test]
    fn emptied_group_record_is_written() {
        let c = Coordinator::default();
        c.initial_rebalance_delay.set(Duration::ZERO);
        let now = Instant::now();
        let a = join(&c, "", now).unwrap_err().member_id.to_string();
        let _rx = join(&c, &a, now).unwrap();
        c.tick(now);
        c.commit("g", vec![("t".into(), 0, Committed { offset: 5, leader_epoch: 0, metadata: String::new() })]);
        assert_eq!(c.leave("g", &[(a.clone(), None)], now), vec![code::NONE]);
        let writes = c.tick(now + Duration::from_millis(1));
        match writes.as_slice() {
            [Entry::Group { value: Some(v), .. }] => assert!(v.members.is_empty()),
            other => panic!("{other:?}"),
        }
        assert_eq!(c.describe("g").group_state.as_str(), "Empty");
    }

    // Members that join an empty group one after another within the initial delay of
    // each other land in one generation: each newcomer extends the delay, up to the
    // rebalance timeout (Kafka's InitialDelayedJoin).
    #[test]
    fn initial_delay_extends_for_newcomers() {
        let c = Coordinator::default();
        c.initial_rebalance_delay.set(Duration::from_millis(300));
        let now = Instant::now();
        let a = join(&c, "", now).unwrap_err().member_id.to_string();
        let mut rx_a = join(&c, &a, now).unwrap();
        let later = now + Duration::from_millis(250);
        let b = join(&c, "", later).unwrap_err().member_id.to_string();
        let mut rx_b = join(&c, &b, later).unwrap();
        c.tick(now + Duration::from_millis(350));
        assert!(rx_a.try_recv().unwrap().is_none(), "the newcomer extended the delay");
        c.tick(later + Duration::from_millis(310));
        let (ra, rb) = (rx_a.try_recv().unwrap().unwrap(), rx_b.try_recv().unwrap().unwrap());
        assert_eq!((ra.generation_id, rb.generation_id), (1, 1));
        assert_eq!(ra.members.len() + rb.members.len(), 2, "the leader sees both members");
    }
}
