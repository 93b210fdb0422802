//! StreamsGroupHeartbeat (KIP-1071): Kafka Streams members join with their topology,
//! heartbeat, reconcile their tasks and leave; the coordinator assigns the tasks. The
//! internal topics a group needs (repartition and changelog topics) are created here
//! after the answer, as Kafka's broker creates them, where the caller may create them;
//! the members wait for them under the MISSING_INTERNAL_TOPICS status meanwhile.

use std::rc::Rc;

use kafka_protocol::messages::streams_group_heartbeat_response::Status;
use kafka_protocol::messages::{RequestHeader, StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse};
use kafka_protocol::protocol::{StrBytes, VersionRange};
use skein_coordinator::group::calls;
use skein_coordinator::group::streams::topology::{InternalTopic, MISSING_INTERNAL_TOPICS};

use crate::authorize::Caller;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 1 };

pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: StreamsGroupHeartbeatRequest,
    peer: &str,
    caller: &Caller,
) -> StreamsGroupHeartbeatResponse {
    let group = request.group_id.0.to_string();
    let call = calls::StreamsHeartbeat {
        request: Box::new(request),
        client_id: header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default(),
        client_host: format!("/{peer}"),
    };
    let answer = match crate::topics::group_call(shard, &group, call).await {
        Ok(answer) => *answer,
        Err(c) => return StreamsGroupHeartbeatResponse::default().with_error_code(c),
    };
    let mut response = answer.response;
    // Version 1 replaced the int32 acceptable recovery lag by an int64 one.
    match header.request_api_version {
        0 => response.acceptable_recovery_lag = -1,
        _ => response.acceptable_recovery_lag_legacy = 0,
    }
    let (allowed, denied): (Vec<InternalTopic>, Vec<InternalTopic>) =
        answer.create.into_iter().partition(|t| caller.may_create_topic(&t.name));
    if !denied.is_empty() {
        let names: Vec<&str> = denied.iter().map(|t| t.name.as_str()).collect();
        let detail = format!("Unauthorized to CREATE on topics {}.", names.join(", "));
        let status = Status::default()
            .with_status_code(MISSING_INTERNAL_TOPICS)
            .with_status_detail(StrBytes::from_string(detail));
        response.status.get_or_insert_with(Vec::new).push(status);
    }
    if !allowed.is_empty() {
        let shard = shard.clone();
        glommio::spawn_local(async move { create(&shard, &group, allowed).await }).detach();
    }
    response
}

/// Creates a group's missing internal topics; one that exists by now is no error.
async fn create(shard: &Rc<Shard>, group: &str, topics: Vec<InternalTopic>) {
    for topic in topics {
        let created =
            crate::topics::create_topic(shard, &topic.name, topic.partitions, topic.replication_factor, topic.configs)
                .await;
        match created {
            Ok(_) => tracing::info!(target: "skein::net", group, topic = %topic.name, "streams internal topic created"),
            Err((skein_control::errors::code::TOPIC_ALREADY_EXISTS, _)) => {}
            Err((code, message)) => {
                tracing::warn!(target: "skein::net", group, topic = %topic.name, code, %message, "cannot create streams internal topic")
            }
        }
    }
}
