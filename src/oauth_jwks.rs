//! Fetches OAUTHBEARER's JSON Web Key Set (`sasl.oauthbearer.jwks.endpoint.url`,
//! `https://`, `http://` or `file:`) on a thread of its own, at start and every
//! `sasl.oauthbearer.jwks.endpoint.refresh.ms`, and publishes it to the shards
//! (`skein_control::security::jwks`). A failed fetch keeps the last good set and is
//! retried sooner; until a first set arrives, OAUTHBEARER clients are refused.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use skein_control::security::jwks::{KeySet, SignedTokens};

/// How soon a failed fetch is retried.
const RETRY: Duration = Duration::from_secs(5);
/// The most a JWKS document may hold.
const JWKS_MAX_BYTES: u64 = 1 << 20;

/// The HTTP client: over https, trusting `ca` when given, else the web PKI's roots.
///
/// # Errors
/// A CA file that cannot be read.
pub fn agent(ca: Option<&std::path::Path>) -> Result<ureq::Agent, String> {
    let builder = ureq::AgentBuilder::new().timeout(Duration::from_secs(10));
    match ca {
        Some(ca) => {
            let config = skein_control::security::tls::client_config(ca, "--sasl-oauthbearer-jwks-endpoint-ca-pem")?;
            Ok(builder.tls_config(config).build())
        }
        None => Ok(builder.build()),
    }
}

/// One fetch of the key set.
///
/// # Errors
/// A message naming the endpoint and what failed.
pub fn fetch(agent: &ureq::Agent, endpoint: &str) -> Result<KeySet, String> {
    let text = match endpoint.strip_prefix("file:") {
        Some(path) => {
            let path = path.strip_prefix("//").unwrap_or(path);
            std::fs::read_to_string(path).map_err(|e| format!("cannot read the JWKS {path}: {e}"))?
        }
        None => {
            let response =
                agent.get(endpoint).call().map_err(|e| format!("cannot fetch the JWKS from {endpoint}: {e}"))?;
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::Read::take(response.into_reader(), JWKS_MAX_BYTES), &mut text)
                .map_err(|e| format!("cannot read the JWKS from {endpoint}: {e}"))?;
            text
        }
    };
    KeySet::parse(&text).map_err(|e| format!("{endpoint}: {e}"))
}

/// Fetches now, then refreshes until `stop`.
pub fn run(tokens: Arc<skein_control::security::Security>, stop: Arc<AtomicBool>) {
    let Some(config) = tokens.signed_tokens.as_ref() else { return };
    let config: &SignedTokens = config;
    // The CA file was checked at start; it is read again here.
    let agent = match agent(config.endpoint_ca.as_deref()) {
        Ok(agent) => agent,
        Err(e) => {
            tracing::error!(target: "skein", error = %e, "no JWKS client: OAUTHBEARER clients are refused");
            return;
        }
    };
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if Instant::now() >= next {
            match fetch(&agent, &config.endpoint) {
                Ok(keys) => {
                    config.jwks.install(keys);
                    next = Instant::now() + Duration::from_millis(config.refresh_ms.max(1000));
                }
                Err(e) => {
                    tracing::warn!(target: "skein", error = %e, "JWKS fetch failed; keeping the last key set");
                    next = Instant::now() + RETRY;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
