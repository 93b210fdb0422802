//! LeaveGroup: one member (v0-2) or a batch of members by id or instance id (v3+,
//! KIP-345).

use std::rc::Rc;

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse, RequestHeader};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_coordinator::group::calls;

use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 5 };

pub async fn handle(shard: &Rc<Shard>, header: &RequestHeader, request: LeaveGroupRequest) -> LeaveGroupResponse {
    let group = request.group_id.0.to_string();
    let batched = header.request_api_version >= 3;
    let members: Vec<(String, Option<String>)> = if batched {
        request
            .members
            .iter()
            .map(|m| (m.member_id.to_string(), m.group_instance_id.as_ref().map(|i| i.to_string())))
            .collect()
    } else {
        vec![(request.member_id.to_string(), None)]
    };
    let call = calls::Leave { group: group.clone(), members: members.clone() };
    let codes = crate::topics::group_call(shard, &group, call).await;
    let mut response = LeaveGroupResponse::default();
    match codes {
        Err(c) => response.error_code = c,
        Ok(codes) if batched => {
            response.members = members
                .iter()
                .zip(codes)
                .map(|((id, instance), c)| {
                    MemberResponse::default()
                        .with_member_id(super::s(id.clone()))
                        .with_group_instance_id(instance.clone().map(super::s))
                        .with_error_code(c)
                })
                .collect();
        }
        Ok(codes) => response.error_code = codes.first().copied().unwrap_or(code::NONE),
    }
    response
}
