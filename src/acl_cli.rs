//! `skein acl add|list|remove`: ACLs through CreateAcls, DescribeAcls and DeleteAcls,
//! with `kafka-acls.sh`'s vocabulary (principals `User:alice`, operations `Read`,
//! `Write`, ..., literal or prefixed resource patterns) and its listing format.

use clap::{Args, Subcommand};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use kafka_protocol::protocol::StrBytes;
use skein_control::security::acl::{AclBinding, Operation, PatternType, Permission, ResourceType, CLUSTER_NAME};

use crate::cluster_cli::{error_name, Client, Connection};

/// The protocol version the CLI speaks (Kafka 4 serves 1–3).
const ACL_VERSION: i16 = 3;

#[derive(Subcommand, Debug)]
pub enum AclCommand {
    /// Add ACLs: one per operation named.
    Add {
        #[command(flatten)]
        acl: AclArgs,
        #[command(flatten)]
        connection: Connection,
    },
    /// The ACLs matching the filter (all of them without one).
    List {
        #[command(flatten)]
        acl: AclArgs,
        #[command(flatten)]
        connection: Connection,
    },
    /// Remove the ACLs matching the filter; prints those removed.
    Remove {
        #[command(flatten)]
        acl: AclArgs,
        #[command(flatten)]
        connection: Connection,
    },
}

/// An ACL, or a filter of ACLs (unnamed parts match everything).
#[derive(Args, Debug, Default)]
pub struct AclArgs {
    /// `User:alice`, or `User:*` for everyone.
    #[arg(long)]
    pub principal: Option<String>,
    /// The client address the ACL applies to [add: `*`].
    #[arg(long)]
    pub host: Option<String>,
    /// Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs,
    /// AlterConfigs, IdempotentWrite or All; repeatable.
    #[arg(long = "operation")]
    pub operations: Vec<String>,
    #[arg(long, conflicts_with_all = ["group", "cluster", "transactional_id"])]
    pub topic: Option<String>,
    #[arg(long, conflicts_with_all = ["cluster", "transactional_id"])]
    pub group: Option<String>,
    #[arg(long, conflicts_with = "transactional_id")]
    pub cluster: bool,
    #[arg(long)]
    pub transactional_id: Option<String>,
    /// literal or prefixed [add: literal; list and remove: any].
    #[arg(long)]
    pub resource_pattern_type: Option<String>,
    /// A DENY ACL [default: ALLOW].
    #[arg(long)]
    pub deny: bool,
}

impl AclArgs {
    fn resource(&self) -> (ResourceType, Option<String>) {
        match (&self.topic, &self.group, self.cluster, &self.transactional_id) {
            (Some(t), ..) => (ResourceType::Topic, Some(t.clone())),
            (_, Some(g), ..) => (ResourceType::Group, Some(g.clone())),
            (_, _, true, _) => (ResourceType::Cluster, Some(CLUSTER_NAME.into())),
            (.., Some(id)) => (ResourceType::TransactionalId, Some(id.clone())),
            _ => (ResourceType::Any, None),
        }
    }

    fn pattern(&self, default: PatternType) -> Result<PatternType, String> {
        match &self.resource_pattern_type {
            None => Ok(default),
            Some(text) => PatternType::parse(text)
                .filter(|p| *p != PatternType::Any || default == PatternType::Any)
                .ok_or_else(|| format!("--resource-pattern-type {text}: literal, prefixed, match or any")),
        }
    }

    fn operations(&self) -> Result<Vec<Operation>, String> {
        self.operations
            .iter()
            .map(|o| Operation::parse(o).ok_or_else(|| format!("--operation {o}: not one of Kafka's operations")))
            .collect()
    }

    fn permission(&self) -> Permission {
        match self.deny {
            true => Permission::Deny,
            false => Permission::Allow,
        }
    }
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

pub fn run(command: AclCommand) -> Result<(), String> {
    match command {
        AclCommand::Add { acl, connection } => {
            let (kind, name) = acl.resource();
            let name = name.ok_or("name the resource: --topic, --group, --cluster or --transactional-id")?;
            let principal = acl.principal.clone().ok_or("--principal is required, e.g. User:alice")?;
            let operations = acl.operations()?;
            if operations.is_empty() {
                return Err("--operation is required".into());
            }
            let pattern = acl.pattern(PatternType::Literal)?;
            let bindings: Vec<AclBinding> = operations
                .into_iter()
                .map(|operation| AclBinding {
                    resource_type: kind,
                    name: name.clone(),
                    pattern,
                    principal: principal.clone(),
                    host: acl.host.clone().unwrap_or_else(|| "*".into()),
                    operation,
                    permission: acl.permission(),
                })
                .collect();
            if let Some(problem) = bindings.iter().find_map(AclBinding::invalid) {
                return Err(problem);
            }
            let creations = bindings
                .iter()
                .map(|b| {
                    AclCreation::default()
                        .with_resource_type(b.resource_type.code())
                        .with_resource_name(s(&b.name))
                        .with_resource_pattern_type(b.pattern.code())
                        .with_principal(s(&b.principal))
                        .with_host(s(&b.host))
                        .with_operation(b.operation.code())
                        .with_permission_type(b.permission.code())
                })
                .collect();
            let mut client = Client::connect(&connection)?;
            let response = client.call(&CreateAclsRequest::default().with_creations(creations), ACL_VERSION)?;
            for (binding, result) in bindings.iter().zip(&response.results) {
                if result.error_code != 0 {
                    let message = result.error_message.as_deref().unwrap_or("");
                    return Err(format!("{}: {} {message}", binding.describe(), error_name(result.error_code)));
                }
                println!("added {}", binding.describe());
            }
            Ok(())
        }
        AclCommand::List { acl, connection } => {
            let filter = wire_filter(&acl)?;
            let request = DescribeAclsRequest::default()
                .with_resource_type_filter(filter.resource_type_filter)
                .with_resource_name_filter(filter.resource_name_filter)
                .with_pattern_type_filter(filter.pattern_type_filter)
                .with_principal_filter(filter.principal_filter)
                .with_host_filter(filter.host_filter)
                .with_operation(filter.operation)
                .with_permission_type(filter.permission_type);
            let mut client = Client::connect(&connection)?;
            let response = client.call(&request, ACL_VERSION)?;
            if response.error_code != 0 {
                let message = response.error_message.as_deref().unwrap_or("");
                return Err(format!("DescribeAcls: {} {message}", error_name(response.error_code)));
            }
            for resource in response.resources {
                for a in resource.acls {
                    let binding = binding_of(
                        resource.resource_type,
                        &resource.resource_name,
                        resource.pattern_type,
                        &a.principal,
                        &a.host,
                        a.operation,
                        a.permission_type,
                    );
                    println!("{binding}");
                }
            }
            Ok(())
        }
        AclCommand::Remove { acl, connection } => {
            if acl.resource().0 == ResourceType::Any && acl.principal.is_none() {
                return Err("name a resource or a --principal: refusing to remove every ACL".into());
            }
            let filter = wire_filter(&acl)?;
            let mut client = Client::connect(&connection)?;
            let response = client.call(&DeleteAclsRequest::default().with_filters(vec![filter]), ACL_VERSION)?;
            for result in response.filter_results {
                if result.error_code != 0 {
                    let message = result.error_message.as_deref().unwrap_or("");
                    return Err(format!("DeleteAcls: {} {message}", error_name(result.error_code)));
                }
                for m in result.matching_acls {
                    let binding = binding_of(
                        m.resource_type,
                        &m.resource_name,
                        m.pattern_type,
                        &m.principal,
                        &m.host,
                        m.operation,
                        m.permission_type,
                    );
                    println!("removed {binding}");
                }
            }
            Ok(())
        }
    }
}

/// The filter `acl` names, in DeleteAcls' wire form (DescribeAcls takes the same
/// fields): unnamed parts match everything.
fn wire_filter(acl: &AclArgs) -> Result<DeleteAclsFilter, String> {
    let (kind, name) = acl.resource();
    let permission = if acl.deny { Permission::Deny } else { Permission::Any };
    Ok(DeleteAclsFilter::default()
        .with_resource_type_filter(kind.code())
        .with_resource_name_filter(name.as_deref().map(s))
        .with_pattern_type_filter(acl.pattern(PatternType::Any)?.code())
        .with_principal_filter(acl.principal.as_deref().map(s))
        .with_host_filter(acl.host.as_deref().map(s))
        .with_operation(single_operation(acl)?.code())
        .with_permission_type(permission.code()))
}

/// A filter's operation: the one named, or any.
fn single_operation(acl: &AclArgs) -> Result<Operation, String> {
    match acl.operations()?.as_slice() {
        [] => Ok(Operation::Any),
        [one] => Ok(*one),
        _ => Err("a filter takes one --operation".into()),
    }
}

/// A binding's line as `kafka-acls --list` prints it; unknown codes by number.
fn binding_of(kind: i8, name: &str, pattern: i8, principal: &str, host: &str, operation: i8, permission: i8) -> String {
    let known = (
        ResourceType::from_code(kind),
        PatternType::from_code(pattern),
        Operation::from_code(operation),
        Permission::from_code(permission),
    );
    match known {
        (Some(resource_type), Some(pattern), Some(operation), Some(permission)) => AclBinding {
            resource_type,
            name: name.to_string(),
            pattern,
            principal: principal.to_string(),
            host: host.to_string(),
            operation,
            permission,
        }
        .describe(),
        _ => format!("(principal={principal}, host={host}, operation={operation}, permissionType={permission}) on {kind}:{name}:{pattern}"),
    }
}
