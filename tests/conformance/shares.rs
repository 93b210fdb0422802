//! Samples for the share group APIs (KIP-932), over a share group that is joined,
//! fetches records and acknowledges them for real, for `exercise`.

use super::*;

const SHARE_GROUP: &str = "conf-share";
const SHARE_MEMBER: &str = "conf-share-member";

impl Conformance {
    /// Joins the share group (ShareGroupHeartbeat at epoch 0): its member epoch.
    fn share_join(&mut self, group_name: &str, member: &str) -> i32 {
        let request = ShareGroupHeartbeatRequest::default()
            .with_group_id(group(group_name))
            .with_member_id(s(member))
            .with_member_epoch(0)
            .with_rack_id(Some(s("rack-a")))
            .with_subscribed_topic_names(Some(vec![topic(TOPIC)]));
        self.call(request, 1).map_or(0, |r| r.member_epoch)
    }

    fn share_fetch_request(&self, epoch: i32, acks: Vec<(i32, i64, i64, i8)>) -> ShareFetchRequest {
        use share_fetch_request::{AcknowledgementBatch, FetchPartition, FetchTopic};
        let topic_id = self.topic_ids[TOPIC];
        let partitions = (0..TOPIC_PARTITIONS)
            .map(|p| {
                let batches = acks
                    .iter()
                    .filter(|a| a.0 == p)
                    .map(|&(_, first, last, ack)| {
                        AcknowledgementBatch::default()
                            .with_first_offset(first)
                            .with_last_offset(last)
                            .with_acknowledge_types(vec![ack])
                    })
                    .collect();
                FetchPartition::default().with_partition_index(p).with_acknowledgement_batches(batches)
            })
            .collect();
        ShareFetchRequest::default()
            .with_group_id(Some(group(SHARE_GROUP)))
            .with_member_id(Some(s(SHARE_MEMBER)))
            .with_share_session_epoch(epoch)
            .with_max_wait_ms(100)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_max_records(20)
            .with_batch_size(20)
            .with_topics(vec![FetchTopic::default().with_topic_id(topic_id).with_partitions(partitions)])
    }
}

pub(super) fn exercise(c: &mut Conformance, key: ApiKey, v: i16) -> bool {
    let topic_id = c.topic_ids[TOPIC];
    match key {
        ApiKey::ShareGroupHeartbeat => {
            let member = format!("conf-share-hb-{v}");
            let epoch = c.share_join("conf-share-hb", &member);
            let heartbeat = ShareGroupHeartbeatRequest::default()
                .with_group_id(group("conf-share-hb"))
                .with_member_id(s(&member))
                .with_member_epoch(epoch);
            c.call(heartbeat.clone(), v);
            c.call(heartbeat.clone().with_member_epoch(epoch + 5), v);
            c.call(heartbeat.with_member_epoch(-1), v);
        }
        ApiKey::ShareGroupDescribe => {
            c.share_join("conf-share-described", "conf-share-described-member");
            let request = ShareGroupDescribeRequest::default()
                .with_group_ids(vec![group("conf-share-described"), group(FIXTURE_GROUP), group("conf-unknown-group")])
                .with_include_authorized_operations(true);
            c.call(request, v);
        }
        ApiKey::ShareFetch | ApiKey::ShareAcknowledge => {
            c.share_join(SHARE_GROUP, SHARE_MEMBER);
            // A new session over every partition, then acknowledgements of what came.
            let opened = c.call(c.share_fetch_request(0, Vec::new()), 1);
            let mut acks = Vec::new();
            for topic in opened.iter().flat_map(|r| r.responses.iter()) {
                for p in &topic.partitions {
                    for a in &p.acquired_records {
                        acks.push((p.partition_index, a.first_offset, a.last_offset, 1));
                    }
                }
            }
            let renews: Vec<(i32, i64, i64, i8)> =
                acks.iter().map(|&(p, first, last, _)| (p, first, last, 4)).collect();
            let mut epoch = 1;
            if key == ApiKey::ShareFetch {
                if v >= 2 {
                    // v2 (KIP-1222): a renewing request only acknowledges; one that also
                    // asks for records is refused.
                    let mut renew = c.share_fetch_request(epoch, renews.clone());
                    renew.is_renew_ack = true;
                    c.call(renew.clone(), v);
                    (renew.max_wait_ms, renew.min_bytes, renew.max_bytes, renew.max_records) = (0, 0, 0, 0);
                    c.call(renew, v);
                    epoch += 1;
                }
                c.call(c.share_fetch_request(epoch, acks), v);
                if v >= 2 {
                    // v2 (KIP-1206): record_limit acquires at most MaxRecords records.
                    let mut limited = c.share_fetch_request(epoch + 1, Vec::new());
                    limited.share_acquire_mode = 1;
                    limited.max_records = 3;
                    c.call(limited, v);
                }
                c.call(c.share_fetch_request(7, Vec::new()), v);
                c.call(c.share_fetch_request(-1, Vec::new()), v);
            } else {
                use share_acknowledge_request::{AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch};
                let request = |epoch: i32, ack: i8| {
                    let partitions = (0..TOPIC_PARTITIONS)
                        .map(|p| {
                            let batches = acks
                                .iter()
                                .filter(|a| a.0 == p)
                                .map(|&(_, first, last, _)| {
                                    AcknowledgementBatch::default()
                                        .with_first_offset(first)
                                        .with_last_offset(last)
                                        .with_acknowledge_types(vec![ack])
                                })
                                .collect();
                            AcknowledgePartition::default()
                                .with_partition_index(p)
                                .with_acknowledgement_batches(batches)
                        })
                        .collect();
                    ShareAcknowledgeRequest::default()
                        .with_group_id(Some(group(SHARE_GROUP)))
                        .with_member_id(Some(s(SHARE_MEMBER)))
                        .with_share_session_epoch(epoch)
                        .with_topics(vec![AcknowledgeTopic::default()
                            .with_topic_id(topic_id)
                            .with_partitions(partitions)])
                };
                if v >= 2 {
                    // v2 (KIP-1222): the locks renewed, then the records released.
                    let mut renew = request(epoch, 4);
                    renew.is_renew_ack = true;
                    c.call(renew, v);
                    epoch += 1;
                }
                c.call(request(epoch, 2), v);
                c.call(request(-1, 2), v);
            }
        }
        ApiKey::DescribeShareGroupOffsets => {
            use describe_share_group_offsets_request::{
                DescribeShareGroupOffsetsRequestGroup as Group, DescribeShareGroupOffsetsRequestTopic as Topic,
            };
            c.share_join(SHARE_GROUP, SHARE_MEMBER);
            let request = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
                Group::default().with_group_id(group(SHARE_GROUP)).with_topics(None),
                Group::default().with_group_id(group(SHARE_GROUP)).with_topics(Some(vec![
                    Topic::default().with_topic_name(topic(TOPIC)).with_partitions(vec![0, 1, 99]),
                    Topic::default().with_topic_name(topic("conf-no-such-topic")).with_partitions(vec![0]),
                ])),
                Group::default().with_group_id(group("conf-unknown-group")).with_topics(None),
            ]);
            c.call(request, v);
        }
        ApiKey::AlterShareGroupOffsets => {
            use alter_share_group_offsets_request::{
                AlterShareGroupOffsetsRequestPartition as Partition, AlterShareGroupOffsetsRequestTopic as Topic,
            };
            let topics = vec![
                Topic::default().with_topic_name(topic(TOPIC)).with_partitions(vec![
                    Partition::default().with_partition_index(0).with_start_offset(0),
                    Partition::default().with_partition_index(1).with_start_offset(2),
                    Partition::default().with_partition_index(99).with_start_offset(0),
                ]),
                Topic::default()
                    .with_topic_name(topic("conf-no-such-topic"))
                    .with_partitions(vec![Partition::default().with_partition_index(0)]),
            ];
            let request = AlterShareGroupOffsetsRequest::default()
                .with_group_id(group(&format!("conf-share-alter-{v}")))
                .with_topics(topics);
            c.call(request.clone(), v);
            // A group with members is refused.
            c.share_join(SHARE_GROUP, SHARE_MEMBER);
            c.call(request.with_group_id(group(SHARE_GROUP)), v);
        }
        ApiKey::DeleteShareGroupOffsets => {
            use delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic as Topic;
            let name = format!("conf-share-delete-{v}");
            let alter = AlterShareGroupOffsetsRequest::default().with_group_id(group(&name)).with_topics(vec![
                alter_share_group_offsets_request::AlterShareGroupOffsetsRequestTopic::default()
                    .with_topic_name(topic(TOPIC))
                    .with_partitions(vec![
                        alter_share_group_offsets_request::AlterShareGroupOffsetsRequestPartition::default()
                            .with_partition_index(0)
                            .with_start_offset(1),
                    ]),
            ]);
            c.call(alter, 0);
            let request = DeleteShareGroupOffsetsRequest::default().with_group_id(group(&name)).with_topics(vec![
                Topic::default().with_topic_name(topic(TOPIC)),
                Topic::default().with_topic_name(topic("conf-no-such-topic")),
            ]);
            c.call(request, v);
            c.call(DeleteShareGroupOffsetsRequest::default().with_group_id(group("conf-unknown-group")), v);
        }
        ApiKey::InitializeShareGroupState
        | ApiKey::ReadShareGroupState
        | ApiKey::WriteShareGroupState
        | ApiKey::DeleteShareGroupState
        | ApiKey::ReadShareGroupStateSummary => state(c, key, v, topic_id),
        _ => return false,
    }
    true
}

/// The share coordinator's RPCs, as another broker sends them: a share-partition's
/// state initialized, read, written with batches, summarized and deleted.
fn state(c: &mut Conformance, key: ApiKey, v: i16, topic_id: Uuid) {
    let group_id = s(&format!("conf-state-{}", key as i16));
    let init = InitializeShareGroupStateRequest::default().with_group_id(group_id.clone()).with_topics(vec![
        initialize_share_group_state_request::InitializeStateData::default().with_topic_id(topic_id).with_partitions(
            (0..TOPIC_PARTITIONS)
                .map(|p| {
                    initialize_share_group_state_request::PartitionData::default()
                        .with_partition(p)
                        .with_state_epoch(1)
                        .with_start_offset(p as i64)
                })
                .collect(),
        ),
    ]);
    c.call(init, if key == ApiKey::InitializeShareGroupState { v } else { 0 });
    match key {
        ApiKey::InitializeShareGroupState => {}
        ApiKey::ReadShareGroupState => {
            use read_share_group_state_request::{PartitionData, ReadStateData};
            let partitions = (0..TOPIC_PARTITIONS)
                .map(|p| PartitionData::default().with_partition(p).with_leader_epoch(3))
                .collect();
            c.call(
                ReadShareGroupStateRequest::default()
                    .with_group_id(group_id)
                    .with_topics(vec![ReadStateData::default().with_topic_id(topic_id).with_partitions(partitions)]),
                v,
            );
        }
        ApiKey::WriteShareGroupState => {
            use write_share_group_state_request::{PartitionData, StateBatch, WriteStateData};
            let batches = vec![
                StateBatch::default()
                    .with_first_offset(0)
                    .with_last_offset(4)
                    .with_delivery_state(2)
                    .with_delivery_count(1),
                StateBatch::default()
                    .with_first_offset(5)
                    .with_last_offset(6)
                    .with_delivery_state(0)
                    .with_delivery_count(2),
                StateBatch::default()
                    .with_first_offset(7)
                    .with_last_offset(7)
                    .with_delivery_state(4)
                    .with_delivery_count(5),
            ];
            let partitions = (0..TOPIC_PARTITIONS)
                .map(|p| {
                    PartitionData::default()
                        .with_partition(p)
                        .with_state_epoch(1)
                        .with_leader_epoch(1)
                        .with_start_offset(0)
                        .with_state_batches(batches.clone())
                })
                .collect();
            let request = WriteShareGroupStateRequest::default()
                .with_group_id(group_id)
                .with_topics(vec![WriteStateData::default().with_topic_id(topic_id).with_partitions(partitions)]);
            c.call(request.clone(), v);
            // An older state epoch is fenced.
            let mut stale = request;
            for p in &mut stale.topics[0].partitions {
                p.state_epoch = 0;
            }
            c.call(stale, v);
        }
        ApiKey::DeleteShareGroupState => {
            use delete_share_group_state_request::{DeleteStateData, PartitionData};
            let partitions = (0..TOPIC_PARTITIONS).map(|p| PartitionData::default().with_partition(p)).collect();
            c.call(
                DeleteShareGroupStateRequest::default()
                    .with_group_id(group_id)
                    .with_topics(vec![DeleteStateData::default().with_topic_id(topic_id).with_partitions(partitions)]),
                v,
            );
        }
        _ => {
            use read_share_group_state_summary_request::{PartitionData, ReadStateSummaryData};
            let partitions = (0..TOPIC_PARTITIONS).map(|p| PartitionData::default().with_partition(p)).collect();
            c.call(
                ReadShareGroupStateSummaryRequest::default().with_group_id(group_id).with_topics(vec![
                    ReadStateSummaryData::default().with_topic_id(topic_id).with_partitions(partitions),
                ]),
                v,
            );
        }
    }
}
