//! `skein group list|describe|delete|reset-offsets`, on librdkafka: works against any
//! Kafka-compatible broker.

use std::collections::BTreeMap;
use std::time::Duration;

use clap::{Args, Subcommand};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use crate::cli::Connection;

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// List consumer groups with their state.
    List {
        #[command(flatten)]
        connection: Connection,
    },
    /// Members, assignments, committed offsets, end offsets and lag per partition.
    Describe {
        group: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// Delete groups without members, with their committed offsets.
    Delete {
        group: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// Move a group's committed offsets; refused while the group has members.
    ResetOffsets(ResetArgs),
}

#[derive(Args, Debug)]
pub struct ResetArgs {
    pub group: String,
    /// The topic whose offsets move.
    #[arg(long)]
    pub topic: String,
    #[arg(long, group = "target")]
    pub to_earliest: bool,
    #[arg(long, group = "target")]
    pub to_latest: bool,
    /// First offset at or after this time: RFC 3339 (`2026-11-29T10:00:00Z`) or ms.
    #[arg(long, group = "target")]
    pub to_datetime: Option<String>,
    /// Move each committed offset by this much (negative: back), within the log.
    #[arg(long, group = "target", allow_hyphen_values = true)]
    pub shift_by: Option<i64>,
    #[command(flatten)]
    pub connection: Connection,
}

fn group_consumer(connection: &Connection, group: &str) -> Result<BaseConsumer, String> {
    let mut config = rdkafka::config::ClientConfig::new();
    config
        .set("bootstrap.servers", &connection.bootstrap_server)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("log_level", "3");
    config.create().map_err(|e| format!("cannot create client: {e}"))
}

fn partitions(consumer: &BaseConsumer, connection: &Connection, topic: &str) -> Result<Vec<i32>, String> {
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_millis(connection.timeout_ms))
        .map_err(|e| format!("cannot reach {}: {e}", connection.bootstrap_server))?;
    let t = metadata.topics().iter().find(|t| t.name() == topic).ok_or_else(|| format!("topic {topic} not found"))?;
    if t.error().is_some() {
        return Err(format!("topic {topic} not found"));
    }
    Ok(t.partitions().iter().map(|p| p.id()).collect())
}

/// Topic -> partitions in a consumer-protocol assignment (`ConsumerProtocolAssignment`).
fn decode_assignment(bytes: &[u8]) -> BTreeMap<String, Vec<i32>> {
    let mut out = BTreeMap::new();
    let mut at = 2usize; // version
    let take = |at: &mut usize, n: usize| -> Option<&[u8]> {
        let slice = bytes.get(*at..*at + n)?;
        *at += n;
        Some(slice)
    };
    let count = take(&mut at, 4).map_or(0, |b| i32::from_be_bytes(b.try_into().unwrap_or([0; 4])));
    for _ in 0..count.max(0) {
        let Some(len) = take(&mut at, 2).map(|b| i16::from_be_bytes([b[0], b[1]]).max(0) as usize) else { break };
        let Some(name) = take(&mut at, len).map(|b| String::from_utf8_lossy(b).to_string()) else { break };
        let Some(n) = take(&mut at, 4).map(|b| i32::from_be_bytes(b.try_into().unwrap_or([0; 4]))) else { break };
        let mut parts = Vec::new();
        for _ in 0..n.max(0) {
            if let Some(b) = take(&mut at, 4) {
                parts.push(i32::from_be_bytes(b.try_into().unwrap_or([0; 4])));
            }
        }
        out.insert(name, parts);
    }
    out
}

pub fn run(command: GroupCommand) -> Result<(), String> {
    match command {
        GroupCommand::List { connection } => {
            let consumer = group_consumer(&connection, "skein-cli")?;
            let groups = consumer
                .fetch_group_list(None, Duration::from_millis(connection.timeout_ms))
                .map_err(|e| format!("cannot list groups at {}: {e}", connection.bootstrap_server))?;
            for g in groups.groups() {
                println!("{} {} {}", g.name(), g.state(), g.protocol_type());
            }
        }
        GroupCommand::Describe { group, connection } => {
            let consumer = group_consumer(&connection, &group)?;
            let timeout = Duration::from_millis(connection.timeout_ms);
            let list = consumer
                .fetch_group_list(Some(&group), timeout)
                .map_err(|e| format!("cannot describe group {group}: {e}"))?;
            let info = list.groups().first().ok_or_else(|| format!("group {group} not found"))?;
            println!(
                "group {} state {} protocol {} members {}",
                info.name(),
                info.state(),
                info.protocol(),
                info.members().len()
            );
            let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
            let mut owner: BTreeMap<(String, i32), String> = BTreeMap::new();
            for m in info.members() {
                let assigned = m.assignment().map(decode_assignment).unwrap_or_default();
                println!(
                    "  member {} client {} host {} assigned {:?}",
                    m.id(),
                    m.client_id(),
                    m.client_host(),
                    assigned
                );
                for (t, ps) in assigned {
                    for p in ps {
                        owner.insert((t.clone(), p), m.id().to_string());
                        topics.entry(t.clone()).or_default().push(p);
                    }
                }
            }
            // Committed offsets of every topic the group has committed to or owns.
            let metadata = consumer.fetch_metadata(None, timeout).map_err(|e| format!("cannot read metadata: {e}"))?;
            let mut wanted = TopicPartitionList::new();
            for t in metadata.topics().iter().filter(|t| !t.name().starts_with("__")) {
                for p in t.partitions() {
                    wanted.add_partition(t.name(), p.id());
                }
            }
            let committed = consumer
                .committed_offsets(wanted, timeout)
                .map_err(|e| format!("cannot read committed offsets: {e}"))?;
            println!("  {:<30} {:>9} {:>12} {:>12} {:>8}  member", "topic", "partition", "committed", "end", "lag");
            for e in committed.elements() {
                let Some(offset) = e.offset().to_raw().filter(|o| *o >= 0) else {
                    if !owner.contains_key(&(e.topic().to_string(), e.partition())) {
                        continue;
                    }
                    println!(
                        "  {:<30} {:>9} {:>12} {:>12} {:>8}  {}",
                        e.topic(),
                        e.partition(),
                        "-",
                        "-",
                        "-",
                        owner[&(e.topic().to_string(), e.partition())]
                    );
                    continue;
                };
                let (_, end) =
                    consumer.fetch_watermarks(e.topic(), e.partition(), timeout).map_err(|e| e.to_string())?;
                let member = owner.get(&(e.topic().to_string(), e.partition())).cloned().unwrap_or_else(|| "-".into());
                println!(
                    "  {:<30} {:>9} {:>12} {:>12} {:>8}  {member}",
                    e.topic(),
                    e.partition(),
                    offset,
                    end,
                    end - offset
                );
            }
        }
        GroupCommand::Delete { group, connection } => {
            let admin: AdminClient<DefaultClientContext> = rdkafka::config::ClientConfig::new()
                .set("bootstrap.servers", &connection.bootstrap_server)
                .create()
                .map_err(|e| format!("cannot create admin client: {e}"))?;
            let options = AdminOptions::new().request_timeout(Some(Duration::from_millis(connection.timeout_ms)));
            let results = futures_lite::future::block_on(admin.delete_groups(&[&group], &options))
                .map_err(|e| format!("cannot delete group {group}: {e}"))?;
            for r in results {
                r.map_err(|(g, e)| format!("cannot delete group {g}: {e}"))?;
            }
            println!("deleted group {group}");
        }
        GroupCommand::ResetOffsets(args) => reset(args)?,
    }
    Ok(())
}

fn parse_time(text: &str) -> Result<i64, String> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    // RFC 3339 in UTC: YYYY-MM-DDTHH:MM:SS[.fff]Z
    let bad = || format!("invalid --to-datetime {text:?}: expected ms since the epoch or YYYY-MM-DDTHH:MM:SSZ");
    let t = text.strip_suffix('Z').ok_or_else(bad)?;
    let (date, time) = t.split_once('T').ok_or_else(bad)?;
    let d: Vec<i64> = date.split('-').map(|x| x.parse().map_err(|_| bad())).collect::<Result<_, _>>()?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let h: Vec<i64> = hms.split(':').map(|x| x.parse().map_err(|_| bad())).collect::<Result<_, _>>()?;
    if d.len() != 3 || h.len() != 3 {
        return Err(bad());
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, m, day) = (if d[1] <= 2 { d[0] - 1 } else { d[0] }, d[1], d[2]);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let millis: i64 = format!("{:0<3}", &frac[..frac.len().min(3)]).parse().map_err(|_| bad())?;
    Ok(((days * 24 + h[0]) * 60 + h[1]) * 60_000 + h[2] * 1000 + millis)
}

fn reset(args: ResetArgs) -> Result<(), String> {
    let connection = &args.connection;
    let timeout = Duration::from_millis(connection.timeout_ms);
    let consumer = group_consumer(connection, &args.group)?;
    let list = consumer
        .fetch_group_list(Some(&args.group), timeout)
        .map_err(|e| format!("cannot describe group {}: {e}", args.group))?;
    if let Some(info) = list.groups().first() {
        if !info.members().is_empty() {
            return Err(format!(
                "group {} has {} active members: stop them before resetting offsets",
                args.group,
                info.members().len()
            ));
        }
    }
    let parts = partitions(&consumer, connection, &args.topic)?;
    let mut current = TopicPartitionList::new();
    for p in &parts {
        current.add_partition(&args.topic, *p);
    }
    let committed =
        consumer.committed_offsets(current, timeout).map_err(|e| format!("cannot read committed offsets: {e}"))?;
    let mut target = TopicPartitionList::new();
    if let Some(time) = &args.to_datetime {
        let ms = parse_time(time)?;
        let mut query = TopicPartitionList::new();
        for p in &parts {
            query.add_partition_offset(&args.topic, *p, Offset::Offset(ms)).map_err(|e| e.to_string())?;
        }
        let found =
            consumer.offsets_for_times(query, timeout).map_err(|e| format!("cannot look up offsets by time: {e}"))?;
        for e in found.elements() {
            let offset = match e.offset() {
                Offset::Offset(o) => o,
                _ => consumer.fetch_watermarks(&args.topic, e.partition(), timeout).map_err(|e| e.to_string())?.1,
            };
            target
                .add_partition_offset(&args.topic, e.partition(), Offset::Offset(offset))
                .map_err(|e| e.to_string())?;
        }
    } else {
        for e in committed.elements() {
            let (low, high) =
                consumer.fetch_watermarks(&args.topic, e.partition(), timeout).map_err(|e| e.to_string())?;
            let offset = if args.to_earliest {
                low
            } else if args.to_latest {
                high
            } else if let Some(shift) = args.shift_by {
                let base = e.offset().to_raw().filter(|o| *o >= 0).unwrap_or(low);
                (base + shift).clamp(low, high)
            } else {
                return Err("give one of --to-earliest, --to-latest, --to-datetime, --shift-by".into());
            };
            target
                .add_partition_offset(&args.topic, e.partition(), Offset::Offset(offset))
                .map_err(|e| e.to_string())?;
        }
    }
    consumer
        .commit(&target, CommitMode::Sync)
        .map_err(|e| format!("cannot commit offsets for group {}: {e}", args.group))?;
    for e in target.elements() {
        println!("{} {} {}", e.topic(), e.partition(), e.offset().to_raw().unwrap_or(-1));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 3339 times convert to epoch milliseconds.
    #[test]
    fn times() {
        assert_eq!(parse_time("0").unwrap(), 0);
        assert_eq!(parse_time("1970-01-01T00:00:00Z").unwrap(), 0);
        assert_eq!(parse_time("2026-11-29T10:00:00Z").unwrap(), 1_795_946_400_000);
        assert_eq!(parse_time("2000-03-01T00:00:01.5Z").unwrap(), 951_868_801_500);
        assert!(parse_time("yesterday").is_err());
    }

    // Consumer-protocol assignments decode to topic -> partitions.
    #[test]
    fn assignments() {
        let mut b = vec![0, 1, 0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 5];
        b.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(decode_assignment(&b), BTreeMap::from([("t".to_string(), vec![3, 5])]));
        assert!(decode_assignment(&[0, 1, 0]).is_empty());
    }
}
