//! DeleteTopics, by name (v1-5) or by name or id (v6).

use std::rc::Rc;

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, RequestHeader, TopicName};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;

use super::s;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 1, max: 6 };

pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: DeleteTopicsRequest,
    caller: &crate::authorize::Caller,
) -> DeleteTopicsResponse {
    let targets: Vec<(Option<String>, uuid::Uuid)> = if header.request_api_version >= 6 {
        request.topics.iter().map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)).collect()
    } else {
        request.topic_names.iter().map(|n| (Some(n.0.to_string()), uuid::Uuid::nil())).collect()
    };
    let mut response = DeleteTopicsResponse::default();
    for (name, id) in targets {
        let mut result = DeletableTopicResult::default();
        result.topic_id = id;
        let image = shard.image();
        let resolved = match &name {
            Some(n) => Ok(n.clone()),
            None => image.topic_by_id(id).map(|m| m.name.clone()).ok_or(code::UNKNOWN_TOPIC_ID),
        };
        result.name = name.clone().or_else(|| resolved.clone().ok()).map(|n| TopicName(s(n)));
        match resolved {
            Err(error) => result.error_code = error,
            // By id, a topic the caller may not describe is unknown to it (Kafka).
            Ok(n) if name.is_none() && !caller.topic(crate::authorize::Op::Describe, &n) => {
                result.error_code = code::UNKNOWN_TOPIC_ID;
                result.name = None;
            }
            Ok(n) if !caller.topic(crate::authorize::Op::Delete, &n) => {
                result.error_code = crate::authorize::TOPIC_AUTHORIZATION_FAILED;
            }
            Ok(n) => match crate::topics::delete_topic(shard, &n).await {
                Ok(meta) => result.topic_id = meta.id,
                Err((error, message)) => {
                    result.error_code = error;
                    result.error_message = Some(s(message));
                }
            },
        }
        response.responses.push(result);
    }
    response
}
