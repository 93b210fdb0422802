//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's broker runs them,
//! on ring's PBKDF2, HMAC and SHA-2. Credentials are stored as Kafka stores them:
//! salt, iterations, stored key and server key, never the password.
//!
//! A user Skein does not know gets a server-first message like any other, with a salt
//! derived from the user name under a per-node secret, and fails at the proof: the
//! exchange looks the same for an unknown user and a bad password.

use base64::Engine;
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};

use crate::limits::{SCRAM_ITERATIONS_MAX, SCRAM_ITERATIONS_MIN};

/// A SCRAM mechanism: its name, Kafka's numeric id (AlterUserScramCredentials) and
/// its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn parse(name: &str) -> Option<ScramMechanism> {
        match name {
            "SCRAM-SHA-256" => Some(ScramMechanism::Sha256),
            "SCRAM-SHA-512" => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }

    /// Kafka's `ScramMechanism` type byte.
    pub fn id(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    pub fn from_id(id: i8) -> Option<ScramMechanism> {
        match id {
            1 => Some(ScramMechanism::Sha256),
            2 => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            ScramMechanism::Sha256 => hmac::HMAC_SHA256,
            ScramMechanism::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            ScramMechanism::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            ScramMechanism::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            ScramMechanism::Sha256 => &digest::SHA256,
            ScramMechanism::Sha512 => &digest::SHA512,
        }
    }

    /// The hash's output length, which is also the salted password's.
    pub fn key_len(self) -> usize {
        self.digest().output_len()
    }
}

/// A stored SCRAM credential (Kafka's `ScramCredential`).
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

fn hmac_of(mechanism: ScramMechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(mechanism.hmac(), key), data).as_ref().to_vec()
}

impl ScramCredential {
    /// The credential of `password` with `salt` and `iterations`.
    pub fn from_password(mechanism: ScramMechanism, password: &str, salt: &[u8], iterations: u32) -> ScramCredential {
        let salted = salted_password(mechanism, password, salt, iterations);
        ScramCredential::from_salted(mechanism, &salted, salt, iterations)
    }

    /// The credential of an already salted password, as AlterUserScramCredentials
    /// sends it (the client ran PBKDF2).
    pub fn from_salted(mechanism: ScramMechanism, salted: &[u8], salt: &[u8], iterations: u32) -> ScramCredential {
        let client_key = hmac_of(mechanism, salted, b"Client Key");
        let stored_key = digest::digest(mechanism.digest(), &client_key).as_ref().to_vec();
        let server_key = hmac_of(mechanism, salted, b"Server Key");
        ScramCredential { salt: salt.to_vec(), iterations, stored_key, server_key }
    }
}

/// SCRAM's SaltedPassword: PBKDF2 of `password` with `salt` and `iterations`, what
/// AlterUserScramCredentials carries.
pub fn salted_password(mechanism: ScramMechanism, password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
    let mut salted = vec![0u8; mechanism.key_len()];
    let rounds = std::num::NonZeroU32::new(iterations.max(1)).expect("at least one round");
    pbkdf2::derive(mechanism.pbkdf2(), rounds, salt, password.as_bytes(), &mut salted);
    salted
}

/// Whether `iterations` is within what Kafka accepts for SCRAM credentials.
pub fn iterations_valid(iterations: i64) -> bool {
    (SCRAM_ITERATIONS_MIN as i64..=SCRAM_ITERATIONS_MAX as i64).contains(&iterations)
}

/// 32 random bytes from the system's CSPRNG.
pub fn random_secret() -> [u8; 32] {
    let mut secret = [0u8; 32];
    ring::rand::SystemRandom::new().fill(&mut secret).expect("the system's random source works");
    secret
}

/// A fresh random salt for a new credential.
pub fn random_salt() -> Vec<u8> {
    random_secret().to_vec()
}

/// Where one server-side SCRAM exchange is.
#[derive(Debug)]
pub enum Exchange {
    /// Waiting for the client-first message.
    Start,
    /// Sent server-first; waiting for client-final.
    SentFirst {
        user: String,
        /// The user is a delegation token's id (the `tokenauth=true` extension).
        token: bool,
        /// `None`: an unknown user, who fails at the proof.
        credential: Option<ScramCredential>,
        nonce: String,
        gs2_header: String,
        auth_prefix: String,
    },
    /// Finished (successfully or not); no more messages are taken.
    Done,
}

/// The end of one step of an exchange.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Send this to the client and wait for its next message.
    Continue(Vec<u8>),
    /// Authenticated as this user (with `token`, as this delegation token's id): send
    /// the server-final message.
    Authenticated { user: String, token: bool, server_final: Vec<u8> },
}

/// Why an exchange failed. Every failure is answered alike (SASL_AUTHENTICATION_FAILED);
/// the reason is for the log and metrics only.
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    /// A message that is not SCRAM's syntax, or out of order.
    Malformed(&'static str),
    /// Unknown user or wrong password (not told apart).
    BadCredentials,
}

/// Undoes SCRAM's user-name escaping (`=2C` is `,`, `=3D` is `=`).
fn unescape(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return None,
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

impl Exchange {
    /// Takes the client's next message. `lookup` finds a user's credential, or with
    /// `true` a delegation token's; `secret` keys the fake salt of an unknown user.
    ///
    /// # Errors
    /// The failure; the exchange is then `Done`.
    pub fn step(
        &mut self,
        mechanism: ScramMechanism,
        message: &[u8],
        lookup: impl FnOnce(&str, bool) -> Option<ScramCredential>,
        secret: &[u8],
    ) -> Result<Step, Failure> {
        let state = std::mem::replace(self, Exchange::Done);
        let text = std::str::from_utf8(message).map_err(|_| Failure::Malformed("not UTF-8"))?;
        match state {
            Exchange::Start => {
                let (step, next) = client_first(mechanism, text, lookup, secret)?;
                *self = next;
                Ok(step)
            }
            Exchange::SentFirst { user, token, credential, nonce, gs2_header, auth_prefix } => {
                let step = client_final(mechanism, text, credential, &nonce, &gs2_header, &auth_prefix)?;
                Ok(Step::Authenticated { user, token, server_final: step })
            }
            Exchange::Done => Err(Failure::Malformed("message after the exchange ended")),
        }
    }
}

fn client_first(
    mechanism: ScramMechanism,
    text: &str,
    lookup: impl FnOnce(&str, bool) -> Option<ScramCredential>,
    secret: &[u8],
) -> Result<(Step, Exchange), Failure> {
    // gs2-header: "n," or "y," (no channel binding), an optional authzid, then ",".
    let mut parts = text.splitn(3, ',');
    let binding = parts.next().ok_or(Failure::Malformed("no gs2 header"))?;
    if binding != "n" && binding != "y" {
        return Err(Failure::Malformed("channel binding is not supported"));
    }
    let authzid = parts.next().ok_or(Failure::Malformed("no gs2 header"))?;
    let bare = parts.next().ok_or(Failure::Malformed("no client-first-message-bare"))?;
    let gs2_header = format!("{binding},{authzid},");
    let mut user = None;
    let mut client_nonce = None;
    let mut token = false;
    for attribute in bare.split(',') {
        match attribute.split_once('=') {
            Some(("n", name)) => user = Some(unescape(name).ok_or(Failure::Malformed("bad user name escape"))?),
            Some(("r", nonce)) => client_nonce = Some(nonce),
            // Kafka's delegation tokens: the user is the token's id, its HMAC the password.
            Some(("tokenauth", value)) => token = value.eq_ignore_ascii_case("true"),
            Some(("m", _)) => return Err(Failure::Malformed("mandatory extensions are not supported")),
            _ => {}
        }
    }
    let user = user.filter(|u| !u.is_empty()).ok_or(Failure::Malformed("no user name"))?;
    let client_nonce = client_nonce
        .filter(|n| !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b','))
        .ok_or(Failure::Malformed("no valid client nonce"))?;
    if let Some(authzid) = authzid.strip_prefix("a=") {
        if unescape(authzid).as_deref() != Some(user.as_str()) {
            return Err(Failure::Malformed("an authorization id other than the user"));
        }
    } else if !authzid.is_empty() {
        return Err(Failure::Malformed("bad gs2 header"));
    }
    let credential = lookup(&user, token);
    let (salt, iterations) = match &credential {
        Some(c) => (c.salt.clone(), c.iterations),
        None => (hmac_of(mechanism, secret, user.as_bytes()), SCRAM_ITERATIONS_MIN),
    };
    let engine = base64::engine::general_purpose::STANDARD;
    // Letters and digits only, as Kafka's server nonces are: some clients take a
    // nonce's `=` or `/` apart.
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let server_nonce: String = random_secret().iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect();
    let nonce = format!("{client_nonce}{server_nonce}");
    let server_first = format!("r={nonce},s={},i={iterations}", engine.encode(&salt));
    let auth_prefix = format!("{bare},{server_first},");
    let next = Exchange::SentFirst { user, token, credential, nonce, gs2_header, auth_prefix };
    Ok((Step::Continue(server_first.into_bytes()), next))
}

fn client_final(
    mechanism: ScramMechanism,
    text: &str,
    credential: Option<ScramCredential>,
    nonce: &str,
    gs2_header: &str,
    auth_prefix: &str,
) -> Result<Vec<u8>, Failure> {
    let engine = base64::engine::general_purpose::STANDARD;
    let (without_proof, proof) = text.rsplit_once(",p=").ok_or(Failure::Malformed("no proof"))?;
    let mut binding = None;
    let mut final_nonce = None;
    for attribute in without_proof.split(',') {
        match attribute.split_once('=') {
            Some(("c", c)) => binding = Some(c),
            Some(("r", r)) => final_nonce = Some(r),
            _ => {}
        }
    }
    if binding.and_then(|c| engine.decode(c).ok()).as_deref() != Some(gs2_header.as_bytes()) {
        return Err(Failure::Malformed("channel binding does not match the gs2 header"));
    }
    // A replayed client-final carries an earlier exchange's nonce. As in Kafka's
    // ScramSaslServer the nonce must end with this exchange's: librdkafka sends its own
    // nonce again in front of it.
    if !final_nonce.is_some_and(|n| n.ends_with(nonce)) {
        return Err(Failure::Malformed("nonce does not match"));
    }
    let proof = engine.decode(proof).map_err(|_| Failure::Malformed("proof is not base64"))?;
    let Some(credential) = credential else { return Err(Failure::BadCredentials) };
    let auth_message = format!("{auth_prefix}{without_proof}");
    let signature = hmac_of(mechanism, &credential.stored_key, auth_message.as_bytes());
    if proof.len() != signature.len() {
        return Err(Failure::BadCredentials);
    }
    let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
    let stored = digest::digest(mechanism.digest(), &client_key);
    // Constant time: the comparison does not tell how many bytes matched.
    let differs = stored.as_ref().iter().zip(&credential.stored_key).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    if differs != 0 || stored.as_ref().len() != credential.stored_key.len() {
        return Err(Failure::BadCredentials);
    }
    let server_signature = hmac_of(mechanism, &credential.server_key, auth_message.as_bytes());
    Ok(format!("v={}", engine.encode(server_signature)).into_bytes())
}

/// The client side of RFC 5802 (the CLI's, and the tests'): the client-final message
/// answering `server_first` to `client_first_bare`, and the server signature the
/// server-final must carry.
///
/// # Errors
/// A server-first that is not SCRAM's syntax.
pub fn client_reply(
    mechanism: ScramMechanism,
    password: &str,
    client_first_bare: &str,
    server_first: &str,
) -> Result<(String, Vec<u8>), String> {
    let engine = base64::engine::general_purpose::STANDARD;
    let field = |name: &str| {
        server_first
            .split(',')
            .find_map(|f| f.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
            .ok_or_else(|| format!("the server-first message has no {name}"))
    };
    let nonce = field("r")?;
    let salt = engine.decode(field("s")?).map_err(|_| "the salt is not base64".to_string())?;
    let iterations: u32 = field("i")?.parse().map_err(|_| "the iteration count is not a number".to_string())?;
    if !iterations_valid(iterations as i64) {
        return Err(format!("the server asks for {iterations} iterations"));
    }
    let salted = salted_password(mechanism, password, &salt, iterations);
    let credential = ScramCredential::from_salted(mechanism, &salted, &salt, iterations);
    let client_key = hmac_of(mechanism, &salted, b"Client Key");
    let without_proof = format!("c=biws,r={nonce}");
    let auth = format!("{client_first_bare},{server_first},{without_proof}");
    let signature = hmac_of(mechanism, &credential.stored_key, auth.as_bytes());
    let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
    let server_signature = hmac_of(mechanism, &credential.server_key, auth.as_bytes());
    Ok((format!("{without_proof},p={}", engine.encode(proof)), server_signature))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client_final_for(m: ScramMechanism, password: &str, bare: &str, server_first: &str) -> (String, Vec<u8>) {
        client_reply(m, password, bare, server_first).unwrap()
    }

    fn exchange(password: &str, known: bool) -> (Result<Step, Failure>, Vec<u8>) {
        let mechanism = ScramMechanism::Sha512;
        let stored = ScramCredential::from_password(mechanism, "pencil", b"salt-of-alice", 4096);
        let mut exchange = Exchange::Start;
        let bare = "n=alice,r=fyko+d2lbbFgONRv9qkxdawL";
        let lookup = |_: &str, _| known.then(|| stored.clone());
        let Ok(Step::Continue(first)) = exchange.step(mechanism, format!("n,,{bare}").as_bytes(), lookup, b"k") else {
            panic!("no server-first")
        };
        let first = String::from_utf8(first).unwrap();
        assert!(first.starts_with("r=fyko+d2lbbFgONRv9qkxdawL"), "{first}");
        let (final_message, server_signature) = client_final_for(mechanism, password, bare, &first);
        (exchange.step(mechanism, final_message.as_bytes(), |_, _| None, b"k"), server_signature)
    }

    // The right password authenticates, and the server's signature proves the server.
    #[test]
    fn right_password_authenticates() {
        let (step, signature) = exchange("pencil", true);
        let engine = base64::engine::general_purpose::STANDARD;
        let want = format!("v={}", engine.encode(signature)).into_bytes();
        assert_eq!(step, Ok(Step::Authenticated { user: "alice".into(), token: false, server_final: want }));
    }

    // A wrong password and an unknown user fail the same way, at the proof.
    #[test]
    fn wrong_password_and_unknown_user_look_alike() {
        assert_eq!(exchange("pen", true).0, Err(Failure::BadCredentials));
        assert_eq!(exchange("pencil", false).0, Err(Failure::BadCredentials));
    }

    // A client-final replayed into a new exchange carries the old nonce: refused.
    #[test]
    fn a_replayed_final_message_is_refused() {
        let mechanism = ScramMechanism::Sha256;
        let stored = ScramCredential::from_password(mechanism, "pw", b"s", 4096);
        let bare = "n=bob,r=abc";
        let mut first = Exchange::Start;
        let Ok(Step::Continue(server_first)) =
            first.step(mechanism, format!("n,,{bare}").as_bytes(), |_, _| Some(stored.clone()), b"k")
        else {
            panic!()
        };
        let (replay, _) = client_final_for(mechanism, "pw", bare, std::str::from_utf8(&server_first).unwrap());
        assert!(matches!(first.step(mechanism, replay.as_bytes(), |_, _| None, b"k"), Ok(Step::Authenticated { .. })));
        let mut second = Exchange::Start;
        second.step(mechanism, format!("n,,{bare}").as_bytes(), |_, _| Some(stored.clone()), b"k").unwrap();
        assert_eq!(
            second.step(mechanism, replay.as_bytes(), |_, _| None, b"k"),
            Err(Failure::Malformed("nonce does not match"))
        );
    }

    // Malformed messages and messages after the end are refused, never a panic.
    #[test]
    fn malformed_messages_are_refused() {
        let mechanism = ScramMechanism::Sha256;
        for message in ["", "x", "p=tls-unique,,n=a,r=b", "n,,r=b", "n,,n=a", "n,,n=a=ZZ,r=b", "n,a=other,n=a,r=b"] {
            let mut exchange = Exchange::Start;
            assert!(exchange.step(mechanism, message.as_bytes(), |_, _| None, b"k").is_err(), "{message:?}");
            assert!(matches!(exchange, Exchange::Done));
        }
        let mut done = Exchange::Done;
        assert!(done.step(mechanism, b"n,,n=a,r=b", |_, _| None, b"k").is_err());
        assert_eq!(unescape("a=2Cb=3Dc").as_deref(), Some("a,b=c"));
    }

    // RFC 7677's test vector for SCRAM-SHA-256: its proof is accepted and the
    // server's signature is the RFC's.
    #[test]
    fn rfc7677_vector() {
        let engine = base64::engine::general_purpose::STANDARD;
        let salt = engine.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential = ScramCredential::from_password(ScramMechanism::Sha256, "pencil", &salt, 4096);
        let nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let auth_prefix = format!("n=user,r=rOprNGfwEbeRWgbNEkqO,r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,");
        let client_final_message = format!("c=biws,r={nonce},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=");
        let step =
            client_final(ScramMechanism::Sha256, &client_final_message, Some(credential), nonce, "n,,", &auth_prefix);
        let server_final = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".to_vec();
        assert_eq!(step, Ok(server_final));
    }
}
