//! Client tools built on librdkafka (the rdkafka crate): `skein topic`, `skein produce`,
//! `skein consume`. They work against any Kafka-compatible broker. Failures print what
//! failed and exit non-zero.

use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

#[derive(Args, Debug, Clone)]
pub struct Connection {
    /// Broker to bootstrap from.
    #[arg(long, env = "SKEIN_BOOTSTRAP_SERVER", default_value = "127.0.0.1:9092")]
    pub bootstrap_server: String,
    /// How long to wait for the broker, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// A librdkafka client property, `name=value` (as kcat's -X); repeatable.
    #[arg(short = 'X', long = "property", value_name = "NAME=VALUE")]
    pub properties: Vec<String>,
}

impl Connection {
    pub fn config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.bootstrap_server).set("log_level", "3");
        for property in &self.properties {
            // A property without '=' is passed on as is: librdkafka then names it in
            // its refusal.
            let (k, v) = property.split_once('=').unwrap_or((property, ""));
            config.set(k.trim(), v.trim());
        }
        config
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

#[derive(Subcommand, Debug)]
pub enum TopicCommand {
    /// Create a topic.
    Create {
        name: String,
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        #[arg(long, default_value_t = 1)]
        replication_factor: i32,
        /// Topic config, `name=value` with Kafka's names; repeatable.
        #[arg(long = "config", value_name = "NAME=VALUE")]
        configs: Vec<String>,
        #[command(flatten)]
        connection: Connection,
    },
    /// List topics.
    List {
        #[command(flatten)]
        connection: Connection,
    },
    /// Show a topic's partitions and configs.
    Describe {
        name: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// Delete a topic.
    Delete {
        name: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// Change a topic's configs (`--config`) or grow its partitions (`--partitions`).
    Alter {
        name: String,
        #[arg(long)]
        partitions: Option<usize>,
        #[arg(long = "config", value_name = "NAME=VALUE")]
        configs: Vec<String>,
        #[command(flatten)]
        connection: Connection,
    },
}

#[derive(Args, Debug)]
pub struct ProduceArgs {
    pub topic: String,
    /// Split each line into key and value at the first occurrence of this separator.
    #[arg(long)]
    pub key_separator: Option<String>,
    /// Send every line to this partition (default: by key, or spread).
    #[arg(long)]
    pub partition: Option<i32>,
    /// Producer `acks`.
    #[arg(long, default_value = "all")]
    pub acks: String,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Args, Debug)]
pub struct ConsumeArgs {
    pub topic: String,
    /// Start from the earliest offset (default: the latest).
    #[arg(long, conflicts_with_all = ["offset", "timestamp"])]
    pub from_beginning: bool,
    /// Start from this offset (needs --partition when the topic has several).
    #[arg(long, conflicts_with = "timestamp")]
    pub offset: Option<i64>,
    /// Start from the first record at or after this time (ms since the epoch).
    #[arg(long)]
    pub timestamp: Option<i64>,
    /// Read this partition only.
    #[arg(long)]
    pub partition: Option<i32>,
    /// Exit after this many records.
    #[arg(long)]
    pub max_messages: Option<usize>,
    /// Print keys, separated from values by this string.
    #[arg(long)]
    pub key_separator: Option<String>,
    /// Exit when no record arrived for this long (ms); default: wait forever.
    #[arg(long)]
    pub idle_timeout_ms: Option<u64>,
    /// Consume as a member of this group (subscribe, partitions assigned by the
    /// group, offsets committed), starting from committed offsets.
    #[arg(long, conflicts_with_all = ["offset", "timestamp", "partition"])]
    pub group: Option<String>,
    /// With --group: commit each record's offset `after` printing it (at least once:
    /// a crash may repeat records) or `before` (at most once: a crash may lose them).
    #[arg(long, default_value = "after", value_parser = ["after", "before"])]
    pub commit: String,
    #[command(flatten)]
    pub connection: Connection,
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    futures_lite::future::block_on(future)
}

fn admin(connection: &Connection) -> Result<AdminClient<DefaultClientContext>, String> {
    connection.config().create().map_err(|e| format!("cannot create admin client: {e}"))
}

fn options(connection: &Connection) -> AdminOptions {
    AdminOptions::new().request_timeout(Some(connection.timeout())).operation_timeout(Some(connection.timeout()))
}

fn parse_configs(entries: &[String]) -> Result<Vec<(String, String)>, String> {
    entries
        .iter()
        .map(|e| {
            e.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| format!("invalid --config {e:?}: expected NAME=VALUE"))
        })
        .collect()
}

/// Partition ids of a topic, from the broker's metadata.
fn partitions_of(connection: &Connection, topic: &str) -> Result<Vec<i32>, String> {
    let consumer: BaseConsumer = connection.config().create().map_err(|e| format!("cannot create client: {e}"))?;
    let metadata = consumer
        .fetch_metadata(Some(topic), connection.timeout())
        .map_err(|e| format!("cannot reach {}: {e}", connection.bootstrap_server))?;
    let t = metadata.topics().iter().find(|t| t.name() == topic).ok_or_else(|| format!("topic {topic} not found"))?;
    if let Some(e) = t.error() {
        return Err(format!("topic {topic}: {}", rdkafka::types::RDKafkaErrorCode::from(e)));
    }
    Ok(t.partitions().iter().map(|p| p.id()).collect())
}

pub fn topic(command: TopicCommand) -> Result<(), String> {
    match command {
        TopicCommand::Create { name, partitions, replication_factor, configs, connection } => {
            let configs = parse_configs(&configs)?;
            let mut topic = NewTopic::new(&name, partitions, TopicReplication::Fixed(replication_factor));
            for (k, v) in &configs {
                topic = topic.set(k, v);
            }
            let results = block_on(admin(&connection)?.create_topics(&[topic], &options(&connection)))
                .map_err(|e| format!("cannot create topic {name}: {e}"))?;
            for result in results {
                result.map_err(|(t, e)| format!("cannot create topic {t}: {e}"))?;
            }
            println!("created topic {name} with {partitions} partitions");
        }
        TopicCommand::List { connection } => {
            let consumer: BaseConsumer =
                connection.config().create().map_err(|e| format!("cannot create client: {e}"))?;
            let metadata = consumer
                .fetch_metadata(None, connection.timeout())
                .map_err(|e| format!("cannot reach {}: {e}", connection.bootstrap_server))?;
            let mut names: Vec<&str> = metadata.topics().iter().map(|t| t.name()).collect();
            names.sort();
            for name in names {
                println!("{name}");
            }
        }
        TopicCommand::Describe { name, connection } => {
            let consumer: BaseConsumer =
                connection.config().create().map_err(|e| format!("cannot create client: {e}"))?;
            let metadata = consumer
                .fetch_metadata(Some(&name), connection.timeout())
                .map_err(|e| format!("cannot reach {}: {e}", connection.bootstrap_server))?;
            let topic =
                metadata.topics().iter().find(|t| t.name() == name).ok_or_else(|| format!("topic {name} not found"))?;
            if let Some(e) = topic.error() {
                return Err(format!("topic {name}: {}", rdkafka::types::RDKafkaErrorCode::from(e)));
            }
            println!("topic {name}: {} partitions", topic.partitions().len());
            for p in topic.partitions() {
                let (low, high) = consumer
                    .fetch_watermarks(&name, p.id(), connection.timeout())
                    .map_err(|e| format!("cannot read offsets of {name}-{}: {e}", p.id()))?;
                println!(
                    "  partition {} leader {} replicas {:?} isr {:?} offsets {low}..{high}",
                    p.id(),
                    p.leader(),
                    p.replicas(),
                    p.isr()
                );
            }
            let configs = block_on(
                admin(&connection)?.describe_configs(&[ResourceSpecifier::Topic(&name)], &options(&connection)),
            )
            .map_err(|e| format!("cannot describe configs of {name}: {e}"))?;
            for resource in configs {
                let resource = resource.map_err(|e| format!("cannot describe configs of {name}: {e}"))?;
                for entry in resource.entries {
                    println!("  {}={} ({:?})", entry.name, entry.value.unwrap_or_default(), entry.source);
                }
            }
        }
        TopicCommand::Delete { name, connection } => {
            let results = block_on(admin(&connection)?.delete_topics(&[&name], &options(&connection)))
                .map_err(|e| format!("cannot delete topic {name}: {e}"))?;
            for result in results {
                result.map_err(|(t, e)| format!("cannot delete topic {t}: {e}"))?;
            }
            println!("deleted topic {name}");
        }
        TopicCommand::Alter { name, partitions, configs, connection } => {
            if partitions.is_none() && configs.is_empty() {
                return Err("nothing to alter: give --partitions or --config".into());
            }
            let admin = admin(&connection)?;
            if let Some(count) = partitions {
                let results =
                    block_on(admin.create_partitions(&[NewPartitions::new(&name, count)], &options(&connection)))
                        .map_err(|e| format!("cannot add partitions to {name}: {e}"))?;
                for result in results {
                    result.map_err(|(t, e)| format!("cannot add partitions to {t}: {e}"))?;
                }
                println!("topic {name} now has {count} partitions");
            }
            let configs = parse_configs(&configs)?;
            if !configs.is_empty() {
                // AlterConfigs replaces the whole set: start from the current overrides.
                let current =
                    block_on(admin.describe_configs(&[ResourceSpecifier::Topic(&name)], &options(&connection)))
                        .map_err(|e| format!("cannot describe configs of {name}: {e}"))?;
                let mut alter = AlterConfig::new(ResourceSpecifier::Topic(&name));
                let mut merged: Vec<(String, String)> = Vec::new();
                for resource in current {
                    let resource = resource.map_err(|e| format!("cannot describe configs of {name}: {e}"))?;
                    for entry in resource.entries {
                        if entry.source == rdkafka::admin::ConfigSource::DynamicTopic {
                            merged.push((entry.name, entry.value.unwrap_or_default()));
                        }
                    }
                }
                for (k, v) in configs {
                    merged.retain(|(name, _)| *name != k);
                    merged.push((k, v));
                }
                for (k, v) in &merged {
                    alter = alter.set(k, v);
                }
                let results = block_on(admin.alter_configs(&[alter], &options(&connection)))
                    .map_err(|e| format!("cannot alter configs of {name}: {e}"))?;
                for result in results {
                    result.map_err(|(_, e)| format!("cannot alter configs of {name}: {e}"))?;
                }
                println!("altered configs of {name}");
            }
        }
    }
    Ok(())
}

#[derive(Clone, Default)]
struct Deliveries {
    failed: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    delivered: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.delivered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Err((e, _)) => self.failed.lock().expect("lock").push(e.to_string()),
        }
    }
}

/// Sends each stdin line as a record; waits for every delivery.
pub fn produce(args: ProduceArgs) -> Result<(), String> {
    let deliveries = Deliveries::default();
    let producer: BaseProducer<Deliveries> = args
        .connection
        .config()
        .set("acks", &args.acks)
        .set("message.timeout.ms", args.connection.timeout_ms.to_string())
        .create_with_context(deliveries.clone())
        .map_err(|e| format!("cannot create producer: {e}"))?;
    let stdin = std::io::stdin();
    let mut sent = 0usize;
    for line in stdin.lock().lines() {
        let line = line.map_err(|e| format!("cannot read stdin: {e}"))?;
        let (key, value) = match &args.key_separator {
            Some(sep) => match line.split_once(sep.as_str()) {
                Some((k, v)) => (Some(k.to_string()), v.to_string()),
                None => (None, line.clone()),
            },
            None => (None, line.clone()),
        };
        loop {
            let mut record: BaseRecord<'_, str, str> = BaseRecord::to(&args.topic).payload(&value);
            if let Some(k) = &key {
                record = record.key(k);
            }
            if let Some(p) = args.partition {
                record = record.partition(p);
            }
            match producer.send(record) {
                Ok(()) => break,
                Err((
                    rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                    _,
                )) => {
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => return Err(format!("cannot produce to {}: {e}", args.topic)),
            }
        }
        sent += 1;
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(args.connection.timeout() + Duration::from_secs(1))
        .map_err(|e| format!("cannot deliver to {}: {e}", args.connection.bootstrap_server))?;
    let failed = deliveries.failed.lock().expect("lock");
    if let Some(first) = failed.first() {
        return Err(format!("{} of {sent} records failed: {first}", failed.len()));
    }
    eprintln!("produced {sent} records to {}", args.topic);
    Ok(())
}

/// Prints records of a topic, one per line.
pub fn consume(args: ConsumeArgs) -> Result<(), String> {
    if args.group.is_some() {
        return consume_in_group(args);
    }
    let connection = &args.connection;
    let consumer: BaseConsumer = connection
        .config()
        .set("group.id", "skein-cli")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .map_err(|e| format!("cannot create consumer: {e}"))?;
    let partitions = match args.partition {
        Some(p) => vec![p],
        None => partitions_of(connection, &args.topic)?,
    };
    if args.offset.is_some() && partitions.len() > 1 {
        return Err("--offset needs --partition when the topic has several partitions".into());
    }
    let mut list = TopicPartitionList::new();
    for p in &partitions {
        let start = match (args.from_beginning, args.offset, args.timestamp) {
            (true, _, _) => Offset::Beginning,
            (_, Some(o), _) => Offset::Offset(o),
            (_, _, Some(t)) => Offset::Offset(t),
            _ => Offset::End,
        };
        list.add_partition_offset(&args.topic, *p, start).map_err(|e| e.to_string())?;
    }
    if args.timestamp.is_some() {
        list = consumer
            .offsets_for_times(list, connection.timeout())
            .map_err(|e| format!("cannot look up offsets by time: {e}"))?;
    }
    consumer.assign(&list).map_err(|e| format!("cannot assign partitions: {e}"))?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    poll_records(&consumer, &args, |m| {
        writeln!(out, "{}", format_record(m, args.key_separator.as_deref()))
            .map_err(|e| format!("cannot write stdout: {e}"))
    })?;
    out.flush().map_err(|e| e.to_string())
}

/// A record as `consume` prints it: the value, preceded by the key and the separator
/// when one is given.
fn format_record(m: &rdkafka::message::BorrowedMessage<'_>, key_separator: Option<&str>) -> String {
    let value = m.payload().map(String::from_utf8_lossy).unwrap_or_default();
    match (key_separator, m.key()) {
        (Some(sep), Some(k)) => format!("{}{sep}{value}", String::from_utf8_lossy(k)),
        (Some(sep), None) => format!("{sep}{value}"),
        _ => value.to_string(),
    }
}

/// Polls until `--max-messages` records or `--idle-timeout-ms` of silence, handing
/// each record to `each`.
fn poll_records(
    consumer: &BaseConsumer,
    args: &ConsumeArgs,
    mut each: impl FnMut(&rdkafka::message::BorrowedMessage<'_>) -> Result<(), String>,
) -> Result<(), String> {
    let mut count = 0usize;
    let mut last = Instant::now();
    while args.max_messages.is_none_or(|max| count < max) {
        if args.idle_timeout_ms.is_some_and(|ms| last.elapsed() > Duration::from_millis(ms)) {
            break;
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(e)) => eprintln!("skein consume: {e}"),
            Some(Ok(m)) => {
                last = Instant::now();
                count += 1;
                each(&m)?;
            }
        }
    }
    Ok(())
}

/// `consume --group`: a group member that commits each record before or after
/// printing it, so its delivery guarantee is the one the flag names.
fn consume_in_group(args: ConsumeArgs) -> Result<(), String> {
    let group = args.group.clone().expect("checked by the caller");
    let consumer: BaseConsumer = args
        .connection
        .config()
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", if args.from_beginning { "earliest" } else { "latest" })
        .create()
        .map_err(|e| format!("cannot create consumer: {e}"))?;
    consumer.subscribe(&[&args.topic]).map_err(|e| format!("cannot subscribe to {}: {e}", args.topic))?;
    let stdout = std::io::stdout();
    let commit = |m: &rdkafka::message::BorrowedMessage<'_>| -> Result<(), String> {
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(m.topic(), m.partition(), Offset::Offset(m.offset() + 1))
            .map_err(|e| e.to_string())?;
        consumer.commit(&list, rdkafka::consumer::CommitMode::Sync).map_err(|e| format!("cannot commit: {e}"))
    };
    poll_records(&consumer, &args, |m| {
        if args.commit == "before" {
            commit(m)?;
        }
        // Flushed per record: what was printed has been processed.
        let mut out = stdout.lock();
        writeln!(out, "{}", format_record(m, args.key_separator.as_deref()))
            .and_then(|()| out.flush())
            .map_err(|e| format!("cannot write stdout: {e}"))?;
        drop(out);
        if args.commit == "after" {
            commit(m)?;
        }
        Ok(())
    })
}
