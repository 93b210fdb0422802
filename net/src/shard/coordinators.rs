//! The shard as the coordinators' host (`coordinator::Host`: all they see of it), and
//! the data partitions' side of transactions: a leader's check that a transactional
//! write belongs to an open transaction (KIP-890), and the markers it writes.

use std::future::Future;

use kafka_protocol::messages::{ProducerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use skein_coordinator::group::GroupRequest;
use skein_coordinator::serve::{Coordinators, Host};
use skein_coordinator::txn::{self, calls};

use super::*;

impl Host for Shard {
    fn node_id(&self) -> i32 {
        self.settings.node_id
    }

    fn image(&self) -> Arc<MetadataImage> {
        Shard::image(self)
    }

    fn coordinators(&self) -> &Coordinators {
        &self.coordinators
    }

    fn hosted(&self, partition: &TopicPartition) -> Option<Rc<Partition>> {
        self.partition(partition)
    }

    fn count_group_load_failure(&self) {
        self.metrics.group_load_failures.set(self.metrics.group_load_failures.get() + 1);
    }

    fn next_producer_id(self: &Rc<Self>) -> impl Future<Output = Result<i64, i16>> {
        let shard = self.clone();
        async move { Shard::next_producer_id(&shard).await.map_err(|(error, _)| error) }
    }

    fn write_marker(
        self: &Rc<Self>,
        partition: TopicPartition,
        marker: ops::WriteMarker,
    ) -> impl Future<Output = Result<(), i16>> {
        let shard = self.clone();
        async move { shard.call(partition, marker).await.map_err(|e| e.code) }
    }

    fn high_watermark(self: &Rc<Self>, partition: TopicPartition) -> impl Future<Output = Option<i64>> {
        let shard = self.clone();
        async move { shard.call(partition, ops::Stats).await.ok().map(|stats| stats.high_watermark) }
    }

    fn broker_address(&self, broker: i32) -> Option<(String, u16)> {
        Shard::broker_address(self, broker)
    }

    fn security(&self) -> &Arc<skein_control::security::Security> {
        &self.settings.security
    }

    fn share_metrics(&self) -> &skein_coordinator::share::ShareMetrics {
        &self.metrics.shares
    }

    fn share_state(
        self: &Rc<Self>,
        call: skein_coordinator::serve::share::StateCall,
    ) -> impl Future<Output = Result<skein_coordinator::serve::share::Stored, skein_control::errors::Refusal>> {
        let shard = self.clone();
        async move {
            // As Kafka's persister does, a coordinator that is not there yet (its topic
            // just created, its leader moving) is asked again with a doubling back-off:
            // up to 5 attempts, about 4 s in all.
            let mut backoff = std::time::Duration::from_millis(250);
            let mut attempts = 1;
            loop {
                match shard.share_state(call.clone()).await {
                    Err((error, _))
                        if attempts < SHARE_STATE_ATTEMPTS
                            && matches!(
                                error,
                                code::COORDINATOR_NOT_AVAILABLE
                                    | code::COORDINATOR_LOAD_IN_PROGRESS
                                    | code::NOT_COORDINATOR
                            ) =>
                    {
                        glommio::timer::sleep(backoff).await;
                        backoff *= 2;
                        attempts += 1;
                    }
                    answer => return answer,
                }
            }
        }
    }

    fn produce(
        self: &Rc<Self>,
        partition: TopicPartition,
        batch: bytes::Bytes,
    ) -> impl Future<Output = Result<(), skein_control::errors::Refusal>> {
        let shard = self.clone();
        async move { shard.produce_on_leader(partition, batch).await }
    }

    fn create_topic(
        self: &Rc<Self>,
        name: String,
        configs: std::collections::BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), skein_control::errors::Refusal>> {
        let shard = self.clone();
        async move {
            let partitions = shard.settings.num_partitions;
            match crate::topics::create_topic(&shard, &name, partitions, -1, configs).await {
                Ok(_) | Err((code::TOPIC_ALREADY_EXISTS, _)) => Ok(()),
                Err(refusal) => Err(refusal),
            }
        }
    }
}

/// Attempts of a share coordinator call whose coordinator is not available.
const SHARE_STATE_ATTEMPTS: u32 = 5;

/// How long a produce the broker makes itself (a dead letter) waits for acks=all.
const OWN_PRODUCE_TIMEOUT_MS: u64 = 30_000;

impl Shard {
    /// Appends `batch` to `partition` with acks=all where it is led: on the shard of
    /// this node that owns it, else with a Produce to its leader.
    ///
    /// # Errors
    /// The partition's error code and message (LEADER_NOT_AVAILABLE without a leader,
    /// NETWORK_EXCEPTION when its broker cannot be reached).
    async fn produce_on_leader(
        self: &Rc<Self>,
        partition: TopicPartition,
        batch: bytes::Bytes,
    ) -> Result<(), skein_control::errors::Refusal> {
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        let node = self.settings.node_id;
        let leader = self.image().topic(&partition.topic).map(|t| t.assignment(partition.partition, node).leader);
        match leader {
            None => return Err((code::UNKNOWN_TOPIC_OR_PARTITION, format!("{partition} does not exist"))),
            Some(leader) if leader == node => {
                let backing = skein_engine::Backing::of(&batch);
                let op = ops::Produce {
                    batch,
                    backing,
                    acks: -1,
                    timeout_ms: OWN_PRODUCE_TIMEOUT_MS,
                    transactional_id: None,
                    version: crate::handlers::produce::VERSIONS.max,
                };
                return match self.call(partition, op).await {
                    Ok(ops::Produced::Appended(_)) => Ok(()),
                    Ok(ops::Produced::Refused(refused)) => Err((refused.error_code, refused.message)),
                    Err(e) => Err((e.code, e.message.unwrap_or_default())),
                };
            }
            Some(_) => {}
        }
        let leader = leader.filter(|l| *l >= 0);
        let (host, port) = leader
            .and_then(|l| self.broker_address(l))
            .ok_or((code::LEADER_NOT_AVAILABLE, format!("{partition} has no leader")))?;
        let data = PartitionProduceData::default().with_index(partition.partition).with_records(Some(batch));
        let topic = TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(partition.topic.clone())))
            .with_partition_data(vec![data]);
        let request = kafka_protocol::messages::ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(OWN_PRODUCE_TIMEOUT_MS as i32)
            .with_topic_data(vec![topic]);
        let client = format!("skein-{node}");
        let timeout = std::time::Duration::from_millis(OWN_PRODUCE_TIMEOUT_MS + 5_000);
        let response =
            skein_control::peer::pooled_call(&self.settings.security, &host, port, &client, &request, 9, timeout)
                .await
                .map_err(|e| (code::NETWORK_EXCEPTION, e.to_string()))?;
        let answer = response.responses.iter().flat_map(|t| &t.partition_responses).next();
        match answer {
            Some(p) if p.error_code == code::NONE => Ok(()),
            Some(p) => Err((p.error_code, p.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default())),
            None => Err((code::UNKNOWN_SERVER_ERROR, "an empty produce response".into())),
        }
    }
}

impl Shard {
    /// Runs a share coordinator call wherever its key's `__share_group_state`
    /// partition is led: on this node's shard that owns it, else on its broker
    /// (Kafka's RPCs 83-87). The topic is created on first use.
    ///
    /// # Errors
    /// The coordinator's error and message; COORDINATOR_NOT_AVAILABLE when the topic
    /// cannot be created or the partition has no leader.
    pub async fn share_state(
        self: &Rc<Self>,
        call: skein_coordinator::serve::share::StateCall,
    ) -> Result<skein_coordinator::serve::share::Stored, skein_control::errors::Refusal> {
        use skein_coordinator::serve::share::STATE_TOPIC;
        let unavailable = (code::COORDINATOR_NOT_AVAILABLE, String::new());
        crate::topics::ensure_share_state_topic(self).await.map_err(|_| unavailable.clone())?;
        let partition = call.key().state_partition();
        let image = self.image();
        let leader = image.topic(STATE_TOPIC).map(|t| t.assignment(partition, self.settings.node_id).leader);
        match leader {
            Some(leader) if leader == self.settings.node_id => self.share_state_here(call).await,
            Some(leader) if leader >= 0 => crate::handlers::share_state::send(self, leader, call).await,
            _ => Err(unavailable),
        }
    }

    /// Runs a share coordinator call on this node: NOT_COORDINATOR when another
    /// broker leads the key's partition, COORDINATOR_LOAD_IN_PROGRESS while it loads.
    ///
    /// # Errors
    /// The coordinator's error and message.
    pub async fn share_state_here(
        self: &Rc<Self>,
        call: skein_coordinator::serve::share::StateCall,
    ) -> Result<skein_coordinator::serve::share::Stored, skein_control::errors::Refusal> {
        let partition = TopicPartition::new(skein_coordinator::serve::share::STATE_TOPIC, call.key().state_partition());
        let leads = self.leads(&partition);
        match self.call(partition, ops::ShareState(Box::new(call))).await {
            Ok(stored) => Ok(stored),
            Err(e) if e.code == code::NOT_LEADER_OR_FOLLOWER && !leads => Err((code::NOT_COORDINATOR, String::new())),
            Err(e) => Err((coordinator_error(e.code), e.message.unwrap_or_default())),
        }
    }

    /// Runs a transaction coordinator operation on the shard of this node that
    /// coordinates `id` (`topics::txn_call` creates its topic first).
    ///
    /// # Errors
    /// The Kafka error code when the coordinator cannot answer: NOT_COORDINATOR when
    /// another broker leads the id's partition, COORDINATOR_LOAD_IN_PROGRESS while it loads.
    pub async fn txn_call<C: txn::TxnRequest>(self: &Rc<Self>, id: &str, call: C) -> Result<C::Reply, i16> {
        let partition = TopicPartition::new(txn::TRANSACTION_TOPIC, txn::partition_for(id));
        let leads = self.leads(&partition);
        match self.call(partition, ops::Txn(Box::new(call.into_message()))).await {
            Ok(answer) => C::reply(answer).ok_or_else(unexpected_answer::<C>),
            Err(e) if e.code == code::NOT_LEADER_OR_FOLLOWER && !leads => Err(code::NOT_COORDINATOR),
            Err(e) => Err(coordinator_error(e.code)),
        }
    }

    /// Runs a group operation on the shard of this node that coordinates `group`
    /// (`topics::group_call` creates its topic first).
    ///
    /// # Errors
    /// The Kafka error code when the coordinator cannot answer (loading, unavailable).
    pub async fn group_call<C: GroupRequest>(self: &Rc<Self>, group: &str, call: C) -> Result<C::Reply, i16> {
        let partition = TopicPartition::new(
            skein_coordinator::group::OFFSETS_TOPIC,
            skein_coordinator::group::partition_for(group),
        );
        match self.call(partition.clone(), ops::Group(Box::new(call.into_message()))).await {
            Ok(answer) => C::reply(answer).ok_or_else(unexpected_answer::<C>),
            // Another broker leads the group's partition: the client looks it up again.
            Err(e) if e.code == code::NOT_LEADER_OR_FOLLOWER && !self.leads(&partition) => Err(code::NOT_COORDINATOR),
            Err(e) => Err(coordinator_error(e.code)),
        }
    }

    /// Runs a group operation on every shard that coordinates groups (ListGroups).
    pub async fn group_call_everywhere<C: GroupRequest>(
        self: &Rc<Self>,
        call: impl Fn() -> C,
    ) -> Vec<Result<C::Reply, i16>> {
        let image = self.image();
        let Some(meta) = image.topic(skein_coordinator::group::OFFSETS_TOPIC) else { return Vec::new() };
        let mut seen = std::collections::BTreeSet::new();
        let mut calls = Vec::new();
        let node = self.settings.node_id;
        for (p, owner) in meta.shards.iter().enumerate() {
            // Groups of partitions other brokers lead are theirs to list.
            if meta.assignment(p as i32, node).leader != node {
                continue;
            }
            if seen.insert(*owner) {
                let partition = TopicPartition::new(skein_coordinator::group::OFFSETS_TOPIC, p as i32);
                calls.push(self.call_on(*owner, partition, ops::Group(Box::new(call().into_message()))));
            }
        }
        futures_util::future::join_all(calls)
            .await
            .into_iter()
            .map(|r| match r {
                Ok(answer) => C::reply(answer).ok_or_else(unexpected_answer::<C>),
                Err(e) => Err(e.code),
            })
            .collect()
    }

    /// Whether this node leads `partition` in the installed image.
    fn leads(&self, partition: &TopicPartition) -> bool {
        let node = self.settings.node_id;
        self.image().topic(&partition.topic).is_some_and(|t| t.assignment(partition.partition, node).leader == node)
    }

    /// Asks `id`'s coordinator, here or on another broker (AddPartitionsToTxn v4+),
    /// whether its open transaction, in this producer id and epoch, holds `partition`;
    /// with `implicit` (a write of transaction version 2: Produce v12+, TxnOffsetCommit
    /// v5+), it adds the partition, starting a transaction if none is open.
    ///
    /// # Errors
    /// INVALID_TXN_STATE when it does not, PRODUCER_FENCED for another epoch,
    /// INVALID_PRODUCER_ID_MAPPING for another producer; the coordinator's error
    /// otherwise.
    pub async fn check_txn(
        self: &Rc<Self>,
        id: &str,
        producer: (i64, i16),
        partition: &TopicPartition,
        implicit: bool,
    ) -> Result<(), i16> {
        let (producer_id, epoch) = producer;
        let wanted = vec![(partition.topic.clone(), partition.partition)];
        let mode = if implicit { calls::AddMode::Implicit } else { calls::AddMode::Verify };
        let call = calls::Add { id: id.to_owned(), producer_id, epoch, partitions: wanted, mode };
        // Boxed: a produce routes a coordinator call, which routes again.
        let answer: std::pin::Pin<Box<dyn std::future::Future<Output = _>>> = Box::pin(self.txn_call(id, call));
        match answer.await {
            Ok(code::NONE) => Ok(()),
            Ok(error) => Err(error),
            Err(code::NOT_COORDINATOR) => self.check_remote(id, producer, partition, implicit).await,
            Err(error) => Err(error),
        }
    }

    async fn check_remote(
        &self,
        id: &str,
        producer: (i64, i16),
        partition: &TopicPartition,
        implicit: bool,
    ) -> Result<(), i16> {
        let (producer_id, epoch) = producer;
        use kafka_protocol::messages::add_partitions_to_txn_request::{
            AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
        };
        use kafka_protocol::messages::{AddPartitionsToTxnRequest, TransactionalId};
        let image = self.image();
        let node = self.settings.node_id;
        let coordinator = image
            .topic(txn::TRANSACTION_TOPIC)
            .map(|t| t.assignment(txn::partition_for(id), node).leader)
            .ok_or(code::COORDINATOR_NOT_AVAILABLE)?;
        let (host, port) = self.broker_address(coordinator).ok_or(code::COORDINATOR_NOT_AVAILABLE)?;
        let topic = AddPartitionsToTxnTopic::default()
            .with_name(TopicName(StrBytes::from_string(partition.topic.clone())))
            .with_partitions(vec![partition.partition]);
        let request =
            AddPartitionsToTxnRequest::default().with_transactions(vec![AddPartitionsToTxnTransaction::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_owned())))
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(epoch)
                .with_verify_only(!implicit)
                .with_topics(vec![topic])]);
        let client = format!("skein-txn-verify-{node}");
        let security = &self.settings.security;
        let timeout = skein_coordinator::serve::txn::TXN_WRITE_TIMEOUT;
        let response = skein_control::peer::call(security, &host, port, &client, &request, 5, timeout)
            .await
            .map_err(|_| code::NETWORK_EXCEPTION)?;
        if response.error_code != code::NONE {
            return Err(response.error_code);
        }
        let error = response
            .results_by_transaction
            .iter()
            .flat_map(|t| t.topic_results.iter())
            .flat_map(|t| t.results_by_partition.iter())
            .map(|p| p.partition_error_code)
            .find(|&c| c != code::NONE);
        error.map_or(Ok(()), Err)
    }

    /// Writes a marker to a partition this shard owns (`PartitionOp::WriteMarker`);
    /// one ending a transaction's offset commits completes them in the group
    /// coordinator.
    pub(crate) async fn write_marker(
        &self,
        partition: &TopicPartition,
        state: &Partition,
        marker: &ops::WriteMarker,
    ) -> Result<(), PartitionError> {
        let &ops::WriteMarker { producer_id, epoch, coordinator_epoch, commit, transaction_version } = marker;
        let min_insync = state.rules.get().min_insync_replicas.max(1) as usize;
        let acks_all =
            skein_replication::AcksAll { min_insync, timeout: skein_coordinator::serve::txn::MARKER_TIMEOUT };
        let tv2 = transaction_version >= 2;
        match state.write_marker(producer_id, epoch, coordinator_epoch, commit, tv2, Some(acks_all)).await {
            Ok(_) => {
                if partition.topic == skein_coordinator::group::OFFSETS_TOPIC {
                    self.coordinators.groups.complete_txn(partition.partition, producer_id, commit);
                }
                Ok(())
            }
            Err(error) => Err(error.into()),
        }
    }
}

/// A coordinator's partition error as its caller hears it: a partition not (yet) led
/// or hosted here is a coordinator still loading.
fn coordinator_error(error: i16) -> i16 {
    match error {
        code::NOT_LEADER_OR_FOLLOWER | code::UNKNOWN_TOPIC_OR_PARTITION => code::COORDINATOR_LOAD_IN_PROGRESS,
        error => error,
    }
}

/// A coordinator that answered another call's answer: a broker bug, logged and
/// answered UNKNOWN_SERVER_ERROR here rather than by every handler.
fn unexpected_answer<C>() -> i16 {
    tracing::error!(target: "skein::net", call = std::any::type_name::<C>(), "a coordinator answered another call");
    code::UNKNOWN_SERVER_ERROR
}
