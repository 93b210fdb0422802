//! A shard's copies of the node's security state: its ACL index, rebuilt when an
//! installed image's ACLs change, its copy of the OAUTHBEARER key set and of the TLS
//! config, and whether any client has a quota.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use skein_control::security::acl::Authorizer;
use skein_control::security::jwks::KeySet;

use super::{MetadataImage, NodeSettings, Shard};

/// What one shard keeps of the node's security state, so that the request path reads
/// it without a lock.
pub struct ShardSecurity {
    /// This shard's index of the image's ACLs, when an authorizer is configured.
    authorizer: RefCell<Option<Rc<Authorizer>>>,
    /// Whether the installed image has any client quota: without one, the request
    /// path does not look at the image for them.
    has_quotas: Cell<bool>,
    /// This shard's copy of the OAUTHBEARER key set and its generation (`security::jwks`).
    jwks: RefCell<Option<(u64, Arc<KeySet>)>>,
    /// This shard's copy of the TLS config (`security::tls`).
    pub tls: skein_control::security::tls::ShardTls,
}

impl ShardSecurity {
    pub(super) fn new(settings: &NodeSettings, image: &MetadataImage) -> ShardSecurity {
        ShardSecurity {
            authorizer: RefCell::new(index_acls(settings, image)),
            has_quotas: Cell::new(!image.client_quotas.is_empty()),
            jwks: RefCell::new(None),
            tls: RefCell::new(None),
        }
    }

    /// Follows a newer image `next` replacing `current`.
    pub(super) fn install(&self, settings: &NodeSettings, current: &MetadataImage, next: &MetadataImage) {
        if next.acls != current.acls {
            *self.authorizer.borrow_mut() = index_acls(settings, next);
        }
        self.has_quotas.set(!next.client_quotas.is_empty());
    }
}

/// The index of `image`'s ACLs, its epoch the image's version.
fn index_acls(settings: &NodeSettings, image: &MetadataImage) -> Option<Rc<Authorizer>> {
    let config = settings.security.authorizer.clone()?;
    Some(Rc::new(Authorizer::new(config, &image.acls, image.version)))
}

impl Shard {
    /// The OAUTHBEARER key set, when signed tokens are configured and one has been
    /// fetched: this shard's copy, renewed when the fetcher published a newer one.
    pub fn jwks_keys(&self) -> Option<Arc<KeySet>> {
        let jwks = &self.settings.security.signed_tokens.as_ref()?.jwks;
        let generation = jwks.generation();
        if generation == 0 {
            return None;
        }
        let mut copy = self.security.jwks.borrow_mut();
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
        self.security.has_quotas.get()
    }

    /// This shard's ACL index; `None` when no authorizer is configured.
    pub fn authorizer(&self) -> Option<Rc<Authorizer>> {
        self.security.authorizer.borrow().clone()
    }
}
