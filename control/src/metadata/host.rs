//! What the control plane needs of the node it runs on, and nothing more: the image it
//! decides against, the node as a decision sees it, the quorum's addresses and TLS, and
//! the step that installs a committed image on the node. The controller, the quorum
//! loop, the observer and the quorum's transport are written against `Host`; a node's
//! shard 0 is one (`control.rs`), a test can be another.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicI32;
use std::sync::Arc;

use super::controller::Controller;
use super::decide::Local;
use super::MetadataImage;
use crate::security::Security;

pub trait Host: Clone + 'static {
    /// The metadata image this node has installed.
    fn image(&self) -> Arc<MetadataImage>;
    /// The controller, where this host runs one (shard 0).
    fn controller(&self) -> Option<&Controller>;
    /// The node as the controller decides for it.
    fn local(&self) -> Local;
    /// The cluster id, which the quorum's connections check.
    fn cluster_id(&self) -> &str;
    /// The controller quorum's voters with their addresses.
    fn voters(&self) -> &[(i32, SocketAddr)];
    /// This node as a quorum member is recorded: its controller endpoint and
    /// directory id (none for a broker-only node).
    fn member(&self) -> Option<super::QuorumMember>;
    /// TLS and SASL settings for the quorum's connections.
    fn security(&self) -> &Arc<Security>;
    /// Where Metadata and DescribeCluster read the active controller's node id.
    fn active_controller(&self) -> &AtomicI32;
    /// Installs `after`, the committed image that follows `before`, on every shard of
    /// the node and brings the node's partitions in line with it.
    fn install(&self, before: &MetadataImage, after: Arc<MetadataImage>) -> impl Future<Output = ()>;
}
