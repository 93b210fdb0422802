//! A node's shard as the control plane's host (`metadata::host::Host`, implemented for
//! `shard::ShardHost`, since the trait and `Rc` are both foreign here): the controller,
//! the quorum loop and the observer see the shard's image and settings through it, and
//! install each committed image by publishing it to every shard and reconciling the
//! node's partitions (`topics::reconcile`).

use std::net::SocketAddr;
use std::sync::atomic::AtomicI32;
use std::sync::Arc;

use skein_control::metadata::controller::Controller;
use skein_control::metadata::decide::Local;
use skein_control::metadata::host::Host;
use skein_control::metadata::MetadataImage;
use skein_control::security::Security;

use crate::shard::{Shard, ShardHost};

impl Host for ShardHost {
    fn image(&self) -> Arc<MetadataImage> {
        Shard::image(&self.0)
    }

    fn controller(&self) -> Option<&Controller> {
        Shard::controller(&self.0)
    }

    fn local(&self) -> Local {
        self.0.settings.local()
    }

    fn cluster_id(&self) -> &str {
        &self.0.settings.cluster_id
    }

    fn voters(&self) -> &[(i32, SocketAddr)] {
        &self.0.settings.controller_voters
    }

    fn member(&self) -> Option<skein_control::metadata::QuorumMember> {
        self.0.settings.controller_member.clone()
    }

    fn security(&self) -> &Arc<Security> {
        &self.0.settings.security
    }

    fn active_controller(&self) -> &AtomicI32 {
        &self.0.settings.active_controller
    }

    async fn install(&self, before: &MetadataImage, after: Arc<MetadataImage>) {
        self.0.publish(after.clone()).await;
        crate::topics::reconcile(&self.0, before, &after).await;
    }
}
