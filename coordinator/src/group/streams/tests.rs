use std::time::{Duration, Instant};

use kafka_protocol::messages::streams_group_heartbeat_request::{Subtopology, TaskIds, TopicInfo};
use kafka_protocol::messages::{GroupId, TopicName};
use skein_control::metadata::{MetadataImage, TopicMeta};

use super::*;
use crate::group::records::Entry;

/// Kafka's defaults without the initial delay and the assignment interval.
fn undelayed() -> StreamsSettings {
    StreamsSettings {
        initial_rebalance_delay: Duration::ZERO,
        assignment_interval: Duration::ZERO,
        ..Default::default()
    }
}

fn topic(name: &str) -> TopicName {
    TopicName(s(name))
}

/// One subtopology reading `input` and keeping a store.
fn topology() -> Topology {
    Topology::default().with_epoch(0).with_subtopologies(vec![Subtopology::default()
        .with_subtopology_id(s("0"))
        .with_source_topics(vec![topic("input")])
        .with_state_changelog_topics(vec![TopicInfo::default().with_name(topic("app-store-changelog"))])])
}

fn image(topics: &[(&str, i32)]) -> MetadataImage {
    let mut image = MetadataImage::default();
    for (name, partitions) in topics {
        let meta = TopicMeta {
            name: name.to_string(),
            id: uuid::Uuid::new_v4(),
            partitions: *partitions,
            configs: Default::default(),
            shards: vec![0; *partitions as usize],
            assignments: Vec::new(),
        };
        image.topics.insert(name.to_string(), meta);
    }
    image
}

fn join(member: &str, process: &str) -> StreamsGroupHeartbeatRequest {
    StreamsGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("app")))
        .with_member_id(s(member))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_process_id(Some(s(process)))
        .with_topology(Some(topology()))
        .with_active_tasks(Some(Vec::new()))
        .with_standby_tasks(Some(Vec::new()))
        .with_warmup_tasks(Some(Vec::new()))
}

fn beat(member: &str, epoch: i32, active: &[i32]) -> StreamsGroupHeartbeatRequest {
    StreamsGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("app")))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
        .with_active_tasks(Some(vec![TaskIds::default().with_subtopology_id(s("0")).with_partitions(active.to_vec())]))
        .with_standby_tasks(Some(Vec::new()))
        .with_warmup_tasks(Some(Vec::new()))
}

fn active(response: &StreamsGroupHeartbeatResponse) -> Option<Vec<i32>> {
    response.active_tasks.as_ref().map(|t| t.iter().flat_map(|t| t.partitions.clone()).collect())
}

fn statuses(response: &StreamsGroupHeartbeatResponse) -> Vec<i8> {
    response.status.iter().flatten().map(|s| s.status_code).collect()
}

#[test]
fn waits_for_topics_then_splits_tasks_with_revocation_first() {
    let settings = undelayed();
    let now = Instant::now();
    let mut group = StreamsGroup::new("app");
    let client = ("c", "/127.0.0.1");

    // No input topic: the member is told, and gets no tasks.
    let none = image(&[]);
    let first = group.heartbeat(&join("a", "p1"), client, &none, settings, now).unwrap();
    assert_eq!(statuses(&first.response), vec![topology::MISSING_SOURCE_TOPICS]);
    assert_eq!(active(&first.response), Some(vec![]));
    assert_eq!(group.state(), "NotReady");
    // Its records: the topology, the member's metadata and tasks, then the epoch.
    let records = group.changes();
    assert!(matches!(
        records.as_slice(),
        [
            Entry::StreamsTopology { .. },
            Entry::StreamsMember { .. },
            Entry::StreamsAssignment { .. },
            Entry::StreamsGroup { epoch: Some(1), .. }
        ]
    ));

    // The input exists: the changelog must be created, with its task count.
    let input_only = image(&[("input", 4)]);
    let second = group.heartbeat(&beat("a", 1, &[]), client, &input_only, settings, now).unwrap();
    assert_eq!(statuses(&second.response), vec![topology::MISSING_INTERNAL_TOPICS]);
    assert_eq!(
        second.create.iter().map(|t| (t.name.as_str(), t.partitions)).collect::<Vec<_>>(),
        [("app-store-changelog", 4)]
    );

    // Everything exists: all four tasks to the one member, at a new epoch.
    let all = image(&[("input", 4), ("app-store-changelog", 4)]);
    let third = group.heartbeat(&beat("a", 1, &[]), client, &all, settings, now).unwrap();
    assert!(statuses(&third.response).is_empty());
    assert_eq!(active(&third.response), Some(vec![0, 1, 2, 3]));
    let epoch_a = third.response.member_epoch;
    assert_eq!(group.state(), "Stable");

    // A second member: it gets nothing until `a` gives two tasks up.
    let b = group.heartbeat(&join("b", "p2"), client, &all, settings, now).unwrap();
    assert_eq!(active(&b.response), Some(vec![]));
    let revoke = group.heartbeat(&beat("a", epoch_a, &[0, 1, 2, 3]), client, &all, settings, now).unwrap();
    let kept = active(&revoke.response).unwrap();
    assert_eq!(kept.len(), 2);
    assert_eq!(revoke.response.member_epoch, epoch_a, "the epoch stays while revoking");
    let still = group.heartbeat(&beat("b", b.response.member_epoch, &[]), client, &all, settings, now).unwrap();
    assert_eq!(active(&still.response), None, "nothing new while a still holds the tasks");
    let released = group.heartbeat(&beat("a", epoch_a, &kept), client, &all, settings, now).unwrap();
    assert!(released.response.member_epoch > epoch_a);
    let given = group.heartbeat(&beat("b", b.response.member_epoch, &[]), client, &all, settings, now).unwrap();
    let mut got = active(&given.response).unwrap();
    got.extend(&kept);
    got.sort();
    assert_eq!(got, vec![0, 1, 2, 3]);
    assert_eq!(group.state(), "Stable");

    // Commits: the member's epoch, the one before, not a newer one.
    let epoch_b = given.response.member_epoch;
    assert_eq!(group.check_commit("b", epoch_b, false), code::NONE);
    assert_eq!(group.check_commit("b", epoch_b + 1, false), STALE_MEMBER_EPOCH);
    assert_eq!(group.check_commit("x", epoch_b, false), code::UNKNOWN_MEMBER_ID);

    // `b` leaves: `a` gets everything back.
    group.heartbeat(&beat("b", LEAVE_EPOCH, &[]), client, &all, settings, now).unwrap();
    let back = group.heartbeat(&beat("a", released.response.member_epoch, &kept), client, &all, settings, now).unwrap();
    assert_eq!(active(&back.response), Some(vec![0, 1, 2, 3]));

    // And a member that stops heartbeating is fenced after its session.
    assert!(group.tick(settings, now + settings.session_timeout + Duration::from_secs(1)));
    assert_eq!(group.state(), "Empty");
}

#[test]
fn epochs_and_requests_are_checked_as_kafka_checks_them() {
    let settings = undelayed();
    let now = Instant::now();
    let all = image(&[("input", 2), ("app-store-changelog", 2)]);
    let mut group = StreamsGroup::new("app");
    let client = ("c", "h");
    let joined = group.heartbeat(&join("a", "p1"), client, &all, settings, now).unwrap();
    let epoch = joined.response.member_epoch;
    let code_of = |r: Result<Beat, Refused>| r.err().map(|e| e.0);
    assert_eq!(
        code_of(group.heartbeat(&beat("a", epoch + 1, &[]), client, &all, settings, now)),
        Some(FENCED_MEMBER_EPOCH)
    );
    assert_eq!(
        code_of(group.heartbeat(&beat("z", epoch, &[]), client, &all, settings, now)),
        Some(code::UNKNOWN_MEMBER_ID)
    );
    // A task beyond the subtopology's count.
    assert_eq!(
        code_of(group.heartbeat(&beat("a", epoch, &[5]), client, &all, settings, now)),
        Some(code::INVALID_REQUEST)
    );
    // Another topology at the same epoch.
    let mut other = join("b", "p2");
    other.topology.as_mut().unwrap().subtopologies[0].source_topics.push(topic("more"));
    let refused = group.heartbeat(&other, client, &all, settings, now).unwrap_err();
    assert_eq!(refused, (code::INVALID_REQUEST, "Topology updates are not supported yet.".to_string()));

    let bad = |f: &dyn Fn(StreamsGroupHeartbeatRequest) -> StreamsGroupHeartbeatRequest| {
        check_request(&f(join("a", "p"))).err()
    };
    assert_eq!(bad(&|r| r.with_member_id(s(""))).unwrap().1, "MemberId can't be empty.");
    assert_eq!(
        bad(&|r| r.with_rebalance_timeout_ms(-1)).unwrap().1,
        "RebalanceTimeoutMs must be provided in first request."
    );
    assert_eq!(bad(&|r| r.with_topology(None)).unwrap().1, "Topology must be non-null when (re-)joining.");
    assert_eq!(
        bad(&|r| r.with_member_epoch(-3).with_topology(None)).unwrap().1,
        "MemberEpoch is -3, but must be greater than or equal to -2."
    );
    assert_eq!(bad(&|r| r.with_member_epoch(3)).unwrap().1, "Topology can only be provided when (re-)joining.");
    assert_eq!(bad(&|r| r.with_standby_tasks(None)).unwrap().1, "If one task-type is non-null, all must be non-null.");
}

#[test]
fn a_static_member_comes_back_to_its_tasks() {
    let settings = undelayed();
    let now = Instant::now();
    let all = image(&[("input", 2), ("app-store-changelog", 2)]);
    let mut group = StreamsGroup::new("app");
    let client = ("c", "h");
    let first = group.heartbeat(&join("a", "p1").with_instance_id(Some(s("i1"))), client, &all, settings, now).unwrap();
    assert_eq!(active(&first.response), Some(vec![0, 1]));
    let epoch = group.epoch;
    // Another process with the same instance id while the first is alive.
    let clash = group.heartbeat(&join("a2", "p1").with_instance_id(Some(s("i1"))), client, &all, settings, now);
    assert_eq!(clash.err().map(|e| e.0), Some(code::UNRELEASED_INSTANCE_ID));
    // It leaves for now (-2) and comes back under a new member id: same tasks, no
    // rebalance.
    let leave = beat("a", STATIC_LEAVE_EPOCH, &[]).with_instance_id(Some(s("i1")));
    assert_eq!(group.heartbeat(&leave, client, &all, settings, now).unwrap().response.member_epoch, STATIC_LEAVE_EPOCH);
    let back = group.heartbeat(&join("a2", "p1").with_instance_id(Some(s("i1"))), client, &all, settings, now).unwrap();
    assert_eq!(active(&back.response), Some(vec![0, 1]));
    assert_eq!(group.epoch, epoch);
    // The old id is fenced.
    let old = beat("a", epoch, &[]).with_instance_id(Some(s("i1")));
    assert_eq!(group.heartbeat(&old, client, &all, settings, now).err().map(|e| e.0), Some(code::FENCED_INSTANCE_ID));
}

#[test]
fn the_first_assignment_waits_for_the_initial_delay_and_the_next_for_the_interval() {
    let settings = StreamsSettings::default();
    let now = Instant::now();
    let all = image(&[("input", 2), ("app-store-changelog", 2)]);
    let mut group = StreamsGroup::new("app");
    let client = ("c", "h");
    // As on Kafka 4.4: epoch 1 with no tasks, told the assignment is delayed.
    let joined = group.heartbeat(&join("a", "p1"), client, &all, settings, now).unwrap();
    assert_eq!((joined.response.member_epoch, active(&joined.response)), (1, Some(vec![])));
    assert_eq!(statuses(&joined.response), vec![topology::ASSIGNMENT_DELAYED]);
    // A second member within the delay joins the same first assignment.
    group.heartbeat(&join("b", "p2"), client, &all, settings, now + Duration::from_secs(1)).unwrap();
    assert!(!group.tick(settings, now + Duration::from_secs(2)));
    assert!(group.tick(settings, now + Duration::from_secs(3)));
    let a = group.heartbeat(&beat("a", 1, &[]), client, &all, settings, now + Duration::from_secs(3)).unwrap();
    assert_eq!(a.response.member_epoch, 3);
    assert_eq!(active(&a.response).map(|t| t.len()), Some(1), "one task each");
    assert!(statuses(&a.response).is_empty());
    // A third member within the interval: the epoch moves, the assignment waits.
    let soon = now + Duration::from_millis(3500);
    let c = group.heartbeat(&join("c", "p3"), client, &all, settings, soon).unwrap();
    assert_eq!(statuses(&c.response), vec![topology::ASSIGNMENT_DELAYED]);
    assert_eq!(group.state(), "Assigning");
    assert!(!group.tick(settings, now + Duration::from_secs(4) + Duration::from_millis(100)));
    assert_eq!(group.state(), "Reconciling");
}

#[test]
fn members_outlive_a_coordinator_move_through_their_records() {
    let settings = undelayed();
    let now = Instant::now();
    let all = image(&[("input", 4), ("app-store-changelog", 4)]);
    let mut group = StreamsGroup::new("app");
    let client = ("c", "h");
    let a = group.heartbeat(&join("a", "p1"), client, &all, settings, now).unwrap();
    let b = group.heartbeat(&join("b", "p2"), client, &all, settings, now).unwrap();
    let a = group.heartbeat(&beat("a", a.response.member_epoch, &[0, 1, 2, 3]), client, &all, settings, now).unwrap();
    let kept = active(&a.response).unwrap();
    group.heartbeat(&beat("a", a.response.member_epoch, &kept), client, &all, settings, now).unwrap();
    let b = group.heartbeat(&beat("b", b.response.member_epoch, &[]), client, &all, settings, now).unwrap();
    let b_tasks = active(&b.response).unwrap();
    assert_eq!(kept.len() + b_tasks.len(), 4);
    // Everything written, through the codec, replayed on another coordinator.
    let mut written = group.changes();
    assert!(group.changes().is_empty(), "nothing changed since");
    // A member whose own record changes writes its records, never another's: the
    // others are compared in place and left alone.
    let mut slower = beat("a", a.response.member_epoch, &kept);
    slower.rebalance_timeout_ms = 45_000;
    group.heartbeat(&slower, client, &all, settings, now).unwrap();
    let one = group.changes();
    let member_of = |e: &Entry| match e {
        Entry::StreamsMember { member, .. } | Entry::StreamsAssignment { member, .. } => Some(member.clone()),
        _ => None,
    };
    assert!(one.iter().any(|e| matches!(e, Entry::StreamsMember { member, value: Some(v), .. } if member == "a" && v.rebalance_timeout_ms == 45_000)), "{one:?}");
    assert!(one.iter().filter_map(member_of).all(|m| m == "a"), "only a's records: {one:?}");
    written.extend(one);
    // One leaves: tombstones for its records.
    group.heartbeat(&beat("b", LEAVE_EPOCH, &[]), client, &all, settings, now).unwrap();
    let left = group.changes();
    assert!(left.iter().any(|e| matches!(e, Entry::StreamsMember { member, value: None, .. } if member == "b")));
    written.extend(left);
    let mut moved = StreamsGroup::new("app");
    for entry in written {
        let (key, value) = crate::group::records::encode(&entry);
        moved.replay(crate::group::records::decode(&key, value.as_ref()).unwrap(), now);
    }
    let later = now + Duration::from_secs(1);
    moved.loaded(&all, settings, later);
    assert!(moved.changes().is_empty(), "the replayed records are what is written");
    assert_eq!(moved.member_epoch("b"), None);
    // `a` heartbeats on at its epoch and gets b's tasks back.
    let epoch = moved.member_epoch("a").unwrap();
    let on = moved.heartbeat(&beat("a", epoch, &kept), client, &all, settings, later).unwrap();
    assert_eq!(on.response.error_code, 0);
    let mut tasks = active(&on.response).unwrap_or(kept);
    tasks.sort();
    assert_eq!(tasks, vec![0, 1, 2, 3]);
}
