//! `skein cluster status|brokers|elect-leaders|reassign`: the cluster as an operator
//! sees it. librdkafka has no DescribeQuorum or reassignment calls, so these speak the
//! Kafka protocol directly (`kafka-protocol`), one blocking request at a time to the
//! bootstrap broker; they work against Apache Kafka as well as Skein.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use clap::Subcommand;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use skein_control::security::login::{Login, LoginExchange, LoginMechanism};

/// The largest response accepted (a Metadata of a large cluster fits).
const RESPONSE_MAX_BYTES: usize = 256 << 20;

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// The metadata quorum, the brokers, under-replicated and offline partitions,
    /// reassignments under way and leader skew.
    Status {
        #[command(flatten)]
        connection: Connection,
    },
    /// Each broker: address, rack, and the partitions it holds and leads.
    Brokers {
        #[command(flatten)]
        connection: Connection,
    },
    /// Move leadership back to preferred replicas (or, `--unclean`, elect a leader for
    /// partitions without one); every partition unless `--topic` names some.
    ElectLeaders {
        /// `TOPIC` or `TOPIC:PARTITION`; repeatable.
        #[arg(long = "topic", value_name = "TOPIC[:PARTITION]")]
        topics: Vec<String>,
        #[arg(long)]
        unclean: bool,
        #[command(flatten)]
        connection: Connection,
    },
    /// Move a partition to other brokers (`--replicas 2,3`), cancel its move
    /// (`--cancel`), or list the moves under way (no partition).
    Reassign {
        /// `TOPIC:PARTITION`.
        partition: Option<String>,
        /// The target replicas, the first the preferred leader.
        #[arg(long, value_delimiter = ',', conflicts_with = "cancel")]
        replicas: Vec<i32>,
        #[arg(long)]
        cancel: bool,
        #[command(flatten)]
        connection: Connection,
    },
}

#[derive(clap::Args, Debug, Clone)]
pub struct Connection {
    /// Broker to ask.
    #[arg(long, env = "SKEIN_BOOTSTRAP_SERVER", default_value = "127.0.0.1:9092")]
    pub bootstrap_server: String,
    /// How long to wait for each answer, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    #[command(flatten)]
    pub sasl: SaslLogin,
}

/// Authentication on a SASL_PLAINTEXT listener, as a Kafka client's `sasl.mechanism`
/// and JAAS user and password configure it.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SaslLogin {
    /// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 [default: no SASL].
    #[arg(long, env = "SKEIN_SASL_MECHANISM")]
    pub sasl_mechanism: Option<String>,
    #[arg(long, env = "SKEIN_SASL_USERNAME")]
    pub sasl_username: Option<String>,
    #[arg(long, env = "SKEIN_SASL_PASSWORD", hide_env_values = true)]
    pub sasl_password: Option<String>,
}

/// One connection to a broker, speaking the Kafka protocol.
pub(crate) struct Client {
    stream: TcpStream,
    correlation: i32,
}

impl Client {
    pub(crate) fn connect(connection: &Connection) -> Result<Client, String> {
        let fail = |e: std::io::Error| format!("cannot reach {}: {e}", connection.bootstrap_server);
        let timeout = Duration::from_millis(connection.timeout_ms.max(1));
        let address = connection
            .bootstrap_server
            .to_socket_addrs()
            .map_err(fail)?
            .next()
            .ok_or_else(|| format!("{} resolves to no address", connection.bootstrap_server))?;
        let stream = TcpStream::connect_timeout(&address, timeout).map_err(fail)?;
        stream.set_read_timeout(Some(timeout)).map_err(fail)?;
        stream.set_write_timeout(Some(timeout)).map_err(fail)?;
        let mut client = Client { stream, correlation: 0 };
        if let Some(mechanism) = &connection.sasl.sasl_mechanism {
            client.authenticate(mechanism, &connection.sasl)?;
        }
        Ok(client)
    }

    /// SaslHandshake v1, then SaslAuthenticate v2 tokens (KIP-152).
    fn authenticate(&mut self, mechanism: &str, login: &SaslLogin) -> Result<(), String> {
        let user = login.sasl_username.as_deref().ok_or("--sasl-mechanism needs --sasl-username")?;
        let password = login.sasl_password.as_deref().ok_or("--sasl-mechanism needs --sasl-password")?;
        let handshake = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.to_string()));
        let answer = self.call(&handshake, 1)?;
        if answer.error_code != 0 {
            let offered: Vec<&str> = answer.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(format!("SASL {mechanism}: {} (the broker offers {offered:?})", error_name(answer.error_code)));
        }
        let mechanism = LoginMechanism::parse(mechanism)
            .ok_or_else(|| format!("--sasl-mechanism {mechanism}: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"))?;
        let login = Login { mechanism, user: user.to_string(), password: password.to_string() };
        let mut exchange = LoginExchange::new(&login);
        let mut token = exchange.first();
        loop {
            let answer = self.call(&SaslAuthenticateRequest::default().with_auth_bytes(token.into()), 2)?;
            if answer.error_code != 0 {
                return Err(format!(
                    "SASL {} as {user}: {} {}",
                    mechanism.name(),
                    error_name(answer.error_code),
                    answer.error_message.as_deref().unwrap_or("")
                ));
            }
            match exchange.answer(&answer.auth_bytes)? {
                Some(next) => token = next,
                None => return Ok(()),
            }
        }
    }

    pub(crate) fn call<R: Request>(&mut self, request: &R, version: i16) -> Result<R::Response, String> {
        let key = ApiKey::try_from(R::KEY).map_err(|_| format!("unknown api key {}", R::KEY))?;
        self.correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("skein-cluster")));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header.encode(&mut buf, R::header_version(version)).map_err(|e| format!("cannot encode {key:?}: {e}"))?;
        request.encode(&mut buf, version).map_err(|e| format!("cannot encode {key:?}: {e}"))?;
        let len = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        let io = |e: std::io::Error| format!("{key:?} failed: {e}");
        self.stream.write_all(&buf).map_err(io)?;
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).map_err(io)?;
        let size = i32::from_be_bytes(size);
        if size < 0 || size as usize > RESPONSE_MAX_BYTES {
            return Err(format!("{key:?}: the broker sent a frame of {size} bytes"));
        }
        let mut body = vec![0u8; size as usize];
        self.stream.read_exact(&mut body).map_err(io)?;
        let mut body = Bytes::from(body);
        let bad = |e: anyhow::Error| format!("{key:?}: cannot decode the answer: {e}");
        ResponseHeader::decode(&mut body, key.response_header_version(version)).map_err(bad)?;
        R::Response::decode(&mut body, version).map_err(bad)
    }
}

/// Kafka's name of an error code, for messages.
pub(crate) fn error_name(code: i16) -> String {
    match kafka_protocol::ResponseError::try_from_code(code) {
        Some(error) => format!("{error:?}"),
        None => format!("error {code}"),
    }
}

pub fn run(command: ClusterCommand) -> Result<(), String> {
    match command {
        ClusterCommand::Status { connection } => status(&connection),
        ClusterCommand::Brokers { connection } => brokers(&connection),
        ClusterCommand::ElectLeaders { topics, unclean, connection } => elect(&connection, &topics, unclean),
        ClusterCommand::Reassign { partition, replicas, cancel, connection } => match partition {
            None if replicas.is_empty() && !cancel => list_reassignments(&connection),
            None => Err("name the partition to move: TOPIC:PARTITION".into()),
            Some(partition) if replicas.is_empty() && !cancel => {
                Err(format!("--replicas or --cancel: what should {partition} do?"))
            }
            Some(partition) => reassign(&connection, &partition, (!cancel).then_some(replicas)),
        },
    }
}

pub(crate) fn metadata(client: &mut Client) -> Result<MetadataResponse, String> {
    client.call(&MetadataRequest::default().with_topics(None), 12)
}

/// A partition as Metadata describes it.
struct PartitionInfo {
    topic: String,
    partition: i32,
    leader: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
}

/// Each partition of the cluster.
fn partitions(response: &MetadataResponse) -> Vec<PartitionInfo> {
    let ids = |list: &[BrokerId]| list.iter().map(|b| b.0).collect::<Vec<_>>();
    response
        .topics
        .iter()
        .flat_map(|t| {
            let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
            t.partitions.iter().map(move |p| PartitionInfo {
                topic: name.clone(),
                partition: p.partition_index,
                leader: p.leader_id.0,
                replicas: ids(&p.replica_nodes),
                isr: ids(&p.isr_nodes),
            })
        })
        .collect()
}

fn status(connection: &Connection) -> Result<(), String> {
    let mut client = Client::connect(connection)?;
    let request = DescribeQuorumRequest::default().with_topics(vec![describe_quorum_request::TopicData::default()
        .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
        .with_partitions(vec![describe_quorum_request::PartitionData::default().with_partition_index(0)])]);
    let quorum: DescribeQuorumResponse = client.call(&request, 1)?;
    match quorum.topics.first().and_then(|t| t.partitions.first()) {
        Some(q) if quorum.error_code == 0 && q.error_code == 0 => {
            println!(
                "quorum: leader {} in epoch {}, high watermark {}",
                q.leader_id.0, q.leader_epoch, q.high_watermark
            );
            for voter in &q.current_voters {
                let lag = q.high_watermark - voter.log_end_offset;
                println!("  voter {}: log end {} (lag {lag})", voter.replica_id.0, voter.log_end_offset);
            }
        }
        Some(q) => {
            println!("quorum: {}", error_name(if quorum.error_code != 0 { quorum.error_code } else { q.error_code }))
        }
        None => println!("quorum: {}", error_name(quorum.error_code)),
    }
    let response = metadata(&mut client)?;
    println!(
        "cluster {}: {} broker(s), controller {}",
        response.cluster_id.as_deref().unwrap_or("?"),
        response.brokers.len(),
        response.controller_id.0
    );
    let all = partitions(&response);
    let under: Vec<_> = all.iter().filter(|p| p.leader >= 0 && p.isr.len() < p.replicas.len()).collect();
    let offline: Vec<_> = all.iter().filter(|p| p.leader < 0).collect();
    let not_preferred = all.iter().filter(|p| p.leader >= 0 && p.replicas.first() != Some(&p.leader)).count();
    println!("partitions: {}, under-replicated {}, offline {}", all.len(), under.len(), offline.len());
    for p in under.iter().chain(&offline).take(20) {
        println!("  {}-{}: leader {}, replicas {:?}, isr {:?}", p.topic, p.partition, p.leader, p.replicas, p.isr);
    }
    let mut led: BTreeMap<i32, usize> = response.brokers.iter().map(|b| (b.node_id.0, 0)).collect();
    for p in all.iter().filter(|p| p.leader >= 0) {
        *led.entry(p.leader).or_default() += 1;
    }
    let (most, least) = (led.values().max().copied().unwrap_or(0), led.values().min().copied().unwrap_or(0));
    println!("leader skew: {most} to {least} leaderships per broker; {not_preferred} not on their preferred replica");
    let moving: ListPartitionReassignmentsResponse =
        client.call(&ListPartitionReassignmentsRequest::default().with_timeout_ms(connection.timeout_ms as i32), 0)?;
    let count: usize = moving.topics.iter().map(|t| t.partitions.len()).sum();
    println!("reassignments under way: {count}");
    Ok(())
}

fn brokers(connection: &Connection) -> Result<(), String> {
    let mut client = Client::connect(connection)?;
    let response = metadata(&mut client)?;
    let all = partitions(&response);
    let mut brokers = response.brokers.clone();
    brokers.sort_by_key(|b| b.node_id.0);
    println!("{:>6}  {:<28} {:<12} {:>9} {:>7}", "id", "address", "rack", "replicas", "leads");
    for broker in brokers {
        let id = broker.node_id.0;
        let held = all.iter().filter(|p| p.replicas.contains(&id)).count();
        let leads = all.iter().filter(|p| p.leader == id).count();
        let marker = if id == response.controller_id.0 { " (controller)" } else { "" };
        println!(
            "{id:>6}  {:<28} {:<12} {held:>9} {leads:>7}{marker}",
            format!("{}:{}", broker.host.as_str(), broker.port),
            broker.rack.as_ref().map(|r| r.as_str()).unwrap_or("-"),
        );
    }
    Ok(())
}

/// `TOPIC:PARTITION`.
fn topic_partition(text: &str) -> Result<(String, i32), String> {
    let (topic, partition) = text.rsplit_once(':').ok_or_else(|| format!("{text}: expected TOPIC:PARTITION"))?;
    let partition = partition.parse().map_err(|_| format!("{text}: the partition must be a number"))?;
    Ok((topic.to_string(), partition))
}

fn elect(connection: &Connection, topics: &[String], unclean: bool) -> Result<(), String> {
    let mut client = Client::connect(connection)?;
    let wanted = match topics.is_empty() {
        true => None,
        false => {
            let known = partitions(&metadata(&mut client)?);
            let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
            for text in topics {
                let (topic, partitions) = match text.contains(':') {
                    true => topic_partition(text).map(|(t, p)| (t, vec![p]))?,
                    false => (text.clone(), known.iter().filter(|p| p.topic == *text).map(|p| p.partition).collect()),
                };
                if partitions.is_empty() {
                    return Err(format!("topic {text} does not exist"));
                }
                by_topic.entry(topic).or_default().extend(partitions);
            }
            Some(
                by_topic
                    .into_iter()
                    .map(|(topic, partitions)| {
                        elect_leaders_request::TopicPartitions::default()
                            .with_topic(TopicName(StrBytes::from_string(topic)))
                            .with_partitions(partitions)
                    })
                    .collect(),
            )
        }
    };
    let request = ElectLeadersRequest::default()
        .with_election_type(i8::from(unclean))
        .with_timeout_ms(connection.timeout_ms as i32)
        .with_topic_partitions(wanted);
    let response: ElectLeadersResponse = client.call(&request, 2)?;
    if response.error_code != 0 {
        return Err(format!("elections refused: {}", error_name(response.error_code)));
    }
    let mut failed = 0;
    for topic in &response.replica_election_results {
        for result in &topic.partition_result {
            let outcome = match result.error_code {
                0 => "elected".to_string(),
                84 => "already led by its preferred replica".to_string(),
                code => {
                    failed += 1;
                    let message = result.error_message.as_deref().unwrap_or("");
                    format!("{} {message}", error_name(code))
                }
            };
            println!("{}-{}: {outcome}", topic.topic.as_str(), result.partition_id);
        }
    }
    match failed {
        0 => Ok(()),
        n => Err(format!("{n} election(s) failed")),
    }
}

fn reassign(connection: &Connection, partition: &str, target: Option<Vec<i32>>) -> Result<(), String> {
    let (topic, index) = topic_partition(partition)?;
    let mut client = Client::connect(connection)?;
    let request = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(connection.timeout_ms as i32)
        .with_topics(vec![alter_partition_reassignments_request::ReassignableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic)))
            .with_partitions(vec![alter_partition_reassignments_request::ReassignablePartition::default()
                .with_partition_index(index)
                .with_replicas(target.clone().map(|t| t.into_iter().map(BrokerId).collect()))])]);
    let response: AlterPartitionReassignmentsResponse = client.call(&request, 0)?;
    let result = response.responses.first().and_then(|t| t.partitions.first());
    let (code, message) = match result {
        _ if response.error_code != 0 => (response.error_code, response.error_message.clone()),
        Some(r) => (r.error_code, r.error_message.clone()),
        None => return Err("the broker answered for no partition".into()),
    };
    if code != 0 {
        return Err(format!("{partition}: {} {}", error_name(code), message.as_deref().unwrap_or("")));
    }
    match target {
        Some(target) => println!("{partition}: moving to {target:?}"),
        None => println!("{partition}: move cancelled"),
    }
    Ok(())
}

fn list_reassignments(connection: &Connection) -> Result<(), String> {
    let mut client = Client::connect(connection)?;
    let request = ListPartitionReassignmentsRequest::default().with_timeout_ms(connection.timeout_ms as i32);
    let response: ListPartitionReassignmentsResponse = client.call(&request, 0)?;
    if response.error_code != 0 {
        return Err(error_name(response.error_code));
    }
    let ids = |list: &[BrokerId]| list.iter().map(|b| b.0).collect::<Vec<_>>();
    let mut count = 0;
    for topic in &response.topics {
        for p in &topic.partitions {
            count += 1;
            println!(
                "{}-{}: replicas {:?}, adding {:?}, removing {:?}",
                topic.name.as_str(),
                p.partition_index,
                ids(&p.replicas),
                ids(&p.adding_replicas),
                ids(&p.removing_replicas)
            );
        }
    }
    if count == 0 {
        println!("no reassignment under way");
    }
    Ok(())
}
