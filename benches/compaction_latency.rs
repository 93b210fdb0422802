//! Compaction against the produce path (compaction issue: "compaction must not raise the
//! shard's produce p99"): produce p99 at a fixed rate on one shard, quiet, while the log
//! cleaner compacts a few GB of another topic on the same shard, and quiet again once the
//! cleaner is done (A-B-A order, so that the two quiet runs show the machine's noise).
//!
//! Setup: a one-shard broker (release build) with `--log-cleaner-backoff-ms 200` and the
//! cleaner's other settings at their defaults (unthrottled I/O). Topic `compacted` is
//! created with `cleanup.policy=compact`, 64 MiB segments, `min.cleanable.dirty.ratio`
//! 0.01 and `min.compaction.lag.ms` of a year, which holds the cleaner off (no closed
//! segment is old enough) while it is filled with keyed 1 KiB records, many per key.
//! Setting `min.compaction.lag.ms` to 0 (IncrementalAlterConfigs) starts the cleaning
//! phase; the cleaner's progress is read from `/metrics`
//! (`skein_cleaner_passes_total`, `skein_compacted_bytes_reclaimed_total`) and from the
//! size of the `compacted-0` directory. After the last quiet phase the compacted topic is
//! read back: every key must hold its latest value.
//!
//! `cargo bench --bench compaction_latency`. Knobs: `SKEIN_COMPACT_GB` to load (default
//! 2, fractions allowed), `SKEIN_COMPACT_KEYS` distinct keys (default 100000),
//! `SKEIN_COMPACT_SECS` per phase (default 10), `SKEIN_COMPACT_RATE` produce messages per
//! second on topic `latency` (default 5000; acks=all, linger 0, 200 B values),
//! `SKEIN_COMPACT_FLAGS` more broker flags, for example
//! `--log-cleaner-io-max-bytes-per-second 50000000`.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/fixed_rate.rs"]
mod fixed_rate;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Broker, RawClient};
use hdrhistogram::Histogram;
use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::{CreateTopicsRequest, IncrementalAlterConfigsRequest};
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

const MIB: u64 = 1 << 20;
const VALUE_BYTES: usize = 1024;
/// `min.compaction.lag.ms` while loading: a year, so no closed segment is cleanable.
const LAG_HOLDING_MS: &str = "31536000000";
/// How often the cleaner's progress is sampled during the cleaning phase.
const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);
/// The cleaner counts as done when its passes have not changed for this long.
const CLEANER_IDLE: Duration = Duration::from_secs(2);

/// Counts failed deliveries of the load.
struct Failures(Arc<AtomicU64>);

impl ClientContext for Failures {}

impl ProducerContext for Failures {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_err() {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn key(n: u64, keys: u64) -> String {
    format!("key-{:08}", n % keys)
}

/// Creates a one-partition topic with `configs`.
fn create(client: &mut RawClient, name: &str, configs: &[(&str, &str)]) {
    let topic = common::creatable_topic(name, 1, configs);
    let response = client.call(&CreateTopicsRequest::default().with_topics(vec![topic]).with_timeout_ms(10_000), 7);
    let created = &response.topics[0];
    assert_eq!(created.error_code, 0, "create {name}: {:?}", created.error_message);
}

/// Sets one config of topic `name` (IncrementalAlterConfigs SET).
fn alter(client: &mut RawClient, name: &str, config: &str, value: &str) {
    let set = AlterableConfig::default().with_name(s(config)).with_value(Some(s(value))).with_config_operation(0);
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(s(name))
        .with_configs(vec![set])]);
    let response = client.call(&request, 1);
    let result = &response.responses[0];
    assert_eq!(result.error_code, 0, "alter {name} {config}={value}: {:?}", result.error_message);
}

/// Produces `bytes` of keyed records to `compacted` as fast as the broker takes them
/// (acks=1, large batches); returns the records sent. Value `n` starts with `n`.
fn load(bootstrap: &str, bytes: u64, keys: u64) -> u64 {
    let failures = Arc::new(AtomicU64::new(0));
    let producer: BaseProducer<Failures> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "1")
        .set("linger.ms", "5")
        .set("batch.num.messages", "100000")
        .set("queue.buffering.max.kbytes", "262144")
        .create_with_context(Failures(failures.clone()))
        .unwrap();
    let total = bytes / VALUE_BYTES as u64;
    let mut value = vec![b'v'; VALUE_BYTES];
    for n in 0..total {
        value[..8].copy_from_slice(&n.to_be_bytes());
        let key = key(n, keys);
        loop {
            match producer.send(BaseRecord::to("compacted").key(&key).payload(&value)) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    producer.poll(Duration::from_millis(1));
                }
                Err((e, _)) => panic!("load: {e}"),
            }
        }
        if n % 1024 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    producer.flush(Duration::from_secs(120)).unwrap();
    assert_eq!(failures.load(Ordering::Relaxed), 0, "load deliveries failed");
    total
}

/// One produce phase: when it started, and each delivery's due time and latency (µs).
struct Phase {
    started: Instant,
    samples: Vec<(Instant, u64)>,
}

/// Produces to `latency` at `rate` for `secs`.
fn produce_phase(bootstrap: &str, rate: u64, secs: u64) -> Phase {
    let (started, samples) = fixed_rate::produce_at_rate(bootstrap, "latency", rate, secs);
    Phase { started, samples }
}

impl Phase {
    /// The latencies of the records due in `[from, until)`.
    fn histogram(&self, from: Instant, until: Instant) -> Histogram<u64> {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        for &(_, micros) in self.samples.iter().filter(|(due, _)| (from..until).contains(due)) {
            h.record(micros).unwrap();
        }
        h
    }

    fn all(&self) -> Histogram<u64> {
        self.histogram(self.started, self.started + Duration::from_secs(3600))
    }
}

/// CPU seconds the broker process has used, from /proc.
fn cpu_secs(broker: &Broker) -> f64 {
    let pid = broker.child.as_ref().unwrap().id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command (which may hold spaces): state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf only reads a constant.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / per_second
}

/// The machine's one-minute load average: other processes compete for the cores.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().next().unwrap_or("?").to_string()
}

/// Bytes of the files in `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok()?.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

/// The cleaner's progress at one moment.
#[derive(Clone, Copy)]
struct Progress {
    at: Instant,
    passes: u64,
    reclaimed_bytes: u64,
    dir_bytes: u64,
}

fn progress(broker: &Broker, dir: &Path) -> Progress {
    let metrics = broker.metrics();
    let metric = |name: &str| -> u64 {
        metrics
            .lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    Progress {
        at: Instant::now(),
        passes: metric("skein_cleaner_passes_total"),
        reclaimed_bytes: metric("skein_compacted_bytes_reclaimed_total"),
        dir_bytes: dir_bytes(dir),
    }
}

/// Samples the cleaner's progress until `stop`.
fn watch(broker: &Broker, dir: &Path, stop: &AtomicBool) -> Vec<Progress> {
    let mut timeline = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        timeline.push(progress(broker, dir));
        std::thread::sleep(SAMPLE_INTERVAL);
    }
    timeline
}

/// Waits until the cleaner has made a pass since `start` and then none for
/// `CLEANER_IDLE`; returns the first sample, in `timeline` or after it, that shows the
/// final pass count.
fn wait_for_cleaner(broker: &Broker, dir: &Path, start: Progress, timeline: &[Progress]) -> Progress {
    let deadline = Instant::now() + Duration::from_secs(3600);
    let mut last_pass: Option<Progress> = None;
    let mut note = |p: Progress| {
        if p.passes > last_pass.map_or(start.passes, |l| l.passes) {
            last_pass = Some(p);
        }
        last_pass
    };
    for p in timeline {
        note(*p);
    }
    loop {
        let now = progress(broker, dir);
        if let Some(pass) = note(now) {
            if now.at.duration_since(pass.at) >= CLEANER_IDLE {
                return pass;
            }
        }
        assert!(Instant::now() < deadline, "the cleaner made no pass within an hour");
        std::thread::sleep(SAMPLE_INTERVAL);
    }
}

/// Reads `compacted` back; returns (records read, distinct keys). Panics when a key's
/// last value is not the latest one loaded.
fn verify(bootstrap: &str, loaded: u64, keys: u64) -> (u64, u64) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "compaction-latency")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let (_, high) = consumer.fetch_watermarks("compacted", 0, Duration::from_secs(10)).unwrap();
    let mut list = TopicPartitionList::new();
    list.add_partition_offset("compacted", 0, Offset::Beginning).unwrap();
    consumer.assign(&list).unwrap();
    let mut latest: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut read = 0u64;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        assert!(Instant::now() < deadline, "read back stalled at {read} records");
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let value = m.payload().unwrap();
                let n = u64::from_be_bytes(value[..8].try_into().unwrap());
                latest.insert(m.key().unwrap().to_vec(), n);
                read += 1;
                if m.offset() + 1 >= high {
                    break;
                }
            }
            Some(Err(e)) => panic!("read back: {e}"),
            None => {}
        }
    }
    for k in 0..keys.min(loaded) {
        let expected = (loaded - 1 - k) / keys * keys + k;
        let n = latest.get(key(k, keys).as_bytes()).copied();
        assert_eq!(n, Some(expected), "key {k}: its latest value is lost");
    }
    (read, latest.len() as u64)
}

/// A produce phase with what the broker and the machine did meanwhile.
struct Measured {
    phase: Phase,
    /// Broker CPU seconds per second of the phase.
    broker_cpu: f64,
    load_average: String,
}

fn measure(broker: &Broker, rate: u64, secs: u64) -> Measured {
    let load_average = load_average();
    let cpu = cpu_secs(broker);
    let phase = produce_phase(&broker.bootstrap(), rate, secs);
    let broker_cpu = (cpu_secs(broker) - cpu) / phase.started.elapsed().as_secs_f64();
    Measured { phase, broker_cpu, load_average }
}

fn print_phase(name: &str, h: &Histogram<u64>, measured: Option<&Measured>) {
    let context = measured
        .map(|m| format!("  broker CPU {:.2}  load average {}", m.broker_cpu, m.load_average))
        .unwrap_or_default();
    println!(
        "  {name:<26} p50 {:>7} µs  p99 {:>7} µs  p99.9 {:>7} µs  max {:>7} µs  ({} records){context}",
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max(),
        h.len()
    );
}

fn main() {
    let gb: f64 = env("SKEIN_COMPACT_GB", 2.0);
    let keys: u64 = env("SKEIN_COMPACT_KEYS", 100_000);
    let secs: u64 = env("SKEIN_COMPACT_SECS", 10);
    let rate: u64 = env("SKEIN_COMPACT_RATE", 5000);
    let extra = std::env::var("SKEIN_COMPACT_FLAGS").unwrap_or_default();
    let dir = tempfile::tempdir().unwrap();
    let mut flags = vec!["--log-cleaner-backoff-ms", "200"];
    flags.extend(extra.split_whitespace());
    let mut broker = Broker::start(dir.path(), "1", &flags);
    let bootstrap = broker.bootstrap();
    let partition_dir: PathBuf = broker.data_dir.join("compacted-0");
    let mut admin = RawClient::connect(&bootstrap);
    let segment_bytes = (64 * MIB).to_string();
    create(
        &mut admin,
        "compacted",
        &[
            ("cleanup.policy", "compact"),
            ("segment.bytes", &segment_bytes),
            ("min.cleanable.dirty.ratio", "0.01"),
            ("min.compaction.lag.ms", LAG_HOLDING_MS),
        ],
    );
    create(&mut admin, "latency", &[]);

    let started = Instant::now();
    let loaded = load(&bootstrap, (gb * (1u64 << 30) as f64) as u64, keys);
    let load_secs = started.elapsed().as_secs_f64();
    let loaded_dir = progress(&broker, &partition_dir);
    assert_eq!(loaded_dir.passes, 0, "the cleaner ran while held off");

    // Warm-up: connections, metadata, page cache.
    produce_phase(&bootstrap, rate, 1);
    let quiet_before = measure(&broker, rate, secs);

    let before = progress(&broker, &partition_dir);
    alter(&mut admin, "compacted", "min.compaction.lag.ms", "0");
    let stop = AtomicBool::new(false);
    let (cleaning, timeline) = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| watch(&broker, &partition_dir, &stop));
        let measured = measure(&broker, rate, secs);
        stop.store(true, Ordering::Relaxed);
        (measured, watcher.join().unwrap())
    });
    let phase_end = progress(&broker, &partition_dir);
    let done = wait_for_cleaner(&broker, &partition_dir, before, &timeline);
    let cleaner_secs = done.at.duration_since(before.at).as_secs_f64();
    let cleaned_during_phase = done.at <= phase_end.at;
    let quiet_after = measure(&broker, rate, secs);
    let (read, distinct) = verify(&bootstrap, loaded, keys);
    broker.stop();
    let log = broker.log();
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).collect();

    let p99 = |h: &Histogram<u64>| h.value_at_quantile(0.99);
    let cleaning_all = cleaning.phase.all();
    let quiet_max = p99(&quiet_before.phase.all()).max(p99(&quiet_after.phase.all()));
    println!("compaction latency: {rate} produce msg/s on `latency` (acks=all, 200 B), {secs} s per phase, 1 shard");
    println!(
        "  loaded {:.2} GiB into `compacted` ({loaded} records of {VALUE_BYTES} B over {keys} keys) in {load_secs:.1} s; \
         broker flags: {}",
        loaded_dir.dir_bytes as f64 / (1u64 << 30) as f64,
        flags.join(" ")
    );
    print_phase("quiet", &quiet_before.phase.all(), Some(&quiet_before));
    print_phase("cleaning (whole phase)", &cleaning_all, Some(&cleaning));
    if cleaned_during_phase {
        // The cleaner finished inside the phase: the records due while it ran, alone.
        print_phase("cleaning (cleaner running)", &cleaning.phase.histogram(cleaning.phase.started, done.at), None);
    }
    print_phase("quiet again", &quiet_after.phase.all(), Some(&quiet_after));
    println!(
        "  cleaning p99 / max(quiet p99s): {:.2}  (quiet p99s {} and {} µs: the noise)",
        p99(&cleaning_all) as f64 / quiet_max as f64,
        p99(&quiet_before.phase.all()),
        p99(&quiet_after.phase.all())
    );
    println!(
        "  cleaner during the phase: {} passes, {} MiB reclaimed (counted at a pass's end), compacted-0 {} -> {} MiB",
        phase_end.passes - before.passes,
        (phase_end.reclaimed_bytes - before.reclaimed_bytes) / MIB,
        before.dir_bytes / MIB,
        phase_end.dir_bytes / MIB
    );
    println!(
        "  cleaner in all: {} passes, {} MiB reclaimed, done {cleaner_secs:.1} s after enabling ({}), compacted-0 {} MiB",
        done.passes - before.passes,
        (done.reclaimed_bytes - before.reclaimed_bytes) / MIB,
        if cleaned_during_phase { "inside the phase" } else { "after the phase" },
        done.dir_bytes / MIB
    );
    println!("  cleaning phase second by second (records by due time; the cleaner's state at the second's end):");
    for second in 0..secs {
        let from = cleaning.phase.started + Duration::from_secs(second);
        let until = from + Duration::from_secs(1);
        let h = cleaning.phase.histogram(from, until);
        let state = timeline.iter().take_while(|p| p.at < until).last().copied().unwrap_or(before);
        println!(
            "    {second:>3} s  p99 {:>7} µs  max {:>7} µs  passes {}  reclaimed {:>5} MiB  compacted-0 {:>5} MiB",
            p99(&h),
            h.max(),
            state.passes - before.passes,
            (state.reclaimed_bytes - before.reclaimed_bytes) / MIB,
            state.dir_bytes / MIB
        );
    }
    println!("  read back: {read} records, {distinct} distinct keys, every key at its latest value");
    println!("  broker warnings and errors: {}", warnings.len());
    for line in warnings.iter().take(10) {
        println!("    {line}");
    }
    assert!(done.reclaimed_bytes > before.reclaimed_bytes, "the cleaner reclaimed nothing: the figures mean nothing");
}
