//! Where the client quotas (`quota`) meet this shard's requests (Kafka's KIP-219 throttling): a produce is
//! charged its request's bytes, a fetch its response's record bytes, and every
//! request the shard time its handler held the shard (the time spent inside its
//! polls, so a long poll's wait is free). A client over a quota gets the throttle in
//! its response's `throttle_time_ms` (every API whose response has the field), and
//! its connection reads no more requests until the throttle has passed. A fetch arriving while its client is
//! throttled gets an empty response, as Kafka answers it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{FetchRequest, FetchResponse, ResponseKind};
use skein_control::quota::{resolve, Charge, ClientQuota, CONNECTION_CREATION_RATE};
use skein_control::quota::{CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE};

use super::Shard;

/// A client as quotas name it: its principal's name and its client id.
pub struct QuotaClient<'a> {
    pub user: &'a str,
    pub client_id: &'a str,
}

impl<'a> QuotaClient<'a> {
    /// `principal` is `User:alice`: the quota user is `alice`.
    pub fn new(principal: &'a str, client_id: &'a str) -> QuotaClient<'a> {
        QuotaClient { user: principal.split_once(':').map_or(principal, |(_, name)| name), client_id }
    }
}

/// Whether the client's request time is metered (it has a request quota).
pub fn meters_time(quotas: &[ClientQuota], client: &QuotaClient<'_>) -> bool {
    !quotas.is_empty() && resolve(quotas, client.user, client.client_id, REQUEST_PERCENTAGE).is_some()
}

/// How long the client's fetches are still throttled for.
pub fn fetch_throttled(shard: &Shard, quotas: &[ClientQuota], client: &QuotaClient<'_>) -> Duration {
    if quotas.is_empty() {
        return Duration::ZERO;
    }
    let bytes = shard.quotas.throttled(quotas, client.user, client.client_id, CONSUMER_BYTE_RATE, 1.0);
    let time = shard.quotas.throttled(quotas, client.user, client.client_id, REQUEST_PERCENTAGE, 1e4);
    bytes.max(time)
}

/// The empty response a throttled fetch gets: no partitions, the session kept for an
/// incremental fetch and none opened for a full one.
pub fn throttled_fetch(request: &FetchRequest, version: i16, throttle: Duration) -> FetchResponse {
    let incremental = version >= 7 && request.session_id > 0 && request.session_epoch > 0;
    FetchResponse::default().with_throttle_time_ms(throttle_ms(throttle)).with_session_id(if incremental {
        request.session_id
    } else {
        0
    })
}

/// Charges a produce its bytes as soon as it is read, so that the connection reads
/// nothing more while its client is throttled: a pipelining producer cannot run
/// ahead of its quota by more than the request it sent. The throttle.
pub fn charge_produce(shard: &Shard, principal: &str, client_id: &str, request_bytes: usize) -> Duration {
    if !shard.has_quotas() {
        return Duration::ZERO;
    }
    let image = shard.image();
    let client = QuotaClient::new(principal, client_id);
    let charge = Charge {
        user: client.user,
        client_id: client.client_id,
        key: PRODUCER_BYTE_RATE,
        amount: request_bytes as u64,
    };
    let place = (shard.id, shard.settings.shards);
    shard.quotas.record(&image.client_quotas, &shard.settings.quota_ledger, place, charge, 1.0)
}

/// Charges one handled request (a fetch its record bytes, any request its shard
/// time) and returns the client's throttle, at least `charged` (a produce's).
pub fn charge(
    shard: &Shard,
    quotas: &[ClientQuota],
    client: &QuotaClient<'_>,
    charged: Duration,
    response: Option<&ResponseKind>,
    busy: Duration,
) -> Duration {
    if quotas.is_empty() {
        return charged;
    }
    let (ledger, place) = (&shard.settings.quota_ledger, (shard.id, shard.settings.shards));
    let mut throttle = charged;
    let mut record = |key: &'static str, amount: u64, per_second: f64| {
        let charge = Charge { user: client.user, client_id: client.client_id, key, amount };
        throttle = throttle.max(shard.quotas.record(quotas, ledger, place, charge, per_second));
    };
    if let Some(ResponseKind::Fetch(fetch)) = response {
        record(CONSUMER_BYTE_RATE, record_bytes(fetch), 1.0);
    }
    if !busy.is_zero() {
        // request_percentage is a percentage of one core: microseconds a second are
        // 10,000 times the percentage.
        record(REQUEST_PERCENTAGE, busy.as_micros() as u64, 1e4);
    }
    if !throttle.is_zero() {
        shard.metrics.count_throttle(throttle);
    }
    throttle
}

/// How long a new connection from `ip` is held before it is closed: zero when its
/// ip is within its connection creation rate.
pub fn connection_throttle(shard: &Shard, ip: std::net::IpAddr) -> Duration {
    if !shard.has_quotas() {
        return Duration::ZERO;
    }
    let image = shard.image();
    let ip = ip.to_string();
    let charge = Charge { user: "", client_id: &ip, key: CONNECTION_CREATION_RATE, amount: 1 };
    let place = (shard.id, shard.settings.shards);
    shard.quotas.record(&image.client_quotas, &shard.settings.quota_ledger, place, charge, 1.0)
}

/// The record bytes a fetch response carries.
fn record_bytes(response: &FetchResponse) -> u64 {
    response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| p.records.as_ref().map_or(0, |r| r.len() as u64))
        .sum()
}

/// Puts the throttle in the response, for every API whose response has
/// `throttle_time_ms` (at the versions that carry it; older clients learn of the
/// throttle from the muted connection alone).
pub fn set_throttle_time(response: &mut ResponseKind, throttle: Duration) {
    if throttle.is_zero() {
        return;
    }
    let ms = throttle_ms(throttle);
    // Every response that carries `throttle_time_ms` (the codec writes it at the
    // versions that have it), as Kafka's request quota throttles any API (KIP-219).
    macro_rules! throttled {
        ($($kind:ident),* $(,)?) => {
            match response {
                $(ResponseKind::$kind(r) => r.throttle_time_ms = r.throttle_time_ms.max(ms),)*
                _ => {}
            }
        };
    }
    throttled!(
        AddOffsetsToTxn,
        AddPartitionsToTxn,
        AddRaftVoter,
        AllocateProducerIds,
        AlterClientQuotas,
        AlterConfigs,
        AlterPartition,
        AlterPartitionReassignments,
        AlterReplicaLogDirs,
        AlterShareGroupOffsets,
        AlterUserScramCredentials,
        ApiVersions,
        AssignReplicasToDirs,
        BrokerHeartbeat,
        BrokerRegistration,
        ConsumerGroupDescribe,
        ConsumerGroupHeartbeat,
        ControllerRegistration,
        CreateAcls,
        CreateDelegationToken,
        CreatePartitions,
        CreateTopics,
        DeleteAcls,
        DeleteGroups,
        DeleteRecords,
        DeleteShareGroupOffsets,
        DeleteTopics,
        DescribeAcls,
        DescribeClientQuotas,
        DescribeCluster,
        DescribeConfigs,
        DescribeDelegationToken,
        DescribeGroups,
        DescribeLogDirs,
        DescribeProducers,
        DescribeShareGroupOffsets,
        DescribeTopicPartitions,
        DescribeTransactions,
        DescribeUserScramCredentials,
        ElectLeaders,
        EndTxn,
        ExpireDelegationToken,
        Fetch,
        FetchSnapshot,
        FindCoordinator,
        GetTelemetrySubscriptions,
        Heartbeat,
        IncrementalAlterConfigs,
        InitProducerId,
        JoinGroup,
        LeaveGroup,
        ListConfigResources,
        ListGroups,
        ListOffsets,
        ListPartitionReassignments,
        ListTransactions,
        Metadata,
        OffsetCommit,
        OffsetDelete,
        OffsetFetch,
        OffsetForLeaderEpoch,
        Produce,
        PushTelemetry,
        RemoveRaftVoter,
        RenewDelegationToken,
        ShareAcknowledge,
        ShareFetch,
        ShareGroupDescribe,
        ShareGroupHeartbeat,
        StreamsGroupDescribe,
        StreamsGroupHeartbeat,
        SyncGroup,
        TxnOffsetCommit,
        UnregisterBroker,
        UnregisterController,
        UpdateFeatures,
        UpdateRaftVoter,
    );
}

fn throttle_ms(throttle: Duration) -> i32 {
    throttle.as_millis().min(i32::MAX as u128) as i32
}

/// A future and the time spent inside its polls: the time it held the shard.
pub struct Timed<F> {
    inner: Pin<Box<F>>,
    busy: Duration,
}

impl<F: Future> Timed<F> {
    pub fn new(inner: F) -> Timed<F> {
        Timed { inner: Box::pin(inner), busy: Duration::ZERO }
    }
}

impl<F: Future> Future for Timed<F> {
    type Output = (F::Output, Duration);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let started = Instant::now();
        let polled = self.inner.as_mut().poll(cx);
        self.busy += started.elapsed();
        polled.map(|output| (output, self.busy))
    }
}

/// Every `QUOTA_REBALANCE_INTERVAL`, this shard publishes its quota use and takes
/// its new shares (`manager`), until the shard stops.
pub async fn rebalance(shard: std::rc::Rc<Shard>) {
    loop {
        let stopping = futures_lite::future::or(
            async {
                glommio::timer::sleep(skein_control::limits::QUOTA_REBALANCE_INTERVAL).await;
                false
            },
            async {
                shard.closing().await;
                true
            },
        );
        if stopping.await {
            return;
        }
        shard.quotas.rebalance(shard.id);
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{MetadataResponse, ProduceResponse, SaslHandshakeResponse};

    use super::*;

    // Every response with `throttle_time_ms` carries the throttle, keeping a longer one
    // the handler set; responses without the field are left as they are.
    #[test]
    fn any_response_with_the_field_carries_the_throttle() {
        let mut metadata = ResponseKind::Metadata(MetadataResponse::default());
        set_throttle_time(&mut metadata, Duration::from_millis(1500));
        assert!(matches!(&metadata, ResponseKind::Metadata(r) if r.throttle_time_ms == 1500));
        let mut produce = ResponseKind::Produce(ProduceResponse::default().with_throttle_time_ms(9000));
        set_throttle_time(&mut produce, Duration::from_millis(10));
        assert!(matches!(&produce, ResponseKind::Produce(r) if r.throttle_time_ms == 9000));
        let mut handshake = ResponseKind::SaslHandshake(SaslHandshakeResponse::default());
        set_throttle_time(&mut handshake, Duration::from_secs(1));
        assert_eq!(handshake, ResponseKind::SaslHandshake(SaslHandshakeResponse::default()));
    }
}
