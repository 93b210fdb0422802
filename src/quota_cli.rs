//! `skein quota set|list`: client quotas through AlterClientQuotas and
//! DescribeClientQuotas, with `kafka-configs.sh`'s keys (`producer_byte_rate`,
//! `consumer_byte_rate`, `request_percentage`, `connection_creation_rate`) and
//! entities (a user, a client id or both, an ip; each a name or the default).

use clap::{Args, Subcommand};
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{AlterClientQuotasRequest, DescribeClientQuotasRequest};
use kafka_protocol::protocol::StrBytes;

use crate::cluster_cli::{error_name, Client, Connection};

const VERSION: i16 = 1;

#[derive(Subcommand, Debug)]
pub enum QuotaCommand {
    /// Set or remove an entity's quotas.
    Set {
        #[command(flatten)]
        entity: EntityArgs,
        /// Quotas to set: `producer_byte_rate=1048576,consumer_byte_rate=2097152`.
        #[arg(long)]
        add_config: Option<String>,
        /// Quotas to remove: `producer_byte_rate,request_percentage`.
        #[arg(long)]
        delete_config: Option<String>,
        #[command(flatten)]
        connection: Connection,
    },
    /// The quotas of the entities matching the filter (all of them without one).
    List {
        #[command(flatten)]
        entity: EntityArgs,
        #[command(flatten)]
        connection: Connection,
    },
}

/// An entity, or a filter of entities.
#[derive(Args, Debug, Default)]
pub struct EntityArgs {
    #[arg(long, conflicts_with = "user_default")]
    pub user: Option<String>,
    /// The default user (every user without a quota of its own).
    #[arg(long)]
    pub user_default: bool,
    #[arg(long, conflicts_with = "client_id_default")]
    pub client_id: Option<String>,
    #[arg(long)]
    pub client_id_default: bool,
    #[arg(long, conflicts_with_all = ["ip_default", "user", "user_default", "client_id", "client_id_default"])]
    pub ip: Option<String>,
    #[arg(long, conflicts_with_all = ["user", "user_default", "client_id", "client_id_default"])]
    pub ip_default: bool,
}

impl EntityArgs {
    /// The entity's parts: type and name (`None` for the default).
    fn parts(&self) -> Vec<(&'static str, Option<String>)> {
        let mut parts = Vec::new();
        for (kind, name, default) in [
            ("user", &self.user, self.user_default),
            ("client-id", &self.client_id, self.client_id_default),
            ("ip", &self.ip, self.ip_default),
        ] {
            match (name, default) {
                (Some(name), _) => parts.push((kind, Some(name.clone()))),
                (None, true) => parts.push((kind, None)),
                (None, false) => {}
            }
        }
        parts
    }
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

pub fn run(command: QuotaCommand) -> Result<(), String> {
    match command {
        QuotaCommand::Set { entity, add_config, delete_config, connection } => {
            let parts = entity.parts();
            if parts.is_empty() {
                return Err("name the entity: --user, --client-id, --ip or their --*-default".into());
            }
            let mut ops = Vec::new();
            for pair in add_config.iter().flat_map(|c| c.split(',')).filter(|p| !p.trim().is_empty()) {
                let (key, value) = pair.split_once('=').ok_or_else(|| format!("--add-config {pair}: KEY=VALUE"))?;
                let value: f64 =
                    value.trim().parse().map_err(|_| format!("--add-config {pair}: {value} is not a number"))?;
                ops.push(OpData::default().with_key(s(key.trim())).with_value(value));
            }
            for key in delete_config.iter().flat_map(|c| c.split(',')).filter(|k| !k.trim().is_empty()) {
                ops.push(OpData::default().with_key(s(key.trim())).with_remove(true));
            }
            if ops.is_empty() {
                return Err("nothing to change: give --add-config or --delete-config".into());
            }
            let entity_data = parts
                .iter()
                .map(|(kind, name)| {
                    EntityData::default().with_entity_type(s(kind)).with_entity_name(name.as_deref().map(s))
                })
                .collect();
            let entry = EntryData::default().with_entity(entity_data).with_ops(ops);
            let mut client = Client::connect(&connection)?;
            let response = client.call(&AlterClientQuotasRequest::default().with_entries(vec![entry]), VERSION)?;
            for entry in response.entries {
                if entry.error_code != 0 {
                    let message = entry.error_message.as_deref().unwrap_or("");
                    return Err(format!("{}: {} {message}", describe(&parts), error_name(entry.error_code)));
                }
            }
            println!("{}: updated", describe(&parts));
            Ok(())
        }
        QuotaCommand::List { entity, connection } => {
            let components = entity
                .parts()
                .into_iter()
                .map(|(kind, name)| {
                    let kind_only = ComponentData::default().with_entity_type(s(kind));
                    match name {
                        Some(name) => kind_only.with_match_type(0).with_match(Some(s(&name))),
                        None => kind_only.with_match_type(1).with_match(None),
                    }
                })
                .collect();
            let request = DescribeClientQuotasRequest::default().with_components(components).with_strict(false);
            let mut client = Client::connect(&connection)?;
            let response = client.call(&request, VERSION)?;
            if response.error_code != 0 {
                let message = response.error_message.as_deref().unwrap_or("");
                return Err(format!("DescribeClientQuotas: {} {message}", error_name(response.error_code)));
            }
            for entry in response.entries.unwrap_or_default() {
                let parts: Vec<(&str, Option<String>)> = entry
                    .entity
                    .iter()
                    .map(|e| (e.entity_type.as_str(), e.entity_name.as_deref().map(String::from)))
                    .collect();
                let values: Vec<String> =
                    entry.values.iter().map(|v| format!("{}={}", v.key.as_str(), v.value)).collect();
                println!("{}\t{}", describe(&parts), values.join(","));
            }
            Ok(())
        }
    }
}

/// `user=alice,client-id=<default>`, as `kafka-configs --describe` names entities.
fn describe(parts: &[(&str, Option<String>)]) -> String {
    parts
        .iter()
        .map(|(kind, name)| format!("{kind}={}", name.as_deref().unwrap_or("<default>")))
        .collect::<Vec<_>>()
        .join(",")
}
