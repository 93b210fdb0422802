//! DeleteRecords: moves each partition's log start offset.

use std::rc::Rc;

use futures_util::future::join_all;
use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use kafka_protocol::protocol::VersionRange;
use skein_engine::TopicPartition;

use crate::errors::code;
use crate::shard::{PartitionOp, PartitionReply, Shard};

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 2 };

pub async fn handle(shard: &Rc<Shard>, request: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let image = shard.image();
    let mut response = DeleteRecordsResponse::default();
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let meta = image.topic(&name);
        let deletes = topic.partitions.iter().map(|p| {
            let shard = shard.clone();
            let known = meta.is_some_and(|m| p.partition_index >= 0 && p.partition_index < m.partitions);
            let partition = TopicPartition::new(name.clone(), p.partition_index);
            let offset = p.offset;
            async move {
                if !known {
                    return Err((code::UNKNOWN_TOPIC_OR_PARTITION, None));
                }
                shard.route(partition, PartitionOp::DeleteRecords { offset }).await
            }
        });
        let results = join_all(deletes).await;
        let mut out = DeleteRecordsTopicResult::default();
        out.name = topic.name.clone();
        for (p, result) in topic.partitions.iter().zip(results) {
            let mut partition = DeleteRecordsPartitionResult::default();
            partition.partition_index = p.partition_index;
            match result {
                Ok(PartitionReply::DeleteRecords { low_watermark }) => partition.low_watermark = low_watermark,
                Ok(_) => partition.error_code = code::UNKNOWN_SERVER_ERROR,
                Err((error, _)) => {
                    partition.error_code = error;
                    partition.low_watermark = -1;
                }
            }
            out.partitions.push(partition);
        }
        response.topics.push(out);
    }
    response
}
