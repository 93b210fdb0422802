//! A shard's copies of the node's security state: its ACL index, rebuilt when an
//! installed image's ACLs change, its copy of the OAUTHBEARER key set, and whether
//! any client has a quota.

use std::rc::Rc;
use std::sync::Arc;

use super::{MetadataImage, NodeSettings, Shard};
use crate::security::acl::Authorizer;
use crate::security::jwks::KeySet;

impl Shard {
    /// The OAUTHBEARER key set, when signed tokens are configured and one has been
    /// fetched: this shard's copy, renewed when the fetcher published a newer one.
    pub fn jwks_keys(&self) -> Option<Arc<KeySet>> {
        let jwks = &self.settings.security.signed_tokens.as_ref()?.jwks;
        let generation = jwks.generation();
        if generation == 0 {
            return None;
        }
        let mut copy = self.jwks.borrow_mut();
        match copy.as_ref() {
            Some((seen, keys)) if *seen == generation => Some(keys.clone()),
            _ => {
                let keys = jwks.current();
                *copy = Some((generation, keys.clone()));
                Some(keys)
            }
        }
    }

    /// Whether some client has a quota (the image's, without touching it).
    pub fn has_quotas(&self) -> bool {
        self.has_quotas.get()
    }

    /// This shard's ACL index; `None` when no authorizer is configured.
    pub fn authorizer(&self) -> Option<Rc<Authorizer>> {
        self.authorizer.borrow().clone()
    }

    /// The index of `image`'s ACLs, its epoch the image's version.
    pub(super) fn index_acls(settings: &NodeSettings, image: &MetadataImage) -> Option<Rc<Authorizer>> {
        let config = settings.security.authorizer.clone()?;
        Some(Rc::new(Authorizer::new(config, &image.acls, image.version)))
    }
}
