//! Helpers for end-to-end tests: a real `skein` process on loopback with its own temp
//! data directory and free ports, stopped by the test; a raw Kafka client for bad
//! input; rdkafka clients for everything else.
#![allow(dead_code)]

pub mod acks;
pub mod lan;
pub mod pki;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};

/// The value of `name=value` in a log line (ANSI colours stripped).
fn field(line: &str, name: &str) -> String {
    let plain: String = strip_ansi(line);
    let start = plain.find(&format!("{name}=")).unwrap_or_else(|| panic!("no {name} in {plain}")) + name.len() + 1;
    plain[start..].split_whitespace().next().unwrap().to_string()
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Ports `broker_port` handed out in this process: tests run in parallel, and two of
/// them given the same free port would both start a broker on it.
static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());

/// A port nobody listens on right now, below Linux's ephemeral range (32768 and up),
/// so that no socket bound to port 0 (another test's client or broker) can take it
/// while its broker restarts; Skein refuses a port another process listens on. Never
/// the same port twice in one test process (`HANDED_OUT`).
pub fn broker_port() -> u16 {
    let mut seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos() as u64
        ^ (std::process::id() as u64) << 16;
    loop {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let port = 20_000 + (seed >> 33) as u16 % 12_000;
        if take(port) {
            return port;
        }
    }
}

/// Claims `port` for this process if no test here has it and nobody listens on it.
fn take(port: u16) -> bool {
    let mut handed = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    if handed.contains(&port) || TcpListener::bind(("127.0.0.1", port)).is_err() {
        return false;
    }
    handed.push(port);
    true
}

/// The first of two consecutive ports nobody listens on (`broker_port`'s range): the
/// base of a 2-shard node's virtual brokers.
pub fn port_pair() -> u16 {
    loop {
        let base = broker_port();
        if base < u16::MAX && take(base + 1) {
            return base;
        }
    }
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub struct Broker {
    pub child: Option<Child>,
    pub data_dir: PathBuf,
    pub port: u16,
    pub admin_port: u16,
    pub cores: String,
    pub extra: Vec<String>,
    log_path: PathBuf,
    /// An address-space limit (`ulimit -v`) for the broker process, in bytes.
    pub address_space_limit: Option<u64>,
    /// A limit on its open files (`ulimit -n`, soft and hard).
    pub open_files_limit: Option<u64>,
    /// The address it listens on (127.0.0.1 unless in a namespace of a `lan::Lan`).
    pub host: String,
    /// The network namespace it runs in, if not the test's.
    pub netns: Option<String>,
}

impl Broker {
    /// Starts a broker with `cores` shards on a fresh data directory under `dir`.
    pub fn start(dir: &Path, cores: &str, extra: &[&str]) -> Broker {
        Broker::unspawned(dir, cores, extra).spawned()
    }

    /// Starts a broker whose data directory is `data_dir` (a file system of the test's
    /// own), its log under `dir`.
    pub fn start_at(dir: &Path, data_dir: &Path, cores: &str, extra: &[&str]) -> Broker {
        let mut broker = Broker::unspawned(dir, cores, extra);
        broker.data_dir = data_dir.to_path_buf();
        broker.spawned()
    }

    /// Starts a broker whose address space is limited to `bytes` (`ulimit -v`): an
    /// allocation the limit refuses aborts it, whatever the overcommit policy.
    pub fn start_limited(dir: &Path, cores: &str, extra: &[&str], bytes: u64) -> Broker {
        let mut broker = Broker::unspawned(dir, cores, extra);
        broker.address_space_limit = Some(bytes);
        broker.spawned()
    }

    /// Starts a broker that may open at most `files` files (`ulimit -n`).
    pub fn start_with_open_files(dir: &Path, cores: &str, extra: &[&str], files: u64) -> Broker {
        let mut broker = Broker::unspawned(dir, cores, extra);
        broker.open_files_limit = Some(files);
        broker.spawned()
    }

    /// Starts a broker in network namespace `netns`, listening on `host` there.
    pub fn start_in(dir: &Path, cores: &str, extra: &[&str], netns: &str, host: &str) -> Broker {
        let mut broker = Broker::unspawned(dir, cores, extra);
        (broker.host, broker.netns) = (host.to_string(), Some(netns.to_string()));
        broker.spawned()
    }

    fn unspawned(dir: &Path, cores: &str, extra: &[&str]) -> Broker {
        Broker {
            host: "127.0.0.1".to_string(),
            netns: None,
            child: None,
            data_dir: dir.join("data"),
            port: broker_port(),
            admin_port: 0,
            cores: cores.to_string(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            log_path: dir.join("broker.log"),
            address_space_limit: None,
            open_files_limit: None,
        }
    }

    fn spawned(mut self) -> Broker {
        self.spawn();
        self
    }

    pub fn bootstrap(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    fn spawn(&mut self) {
        let log_start = self.log().len();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log_path).unwrap();
        let mut command = match &self.netns {
            // `ip netns exec` execs skein in the namespace: the child is skein.
            Some(ns) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", ns]).arg(node_binary());
                command
            }
            None => Command::new(node_binary()),
        };
        for (resource, limit) in
            [(libc::RLIMIT_AS, self.address_space_limit), (libc::RLIMIT_NOFILE, self.open_files_limit)]
        {
            let Some(limit) = limit else { continue };
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe; nothing else runs in the child.
            unsafe {
                command.pre_exec(move || {
                    let rlimit = libc::rlimit { rlim_cur: limit, rlim_max: limit };
                    if libc::setrlimit(resource, &rlimit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = command
            .args(["start", "--cores", &self.cores, "--listener"])
            .arg(self.bootstrap())
            // A fresh admin port each start: a freed port may meanwhile serve as some
            // client's ephemeral port.
            .arg("--admin-listener")
            .arg(format!("{}:0", self.host))
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(&self.extra)
            .env("SKEIN_LOG", std::env::var("SKEIN_TEST_LOG").unwrap_or_else(|_| "info".into()))
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start skein");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let log = self.log();
            let fresh = &log[log_start..];
            if let Some(line) = fresh.lines().find(|l| l.contains("listening")) {
                self.port = field(line, "listener").rsplit(':').next().unwrap().parse().unwrap();
                if let Some(admin) = fresh.lines().find(|l| l.contains("admin endpoint")) {
                    self.admin_port = field(admin, "address").rsplit(':').next().unwrap().parse().unwrap();
                }
                if TcpStream::connect(self.bootstrap()).is_ok() {
                    return;
                }
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("skein exited with {status}:\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "skein did not start:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// SIGTERM, then wait for a clean exit.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "skein exited with {status}:\n{}", self.log());
                return;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("skein did not stop on SIGTERM:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// kill -9: a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    pub fn restart(&mut self) {
        assert!(self.child.is_none());
        self.spawn();
    }

    pub fn metrics(&self) -> String {
        let mut stream = TcpStream::connect((self.host.as_str(), self.admin_port)).unwrap();
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        stream.read_to_string(&mut out).unwrap();
        out
    }

    /// Sum of a metric over the series of one API key.
    pub fn metric_api(&self, name: &str, api_key: i16) -> u64 {
        let label = format!("api_key=\"{api_key}\"");
        self.metrics()
            .lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{') && l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// Sum of a metric over its series.
    /// The broker's resident memory, from /proc.
    pub fn rss_bytes(&self) -> u64 {
        let pid = self.child.as_ref().unwrap().id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
    }

    pub fn metric_sum(&self, name: &str) -> u64 {
        self.metrics()
            .lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// An ext4 file system of `bytes` in an image file, loop-mounted under `dir` for one
/// test and unmounted when dropped. Needs root and util-linux (`mount -o loop`), as
/// the CI machines have.
/// The skein binary nodes run: this build's, or `SKEIN_TEST_BINARY` (a copy, so that a
/// long run, such as the soak, is not changed under it by a rebuild).
fn node_binary() -> std::path::PathBuf {
    std::env::var_os("SKEIN_TEST_BINARY").map_or_else(|| env!("CARGO_BIN_EXE_skein").into(), Into::into)
}

pub struct LoopFs {
    pub mountpoint: PathBuf,
}

impl LoopFs {
    pub fn new(dir: &Path, bytes: u64) -> LoopFs {
        LoopFs::at(&dir.join("fs.img"), &dir.join("mnt"), bytes)
    }

    /// As `new`, with the image at `image` and the file system mounted at `mountpoint`.
    pub fn at(image: &Path, mountpoint: &Path, bytes: u64) -> LoopFs {
        std::fs::create_dir_all(mountpoint).unwrap();
        std::fs::File::create(image).unwrap().set_len(bytes).unwrap();
        let run = |program: &str, args: &[&str]| {
            let out = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
            assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        run("mkfs.ext4", &["-q", "-F", image.to_str().unwrap()]);
        run("mount", &["-o", "loop", image.to_str().unwrap(), mountpoint.to_str().unwrap()]);
        LoopFs { mountpoint: mountpoint.to_path_buf() }
    }

    /// Shuts the file system down (EXT4_IOC_SHUTDOWN, without flushing its log): every
    /// later I/O on it fails with EIO, as on a dead drive.
    pub fn shut_down(&self) {
        use std::os::fd::AsRawFd;
        const EXT4_IOC_SHUTDOWN: libc::c_ulong = 0x8004_587d;
        const EXT4_GOING_FLAGS_NOLOGFLUSH: u32 = 2;
        let dir = std::fs::File::open(&self.mountpoint).unwrap();
        let flags = EXT4_GOING_FLAGS_NOLOGFLUSH;
        // SAFETY: a valid descriptor, and the ioctl reads one u32 from the pointer.
        let done = unsafe { libc::ioctl(dir.as_raw_fd(), EXT4_IOC_SHUTDOWN, &flags as *const u32) };
        assert_eq!(done, 0, "EXT4_IOC_SHUTDOWN: {}", std::io::Error::last_os_error());
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        // Lazily if something still holds a file there: the loop device goes once free.
        let unmounted = Command::new("umount").arg(&self.mountpoint).status().is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(&self.mountpoint).status();
        }
    }
}

/// Creates a topic with `skein topic create`.
pub fn create_topic(broker: &Broker, topic: &str, partitions: i32) {
    let out = Command::new(env!("CARGO_BIN_EXE_skein"))
        .args([
            "topic",
            "create",
            topic,
            "--partitions",
            &partitions.to_string(),
            "--bootstrap-server",
            &broker.bootstrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A CreateTopics entry: `partitions` partitions, replication factor 1, `configs`.
pub fn creatable_topic(
    name: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> kafka_protocol::messages::create_topics_request::CreatableTopic {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    let s = |text: &str| StrBytes::from_string(text.to_string());
    CreatableTopic::default()
        .with_name(kafka_protocol::messages::TopicName(s(name)))
        .with_num_partitions(partitions)
        .with_replication_factor(1)
        .with_configs(
            configs
                .iter()
                .map(|(k, v)| CreatableTopicConfig::default().with_name(s(k)).with_value(Some(s(v))))
                .collect(),
        )
}

/// A raw Kafka connection: encodes requests with the protocol crate, reads frames.
/// An ApiVersions request naming its client software, as Kafka requires from v3.
pub fn api_versions_request() -> kafka_protocol::messages::ApiVersionsRequest {
    kafka_protocol::messages::ApiVersionsRequest::default()
        .with_client_software_name(kafka_protocol::protocol::StrBytes::from_static_str("skein-tests"))
        .with_client_software_version(kafka_protocol::protocol::StrBytes::from_static_str("1.0"))
}

pub struct RawClient {
    pub stream: TcpStream,
    correlation: i32,
}

impl RawClient {
    pub fn connect(addr: &str) -> RawClient {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        RawClient { stream, correlation: 0 }
    }

    /// Encodes a request frame without sending it.
    pub fn frame<R: Request>(&mut self, request: &R, version: i16) -> Vec<u8> {
        self.correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("raw")));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header.encode(&mut buf, R::header_version(version)).unwrap();
        request.encode(&mut buf, version).unwrap();
        let len = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        buf.to_vec()
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// `send_bytes` on a connection the broker may have closed: whether it went out.
    pub fn try_send_bytes(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).is_ok()
    }

    /// Reads one response frame; `None` when the broker closed the connection.
    pub fn read_frame(&mut self) -> Option<Bytes> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).ok()?;
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut body).ok()?;
        Some(Bytes::from(body))
    }

    /// Sends a request and decodes its response.
    pub fn call<R: Request>(&mut self, request: &R, version: i16) -> R::Response {
        let frame = self.frame(request, version);
        self.send_bytes(&frame);
        let mut body = self.read_frame().expect("response");
        self.decode::<R>(&mut body, version)
    }

    pub fn decode<R: Request>(&self, body: &mut Bytes, version: i16) -> R::Response {
        let key = ApiKey::try_from(R::KEY).unwrap();
        let header = ResponseHeader::decode(body, key.response_header_version(version)).unwrap();
        assert!(header.correlation_id > 0);
        R::Response::decode(body, version).unwrap()
    }

    /// Whether the broker closed the connection (reads EOF within the timeout).
    pub fn is_closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(self.stream.read(&mut byte), Ok(0) | Err(_))
    }
}

/// The broker a differential test runs against: one started here in `dir`, or Apache
/// Kafka at $SKEIN_TEST_EXTERNAL_BOOTSTRAP; with a suffix that makes names unique on
/// an external broker, which keeps them between runs.
pub fn local_or_external(dir: &std::path::Path) -> (Option<Broker>, String, String) {
    if let Ok(bootstrap) = std::env::var("SKEIN_TEST_EXTERNAL_BOOTSTRAP") {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        return (None, bootstrap, format!("-{nanos:x}"));
    }
    let broker = Broker::start(dir, "2", &[]);
    let bootstrap = broker.bootstrap();
    (Some(broker), bootstrap, String::new())
}

/// FindCoordinator for `group` until it names one, as a client starts (on Kafka this
/// also creates `__consumer_offsets`).
pub fn find_group_coordinator(client: &mut RawClient, group: &str) {
    let request = kafka_protocol::messages::FindCoordinatorRequest::default()
        .with_key_type(0)
        .with_coordinator_keys(vec![StrBytes::from_string(group.to_string())]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.call(&request, 4).coordinators[0].error_code != 0 {
        assert!(Instant::now() < deadline, "no coordinator for {group}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The correlation id at the start of a response frame.
pub fn correlation_of(frame: &Bytes) -> i32 {
    let mut b = frame.clone();
    b.get_i32()
}

/// A listener address for the raw client.
pub fn addr(broker: &Broker) -> SocketAddr {
    broker.bootstrap().parse().unwrap()
}

/// The Java Kafka client's classpath: $SKEIN_KAFKA_CLASSPATH, target/kafka-classpath.txt
/// (written by tests/java/classpath.sh, which .ci/run calls), or resolved now.
pub fn java_classpath() -> String {
    if let Ok(cp) = std::env::var("SKEIN_KAFKA_CLASSPATH") {
        return cp;
    }
    resolved_classpath("kafka-classpath.txt", "tests/java/classpath.sh")
}

/// The classpath in target/`file`, written by the Maven resolution `script` (run now
/// if the file is missing).
fn resolved_classpath(file: &str, script: &str) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let file = format!("{root}/target/{file}");
    // Resolved again when its pom.xml changed since (a version moved).
    let modified = |path: &str| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let pom = std::path::Path::new(&format!("{root}/{script}")).with_file_name("pom.xml");
    let stale = match (modified(&file), modified(&pom.to_string_lossy())) {
        (Some(resolved), Some(pom)) => pom > resolved,
        (resolved, _) => resolved.is_none(),
    };
    if stale {
        let status = Command::new("bash").arg(format!("{root}/{script}")).status().expect("run bash");
        assert!(status.success(), "Maven could not resolve {script}'s artifacts");
    }
    std::fs::read_to_string(file).unwrap().trim().to_string()
}

/// tests/java/Client.java (kafka-clients 4.1) run with `args`.
pub fn java_client(args: &[&str]) -> Command {
    let mut command = Command::new("java");
    command
        .arg("-cp")
        .arg(java_classpath())
        .arg(format!("{}/tests/java/Client.java", env!("CARGO_MANIFEST_DIR")))
        .args(args);
    command
}

/// Kafka Streams 4.1's classpath: target/kafka-streams-classpath.txt (written by
/// tests/streams/classpath.sh, which .ci/run calls), or resolved now.
pub fn kafka_streams_classpath() -> String {
    resolved_classpath("kafka-streams-classpath.txt", "tests/streams/classpath.sh")
}

/// Apache Kafka 4.1's command-line tools' classpath: target/kafka-tools-classpath.txt
/// (written by tests/tools/classpath.sh, which .ci/run calls), or resolved now.
pub fn kafka_tools_classpath() -> String {
    resolved_classpath("kafka-tools-classpath.txt", "tests/tools/classpath.sh")
}

/// Kafka 4.4's share consumer and tools (tests/share/pom.xml):
/// target/kafka-share-classpath.txt (written by tests/share/classpath.sh, which
/// .ci/run calls), or resolved now.
pub fn kafka_share_classpath() -> String {
    resolved_classpath("kafka-share-classpath.txt", "tests/share/classpath.sh")
}

/// Runs tests/share/Share.java (`main` empty) or one of Kafka 4.4's tools (its main
/// class) with `args`; returns whether it succeeded and its standard output, with
/// its standard error appended (SLF4J's notice left out).
pub fn kafka_share(main: &str, args: &[&str]) -> (bool, String) {
    let mut command = Command::new("java");
    command.args(["-XX:TieredStopAtLevel=1", "-cp"]).arg(kafka_share_classpath());
    match main {
        "" => command.arg(format!("{}/tests/share/Share.java", env!("CARGO_MANIFEST_DIR"))),
        main => command.arg(main),
    };
    let output = command.args(args).stdin(Stdio::null()).output().expect("java");
    let mut text = String::from_utf8_lossy(&output.stdout).to_string();
    for line in String::from_utf8_lossy(&output.stderr).lines().filter(|l| !l.starts_with("SLF4J")) {
        text.push_str(line);
        text.push('\n');
    }
    (output.status.success(), text)
}

/// The `R partition offset deliveries value-or-ack` lines of a Share.java run.
pub fn share_records(out: &str) -> Vec<(i32, i64, i32, String)> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 5 && f[0] == "R")
                .then(|| (f[1].parse().unwrap(), f[2].parse().unwrap(), f[3].parse().unwrap(), f[4].to_string()))
        })
        .collect()
}

/// Runs one of Kafka's own tools (its main class, as the `kafka-*.sh` script does)
/// with `args` and `stdin`; returns whether it succeeded and its standard output,
/// with its standard error appended (SLF4J's binding notice left out).
pub fn kafka_tool(main: &str, args: &[&str], stdin: &str) -> (bool, String) {
    let mut child = Command::new("java")
        .args(["-Xss1m", "-XX:TieredStopAtLevel=1", "-cp"])
        .arg(kafka_tools_classpath())
        .arg(main)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("java");
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let mut text = String::from_utf8_lossy(&output.stdout).to_string();
    for line in String::from_utf8_lossy(&output.stderr).lines().filter(|l| !l.starts_with("SLF4J")) {
        text.push_str(line);
        text.push('\n');
    }
    (output.status.success(), text)
}
