//! Connection limits, as Kafka's `max.connections` and `max.connections.per.ip`, plus
//! a per-shard bound (`limits::SHARD_CONNECTIONS_MAX`). A connection past a limit is
//! closed as soon as it is accepted, before anything is read or allocated for it, and
//! counted (`skein_connections_refused_total`).
//!
//! The node-wide counts are shared by the shards: an atomic total, and a map of counts
//! per client address behind a mutex taken once when a connection opens and once when
//! it closes, never on the request path.
//!
//! Both limits are dynamic broker configs too (`apply`): a value set with
//! AlterConfigs replaces the configured one at once, for connections opened from then
//! on, as on Kafka.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The node's open connections, by client address.
#[derive(Debug)]
pub struct ConnectionLimits {
    /// The configured limits (flags, config file).
    configured: (usize, usize),
    max_total: AtomicUsize,
    max_per_ip: AtomicUsize,
    total: AtomicUsize,
    per_ip: Mutex<HashMap<IpAddr, usize>>,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `max.connections` for the node.
    Node,
    /// `max.connections.per.ip` for the client's address.
    Address,
    /// `SHARD_CONNECTIONS_MAX` for the accepting shard.
    Shard,
}

/// An admitted connection; dropping it releases its place.
#[derive(Debug)]
pub struct Admitted {
    limits: Arc<ConnectionLimits>,
    ip: IpAddr,
}

impl ConnectionLimits {
    pub fn new(max_total: usize, max_per_ip: usize) -> ConnectionLimits {
        ConnectionLimits {
            configured: (max_total, max_per_ip),
            max_total: AtomicUsize::new(max_total),
            max_per_ip: AtomicUsize::new(max_per_ip),
            total: AtomicUsize::new(0),
            per_ip: Mutex::new(HashMap::new()),
        }
    }

    pub fn max_total(&self) -> usize {
        self.max_total.load(Ordering::Relaxed)
    }

    pub fn max_per_ip(&self) -> usize {
        self.max_per_ip.load(Ordering::Relaxed)
    }

    /// The configured limits, before any dynamic value.
    pub fn configured(&self) -> (usize, usize) {
        self.configured
    }

    /// Applies the dynamic `max.connections` and `max.connections.per.ip` (`None`:
    /// back to the configured value).
    pub fn apply(&self, max_total: Option<usize>, max_per_ip: Option<usize>) {
        self.max_total.store(max_total.unwrap_or(self.configured.0), Ordering::Relaxed);
        self.max_per_ip.store(max_per_ip.unwrap_or(self.configured.1), Ordering::Relaxed);
    }

    /// Admits a connection from `ip` on a shard that has `shard_open` connections.
    ///
    /// # Errors
    /// Which limit refused it.
    pub fn admit(self: &Arc<Self>, ip: IpAddr, shard_open: usize) -> Result<Admitted, Refused> {
        if shard_open >= skein_control::limits::SHARD_CONNECTIONS_MAX {
            return Err(Refused::Shard);
        }
        if self.total.fetch_add(1, Ordering::AcqRel) >= self.max_total() {
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(Refused::Node);
        }
        let mut per_ip = self.per_ip.lock().unwrap_or_else(|e| e.into_inner());
        let count = per_ip.entry(ip).or_default();
        if *count >= self.max_per_ip() {
            drop(per_ip);
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(Refused::Address);
        }
        *count += 1;
        Ok(Admitted { limits: self.clone(), ip })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut per_ip = self.limits.per_ip.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = per_ip.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                per_ip.remove(&self.ip);
            }
        }
        drop(per_ip);
        self.limits.total.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Node and per-address limits refuse the connection past them and free the place
    // when a connection closes.
    #[test]
    fn limits_admit_and_release() {
        let limits = Arc::new(ConnectionLimits::new(3, 2));
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
        let first = limits.admit(a, 0).unwrap();
        let _second = limits.admit(a, 0).unwrap();
        assert_eq!(limits.admit(a, 0).unwrap_err(), Refused::Address);
        let _third = limits.admit(b, 0).unwrap();
        assert_eq!(limits.admit(b, 0).unwrap_err(), Refused::Node);
        drop(first);
        assert!(limits.admit(b, 0).is_ok());
        assert_eq!(limits.admit(b, skein_control::limits::SHARD_CONNECTIONS_MAX).unwrap_err(), Refused::Shard);
    }

    // A dynamic limit applies to the next connection, and going back to none restores
    // the configured one.
    #[test]
    fn dynamic_limits_apply_at_once() {
        let limits = Arc::new(ConnectionLimits::new(3, 3));
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let _first = limits.admit(a, 0).unwrap();
        limits.apply(None, Some(1));
        assert_eq!(limits.admit(a, 0).unwrap_err(), Refused::Address);
        limits.apply(None, None);
        assert_eq!(limits.max_per_ip(), 3);
        assert!(limits.admit(a, 0).is_ok());
    }
}
