//! The `__consumer_offsets` records' tests (`records.rs`): each kind round-trips, and a
//! value cut anywhere is refused or read the same, never trusted wrong.

use super::*;

// Entries round-trip; tombstones and damaged keys are handled.
#[test]
fn round_trip() {
    let entries = [
        Entry::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition: 3,
            value: Some(OffsetValue { offset: 42, leader_epoch: 0, metadata: "m".into(), commit_timestamp: 7 }),
        },
        Entry::Offset { group: "g".into(), topic: "t".into(), partition: 3, value: None },
        Entry::Group {
            group: "g".into(),
            value: Some(GroupValue {
                protocol_type: "consumer".into(),
                generation: 5,
                protocol: Some("range".into()),
                leader: Some("m1".into()),
                state_timestamp: 9,
                members: vec![MemberValue {
                    member_id: "m1".into(),
                    instance_id: Some("i1".into()),
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    rebalance_timeout_ms: 30_000,
                    session_timeout_ms: 10_000,
                    subscription: Bytes::from_static(b"sub"),
                    assignment: Bytes::from_static(b"assigned"),
                }],
            }),
        },
        Entry::Group { group: "g".into(), value: None },
        Entry::ConsumerGroup { group: "c".into(), epoch: Some(7) },
        Entry::ConsumerGroup { group: "c".into(), epoch: None },
        Entry::TargetAssignment { group: "c".into(), epoch: Some(7) },
        Entry::ConsumerMember {
            group: "c".into(),
            member: "m".into(),
            value: Some(ConsumerMemberValue {
                instance_id: None,
                rack_id: Some("r1".into()),
                client_id: "client".into(),
                client_host: "/127.0.0.1".into(),
                subscribed_topic_names: vec!["a".into(), "b".into()],
                subscribed_topic_regex: Some("x.*".into()),
                rebalance_timeout_ms: 30_000,
                server_assignor: Some("uniform".into()),
            }),
        },
        Entry::TargetMember {
            group: "c".into(),
            member: "m".into(),
            partitions: Some(vec![(uuid::Uuid::from_u128(9), vec![0, 2])]),
        },
        Entry::CurrentAssignment {
            group: "c".into(),
            member: "m".into(),
            value: Some(CurrentAssignmentValue {
                member_epoch: 7,
                previous_member_epoch: 6,
                state: 0,
                assigned: vec![(uuid::Uuid::from_u128(9), vec![0])],
                pending_revocation: vec![(uuid::Uuid::from_u128(9), vec![2])],
            }),
        },
        Entry::CurrentAssignment { group: "c".into(), member: "m".into(), value: None },
        Entry::ShareGroup { group: "s".into(), epoch: Some(3) },
        Entry::ShareTargetAssignment { group: "s".into(), epoch: Some(3) },
        Entry::ShareMember {
            group: "s".into(),
            member: "m".into(),
            value: Some(ShareMemberValue {
                rack_id: None,
                client_id: "client".into(),
                client_host: "/127.0.0.1".into(),
                subscribed_topic_names: vec!["a".into()],
            }),
        },
        Entry::ShareTargetMember {
            group: "s".into(),
            member: "m".into(),
            partitions: Some(vec![(uuid::Uuid::from_u128(9), vec![0, 1])]),
        },
        Entry::ShareCurrentAssignment {
            group: "s".into(),
            member: "m".into(),
            value: Some(ShareAssignmentValue {
                member_epoch: 3,
                previous_member_epoch: 2,
                assigned: vec![(uuid::Uuid::from_u128(9), vec![1])],
            }),
        },
        Entry::ShareMember { group: "s".into(), member: "m".into(), value: None },
        Entry::ShareCurrentAssignment { group: "s".into(), member: "m".into(), value: None },
    ];
    for entry in entries {
        let (key, value) = encode(&entry);
        assert_eq!(decode(&key, value.as_ref()), Some(entry.clone()));
        // A value cut anywhere decodes to nothing, or (when only trailing optional
        // fields are cut) to the same entry: never a panic or a wrong entry.
        if let Some(value) = value {
            for cut in 0..value.len() {
                let decoded = decode(&key, Some(&value.slice(..cut)));
                assert!(decoded.is_none() || decoded == Some(entry.clone()), "{entry:?} cut at {cut}: {decoded:?}");
            }
        }
    }
    assert_eq!(decode(&Bytes::from_static(&[0, 9, 0]), None), None);
    assert_eq!(decode(&Bytes::from_static(&[0, 1, 0, 50]), None), None);
}
