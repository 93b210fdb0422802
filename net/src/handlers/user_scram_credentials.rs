//! DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): SCRAM users
//! and their mechanisms and iterations (never the keys), and setting or removing a
//! user's credential for one mechanism. Credentials live in the metadata image, so a
//! change goes through the controller and reaches every broker (and survives
//! restarts) with the rest of the metadata.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::VersionRange;

use super::s;
use crate::errors::code;
use crate::metadata::controller::ControllerRequest;
use crate::security::scram::{self, ScramCredential, ScramMechanism};
use crate::shard::Shard;

pub const DESCRIBE_VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };
pub const ALTER_VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };

pub fn describe(
    shard: &Rc<Shard>,
    request: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let image = shard.image();
    let mut response = DescribeUserScramCredentialsResponse::default();
    let describe_user = |user: &str| {
        let mut result = DescribeUserScramCredentialsResult::default().with_user(s(user));
        match image.scram.get(user) {
            Some(mechanisms) => {
                result.credential_infos = mechanisms
                    .iter()
                    .filter_map(|(name, credential)| {
                        let mechanism = ScramMechanism::parse(name)?;
                        Some(
                            CredentialInfo::default()
                                .with_mechanism(mechanism.id())
                                .with_iterations(credential.iterations as i32),
                        )
                    })
                    .collect();
            }
            None => {
                result.error_code = code::RESOURCE_NOT_FOUND;
                result.error_message =
                    Some(s(format!("Attempt to describe a user credential that does not exist: {user}")));
            }
        }
        result
    };
    match request.users.filter(|users| !users.is_empty()) {
        None => response.results = image.scram.keys().map(|user| describe_user(user)).collect(),
        Some(users) => {
            let mut seen: BTreeMap<String, usize> = BTreeMap::new();
            for user in &users {
                *seen.entry(user.name.to_string()).or_default() += 1;
            }
            for (user, count) in seen {
                response.results.push(match count {
                    1 => describe_user(&user),
                    _ => {
                        let mut result = DescribeUserScramCredentialsResult::default().with_user(s(user.as_str()));
                        result.error_code = code::DUPLICATE_RESOURCE;
                        result.error_message = Some(s(format!(
                            "Cannot describe SCRAM credentials for the same user twice in a single request: {user}"
                        )));
                        result
                    }
                });
            }
        }
    }
    response
}

pub async fn alter(shard: &Rc<Shard>, request: AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse {
    let image = shard.image();
    // A user named more than once in one request gets DUPLICATE_RESOURCE for all of
    // it, as in Kafka.
    let mut counts: BTreeMap<(String, i8), usize> = BTreeMap::new();
    for d in &request.deletions {
        *counts.entry((d.name.to_string(), d.mechanism)).or_default() += 1;
    }
    for u in &request.upsertions {
        *counts.entry((u.name.to_string(), u.mechanism)).or_default() += 1;
    }
    let duplicated: BTreeSet<String> = counts.iter().filter(|(_, n)| **n > 1).map(|((u, _), _)| u.clone()).collect();
    let mut errors: BTreeMap<String, (i16, String)> = BTreeMap::new();
    let mut changes: Vec<(String, String, Option<ScramCredential>)> = Vec::new();
    let mut fail = |user: &str, code: i16, message: String| {
        errors.entry(user.to_string()).or_insert((code, message));
    };
    for user in &duplicated {
        fail(
            user,
            code::DUPLICATE_RESOURCE,
            format!("A user credential cannot be altered twice in the same request: {user}"),
        );
    }
    for deletion in &request.deletions {
        let user = deletion.name.to_string();
        if duplicated.contains(&user) {
            continue;
        }
        let Some(mechanism) = ScramMechanism::from_id(deletion.mechanism) else {
            fail(&user, code::UNSUPPORTED_SASL_MECHANISM, format!("Unknown SCRAM mechanism {}", deletion.mechanism));
            continue;
        };
        if user.is_empty() {
            fail(&user, code::UNACCEPTABLE_CREDENTIAL, "Username must not be empty".into());
        } else if image.scram.get(&user).is_none_or(|m| !m.contains_key(mechanism.name())) {
            fail(
                &user,
                code::RESOURCE_NOT_FOUND,
                format!("Attempt to delete a user credential that does not exist: {user}"),
            );
        } else {
            changes.push((user, mechanism.name().to_string(), None));
        }
    }
    for upsertion in &request.upsertions {
        let user = upsertion.name.to_string();
        if duplicated.contains(&user) {
            continue;
        }
        let Some(mechanism) = ScramMechanism::from_id(upsertion.mechanism) else {
            fail(&user, code::UNSUPPORTED_SASL_MECHANISM, format!("Unknown SCRAM mechanism {}", upsertion.mechanism));
            continue;
        };
        if user.is_empty() {
            fail(&user, code::UNACCEPTABLE_CREDENTIAL, "Username must not be empty".into());
        } else if !scram::iterations_valid(upsertion.iterations as i64) {
            fail(
                &user,
                code::UNACCEPTABLE_CREDENTIAL,
                format!("Iterations {} not within [4096, 16384]", upsertion.iterations),
            );
        } else if upsertion.salt.is_empty() || upsertion.salted_password.len() != mechanism.key_len() {
            fail(
                &user,
                code::UNACCEPTABLE_CREDENTIAL,
                "Salt and salted password must be set, the password of the mechanism's length".into(),
            );
        } else {
            let credential = ScramCredential::from_salted(
                mechanism,
                &upsertion.salted_password,
                &upsertion.salt,
                upsertion.iterations as u32,
            );
            changes.push((user, mechanism.name().to_string(), Some(credential)));
        }
    }
    // A user with any failed change has none of its changes applied.
    changes.retain(|(user, _, _)| !errors.contains_key(user));
    let users: BTreeSet<String> = counts.keys().map(|(u, _)| u.clone()).collect();
    if !changes.is_empty() {
        if let Err((code, message)) = shard.control(ControllerRequest::AlterScram { changes }).await {
            for user in &users {
                errors.entry(user.clone()).or_insert((code, message.clone()));
            }
        }
    }
    let mut response = AlterUserScramCredentialsResponse::default();
    response.results = users
        .into_iter()
        .map(|user| {
            let mut result = AlterUserScramCredentialsResult::default().with_user(s(user.as_str()));
            if let Some((code, message)) = errors.remove(&user) {
                result.error_code = code;
                result.error_message = Some(s(message));
            }
            result
        })
        .collect();
    response
}
