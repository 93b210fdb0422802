//! The error response of an API, for a response that a handler built but that does not
//! encode at the request's version (a handler bug: a field set that the version lacks).
//!
//! A Java broker answers a request it cannot serve with `AbstractRequest.getErrorResponse`:
//! the same shape, every error code set. Skein does the same from the failed response,
//! so the client learns which partitions failed and retries, instead of waiting for a
//! reply that never comes. Where the API has no such shape here, the connection is
//! closed, which every client handles by reconnecting.

use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::*;

use crate::errors::code::UNKNOWN_SERVER_ERROR;

/// The error response for `failed` at `version`, every error UNKNOWN_SERVER_ERROR and
/// every other field at its default; `None` when the connection must be closed instead.
pub fn error_response(failed: ResponseKind, version: i16) -> Option<ResponseKind> {
    let error = UNKNOWN_SERVER_ERROR;
    Some(match failed {
        ResponseKind::ApiVersions(_) => {
            ResponseKind::ApiVersions(ApiVersionsResponse::default().with_error_code(error))
        }
        ResponseKind::InitProducerId(_) => {
            ResponseKind::InitProducerId(InitProducerIdResponse::default().with_error_code(error))
        }
        ResponseKind::JoinGroup(_) => ResponseKind::JoinGroup(JoinGroupResponse::default().with_error_code(error)),
        ResponseKind::SyncGroup(_) => ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(error)),
        ResponseKind::Heartbeat(_) => ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(error)),
        ResponseKind::LeaveGroup(_) => ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(error)),
        ResponseKind::ListGroups(_) => ResponseKind::ListGroups(ListGroupsResponse::default().with_error_code(error)),
        ResponseKind::ElectLeaders(_) => {
            ResponseKind::ElectLeaders(ElectLeadersResponse::default().with_error_code(error))
        }
        ResponseKind::DescribeCluster(_) => {
            ResponseKind::DescribeCluster(DescribeClusterResponse::default().with_error_code(error))
        }
        ResponseKind::ConsumerGroupHeartbeat(_) => {
            ResponseKind::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatResponse::default().with_error_code(error))
        }
        ResponseKind::OffsetDelete(_) => {
            ResponseKind::OffsetDelete(OffsetDeleteResponse::default().with_error_code(error))
        }
        ResponseKind::FindCoordinator(failed) if version >= 4 => {
            let coordinators = failed
                .coordinators
                .into_iter()
                .map(|c| Coordinator::default().with_key(c.key).with_node_id(BrokerId(-1)).with_error_code(error))
                .collect();
            ResponseKind::FindCoordinator(FindCoordinatorResponse::default().with_coordinators(coordinators))
        }
        ResponseKind::FindCoordinator(_) => ResponseKind::FindCoordinator(
            FindCoordinatorResponse::default().with_error_code(error).with_node_id(BrokerId(-1)),
        ),
        ResponseKind::Produce(failed) => {
            let responses = failed
                .responses
                .into_iter()
                .map(|t| {
                    let partitions = t
                        .partition_responses
                        .iter()
                        .map(|p| PartitionProduceResponse::default().with_index(p.index).with_error_code(error))
                        .collect();
                    TopicProduceResponse::default().with_name(t.name).with_partition_responses(partitions)
                })
                .collect();
            ResponseKind::Produce(ProduceResponse::default().with_responses(responses))
        }
        ResponseKind::ListOffsets(failed) => {
            let topics = failed
                .topics
                .into_iter()
                .map(|t| {
                    let partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            ListOffsetsPartitionResponse::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(error)
                        })
                        .collect();
                    ListOffsetsTopicResponse::default().with_name(t.name).with_partitions(partitions)
                })
                .collect();
            ResponseKind::ListOffsets(ListOffsetsResponse::default().with_topics(topics))
        }
        ResponseKind::Fetch(_) if version >= 7 => ResponseKind::Fetch(FetchResponse::default().with_error_code(error)),
        ResponseKind::Fetch(failed) => {
            let responses = failed
                .responses
                .into_iter()
                .map(|t| {
                    let partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            PartitionData::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(error)
                                .with_aborted_transactions(Some(Vec::new()))
                        })
                        .collect();
                    FetchableTopicResponse::default().with_topic(t.topic).with_partitions(partitions)
                })
                .collect();
            ResponseKind::Fetch(FetchResponse::default().with_responses(responses))
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
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
        let checks: Vec<(ResponseKind, kafka_protocol::protocol::VersionRange)> = vec![
            (ResponseKind::ListOffsets(list_offsets), ListOffsetsResponse::VERSIONS),
            (ResponseKind::Produce(produce), ProduceResponse::VERSIONS),
            (ResponseKind::Fetch(fetch), FetchResponse::VERSIONS),
            (ResponseKind::FindCoordinator(coordinator), FindCoordinatorResponse::VERSIONS),
            (ResponseKind::JoinGroup(JoinGroupResponse::default()), JoinGroupResponse::VERSIONS),
            (ResponseKind::ApiVersions(ApiVersionsResponse::default()), ApiVersionsResponse::VERSIONS),
        ];
        for (failed, versions) in checks {
            for version in versions.min..=versions.max {
                let fallback = error_response(failed.clone(), version).expect("an error response");
                assert!(encodes(&fallback, version), "{fallback:?} v{version}");
            }
        }
        let partitions = match error_response(checks_list_offsets(), 2) {
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
}
