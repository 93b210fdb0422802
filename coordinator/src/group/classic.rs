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
            || self.streams_active(&request.group)
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
        // A static member (KIP-345) that joins without a member id takes its
        // instance over under a new id, fencing the id it held.
        let static_id = request.instance_id.as_deref().and_then(|i| group.static_member(i)).map(str::to_owned);
        let mut member_id = request.member_id.clone();
        // The leader before a static member replaced itself.
        let mut replaced = None;
        if member_id.is_empty() {
            match (&static_id, &request.instance_id) {
                (Some(old), Some(instance)) => {
                    member_id = format!("{instance}-{}", uuid::Uuid::new_v4());
                    replaced = Some(group.leader.clone().unwrap_or_default());
                    group.replace_static_member(old, &member_id);
                }
                (None, Some(instance)) => member_id = format!("{instance}-{}", uuid::Uuid::new_v4()),
                (_, None) => {
                    let id = format!("{}-{}", request.client_id, uuid::Uuid::new_v4());
                    if request.require_known_member_id {
                        if group.pending.len() >= skein_control::limits::GROUP_PENDING_MEMBERS_MAX {
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
        // A static member that replaced itself in a stable group, without changing
        // the protocol the group would select, gets the current generation and keeps
        // its assignment. From v9 a leader gets the members and SkipAssignment; before
        // v9 it is named a follower (the leader the group had), as on Kafka.
        if let Some(leader_before) = replaced {
            if group.state == State::Stable && group.select_protocol() == group.protocol {
                let protocol = group.protocol.clone().unwrap_or_default();
                let response = JoinGroupResponse::default()
                    .with_generation_id(group.generation)
                    .with_protocol_type(group.protocol_type.clone().map(s))
                    .with_protocol_name(Some(s(protocol)))
                    .with_member_id(s(member_id.clone()));
                let leads = group.leader.as_deref() == Some(member_id.as_str());
                return Err(match request.skip_assignment_supported {
                    true => response
                        .with_leader(s(group.leader.clone().unwrap_or_default()))
                        .with_members(if leads { group.join_members() } else { Vec::new() })
                        .with_skip_assignment(leads),
                    false => response.with_leader(s(leader_before)),
                });
            }
        }
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
        if let Some(old) = group.members.get_mut(&member_id).and_then(|m| m.join.replace(sender)) {
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
        (member_id, instance): (&str, Option<&str>),
        assignments: Vec<(String, Bytes)>,
        now: Instant,
    ) -> (Result<oneshot::Receiver<SyncGroupResponse>, SyncGroupResponse>, Writes, Deliveries) {
        let error = |c: i16| SyncGroupResponse::default().with_error_code(c);
        let mut groups = self.groups.borrow_mut();
        let Some(group) = groups.get_mut(group_id) else {
            return (Err(error(code::UNKNOWN_MEMBER_ID)), Vec::new(), Vec::new());
        };
        let member = group.validate_member(member_id, instance);
        if member != code::NONE {
            return (Err(error(member)), Vec::new(), Vec::new());
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

    pub fn heartbeat(
        &self,
        group_id: &str,
        generation: i32,
        (member_id, instance): (&str, Option<&str>),
        now: Instant,
    ) -> i16 {
        let mut groups = self.groups.borrow_mut();
        let Some(group) = groups.get_mut(group_id) else { return code::UNKNOWN_MEMBER_ID };
        let member = group.validate_member(member_id, instance);
        if member != code::NONE {
            return member;
        }
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

    /// Removes members; returns an error code per member (by id or instance id; a
    /// member id that is not the one its instance holds now: FENCED_INSTANCE_ID).
    pub fn leave(&self, group_id: &str, members: &[(String, Option<String>)], now: Instant) -> Vec<i16> {
        let delay = self.initial_rebalance_delay.get();
        let mut groups = self.groups.borrow_mut();
        let Some(group) = groups.get_mut(group_id) else { return vec![code::UNKNOWN_MEMBER_ID; members.len()] };
        members
            .iter()
            .map(|(id, instance)| {
                let found = match instance {
                    Some(i) => group.static_member(i).map(str::to_owned),
                    None => group.members.contains_key(id).then(|| id.clone()),
                };
                match found {
                    Some(held) if !id.is_empty() && held != *id => code::FENCED_INSTANCE_ID,
                    Some(held) => {
                        group.remove_member(&held, now, delay);
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

    /// A JoinGroup of group `g` by `member`, static with `instance`, at `version`.
    fn join_request(member: &str, instance: Option<&str>, version: i16) -> Join {
        Join {
            group: "g".into(),
            member_id: member.into(),
            instance_id: instance.map(str::to_owned),
            client_id: "c".into(),
            client_host: "h".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from_static(b"md"))],
            require_known_member_id: version >= 4,
            skip_assignment_supported: version >= 9,
        }
    }

    #[allow(clippy::result_large_err)]
    fn join(
        c: &Coordinator,
        member: &str,
        now: Instant,
    ) -> Result<oneshot::Receiver<JoinGroupResponse>, JoinGroupResponse> {
        c.join(join_request(member, None, 9), now)
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
        let (follower_sync, _, none) = c.sync("g", 1, (&follower, None), vec![], now);
        assert!(none.is_empty());
        let mut follower_sync = follower_sync.unwrap();
        let (leader_sync, writes, deliveries) = c.sync(
            "g",
            1,
            (&leader, None),
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
        assert_eq!(c.heartbeat("g", 1, (&leader, None), now), code::NONE);
        assert_eq!(c.heartbeat("g", 0, (&leader, None), now), code::ILLEGAL_GENERATION);
        assert_eq!(c.heartbeat("g", 1, ("nobody", None), now), code::UNKNOWN_MEMBER_ID);
        // The follower stops heartbeating: after its session it is removed.
        let later = now + Duration::from_secs(11);
        assert_eq!(c.heartbeat("g", 1, (&leader, None), later - Duration::from_secs(1)), code::NONE);
        c.tick(later);
        assert_eq!(c.heartbeat("g", 1, (&leader, None), later), code::REBALANCE_IN_PROGRESS);
        assert_eq!(c.describe("g").members.len(), 1);
        // Preparing a rebalance: the current generation may still commit, as in Kafka.
        assert_eq!(c.check_commit("g", 1, (&leader, None)), code::NONE);
        assert_eq!(c.check_commit("g", 0, (&leader, None)), code::ILLEGAL_GENERATION);
        // The leader rejoins: the join completes and, until the leader syncs, commits
        // are refused.
        let _rejoin = join(&c, &leader, later).unwrap();
        assert_eq!(c.check_commit("g", 2, (&leader, None)), code::REBALANCE_IN_PROGRESS);
        assert_eq!(c.check_commit("g", 1, (&leader, None)), code::REBALANCE_IN_PROGRESS);
    }

    // A second process joining with a static member's `group.instance.id` and no
    // member id takes the instance over under a new id, in the same generation and
    // with the same assignment; the first is fenced from then on, as on Kafka (a
    // librdkafka consumer had got the same id, and both heartbeated on).
    #[test]
    fn a_second_static_member_fences_the_first() {
        let c = Coordinator::default();
        c.initial_rebalance_delay.set(Duration::ZERO);
        let now = Instant::now();
        #[allow(clippy::result_large_err)]
        let join_static = |member: &str, version: i16| c.join(join_request(member, Some("i1"), version), now);
        let mut first = join_static("", 9).unwrap();
        c.tick(now);
        let first = first.try_recv().unwrap().unwrap();
        let old = first.member_id.to_string();
        assert_eq!((first.generation_id, first.leader.as_str()), (1, old.as_str()));
        let (sync, _, deliveries) =
            c.sync("g", 1, (&old, Some("i1")), vec![(old.clone(), Bytes::from_static(b"a"))], now);
        for (sender, response) in deliveries {
            let _ = sender.send(response);
        }
        assert_eq!(sync.unwrap().try_recv().unwrap().unwrap().assignment, Bytes::from_static(b"a"));

        let second = join_static("", 9).unwrap_err();
        let new = second.member_id.to_string();
        assert_eq!(second.error_code, code::NONE);
        assert_ne!(new, old, "the newcomer gets a new member id");
        assert!(new.starts_with("i1-"));
        assert_eq!(second.generation_id, 1, "no rebalance for an unchanged static member");
        assert_eq!(second.leader.as_str(), new, "it leads in the old id's place");
        assert!(second.skip_assignment);
        assert_eq!(second.members.len(), 1);

        assert_eq!(c.heartbeat("g", 1, (&old, Some("i1")), now), code::FENCED_INSTANCE_ID);
        assert_eq!(c.heartbeat("g", 1, (&old, None), now), code::UNKNOWN_MEMBER_ID);
        assert_eq!(c.heartbeat("g", 1, (&new, Some("i1")), now), code::NONE);
        assert_eq!(c.heartbeat("g", 1, (&new, Some("i2")), now), code::UNKNOWN_MEMBER_ID);
        assert_eq!(c.check_commit("g", 1, (&old, Some("i1"))), code::FENCED_INSTANCE_ID);
        assert_eq!(c.check_commit("g", 1, (&new, Some("i1"))), code::NONE);
        let (stale_sync, _, _) = c.sync("g", 1, (&old, Some("i1")), vec![], now);
        assert_eq!(stale_sync.unwrap_err().error_code, code::FENCED_INSTANCE_ID);
        let (sync, _, _) = c.sync("g", 1, (&new, Some("i1")), vec![], now);
        assert_eq!(sync.unwrap_err().assignment, Bytes::from_static(b"a"), "the assignment is kept");
        assert_eq!(join_static(&old, 9).unwrap_err().error_code, code::FENCED_INSTANCE_ID);
        // Before v9 a replacing leader is named a follower, to keep the assignment.
        let third = join_static("", 5).unwrap_err();
        assert_eq!((third.generation_id, third.leader.as_str(), third.members.len()), (1, new.as_str(), 0));
        assert!(!third.skip_assignment);
        assert_eq!(c.heartbeat("g", 1, (&new, Some("i1")), now), code::FENCED_INSTANCE_ID);
        let new = third.member_id.to_string();
        assert_eq!(c.leave("g", &[(old.clone(), Some("i1".into()))], now), vec![code::FENCED_INSTANCE_ID]);
        // The renamed member's record is there to write before the answer goes.
        match c.stale_record("g").as_slice() {
            [Entry::Group { value: Some(v), .. }] => {
                assert_eq!(v.members.iter().map(|m| m.member_id.as_str()).collect::<Vec<_>>(), vec![new.as_str()])
            }
            other => panic!("{other:?}"),
        }
        assert!(c.stale_record("g").is_empty(), "taken once");
        assert!(c.tick(now + Duration::from_millis(1)).is_empty(), "nothing left for the tick");
        assert_eq!(c.leave("g", &[(new.clone(), Some("i1".into()))], now), vec![code::NONE]);
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
