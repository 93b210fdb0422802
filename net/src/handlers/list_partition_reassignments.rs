//! ListPartitionReassignments (KIP-455): the reassignments under way, from this node's
//! metadata image, for the partitions asked (every partition when none is named).

use std::rc::Rc;

use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    BrokerId, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};
use kafka_protocol::protocol::VersionRange;
use skein_control::metadata::TopicMeta;

use super::s;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };

pub fn handle(shard: &Rc<Shard>, request: ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse {
    let image = shard.image();
    let ongoing = |meta: &TopicMeta, partitions: &mut dyn Iterator<Item = i32>| -> Option<OngoingTopicReassignment> {
        let ids = |list: &[i32]| list.iter().map(|&r| BrokerId(r)).collect::<Vec<_>>();
        let moving: Vec<OngoingPartitionReassignment> = partitions
            .filter_map(|p| {
                let a = meta.assignments.get(usize::try_from(p).ok()?)?;
                a.reassigning().then(|| {
                    OngoingPartitionReassignment::default()
                        .with_partition_index(p)
                        .with_replicas(ids(&a.replicas))
                        .with_adding_replicas(ids(&a.adding))
                        .with_removing_replicas(ids(&a.removing))
                })
            })
            .collect();
        (!moving.is_empty()).then(|| {
            OngoingTopicReassignment::default().with_name(TopicName(s(meta.name.clone()))).with_partitions(moving)
        })
    };
    let topics = match request.topics {
        // Unknown topics and partitions are left out, as Kafka does.
        Some(wanted) => wanted
            .iter()
            .filter_map(|t| ongoing(image.topic(t.name.as_str())?, &mut t.partition_indexes.iter().copied()))
            .collect(),
        None => image.topics.values().filter_map(|meta| ongoing(meta, &mut (0..meta.partitions))).collect(),
    };
    ListPartitionReassignmentsResponse::default().with_topics(topics)
}
