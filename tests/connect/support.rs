//! What tests/connect.rs and tests/mirror.rs share: Kafka Connect's classpaths, 4.3.1
//! and 4.1 (tests/connect/pom.xml, with MirrorMaker 2), a JVM process that is killed
//! when its guard drops, and readers of whole topics.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};

/// How long a client call (metadata, watermarks, committed offsets) may take: a fresh
/// client's first metadata took over 10 s on a 2-core machine loaded by a benchmark.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// The Kafka Connect generations tested: 4.3.1 (the newest whose file connectors and
/// MirrorMaker 2 this workplace's Maven serves; not 4.4.0) and 4.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    Kafka43,
    Kafka41,
}

/// Kafka Connect's classpath of `generation`: target/kafka-connect-classpath.txt (4.3)
/// or target/kafka-connect-4.1-classpath.txt, written by tests/connect/classpath.sh
/// (which .ci/run calls), or resolved now.
pub fn connect_classpath(generation: Generation) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let name = match generation {
        Generation::Kafka43 => "kafka-connect-classpath.txt",
        Generation::Kafka41 => "kafka-connect-4.1-classpath.txt",
    };
    let file = format!("{root}/target/{name}");
    if std::fs::metadata(&file).is_err() {
        let status = Command::new("bash").arg(format!("{root}/tests/connect/classpath.sh")).status().expect("run bash");
        assert!(status.success(), "Maven could not resolve tests/connect/pom.xml's artifacts");
    }
    std::fs::read_to_string(file).unwrap().trim().to_string()
}

/// A JVM running `main` with `args`, its standard output and error in `log`. Dropping
/// it kills it with SIGKILL, so nothing outlives a failed test.
pub struct Jvm {
    child: Option<Child>,
    pub log: PathBuf,
    main: String,
    args: Vec<String>,
    generation: Generation,
}

impl Jvm {
    /// Kafka Connect 4.3's `main`.
    pub fn start(main: &str, args: &[&str], log: &Path) -> Jvm {
        Jvm::start_of(Generation::Kafka43, main, args, log)
    }

    pub fn start_of(generation: Generation, main: &str, args: &[&str], log: &Path) -> Jvm {
        let mut jvm = Jvm {
            child: None,
            log: log.to_path_buf(),
            main: main.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            generation,
        };
        jvm.spawn();
        jvm
    }

    fn spawn(&mut self) {
        assert!(self.child.is_none());
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new("java")
            // A small heap, C1 only and the serial collector: quicker to start and
            // lighter on a 2-core machine that runs the broker beside it.
            .args(["-Xms64m", "-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"])
            .args([
                "-Dorg.slf4j.simpleLogger.showDateTime=true",
                "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
            ])
            .arg("-cp")
            .arg(connect_classpath(self.generation))
            .arg(&self.main)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("java");
        self.child = Some(child);
    }

    /// kill -9: a crash, with no chance to commit offsets or close transactions.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// The same command again, after `kill`.
    pub fn restart(&mut self) {
        self.spawn();
    }

    /// Panics with the log when the process has exited.
    pub fn assert_alive(&mut self) {
        if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
            panic!("{} exited with {status}:\n{}", self.main, self.log_tail());
        }
    }

    /// The last lines the process logged, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// Lines of its log at WARN or ERROR, for failure messages.
    pub fn log_problems(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).map(str::to_string).collect()
    }
}

impl Drop for Jvm {
    /// Kills the process; when the test failed, prints the end of its log first.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- the end of {} ({}):\n{}", self.main, self.log.display(), self.log_tail());
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Polls `check` every 200 ms until it returns `Ok`, or panics after `within` naming
/// `what` and the last `Err` it returned.
pub fn wait_for<T>(within: Duration, what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + within;
    loop {
        match check() {
            Ok(value) => return value,
            Err(last) => assert!(Instant::now() < deadline, "{what}: not within {within:?}; last: {last}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The offsets `group` has committed on `topic`'s `partitions` (those it has).
pub fn committed_offsets(bootstrap: &str, group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    let consumer: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", bootstrap).set("group.id", group).create().unwrap();
    let mut list = TopicPartitionList::new();
    for partition in 0..partitions {
        list.add_partition(topic, partition);
    }
    let committed = consumer.committed_offsets(list, CLIENT_TIMEOUT).unwrap();
    committed
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect()
}

/// One record of a topic: partition, offset, key and value.
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// Every record of `partitions` partitions of `topic`, from the beginning up to the
/// high watermark (or last stable offset, with `isolation` read_committed) as it was
/// when reading started, each partition in its order.
pub fn read_topic(bootstrap: &str, topic: &str, partitions: i32, isolation: &str) -> Vec<Record> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "skein-test-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    let mut ends = Vec::new();
    for partition in 0..partitions {
        let (_, high) = consumer.fetch_watermarks(topic, partition, CLIENT_TIMEOUT).unwrap();
        ends.push(high);
        assignment.add_partition_offset(topic, partition, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut positions = vec![0i64; partitions as usize];
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    // Transaction markers take offsets that no consumer sees (and read_committed
    // stops at the last stable offset): stop too after 2 s with nothing to read.
    let mut idle_polls = 0;
    while positions.iter().zip(&ends).any(|(p, e)| p < e) && idle_polls < 10 && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                idle_polls = 0;
                positions[m.partition() as usize] = m.offset() + 1;
                records.push(Record {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().unwrap_or_default().to_vec(),
                    value: m.payload().unwrap_or_default().to_vec(),
                });
            }
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => idle_polls += 1,
        }
    }
    records
}
