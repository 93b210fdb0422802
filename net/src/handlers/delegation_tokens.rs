//! CreateDelegationToken, RenewDelegationToken, ExpireDelegationToken and
//! DescribeDelegationToken (KIP-48, `kafka-delegation-tokens`), with Kafka 4.4's
//! checks in Kafka's order: a connection that may not ask for tokens (plaintext,
//! unauthenticated SSL, or itself authenticated with a token) gets
//! DELEGATION_TOKEN_REQUEST_NOT_ALLOWED; a node without `delegation.token.secret.key`
//! DELEGATION_TOKEN_AUTH_DISABLED. The controller records tokens in the metadata log
//! (`security::tokens` holds the rules).

use std::rc::Rc;

use base64::Engine;
use bytes::Bytes;
use kafka_protocol::messages::describe_delegation_token_response::{
    DescribedDelegationToken, DescribedDelegationTokenRenewer,
};
use kafka_protocol::messages::{
    CreateDelegationTokenRequest, CreateDelegationTokenResponse, DescribeDelegationTokenRequest,
    DescribeDelegationTokenResponse, ExpireDelegationTokenRequest, ExpireDelegationTokenResponse,
    RenewDelegationTokenRequest, RenewDelegationTokenResponse,
};
use kafka_protocol::protocol::{StrBytes, VersionRange};
use skein_control::errors::code;
use skein_control::metadata::requests::ControllerRequest;
use skein_control::security::acl::ResourceType;
use skein_control::security::tokens::{self, split_principal, DelegationToken, TokenSettings};
use skein_engine::time::now_ms;

use super::s;
use crate::authorize::{Caller, Op};
use crate::shard::Shard;

pub const CREATE_VERSIONS: VersionRange = VersionRange { min: 1, max: 3 };
pub const RENEW_VERSIONS: VersionRange = VersionRange { min: 1, max: 2 };
pub const EXPIRE_VERSIONS: VersionRange = VersionRange { min: 1, max: 2 };
pub const DESCRIBE_VERSIONS: VersionRange = VersionRange { min: 1, max: 3 };

/// Kafka's `DelegationTokenManager.ErrorTimestamp`: the expiry of a refused renewal.
const ERROR_TIMESTAMP: i64 = -1;

/// The token settings, when the caller may ask for tokens and the node serves them.
fn settings<'a>(shard: &'a Shard, caller: &Caller) -> Result<&'a TokenSettings, i16> {
    if !caller.session.may_request_tokens {
        return Err(code::DELEGATION_TOKEN_REQUEST_NOT_ALLOWED);
    }
    shard.settings.security.tokens.as_ref().ok_or(code::DELEGATION_TOKEN_AUTH_DISABLED)
}

pub async fn create(
    shard: &Rc<Shard>,
    request: CreateDelegationTokenRequest,
    caller: &Caller,
    version: i16,
) -> CreateDelegationTokenResponse {
    let requester = caller.session.principal.clone();
    let owner = match request.owner_principal_name.as_deref().filter(|name| !name.is_empty()) {
        Some(name) => format!("{}:{name}", request.owner_principal_type.as_deref().unwrap_or("User")),
        None => requester.clone(),
    };
    let (owner_type, owner_name) = split_principal(&owner);
    let (requester_type, requester_name) = split_principal(&requester);
    let mut response =
        CreateDelegationTokenResponse::default().with_principal_type(s(owner_type)).with_principal_name(s(owner_name));
    // From v3 (KIP-373) the requester is told apart from the owner.
    if version >= 3 {
        response = response
            .with_token_requester_principal_type(s(requester_type))
            .with_token_requester_principal_name(s(requester_name));
    }
    let settings = match settings(shard, caller) {
        Ok(settings) => settings,
        Err(code) => return response.with_error_code(code),
    };
    if owner != requester && !caller.may(Op::CreateTokens, ResourceType::User, &owner) {
        return response.with_error_code(code::DELEGATION_TOKEN_AUTHORIZATION_FAILED);
    }
    // Kafka takes only users as renewers; Skein's principals are users, so owners too.
    let users = |t: &StrBytes| t.as_str() == "User";
    if !request.renewers.iter().all(|r| users(&r.principal_type)) || owner_type != "User" {
        return response.with_error_code(code::INVALID_PRINCIPAL_TYPE);
    }
    let now = now_ms();
    let lifetime = match request.max_lifetime_ms {
        ms if ms > 0 => ms.min(settings.max_lifetime_ms),
        _ => settings.max_lifetime_ms,
    };
    let max_ms = now.saturating_add(lifetime);
    let token = DelegationToken {
        // Kafka's token ids are its Uuids' text: 22 characters of URL-safe base64.
        id: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(uuid::Uuid::new_v4().as_bytes()),
        owner: owner.clone(),
        requester: requester.clone(),
        renewers: request.renewers.iter().map(|r| format!("{}:{}", r.principal_type, r.principal_name)).collect(),
        issued_ms: now,
        max_ms,
        expiry_ms: max_ms.min(now.saturating_add(settings.expiry_time_ms)),
    };
    match shard.control(ControllerRequest::CreateToken(token.clone())).await {
        Ok(_) => response
            .with_issue_timestamp_ms(token.issued_ms)
            .with_expiry_timestamp_ms(token.expiry_ms)
            .with_max_timestamp_ms(token.max_ms)
            .with_hmac(Bytes::from(settings.hmac(&token.id)))
            .with_token_id(s(token.id)),
        Err((code, message)) => {
            tracing::debug!(target: "skein::net", code, message, "delegation token not created");
            response.with_error_code(code)
        }
    }
}

/// The token whose HMAC is `hmac`, renewed or expired by the controller with
/// `change`: the new expiry, or the error.
async fn change_token(
    shard: &Rc<Shard>,
    caller: &Caller,
    hmac: &[u8],
    change: impl FnOnce(&TokenSettings, String, String, i64) -> ControllerRequest,
) -> (i16, i64) {
    let settings = match settings(shard, caller) {
        Ok(settings) => settings,
        Err(code) => return (code, ERROR_TIMESTAMP),
    };
    let image = shard.image();
    let Some(token) = settings.token_of(&image.tokens, hmac) else {
        return (code::DELEGATION_TOKEN_NOT_FOUND, ERROR_TIMESTAMP);
    };
    let request = change(settings, token.id.clone(), caller.session.principal.clone(), now_ms());
    match shard.control(request).await.and_then(|reply| reply.into_token_expiry()) {
        Ok(expiry) => (code::NONE, expiry),
        Err((code, _)) => (code, ERROR_TIMESTAMP),
    }
}

pub async fn renew(
    shard: &Rc<Shard>,
    request: RenewDelegationTokenRequest,
    caller: &Caller,
) -> RenewDelegationTokenResponse {
    let period = request.renew_period_ms;
    let (code, expiry) = change_token(shard, caller, &request.hmac, |settings, id, principal, now_ms| {
        // Kafka's rule: a positive period, at most `delegation.token.expiry.time.ms`;
        // otherwise that setting.
        let period = if period > 0 { period.min(settings.expiry_time_ms) } else { settings.expiry_time_ms };
        ControllerRequest::RenewToken { id, principal, now_ms, renew_to_ms: now_ms.saturating_add(period) }
    })
    .await;
    RenewDelegationTokenResponse::default().with_error_code(code).with_expiry_timestamp_ms(expiry)
}

pub async fn expire(
    shard: &Rc<Shard>,
    request: ExpireDelegationTokenRequest,
    caller: &Caller,
) -> ExpireDelegationTokenResponse {
    let period = request.expiry_time_period_ms;
    let (code, expiry) = change_token(shard, caller, &request.hmac, |_, id, principal, now_ms| {
        let expire_to_ms = (period >= 0).then(|| now_ms.saturating_add(period));
        ControllerRequest::ExpireToken { id, principal, now_ms, expire_to_ms }
    })
    .await;
    ExpireDelegationTokenResponse::default().with_error_code(code).with_expiry_timestamp_ms(expiry)
}

pub fn describe(
    shard: &Rc<Shard>,
    request: DescribeDelegationTokenRequest,
    caller: &Caller,
    version: i16,
) -> DescribeDelegationTokenResponse {
    let response = DescribeDelegationTokenResponse::default();
    let settings = match settings(shard, caller) {
        Ok(settings) => settings,
        Err(code) => return response.with_error_code(code),
    };
    // No owners (an empty list, not a null one) asks for no tokens.
    let owners: Option<Vec<String>> = request
        .owners
        .as_ref()
        .map(|owners| owners.iter().map(|o| format!("{}:{}", o.principal_type, o.principal_name)).collect());
    if owners.as_ref().is_some_and(Vec::is_empty) {
        return response;
    }
    let image = shard.image();
    let requester = &caller.session.principal;
    let tokens = image
        .tokens
        .values()
        .filter(|token| {
            tokens::shown(
                token,
                requester,
                owners.as_deref(),
                |id| caller.may(Op::Describe, ResourceType::DelegationToken, id),
                |owner| caller.may(Op::DescribeTokens, ResourceType::User, owner),
            )
        })
        .map(|token| described(settings, token, version))
        .collect();
    response.with_tokens(tokens)
}

fn described(settings: &TokenSettings, token: &DelegationToken, version: i16) -> DescribedDelegationToken {
    let (owner_type, owner_name) = split_principal(&token.owner);
    let (requester_type, requester_name) = split_principal(&token.requester);
    let renewers = token
        .renewers
        .iter()
        .map(|renewer| {
            let (kind, name) = split_principal(renewer);
            DescribedDelegationTokenRenewer::default().with_principal_type(s(kind)).with_principal_name(s(name))
        })
        .collect();
    let mut described = DescribedDelegationToken::default();
    if version >= 3 {
        described = described
            .with_token_requester_principal_type(s(requester_type))
            .with_token_requester_principal_name(s(requester_name));
    }
    described
        .with_principal_type(s(owner_type))
        .with_principal_name(s(owner_name))
        .with_issue_timestamp(token.issued_ms)
        .with_expiry_timestamp(token.expiry_ms)
        .with_max_timestamp(token.max_ms)
        .with_token_id(s(token.id.as_str()))
        .with_hmac(Bytes::from(settings.hmac(&token.id)))
        .with_renewers(renewers)
}
