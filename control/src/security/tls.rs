//! TLS for SSL and SASL_SSL listeners, on rustls: the server's certificate chain and
//! key from PEM files, client authentication against a PEM trust store
//! (`ssl.client.auth` required, requested or none), TLS 1.2 and 1.3 only.
//!
//! The files are watched by one thread (`watch`), which rebuilds the config when one
//! of them changes and publishes it with a generation number. A shard keeps its own
//! copy and compares generations at accept: one atomic load per connection, no lock.
//! A rebuilt config that fails to load (a half-written file) is logged and the last
//! good one stays in use.
//!
//! The principal of an mTLS client is its certificate's subject in RFC 2253 form, as
//! Java's `X500Principal` writes it, mapped by `ssl.principal.mapping.rules`.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;

use crate::limits::TLS_RELOAD_INTERVAL;

/// Kafka's `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    Required,
    Requested,
    None,
}

impl ClientAuth {
    pub fn parse(text: &str) -> Option<ClientAuth> {
        match text {
            "required" => Some(ClientAuth::Required),
            "requested" => Some(ClientAuth::Requested),
            "none" => Some(ClientAuth::None),
            _ => None,
        }
    }
}

/// Where the TLS material is read from.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The server's certificate chain (`--ssl-keystore-pem`).
    pub certificates: PathBuf,
    /// The server's private key (`--ssl-key-pem`).
    pub key: PathBuf,
    /// CA certificates that client certificates are checked against
    /// (`--ssl-truststore-pem`).
    pub trust: Option<PathBuf>,
    pub client_auth: ClientAuth,
}

/// The server's TLS config as last loaded, with its generation.
#[derive(Debug)]
pub struct Tls {
    files: TlsFiles,
    current: Mutex<Arc<ServerConfig>>,
    /// The config this broker connects to others with (`peer_config`), rebuilt with
    /// `current`; none without a trust store.
    peer: Mutex<Option<Arc<rustls::ClientConfig>>>,
    /// The controller listener's config (`controller_config`): client certificates
    /// required whatever `ssl.client.auth` says; none without a trust store.
    controller: Mutex<Option<Arc<ServerConfig>>>,
    generation: AtomicU64,
    principal_rules: Vec<PrincipalRule>,
}

/// A shard's copy of the config, refreshed when the generation moves.
pub type ShardTls = RefCell<Option<(u64, Arc<ServerConfig>)>>;

impl Tls {
    /// Loads the files once.
    ///
    /// # Errors
    /// A message naming the file that cannot be read or holds no usable certificate
    /// or key, or a mapping rule that does not parse.
    pub fn load(files: TlsFiles, principal_rules: &str) -> Result<Tls, String> {
        let config = build(&files)?;
        let peer = build_peer(&files)?;
        let controller = build_controller(&files)?;
        let principal_rules = parse_rules(principal_rules)?;
        Ok(Tls {
            files,
            current: Mutex::new(config),
            peer: Mutex::new(peer),
            controller: Mutex::new(controller),
            generation: AtomicU64::new(0),
            principal_rules,
        })
    }

    /// The config a new connection on this shard uses.
    pub fn config(&self, cache: &ShardTls) -> Arc<ServerConfig> {
        let generation = self.generation.load(Ordering::Acquire);
        let mut cache = cache.borrow_mut();
        match &*cache {
            Some((seen, config)) if *seen == generation => config.clone(),
            _ => {
                // Taken once per shard per reload, never per request.
                let config = self.current.lock().unwrap_or_else(|e| e.into_inner()).clone();
                *cache = Some((generation, config.clone()));
                config
            }
        }
    }

    /// The TLS client config for connections to other brokers: their certificates
    /// checked against the trust store, this node's own certificate presented. `None`
    /// without `--ssl-truststore-pem`. Taken once per connection, never per request.
    pub fn peer_config(&self) -> Option<Arc<rustls::ClientConfig>> {
        self.peer.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The server config of the controller listener when it is SSL: the other
    /// nodes prove themselves with certificates the trust store signed. `None`
    /// without `--ssl-truststore-pem`.
    pub fn controller_config(&self) -> Option<Arc<ServerConfig>> {
        self.controller.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Rebuilds the config now (the files changed); the last good one stays on
    /// failure.
    ///
    /// # Errors
    /// Why the new files could not be used.
    pub fn reload(&self) -> Result<(), String> {
        let config = build(&self.files)?;
        let peer = build_peer(&self.files)?;
        let controller = build_controller(&self.files)?;
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = config;
        *self.peer.lock().unwrap_or_else(|e| e.into_inner()) = peer;
        *self.controller.lock().unwrap_or_else(|e| e.into_inner()) = controller;
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Reloads whenever a file's modification time changes; runs on its own thread
    /// (file metadata is a blocking call) until `stop` is set.
    pub fn watch(&self, stop: &std::sync::atomic::AtomicBool) {
        let paths: Vec<PathBuf> =
            [Some(self.files.certificates.clone()), Some(self.files.key.clone()), self.files.trust.clone()]
                .into_iter()
                .flatten()
                .collect();
        let stamp = |paths: &[PathBuf]| -> Vec<Option<SystemTime>> {
            paths.iter().map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok()).collect()
        };
        let mut seen = stamp(&paths);
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(TLS_RELOAD_INTERVAL);
            let now = stamp(&paths);
            if now == seen {
                continue;
            }
            seen = now;
            match self.reload() {
                Ok(()) => tracing::info!(target: "skein::net", "TLS certificates reloaded"),
                Err(e) => {
                    tracing::warn!(target: "skein::net", error = %e, "TLS certificates changed but do not load; the previous ones stay in use")
                }
            }
        }
    }

    /// The principal name of a client presenting `certificate` (its leaf, DER).
    pub fn principal_of(&self, certificate: &[u8]) -> Option<String> {
        let (_, parsed) = x509_parser::parse_x509_certificate(certificate).ok()?;
        let subject = rfc2253(parsed.subject());
        Some(map_principal(&self.principal_rules, &subject))
    }
}

fn build(files: &TlsFiles) -> Result<Arc<ServerConfig>, String> {
    let certificates = read_certificates(&files.certificates, "--ssl-keystore-pem")?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("--ssl-key-pem {}: no usable private key: {e}", files.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match (files.client_auth, &files.trust) {
        (ClientAuth::None, _) => builder.with_no_client_auth(),
        (_, None) => return Err("--ssl-client-auth required or requested needs --ssl-truststore-pem".into()),
        (auth, Some(trust)) => {
            let roots = root_store(trust, "--ssl-truststore-pem")?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match auth {
                ClientAuth::Requested => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| format!("--ssl-truststore-pem: {e}"))?)
        }
    };
    let config =
        builder.with_single_cert(certificates, key).map_err(|e| format!("the TLS certificate and key: {e}"))?;
    Ok(Arc::new(config))
}

/// The controller listener's server config: as the brokers', with client
/// certificates required.
fn build_controller(files: &TlsFiles) -> Result<Option<Arc<ServerConfig>>, String> {
    match files.trust {
        None => Ok(None),
        Some(_) => build(&TlsFiles { client_auth: ClientAuth::Required, ..files.clone() }).map(Some),
    }
}

/// The client config of a broker reaching another: the trust store's CAs, and the
/// node's certificate and key as its client certificate.
fn build_peer(files: &TlsFiles) -> Result<Option<Arc<rustls::ClientConfig>>, String> {
    let Some(trust) = &files.trust else { return Ok(None) };
    let roots = root_store(trust, "--ssl-truststore-pem")?;
    let certificates = read_certificates(&files.certificates, "--ssl-keystore-pem")?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("--ssl-key-pem {}: no usable private key: {e}", files.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS client: {e}"))?
        .with_root_certificates(roots)
        .with_client_auth_cert(certificates, key)
        .map_err(|e| format!("the TLS certificate and key as a client's: {e}"))?;
    Ok(Some(Arc::new(config)))
}

/// A TLS client config that trusts only the CA certificates of PEM file `ca` (given
/// with `flag`), for a client of a private endpoint (the JWKS fetcher's).
///
/// # Errors
/// A message naming the flag when the file holds no usable CA certificate.
pub fn client_config(ca: &Path, flag: &str) -> Result<Arc<rustls::ClientConfig>, String> {
    let roots = root_store(ca, flag)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS client: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The CA certificates of PEM file `path`, given with `flag`, as a root store.
fn root_store(path: &Path, flag: &str) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in read_certificates(path, flag)? {
        roots.add(certificate).map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    }
    Ok(roots)
}

/// The certificates of PEM file `path`, given with `flag`; errors name both.
fn read_certificates(path: &Path, flag: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read {flag} {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    if certificates.is_empty() {
        return Err(format!("{flag} {} holds no certificate", path.display()));
    }
    Ok(certificates)
}

/// A name in RFC 2253's form, most significant RDN last, as Java writes it.
fn rfc2253(name: &x509_parser::x509::X509Name<'_>) -> String {
    let mut rdns: Vec<_> = name.iter_rdn().collect();
    rdns.reverse();
    let rdns: Vec<String> = rdns
        .into_iter()
        .map(|rdn| {
            let attributes: Vec<String> = rdn
                .iter()
                .map(|attribute| {
                    let oid = attribute.attr_type().to_id_string();
                    let keyword = match oid.as_str() {
                        "2.5.4.3" => Some("CN"),
                        "2.5.4.6" => Some("C"),
                        "2.5.4.7" => Some("L"),
                        "2.5.4.8" => Some("ST"),
                        "2.5.4.9" => Some("STREET"),
                        "2.5.4.10" => Some("O"),
                        "2.5.4.11" => Some("OU"),
                        "0.9.2342.19200300.100.1.1" => Some("UID"),
                        "0.9.2342.19200300.100.1.25" => Some("DC"),
                        _ => None,
                    };
                    match (keyword, attribute.as_str()) {
                        (Some(keyword), Ok(value)) => format!("{keyword}={}", escape(value)),
                        _ => {
                            let value = attribute.attr_value();
                            let mut der = vec![value.header.tag().0 as u8];
                            let data = value.data;
                            if data.len() < 128 {
                                der.push(data.len() as u8);
                            } else {
                                let len = (data.len() as u32).to_be_bytes();
                                let skip = len.iter().take_while(|b| **b == 0).count();
                                der.push(0x80 | (4 - skip) as u8);
                                der.extend_from_slice(&len[skip..]);
                            }
                            der.extend_from_slice(data);
                            let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
                            format!("{oid}=#{hex}")
                        }
                    }
                })
                .collect();
            attributes.join("+")
        })
        .collect();
    rdns.join(",")
}

fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// One of Kafka's `ssl.principal.mapping.rules`.
#[derive(Debug)]
enum PrincipalRule {
    Default,
    Rule { pattern: regex::Regex, replacement: String, case: Option<char> },
}

/// Parses `ssl.principal.mapping.rules`: `DEFAULT` or `RULE:pattern/replacement/`
/// with an optional `L` or `U` after the last slash, comma-separated.
fn parse_rules(text: &str) -> Result<Vec<PrincipalRule>, String> {
    let mut rules = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("DEFAULT") {
            rules.push(PrincipalRule::Default);
            rest = after.trim_start_matches([',', ' ']);
            continue;
        }
        let bad = || {
            format!(
                "invalid --ssl-principal-mapping-rules at {rest:?}: expected DEFAULT or RULE:pattern/replacement/[LU]"
            )
        };
        let body = rest.strip_prefix("RULE:").ok_or_else(bad)?;
        let slash = body.find('/').ok_or_else(bad)?;
        let pattern = &body[..slash];
        let after = &body[slash + 1..];
        let slash = after.find('/').ok_or_else(bad)?;
        let replacement = after[..slash].to_string();
        let mut tail = &after[slash + 1..];
        let case = match tail.chars().next() {
            Some(c @ ('L' | 'U')) => {
                tail = &tail[1..];
                Some(c)
            }
            _ => None,
        };
        let pattern = regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| format!("{}: {e}", bad()))?;
        rules.push(PrincipalRule::Rule { pattern, replacement, case });
        rest = tail.trim_start_matches([',', ' ']);
    }
    if rules.is_empty() {
        rules.push(PrincipalRule::Default);
    }
    Ok(rules)
}

/// The first rule that matches `subject` names the principal; DEFAULT is the subject.
fn map_principal(rules: &[PrincipalRule], subject: &str) -> String {
    for rule in rules {
        match rule {
            PrincipalRule::Default => return subject.to_string(),
            PrincipalRule::Rule { pattern, replacement, case } => {
                if pattern.is_match(subject) {
                    let mapped = pattern.replace(subject, replacement.as_str()).into_owned();
                    return match case {
                        Some('L') => mapped.to_lowercase(),
                        Some('U') => mapped.to_uppercase(),
                        _ => mapped,
                    };
                }
            }
        }
    }
    subject.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Kafka's mapping rules: the first match wins, DEFAULT is the whole subject.
    #[test]
    fn principal_mapping_rules() {
        let rules = parse_rules("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,DEFAULT").unwrap();
        assert_eq!(map_principal(&rules, "CN=Kafka-Client,OU=ServiceUsers,O=Org"), "kafka-client");
        assert_eq!(map_principal(&rules, "CN=admin,O=Org"), "CN=admin,O=Org");
        assert_eq!(map_principal(&parse_rules("").unwrap(), "CN=a"), "CN=a");
        assert!(parse_rules("RULE:nope").is_err());
        assert!(parse_rules("SOMETHING").is_err());
    }

    // A generated certificate's subject reads as Java's X500Principal writes it.
    #[test]
    fn subjects_in_rfc2253_form() {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
        let mut name = rcgen::DistinguishedName::new();
        name.push(rcgen::DnType::CountryName, "US");
        name.push(rcgen::DnType::OrganizationName, "Acme, Inc");
        name.push(rcgen::DnType::CommonName, "client-1");
        params.distinguished_name = name;
        let key = rcgen::KeyPair::generate().unwrap();
        let certificate = params.self_signed(&key).unwrap();
        let (_, parsed) = x509_parser::parse_x509_certificate(certificate.der()).unwrap();
        assert_eq!(rfc2253(parsed.subject()), "CN=client-1,O=Acme\\, Inc,C=US");
    }
}
