//! ListOffsets: earliest (-2), latest (-1), max timestamp (-3), earliest local (-4)
//! and by timestamp, answered by each partition's owner; latest is the last stable
//! offset for read_committed clients. Latest tiered (-5, v9) and earliest pending
//! upload (-6, v11) are offset -1 without tiered storage, as on Kafka 4.4. v10's
//! timeout bounds waits for remote offsets, which there are none of.

use std::rc::Rc;

use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse, RequestHeader};
use kafka_protocol::protocol::VersionRange;

use super::route_partitions;
use crate::authorize::{Caller, Op};
use crate::shard::{ops, Shard};

pub const VERSIONS: VersionRange = VersionRange { min: 1, max: 11 };

pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: ListOffsetsRequest,
    caller: &Caller,
) -> ListOffsetsResponse {
    // Leader epochs exist in the response from v4 (KIP-320).
    let with_epoch = header.request_api_version >= 4;
    let image = shard.image();
    // read_committed (v2+): the latest offset is the last stable offset.
    let committed = request.isolation_level == 1;
    let mut response = ListOffsetsResponse::default();
    for topic in request.topics {
        let ops = topic
            .partitions
            .iter()
            .map(|p| (p.partition_index, ops::ListOffsets { timestamp: p.timestamp, committed }));
        let results = route_partitions(shard, &image, &topic.name, ops, caller.topic(Op::Describe, &topic.name)).await;
        let mut out = ListOffsetsTopicResponse::default();
        out.name = topic.name.clone();
        for (p, result) in topic.partitions.iter().zip(results) {
            let mut partition = ListOffsetsPartitionResponse::default();
            partition.partition_index = p.partition_index;
            match result {
                Ok(ops::OffsetAt { offset, timestamp, leader_epoch }) => {
                    partition.offset = offset;
                    partition.timestamp = timestamp;
                    partition.leader_epoch = if with_epoch { leader_epoch } else { -1 };
                }
                Err(error) => {
                    partition.error_code = error.code;
                    partition.offset = -1;
                    partition.timestamp = -1;
                    partition.leader_epoch = -1;
                }
            }
            out.partitions.push(partition);
        }
        response.topics.push(out);
    }
    response
}
