//! `skein placement show|move|balance`: partition placement of a running node, through
//! its admin endpoint.

use std::time::Duration;

use clap::{Args, Subcommand};

#[derive(Args, Debug, Clone)]
pub struct Admin {
    /// The node's admin endpoint.
    #[arg(long, env = "SKEIN_ADMIN", default_value = "127.0.0.1:9644")]
    pub admin: String,
}

#[derive(Subcommand, Debug)]
pub enum PlacementCommand {
    /// Print partition -> shard with each partition's load (bytes in/out per second,
    /// measured over `--interval-ms`).
    Show {
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        #[command(flatten)]
        admin: Admin,
    },
    /// Propose (`--dry-run`, the default) or make (`--apply`) partition moves between
    /// the node's shards, from their load measured over `--interval-ms`: each shard's
    /// busy share and the share of it each partition took.
    Balance {
        /// Print the proposal only.
        #[arg(long, conflicts_with = "apply")]
        dry_run: bool,
        /// Make the moves.
        #[arg(long)]
        apply: bool,
        #[arg(long, default_value_t = 2000)]
        interval_ms: u64,
        /// How far apart, as a share of a core, the busiest and idlest shards may stay.
        #[arg(long, default_value_t = crate::balance::BALANCE_BAND)]
        band: f64,
        #[command(flatten)]
        admin: Admin,
    },
    /// Move a partition to another shard of the running node.
    Move {
        topic: String,
        partition: i32,
        #[arg(long)]
        shard: usize,
        #[command(flatten)]
        admin: Admin,
    },
}

fn fetch(admin: &Admin) -> Result<Vec<serde_json::Value>, String> {
    fetch_path(admin, "/v1/placement")
}

fn fetch_path(admin: &Admin, path: &str) -> Result<Vec<serde_json::Value>, String> {
    let url = format!("http://{}{path}", admin.admin);
    let body = ureq::get(&url)
        .timeout(Duration::from_secs(10))
        .call()
        .map_err(|e| format!("cannot reach {url}: {e}"))?
        .into_string()
        .map_err(|e| e.to_string())?;
    serde_json::from_str(&body).map_err(|e| format!("bad answer from {url}: {e}"))
}

pub fn run(command: PlacementCommand) -> Result<(), String> {
    match command {
        PlacementCommand::Show { interval_ms, admin } => {
            let (before, shards_before) = (fetch(&admin)?, fetch_path(&admin, "/v1/shards")?);
            std::thread::sleep(Duration::from_millis(interval_ms));
            let (after, shards_after) = (fetch(&admin)?, fetch_path(&admin, "/v1/shards")?);
            let seconds = interval_ms.max(1) as f64 / 1000.0;
            println!(
                "{:<40} {:>9} {:>5} {:>14} {:>14} {:>12}",
                "topic", "partition", "shard", "in B/s", "out B/s", "size B"
            );
            for row in &after {
                let key = |r: &serde_json::Value| (r["topic"].clone(), r["partition"].clone());
                let old = before.iter().find(|b| key(b) == key(row));
                let rate = |field: &str| {
                    let now = row[field].as_u64().unwrap_or(0);
                    let then = old.and_then(|o| o[field].as_u64()).unwrap_or(now);
                    now.saturating_sub(then) as f64 / seconds
                };
                println!(
                    "{:<40} {:>9} {:>5} {:>14.0} {:>14.0} {:>12}",
                    row["topic"].as_str().unwrap_or(""),
                    row["partition"].as_u64().unwrap_or(0),
                    row["shard"].as_u64().unwrap_or(0),
                    rate("bytes_in"),
                    rate("bytes_out"),
                    row["size_bytes"].as_u64().unwrap_or(0)
                );
            }
            // Each shard over the same interval: how busy, stalls, tasks and ring I/O.
            println!();
            println!(
                "{:>5} {:>6} {:>7} {:>10} {:>13} {:>14} {:>12} {:>6} {:>6} {:>11} {:>9} {:>13}",
                "shard",
                "busy",
                "stalls",
                "tasks/s",
                "ring reads/s",
                "ring writes/s",
                "read p99 us",
                "sq",
                "cq",
                "tq p99 us",
                "xshard q",
                "xshard p99 us"
            );
            for row in &shards_after {
                let old = shards_before.iter().find(|b| b["shard"] == row["shard"]);
                let rate = |field: &str| {
                    let now = row[field].as_u64().unwrap_or(0);
                    let then = old.and_then(|o| o[field].as_u64()).unwrap_or(now);
                    now.saturating_sub(then) as f64 / seconds
                };
                let runtime = rate("runtime_us") / 1_000_000.0;
                let figure = |field: &str| row[field].as_u64().unwrap_or(0);
                println!(
                    "{:>5} {:>5.0}% {:>7} {:>10.0} {:>13.0} {:>14.0} {:>12} {:>6} {:>6} {:>11} {:>9} {:>13}",
                    figure("shard"),
                    runtime.min(1.0) * 100.0,
                    figure("stalls"),
                    rate("tasks"),
                    rate("ring_reads"),
                    rate("ring_writes"),
                    figure("ring_read_device_us_p99"),
                    figure("ring_sq_depth"),
                    figure("ring_cq_depth"),
                    figure("task_queue_latency_us_p99"),
                    figure("cross_shard_queued"),
                    figure("cross_shard_wait_us_p99")
                );
            }
        }
        PlacementCommand::Balance { dry_run: _, apply, interval_ms, band, admin } => {
            let url = format!("http://{}/v1/placement/balance?interval_ms={interval_ms}&band={band}", admin.admin);
            let timeout = Duration::from_millis(interval_ms) + Duration::from_secs(120);
            let request = if apply { ureq::post(&url) } else { ureq::get(&url) };
            let body = match request.timeout(timeout).call() {
                Ok(response) => response.into_string().map_err(|e| e.to_string())?,
                Err(ureq::Error::Status(_, response)) => {
                    return Err(response.into_string().unwrap_or_default().trim().to_string());
                }
                Err(e) => return Err(format!("cannot reach {url}: {e}")),
            };
            let answer: serde_json::Value =
                serde_json::from_str(&body).map_err(|e| format!("bad answer from {url}: {e}"))?;
            print_balance(&answer, apply);
            let failed = answer["moves"].as_array().into_iter().flatten().filter(|m| m["result"] != "moved");
            if apply && failed.count() > 0 {
                return Err("some moves failed".into());
            }
        }
        PlacementCommand::Move { topic, partition, shard, admin } => {
            let url =
                format!("http://{}/v1/placement/move?topic={topic}&partition={partition}&shard={shard}", admin.admin);
            match ureq::post(&url).timeout(Duration::from_secs(60)).call() {
                Ok(_) => println!("moved {topic}-{partition} to shard {shard}"),
                Err(ureq::Error::Status(_, response)) => {
                    return Err(response.into_string().unwrap_or_default().trim().to_string());
                }
                Err(e) => return Err(format!("cannot reach {url}: {e}")),
            }
        }
    }
    Ok(())
}

/// The balance answer: each shard's busy share now and after the moves, the hottest
/// partitions, and the moves (with their outcome when applied).
fn print_balance(answer: &serde_json::Value, applied: bool) {
    let number = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
    println!("{:>5} {:>7} {:>7}", "shard", "busy", "after");
    for row in answer["shards"].as_array().into_iter().flatten() {
        println!(
            "{:>5} {:>6.1}% {:>6.1}%",
            row["shard"].as_u64().unwrap_or(0),
            number(&row["busy"]) * 100.0,
            number(&row["busy_after"]) * 100.0
        );
    }
    let mut partitions: Vec<&serde_json::Value> = answer["partitions"].as_array().into_iter().flatten().collect();
    partitions.sort_by(|a, b| number(&b["busy"]).total_cmp(&number(&a["busy"])));
    println!();
    println!(
        "{:<40} {:>9} {:>5} {:>7} {:>12} {:>12} {:>8}",
        "topic", "partition", "shard", "busy", "in B/s", "out B/s", "req/s"
    );
    for p in partitions.iter().take(20) {
        println!(
            "{:<40} {:>9} {:>5} {:>6.1}% {:>12.0} {:>12.0} {:>8.0}",
            p["topic"].as_str().unwrap_or(""),
            p["partition"].as_u64().unwrap_or(0),
            p["shard"].as_u64().unwrap_or(0),
            number(&p["busy"]) * 100.0,
            number(&p["bytes_in_per_s"]),
            number(&p["bytes_out_per_s"]),
            number(&p["requests_per_s"])
        );
    }
    println!();
    let moves = answer["moves"].as_array().map_or(&[][..], Vec::as_slice);
    if moves.is_empty() {
        println!("no moves: the shards are within the band, or no move narrows their gap");
    }
    for m in moves {
        let outcome = match (applied, m["result"].as_str()) {
            (false, _) => "proposed".to_string(),
            (true, Some(result)) => result.to_string(),
            (true, None) => "not made".to_string(),
        };
        println!(
            "move {}-{} from shard {} to shard {} ({:.1}% of a core): {outcome}",
            m["topic"].as_str().unwrap_or(""),
            m["partition"],
            m["source"],
            m["target"],
            number(&m["busy"]) * 100.0
        );
    }
    println!(
        "spread {:.1}% -> {:.1}%",
        number(&answer["spread_before"]) * 100.0,
        number(&answer["spread_after"]) * 100.0
    );
}
