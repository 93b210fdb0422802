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
use skein_control::errors::code;
use skein_control::metadata::controller::ControllerRequest;
use skein_control::metadata::Refusal;
use skein_control::security::scram::{self, ScramCredential, ScramMechanism};

use super::s;
use crate::shard::Shard;

pub const DESCRIBE_VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };
pub const ALTER_VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };

pub fn describe(
    shard: &Rc<Shard>,
    request: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let users = shard.settings.security.scram_iterations(&shard.image());
    let mut response = DescribeUserScramCredentialsResponse::default();
    let describe_user = |user: &str| {
        let mut result = DescribeUserScramCredentialsResult::default().with_user(s(user));
        match users.get(user) {
            Some(mechanisms) => {
                result.credential_infos = mechanisms
                    .iter()
                    .filter_map(|(name, iterations)| {
                        let mechanism = ScramMechanism::parse(name)?;
                        Some(
                            CredentialInfo::default()
                                .with_mechanism(mechanism.id())
                                .with_iterations(*iterations as i32),
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
        None => response.results = users.keys().map(|user| describe_user(user)).collect(),
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
    // A user's credential for one mechanism named more than once in one request gets
    // DUPLICATE_RESOURCE for all of that user's changes, as in Kafka.
    let mut counts: BTreeMap<(String, i8), usize> = BTreeMap::new();
    let named = request.deletions.iter().map(|d| (&d.name, d.mechanism));
    for (name, mechanism) in named.chain(request.upsertions.iter().map(|u| (&u.name, u.mechanism))) {
        *counts.entry((name.to_string(), mechanism)).or_default() += 1;
    }
    let mut errors: BTreeMap<String, Refusal> = BTreeMap::new();
    for ((user, _), _) in counts.iter().filter(|(_, n)| **n > 1) {
        let message = format!("A user credential cannot be altered twice in the same request: {user}");
        errors.entry(user.clone()).or_insert((code::DUPLICATE_RESOURCE, message));
    }
    // The checks both kinds of change share: the mechanism is known, the user named.
    let checked = |user: &str, id: i8| -> Result<ScramMechanism, Refusal> {
        let mechanism = ScramMechanism::from_id(id)
            .ok_or_else(|| (code::UNSUPPORTED_SASL_MECHANISM, format!("Unknown SCRAM mechanism {id}")))?;
        match user.is_empty() {
            true => Err((code::UNACCEPTABLE_CREDENTIAL, "Username must not be empty".into())),
            false => Ok(mechanism),
        }
    };
    let mut changes: Vec<(String, String, Option<ScramCredential>)> = Vec::new();
    let mut outcomes = Vec::new();
    for deletion in &request.deletions {
        let user = deletion.name.to_string();
        let change = checked(&user, deletion.mechanism).and_then(|mechanism| {
            match image.scram.get(&user).is_some_and(|m| m.contains_key(mechanism.name())) {
                true => Ok((mechanism, None)),
                false => Err((
                    code::RESOURCE_NOT_FOUND,
                    format!("Attempt to delete a user credential that does not exist: {user}"),
                )),
            }
        });
        outcomes.push((user, change));
    }
    for upsertion in &request.upsertions {
        let user = upsertion.name.to_string();
        let change = checked(&user, upsertion.mechanism).and_then(|mechanism| {
            if !scram::iterations_valid(upsertion.iterations as i64) {
                let message = format!("Iterations {} not within [4096, 16384]", upsertion.iterations);
                return Err((code::UNACCEPTABLE_CREDENTIAL, message));
            }
            if upsertion.salt.is_empty() || upsertion.salted_password.len() != mechanism.key_len() {
                let message = "Salt and salted password must be set, the password of the mechanism's length";
                return Err((code::UNACCEPTABLE_CREDENTIAL, message.into()));
            }
            let iterations = upsertion.iterations as u32;
            let salted = &upsertion.salted_password;
            Ok((mechanism, Some(ScramCredential::from_salted(mechanism, salted, &upsertion.salt, iterations))))
        });
        outcomes.push((user, change));
    }
    for (user, change) in outcomes {
        match change {
            Ok((mechanism, credential)) => changes.push((user, mechanism.name().to_string(), credential)),
            Err(refusal) => {
                errors.entry(user).or_insert(refusal);
            }
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
