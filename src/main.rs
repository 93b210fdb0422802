//! `skein`: the single binary. `skein start` runs a node; other subcommands are tools.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod acl_cli;
mod admin;
mod balance;
mod bench;
mod cli;
mod cluster_cli;
mod config;
mod exclusive;
mod group_cli;
mod iotune;
mod log_dirs;
mod meta_properties;
mod oauth_jwks;
mod placement;
mod quorum_config;
mod quota_cli;
mod reactor;
mod security_config;
mod shard;
mod tune_cli;
mod txn_cli;
mod user_cli;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "skein", version, about = "Kafka-compatible streaming platform, thread-per-core on io_uring")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node: one shard per core, each owning its partitions' logs.
    Start(Box<config::StartArgs>),
    /// Manage topics.
    #[command(subcommand)]
    Topic(cli::TopicCommand),
    /// Send stdin lines as records.
    Produce(cli::ProduceArgs),
    /// Print records.
    Consume(cli::ConsumeArgs),
    /// Manage consumer groups.
    #[command(subcommand)]
    Group(group_cli::GroupCommand),
    /// Measure a Kafka-compatible broker: `run` a workload, `compare` results.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// The cluster: quorum, brokers, leader elections and partition moves.
    #[command(subcommand)]
    Cluster(cluster_cli::ClusterCommand),
    /// Transactions: list, describe, their producers, abort a hanging one.
    #[command(subcommand)]
    Txn(txn_cli::TxnCommand),
    /// SCRAM users: add, delete, list (on a running node or a stopped one's data directory).
    #[command(subcommand)]
    User(user_cli::UserCommand),
    /// ACLs, as kafka-acls manages them (CreateAcls, DescribeAcls, DeleteAcls).
    #[command(subcommand)]
    Acl(acl_cli::AclCommand),
    /// Client quotas, as kafka-configs manages them (AlterClientQuotas, DescribeClientQuotas).
    #[command(subcommand)]
    Quota(quota_cli::QuotaCommand),
    /// Show or change which shard owns each partition.
    #[command(subcommand)]
    Placement(placement::PlacementCommand),
    /// Inspect and tune the host: check, apply (reversibly), revert.
    #[command(subcommand)]
    Tune(tune_cli::TuneCommand),
    /// Measure the data directory's device with Skein's own I/O path and write the
    /// profile `skein start` applies (<data-dir>/iotune.json).
    Iotune(iotune::IotuneArgs),
}

fn main() -> ExitCode {
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SKEIN_LOG").unwrap_or_else(|_| "info".into()))
        .with_target(true)
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never in files or pipes.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("the first subscriber");
    // Dependencies' `log` records reach tracing (glommio's stall reports do not pass
    // here: each shard's `reactor::StallThreshold` takes them).
    let level = tracing_log::AsLog::as_log(&tracing::level_filters::LevelFilter::current());
    tracing_log::LogTracer::init_with_filter(level).expect("the first log logger");
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Start(args) => config::NodeConfig::load(*args)
            .and_then(|config| config.announce_write_shape().map(|()| config))
            .and_then(shard::run_node),
        Command::Topic(command) => cli::topic(command),
        Command::Produce(args) => cli::produce(args),
        Command::Consume(args) => cli::consume(args),
        Command::Placement(command) => placement::run(command),
        Command::Tune(command) => tune_cli::run(command),
        Command::Iotune(args) => iotune::run(args),
        Command::Cluster(command) => cluster_cli::run(command),
        Command::Group(command) => group_cli::run(command),
        Command::Txn(command) => txn_cli::run(command),
        Command::User(command) => user_cli::run(command),
        Command::Acl(command) => acl_cli::run(command),
        Command::Quota(command) => quota_cli::run(command),
        Command::Bench(command) => bench::run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("skein: {message}");
            ExitCode::FAILURE
        }
    }
}
