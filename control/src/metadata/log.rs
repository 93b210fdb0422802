//! The metadata log as stored and as the controller feeds it: the ids of its voters,
//! its entries (`Proposal`: a controller's records), its snapshots (the image in
//! rkyv's form, `encode_image`/`decode_image`), its recovery (`open`, on the main
//! thread before the shards start) and what the loop that drives it takes (`Input`)
//! and hands on (`Applied`). The loop itself is `quorum::run`.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use skein_replication::quorum::{Committed, Durable, Feed, Journal, Quorum, QuorumConfig};

use super::{MetadataImage, MetadataRecord};
use crate::errors::code;

/// A broker's id in the quorum: raft-rs reserves 0, Kafka allows node id 0.
pub fn quorum_id(node: i32) -> u64 {
    node as u64 + 1
}

/// The cluster id every voter derives from the same `voters` (ids and addresses, in
/// any order): 22 characters, as Kafka's base64 cluster ids.
pub fn cluster_id_of(voters: &[(i32, std::net::SocketAddr)]) -> String {
    let mut sorted = voters.to_vec();
    sorted.sort();
    let text: String = sorted.iter().map(|(id, address)| format!("{id}@{address},")).collect();
    let mut bytes = Vec::with_capacity(16);
    for seed in 0u32..4 {
        bytes.extend_from_slice(&crc32c::crc32c_append(seed, text.as_bytes()).to_be_bytes());
    }
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// One entry's data: the records a controller decided, and which of its proposals
/// they answer.
#[derive(Debug, Serialize, Deserialize)]
pub struct Proposal {
    pub node: u64,
    pub id: u64,
    pub records: Vec<MetadataRecord>,
}

/// The metadata log as recovered on the main thread.
pub struct Opened {
    pub quorum: Quorum,
    pub journal: Journal,
    pub image: MetadataImage,
}

impl Opened {
    /// The voters of the configuration this log holds, at the endpoints its image
    /// records for them (those with none are left out).
    pub fn recorded_voters(&self) -> Vec<(i32, std::net::SocketAddr)> {
        let (voters, _) = self.quorum.members();
        let endpoint = |node: i32| self.image.controller_address(node, &[]);
        voters.into_iter().map(|id| (id - 1) as i32).filter_map(|node| Some((node, endpoint(node)?))).collect()
    }
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened").field("quorum", &self.quorum).field("version", &self.image.version).finish()
    }
}

/// What starts a snapshot of the image in rkyv's form.
const RKYV_SNAPSHOT: &[u8; 8] = b"SKEINR10";
/// What starts a snapshot of an earlier, unreleased format (`SKEINRK5`-`SKEINRK9`):
/// refused, by name.
const RKYV_SNAPSHOT_UNRELEASED: &[u8; 7] = b"SKEINRK";

/// A snapshot of `image` (the data of the quorum's snapshots): `RKYV_SNAPSHOT`, the
/// CRC-32C of the archive (a cut or damaged archive can still validate as rkyv), then
/// rkyv's archive.
pub fn encode_image(image: &MetadataImage) -> Vec<u8> {
    let archive = rkyv::to_bytes::<rkyv::rancor::Error>(image).expect("a metadata image always serialises");
    let crc = crc32c::crc32c(&archive).to_be_bytes();
    [&RKYV_SNAPSHOT[..], &crc[..], &archive[..]].concat()
}

/// The image a snapshot holds, checked (its checksum, then rkyv's validation) before
/// it is read.
pub fn decode_image(bytes: &[u8]) -> Result<MetadataImage, String> {
    let Some(framed) = bytes.strip_prefix(&RKYV_SNAPSHOT[..]) else {
        if bytes.starts_with(RKYV_SNAPSHOT_UNRELEASED) {
            let format = String::from_utf8_lossy(&bytes[..bytes.len().min(RKYV_SNAPSHOT.len())]).into_owned();
            return Err(format!(
                "a metadata snapshot of format {format}, written by a build before Skein's first release; \
                 this build reads {} only: start the node on a new data directory",
                String::from_utf8_lossy(RKYV_SNAPSHOT)
            ));
        }
        return Err("not a metadata snapshot of this version".into());
    };
    let (crc, archive) = framed.split_at_checked(4).ok_or("the metadata snapshot is cut short")?;
    if crc32c::crc32c(archive).to_be_bytes() != crc {
        return Err("the metadata snapshot does not match its checksum".into());
    }
    let mut aligned = rkyv::util::AlignedVec::<16>::with_capacity(archive.len());
    aligned.extend_from_slice(archive);
    let mut image = rkyv::from_bytes::<MetadataImage, rkyv::rancor::Error>(&aligned)
        .map_err(|e| format!("the metadata snapshot does not validate: {e}"))?;
    image.index_ids();
    Ok(image)
}

/// Recovers the metadata log under `data_dir` for node `node` among `voters`, and the
/// image it holds. Blocking: for the main thread.
///
/// # Errors
/// A message when the files cannot be read or written, or were made for other voters.
pub fn open(data_dir: &Path, node: i32, voters: &[i32], shards: usize) -> Result<Opened, String> {
    let dir = data_dir.join("__skein_metadata");
    let mut ids: Vec<u64> = voters.iter().map(|&v| quorum_id(v)).collect();
    ids.sort_unstable();
    ids.dedup();
    let (journal, durable) = Journal::open(&dir, || {
        // A new cluster records each feature at this version's default level (Kafka's
        // bootstrap FeatureLevelRecords), so a later Skein with other defaults leaves
        // them where they are until `kafka-features upgrade` moves them.
        let features = crate::features::FEATURES.iter().map(|f| (f.name.to_owned(), f.default_level)).collect();
        let image = MetadataImage { next_producer_id: 1000, features, ..Default::default() };
        Durable::bootstrap(&ids, encode_image(&image))
    })?;
    let recorded = Quorum::voters_of(&durable)?;
    // No voters given: the ones the log holds (a node that found no controller of
    // `--controller-quorum-bootstrap-servers` to ask starts from its own log).
    if ids.is_empty() {
        ids.clone_from(&recorded);
    }
    let mut image = decode_image(&durable.snapshot.data)?;
    let dynamic = durable.entries.iter().any(|e| e.get_entry_type() != raft::prelude::EntryType::EntryNormal);
    // A quorum whose members never changed must be started with the voters it was
    // made with; once AddRaftVoter or RemoveRaftVoter changed them, the log says who
    // votes and --controller-voters only names where to reach the quorum.
    if recorded != ids && image.quorum.is_empty() && !dynamic {
        let show = |ids: &[u64]| ids.iter().map(|id| (id - 1).to_string()).collect::<Vec<_>>().join(",");
        return Err(format!(
            "{} belongs to a quorum of voters {}, but this node was started with voters {}",
            dir.display(),
            show(&recorded),
            show(&ids)
        ));
    }
    let mut durable = durable;
    if recorded == [quorum_id(node)] {
        // A sole voter's entry is committed once it is durable (it is its own
        // majority), but the commit index reaches the journal only with the next
        // frame: without this, a change acknowledged just before a crash would be
        // missing from the image until raft commits it again, after the shards opened
        // their partitions.
        let last = durable.entries.last().map_or(durable.hard_state.commit, |e| e.index);
        durable.hard_state.commit = durable.hard_state.commit.max(last);
    }
    let commit = durable.hard_state.commit;
    for entry in durable.entries.iter().filter(|e| e.index <= commit).filter_map(Committed::of) {
        let proposal: Proposal = serde_json::from_slice(&entry.data)
            .map_err(|e| format!("metadata log entry {} does not parse: {e}", entry.index))?;
        image.apply(&proposal.records);
    }
    image.place_within(shards);
    let quorum = Quorum::new(&QuorumConfig::new(quorum_id(node), ids), durable)?;
    Ok(Opened { quorum, journal, image })
}

/// What the loop takes from handlers and the transport.
pub enum Input {
    Propose {
        id: u64,
        data: Vec<u8>,
    },
    /// A membership change carrying a `Proposal` (its records), answered as one.
    Change {
        id: u64,
        change: skein_replication::quorum::Change,
        data: Vec<u8>,
    },
    Raft(Box<raft::prelude::Message>),
    Unreachable(u64),
    SnapshotSent(u64, bool),
    /// What follows `after` for an observer (`Quorum::feed`).
    Feed {
        after: u64,
        reply: futures_channel::oneshot::Sender<Feed>,
    },
    /// Hand the leadership to another voter (this node is stopping).
    TransferLeader,
}

/// The refusal of a request made where the quorum's leader is not (`leader`, its
/// quorum id, if known).
pub(crate) fn not_controller(leader: Option<u64>) -> super::Refusal {
    let leader = leader.map_or("none".to_string(), |l| (l - 1).to_string());
    (code::NOT_CONTROLLER, format!("this node is not the active controller (the leader is {leader})"))
}

/// An applied image on its way to the shards.
pub struct Applied {
    pub(crate) image: Arc<MetadataImage>,
    pub(crate) index: u64,
    /// This node's proposals it holds.
    pub(crate) answered: Vec<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::TopicMeta;

    // Snapshots are rkyv archives that hold the whole image (topics with their
    // assignments, brokers, broker configs, SCRAM credentials, ACLs, quotas, topic
    // ids); a cut, damaged or foreign snapshot is refused with a message, never a panic.
    #[test]
    fn snapshots_round_trip_and_damage_is_refused() {
        use crate::metadata::{Assignment, BrokerMeta};
        let mut image = MetadataImage { next_producer_id: 7000, version: 9, ..Default::default() };
        let mut assignment = Assignment::new(vec![1, 2, 3]);
        assignment.elr = vec![3];
        assignment.leader_epoch = 4;
        let topic = TopicMeta {
            name: "orders".into(),
            id: uuid::Uuid::new_v4(),
            partitions: 1,
            configs: [("min.insync.replicas".to_string(), "2".to_string())].into(),
            shards: vec![1],
            assignments: vec![assignment],
        };
        let broker = BrokerMeta {
            id: 2,
            epoch: 5,
            host: "127.0.0.1".into(),
            port: 9092,
            rack: Some("east".into()),
            fenced: true,
            incarnation: 77,
            clean_restart: true,
            listeners: vec![crate::security::Endpoint { listener: "SASL_SSL".into(), host: "h".into(), port: 9094 }],
            virtual_brokers: Some(crate::virtual_brokers::VirtualBrokers {
                listener: "SASL_SSL".into(),
                port_base: 20000,
                shards: 4,
            }),
        };
        image.apply(&[
            MetadataRecord::Topic(topic.clone()),
            MetadataRecord::RegisterBroker(broker.clone()),
            MetadataRecord::ScramCredential {
                user: "alice".into(),
                mechanism: "SCRAM-SHA-512".into(),
                credential: Some(crate::security::scram::ScramCredential::from_password(
                    crate::security::scram::ScramMechanism::Sha512,
                    "pw",
                    b"salt",
                    4096,
                )),
            },
            MetadataRecord::AclAdded(crate::security::acl::AclBinding {
                resource_type: crate::security::acl::ResourceType::Topic,
                name: "orders".into(),
                pattern: crate::security::acl::PatternType::Prefixed,
                principal: "User:alice".into(),
                host: "*".into(),
                operation: crate::security::acl::Operation::Read,
                permission: crate::security::acl::Permission::Allow,
            }),
            MetadataRecord::ClientQuota {
                entity: crate::quota::QuotaEntity {
                    user: Some(crate::quota::EntityName::Default),
                    ..Default::default()
                },
                key: "producer_byte_rate".into(),
                value: Some(1048576.0),
            },
        ]);
        image.broker_configs.insert("".into(), [("follower.replication.throttled.rate".into(), "10".into())].into());
        image.apply(&[MetadataRecord::GroupConfigs {
            group: "billing".into(),
            configs: [("consumer.session.timeout.ms".to_string(), "50000".to_string())].into(),
        }]);
        let json = |image: &MetadataImage| serde_json::to_value(image).unwrap();
        let bytes = encode_image(&image);
        assert!(bytes.starts_with(RKYV_SNAPSHOT));
        // The `metadata` fuzz target's seeds: this snapshot (first byte 0), and a log
        // entry with two of its records (first byte 1).
        crate::capture::seed("metadata", "snapshot", &[&[0u8][..], &bytes[..]].concat());
        let records = vec![MetadataRecord::Topic(topic.clone()), MetadataRecord::RegisterBroker(broker.clone())];
        let entry = serde_json::to_vec(&Proposal { node: 1, id: 1, records }).unwrap();
        crate::capture::seed("metadata", "entry", &[&[1u8][..], &entry[..]].concat());
        let decoded = decode_image(&bytes).unwrap();
        assert_eq!(json(&decoded), json(&image));
        assert_eq!(decoded.topic_by_id(topic.id), Some(&topic));
        assert_eq!(decoded.brokers.get(&2), Some(&broker));
        for cut in [0, RKYV_SNAPSHOT.len(), bytes.len() / 2, bytes.len() - 1] {
            assert!(decode_image(&bytes[..cut]).is_err(), "a snapshot cut at {cut} was read");
        }
        let mut damaged = bytes.clone();
        let last = damaged.len() - 4;
        damaged[last..].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_image(&damaged).is_err(), "a damaged snapshot was read");
        let foreign = decode_image(&serde_json::to_vec(&image).unwrap()).unwrap_err();
        assert!(foreign.contains("not a metadata snapshot"), "{foreign}");
    }

    // A snapshot of an unreleased earlier format is refused with its format named, not
    // read as something else.
    #[test]
    fn a_snapshot_of_an_unreleased_format_is_refused() {
        let archive = rkyv::to_bytes::<rkyv::rancor::Error>(&MetadataImage::default()).unwrap();
        let crc = crc32c::crc32c(&archive).to_be_bytes();
        let error = decode_image(&[&b"SKEINRK9"[..], &crc[..], &archive[..]].concat()).unwrap_err();
        assert!(error.contains("format SKEINRK9") && error.contains("reads SKEINR10 only"), "{error}");
    }

    // Quorum members, tokens and feature levels go through a snapshot and back.
    #[test]
    fn members_tokens_and_features_survive_a_snapshot() {
        let token = crate::security::tokens::DelegationToken {
            id: "t".into(),
            owner: "User:alice".into(),
            requester: "User:alice".into(),
            renewers: Vec::new(),
            issued_ms: 1,
            max_ms: 3,
            expiry_ms: 2,
        };
        let mut image = MetadataImage::default();
        image.tokens.insert("t".to_string(), token.clone());
        let member = super::super::QuorumMember {
            node: 4,
            directory_id: uuid::Uuid::from_u128(7),
            host: "127.0.0.1".into(),
            port: 9094,
            voter: true,
        };
        image.apply(&[
            MetadataRecord::QuorumMember(member.clone()),
            MetadataRecord::FeatureLevel { name: "share.version".into(), level: 1 },
        ]);
        let again = decode_image(&encode_image(&image)).unwrap();
        assert_eq!(again.quorum.get(&4), Some(&member));
        assert_eq!(again.tokens.get("t"), Some(&token));
        assert_eq!(again.features.get("share.version"), Some(&1));
        assert_eq!(again.features_epoch, image.features_epoch);
        image.apply(&[MetadataRecord::RemoveQuorumMember { node: 4 }]);
        assert!(decode_image(&encode_image(&image)).unwrap().quorum.is_empty());
    }

    // A metadata log started again with other voters is refused with both lists named.
    #[test]
    fn other_voters_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let opened = open(dir.path(), 1, &[1], 2).unwrap();
        assert_eq!(opened.image.next_producer_id, 1000);
        // A new cluster records every feature's level as this version's default.
        for feature in crate::features::FEATURES {
            assert_eq!(opened.image.features.get(feature.name), Some(&feature.default_level), "{}", feature.name);
        }
        drop(opened);
        assert!(open(dir.path(), 1, &[1], 2).is_ok());
        let error = open(dir.path(), 1, &[1, 2, 3], 2).unwrap_err();
        assert!(error.contains("voters 1, but this node was started with voters 1,2,3"), "{error}");
    }
}
