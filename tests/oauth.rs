//! SASL/OAUTHBEARER with signed tokens (`--sasl-oauthbearer-jwks-endpoint-url`):
//! librdkafka (the rdkafka crate) authenticates with ES256 tokens the test signs,
//! their key served by the test as a JWKS over HTTP; a token signed by another key,
//! one for another audience and an unsecured one are refused.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{broker_port, Broker};
use rdkafka::client::OAuthToken;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientContext, Message};
use skein_control::security::jwks::testing::Signer;

/// Serves `body` as JSON to every HTTP request on a port of its own, forever (the
/// thread ends with the test process).
fn serve_jwks(body: String) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    port
}

/// A client context that hands librdkafka a token from `make`.
struct Tokens {
    make: Box<dyn Fn() -> String + Send + Sync>,
}

impl ClientContext for Tokens {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;
    fn generate_oauth_token(&self, _config: Option<&str>) -> Result<OAuthToken, Box<dyn std::error::Error>> {
        let lifetime_ms = now_s() as i64 * 1000 + 60_000;
        Ok(OAuthToken { token: (self.make)(), principal_name: "svc".into(), lifetime_ms })
    }
}

impl ProducerContext for Tokens {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::message::DeliveryResult<'_>, _: ()) {}
}

impl ConsumerContext for Tokens {}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn config(port: u16) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", format!("127.0.0.1:{port}"))
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanism", "OAUTHBEARER");
    config
}

// Signed tokens authenticate a producer and a consumer; other keys, audiences and
// unsecured tokens do not.
#[test]
fn signed_tokens_from_a_jwks() {
    let signer = std::sync::Arc::new(Signer::new("test-key"));
    let jwks = serve_jwks(signer.jwks());
    let dir = tempfile::tempdir().unwrap();
    let port = broker_port();
    let listeners = format!("SASL_PLAINTEXT://127.0.0.1:{port}");
    let url = format!("http://127.0.0.1:{jwks}/jwks");
    let broker = Broker::start(
        dir.path(),
        "1",
        &[
            "--listeners",
            &listeners,
            "--sasl-enabled-mechanisms",
            "OAUTHBEARER",
            "--sasl-oauthbearer-jwks-endpoint-url",
            &url,
            "--sasl-oauthbearer-expected-audience",
            "kafka",
        ],
    );
    common::create_topic(&broker, "oauth", 1);
    let good = {
        let signer = signer.clone();
        move || signer.token(&format!(r#"{{"sub":"svc","aud":"kafka","iat":{},"exp":{}}}"#, now_s(), now_s() + 60))
    };
    let producer: BaseProducer<Tokens> =
        config(port).create_with_context(Tokens { make: Box::new(good.clone()) }).unwrap();
    for i in 0..10 {
        let value = format!("signed-{i}");
        producer.send(BaseRecord::to("oauth").payload(&value).key("k")).unwrap();
    }
    producer.flush(Duration::from_secs(20)).expect("the signed producer is acknowledged");
    let consumer: BaseConsumer<Tokens> = config(port)
        .set("group.id", "oauth-readers")
        .set("auto.offset.reset", "earliest")
        .create_with_context(Tokens { make: Box::new(good) })
        .unwrap();
    consumer.subscribe(&["oauth"]).unwrap();
    let mut read = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while read.len() < 10 && std::time::Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            read.push(String::from_utf8_lossy(message.payload().unwrap_or_default()).to_string());
        }
    }
    assert_eq!(read, (0..10).map(|i| format!("signed-{i}")).collect::<Vec<_>>());
    // Refused: another key, another audience, an unsecured token.
    let stranger = std::sync::Arc::new(Signer::new("test-key"));
    let e = |s: &str| base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, s);
    let unsecured = format!(
        "{}.{}.",
        e(r#"{"alg":"none"}"#),
        e(&format!(r#"{{"sub":"svc","aud":"kafka","exp":{}}}"#, now_s() + 60))
    );
    type Token = Box<dyn Fn() -> String + Send + Sync>;
    let refused: Vec<(&str, Token)> = vec![
        ("another key", {
            let stranger = stranger.clone();
            Box::new(move || stranger.token(&format!(r#"{{"sub":"svc","aud":"kafka","exp":{}}}"#, now_s() + 60)))
        }),
        ("another audience", {
            let signer = signer.clone();
            Box::new(move || signer.token(&format!(r#"{{"sub":"svc","aud":"other","exp":{}}}"#, now_s() + 60)))
        }),
        ("unsecured", Box::new(move || unsecured.clone())),
    ];
    let failures_before = broker.metric_sum("skein_sasl_authentication_failures_total");
    for (what, make) in refused {
        let producer: BaseProducer<Tokens> = config(port).create_with_context(Tokens { make }).unwrap();
        // The token callback runs from poll: poll, then ask for metadata.
        for _ in 0..10 {
            producer.poll(Duration::from_millis(100));
        }
        let metadata = producer.client().fetch_metadata(Some("oauth"), Duration::from_secs(2));
        assert!(metadata.is_err(), "{what}: a refused token must not authenticate");
    }
    let failures = broker.metric_sum("skein_sasl_authentication_failures_total") - failures_before;
    assert!(
        failures >= 3,
        "{failures} failures counted: {}",
        broker.log().lines().filter(|l| l.contains("OAUTH") || l.contains("SASL")).collect::<Vec<_>>().join("\n")
    );
}

// The JWKS served over https (openssl's s_server, its certificate from a CA the test
// makes, given with --sasl-oauthbearer-jwks-endpoint-ca-pem): a signed token
// authenticates; the endpoint's certificate is checked.
#[test]
fn jwks_over_https() {
    let dir = tempfile::tempdir().unwrap();
    let signer = std::sync::Arc::new(Signer::new("https-key"));
    std::fs::write(dir.path().join("jwks.json"), signer.jwks()).unwrap();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "jwks CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let server =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().signed_by(&key, &ca, &ca_key).unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.path().join("server.pem"), server.pem()).unwrap();
    std::fs::write(dir.path().join("server.key"), key.serialize_pem()).unwrap();
    let https = common::free_port();
    let mut s_server = std::process::Command::new("openssl")
        .args([
            "s_server",
            "-quiet",
            "-WWW",
            "-accept",
            &https.to_string(),
            "-cert",
            "server.pem",
            "-key",
            "server.key",
        ])
        .current_dir(dir.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("openssl s_server");
    let port = broker_port();
    let listeners = format!("SASL_PLAINTEXT://127.0.0.1:{port}");
    let url = format!("https://127.0.0.1:{https}/jwks.json");
    let ca_path = dir.path().join("ca.pem");
    let broker = Broker::start(
        dir.path(),
        "1",
        &[
            "--listeners",
            &listeners,
            "--sasl-enabled-mechanisms",
            "OAUTHBEARER",
            "--sasl-oauthbearer-jwks-endpoint-url",
            &url,
            "--sasl-oauthbearer-jwks-endpoint-ca-pem",
            ca_path.to_str().unwrap(),
        ],
    );
    let make = move || signer.token(&format!(r#"{{"sub":"svc","exp":{}}}"#, now_s() + 60));
    let producer: BaseProducer<Tokens> = config(port).create_with_context(Tokens { make: Box::new(make) }).unwrap();
    let mut metadata = Err(rdkafka::error::KafkaError::Canceled);
    for _ in 0..20 {
        producer.poll(Duration::from_millis(100));
        metadata = producer.client().fetch_metadata(None, Duration::from_secs(1));
        if metadata.is_ok() {
            break;
        }
    }
    assert!(metadata.is_ok(), "a token signed by the https JWKS's key authenticates: {}", broker.log());
    // Without the CA, the endpoint's certificate is not trusted: no key set, no login.
    let untrusting_dir = tempfile::tempdir().unwrap();
    let other = broker_port();
    let listeners = format!("SASL_PLAINTEXT://127.0.0.1:{other}");
    let untrusting = Broker::start(
        untrusting_dir.path(),
        "1",
        &[
            "--listeners",
            &listeners,
            "--sasl-enabled-mechanisms",
            "OAUTHBEARER",
            "--sasl-oauthbearer-jwks-endpoint-url",
            &url,
        ],
    );
    let signer = Signer::new("https-key");
    let make = move || signer.token(&format!(r#"{{"sub":"svc","exp":{}}}"#, now_s() + 60));
    let producer: BaseProducer<Tokens> = config(other).create_with_context(Tokens { make: Box::new(make) }).unwrap();
    for _ in 0..10 {
        producer.poll(Duration::from_millis(100));
    }
    assert!(producer.client().fetch_metadata(None, Duration::from_secs(2)).is_err());
    let _ = s_server.kill();
    let _ = s_server.wait();
    assert!(untrusting.log().contains("JWKS fetch failed"), "{}", untrusting.log());
}
