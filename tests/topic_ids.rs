//! The request versions Kafka 4.4 added to its group APIs, sent raw and checked as
//! Kafka 4.4 answers them (run with SKEIN_TEST_EXTERNAL_BOOTSTRAP=host:port to check
//! them there): OffsetCommit v10 and OffsetFetch v10 name topics by id (KIP-848),
//! TxnOffsetCommit v6 too (KIP-1319), OffsetFetch v9+ checks the member it names; DeleteGroups v3 (its message is null, as on Kafka);
//! ListOffsets v11 asks for the earliest offset pending upload (KIP-1023);
//! DescribeLogDirs v5 says whether a directory is cordoned (KIP-1066).

mod common;

use std::time::{Duration, Instant};

use common::RawClient;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

const UNKNOWN_TOPIC_ID: i16 = 100;

/// Creates `name` and returns its id once every partition has a leader.
fn create(client: &mut RawClient, name: &str, partitions: i32) -> Uuid {
    let request = CreateTopicsRequest::default()
        .with_topics(vec![common::creatable_topic(name, partitions, &[])])
        .with_timeout_ms(10_000);
    assert_eq!(client.call(&request, 7).topics[0].error_code, 0, "create {name}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let request = MetadataRequest::default().with_topics(Some(vec![
            metadata_request::MetadataRequestTopic::default().with_name(Some(TopicName(s(name)))),
        ]));
        let topic = client.call(&request, 12).topics.remove(0);
        if topic.error_code == 0 && topic.partitions.iter().all(|p| p.leader_id.0 >= 0) {
            return topic.topic_id;
        }
        assert!(Instant::now() < deadline, "{name} has no leaders");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A simple commit (no member) of `offset` for partitions 0 and 1 of `id`, v10.
fn commit_by_id(client: &mut RawClient, group: &str, id: Uuid, offset: i64) -> OffsetCommitResponse {
    let partitions = [0, 1]
        .map(|p| {
            offset_commit_request::OffsetCommitRequestPartition::default()
                .with_partition_index(p)
                .with_committed_offset(offset + p as i64)
        })
        .to_vec();
    let topic =
        offset_commit_request::OffsetCommitRequestTopic::default().with_topic_id(id).with_partitions(partitions);
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![topic]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let response = client.call(&request, 10);
        let loading = response.topics[0].partitions.iter().any(|p| [14, 15, 16].contains(&p.error_code));
        if !loading || Instant::now() > deadline {
            return response;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// OffsetFetch v10 of `group`: the named topics by id, or all.
fn fetch_by_id(
    client: &mut RawClient,
    group: &str,
    topics: Option<Vec<(Uuid, Vec<i32>)>>,
) -> Vec<(Uuid, i32, i64, i16)> {
    let topics = topics.map(|ts| {
        ts.into_iter()
            .map(|(id, ps)| {
                offset_fetch_request::OffsetFetchRequestTopics::default().with_topic_id(id).with_partition_indexes(ps)
            })
            .collect()
    });
    let group = offset_fetch_request::OffsetFetchRequestGroup::default()
        .with_group_id(GroupId(s(group)))
        .with_member_epoch(-1)
        .with_topics(topics);
    let response = client.call(&OffsetFetchRequest::default().with_groups(vec![group]), 10);
    let group = &response.groups[0];
    assert_eq!(group.error_code, 0);
    let mut out: Vec<(Uuid, i32, i64, i16)> = group
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| (t.topic_id, p.partition_index, p.committed_offset, p.error_code))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn kafka_4_4_group_api_versions_answer_as_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let (_broker, bootstrap, suffix) = common::local_or_external(dir.path());
    let mut client = RawClient::connect(&bootstrap);
    let (topic, group) = (format!("ids{suffix}"), format!("ids-group{suffix}"));
    let id = create(&mut client, &topic, 2);
    common::find_group_coordinator(&mut client, &group);

    // OffsetCommit v10: by id, answered by id; an unknown id is UNKNOWN_TOPIC_ID.
    let committed = commit_by_id(&mut client, &group, id, 40);
    assert_eq!(committed.topics[0].topic_id, id);
    assert!(committed.topics[0].partitions.iter().all(|p| p.error_code == 0), "{committed:?}");
    let stranger = Uuid::new_v4();
    let refused = commit_by_id(&mut client, &group, stranger, 1);
    assert_eq!((refused.topics[0].topic_id, refused.topics[0].partitions[0].error_code), (stranger, UNKNOWN_TOPIC_ID));

    // OffsetFetch v10: the commits by id, named or all; an unknown id is refused.
    let expected = vec![(id, 0, 40, 0), (id, 1, 41, 0)];
    assert_eq!(fetch_by_id(&mut client, &group, Some(vec![(id, vec![0, 1])])), expected);
    assert_eq!(fetch_by_id(&mut client, &group, None), expected);
    assert_eq!(
        fetch_by_id(&mut client, &group, Some(vec![(stranger, vec![0])])),
        vec![(stranger, 0, -1, UNKNOWN_TOPIC_ID)]
    );
    // The same offsets by name, at v9.
    let by_name =
        offset_fetch_request::OffsetFetchRequestGroup::default().with_group_id(GroupId(s(&group))).with_topics(None);
    let v9 = client.call(&OffsetFetchRequest::default().with_groups(vec![by_name]), 9);
    let offsets: Vec<i64> = v9.groups[0].topics[0].partitions.iter().map(|p| p.committed_offset).collect();
    assert_eq!((v9.groups[0].topics[0].name.as_str(), offsets.len()), (topic.as_str(), 2));

    // TxnOffsetCommit v6 for an unknown topic id: refused before any transaction check.
    let txn_topic =
        txn_offset_commit_request::TxnOffsetCommitRequestTopic::default().with_topic_id(stranger).with_partitions(
            vec![txn_offset_commit_request::TxnOffsetCommitRequestPartition::default().with_committed_offset(5)],
        );
    let txn = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(s(&format!("ids-txn{suffix}"))))
        .with_group_id(GroupId(s(&group)))
        .with_producer_id(ProducerId(1))
        .with_producer_epoch(0)
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![txn_topic]);
    let answer = client.call(&txn, 6);
    assert_eq!((answer.topics[0].topic_id, answer.topics[0].partitions[0].error_code), (stranger, UNKNOWN_TOPIC_ID));

    // DeleteGroups v3: an unknown group and one with a member stay, with their codes and
    // no message (Kafka 4.4 gives one only for topology descriptions, KIP-1331); an
    // empty group with offsets goes.
    let (ghost, busy) = (format!("ghost{suffix}"), format!("busy{suffix}"));
    common::find_group_coordinator(&mut client, &ghost);
    common::find_group_coordinator(&mut client, &busy);
    let join = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(&busy)))
        .with_member_id(s(&Uuid::new_v4().to_string()))
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![TopicName(s(&topic))]))
        .with_topic_partitions(Some(Vec::new()));
    let joined = client.call(&join, 1);
    assert_eq!(joined.error_code, 0);

    // OffsetFetch v9+ checks the member a consumer group's member names.
    let fetch_as = |client: &mut RawClient, member: Option<&str>, epoch: i32| {
        let asking = offset_fetch_request::OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(s(&busy)))
            .with_member_id(member.map(s))
            .with_member_epoch(epoch)
            .with_topics(None);
        client.call(&OffsetFetchRequest::default().with_groups(vec![asking]), 9).groups[0].error_code
    };
    let member = joined.member_id.as_ref().map(|m| m.to_string()).unwrap_or_default();
    assert_eq!(fetch_as(&mut client, Some(&member), joined.member_epoch), 0);
    assert_eq!(fetch_as(&mut client, None, -1), 0, "the admin client names no member");
    assert_eq!(fetch_as(&mut client, Some("stranger"), joined.member_epoch), 25, "UNKNOWN_MEMBER_ID");
    assert_eq!(fetch_as(&mut client, Some(&member), joined.member_epoch + 7), 113, "STALE_MEMBER_EPOCH");
    let names = [&ghost, &busy, &group].map(|g| GroupId(s(g))).to_vec();
    let results = client.call(&DeleteGroupsRequest::default().with_groups_names(names), 3).results;
    // In any order: Kafka answers each coordinator's groups together.
    let outcome: std::collections::BTreeMap<String, (i16, Option<String>)> = results
        .iter()
        .map(|r| (r.group_id.to_string(), (r.error_code, r.error_message.as_ref().map(|m| m.to_string()))))
        .collect();
    let expected = [(ghost, (69, None)), (busy, (68, None)), (group, (0, None))].into_iter().collect();
    assert_eq!(outcome, expected);

    // ListOffsets v11: the earliest offset pending upload, -1 without tiered storage.
    let partition = list_offsets_request::ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-6);
    let list = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
        list_offsets_request::ListOffsetsTopic::default()
            .with_name(TopicName(s(&topic)))
            .with_partitions(vec![partition]),
    ]);
    let answer = client.call(&list, 11).topics[0].partitions[0].clone();
    assert_eq!((answer.error_code, answer.offset, answer.timestamp, answer.leader_epoch), (0, -1, -1, -1));

    // DescribeLogDirs v5: each directory, not cordoned.
    let dirs = client.call(&DescribeLogDirsRequest::default(), 5).results;
    assert!(!dirs.is_empty() && dirs.iter().all(|d| d.error_code == 0 && !d.is_cordoned), "{dirs:?}");
}
