//! StreamsGroupHeartbeat and StreamsGroupDescribe sent raw, each answer as Apache Kafka
//! 4.4 gives it (run with SKEIN_TEST_EXTERNAL_BOOTSTRAP=host:port to check them there):
//! Kafka's messages for malformed heartbeats, the statuses of a topology whose topics
//! are missing, the internal topics the broker creates, and the tasks it then hands
//! out.

use super::*;

use common::RawClient;
use kafka_protocol::messages::streams_group_heartbeat_request::{Subtopology, TopicInfo, Topology};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

/// One subtopology reading `input` and keeping the store `<app>-store-changelog`.
fn topology(app: &str, input: &str) -> Topology {
    Topology::default().with_epoch(0).with_subtopologies(vec![Subtopology::default()
        .with_subtopology_id(s("0"))
        .with_source_topics(vec![TopicName(s(input))])
        .with_state_changelog_topics(vec![
            TopicInfo::default().with_name(TopicName(s(&format!("{app}-store-changelog"))))
        ])])
}

fn join(app: &str, input: &str) -> StreamsGroupHeartbeatRequest {
    StreamsGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(app)))
        .with_member_id(s("member-1"))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_process_id(Some(s("process-1")))
        .with_topology(Some(topology(app, input)))
        .with_active_tasks(Some(Vec::new()))
        .with_standby_tasks(Some(Vec::new()))
        .with_warmup_tasks(Some(Vec::new()))
}

/// Heartbeats until the coordinator has loaded the group's partition.
fn heartbeat(client: &mut RawClient, request: &StreamsGroupHeartbeatRequest) -> StreamsGroupHeartbeatResponse {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let response = client.call(request, 1);
        let loading = [14, 15, 16].contains(&response.error_code);
        if !loading || Instant::now() > deadline {
            return response;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn statuses(response: &StreamsGroupHeartbeatResponse) -> Vec<(i8, String)> {
    response.status.iter().flatten().map(|s| (s.status_code, s.status_detail.to_string())).collect()
}

#[test]
fn streams_group_heartbeats_answer_as_kafka_4_4() {
    let dir = tempfile::tempdir().unwrap();
    let (_broker, bootstrap, suffix) = common::local_or_external(dir.path());
    let app = format!("raw-app{suffix}");
    let input = format!("raw-input{suffix}");
    let mut client = RawClient::connect(&bootstrap);
    let nobody = format!("nobody{suffix}");
    common::find_group_coordinator(&mut client, &app);
    common::find_group_coordinator(&mut client, &nobody);

    // Malformed heartbeats, refused before the coordinator, with Kafka's messages.
    let refused = |client: &mut RawClient, request: StreamsGroupHeartbeatRequest| {
        let response = heartbeat(client, &request);
        (response.error_code, response.error_message.map(|m| m.to_string()).unwrap_or_default())
    };
    let invalid = |m: &str| (42i16, m.to_string());
    assert_eq!(refused(&mut client, join(&app, &input).with_member_id(s(""))), invalid("MemberId can't be empty."));
    assert_eq!(
        refused(&mut client, join(&app, &input).with_rebalance_timeout_ms(-1)),
        invalid("RebalanceTimeoutMs must be provided in first request.")
    );
    assert_eq!(
        refused(&mut client, join(&app, &input).with_topology(None)),
        invalid("Topology must be non-null when (re-)joining.")
    );
    let mut sized = topology(&app, &input);
    sized.subtopologies[0].state_changelog_topics[0].partitions = 3;
    let (code, message) = refused(&mut client, join(&app, &input).with_topology(Some(sized)));
    assert_eq!(code, 130, "STREAMS_INVALID_TOPOLOGY: {message}");
    // A member of a group that does not exist.
    let unknown = join(&nobody, &input).with_member_epoch(1).with_topology(None);
    assert_eq!(refused(&mut client, unknown).0, 69, "GROUP_ID_NOT_FOUND");

    // The input topic is missing: the member joins, gets no tasks and is told why,
    // and that the first assignment waits for the initial rebalance delay.
    let joined = heartbeat(&mut client, &join(&app, &input));
    assert_eq!(joined.error_code, 0, "{:?}", joined.error_message);
    assert_eq!(joined.member_epoch, 1);
    let delayed = (5, "Assignment delayed due to the configured initial rebalance delay.".to_string());
    assert_eq!(statuses(&joined), vec![delayed, (1, format!("Source topics {input} are missing."))]);
    assert_eq!(joined.active_tasks.as_ref().map(Vec::len), Some(0));

    // Once the input exists the broker creates the changelog, with the input's
    // partition count, and hands the member every task.
    let mut admin = RawClient::connect(&bootstrap);
    let create = CreateTopicsRequest::default()
        .with_topics(vec![common::creatable_topic(&input, 3, &[])])
        .with_timeout_ms(10_000);
    assert_eq!(admin.call(&create, 7).topics[0].error_code, 0);
    let beat = |epoch: i32, active: Vec<i32>| {
        let tasks =
            streams_group_heartbeat_request::TaskIds::default().with_subtopology_id(s("0")).with_partitions(active);
        StreamsGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(&app)))
            .with_member_id(s("member-1"))
            .with_member_epoch(epoch)
            .with_active_tasks(Some(vec![tasks]))
            .with_standby_tasks(Some(Vec::new()))
            .with_warmup_tasks(Some(Vec::new()))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut epoch = joined.member_epoch;
    let assigned = loop {
        let response = heartbeat(&mut client, &beat(epoch, Vec::new()));
        assert_eq!(response.error_code, 0, "{:?}", response.error_message);
        epoch = response.member_epoch;
        if let Some(tasks) = response.active_tasks.clone().filter(|t| !t.is_empty()) {
            break (response.member_epoch, tasks);
        }
        assert!(Instant::now() < deadline, "no tasks: {:?}", statuses(&response));
        std::thread::sleep(Duration::from_millis(200));
    };
    let (epoch, tasks) = assigned;
    assert_eq!(tasks[0].partitions, vec![0, 1, 2]);
    let metadata = MetadataRequest::default()
        .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default()
            .with_name(Some(TopicName(s(&format!("{app}-store-changelog")))))]));
    let changelog = admin.call(&metadata, 12);
    assert_eq!((changelog.topics[0].error_code, changelog.topics[0].partitions.len()), (0, 3));

    // A newer epoch than the member's is fenced; a task beyond the count is refused.
    assert_eq!(heartbeat(&mut client, &beat(epoch + 5, vec![0, 1, 2])).error_code, 110, "FENCED_MEMBER_EPOCH");
    let beyond = heartbeat(&mut client, &beat(epoch, vec![7]));
    assert_eq!(
        (beyond.error_code, beyond.error_message.map(|m| m.to_string())),
        (42, Some("Task 7 for subtopology 0 is invalid. Number of tasks for this subtopology: 3".into()))
    );

    // StreamsGroupDescribe: the member with its tasks, the group stable.
    let describe = StreamsGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(&app))]);
    let described = client.call(&describe, 0).groups.remove(0);
    assert_eq!((described.error_code, described.group_state.as_str()), (0, "Stable"));
    assert_eq!(described.members.len(), 1);
    assert_eq!(described.members[0].assignment.active_tasks[0].partitions, vec![0, 1, 2]);
    assert_eq!(described.topology.map(|t| t.epoch), Some(0));

    // It leaves: the group is empty and may be deleted.
    let leave = beat(-1, Vec::new());
    assert_eq!(heartbeat(&mut client, &leave).member_epoch, -1);
    let described = client.call(&describe, 0).groups.remove(0);
    assert_eq!(described.group_state.as_str(), "Empty");
    let delete = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(&app))]);
    assert_eq!(client.call(&delete, 2).results[0].error_code, 0);
    let gone = client.call(&describe, 0).groups.remove(0);
    assert_eq!(gone.error_code, 69, "GROUP_ID_NOT_FOUND once deleted");
}

// A streams member outlives its coordinator's restart: its metadata and tasks are in
// `__consumer_offsets`, so after the broker comes back the member heartbeats on at
// its epoch with its tasks, not told UNKNOWN_MEMBER_ID.
#[test]
fn streams_members_outlive_a_coordinator_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path(), "2", &["--group-initial-rebalance-delay-ms", "0"]);
    let mut client = RawClient::connect(&broker.bootstrap());
    let (app, input) = ("restart-app", "restart-input");
    common::find_group_coordinator(&mut client, app);
    let create = CreateTopicsRequest::default()
        .with_topics(vec![common::creatable_topic(input, 2, &[])])
        .with_timeout_ms(10_000);
    assert_eq!(client.call(&create, 7).topics[0].error_code, 0);
    let beat = |epoch: i32, active: Vec<i32>| {
        let tasks =
            streams_group_heartbeat_request::TaskIds::default().with_subtopology_id(s("0")).with_partitions(active);
        StreamsGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(app)))
            .with_member_id(s("member-1"))
            .with_member_epoch(epoch)
            .with_active_tasks(Some(vec![tasks]))
            .with_standby_tasks(Some(Vec::new()))
            .with_warmup_tasks(Some(Vec::new()))
    };
    let joined = heartbeat(&mut client, &join(app, input));
    assert_eq!(joined.error_code, 0, "{:?}", joined.error_message);
    let (mut epoch, mut tasks) = (joined.member_epoch, Vec::new());
    let deadline = Instant::now() + Duration::from_secs(30);
    while tasks.len() < 2 {
        let response = heartbeat(&mut client, &beat(epoch, tasks.clone()));
        assert_eq!(response.error_code, 0, "{:?}", response.error_message);
        epoch = response.member_epoch;
        if let Some(active) = &response.active_tasks {
            tasks = active.iter().flat_map(|t| t.partitions.clone()).collect();
        }
        assert!(Instant::now() < deadline, "no tasks: {:?}", statuses(&response));
        std::thread::sleep(Duration::from_millis(200));
    }
    broker.stop();
    broker.restart();
    let mut client = RawClient::connect(&broker.bootstrap());
    common::find_group_coordinator(&mut client, app);
    let after = heartbeat(&mut client, &beat(epoch, tasks.clone()));
    assert_eq!((after.error_code, after.member_epoch), (0, epoch), "{:?}", after.error_message);
    let describe = StreamsGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(app))]);
    let described = client.call(&describe, 0).groups.remove(0);
    assert_eq!(described.members.len(), 1);
    let mut held: Vec<i32> =
        described.members[0].assignment.active_tasks.iter().flat_map(|t| t.partitions.clone()).collect();
    held.sort();
    assert_eq!(held, vec![0, 1]);
}
