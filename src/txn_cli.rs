//! `skein txn list|describe|producers|abort`: transactions as an operator sees them,
//! as Kafka's `kafka-transactions.sh` does. `list` asks every broker
//! (ListTransactions), `describe` the id's coordinator (FindCoordinator, then
//! DescribeTransactions), `producers` a partition's leader (DescribeProducers), and
//! `abort` has a partition's leader write an ABORT marker for a hanging transaction
//! (WriteTxnMarkers), the path `kafka-transactions.sh abort` takes. Works against
//! Apache Kafka as well as Skein.

use clap::Subcommand;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::cluster_cli::{error_name, metadata, Client, Connection};

#[derive(Subcommand, Debug)]
pub enum TxnCommand {
    /// Every transactional id the cluster's coordinators know.
    List {
        /// Only ids in this state (Ongoing, PrepareCommit, CompleteAbort, ...); repeatable.
        #[arg(long = "state")]
        states: Vec<String>,
        /// Only ids with this producer id; repeatable.
        #[arg(long = "producer-id")]
        producer_ids: Vec<i64>,
        #[command(flatten)]
        connection: Connection,
    },
    /// One transactional id: its coordinator, state, producer and partitions.
    Describe {
        transactional_id: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// The producers a partition's leader knows, with their open transactions.
    Producers {
        /// `TOPIC:PARTITION`.
        partition: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// Abort a hanging transaction on a partition: the one that starts at
    /// `--start-offset`, or the one of `--producer-id`, `--producer-epoch` and
    /// `--coordinator-epoch`.
    Abort {
        /// `TOPIC:PARTITION`.
        partition: String,
        #[arg(long, conflicts_with_all = ["producer_id", "producer_epoch", "coordinator_epoch"])]
        start_offset: Option<i64>,
        #[arg(long, requires_all = ["producer_epoch", "coordinator_epoch"])]
        producer_id: Option<i64>,
        #[arg(long)]
        producer_epoch: Option<i16>,
        #[arg(long)]
        coordinator_epoch: Option<i32>,
        #[command(flatten)]
        connection: Connection,
    },
}

pub fn run(command: TxnCommand) -> Result<(), String> {
    match command {
        TxnCommand::List { states, producer_ids, connection } => list(&connection, &states, &producer_ids),
        TxnCommand::Describe { transactional_id, connection } => describe(&connection, &transactional_id),
        TxnCommand::Producers { partition, connection } => {
            let (topic, index) = parse_partition(&partition)?;
            for p in producers(&connection, &topic, index)? {
                println!(
                    "producer {} epoch {} last sequence {} last timestamp {} coordinator epoch {} open transaction from {}",
                    p.producer_id.0,
                    p.producer_epoch,
                    p.last_sequence,
                    p.last_timestamp,
                    p.coordinator_epoch,
                    match p.current_txn_start_offset {
                        -1 => "none".to_string(),
                        offset => format!("offset {offset}"),
                    }
                );
            }
            Ok(())
        }
        TxnCommand::Abort { partition, start_offset, producer_id, producer_epoch, coordinator_epoch, connection } => {
            let (topic, index) = parse_partition(&partition)?;
            let marker = match (start_offset, producer_id, producer_epoch, coordinator_epoch) {
                (Some(offset), ..) => {
                    let producer = producers(&connection, &topic, index)?
                        .into_iter()
                        .find(|p| p.current_txn_start_offset == offset)
                        .ok_or_else(|| format!("no open transaction starts at offset {offset} of {partition}"))?;
                    let epoch = i16::try_from(producer.producer_epoch).map_err(|_| "producer epoch out of range")?;
                    (producer.producer_id.0, epoch, producer.coordinator_epoch)
                }
                (None, Some(pid), Some(epoch), Some(coordinator)) => (pid, epoch, coordinator),
                _ => return Err(
                    "name the transaction: --start-offset, or --producer-id, --producer-epoch and --coordinator-epoch"
                        .into(),
                ),
            };
            abort(&connection, &topic, index, marker)
        }
    }
}

fn parse_partition(text: &str) -> Result<(String, i32), String> {
    let (topic, index) = text.rsplit_once(':').ok_or_else(|| format!("{text:?} is not TOPIC:PARTITION"))?;
    let index = index.parse().map_err(|_| format!("{text:?}: partition {index:?} is not a number"))?;
    Ok((topic.to_string(), index))
}

/// A connection to broker `id` as Metadata names it.
fn connect_to(connection: &Connection, response: &MetadataResponse, id: i32) -> Result<Client, String> {
    let broker = response
        .brokers
        .iter()
        .find(|b| b.node_id.0 == id)
        .ok_or_else(|| format!("broker {id} is not in the cluster's metadata"))?;
    let address = Connection { bootstrap_server: format!("{}:{}", broker.host, broker.port), ..connection.clone() };
    Client::connect(&address)
}

fn list(connection: &Connection, states: &[String], producer_ids: &[i64]) -> Result<(), String> {
    let response = metadata(&mut Client::connect(connection)?)?;
    let mut rows = Vec::new();
    for broker in &response.brokers {
        let mut client = connect_to(connection, &response, broker.node_id.0)?;
        let request = ListTransactionsRequest::default()
            .with_state_filters(states.iter().map(|s| StrBytes::from_string(s.clone())).collect())
            .with_producer_id_filters(producer_ids.iter().map(|&p| ProducerId(p)).collect());
        let listed = client.call(&request, 0)?;
        if listed.error_code != 0 {
            return Err(format!("broker {}: {}", broker.node_id.0, error_name(listed.error_code)));
        }
        if !listed.unknown_state_filters.is_empty() {
            return Err(format!("unknown states: {:?}", listed.unknown_state_filters));
        }
        for t in listed.transaction_states {
            rows.push((
                t.transactional_id.to_string(),
                broker.node_id.0,
                t.producer_id.0,
                t.transaction_state.to_string(),
            ));
        }
    }
    rows.sort();
    println!("{:<40} {:>11} {:>12} STATE", "TRANSACTIONAL ID", "COORDINATOR", "PRODUCER ID");
    for (id, coordinator, pid, state) in rows {
        println!("{id:<40} {coordinator:>11} {pid:>12} {state}");
    }
    Ok(())
}

fn describe(connection: &Connection, id: &str) -> Result<(), String> {
    let mut client = Client::connect(connection)?;
    let request = FindCoordinatorRequest::default()
        .with_key_type(1)
        .with_coordinator_keys(vec![StrBytes::from_string(id.to_string())]);
    let found = client.call(&request, 4)?;
    let coordinator = found.coordinators.first().ok_or("FindCoordinator answered no coordinator")?;
    if coordinator.error_code != 0 {
        return Err(format!("no coordinator for {id:?}: {}", error_name(coordinator.error_code)));
    }
    let address =
        Connection { bootstrap_server: format!("{}:{}", coordinator.host, coordinator.port), ..connection.clone() };
    let request = DescribeTransactionsRequest::default()
        .with_transactional_ids(vec![TransactionalId(StrBytes::from_string(id.to_string()))]);
    let described = Client::connect(&address)?.call(&request, 0)?;
    let state = described.transaction_states.first().ok_or("DescribeTransactions answered nothing")?;
    if state.error_code != 0 {
        return Err(format!("{id:?}: {}", error_name(state.error_code)));
    }
    println!("transactional id: {id}");
    println!("coordinator: {}", coordinator.node_id.0);
    println!("state: {}", state.transaction_state);
    println!("producer: id {} epoch {}", state.producer_id.0, state.producer_epoch);
    println!("timeout: {} ms", state.transaction_timeout_ms);
    if state.transaction_start_time_ms >= 0 {
        println!("started: {} ms after the epoch", state.transaction_start_time_ms);
    }
    for topic in &state.topics {
        for p in &topic.partitions {
            println!("partition: {}:{p}", topic.topic.0);
        }
    }
    Ok(())
}

/// The producers `topic:index`'s leader knows.
fn producers(
    connection: &Connection,
    topic: &str,
    index: i32,
) -> Result<Vec<describe_producers_response::ProducerState>, String> {
    let (mut client, _) = leader_of(connection, topic, index)?;
    let request =
        DescribeProducersRequest::default().with_topics(vec![describe_producers_request::TopicRequest::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_indexes(vec![index])]);
    let response = client.call(&request, 0)?;
    let partition = response
        .topics
        .into_iter()
        .flat_map(|t| t.partitions)
        .next()
        .ok_or("DescribeProducers answered no partition")?;
    if partition.error_code != 0 {
        return Err(format!("{topic}:{index}: {}", error_name(partition.error_code)));
    }
    Ok(partition.active_producers)
}

/// A connection to the leader of `topic:index`, and its id.
fn leader_of(connection: &Connection, topic: &str, index: i32) -> Result<(Client, i32), String> {
    let response = metadata(&mut Client::connect(connection)?)?;
    let leader = response
        .topics
        .iter()
        .filter(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == index)
        .map(|p| p.leader_id.0)
        .ok_or_else(|| format!("{topic}:{index} does not exist"))?;
    if leader < 0 {
        return Err(format!("{topic}:{index} has no leader"));
    }
    Ok((connect_to(connection, &response, leader)?, leader))
}

fn abort(connection: &Connection, topic: &str, index: i32, marker: (i64, i16, i32)) -> Result<(), String> {
    let (producer_id, epoch, coordinator_epoch) = marker;
    let (mut client, leader) = leader_of(connection, topic, index)?;
    let request =
        WriteTxnMarkersRequest::default().with_markers(vec![write_txn_markers_request::WritableTxnMarker::default()
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch)
            .with_coordinator_epoch(coordinator_epoch)
            .with_transaction_result(false)
            .with_topics(vec![write_txn_markers_request::WritableTxnMarkerTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partition_indexes(vec![index])])]);
    let response = client.call(&request, 1)?;
    let error = response
        .markers
        .iter()
        .flat_map(|m| m.topics.iter())
        .flat_map(|t| t.partitions.iter())
        .map(|p| p.error_code)
        .next()
        .ok_or("WriteTxnMarkers answered no partition")?;
    if error != 0 {
        return Err(format!("{topic}:{index} (leader {leader}) refused the abort: {}", error_name(error)));
    }
    println!("aborted producer {producer_id}'s transaction on {topic}:{index} (epoch {epoch}, coordinator epoch {coordinator_epoch})");
    Ok(())
}
