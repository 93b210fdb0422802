//! Every advertised (API, version) pair answers a request with realistic, populated
//! fields on a live broker with real topics, data, groups and producers, and its
//! response encodes and decodes again at that version.
//!
//! The loop is driven by `skein_net::registry::APIS`, so a new version is covered with
//! no new code, and a new API fails here until it has a sample request. A handler that
//! sets a field its version lacks makes the broker's encoder fail; the broker then
//! answers with an error response or closes the connection and logs
//! `response encoding failed`, which this test reports with the API and version.

mod common;
#[path = "conformance/groups.rs"]
mod groups;
#[path = "conformance/security.rs"]
mod security;
#[path = "conformance/shares.rs"]
mod shares;
#[path = "conformance/transactions.rs"]
mod transactions;

use bytes::{BufMut, Bytes, BytesMut};
use common::{Broker, RawClient};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use uuid::Uuid;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn topic(name: &str) -> TopicName {
    TopicName(s(name))
}

fn group(name: &str) -> GroupId {
    GroupId(s(name))
}

const TOPIC: &str = "conf";
const TOPIC_PARTITIONS: i32 = 4;
const FIXTURE_GROUP: &str = "conf-group";
const FIXTURE_GROUP_848: &str = "conf-group-848";
const MEMBER_ID_REQUIRED: i16 = 79;
const JOIN_VERSION_MAX: i16 = 9;

/// Kafka's ConsumerProtocolSubscription v0 for `topics`.
fn subscription(topics: &[&str]) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(0);
    out.put_i32(topics.len() as i32);
    for t in topics {
        out.put_i16(t.len() as i16);
        out.put_slice(t.as_bytes());
    }
    out.put_i32(-1);
    out.freeze()
}

/// Kafka's ConsumerProtocolAssignment v0 giving every partition of `TOPIC`.
fn assignment() -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(0);
    out.put_i32(1);
    out.put_i16(TOPIC.len() as i16);
    out.put_slice(TOPIC.as_bytes());
    out.put_i32(TOPIC_PARTITIONS);
    for p in 0..TOPIC_PARTITIONS {
        out.put_i32(p);
    }
    out.put_i32(-1);
    out.freeze()
}

/// A batch of `count` records with a key each, optionally from an idempotent producer.
fn records(count: i32, producer: Option<(i64, i16, i32)>) -> Bytes {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let mut bytes =
        skein_engine::batch::testing::batch_with(count, 64, now, |i| Some(format!("key-{i}").into_bytes())).to_vec();
    if let Some((pid, epoch, seq)) = producer {
        skein_engine::batch::testing::set_producer(&mut bytes, pid, epoch, seq);
    }
    Bytes::from(bytes)
}

/// The broker under test, a connection to it, and what went wrong so far.
struct Conformance {
    broker: Broker,
    client: RawClient,
    failures: Vec<String>,
    log_seen: usize,
    topic_ids: std::collections::HashMap<String, Uuid>,
    producer: (i64, i16),
    sequence: i32,
    calls: usize,
}

#[derive(Clone, Debug)]
struct Member {
    group: String,
    id: String,
    generation: i32,
}

impl Conformance {
    /// Sends `request` at `version`; the response must arrive, decode at `version`,
    /// encode again, and leave no encoding failure in the broker's log.
    fn call<R: Request + std::fmt::Debug>(&mut self, request: R, version: i16) -> Option<R::Response> {
        let what = format!("{:?} v{version}", ApiKey::try_from(R::KEY).unwrap());
        self.calls += 1;
        let frame = self.client.frame(&request, version);
        self.client.send_bytes(&frame);
        let answer = self.client.read_frame();
        let log = self.broker.log();
        let fresh = log[self.log_seen..].to_string();
        self.log_seen = log.len();
        for line in fresh.lines().filter(|l| l.contains("response encoding failed")) {
            self.failures.push(format!("{what}: {line}"));
        }
        let Some(mut body) = answer else {
            self.failures.push(format!("{what}: connection closed, request {request:?}"));
            self.client = RawClient::connect(&self.broker.bootstrap());
            return None;
        };
        let key = ApiKey::try_from(R::KEY).unwrap();
        if let Err(e) = ResponseHeader::decode(&mut body, key.response_header_version(version)) {
            self.failures.push(format!("{what}: bad response header: {e}"));
            return None;
        }
        let response = match R::Response::decode(&mut body, version) {
            Ok(response) => response,
            Err(e) => {
                self.failures.push(format!("{what}: response does not decode: {e}"));
                return None;
            }
        };
        if !body.is_empty() {
            self.failures.push(format!("{what}: {} bytes after the response", body.len()));
        }
        let mut again = BytesMut::new();
        if let Err(e) = response.encode(&mut again, version) {
            self.failures.push(format!("{what}: decoded response does not encode again: {e}"));
        }
        Some(response)
    }

    fn create_topic(&mut self, name: &str, partitions: i32, configs: &[(&str, &str)]) {
        let mut t = create_topics_request::CreatableTopic::default()
            .with_name(topic(name))
            .with_num_partitions(partitions)
            .with_replication_factor(1);
        for (k, v) in configs {
            t.configs
                .push(create_topics_request::CreatableTopicConfig::default().with_name(s(k)).with_value(Some(s(v))));
        }
        let response = self
            .call(CreateTopicsRequest::default().with_topics(vec![t]).with_timeout_ms(10_000), 7)
            .expect("create topic");
        assert_eq!(response.topics[0].error_code, 0, "create {name}: {:?}", response.topics[0]);
        self.topic_ids.insert(name.to_string(), response.topics[0].topic_id);
    }

    fn produce_to(&mut self, name: &str, partition: i32, batch: Bytes) {
        let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![
            produce_request::TopicProduceData::default().with_name(topic(name)).with_partition_data(vec![
                produce_request::PartitionProduceData::default().with_index(partition).with_records(Some(batch)),
            ]),
        ]);
        let response = self.call(request, 9).expect("produce");
        assert_eq!(response.responses[0].partition_responses[0].error_code, 0, "produce to {name}-{partition}");
    }

    /// Joins `group_name` as a new classic member at the newest version and syncs.
    fn member(&mut self, group_name: &str) -> Member {
        let join = |member_id: &str| {
            JoinGroupRequest::default()
                .with_group_id(group(group_name))
                .with_session_timeout_ms(45_000)
                .with_rebalance_timeout_ms(30_000)
                .with_member_id(s(member_id))
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default()
                    .with_name(s("range"))
                    .with_metadata(subscription(&[TOPIC]))])
        };
        let first = self.call(join(""), JOIN_VERSION_MAX).expect("join");
        assert_eq!(first.error_code, MEMBER_ID_REQUIRED, "{first:?}");
        let joined = self.call(join(first.member_id.as_str()), JOIN_VERSION_MAX).expect("join");
        assert_eq!(joined.error_code, 0, "{joined:?}");
        let member =
            Member { group: group_name.into(), id: joined.member_id.to_string(), generation: joined.generation_id };
        let synced = self.call(self.sync_request(&member, 5), 5).expect("sync");
        assert_eq!(synced.error_code, 0, "{synced:?}");
        member
    }

    fn sync_request(&self, member: &Member, version: i16) -> SyncGroupRequest {
        let mut request = SyncGroupRequest::default()
            .with_group_id(group(&member.group))
            .with_generation_id(member.generation)
            .with_member_id(s(&member.id))
            .with_assignments(vec![sync_group_request::SyncGroupRequestAssignment::default()
                .with_member_id(s(&member.id))
                .with_assignment(assignment())]);
        if version >= 5 {
            request.protocol_type = Some(s("consumer"));
            request.protocol_name = Some(s("range"));
        }
        request
    }

    fn commit_request(&self, member: Option<&Member>, group_name: &str, version: i16) -> OffsetCommitRequest {
        let partitions = (0..TOPIC_PARTITIONS)
            .map(|p| {
                let mut partition = offset_commit_request::OffsetCommitRequestPartition::default()
                    .with_partition_index(p)
                    .with_committed_offset(1 + p as i64)
                    .with_committed_metadata(Some(s("conformance")));
                if version >= 6 {
                    partition.committed_leader_epoch = 0;
                }
                partition
            })
            .collect();
        let mut request = OffsetCommitRequest::default().with_group_id(group(group_name)).with_topics(vec![
            offset_commit_request::OffsetCommitRequestTopic::default()
                .with_name(topic(TOPIC))
                .with_partitions(partitions),
        ]);
        match member {
            Some(m) => {
                request.generation_id_or_member_epoch = m.generation;
                request.member_id = s(&m.id);
            }
            None => request.generation_id_or_member_epoch = -1,
        }
        if (2..=4).contains(&version) {
            request.retention_time_ms = -1;
        }
        request
    }

    fn consumer_heartbeat(&mut self, group_name: &str, version: i16) -> Option<ConsumerGroupHeartbeatResponse> {
        let member_id = if version >= 1 { uuid_member() } else { String::new() };
        let request = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(group(group_name))
            .with_member_id(s(&member_id))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_names(Some(vec![topic(TOPIC)]))
            .with_server_assignor(Some(s("uniform")))
            .with_topic_partitions(Some(vec![]));
        let first = self.call(request.clone(), version)?;
        let again = request
            .with_member_id(first.member_id.clone().unwrap_or_default())
            .with_member_epoch(first.member_epoch)
            .with_subscribed_topic_names(None)
            .with_server_assignor(None)
            .with_topic_partitions(None);
        self.call(again, version)
    }

    fn next_batch(&mut self, count: i32) -> Bytes {
        let (pid, epoch) = self.producer;
        let batch = records(count, Some((pid, epoch, self.sequence)));
        self.sequence += count;
        batch
    }
}

fn uuid_member() -> String {
    // A KIP-848 client generates its member id (v1).
    Uuid::new_v4().simple().to_string()
}

/// Topics, data, groups and a producer for the requests to work on.
fn setup() -> (Conformance, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &["--group-initial-rebalance-delay-ms", "0", "--num-partitions", "2"]);
    let client = RawClient::connect(&broker.bootstrap());
    let mut c = Conformance {
        broker,
        client,
        failures: Vec::new(),
        log_seen: 0,
        topic_ids: Default::default(),
        producer: (-1, -1),
        sequence: 0,
        calls: 0,
    };
    c.create_topic(TOPIC, TOPIC_PARTITIONS, &[("retention.ms", "86400000")]);
    c.create_topic("conf-compact", 1, &[("cleanup.policy", "compact")]);
    c.create_topic("conf-records", 2, &[]);
    for v in 0..=16 {
        c.create_topic(&format!("conf-grow-{v}"), 1, &[]);
        c.create_topic(&format!("conf-delete-{v}"), 1, &[]);
    }
    let init = c
        .call(InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(-1), 4)
        .expect("init producer");
    assert_eq!(init.error_code, 0);
    c.producer = (init.producer_id.0, init.producer_epoch);
    for p in 0..TOPIC_PARTITIONS {
        for _ in 0..3 {
            let batch = records(10, None);
            c.produce_to(TOPIC, p, batch);
        }
    }
    for p in 0..2 {
        for _ in 0..20 {
            c.produce_to("conf-records", p, records(5, None));
        }
    }
    let batch = c.next_batch(5);
    c.produce_to(TOPIC, 0, batch);
    let member = c.member(FIXTURE_GROUP);
    let commit = c.commit_request(Some(&member), FIXTURE_GROUP, 9);
    let committed = c.call(commit, 9).expect("commit");
    assert!(committed.topics[0].partitions.iter().all(|p| p.error_code == 0), "{committed:?}");
    c.consumer_heartbeat(FIXTURE_GROUP_848, 1).expect("consumer group heartbeat");
    for name in ["conf-simple", "conf-offset-delete"] {
        let commit = c.commit_request(None, name, 9);
        c.call(commit, 9).expect("simple commit");
    }
    assert!(c.failures.is_empty(), "fixture failed: {:#?}", c.failures);
    (c, dir)
}

/// Sends the sample requests of `key` at `version`. Returns false when `key` has none.
fn exercise(c: &mut Conformance, key: ApiKey, v: i16) -> bool {
    let topic_id = c.topic_ids[TOPIC];
    match key {
        ApiKey::Produce => {
            let mut partitions: Vec<_> = (0..TOPIC_PARTITIONS)
                .map(|p| {
                    produce_request::PartitionProduceData::default().with_index(p).with_records(Some(records(3, None)))
                })
                .collect();
            // A partition that does not exist, for the error path.
            partitions.push(
                produce_request::PartitionProduceData::default().with_index(99).with_records(Some(records(1, None))),
            );
            let idempotent = c.next_batch(2);
            // v13 names topics by id (KIP-516).
            let named = |c: &Conformance, name: &str| match v >= 13 {
                true => produce_request::TopicProduceData::default().with_topic_id(c.topic_ids[name]),
                false => produce_request::TopicProduceData::default().with_name(topic(name)),
            };
            for acks in [-1i16, 1] {
                let request = ProduceRequest::default().with_acks(acks).with_timeout_ms(10_000).with_topic_data(vec![
                    named(c, TOPIC).with_partition_data(partitions.clone()),
                    named(c, "conf-compact")
                        .with_partition_data(vec![produce_request::PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(records(2, None)))]),
                ]);
                if let Some(response) = c.call(request, v) {
                    let first = &response.responses[0];
                    let wanted = if v >= 13 { c.topic_ids[TOPIC] } else { Uuid::nil() };
                    if first.topic_id != wanted || first.partition_responses[0].error_code != 0 {
                        c.failures.push(format!("Produce v{v} acks={acks}: {first:?}"));
                    }
                }
            }
            if v >= 13 {
                let unknown = produce_request::TopicProduceData::default()
                    .with_topic_id(Uuid::new_v4())
                    .with_partition_data(vec![produce_request::PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(records(1, None)))]);
                let request =
                    ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![unknown]);
                if let Some(response) = c.call(request, v) {
                    if response.responses[0].partition_responses[0].error_code != 100 {
                        c.failures.push(format!("Produce v{v} to an unknown topic id: {response:?}"));
                    }
                }
            }
            let request =
                ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![named(c, TOPIC)
                    .with_partition_data(vec![produce_request::PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(idempotent.clone()))])]);
            c.call(request.clone(), v);
            // The same batch again: a duplicate, answered with its first offset.
            c.call(request, v);
        }
        ApiKey::Fetch => {
            for isolation in [0i8, 1] {
                let mut partitions: Vec<_> = (0..TOPIC_PARTITIONS)
                    .map(|p| {
                        let mut partition = fetch_request::FetchPartition::default()
                            .with_partition(p)
                            .with_fetch_offset(if p == 0 { 0 } else { 5 })
                            .with_partition_max_bytes(1 << 20);
                        if v >= 5 {
                            partition.log_start_offset = -1;
                        }
                        if v >= 9 {
                            partition.current_leader_epoch = 0;
                        }
                        if v >= 12 {
                            partition.last_fetched_epoch = -1;
                        }
                        partition
                    })
                    .collect();
                partitions
                    .push(fetch_request::FetchPartition::default().with_partition(1).with_fetch_offset(1_000_000));
                partitions.push(fetch_request::FetchPartition::default().with_partition(77).with_fetch_offset(0));
                let mut fetched = fetch_request::FetchTopic::default().with_partitions(partitions);
                if v >= 13 {
                    fetched.topic_id = topic_id;
                } else {
                    fetched.topic = topic(TOPIC);
                }
                let mut request = FetchRequest::default()
                    .with_max_wait_ms(10)
                    .with_min_bytes(1)
                    .with_max_bytes(4 << 20)
                    .with_isolation_level(isolation)
                    .with_topics(vec![fetched]);
                if v <= 14 {
                    request.replica_id = BrokerId(-1);
                }
                if v >= 7 {
                    request.session_id = 0;
                    request.session_epoch = -1;
                }
                if v >= 11 {
                    request.rack_id = s("rack-a");
                }
                c.call(request, v);
            }
        }
        ApiKey::ListOffsets => {
            let timestamps = [-1i64, -2, 1_600_000_000_000, if v >= 7 { -3 } else { -1 }];
            let mut partitions: Vec<_> = timestamps
                .iter()
                .enumerate()
                .map(|(p, &timestamp)| {
                    let mut partition = list_offsets_request::ListOffsetsPartition::default()
                        .with_partition_index(p as i32)
                        .with_timestamp(timestamp);
                    if v >= 4 {
                        partition.current_leader_epoch = 0;
                    }
                    partition
                })
                .collect();
            partitions.push(list_offsets_request::ListOffsetsPartition::default().with_partition_index(50));
            let mut topics = vec![list_offsets_request::ListOffsetsTopic::default()
                .with_name(topic(TOPIC))
                .with_partitions(partitions)];
            topics.push(
                list_offsets_request::ListOffsetsTopic::default().with_name(topic("conf-missing")).with_partitions(
                    vec![list_offsets_request::ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(-1)],
                ),
            );
            if v >= 8 {
                topics.push(
                    list_offsets_request::ListOffsetsTopic::default().with_name(topic("conf-records")).with_partitions(
                        vec![list_offsets_request::ListOffsetsPartition::default()
                            .with_partition_index(0)
                            .with_timestamp(-4)],
                    ),
                );
            }
            if v >= 9 {
                // Latest tiered and earliest pending upload: -1 without tiered
                // storage, as Kafka 4.4 answers.
                let tiered = [-5i64, -6].map(|t| {
                    list_offsets_request::ListOffsetsPartition::default().with_partition_index(0).with_timestamp(t)
                });
                let request = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
                    list_offsets_request::ListOffsetsTopic::default()
                        .with_name(topic("conf-records"))
                        .with_partitions(tiered.to_vec()),
                ]);
                if let Some(response) = c.call(request.with_timeout_ms(5000), v) {
                    let answers: Vec<_> = response.topics[0]
                        .partitions
                        .iter()
                        .map(|p| (p.error_code, p.offset, p.leader_epoch))
                        .collect();
                    if answers != [(0, -1, -1), (0, -1, -1)] {
                        c.failures.push(format!("ListOffsets v{v} tiered: {response:?}"));
                    }
                }
            }
            for isolation in [0i8, 1] {
                let mut request =
                    ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(topics.clone());
                if v >= 2 {
                    request.isolation_level = isolation;
                }
                c.call(request, v);
            }
        }
        ApiKey::Metadata => {
            let named = |name: &str| {
                let mut t = metadata_request::MetadataRequestTopic::default().with_name(Some(topic(name)));
                if v >= 10 {
                    t.topic_id = Uuid::nil();
                }
                t
            };
            let mut lists = vec![Some(vec![named(TOPIC), named("conf-compact")])];
            if v >= 1 {
                lists.push(None);
            }
            if v >= 4 {
                lists.push(Some(vec![named(TOPIC), named("conf-not-there")]));
            }
            if v >= 10 {
                let by_id = metadata_request::MetadataRequestTopic::default().with_topic_id(topic_id);
                lists.push(Some(vec![by_id]));
            }
            for topics in lists {
                let mut request = MetadataRequest::default().with_topics(topics);
                if v >= 4 {
                    request.allow_auto_topic_creation = false;
                }
                if (8..=10).contains(&v) {
                    request.include_cluster_authorized_operations = true;
                }
                if v >= 8 {
                    request.include_topic_authorized_operations = true;
                }
                let Some(response) = c.call(request, v) else { continue };
                // Asked for, authorized operations are a real set (KIP-430), never "not requested".
                let unanswered =
                    response.topics.iter().any(|t| t.error_code == 0 && t.topic_authorized_operations == i32::MIN)
                        || ((8..=10).contains(&v) && response.cluster_authorized_operations == i32::MIN);
                if v >= 8 && unanswered {
                    c.failures.push(format!("Metadata v{v}: authorized operations requested but not answered"));
                }
            }
        }
        ApiKey::ApiVersions => {
            let mut request = ApiVersionsRequest::default();
            if v >= 3 {
                request.client_software_name = s("skein-conformance");
                request.client_software_version = s("1.0.0");
            }
            c.call(request, v);
        }
        ApiKey::CreateTopics => {
            let mut created = create_topics_request::CreatableTopic::default()
                .with_name(topic(&format!("conf-created-{v}")))
                .with_num_partitions(3)
                .with_replication_factor(1);
            created.configs.push(
                create_topics_request::CreatableTopicConfig::default()
                    .with_name(s("retention.ms"))
                    .with_value(Some(s("3600000"))),
            );
            created.configs.push(
                create_topics_request::CreatableTopicConfig::default()
                    .with_name(s("cleanup.policy"))
                    .with_value(Some(s("compact"))),
            );
            let defaults = create_topics_request::CreatableTopic::default()
                .with_name(topic(&format!("conf-created-default-{v}")))
                .with_num_partitions(-1)
                .with_replication_factor(-1);
            let invalid = create_topics_request::CreatableTopic::default()
                .with_name(topic("conf bad name!"))
                .with_num_partitions(1)
                .with_replication_factor(1);
            let existing =
                create_topics_request::CreatableTopic::default().with_name(topic(TOPIC)).with_num_partitions(1);
            for validate_only in [true, false] {
                let mut topics = vec![created.clone(), invalid.clone(), existing.clone()];
                if v >= 4 {
                    topics.push(defaults.clone());
                }
                let request = CreateTopicsRequest::default()
                    .with_topics(topics)
                    .with_timeout_ms(10_000)
                    .with_validate_only(validate_only);
                c.call(request, v);
            }
        }
        ApiKey::DeleteTopics => {
            let name = format!("conf-delete-{v}");
            let mut request = DeleteTopicsRequest::default().with_timeout_ms(10_000);
            if v >= 6 {
                request.topics = vec![
                    delete_topics_request::DeleteTopicState::default().with_topic_id(c.topic_ids[&name]),
                    delete_topics_request::DeleteTopicState::default().with_name(Some(topic("conf-never-was"))),
                ];
            } else {
                request.topic_names = vec![topic(&name), topic("conf-never-was")];
            }
            c.call(request, v);
        }
        ApiKey::DeleteRecords => {
            let partitions = vec![
                delete_records_request::DeleteRecordsPartition::default()
                    .with_partition_index(0)
                    .with_offset(v as i64 * 5),
                delete_records_request::DeleteRecordsPartition::default().with_partition_index(1).with_offset(-1),
                delete_records_request::DeleteRecordsPartition::default().with_partition_index(9).with_offset(1),
            ];
            let request = DeleteRecordsRequest::default().with_timeout_ms(10_000).with_topics(vec![
                delete_records_request::DeleteRecordsTopic::default()
                    .with_name(topic("conf-records"))
                    .with_partitions(partitions),
            ]);
            c.call(request, v);
        }
        ApiKey::OffsetForLeaderEpoch => {
            use offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
            // The current epoch, a newer unknown one, a fenced current epoch, and a
            // partition and a topic that do not exist.
            let partitions = vec![
                OffsetForLeaderPartition::default().with_partition(0).with_current_leader_epoch(0).with_leader_epoch(0),
                OffsetForLeaderPartition::default()
                    .with_partition(1)
                    .with_current_leader_epoch(-1)
                    .with_leader_epoch(5),
                OffsetForLeaderPartition::default().with_partition(0).with_current_leader_epoch(3).with_leader_epoch(0),
                OffsetForLeaderPartition::default().with_partition(9).with_leader_epoch(0),
            ];
            let missing = OffsetForLeaderPartition::default().with_partition(0).with_leader_epoch(0);
            let mut request = OffsetForLeaderEpochRequest::default().with_topics(vec![
                OffsetForLeaderTopic::default().with_topic(topic("conf-records")).with_partitions(partitions),
                OffsetForLeaderTopic::default().with_topic(topic("conf-missing")).with_partitions(vec![missing]),
            ]);
            if v >= 3 {
                request.replica_id = BrokerId(-1);
            }
            c.call(request, v);
        }
        ApiKey::InitProducerId => {
            let mut request =
                InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60_000);
            if v >= 3 {
                request.producer_id = ProducerId(-1);
                request.producer_epoch = -1;
            }
            c.call(request, v);
            if v >= 3 {
                // KIP-360: an idempotent producer asking to bump its epoch.
                let (pid, epoch) = c.producer;
                let bump = InitProducerIdRequest::default()
                    .with_transactional_id(None)
                    .with_transaction_timeout_ms(60_000)
                    .with_producer_id(ProducerId(pid))
                    .with_producer_epoch(epoch);
                c.call(bump, v);
            }
            let transactional =
                InitProducerIdRequest::default().with_transactional_id(Some(TransactionalId(s("conf-txn"))));
            c.call(transactional.with_transaction_timeout_ms(60_000), v);
        }
        ApiKey::DescribeConfigs => {
            let resources = vec![
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s(TOPIC))
                    .with_configuration_keys(None),
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("conf-compact"))
                    .with_configuration_keys(Some(vec![s("cleanup.policy"), s("retention.ms"), s("no.such.config")])),
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(4)
                    .with_resource_name(s(""))
                    .with_configuration_keys(None),
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(4)
                    .with_resource_name(s("1"))
                    .with_configuration_keys(None),
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("conf-missing"))
                    .with_configuration_keys(None),
            ];
            for synonyms in [false, true] {
                let mut request =
                    DescribeConfigsRequest::default().with_resources(resources.clone()).with_include_synonyms(synonyms);
                if v >= 3 {
                    request.include_documentation = true;
                }
                c.call(request, v);
            }
        }
        ApiKey::AlterConfigs => {
            let config = |name: &str, value: &str| {
                alter_configs_request::AlterableConfig::default().with_name(s(name)).with_value(Some(s(value)))
            };
            let request = AlterConfigsRequest::default().with_resources(vec![
                alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("conf-compact"))
                    .with_configs(vec![config("cleanup.policy", "compact"), config("retention.ms", "7200000")]),
                alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("conf-missing"))
                    .with_configs(vec![config("retention.ms", "1")]),
                alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s(TOPIC))
                    .with_configs(vec![config("no.such.config", "1")]),
            ]);
            c.call(request.clone().with_validate_only(true), v);
            c.call(request, v);
        }
        ApiKey::IncrementalAlterConfigs => {
            let op = |name: &str, operation: i8, value: Option<&str>| {
                incremental_alter_configs_request::AlterableConfig::default()
                    .with_name(s(name))
                    .with_config_operation(operation)
                    .with_value(value.map(s))
            };
            let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
                incremental_alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s(TOPIC))
                    .with_configs(vec![op("retention.ms", 0, Some("172800000")), op("segment.ms", 1, None)]),
                incremental_alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("conf-missing"))
                    .with_configs(vec![op("retention.ms", 0, Some("1"))]),
            ]);
            c.call(request.clone().with_validate_only(true), v);
            c.call(request, v);
        }
        ApiKey::DescribeLogDirs => {
            c.call(DescribeLogDirsRequest::default().with_topics(None), v);
            let topics = vec![
                describe_log_dirs_request::DescribableLogDirTopic::default()
                    .with_topic(topic(TOPIC))
                    .with_partitions(vec![0, 1, 2, 3, 40]),
                describe_log_dirs_request::DescribableLogDirTopic::default()
                    .with_topic(topic("conf-missing"))
                    .with_partitions(vec![0]),
            ];
            c.call(DescribeLogDirsRequest::default().with_topics(Some(topics)), v);
        }
        ApiKey::CreatePartitions => {
            let grow = |name: String, count: i32| {
                create_partitions_request::CreatePartitionsTopic::default()
                    .with_name(topic(&name))
                    .with_count(count)
                    .with_assignments(None)
            };
            let topics = vec![
                grow(format!("conf-grow-{v}"), 3),
                grow(TOPIC.to_string(), 1),
                grow("conf-missing".to_string(), 2),
            ];
            let request = CreatePartitionsRequest::default().with_topics(topics).with_timeout_ms(10_000);
            c.call(request.clone().with_validate_only(true), v);
            c.call(request, v);
        }
        ApiKey::ElectLeaders => {
            // A preferred election where the preferred replica leads already, and a
            // partition that does not exist; from v1 an unclean election too.
            let partitions = vec![elect_leaders_request::TopicPartitions::default()
                .with_topic(topic(TOPIC))
                .with_partitions(vec![0, 1, 99])];
            for election_type in [0i8, 1] {
                if election_type == 1 && v == 0 {
                    continue;
                }
                let request = ElectLeadersRequest::default()
                    .with_election_type(election_type)
                    .with_topic_partitions(Some(partitions.clone()))
                    .with_timeout_ms(10_000);
                if let Some(response) = c.call(request, v) {
                    let codes: Vec<i16> = response
                        .replica_election_results
                        .iter()
                        .flat_map(|t| t.partition_result.iter().map(|p| p.error_code))
                        .collect();
                    // ELECTION_NOT_NEEDED for the led partitions, UNKNOWN_TOPIC_OR_PARTITION for 99.
                    if codes != [84, 84, 3] {
                        c.failures.push(format!("ElectLeaders v{v} type {election_type}: {codes:?}"));
                    }
                }
            }
        }
        ApiKey::DescribeQuorum => {
            // A single node is a quorum of one: itself, leading, caught up.
            let request =
                DescribeQuorumRequest::default().with_topics(vec![describe_quorum_request::TopicData::default()
                    .with_topic_name(topic("__cluster_metadata"))
                    .with_partitions(vec![describe_quorum_request::PartitionData::default().with_partition_index(0)])]);
            if let Some(response) = c.call(request, v) {
                let quorum = response.topics.first().and_then(|t| t.partitions.first());
                let ok = response.error_code == 0
                    && quorum.is_some_and(|q| {
                        q.leader_id.0 == 1
                            && q.high_watermark > 0
                            && q.current_voters.len() == 1
                            && q.current_voters[0].log_end_offset == q.high_watermark
                    });
                if !ok {
                    c.failures.push(format!("DescribeQuorum v{v}: {response:?}"));
                }
            }
            let other =
                DescribeQuorumRequest::default().with_topics(vec![describe_quorum_request::TopicData::default()
                    .with_topic_name(topic(TOPIC))
                    .with_partitions(vec![describe_quorum_request::PartitionData::default().with_partition_index(0)])]);
            if let Some(response) = c.call(other, v) {
                if response.error_code != 3 {
                    c.failures.push(format!("DescribeQuorum v{v} of {TOPIC}: {response:?}"));
                }
            }
        }
        ApiKey::DescribeTopicPartitions => {
            // Two pages of the fixture topic (a limit of three of its four partitions),
            // and a topic that does not exist.
            let named = |names: &[&str]| {
                names
                    .iter()
                    .map(|n| describe_topic_partitions_request::TopicRequest::default().with_name(topic(n)))
                    .collect()
            };
            let request = DescribeTopicPartitionsRequest::default()
                .with_topics(named(&[TOPIC, "conf-missing"]))
                .with_response_partition_limit(3);
            if let Some(response) = c.call(request, v) {
                let first = response.topics.iter().find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == TOPIC));
                let cursor = response.next_cursor.as_ref().map(|c| (c.topic_name.to_string(), c.partition_index));
                if first.map(|t| t.partitions.len()) != Some(3) || cursor != Some((TOPIC.to_string(), 3)) {
                    c.failures.push(format!("DescribeTopicPartitions v{v} page 1: {response:?}"));
                }
                let next = DescribeTopicPartitionsRequest::default()
                    .with_topics(named(&[TOPIC, "conf-missing"]))
                    .with_response_partition_limit(3)
                    .with_cursor(Some(
                        describe_topic_partitions_request::Cursor::default()
                            .with_topic_name(topic(TOPIC))
                            .with_partition_index(3),
                    ));
                if let Some(page) = c.call(next, v) {
                    let codes: Vec<(i16, usize)> =
                        page.topics.iter().map(|t| (t.error_code, t.partitions.len())).collect();
                    let leaders = page.topics[0]
                        .partitions
                        .iter()
                        .all(|p| p.leader_id.0 == 1 && p.eligible_leader_replicas.is_some());
                    if codes != [(0, 1), (3, 0)] || page.next_cursor.is_some() || !leaders {
                        c.failures.push(format!("DescribeTopicPartitions v{v} page 2: {page:?}"));
                    }
                }
            }
        }
        ApiKey::AlterPartitionReassignments => {
            // To the one broker it is on already: nothing to do; to a broker that does
            // not exist: refused; a cancel with nothing under way.
            let partition = |p: i32, replicas: Option<Vec<i32>>| {
                alter_partition_reassignments_request::ReassignablePartition::default()
                    .with_partition_index(p)
                    .with_replicas(replicas.map(|r| r.into_iter().map(BrokerId).collect()))
            };
            let request = AlterPartitionReassignmentsRequest::default().with_timeout_ms(10_000).with_topics(vec![
                alter_partition_reassignments_request::ReassignableTopic::default()
                    .with_name(topic(TOPIC))
                    .with_partitions(vec![
                        partition(0, Some(vec![1])),
                        partition(1, Some(vec![7])),
                        partition(2, None),
                    ]),
            ]);
            if let Some(response) = c.call(request, v) {
                let codes: Vec<i16> =
                    response.responses.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect();
                if response.error_code != 0 || codes != [0, 39, 85] {
                    c.failures.push(format!("AlterPartitionReassignments v{v}: {response:?}"));
                }
            }
        }
        ApiKey::ListPartitionReassignments => {
            let request = ListPartitionReassignmentsRequest::default().with_timeout_ms(10_000).with_topics(Some(vec![
                list_partition_reassignments_request::ListPartitionReassignmentsTopics::default()
                    .with_name(topic(TOPIC))
                    .with_partition_indexes(vec![0, 1]),
            ]));
            if let Some(response) = c.call(request, v) {
                if response.error_code != 0 || !response.topics.is_empty() {
                    c.failures.push(format!("ListPartitionReassignments v{v}: {response:?}"));
                }
            }
        }
        ApiKey::DescribeCluster => {
            let mut request = DescribeClusterRequest::default().with_include_cluster_authorized_operations(true);
            if v >= 1 {
                request.endpoint_type = 1;
            }
            if v >= 2 {
                request.include_fenced_brokers = true;
            }
            if let Some(response) = c.call(request, v) {
                if response.cluster_authorized_operations == i32::MIN || response.brokers.is_empty() {
                    c.failures.push(format!("DescribeCluster v{v}: {response:?}"));
                }
            }
        }
        ApiKey::UnregisterBroker => {
            // An id no broker has (the node under test stays registered).
            let request = UnregisterBrokerRequest::default().with_broker_id(BrokerId(999));
            if let Some(response) = c.call(request, v) {
                let expected = Some(StrBytes::from_static_str("Broker ID 999 is not currently registered"));
                if response.error_code != 102 || response.error_message != expected {
                    c.failures.push(format!("UnregisterBroker v{v}: {response:?}"));
                }
            }
        }
        ApiKey::AddRaftVoter | ApiKey::RemoveRaftVoter | ApiKey::UnregisterController => {
            // A single node has no controller listener, so no quorum that can grow:
            // INVALID_REQUEST with why (tests/cluster/voters.rs changes a real one).
            // No cluster id (as Kafka's Admin sends): an empty one is another cluster's.
            let error = match key {
                ApiKey::AddRaftVoter => {
                    let listener = add_raft_voter_request::Listener::default()
                        .with_name(StrBytes::from_static_str("CONTROLLER"))
                        .with_host(StrBytes::from_static_str("127.0.0.1"))
                        .with_port(19093);
                    let request = AddRaftVoterRequest::default()
                        .with_cluster_id(None)
                        .with_timeout_ms(30_000)
                        .with_voter_id(5)
                        .with_voter_directory_id(Uuid::from_u128(5))
                        .with_listeners(vec![listener])
                        .with_ack_when_committed(true);
                    c.call(request, v).map(|r| (r.error_code, r.error_message))
                }
                ApiKey::UnregisterController => {
                    let request = UnregisterControllerRequest::default().with_controller_id(5);
                    c.call(request, v).map(|r| (r.error_code, r.error_message))
                }
                _ => {
                    let request = RemoveRaftVoterRequest::default()
                        .with_cluster_id(None)
                        .with_voter_id(5)
                        .with_voter_directory_id(Uuid::from_u128(5));
                    c.call(request, v).map(|r| (r.error_code, r.error_message))
                }
            };
            if let Some((code, message)) = error {
                if code != 42 || !message.as_deref().is_some_and(|m| m.contains("--controller-voters")) {
                    c.failures.push(format!("{key:?} v{v}: {code} {message:?}"));
                }
            }
        }
        ApiKey::GetTelemetrySubscriptions => {
            // No subscription matches: nothing to push, every five minutes.
            let request = GetTelemetrySubscriptionsRequest::default().with_client_instance_id(Uuid::nil());
            if let Some(response) = c.call(request, v) {
                let id = response.client_instance_id;
                if response.error_code != 0 || id.is_nil() || response.push_interval_ms != 300_000 {
                    c.failures.push(format!("GetTelemetrySubscriptions v{v}: {response:?}"));
                }
                // A push of that instance: its subscription id, gzip, an empty payload.
                let push = PushTelemetryRequest::default()
                    .with_client_instance_id(id)
                    .with_subscription_id(response.subscription_id)
                    .with_compression_type(1)
                    .with_terminating(true);
                if let Some(pushed) = c.call(push, 0) {
                    if pushed.error_code != 0 {
                        c.failures.push(format!("PushTelemetry v0: {pushed:?}"));
                    }
                }
            }
        }
        ApiKey::PushTelemetry => {
            // An instance id no GetTelemetrySubscriptions gave: UNKNOWN_SUBSCRIPTION_ID.
            let push = PushTelemetryRequest::default()
                .with_client_instance_id(Uuid::from_u128(0x5eed))
                .with_subscription_id(7)
                .with_compression_type(4)
                .with_metrics(Bytes::from_static(b"\x28\xb5\x2f\xfd"));
            if let Some(pushed) = c.call(push, v) {
                if pushed.error_code != 117 {
                    c.failures.push(format!("PushTelemetry v{v}: {pushed:?}"));
                }
            }
        }
        // Tokens are for authenticated connections: this plaintext one is refused
        // (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED) in each version's shape.
        // tests/delegation_tokens.rs runs every version authenticated.
        ApiKey::CreateDelegationToken => {
            let renewer = create_delegation_token_request::CreatableRenewers::default()
                .with_principal_type(StrBytes::from_static_str("User"))
                .with_principal_name(StrBytes::from_static_str("bob"));
            let request = CreateDelegationTokenRequest::default().with_renewers(vec![renewer]).with_max_lifetime_ms(-1);
            if let Some(response) = c.call(request, v) {
                if response.error_code != 64 || response.principal_name.as_str() != "ANONYMOUS" {
                    c.failures.push(format!("CreateDelegationToken v{v}: {response:?}"));
                }
            }
        }
        ApiKey::RenewDelegationToken | ApiKey::ExpireDelegationToken => {
            let hmac = Bytes::from(vec![7u8; 64]);
            let answer = match key {
                ApiKey::RenewDelegationToken => c
                    .call(RenewDelegationTokenRequest::default().with_hmac(hmac).with_renew_period_ms(-1), v)
                    .map(|r| (r.error_code, r.expiry_timestamp_ms)),
                _ => c
                    .call(ExpireDelegationTokenRequest::default().with_hmac(hmac).with_expiry_time_period_ms(-1), v)
                    .map(|r| (r.error_code, r.expiry_timestamp_ms)),
            };
            if answer.is_some_and(|answer| answer != (64, -1)) {
                c.failures.push(format!("{key:?} v{v}: {answer:?}"));
            }
        }
        ApiKey::DescribeDelegationToken => {
            let owner = describe_delegation_token_request::DescribeDelegationTokenOwner::default()
                .with_principal_type(StrBytes::from_static_str("User"))
                .with_principal_name(StrBytes::from_static_str("bob"));
            if let Some(response) = c.call(DescribeDelegationTokenRequest::default().with_owners(Some(vec![owner])), v)
            {
                if response.error_code != 64 || !response.tokens.is_empty() {
                    c.failures.push(format!("DescribeDelegationToken v{v}: {response:?}"));
                }
            }
        }
        ApiKey::AlterReplicaLogDirs => {
            // The node's directory (a move to where the replicas are: done) and another
            // (LOG_DIR_NOT_FOUND), each partition answered under its topic.
            use alter_replica_log_dirs_request::{AlterReplicaLogDir, AlterReplicaLogDirTopic};
            let data_dir = std::path::absolute(&c.broker.data_dir).unwrap().display().to_string();
            let dir = |path: &str, partitions: Vec<i32>| {
                let topic = AlterReplicaLogDirTopic::default().with_name(topic(TOPIC)).with_partitions(partitions);
                AlterReplicaLogDir::default()
                    .with_path(StrBytes::from_string(path.to_string()))
                    .with_topics(vec![topic])
            };
            let request = AlterReplicaLogDirsRequest::default()
                .with_dirs(vec![dir(&data_dir, vec![0, 1]), dir("/nowhere", vec![2])]);
            if let Some(response) = c.call(request, v) {
                let codes: Vec<(i32, i16)> = response
                    .results
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .map(|p| (p.partition_index, p.error_code))
                    .collect();
                if codes != [(0, 0), (1, 0), (2, 57)] {
                    c.failures.push(format!("AlterReplicaLogDirs v{v}: {response:?}"));
                }
            }
        }
        ApiKey::ListConfigResources => {
            c.call(ListConfigResourcesRequest::default(), v);
            if v >= 1 {
                c.call(ListConfigResourcesRequest::default().with_resource_types(vec![2, 4, 32]), v);
            }
        }
        _ => return groups::exercise(c, key, v),
    }
    true
}

// Every advertised version of every API answers realistic requests with a response
// that encodes and decodes at that version.
#[test]
fn every_advertised_version_answers_populated_requests() {
    let (mut c, _dir) = setup();
    let mut pairs = 0;
    for (key, range, _) in skein_net::registry::APIS {
        for version in range.min..=range.max {
            if !exercise(&mut c, *key, version) {
                c.failures.push(format!("{key:?}: no sample request in tests/conformance.rs"));
                break;
            }
            pairs += 1;
        }
    }
    // The broker is still whole: a fresh connection is answered.
    let mut fresh = RawClient::connect(&c.broker.bootstrap());
    let versions = fresh.call(&common::api_versions_request(), 3);
    assert_eq!(versions.error_code, 0);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let encode_failures = c.broker.metric_sum("skein_response_encode_failures_total");
    assert!(
        c.failures.is_empty() && encode_failures == 0,
        "{} of {} calls over {pairs} (API, version) pairs failed ({encode_failures} encode failures counted):\n{}",
        c.failures.len(),
        c.calls,
        c.failures.join("\n")
    );
    println!("{pairs} (API, version) pairs, {} calls, all answered", c.calls);
}
