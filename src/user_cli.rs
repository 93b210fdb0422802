//! `skein user add|delete|list`: SCRAM users, as `kafka-configs.sh --alter
//! --add-config SCRAM-SHA-512=[password=...]` and `kafka-storage format --add-scram`
//! manage them. Against a running node (`--bootstrap-server`) they go through
//! AlterUserScramCredentials and DescribeUserScramCredentials; on a stopped node
//! (`--data-dir`) they are staged in its data directory, so that the first admin
//! exists before the first start (`security::STAGED_SCRAM_FILE`). The node applies
//! staged credentials through the controller when it starts (`apply_staged`).

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use clap::{Args, Subcommand};
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::{AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest};
use kafka_protocol::protocol::StrBytes;
use skein_control::security::scram::{self, ScramCredential, ScramMechanism};
use skein_control::security::{StagedScram, STAGED_SCRAM_FILE};

use crate::cluster_cli::{error_name, Client, Connection};

#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Add a SCRAM user, or change its password for one mechanism.
    Add {
        name: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512.
        #[arg(long)]
        mechanism: String,
        #[arg(long)]
        password: String,
        /// PBKDF2 iterations, 4096 to 16384.
        #[arg(long, default_value_t = 4096)]
        iterations: u32,
        #[command(flatten)]
        target: Target,
    },
    /// Remove a user's credential for one mechanism.
    Delete {
        name: String,
        #[arg(long)]
        mechanism: String,
        #[command(flatten)]
        target: Target,
    },
    /// The SCRAM users and their mechanisms.
    List {
        #[command(flatten)]
        target: Target,
    },
}

/// A running node, or a stopped node's data directory.
#[derive(Args, Debug)]
pub struct Target {
    /// A stopped node's data directory: the change is staged there for its next start.
    #[arg(long, conflicts_with = "bootstrap_server")]
    pub data_dir: Option<PathBuf>,
    /// A running node (PLAINTEXT listener) [default: 127.0.0.1:9092].
    #[arg(long, env = "SKEIN_BOOTSTRAP_SERVER")]
    pub bootstrap_server: Option<String>,
    /// How long to wait for each answer, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    #[command(flatten)]
    pub sasl: crate::cluster_cli::SaslLogin,
}

impl Target {
    fn connection(&self) -> Connection {
        Connection {
            bootstrap_server: self.bootstrap_server.clone().unwrap_or_else(|| "127.0.0.1:9092".into()),
            timeout_ms: self.timeout_ms,
            sasl: self.sasl.clone(),
        }
    }
}

fn mechanism(name: &str) -> Result<ScramMechanism, String> {
    ScramMechanism::parse(name).ok_or_else(|| format!("unknown mechanism {name:?}: SCRAM-SHA-256 or SCRAM-SHA-512"))
}

pub fn run(command: UserCommand) -> Result<(), String> {
    match command {
        UserCommand::Add { name, mechanism: m, password, iterations, target } => {
            let mechanism = mechanism(&m)?;
            if name.is_empty() {
                return Err("the user name is empty".into());
            }
            if !scram::iterations_valid(iterations as i64) {
                return Err(format!("--iterations {iterations}: must be in [4096, 16384]"));
            }
            let salt = scram::random_salt();
            match &target.data_dir {
                Some(dir) => {
                    let credential = ScramCredential::from_password(mechanism, &password, &salt, iterations);
                    stage(dir, StagedScram { user: name.clone(), mechanism: m.clone(), credential: Some(credential) })?;
                    println!(
                        "staged {} for {name} in {}: applied at the node's next start",
                        mechanism.name(),
                        dir.display()
                    );
                    Ok(())
                }
                None => {
                    let salted = scram::salted_password(mechanism, &password, &salt, iterations);
                    let upsertion = ScramCredentialUpsertion::default()
                        .with_name(StrBytes::from_string(name.clone()))
                        .with_mechanism(mechanism.id())
                        .with_iterations(iterations as i32)
                        .with_salt(salt.into())
                        .with_salted_password(salted.into());
                    alter(&target, AlterUserScramCredentialsRequest::default().with_upsertions(vec![upsertion]))?;
                    println!("{name}: {} set", mechanism.name());
                    Ok(())
                }
            }
        }
        UserCommand::Delete { name, mechanism: m, target } => {
            let mechanism = mechanism(&m)?;
            match &target.data_dir {
                Some(dir) => {
                    stage(dir, StagedScram { user: name.clone(), mechanism: m, credential: None })?;
                    println!("staged the removal of {name}'s {} in {}", mechanism.name(), dir.display());
                    Ok(())
                }
                None => {
                    let deletion = ScramCredentialDeletion::default()
                        .with_name(StrBytes::from_string(name.clone()))
                        .with_mechanism(mechanism.id());
                    alter(&target, AlterUserScramCredentialsRequest::default().with_deletions(vec![deletion]))?;
                    println!("{name}: {} removed", mechanism.name());
                    Ok(())
                }
            }
        }
        UserCommand::List { target } => match &target.data_dir {
            Some(dir) => {
                for staged in read(dir)? {
                    let what = if staged.credential.is_some() { "set" } else { "removed" };
                    println!("{}\t{}\t{what} (staged)", staged.user, staged.mechanism);
                }
                Ok(())
            }
            None => {
                let mut client = Client::connect(&target.connection())?;
                let response = client.call(&DescribeUserScramCredentialsRequest::default(), 0)?;
                if response.error_code != 0 {
                    return Err(format!("DescribeUserScramCredentials: {}", error_name(response.error_code)));
                }
                for result in response.results {
                    for info in result.credential_infos {
                        let name = ScramMechanism::from_id(info.mechanism).map_or("unknown", |m| m.name());
                        println!("{}\t{name}\titerations={}", result.user.as_str(), info.iterations);
                    }
                }
                Ok(())
            }
        },
    }
}

fn alter(target: &Target, request: AlterUserScramCredentialsRequest) -> Result<(), String> {
    let mut client = Client::connect(&target.connection())?;
    let response = client.call(&request, 0)?;
    for result in response.results {
        if result.error_code != 0 {
            let message = result.error_message.map(|m| m.to_string()).unwrap_or_default();
            return Err(format!("{}: {} {message}", result.user.as_str(), error_name(result.error_code)));
        }
    }
    Ok(())
}

fn read(dir: &Path) -> Result<Vec<StagedScram>, String> {
    crate::security_config::read_staged(dir)
}

/// Appends `change` to the staged file, written whole to a temporary file, synced and
/// renamed over the old one.
fn stage(dir: &Path, change: StagedScram) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // Held while the file is written: a node starting meanwhile waits for nothing and
    // is refused, and a running node refuses this.
    let _lock =
        crate::exclusive::lock_data_dir(dir).map_err(|e| format!("{e}; for a running node use --bootstrap-server"))?;
    let mut staged = read(dir)?;
    staged.retain(|s| !(s.user == change.user && s.mechanism == change.mechanism));
    staged.push(change);
    let path = dir.join(STAGED_SCRAM_FILE);
    let temporary = dir.join(format!("{STAGED_SCRAM_FILE}.tmp"));
    let bytes = serde_json::to_vec_pretty(&staged).map_err(|e| e.to_string())?;
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&temporary)?;
        std::io::Write::write_all(&mut file, &bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, &path)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Applies the staged credentials through the controller (retrying until it takes
/// them), then removes the file (on a blocking thread): the image holds them now.
pub async fn apply_staged(shard: Rc<skein_net::Shard>) {
    use skein_control::metadata::controller::ControllerRequest;
    let security = shard.settings.security.clone();
    if security.staged.is_empty() {
        return;
    }
    let changes: Vec<_> =
        security.staged.iter().map(|s| (s.user.clone(), s.mechanism.clone(), s.credential.clone())).collect();
    loop {
        match shard.control(ControllerRequest::AlterScram { changes: changes.clone() }).await {
            Ok(_) => break,
            Err((code, message)) => {
                tracing::debug!(target: "skein", code, message, "staged SCRAM credentials not applied yet");
                glommio::timer::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    security.staged_applied.store(true, std::sync::atomic::Ordering::Release);
    let path = shard.settings.data_dir.join(STAGED_SCRAM_FILE);
    let removed = glommio::executor().spawn_blocking(move || std::fs::remove_file(&path)).await;
    match removed {
        Ok(()) => tracing::info!(target: "skein", users = changes.len(), "staged SCRAM credentials applied"),
        Err(e) => tracing::warn!(target: "skein", error = %e, "staged SCRAM credentials applied; the file stays"),
    }
}
