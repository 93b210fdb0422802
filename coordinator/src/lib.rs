//! Skein's coordinators: the consumer, classic, streams and share groups (`group`),
//! transactions (`txn`), share groups' partition state on the leaders (`share`), and
//! their work on a shard (`serve`: loading while leading, replay, write before answer,
//! tickers).
//!
//! A coordinator sees the shard it runs on only through `serve::Host`, so this crate
//! cannot name a shard, a connection or a handler: it sits above the control plane
//! (`skein-control`) and below the protocol layer (`skein-net`). What it keeps of each
//! partition it hosts is `hosted::Partition`.
#![forbid(unsafe_code)]

pub mod group;
pub mod hosted;
pub mod serve;
pub mod share;
pub mod txn;
