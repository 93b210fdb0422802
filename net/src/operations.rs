//! Authorized operations (KIP-430): the ACL operations a client may perform on a
//! resource, as a bit set, returned by Metadata, DescribeCluster, DescribeGroups and
//! ConsumerGroupDescribe when the client asks for them.
//!
//! Without an authorizer everything a resource supports is allowed, which is what
//! Apache Kafka answers then; with one, the operations the caller's ACLs allow. A
//! client that did not ask gets Kafka's "not requested" value (`i32::MIN`), which
//! clients must not decode.

use skein_control::security::acl::{Operation, ResourceType, CLUSTER_NAME};

use crate::authorize::Caller;

/// Kafka's `AclOperation` codes.
const READ: u8 = 3;
const WRITE: u8 = 4;
const CREATE: u8 = 5;
const DELETE: u8 = 6;
const ALTER: u8 = 7;
const DESCRIBE: u8 = 8;
const CLUSTER_ACTION: u8 = 9;
const DESCRIBE_CONFIGS: u8 = 10;
const ALTER_CONFIGS: u8 = 11;
const IDEMPOTENT_WRITE: u8 = 12;

/// The value that tells a client operations were not requested.
pub const NOT_REQUESTED: i32 = i32::MIN;

/// A resource kind, for the operations it supports.
#[derive(Debug, Clone, Copy)]
pub enum Resource {
    Cluster,
    Topic,
    Group,
}

const fn bits(operations: &[u8]) -> i32 {
    let mut set = 0i32;
    let mut i = 0;
    while i < operations.len() {
        set |= 1 << operations[i];
        i += 1;
    }
    set
}

/// The operations `caller` may perform on `resource` named `name` when
/// `requested`, else `NOT_REQUESTED`.
pub fn authorized(caller: &Caller, resource: Resource, name: &str, requested: bool) -> i32 {
    let all = supported(resource, requested);
    if !requested || !caller.checked() {
        return all;
    }
    let (kind, name) = match resource {
        Resource::Cluster => (ResourceType::Cluster, CLUSTER_NAME),
        Resource::Topic => (ResourceType::Topic, name),
        Resource::Group => (ResourceType::Group, name),
    };
    (0..31u8)
        .filter(|bit| all & (1 << bit) != 0)
        .filter_map(|bit| Operation::from_code(bit as i8))
        .filter(|op| caller.may(*op, kind, name))
        .fold(0, |set, op| set | (1 << op.code()))
}

/// Every operation `resource` supports, when `requested`.
fn supported(resource: Resource, requested: bool) -> i32 {
    if !requested {
        return NOT_REQUESTED;
    }
    match resource {
        Resource::Cluster => {
            bits(&[CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE])
        }
        Resource::Topic => bits(&[READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS]),
        Resource::Group => bits(&[READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The sets are those Apache Kafka 4.1 returns without an authorizer.
    #[test]
    fn sets_match_kafka() {
        let decode = |set: i32| (0..31).filter(|b| set & (1 << b) != 0).collect::<Vec<i32>>();
        let caller = Caller::unchecked();
        assert_eq!(decode(authorized(&caller, Resource::Cluster, "", true)), vec![5, 7, 8, 9, 10, 11, 12]);
        assert_eq!(decode(authorized(&caller, Resource::Topic, "t", true)), vec![3, 4, 5, 6, 7, 8, 10, 11]);
        assert_eq!(decode(authorized(&caller, Resource::Group, "g", true)), vec![3, 6, 8, 10, 11]);
        assert_eq!(authorized(&caller, Resource::Topic, "t", false), i32::MIN);
    }
}
