//! The pushed client metrics `/metrics` shows (Skein's step past KIP-714, which hands
//! them to a plugin): per client instance, the last value of each gauge and the
//! running total of each delta sum, labelled with the client's id and software. The
//! table is bounded (`limits::TELEMETRY_SERIES_*`): a series past a bound is left
//! out and counted, never grown into.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use skein_control::limits::{TELEMETRY_SERIES_PER_CLIENT_MAX, TELEMETRY_SERIES_PER_SHARD_MAX};

use super::otlp::{Kind, Point};

/// The clients a shard's connections pushed for, by client id and instance id.
#[derive(Debug, Default)]
pub struct ClientSeries {
    clients: BTreeMap<(String, uuid::Uuid), Client>,
    /// Series across every client.
    len: usize,
    /// Series left out at a bound, ever.
    pub dropped: u64,
    /// Bumped at each change, so that a scrape can keep its text between pushes.
    pub generation: u64,
}

/// One client instance's series.
#[derive(Debug)]
pub struct Client {
    /// `name/version` from its ApiVersions (KIP-511), empty when it sent none.
    pub software: String,
    /// Each series by metric name and its point's attributes.
    pub series: BTreeMap<(String, Vec<(String, String)>), f64>,
    /// When its series leave the table without another push.
    stale_at: Instant,
}

impl ClientSeries {
    /// Takes a push's points for a client instance, which pushes again within
    /// `interval` (its series are dropped if it has not pushed for three of them, at
    /// least a minute, as Kafka expires a client instance).
    pub fn record(
        &mut self,
        client_id: &str,
        instance: uuid::Uuid,
        software: &str,
        points: Vec<Point>,
        interval: Duration,
        now: Instant,
    ) {
        let stale_at = now + (interval * 3).max(Duration::from_secs(60));
        let key = (client_id.to_owned(), instance);
        let client = self.clients.entry(key).or_insert_with(|| Client {
            software: software.to_owned(),
            series: BTreeMap::new(),
            stale_at,
        });
        client.stale_at = stale_at;
        for point in points {
            let key = (point.metric, point.attributes);
            let full =
                client.series.len() >= TELEMETRY_SERIES_PER_CLIENT_MAX || self.len >= TELEMETRY_SERIES_PER_SHARD_MAX;
            match client.series.get_mut(&key) {
                Some(value) if point.kind == Kind::Add => *value += point.value,
                Some(value) => *value = point.value,
                None if full => self.dropped += 1,
                None => {
                    client.series.insert(key, point.value);
                    self.len += 1;
                }
            }
        }
        self.generation += 1;
    }

    /// Drops the series of clients that stopped pushing.
    pub fn expire(&mut self, now: Instant) {
        let before = self.clients.len();
        let len = &mut self.len;
        self.clients.retain(|_, c| {
            let keep = c.stale_at > now;
            if !keep {
                *len -= c.series.len();
            }
            keep
        });
        if self.clients.len() != before {
            self.generation += 1;
        }
    }

    /// Each client (id, instance) with its series, in order.
    pub fn clients(&self) -> impl Iterator<Item = (&(String, uuid::Uuid), &Client)> {
        self.clients.iter()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(metric: &str, value: f64, kind: Kind) -> Point {
        Point { metric: metric.into(), attributes: vec![], value, kind }
    }

    // Gauges keep their last value, delta sums add up, a client that stops pushing
    // leaves after three intervals (at least a minute), and the bounds hold with every
    // series past them counted.
    #[test]
    fn values_join_series_expire_and_bounds_hold() {
        let now = Instant::now();
        let mut table = ClientSeries::default();
        let id = uuid::Uuid::from_u128(7);
        let interval = Duration::from_secs(1);
        for (rate, sent) in [(3.0, 10.0), (5.0, 4.0)] {
            let points = vec![point("rate", rate, Kind::Last), point("sent", sent, Kind::Add)];
            table.record("p1", id, "java/4.4.0", points, interval, now);
        }
        let (_, client) = table.clients().next().unwrap();
        assert_eq!(client.series[&("rate".into(), vec![])], 5.0);
        assert_eq!(client.series[&("sent".into(), vec![])], 14.0);
        table.expire(now + Duration::from_secs(59));
        assert_eq!(table.len(), 2);
        table.expire(now + Duration::from_secs(61));
        assert!(table.is_empty());
        let many: Vec<Point> =
            (0..TELEMETRY_SERIES_PER_CLIENT_MAX + 5).map(|i| point(&format!("m{i}"), 1.0, Kind::Last)).collect();
        table.record("p2", id, "", many, interval, now);
        assert_eq!((table.len(), table.dropped), (TELEMETRY_SERIES_PER_CLIENT_MAX, 5));
        let mut shard = ClientSeries::default();
        for c in 0..=TELEMETRY_SERIES_PER_SHARD_MAX / TELEMETRY_SERIES_PER_CLIENT_MAX {
            let points =
                (0..TELEMETRY_SERIES_PER_CLIENT_MAX).map(|i| point(&format!("m{i}"), 1.0, Kind::Last)).collect();
            shard.record(&format!("c{c}"), id, "", points, interval, now);
        }
        assert_eq!(shard.len(), TELEMETRY_SERIES_PER_SHARD_MAX);
        assert_eq!(shard.dropped, TELEMETRY_SERIES_PER_CLIENT_MAX as u64);
    }
}
