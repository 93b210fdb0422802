//! Enforcing client quotas per shard, with no lock on the request path.
//!
//! Each bucket (a client's user and client id, as `entity::resolve` names them, for
//! one quota key) is a token bucket on each shard that serves the client, refilled at
//! that shard's share of the quota and holding at most `QUOTA_BURST` of it. A request
//! that takes the tokens below zero is answered with the time until they are back
//! (`throttle_time_ms`, KIP-219) and its connection reads nothing more until then.
//!
//! Shares: each shard publishes what each of its buckets used in the last
//! `QUOTA_REBALANCE_INTERVAL` to a slot only it writes (`Ledger`, atomics), and takes
//! as its share its part of the buckets' total use, plus an equal part of a small
//! floor so an idle shard can start. Shares always sum to one, so the node as a whole
//! never grants more than the quota; a client moving its load between shards is held
//! to the shares of the last interval until the next rebalance. The error is thus
//! bounded by one interval of the quota (plus the one burst each shard allows): over
//! a window of W seconds the node admits at most quota × (W + interval + burst).
//! The only lock (`Ledger::register`) is taken when a shard first sees a bucket.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use super::entity::{resolve, resolve_ip, Bucket, ClientQuota};
use crate::limits::{QUOTA_BUCKETS_PER_SHARD_MAX, QUOTA_BURST, QUOTA_SHARE_FLOOR, QUOTA_THROTTLE_MAX};

/// Each shard's use of each bucket in the last interval, shared by the shards.
#[derive(Debug, Default)]
pub struct Ledger {
    buckets: RwLock<HashMap<Bucket, Arc<[AtomicU64]>>>,
}

impl Ledger {
    /// The usage slots of `bucket`, one per shard.
    fn register(&self, bucket: &Bucket, shards: usize) -> Arc<[AtomicU64]> {
        if let Some(slots) = self.buckets.read().unwrap_or_else(|e| e.into_inner()).get(bucket) {
            return slots.clone();
        }
        let mut buckets = self.buckets.write().unwrap_or_else(|e| e.into_inner());
        buckets.entry(bucket.clone()).or_insert_with(|| (0..shards.max(1)).map(|_| AtomicU64::new(0)).collect()).clone()
    }
}

/// One bucket on one shard.
#[derive(Debug)]
struct Local {
    /// Tokens in the quota's unit (bytes, or microseconds of shard time); below zero
    /// while the client is throttled.
    tokens: f64,
    last: Instant,
    /// This shard's share of the quota, in (0, 1].
    share: f64,
    /// Used since the last rebalance, published then.
    used: u64,
    /// The use of recent intervals, each weighing half the one after it: a client
    /// paused by its throttle keeps its place.
    recent: f64,
    slots: Arc<[AtomicU64]>,
}

impl Local {
    fn refill(&mut self, rate: f64, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * rate).min(rate * QUOTA_BURST.as_secs_f64());
    }
}

/// A shard's quota buckets.
#[derive(Debug, Default)]
pub struct ShardQuotas {
    buckets: RefCell<HashMap<Bucket, Local>>,
}

/// What a client is charged for: the quota key and the amount. A connection
/// creation is charged to its ip, given as the client id.
pub struct Charge<'a> {
    pub user: &'a str,
    pub client_id: &'a str,
    pub key: &'static str,
    pub amount: u64,
}

impl ShardQuotas {
    /// Charges `charge` against its quota (if the client has one) and returns how
    /// long the client is throttled for; zero when it is within its quota.
    /// `per_second` converts the quota's value to the charge's unit per second.
    pub fn record(
        &self,
        quotas: &[ClientQuota],
        ledger: &Ledger,
        shard: (usize, usize),
        charge: Charge<'_>,
        per_second: f64,
    ) -> Duration {
        let found = match charge.key {
            super::CONNECTION_CREATION_RATE => resolve_ip(quotas, charge.client_id),
            key => resolve(quotas, charge.user, charge.client_id, key),
        };
        let Some((value, bucket)) = found else {
            return Duration::ZERO;
        };
        let now = Instant::now();
        let mut buckets = self.buckets.borrow_mut();
        if !buckets.contains_key(&bucket) && buckets.len() >= QUOTA_BUCKETS_PER_SHARD_MAX {
            // Bounded memory: the idlest bucket goes (it starts over when it is back).
            if let Some(idle) = buckets.iter().min_by_key(|(_, l)| l.last).map(|(b, _)| b.clone()) {
                buckets.remove(&idle);
            }
        }
        let shards = shard.1.max(1);
        // A new bucket starts with its burst, as a client's first requests are.
        let local = buckets.entry(bucket).or_insert_with_key(|bucket| Local {
            tokens: value * per_second / shards as f64 * QUOTA_BURST.as_secs_f64(),
            last: now,
            share: 1.0 / shards as f64,
            used: 0,
            recent: 0.0,
            slots: ledger.register(bucket, shards),
        });
        let rate = value * per_second * local.share;
        local.refill(rate, now);
        local.tokens -= charge.amount as f64;
        local.used = local.used.saturating_add(charge.amount);
        match local.tokens < 0.0 && rate > 0.0 {
            true => Duration::from_secs_f64(-local.tokens / rate).min(QUOTA_THROTTLE_MAX),
            false if rate <= 0.0 => QUOTA_THROTTLE_MAX,
            false => Duration::ZERO,
        }
    }

    /// How long a client is still throttled for on `key`, without charging it.
    pub fn throttled(
        &self,
        quotas: &[ClientQuota],
        user: &str,
        client_id: &str,
        key: &'static str,
        per_second: f64,
    ) -> Duration {
        let Some((value, bucket)) = resolve(quotas, user, client_id, key) else {
            return Duration::ZERO;
        };
        let mut buckets = self.buckets.borrow_mut();
        let Some(local) = buckets.get_mut(&bucket) else {
            return Duration::ZERO;
        };
        let rate = value * per_second * local.share;
        local.refill(rate, Instant::now());
        match local.tokens < 0.0 && rate > 0.0 {
            true => Duration::from_secs_f64(-local.tokens / rate).min(QUOTA_THROTTLE_MAX),
            false => Duration::ZERO,
        }
    }

    /// Publishes this shard's use of each bucket and takes its new shares.
    pub fn rebalance(&self, shard: usize) {
        for local in self.buckets.borrow_mut().values_mut() {
            local.recent = local.recent / 2.0 + std::mem::take(&mut local.used) as f64 / 2.0;
            if let Some(slot) = local.slots.get(shard) {
                slot.store(local.recent as u64, Ordering::Relaxed);
            }
            let all: Vec<u64> = local.slots.iter().map(|s| s.load(Ordering::Relaxed)).collect();
            let total: u64 = all.iter().sum();
            if total == 0 {
                // Nobody used it lately: the shares stay as they were.
                continue;
            }
            let mine = all.get(shard).copied().unwrap_or(0);
            let n = all.len().max(1) as f64;
            let floor = QUOTA_SHARE_FLOOR * (total as f64).max(1.0);
            local.share = (mine as f64 + floor / n) / (total as f64 + floor);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::entity::{EntityName, QuotaEntity, PRODUCER_BYTE_RATE};
    use super::*;

    // A client over its quota is throttled for the time its excess takes to drain;
    // two shards splitting one client's quota by use never grant more than it.
    #[test]
    fn throttles_and_shares() {
        let quotas = vec![ClientQuota {
            entity: QuotaEntity { client_id: Some(EntityName::Named("app".into())), ..Default::default() },
            values: [(PRODUCER_BYTE_RATE.to_string(), 1000.0)].into(),
        }];
        let ledger = Ledger::default();
        let (a, b) = (ShardQuotas::default(), ShardQuotas::default());
        let charge = |amount| Charge { user: "ANONYMOUS", client_id: "app", key: PRODUCER_BYTE_RATE, amount };
        // Half the quota on each shard at first, with a second of it saved: 500
        // bytes over that is one second.
        let throttle = a.record(&quotas, &ledger, (0, 2), charge(1000), 1.0);
        assert!((throttle.as_secs_f64() - 1.0).abs() < 0.05, "{throttle:?}");
        assert!(a.record(&quotas, &ledger, (0, 2), charge(0), 1.0) > Duration::ZERO);
        let other = Charge { client_id: "other", ..charge(10_000) };
        assert_eq!(a.record(&quotas, &ledger, (0, 2), other, 1.0), Duration::ZERO, "no quota, no throttle");
        // Shard 0 did all the work: after a rebalance it has nearly all of the quota.
        b.record(&quotas, &ledger, (1, 2), charge(0), 1.0);
        a.rebalance(0);
        b.rebalance(1);
        let share = |q: &ShardQuotas| q.buckets.borrow().values().next().unwrap().share;
        assert!(share(&a) > 0.9, "{}", share(&a));
        assert!((share(&a) + share(&b) - 1.0).abs() < 1e-9, "shares sum to one");
    }
}
