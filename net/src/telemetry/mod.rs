//! Client telemetry (KIP-714): the metrics Kafka clients push to the broker.
//!
//! A client asks GetTelemetrySubscriptions which metrics to push and how often; the
//! answer is what the CLIENT_METRICS resources it matches select (`client_metrics`,
//! managed with `kafka-client-metrics`): their metric name prefixes joined, at the
//! shortest of their intervals. It then sends PushTelemetry every interval with OTLP
//! `MetricsData` (`otlp`). The rules are Kafka 4.4's `ClientMetricsManager`, read from
//! its source: one instance per client instance id, a subscription id derived from
//! the subscription and the instance id, requests closer together than the interval
//! throttled (THROTTLING_QUOTA_EXCEEDED), a push with a stale subscription id refused
//! (UNKNOWN_SUBSCRIPTION_ID) so that the client asks again, nothing accepted after a
//! terminating push, and `telemetry.max.bytes` per push.
//!
//! Kafka hands the pushed metrics to a plugin and advertises the two APIs only when
//! one is configured. Skein has its own: the points go to `series`, which `/metrics`
//! renders by client id, so an operator sees client-side latency beside the broker's.
//!
//! The state is per shard, as Kafka's is per broker: a client that moves to another
//! shard (or node) gets an instance there with the same subscription id, since the
//! id depends only on what it names.

pub mod otlp;
pub mod series;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use skein_control::errors::code;
use skein_control::limits::{TELEMETRY_DECOMPRESSED_BYTES_MAX, TELEMETRY_INSTANCES_PER_SHARD_MAX};

/// Kafka's `telemetry.max.bytes` default: the largest push's metrics, compressed.
pub const TELEMETRY_MAX_BYTES_DEFAULT: i32 = 1 << 20;

/// The compression types a push may use, in Kafka's order of preference (zstd, lz4,
/// gzip, snappy).
pub const ACCEPTED_COMPRESSION_TYPES: [i8; 4] = [4, 3, 1, 2];

/// Kafka's error codes of KIP-714.
pub use skein_control::errors::code::{
    TELEMETRY_TOO_LARGE, THROTTLING_QUOTA_EXCEEDED, UNKNOWN_SUBSCRIPTION_ID, UNSUPPORTED_COMPRESSION_TYPE,
};

/// How long an instance is kept without a request, at least (Kafka's cache expiry;
/// three push intervals when that is longer).
const INSTANCE_EXPIRY_MIN: Duration = Duration::from_secs(60);

/// A refusal: Kafka's code and message.
pub use skein_control::errors::Refusal as Refused;

/// Who sent a telemetry request: what a `match` entry may select on.
#[derive(Debug, Clone, Default)]
pub struct ClientInfo {
    pub client_id: String,
    /// From the connection's ApiVersions (KIP-511); empty when it sent none.
    pub software_name: String,
    pub software_version: String,
    pub address: String,
    pub port: u16,
    /// The connection: its instances are forgotten when it closes, as on Kafka.
    pub connection: u64,
}

/// What a client instance is asked to push.
#[derive(Debug, Clone, PartialEq)]
pub struct Subscription {
    pub id: i32,
    /// Metric name prefixes, sorted; `*` alone for every metric, empty for none.
    pub metrics: Vec<String>,
    pub interval_ms: i32,
}

/// Counters for `/metrics` (Kafka's `client-metrics` group).
#[derive(Debug, Default, Clone, Copy)]
pub struct TelemetryMetrics {
    pub subscription_requests: u64,
    pub pushes: u64,
    pub throttled: u64,
    pub unknown_subscriptions: u64,
    /// Pushes refused with INVALID_RECORD: metrics that did not decode.
    pub invalid_pushes: u64,
    /// Instances forgotten at `TELEMETRY_INSTANCES_PER_SHARD_MAX`.
    pub evicted: u64,
}

struct Instance {
    client: ClientInfo,
    subscription: Subscription,
    /// The subscriptions' version it was made under: a change remakes it.
    version: u64,
    last_get: Option<Instant>,
    last_push: Option<Instant>,
    terminating: bool,
    last_error: i16,
    seen: Instant,
}

impl Instance {
    fn interval(&self) -> Duration {
        Duration::from_millis(self.subscription.interval_ms.max(0) as u64)
    }

    fn expired(&self, now: Instant) -> bool {
        now.duration_since(self.seen) >= (self.interval() * 3).max(INSTANCE_EXPIRY_MIN)
    }

    /// Kafka's `maybeUpdateGetRequestTimestamp`: a request for the subscription is
    /// due an interval after the last request of either kind.
    fn get_due(&mut self, now: Instant) -> bool {
        let last = self.last_get.max(self.last_push);
        let due = last.is_none_or(|t| now.duration_since(t) >= self.interval());
        if due {
            self.last_get = Some(now);
        }
        due
    }

    /// Kafka's `maybeUpdatePushRequestTimestamp`: the first push after a request for
    /// the subscription is due at once, the next ones an interval apart.
    fn push_due(&mut self, now: Instant) -> bool {
        let due =
            self.last_get > self.last_push || self.last_push.is_none_or(|t| now.duration_since(t) >= self.interval());
        if due {
            self.last_push = Some(now);
        }
        due
    }
}

/// One shard's client instances and the series their pushes left.
#[derive(Default)]
pub struct Telemetry {
    instances: HashMap<uuid::Uuid, Instance>,
    /// The instance each open connection made last (Kafka's connection map): at most
    /// one entry per connection, removed when it closes.
    by_connection: HashMap<u64, uuid::Uuid>,
    /// The subscriptions last seen in the metadata image, their `match` patterns
    /// compiled once, and their version.
    subscriptions: BTreeMap<String, BTreeMap<String, String>>,
    matchers: Vec<Matcher>,
    version: u64,
    last_sweep: Option<Instant>,
    pub series: series::ClientSeries,
    pub metrics: TelemetryMetrics,
}

/// Java's `Uuid.toString()`: URL-safe base64 without padding, as Kafka's messages and
/// `match` patterns show an instance id.
pub fn uuid_text(id: uuid::Uuid) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.as_bytes())
}

/// Java's `Uuid.hashCode()`.
fn uuid_hash(id: uuid::Uuid) -> i32 {
    let (most, least) = id.as_u64_pair();
    let h = most ^ least;
    ((h >> 32) as i32) ^ (h as i32)
}

/// Kafka's `computeSubscriptionId`: a CRC32C of the metrics and the interval, xored
/// with the instance id's hash (the metrics in sorted order, so that every shard and
/// node derives the same id).
fn subscription_id(metrics: &[String], interval_ms: i32, instance: uuid::Uuid) -> i32 {
    let text = format!("[{}]{interval_ms}", metrics.join(", "));
    (crc32c::crc32c(text.as_bytes()) as i32) ^ uuid_hash(instance)
}

/// A subscription's `match` config, compiled.
enum Matcher {
    /// No `match`: every client.
    All,
    /// A `match` that does not parse (the image holds only validated ones): no client.
    Never,
    /// Each client attribute named and the pattern it must match whole.
    Patterns(Vec<(String, regex::Regex)>),
}

impl Matcher {
    fn of(configs: &BTreeMap<String, String>) -> Matcher {
        match configs.get(crate::client_metrics::MATCH).map(|v| crate::client_metrics::parse_match(v)) {
            None => Matcher::All,
            Some(Ok(patterns)) => Matcher::Patterns(patterns),
            Some(Err(_)) => Matcher::Never,
        }
    }
}

/// Whether `client` matches every `match` entry of a subscription.
fn matches(matcher: &Matcher, client: &ClientInfo, instance: uuid::Uuid) -> bool {
    let patterns = match matcher {
        Matcher::All => return true,
        Matcher::Never => return false,
        Matcher::Patterns(patterns) => patterns,
    };
    let (port, instance) = (client.port.to_string(), uuid_text(instance));
    patterns.iter().all(|(param, regex)| {
        let attribute = match param.as_str() {
            "client_instance_id" => &instance,
            "client_id" => &client.client_id,
            "client_software_name" => &client.software_name,
            "client_software_version" => &client.software_version,
            "client_source_address" => &client.address,
            "client_source_port" => &port,
            _ => return false,
        };
        regex.is_match(attribute)
    })
}

/// Kafka's `createClientInstance`: the metrics of every subscription `client`
/// matches, at the shortest of their intervals (5 minutes when none matches).
fn subscribe(
    subscriptions: &BTreeMap<String, BTreeMap<String, String>>,
    matchers: &[Matcher],
    client: &ClientInfo,
    instance: uuid::Uuid,
) -> Subscription {
    let mut interval_ms = crate::client_metrics::INTERVAL_MS_DEFAULT;
    let mut metrics: Vec<String> = Vec::new();
    let matching = subscriptions.values().zip(matchers).filter(|(_, m)| matches(m, client, instance));
    for (configs, _) in matching {
        let listed = configs.get(crate::client_metrics::METRICS).map(String::as_str).unwrap_or("");
        metrics.extend(listed.split(',').map(str::trim).filter(|m| !m.is_empty()).map(str::to_owned));
        let interval = configs.get(crate::client_metrics::INTERVAL_MS).and_then(|v| v.trim().parse().ok());
        interval_ms = interval_ms.min(interval.unwrap_or(crate::client_metrics::INTERVAL_MS_DEFAULT));
    }
    metrics.sort();
    metrics.dedup();
    if metrics.iter().any(|m| m == "*") {
        metrics = vec!["*".to_owned()];
    }
    let id = subscription_id(&metrics, interval_ms, instance);
    Subscription { id, metrics, interval_ms }
}

impl Telemetry {
    /// Takes the image's subscriptions: a change remakes every instance at its next
    /// request (Kafka's subscription version).
    fn refresh(&mut self, subscriptions: &BTreeMap<String, BTreeMap<String, String>>) {
        if &self.subscriptions != subscriptions {
            self.subscriptions = subscriptions.clone();
            self.matchers = subscriptions.values().map(Matcher::of).collect();
            self.version += 1;
        }
    }

    /// Drops expired instances and series, at most once a second.
    fn sweep(&mut self, now: Instant) {
        if self.last_sweep.is_some_and(|t| now.duration_since(t) < Duration::from_secs(1)) {
            return;
        }
        self.last_sweep = Some(now);
        self.instances.retain(|_, i| !i.expired(now));
        self.series.expire(now);
    }

    /// The instance `id` of `client`, made (or remade under changed subscriptions)
    /// as Kafka's `clientInstance` makes it.
    fn instance(&mut self, id: uuid::Uuid, client: &ClientInfo, now: Instant) -> &mut Instance {
        let current = self.instances.get(&id).is_some_and(|i| i.version == self.version);
        if !current {
            let known = self.instances.remove(&id).map(|i| i.client);
            if known.is_none() && self.instances.len() >= TELEMETRY_INSTANCES_PER_SHARD_MAX {
                self.last_sweep = None;
                self.sweep(now);
                if self.instances.len() >= TELEMETRY_INSTANCES_PER_SHARD_MAX {
                    let oldest = self.instances.iter().min_by_key(|(_, i)| i.seen).map(|(id, _)| *id);
                    self.instances.remove(&oldest.expect("a full table has an oldest instance"));
                    self.metrics.evicted += 1;
                }
            }
            // A remade instance keeps what it matched on, on its latest connection.
            let connection = client.connection;
            let client = known.map(|known| ClientInfo { connection, ..known }).unwrap_or_else(|| client.clone());
            let subscription = subscribe(&self.subscriptions, &self.matchers, &client, id);
            let instance = Instance {
                client,
                subscription,
                version: self.version,
                last_get: None,
                last_push: None,
                terminating: false,
                last_error: code::NONE,
                seen: now,
            };
            self.instances.insert(id, instance);
            self.by_connection.insert(connection, id);
        }
        let instance = self.instances.get_mut(&id).expect("the instance was just made");
        instance.seen = now;
        instance
    }

    /// GetTelemetrySubscriptions: the instance id (a new one for a client that sent
    /// none) and its subscription.
    ///
    /// # Errors
    /// THROTTLING_QUOTA_EXCEEDED for a request within the push interval of the last
    /// one (unless the last push was refused for its subscription id or compression).
    pub fn get_subscription(
        &mut self,
        requested: uuid::Uuid,
        client: &ClientInfo,
        subscriptions: &BTreeMap<String, BTreeMap<String, String>>,
        now: Instant,
    ) -> Result<(uuid::Uuid, Subscription), Refused> {
        self.metrics.subscription_requests += 1;
        self.refresh(subscriptions);
        self.sweep(now);
        let id = match requested.is_nil() {
            true => loop {
                let id = uuid::Uuid::new_v4();
                if !self.instances.contains_key(&id) && id.as_u128() > 1 {
                    break id;
                }
            },
            false => requested,
        };
        let instance = self.instance(id, client, now);
        let excused = matches!(instance.last_error, UNKNOWN_SUBSCRIPTION_ID | UNSUPPORTED_COMPRESSION_TYPE);
        if !instance.get_due(now) && !excused {
            self.metrics.throttled += 1;
            let text = uuid_text(requested);
            return Err((
                THROTTLING_QUOTA_EXCEEDED,
                format!("Request from the client [{text}] arrived before the next push interval time"),
            ));
        }
        instance.last_error = code::NONE;
        Ok((id, instance.subscription.clone()))
    }

    /// PushTelemetry: checks the push as Kafka does, then keeps its points for
    /// `/metrics`.
    ///
    /// # Errors
    /// INVALID_REQUEST for a nil or reserved instance id or a push after a terminating
    /// one; THROTTLING_QUOTA_EXCEEDED within the interval; UNKNOWN_SUBSCRIPTION_ID for a
    /// subscription id that is not the instance's (its subscriptions changed);
    /// UNSUPPORTED_COMPRESSION_TYPE; TELEMETRY_TOO_LARGE past `max_bytes`;
    /// INVALID_RECORD for metrics that do not decode.
    pub fn push(
        &mut self,
        push: Push<'_>,
        client: &ClientInfo,
        subscriptions: &BTreeMap<String, BTreeMap<String, String>>,
        max_bytes: i32,
        now: Instant,
    ) -> Result<(), Refused> {
        self.metrics.pushes += 1;
        let text = uuid_text(push.instance);
        if push.instance.as_u128() <= 1 {
            return Err((
                code::INVALID_REQUEST,
                format!("Invalid request from the client [{text}], invalid client instance id"),
            ));
        }
        self.refresh(subscriptions);
        self.sweep(now);
        let instance = self.instance(push.instance, client, now);
        let checked = check_push(instance, &push, max_bytes, &text, now);
        let instance = self.instances.get_mut(&push.instance).expect("the instance was just made");
        instance.terminating = push.terminating;
        if let Err((code, _)) = &checked {
            instance.last_error = *code;
            match *code {
                THROTTLING_QUOTA_EXCEEDED => self.metrics.throttled += 1,
                UNKNOWN_SUBSCRIPTION_ID => self.metrics.unknown_subscriptions += 1,
                _ => {}
            }
            return checked;
        }
        if !push.metrics.is_empty() {
            match otlp::decode(push.compression, push.metrics, TELEMETRY_DECOMPRESSED_BYTES_MAX) {
                Ok(otlp::Decoded { points, dropped }) => {
                    self.series.dropped += dropped;
                    let (client_id, software) = (&instance.client.client_id, &instance.client.software_name);
                    let software = match software.is_empty() {
                        true => String::new(),
                        false => format!("{software}/{}", instance.client.software_version),
                    };
                    let interval = instance.interval();
                    let client_id = client_id.clone();
                    instance.last_error = code::NONE;
                    self.series.record(&client_id, push.instance, &software, points, interval, now);
                }
                Err(reason) => {
                    instance.last_error = code::INVALID_RECORD;
                    self.metrics.invalid_pushes += 1;
                    tracing::debug!(target: "skein::telemetry", instance = %text, reason, "a push did not decode");
                    return Err((code::INVALID_RECORD, reason));
                }
            }
        }
        instance.last_error = code::NONE;
        Ok(())
    }

    /// Forgets the instances a closed connection made, as Kafka does at a disconnect.
    pub fn connection_closed(&mut self, connection: u64) {
        let Some(id) = self.by_connection.remove(&connection) else { return };
        if self.instances.get(&id).is_some_and(|i| i.client.connection == connection) {
            self.instances.remove(&id);
        }
    }

    /// Instances this shard keeps.
    pub fn instances(&self) -> usize {
        self.instances.len()
    }

    /// For `/metrics`: drops what expired before it is shown.
    pub fn expire(&mut self, now: Instant) {
        self.sweep(now);
    }
}

/// A PushTelemetry request's fields.
pub struct Push<'a> {
    pub instance: uuid::Uuid,
    pub subscription_id: i32,
    pub terminating: bool,
    pub compression: i8,
    pub metrics: &'a [u8],
}

/// Kafka's `validatePushRequest`, in its order.
fn check_push(
    instance: &mut Instance,
    push: &Push<'_>,
    max_bytes: i32,
    text: &str,
    now: Instant,
) -> Result<(), Refused> {
    if instance.terminating {
        return Err((
            code::INVALID_REQUEST,
            format!(
                "Client [{text}] sent the previous request with state terminating to TRUE, can not acceptany \
                 requests after that"
            ),
        ));
    }
    if !instance.push_due(now) && !push.terminating {
        return Err((
            THROTTLING_QUOTA_EXCEEDED,
            format!("Request from the client [{text}] arrived before the next push interval time"),
        ));
    }
    if push.subscription_id != instance.subscription.id {
        return Err((UNKNOWN_SUBSCRIPTION_ID, format!("Unknown client subscription id for the client [{text}]")));
    }
    if !(0..=4).contains(&push.compression) {
        return Err((
            UNSUPPORTED_COMPRESSION_TYPE,
            format!("Unknown compression type [{}] is received in telemetry request from [{text}]", push.compression),
        ));
    }
    if push.metrics.len() > max_bytes.max(0) as usize {
        return Err((
            TELEMETRY_TOO_LARGE,
            format!("Telemetry request from [{text}] is larger than the maximum allowed size [{max_bytes}]"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
