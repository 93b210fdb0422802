//! A node's shard as the control plane's host (`metadata::host::Host`): the controller,
//! the quorum loop and the observer see the shard's image and settings through it, and
//! install each committed image by publishing it to every shard and reconciling the
//! node's partitions (`topics::reconcile`).

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::AtomicI32;
use std::sync::Arc;

use crate::metadata::controller::Controller;
use crate::metadata::decide::Local;
use crate::metadata::host::Host;
use crate::metadata::MetadataImage;
use crate::security::Security;
use crate::shard::Shard;

impl Host for Rc<Shard> {
    fn image(&self) -> Arc<MetadataImage> {
        Shard::image(self)
    }

    fn controller(&self) -> Option<&Controller> {
        Shard::controller(self)
    }

    fn local(&self) -> Local {
        self.settings.local()
    }

    fn cluster_id(&self) -> &str {
        &self.settings.cluster_id
    }

    fn voters(&self) -> &[(i32, SocketAddr)] {
        &self.settings.controller_voters
    }

    fn member(&self) -> Option<crate::metadata::QuorumMember> {
        self.settings.controller_member.clone()
    }

    fn security(&self) -> &Arc<Security> {
        &self.settings.security
    }

    fn active_controller(&self) -> &AtomicI32 {
        &self.settings.active_controller
    }

    async fn install(&self, before: &MetadataImage, after: Arc<MetadataImage>) {
        self.publish(after.clone()).await;
        crate::topics::reconcile(self, before, &after).await;
    }
}
