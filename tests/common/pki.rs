//! Certificates made by a test (rcgen), never checked in: a CA, a server certificate
//! for localhost and 127.0.0.1, and a client certificate.

use std::path::{Path, PathBuf};

/// A CA and certificates it signed, as PEM files in `dir`.
pub struct Pki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

pub fn pki(dir: &Path, name: &str) -> Pki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, format!("{name} CA"));
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let signed = |sans: Vec<String>, cn: &str| {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(sans).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        (params.signed_by(&key, &ca, &ca_key).unwrap(), key)
    };
    let (server, server_key) = signed(vec!["localhost".into(), "127.0.0.1".into()], "skein");
    let (client, client_key) = signed(vec![], "client-1");
    let write = |file: &str, text: String| {
        let path = dir.join(format!("{name}-{file}"));
        std::fs::write(&path, text).unwrap();
        path
    };
    Pki {
        ca: write("ca.pem", ca.pem()),
        server_cert: write("server.pem", server.pem()),
        server_key: write("server.key", server_key.serialize_pem()),
        client_cert: write("client.pem", client.pem()),
        client_key: write("client.key", client_key.serialize_pem()),
    }
}
