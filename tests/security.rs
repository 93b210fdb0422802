//! Secured listeners with real clients: Debian's kcat (librdkafka 2.0), kafka-python
//! 2.x and 3.x and kafkajs 2.x over SSL, SASL_PLAINTEXT and SASL_SSL with PLAIN, SCRAM-SHA-256 and
//! SCRAM-SHA-512; SCRAM users staged on a stopped node and added to a running one;
//! Metadata answering with the connected listener's addresses; certificates reloaded
//! without a restart; mTLS; and hostile input on each secured listener (TLS garbage,
//! requests before authentication, SASL out of order, oversized tokens, a replayed
//! SCRAM nonce), each a closed connection that a metric counts. Certificates are made
//! by the test (rcgen), never checked in.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::pki::{pki, Pki};
use common::{broker_port, Broker, RawClient};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

/// Runs `command` with a time limit; its output whatever the exit status.
fn run(mut command: Command, input: Option<&str>) -> Output {
    command.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    if let Some(input) = input {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    let pid = child.id() as i32;
    let (done, output) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    match output.recv_timeout(Duration::from_secs(90)) {
        Ok(result) => result.unwrap(),
        Err(_) => {
            // SAFETY: signalling our own child, still running.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let output = output.recv().unwrap().unwrap();
            panic!("{command:?} did not finish:\n{}", String::from_utf8_lossy(&output.stderr));
        }
    }
}

fn kcat(args: &[&str], input: Option<&str>) -> Output {
    let mut command = Command::new("kcat");
    // cargo's library path would load the rdkafka crate's newer librdkafka into kcat.
    command.env_remove("LD_LIBRARY_PATH").args(args);
    run(command, input)
}

fn ok(output: Output, what: &str) -> String {
    assert!(
        output.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn skein(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_skein"));
    command.args(args);
    run(command, None)
}

/// kcat's `-X` options for a secured connection.
fn secured(protocol: &str, sasl: Option<(&str, &str, &str)>, ca: &Path) -> Vec<String> {
    let mut options = vec!["-X".to_string(), format!("security.protocol={protocol}")];
    if protocol.ends_with("SSL") {
        options.extend(["-X".into(), format!("ssl.ca.location={}", ca.display())]);
    }
    if let Some((mechanism, user, password)) = sasl {
        for option in [
            format!("sasl.mechanisms={mechanism}"),
            format!("sasl.username={user}"),
            format!("sasl.password={password}"),
        ] {
            options.extend(["-X".into(), option]);
        }
    }
    options
}

fn args<'a>(base: &[&'a str], options: &'a [String]) -> Vec<&'a str> {
    base.iter().copied().chain(options.iter().map(String::as_str)).collect()
}

/// A node with SSL, SASL_PLAINTEXT and SASL_SSL listeners beside the harness's
/// PLAINTEXT one, PLAIN users from a file, and `extra` flags. Returns the broker and
/// the three ports.
fn secured_node(dir: &Path, pki: &Pki, extra: &[&str], before_start: impl FnOnce(&Path)) -> (Broker, [u16; 3]) {
    let users = dir.join("plain-users");
    std::fs::write(&users, "# PLAIN users\nbob:bob-secret\n").unwrap();
    before_start(&dir.join("data"));
    let ports = [broker_port(), broker_port(), broker_port()];
    let listeners = format!(
        "SSL://127.0.0.1:{},SASL_PLAINTEXT://127.0.0.1:{},SASL_SSL://127.0.0.1:{}",
        ports[0], ports[1], ports[2]
    );
    let mut flags: Vec<String> = [
        "--listeners",
        &listeners,
        "--ssl-keystore-pem",
        pki.server_cert.to_str().unwrap(),
        "--ssl-key-pem",
        pki.server_key.to_str().unwrap(),
        "--sasl-plain-users",
        users.to_str().unwrap(),
        "--sasl-enabled-mechanisms",
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    (Broker::start(dir, "1", &flags), ports)
}

fn python(venv: &str, script_args: &[&str]) -> Output {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let setup = Command::new("bash").arg(root.join("tests/clients/python/setup.sh")).stdout(Stdio::null()).status();
    assert!(setup.unwrap().success(), "tests/clients/python/setup.sh failed");
    let mut command = Command::new(root.join("target/clients").join(venv).join("bin/python"));
    command.arg(root.join("tests/clients/python/secured.py")).args(script_args);
    run(command, None)
}

// Real clients authenticate with each mechanism over each secured listener, read what
// the others wrote, and are given the brokers at their own listener's address; SCRAM
// users come from a stopped node's staged file and from AlterUserScramCredentials.
#[test]
fn real_clients_over_ssl_and_sasl() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path(), "a");
    let (broker, [ssl, sasl_plain, sasl_ssl]) = secured_node(dir.path(), &pki, &[], |data| {
        let data = data.to_str().unwrap();
        let staged = skein(&[
            "user",
            "add",
            "alice",
            "--mechanism",
            "SCRAM-SHA-512",
            "--password",
            "alice-secret",
            "--data-dir",
            data,
        ]);
        ok(staged, "skein user add --data-dir");
    });
    let added = skein(&[
        "user",
        "add",
        "carol",
        "--mechanism",
        "SCRAM-SHA-256",
        "--password",
        "carol-secret",
        "--bootstrap-server",
        &broker.bootstrap(),
    ]);
    ok(added, "skein user add --bootstrap-server");
    let listed = ok(skein(&["user", "list", "--bootstrap-server", &broker.bootstrap()]), "skein user list");
    assert!(listed.contains("alice\tSCRAM-SHA-512\titerations=4096"), "{listed}");
    assert!(listed.contains("carol\tSCRAM-SHA-256"), "{listed}");

    let at = |port: u16| format!("127.0.0.1:{port}");
    let alice = secured("SASL_SSL", Some(("SCRAM-SHA-512", "alice", "alice-secret")), &pki.ca);
    let input: String = (0..20).map(|i| format!("record-{i}\n")).collect();
    ok(kcat(&args(&["-P", "-b", &at(sasl_ssl), "-t", "secure"], &alice), Some(&input)), "kcat produce over SASL_SSL");
    // Metadata names this node at the SASL_SSL listener's port to a SASL_SSL client.
    let listing = ok(kcat(&args(&["-L", "-b", &at(sasl_ssl)], &alice), None), "kcat -L over SASL_SSL");
    assert!(listing.contains(&format!("127.0.0.1:{sasl_ssl}")), "{listing}");
    assert!(!listing.contains(&format!("127.0.0.1:{}", broker.port)), "{listing}");
    let consumers = [
        ("SSL", ssl, None),
        ("SASL_PLAINTEXT", sasl_plain, Some(("PLAIN", "bob", "bob-secret"))),
        ("SASL_PLAINTEXT", sasl_plain, Some(("SCRAM-SHA-256", "carol", "carol-secret"))),
    ];
    for (protocol, port, sasl) in consumers {
        let options = secured(protocol, sasl, &pki.ca);
        let read = kcat(&args(&["-C", "-b", &at(port), "-t", "secure", "-o", "beginning", "-e", "-q"], &options), None);
        let read = ok(read, &format!("kcat consume over {protocol} {sasl:?}"));
        assert_eq!(read, input, "{protocol} {sasl:?}");
    }
    // A wrong password gets nothing.
    let wrong = secured("SASL_SSL", Some(("SCRAM-SHA-512", "alice", "guess")), &pki.ca);
    let refused = kcat(&args(&["-L", "-b", &at(sasl_ssl), "-m", "5"], &wrong), None);
    assert!(!refused.status.success(), "a wrong password listed metadata");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("uthentication"), "{refused:?}");

    let ca = pki.ca.to_str().unwrap();
    for venv in ["kafka-python-2", "kafka-python-3"] {
        let runs = [
            ("SASL_SSL", sasl_ssl, "SCRAM-SHA-512", "alice", "alice-secret"),
            ("SASL_PLAINTEXT", sasl_plain, "PLAIN", "bob", "bob-secret"),
            ("SSL", ssl, "-", "-", "-"),
        ];
        for (protocol, port, mechanism, user, password) in runs {
            let topic = format!("py-{venv}-{protocol}");
            let output = python(venv, &[&at(port), protocol, mechanism, user, password, ca, &topic]);
            ok(output, &format!("{venv} over {protocol} {mechanism}"));
        }
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let setup = Command::new("bash").arg(root.join("tests/clients/kafkajs/setup.sh")).stdout(Stdio::null()).status();
    assert!(setup.unwrap().success(), "tests/clients/kafkajs/setup.sh failed");
    let runs = [
        ("SASL_SSL", sasl_ssl, "SCRAM-SHA-512", "alice", "alice-secret"),
        ("SASL_PLAINTEXT", sasl_plain, "PLAIN", "bob", "bob-secret"),
        ("SSL", ssl, "-", "-", "-"),
    ];
    for (protocol, port, mechanism, user, password) in runs {
        let mut command = Command::new("node");
        command.arg(root.join("tests/clients/kafkajs/secured.js"));
        command.args([&at(port), protocol, mechanism, user, password, ca, &format!("js-{protocol}")]);
        ok(run(command, None), &format!("kafkajs over {protocol} {mechanism}"));
    }
    assert!(broker.metric_sum("skein_sasl_authentications_total") >= 5);
}

/// Whether the broker closes the connection, whatever it sends first (a TLS alert).
fn closes(client: &mut RawClient) -> bool {
    use std::io::Read;
    let mut buf = [0u8; 4096];
    for _ in 0..16 {
        match client.stream.read(&mut buf) {
            Ok(0) | Err(_) => return true,
            Ok(_) => {}
        }
    }
    false
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// SaslHandshake v1 on `port` for `mechanism`: the connection and the error code.
fn handshake(port: u16, mechanism: &str) -> (RawClient, i16) {
    let mut client = RawClient::connect(&format!("127.0.0.1:{port}"));
    let request = SaslHandshakeRequest::default().with_mechanism(s(mechanism));
    let response = client.call(&request, 1);
    (client, response.error_code)
}

fn token(client: &mut RawClient, bytes: &[u8]) -> SaslAuthenticateResponse {
    let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(bytes));
    client.call(&request, 2)
}

// Hostile input on secured listeners closes the connection and is counted; an
// unknown user and a bad password get the same answer; the node serves on.
#[test]
fn bad_input_on_secured_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path(), "b");
    let (broker, [ssl, sasl_plain, _]) = secured_node(dir.path(), &pki, &[], |_| {});
    let added = skein(&[
        "user",
        "add",
        "alice",
        "--mechanism",
        "SCRAM-SHA-512",
        "--password",
        "pw-alice",
        "--bootstrap-server",
        &broker.bootstrap(),
    ]);
    ok(added, "skein user add");

    // Garbage instead of a TLS ClientHello.
    let mut garbage = RawClient::connect(&format!("127.0.0.1:{ssl}"));
    garbage.send_bytes(&[0x16, 0x03, 0x01, 0xff, 0xff, 0, 0, 0, 0, 0, 1, 2, 3]);
    garbage.send_bytes(&[0u8; 64]);
    assert!(closes(&mut garbage), "TLS garbage kept the connection");

    // A request before authenticating.
    let mut early = RawClient::connect(&format!("127.0.0.1:{sasl_plain}"));
    let frame = early.frame(&MetadataRequest::default(), 12);
    early.send_bytes(&frame);
    assert!(early.is_closed(), "Metadata before SASL was served");

    // SaslAuthenticate before SaslHandshake.
    let mut out_of_order = RawClient::connect(&format!("127.0.0.1:{sasl_plain}"));
    let response = token(&mut out_of_order, b"\0bob\0bob-secret");
    assert_eq!(response.error_code, 34, "ILLEGAL_SASL_STATE");
    assert!(out_of_order.is_closed());

    // An unsupported mechanism.
    let (mut gssapi, code) = handshake(sasl_plain, "GSSAPI");
    assert_eq!(code, 33, "UNSUPPORTED_SASL_MECHANISM");
    assert!(gssapi.is_closed());

    // An oversized frame before authenticating is refused unread.
    let (mut big, code) = handshake(sasl_plain, "PLAIN");
    assert_eq!(code, 0);
    let size = (600u32 << 10).to_be_bytes();
    big.send_bytes(&size);
    assert!(big.is_closed(), "a 600 KiB token before authentication was taken");

    // A bad password and an unknown user: one answer.
    let mut answers = Vec::new();
    for plain in [&b"\0bob\0wrong"[..], b"\0nobody\0bob-secret"] {
        let (mut client, _) = handshake(sasl_plain, "PLAIN");
        let response = token(&mut client, plain);
        answers.push((response.error_code, response.error_message.map(|m| m.to_string())));
        assert!(client.is_closed());
    }
    assert_eq!(answers[0], answers[1]);
    assert_eq!(answers[0].0, 58, "SASL_AUTHENTICATION_FAILED");

    // A SCRAM client-final carrying another exchange's nonce (a replay).
    let (mut first, _) = handshake(sasl_plain, "SCRAM-SHA-512");
    let server_first = token(&mut first, b"n,,n=alice,r=client-nonce-1").auth_bytes;
    let nonce = String::from_utf8(server_first.to_vec()).unwrap();
    let nonce = nonce.split(',').next().unwrap().trim_start_matches("r=").to_string();
    let (mut second, _) = handshake(sasl_plain, "SCRAM-SHA-512");
    token(&mut second, b"n,,n=alice,r=client-nonce-1");
    let replayed = format!("c=biws,r={nonce},p=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=");
    let response = token(&mut second, replayed.as_bytes());
    assert_eq!(response.error_code, 58);
    assert!(second.is_closed(), "a replayed nonce kept the connection");

    // An old client's v0 handshake: the PLAIN token goes as a bare frame and is
    // answered with one; then the connection is served.
    let mut old = RawClient::connect(&format!("127.0.0.1:{sasl_plain}"));
    let response = old.call(&SaslHandshakeRequest::default().with_mechanism(s("PLAIN")), 0);
    assert_eq!(response.error_code, 0);
    let token = b"\0bob\0bob-secret";
    let mut bare = (token.len() as u32).to_be_bytes().to_vec();
    bare.extend_from_slice(token);
    old.send_bytes(&bare);
    assert_eq!(old.read_frame().expect("the bare answer").len(), 0);
    let metadata = old.call(&MetadataRequest::default(), 12);
    assert_eq!(metadata.brokers[0].port, sasl_plain as i32, "Metadata on SASL_PLAINTEXT names its port");

    let deadline = Instant::now() + Duration::from_secs(5);
    while broker.metric_sum("skein_tls_handshake_failures_total") == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(broker.metric_sum("skein_tls_handshake_failures_total") >= 1);
    assert!(broker.metric_sum("skein_unauthenticated_requests_total") >= 1);
    assert!(broker.metric_sum("skein_sasl_authentication_failures_total") >= 5);
    // The node still serves.
    let mut plain = RawClient::connect(&broker.bootstrap());
    let metadata = plain.call(&MetadataRequest::default(), 12);
    assert_eq!(metadata.brokers.len(), 1);
    assert_eq!(metadata.brokers[0].port, broker.port as i32);
}

// New certificates are picked up without a restart, and a required client
// certificate is enforced: kcat without one is refused, with one it is served.
#[test]
fn certificates_reload_and_mtls() {
    let dir = tempfile::tempdir().unwrap();
    let first = pki(dir.path(), "first");
    let trust = first.ca.to_str().unwrap().to_string();
    let (_broker, [ssl, _, _]) =
        secured_node(dir.path(), &first, &["--ssl-client-auth", "required", "--ssl-truststore-pem", &trust], |_| {});
    let at = format!("127.0.0.1:{ssl}");
    let list = |ca: &Path, client: Option<&Pki>| {
        let mut options = secured("SSL", None, ca);
        if let Some(client) = client {
            options.extend(["-X".into(), format!("ssl.certificate.location={}", client.client_cert.display())]);
            options.extend(["-X".into(), format!("ssl.key.location={}", client.client_key.display())]);
        }
        kcat(&args(&["-L", "-b", &at, "-m", "5"], &options), None)
    };
    assert!(!list(&first.ca, None).status.success(), "served without a client certificate");
    ok(list(&first.ca, Some(&first)), "kcat with a client certificate");
    // Rotate the server's certificate to one of a second CA.
    let second = pki(dir.path(), "second");
    std::fs::copy(&second.server_key, &first.server_key).unwrap();
    std::fs::copy(&second.server_cert, &first.server_cert).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if list(&second.ca, Some(&first)).status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "the new certificate was not picked up");
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(!list(&first.ca, Some(&first)).status.success(), "the old certificate is still served");
}

// The newest librdkafka (the rdkafka crate) over SASL_SSL with SCRAM-SHA-256 and
// `connections.max.reauth.ms`: it re-authenticates on its open connections as the
// sessions run out (KIP-368) and every record it sends is acknowledged and read back.
#[test]
fn rdkafka_reauthenticates_on_open_connections() {
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path(), "c");
    let (broker, [_, _, sasl_ssl]) = secured_node(dir.path(), &pki, &["--connections-max-reauth-ms", "1500"], |_| {});
    let added = skein(&[
        "user",
        "add",
        "dana",
        "--mechanism",
        "SCRAM-SHA-256",
        "--password",
        "dana-pw",
        "--bootstrap-server",
        &broker.bootstrap(),
    ]);
    ok(added, "skein user add");
    let config = || {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", format!("127.0.0.1:{sasl_ssl}"))
            .set("security.protocol", "SASL_SSL")
            .set("sasl.mechanisms", "SCRAM-SHA-256")
            .set("sasl.username", "dana")
            .set("sasl.password", "dana-pw")
            .set("ssl.ca.location", pki.ca.to_str().unwrap());
        config
    };
    let producer: BaseProducer = config().set("linger.ms", "5").create().unwrap();
    let before = broker.metric_sum("skein_sasl_authentications_total");
    let started = Instant::now();
    let mut sent = 0;
    while started.elapsed() < Duration::from_secs(6) {
        let payload = format!("reauth-{sent}");
        producer.send(BaseRecord::<(), str>::to("reauth").payload(&payload)).unwrap();
        sent += 1;
        producer.poll(Duration::from_millis(20));
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    // One session at the start, then one per 1.5 s on each open connection.
    let authentications = broker.metric_sum("skein_sasl_authentications_total") - before;
    assert!(authentications >= 4, "{authentications} authentications in 6 s of 1.5 s sessions");
    // On the same connections: a session left to lapse would have been closed at its
    // next request, and counted.
    assert_eq!(broker.metric_sum("skein_unauthenticated_requests_total"), 0, "a session lapsed");
    let consumer: BaseConsumer =
        config().set("group.id", "reauth").set("auto.offset.reset", "earliest").create().unwrap();
    consumer.subscribe(&["reauth"]).unwrap();
    let mut read = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while read < sent && Instant::now() < deadline {
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message.unwrap();
            assert_eq!(message.payload_view::<str>().unwrap().unwrap(), format!("reauth-{read}"));
            read += 1;
        }
    }
    assert_eq!(read, sent, "records read back");
}

/// tests/java/Secured.java against port `port` with the client properties in
/// `config`: what it printed.
fn java_secured(port: u16, config: &Path, topic: &str, new_user: &str) -> String {
    let mut command = Command::new("java");
    command
        .arg("-cp")
        .arg(common::java_classpath())
        .arg(format!("{}/tests/java/Secured.java", env!("CARGO_MANIFEST_DIR")))
        .args([&format!("127.0.0.1:{port}"), config.to_str().unwrap(), topic, new_user]);
    ok(run(command, None), &format!("java Secured with {}", config.display()))
}

// The Java client over SASL_SSL with SCRAM-SHA-512 (a PEM trust store): it adds a
// SCRAM user through Admin.alterUserScramCredentials, lists the users, and produces
// and consumes idempotently; the user it added then authenticates with kcat. Then
// the same over SASL_PLAINTEXT with OAUTHBEARER and the client's unsecured tokens,
// over SSL, and over SASL_PLAINTEXT with PLAIN.
#[test]
fn java_client_over_sasl_ssl() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path(), "d");
    let (broker, ports) = secured_node(dir.path(), &pki, &[], |data| {
        let data = data.to_str().unwrap();
        ok(
            skein(&[
                "user",
                "add",
                "admin",
                "--mechanism",
                "SCRAM-SHA-512",
                "--password",
                "admin-pw",
                "--data-dir",
                data,
            ]),
            "stage",
        );
    });
    let [ssl, sasl_plain, sasl_ssl] = ports;
    let ca = std::fs::read_to_string(&pki.ca).unwrap().replace('\n', "\\n");
    // Runs Secured.java with `properties` as user `new_user`: every user added so far
    // is listed, and its 100 records are read back.
    let java = |port: u16, name: &str, properties: String, new_user: &str, users: &str| {
        let config = dir.path().join(format!("{name}.properties"));
        std::fs::write(&config, properties).unwrap();
        let out = java_secured(port, &config, &format!("java-{name}"), new_user);
        assert!(out.contains(&format!("USERS {users}")), "{out}");
        assert!(out.contains("RECORDS 100"), "{out}");
    };
    let scram = format!(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n\
         sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"admin-pw\";\n\
         ssl.truststore.type=PEM\nssl.truststore.certificates={ca}\n"
    );
    java(sasl_ssl, "secured", scram, "erin", "admin,erin");
    let erin = secured("SASL_PLAINTEXT", Some(("SCRAM-SHA-256", "erin", "new-secret")), &pki.ca);
    ok(kcat(&args(&["-L", "-b", &format!("127.0.0.1:{sasl_plain}"), "-m", "10"], &erin), None), "kcat as erin");
    let oauth = "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n\
         sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"frank\";\n";
    java(sasl_plain, "oauth", oauth.into(), "gina", "admin,erin,gina");
    // Over SSL (a PEM trust store, no SASL), and over SASL_PLAINTEXT with PLAIN.
    let ssl_properties = format!("security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.certificates={ca}\n");
    java(ssl, "ssl", ssl_properties, "hank", "admin,erin,gina,hank");
    let plain = "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n\
         sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"bob\" password=\"bob-secret\";\n";
    java(sasl_plain, "plain", plain.into(), "ivy", "admin,erin,gina,hank,ivy");
    drop(broker);
}
