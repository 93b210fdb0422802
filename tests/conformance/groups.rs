//! Samples for the group APIs, classic and KIP-848 (FindCoordinator, JoinGroup,
//! SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups,
//! DescribeGroups, DeleteGroups, OffsetDelete, ConsumerGroupHeartbeat and
//! ConsumerGroupDescribe), over the fixture's groups, for `exercise`.

use super::*;

pub fn exercise(c: &mut Conformance, key: ApiKey, v: i16) -> bool {
    match key {
        ApiKey::FindCoordinator => {
            for key_type in [0i8, 1] {
                if key_type == 1 && v == 0 {
                    continue;
                }
                let mut request = FindCoordinatorRequest::default();
                if v >= 1 {
                    request.key_type = key_type;
                }
                if v >= 4 {
                    request.coordinator_keys = vec![s(FIXTURE_GROUP), s("conf-other-group")];
                } else {
                    request.key = s(FIXTURE_GROUP);
                }
                c.call(request, v);
            }
        }
        ApiKey::JoinGroup => {
            let group_name = format!("conf-join-{v}");
            let join = |member_id: &str| {
                let mut request = JoinGroupRequest::default()
                    .with_group_id(group(&group_name))
                    .with_session_timeout_ms(30_000)
                    .with_member_id(s(member_id))
                    .with_protocol_type(s("consumer"))
                    .with_protocols(vec![
                        join_group_request::JoinGroupRequestProtocol::default()
                            .with_name(s("range"))
                            .with_metadata(subscription(&[TOPIC])),
                        join_group_request::JoinGroupRequestProtocol::default()
                            .with_name(s("roundrobin"))
                            .with_metadata(subscription(&[TOPIC])),
                    ]);
                if v >= 1 {
                    request.rebalance_timeout_ms = 20_000;
                }
                if v >= 5 {
                    request.group_instance_id = Some(s(&format!("instance-{v}")));
                }
                if v >= 8 {
                    request.reason = Some(s("conformance"));
                }
                request
            };
            if let Some(first) = c.call(join(""), v) {
                if first.error_code == MEMBER_ID_REQUIRED || (first.error_code == 0 && v >= 5) {
                    c.call(join(first.member_id.as_str()), v);
                }
            }
            // An unknown member of an existing group.
            c.call(join("conf-nobody").with_group_id(group(FIXTURE_GROUP)), v);
        }
        ApiKey::SyncGroup => {
            let group_name = format!("conf-sync-{v}");
            let join = JoinGroupRequest::default()
                .with_group_id(group(&group_name))
                .with_session_timeout_ms(30_000)
                .with_rebalance_timeout_ms(30_000)
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default()
                    .with_name(s("range"))
                    .with_metadata(subscription(&[TOPIC]))]);
            let first = c.call(join.clone(), JOIN_VERSION_MAX).expect("join");
            let joined = c.call(join.with_member_id(first.member_id), JOIN_VERSION_MAX).expect("join");
            let member =
                Member { group: group_name, id: joined.member_id.to_string(), generation: joined.generation_id };
            let request = c.sync_request(&member, v);
            c.call(request, v);
            let wrong = c.sync_request(&Member { generation: member.generation + 5, ..member }, v);
            c.call(wrong, v);
        }
        ApiKey::Heartbeat => {
            let member = c.member(&format!("conf-heartbeat-{v}"));
            let request = HeartbeatRequest::default()
                .with_group_id(group(&member.group))
                .with_generation_id(member.generation)
                .with_member_id(s(&member.id));
            c.call(request.clone(), v);
            c.call(request.with_generation_id(member.generation + 1), v);
        }
        ApiKey::LeaveGroup => {
            let member = c.member(&format!("conf-leave-{v}"));
            let mut request = LeaveGroupRequest::default().with_group_id(group(&member.group));
            if v >= 3 {
                let mut identity = leave_group_request::MemberIdentity::default().with_member_id(s(&member.id));
                if v >= 5 {
                    identity.reason = Some(s("conformance"));
                }
                let stranger = leave_group_request::MemberIdentity::default().with_member_id(s("conf-stranger"));
                request.members = vec![identity, stranger];
            } else {
                request.member_id = s(&member.id);
            }
            c.call(request, v);
        }
        ApiKey::OffsetCommit => {
            let member = c.member(&format!("conf-commit-{v}"));
            let request = c.commit_request(Some(&member), &member.group, v);
            c.call(request, v);
            let simple = c.commit_request(None, &format!("conf-simple-{v}"), v);
            c.call(simple, v);
            let stale = c.commit_request(Some(&Member { generation: 99, ..member.clone() }), &member.group, v);
            c.call(stale, v);
        }
        ApiKey::OffsetFetch => {
            if v >= 8 {
                let groups = [FIXTURE_GROUP, "conf-simple", "conf-unknown-group"]
                    .iter()
                    .map(|g| {
                        let mut wanted =
                            offset_fetch_request::OffsetFetchRequestGroup::default().with_group_id(group(g));
                        if *g == "conf-simple" {
                            wanted.topics = Some(vec![offset_fetch_request::OffsetFetchRequestTopics::default()
                                .with_name(topic(TOPIC))
                                .with_partition_indexes(vec![0, 1, 7])]);
                        }
                        if v >= 9 {
                            wanted.member_epoch = -1;
                        }
                        wanted
                    })
                    .collect();
                c.call(OffsetFetchRequest::default().with_groups(groups).with_require_stable(true), v);
            } else {
                let topics = Some(vec![offset_fetch_request::OffsetFetchRequestTopic::default()
                    .with_name(topic(TOPIC))
                    .with_partition_indexes(vec![0, 1, 2, 3, 9])]);
                let mut request = OffsetFetchRequest::default().with_group_id(group(FIXTURE_GROUP)).with_topics(topics);
                if v >= 7 {
                    request.require_stable = true;
                }
                c.call(request.clone(), v);
                if v >= 2 {
                    c.call(request.clone().with_topics(None), v);
                }
                c.call(request.with_group_id(group("conf-unknown-group")), v);
            }
        }
        ApiKey::ListGroups => {
            let mut request = ListGroupsRequest::default();
            c.call(request.clone(), v);
            if v >= 4 {
                request.states_filter = vec![s("Stable"), s("Empty")];
            }
            if v >= 5 {
                request.types_filter = vec![s("classic"), s("consumer")];
            }
            c.call(request, v);
        }
        ApiKey::DescribeGroups => {
            let mut request = DescribeGroupsRequest::default().with_groups(vec![
                group(FIXTURE_GROUP),
                group("conf-simple"),
                group("conf-unknown-group"),
                group(FIXTURE_GROUP_848),
            ]);
            if v >= 3 {
                request.include_authorized_operations = true;
            }
            if let Some(response) = c.call(request, v) {
                if v >= 3 && response.groups.iter().any(|g| g.authorized_operations == i32::MIN) {
                    c.failures.push(format!("DescribeGroups v{v}: authorized operations requested but not answered"));
                }
                // KIP-1043: from v6 an unknown group, or one of another protocol, is
                // GROUP_ID_NOT_FOUND; before, only Dead.
                let code_of =
                    |name: &str| response.groups.iter().find(|g| g.group_id.0.as_str() == name).map(|g| g.error_code);
                let wanted = if v >= 6 { Some(69) } else { Some(0) };
                if code_of("conf-unknown-group") != wanted || code_of(FIXTURE_GROUP_848) != wanted {
                    c.failures.push(format!("DescribeGroups v{v} unknown and consumer-protocol groups: {response:?}"));
                }
            }
        }
        ApiKey::DeleteGroups => {
            let name = format!("conf-deleted-{v}");
            let commit = c.commit_request(None, &name, 9);
            c.call(commit, 9);
            let request = DeleteGroupsRequest::default().with_groups_names(vec![
                group(&name),
                group(FIXTURE_GROUP),
                group("conf-unknown-group"),
            ]);
            c.call(request, v);
        }
        ApiKey::OffsetDelete => {
            let request = OffsetDeleteRequest::default().with_group_id(group("conf-offset-delete")).with_topics(vec![
                offset_delete_request::OffsetDeleteRequestTopic::default().with_name(topic(TOPIC)).with_partitions(
                    vec![
                        offset_delete_request::OffsetDeleteRequestPartition::default().with_partition_index(0),
                        offset_delete_request::OffsetDeleteRequestPartition::default().with_partition_index(11),
                    ],
                ),
            ]);
            c.call(request, v);
            let busy = OffsetDeleteRequest::default().with_group_id(group(FIXTURE_GROUP)).with_topics(vec![
                offset_delete_request::OffsetDeleteRequestTopic::default().with_name(topic(TOPIC)).with_partitions(
                    vec![offset_delete_request::OffsetDeleteRequestPartition::default().with_partition_index(1)],
                ),
            ]);
            c.call(busy, v);
        }
        ApiKey::ConsumerGroupHeartbeat => {
            c.consumer_heartbeat(&format!("conf-848-{v}"), v);
        }
        ApiKey::ConsumerGroupDescribe => {
            let request = ConsumerGroupDescribeRequest::default()
                .with_group_ids(vec![group(FIXTURE_GROUP_848), group(FIXTURE_GROUP), group("conf-unknown-group")])
                .with_include_authorized_operations(true);
            c.call(request, v);
        }
        ApiKey::StreamsGroupHeartbeat => {
            // A member joins with a topology over the fixture topic, then heartbeats
            // with the tasks it was given; one more leaves.
            use streams_group_heartbeat_request::{Subtopology, TaskIds, TopicInfo, Topology};
            let app = format!("conf-streams-{v}");
            let changelog = TopicInfo::default()
                .with_name(topic(&format!("{app}-store-changelog")))
                .with_topic_configs(vec![streams_group_heartbeat_request::KeyValue::default()
                    .with_key(s("cleanup.policy"))
                    .with_value(s("compact"))]);
            let topology = Topology::default().with_epoch(0).with_subtopologies(vec![Subtopology::default()
                .with_subtopology_id(s("0"))
                .with_source_topics(vec![topic(TOPIC)])
                .with_state_changelog_topics(vec![changelog])]);
            let join = StreamsGroupHeartbeatRequest::default()
                .with_group_id(group(&app))
                .with_member_id(s(&uuid_member()))
                .with_member_epoch(0)
                .with_rebalance_timeout_ms(30_000)
                .with_process_id(Some(s(&uuid_member())))
                .with_user_endpoint(Some(
                    streams_group_heartbeat_request::Endpoint::default().with_host(s("localhost")).with_port(8080),
                ))
                .with_client_tags(Some(vec![streams_group_heartbeat_request::KeyValue::default()
                    .with_key(s("zone"))
                    .with_value(s("a"))]))
                .with_topology(Some(topology))
                .with_active_tasks(Some(vec![]))
                .with_standby_tasks(Some(vec![]))
                .with_warmup_tasks(Some(vec![]));
            let Some(joined) = c.call(join.clone(), v) else { return true };
            let owned = joined.active_tasks.unwrap_or_default();
            let again = join
                .with_member_id(joined.member_id.clone())
                .with_member_epoch(joined.member_epoch)
                .with_topology(None)
                .with_rebalance_timeout_ms(-1)
                .with_active_tasks(Some(
                    owned
                        .iter()
                        .map(|t| {
                            TaskIds::default()
                                .with_subtopology_id(t.subtopology_id.clone())
                                .with_partitions(t.partitions.clone())
                        })
                        .collect(),
                ))
                .with_endpoint_information_epoch(-1);
            c.call(again.clone(), v);
            c.call(again.with_member_epoch(-1), v);
        }
        ApiKey::StreamsGroupDescribe => {
            let request = StreamsGroupDescribeRequest::default()
                .with_group_ids(vec![group(&format!("conf-streams-{v}")), group(FIXTURE_GROUP), group("conf-unknown")])
                .with_include_authorized_operations(true);
            c.call(request, v);
        }
        _ => return super::transactions::exercise(c, key, v),
    }
    true
}
