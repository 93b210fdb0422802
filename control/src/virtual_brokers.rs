//! Virtual brokers (opt-in, `--virtual-brokers BASE_PORT`): each shard also listens on
//! a port of its own, `BASE_PORT + shard`, on the node's first listener (its host,
//! protocol and security), and clients on that listener are told that each shard is a
//! broker of its own, leading the partitions it owns and coordinating the groups and
//! transactions of the `__consumer_offsets` and `__transaction_state` partitions it
//! owns. A client then sends each request straight to the core that owns its
//! partitions: no cross-shard hop on the data path.
//!
//! Ids. A shard's virtual broker id is `VIRTUAL_ID_BASE + node * SHARDS_PER_NODE_MAX +
//! shard`, so virtual ids never meet real node ids (below `VIRTUAL_ID_BASE`) and each
//! names its node and shard. Only what clients see is translated (Metadata,
//! DescribeCluster, FindCoordinator, DescribeTopicPartitions, KIP-951 leader hints):
//! brokers reach each other, register and replicate under their real ids, on the
//! inter-broker listener, and the metadata image holds real ids only.
//!
//! Clusters. The same ids compose with real brokers: a broker registers its virtual
//! brokers (`BrokerMeta::virtual_brokers`: listener, base port, shard count), and
//! every node lists each registered broker's shards as virtual brokers to that
//! listener's clients, naming a partition's leader (and each replica) by the replica's
//! node and the shard that owns the partition there (the shard table is the
//! cluster's). Nodes may mix: a broker that registered none keeps its real id.
//!
//! A request that reaches a shard for a partition another shard owns (a client whose
//! metadata predates a `skein placement move`) is still served, through the cross-shard
//! route, until the client refreshes its metadata.

/// The first virtual broker id: above any real node id a deployment uses.
pub const VIRTUAL_ID_BASE: i32 = 1 << 24;

/// Shards a node may run under virtual brokers: each node owns this many ids.
pub const SHARDS_PER_NODE_MAX: i32 = 1024;

/// The largest node id that has virtual brokers (its ids must fit in an i32).
pub const NODE_ID_MAX: i32 = (i32::MAX - VIRTUAL_ID_BASE) / SHARDS_PER_NODE_MAX - 1;

/// Where a node's virtual brokers listen: its settings, and what it registers.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
pub struct VirtualBrokers {
    /// The listener whose clients see the virtual brokers (the node's first).
    pub listener: String,
    /// Shard `s` listens on `port_base + s`, advertised on the listener's host.
    pub port_base: u16,
    /// The node's shards: one virtual broker each.
    pub shards: u16,
}

/// The virtual broker id of `shard` of node `node`.
pub fn virtual_id(node: i32, shard: usize) -> i32 {
    debug_assert!((0..=NODE_ID_MAX).contains(&node) && (shard as i32) < SHARDS_PER_NODE_MAX);
    VIRTUAL_ID_BASE + node * SHARDS_PER_NODE_MAX + shard as i32
}

/// The node and shard a virtual broker id names; `None` for a real id.
pub fn split(id: i32) -> Option<(i32, usize)> {
    (id >= VIRTUAL_ID_BASE).then(|| {
        ((id - VIRTUAL_ID_BASE) / SHARDS_PER_NODE_MAX, ((id - VIRTUAL_ID_BASE) % SHARDS_PER_NODE_MAX) as usize)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Virtual ids name their node and shard and never meet real ids.
    #[test]
    fn ids_round_trip() {
        for (node, shard) in [(0, 0), (1, 3), (7, 1023), (NODE_ID_MAX, 1023)] {
            let id = virtual_id(node, shard);
            assert!(id >= VIRTUAL_ID_BASE);
            assert_eq!(split(id), Some((node, shard)));
        }
        assert_eq!(split(1), None);
        assert_eq!(split(VIRTUAL_ID_BASE - 1), None);
    }
}
