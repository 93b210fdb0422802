//! SASL/OAUTHBEARER (RFC 7628, KIP-255) with unsecured JWS tokens, as Kafka's
//! default `OAuthBearerUnsecuredValidatorCallbackHandler` takes them: the client's
//! first message is `n,[a=user],` then `\x01`-separated `key=value` pairs with
//! `auth=Bearer <token>`; the token is a JWT whose header says `"alg":"none"`, whose
//! `sub` claim names the principal and whose `exp` (seconds) is in the future. Such
//! tokens prove nothing about who sent them: for tests and development, as in Kafka
//! (a warning is logged when the mechanism is enabled). With a JWKS endpoint
//! configured, only signed tokens are taken (`jwks.rs`).

use base64::Engine;

/// The authorization id (if any) and the token of an OAUTHBEARER first message.
fn bearer(message: &[u8]) -> Result<(Option<&str>, &str), &'static str> {
    let text = std::str::from_utf8(message).map_err(|_| "not UTF-8")?;
    let mut parts = text.split('\u{1}');
    let gs2 = parts.next().ok_or("no gs2 header")?;
    let authzid = match gs2.strip_prefix("n,") {
        Some(rest) => rest.strip_suffix(',').ok_or("bad gs2 header")?,
        None => return Err("bad gs2 header (channel binding is not supported)"),
    };
    let token = parts
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == "auth")
        .and_then(|(_, v)| v.strip_prefix("Bearer "))
        .ok_or("no auth=Bearer token")?;
    Ok((authzid.strip_prefix("a="), token))
}

/// The principal and expiry of a first message carrying a token signed by a key of
/// `keys` (`jwks`), or why it is refused.
pub fn validate_signed(
    message: &[u8],
    keys: &super::jwks::KeySet,
    config: &super::jwks::SignedTokens,
    now_ms: i64,
) -> Result<(String, i64), &'static str> {
    let (authzid, token) = bearer(message)?;
    let (subject, expires_ms) = super::jwks::validate(token, keys, config, now_ms)?;
    if authzid.is_some_and(|user| user != subject) {
        return Err("the authorization id is not the token's subject");
    }
    Ok((subject, expires_ms))
}

/// The principal and the token's expiry (ms since the epoch) of a valid first
/// message, or why it is refused.
pub fn validate_unsecured(message: &[u8], now_ms: i64) -> Result<(String, i64), &'static str> {
    let (authzid, token) = bearer(message)?;
    let mut sections = token.split('.');
    let (header, payload) = (sections.next().ok_or("no JWT header")?, sections.next().ok_or("no JWT payload")?);
    let decode = |part: &str| -> Result<serde_json::Value, &'static str> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part.trim_end_matches('='))
            .map_err(|_| "a JWT part is not base64url")?;
        serde_json::from_slice(&bytes).map_err(|_| "a JWT part is not JSON")
    };
    let header = decode(header)?;
    if header.get("alg").and_then(|a| a.as_str()) != Some("none") {
        return Err("not an unsecured JWS (alg must be none)");
    }
    let claims = decode(payload)?;
    let subject = claims.get("sub").and_then(|s| s.as_str()).filter(|s| !s.is_empty()).ok_or("no sub claim")?;
    let expires_ms = claims.get("exp").and_then(|e| e.as_f64()).map(|e| (e * 1000.0) as i64).ok_or("no exp claim")?;
    if expires_ms <= now_ms {
        return Err("the token has expired");
    }
    if let Some(issued) = claims.get("iat").and_then(|i| i.as_f64()) {
        if (issued * 1000.0) as i64 > now_ms + 60_000 {
            return Err("the token was issued in the future");
        }
    }
    if authzid.is_some_and(|user| user != subject) {
        return Err("the authorization id is not the token's subject");
    }
    Ok((subject.to_string(), expires_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(header: &str, claims: &str) -> String {
        let e = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!("n,,\u{1}auth=Bearer {}.{}.\u{1}\u{1}", e(header), e(claims))
    }

    // A valid unsecured token names its subject; expired, signed, subject-less and
    // malformed ones are refused.
    #[test]
    fn unsecured_tokens() {
        let now = 1_700_000_000_000;
        let good = token(r#"{"alg":"none"}"#, r#"{"sub":"frank","exp":1700000100,"iat":1700000000}"#);
        assert_eq!(validate_unsecured(good.as_bytes(), now), Ok(("frank".into(), 1_700_000_100_000)));
        let expired = token(r#"{"alg":"none"}"#, r#"{"sub":"frank","exp":1699999999}"#);
        assert_eq!(validate_unsecured(expired.as_bytes(), now), Err("the token has expired"));
        let signed = token(r#"{"alg":"RS256"}"#, r#"{"sub":"frank","exp":1700000100}"#);
        assert!(validate_unsecured(signed.as_bytes(), now).is_err());
        let nobody = token(r#"{"alg":"none"}"#, r#"{"exp":1700000100}"#);
        assert!(validate_unsecured(nobody.as_bytes(), now).is_err());
        for bad in ["", "n,,", "y,,\u{1}auth=Bearer x\u{1}\u{1}", "n,,\u{1}auth=Bearer a.b.c\u{1}\u{1}"] {
            assert!(validate_unsecured(bad.as_bytes(), now).is_err(), "{bad:?}");
        }
    }
}
