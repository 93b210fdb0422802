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
use kafka_protocol::protocol::StrBytes;
use skein_control::security::acl::{Operation, PatternType, Permission, ResourceType};

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
    let flags =
        ["--delegation-token-secret-key", "cluster-secret", "--delegation-token-expiry-check-interval-ms", "200"];
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

/// A connection to `port` authenticated with PLAIN as `user` (password
/// `USER-secret`).
fn login(port: u16, user: &str) -> RawClient {
    let mut client = RawClient::connect(&format!("127.0.0.1:{port}"));
    let handshake = client.call(&SaslHandshakeRequest::default().with_mechanism(s("PLAIN")), 1);
    assert_eq!(handshake.error_code, 0);
    let token = format!("\0{user}\0{user}-secret");
    let answer = client.call(&SaslAuthenticateRequest::default().with_auth_bytes(bytes::Bytes::from(token)), 2);
    assert_eq!(answer.error_code, 0, "{user} authenticates");
    client
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// Allows `principal` `operation` on the resource (as the super user `admin`).
fn allow(admin: &mut RawClient, principal: &str, kind: ResourceType, name: &str, operation: Operation) {
    let creation = create_acls_request::AclCreation::default()
        .with_resource_type(kind.code())
        .with_resource_name(s(name))
        .with_resource_pattern_type(PatternType::Literal.code())
        .with_principal(s(principal))
        .with_host(s("*"))
        .with_operation(operation.code())
        .with_permission_type(Permission::Allow.code());
    let response = admin.call(&CreateAclsRequest::default().with_creations(vec![creation]), 3);
    assert_eq!(response.results[0].error_code, 0, "{response:?}");
}

fn create(client: &mut RawClient, version: i16, owner: Option<&str>, renewer: &str) -> CreateDelegationTokenResponse {
    let renewer = create_delegation_token_request::CreatableRenewers::default()
        .with_principal_type(s("User"))
        .with_principal_name(s(renewer));
    let mut request = CreateDelegationTokenRequest::default().with_renewers(vec![renewer]).with_max_lifetime_ms(-1);
    if let Some(owner) = owner {
        request = request.with_owner_principal_type(Some(s("User"))).with_owner_principal_name(Some(s(owner)));
    }
    client.call(&request, version)
}

fn describe_ids(client: &mut RawClient, version: i16, owners: Option<&[&str]>) -> Vec<String> {
    let owners = owners.map(|owners| {
        let owner = |name: &&str| {
            describe_delegation_token_request::DescribeDelegationTokenOwner::default()
                .with_principal_type(s("User"))
                .with_principal_name(s(name))
        };
        owners.iter().map(owner).collect()
    });
    let response = client.call(&DescribeDelegationTokenRequest::default().with_owners(owners), version);
    assert_eq!(response.error_code, 0, "{response:?}");
    response.tokens.iter().map(|t| t.token_id.to_string()).collect()
}

// Every advertised version of the four APIs with realistic requests, and the ACLs
// Kafka checks: CREATE_TOKENS on another owner, DESCRIBE on a token or
// DESCRIBE_TOKENS on its owner to see another's token, and only an owner or renewer
// may renew or expire one.
#[test]
fn every_version_with_the_acls_kafka_checks() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("plain-users");
    std::fs::write(&users, "admin:admin-secret\nalice:alice-secret\nbob:bob-secret\ncarol:carol-secret\n").unwrap();
    let port = broker_port();
    let listeners = format!("SASL_PLAINTEXT://127.0.0.1:{port}");
    let broker = Broker::start(
        dir.path(),
        "1",
        &[
            "--listeners",
            &listeners,
            "--sasl-plain-users",
            users.to_str().unwrap(),
            "--sasl-enabled-mechanisms",
            "PLAIN,SCRAM-SHA-512",
            "--authorizer",
            "standard",
            "--super-users",
            "User:admin",
            "--delegation-token-secret-key",
            "k",
        ],
    );
    let (mut admin, mut alice, mut carol) = (login(port, "admin"), login(port, "alice"), login(port, "carol"));
    let ranges = |key: ApiKey| skein_net::registry::versions(key).unwrap();
    for v in ranges(ApiKey::CreateDelegationToken).min..=ranges(ApiKey::CreateDelegationToken).max {
        // alice's own token, renewable by carol.
        let own = create(&mut alice, v, None, "carol");
        assert_eq!((own.error_code, own.principal_name.as_str()), (0, "alice"), "v{v}: {own:?}");
        assert_eq!((own.hmac.len(), own.token_id.len()), (64, 22), "v{v}");
        assert!(own.issue_timestamp_ms < own.expiry_timestamp_ms && own.expiry_timestamp_ms < own.max_timestamp_ms);
        if v >= 3 {
            // A token for bob needs CREATE_TOKENS on User:bob.
            let refused = create(&mut alice, v, Some("bob"), "carol");
            assert_eq!((refused.error_code, refused.principal_name.as_str()), (65, "bob"), "{refused:?}");
            assert_eq!(refused.token_requester_principal_name.as_str(), "alice");
        }
    }
    allow(&mut admin, "User:alice", ResourceType::User, "User:bob", Operation::CreateTokens);
    let bobs = create(&mut alice, 3, Some("bob"), "dave");
    assert_eq!((bobs.error_code, bobs.principal_name.as_str()), (0, "bob"), "{bobs:?}");
    let bobs_id = bobs.token_id.to_string();
    // A renewer of another type is refused.
    let mut odd = CreateDelegationTokenRequest::default().with_renewers(vec![
        create_delegation_token_request::CreatableRenewers::default()
            .with_principal_type(s("Group"))
            .with_principal_name(s("g")),
    ]);
    odd.max_lifetime_ms = -1;
    assert_eq!(alice.call(&odd, 3).error_code, 67, "INVALID_PRINCIPAL_TYPE");

    for v in ranges(ApiKey::DescribeDelegationToken).min..=ranges(ApiKey::DescribeDelegationToken).max {
        // alice sees her three tokens; carol the three she may renew; bob's only with ACLs.
        let mine = describe_ids(&mut alice, v, None);
        assert_eq!(mine.len(), 3, "v{v}: alice's own, not bob's: {mine:?}");
        assert_eq!(describe_ids(&mut carol, v, None).len(), 3, "v{v}: carol renews alice's");
        assert_eq!(describe_ids(&mut carol, v, Some(&["bob"])), Vec::<String>::new(), "v{v}");
        assert_eq!(describe_ids(&mut admin, v, Some(&[])), Vec::<String>::new(), "an empty owner list, v{v}");
        assert_eq!(describe_ids(&mut admin, v, None).len(), 4, "the super user sees all, v{v}");
    }
    let second = create(&mut alice, 3, Some("bob"), "dave").token_id.to_string();
    allow(&mut admin, "User:carol", ResourceType::DelegationToken, &bobs_id, Operation::Describe);
    assert_eq!(describe_ids(&mut carol, 3, Some(&["bob"])), vec![bobs_id.clone()], "DESCRIBE on one token");
    allow(&mut admin, "User:carol", ResourceType::User, "User:bob", Operation::DescribeTokens);
    let mut seen = describe_ids(&mut carol, 3, Some(&["dave"]));
    seen.sort();
    let mut want = vec![bobs_id, second];
    want.sort();
    assert_eq!(seen, want, "DESCRIBE_TOKENS on their owner, asked by their renewer dave");

    // Renew and expire: at each version, by the renewer carol and the owner; a
    // stranger (even the super user: ownership is not an ACL) gets OWNER_MISMATCH.
    let own = create(&mut alice, 3, None, "carol");
    let hmac = own.hmac.clone();
    // A renewal is at most delegation.token.expiry.time.ms (1 day) whatever it asks.
    let long = RenewDelegationTokenRequest::default().with_hmac(hmac.clone()).with_renew_period_ms(5 * 86_400_000);
    let renewed = carol.call(&long, 2);
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    assert!(renewed.expiry_timestamp_ms <= now_ms + 86_400_000, "{renewed:?}");
    for v in ranges(ApiKey::RenewDelegationToken).min..=ranges(ApiKey::RenewDelegationToken).max {
        let renew = RenewDelegationTokenRequest::default().with_hmac(hmac.clone()).with_renew_period_ms(3_600_000);
        let renewed = carol.call(&renew, v);
        assert_eq!(renewed.error_code, 0, "v{v}: {renewed:?}");
        assert!(renewed.expiry_timestamp_ms <= own.max_timestamp_ms);
        let stranger = admin.call(&renew, v);
        assert_eq!((stranger.error_code, stranger.expiry_timestamp_ms), (63, -1), "v{v}: {stranger:?}");
    }
    for v in ranges(ApiKey::ExpireDelegationToken).min..=ranges(ApiKey::ExpireDelegationToken).max {
        let later = ExpireDelegationTokenRequest::default().with_hmac(hmac.clone()).with_expiry_time_period_ms(60_000);
        let expired = alice.call(&later, v);
        assert_eq!(expired.error_code, 0, "v{v}: {expired:?}");
        assert!(expired.expiry_timestamp_ms > own.issue_timestamp_ms);
    }
    let now = ExpireDelegationTokenRequest::default().with_hmac(hmac.clone()).with_expiry_time_period_ms(-1);
    assert_eq!(alice.call(&now, 2).error_code, 0);
    assert_eq!(alice.call(&now, 2).error_code, 62, "DELEGATION_TOKEN_NOT_FOUND once gone");

    // A connection that re-authenticates with a token (KIP-368), as the same owner,
    // may no longer ask for tokens: its session follows the new credential.
    let own = create(&mut alice, 3, None, "carol");
    assert_eq!(own.error_code, 0);
    let handshake = alice.call(&SaslHandshakeRequest::default().with_mechanism(s("SCRAM-SHA-512")), 1);
    assert_eq!(handshake.error_code, 0);
    let bare = format!("n={},r=reauthnonce,tokenauth=true", own.token_id);
    let first = SaslAuthenticateRequest::default().with_auth_bytes(bytes::Bytes::from(format!("n,,{bare}")));
    let server_first = alice.call(&first, 2);
    let server_first = String::from_utf8(server_first.auth_bytes.to_vec()).unwrap();
    use base64::Engine as _;
    let password = base64::engine::general_purpose::STANDARD.encode(&own.hmac);
    let mechanism = skein_control::security::scram::ScramMechanism::Sha512;
    let (last, _) = skein_control::security::scram::client_reply(mechanism, &password, &bare, &server_first).unwrap();
    let reauthenticated = alice.call(&SaslAuthenticateRequest::default().with_auth_bytes(bytes::Bytes::from(last)), 2);
    assert_eq!(reauthenticated.error_code, 0, "{reauthenticated:?}");
    assert_eq!(create(&mut alice, 3, None, "carol").error_code, 64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED");
    drop(broker);
}
