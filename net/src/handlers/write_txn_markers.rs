//! WriteTxnMarkers: a transaction coordinator (this broker's or another's) has the
//! leaders of a transaction's partitions write its COMMIT or ABORT marker. Each
//! partition answers on its own: NOT_LEADER_OR_FOLLOWER where this broker does not
//! lead it, INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED for a stale
//! marker (with transaction version 2, one whose epoch is not a bump).

use std::rc::Rc;

use futures_util::future::join_all;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;

use super::route_partitions;
use crate::shard::{ops, Shard};

/// v2 carries each marker's transaction version (KIP-1228).
pub const VERSIONS: VersionRange = VersionRange { min: 1, max: 2 };

pub async fn handle(shard: &Rc<Shard>, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse {
    let image = shard.image();
    let markers = request.markers.into_iter().map(|marker| {
        let image = image.clone();
        async move {
            let mut result = WritableTxnMarkerResult::default().with_producer_id(marker.producer_id);
            for topic in marker.topics {
                let ops = topic.partition_indexes.iter().map(|&p| {
                    let op = ops::WriteMarker {
                        producer_id: marker.producer_id.0,
                        epoch: marker.producer_epoch,
                        coordinator_epoch: marker.coordinator_epoch,
                        commit: marker.transaction_result,
                        transaction_version: marker.transaction_version,
                    };
                    (p, op)
                });
                let results = route_partitions(shard, &image, &topic.name.0, ops, true).await;
                let partitions = topic
                    .partition_indexes
                    .iter()
                    .zip(results)
                    .map(|(&p, r)| {
                        let error = r.err().map_or(code::NONE, |e| e.code);
                        WritableTxnMarkerPartitionResult::default().with_partition_index(p).with_error_code(error)
                    })
                    .collect();
                result
                    .topics
                    .push(WritableTxnMarkerTopicResult::default().with_name(topic.name).with_partitions(partitions));
            }
            result
        }
    });
    WriteTxnMarkersResponse::default().with_markers(join_all(markers).await)
}
