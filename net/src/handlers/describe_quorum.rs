//! DescribeQuorum (KIP-595, KIP-836, KIP-853): the metadata quorum of
//! `__cluster_metadata-0` as its leader sees it. Any node answers: it asks the active
//! controller, as Kafka's brokers forward the request.

use std::rc::Rc;

use kafka_protocol::messages::describe_quorum_response::{Listener, Node, PartitionData, ReplicaState, TopicData};
use kafka_protocol::messages::{BrokerId, DescribeQuorumRequest, DescribeQuorumResponse, RequestHeader, TopicName};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_control::metadata::controller::{ControllerReply, ControllerRequest, VoterStatus};

use super::s;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 2 };

/// The metadata log's topic, as Kafka names it.
pub const METADATA_TOPIC: &str = "__cluster_metadata";

pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: DescribeQuorumRequest,
) -> DescribeQuorumResponse {
    let version = header.request_api_version;
    let error = |code: i16, message: String| {
        let mut response = DescribeQuorumResponse::default().with_error_code(code);
        if version >= 2 {
            response.error_message = Some(s(message));
        }
        response
    };
    // Exactly the metadata partition, as Kafka's KafkaRaftClient checks.
    let only_metadata = matches!(request.topics.as_slice(),
        [topic] if topic.topic_name.as_str() == METADATA_TOPIC
            && matches!(topic.partitions.as_slice(), [p] if p.partition_index == 0));
    if !only_metadata {
        return error(code::UNKNOWN_TOPIC_OR_PARTITION, format!("Only {METADATA_TOPIC}-0 has a quorum"));
    }
    let status = match shard.control(ControllerRequest::DescribeQuorum).await.and_then(ControllerReply::into_quorum) {
        Ok(status) => status,
        Err((code, message)) => return error(code, message),
    };
    let image = shard.image();
    // Directory ids travel from v2 (KIP-853); an older version cannot carry one.
    let directory = |node: i32| match version >= 2 {
        true => image.quorum.get(&node).map_or(uuid::Uuid::nil(), |m| m.directory_id),
        false => uuid::Uuid::nil(),
    };
    let states = |members: &[VoterStatus]| -> Vec<ReplicaState> {
        members
            .iter()
            .map(|v| {
                ReplicaState::default()
                    .with_replica_id(BrokerId(v.node))
                    .with_replica_directory_id(directory(v.node))
                    .with_log_end_offset(v.log_end_offset)
                    .with_last_fetch_timestamp(v.last_fetch_ms)
                    .with_last_caught_up_timestamp(v.last_caught_up_ms)
            })
            .collect()
    };
    let partition = PartitionData::default()
        .with_partition_index(0)
        .with_leader_id(BrokerId(status.leader))
        .with_leader_epoch(status.term.clamp(0, i32::MAX as i64) as i32)
        .with_high_watermark(status.high_watermark)
        .with_current_voters(states(&status.voters))
        .with_observers(states(&status.observers));
    let mut response = DescribeQuorumResponse::default().with_topics(vec![TopicData::default()
        .with_topic_name(TopicName(s(METADATA_TOPIC)))
        .with_partitions(vec![partition])]);
    if version >= 2 {
        // Each voter's endpoint: as AddRaftVoter recorded it, else as configured.
        let endpoint = |node: i32| -> Option<(String, u16)> {
            match image.quorum.get(&node) {
                Some(member) => Some((member.host.clone(), member.port)),
                None => {
                    let configured = shard.settings.controller_voters.iter().find(|(id, _)| *id == node);
                    configured.map(|(_, address)| (address.ip().to_string(), address.port()))
                }
            }
        };
        response.nodes = status
            .voters
            .iter()
            .chain(status.observers.iter().filter(|o| image.quorum.contains_key(&o.node)))
            .filter_map(|v| Some((v.node, endpoint(v.node)?)))
            .map(|(id, (host, port))| {
                Node::default().with_node_id(BrokerId(id)).with_listeners(vec![Listener::default()
                    .with_name(s("CONTROLLER"))
                    .with_host(s(host))
                    .with_port(port)])
            })
            .collect();
    }
    response
}
