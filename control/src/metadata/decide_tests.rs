//! Tests of the controller's decisions (`decide.rs`).

use super::*;
use crate::metadata::BrokerMeta;
use skein_engine::TopicPartition;

/// Broker `id` registering from a process started as `incarnation`.
fn started(id: i32, incarnation: u64) -> ControllerRequest {
    ControllerRequest::RegisterBroker(BrokerMeta {
        id,
        epoch: 0,
        host: "127.0.0.1".into(),
        port: 9000 + id as u16,
        rack: None,
        fenced: false,
        incarnation,
        clean_restart: true,
        listeners: Vec::new(),
        virtual_brokers: None,
    })
}

fn applied(image: &mut MetadataImage, request: ControllerRequest) -> Result<ControllerReply, Refusal> {
    let (records, reply) = decide(image, &request, &Local { node: 1, broker: true, shards: 2, min_insync: 1 })?;
    image.apply(&records);
    Ok(reply)
}

// ISR changes decided together see each other: one record for their topic with
// every change, and a second change made from the same partition epoch refused.
#[test]
fn isr_changes_decided_together_make_one_record() {
    let mut image = MetadataImage::default();
    for id in [1, 2, 3] {
        applied(&mut image, started(id, 0)).unwrap();
    }
    let create = ControllerRequest::CreateTopic {
        name: "r".into(),
        partitions: 3,
        replication_factor: 3,
        configs: BTreeMap::new(),
    };
    let Ok(ControllerReply::Topic(meta)) = applied(&mut image, create) else { panic!() };
    let shrink = |p: i32| {
        let a = meta.assignment(p, 9);
        ControllerRequest::AlterPartition {
            topic: "r".into(),
            partition: p,
            leader: a.leader,
            leader_epoch: a.leader_epoch,
            partition_epoch: a.partition_epoch,
            isr: vec![a.leader],
        }
    };
    let local = Local { node: 1, broker: true, shards: 2, min_insync: 1 };
    let (records, replies) = decide_all(&image, &[shrink(0), shrink(2), shrink(0)], &local);
    assert_eq!(records.len(), 1, "one record for the topic");
    let codes: Vec<i16> = replies.iter().map(|r| r.as_ref().map_or_else(|e| e.0, |_| 0)).collect();
    assert_eq!(codes, vec![0, 0, code::INVALID_UPDATE_VERSION]);
    image.apply(&records);
    for (p, isr_len, epoch) in [(0, 1, 1), (1, 3, 0), (2, 1, 1)] {
        let a = image.topic("r").unwrap().assignment(p, 9);
        assert_eq!((a.isr.len(), a.partition_epoch), (isr_len, epoch), "partition {p}");
    }
}

// A CreateTopics request's topics are decided in order, each against what the
// ones before it left: one record per created topic, the others refused alone.
#[test]
fn topics_created_together_see_each_other() {
    let mut image = MetadataImage::default();
    applied(
        &mut image,
        ControllerRequest::CreateTopic {
            name: "old".into(),
            partitions: 1,
            replication_factor: -1,
            configs: BTreeMap::new(),
        },
    )
    .unwrap();
    let new = |name: &str, partitions| NewTopic {
        name: name.into(),
        partitions,
        replication_factor: -1,
        configs: BTreeMap::new(),
    };
    let request = ControllerRequest::CreateTopics(vec![new("a.b", 3), new("old", 1), new("a_b", 1), new("c", 2)]);
    let local = Local { node: 1, broker: true, shards: 2, min_insync: 1 };
    let (records, reply) = decide(&image, &request, &local).unwrap();
    assert_eq!(records.len(), 2);
    let outcomes = reply.into_topics().unwrap();
    let codes: Vec<i16> = outcomes.iter().map(|o| o.as_ref().err().map_or(code::NONE, |e| e.0)).collect();
    assert_eq!(codes, [code::NONE, code::TOPIC_ALREADY_EXISTS, code::INVALID_TOPIC_EXCEPTION, code::NONE]);
    assert_eq!(outcomes[3].as_ref().unwrap().shards.len(), 2);
    // The image is left as it was: the records change it once committed.
    assert!(image.topic("a.b").is_none());
    image.apply(&records);
    assert_eq!(image.topic("a.b").unwrap().partitions, 3);
    assert!(image.topic("c").is_some());
}

// Each request as Kafka's controller answers it, and the image it leaves.
#[test]
fn requests_against_the_image() {
    let mut image = MetadataImage { next_producer_id: 1000, ..Default::default() };
    let create = |name: &str, partitions| ControllerRequest::CreateTopic {
        name: name.into(),
        partitions,
        replication_factor: -1,
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
    let Ok(ControllerReply::ProducerIds(first)) = applied(&mut image, ControllerRequest::ProducerIds) else { panic!() };
    let Ok(ControllerReply::ProducerIds(second)) = applied(&mut image, ControllerRequest::ProducerIds) else {
        panic!()
    };
    assert_eq!((first.start, first.end, second.start), (1000, 2000, 2000));
    assert_eq!(image.next_producer_id, 3000);
    let delete = ControllerRequest::DeleteTopic { name: "a.b".into() };
    applied(&mut image, delete.clone()).unwrap();
    assert!(image.topic("a.b").is_none());
    assert_eq!(applied(&mut image, delete).unwrap_err().0, code::UNKNOWN_TOPIC_OR_PARTITION);
}

// Registered brokers share the partitions' leadership evenly; a registration bumps
// the broker's epoch; a replication factor past the brokers is refused.
#[test]
fn partitions_spread_over_the_brokers() {
    let mut image = MetadataImage::default();
    let register = |id: i32| started(id, 0);
    for id in [2, 3] {
        applied(&mut image, register(id)).unwrap();
    }
    // The same process registering again changes nothing; a new one bumps the epoch.
    applied(&mut image, register(2)).unwrap();
    assert_eq!(image.brokers[&2].epoch, 0);
    applied(&mut image, started(2, 7)).unwrap();
    assert_eq!(image.brokers[&2].epoch, 1);
    let create = |replication_factor| ControllerRequest::CreateTopic {
        name: "spread".into(),
        partitions: 6,
        replication_factor,
        configs: BTreeMap::new(),
    };
    assert_eq!(applied(&mut image, create(4)).unwrap_err().0, code::INVALID_REPLICATION_FACTOR);
    let Ok(ControllerReply::Topic(meta)) = applied(
        &mut image,
        ControllerRequest::CreateTopic {
            name: "replicated".into(),
            partitions: 3,
            replication_factor: 3,
            configs: BTreeMap::new(),
        },
    ) else {
        panic!()
    };
    for p in 0..3 {
        let a = meta.assignment(p, 9);
        let mut replicas = a.replicas.clone();
        replicas.sort_unstable();
        assert_eq!((replicas, a.isr.len(), a.leader), (vec![1, 2, 3], 3, a.replicas[0]));
    }
    // An ISR change from the current leader and partition epoch is taken once.
    let first = meta.assignment(0, 9);
    let shrink = ControllerRequest::AlterPartition {
        topic: "replicated".into(),
        partition: 0,
        leader: first.leader,
        leader_epoch: 0,
        partition_epoch: 0,
        isr: vec![first.leader],
    };
    applied(&mut image, shrink.clone()).unwrap();
    let after = image.topic("replicated").unwrap().assignment(0, 9);
    assert_eq!((after.isr.clone(), after.partition_epoch), (vec![first.leader], 1));
    assert_eq!(applied(&mut image, shrink).unwrap_err().0, code::INVALID_UPDATE_VERSION);
    let Ok(ControllerReply::Topic(meta)) = applied(&mut image, create(1)) else { panic!() };
    let mut led = BTreeMap::new();
    for p in 0..6 {
        let assignment = meta.assignment(p, 9);
        assert_eq!((assignment.replicas.len(), assignment.isr.clone()), (1, vec![assignment.leader]));
        *led.entry(assignment.leader).or_insert(0) += 1;
    }
    assert_eq!(led, BTreeMap::from([(1, 2), (2, 2), (3, 2)]), "the deciding node 1 counts as a broker");
    // Fencing a leader moves its leadership to the next in-sync replica in a new
    // epoch; with no live replica in the ISR the partition goes offline, and the
    // first of its ISR to come back leads it again.
    applied(&mut image, register(1)).unwrap();
    let before = image.topic("replicated").unwrap().assignment(1, 9);
    let gone = before.leader;
    applied(&mut image, ControllerRequest::FenceBroker { id: gone }).unwrap();
    let after = image.topic("replicated").unwrap().assignment(1, 9);
    assert_ne!(after.leader, gone);
    assert_eq!((after.leader_epoch, after.isr.contains(&gone)), (before.leader_epoch + 1, false));
    assert!(image.brokers[&gone].fenced);
    for id in [1, 2, 3].into_iter().filter(|&id| id != gone) {
        applied(&mut image, ControllerRequest::FenceBroker { id }).unwrap();
    }
    let offline = image.topic("replicated").unwrap().assignment(1, 9);
    assert_eq!((offline.leader, offline.isr.len()), (-1, 1));
    let last = offline.isr[0];
    applied(
        &mut image,
        ControllerRequest::BrokerHeartbeat { id: last, log_dir_offline: false, offline_replicas: vec![] },
    )
    .unwrap();
    let back = image.topic("replicated").unwrap().assignment(1, 9);
    assert_eq!((back.leader, back.leader_epoch), (last, offline.leader_epoch + 1));
    assert!(!image.brokers[&last].fenced);
}

// A reassignment adds its target replicas as followers, completes once the ISR
// holds them all (the leaving leader hands over in a new epoch), and a cancel goes
// back to the replicas before it; bad targets get Kafka's errors.
#[test]
fn reassignments_move_replicas() {
    let mut image = MetadataImage::default();
    for id in [1, 2, 3, 4] {
        applied(&mut image, started(id, 0)).unwrap();
    }
    let create = ControllerRequest::CreateTopic {
        name: "moving".into(),
        partitions: 1,
        replication_factor: 2,
        configs: BTreeMap::new(),
    };
    applied(&mut image, create).unwrap();
    let now = |image: &MetadataImage| image.topic("moving").unwrap().assignment(0, 9);
    let before = now(&image);
    let (a, b) = (before.replicas[0], before.replicas[1]);
    let c = (1..=4).find(|r| !before.replicas.contains(r)).unwrap();
    let reassign = |target: Option<Vec<i32>>, keep_factor| ControllerRequest::Reassign {
        partitions: vec![("moving".into(), 0, target)],
        keep_factor,
    };
    let outcome = |reply: Result<ControllerReply, Refusal>| match reply {
        Ok(ControllerReply::Reassigned(outcomes)) => outcomes[0].0,
        other => panic!("{other:?}"),
    };
    assert_eq!(outcome(applied(&mut image, reassign(None, false))), code::NO_REASSIGNMENT_IN_PROGRESS);
    for bad in [vec![], vec![b, b], vec![b, 42]] {
        assert_eq!(outcome(applied(&mut image, reassign(Some(bad), false))), code::INVALID_REPLICA_ASSIGNMENT);
    }
    assert_eq!(outcome(applied(&mut image, reassign(Some(vec![b]), true))), code::INVALID_REPLICATION_FACTOR);
    assert_eq!(now(&image), before, "refused targets change nothing");

    // [a, b] to [b, c], then cancelled: back to [a, b].
    assert_eq!(outcome(applied(&mut image, reassign(Some(vec![b, c]), false))), code::NONE);
    let moving = now(&image);
    assert_eq!(
        (moving.replicas.clone(), moving.adding.clone(), moving.removing.clone()),
        (vec![b, c, a], vec![c], vec![a])
    );
    assert_eq!((moving.leader, moving.isr.len()), (a, 2), "the leader stays until the target is in sync");
    assert_eq!(outcome(applied(&mut image, reassign(None, false))), code::NONE);
    // As in Kafka, the replicas before it are the current ones less those joining
    // (b first now, as in the target); a still leads.
    let back = now(&image);
    assert_eq!((back.replicas.clone(), back.reassigning(), back.leader), (vec![b, a], false, a));

    // Again, and this time c catches up: the ISR change completes it, and a, which
    // led, hands over to b in a new epoch.
    applied(&mut image, reassign(Some(vec![b, c]), false)).unwrap();
    let moving = now(&image);
    let join = ControllerRequest::AlterPartition {
        topic: "moving".into(),
        partition: 0,
        leader: a,
        leader_epoch: moving.leader_epoch,
        partition_epoch: moving.partition_epoch,
        isr: vec![a, b, c],
    };
    applied(&mut image, join).unwrap();
    let done = now(&image);
    assert_eq!((done.replicas.clone(), done.isr.clone(), done.reassigning()), (vec![b, c], vec![b, c], false));
    assert_eq!((done.leader, done.leader_epoch), (b, moving.leader_epoch + 1));
}

// KIP-966: a replica that leaves an ISR smaller than min.insync.replicas becomes an
// eligible leader replica, and leads when no ISR member can; an ISR back at
// min.insync.replicas empties the ELR; a broker that restarted uncleanly leaves it.
#[test]
fn eligible_leader_replicas_lead_when_the_isr_cannot() {
    let mut image = MetadataImage::default();
    for id in [1, 2, 3] {
        applied(&mut image, started(id, 0)).unwrap();
    }
    let create = ControllerRequest::CreateTopic {
        name: "elr".into(),
        partitions: 1,
        replication_factor: 3,
        configs: BTreeMap::from([("min.insync.replicas".to_string(), "2".to_string())]),
    };
    applied(&mut image, create).unwrap();
    let now = |image: &MetadataImage| image.topic("elr").unwrap().assignment(0, 9);
    let start = now(&image);
    let (l, x, y) = (start.leader, start.replicas[1], start.replicas[2]);
    let shrink = |image: &mut MetadataImage, isr: Vec<i32>| {
        let a = now(image);
        let request = ControllerRequest::AlterPartition {
            topic: "elr".into(),
            partition: 0,
            leader: a.leader,
            leader_epoch: a.leader_epoch,
            partition_epoch: a.partition_epoch,
            isr,
        };
        applied(image, request).unwrap();
    };
    // y lags while two stay in sync: not eligible (the high watermark moved on).
    shrink(&mut image, vec![l, x]);
    assert_eq!((now(&image).isr, now(&image).elr), (vec![l, x], vec![]));
    // x lags too: the ISR is below min.insync.replicas, x is eligible.
    shrink(&mut image, vec![l]);
    assert_eq!(now(&image).elr, vec![x]);
    // The leader is fenced: x leads from the ELR, and l, which left cleanly, is
    // eligible in its place.
    applied(&mut image, ControllerRequest::FenceBroker { id: l }).unwrap();
    let after = now(&image);
    assert_eq!((after.leader, after.isr.clone(), after.elr.clone()), (x, vec![x], vec![l]));
    assert_eq!(after.leader_epoch, start.leader_epoch + 1);
    // x is fenced too: nobody live is in the ISR or the ELR, the partition is
    // offline; l coming back leads it from the ELR.
    applied(&mut image, ControllerRequest::FenceBroker { id: x }).unwrap();
    assert_eq!(now(&image).leader, -1);
    applied(&mut image, ControllerRequest::BrokerHeartbeat { id: l, log_dir_offline: false, offline_replicas: vec![] })
        .unwrap();
    let back = now(&image);
    assert_eq!((back.leader, back.isr.clone()), (l, vec![l]));
    assert!(back.elr.contains(&x), "{back:?}");
    // x restarts without a controlled shutdown: it may have lost its tail, so it
    // is no longer eligible.
    let mut unclean = started(x, 7);
    if let ControllerRequest::RegisterBroker(broker) = &mut unclean {
        broker.clean_restart = false;
    }
    applied(&mut image, unclean).unwrap();
    assert!(!now(&image).elr.contains(&x), "{:?}", now(&image));
    // The ISR grows back to min.insync.replicas: the ELR empties.
    shrink(&mut image, vec![l, y]);
    assert_eq!((now(&image).isr, now(&image).elr), (vec![l, y], vec![]));
}

// The cluster's dynamic min.insync.replicas (kafka-configs --entity-default) is the
// default of topics without their own: an ISR shrinking below it makes the replica
// that left eligible (KIP-966), where the static default of 1 would not.
#[test]
fn the_dynamic_cluster_min_insync_replicas_applies() {
    let mut image = MetadataImage::default();
    for id in [1, 2, 3] {
        applied(&mut image, started(id, 0)).unwrap();
    }
    let create = ControllerRequest::CreateTopic {
        name: "d".into(),
        partitions: 1,
        replication_factor: 3,
        configs: BTreeMap::new(),
    };
    applied(&mut image, create).unwrap();
    let configs = BTreeMap::from([("min.insync.replicas".to_string(), "2".to_string())]);
    applied(&mut image, ControllerRequest::SetBrokerConfigs { broker: String::new(), configs }).unwrap();
    let a = image.topic("d").unwrap().assignment(0, 9);
    let (l, x) = (a.leader, a.replicas[1]);
    let request = ControllerRequest::AlterPartition {
        topic: "d".into(),
        partition: 0,
        leader: l,
        leader_epoch: a.leader_epoch,
        partition_epoch: a.partition_epoch,
        isr: vec![l],
    };
    applied(&mut image, request).unwrap();
    let after = image.topic("d").unwrap().assignment(0, 9);
    assert_eq!(after.isr, vec![l]);
    assert!(after.elr.contains(&x), "{after:?}");
}

// Replicas spread over racks as Kafka places them: every partition on as many racks
// as it can, leaders evenly over the brokers; without racks, consecutive brokers.
#[test]
fn replicas_spread_over_racks() {
    let mut image = MetadataImage::default();
    let racks = [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")];
    for (id, rack) in racks {
        let ControllerRequest::RegisterBroker(mut broker) = started(id, 0) else { unreachable!() };
        broker.rack = Some(rack.into());
        applied(&mut image, ControllerRequest::RegisterBroker(broker)).unwrap();
    }
    let rack_of = |id: i32| racks.iter().find(|(b, _)| *b == id).unwrap().1;
    let create = |name: &str, replication_factor| ControllerRequest::CreateTopic {
        name: name.into(),
        partitions: 12,
        replication_factor,
        configs: BTreeMap::new(),
    };
    let Ok(ControllerReply::Topic(meta)) = applied(&mut image, create("three", 3)) else { panic!() };
    let mut led = BTreeMap::new();
    for p in 0..12 {
        let a = meta.assignment(p, 9);
        let mut used: Vec<&str> = a.replicas.iter().map(|&r| rack_of(r)).collect();
        used.sort_unstable();
        assert_eq!(used, ["a", "b", "c"], "partition {p}: {:?}", a.replicas);
        *led.entry(a.leader).or_insert(0) += 1;
    }
    assert_eq!(led, (1..=6).map(|id| (id, 2)).collect::<BTreeMap<_, _>>(), "leaders spread");
    // Five replicas over three racks: no rack holds more than two of them.
    let Ok(ControllerReply::Topic(meta)) = applied(&mut image, create("five", 5)) else { panic!() };
    for p in 0..12 {
        let a = meta.assignment(p, 9);
        for rack in ["a", "b", "c"] {
            assert!(a.replicas.iter().filter(|&&r| rack_of(r) == rack).count() <= 2, "{:?}", a.replicas);
        }
    }
    assert_eq!(
        rack_alternated(vec![(4, "b".into()), (1, "a".into()), (2, "a".into()), (3, "a".into()), (5, "c".into())])
            .iter()
            .map(|(id, _)| *id)
            .collect::<Vec<_>>(),
        [1, 4, 5, 2, 3]
    );
}

// A broker that restarts without a controlled shutdown, before its session
// expired, leaves the ISRs and its leaderships move on (it may have lost its
// unwritten tail); where it was the only one in sync it leads again in a new epoch.
#[test]
fn an_unclean_restart_moves_leaderships_away() {
    let mut image = MetadataImage::default();
    for id in [1, 2, 3] {
        applied(&mut image, started(id, 0)).unwrap();
    }
    let create = |name: &str, replication_factor| ControllerRequest::CreateTopic {
        name: name.into(),
        partitions: 3,
        replication_factor,
        configs: BTreeMap::new(),
    };
    applied(&mut image, create("three", 3)).unwrap();
    applied(&mut image, create("one", 1)).unwrap();
    let before = image.clone();
    applied(&mut image, started(2, 1)).unwrap();
    for p in 0..3 {
        let (was, now) =
            (before.topic("three").unwrap().assignment(p, 9), image.topic("three").unwrap().assignment(p, 9));
        assert!(!now.isr.contains(&2) && now.leader != 2, "{now:?}");
        assert_eq!(now.leader_epoch, was.leader_epoch + i32::from(was.leader == 2));
        let (was, now) = (before.topic("one").unwrap().assignment(p, 9), image.topic("one").unwrap().assignment(p, 9));
        if was.leader == 2 {
            assert_eq!((now.leader, now.isr.clone()), (2, vec![2]));
            assert!(now.leader_epoch > was.leader_epoch);
        } else {
            assert_eq!(now, was);
        }
    }
    // After a controlled shutdown (fenced), a restart changes no ISR.
    applied(&mut image, ControllerRequest::FenceBroker { id: 3 }).unwrap();
    let fenced = image.clone();
    applied(&mut image, started(3, 1)).unwrap();
    assert!(!image.brokers[&3].fenced);
    assert_eq!(image.topic("three").unwrap().assignments, fenced.topic("three").unwrap().assignments);
}

// UnregisterBroker, as Kafka's: the broker leaves every ISR and ELR (a partition it
// led moves to an in-sync replica in a new epoch) and its registration goes; an id
// with no registration is BROKER_ID_NOT_REGISTERED with Kafka's message; a broker
// that registers again is back.
#[test]
fn an_unregistered_broker_leaves_its_partitions_and_the_cluster() {
    let mut image = MetadataImage::default();
    for id in [1, 2, 3] {
        applied(&mut image, started(id, 0)).unwrap();
    }
    let create = ControllerRequest::CreateTopic {
        name: "u".into(),
        partitions: 3,
        replication_factor: 3,
        configs: BTreeMap::new(),
    };
    applied(&mut image, create).unwrap();
    let led_by_2: Vec<i32> = (0..3).filter(|&p| image.topic("u").unwrap().assignment(p, 9).leader == 2).collect();
    assert!(!led_by_2.is_empty());
    let before = image.topic("u").unwrap().assignment(led_by_2[0], 9);
    applied(&mut image, ControllerRequest::UnregisterBroker { id: 2 }).unwrap();
    assert!(!image.brokers.contains_key(&2));
    for p in 0..3 {
        let after = image.topic("u").unwrap().assignment(p, 9);
        assert!(after.leader != 2 && !after.isr.contains(&2) && !after.elr.contains(&2), "{after:?}");
        assert!(after.replicas.contains(&2), "it stays a replica, as on Kafka");
    }
    let moved = image.topic("u").unwrap().assignment(led_by_2[0], 9);
    assert_eq!(moved.leader_epoch, before.leader_epoch + 1);
    let refused = applied(&mut image, ControllerRequest::UnregisterBroker { id: 2 }).unwrap_err();
    assert_eq!(refused, (code::BROKER_ID_NOT_REGISTERED, "Broker ID 2 is not currently registered".into()));
    applied(&mut image, started(2, 1)).unwrap();
    assert!(image.brokers.get(&2).is_some_and(|b| !b.fenced));
}

// A broker whose log directory failed names the replicas there in its heartbeats: it
// leaves their ISRs (and ELRs) and their leaderships move; its other replicas stay
// as they were, and it stays unfenced.
#[test]
fn replicas_of_a_failed_directory_leave_and_only_they() {
    let mut image = MetadataImage::default();
    for id in [1, 2, 3] {
        applied(&mut image, started(id, 0)).unwrap();
    }
    let create = ControllerRequest::CreateTopic {
        name: "d".into(),
        partitions: 6,
        replication_factor: 3,
        configs: BTreeMap::new(),
    };
    applied(&mut image, create).unwrap();
    let before: Vec<Assignment> = (0..6).map(|p| image.topic("d").unwrap().assignment(p, 9)).collect();
    let offline = [0, 3];
    let heartbeat = ControllerRequest::BrokerHeartbeat {
        id: 2,
        log_dir_offline: false,
        offline_replicas: offline.iter().map(|&p| ("d".to_string(), p)).collect(),
    };
    applied(&mut image, heartbeat.clone()).unwrap();
    for p in 0..6 {
        let after = image.topic("d").unwrap().assignment(p, 9);
        if offline.contains(&p) {
            assert!(after.leader != 2 && !after.isr.contains(&2) && !after.elr.contains(&2), "{p}: {after:?}");
            if before[p as usize].leader == 2 {
                assert_eq!(after.leader_epoch, before[p as usize].leader_epoch + 1);
            }
        } else {
            assert_eq!(after, before[p as usize], "{p}");
        }
    }
    assert!(image.brokers.get(&2).is_some_and(|b| !b.fenced));
    // Heartbeats that say it again change nothing.
    let (records, _) = decide(&image, &heartbeat, &Local { node: 1, broker: true, shards: 2, min_insync: 1 }).unwrap();
    assert!(records.is_empty(), "{records:?}");
}
