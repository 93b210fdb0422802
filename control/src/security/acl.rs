//! ACLs with the semantics of Kafka's StandardAuthorizer: bindings of a resource
//! pattern (literal, `*`, or prefixed) to a principal, a host, an operation and ALLOW
//! or DENY. DENY wins; `super.users` pass every check; a resource no ACL names is
//! allowed only with `allow.everyone.if.no.acl.found`. DESCRIBE is implied by READ,
//! WRITE, DELETE and ALTER, DESCRIBE_CONFIGS by ALTER_CONFIGS.
//!
//! The bindings live in the metadata image (replicated through the metadata log).
//! Each shard builds an `Authorizer` index from its image when the bindings change;
//! each connection caches its decisions in its `Session`, keyed by the index's epoch,
//! so the common check (the same topic again) is one hash lookup.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use crate::limits::SESSION_ACL_CACHE_ENTRIES_MAX;

/// The cluster resource's only name.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The literal name that matches every resource of its type.
pub const WILDCARD: &str = "*";

macro_rules! kafka_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $code:expr, $text:expr;)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
        pub enum $name { $($variant),* }

        impl $name {
            /// Its code on the wire.
            pub fn code(self) -> i8 {
                match self { $($name::$variant => $code),* }
            }

            pub fn from_code(code: i8) -> Option<$name> {
                match code { $($code => Some($name::$variant),)* _ => None }
            }

            /// Its name as Kafka's tools write it (`Topic`, `Read`, `Allow`).
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }

            /// Parses a name, case and `-`/`_` insensitive (`transactional-id`).
            pub fn parse(text: &str) -> Option<$name> {
                let wanted: String = text.chars().filter(|c| *c != '-' && *c != '_').collect();
                [$($name::$variant),*].into_iter().find(|v| {
                    let name: String = v.name().chars().filter(|c| *c != '-' && *c != '_').collect();
                    name.eq_ignore_ascii_case(&wanted)
                })
            }
        }
    };
}

kafka_enum!(
    /// Kafka's ResourceType.
    ResourceType {
        Any = 1, "Any";
        Topic = 2, "Topic";
        Group = 3, "Group";
        Cluster = 4, "Cluster";
        TransactionalId = 5, "TransactionalId";
        DelegationToken = 6, "DelegationToken";
        User = 7, "User";
    }
);

kafka_enum!(
    /// Kafka's PatternType.
    PatternType {
        Any = 1, "Any";
        Match = 2, "Match";
        Literal = 3, "Literal";
        Prefixed = 4, "Prefixed";
    }
);

kafka_enum!(
    /// Kafka's AclOperation.
    Operation {
        Any = 1, "Any";
        All = 2, "All";
        Read = 3, "Read";
        Write = 4, "Write";
        Create = 5, "Create";
        Delete = 6, "Delete";
        Alter = 7, "Alter";
        Describe = 8, "Describe";
        ClusterAction = 9, "ClusterAction";
        DescribeConfigs = 10, "DescribeConfigs";
        AlterConfigs = 11, "AlterConfigs";
        IdempotentWrite = 12, "IdempotentWrite";
        CreateTokens = 13, "CreateTokens";
        DescribeTokens = 14, "DescribeTokens";
    }
);

kafka_enum!(
    /// Kafka's AclPermissionType.
    Permission {
        Any = 1, "Any";
        Deny = 2, "Deny";
        Allow = 3, "Allow";
    }
);

/// One ACL (Kafka's AclBinding, its AccessControlEntryRecord).
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern: PatternType,
    /// `User:alice`, or `User:*` for every user.
    pub principal: String,
    /// The client's address, or `*`.
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclBinding {
    /// Why Kafka would refuse to create it (INVALID_REQUEST), if it would.
    pub fn invalid(&self) -> Option<String> {
        if self.resource_type == ResourceType::Any {
            return Some("Invalid resourceType ANY".into());
        }
        if !matches!(self.pattern, PatternType::Literal | PatternType::Prefixed) {
            return Some(format!("Invalid patternType {}", self.pattern.name().to_uppercase()));
        }
        if self.operation == Operation::Any || self.permission == Permission::Any {
            return Some("Invalid operation or permission ANY".into());
        }
        if self.name.is_empty() {
            return Some("Resource name must not be empty".into());
        }
        if self.resource_type == ResourceType::Cluster && self.name != CLUSTER_NAME {
            return Some(format!("The only valid name for the CLUSTER resource is {CLUSTER_NAME}"));
        }
        if self.pattern == PatternType::Prefixed && self.name == WILDCARD {
            return Some("Prefixed ACLs may not use the wildcard name".into());
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => None,
            _ => Some(format!("Could not parse principal from `{}` (no colon is present)", self.principal)),
        }
    }

    /// Its line in `skein acl list`, the shape `kafka-acls --list` prints.
    pub fn describe(&self) -> String {
        format!(
            "(principal={}, host={}, operation={}, permissionType={}) on ResourcePattern(resourceType={}, name={}, patternType={})",
            self.principal,
            self.host,
            self.operation.name().to_uppercase(),
            self.permission.name().to_uppercase(),
            self.resource_type.name().to_uppercase(),
            self.name,
            self.pattern.name().to_uppercase()
        )
    }
}

/// A DescribeAcls or DeleteAcls filter: `None` fields and the ANY values match all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: ResourceType,
    pub name: Option<String>,
    pub pattern: PatternType,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclFilter {
    /// Whether `acl` matches, as Kafka's AclBindingFilter matches: MATCH takes the
    /// literal name, the wildcard and every prefix covering the name.
    pub fn matches(&self, acl: &AclBinding) -> bool {
        let resource = self.resource_type == ResourceType::Any || self.resource_type == acl.resource_type;
        let name = match (&self.name, self.pattern) {
            (None, PatternType::Any | PatternType::Match) => true,
            (None, pattern) => pattern == acl.pattern,
            (Some(name), PatternType::Any) => *name == acl.name,
            (Some(name), PatternType::Match) => match acl.pattern {
                PatternType::Literal => *name == acl.name || acl.name == WILDCARD,
                PatternType::Prefixed => name.starts_with(&acl.name),
                _ => false,
            },
            (Some(name), pattern) => pattern == acl.pattern && *name == acl.name,
        };
        let principal = self.principal.as_ref().is_none_or(|p| *p == acl.principal);
        let host = self.host.as_ref().is_none_or(|h| *h == acl.host);
        let operation = self.operation == Operation::Any || self.operation == acl.operation;
        let permission = self.permission == Permission::Any || self.permission == acl.permission;
        resource && name && principal && host && operation && permission
    }
}

/// `authorizer.class.name` (only the standard one), `super.users` and
/// `allow.everyone.if.no.acl.found`.
#[derive(Debug, Clone, Default)]
pub struct AuthorizerConfig {
    pub super_users: HashSet<String>,
    pub allow_everyone_if_no_acl_found: bool,
}

/// Parses `super.users`: `User:admin;User:ops`.
pub fn parse_super_users(text: &str) -> Result<HashSet<String>, String> {
    let mut users = HashSet::new();
    for principal in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        match principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => users.insert(principal.to_string()),
            _ => return Err(format!("super user `{principal}` is not a principal like User:admin")),
        };
    }
    Ok(users)
}

/// A shard's index of the ACLs of one image.
#[derive(Debug, Default)]
pub struct Authorizer {
    /// Bumped each time the index is rebuilt: sessions drop decisions of older ones.
    pub epoch: u64,
    config: AuthorizerConfig,
    /// Literal bindings (the wildcard included) by resource type and name.
    literal: HashMap<(ResourceType, String), Vec<AclBinding>>,
    /// Prefixed bindings by resource type and prefix, with the prefix lengths in use,
    /// so that a lookup costs one probe per distinct length.
    prefixed: HashMap<(ResourceType, String), Vec<AclBinding>>,
    prefix_lengths: Vec<usize>,
}

impl Authorizer {
    pub fn new(config: AuthorizerConfig, acls: &[AclBinding], epoch: u64) -> Authorizer {
        let mut authorizer = Authorizer { epoch, config, ..Default::default() };
        for acl in acls {
            let key = (acl.resource_type, acl.name.clone());
            match acl.pattern {
                PatternType::Prefixed => {
                    authorizer.prefixed.entry(key).or_default().push(acl.clone());
                    if !authorizer.prefix_lengths.contains(&acl.name.len()) {
                        authorizer.prefix_lengths.push(acl.name.len());
                    }
                }
                _ => authorizer.literal.entry(key).or_default().push(acl.clone()),
            }
        }
        authorizer
    }

    /// Whether `principal` connecting from `host` may perform `operation` on the
    /// resource, uncached.
    pub fn authorize(&self, principal: &str, host: &str, operation: Operation, kind: ResourceType, name: &str) -> bool {
        if self.config.super_users.contains(principal) {
            return true;
        }
        let mut found = false;
        let mut allowed = false;
        for acl in self.matching(kind, name) {
            found = true;
            let applies =
                (acl.principal == principal || acl.principal == "User:*") && (acl.host == host || acl.host == WILDCARD);
            if !applies {
                continue;
            }
            match acl.permission {
                Permission::Deny if acl.operation == operation || acl.operation == Operation::All => return false,
                Permission::Allow if implies(acl.operation, operation) => allowed = true,
                _ => {}
            }
        }
        match found {
            true => allowed,
            false => self.config.allow_everyone_if_no_acl_found,
        }
    }

    /// Whether `principal` may perform `operation` on some resource of type `kind`
    /// (Kafka's `authorizeByResourceType`, which InitProducerId asks for idempotent
    /// producers): an ALLOW binding for it that no DENY on the same pattern cancels.
    pub fn authorize_any(&self, principal: &str, host: &str, operation: Operation, kind: ResourceType) -> bool {
        if self.config.super_users.contains(principal) {
            return true;
        }
        let applies = |acl: &AclBinding| {
            (acl.principal == principal || acl.principal == "User:*") && (acl.host == host || acl.host == WILDCARD)
        };
        let bindings = || self.literal.iter().chain(self.prefixed.iter()).filter(|((k, _), _)| *k == kind);
        let denied_everywhere = bindings().any(|((_, name), acls)| {
            name == WILDCARD
                && acls.iter().any(|a| {
                    applies(a)
                        && a.permission == Permission::Deny
                        && (a.operation == operation || a.operation == Operation::All)
                })
        });
        if denied_everywhere {
            return false;
        }
        let allowed = bindings().any(|(_, acls)| {
            acls.iter().any(|a| applies(a) && a.permission == Permission::Allow && implies(a.operation, operation))
        });
        allowed || (self.literal.is_empty() && self.prefixed.is_empty() && self.config.allow_everyone_if_no_acl_found)
    }

    /// The bindings that name the resource: literal, wildcard and covering prefixes.
    fn matching<'a>(&'a self, kind: ResourceType, name: &'a str) -> impl Iterator<Item = &'a AclBinding> + 'a {
        let literal = self.literal.get(&(kind, name.to_string())).into_iter().flatten();
        let wildcard = match name == WILDCARD {
            true => None,
            false => self.literal.get(&(kind, WILDCARD.to_string())),
        };
        let prefixed = self
            .prefix_lengths
            .iter()
            .filter(move |&&len| len <= name.len() && name.is_char_boundary(len))
            .filter_map(move |&len| self.prefixed.get(&(kind, name[..len].to_string())))
            .flatten();
        literal.chain(wildcard.into_iter().flatten()).chain(prefixed)
    }
}

/// Whether an ALLOW for `granted` allows `wanted`.
fn implies(granted: Operation, wanted: Operation) -> bool {
    granted == wanted
        || granted == Operation::All
        || (wanted == Operation::Describe
            && matches!(granted, Operation::Read | Operation::Write | Operation::Delete | Operation::Alter))
        || (wanted == Operation::DescribeConfigs && granted == Operation::AlterConfigs)
}

/// Who a connection acts as, and its cached decisions.
#[derive(Debug)]
pub struct Session {
    /// `User:alice` (Kafka's KafkaPrincipal, as ACLs name it).
    pub principal: String,
    /// The client's address, as ACLs' `host` names it.
    pub host: String,
    /// Whether it may create, renew, expire and describe delegation tokens (Kafka's
    /// `allowTokenRequests`): authenticated by SASL other than with a token, or by a
    /// client certificate.
    pub may_request_tokens: bool,
    cache: RefCell<Decisions>,
}

#[derive(Debug, Default)]
struct Decisions {
    epoch: u64,
    /// By resource type and operation, then name: a lookup by `&str` allocates nothing.
    by_resource: HashMap<(ResourceType, Operation), HashMap<Box<str>, bool>>,
    entries: usize,
}

impl Session {
    /// A session that may not ask for delegation tokens.
    pub fn new(principal: String, host: String) -> Rc<Session> {
        Session::authenticated(principal, host, false)
    }

    pub fn authenticated(principal: String, host: String, may_request_tokens: bool) -> Rc<Session> {
        Rc::new(Session { principal, host, may_request_tokens, cache: RefCell::default() })
    }

    /// Whether this session may perform `operation` on the resource; `None` for the
    /// authorizer means no authorizer is configured, and everything is allowed.
    pub fn allows(
        &self,
        authorizer: Option<&Authorizer>,
        operation: Operation,
        kind: ResourceType,
        name: &str,
    ) -> bool {
        let Some(authorizer) = authorizer else {
            return true;
        };
        let mut cache = self.cache.borrow_mut();
        if cache.epoch != authorizer.epoch || cache.entries >= SESSION_ACL_CACHE_ENTRIES_MAX {
            cache.epoch = authorizer.epoch;
            cache.by_resource.clear();
            cache.entries = 0;
        }
        if let Some(decision) = cache.by_resource.get(&(kind, operation)).and_then(|names| names.get(name)) {
            return *decision;
        }
        let decision = authorizer.authorize(&self.principal, &self.host, operation, kind, name);
        cache.by_resource.entry((kind, operation)).or_default().insert(Box::from(name), decision);
        cache.entries += 1;
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(
        kind: ResourceType,
        name: &str,
        pattern: PatternType,
        principal: &str,
        op: Operation,
        allow: bool,
    ) -> AclBinding {
        AclBinding {
            resource_type: kind,
            name: name.into(),
            pattern,
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission: if allow { Permission::Allow } else { Permission::Deny },
        }
    }

    fn authorizer(acls: &[AclBinding], allow_if_none: bool) -> Authorizer {
        let config = AuthorizerConfig {
            super_users: parse_super_users("User:admin; User:ops").unwrap(),
            allow_everyone_if_no_acl_found: allow_if_none,
        };
        Authorizer::new(config, acls, 1)
    }

    // Kafka's rules: literal, wildcard and prefixed patterns; DENY wins; implied
    // DESCRIBE; super users; no ACL found.
    #[test]
    fn standard_authorizer_semantics() {
        use Operation::*;
        use PatternType::*;
        use ResourceType::*;
        let a = authorizer(
            &[
                acl(Topic, "orders", Literal, "User:alice", Read, true),
                acl(Topic, "team-", Prefixed, "User:bob", Write, true),
                acl(Topic, "team-secret", Literal, "User:bob", All, false),
                acl(Topic, "*", Literal, "User:*", Describe, true),
                acl(Group, "g", Literal, "User:alice", All, true),
            ],
            false,
        );
        assert!(a.authorize("User:alice", "1.2.3.4", Read, Topic, "orders"));
        assert!(a.authorize("User:alice", "1.2.3.4", Describe, Topic, "orders"), "READ implies DESCRIBE");
        assert!(!a.authorize("User:alice", "1.2.3.4", Write, Topic, "orders"));
        assert!(a.authorize("User:bob", "h", Write, Topic, "team-a"), "prefixed");
        assert!(!a.authorize("User:bob", "h", Write, Topic, "team-secret"), "DENY wins");
        assert!(!a.authorize("User:bob", "h", Write, Topic, "team"), "shorter than the prefix");
        assert!(a.authorize("User:carol", "h", Describe, Topic, "anything"), "wildcard for every user");
        assert!(!a.authorize("User:carol", "h", Read, Topic, "anything"));
        assert!(a.authorize("User:admin", "h", Delete, Cluster, CLUSTER_NAME), "super user");
        assert!(!a.authorize("User:carol", "h", Read, Group, "other"), "no ACL found, not allowed");
        assert!(a.authorize("User:alice", "h", Read, Group, "g"));
        let open = authorizer(&[], true);
        assert!(open.authorize("User:carol", "h", Read, Group, "other"), "allow.everyone.if.no.acl.found");
        let hosts = authorizer(
            &[AclBinding { host: "10.0.0.1".into(), ..acl(Topic, "t", Literal, "User:alice", Read, true) }],
            false,
        );
        assert!(hosts.authorize("User:alice", "10.0.0.1", Read, Topic, "t"));
        assert!(!hosts.authorize("User:alice", "10.0.0.2", Read, Topic, "t"));
        assert!(a.authorize_any("User:bob", "h", Write, Topic));
        assert!(!a.authorize_any("User:carol", "h", Write, Topic));
    }

    // Filters match as Kafka's AclBindingFilter: MATCH finds every binding that
    // applies to the name.
    #[test]
    fn filters() {
        use PatternType::*;
        let bindings = [
            acl(ResourceType::Topic, "team-a", Literal, "User:x", Operation::Read, true),
            acl(ResourceType::Topic, "team-", Prefixed, "User:x", Operation::Read, true),
            acl(ResourceType::Topic, "*", Literal, "User:x", Operation::Read, true),
            acl(ResourceType::Group, "team-a", Literal, "User:x", Operation::Read, true),
        ];
        let filter = |kind, name: Option<&str>, pattern| AclFilter {
            resource_type: kind,
            name: name.map(String::from),
            pattern,
            principal: None,
            host: None,
            operation: Operation::Any,
            permission: Permission::Any,
        };
        let count = |f: AclFilter| bindings.iter().filter(|b| f.matches(b)).count();
        assert_eq!(count(filter(ResourceType::Any, None, Any)), 4);
        assert_eq!(count(filter(ResourceType::Topic, Some("team-a"), Match)), 3);
        assert_eq!(count(filter(ResourceType::Topic, Some("team-a"), Any)), 1);
        assert_eq!(count(filter(ResourceType::Topic, None, Prefixed)), 1);
        assert!(bindings[0].invalid().is_none());
        assert!(AclBinding { principal: "alice".into(), ..bindings[0].clone() }.invalid().is_some());
        assert!(AclBinding { name: "other".into(), resource_type: ResourceType::Cluster, ..bindings[0].clone() }
            .invalid()
            .is_some());
        assert_eq!(ResourceType::parse("transactional-id"), Some(ResourceType::TransactionalId));
        assert_eq!(Operation::parse("DESCRIBE_CONFIGS"), Some(Operation::DescribeConfigs));
    }
}
