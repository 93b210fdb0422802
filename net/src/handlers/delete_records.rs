//! DeleteRecords: moves each partition's log start offset.

use std::rc::Rc;

use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use kafka_protocol::protocol::VersionRange;

use super::route_partitions;
use crate::authorize::{Caller, Op};
use crate::shard::{ops, Shard};

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 2 };

pub async fn handle(shard: &Rc<Shard>, request: DeleteRecordsRequest, caller: &Caller) -> DeleteRecordsResponse {
    let image = shard.image();
    let mut response = DeleteRecordsResponse::default();
    for topic in request.topics {
        let ops = topic.partitions.iter().map(|p| (p.partition_index, ops::DeleteRecords { offset: p.offset }));
        let results = route_partitions(shard, &image, &topic.name, ops, caller.topic(Op::Delete, &topic.name)).await;
        let mut out = DeleteRecordsTopicResult::default();
        out.name = topic.name.clone();
        for (p, result) in topic.partitions.iter().zip(results) {
            let mut partition = DeleteRecordsPartitionResult::default();
            partition.partition_index = p.partition_index;
            match result {
                Ok(deleted) => partition.low_watermark = deleted.low_watermark,
                Err(error) => {
                    partition.error_code = error.code;
                    partition.low_watermark = -1;
                }
            }
            out.partitions.push(partition);
        }
        response.topics.push(out);
    }
    response
}
