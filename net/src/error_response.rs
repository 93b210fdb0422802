//! Each API's error response, in one place, for the two ways a request is answered
//! with an error instead of its handler's work:
//! - refused whole by the authorizer (`authorize::denied`, with the error it names);
//! - answered by a response that does not encode at the request's version (a handler
//!   bug: a field set that the version lacks), with UNKNOWN_SERVER_ERROR.
//!
//! A Java broker answers both with the API's error shape (`getErrorResponse`): every
//! error code set, the partitions (or other keys) the request named kept, so that the
//! client learns what failed and retries instead of waiting for a reply that never
//! comes. The keys come from the request (`for_request`) or from the failed response
//! (`for_failed`); the shape is built once per API. Where an API has no shape here,
//! the connection is closed, which every client handles by reconnecting.

use kafka_protocol::messages::*;
use skein_control::errors::code::UNKNOWN_SERVER_ERROR;

/// Topics (name, id) and the partitions of each a request or a response names.
type Partitions = Vec<(TopicName, uuid::Uuid, Vec<i32>)>;

/// The error response to `request` at `version`, `code` wherever the response has an
/// error: for the APIs a whole request of which can be refused (`authorize::denied`);
/// `None` for the others.
pub fn for_request(request: &RequestKind, version: i16, code: i16) -> Option<ResponseKind> {
    let api = |kind: ApiKey| whole(kind, version, code);
    match request {
        RequestKind::Produce(r) => {
            let keys = r
                .topic_data
                .iter()
                .map(|t| (t.name.clone(), t.topic_id, t.partition_data.iter().map(|p| p.index).collect()));
            Some(produce(keys.collect(), code))
        }
        RequestKind::Fetch(r) => {
            let keys = r
                .topics
                .iter()
                .map(|t| (t.topic.clone(), t.topic_id, t.partitions.iter().map(|p| p.partition).collect()));
            Some(fetch(keys.collect(), code))
        }
        RequestKind::OffsetCommit(r) => {
            let keys = r
                .topics
                .iter()
                .map(|t| (t.name.clone(), t.topic_id, t.partitions.iter().map(|p| p.partition_index).collect()));
            Some(offset_commit(keys.collect(), code))
        }
        RequestKind::TxnOffsetCommit(r) => {
            let keys = r
                .topics
                .iter()
                .map(|t| (t.name.clone(), uuid::Uuid::nil(), t.partitions.iter().map(|p| p.partition_index).collect()));
            Some(txn_offset_commit(keys.collect(), code))
        }
        RequestKind::AddPartitionsToTxn(r) if version <= 3 => {
            let keys = r.v3_and_below_topics.iter().map(|t| (t.name.clone(), uuid::Uuid::nil(), t.partitions.clone()));
            Some(add_partitions_v3(keys.collect(), code))
        }
        RequestKind::WriteTxnMarkers(r) => Some(write_txn_markers(r, code)),
        RequestKind::AlterUserScramCredentials(r) => Some(alter_user_scram_credentials(r, code)),
        RequestKind::CreateAcls(r) => {
            let result = create_acls_response::AclCreationResult::default().with_error_code(code);
            Some(ResponseKind::CreateAcls(CreateAclsResponse::default().with_results(vec![result; r.creations.len()])))
        }
        RequestKind::DeleteAcls(r) => {
            let result = delete_acls_response::DeleteAclsFilterResult::default().with_error_code(code);
            let results = vec![result; r.filters.len()];
            Some(ResponseKind::DeleteAcls(DeleteAclsResponse::default().with_filter_results(results)))
        }
        RequestKind::AlterClientQuotas(r) => Some(alter_client_quotas(r, code)),
        RequestKind::AlterReplicaLogDirs(r) => {
            // Every partition named, under its topic, with the error.
            use alter_replica_log_dirs_response::{AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult};
            let mut topics: std::collections::BTreeMap<TopicName, Vec<i32>> = Default::default();
            for topic in r.dirs.iter().flat_map(|d| &d.topics) {
                topics.entry(topic.name.clone()).or_default().extend(&topic.partitions);
            }
            let results = topics
                .into_iter()
                .map(|(name, mut partitions)| {
                    partitions.sort_unstable();
                    partitions.dedup();
                    let partitions = partitions
                        .into_iter()
                        .map(|p| {
                            AlterReplicaLogDirPartitionResult::default().with_partition_index(p).with_error_code(code)
                        })
                        .collect();
                    AlterReplicaLogDirTopicResult::default().with_topic_name(name).with_partitions(partitions)
                })
                .collect();
            Some(ResponseKind::AlterReplicaLogDirs(AlterReplicaLogDirsResponse::default().with_results(results)))
        }
        RequestKind::InitProducerId(_) => api(ApiKey::InitProducerId),
        RequestKind::JoinGroup(_) => api(ApiKey::JoinGroup),
        RequestKind::SyncGroup(_) => api(ApiKey::SyncGroup),
        RequestKind::Heartbeat(_) => api(ApiKey::Heartbeat),
        RequestKind::LeaveGroup(_) => api(ApiKey::LeaveGroup),
        RequestKind::ConsumerGroupHeartbeat(_) => api(ApiKey::ConsumerGroupHeartbeat),
        RequestKind::OffsetDelete(_) => api(ApiKey::OffsetDelete),
        RequestKind::EndTxn(_) => api(ApiKey::EndTxn),
        RequestKind::AddOffsetsToTxn(_) => api(ApiKey::AddOffsetsToTxn),
        RequestKind::AddPartitionsToTxn(_) => api(ApiKey::AddPartitionsToTxn),
        RequestKind::DescribeLogDirs(_) => api(ApiKey::DescribeLogDirs),
        RequestKind::DescribeQuorum(_) => api(ApiKey::DescribeQuorum),
        RequestKind::ElectLeaders(_) => api(ApiKey::ElectLeaders),
        RequestKind::UnregisterBroker(_) => api(ApiKey::UnregisterBroker),
        RequestKind::AddRaftVoter(_) => api(ApiKey::AddRaftVoter),
        RequestKind::RemoveRaftVoter(_) => api(ApiKey::RemoveRaftVoter),
        RequestKind::UnregisterController(_) => api(ApiKey::UnregisterController),
        RequestKind::CreateDelegationToken(_) => api(ApiKey::CreateDelegationToken),
        RequestKind::RenewDelegationToken(_) => api(ApiKey::RenewDelegationToken),
        RequestKind::ExpireDelegationToken(_) => api(ApiKey::ExpireDelegationToken),
        RequestKind::DescribeDelegationToken(_) => api(ApiKey::DescribeDelegationToken),
        RequestKind::AlterPartitionReassignments(_) => api(ApiKey::AlterPartitionReassignments),
        RequestKind::ListPartitionReassignments(_) => api(ApiKey::ListPartitionReassignments),
        RequestKind::DescribeUserScramCredentials(_) => api(ApiKey::DescribeUserScramCredentials),
        RequestKind::DescribeAcls(_) => api(ApiKey::DescribeAcls),
        RequestKind::DescribeClientQuotas(_) => api(ApiKey::DescribeClientQuotas),
        RequestKind::ListConfigResources(_) => api(ApiKey::ListConfigResources),
        RequestKind::ShareGroupHeartbeat(_) => api(ApiKey::ShareGroupHeartbeat),
        RequestKind::StreamsGroupHeartbeat(_) => api(ApiKey::StreamsGroupHeartbeat),
        RequestKind::StreamsGroupDescribe(r) => {
            let described = |g: &GroupId| {
                streams_group_describe_response::DescribedGroup::default()
                    .with_group_id(g.clone())
                    .with_error_code(code)
            };
            let groups = r.group_ids.iter().map(described).collect();
            Some(ResponseKind::StreamsGroupDescribe(StreamsGroupDescribeResponse::default().with_groups(groups)))
        }
        RequestKind::UpdateFeatures(r) => {
            // v0-1 answer each feature too.
            let result = |u: &update_features_request::FeatureUpdateKey| {
                update_features_response::UpdatableFeatureResult::default()
                    .with_feature(u.feature.clone())
                    .with_error_code(code)
            };
            let results = if version < 2 { r.feature_updates.iter().map(result).collect() } else { Vec::new() };
            Some(ResponseKind::UpdateFeatures(
                UpdateFeaturesResponse::default().with_error_code(code).with_results(results),
            ))
        }
        RequestKind::ConsumerGroupDescribe(r) => {
            let described = |g: &GroupId| {
                consumer_group_describe_response::DescribedGroup::default()
                    .with_group_id(g.clone())
                    .with_error_code(code)
            };
            let groups = r.group_ids.iter().map(described).collect();
            Some(ResponseKind::ConsumerGroupDescribe(ConsumerGroupDescribeResponse::default().with_groups(groups)))
        }
        RequestKind::ShareGroupDescribe(r) => {
            let described = |g: &GroupId| {
                share_group_describe_response::DescribedGroup::default().with_group_id(g.clone()).with_error_code(code)
            };
            let groups = r.group_ids.iter().map(described).collect();
            Some(ResponseKind::ShareGroupDescribe(ShareGroupDescribeResponse::default().with_groups(groups)))
        }
        RequestKind::DescribeShareGroupOffsets(r) => {
            let described = |g: &describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup| {
                describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseGroup::default()
                    .with_group_id(g.group_id.clone())
                    .with_error_code(code)
            };
            let groups = r.groups.iter().map(described).collect();
            Some(ResponseKind::DescribeShareGroupOffsets(
                DescribeShareGroupOffsetsResponse::default().with_groups(groups),
            ))
        }
        RequestKind::ShareFetch(_) => api(ApiKey::ShareFetch),
        RequestKind::ShareAcknowledge(_) => api(ApiKey::ShareAcknowledge),
        RequestKind::AlterShareGroupOffsets(_) => api(ApiKey::AlterShareGroupOffsets),
        RequestKind::DeleteShareGroupOffsets(_) => api(ApiKey::DeleteShareGroupOffsets),
        _ => None,
    }
}

/// The error response standing in for `failed`, a response of `api` that did not
/// encode at `version`: UNKNOWN_SERVER_ERROR wherever it has an error, the partitions
/// it named kept; `None` where this API has no error shape.
pub fn for_failed(api: ApiKey, failed: ResponseKind, version: i16) -> Option<ResponseKind> {
    let error = UNKNOWN_SERVER_ERROR;
    match failed {
        ResponseKind::Produce(r) => {
            let keys = r.responses.into_iter().map(|t| {
                let partitions = t.partition_responses.iter().map(|p| p.index).collect();
                (t.name, t.topic_id, partitions)
            });
            Some(produce(keys.collect(), error))
        }
        // From v7 a fetch has an error of its own, which covers every partition.
        ResponseKind::Fetch(r) if version < 7 => {
            let keys = r.responses.into_iter().map(|t| {
                let partitions = t.partitions.iter().map(|p| p.partition_index).collect();
                (t.topic, t.topic_id, partitions)
            });
            Some(fetch(keys.collect(), error))
        }
        ResponseKind::ListOffsets(r) => {
            let keys = r.topics.into_iter().map(|t| {
                let partitions = t.partitions.iter().map(|p| p.partition_index).collect();
                (t.name, uuid::Uuid::nil(), partitions)
            });
            Some(list_offsets(keys.collect(), error))
        }
        ResponseKind::FindCoordinator(r) if version >= 4 => {
            Some(coordinators(r.coordinators.into_iter().map(|c| c.key).collect(), error))
        }
        _ => whole(api, version, error),
    }
}

/// The error response of an API whose error is one code for the whole response.
fn whole(api: ApiKey, version: i16, code: i16) -> Option<ResponseKind> {
    Some(match api {
        ApiKey::Fetch if version >= 7 => ResponseKind::Fetch(FetchResponse::default().with_error_code(code)),
        ApiKey::ApiVersions => ResponseKind::ApiVersions(ApiVersionsResponse::default().with_error_code(code)),
        ApiKey::InitProducerId => ResponseKind::InitProducerId(
            InitProducerIdResponse::default().with_error_code(code).with_producer_id(ProducerId(-1)),
        ),
        ApiKey::JoinGroup => {
            ResponseKind::JoinGroup(JoinGroupResponse::default().with_error_code(code).with_generation_id(-1))
        }
        ApiKey::SyncGroup => ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(code)),
        ApiKey::Heartbeat => ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code)),
        ApiKey::LeaveGroup => ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(code)),
        ApiKey::ListGroups => ResponseKind::ListGroups(ListGroupsResponse::default().with_error_code(code)),
        ApiKey::ConsumerGroupHeartbeat => {
            ResponseKind::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatResponse::default().with_error_code(code))
        }
        ApiKey::OffsetDelete => ResponseKind::OffsetDelete(OffsetDeleteResponse::default().with_error_code(code)),
        ApiKey::EndTxn => ResponseKind::EndTxn(EndTxnResponse::default().with_error_code(code)),
        ApiKey::AddOffsetsToTxn => {
            ResponseKind::AddOffsetsToTxn(AddOffsetsToTxnResponse::default().with_error_code(code))
        }
        // v4+: the error of the whole request.
        ApiKey::AddPartitionsToTxn if version >= 4 => {
            ResponseKind::AddPartitionsToTxn(AddPartitionsToTxnResponse::default().with_error_code(code))
        }
        ApiKey::FindCoordinator if version < 4 => ResponseKind::FindCoordinator(
            FindCoordinatorResponse::default().with_error_code(code).with_node_id(BrokerId(-1)),
        ),
        ApiKey::DescribeCluster => {
            ResponseKind::DescribeCluster(DescribeClusterResponse::default().with_error_code(code))
        }
        ApiKey::DescribeLogDirs => {
            ResponseKind::DescribeLogDirs(DescribeLogDirsResponse::default().with_error_code(code))
        }
        ApiKey::DescribeQuorum => ResponseKind::DescribeQuorum(DescribeQuorumResponse::default().with_error_code(code)),
        ApiKey::ElectLeaders => ResponseKind::ElectLeaders(ElectLeadersResponse::default().with_error_code(code)),
        ApiKey::UnregisterBroker => {
            ResponseKind::UnregisterBroker(UnregisterBrokerResponse::default().with_error_code(code))
        }
        ApiKey::AddRaftVoter => ResponseKind::AddRaftVoter(AddRaftVoterResponse::default().with_error_code(code)),
        ApiKey::RemoveRaftVoter => {
            ResponseKind::RemoveRaftVoter(RemoveRaftVoterResponse::default().with_error_code(code))
        }
        ApiKey::UnregisterController => {
            ResponseKind::UnregisterController(UnregisterControllerResponse::default().with_error_code(code))
        }
        ApiKey::CreateDelegationToken => {
            ResponseKind::CreateDelegationToken(CreateDelegationTokenResponse::default().with_error_code(code))
        }
        ApiKey::RenewDelegationToken => ResponseKind::RenewDelegationToken(
            RenewDelegationTokenResponse::default().with_error_code(code).with_expiry_timestamp_ms(-1),
        ),
        ApiKey::ExpireDelegationToken => ResponseKind::ExpireDelegationToken(
            ExpireDelegationTokenResponse::default().with_error_code(code).with_expiry_timestamp_ms(-1),
        ),
        ApiKey::DescribeDelegationToken => {
            ResponseKind::DescribeDelegationToken(DescribeDelegationTokenResponse::default().with_error_code(code))
        }
        ApiKey::AlterPartitionReassignments => ResponseKind::AlterPartitionReassignments(
            AlterPartitionReassignmentsResponse::default().with_error_code(code),
        ),
        ApiKey::ListPartitionReassignments => ResponseKind::ListPartitionReassignments(
            ListPartitionReassignmentsResponse::default().with_error_code(code),
        ),
        ApiKey::DescribeUserScramCredentials => ResponseKind::DescribeUserScramCredentials(
            DescribeUserScramCredentialsResponse::default().with_error_code(code),
        ),
        ApiKey::DescribeAcls => ResponseKind::DescribeAcls(DescribeAclsResponse::default().with_error_code(code)),
        ApiKey::DescribeClientQuotas => {
            ResponseKind::DescribeClientQuotas(DescribeClientQuotasResponse::default().with_error_code(code))
        }
        ApiKey::ListConfigResources => {
            ResponseKind::ListConfigResources(ListConfigResourcesResponse::default().with_error_code(code))
        }
        ApiKey::ShareGroupHeartbeat => {
            ResponseKind::ShareGroupHeartbeat(ShareGroupHeartbeatResponse::default().with_error_code(code))
        }
        ApiKey::StreamsGroupHeartbeat => {
            ResponseKind::StreamsGroupHeartbeat(StreamsGroupHeartbeatResponse::default().with_error_code(code))
        }
        ApiKey::ShareFetch => ResponseKind::ShareFetch(ShareFetchResponse::default().with_error_code(code)),
        ApiKey::ShareAcknowledge => {
            ResponseKind::ShareAcknowledge(ShareAcknowledgeResponse::default().with_error_code(code))
        }
        ApiKey::AlterShareGroupOffsets => {
            ResponseKind::AlterShareGroupOffsets(AlterShareGroupOffsetsResponse::default().with_error_code(code))
        }
        ApiKey::DeleteShareGroupOffsets => {
            ResponseKind::DeleteShareGroupOffsets(DeleteShareGroupOffsetsResponse::default().with_error_code(code))
        }
        _ => return None,
    })
}

/// As Kafka's `PartitionResponse(error)`: no offsets, no append time.
fn produce(topics: Partitions, code: i16) -> ResponseKind {
    use produce_response::{PartitionProduceResponse, TopicProduceResponse};
    let responses = topics
        .into_iter()
        .map(|(name, topic_id, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|index| {
                    PartitionProduceResponse::default()
                        .with_index(index)
                        .with_error_code(code)
                        .with_base_offset(-1)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(-1)
                })
                .collect();
            TopicProduceResponse::default().with_name(name).with_topic_id(topic_id).with_partition_responses(partitions)
        })
        .collect();
    ResponseKind::Produce(ProduceResponse::default().with_responses(responses))
}

/// Each partition's error, with no watermarks.
fn fetch(topics: Partitions, code: i16) -> ResponseKind {
    use fetch_response::{FetchableTopicResponse, PartitionData};
    let responses = topics
        .into_iter()
        .map(|(topic, topic_id, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|partition| {
                    PartitionData::default()
                        .with_partition_index(partition)
                        .with_error_code(code)
                        .with_high_watermark(-1)
                        .with_last_stable_offset(-1)
                        .with_aborted_transactions(Some(Vec::new()))
                })
                .collect();
            FetchableTopicResponse::default().with_topic(topic).with_topic_id(topic_id).with_partitions(partitions)
        })
        .collect();
    ResponseKind::Fetch(FetchResponse::default().with_responses(responses))
}

fn list_offsets(topics: Partitions, code: i16) -> ResponseKind {
    use list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
    let topics = topics
        .into_iter()
        .map(|(name, _, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|p| ListOffsetsPartitionResponse::default().with_partition_index(p).with_error_code(code))
                .collect();
            ListOffsetsTopicResponse::default().with_name(name).with_partitions(partitions)
        })
        .collect();
    ResponseKind::ListOffsets(ListOffsetsResponse::default().with_topics(topics))
}

fn offset_commit(topics: Partitions, code: i16) -> ResponseKind {
    use offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
    let topics = topics
        .into_iter()
        .map(|(name, topic_id, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|p| OffsetCommitResponsePartition::default().with_partition_index(p).with_error_code(code))
                .collect();
            OffsetCommitResponseTopic::default().with_name(name).with_topic_id(topic_id).with_partitions(partitions)
        })
        .collect();
    ResponseKind::OffsetCommit(OffsetCommitResponse::default().with_topics(topics))
}

fn txn_offset_commit(topics: Partitions, code: i16) -> ResponseKind {
    use txn_offset_commit_response::{TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic};
    let topics = topics
        .into_iter()
        .map(|(name, _, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|p| TxnOffsetCommitResponsePartition::default().with_partition_index(p).with_error_code(code))
                .collect();
            TxnOffsetCommitResponseTopic::default().with_name(name).with_partitions(partitions)
        })
        .collect();
    ResponseKind::TxnOffsetCommit(TxnOffsetCommitResponse::default().with_topics(topics))
}

/// v0-3: each partition's error (v4+ has one for the whole request: `whole`).
fn add_partitions_v3(topics: Partitions, code: i16) -> ResponseKind {
    use add_partitions_to_txn_response::{AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult};
    let topics = topics
        .into_iter()
        .map(|(name, _, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|p| {
                    AddPartitionsToTxnPartitionResult::default().with_partition_index(p).with_partition_error_code(code)
                })
                .collect();
            AddPartitionsToTxnTopicResult::default().with_name(name).with_results_by_partition(partitions)
        })
        .collect();
    ResponseKind::AddPartitionsToTxn(AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(topics))
}

fn write_txn_markers(request: &WriteTxnMarkersRequest, code: i16) -> ResponseKind {
    use write_txn_markers_response::{
        WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    };
    let markers = request
        .markers
        .iter()
        .map(|m| {
            let topics = m
                .topics
                .iter()
                .map(|t| {
                    let partitions = t
                        .partition_indexes
                        .iter()
                        .map(|p| {
                            WritableTxnMarkerPartitionResult::default().with_partition_index(*p).with_error_code(code)
                        })
                        .collect();
                    WritableTxnMarkerTopicResult::default().with_name(t.name.clone()).with_partitions(partitions)
                })
                .collect();
            WritableTxnMarkerResult::default().with_producer_id(m.producer_id).with_topics(topics)
        })
        .collect();
    ResponseKind::WriteTxnMarkers(WriteTxnMarkersResponse::default().with_markers(markers))
}

/// v4+: each key's coordinator, none found.
fn coordinators(keys: Vec<kafka_protocol::protocol::StrBytes>, code: i16) -> ResponseKind {
    use find_coordinator_response::Coordinator;
    let coordinators = keys
        .into_iter()
        .map(|key| Coordinator::default().with_key(key).with_node_id(BrokerId(-1)).with_error_code(code))
        .collect();
    ResponseKind::FindCoordinator(FindCoordinatorResponse::default().with_coordinators(coordinators))
}

/// Each user the request names, once.
fn alter_user_scram_credentials(request: &AlterUserScramCredentialsRequest, code: i16) -> ResponseKind {
    use alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
    let users = request.deletions.iter().map(|d| &d.name).chain(request.upsertions.iter().map(|u| &u.name));
    let mut names: Vec<_> = users.cloned().collect();
    names.sort();
    names.dedup();
    let results = names
        .into_iter()
        .map(|user| AlterUserScramCredentialsResult::default().with_user(user).with_error_code(code))
        .collect();
    ResponseKind::AlterUserScramCredentials(AlterUserScramCredentialsResponse::default().with_results(results))
}

/// Each entity the request names.
fn alter_client_quotas(request: &AlterClientQuotasRequest, code: i16) -> ResponseKind {
    use alter_client_quotas_response::{EntityData, EntryData};
    let entries = request
        .entries
        .iter()
        .map(|e| {
            let entity = e
                .entity
                .iter()
                .map(|d| {
                    EntityData::default()
                        .with_entity_type(d.entity_type.clone())
                        .with_entity_name(d.entity_name.clone())
                })
                .collect();
            EntryData::default().with_error_code(code).with_entity(entity)
        })
        .collect();
    ResponseKind::AlterClientQuotas(AlterClientQuotasResponse::default().with_entries(entries))
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
    use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
    use kafka_protocol::protocol::Message;

    use super::*;

    fn encodes(kind: &ResponseKind, version: i16) -> bool {
        let mut out = bytes::BytesMut::new();
        kind.encode(&mut out, version).is_ok()
    }

    // A response with a field its version lacks turns into an error response that
    // encodes at every version of the API, keeping the partitions it named.
    #[test]
    fn error_responses_encode_at_every_version() {
        let partition = ListOffsetsPartitionResponse::default().with_partition_index(3).with_leader_epoch(7);
        let list_offsets = ListOffsetsResponse::default().with_topics(vec![ListOffsetsTopicResponse::default()
            .with_name(TopicName("t".to_string().into()))
            .with_partitions(vec![partition])]);
        let produce = ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
            .with_name(TopicName("t".to_string().into()))
            .with_partition_responses(vec![PartitionProduceResponse::default()
                .with_index(2)
                .with_log_start_offset(9)])]);
        let fetch = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic(TopicName("t".to_string().into()))
            .with_partitions(vec![PartitionData::default()
                .with_partition_index(1)
                .with_preferred_read_replica(BrokerId(4))])]);
        let coordinator = FindCoordinatorResponse::default()
            .with_coordinators(vec![Coordinator::default().with_key("g".to_string().into())]);
        let checks: Vec<(ApiKey, ResponseKind, kafka_protocol::protocol::VersionRange)> = vec![
            (ApiKey::ListOffsets, ResponseKind::ListOffsets(list_offsets), ListOffsetsResponse::VERSIONS),
            (ApiKey::Produce, ResponseKind::Produce(produce), ProduceResponse::VERSIONS),
            (ApiKey::Fetch, ResponseKind::Fetch(fetch), FetchResponse::VERSIONS),
            (ApiKey::FindCoordinator, ResponseKind::FindCoordinator(coordinator), FindCoordinatorResponse::VERSIONS),
            (ApiKey::JoinGroup, ResponseKind::JoinGroup(JoinGroupResponse::default()), JoinGroupResponse::VERSIONS),
            (
                ApiKey::ApiVersions,
                ResponseKind::ApiVersions(ApiVersionsResponse::default()),
                ApiVersionsResponse::VERSIONS,
            ),
        ];
        for (api, failed, versions) in checks {
            for version in versions.min..=versions.max {
                let fallback = for_failed(api, failed.clone(), version).expect("an error response");
                assert!(encodes(&fallback, version), "{fallback:?} v{version}");
            }
        }
        let partitions = match for_failed(ApiKey::ListOffsets, checks_list_offsets(), 2) {
            Some(ResponseKind::ListOffsets(r)) => r.topics[0].partitions.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!((partitions[0].partition_index, partitions[0].error_code), (3, UNKNOWN_SERVER_ERROR));
    }

    fn checks_list_offsets() -> ResponseKind {
        ResponseKind::ListOffsets(ListOffsetsResponse::default().with_topics(vec![
            ListOffsetsTopicResponse::default().with_partitions(vec![
                ListOffsetsPartitionResponse::default().with_partition_index(3).with_leader_epoch(1),
            ]),
        ]))
    }

    // A request refused whole gets its API's shape from the request's own keys: the
    // same builder as a failed response's, with the error the refusal names.
    #[test]
    fn a_refused_request_keeps_its_partitions() {
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        let request = ProduceRequest::default().with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName("t".to_string().into()))
            .with_partition_data(vec![PartitionProduceData::default().with_index(5)])]);
        let refused = for_request(&RequestKind::Produce(request), 9, 53).expect("a produce error shape");
        let ResponseKind::Produce(response) = refused else { panic!("{refused:?}") };
        let partition = &response.responses[0].partition_responses[0];
        assert_eq!((partition.index, partition.error_code, partition.base_offset), (5, 53, -1));
        assert!(encodes(&ResponseKind::Produce(response), 9));
        assert!(for_request(&RequestKind::Metadata(MetadataRequest::default()), 12, 31).is_none());
    }
}
