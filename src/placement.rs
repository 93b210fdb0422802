//! `skein placement show|move`: partition placement of a running node, through its
//! admin endpoint.

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
                    row["partition"],
                    row["shard"],
                    rate("bytes_in"),
                    rate("bytes_out"),
                    row["size_bytes"]
                );
            }
            // Each shard over the same interval: how busy, stalls, tasks and ring I/O.
            println!();
            println!(
                "{:>5} {:>6} {:>7} {:>10} {:>13} {:>14} {:>12} {:>11} {:>9} {:>13}",
                "shard",
                "busy",
                "stalls",
                "tasks/s",
                "ring reads/s",
                "ring writes/s",
                "read p99 us",
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
                    "{:>5} {:>5.0}% {:>7} {:>10.0} {:>13.0} {:>14.0} {:>12} {:>11} {:>9} {:>13}",
                    figure("shard"),
                    runtime.min(1.0) * 100.0,
                    figure("stalls"),
                    rate("tasks"),
                    rate("ring_reads"),
                    rate("ring_writes"),
                    figure("ring_read_device_us_p99"),
                    figure("task_queue_latency_us_p99"),
                    figure("cross_shard_queued"),
                    figure("cross_shard_wait_us_p99")
                );
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
