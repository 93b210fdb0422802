//! The security half of the node configuration: listeners with Kafka's syntax, TLS
//! files and SASL mechanisms, from flags, `SKEIN_*` variables or top-level TOML keys
//! (the flag's name with `_` for `-`), validated and loaded at start (certificates
//! included) with clear errors.

use std::sync::Arc;

use clap::Args;
use serde::Deserialize;
use skein_control::security::acl::{parse_super_users, AuthorizerConfig};
use skein_control::security::login::{Login, LoginMechanism};
use skein_control::security::sasl::Mechanism;
use skein_control::security::tls::{ClientAuth, Tls, TlsFiles};
use skein_control::security::{self, ListenerConfig, SecurityProtocol};

#[derive(Args, Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecurityArgs {
    /// Kafka's `listeners`: `NAME://host:port`, comma-separated, e.g.
    /// `PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094`. `--listener` is a
    /// shorthand for one PLAINTEXT listener.
    #[arg(long, env = "SKEIN_LISTENERS")]
    pub listeners: Option<String>,
    /// Kafka's `advertised.listeners`, by listener name [default: each listener's address].
    #[arg(long, env = "SKEIN_ADVERTISED_LISTENERS")]
    pub advertised_listeners: Option<String>,
    /// Kafka's `listener.security.protocol.map`: `NAME:PROTOCOL`, comma-separated
    /// [default: the four protocol names map to themselves].
    #[arg(long, env = "SKEIN_LISTENER_SECURITY_PROTOCOL_MAP")]
    pub listener_security_protocol_map: Option<String>,
    /// Kafka's `inter.broker.listener.name` [default: the first PLAINTEXT listener].
    #[arg(long, env = "SKEIN_INTER_BROKER_LISTENER_NAME")]
    pub inter_broker_listener_name: Option<String>,
    /// Kafka's `sasl.mechanism.inter.broker.protocol`: the mechanism this broker logs
    /// in to the others with on a SASL inter-broker listener: PLAIN, SCRAM-SHA-256 or
    /// SCRAM-SHA-512 (one of --sasl-enabled-mechanisms).
    #[arg(long, env = "SKEIN_SASL_MECHANISM_INTER_BROKER_PROTOCOL")]
    pub sasl_mechanism_inter_broker_protocol: Option<String>,
    /// The user this broker logs in to the others as on a SASL inter-broker listener
    /// (the username of Kafka's inter-broker JAAS login).
    #[arg(long, env = "SKEIN_INTER_BROKER_SASL_USERNAME")]
    pub inter_broker_sasl_username: Option<String>,
    /// That user's password (prefer the environment variable to the flag: a flag is
    /// visible to every user of the host).
    #[arg(long, env = "SKEIN_INTER_BROKER_SASL_PASSWORD", hide_env_values = true)]
    pub inter_broker_sasl_password: Option<String>,
    /// The server's certificate chain, PEM (for SSL and SASL_SSL listeners).
    #[arg(long, env = "SKEIN_SSL_KEYSTORE_PEM")]
    pub ssl_keystore_pem: Option<std::path::PathBuf>,
    /// The server's private key, PEM.
    #[arg(long, env = "SKEIN_SSL_KEY_PEM")]
    pub ssl_key_pem: Option<std::path::PathBuf>,
    /// CA certificates client certificates are checked against, PEM.
    #[arg(long, env = "SKEIN_SSL_TRUSTSTORE_PEM")]
    pub ssl_truststore_pem: Option<std::path::PathBuf>,
    /// Kafka's `ssl.client.auth`: required, requested or none [default: none].
    #[arg(long, env = "SKEIN_SSL_CLIENT_AUTH")]
    pub ssl_client_auth: Option<String>,
    /// Kafka's `ssl.principal.mapping.rules` [default: DEFAULT].
    #[arg(long, env = "SKEIN_SSL_PRINCIPAL_MAPPING_RULES")]
    pub ssl_principal_mapping_rules: Option<String>,
    /// Kafka's `sasl.enabled.mechanisms`: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512,
    /// OAUTHBEARER (unsecured tokens, for tests)
    /// [default: SCRAM-SHA-256,SCRAM-SHA-512, and PLAIN with --sasl-plain-users].
    #[arg(long, env = "SKEIN_SASL_ENABLED_MECHANISMS")]
    pub sasl_enabled_mechanisms: Option<String>,
    /// PLAIN users: a file of `user:password` lines.
    #[arg(long, env = "SKEIN_SASL_PLAIN_USERS")]
    pub sasl_plain_users: Option<std::path::PathBuf>,
    /// Kafka's `connections.max.reauth.ms`: a SASL session's lifetime, after which the
    /// client re-authenticates (KIP-368) [default: 0, unbounded].
    #[arg(long, env = "SKEIN_CONNECTIONS_MAX_REAUTH_MS")]
    pub connections_max_reauth_ms: Option<u64>,
    /// Kafka's `authorizer.class.name`: `standard` checks ACLs (StandardAuthorizer's
    /// rules), `none` allows everything [default: none].
    #[arg(long, env = "SKEIN_AUTHORIZER")]
    pub authorizer: Option<String>,
    /// Kafka's `super.users`: principals every check allows, `User:admin;User:ops`.
    #[arg(long, env = "SKEIN_SUPER_USERS")]
    pub super_users: Option<String>,
    /// Kafka's `allow.everyone.if.no.acl.found`: a resource no ACL names is open to
    /// everyone [default: false].
    #[arg(long, env = "SKEIN_ALLOW_EVERYONE_IF_NO_ACL_FOUND", num_args = 0..=1, default_missing_value = "true")]
    pub allow_everyone_if_no_acl_found: Option<bool>,
    /// Kafka's `sasl.oauthbearer.jwks.endpoint.url` (`https://`, `http://` or
    /// `file:`): OAUTHBEARER takes tokens signed by a key of this set
    /// [default: unsecured tokens].
    #[arg(long, env = "SKEIN_SASL_OAUTHBEARER_JWKS_ENDPOINT_URL")]
    pub sasl_oauthbearer_jwks_endpoint_url: Option<String>,
    /// CA certificates (PEM) an https JWKS endpoint is checked against (Kafka takes
    /// the JVM's trust store) [default: the web PKI's roots].
    #[arg(long, env = "SKEIN_SASL_OAUTHBEARER_JWKS_ENDPOINT_CA_PEM")]
    pub sasl_oauthbearer_jwks_endpoint_ca_pem: Option<std::path::PathBuf>,
    /// Kafka's `sasl.oauthbearer.jwks.endpoint.refresh.ms` [default: 3600000].
    #[arg(long, env = "SKEIN_SASL_OAUTHBEARER_JWKS_ENDPOINT_REFRESH_MS")]
    pub sasl_oauthbearer_jwks_endpoint_refresh_ms: Option<u64>,
    /// Kafka's `sasl.oauthbearer.expected.audience`, comma-separated.
    #[arg(long, env = "SKEIN_SASL_OAUTHBEARER_EXPECTED_AUDIENCE")]
    pub sasl_oauthbearer_expected_audience: Option<String>,
    /// Kafka's `sasl.oauthbearer.expected.issuer`.
    #[arg(long, env = "SKEIN_SASL_OAUTHBEARER_EXPECTED_ISSUER")]
    pub sasl_oauthbearer_expected_issuer: Option<String>,
    /// Kafka's `sasl.oauthbearer.sub.claim.name` [default: sub].
    #[arg(long, env = "SKEIN_SASL_OAUTHBEARER_SUB_CLAIM_NAME")]
    pub sasl_oauthbearer_sub_claim_name: Option<String>,
    /// Kafka's `delegation.token.secret.key`: serves delegation tokens, each keyed by
    /// it (the same on every node) [default: none, tokens are off].
    #[arg(long, env = "SKEIN_DELEGATION_TOKEN_SECRET_KEY", hide_env_values = true)]
    pub delegation_token_secret_key: Option<String>,
    /// Kafka's `delegation.token.max.lifetime.ms` [default: 604800000, 7 days].
    #[arg(long, env = "SKEIN_DELEGATION_TOKEN_MAX_LIFETIME_MS")]
    pub delegation_token_max_lifetime_ms: Option<i64>,
    /// Kafka's `delegation.token.expiry.time.ms`: a token's life between renewals
    /// [default: 86400000, 1 day].
    #[arg(long, env = "SKEIN_DELEGATION_TOKEN_EXPIRY_TIME_MS")]
    pub delegation_token_expiry_time_ms: Option<i64>,
    /// Kafka's `delegation.token.expiry.check.interval.ms` [default: 3600000].
    #[arg(long, env = "SKEIN_DELEGATION_TOKEN_EXPIRY_CHECK_INTERVAL_MS")]
    pub delegation_token_expiry_check_interval_ms: Option<u64>,
}

/// The TOML keys `SecurityArgs` reads (split from the rest of the file).
pub const FILE_KEYS: &[&str] = &[
    "listeners",
    "advertised_listeners",
    "listener_security_protocol_map",
    "inter_broker_listener_name",
    "sasl_mechanism_inter_broker_protocol",
    "inter_broker_sasl_username",
    "inter_broker_sasl_password",
    "ssl_keystore_pem",
    "ssl_key_pem",
    "ssl_truststore_pem",
    "ssl_client_auth",
    "ssl_principal_mapping_rules",
    "sasl_enabled_mechanisms",
    "sasl_plain_users",
    "connections_max_reauth_ms",
    "authorizer",
    "super_users",
    "allow_everyone_if_no_acl_found",
    "sasl_oauthbearer_jwks_endpoint_url",
    "sasl_oauthbearer_jwks_endpoint_ca_pem",
    "sasl_oauthbearer_jwks_endpoint_refresh_ms",
    "sasl_oauthbearer_expected_audience",
    "sasl_oauthbearer_expected_issuer",
    "sasl_oauthbearer_sub_claim_name",
    "delegation_token_secret_key",
    "delegation_token_max_lifetime_ms",
    "delegation_token_expiry_time_ms",
    "delegation_token_expiry_check_interval_ms",
];

impl SecurityArgs {
    /// Each setting from `self` (flags, environment), else from `file`.
    pub fn or(self, file: SecurityArgs) -> SecurityArgs {
        SecurityArgs {
            listeners: self.listeners.or(file.listeners),
            advertised_listeners: self.advertised_listeners.or(file.advertised_listeners),
            listener_security_protocol_map: self.listener_security_protocol_map.or(file.listener_security_protocol_map),
            inter_broker_listener_name: self.inter_broker_listener_name.or(file.inter_broker_listener_name),
            sasl_mechanism_inter_broker_protocol: self
                .sasl_mechanism_inter_broker_protocol
                .or(file.sasl_mechanism_inter_broker_protocol),
            inter_broker_sasl_username: self.inter_broker_sasl_username.or(file.inter_broker_sasl_username),
            inter_broker_sasl_password: self.inter_broker_sasl_password.or(file.inter_broker_sasl_password),
            ssl_keystore_pem: self.ssl_keystore_pem.or(file.ssl_keystore_pem),
            ssl_key_pem: self.ssl_key_pem.or(file.ssl_key_pem),
            ssl_truststore_pem: self.ssl_truststore_pem.or(file.ssl_truststore_pem),
            ssl_client_auth: self.ssl_client_auth.or(file.ssl_client_auth),
            ssl_principal_mapping_rules: self.ssl_principal_mapping_rules.or(file.ssl_principal_mapping_rules),
            sasl_enabled_mechanisms: self.sasl_enabled_mechanisms.or(file.sasl_enabled_mechanisms),
            sasl_plain_users: self.sasl_plain_users.or(file.sasl_plain_users),
            connections_max_reauth_ms: self.connections_max_reauth_ms.or(file.connections_max_reauth_ms),
            authorizer: self.authorizer.or(file.authorizer),
            super_users: self.super_users.or(file.super_users),
            allow_everyone_if_no_acl_found: self.allow_everyone_if_no_acl_found.or(file.allow_everyone_if_no_acl_found),
            sasl_oauthbearer_jwks_endpoint_url: self
                .sasl_oauthbearer_jwks_endpoint_url
                .or(file.sasl_oauthbearer_jwks_endpoint_url),
            sasl_oauthbearer_jwks_endpoint_ca_pem: self
                .sasl_oauthbearer_jwks_endpoint_ca_pem
                .or(file.sasl_oauthbearer_jwks_endpoint_ca_pem),
            sasl_oauthbearer_jwks_endpoint_refresh_ms: self
                .sasl_oauthbearer_jwks_endpoint_refresh_ms
                .or(file.sasl_oauthbearer_jwks_endpoint_refresh_ms),
            sasl_oauthbearer_expected_audience: self
                .sasl_oauthbearer_expected_audience
                .or(file.sasl_oauthbearer_expected_audience),
            sasl_oauthbearer_expected_issuer: self
                .sasl_oauthbearer_expected_issuer
                .or(file.sasl_oauthbearer_expected_issuer),
            sasl_oauthbearer_sub_claim_name: self
                .sasl_oauthbearer_sub_claim_name
                .or(file.sasl_oauthbearer_sub_claim_name),
            delegation_token_secret_key: self.delegation_token_secret_key.or(file.delegation_token_secret_key),
            delegation_token_max_lifetime_ms: self
                .delegation_token_max_lifetime_ms
                .or(file.delegation_token_max_lifetime_ms),
            delegation_token_expiry_time_ms: self
                .delegation_token_expiry_time_ms
                .or(file.delegation_token_expiry_time_ms),
            delegation_token_expiry_check_interval_ms: self
                .delegation_token_expiry_check_interval_ms
                .or(file.delegation_token_expiry_check_interval_ms),
        }
    }
}

/// The listeners and security settings a node starts with.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub listeners: Vec<ListenerConfig>,
    pub inter_broker_listener: String,
    pub security: Arc<security::Security>,
}

/// Validates the listeners and loads the TLS and SASL material. `listener` and
/// `advertised` are the single-listener shorthands (`--listener`,
/// `--advertised-listener`): a PLAINTEXT listener placed first.
///
/// # Errors
/// A message naming the flag at fault.
pub fn resolve(
    args: SecurityArgs,
    listener: Option<String>,
    advertised: Option<String>,
    clustered: bool,
    data_dir: &std::path::Path,
) -> Result<Resolved, String> {
    let mut text = args.listeners.clone().unwrap_or_default();
    let mut advertised_text = args.advertised_listeners.clone().unwrap_or_default();
    let named_plaintext = |t: &str| t.split(',').any(|e| e.trim().to_uppercase().starts_with("PLAINTEXT://"));
    if let Some(address) = &listener {
        address
            .parse::<std::net::SocketAddr>()
            .map_err(|_| format!("invalid listener {address:?}: expected host:port, e.g. 127.0.0.1:9092"))?;
        if named_plaintext(&text) {
            return Err("--listener and a PLAINTEXT listener in --listeners: give one of them".into());
        }
        text = join(&format!("PLAINTEXT://{address}"), &text);
    } else if text.is_empty() {
        text = "PLAINTEXT://127.0.0.1:9092".into();
    }
    if let Some(address) = &advertised {
        if !named_plaintext(&text) {
            return Err("--advertised-listener is for the PLAINTEXT listener, and there is none".into());
        }
        if named_plaintext(&advertised_text) {
            return Err("--advertised-listener and a PLAINTEXT entry in --advertised-listeners: give one".into());
        }
        let valid = address.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
        if !valid {
            return Err(format!("invalid advertised listener {address:?}: expected host:port"));
        }
        advertised_text = join(&format!("PLAINTEXT://{address}"), &advertised_text);
    }
    let advertised_text = (!advertised_text.is_empty()).then_some(advertised_text);
    let listeners =
        security::parse_listeners(&text, advertised_text.as_deref(), args.listener_security_protocol_map.as_deref())?;
    let inter_broker_listener = match &args.inter_broker_listener_name {
        Some(name) => {
            let name = name.to_uppercase();
            listeners
                .iter()
                .find(|l| l.name == name)
                .ok_or_else(|| format!("--inter-broker-listener-name {name} is not in --listeners"))?;
            name
        }
        None => {
            listeners.iter().find(|l| l.protocol == SecurityProtocol::Plaintext).unwrap_or(&listeners[0]).name.clone()
        }
    };
    let inter_broker = listeners.iter().find(|l| l.name == inter_broker_listener).expect("checked above");
    let controller_protocol = controller_protocol(&args)?;
    let mut security = load(&args, &listeners, controller_protocol)?;
    security.controller_protocol = controller_protocol;
    security.inter_broker = inter_broker_client(&args, inter_broker, &security, clustered)?;
    security.staged = read_staged(data_dir)?;
    Ok(Resolved { listeners, inter_broker_listener, security: Arc::new(security) })
}

/// The controller listener's protocol: `CONTROLLER` in
/// `--listener-security-protocol-map`, as Kafka's `controller.listener.names` is
/// mapped [default: PLAINTEXT]. SSL needs certificates both ways (the trust store
/// checks every node); SASL is not offered there.
fn controller_protocol(args: &SecurityArgs) -> Result<SecurityProtocol, String> {
    let map = security::parse_protocol_map(args.listener_security_protocol_map.as_deref())?;
    let protocol = match args.listener_security_protocol_map {
        Some(_) => map.get("CONTROLLER").copied().unwrap_or(SecurityProtocol::Plaintext),
        None => SecurityProtocol::Plaintext,
    };
    match protocol {
        SecurityProtocol::Plaintext => Ok(protocol),
        SecurityProtocol::Ssl if args.ssl_truststore_pem.is_some() => Ok(protocol),
        SecurityProtocol::Ssl => {
            Err("the controller listener is SSL (CONTROLLER:SSL): --ssl-truststore-pem is required, every node proves itself with a certificate it signed".into())
        }
        other => Err(format!(
            "CONTROLLER:{} in --listener-security-protocol-map: the controller listener takes PLAINTEXT or SSL (certificates both ways)",
            other.name()
        )),
    }
}

/// How this broker reaches the others on `listener`. A cluster needs what the
/// listener's protocol takes: a trust store for TLS, a mechanism, user and password
/// for SASL. A lone node never connects to another broker, so it is not held to it.
fn inter_broker_client(
    args: &SecurityArgs,
    listener: &ListenerConfig,
    security: &security::Security,
    clustered: bool,
) -> Result<security::InterBroker, String> {
    let protocol = listener.protocol;
    let named = format!("the inter-broker listener {} is {}", listener.name, protocol.name());
    if clustered && protocol.tls() && security.tls.as_ref().and_then(|tls| tls.peer_config()).is_none() {
        return Err(format!("{named}: --ssl-truststore-pem is required to check the other brokers' certificates"));
    }
    if !protocol.sasl() {
        return Ok(security::InterBroker { protocol, login: None });
    }
    let login = match (
        &args.sasl_mechanism_inter_broker_protocol,
        &args.inter_broker_sasl_username,
        &args.inter_broker_sasl_password,
    ) {
        (Some(name), Some(user), Some(password)) => {
            let mechanism = LoginMechanism::parse(name).ok_or_else(|| {
                format!("--sasl-mechanism-inter-broker-protocol {name}: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
            })?;
            if !security.mechanisms.iter().any(|m| m.name() == mechanism.name()) {
                return Err(format!(
                    "--sasl-mechanism-inter-broker-protocol {} must be one of --sasl-enabled-mechanisms",
                    mechanism.name()
                ));
            }
            Some(Login { mechanism, user: user.clone(), password: password.clone() })
        }
        (None, None, None) if !clustered => None,
        _ => {
            return Err(format!(
                "{named}: give --sasl-mechanism-inter-broker-protocol, --inter-broker-sasl-username and --inter-broker-sasl-password"
            ))
        }
    };
    Ok(security::InterBroker { protocol, login })
}

/// The credentials `skein user add --data-dir` staged (none when there is no file).
///
/// # Errors
/// A file that exists but does not read or parse.
pub fn read_staged(data_dir: &std::path::Path) -> Result<Vec<security::StagedScram>, String> {
    let path = data_dir.join(security::STAGED_SCRAM_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| format!("{} does not parse: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

fn join(first: &str, rest: &str) -> String {
    match rest.is_empty() {
        true => first.to_string(),
        false => format!("{first},{rest}"),
    }
}

/// Loads the TLS and SASL material the listeners need.
fn load(
    args: &SecurityArgs,
    listeners: &[ListenerConfig],
    controller: SecurityProtocol,
) -> Result<security::Security, String> {
    let needs_tls = listeners.iter().find(|l| l.protocol.tls());
    let needs_sasl = listeners.iter().any(|l| l.protocol.sasl());
    let client_auth = match &args.ssl_client_auth {
        Some(text) => ClientAuth::parse(text)
            .ok_or_else(|| format!("invalid --ssl-client-auth {text:?}: expected required, requested or none"))?,
        None => ClientAuth::None,
    };
    // What needs the certificates, named in the error when they are missing.
    let needs_tls = match (needs_tls, controller.tls()) {
        (Some(listener), _) => Some(format!("listener {} is {}", listener.name, listener.protocol.name())),
        (None, true) => Some("the controller listener is SSL".to_string()),
        (None, false) => None,
    };
    let tls = match (needs_tls, &args.ssl_keystore_pem, &args.ssl_key_pem) {
        (None, _, _) => None,
        (Some(_), Some(certificates), Some(key)) => {
            let files = TlsFiles {
                certificates: certificates.clone(),
                key: key.clone(),
                trust: args.ssl_truststore_pem.clone(),
                client_auth,
            };
            Some(Tls::load(files, args.ssl_principal_mapping_rules.as_deref().unwrap_or("DEFAULT"))?)
        }
        (Some(needing), _, _) => return Err(format!("{needing}: --ssl-keystore-pem and --ssl-key-pem are required")),
    };
    let plain_users = match &args.sasl_plain_users {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read --sasl-plain-users {}: {e}", path.display()))?;
            security::parse_plain_users(&text).map_err(|e| format!("--sasl-plain-users {}: {e}", path.display()))?
        }
        None => Default::default(),
    };
    let default_mechanisms = match args.sasl_plain_users.is_some() {
        true => "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
        false => "SCRAM-SHA-256,SCRAM-SHA-512",
    };
    let mut mechanisms = Vec::new();
    for name in args.sasl_enabled_mechanisms.as_deref().unwrap_or(default_mechanisms).split(',').map(str::trim) {
        if name.is_empty() {
            continue;
        }
        let mechanism = Mechanism::parse(name).ok_or_else(|| {
            format!("--sasl-enabled-mechanisms: {name} is not supported (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER are)")
        })?;
        if !mechanisms.contains(&mechanism) {
            mechanisms.push(mechanism);
        }
    }
    if needs_sasl && mechanisms.is_empty() {
        return Err("a SASL listener needs at least one of --sasl-enabled-mechanisms".into());
    }
    let signed_tokens = signed_tokens(args)?;
    if mechanisms.contains(&Mechanism::OAuthBearer) && needs_sasl && signed_tokens.is_none() {
        tracing::warn!(target: "skein", "OAUTHBEARER takes unsecured tokens (alg none): anyone can claim any principal; for tests and development only");
    }
    if mechanisms.contains(&Mechanism::Plain) && needs_sasl && args.sasl_plain_users.is_none() {
        return Err("PLAIN is enabled but no users are: give --sasl-plain-users FILE".into());
    }
    Ok(security::Security {
        tls,
        mechanisms,
        plain_users,
        max_reauth_ms: args.connections_max_reauth_ms.unwrap_or(0),
        authorizer: authorizer(args)?,
        signed_tokens,
        tokens: delegation_tokens(args)?,
        ..Default::default()
    })
}

/// The delegation-token settings, when a secret key is given.
fn delegation_tokens(args: &SecurityArgs) -> Result<Option<security::tokens::TokenSettings>, String> {
    use security::tokens::*;
    let Some(secret) = args.delegation_token_secret_key.as_ref().filter(|key| !key.is_empty()) else {
        return Ok(None);
    };
    let positive = |value: Option<i64>, default: i64, flag: &str| match value.unwrap_or(default) {
        ms if ms >= 1 => Ok(ms),
        ms => Err(format!("--{flag} {ms}: at least 1 ms")),
    };
    let max_lifetime_ms =
        positive(args.delegation_token_max_lifetime_ms, DEFAULT_MAX_LIFETIME_MS, "delegation-token-max-lifetime-ms")?;
    let expiry_time_ms =
        positive(args.delegation_token_expiry_time_ms, DEFAULT_EXPIRY_TIME_MS, "delegation-token-expiry-time-ms")?;
    let interval = args.delegation_token_expiry_check_interval_ms.unwrap_or(DEFAULT_EXPIRY_CHECK_INTERVAL_MS);
    if interval == 0 {
        return Err("--delegation-token-expiry-check-interval-ms 0: at least 1 ms".into());
    }
    Ok(Some(TokenSettings {
        secret: secret.as_bytes().to_vec(),
        max_lifetime_ms,
        expiry_time_ms,
        expiry_check_interval_ms: interval,
    }))
}

/// OAUTHBEARER's signed-token settings, when a JWKS endpoint is named.
fn signed_tokens(args: &SecurityArgs) -> Result<Option<skein_control::security::jwks::SignedTokens>, String> {
    let Some(endpoint) = args.sasl_oauthbearer_jwks_endpoint_url.clone() else {
        return Ok(None);
    };
    if !["https://", "http://", "file:"].iter().any(|scheme| endpoint.starts_with(scheme)) {
        return Err(format!("--sasl-oauthbearer-jwks-endpoint-url {endpoint}: an https://, http:// or file: URL"));
    }
    let endpoint_ca = args.sasl_oauthbearer_jwks_endpoint_ca_pem.clone();
    if let Some(ca) = &endpoint_ca {
        crate::oauth_jwks::agent(Some(ca))?;
    }
    let list = |text: &Option<String>| -> Vec<String> {
        text.iter().flat_map(|t| t.split(',')).map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect()
    };
    Ok(Some(skein_control::security::jwks::SignedTokens {
        jwks: Default::default(),
        endpoint,
        endpoint_ca,
        refresh_ms: args.sasl_oauthbearer_jwks_endpoint_refresh_ms.unwrap_or(3_600_000),
        sub_claim: args.sasl_oauthbearer_sub_claim_name.clone().unwrap_or_else(|| "sub".into()),
        audience: list(&args.sasl_oauthbearer_expected_audience),
        issuer: args.sasl_oauthbearer_expected_issuer.clone(),
    }))
}

/// The authorizer `--authorizer` names, with its super users.
fn authorizer(args: &SecurityArgs) -> Result<Option<AuthorizerConfig>, String> {
    let config = AuthorizerConfig {
        super_users: parse_super_users(args.super_users.as_deref().unwrap_or(""))
            .map_err(|e| format!("--super-users: {e}"))?,
        allow_everyone_if_no_acl_found: args.allow_everyone_if_no_acl_found.unwrap_or(false),
    };
    match args.authorizer.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None | Some("none") | Some("") => Ok(None),
        // Kafka's class names for the standard authorizer work too.
        Some("standard") | Some("org.apache.kafka.metadata.authorizer.standardauthorizer") => Ok(Some(config)),
        Some(other) => Err(format!("--authorizer {other}: only `standard` and `none` exist")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(args: SecurityArgs, listener: Option<&str>) -> Result<Resolved, String> {
        resolve(args, listener.map(String::from), None, false, std::path::Path::new("/nonexistent"))
    }

    // `--listener` stays a PLAINTEXT shorthand beside `--listeners`; no flag at all
    // is PLAINTEXT on 127.0.0.1:9092.
    #[test]
    fn the_single_listener_shorthand() {
        let none = resolved(SecurityArgs::default(), None).unwrap();
        assert_eq!(none.listeners.len(), 1);
        assert_eq!(none.listeners[0].address.to_string(), "127.0.0.1:9092");
        let args = SecurityArgs {
            listeners: Some("SASL_PLAINTEXT://127.0.0.1:9094".into()),
            sasl_enabled_mechanisms: Some("SCRAM-SHA-512".into()),
            ..Default::default()
        };
        let both = resolved(args.clone(), Some("127.0.0.1:9092")).unwrap();
        let names: Vec<&str> = both.listeners.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["PLAINTEXT", "SASL_PLAINTEXT"]);
        assert_eq!(both.inter_broker_listener, "PLAINTEXT");
        let twice = SecurityArgs { listeners: Some("PLAINTEXT://127.0.0.1:9093".into()), ..Default::default() };
        assert!(resolved(twice, Some("127.0.0.1:9092")).unwrap_err().contains("give one of them"));
    }

    // Missing TLS files, PLAIN without users, unknown mechanisms and a secured
    // inter-broker listener in a cluster are refused, each with its flag named.
    #[test]
    fn incomplete_security_is_refused() {
        let refused = |args: SecurityArgs, clustered: bool, want: &str| {
            let error = resolve(args, None, None, clustered, std::path::Path::new("/nonexistent")).unwrap_err();
            assert!(error.contains(want), "{error}");
        };
        let ssl = SecurityArgs { listeners: Some("SSL://127.0.0.1:9093".into()), ..Default::default() };
        refused(ssl, false, "--ssl-keystore-pem and --ssl-key-pem are required");
        let sasl = |mechanisms: &str| SecurityArgs {
            listeners: Some("SASL_PLAINTEXT://127.0.0.1:9094".into()),
            sasl_enabled_mechanisms: Some(mechanisms.into()),
            ..Default::default()
        };
        refused(sasl("PLAIN"), false, "--sasl-plain-users");
        refused(sasl("GSSAPI"), false, "GSSAPI is not supported");
        // A SASL inter-broker listener in a cluster needs the broker's login, with a
        // mechanism that is enabled; a lone node does not.
        refused(sasl("SCRAM-SHA-512"), true, "give --sasl-mechanism-inter-broker-protocol");
        assert!(resolve(sasl("SCRAM-SHA-512"), None, None, false, std::path::Path::new("/nonexistent")).is_ok());
        let login = |mechanism: &str| SecurityArgs {
            sasl_mechanism_inter_broker_protocol: Some(mechanism.into()),
            inter_broker_sasl_username: Some("broker".into()),
            inter_broker_sasl_password: Some("pw".into()),
            ..sasl("SCRAM-SHA-512")
        };
        refused(login("SCRAM-SHA-256"), true, "must be one of --sasl-enabled-mechanisms");
        // The controller listener takes PLAINTEXT or SSL, and SSL checks every node
        // against the trust store.
        let controller = |protocol: &str| SecurityArgs {
            listener_security_protocol_map: Some(format!("PLAINTEXT:PLAINTEXT,CONTROLLER:{protocol}")),
            ..Default::default()
        };
        refused(controller("SASL_SSL"), true, "takes PLAINTEXT or SSL");
        refused(controller("SSL"), true, "--ssl-truststore-pem is required");
        let no_files = SecurityArgs { ssl_truststore_pem: Some("/nonexistent/ca.pem".into()), ..controller("SSL") };
        refused(no_files, true, "the controller listener is SSL: --ssl-keystore-pem and --ssl-key-pem are required");
        refused(login("GSSAPI"), true, "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512");
        let resolved = resolve(login("scram-sha-512"), None, None, true, std::path::Path::new("/nonexistent")).unwrap();
        let inter_broker = &resolved.security.inter_broker;
        assert_eq!(inter_broker.protocol, SecurityProtocol::SaslPlaintext);
        assert_eq!(
            inter_broker.login.as_ref().map(|l| (l.mechanism.name(), l.user.as_str())),
            Some(("SCRAM-SHA-512", "broker"))
        );
        let auth = SecurityArgs { ssl_client_auth: Some("maybe".into()), ..Default::default() };
        refused(auth, false, "--ssl-client-auth");
    }
}
