//! CreatePartitions: grows topics, with `validate_only`.

use std::rc::Rc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;

use super::s;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 3 };

pub async fn handle(
    shard: &Rc<Shard>,
    request: CreatePartitionsRequest,
    caller: &crate::authorize::Caller,
) -> CreatePartitionsResponse {
    let mut response = CreatePartitionsResponse::default();
    for topic in request.topics {
        let mut result = CreatePartitionsTopicResult::default();
        result.name = topic.name.clone();
        let name = topic.name.0.to_string();
        let assignments_ok = topic.assignments.as_ref().is_none_or(|list| {
            list.iter().all(|a| a.broker_ids.len() == 1 && a.broker_ids[0].0 == shard.settings.node_id)
        });
        let outcome = if !caller.topic(crate::authorize::Op::Alter, &name) {
            Err((crate::authorize::TOPIC_AUTHORIZATION_FAILED, "Authorization failed.".into()))
        } else if assignments_ok {
            crate::topics::create_partitions(shard, &name, topic.count, request.validate_only).await
        } else {
            Err((code::INVALID_REPLICA_ASSIGNMENT, "Replica assignments must name this broker".into()))
        };
        if let Err((error, message)) = outcome {
            result.error_code = error;
            result.error_message = Some(s(message));
        }
        response.results.push(result);
    }
    response
}
