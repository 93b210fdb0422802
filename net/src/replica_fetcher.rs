//! Followers pull, as Kafka's replica fetchers do: each shard fetches the partitions it
//! follows from their leaders, one connection per (shard, leader broker) carrying all
//! of that shard's partitions the leader leads. A fetch is Kafka's Fetch v12 with the
//! follower's id as `replica_id`, its current leader epoch and the epoch of its last
//! batch; the leader answers records up to its log end, its high watermark, and where
//! the follower's log diverged (KIP-320), where the follower then truncates. Records
//! are appended with the leader's offsets and epochs, producer state follows them, so
//! a new leader deduplicates idempotent producers.
//!
//! Each fetcher keeps a fetch session with its leader (KIP-227), as Kafka's replica
//! fetchers do (`FollowerSession`): the first fetch lists every partition and opens
//! it; later fetches list only the partitions whose fetch position moved (and those no
//! longer followed, as forgotten), and the leader answers only partitions with records
//! or news. A follower of 3,333 partitions of one leader then sends and receives a few
//! of them per fetch, not all of them twice a second.
//!
//! Every second the loop also has the shard drop followers not caught up for
//! `replica.lag.time.max.ms` from the ISRs it leads (`shard/isr.rs`).

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use skein_engine::{Batch, Offset, TopicPartition};
use skein_replication::Role;

use crate::shard::{Partition, Shard};
use crate::throttle;

const FETCH_VERSION: i16 = 12;
const FETCH_MAX_WAIT_MS: i32 = 500;
const PARTITION_MAX_BYTES: i32 = 1 << 20;
const FETCH_MAX_BYTES: i32 = 16 << 20;
const BACKOFF: Duration = Duration::from_millis(100);
/// Kafka's `replica.fetch.backoff.ms`.
const FETCH_BACKOFF: Duration = Duration::from_millis(1000);
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// The partitions this shard follows, by leader.
fn followed(shard: &Shard) -> BTreeMap<i32, Vec<(TopicPartition, Rc<Partition>)>> {
    let mut out: BTreeMap<i32, Vec<_>> = BTreeMap::new();
    shard.for_each_hosted(|partition, state| {
        if let Role::Follower { leader } = state.replica().role() {
            out.entry(leader).or_default().push((partition.clone(), state.clone()));
        }
    });
    out
}

/// The leaders this shard follows partitions of (walked after assignments: no names
/// cloned, since a node of 10,000 partitions it leads follows none).
fn followed_leaders(shard: &Shard) -> std::collections::BTreeSet<i32> {
    let mut leaders = std::collections::BTreeSet::new();
    shard.for_each_hosted(|_, state| {
        if let Role::Follower { leader } = state.replica().role() {
            leaders.insert(leader);
        }
    });
    leaders
}

/// Runs this shard's fetchers: one task per leader it follows, started when a
/// partition starts following that leader and ended when none does; and, every
/// second, the ISR shrink check of the partitions it leads.
pub async fn run(shard: Rc<Shard>, lag_time_max_ms: i64) {
    let mut running: HashMap<i32, Rc<Cell<bool>>> = HashMap::new();
    let mut ticks = 0u64;
    // The shard's assignment count at the last look: only an assignment makes a
    // partition follow a leader, so the partitions are walked when it moved (or a
    // fetcher ended, which a partition may still need), not every tick.
    let mut looked_at = None;
    loop {
        glommio::timer::sleep(BACKOFF).await;
        let before = running.len();
        running.retain(|_, alive| alive.get());
        let assignments = shard.metrics.assignments.get();
        if looked_at != Some(assignments) || running.len() != before {
            looked_at = Some(assignments);
            for leader in followed_leaders(&shard) {
                if running.contains_key(&leader) {
                    continue;
                }
                let alive = Rc::new(Cell::new(true));
                running.insert(leader, alive.clone());
                glommio::spawn_local(fetch_from(shard.clone(), leader, alive)).detach();
            }
        }
        ticks += 1;
        if ticks.is_multiple_of(10) {
            shard.shrink_isrs(lag_time_max_ms);
        }
    }
}

/// Where a follower fetches a partition from: what it tells the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    fetch_offset: i64,
    log_start_offset: i64,
    current_leader_epoch: i32,
    last_fetched_epoch: i32,
}

impl Position {
    fn of(state: &Partition) -> Position {
        Position {
            fetch_offset: state.log().log_end_offset().0,
            log_start_offset: state.log().log_start_offset().0,
            current_leader_epoch: state.replica().leader_epoch().0,
            last_fetched_epoch: state.log().latest_leader_epoch().map_or(-1, |epoch| epoch.0),
        }
    }
}

/// The follower's side of a fetch session with one leader (KIP-227), as Kafka's
/// `FetchSessionHandler`. Epoch 0 asks the leader for a session with a full fetch;
/// once it gave one (a session id in its answer), each fetch carries the next epoch,
/// the partitions whose position changed since they were last sent (or that are new)
/// and, as forgotten, those no longer followed. A leader that keeps no session for it
/// (no slot free) answers full fetches, which are asked again each time. Any session
/// error, or a lost connection, starts over with a full fetch.
#[derive(Debug, Default)]
struct FollowerSession {
    /// The leader's session id, 0 while there is none.
    id: i32,
    /// The epoch the next fetch carries: 0 opens a session.
    next_epoch: i32,
    /// What the leader's session holds for each partition: its position as last sent.
    sent: HashMap<TopicPartition, Position>,
}

impl FollowerSession {
    /// The next fetch for `partitions` at their current positions, and what the
    /// leader's session holds once it took it.
    fn request(&mut self, node: i32, partitions: &[(TopicPartition, Position)]) -> FetchRequest {
        let full = self.id == 0;
        let listed: Vec<&(TopicPartition, Position)> = match full {
            true => partitions.iter().collect(),
            false => partitions.iter().filter(|(partition, at)| self.sent.get(partition) != Some(at)).collect(),
        };
        let forgotten: Vec<TopicPartition> = match full {
            true => Vec::new(),
            false => {
                let current: std::collections::HashSet<&TopicPartition> = partitions.iter().map(|(p, _)| p).collect();
                self.sent.keys().filter(|p| !current.contains(p)).cloned().collect()
            }
        };
        // Kept in place: an incremental fetch changes only what it lists or forgets.
        if full {
            self.sent = partitions.iter().cloned().collect();
        } else {
            for (partition, at) in &listed {
                self.sent.insert(partition.clone(), *at);
            }
            for partition in &forgotten {
                self.sent.remove(partition);
            }
        }
        fetch_request(node, &listed, &forgotten).with_session_id(self.id).with_session_epoch(self.next_epoch)
    }

    /// Takes the leader's answer: the session it opened, or the next epoch.
    fn answered(&mut self, response: &FetchResponse) {
        // A session error, or a fetch refused whole: what the leader's session holds is
        // no longer known.
        if response.error_code != 0 {
            self.reset();
            return;
        }
        if self.id == 0 {
            // A leader with no slot free answers without a session: asked again.
            self.id = response.session_id;
            self.next_epoch = if self.id == 0 { 0 } else { 1 };
        } else {
            self.next_epoch = if self.next_epoch == i32::MAX { 1 } else { self.next_epoch + 1 };
        }
    }

    /// Starts over: the next fetch is a full one that opens a new session.
    fn reset(&mut self) {
        *self = FollowerSession::default();
    }
}

/// Fetches this shard's partitions that `leader` leads, until none is left.
async fn fetch_from(shard: Rc<Shard>, leader: i32, alive: Rc<Cell<bool>>) {
    let mut connection: Option<skein_control::peer::PeerStream> = None;
    let mut session = FollowerSession::default();
    let mut correlation = 0i32;
    // Partitions the leader refused sit out `replica.fetch.backoff.ms`, as in Kafka,
    // so that one refused partition neither spins the fetcher nor delays the others.
    let mut delayed: HashMap<TopicPartition, Instant> = HashMap::new();
    loop {
        let Some(mut partitions) = followed(&shard).remove(&leader) else { break };
        let now = Instant::now();
        delayed.retain(|_, until| *until > now);
        partitions.retain(|(partition, _)| !delayed.contains_key(partition));
        // Throttled partitions sit out while this shard's follower quota is spent.
        let image = shard.image();
        let me = shard.settings.node_id;
        let rate = throttle::shard_rate(&image, me, throttle::FOLLOWER_RATE, shard.settings.shards);
        let throttled = |topic: &str, partition: i32| {
            image
                .topic(topic)
                .is_some_and(|t| throttle::throttled(&t.configs, throttle::FOLLOWER_REPLICAS, partition, me))
        };
        if rate.is_some_and(|rate| shard.throttles.follower.borrow_mut().spent(rate, now)) {
            partitions.retain(|(partition, _)| !throttled(&partition.topic, partition.partition));
        }
        if partitions.is_empty() {
            glommio::timer::sleep(BACKOFF).await;
            continue;
        }
        let Some((host, port)) = shard.broker_address(leader) else {
            glommio::timer::sleep(BACKOFF).await;
            continue;
        };
        let client = format!("skein-replica-{}", shard.settings.node_id);
        if connection.as_ref().is_some_and(|stream| stream.stale()) {
            connection = None;
        }
        if connection.is_none() {
            // The leader keeps sessions per connection (on the shard it reached).
            session.reset();
            match skein_control::peer::connect(&shard.settings.security, &host, port, &client).await {
                Ok(stream) => connection = Some(stream),
                Err(e) => {
                    // A refused login is a configuration error an operator must see;
                    // it is retried at the fetch backoff, not spun on.
                    let refused = e.kind() == std::io::ErrorKind::PermissionDenied;
                    match refused {
                        true => {
                            tracing::warn!(target: "skein::net", leader, error = %e, "the leader refused this broker's login")
                        }
                        false => tracing::debug!(target: "skein::net", leader, error = %e, "cannot reach the leader"),
                    }
                    glommio::timer::sleep(if refused { FETCH_BACKOFF } else { BACKOFF }).await;
                    continue;
                }
            }
        }
        let stream = connection.as_mut().expect("connected above");
        correlation = correlation.wrapping_add(1);
        let positions: Vec<(TopicPartition, Position)> =
            partitions.iter().map(|(partition, state)| (partition.clone(), Position::of(state))).collect();
        let request = session.request(shard.settings.node_id, &positions);
        let exchange = skein_control::peer::exchange(stream, &request, FETCH_VERSION, correlation, &client);
        let response = match within(exchange).await {
            Some(Ok(response)) => response,
            failed => {
                let error = match failed {
                    Some(Err(e)) => e.to_string(),
                    _ => "timed out".into(),
                };
                tracing::debug!(target: "skein::net", leader, error, "replica fetch failed; reconnecting");
                // The session starts over with the next connection.
                connection = None;
                glommio::timer::sleep(BACKOFF).await;
                continue;
            }
        };
        // A refused fetch ends the session (the next is a full fetch); `apply` backs
        // its partitions off.
        session.answered(&response);
        if let Some(rate) = rate {
            let bytes: u64 = response
                .responses
                .iter()
                .flat_map(|t| t.partitions.iter().map(move |p| (t.topic.as_str(), p)))
                .filter(|(topic, p)| throttled(topic, p.partition_index))
                .map(|(_, p)| p.records.as_ref().map_or(0, |r| r.len() as u64))
                .sum();
            shard.throttles.follower.borrow_mut().record(rate, bytes, Instant::now());
        }
        let refused = apply(&shard, leader, &partitions, response).await;
        if refused.len() == partitions.len() {
            glommio::timer::sleep(BACKOFF).await;
        }
        let until = Instant::now() + FETCH_BACKOFF;
        delayed.extend(refused.into_iter().map(|partition| (partition, until)));
    }
    alive.set(false);
}

async fn within<T>(future: impl std::future::Future<Output = T>) -> Option<T> {
    futures_lite::future::or(async { Some(future.await) }, async {
        glommio::timer::sleep(IO_TIMEOUT).await;
        None
    })
    .await
}

/// Fetch v12 for `partitions` from their positions, with `forgotten` partitions
/// (an incremental fetch's); the caller sets the session.
fn fetch_request(node: i32, partitions: &[&(TopicPartition, Position)], forgotten: &[TopicPartition]) -> FetchRequest {
    let mut topics: BTreeMap<&str, Vec<FetchPartition>> = BTreeMap::new();
    for (partition, at) in partitions {
        topics.entry(&partition.topic).or_default().push(
            FetchPartition::default()
                .with_partition(partition.partition)
                .with_current_leader_epoch(at.current_leader_epoch)
                .with_fetch_offset(at.fetch_offset)
                .with_last_fetched_epoch(at.last_fetched_epoch)
                .with_log_start_offset(at.log_start_offset)
                .with_partition_max_bytes(PARTITION_MAX_BYTES),
        );
    }
    let mut forgotten_topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for partition in forgotten {
        forgotten_topics.entry(&partition.topic).or_default().push(partition.partition);
    }
    FetchRequest::default()
        .with_replica_id(BrokerId(node))
        .with_max_wait_ms(FETCH_MAX_WAIT_MS)
        .with_min_bytes(1)
        .with_max_bytes(FETCH_MAX_BYTES)
        .with_topics(
            topics
                .into_iter()
                .map(|(topic, partitions)| {
                    FetchTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                        .with_partitions(partitions)
                })
                .collect(),
        )
        .with_forgotten_topics_data(
            forgotten_topics
                .into_iter()
                .map(|(topic, partitions)| {
                    kafka_protocol::messages::fetch_request::ForgottenTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                        .with_partitions(partitions)
                })
                .collect(),
        )
}

/// Applies a leader's answer: records appended, the high watermark taken, diverged
/// logs truncated. Returns the partitions the leader refused (all of them when it
/// refused the fetch): they back off while the metadata catches up.
async fn apply(
    shard: &Rc<Shard>,
    leader: i32,
    partitions: &[(TopicPartition, Rc<Partition>)],
    response: FetchResponse,
) -> Vec<TopicPartition> {
    if response.error_code != 0 {
        tracing::debug!(target: "skein::net", leader, code = response.error_code, "replica fetch refused");
        return partitions.iter().map(|(partition, _)| partition.clone()).collect();
    }
    let states: HashMap<&TopicPartition, &Rc<Partition>> = partitions.iter().map(|(p, s)| (p, s)).collect();
    let mut refused = Vec::new();
    for topic in response.responses {
        for data in topic.partitions {
            let partition = TopicPartition::new(topic.topic.0.to_string(), data.partition_index);
            let Some(state) = states.get(&partition) else { continue };
            if state.replica().role() != (Role::Follower { leader }) {
                continue;
            }
            if data.error_code != 0 {
                tracing::debug!(target: "skein::net", partition = %partition, leader, code = data.error_code,
                    log_end = state.log().log_end_offset().0, epochs = ?state.log().leader_epochs().entries(), "replica fetch of a partition refused");
                refused.push(partition);
                continue;
            }
            if data.diverging_epoch.end_offset >= 0 || data.diverging_epoch.epoch >= 0 {
                let (epoch, end) = (data.diverging_epoch.epoch, data.diverging_epoch.end_offset);
                match state.truncate_diverged(epoch, end).await {
                    Ok(cut) => {
                        tracing::info!(target: "skein::net", partition = %partition, leader, epoch, end, cut = cut.0, "log diverged from the leader's: truncated")
                    }
                    Err(e) => {
                        tracing::error!(target: "skein::net", partition = %partition, error = %e, "truncation failed");
                        refused.push(partition);
                    }
                }
                continue;
            }
            let records = data.records.unwrap_or_default();
            let max = state.log().config().max_message_bytes as usize;
            let batches = match Batch::split_all(records.clone(), max.max(PARTITION_MAX_BYTES as usize)) {
                Ok(batches) => batches,
                // A partial last batch (the leader cut at the byte limit) is read again.
                Err((position, _)) => Batch::split_all(records.slice(..position), usize::MAX).unwrap_or_default(),
            };
            if let Err(e) = state.append_as_follower(batches, Offset(data.high_watermark)).await {
                tracing::warn!(target: "skein::net", partition = %partition, error = ?e, "follower append failed");
                refused.push(partition.clone());
            }
            let (start, end) = (state.log().log_start_offset(), state.log().log_end_offset());
            if data.log_start_offset > start.0 {
                match state.follow_log_start(Offset(data.log_start_offset)).await {
                    Ok(()) if data.log_start_offset > end.0 => {
                        tracing::info!(target: "skein::net", partition = %partition, leader, end = end.0,
                            leader_start = data.log_start_offset, "log ends below the leader's start: restarted there");
                    }
                    Ok(()) => {}
                    Err(e) => {
                        tracing::error!(target: "skein::net", partition = %partition, error = %e, "cannot follow the leader's log start");
                        refused.push(partition.clone());
                    }
                }
            }
            state.follower_lag.set((data.high_watermark - state.log().log_end_offset().0).max(0));
            shard.metrics.bytes_in.set(shard.metrics.bytes_in.get() + records.len() as u64);
        }
    }
    refused
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein_control::errors::code;

    fn at(offset: i64) -> Position {
        Position { fetch_offset: offset, log_start_offset: 0, current_leader_epoch: 3, last_fetched_epoch: 3 }
    }

    fn listed(request: &FetchRequest) -> Vec<(String, i32, i64)> {
        let mut out: Vec<(String, i32, i64)> = request
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.topic.0.to_string(), p.partition, p.fetch_offset)))
            .collect();
        out.sort();
        out
    }

    fn forgotten(request: &FetchRequest) -> Vec<(String, i32)> {
        request
            .forgotten_topics_data
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.topic.0.to_string(), *p)))
            .collect()
    }

    // The follower's session: a full fetch opens it; then only partitions whose position
    // moved are listed, those no longer followed are forgotten, each fetch carries the
    // next epoch; a leader without a free slot gets full fetches; a session error
    // starts over with a full fetch.
    #[test]
    fn follower_fetch_sessions() {
        let tp = |p| TopicPartition::new("t", p);
        let mut session = FollowerSession::default();
        let first = session.request(1, &[(tp(0), at(5)), (tp(1), at(7))]);
        assert_eq!((first.session_id, first.session_epoch), (0, 0));
        assert_eq!(listed(&first), vec![("t".into(), 0, 5), ("t".into(), 1, 7)]);
        // No slot free: the leader answers without a session; asked again.
        session.answered(&FetchResponse::default().with_session_id(0));
        let again = session.request(1, &[(tp(0), at(5)), (tp(1), at(7))]);
        assert_eq!((again.session_id, again.session_epoch, listed(&again).len()), (0, 0, 2));
        session.answered(&FetchResponse::default().with_session_id(42));
        // Nothing moved: an empty incremental fetch.
        let quiet = session.request(1, &[(tp(0), at(5)), (tp(1), at(7))]);
        assert_eq!((quiet.session_id, quiet.session_epoch), (42, 1));
        assert!(listed(&quiet).is_empty() && forgotten(&quiet).is_empty());
        session.answered(&FetchResponse::default().with_session_id(42));
        // Partition 1 moved, partition 0 left, partition 2 joined.
        let next = session.request(1, &[(tp(1), at(9)), (tp(2), at(0))]);
        assert_eq!((next.session_id, next.session_epoch), (42, 2));
        assert_eq!(listed(&next), vec![("t".into(), 1, 9), ("t".into(), 2, 0)]);
        assert_eq!(forgotten(&next), vec![("t".into(), 0)]);
        // The leader lost the session: a full fetch opens another.
        session.answered(&FetchResponse::default().with_error_code(code::FETCH_SESSION_ID_NOT_FOUND));
        let full = session.request(1, &[(tp(1), at(9)), (tp(2), at(0))]);
        assert_eq!((full.session_id, full.session_epoch, listed(&full).len()), (0, 0, 2));
        assert!(forgotten(&full).is_empty());
    }
}
