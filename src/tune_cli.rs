//! `skein tune check | apply | revert`: the host's tunables (`skein_tuning`) for the
//! node's data directory and cores, printed as one table; `apply` and `revert` print
//! what they changed.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use skein_tuning::{Host, Target};

#[derive(Subcommand, Debug)]
pub enum TuneCommand {
    /// Print each tunable: its current and recommended value, whether `apply` can set
    /// it, and why it matters. Changes nothing.
    Check(TuneArgs),
    /// Set what can be set, after recording the previous values in
    /// <data-dir>/tune-revert.json; prints each change.
    Apply(TuneArgs),
    /// Restore the values `apply` recorded, and remove the record.
    Revert(TuneArgs),
}

#[derive(Args, Debug)]
pub struct TuneArgs {
    /// The directory `/sys` and `/proc` are read under (a copy or a fake tree)
    /// [default: /].
    #[arg(long, default_value = "/")]
    root: PathBuf,
    /// The node's data directory: its disk and file system are checked, and the
    /// revert file is kept there.
    #[arg(long, env = "SKEIN_DATA_DIR", default_value = "./skein-data")]
    data_dir: PathBuf,
    /// The cores Skein's shards run on, as `skein start --cores` takes them: all, N
    /// (the first N) or a-b.
    #[arg(long, env = "SKEIN_CORES", default_value = "all")]
    cores: String,
}

/// Runs a `skein tune` command.
///
/// # Errors
/// A message for bad flags, an unreadable revert file, or knobs that could not be
/// written (the others are still changed, and printed).
pub fn run(command: TuneCommand) -> Result<(), String> {
    match command {
        TuneCommand::Check(args) => {
            let (host, target) = resolve(&args)?;
            print!("{}", skein_tuning::render(&skein_tuning::check(&host, &target)));
            Ok(())
        }
        TuneCommand::Apply(args) => {
            let (host, target) = resolve(&args)?;
            let findings = skein_tuning::check(&host, &target);
            let (changes, errors) = skein_tuning::apply(&host, &target.data_dir, &findings)?;
            report("applied", &changes, &errors, &target)
        }
        TuneCommand::Revert(args) => {
            let (host, target) = resolve(&args)?;
            let (changes, errors) = skein_tuning::revert(&host, &target.data_dir)?;
            report("reverted", &changes, &errors, &target)
        }
    }
}

fn resolve(args: &TuneArgs) -> Result<(Host, Target), String> {
    let host = Host::new(&args.root);
    let online = host
        .read("/sys/devices/system/cpu/online")
        .and_then(|text| skein_tuning::host::parse_cpu_list(&text).ok())
        .filter(|cpus| !cpus.is_empty());
    let available = match &online {
        Some(cpus) => cpus.iter().max().map_or(1, |max| max + 1),
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let cores = crate::config::parse_cores(&args.cores, available)?;
    Ok((host, Target { data_dir: args.data_dir.clone(), cores }))
}

fn report(what: &str, changes: &[skein_tuning::Change], errors: &[String], target: &Target) -> Result<(), String> {
    for change in changes {
        println!("{change}");
    }
    if changes.is_empty() && errors.is_empty() {
        println!("nothing to change");
    } else if what == "applied" {
        println!(
            "{what} {} change(s); `skein tune revert --data-dir {}` restores them",
            changes.len(),
            target.data_dir.display()
        );
    }
    match errors.is_empty() {
        true => Ok(()),
        false => Err(format!("{} change(s) failed: {}", errors.len(), errors.join("; "))),
    }
}
