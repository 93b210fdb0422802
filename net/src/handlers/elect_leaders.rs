//! ElectLeaders (KIP-183, KIP-460): the controller moves leadership to each
//! partition's preferred replica (election type 0), or for a partition without a
//! leader to any live replica even out of sync (type 1, unclean: an operator's choice,
//! allowed whatever `unclean.leader.election.enable` says, as in Kafka). A null
//! partition list means every partition. v0 has no top-level error code: a refusal of
//! the whole request is then given to every partition.

use std::rc::Rc;

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, RequestHeader, TopicName};
use kafka_protocol::protocol::VersionRange;
use skein_control::metadata::controller::{ControllerReply, ControllerRequest, Election};

use super::s;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 2 };

pub async fn handle(shard: &Rc<Shard>, header: &RequestHeader, request: ElectLeadersRequest) -> ElectLeadersResponse {
    let version = header.request_api_version;
    // Before v1 there was only the preferred election.
    let unclean = version >= 1 && request.election_type == 1;
    let partitions: Option<Vec<(String, i32)>> = request.topic_partitions.as_ref().map(|topics| {
        topics.iter().flat_map(|t| t.partitions.iter().map(move |&p| (t.topic.0.to_string(), p))).collect()
    });
    let mut response = ElectLeadersResponse::default();
    let request = ControllerRequest::ElectLeaders { unclean, partitions: partitions.clone() };
    let elections = match shard.control(request).await.and_then(ControllerReply::into_elections) {
        Ok(elections) => elections,
        Err(refusal) => return refused(response, version, partitions, refusal),
    };
    response.replica_election_results = results(elections);
    response
}

/// The whole request refused: at the top from v1, for every partition named in v0.
fn refused(
    mut response: ElectLeadersResponse,
    version: i16,
    partitions: Option<Vec<(String, i32)>>,
    (error, message): (i16, String),
) -> ElectLeadersResponse {
    if version >= 1 {
        response.error_code = error;
        return response;
    }
    let elections = partitions
        .unwrap_or_default()
        .into_iter()
        .map(|(topic, partition)| Election { topic, partition, error, message: Some(message.clone()) })
        .collect();
    response.replica_election_results = results(elections);
    response
}

fn results(elections: Vec<Election>) -> Vec<ReplicaElectionResult> {
    let by_topic = super::group_by_topic(elections.into_iter().map(|e| {
        let mut result = PartitionResult::default();
        result.partition_id = e.partition;
        result.error_code = e.error;
        result.error_message = e.message.map(s);
        (e.topic, result)
    }));
    by_topic
        .into_iter()
        .map(|(topic, partition_result)| {
            let mut result = ReplicaElectionResult::default();
            result.topic = TopicName(s(topic));
            result.partition_result = partition_result;
            result
        })
        .collect()
}
