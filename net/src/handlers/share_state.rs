//! The share coordinator's RPCs between brokers (Kafka's 83-87): Initialize, Read,
//! Write, Delete and ReadSummary of share-partition state, each partition a
//! `coordinator::share::StateCall` run by this node's coordinator; and the same
//! calls sent to the broker that coordinates a key (`send`). A caller without
//! CLUSTER_ACTION gets CLUSTER_AUTHORIZATION_FAILED on every partition.

use std::rc::Rc;

use kafka_protocol::messages::{
    delete_share_group_state_request as delete_req, delete_share_group_state_response as delete_resp,
    initialize_share_group_state_request as init_req, initialize_share_group_state_response as init_resp,
    read_share_group_state_request as read_req, read_share_group_state_response as read_resp,
    read_share_group_state_summary_request as summary_req, read_share_group_state_summary_response as summary_resp,
    write_share_group_state_request as write_req, write_share_group_state_response as write_resp,
    DeleteShareGroupStateRequest, DeleteShareGroupStateResponse, InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse, ReadShareGroupStateRequest, ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryRequest, ReadShareGroupStateSummaryResponse, WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
};
use kafka_protocol::protocol::{StrBytes, VersionRange};
use skein_control::errors::code;
use skein_coordinator::serve::share::{Key, StateCall, Stored};
use skein_coordinator::share::partition::{RecordState, StateBatch};

use crate::authorize::{Caller, Op, CLUSTER_AUTHORIZATION_FAILED};
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };
/// ReadShareGroupStateSummary v1 adds each partition's DeliveryCompleteCount
/// (KIP-1226), for the lag of a share-partition whose coordinator is elsewhere.
pub const SUMMARY_VERSIONS: VersionRange = VersionRange { min: 0, max: 1 };

/// How long a call to another broker's share coordinator may take.
const STATE_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

type Answer = Result<Stored, skein_control::errors::Refusal>;

fn message(m: &str) -> Option<StrBytes> {
    (!m.is_empty()).then(|| StrBytes::from_string(m.to_string()))
}

fn state_of(code: i8) -> Option<RecordState> {
    Some(match code {
        0 => RecordState::Available,
        1 => RecordState::Acquired,
        2 => RecordState::Acknowledged,
        3 | 4 => RecordState::Archived,
        _ => return None,
    })
}

async fn local(shard: &Rc<Shard>, caller: &Caller, call: StateCall) -> Answer {
    if !caller.cluster(Op::ClusterAction) {
        return Err((CLUSTER_AUTHORIZATION_FAILED, String::new()));
    }
    shard.share_state_here(call).await
}

pub async fn initialize(
    shard: &Rc<Shard>,
    request: InitializeShareGroupStateRequest,
    caller: &Caller,
) -> InitializeShareGroupStateResponse {
    let group = request.group_id.to_string();
    let mut response = InitializeShareGroupStateResponse::default();
    for topic in request.topics {
        let mut result = init_resp::InitializeStateResult::default().with_topic_id(topic.topic_id);
        for p in topic.partitions {
            let key = Key { group: group.clone(), topic_id: topic.topic_id, partition: p.partition };
            let call = StateCall::Initialize { key, state_epoch: p.state_epoch, start: p.start_offset };
            let (error, text) = local(shard, caller, call).await.err().unwrap_or_default();
            result.partitions.push(
                init_resp::PartitionResult::default()
                    .with_partition(p.partition)
                    .with_error_code(error)
                    .with_error_message(message(&text)),
            );
        }
        response.results.push(result);
    }
    response
}

pub async fn read(
    shard: &Rc<Shard>,
    request: ReadShareGroupStateRequest,
    caller: &Caller,
) -> ReadShareGroupStateResponse {
    let group = request.group_id.to_string();
    let mut response = ReadShareGroupStateResponse::default();
    for topic in request.topics {
        let mut result = read_resp::ReadStateResult::default().with_topic_id(topic.topic_id);
        for p in topic.partitions {
            let key = Key { group: group.clone(), topic_id: topic.topic_id, partition: p.partition };
            let partition = read_resp::PartitionResult::default().with_partition(p.partition);
            result.partitions.push(
                match local(shard, caller, StateCall::Read { key, leader_epoch: p.leader_epoch }).await {
                    Ok(stored) => partition
                        .with_state_epoch(stored.state_epoch)
                        .with_start_offset(stored.start)
                        .with_state_batches(
                            stored
                                .batches
                                .iter()
                                .map(|b| {
                                    read_resp::StateBatch::default()
                                        .with_first_offset(b.first)
                                        .with_last_offset(b.last)
                                        .with_delivery_state(b.state as i8)
                                        .with_delivery_count(b.deliveries.min(i16::MAX as u16) as i16)
                                })
                                .collect(),
                        ),
                    Err((error, text)) => partition.with_error_code(error).with_error_message(message(&text)),
                },
            );
        }
        response.results.push(result);
    }
    response
}

pub async fn write(
    shard: &Rc<Shard>,
    request: WriteShareGroupStateRequest,
    caller: &Caller,
) -> WriteShareGroupStateResponse {
    let group = request.group_id.to_string();
    let mut response = WriteShareGroupStateResponse::default();
    for topic in request.topics {
        let mut result = write_resp::WriteStateResult::default().with_topic_id(topic.topic_id);
        for p in topic.partitions {
            let key = Key { group: group.clone(), topic_id: topic.topic_id, partition: p.partition };
            let batches: Option<Vec<StateBatch>> = p
                .state_batches
                .iter()
                .map(|b| {
                    let state = state_of(b.delivery_state)?;
                    let deliveries = b.delivery_count.max(0) as u16;
                    (b.first_offset <= b.last_offset).then_some(StateBatch {
                        first: b.first_offset,
                        last: b.last_offset,
                        state,
                        deliveries,
                    })
                })
                .collect();
            let answer = match batches {
                None => Err((code::INVALID_REQUEST, "Invalid state batch.".to_string())),
                Some(batches) => {
                    let (state_epoch, leader_epoch, start) = (p.state_epoch, p.leader_epoch, p.start_offset);
                    local(shard, caller, StateCall::Write { key, state_epoch, leader_epoch, start, batches }).await
                }
            };
            let (error, text) = answer.err().unwrap_or_default();
            result.partitions.push(
                write_resp::PartitionResult::default()
                    .with_partition(p.partition)
                    .with_error_code(error)
                    .with_error_message(message(&text)),
            );
        }
        response.results.push(result);
    }
    response
}

pub async fn delete(
    shard: &Rc<Shard>,
    request: DeleteShareGroupStateRequest,
    caller: &Caller,
) -> DeleteShareGroupStateResponse {
    let group = request.group_id.to_string();
    let mut response = DeleteShareGroupStateResponse::default();
    for topic in request.topics {
        let mut result = delete_resp::DeleteStateResult::default().with_topic_id(topic.topic_id);
        for p in topic.partitions {
            let key = Key { group: group.clone(), topic_id: topic.topic_id, partition: p.partition };
            let (error, text) = local(shard, caller, StateCall::Delete { key }).await.err().unwrap_or_default();
            result.partitions.push(
                delete_resp::PartitionResult::default()
                    .with_partition(p.partition)
                    .with_error_code(error)
                    .with_error_message(message(&text)),
            );
        }
        response.results.push(result);
    }
    response
}

pub async fn summary(
    shard: &Rc<Shard>,
    request: ReadShareGroupStateSummaryRequest,
    caller: &Caller,
) -> ReadShareGroupStateSummaryResponse {
    let group = request.group_id.to_string();
    let mut response = ReadShareGroupStateSummaryResponse::default();
    for topic in request.topics {
        let mut result = summary_resp::ReadStateSummaryResult::default().with_topic_id(topic.topic_id);
        for p in topic.partitions {
            let key = Key { group: group.clone(), topic_id: topic.topic_id, partition: p.partition };
            let partition = summary_resp::PartitionResult::default().with_partition(p.partition);
            result.partitions.push(match local(shard, caller, StateCall::Summary { key }).await {
                Ok(stored) => {
                    let mut partition = partition
                        .with_state_epoch(stored.state_epoch)
                        .with_leader_epoch(stored.leader_epoch)
                        .with_start_offset(stored.start);
                    partition.delivery_complete_count = match stored.start {
                        -1 => -1,
                        _ => stored.delivery_complete().min(i32::MAX as i64) as i32,
                    };
                    partition
                }
                Err((error, text)) => partition.with_error_code(error).with_error_message(message(&text)),
            });
        }
        response.results.push(result);
    }
    response
}

/// Sends `call` to `broker`'s share coordinator, as Kafka's persister does.
///
/// # Errors
/// The partition's error, or COORDINATOR_NOT_AVAILABLE when the broker cannot be
/// reached.
pub async fn send(shard: &Rc<Shard>, broker: i32, call: StateCall) -> Answer {
    let unavailable = || (code::COORDINATOR_NOT_AVAILABLE, String::new());
    let (host, port) = shard.broker_address(broker).ok_or_else(unavailable)?;
    let security = &shard.settings.security;
    let client = format!("skein-share-{}", shard.settings.node_id);
    let key = call.key().clone();
    let group = StrBytes::from_string(key.group.clone());
    let failed = |e: std::io::Error| {
        tracing::debug!(target: "skein::net", broker, error = %e, "share coordinator call failed");
        unavailable()
    };
    let result = |error: i16, text: &Option<StrBytes>| {
        (error != code::NONE).then(|| (error, text.as_ref().map(|t| t.to_string()).unwrap_or_default()))
    };
    macro_rules! exchange {
        ($request:expr) => {
            exchange!($request, 0)
        };
        ($request:expr, $version:expr) => {
            skein_control::peer::pooled_call(security, &host, port, &client, &$request, $version, STATE_CALL_TIMEOUT)
                .await
                .map_err(failed)?
        };
    }
    match call {
        StateCall::Initialize { state_epoch, start, .. } => {
            let partition = init_req::PartitionData::default()
                .with_partition(key.partition)
                .with_state_epoch(state_epoch)
                .with_start_offset(start);
            let topic =
                init_req::InitializeStateData::default().with_topic_id(key.topic_id).with_partitions(vec![partition]);
            let response: InitializeShareGroupStateResponse =
                exchange!(InitializeShareGroupStateRequest::default().with_group_id(group).with_topics(vec![topic]));
            let p = response.results.first().and_then(|r| r.partitions.first()).ok_or_else(unavailable)?;
            result(p.error_code, &p.error_message).map_or(Ok(Stored::none()), Err)
        }
        StateCall::Read { leader_epoch, .. } => {
            let partition =
                read_req::PartitionData::default().with_partition(key.partition).with_leader_epoch(leader_epoch);
            let topic = read_req::ReadStateData::default().with_topic_id(key.topic_id).with_partitions(vec![partition]);
            let response: ReadShareGroupStateResponse =
                exchange!(ReadShareGroupStateRequest::default().with_group_id(group).with_topics(vec![topic]));
            let p = response.results.first().and_then(|r| r.partitions.first()).ok_or_else(unavailable)?;
            if let Some(error) = result(p.error_code, &p.error_message) {
                return Err(error);
            }
            let batches = p
                .state_batches
                .iter()
                .filter_map(|b| {
                    Some(StateBatch {
                        first: b.first_offset,
                        last: b.last_offset,
                        state: state_of(b.delivery_state)?,
                        deliveries: b.delivery_count.max(0) as u16,
                    })
                })
                .collect();
            let start = p.start_offset;
            Ok(Stored { snapshot_epoch: 0, state_epoch: p.state_epoch, leader_epoch, start, batches, complete: None })
        }
        StateCall::Write { state_epoch, leader_epoch, start, batches, .. } => {
            let partition = write_req::PartitionData::default()
                .with_partition(key.partition)
                .with_state_epoch(state_epoch)
                .with_leader_epoch(leader_epoch)
                .with_start_offset(start)
                .with_state_batches(
                    batches
                        .iter()
                        .map(|b| {
                            write_req::StateBatch::default()
                                .with_first_offset(b.first)
                                .with_last_offset(b.last)
                                .with_delivery_state(b.state as i8)
                                .with_delivery_count(b.deliveries.min(i16::MAX as u16) as i16)
                        })
                        .collect(),
                );
            let topic =
                write_req::WriteStateData::default().with_topic_id(key.topic_id).with_partitions(vec![partition]);
            let response: WriteShareGroupStateResponse =
                exchange!(WriteShareGroupStateRequest::default().with_group_id(group).with_topics(vec![topic]));
            let p = response.results.first().and_then(|r| r.partitions.first()).ok_or_else(unavailable)?;
            result(p.error_code, &p.error_message).map_or(Ok(Stored::none()), Err)
        }
        StateCall::Delete { .. } => {
            let partition = delete_req::PartitionData::default().with_partition(key.partition);
            let topic =
                delete_req::DeleteStateData::default().with_topic_id(key.topic_id).with_partitions(vec![partition]);
            let response: DeleteShareGroupStateResponse =
                exchange!(DeleteShareGroupStateRequest::default().with_group_id(group).with_topics(vec![topic]));
            let p = response.results.first().and_then(|r| r.partitions.first()).ok_or_else(unavailable)?;
            result(p.error_code, &p.error_message).map_or(Ok(Stored::none()), Err)
        }
        StateCall::Summary { .. } => {
            let partition = summary_req::PartitionData::default().with_partition(key.partition).with_leader_epoch(0);
            let topic = summary_req::ReadStateSummaryData::default()
                .with_topic_id(key.topic_id)
                .with_partitions(vec![partition]);
            let request = ReadShareGroupStateSummaryRequest::default().with_group_id(group).with_topics(vec![topic]);
            let response: ReadShareGroupStateSummaryResponse = exchange!(request, SUMMARY_VERSIONS.max);
            let p = response.results.first().and_then(|r| r.partitions.first()).ok_or_else(unavailable)?;
            if let Some(error) = result(p.error_code, &p.error_message) {
                return Err(error);
            }
            let stored = Stored {
                snapshot_epoch: 0,
                state_epoch: p.state_epoch,
                leader_epoch: p.leader_epoch,
                start: p.start_offset,
                batches: Vec::new(),
                complete: Some(p.delivery_complete_count as i64).filter(|c| *c >= 0),
            };
            Ok(stored)
        }
    }
}
