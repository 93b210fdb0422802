//! One connection's SASL authentication, as Kafka's `SaslServerAuthenticator` runs it:
//! SaslHandshake names the mechanism, then the tokens travel in SaslAuthenticate
//! requests (handshake v1, KIP-152) or as raw size-prefixed frames (handshake v0).
//! Until it succeeds the connection may send only ApiVersions, SaslHandshake and
//! SaslAuthenticate. With `connections.max.reauth.ms` the session has a lifetime, told
//! to the client in SaslAuthenticate v1+; the client re-authenticates on the same
//! connection before it ends (KIP-368), as the same principal, and a connection that
//! lets it lapse is closed at its next request.
//!
//! A failure is answered with SASL_AUTHENTICATION_FAILED and one message whatever the
//! cause, then the connection is closed.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::scram::{self, ScramCredential, ScramMechanism};
use super::{Principal, Security};
use crate::errors::code;
use crate::limits::SASL_TOKEN_MAX_BYTES;

/// Where a SCRAM exchange finds its credentials: users', and delegation tokens' (the
/// `tokenauth=true` extension).
pub trait Credentials {
    /// User `user`'s credential for `mechanism`.
    fn user(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential>;
    /// A live delegation token's credential for `mechanism`.
    fn token(&self, id: &str, mechanism: ScramMechanism) -> Option<ScramCredential>;
    /// A live delegation token's owner (`User:alice`) and expiry (ms since the epoch).
    fn token_owner(&self, id: &str) -> Option<(String, i64)>;
}

/// A SASL mechanism Skein serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    Plain,
    Scram(ScramMechanism),
    /// With unsecured JWS tokens (`oauthbearer`).
    OAuthBearer,
}

impl Mechanism {
    pub fn parse(name: &str) -> Option<Mechanism> {
        match name {
            "PLAIN" => Some(Mechanism::Plain),
            "OAUTHBEARER" => Some(Mechanism::OAuthBearer),
            other => ScramMechanism::parse(other).map(Mechanism::Scram),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Scram(m) => m.name(),
            Mechanism::OAuthBearer => "OAUTHBEARER",
        }
    }
}

/// Where a connection's authentication is.
#[derive(Debug)]
enum State {
    /// Waiting for SaslHandshake (first, or a re-authentication).
    Handshake,
    /// Mechanism chosen; waiting for tokens.
    Tokens { mechanism: Mechanism, scram: scram::Exchange, raw: bool },
}

/// What the connection does with a request while it authenticates.
#[derive(Debug, PartialEq, Eq)]
pub enum Gate {
    /// Serve it as usual.
    Serve,
    /// A SASL request: answer it with `Authenticator::handshake` or `authenticate`.
    Authenticate,
    /// Close the connection: a request before authentication, or after the session
    /// lapsed.
    Close(&'static str),
}

/// What a token step gives the connection.
#[derive(Debug)]
pub struct TokenReply {
    pub response: SaslAuthenticateResponse,
    /// Close the connection after sending the response.
    pub close: bool,
    /// This token completed an authentication (or a re-authentication).
    pub authenticated: bool,
}

/// One connection's authentication state.
#[derive(Debug)]
pub struct Authenticator {
    state: State,
    /// The authenticated principal, once authenticated.
    principal: Option<Principal>,
    /// When the session ends (`connections.max.reauth.ms`).
    expires: Option<Instant>,
}

impl Default for Authenticator {
    fn default() -> Authenticator {
        Authenticator::new()
    }
}

impl Authenticator {
    pub fn new() -> Authenticator {
        Authenticator { state: State::Handshake, principal: None, expires: None }
    }

    /// The principal the connection acts as, once authenticated.
    pub fn principal(&self) -> Option<&Principal> {
        self.principal.as_ref()
    }

    /// Whether the next frame is a raw token (after a v0 handshake).
    pub fn expects_raw_token(&self) -> bool {
        matches!(self.state, State::Tokens { raw: true, .. })
    }

    /// What to do with a request of `api_key` now.
    pub fn gate(&self, api_key: ApiKey, now: Instant) -> Gate {
        if matches!(api_key, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate) {
            return Gate::Authenticate;
        }
        if self.principal.is_none() {
            return match api_key {
                ApiKey::ApiVersions => Gate::Serve,
                _ => Gate::Close("a request before SASL authentication"),
            };
        }
        match self.expires {
            Some(expires) if now >= expires => Gate::Close("the SASL session expired without re-authentication"),
            _ => Gate::Serve,
        }
    }

    /// Answers SaslHandshake. Returns the response and whether to close the
    /// connection after it (an unsupported mechanism, or a handshake out of order).
    pub fn handshake(
        &mut self,
        security: &Security,
        version: i16,
        request: &SaslHandshakeRequest,
    ) -> (SaslHandshakeResponse, bool) {
        let mut response = SaslHandshakeResponse::default();
        response.mechanisms = security.mechanisms.iter().map(|m| StrBytes::from_static_str(m.name())).collect();
        let wanted = Mechanism::parse(request.mechanism.as_str()).filter(|m| security.mechanisms.contains(m));
        let Some(mechanism) = wanted else {
            response.error_code = code::UNSUPPORTED_SASL_MECHANISM;
            return (response, true);
        };
        // A re-authentication (KIP-368) needs handshake v1 and the same mechanism's
        // tokens in SaslAuthenticate.
        let reauthenticating = self.principal.is_some();
        if !matches!(self.state, State::Handshake) || (reauthenticating && version == 0) {
            response.error_code = code::ILLEGAL_SASL_STATE;
            return (response, true);
        }
        self.state = State::Tokens { mechanism, scram: scram::Exchange::Start, raw: version == 0 };
        (response, false)
    }

    /// Takes one token, from SaslAuthenticate or a raw frame; SCRAM's credentials come
    /// from `credentials`.
    pub fn authenticate(
        &mut self,
        security: &Security,
        version: i16,
        request: &SaslAuthenticateRequest,
        credentials: &impl Credentials,
        jwks: Option<&super::jwks::KeySet>,
        now: Instant,
    ) -> TokenReply {
        let failed = |code: i16, message: String| {
            let mut response = SaslAuthenticateResponse::default();
            response.error_code = code;
            response.error_message = Some(StrBytes::from_string(message));
            TokenReply { response, close: true, authenticated: false }
        };
        let State::Tokens { mechanism, scram: exchange, .. } = &mut self.state else {
            return failed(code::ILLEGAL_SASL_STATE, "SaslAuthenticate before SaslHandshake".into());
        };
        let mechanism = *mechanism;
        let bad_credentials = || {
            failed(
                code::SASL_AUTHENTICATION_FAILED,
                format!(
                    "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
                    mechanism.name()
                ),
            )
        };
        if request.auth_bytes.len() > SASL_TOKEN_MAX_BYTES {
            self.state = State::Handshake;
            return failed(
                code::SASL_AUTHENTICATION_FAILED,
                "Authentication failed: the SASL token is too large".into(),
            );
        }
        let token = &request.auth_bytes;
        let now_ms = skein_engine::time::now_ms();
        let mut token_expires_ms = None;
        let mut token_authenticated = false;
        let (user, server_bytes) = match mechanism {
            Mechanism::OAuthBearer => {
                let validated = match (&security.signed_tokens, jwks) {
                    (Some(config), Some(keys)) => super::oauthbearer::validate_signed(token, keys, config, now_ms),
                    (Some(_), None) => Err("no JWKS has been fetched yet"),
                    (None, _) => super::oauthbearer::validate_unsecured(token, now_ms),
                };
                match validated {
                    Ok((user, expires_ms)) => {
                        token_expires_ms = Some(expires_ms - now_ms);
                        (user, Bytes::new())
                    }
                    Err(reason) => {
                        tracing::debug!(target: "skein::net", reason, "OAUTHBEARER token refused");
                        self.state = State::Handshake;
                        return bad_credentials();
                    }
                }
            }
            Mechanism::Plain => match plain(security, token) {
                Some(user) => (user, Bytes::new()),
                None => {
                    self.state = State::Handshake;
                    return bad_credentials();
                }
            },
            Mechanism::Scram(scram_mechanism) => {
                let lookup = |user: &str, token: bool| match token {
                    true => credentials.token(user, scram_mechanism),
                    false => credentials.user(user, scram_mechanism),
                };
                let step = exchange.step(scram_mechanism, token, lookup, &security.scram_secret);
                match step {
                    Ok(scram::Step::Continue(bytes)) => {
                        let mut response = SaslAuthenticateResponse::default();
                        response.auth_bytes = Bytes::from(bytes);
                        return TokenReply { response, close: false, authenticated: false };
                    }
                    Ok(scram::Step::Authenticated { user, token: false, server_final }) => {
                        (user, Bytes::from(server_final))
                    }
                    // A delegation token authenticates its owner, for as long as it lives.
                    Ok(scram::Step::Authenticated { user: id, token: true, server_final }) => {
                        let owner = credentials.token_owner(&id).and_then(|(owner, expiry_ms)| {
                            let name = owner.strip_prefix("User:")?.to_string();
                            Some((name, expiry_ms))
                        });
                        let Some((owner, expiry_ms)) = owner else {
                            tracing::debug!(target: "skein::net", token = id, "delegation token gone during its exchange");
                            self.state = State::Handshake;
                            return bad_credentials();
                        };
                        token_expires_ms = Some(expiry_ms - now_ms);
                        token_authenticated = true;
                        (owner, Bytes::from(server_final))
                    }
                    Err(failure) => {
                        // The reason stays in the broker's log; the client hears one answer.
                        tracing::debug!(target: "skein::net", mechanism = mechanism.name(), ?failure, "SCRAM exchange failed");
                        self.state = State::Handshake;
                        return bad_credentials();
                    }
                }
            }
        };
        let principal = Principal { name: user, token: token_authenticated };
        self.state = State::Handshake;
        if self.principal.as_ref().is_some_and(|p| p.name != principal.name) {
            return failed(
                code::SASL_AUTHENTICATION_FAILED,
                "Cannot change principals during re-authentication".into(),
            );
        }
        self.principal = Some(principal);
        let mut response = SaslAuthenticateResponse::default();
        response.auth_bytes = server_bytes;
        // A session lasts `connections.max.reauth.ms`, and a token's no longer than the
        // token, whatever that setting (Kafka's credential lifetime).
        let token_left = token_expires_ms.map(|left| left.max(1) as u64);
        let lifetime = match (security.max_reauth_ms, token_left) {
            (0, None) => None,
            (0, Some(left)) => Some(left),
            (ms, left) => Some(left.map_or(ms, |left| ms.min(left))),
        };
        self.expires = match lifetime {
            None => None,
            Some(ms) => {
                // Only v1+ clients learn the lifetime; an older one keeps its
                // session as long as its connection (as Kafka does).
                if version >= 1 {
                    response.session_lifetime_ms = ms as i64;
                    Some(now + Duration::from_millis(ms))
                } else {
                    None
                }
            }
        };
        TokenReply { response, close: false, authenticated: true }
    }
}

/// Checks a PLAIN token (`authzid NUL user NUL password`): the user, when the
/// password is right and any authorization id is the user's own.
fn plain(security: &Security, token: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(token).ok()?;
    let mut parts = text.split('\0');
    let (authzid, user, password) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || user.is_empty() || (!authzid.is_empty() && authzid != user) {
        return None;
    }
    let stored = security.plain_users.get(user);
    // Compared in constant time, against a dummy for an unknown user.
    let expected = stored.map_or("\u{0}unknown-user\u{0}", |p| p.as_str());
    let equal = expected.len() == password.len()
        && expected.bytes().zip(password.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
    (equal && stored.is_some()).then(|| user.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn security() -> Security {
        Security {
            mechanisms: vec![Mechanism::Plain, Mechanism::Scram(ScramMechanism::Sha512)],
            plain_users: [("alice".to_string(), "secret".to_string())].into(),
            max_reauth_ms: 60_000,
            ..Security::default()
        }
    }

    fn handshake(auth: &mut Authenticator, mechanism: &str, version: i16) -> (i16, bool) {
        let request = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.into()));
        let (response, close) = auth.handshake(&security(), version, &request);
        (response.error_code, close)
    }

    /// No SCRAM users and no tokens.
    struct Nobody;

    impl Credentials for Nobody {
        fn user(&self, _: &str, _: ScramMechanism) -> Option<ScramCredential> {
            None
        }
        fn token(&self, _: &str, _: ScramMechanism) -> Option<ScramCredential> {
            None
        }
        fn token_owner(&self, _: &str) -> Option<(String, i64)> {
            None
        }
    }

    fn token(auth: &mut Authenticator, bytes: &[u8]) -> TokenReply {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(bytes));
        auth.authenticate(&security(), 2, &request, &Nobody, None, Instant::now())
    }

    // PLAIN: the right password authenticates, with the session's lifetime told.
    #[test]
    fn plain_authenticates() {
        let mut auth = Authenticator::new();
        assert_eq!(auth.gate(ApiKey::Metadata, Instant::now()), Gate::Close("a request before SASL authentication"));
        assert_eq!(auth.gate(ApiKey::ApiVersions, Instant::now()), Gate::Serve);
        assert_eq!(handshake(&mut auth, "PLAIN", 1), (0, false));
        let reply = token(&mut auth, b"\0alice\0secret");
        assert_eq!((reply.response.error_code, reply.close), (0, false));
        assert_eq!(reply.response.session_lifetime_ms, 60_000);
        assert_eq!(auth.principal().unwrap().to_string(), "User:alice");
        assert_eq!(auth.gate(ApiKey::Metadata, Instant::now()), Gate::Serve);
        let later = Instant::now() + Duration::from_secs(61);
        assert!(matches!(auth.gate(ApiKey::Metadata, later), Gate::Close(_)));
    }

    // A bad password and an unknown user get the same answer, and a close.
    #[test]
    fn plain_failures_look_alike() {
        let mut answers = Vec::new();
        for bytes in [&b"\0alice\0wrong"[..], b"\0mallory\0secret", b"bob\0alice\0secret", b"garbage"] {
            let mut auth = Authenticator::new();
            handshake(&mut auth, "PLAIN", 1);
            let reply = token(&mut auth, bytes);
            assert!(reply.close);
            assert!(auth.principal().is_none());
            answers.push((reply.response.error_code, reply.response.error_message));
        }
        assert!(answers.windows(2).all(|w| w[0] == w[1]), "{answers:?}");
        assert_eq!(answers[0].0, code::SASL_AUTHENTICATION_FAILED);
    }

    // Out of order and unknown mechanisms are refused with Kafka's codes and a close.
    #[test]
    fn out_of_order_exchanges_close() {
        let mut auth = Authenticator::new();
        let reply = token(&mut auth, b"\0alice\0secret");
        assert_eq!((reply.response.error_code, reply.close), (code::ILLEGAL_SASL_STATE, true));
        assert_eq!(handshake(&mut Authenticator::new(), "GSSAPI", 1), (code::UNSUPPORTED_SASL_MECHANISM, true));
        assert_eq!(handshake(&mut Authenticator::new(), "SCRAM-SHA-256", 1), (code::UNSUPPORTED_SASL_MECHANISM, true));
        let mut twice = Authenticator::new();
        handshake(&mut twice, "PLAIN", 1);
        assert_eq!(handshake(&mut twice, "PLAIN", 1), (code::ILLEGAL_SASL_STATE, true));
        let mut big = Authenticator::new();
        handshake(&mut big, "PLAIN", 1);
        let reply = token(&mut big, &vec![b'a'; SASL_TOKEN_MAX_BYTES + 1]);
        assert_eq!((reply.response.error_code, reply.close), (code::SASL_AUTHENTICATION_FAILED, true));
    }

    /// One delegation token, `tok`, of alice's, with password `pw`, expiring at
    /// `expiry_ms`.
    struct OneToken {
        expiry_ms: i64,
    }

    impl Credentials for OneToken {
        fn user(&self, _: &str, _: ScramMechanism) -> Option<ScramCredential> {
            None
        }
        fn token(&self, id: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
            (id == "tok").then(|| ScramCredential::from_password(mechanism, "pw", b"salt", 4096))
        }
        fn token_owner(&self, id: &str) -> Option<(String, i64)> {
            (id == "tok").then(|| ("User:alice".to_string(), self.expiry_ms))
        }
    }

    /// A SCRAM-SHA-512 exchange as user `tok` with password `pw` and `extension`
    /// (`,tokenauth=true` or nothing): the last reply, and the authenticator.
    fn token_exchange(security: &Security, tokens: &OneToken, extension: &str) -> (TokenReply, Authenticator) {
        let mut auth = Authenticator::new();
        let request = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("SCRAM-SHA-512"));
        assert_eq!(auth.handshake(security, 1, &request).0.error_code, 0);
        let bare = format!("n=tok,r=clientnonce{extension}");
        let first = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(format!("n,,{bare}")));
        let reply = auth.authenticate(security, 2, &first, tokens, None, Instant::now());
        let server_first = String::from_utf8(reply.response.auth_bytes.to_vec()).unwrap();
        let (last, _) = scram::client_reply(ScramMechanism::Sha512, "pw", &bare, &server_first).unwrap();
        let last = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(last));
        let reply = auth.authenticate(security, 2, &last, tokens, None, Instant::now());
        (reply, auth)
    }

    // Without connections.max.reauth.ms a token's session still ends with the token.
    #[test]
    fn a_token_session_ends_with_the_token() {
        let tokens = OneToken { expiry_ms: skein_engine::time::now_ms() + 20_000 };
        let security = Security { max_reauth_ms: 0, ..security() };
        let (reply, auth) = token_exchange(&security, &tokens, ",tokenauth=true");
        assert_eq!(reply.response.error_code, 0);
        assert!((1..=20_000).contains(&reply.response.session_lifetime_ms), "{}", reply.response.session_lifetime_ms);
        assert!(matches!(auth.gate(ApiKey::Metadata, Instant::now() + Duration::from_secs(21)), Gate::Close(_)));
    }

    // A SCRAM exchange with `tokenauth=true` authenticates the token's owner, marked
    // as token-authenticated, for no longer than the token lives; without the
    // extension the token's id is an unknown user.
    #[test]
    fn delegation_tokens_authenticate_their_owner() {
        let tokens = OneToken { expiry_ms: skein_engine::time::now_ms() + 30_000 };
        let (reply, auth) = token_exchange(&security(), &tokens, ",tokenauth=true");
        assert_eq!((reply.response.error_code, reply.close), (0, false));
        let principal = auth.principal().unwrap();
        assert_eq!((principal.to_string().as_str(), principal.token), ("User:alice", true));
        let lifetime = reply.response.session_lifetime_ms;
        assert!((1..=30_000).contains(&lifetime), "the session ends with the token: {lifetime}");
        let (reply, auth) = token_exchange(&security(), &tokens, "");
        assert_eq!((reply.response.error_code, reply.close), (code::SASL_AUTHENTICATION_FAILED, true));
        assert!(auth.principal().is_none());
    }

    // Re-authentication keeps the connection and must keep the principal.
    #[test]
    fn reauthentication_keeps_the_principal() {
        let mut auth = Authenticator::new();
        handshake(&mut auth, "PLAIN", 1);
        token(&mut auth, b"\0alice\0secret");
        assert_eq!(handshake(&mut auth, "PLAIN", 1), (0, false));
        assert_eq!(token(&mut auth, b"\0alice\0secret").response.error_code, 0);
        let security = Security { plain_users: [("eve".into(), "x".into())].into(), ..security() };
        let request = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
        auth.handshake(&security, 1, &request);
        let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(b"\0eve\0x"));
        let reply = auth.authenticate(&security, 2, &request, &Nobody, None, Instant::now());
        assert_eq!((reply.response.error_code, reply.close), (code::SASL_AUTHENTICATION_FAILED, true));
    }
}
