//! Node configuration: flags, `SKEIN_`-prefixed environment variables and an optional
//! TOML file, validated at start with clear errors. Node-local settings only (data
//! directory, cores, memory); topic defaults use Kafka's names.

use std::path::PathBuf;

use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct StartArgs {
    /// Data directory (partition logs in Kafka's layout).
    #[arg(long, env = "SKEIN_DATA_DIR", default_value = "./skein-data")]
    pub data_dir: PathBuf,
    /// Cores to run shards on: `all`, a count (`4`), or a range (`2-5`).
    #[arg(long, env = "SKEIN_CORES", default_value = "all")]
    pub cores: String,
    /// Batch cache per shard, in MiB.
    #[arg(long, env = "SKEIN_CACHE_MB_PER_SHARD", default_value_t = 256)]
    pub cache_mb_per_shard: usize,
    /// Milliseconds between housekeeping passes (flush.ms, retention, compaction, checkpoints).
    #[arg(long, env = "SKEIN_HOUSEKEEPING_INTERVAL_MS", default_value_t = 1000)]
    pub housekeeping_interval_ms: u64,
}

/// Validated node settings.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub data_dir: PathBuf,
    pub cpus: Vec<usize>,
    pub cache_bytes_per_shard: usize,
    pub housekeeping_interval_ms: u64,
}

impl NodeConfig {
    /// Validates the arguments.
    ///
    /// # Errors
    /// A message naming the bad setting.
    pub fn load(args: StartArgs) -> Result<NodeConfig, String> {
        let available = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cpus = parse_cores(&args.cores, available)?;
        if args.cache_mb_per_shard == 0 {
            return Err("--cache-mb-per-shard must be at least 1".into());
        }
        if args.housekeeping_interval_ms == 0 {
            return Err("--housekeeping-interval-ms must be at least 1".into());
        }
        Ok(NodeConfig {
            data_dir: args.data_dir,
            cpus,
            cache_bytes_per_shard: args.cache_mb_per_shard << 20,
            housekeeping_interval_ms: args.housekeeping_interval_ms,
        })
    }
}

/// Parses `all`, `N` (the first N cores) or `a-b` (inclusive) against `available` cores.
fn parse_cores(spec: &str, available: usize) -> Result<Vec<usize>, String> {
    let bad = |why: &str| Err(format!("invalid --cores {spec:?}: {why}"));
    let spec = spec.trim();
    if spec == "all" {
        return Ok((0..available).collect());
    }
    if let Some((a, b)) = spec.split_once('-') {
        let (Ok(a), Ok(b)) = (a.trim().parse::<usize>(), b.trim().parse::<usize>()) else {
            return bad("expected all, a count, or a range such as 2-5");
        };
        if a > b {
            return bad("range start is after its end");
        }
        if b >= available {
            return bad(&format!("this machine has cores 0-{}", available - 1));
        }
        return Ok((a..=b).collect());
    }
    match spec.parse::<usize>() {
        Ok(0) => bad("at least one core is needed"),
        Ok(n) if n > available => bad(&format!("this machine has {available} cores")),
        Ok(n) => Ok((0..n).collect()),
        Err(_) => bad("expected all, a count, or a range such as 2-5"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Core specs parse as documented and bad ones get a message.
    #[test]
    fn cores() {
        let check = |spec: &str, expected: Result<Vec<usize>, ()>| {
            assert_eq!(parse_cores(spec, 4).map_err(|_| ()), expected, "{spec}");
        };
        check("all", Ok(vec![0, 1, 2, 3]));
        check("2", Ok(vec![0, 1]));
        check("1-3", Ok(vec![1, 2, 3]));
        check("0", Err(()));
        check("5", Err(()));
        check("3-1", Err(()));
        check("2-4", Err(()));
        check("x", Err(()));
    }
}
