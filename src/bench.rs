//! `skein bench run|compare`: the load generator of `bench-harness`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Run a workload file against a Kafka-compatible broker; writes JSON results.
    Run {
        workload: PathBuf,
        #[arg(long, default_value = "127.0.0.1:9092")]
        bootstrap_server: String,
        /// The broker's pid, to sample its CPU time and peak RSS (same machine only).
        #[arg(long)]
        broker_pid: Option<u32>,
        /// The broker's name in reports.
        #[arg(long, default_value = "broker")]
        label: String,
        /// Override the workload's producer rate (messages per second).
        #[arg(long)]
        rate: Option<u64>,
        /// Override the workload's measured duration (seconds).
        #[arg(long)]
        duration_secs: Option<u64>,
        /// Override the workload's warm-up (seconds).
        #[arg(long)]
        warmup_secs: Option<u64>,
        /// Override the workload's partitions per topic.
        #[arg(long)]
        partitions: Option<u32>,
        /// Where to write the JSON results.
        #[arg(long)]
        out: Option<PathBuf>,
        /// The client that generates the load: `librdkafka` (a real client's view) or
        /// `native` (Skein's own pipelined Kafka-protocol client, cheap enough that
        /// the broker, not the generator, is the limit).
        #[arg(long, default_value = "librdkafka", value_parser = ["librdkafka", "native"])]
        driver: String,
        /// The broker's Prometheus endpoint (Skein: `http://<admin-listener>/metrics`):
        /// scraped before and after the window to print where the broker's time went.
        #[arg(long)]
        metrics_url: Option<String>,
        /// A librdkafka property for every client, `name=value` (repeatable): e.g.
        /// `-X security.protocol=SASL_SSL -X ssl.ca.location=ca.pem`.
        #[arg(short = 'X', value_name = "NAME=VALUE")]
        client_config: Vec<String>,
        /// Keep the run's topics when it ends; by default they are deleted, so that
        /// repeated runs on one broker do not fill its disk.
        #[arg(long)]
        keep_topics: bool,
    },
    /// A three-broker cluster's acks=all publish latency and failover time: writes
    /// one partition of replication factor 3 at `--rate`, kills its leader (SIGKILL)
    /// after `--steady-secs`, and measures from the kill to the ack of the first record sent after it.
    Failover {
        #[arg(long, default_value = "127.0.0.1:9092")]
        bootstrap_server: String,
        /// The topic to create (it must not exist).
        #[arg(long, default_value = "failover")]
        topic: String,
        /// Each broker's process: `ID=PID`, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        pids: Vec<String>,
        #[arg(long, default_value_t = 1000)]
        rate: u64,
        #[arg(long, default_value_t = 10)]
        steady_secs: u64,
        #[arg(long, default_value_t = 20)]
        after_secs: u64,
        #[arg(long, default_value = "cluster")]
        label: String,
        /// Where to append the JSON result (one line).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// One step of a partition-count scale run (`bench-harness/scale.sh`): `create`,
    /// `produce`, `metadata`, `consume`, `serving`, `trickle`, `groups`, `group-offsets` or
    /// `delete` over `--topics` topics
    /// of `--partitions` partitions each; prints one JSON line of figures.
    Scale {
        #[arg(value_parser = ["create", "produce", "metadata", "consume", "serving", "trickle", "groups", "group-offsets", "delete"])]
        step: String,
        #[arg(long, default_value = "127.0.0.1:9092")]
        bootstrap_server: String,
        /// Every node whose Metadata must list the new topics (`create`), comma-separated.
        #[arg(long, value_delimiter = ',')]
        nodes: Vec<String>,
        #[arg(long, default_value = "scale")]
        prefix: String,
        #[arg(long, default_value_t = 100)]
        topics: u32,
        #[arg(long, default_value_t = 100)]
        partitions: u32,
        #[arg(long, default_value_t = 1)]
        replication_factor: i16,
        #[arg(long, default_value_t = 100)]
        record_bytes: usize,
        /// How long a step waits before it reports what it reached.
        #[arg(long, default_value_t = 120)]
        timeout_secs: u64,
        /// A topic config for `create`, `name=value` (repeatable).
        #[arg(long = "config", value_name = "NAME=VALUE")]
        configs: Vec<String>,
        /// Full Metadata requests to time (`metadata`).
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Records a second over all partitions (`trickle`).
        #[arg(long, default_value_t = 10_000)]
        rate: u64,
        /// How long to trickle (`trickle`).
        #[arg(long, default_value_t = 30)]
        duration_secs: u64,
        /// The broker's pid, to read its resident memory (`trickle`, `groups`; same
        /// machine only).
        #[arg(long)]
        broker_pid: Option<u32>,
        /// Consumer groups (`groups`, `group-offsets`).
        #[arg(long, default_value_t = 10_000)]
        groups: usize,
        /// The offset every group committed last (`group-offsets`): the rounds of the
        /// `groups` run.
        #[arg(long, default_value_t = 30)]
        expected_offset: i64,
        /// The name the JSON line gives the step (default: the step's own), to tell
        /// two runs of one step apart (`serving` after a crash and after a clean stop).
        #[arg(long = "as")]
        name: Option<String>,
        /// Where to append the JSON line.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Print runs side by side and write an SVG latency-percentile plot.
    Compare {
        results: Vec<PathBuf>,
        #[arg(long)]
        svg: Option<PathBuf>,
    },
}

pub fn run(command: BenchCommand) -> Result<(), String> {
    match command {
        BenchCommand::Run {
            workload,
            bootstrap_server,
            broker_pid,
            label,
            rate,
            duration_secs,
            warmup_secs,
            partitions,
            out,
            driver,
            metrics_url,
            client_config,
            keep_topics,
        } => {
            let client_config = client_config
                .iter()
                .map(|p| p.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
                .collect::<Option<Vec<_>>>()
                .ok_or("-X takes name=value")?;
            let mut workload = skein_bench_harness::Workload::load(&workload)?;
            if let Some(d) = duration_secs {
                workload.duration_secs = d.max(1);
            }
            if let Some(w) = warmup_secs {
                workload.warmup_secs = w;
            }
            if let Some(p) = partitions {
                workload.partitions_per_topic = p.max(1);
            }
            let options = skein_bench_harness::RunOptions {
                bootstrap: bootstrap_server,
                broker_pid,
                label,
                rate,
                progress: Duration::from_secs(5),
                metrics_url,
                client_config,
                keep_topics,
            };
            let result = if driver == "native" {
                skein_bench_harness::native::run(&workload, &options)?
            } else {
                skein_bench_harness::run(&workload, &options)?
            };
            print!("{}", skein_bench_harness::compare::table(std::slice::from_ref(&result)));
            print!("{}", skein_bench_harness::stages::report(&result.stages, result.copies.as_ref()));
            let json = serde_json::to_string_pretty(&result).map_err(|e| e.to_string())?;
            if let Some(path) = out {
                std::fs::write(&path, json).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            }
        }
        BenchCommand::Failover { bootstrap_server, topic, pids, rate, steady_secs, after_secs, label, out } => {
            let mut by_broker = std::collections::BTreeMap::new();
            for pair in &pids {
                let (id, pid) = pair.split_once('=').ok_or_else(|| format!("--pids {pair}: expected ID=PID"))?;
                let id = id.trim().parse::<i32>().map_err(|_| format!("--pids {pair}: bad broker id"))?;
                let pid = pid.trim().parse::<u32>().map_err(|_| format!("--pids {pair}: bad pid"))?;
                by_broker.insert(id, pid);
            }
            let options = skein_bench_harness::failover::FailoverOptions {
                bootstrap: bootstrap_server,
                topic,
                pids: by_broker,
                rate,
                steady: Duration::from_secs(steady_secs.max(1)),
                after: Duration::from_secs(after_secs.max(1)),
                label,
            };
            let result = skein_bench_harness::failover::run(&options)?;
            println!(
                "{}: acks=all at {}/s, publish p50 {:.2} ms p99 {:.2} ms p99.9 {:.2} ms over {} records; end to end p50 {:.2} ms p99 {:.2} ms p99.9 {:.2} ms over {} records; {:.0} CPU-seconds per GB; leader {} killed, the first record sent after it acked {:.0} ms later; {} failed",
                result.label, result.rate, result.publish_p50_ms, result.publish_p99_ms, result.publish_p999_ms,
                result.acked_steady, result.e2e_p50_ms, result.e2e_p99_ms, result.e2e_p999_ms, result.consumed_steady,
                result.cpu_seconds_per_gb, result.killed_broker, result.failover_ms, result.failed
            );
            if let Some(path) = out {
                append_line(&path, &serde_json::to_string(&result).map_err(|e| e.to_string())?)?;
            }
        }
        BenchCommand::Scale {
            step,
            bootstrap_server,
            nodes,
            prefix,
            topics,
            partitions,
            replication_factor,
            record_bytes,
            timeout_secs,
            configs,
            rounds,
            rate,
            duration_secs,
            broker_pid,
            groups,
            expected_offset,
            name,
            out,
        } => {
            let configs = configs
                .iter()
                .map(|p| p.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
                .collect::<Option<Vec<_>>>()
                .ok_or("--config takes name=value")?;
            let options = skein_bench_harness::scale::ScaleOptions {
                bootstrap: bootstrap_server,
                nodes,
                prefix,
                topics,
                partitions,
                replication_factor,
                record_bytes,
                timeout: Duration::from_secs(timeout_secs.max(1)),
                configs,
            };
            use skein_bench_harness::scale;
            let mut figures = match step.as_str() {
                "create" => scale::create(&options)?,
                "produce" => scale::produce(&options)?,
                "metadata" => scale::metadata(&options, rounds)?,
                "consume" => scale::consume(&options)?,
                "serving" => scale::serving(&options)?,
                "trickle" => scale::trickle(&options, rate, Duration::from_secs(duration_secs), broker_pid)?,
                "groups" => scale::groups(&options, groups, Duration::from_secs(duration_secs), broker_pid)?,
                "group-offsets" => scale::group_offsets(&options, groups, expected_offset)?,
                _ => scale::delete(&options)?,
            };
            if let Some(name) = name {
                figures["step"] = serde_json::Value::String(name);
            }
            let line = figures.to_string();
            println!("{line}");
            if let Some(path) = out {
                append_line(&path, &line)?;
            }
        }
        BenchCommand::Compare { results, svg } => {
            if results.is_empty() {
                return Err("give at least one results file".into());
            }
            let mut runs = Vec::new();
            for path in &results {
                let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                runs.push(serde_json::from_str(&text).map_err(|e| format!("invalid results {}: {e}", path.display()))?);
            }
            print!("{}", skein_bench_harness::compare::table(&runs));
            print!("{}", skein_bench_harness::compare::ratios(&runs));
            if let Some(path) = svg {
                std::fs::write(&path, skein_bench_harness::compare::svg(&runs))
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            }
        }
    }
    Ok(())
}

/// Appends `line` and a newline to the file at `path`, creating it.
fn append_line(path: &std::path::Path, line: &str) -> Result<(), String> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| writeln!(f, "{line}"))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}
