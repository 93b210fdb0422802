//! AlterPartitionReassignments (KIP-455; v1 KIP-860): moves partitions to new
//! replicas, or cancels a move, through the controller (`decide::reassign`).

use std::rc::Rc;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, RequestHeader,
};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_control::metadata::controller::{ControllerReply, ControllerRequest};

use super::s;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 1 };

pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let mut response = AlterPartitionReassignmentsResponse::default();
    if header.request_api_version >= 1 {
        response.allow_replication_factor_change = request.allow_replication_factor_change;
    }
    let partitions: Vec<(String, i32, Option<Vec<i32>>)> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                let target = p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect());
                (t.name.to_string(), p.partition_index, target)
            })
        })
        .collect();
    let request_keep = !request.allow_replication_factor_change;
    let reassign = ControllerRequest::Reassign { partitions, keep_factor: request_keep };
    let outcomes = match shard.control(reassign).await.and_then(ControllerReply::into_reassigned) {
        Ok(outcomes) => outcomes,
        Err((error, message)) => {
            response.error_code = error;
            response.error_message = Some(s(message));
            return response;
        }
    };
    let mut outcomes = outcomes.into_iter();
    response.responses = request
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let (error, message) = outcomes.next().unwrap_or((code::UNKNOWN_SERVER_ERROR, None));
                    ReassignablePartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(error)
                        .with_error_message(message.map(s))
                })
                .collect();
            ReassignableTopicResponse::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    response
}
