//! Kafka's security model on the connection: named listeners with their security
//! protocols (`listeners`, `advertised.listeners`, `listener.security.protocol.map`),
//! TLS on rustls (`tls`), SASL authentication (`sasl`, with PLAIN and SCRAM in
//! `scram`) and the principal a connection acts as.
//!
//! Everything here is fixed at start except the TLS certificates, which `tls` reloads
//! when their files change; a shard reads the current TLS config at accept with one
//! atomic load.

pub mod acl;
pub mod buffered;
pub mod jwks;
pub mod login;
pub mod oauthbearer;
pub mod sasl;
pub mod scram;
pub mod tls;
pub mod tokens;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

/// How a listener's connections are secured (Kafka's `SecurityProtocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn parse(name: &str) -> Option<SecurityProtocol> {
        Some(match name {
            "PLAINTEXT" => SecurityProtocol::Plaintext,
            "SSL" => SecurityProtocol::Ssl,
            "SASL_PLAINTEXT" => SecurityProtocol::SaslPlaintext,
            "SASL_SSL" => SecurityProtocol::SaslSsl,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether connections start with a TLS handshake.
    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether connections must authenticate with SASL before any other request.
    pub fn sasl(self) -> bool {
        matches!(self, SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl)
    }
}

/// One named listener: where it binds, how it is secured, and the address Metadata
/// gives the clients connected to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    pub name: String,
    pub protocol: SecurityProtocol,
    pub address: SocketAddr,
    pub advertised_host: String,
    pub advertised_port: u16,
}

/// A broker's advertised endpoint on one listener, as registered with the controller
/// (Kafka's RegisterBrokerRecord endpoints).
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
pub struct Endpoint {
    pub listener: String,
    pub host: String,
    pub port: u16,
}

/// Kafka's `listener.security.protocol.map`: each listener name's protocol. Without
/// a map, the four protocol names map to themselves.
///
/// # Errors
/// A message naming the entry that is not `NAME:PROTOCOL`.
pub fn parse_protocol_map(protocol_map: Option<&str>) -> Result<HashMap<String, SecurityProtocol>, String> {
    let Some(map) = protocol_map else {
        return Ok(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
            .into_iter()
            .map(|p| (p.to_string(), SecurityProtocol::parse(p).expect("a protocol name")))
            .collect());
    };
    let mut protocols = HashMap::new();
    for entry in map.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = || {
            format!("invalid --listener-security-protocol-map entry {entry:?}: expected NAME:PROTOCOL, e.g. INTERNAL:SASL_SSL")
        };
        let (name, protocol) = entry.split_once(':').ok_or_else(bad)?;
        let protocol = SecurityProtocol::parse(protocol.trim()).ok_or_else(bad)?;
        protocols.insert(name.trim().to_uppercase(), protocol);
    }
    Ok(protocols)
}

/// Parses Kafka's `listeners` (`NAME://host:port`, comma-separated), with the
/// advertised addresses of `advertised.listeners` (same syntax, by name; a listener
/// not named there advertises its own address) and the names' protocols from
/// `listener.security.protocol.map` (`NAME:PROTOCOL`, comma-separated; the four
/// protocol names map to themselves). An empty host binds 0.0.0.0, as in Kafka.
///
/// # Errors
/// A message naming the bad entry: a malformed address, an unknown protocol, a name
/// or port used twice, an advertised name without its listener, or an advertised
/// wildcard address.
pub fn parse_listeners(
    listeners: &str,
    advertised: Option<&str>,
    protocol_map: Option<&str>,
) -> Result<Vec<ListenerConfig>, String> {
    let protocols = parse_protocol_map(protocol_map)?;
    let mut advertised_by_name: BTreeMap<String, (String, u16)> = BTreeMap::new();
    for entry in advertised.unwrap_or("").split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, host, port) = split_entry(entry, "--advertised-listeners")?;
        if host.is_empty() || host == "0.0.0.0" || host == "::" {
            return Err(format!("invalid --advertised-listeners entry {entry:?}: a client cannot connect to {host:?}"));
        }
        if advertised_by_name.insert(name.clone(), (host, port)).is_some() {
            return Err(format!("--advertised-listeners names {name} twice"));
        }
    }
    let mut out: Vec<ListenerConfig> = Vec::new();
    for entry in listeners.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, host, port) = split_entry(entry, "--listeners")?;
        let protocol = *protocols.get(&name).ok_or_else(|| {
            format!("listener {name} has no security protocol: name one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, or map it with --listener-security-protocol-map")
        })?;
        let ip = if host.is_empty() { "0.0.0.0".to_string() } else { host.clone() };
        let address: SocketAddr =
            format!("{ip}:{port}").parse().or_else(|_| format!("[{ip}]:{port}").parse()).map_err(|_| {
                format!("invalid --listeners entry {entry:?}: expected NAME://ip:port, e.g. SSL://127.0.0.1:9093")
            })?;
        if out.iter().any(|l| l.name == name) {
            return Err(format!("--listeners names {name} twice"));
        }
        if port != 0 && out.iter().any(|l| l.address.port() == port) {
            return Err(format!("--listeners uses port {port} twice"));
        }
        let (advertised_host, advertised_port) = match advertised_by_name.remove(&name) {
            Some(advertised) => advertised,
            None => (address.ip().to_string(), port),
        };
        out.push(ListenerConfig { name, protocol, address, advertised_host, advertised_port });
    }
    if let Some(name) = advertised_by_name.keys().next() {
        return Err(format!("--advertised-listeners names {name}, which --listeners does not"));
    }
    if out.is_empty() {
        return Err("no listener: --listeners needs at least one NAME://host:port".into());
    }
    Ok(out)
}

/// `NAME://host:port` → (upper-case name, host without brackets, port).
fn split_entry(entry: &str, flag: &str) -> Result<(String, String, u16), String> {
    let bad = || format!("invalid {flag} entry {entry:?}: expected NAME://host:port, e.g. SASL_SSL://127.0.0.1:9094");
    let (name, address) = entry.split_once("://").ok_or_else(bad)?;
    let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let name = name.trim().to_uppercase();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(bad());
    }
    Ok((name, host.trim_start_matches('[').trim_end_matches(']').to_string(), port))
}

/// The principal a connection acts as (Kafka's `KafkaPrincipal`): `User:ANONYMOUS` on
/// plaintext, the SASL user, or the client certificate's mapped subject.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    pub name: String,
    /// Authenticated with a delegation token of this user (Kafka's
    /// `tokenAuthenticated`): it may not ask for tokens itself.
    pub token: bool,
}

impl Principal {
    pub fn user(name: String) -> Principal {
        Principal { name, token: false }
    }

    pub fn anonymous() -> Principal {
        Principal::user("ANONYMOUS".into())
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "User:{}", self.name)
    }
}

/// SCRAM credentials `skein user add --data-dir` wrote for a stopped node, in its
/// data directory: the node applies them through the controller at its next start,
/// authenticates with them until then, and removes the file once they are in the
/// metadata.
pub const STAGED_SCRAM_FILE: &str = "scram-credentials.staged.json";

/// One staged change: a user's credential for a mechanism, set or (`None`) removed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StagedScram {
    pub user: String,
    pub mechanism: String,
    pub credential: Option<scram::ScramCredential>,
}

/// The node's security settings: TLS, the SASL mechanisms and their credentials.
pub struct Security {
    /// The server's TLS config, needed by any SSL or SASL_SSL listener.
    pub tls: Option<tls::Tls>,
    /// `sasl.enabled.mechanisms`.
    pub mechanisms: Vec<sasl::Mechanism>,
    /// PLAIN users and their passwords (`--sasl-plain-users`).
    pub plain_users: HashMap<String, String>,
    /// Kafka's `connections.max.reauth.ms`: a SASL session's lifetime (0: unbounded).
    pub max_reauth_ms: u64,
    /// Keys the fake SCRAM salts given for unknown users, so that a client cannot
    /// tell an unknown user from a bad password.
    pub scram_secret: [u8; 32],
    /// Credentials staged in the data directory, used until they are applied
    /// (`STAGED_SCRAM_FILE`).
    pub staged: Vec<StagedScram>,
    /// The staged credentials are in the metadata now: the image alone answers.
    pub staged_applied: std::sync::atomic::AtomicBool,
    /// `--authorizer standard`: ACLs are checked; `None`, everything is allowed.
    pub authorizer: Option<acl::AuthorizerConfig>,
    /// OAUTHBEARER's signed tokens (`sasl.oauthbearer.jwks.endpoint.url`); `None`:
    /// unsecured tokens.
    pub signed_tokens: Option<jwks::SignedTokens>,
    /// How this broker reaches the other brokers' inter-broker listener.
    pub inter_broker: InterBroker,
    /// The controller listener's protocol (`CONTROLLER` in
    /// `listener.security.protocol.map`): PLAINTEXT, or SSL with certificates
    /// required both ways, so that only nodes holding a certificate of the trust
    /// store's CA take part in the metadata quorum.
    pub controller_protocol: SecurityProtocol,
    /// Delegation tokens (`delegation.token.secret.key` and the lifetimes); `None`:
    /// DELEGATION_TOKEN_AUTH_DISABLED.
    pub tokens: Option<tokens::TokenSettings>,
}

/// How this broker connects to the others (`inter.broker.listener.name`): the
/// listener's protocol, and on a SASL one the login
/// (`sasl.mechanism.inter.broker.protocol` and the broker's user). On an SSL or
/// SASL_SSL one the TLS client config is `tls::Tls::peer_config`: the trust store
/// checks the other broker, whose name must match its certificate, and this broker
/// presents its own certificate (for `ssl.client.auth`).
#[derive(Debug, Clone)]
pub struct InterBroker {
    pub protocol: SecurityProtocol,
    pub login: Option<login::Login>,
}

impl Default for InterBroker {
    fn default() -> InterBroker {
        InterBroker { protocol: SecurityProtocol::Plaintext, login: None }
    }
}

impl Security {
    /// User `user`'s credential for `mechanism`: from the metadata image, else from
    /// the staged file while it is not applied yet.
    pub fn scram_credential(
        &self,
        image: &crate::metadata::MetadataImage,
        user: &str,
        mechanism: scram::ScramMechanism,
    ) -> Option<scram::ScramCredential> {
        if let Some(credential) = image.scram.get(user).and_then(|m| m.get(mechanism.name())) {
            return Some(credential.clone());
        }
        let staged = self.staged_pending().iter().rev().find(|s| s.user == user && s.mechanism == mechanism.name())?;
        staged.credential.clone()
    }

    /// The staged changes while the image does not hold them yet; none once applied.
    fn staged_pending(&self) -> &[StagedScram] {
        match self.staged_applied.load(std::sync::atomic::Ordering::Acquire) {
            true => &[],
            false => &self.staged,
        }
    }

    /// Every user's SCRAM mechanisms and their iterations, as `scram_credential`
    /// answers them: the image's, and the staged ones the image lacks while the staged
    /// file is not applied yet (a node just started answers for them, as Kafka's
    /// bootstrap records do from the first moment).
    pub fn scram_iterations(&self, image: &crate::metadata::MetadataImage) -> BTreeMap<String, BTreeMap<String, u32>> {
        let mut users: BTreeMap<String, BTreeMap<String, u32>> = image
            .scram
            .iter()
            .map(|(user, mechanisms)| {
                let mechanisms = mechanisms.iter().map(|(name, c)| (name.clone(), c.iterations)).collect();
                (user.clone(), mechanisms)
            })
            .collect();
        // The last change staged for a user and mechanism is the one that counts.
        let mut staged: BTreeMap<(&str, &str), Option<u32>> = BTreeMap::new();
        for change in self.staged_pending() {
            staged.insert((&change.user, &change.mechanism), change.credential.as_ref().map(|c| c.iterations));
        }
        for ((user, mechanism), iterations) in staged {
            if let Some(iterations) = iterations {
                users.entry(user.to_string()).or_default().entry(mechanism.to_string()).or_insert(iterations);
            }
        }
        users
    }
}

/// SCRAM's credentials as a node holds them: users' from the image (and the staged
/// file), delegation tokens' derived from the image's tokens and the secret key.
pub struct NodeCredentials<'a> {
    pub security: &'a Security,
    pub image: &'a crate::metadata::MetadataImage,
}

impl NodeCredentials<'_> {
    /// Token `id`, with the node's token settings, while it lives.
    fn live_token(&self, id: &str) -> Option<(&tokens::TokenSettings, &tokens::DelegationToken)> {
        let settings = self.security.tokens.as_ref()?;
        let token = self.image.tokens.get(id)?;
        (!token.expired(skein_engine::time::now_ms())).then_some((settings, token))
    }
}

impl sasl::Credentials for NodeCredentials<'_> {
    fn user(&self, user: &str, mechanism: scram::ScramMechanism) -> Option<scram::ScramCredential> {
        self.security.scram_credential(self.image, user, mechanism)
    }

    fn token(&self, id: &str, mechanism: scram::ScramMechanism) -> Option<scram::ScramCredential> {
        let (settings, token) = self.live_token(id)?;
        Some(tokens::cached_credential(settings, token, mechanism))
    }

    fn token_owner(&self, id: &str) -> Option<(String, i64)> {
        self.live_token(id).map(|(_, token)| (token.owner.clone(), token.expiry_ms))
    }
}

/// Names the users, never their passwords or the secret.
impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("tls", &self.tls.is_some())
            .field("mechanisms", &self.mechanisms)
            .field("plain_users", &self.plain_users.keys().collect::<Vec<_>>())
            .field("max_reauth_ms", &self.max_reauth_ms)
            .field("inter_broker", &self.inter_broker)
            .finish_non_exhaustive()
    }
}

impl Default for Security {
    fn default() -> Security {
        Security {
            tls: None,
            mechanisms: vec![sasl::Mechanism::Plain],
            plain_users: HashMap::new(),
            max_reauth_ms: 0,
            scram_secret: scram::random_secret(),
            staged: Vec::new(),
            staged_applied: std::sync::atomic::AtomicBool::new(false),
            authorizer: None,
            signed_tokens: None,
            inter_broker: InterBroker::default(),
            controller_protocol: SecurityProtocol::Plaintext,
            tokens: None,
        }
    }
}

/// Reads `--sasl-plain-users`: one `user:password` a line; blank lines and lines
/// starting with `#` are skipped.
///
/// # Errors
/// A message naming the line that has no `:` or an empty user.
pub fn parse_plain_users(text: &str) -> Result<HashMap<String, String>, String> {
    let mut users = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        match line.split_once(':') {
            Some((user, password)) if !user.is_empty() => {
                users.insert(user.to_string(), password.to_string());
            }
            _ => return Err(format!("line {}: expected user:password", n + 1)),
        }
    }
    Ok(users)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Staged credentials are described until they are applied; the image's own win,
    // and the last change staged for a user and mechanism is the one described.
    #[test]
    fn staged_credentials_are_described_until_applied() {
        use scram::{ScramCredential, ScramMechanism};
        let credential = |iterations| ScramCredential::from_password(ScramMechanism::Sha512, "pw", b"salt", iterations);
        let mut image = crate::metadata::MetadataImage::default();
        image.scram.entry("carol".into()).or_default().insert("SCRAM-SHA-512".into(), credential(8192));
        let stage = |user: &str, iterations: Option<u32>| StagedScram {
            user: user.into(),
            mechanism: "SCRAM-SHA-512".into(),
            credential: iterations.map(credential),
        };
        let security = Security {
            staged: vec![
                stage("alice", Some(4096)),
                stage("carol", Some(4096)),
                stage("dan", Some(4096)),
                stage("dan", None),
            ],
            ..Security::default()
        };
        let described = |security: &Security| -> Vec<(String, u32)> {
            let users = security.scram_iterations(&image);
            users.into_iter().flat_map(|(user, m)| m.into_values().map(move |i| (user.clone(), i))).collect()
        };
        assert_eq!(described(&security), [("alice".to_string(), 4096), ("carol".to_string(), 8192)]);
        security.staged_applied.store(true, std::sync::atomic::Ordering::Release);
        assert_eq!(described(&security), [("carol".to_string(), 8192)]);
    }

    // Kafka's listener syntax: names, protocols by name or map, advertised addresses.
    #[test]
    fn listeners_parse_as_kafka_writes_them() {
        let listeners = parse_listeners(
            "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094,INTERNAL://:9095",
            Some("SASL_SSL://broker1.example:19094"),
            Some("PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,INTERNAL:SSL"),
        )
        .unwrap();
        assert_eq!(listeners.len(), 3);
        assert_eq!(listeners[0].protocol, SecurityProtocol::Plaintext);
        assert_eq!((listeners[0].advertised_host.as_str(), listeners[0].advertised_port), ("127.0.0.1", 9092));
        assert_eq!(listeners[1].protocol, SecurityProtocol::SaslSsl);
        assert_eq!((listeners[1].advertised_host.as_str(), listeners[1].advertised_port), ("broker1.example", 19094));
        assert_eq!(listeners[2].protocol, SecurityProtocol::Ssl);
        assert_eq!(listeners[2].address.to_string(), "0.0.0.0:9095");
    }

    // Each malformed or inconsistent listener setting is refused with its entry named.
    #[test]
    fn bad_listeners_are_refused() {
        let refused = |l: &str, a: Option<&str>, m: Option<&str>, want: &str| {
            let error = parse_listeners(l, a, m).unwrap_err();
            assert!(error.contains(want), "{l:?} {a:?} {m:?}: {error}");
        };
        refused("127.0.0.1:9092", None, None, "expected NAME://host:port");
        refused("FOO://127.0.0.1:9092", None, None, "listener FOO has no security protocol");
        refused("PLAINTEXT://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9093", None, None, "names PLAINTEXT twice");
        refused("PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9092", None, None, "port 9092 twice");
        refused("PLAINTEXT://127.0.0.1:9092", Some("SSL://h:1"), None, "which --listeners does not");
        refused("PLAINTEXT://127.0.0.1:9092", Some("PLAINTEXT://0.0.0.0:1"), None, "cannot connect");
        refused("A://127.0.0.1:9092", None, Some("A:TLS"), "expected NAME:PROTOCOL");
        refused("PLAINTEXT://nohost:9092", None, None, "expected NAME://ip:port");
        refused("", None, None, "no listener");
    }

    // The PLAIN users file: user:password lines, comments skipped, bad lines named.
    #[test]
    fn plain_users_file() {
        let users = parse_plain_users("# users\nalice:secret\n\nbob:p:w\n").unwrap();
        assert_eq!(users["alice"], "secret");
        assert_eq!(users["bob"], "p:w");
        assert!(parse_plain_users("alice\n").unwrap_err().contains("line 1"));
        assert!(parse_plain_users(":pw\n").unwrap_err().contains("line 1"));
    }
}
