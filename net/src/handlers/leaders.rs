//! KIP-951: a Produce (v10+) or Fetch (v12+) partition refused with
//! NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names the partition's current leader
//! and its epoch, and the response carries those leaders' endpoints (Produce v10+,
//! Fetch v16+), so that the client moves without a metadata round trip.

use std::collections::BTreeSet;

use skein_control::errors::code;

use crate::shard::{BrokerAddress, Shard};

/// Whether a partition refused with `error` tells the client where its leader is.
pub fn names_leader(error: i16) -> bool {
    error == code::NOT_LEADER_OR_FOLLOWER || error == code::FENCED_LEADER_EPOCH
}

/// The current leader of `topic`-`partition` and its epoch as this node's image has
/// them, the leader named as clients on `listener` know it; `(-1, -1)` for a partition
/// it does not know.
pub fn current_leader(shard: &Shard, topic: &str, partition: i32, listener: &str) -> (i32, i32) {
    let image = shard.image();
    match image.topic(topic) {
        Some(meta) if (0..meta.partitions).contains(&partition) => {
            let assignment = meta.assignment(partition, shard.settings.node_id);
            let leader = match assignment.leader {
                none if none < 0 => none,
                leader => shard.client_broker_id(leader, listener, topic, partition),
            };
            (leader, assignment.leader_epoch)
        }
        _ => (-1, -1),
    }
}

/// The endpoints of `leaders` that are live (no unknown or fenced leader is named).
pub fn endpoints(shard: &Shard, leaders: &BTreeSet<i32>, listener: &str) -> Vec<BrokerAddress> {
    let image = shard.image();
    leaders
        .iter()
        .filter_map(|&id| {
            let (host, port) = shard.client_address(id, listener)?;
            let rack = image.brokers.get(&id).and_then(|b| b.rack.clone());
            Some(BrokerAddress { id, host, port, rack })
        })
        .collect()
}
