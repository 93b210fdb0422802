//! ShareAcknowledge (KIP-932): a share consumer's acknowledgements outside a fetch
//! (commitSync, and at close with epoch -1, after which what the member holds on
//! the session's partitions is released).

use std::collections::BTreeSet;
use std::rc::Rc;

use kafka_protocol::messages::share_acknowledge_response::{
    LeaderIdAndEpoch, NodeEndpoint, PartitionData, ShareAcknowledgeTopicResponse,
};
use kafka_protocol::messages::{ShareAcknowledgeRequest, ShareAcknowledgeResponse};
use kafka_protocol::protocol::{StrBytes, VersionRange};
use skein_control::errors::code;
use skein_coordinator::serve::share_leader::ShareCall;
use skein_engine::TopicPartition;

use super::share_fetch::{ack_batches, caller_member, node_endpoints, release};
use crate::authorize::{Caller, Op, TOPIC_AUTHORIZATION_FAILED};
use crate::shard::{ops, Shard};

/// Version 2 adds renew acknowledgements (KIP-1222) and the lock's duration in the
/// response.
pub const VERSIONS: VersionRange = VersionRange { min: 1, max: 2 };

fn s(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

pub async fn handle(
    shard: &Rc<Shard>,
    request: ShareAcknowledgeRequest,
    caller: &Caller,
    listener: &str,
) -> ShareAcknowledgeResponse {
    let refuse =
        |c: i16, m: &str| ShareAcknowledgeResponse::default().with_error_code(c).with_error_message(Some(s(m)));
    let (group, member) = match caller_member(request.group_id.as_ref(), request.member_id.as_ref(), caller) {
        Ok(named) => named,
        Err((c, m)) => return refuse(c, m),
    };
    let closed =
        match shard.clients.share_sessions.borrow_mut().acknowledge(&group, &member, request.share_session_epoch) {
            Ok(closed) => closed,
            Err(c) => return ShareAcknowledgeResponse::default().with_error_code(c),
        };
    let image = shard.image();
    let (settings, ..) = skein_coordinator::group::configs::share_partition_settings(&image, &group);
    let lock_ms = settings.lock_duration.as_millis().min(i32::MAX as u128) as i32;
    let mut leaders = BTreeSet::new();
    let mut response = ShareAcknowledgeResponse::default();
    response.acquisition_lock_timeout_ms = lock_ms;
    for topic in request.topics {
        let meta = image.topic_by_id(topic.topic_id);
        let mut out = ShareAcknowledgeTopicResponse::default().with_topic_id(topic.topic_id);
        for p in topic.partitions {
            let batches: Vec<(i64, i64, &[i8])> = p
                .acknowledgement_batches
                .iter()
                .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.as_slice()))
                .collect();
            let error = match (meta, ack_batches(&batches, request.is_renew_ack)) {
                (None, _) => code::UNKNOWN_TOPIC_ID,
                (Some(meta), _) if !caller.topic(Op::Read, &meta.name) => TOPIC_AUTHORIZATION_FAILED,
                (Some(meta), _) if !(0..meta.partitions).contains(&p.partition_index) => {
                    code::UNKNOWN_TOPIC_OR_PARTITION
                }
                (_, Err(c)) => c,
                (_, Ok(acks)) if acks.is_empty() => code::NONE,
                (Some(meta), Ok(acks)) => {
                    let tp = TopicPartition::new(meta.name.clone(), p.partition_index);
                    let call = ShareCall::Acknowledge {
                        group: group.clone(),
                        member: member.clone(),
                        topic_id: topic.topic_id,
                        acks,
                    };
                    match shard.call(tp, ops::Share(Box::new(call))).await {
                        Ok(answer) => answer.ack_error,
                        Err(e) => e.code,
                    }
                }
            };
            let mut data = PartitionData::default().with_partition_index(p.partition_index).with_error_code(error);
            data.current_leader = LeaderIdAndEpoch::default().with_leader_id(-1).with_leader_epoch(-1);
            if let (true, Some(meta)) = (super::leaders::names_leader(error), meta) {
                let (leader, epoch) = super::leaders::current_leader(shard, &meta.name, p.partition_index, listener);
                data.current_leader = LeaderIdAndEpoch::default().with_leader_id(leader).with_leader_epoch(epoch);
                if leader >= 0 {
                    leaders.insert(leader);
                }
            }
            out.partitions.push(data);
        }
        response.responses.push(out);
    }
    if let Some(closed) = closed {
        release(shard, closed).await;
    }
    response.node_endpoints = node_endpoints(shard, &leaders, listener, |id, host, port, rack| {
        NodeEndpoint::default().with_node_id(id).with_host(host).with_port(port).with_rack(rack)
    });
    response
}
