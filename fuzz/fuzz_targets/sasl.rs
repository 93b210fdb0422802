//! What a client sends to authenticate: a SCRAM exchange's two messages (SHA-256 and
//! SHA-512, a known user and an unknown one), an OAUTHBEARER client message with an
//! unsecured JWT, and a JWKS document as an identity provider serves it. The first byte
//! picks which; a SCRAM input is split in two at its first 0xff.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use skein_control::security::scram::{Exchange, ScramCredential, ScramMechanism};

/// alice's credentials, salted once (4,096 rounds of PBKDF2 per input would leave
/// the fuzzer a few hundred inputs a second).
fn credential(mechanism: ScramMechanism) -> &'static ScramCredential {
    static SHA256: OnceLock<ScramCredential> = OnceLock::new();
    static SHA512: OnceLock<ScramCredential> = OnceLock::new();
    let cell = if mechanism == ScramMechanism::Sha256 { &SHA256 } else { &SHA512 };
    cell.get_or_init(|| ScramCredential::from_password(mechanism, "secret", b"fixed-salt", 4096))
}

fuzz_target!(|data: &[u8]| {
    let [pick, rest @ ..] = data else { return };
    match pick % 4 {
        0 | 1 => {
            let mechanism = if pick % 4 == 0 { ScramMechanism::Sha256 } else { ScramMechanism::Sha512 };
            let (first, last) = match rest.iter().position(|b| *b == 0xff) {
                Some(at) => (&rest[..at], &rest[at + 1..]),
                None => (rest, &[][..]),
            };
            let mut exchange = Exchange::Start;
            // alice's password, or (with `tokenauth=true`) delegation token `tok`'s.
            let lookup = |user: &str, token: bool| {
                (user == if token { "tok" } else { "alice" }).then(|| credential(mechanism).clone())
            };
            if exchange.step(mechanism, first, lookup, b"key").is_ok() {
                let _ = exchange.step(mechanism, last, |_, _| None, b"key");
            }
        }
        2 => {
            let _ = skein_control::security::oauthbearer::validate_unsecured(rest, 1_700_000_000_000);
        }
        _ => {
            if let Ok(text) = std::str::from_utf8(rest) {
                let _ = skein_control::security::jwks::KeySet::parse(text);
            }
        }
    }
});
