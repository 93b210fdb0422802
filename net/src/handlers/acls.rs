//! CreateAcls, DescribeAcls and DeleteAcls (KIP-140): ACL bindings live in the
//! metadata image, so a change goes through the controller, reaches every shard's
//! index and survives restarts. Without an authorizer each answers SECURITY_DISABLED,
//! as a Java broker without `authorizer.class.name` does.

use std::rc::Rc;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{DeleteAclsFilterResult, DeleteAclsMatchingAcl};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse,
};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_control::limits::ACL_BINDINGS_MAX;
use skein_control::metadata::controller::ControllerRequest;
use skein_control::security::acl::{AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType};

use super::s;
use crate::shard::Shard;

/// Kafka 4 serves v1–3 (v0, without pattern types, was removed by KIP-896).
pub const VERSIONS: VersionRange = VersionRange { min: 1, max: 3 };

const DISABLED: &str = "No Authorizer is configured on the broker";

pub async fn create(shard: &Rc<Shard>, request: CreateAclsRequest) -> CreateAclsResponse {
    let mut response = CreateAclsResponse::default();
    let refuse = |code: i16, message: &str| {
        AclCreationResult::default().with_error_code(code).with_error_message(Some(s(message)))
    };
    if shard.settings.security.authorizer.is_none() || request.creations.len() > ACL_BINDINGS_MAX {
        let (code, message) = match shard.settings.security.authorizer.is_none() {
            true => (code::SECURITY_DISABLED, DISABLED.to_string()),
            false => (code::INVALID_REQUEST, format!("At most {ACL_BINDINGS_MAX} ACLs in one request")),
        };
        response.results = vec![refuse(code, &message); request.creations.len()];
        return response;
    }
    let mut bindings = Vec::new();
    let mut results: Vec<Result<usize, String>> = Vec::new();
    for creation in &request.creations {
        let binding = binding(
            creation.resource_type,
            &creation.resource_name,
            creation.resource_pattern_type,
            &creation.principal,
            &creation.host,
            creation.operation,
            creation.permission_type,
        );
        match binding.and_then(|b| b.invalid().map_or(Ok(b), Err)) {
            Ok(binding) => {
                results.push(Ok(bindings.len()));
                bindings.push(binding);
            }
            Err(message) => results.push(Err(message)),
        }
    }
    let outcome = match bindings.is_empty() {
        true => Ok(()),
        false => shard.control(ControllerRequest::CreateAcls { bindings }).await.map(|_| ()),
    };
    response.results = results
        .into_iter()
        .map(|result| match (result, &outcome) {
            (Err(message), _) => refuse(code::INVALID_REQUEST, &message),
            (Ok(_), Err((code, message))) => refuse(*code, message),
            (Ok(_), Ok(())) => AclCreationResult::default(),
        })
        .collect();
    response
}

pub fn describe(shard: &Rc<Shard>, request: DescribeAclsRequest) -> DescribeAclsResponse {
    let mut response = DescribeAclsResponse::default();
    if shard.settings.security.authorizer.is_none() {
        return response.with_error_code(code::SECURITY_DISABLED).with_error_message(Some(s(DISABLED)));
    }
    let filter = filter(
        request.resource_type_filter,
        request.resource_name_filter.as_deref(),
        request.pattern_type_filter,
        request.principal_filter.as_deref(),
        request.host_filter.as_deref(),
        request.operation,
        request.permission_type,
    );
    let filter = match filter {
        Ok(filter) => filter,
        Err(message) => return response.with_error_code(code::INVALID_REQUEST).with_error_message(Some(s(message))),
    };
    let image = shard.image();
    // Bindings are sorted by resource, so each resource's ACLs are adjacent.
    for acl in image.acls.iter().filter(|a| filter.matches(a)) {
        let description = AclDescription::default()
            .with_principal(s(acl.principal.as_str()))
            .with_host(s(acl.host.as_str()))
            .with_operation(acl.operation.code())
            .with_permission_type(acl.permission.code());
        let same = response.resources.last().is_some_and(|r: &DescribeAclsResource| {
            r.resource_type == acl.resource_type.code()
                && r.resource_name.as_str() == acl.name
                && r.pattern_type == acl.pattern.code()
        });
        if !same {
            response.resources.push(
                DescribeAclsResource::default()
                    .with_resource_type(acl.resource_type.code())
                    .with_resource_name(s(acl.name.as_str()))
                    .with_pattern_type(acl.pattern.code()),
            );
        }
        if let Some(resource) = response.resources.last_mut() {
            resource.acls.push(description);
        }
    }
    response
}

pub async fn delete(shard: &Rc<Shard>, request: DeleteAclsRequest) -> DeleteAclsResponse {
    let mut response = DeleteAclsResponse::default();
    let refuse = |code: i16, message: &str| {
        DeleteAclsFilterResult::default().with_error_code(code).with_error_message(Some(s(message)))
    };
    if shard.settings.security.authorizer.is_none() {
        response.filter_results = vec![refuse(code::SECURITY_DISABLED, DISABLED); request.filters.len()];
        return response;
    }
    let image = shard.image();
    let mut matched: Vec<Result<Vec<AclBinding>, String>> = Vec::new();
    for f in &request.filters {
        let parsed = filter(
            f.resource_type_filter,
            f.resource_name_filter.as_deref(),
            f.pattern_type_filter,
            f.principal_filter.as_deref(),
            f.host_filter.as_deref(),
            f.operation,
            f.permission_type,
        );
        matched.push(parsed.map(|filter| image.acls.iter().filter(|a| filter.matches(a)).cloned().collect()));
    }
    let mut doomed: Vec<AclBinding> = matched.iter().filter_map(|m| m.as_ref().ok()).flatten().cloned().collect();
    doomed.sort();
    doomed.dedup();
    let outcome = match doomed.is_empty() {
        true => Ok(()),
        false => shard.control(ControllerRequest::DeleteAcls { bindings: doomed }).await.map(|_| ()),
    };
    response.filter_results = matched
        .into_iter()
        .map(|m| match (m, &outcome) {
            (Err(message), _) => refuse(code::INVALID_REQUEST, &message),
            (Ok(_), Err((code, message))) => refuse(*code, message),
            (Ok(bindings), Ok(())) => DeleteAclsFilterResult::default().with_matching_acls(
                bindings
                    .iter()
                    .map(|b| {
                        DeleteAclsMatchingAcl::default()
                            .with_resource_type(b.resource_type.code())
                            .with_resource_name(s(b.name.as_str()))
                            .with_pattern_type(b.pattern.code())
                            .with_principal(s(b.principal.as_str()))
                            .with_host(s(b.host.as_str()))
                            .with_operation(b.operation.code())
                            .with_permission_type(b.permission.code())
                    })
                    .collect(),
            ),
        })
        .collect();
    response
}

/// A binding from its wire fields; an unknown code is an invalid request.
fn binding(
    kind: i8,
    name: &str,
    pattern: i8,
    principal: &str,
    host: &str,
    operation: i8,
    permission: i8,
) -> Result<AclBinding, String> {
    Ok(AclBinding {
        resource_type: ResourceType::from_code(kind).ok_or_else(|| format!("Unknown resource type {kind}"))?,
        name: name.to_string(),
        pattern: PatternType::from_code(pattern).ok_or_else(|| format!("Unknown pattern type {pattern}"))?,
        principal: principal.to_string(),
        host: host.to_string(),
        operation: Operation::from_code(operation).ok_or_else(|| format!("Unknown operation {operation}"))?,
        permission: Permission::from_code(permission).ok_or_else(|| format!("Unknown permission type {permission}"))?,
    })
}

/// A filter from its wire fields.
fn filter(
    kind: i8,
    name: Option<&str>,
    pattern: i8,
    principal: Option<&str>,
    host: Option<&str>,
    operation: i8,
    permission: i8,
) -> Result<AclFilter, String> {
    Ok(AclFilter {
        resource_type: ResourceType::from_code(kind).ok_or_else(|| format!("Unknown resource type {kind}"))?,
        name: name.map(String::from),
        pattern: PatternType::from_code(pattern).ok_or_else(|| format!("Unknown pattern type {pattern}"))?,
        principal: principal.map(String::from),
        host: host.map(String::from),
        operation: Operation::from_code(operation).ok_or_else(|| format!("Unknown operation {operation}"))?,
        permission: Permission::from_code(permission).ok_or_else(|| format!("Unknown permission type {permission}"))?,
    })
}
