//! OffsetForLeaderEpoch (KIP-101, KIP-320): the end offset of a leader epoch, so that a
//! consumer (or a follower) finds where its log diverged from the leader's. Answered
//! by the partition's replica: the current epoch ends at the log end; an older one
//! where the next epoch began; an epoch older than any known ends where the first
//! known begins; an unknown newer one is undefined (-1, -1), as Kafka answers.

use std::rc::Rc;

use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use kafka_protocol::protocol::VersionRange;

use super::route_partitions;
use crate::authorize::{Caller, Op};
use crate::shard::{ops, Shard};

/// Kafka 4.x serves 2-4 (KIP-896 removed 0 and 1).
pub const VERSIONS: VersionRange = VersionRange { min: 2, max: 4 };

pub async fn handle(
    shard: &Rc<Shard>,
    request: OffsetForLeaderEpochRequest,
    caller: &Caller,
) -> OffsetForLeaderEpochResponse {
    let image = shard.image();
    let mut response = OffsetForLeaderEpochResponse::default();
    for topic in request.topics {
        let ops = topic.partitions.iter().map(|p| {
            let op = ops::EpochEndOffset { current_leader_epoch: p.current_leader_epoch, leader_epoch: p.leader_epoch };
            (p.partition, op)
        });
        let results =
            route_partitions(shard, &image, &topic.topic, ops, caller.topic(Op::Describe, &topic.topic)).await;
        let mut out = OffsetForLeaderTopicResult::default().with_topic(topic.topic.clone());
        for (p, result) in topic.partitions.iter().zip(results) {
            let mut answer =
                EpochEndOffset::default().with_partition(p.partition).with_leader_epoch(-1).with_end_offset(-1);
            match result {
                Ok(end) => {
                    answer.leader_epoch = end.leader_epoch;
                    answer.end_offset = end.end_offset;
                }
                Err(error) => answer.error_code = error.code,
            }
            out.partitions.push(answer);
        }
        response.topics.push(out);
    }
    response
}
