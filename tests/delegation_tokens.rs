//! Delegation tokens (KIP-48) with real clients: the Java client (4.4) creates,
//! describes, renews and expires tokens and authenticates with one (SCRAM with
//! `tokenauth=true`); Kafka 4.4's `kafka-delegation-tokens` tool does the same from
//! the command line; tokens survive a restart and the controller's sweep removes
//! expired ones; a plaintext connection, and a node without
//! `--delegation-token-secret-key`, are refused with Kafka's codes.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{broker_port, kafka_share, Broker, RawClient};
use kafka_protocol::messages::*;

const TOOL: &str = "org.apache.kafka.tools.DelegationTokenCommand";

/// A node with a SASL_PLAINTEXT listener (SCRAM-SHA-512) beside the harness's
/// PLAINTEXT one, SCRAM user `admin` staged before it starts, and `extra` flags.
/// Returns the node and its SASL port.
fn node(dir: &Path, extra: &[&str]) -> (Broker, u16) {
    let data = dir.join("data");
    let staged = Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["user", "add", "admin", "--mechanism", "SCRAM-SHA-512", "--password", "admin-pw", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(staged.status.success(), "{}", String::from_utf8_lossy(&staged.stderr));
    let sasl = broker_port();
    let listeners = format!("SASL_PLAINTEXT://127.0.0.1:{sasl}");
    let mut flags = vec!["--listeners", &listeners, "--sasl-enabled-mechanisms", "SCRAM-SHA-512"];
    flags.extend(extra);
    (Broker::start(dir, "1", &flags), sasl)
}

/// The admin's client properties, written under `dir`.
fn admin_config(dir: &Path) -> String {
    let path = dir.join("admin.properties");
    std::fs::write(
        &path,
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n\
         sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
         username=\"admin\" password=\"admin-pw\";\n",
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

/// kafka-delegation-tokens with `args` against `port`, as the admin.
fn tool(port: u16, config: &str, args: &[&str]) -> (bool, String) {
    let bootstrap = format!("127.0.0.1:{port}");
    kafka_share(TOOL, &[&["--bootstrap-server", &bootstrap, "--command-config", config], args].concat())
}

fn tool_ok(port: u16, config: &str, args: &[&str]) -> String {
    let (success, out) = tool(port, config, args);
    assert!(success, "kafka-delegation-tokens {args:?} failed:\n{out}");
    out
}

/// The token id and HMAC the tool's `--create` printed: the row whose second column
/// is an HMAC-SHA512 in base64 (88 characters).
fn created(out: &str) -> (String, String) {
    let fields = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() >= 2 && f[1].len() == 88)
        .unwrap_or_else(|| panic!("no token row in:\n{out}"));
    (fields[0].to_string(), fields[1].to_string())
}

// The Java client's whole token life cycle on one node: created by the owner with a
// renewer, described with its HMAC, used to produce and consume as its owner,
// refused a token of its own, renewed, expired, and refused once expired.
#[test]
fn java_clients_create_use_renew_and_expire_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, sasl) = node(dir.path(), &["--delegation-token-secret-key", "cluster-secret"]);
    let config = admin_config(dir.path());
    let started = Instant::now();
    let output = Command::new("java")
        .args(["-XX:TieredStopAtLevel=1", "-cp"])
        .arg(common::kafka_share_classpath())
        .arg(format!("{}/tests/java/Tokens.java", env!("CARGO_MANIFEST_DIR")))
        .args([&format!("127.0.0.1:{sasl}"), config.as_str(), "token-topic"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "Tokens.java failed after {:?}:\n{out}\n{err}", started.elapsed());
    assert!(out.contains("owner=User:admin requester=User:admin renewers=[User:bob]"), "{out}");
    assert!(out.contains("DESCRIBED 1"), "{out}");
    assert!(out.contains("TOKEN RECORDS 50"), "{out}");
    assert!(out.contains("TOKEN CREATE REFUSED UnsupportedByAuthenticationException"), "{out}");
    assert!(out.contains("RENEWED"), "{out}");
    assert!(out.contains("UNKNOWN RENEW REFUSED DelegationTokenNotFoundException"), "{out}");
    assert!(out.contains("EXPIRED\n"), "{out}");
    assert!(out.contains("EXPIRED TOKEN REFUSED SaslAuthenticationException"), "{out}");
    // The token's sessions and the refused one are counted.
    assert!(broker.metric_sum("skein_sasl_authentication_failures_total") >= 1);
}

// kafka-delegation-tokens creates, describes, renews and expires tokens; tokens
// survive a restart; the sweep removes one past its lifetime; a node without a
// secret key answers DELEGATION_TOKEN_AUTH_DISABLED, and a plaintext connection
// DELEGATION_TOKEN_REQUEST_NOT_ALLOWED.
#[test]
fn the_tool_manages_tokens_that_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--delegation-token-secret-key", "cluster-secret", "--delegation-token-expiry-check-interval-ms", "200"];
    let (mut broker, sasl) = node(dir.path(), &flags);
    let config = admin_config(dir.path());
    let out = tool_ok(sasl, &config, &["--create", "--max-life-time-period", "-1", "--renewer-principal", "User:bob"]);
    let (id, hmac) = created(&out);
    // Without --owner-principal, Kafka 4.4's tool sends an empty owner list, which
    // Kafka's broker (and Skein) answer with no tokens: the owner is named.
    let none = tool_ok(sasl, &config, &["--describe"]);
    assert!(none.contains("Total number of tokens : 0"), "{none}");
    let describe = ["--describe", "--owner-principal", "User:admin"];
    let described = tool_ok(sasl, &config, &describe);
    assert!(described.contains(&id) && described.contains("User:bob"), "{described}");
    let renewed = tool_ok(sasl, &config, &["--renew", "--hmac", &hmac, "--renew-time-period", "-1"]);
    assert!(renewed.contains("Completed renew operation"), "{renewed}");

    // A token that lives half a second, removed by the controller's sweep.
    let out = tool_ok(sasl, &config, &["--create", "--max-life-time-period", "500"]);
    let (short, _) = created(&out);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let described = tool_ok(sasl, &config, &describe);
        if !described.contains(&short) {
            assert!(described.contains(&id), "the long-lived token stays: {described}");
            break;
        }
        assert!(Instant::now() < deadline, "the expired token was never removed:\n{described}");
        std::thread::sleep(Duration::from_millis(300));
    }

    // On a plaintext connection the APIs are refused, as Kafka refuses them.
    let mut client = RawClient::connect(&broker.bootstrap());
    let create = CreateDelegationTokenRequest::default().with_max_lifetime_ms(-1);
    let response = client.call(&create, 3);
    assert_eq!(response.error_code, 64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED");
    assert_eq!(response.principal_name.as_str(), "ANONYMOUS");
    let response = client.call(&DescribeDelegationTokenRequest::default(), 3);
    assert_eq!((response.error_code, response.tokens.len()), (64, 0));
    let renew = RenewDelegationTokenRequest::default().with_hmac(bytes::Bytes::from(vec![1u8; 64]));
    let response = client.call(&renew, 2);
    assert_eq!((response.error_code, response.expiry_timestamp_ms), (64, -1));

    // The token is in the metadata log: a restart keeps it, with its HMAC.
    broker.stop();
    broker.restart();
    let described = tool_ok(sasl, &config, &describe);
    assert!(described.contains(&id) && described.contains(&hmac), "{described}");
    let expired = tool_ok(sasl, &config, &["--expire", "--hmac", &hmac, "--expiry-time-period", "-1"]);
    assert!(expired.contains("Completed expire operation"), "{expired}");
    assert!(!tool_ok(sasl, &config, &describe).contains(&id));
    drop(broker);

    // Without a secret key, tokens are off.
    let other = tempfile::tempdir().unwrap();
    let (plain, sasl) = node(other.path(), &[]);
    let config = admin_config(other.path());
    let (success, out) = tool(sasl, &config, &["--create", "--max-life-time-period", "-1"]);
    assert!(!success && out.contains("DelegationTokenDisabledException"), "{out}");
    drop(plain);
}
