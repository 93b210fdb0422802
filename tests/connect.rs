//! Kafka Connect 4.3.1, unchanged (connect-runtime, connect-file, connect-json from Maven
//! Central, tests/connect/), against Skein in distributed mode: two workers create
//! their compacted config, offset and status topics with Connect's own settings; a
//! FileStreamSource feeds a topic and a FileStreamSink copies it to a file, driven
//! through the REST API (create, pause, resume, delete). The worker running the
//! source task, then the one running the sink task, is killed with kill -9
//! mid-stream and restarted: the output file holds every input line in order,
//! repeating exactly what the killed tasks did after their last committed positions.
//!
//! And exactly-once source support (KIP-618, `exactly.once.source.support=enabled`):
//! a FileStreamSource with `exactly.once.support=required` writes its records and its
//! file position in one transaction every 2 s; killed with kill -9 inside one and
//! restarted, it leaves that transaction aborted, and a read_committed consumer sees
//! every line exactly once: with Connect 4.3.1 (its producer on transactions v2) and
//! with the older generation, Connect 4.1.

mod common;
#[path = "connect/support.rs"]
mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{create_topic, free_port, Broker};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde_json::{json, Value};
use support::{committed_offsets, read_topic, wait_for, Generation, Jvm, CLIENT_TIMEOUT};

/// The tests run one at a time: each starts a broker and JVMs, and together they
/// would starve each other on a 2-core machine.
static SERIAL: Mutex<()> = Mutex::new(());

const SOURCE: &str = "org.apache.kafka.connect.file.FileStreamSourceConnector";
const SINK: &str = "org.apache.kafka.connect.file.FileStreamSinkConnector";

/// One distributed Connect worker: `ConnectDistributed` with a properties file the
/// test writes, its REST API on 127.0.0.1:`port`.
struct Worker {
    jvm: Jvm,
    port: u16,
}

impl Worker {
    /// Starts a worker of group `group` whose internal topics are `<group>-configs`,
    /// `-offsets` and `-status`, left for Connect to create with its own settings
    /// (replication factor 1: there is one node). `extra` lines are appended.
    fn start(dir: &Path, name: &str, bootstrap: &str, group: &str, extra: &[&str]) -> Worker {
        Worker::start_of(Generation::Kafka43, dir, name, bootstrap, group, extra)
    }

    /// `start` with Kafka Connect of `generation`.
    fn start_of(
        generation: Generation,
        dir: &Path,
        name: &str,
        bootstrap: &str,
        group: &str,
        extra: &[&str],
    ) -> Worker {
        let port = free_port();
        let properties = dir.join(format!("{name}.properties"));
        let mut text = format!(
            "bootstrap.servers={bootstrap}\n\
             group.id={group}\n\
             config.storage.topic={group}-configs\n\
             offset.storage.topic={group}-offsets\n\
             status.storage.topic={group}-status\n\
             config.storage.replication.factor=1\n\
             offset.storage.replication.factor=1\n\
             status.storage.replication.factor=1\n\
             key.converter=org.apache.kafka.connect.storage.StringConverter\n\
             value.converter=org.apache.kafka.connect.json.JsonConverter\n\
             value.converter.schemas.enable=false\n\
             offset.flush.interval.ms=1000\n\
             listeners=http://127.0.0.1:{port}\n\
             rest.advertised.host.name=127.0.0.1\n\
             rest.advertised.port={port}\n\
             plugin.discovery=service_load\n\
             session.timeout.ms=6000\n\
             heartbeat.interval.ms=2000\n\
             scheduled.rebalance.max.delay.ms=5000\n\
             consumer.session.timeout.ms=6000\n\
             consumer.heartbeat.interval.ms=2000\n"
        );
        for line in extra {
            text.push_str(line);
            text.push('\n');
        }
        std::fs::write(&properties, text).unwrap();
        let jvm = Jvm::start_of(
            generation,
            "org.apache.kafka.connect.cli.ConnectDistributed",
            &[properties.to_str().unwrap()],
            &dir.join(format!("{name}.log")),
        );
        let mut worker = Worker { jvm, port };
        worker.wait_ready();
        worker
    }

    fn wait_ready(&mut self) {
        wait_for(Duration::from_secs(60), "the worker's REST API", || {
            self.jvm.assert_alive();
            match self.call("GET", "/connectors", None) {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        });
    }

    fn id(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// One REST call: its status and body, or why there was none.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, String), String> {
        let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(30)).build();
        let request = agent
            .request(method, &format!("http://127.0.0.1:{}{path}", self.port))
            .set("Content-Type", "application/json");
        let result = match body {
            Some(body) => request.send_string(&body.to_string()),
            None => request.call(),
        };
        match result {
            Ok(response) => Ok((response.status(), response.into_string().unwrap_or_default())),
            Err(ureq::Error::Status(status, response)) => Ok((status, response.into_string().unwrap_or_default())),
            Err(e) => Err(e.to_string()),
        }
    }

    /// A call that must answer `expected`; retried while the group rebalances (409)
    /// or the request cannot be forwarded to the leader yet.
    fn expect(&self, method: &str, path: &str, body: Option<&Value>, expected: u16) -> Value {
        wait_for(Duration::from_secs(60), &format!("{method} {path} answering {expected}"), || {
            match self.call(method, path, body)? {
                (status, text) if status == expected => Ok(serde_json::from_str(&text).unwrap_or(Value::Null)),
                (status, text) => Err(format!("{status} {text}")),
            }
        })
    }

    /// The connector's state and its tasks' (state, worker id).
    fn status(&self, connector: &str) -> (String, Vec<(String, String)>) {
        let status = self.expect("GET", &format!("/connectors/{connector}/status"), None, 200);
        let tasks = status["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["state"].as_str().unwrap().to_string(), t["worker_id"].as_str().unwrap().to_string()))
            .collect();
        (status["connector"]["state"].as_str().unwrap().to_string(), tasks)
    }

    /// Waits until the connector and its one task are in `state`; returns the worker
    /// that runs the task.
    fn wait_state(&self, connector: &str, state: &str) -> String {
        wait_for(Duration::from_secs(60), &format!("{connector} {state}"), || {
            let (connector_state, tasks) = self.status(connector);
            match tasks.as_slice() {
                [(task_state, worker)] if connector_state == state && task_state == state => Ok(worker.clone()),
                _ => Err(format!("{connector_state} {tasks:?}")),
            }
        })
    }
}

/// Each input line's length with its newline ("line-00042\n").
const LINE_BYTES: usize = 11;

fn line(n: usize) -> String {
    format!("line-{n:05}")
}

fn append_lines(file: &Path, range: std::ops::Range<usize>) {
    let mut out = std::fs::OpenOptions::new().create(true).append(true).open(file).unwrap();
    let text: String = range.map(|n| line(n) + "\n").collect();
    out.write_all(text.as_bytes()).unwrap();
}

/// Appends `range` to `file` from a thread, `chunk` lines every 50 ms.
fn append_paced(file: PathBuf, range: std::ops::Range<usize>, chunk: usize) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut next = range.start;
        while next < range.end {
            let to = (next + chunk).min(range.end);
            append_lines(&file, next..to);
            next = to;
            std::thread::sleep(Duration::from_millis(50));
        }
    })
}

/// The line numbers in the file FileStreamSink writes (none while it does not exist).
fn output_numbers(file: &Path) -> Vec<usize> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| l.strip_prefix("line-").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("not a line: {l:?}")))
        .collect()
}

/// How an at-least-once copy of lines 0..`total` may differ from the input: it holds
/// them in order, except that it may go back (a rewind) and repeat lines it already
/// holds, and never skips one. Returns (duplicates, rewinds), or why it is not such a
/// copy (a gap, a line out of order, lines missing at the end).
fn check_copy(numbers: &[usize], total: usize) -> Result<(usize, usize), String> {
    if numbers.first() != Some(&0) {
        return Err(format!("starts with {:?}", numbers.first()));
    }
    let mut rewinds = 0;
    for (i, pair) in numbers.windows(2).enumerate() {
        match (pair[0], pair[1]) {
            (before, n) if n <= before => rewinds += 1,
            (before, n) if n != before + 1 => {
                return Err(format!("gap: line {n} after {before} at position {}", i + 1))
            }
            _ => {}
        }
    }
    // Each run of lines is contiguous and starts at most where the last one ended:
    // together they hold 0..=max.
    let (last, max) = (numbers[numbers.len() - 1], *numbers.iter().max().unwrap());
    if last + 1 == total && max == last {
        Ok((numbers.len() - total, rewinds))
    } else {
        Err(format!("{} lines, ending with {last}, of {total}", numbers.len()))
    }
}

/// Whether `copy` is `original` except that it goes back, at most once for each of
/// `restarts` (indexes into `original`, in order), and continues from that index:
/// what an at-least-once copy restarted from committed positions holds. Returns how
/// many items it repeats.
fn check_replays(copy: &[usize], original: &[usize], restarts: &[usize]) -> Result<usize, String> {
    let (mut next, mut restarts) = (0, restarts.iter());
    for (at, item) in copy.iter().enumerate() {
        if original.get(next) != Some(item) {
            // A replay starts here: at one of the restarts left (an earlier restart
            // may have replayed nothing), before where the copy had come to.
            next = loop {
                match restarts.next() {
                    Some(&r) if r < next && original[r] == *item => break r,
                    Some(_) => continue,
                    None => return Err(format!("{item} at {at} where {:?} was due", original.get(next))),
                }
            };
        }
        next += 1;
    }
    match next == original.len() {
        true => Ok(copy.len() - original.len()),
        false => Err(format!("ends at {next} of {}", original.len())),
    }
}

/// The file position a FileStreamSource `connector` last committed for `file`, from
/// its worker group's offsets topic (0 when none).
fn source_position(bootstrap: &str, offsets_topic: &str, connector: &str, file: &Path) -> usize {
    let key = json!([connector, {"filename": file}]);
    let mut position = 0;
    for record in read_topic(bootstrap, offsets_topic, 25, "read_uncommitted") {
        if serde_json::from_slice::<Value>(&record.key).ok() == Some(key.clone()) {
            let value: Value = serde_json::from_slice(&record.value).unwrap();
            position = value["position"].as_u64().unwrap() as usize;
        }
    }
    position
}

/// Whether partition 0 of `topic` holds records of a transaction not yet committed or
/// aborted: its last stable offset (what read_committed may read up to) is below its
/// high watermark.
fn open_transaction(bootstrap: &str, topic: &str) -> bool {
    let end = |isolation: &str| {
        let consumer: BaseConsumer =
            ClientConfig::new().set("bootstrap.servers", bootstrap).set("isolation.level", isolation).create().unwrap();
        consumer.fetch_watermarks(topic, 0, CLIENT_TIMEOUT).unwrap().1
    };
    end("read_committed") < end("read_uncommitted")
}

/// `skein topic describe`'s output for `topic`.
fn describe(broker: &Broker, topic: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["topic", "describe", topic, "--bootstrap-server", &broker.bootstrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn connect_distributed_file_connectors_survive_kill_9() {
    const LINES: usize = 1300;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    // Groups form at once: the workers' and the sink's.
    let broker = Broker::start(dir.path(), "2", &["--group-initial-rebalance-delay-ms", "0"]);
    let bootstrap = broker.bootstrap();
    create_topic(&broker, "lines", 1);
    let (input, output) = (dir.path().join("input.txt"), dir.path().join("output.txt"));
    append_lines(&input, 0..200);

    let mut workers = [
        Worker::start(dir.path(), "worker-a", &bootstrap, "connect-skein", &[]),
        Worker::start(dir.path(), "worker-b", &bootstrap, "connect-skein", &[]),
    ];
    // Connect created its internal topics itself: compacted, with its default
    // partition counts (configs 1, offsets 25, status 5).
    for (topic, partitions) in
        [("connect-skein-configs", 1), ("connect-skein-offsets", 25), ("connect-skein-status", 5)]
    {
        let description = describe(&broker, topic);
        assert!(description.starts_with(&format!("topic {topic}: {partitions} partitions")), "{description}");
        assert!(description.contains("cleanup.policy=compact (DynamicTopic)"), "{description}");
    }

    let rest = &workers[0];
    let source = json!({"name": "file-source", "config": {
        "connector.class": SOURCE, "tasks.max": "1", "file": input, "topic": "lines"}});
    let sink = json!({"name": "file-sink", "config": {
        "connector.class": SINK, "tasks.max": "1", "file": output, "topics": "lines"}});
    rest.expect("POST", "/connectors", Some(&source), 201);
    rest.expect("POST", "/connectors", Some(&sink), 201);
    rest.wait_state("file-source", "RUNNING");
    rest.wait_state("file-sink", "RUNNING");
    let copied = |total: usize| {
        wait_for(Duration::from_secs(60), &format!("{total} lines in the output file"), || {
            check_copy(&output_numbers(&output), total)
        })
    };
    assert_eq!(copied(200), (0, 0));

    // Paused, the source reads nothing more; resumed, it goes on from where it was.
    rest.expect("PUT", "/connectors/file-source/pause", None, 202);
    rest.wait_state("file-source", "PAUSED");
    append_lines(&input, 200..300);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(output_numbers(&output).len(), 200, "lines flowed while the source was paused");
    rest.expect("PUT", "/connectors/file-source/resume", None, 202);
    rest.wait_state("file-source", "RUNNING");
    assert_eq!(copied(300), (0, 0));

    // kill -9 the worker running the source task while lines flow, and restart it;
    // then the same for the worker running the sink task. Each kill notes what the
    // killed tasks had committed (a request sent just before dying has had time to
    // land): the source's file position, the sink consumer's offset.
    let (mut source_restarts, mut sink_restarts) = (Vec::new(), Vec::new());
    let mut written = 300;
    for connector in ["file-source", "file-sink"] {
        let running = |connector: &str| workers[0].status(connector).1[0].1.clone();
        let (source_worker, sink_worker) = (running("file-source"), running("file-sink"));
        let victim = if connector == "file-source" { &source_worker } else { &sink_worker };
        let victim = workers.iter().position(|w| &w.id() == victim).expect("the task's worker");
        let writer = append_paced(input.clone(), written..written + 500, 20);
        written += 500;
        std::thread::sleep(Duration::from_millis(1200));
        assert!(!writer.is_finished(), "the kill comes while lines flow");
        workers[victim].jvm.kill();
        std::thread::sleep(Duration::from_secs(1));
        if source_worker == workers[victim].id() {
            source_restarts
                .push(source_position(&bootstrap, "connect-skein-offsets", "file-source", &input) / LINE_BYTES);
        }
        if sink_worker == workers[victim].id() {
            let committed = committed_offsets(&bootstrap, "connect-file-sink", "lines", 1);
            sink_restarts.push(committed.get(&0).copied().unwrap_or(0) as usize);
        }
        workers[victim].jvm.restart();
        workers[victim].wait_ready();
        writer.join().unwrap();
        let rest = &workers[1 - victim];
        rest.wait_state("file-source", "RUNNING");
        rest.wait_state("file-sink", "RUNNING");
        copied(written);
    }
    assert_eq!(written, LINES);

    // At least once, and exactly what Connect promises: a restarted source task reads
    // again from the file position it last committed (every offset.flush.interval.ms,
    // 1 s), a restarted sink task is fed again from its consumer's committed offset.
    // So the topic holds the input with at most a run repeated from each source
    // restart, the output file the topic with at most a run repeated from each sink
    // restart, and nothing is skipped.
    let input_numbers: Vec<usize> = (0..LINES).collect();
    let topic: Vec<usize> = read_topic(&bootstrap, "lines", 1, "read_uncommitted")
        .iter()
        .map(|r| serde_json::from_slice::<String>(&r.value).unwrap()[5..].parse().unwrap())
        .collect();
    let source_repeated = check_replays(&topic, &input_numbers, &source_restarts)
        .unwrap_or_else(|e| panic!("topic: {e}; restarts at lines {source_restarts:?}: {topic:?}"));
    let output = output_numbers(&output);
    let sink_repeated = check_replays(&output, &topic, &sink_restarts)
        .unwrap_or_else(|e| panic!("output: {e}; restarts at offsets {sink_restarts:?}: {output:?}"));
    println!(
        "kill -9 mid-stream: the source restarted at lines {source_restarts:?} and wrote {source_repeated} lines \
         twice; the sink restarted at offsets {sink_restarts:?} and wrote {sink_repeated} lines twice"
    );
    let rest = &workers[0];

    // Deleted, the connectors are gone from every worker.
    rest.expect("DELETE", "/connectors/file-source", None, 204);
    rest.expect("DELETE", "/connectors/file-sink", None, 204);
    for worker in &workers {
        worker.expect("GET", "/connectors/file-source", None, 404);
        worker.expect("GET", "/connectors/file-sink", None, 404);
        assert_eq!(worker.expect("GET", "/connectors", None, 200), json!([]));
    }
    for worker in &workers {
        let errors: Vec<String> = worker.jvm.log_problems().into_iter().filter(|l| l.contains(" ERROR ")).collect();
        assert!(errors.is_empty(), "{errors:?}");
    }
    println!("connect distributed test took {:?}", started.elapsed());
}

#[test]
fn connect_exactly_once_source_survives_kill_9() {
    exactly_once_source_survives_kill_9(Generation::Kafka43);
}

#[test]
fn connect_4_1_exactly_once_source_survives_kill_9() {
    exactly_once_source_survives_kill_9(Generation::Kafka41);
}

fn exactly_once_source_survives_kill_9(generation: Generation) {
    const TOTAL: usize = 4300;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    // The worker group forms at once.
    let broker = Broker::start(dir.path(), "2", &["--group-initial-rebalance-delay-ms", "0"]);
    let bootstrap = broker.bootstrap();
    create_topic(&broker, "eos-lines", 1);
    let input = dir.path().join("input.txt");
    append_lines(&input, 0..300);

    let eos = ["exactly.once.source.support=enabled"];
    let mut worker = Worker::start_of(generation, dir.path(), "worker", &bootstrap, "connect-eos", &eos);
    let source = json!({"name": "eos-source", "config": {
        "connector.class": SOURCE, "tasks.max": "1", "file": input, "topic": "eos-lines",
        "exactly.once.support": "required",
        // A transaction every 2 s rather than one per poll: the kill lands in one.
        "transaction.boundary": "interval", "transaction.boundary.interval.ms": "2000"}});
    worker.expect("POST", "/connectors", Some(&source), 201);
    worker.wait_state("eos-source", "RUNNING");
    let committed = |total: usize| {
        wait_for(Duration::from_secs(60), &format!("{total} committed lines"), || {
            let lines: Vec<String> = read_topic(&bootstrap, "eos-lines", 1, "read_committed")
                .iter()
                .map(|r| serde_json::from_slice::<String>(&r.value).unwrap())
                .collect();
            if lines.len() >= total {
                Ok(lines)
            } else {
                Err(format!("{} lines", lines.len()))
            }
        })
    };
    assert_eq!(committed(300), (0..300).map(line).collect::<Vec<_>>());

    // kill -9 mid-stream, mid-transaction (records written past the last stable
    // offset): the restarted worker fences the killed one's transactional producer,
    // the transaction it left open is aborted, and the task goes on from the file
    // position committed with the last transaction. Should the transaction commit
    // between the look and the kill, the kill is repeated.
    let writer = append_paced(input.clone(), 300..TOTAL, 20);
    let mut kills = 0;
    loop {
        wait_for(Duration::from_secs(30), "an open transaction with records", || {
            match open_transaction(&bootstrap, "eos-lines") {
                true => Ok(()),
                false => Err("none".into()),
            }
        });
        assert!(!writer.is_finished(), "the kill comes while lines flow");
        worker.jvm.kill();
        kills += 1;
        let left_open = open_transaction(&bootstrap, "eos-lines");
        worker.jvm.restart();
        worker.wait_ready();
        if left_open {
            break;
        }
        assert!(kills < 3, "no kill landed inside a transaction");
    }
    writer.join().unwrap();
    worker.wait_state("eos-source", "RUNNING");
    let lines = committed(TOTAL);
    assert_eq!(lines, (0..TOTAL).map(line).collect::<Vec<_>>(), "each line exactly once, in order");
    let uncommitted = read_topic(&bootstrap, "eos-lines", 1, "read_uncommitted").len();
    assert!(uncommitted > TOTAL, "the aborted transaction's records are in the log: {uncommitted}");
    println!(
        "exactly once after {kills} kill -9: {TOTAL} lines committed once each; read_uncommitted sees \
         {uncommitted} records (the aborted ones too); took {:?}",
        started.elapsed()
    );
    let errors: Vec<String> = worker.jvm.log_problems().into_iter().filter(|l| l.contains(" ERROR ")).collect();
    assert!(errors.is_empty(), "{errors:?}");
}
