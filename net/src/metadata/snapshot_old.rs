//! The rkyv layouts of metadata snapshots of earlier versions, read once, at the
//! first start of this version, and written back in the current layout with the next
//! snapshot: `SKEINRK1`, before brokers registered their listeners and the image held
//! SCRAM credentials, `SKEINRK2`, before it held ACLs and client quotas, and
//! `SKEINRK3`, before brokers registered their virtual brokers.

use std::collections::BTreeMap;

use super::{BrokerMeta, MetadataImage, TopicMeta};
use crate::security::scram::ScramCredential;

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct BrokerV1 {
    id: i32,
    epoch: u64,
    host: String,
    port: u16,
    rack: Option<String>,
    fenced: bool,
    incarnation: u64,
    clean_restart: bool,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct ImageV1 {
    version: u64,
    topics: BTreeMap<String, TopicMeta>,
    next_producer_id: i64,
    brokers: BTreeMap<i32, BrokerV1>,
    log_generation: u64,
    broker_configs: BTreeMap<String, BTreeMap<String, String>>,
}

/// A broker as `SKEINRK2` and `SKEINRK3` archived it: with its listeners, before
/// virtual brokers.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct BrokerV2 {
    id: i32,
    epoch: u64,
    host: String,
    port: u16,
    rack: Option<String>,
    fenced: bool,
    incarnation: u64,
    clean_restart: bool,
    listeners: Vec<crate::security::Endpoint>,
}

impl From<BrokerV2> for BrokerMeta {
    fn from(b: BrokerV2) -> BrokerMeta {
        BrokerMeta {
            id: b.id,
            epoch: b.epoch,
            host: b.host,
            port: b.port,
            rack: b.rack,
            fenced: b.fenced,
            incarnation: b.incarnation,
            clean_restart: b.clean_restart,
            listeners: b.listeners,
            virtual_brokers: None,
        }
    }
}

fn brokers_v2(brokers: BTreeMap<i32, BrokerV2>) -> BTreeMap<i32, BrokerMeta> {
    brokers.into_iter().map(|(id, b)| (id, b.into())).collect()
}

#[cfg(test)]
fn to_v2(brokers: &BTreeMap<i32, BrokerMeta>) -> BTreeMap<i32, BrokerV2> {
    let v2 = |b: &BrokerMeta| BrokerV2 {
        id: b.id,
        epoch: b.epoch,
        host: b.host.clone(),
        port: b.port,
        rack: b.rack.clone(),
        fenced: b.fenced,
        incarnation: b.incarnation,
        clean_restart: b.clean_restart,
        listeners: b.listeners.clone(),
    };
    brokers.iter().map(|(&id, b)| (id, v2(b))).collect()
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct ImageV3 {
    version: u64,
    topics: BTreeMap<String, TopicMeta>,
    next_producer_id: i64,
    brokers: BTreeMap<i32, BrokerV2>,
    log_generation: u64,
    broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    scram: BTreeMap<String, BTreeMap<String, ScramCredential>>,
    acls: Vec<crate::security::acl::AclBinding>,
    client_quotas: Vec<crate::quota::ClientQuota>,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct ImageV2 {
    version: u64,
    topics: BTreeMap<String, TopicMeta>,
    next_producer_id: i64,
    brokers: BTreeMap<i32, BrokerV2>,
    log_generation: u64,
    broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    scram: BTreeMap<String, BTreeMap<String, ScramCredential>>,
}

/// Validates and reads an archive of an earlier layout.
fn read<T>(archive: &[u8]) -> Result<T, String>
where
    T: rkyv::Archive,
    T::Archived: for<'a> rkyv::bytecheck::CheckBytes<rkyv::api::high::HighValidator<'a, rkyv::rancor::Error>>
        + rkyv::Deserialize<T, rkyv::api::high::HighDeserializer<rkyv::rancor::Error>>,
{
    let mut aligned = rkyv::util::AlignedVec::<16>::with_capacity(archive.len());
    aligned.extend_from_slice(archive);
    rkyv::from_bytes::<T, rkyv::rancor::Error>(&aligned)
        .map_err(|e| format!("the metadata snapshot does not validate: {e}"))
}

impl From<ImageV3> for MetadataImage {
    fn from(old: ImageV3) -> MetadataImage {
        MetadataImage {
            version: old.version,
            topics: old.topics,
            next_producer_id: old.next_producer_id,
            brokers: brokers_v2(old.brokers),
            log_generation: old.log_generation,
            broker_configs: old.broker_configs,
            scram: old.scram,
            acls: old.acls,
            client_quotas: old.client_quotas,
            ..Default::default()
        }
    }
}

impl From<ImageV2> for ImageV3 {
    fn from(old: ImageV2) -> ImageV3 {
        ImageV3 {
            version: old.version,
            topics: old.topics,
            next_producer_id: old.next_producer_id,
            brokers: old.brokers,
            log_generation: old.log_generation,
            broker_configs: old.broker_configs,
            scram: old.scram,
            acls: Vec::new(),
            client_quotas: Vec::new(),
        }
    }
}

/// The image an `SKEINRK3` archive holds, validated.
pub(super) fn decode_v3(archive: &[u8]) -> Result<MetadataImage, String> {
    Ok(read::<ImageV3>(archive)?.into())
}

/// The image an `SKEINRK2` archive holds, validated.
pub(super) fn decode_v2(archive: &[u8]) -> Result<MetadataImage, String> {
    Ok(ImageV3::from(read::<ImageV2>(archive)?).into())
}

/// `image` in the `SKEINRK3` layout, for the tests that this version reads the
/// earlier layouts.
#[cfg(test)]
fn image_v3(image: &MetadataImage) -> ImageV3 {
    ImageV3 {
        version: image.version,
        topics: image.topics.clone(),
        next_producer_id: image.next_producer_id,
        brokers: to_v2(&image.brokers),
        log_generation: image.log_generation,
        broker_configs: image.broker_configs.clone(),
        scram: image.scram.clone(),
        acls: image.acls.clone(),
        client_quotas: image.client_quotas.clone(),
    }
}

/// An `SKEINRK3` archive of `image`, without its checksum.
#[cfg(test)]
pub(super) fn encode_v3(image: &MetadataImage) -> Vec<u8> {
    rkyv::to_bytes::<rkyv::rancor::Error>(&image_v3(image)).expect("serialises").to_vec()
}

/// An `SKEINRK2` archive of `image` (no ACLs or quotas), without its checksum.
#[cfg(test)]
pub(super) fn encode_v2(image: &MetadataImage) -> Vec<u8> {
    let v3 = image_v3(image);
    let old = ImageV2 {
        version: v3.version,
        topics: v3.topics,
        next_producer_id: v3.next_producer_id,
        brokers: v3.brokers,
        log_generation: v3.log_generation,
        broker_configs: v3.broker_configs,
        scram: v3.scram,
    };
    rkyv::to_bytes::<rkyv::rancor::Error>(&old).expect("serialises").to_vec()
}

/// The image an `SKEINRK1` archive holds, validated.
pub(super) fn decode(archive: &[u8]) -> Result<MetadataImage, String> {
    let old: ImageV1 = read(archive)?;
    let brokers = old
        .brokers
        .into_iter()
        .map(|(id, b)| {
            let broker = BrokerMeta {
                id: b.id,
                epoch: b.epoch,
                host: b.host,
                port: b.port,
                rack: b.rack,
                fenced: b.fenced,
                incarnation: b.incarnation,
                clean_restart: b.clean_restart,
                listeners: Vec::new(),
                virtual_brokers: None,
            };
            (id, broker)
        })
        .collect();
    Ok(MetadataImage {
        version: old.version,
        topics: old.topics,
        next_producer_id: old.next_producer_id,
        brokers,
        log_generation: old.log_generation,
        broker_configs: old.broker_configs,
        ..Default::default()
    })
}

/// An `SKEINRK1` archive of `image` (what an earlier version wrote), for the test
/// that this version reads it.
#[cfg(test)]
pub(super) fn encode(image: &MetadataImage) -> Vec<u8> {
    let old = ImageV1 {
        version: image.version,
        topics: image.topics.clone(),
        next_producer_id: image.next_producer_id,
        brokers: image
            .brokers
            .iter()
            .map(|(id, b)| {
                let broker = BrokerV1 {
                    id: b.id,
                    epoch: b.epoch,
                    host: b.host.clone(),
                    port: b.port,
                    rack: b.rack.clone(),
                    fenced: b.fenced,
                    incarnation: b.incarnation,
                    clean_restart: b.clean_restart,
                };
                (*id, broker)
            })
            .collect(),
        log_generation: image.log_generation,
        broker_configs: image.broker_configs.clone(),
    };
    let archive = rkyv::to_bytes::<rkyv::rancor::Error>(&old).expect("serialises");
    [&b"SKEINRK1"[..], &archive[..]].concat()
}
