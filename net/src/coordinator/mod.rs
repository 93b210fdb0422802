//! The group and transaction coordinators at work on a shard: loading their state
//! from their internal topic's partitions while this broker leads them (one shared
//! loop, `shard::load_while_leading`), running calls against that state, writing each
//! change to the partition as its leader before the answer that depends on it, and
//! their tickers. Their state and rules, which know no shard, are `group` and `txn`.

pub mod group;
pub mod txn;
