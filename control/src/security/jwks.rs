//! SASL/OAUTHBEARER with signed tokens, as Kafka's `OAuthBearerValidatorCallbackHandler`
//! takes them with `sasl.oauthbearer.jwks.endpoint.url`: a JWT signed (RS256/384/512,
//! PS256/384/512, ES256/384) by a key of the JSON Web Key Set the endpoint serves,
//! unexpired, its subject in `sasl.oauthbearer.sub.claim.name`, and its audience and
//! issuer the expected ones when those are configured.
//!
//! The key set is fetched and refreshed off the shards (`src/oauth_jwks.rs`) and
//! published here with a generation number; each shard keeps its own copy and
//! compares the generation when a client authenticates, so no lock is taken on the
//! request path.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};

/// `sasl.oauthbearer.clock.skew.seconds`' default.
const CLOCK_SKEW_MS: i64 = 30_000;

/// One public key of the set.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// An uncompressed point (`04 || x || y`) on P-256 or P-384.
    Ec {
        curve: Curve,
        point: Vec<u8>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Curve {
    P256,
    P384,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Jwk {
    kid: Option<String>,
    key: Key,
}

/// A JSON Web Key Set (RFC 7517): the keys Skein can verify with; others are skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeySet {
    keys: Vec<Jwk>,
}

impl KeySet {
    /// Parses a JWKS document.
    ///
    /// # Errors
    /// A document that is not a key set, or holds no key Skein can use.
    pub fn parse(text: &str) -> Result<KeySet, String> {
        let doc: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("the JWKS is not JSON: {e}"))?;
        let keys = doc.get("keys").and_then(|k| k.as_array()).ok_or("the JWKS has no keys array")?;
        let b64 = |v: Option<&serde_json::Value>| {
            v.and_then(|v| v.as_str()).and_then(|s| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).ok())
        };
        let mut set = KeySet::default();
        for key in keys {
            if key.get("use").and_then(|u| u.as_str()).is_some_and(|u| u != "sig") {
                continue;
            }
            let kid = key.get("kid").and_then(|k| k.as_str()).map(String::from);
            let parsed = match key.get("kty").and_then(|k| k.as_str()) {
                Some("RSA") => match (b64(key.get("n")), b64(key.get("e"))) {
                    (Some(n), Some(e)) => Some(Key::Rsa { n, e }),
                    _ => None,
                },
                Some("EC") => {
                    let curve = match key.get("crv").and_then(|c| c.as_str()) {
                        Some("P-256") => Some(Curve::P256),
                        Some("P-384") => Some(Curve::P384),
                        _ => None,
                    };
                    match (curve, b64(key.get("x")), b64(key.get("y"))) {
                        (Some(curve), Some(x), Some(y)) => {
                            Some(Key::Ec { curve, point: [&[4u8][..], &x, &y].concat() })
                        }
                        _ => None,
                    }
                }
                _ => None,
            };
            if let Some(key) = parsed {
                set.keys.push(Jwk { kid, key });
            }
        }
        match set.keys.is_empty() {
            true => Err("the JWKS holds no RSA or P-256/P-384 signing key".into()),
            false => Ok(set),
        }
    }
}

/// The key set as last fetched, for the shards to copy.
#[derive(Debug, Default)]
pub struct Jwks {
    generation: AtomicU64,
    keys: Mutex<Arc<KeySet>>,
}

impl Jwks {
    /// Publishes a fetched key set (the fetching thread's call).
    pub fn install(&self, keys: KeySet) {
        let mut current = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if **current != keys {
            *current = Arc::new(keys);
            self.generation.fetch_add(1, Ordering::Release);
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The current set (taken when a shard's copy is older than `generation`).
    pub fn current(&self) -> Arc<KeySet> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The validation settings (`sasl.oauthbearer.*`) and the key set.
#[derive(Debug)]
pub struct SignedTokens {
    pub jwks: Arc<Jwks>,
    /// The JWKS location: `https://...`, `http://...` or `file:...`.
    pub endpoint: String,
    /// The CA certificates an https endpoint's certificate is checked against
    /// [default: the public web PKI's roots].
    pub endpoint_ca: Option<std::path::PathBuf>,
    pub refresh_ms: u64,
    /// `sasl.oauthbearer.sub.claim.name` [default: sub].
    pub sub_claim: String,
    /// `sasl.oauthbearer.expected.audience`: the token's `aud` must name one.
    pub audience: Vec<String>,
    /// `sasl.oauthbearer.expected.issuer`.
    pub issuer: Option<String>,
}

/// The principal and expiry (ms since the epoch) of a signed token, or why it is
/// refused.
pub fn validate(token: &str, keys: &KeySet, config: &SignedTokens, now_ms: i64) -> Result<(String, i64), &'static str> {
    let mut parts = token.split('.');
    let (header_b64, payload_b64, signature_b64) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(h), Some(p), Some(s), None) => (h, p, s),
        _ => return Err("not a signed JWT (three parts)"),
    };
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let json = |part: &str| -> Result<serde_json::Value, &'static str> {
        let bytes = engine.decode(part).map_err(|_| "a JWT part is not base64url")?;
        serde_json::from_slice(&bytes).map_err(|_| "a JWT part is not JSON")
    };
    let header = json(header_b64)?;
    let alg = header.get("alg").and_then(|a| a.as_str()).ok_or("no alg")?;
    let kid = header.get("kid").and_then(|k| k.as_str());
    let signature = engine.decode(signature_b64).map_err(|_| "the signature is not base64url")?;
    let signed = &token.as_bytes()[..header_b64.len() + 1 + payload_b64.len()];
    let candidates = keys.keys.iter().filter(|k| kid.is_none() || k.kid.as_deref() == kid);
    let verified = candidates.into_iter().any(|jwk| verify(alg, &jwk.key, signed, &signature));
    if !verified {
        return Err("the signature does not verify with any key of the JWKS");
    }
    let claims = json(payload_b64)?;
    let expires_ms = claims.get("exp").and_then(|e| e.as_f64()).map(|e| (e * 1000.0) as i64).ok_or("no exp claim")?;
    if expires_ms + CLOCK_SKEW_MS <= now_ms {
        return Err("the token has expired");
    }
    for (claim, message) in [("iat", "the token was issued in the future"), ("nbf", "the token is not valid yet")] {
        if claims.get(claim).and_then(|v| v.as_f64()).is_some_and(|t| (t * 1000.0) as i64 > now_ms + CLOCK_SKEW_MS) {
            return Err(message);
        }
    }
    if let Some(issuer) = &config.issuer {
        if claims.get("iss").and_then(|i| i.as_str()) != Some(issuer.as_str()) {
            return Err("the token's issuer is not the expected one");
        }
    }
    if !config.audience.is_empty() {
        let audiences: Vec<&str> = match claims.get("aud") {
            Some(serde_json::Value::String(a)) => vec![a.as_str()],
            Some(serde_json::Value::Array(list)) => list.iter().filter_map(|a| a.as_str()).collect(),
            _ => Vec::new(),
        };
        if !audiences.iter().any(|a| config.audience.iter().any(|e| e == a)) {
            return Err("the token's audience is not an expected one");
        }
    }
    let subject = claims
        .get(config.sub_claim.as_str())
        .and_then(|s| s.as_str())
        .filter(|s| !s.is_empty())
        .ok_or("no subject claim")?;
    Ok((subject.to_string(), expires_ms))
}

/// Whether `signature` over `signed` verifies with `key` under JWS algorithm `alg`.
fn verify(alg: &str, key: &Key, signed: &[u8], signature: &[u8]) -> bool {
    match (alg, key) {
        ("RS256" | "RS384" | "RS512" | "PS256" | "PS384" | "PS512", Key::Rsa { n, e }) => {
            let algorithm: &signature::RsaParameters = match alg {
                "RS256" => &signature::RSA_PKCS1_2048_8192_SHA256,
                "RS384" => &signature::RSA_PKCS1_2048_8192_SHA384,
                "RS512" => &signature::RSA_PKCS1_2048_8192_SHA512,
                "PS256" => &signature::RSA_PSS_2048_8192_SHA256,
                "PS384" => &signature::RSA_PSS_2048_8192_SHA384,
                _ => &signature::RSA_PSS_2048_8192_SHA512,
            };
            RsaPublicKeyComponents { n, e }.verify(algorithm, signed, signature).is_ok()
        }
        ("ES256", Key::Ec { curve: Curve::P256, point }) => {
            UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point).verify(signed, signature).is_ok()
        }
        ("ES384", Key::Ec { curve: Curve::P384, point }) => {
            UnparsedPublicKey::new(&signature::ECDSA_P384_SHA384_FIXED, point).verify(signed, signature).is_ok()
        }
        _ => false,
    }
}

/// Test and tooling support: an ES256 signer and its JWKS.
pub mod testing {
    use base64::Engine;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

    /// A P-256 key that signs ES256 tokens.
    pub struct Signer {
        pair: EcdsaKeyPair,
        rng: SystemRandom,
        pub kid: String,
    }

    impl Signer {
        pub fn new(kid: &str) -> Signer {
            let rng = SystemRandom::new();
            let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("a P-256 key");
            let pair =
                EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).expect("its pair");
            Signer { pair, rng, kid: kid.to_string() }
        }

        /// The JWKS document holding this key.
        pub fn jwks(&self) -> String {
            let point = self.pair.public_key().as_ref();
            let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
            format!(
                r#"{{"keys":[{{"kty":"EC","crv":"P-256","use":"sig","alg":"ES256","kid":"{}","x":"{}","y":"{}"}}]}}"#,
                self.kid,
                e.encode(&point[1..33]),
                e.encode(&point[33..65])
            )
        }

        /// A token with `claims` (a JSON object), signed.
        pub fn token(&self, claims: &str) -> String {
            let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
            let header = format!(r#"{{"alg":"ES256","typ":"JWT","kid":"{}"}}"#, self.kid);
            let signed = format!("{}.{}", e.encode(header), e.encode(claims));
            let signature = self.pair.sign(&self.rng, signed.as_bytes()).expect("signs");
            format!("{signed}.{}", e.encode(signature.as_ref()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::Signer;
    use super::*;

    fn config(audience: &[&str], issuer: Option<&str>) -> SignedTokens {
        SignedTokens {
            jwks: Arc::default(),
            endpoint: String::new(),
            endpoint_ca: None,
            refresh_ms: 0,
            sub_claim: "sub".into(),
            audience: audience.iter().map(|a| a.to_string()).collect(),
            issuer: issuer.map(String::from),
        }
    }

    // A token signed by a key of the set names its subject; a token signed by another
    // key, tampered with, expired, or for another audience or issuer is refused.
    #[test]
    fn signed_tokens() {
        let now = 1_700_000_000_000;
        let signer = Signer::new("k1");
        let keys = KeySet::parse(&signer.jwks()).unwrap();
        let claims = r#"{"sub":"svc","exp":1700000100,"iat":1700000000,"aud":["kafka"],"iss":"https://idp"}"#;
        let token = signer.token(claims);
        let open = config(&[], None);
        assert_eq!(validate(&token, &keys, &open, now), Ok(("svc".into(), 1_700_000_100_000)));
        assert!(validate(&token, &keys, &config(&["kafka"], Some("https://idp")), now).is_ok());
        assert!(validate(&token, &keys, &config(&["other"], None), now).is_err());
        assert!(validate(&token, &keys, &config(&[], Some("https://evil")), now).is_err());
        let stranger = Signer::new("k1").token(claims);
        assert!(validate(&stranger, &keys, &open, now).is_err(), "another key with the same kid");
        let mut tampered = token.clone();
        tampered.replace_range(token.find('.').unwrap() + 2..token.find('.').unwrap() + 3, "A");
        assert!(validate(&tampered, &keys, &open, now).is_err());
        let expired = signer.token(r#"{"sub":"svc","exp":1699990000}"#);
        assert_eq!(validate(&expired, &keys, &open, now), Err("the token has expired"));
        let unsigned = token.rsplit_once('.').unwrap().0.to_string() + ".";
        assert!(validate(&unsigned, &keys, &open, now).is_err());
        assert!(KeySet::parse(r#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#).is_err());
        assert!(KeySet::parse("not json").is_err());
    }
}
