//! Client quota entities as Kafka names them (`user`, `client-id`, `ip`), each a
//! name or the default, and the resolution of a client to the entity whose quota
//! applies (Kafka's precedence, most specific first).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Kafka's quota config keys.
pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
pub const REQUEST_PERCENTAGE: &str = "request_percentage";
pub const CONNECTION_CREATION_RATE: &str = "connection_creation_rate";

/// The keys a user or client-id entity takes, and those an ip entity takes.
pub const CLIENT_KEYS: &[&str] = &[PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE];
pub const IP_KEYS: &[&str] = &[CONNECTION_CREATION_RATE];

/// One part of an entity: a name, or the default for every name without its own.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
pub enum EntityName {
    Default,
    Named(String),
}

impl EntityName {
    /// The wire form: `None` is the default.
    pub fn from_wire(name: Option<&str>) -> EntityName {
        match name {
            Some(name) => EntityName::Named(name.to_string()),
            None => EntityName::Default,
        }
    }

    pub fn to_wire(&self) -> Option<&str> {
        match self {
            EntityName::Default => None,
            EntityName::Named(name) => Some(name),
        }
    }
}

/// A quota entity: a user, a client id, both, or an ip.
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
pub struct QuotaEntity {
    pub user: Option<EntityName>,
    pub client_id: Option<EntityName>,
    pub ip: Option<EntityName>,
}

impl QuotaEntity {
    /// Why the entity is not one Kafka takes, if it is not.
    pub fn invalid(&self) -> Option<&'static str> {
        match (&self.user, &self.client_id, &self.ip) {
            (None, None, None) => Some("An entity must name a user, a client-id or an ip"),
            (_, _, Some(_)) if self.user.is_some() || self.client_id.is_some() => {
                Some("An ip entity cannot be combined with a user or a client-id")
            }
            (_, _, Some(EntityName::Named(ip))) if ip.parse::<std::net::IpAddr>().is_err() => {
                Some("The ip entity's name is not an IP address")
            }
            _ => None,
        }
    }

    /// The keys this entity takes.
    pub fn keys(&self) -> &'static [&'static str] {
        match self.ip.is_some() {
            true => IP_KEYS,
            false => CLIENT_KEYS,
        }
    }

    /// `user=alice,client-id=<default>`, as `kafka-configs --describe` names it.
    pub fn describe(&self) -> String {
        let part = |kind: &str, name: &Option<EntityName>| {
            name.as_ref().map(|n| match n {
                EntityName::Default => format!("{kind}=<default>"),
                EntityName::Named(name) => format!("{kind}={name}"),
            })
        };
        [part("user", &self.user), part("client-id", &self.client_id), part("ip", &self.ip)]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// One entity's quotas (Kafka's ClientQuotaRecord, whole).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct ClientQuota {
    pub entity: QuotaEntity,
    pub values: BTreeMap<String, f64>,
}

/// Which quota applies to a client, and whose budget it draws from: the client's
/// own user and client id for the parts the matching entity names (a default user
/// quota gives each user a budget of its own).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Bucket {
    pub user: Option<String>,
    pub client_id: Option<String>,
    /// The client's address, for connection creation rates.
    pub ip: Option<String>,
    pub key: &'static str,
}

/// The quota `key` of a client of `user` with `client_id`, in Kafka's precedence:
/// user and client-id, user and default client, user; default user and client-id,
/// default user and default client, default user; client-id, default client-id.
pub fn resolve(quotas: &[ClientQuota], user: &str, client_id: &str, key: &'static str) -> Option<(f64, Bucket)> {
    if quotas.is_empty() {
        return None;
    }
    let named = |n: &str| Some(EntityName::Named(n.to_string()));
    let default = || Some(EntityName::Default);
    let order = [
        (named(user), named(client_id)),
        (named(user), default()),
        (named(user), None),
        (default(), named(client_id)),
        (default(), default()),
        (default(), None),
        (None, named(client_id)),
        (None, default()),
    ];
    for (u, c) in order {
        let found = quotas.iter().find(|q| q.entity.user == u && q.entity.client_id == c && q.entity.ip.is_none());
        if let Some(value) = found.and_then(|q| q.values.get(key)) {
            let bucket = Bucket {
                user: u.map(|_| user.to_string()),
                client_id: c.map(|_| client_id.to_string()),
                ip: None,
                key,
            };
            return Some((*value, bucket));
        }
    }
    None
}

/// The connection creation rate of clients from `ip` (its own, else the default
/// ip's), and the budget it draws from: each ip's own.
pub fn resolve_ip(quotas: &[ClientQuota], ip: &str) -> Option<(f64, Bucket)> {
    let find = |name: EntityName| {
        quotas
            .iter()
            .find(|q| q.entity.ip.as_ref() == Some(&name))
            .and_then(|q| q.values.get(CONNECTION_CREATION_RATE).copied())
    };
    let rate = find(EntityName::Named(ip.to_string())).or_else(|| find(EntityName::Default))?;
    Some((rate, Bucket { user: None, client_id: None, ip: Some(ip.to_string()), key: CONNECTION_CREATION_RATE }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(user: Option<EntityName>, client_id: Option<EntityName>, rate: f64) -> ClientQuota {
        ClientQuota {
            entity: QuotaEntity { user, client_id, ip: None },
            values: [(PRODUCER_BYTE_RATE.to_string(), rate)].into(),
        }
    }

    // Kafka's precedence: the most specific entity wins; a default user quota gives
    // each user a budget of its own.
    #[test]
    fn precedence() {
        let named = |n: &str| Some(EntityName::Named(n.into()));
        let quotas = vec![
            quota(None, Some(EntityName::Default), 1.0),
            quota(Some(EntityName::Default), None, 2.0),
            quota(named("alice"), None, 3.0),
            quota(named("alice"), named("app"), 4.0),
        ];
        let rate = |user, client| resolve(&quotas, user, client, PRODUCER_BYTE_RATE).unwrap();
        assert_eq!(rate("alice", "app").0, 4.0);
        assert_eq!(rate("alice", "other").0, 3.0);
        let (value, bucket) = rate("bob", "app");
        assert_eq!(value, 2.0);
        assert_eq!(bucket, Bucket { user: Some("bob".into()), client_id: None, ip: None, key: PRODUCER_BYTE_RATE });
        assert!(resolve(&quotas, "bob", "app", CONSUMER_BYTE_RATE).is_none());
        let clients_only = vec![quota(None, Some(EntityName::Default), 1.0)];
        assert_eq!(
            resolve(&clients_only, "bob", "app", PRODUCER_BYTE_RATE).unwrap().1.client_id.as_deref(),
            Some("app")
        );
        assert!(QuotaEntity::default().invalid().is_some());
        let ip = QuotaEntity { ip: named("nope"), ..Default::default() };
        assert!(ip.invalid().is_some());
    }
}
