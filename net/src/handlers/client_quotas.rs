//! DescribeClientQuotas and AlterClientQuotas (KIP-546): quotas by user, client id
//! (each a name or the default) or ip, in the metadata image, so a change goes
//! through the controller and every shard enforces it at once (`quota`).

use std::collections::BTreeSet;
use std::rc::Rc;

use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{
    alter_client_quotas_response, AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::{StrBytes, VersionRange};
use skein_control::errors::code;
use skein_control::metadata::controller::ControllerRequest;
use skein_control::quota::{EntityName, QuotaEntity, CONNECTION_CREATION_RATE, REQUEST_PERCENTAGE};

use super::s;
use crate::shard::Shard;

pub const DESCRIBE_VERSIONS: VersionRange = VersionRange { min: 0, max: 1 };
pub const ALTER_VERSIONS: VersionRange = VersionRange { min: 0, max: 1 };

const USER: &str = "user";
const CLIENT_ID: &str = "client-id";
const IP: &str = "ip";

/// Kafka's match types of a DescribeClientQuotas component.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_SPECIFIED: i8 = 2;

/// The part of `entity` of type `kind`.
fn part<'a>(entity: &'a QuotaEntity, kind: &str) -> Option<&'a Option<EntityName>> {
    match kind {
        USER => Some(&entity.user),
        CLIENT_ID => Some(&entity.client_id),
        IP => Some(&entity.ip),
        _ => None,
    }
}

pub fn describe(shard: &Rc<Shard>, request: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse {
    let response = DescribeClientQuotasResponse::default();
    let invalid = |message: String| {
        DescribeClientQuotasResponse::default()
            .with_error_code(code::INVALID_REQUEST)
            .with_error_message(Some(s(message)))
    };
    let mut kinds = BTreeSet::new();
    for component in &request.components {
        let kind = component.entity_type.as_str();
        if part(&QuotaEntity::default(), kind).is_none() {
            return invalid(format!("Custom entity type {kind} not supported"));
        }
        if !kinds.insert(kind.to_string()) {
            return invalid(format!("Entity type {kind} cannot appear more than once in the filter"));
        }
        if !matches!(component.match_type, MATCH_EXACT | MATCH_DEFAULT | MATCH_SPECIFIED) {
            return invalid(format!("Unknown match type {}", component.match_type));
        }
    }
    if kinds.contains(IP) && (kinds.contains(USER) || kinds.contains(CLIENT_ID)) {
        return invalid("Invalid entity filter component combination, IP filter component should not be used with user or clientId filter component.".into());
    }
    let image = shard.image();
    let matches = |entity: &QuotaEntity| {
        let components_match = request.components.iter().all(|c| {
            let Some(Some(name)) = part(entity, c.entity_type.as_str()) else { return false };
            match (c.match_type, name) {
                (MATCH_EXACT, EntityName::Named(n)) => c._match.as_deref() == Some(n.as_str()),
                (MATCH_EXACT, EntityName::Default) => c._match.is_none(),
                (MATCH_DEFAULT, EntityName::Default) => true,
                (MATCH_SPECIFIED, EntityName::Named(_)) => true,
                _ => false,
            }
        });
        // Strict: the entity has no parts beyond those the filter names.
        let extra =
            [USER, CLIENT_ID, IP].iter().any(|k| !kinds.contains(*k) && part(entity, k).is_some_and(|p| p.is_some()));
        components_match && !(request.strict && extra)
    };
    let entries = image
        .client_quotas
        .iter()
        .filter(|q| matches(&q.entity))
        .map(|q| {
            let entity = [USER, CLIENT_ID, IP]
                .iter()
                .filter_map(|kind| {
                    let name = part(&q.entity, kind)?.as_ref()?;
                    Some(EntityData::default().with_entity_type(s(*kind)).with_entity_name(name.to_wire().map(s)))
                })
                .collect();
            let values =
                q.values.iter().map(|(k, v)| ValueData::default().with_key(s(k.as_str())).with_value(*v)).collect();
            EntryData::default().with_entity(entity).with_values(values)
        })
        .collect();
    response.with_entries(Some(entries))
}

pub async fn alter(shard: &Rc<Shard>, request: AlterClientQuotasRequest) -> AlterClientQuotasResponse {
    let mut changes = Vec::new();
    let mut results = Vec::new();
    for entry in &request.entries {
        let echoed = entry
            .entity
            .iter()
            .map(|e| {
                alter_client_quotas_response::EntityData::default()
                    .with_entity_type(e.entity_type.clone())
                    .with_entity_name(e.entity_name.clone())
            })
            .collect();
        let result = alter_client_quotas_response::EntryData::default().with_entity(echoed);
        let parts: Vec<(&str, Option<&StrBytes>)> =
            entry.entity.iter().map(|e| (e.entity_type.as_str(), e.entity_name.as_ref())).collect();
        let ops: Vec<(&str, Option<f64>)> =
            entry.ops.iter().map(|o| (o.key.as_str(), (!o.remove).then_some(o.value))).collect();
        match checked(&parts, &ops) {
            Ok((entity, entry_changes)) => {
                changes.extend(entry_changes.into_iter().map(|(key, value)| (entity.clone(), key, value)));
                results.push((result, None));
            }
            Err(message) => results.push((result, Some((code::INVALID_REQUEST, message)))),
        }
    }
    let mut failure = None;
    if !request.validate_only && !changes.is_empty() && results.iter().all(|(_, e)| e.is_none()) {
        failure = shard.control(ControllerRequest::AlterClientQuotas { changes }).await.err();
    }
    let any_invalid = results.iter().any(|(_, e)| e.is_some());
    let entries = results
        .into_iter()
        .map(|(result, error)| {
            // As in Kafka, a request with an invalid entry changes nothing.
            let error = error.or_else(|| failure.clone()).or_else(|| {
                any_invalid.then(|| (code::INVALID_REQUEST, "Another entry of the request is invalid".to_string()))
            });
            match error {
                Some((code, message)) => result.with_error_code(code).with_error_message(Some(s(message))),
                None => result,
            }
        })
        .collect();
    AlterClientQuotasResponse::default().with_entries(entries)
}

/// One entry's entity and its changes, checked as Kafka checks them.
type Changes = (QuotaEntity, Vec<(String, Option<f64>)>);

fn checked(parts: &[(&str, Option<&StrBytes>)], ops: &[(&str, Option<f64>)]) -> Result<Changes, String> {
    let mut entity = QuotaEntity::default();
    for (kind, name) in parts {
        let slot = match *kind {
            USER => &mut entity.user,
            CLIENT_ID => &mut entity.client_id,
            IP => &mut entity.ip,
            other => return Err(format!("Unhandled client quota entity type: {other}")),
        };
        if slot.is_some() {
            return Err(format!("Duplicate {kind} entity type"));
        }
        *slot = Some(EntityName::from_wire(name.map(|n| n.as_str())));
    }
    if let Some(problem) = entity.invalid() {
        return Err(problem.into());
    }
    let mut keys = BTreeSet::new();
    let mut changes = Vec::new();
    for (key, value) in ops {
        if !entity.keys().contains(key) {
            return Err(format!("Invalid configuration key {key}"));
        }
        if !keys.insert(*key) {
            return Err(format!("Duplicate quota key {key}"));
        }
        if let Some(v) = value {
            let whole = *key != REQUEST_PERCENTAGE;
            if !v.is_finite() || *v <= 0.0 || (whole && v.fract() != 0.0) {
                let kind = if whole { "a positive whole number" } else { "a positive number" };
                return Err(format!("Invalid value {v} for {key}: must be {kind}"));
            }
            if *key == CONNECTION_CREATION_RATE && *v > i32::MAX as f64 {
                return Err(format!("Invalid value {v} for {key}: too large"));
            }
        }
        changes.push((key.to_string(), *value));
    }
    Ok((entity, changes))
}
