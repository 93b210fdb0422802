//! Delegation tokens (KIP-48) as Kafka 4.4's controller keeps them: a token is a
//! record of the metadata log (`MetadataImage::tokens`, Kafka's DelegationTokenRecord),
//! its HMAC is HMAC-SHA512 of its id under `delegation.token.secret.key` (so every node
//! of a cluster, given the same key, derives the same one and none is stored), and a
//! client holding the id and the HMAC authenticates with SCRAM as the token's owner
//! (the `tokenauth=true` extension), until the token expires.

use std::collections::BTreeMap;

use base64::Engine;
use ring::hmac;

use super::scram::{ScramCredential, ScramMechanism};
use crate::errors::code;
use crate::limits::SCRAM_ITERATIONS_MIN;

use crate::errors::Refusal;

/// The node's delegation-token settings; tokens are served only when the secret key
/// is set (Kafka's `tokenAuthEnabled`).
#[derive(Clone)]
pub struct TokenSettings {
    /// `delegation.token.secret.key`: keys every token's HMAC; the same on every node.
    pub secret: Vec<u8>,
    /// `delegation.token.max.lifetime.ms` [7 days]: no renewal reaches past it.
    pub max_lifetime_ms: i64,
    /// `delegation.token.expiry.time.ms` [1 day]: how long a token lives between
    /// renewals, when a request names no period.
    pub expiry_time_ms: i64,
    /// `delegation.token.expiry.check.interval.ms` [1 hour]: how often the active
    /// controller removes expired tokens.
    pub expiry_check_interval_ms: u64,
}

/// Kafka's defaults of the three lifetimes.
pub const DEFAULT_MAX_LIFETIME_MS: i64 = 7 * 24 * 3_600_000;
pub const DEFAULT_EXPIRY_TIME_MS: i64 = 24 * 3_600_000;
pub const DEFAULT_EXPIRY_CHECK_INTERVAL_MS: u64 = 3_600_000;

/// Never the key.
impl std::fmt::Debug for TokenSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSettings")
            .field("max_lifetime_ms", &self.max_lifetime_ms)
            .field("expiry_time_ms", &self.expiry_time_ms)
            .field("expiry_check_interval_ms", &self.expiry_check_interval_ms)
            .finish_non_exhaustive()
    }
}

impl TokenSettings {
    /// The token's HMAC (Kafka's `DelegationTokenManager.createHmac`).
    pub fn hmac(&self, token_id: &str) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(hmac::HMAC_SHA512, &self.secret), token_id.as_bytes()).as_ref().to_vec()
    }

    /// The token whose HMAC is `hmac`, if any, among `tokens`: through this thread's
    /// index of HMACs (Kafka's `tokenForHmac` map), rebuilt only when the set of token
    /// ids changed (a renewal changes none), so that a request naming an HMAC costs a
    /// comparison of ids and one lookup, not an HMAC per token.
    pub fn token_of<'a>(
        &self,
        tokens: &'a BTreeMap<String, DelegationToken>,
        hmac: &[u8],
    ) -> Option<&'a DelegationToken> {
        let id = HMACS.with_borrow_mut(|index| {
            if index.secret != self.secret || !index.ids.iter().eq(tokens.keys()) {
                index.by_hmac = tokens.keys().map(|id| (self.hmac(id), id.clone())).collect();
                index.ids = tokens.keys().cloned().collect();
                index.secret.clone_from(&self.secret);
            }
            index.by_hmac.get(hmac).cloned()
        })?;
        tokens.get(&id)
    }

    /// The SCRAM credential a client holding `token` authenticates with: its password
    /// is the HMAC in base64, as Kafka's `DelegationTokenManager` derives it. The salt
    /// is derived from the id (any salt works; this one needs no state).
    pub fn credential(&self, token: &DelegationToken, mechanism: ScramMechanism) -> ScramCredential {
        let password = base64::engine::general_purpose::STANDARD.encode(self.hmac(&token.id));
        let salt =
            hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &self.secret), format!("salt:{}", token.id).as_bytes());
        ScramCredential::from_password(mechanism, &password, salt.as_ref(), SCRAM_ITERATIONS_MIN)
    }
}

/// One thread's index from HMAC to token id, for the token ids (in order) and the key
/// it was built from.
#[derive(Default)]
struct HmacIndex {
    ids: Vec<String>,
    secret: Vec<u8>,
    by_hmac: std::collections::HashMap<Vec<u8>, String>,
}

thread_local! {
    static HMACS: std::cell::RefCell<HmacIndex> = Default::default();
    /// Each shard's token credentials, derived once (PBKDF2 is slow by design): by
    /// token id, issue time and mechanism.
    static CREDENTIALS: std::cell::RefCell<std::collections::HashMap<(String, i64, ScramMechanism), ScramCredential>> =
        Default::default();
}

/// `settings.credential`, from this thread's cache when it was derived before; the
/// cache holds at most `TOKEN_CREDENTIALS_CACHED` and starts over when full.
pub fn cached_credential(
    settings: &TokenSettings,
    token: &DelegationToken,
    mechanism: ScramMechanism,
) -> ScramCredential {
    let key = (token.id.clone(), token.issued_ms, mechanism);
    if let Some(found) = CREDENTIALS.with_borrow(|cache| cache.get(&key).cloned()) {
        return found;
    }
    let credential = settings.credential(token, mechanism);
    CREDENTIALS.with_borrow_mut(|cache| {
        if cache.len() >= crate::limits::TOKEN_CREDENTIALS_CACHED {
            cache.clear();
        }
        cache.insert(key, credential.clone());
    });
    credential
}

/// One delegation token (Kafka's TokenInformation). Principals are as ACLs name them:
/// `User:alice`.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
pub struct DelegationToken {
    pub id: String,
    pub owner: String,
    /// Who asked for it (the owner, or one allowed CREATE_TOKENS on the owner).
    pub requester: String,
    /// Who may renew and expire it besides its owner.
    pub renewers: Vec<String>,
    pub issued_ms: i64,
    /// No renewal reaches past this.
    pub max_ms: i64,
    pub expiry_ms: i64,
}

impl DelegationToken {
    /// Whether `principal` owns it or may renew it (Kafka's `ownerOrRenewer`).
    pub fn owner_or_renewer(&self, principal: &str) -> bool {
        self.owner == principal || self.renewers.iter().any(|r| r == principal)
    }

    /// Whether it is past its expiry or its maximum lifetime at `now_ms`.
    pub fn expired(&self, now_ms: i64) -> bool {
        self.max_ms < now_ms || self.expiry_ms < now_ms
    }
}

/// A principal's type and name from `Type:name`.
pub fn split_principal(principal: &str) -> (&str, &str) {
    principal.split_once(':').unwrap_or(("User", principal))
}

/// `token` renewed by `principal` at `now_ms` to `renew_to_ms` (Kafka's
/// `renewDelegationToken`): never past its maximum lifetime.
///
/// # Errors
/// DELEGATION_TOKEN_NOT_FOUND, DELEGATION_TOKEN_EXPIRED or
/// DELEGATION_TOKEN_OWNER_MISMATCH, checked in Kafka's order.
pub fn renew(
    token: Option<&DelegationToken>,
    principal: &str,
    now_ms: i64,
    renew_to_ms: i64,
) -> Result<DelegationToken, Refusal> {
    let token = token.ok_or_else(not_found)?;
    if token.expired(now_ms) {
        return Err((code::DELEGATION_TOKEN_EXPIRED, "Delegation Token is expired.".into()));
    }
    if !token.owner_or_renewer(principal) {
        return Err(owner_mismatch());
    }
    Ok(DelegationToken { expiry_ms: token.max_ms.min(renew_to_ms), ..token.clone() })
}

/// `token` expired by `principal` at `now_ms` to `expire_to_ms`, or `None` when it
/// is removed at once (`expire_to_ms` is `None`: Kafka's `expireDelegationToken` with
/// a negative period).
///
/// # Errors
/// As `renew`.
pub fn expire(
    token: Option<&DelegationToken>,
    principal: &str,
    now_ms: i64,
    expire_to_ms: Option<i64>,
) -> Result<Option<DelegationToken>, Refusal> {
    let token = token.ok_or_else(not_found)?;
    if !token.owner_or_renewer(principal) {
        return Err(owner_mismatch());
    }
    match expire_to_ms {
        None => Ok(None),
        Some(_) if token.expired(now_ms) => {
            Err((code::DELEGATION_TOKEN_EXPIRED, "Delegation Token is expired.".into()))
        }
        Some(to) => Ok(Some(DelegationToken { expiry_ms: token.max_ms.min(to), ..token.clone() })),
    }
}

fn not_found() -> Refusal {
    (code::DELEGATION_TOKEN_NOT_FOUND, "Delegation Token is not found on server.".into())
}

fn owner_mismatch() -> Refusal {
    (code::DELEGATION_TOKEN_OWNER_MISMATCH, "Specified Principal is not valid Owner/Renewer.".into())
}

/// Whether DescribeDelegationToken shows `token` to `requester` (Kafka's
/// `DelegationTokenManager.filterToken`): only tokens of the `owners` asked for (each
/// owner's and those it may renew), then the requester's own and those it may renew,
/// else those it may DESCRIBE (`may_describe_token`) or whose owner it may
/// DESCRIBE_TOKENS (`may_describe_owner`).
pub fn shown(
    token: &DelegationToken,
    requester: &str,
    owners: Option<&[String]>,
    may_describe_token: impl FnOnce(&str) -> bool,
    may_describe_owner: impl FnOnce(&str) -> bool,
) -> bool {
    if owners.is_some_and(|owners| !owners.iter().any(|owner| token.owner_or_renewer(owner))) {
        return false;
    }
    token.owner_or_renewer(requester) || may_describe_token(&token.id) || may_describe_owner(&token.owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> TokenSettings {
        TokenSettings {
            secret: b"key".to_vec(),
            max_lifetime_ms: DEFAULT_MAX_LIFETIME_MS,
            expiry_time_ms: DEFAULT_EXPIRY_TIME_MS,
            expiry_check_interval_ms: DEFAULT_EXPIRY_CHECK_INTERVAL_MS,
        }
    }

    fn token(id: &str) -> DelegationToken {
        DelegationToken {
            id: id.into(),
            owner: "User:alice".into(),
            requester: "User:alice".into(),
            renewers: vec!["User:bob".into()],
            issued_ms: 1_000,
            max_ms: 10_000,
            expiry_ms: 5_000,
        }
    }

    // A token's HMAC is HMAC-SHA512 of its id under the secret key (RFC 4231's
    // test case 2 as the check: key "Jefe"), and finds the token back.
    #[test]
    fn hmacs_find_their_tokens() {
        let jefe = TokenSettings { secret: b"Jefe".to_vec(), ..settings() };
        let hex: String = jefe.hmac("what do ya want for nothing?").iter().map(|b| format!("{b:02x}")).collect();
        assert!(hex.starts_with("164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea250554"), "{hex}");
        let s = settings();
        let tokens: BTreeMap<String, DelegationToken> =
            ["a", "b"].iter().map(|id| (id.to_string(), token(id))).collect();
        assert_eq!(s.token_of(&tokens, &s.hmac("b")).unwrap().id, "b");
        assert!(s.token_of(&tokens, &s.hmac("c")).is_none());
        assert!(s.token_of(&tokens, b"short").is_none());
        // A token added is found, one removed is not.
        let mut more = tokens.clone();
        more.insert("c".into(), token("c"));
        assert_eq!(s.token_of(&more, &s.hmac("c")).unwrap().id, "c");
        assert!(s.token_of(&tokens, &s.hmac("c")).is_none(), "c is gone again");
        let other = TokenSettings { secret: b"other".to_vec(), ..settings() };
        assert!(s.token_of(&more, &other.hmac("a")).is_none(), "another key's HMAC finds nothing");
        assert_eq!(other.token_of(&more, &other.hmac("a")).unwrap().id, "a", "a new key rebuilds the index");
    }

    // The credential is the one a SCRAM client derives from the HMAC in base64.
    #[test]
    fn credentials_take_the_hmac_as_password() {
        let s = settings();
        let t = token("t");
        let credential = s.credential(&t, ScramMechanism::Sha512);
        let password = base64::engine::general_purpose::STANDARD.encode(s.hmac("t"));
        let expected =
            ScramCredential::from_password(ScramMechanism::Sha512, &password, &credential.salt, credential.iterations);
        assert_eq!(credential, expected);
        assert_eq!(credential, s.credential(&t, ScramMechanism::Sha512), "the same on every call and node");
    }

    // Renewal and expiry follow Kafka's checks and order.
    #[test]
    fn renew_and_expire() {
        let t = token("t");
        assert_eq!(renew(None, "User:alice", 2_000, 3_000).unwrap_err().0, code::DELEGATION_TOKEN_NOT_FOUND);
        let expiry = |renewed: Result<DelegationToken, Refusal>| renewed.map(|t| t.expiry_ms);
        assert_eq!(expiry(renew(Some(&t), "User:alice", 2_000, 8_000)), Ok(8_000));
        assert_eq!(expiry(renew(Some(&t), "User:bob", 2_000, 99_000)), Ok(10_000), "never past the maximum");
        assert_eq!(renew(Some(&t), "User:eve", 2_000, 3_000).unwrap_err().0, code::DELEGATION_TOKEN_OWNER_MISMATCH);
        assert_eq!(renew(Some(&t), "User:eve", 6_000, 7_000).unwrap_err().0, code::DELEGATION_TOKEN_EXPIRED);
        assert_eq!(expire(Some(&t), "User:bob", 2_000, None), Ok(None));
        let expired = expire(Some(&t), "User:alice", 2_000, Some(4_000)).unwrap().unwrap();
        assert_eq!((expired.id.as_str(), expired.expiry_ms, expired.max_ms), ("t", 4_000, 10_000));
        assert_eq!(expire(Some(&t), "User:eve", 2_000, None).unwrap_err().0, code::DELEGATION_TOKEN_OWNER_MISMATCH);
        assert_eq!(expire(Some(&t), "User:alice", 6_000, Some(7_000)).unwrap_err().0, code::DELEGATION_TOKEN_EXPIRED);
        assert_eq!(expire(Some(&t), "User:alice", 6_000, None), Ok(None), "an expired token is removed at once");
    }

    // Describe shows the requester's own and renewable tokens, and others' only with
    // the ACLs Kafka asks for; an owner filter narrows them first.
    #[test]
    fn describe_filter() {
        let t = token("t");
        let no = |_: &str| false;
        assert!(shown(&t, "User:alice", None, no, no));
        assert!(shown(&t, "User:bob", None, no, no), "a renewer sees it");
        assert!(!shown(&t, "User:eve", None, no, no));
        assert!(shown(&t, "User:eve", None, |id| id == "t", no), "DESCRIBE on the token");
        assert!(shown(&t, "User:eve", None, no, |owner| owner == "User:alice"), "DESCRIBE_TOKENS on the owner");
        let carol = ["User:carol".to_string()];
        assert!(!shown(&t, "User:alice", Some(&carol), no, no), "not a token of the owners asked for");
        let bob = ["User:bob".to_string()];
        assert!(shown(&t, "User:alice", Some(&bob), no, no), "bob may renew it");
    }
}
