//! Feature flags (KIP-584) as Kafka 4.4 has them: the features this broker supports,
//! with their levels, the level each is finalized at in the cluster (the metadata
//! log's `FeatureLevel` records over `Feature::default_level`), and UpdateFeatures'
//! rules for changing one, with Kafka's messages.
//!
//! Skein acts on a finalized level where Kafka does: `group.version` 0 turns the
//! consumer group protocol (KIP-848) off, `share.version` 0 share groups and
//! `streams.version` 0 streams groups (KIP-1071), their requests answered
//! UNSUPPORTED_VERSION. `transaction.version` 2 lets clients use the transactions of
//! KIP-890 part 2 (they look at it; the broker follows each request's version) and
//! writes `__transaction_state` values in version 1 from level 1. `metadata.version` names the Kafka metadata level Skein's metadata
//! matches; it is never downgraded, as Kafka refuses a downgrade that might lose
//! metadata. `kraft.version` 1 lets the controller quorum change its voters
//! (AddRaftVoter, RemoveRaftVoter, KIP-853); a cluster made before Skein had them is
//! at 0 until `kafka-features upgrade --feature kraft.version=1`, and it never goes
//! back. Features Skein does not implement yet are supported at level 0 only
//! (`eligible.leader.replicas.version`).
//!
//! A new cluster records every feature at the running version's default level (as
//! `kafka-storage format` writes Kafka's bootstrap feature records), so a binary
//! upgrade with newer defaults leaves its levels where they are. A cluster created
//! before Skein recorded them has no level for a feature it never changed: that
//! level is the running version's default.

use crate::errors::code;
use crate::metadata::MetadataImage;

/// A feature this broker supports.
#[derive(Debug)]
pub struct Feature {
    pub name: &'static str,
    /// The levels it supports.
    pub min: i16,
    pub max: i16,
    /// Its level in a cluster that never changed it (a fresh Kafka 4.4 node's, where
    /// Skein implements it).
    pub default_level: i16,
}

pub const METADATA_VERSION: &str = "metadata.version";
pub const GROUP_VERSION: &str = "group.version";
pub const SHARE_VERSION: &str = "share.version";
pub const KRAFT_VERSION: &str = "kraft.version";
pub const TRANSACTION_VERSION: &str = "transaction.version";
pub const STREAMS_VERSION: &str = "streams.version";

/// Sorted by name. `metadata.version` 7 is 3.3-IV3, 33 is 4.4-IV2.
pub const FEATURES: &[Feature] = &[
    Feature { name: "eligible.leader.replicas.version", min: 0, max: 0, default_level: 0 },
    Feature { name: GROUP_VERSION, min: 0, max: 1, default_level: 1 },
    Feature { name: KRAFT_VERSION, min: 0, max: 1, default_level: 1 },
    Feature { name: METADATA_VERSION, min: 7, max: 33, default_level: 33 },
    Feature { name: SHARE_VERSION, min: 0, max: 2, default_level: 2 },
    Feature { name: STREAMS_VERSION, min: 0, max: 1, default_level: 1 },
    Feature { name: TRANSACTION_VERSION, min: 0, max: 2, default_level: 2 },
];

pub fn find(name: &str) -> Option<&'static Feature> {
    FEATURES.iter().find(|f| f.name == name)
}

/// Feature `name`'s finalized level in `image` (0: off, or unknown).
pub fn level(image: &MetadataImage, name: &str) -> i16 {
    match image.features.get(name) {
        Some(level) => *level,
        None => find(name).map_or(0, |f| f.default_level),
    }
}

/// The finalized features, as ApiVersions lists them: those at a level above 0.
pub fn finalized(image: &MetadataImage) -> impl Iterator<Item = (&'static str, i16)> + '_ {
    FEATURES.iter().map(|f| (f.name, level(image, f.name))).filter(|(_, level)| *level > 0)
}

/// The error a request gets while the feature it needs is finalized at level 0, as
/// Kafka answers it (UNSUPPORTED_VERSION, for each group of a describe): the consumer
/// group protocol's requests with `group.version` 0, share groups' with
/// `share.version` 0. The APIs stay advertised, as on Kafka 4.4.
pub fn disabled(
    request: &kafka_protocol::messages::RequestKind,
    image: impl FnOnce() -> std::sync::Arc<MetadataImage>,
) -> Option<i16> {
    use kafka_protocol::messages::RequestKind as R;
    let needs = match request {
        R::ConsumerGroupHeartbeat(_) | R::ConsumerGroupDescribe(_) => GROUP_VERSION,
        R::ShareGroupHeartbeat(_)
        | R::ShareGroupDescribe(_)
        | R::DescribeShareGroupOffsets(_)
        | R::ShareFetch(_)
        | R::ShareAcknowledge(_)
        | R::AlterShareGroupOffsets(_)
        | R::DeleteShareGroupOffsets(_) => SHARE_VERSION,
        R::StreamsGroupHeartbeat(_) | R::StreamsGroupDescribe(_) => STREAMS_VERSION,
        _ => return None,
    };
    (level(&image(), needs) == 0).then_some(code::UNSUPPORTED_VERSION)
}

/// How UpdateFeatures may move a level (its `UpgradeType`; v0's AllowDowngrade is a
/// safe downgrade).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum UpgradeType {
    Upgrade,
    SafeDowngrade,
    UnsafeDowngrade,
}

impl UpgradeType {
    pub fn from_code(code: i8) -> Option<UpgradeType> {
        match code {
            1 => Some(UpgradeType::Upgrade),
            2 => Some(UpgradeType::SafeDowngrade),
            3 => Some(UpgradeType::UnsafeDowngrade),
            _ => None,
        }
    }
}

/// Checks one update against `image` by Kafka's rules (FeatureControlManager), as
/// controller `node` words them.
///
/// # Errors
/// INVALID_UPDATE_VERSION with Kafka's message.
pub fn check(
    image: &MetadataImage,
    node: i32,
    name: &str,
    level: i16,
    upgrade: Option<UpgradeType>,
) -> Result<(), crate::errors::Refusal> {
    let invalid = |why: String| {
        Err((code::INVALID_UPDATE_VERSION, format!("Invalid update version {level} for feature {name}. {why}")))
    };
    let Some(upgrade) = upgrade else {
        return invalid("The controller does not support the given upgrade type.".into());
    };
    if level < 0 {
        return invalid("A feature version cannot be less than 0.".into());
    }
    let Some(feature) = find(name) else {
        return invalid(format!("Local controller {node} does not support this feature."));
    };
    // Kafka's QuorumFeatures: level 0 (off) is always allowed for a known feature.
    if level != 0 && !(feature.min..=feature.max).contains(&level) {
        return invalid(format!("Local controller {node} only supports versions {}-{}", feature.min, feature.max));
    }
    let current = self::level(image, name);
    if level < current && upgrade == UpgradeType::Upgrade {
        return invalid(
            "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade."
                .into(),
        );
    }
    if level > current && upgrade != UpgradeType::Upgrade {
        return invalid("Can't downgrade to a newer version.".into());
    }
    if name == METADATA_VERSION && level < current {
        let why = match upgrade {
            UpgradeType::UnsafeDowngrade => "Unsafe metadata downgrade is not supported in this version.",
            _ => "Refusing to perform the requested downgrade because it might delete metadata information.",
        };
        return Err((
            code::INVALID_UPDATE_VERSION,
            format!("Unsupported metadata.version downgrade from {current} to {level}. {why}"),
        ));
    }
    if name == KRAFT_VERSION && level != current && upgrade != UpgradeType::Upgrade {
        return invalid("Can't downgrade the version of this feature.".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Kafka 4.4's answers to the same updates (run against a live 4.4 node with
    // `validateOnly`), word for word.
    #[test]
    fn updates_are_checked_as_kafka() {
        let image = MetadataImage::default();
        let check = |name: &str, level: i16, upgrade: UpgradeType| check(&image, 1, name, level, Some(upgrade));
        let message = |r: Result<(), crate::errors::Refusal>| r.unwrap_err().1;
        assert!(check(SHARE_VERSION, 1, UpgradeType::SafeDowngrade).is_ok());
        assert!(check(SHARE_VERSION, 2, UpgradeType::SafeDowngrade).is_ok(), "the same level");
        assert!(check(GROUP_VERSION, 0, UpgradeType::SafeDowngrade).is_ok());
        assert_eq!(
            message(check(SHARE_VERSION, 1, UpgradeType::Upgrade)),
            "Invalid update version 1 for feature share.version. Can't downgrade the version of this feature \
             without setting the upgrade type to either safe or unsafe downgrade."
        );
        assert_eq!(
            message(check(SHARE_VERSION, 3, UpgradeType::Upgrade)),
            "Invalid update version 3 for feature share.version. Local controller 1 only supports versions 0-2"
        );
        assert_eq!(
            message(check("nope", 1, UpgradeType::Upgrade)),
            "Invalid update version 1 for feature nope. Local controller 1 does not support this feature."
        );
        assert_eq!(
            message(check(METADATA_VERSION, 30, UpgradeType::SafeDowngrade)),
            "Unsupported metadata.version downgrade from 33 to 30. Refusing to perform the requested downgrade \
             because it might delete metadata information."
        );
        assert_eq!(
            message(check(METADATA_VERSION, 30, UpgradeType::UnsafeDowngrade)),
            "Unsupported metadata.version downgrade from 33 to 30. Unsafe metadata downgrade is not supported in \
             this version."
        );
        assert_eq!(
            message(check(KRAFT_VERSION, 0, UpgradeType::SafeDowngrade)),
            "Invalid update version 0 for feature kraft.version. Can't downgrade the version of this feature."
        );
        assert_eq!(check(SHARE_VERSION, -1, UpgradeType::Upgrade).unwrap_err().0, code::INVALID_UPDATE_VERSION);
        assert_eq!(check(SHARE_VERSION, 3, UpgradeType::SafeDowngrade).unwrap_err().0, code::INVALID_UPDATE_VERSION);
    }

    #[test]
    fn finalized_levels_come_from_the_image_over_the_defaults() {
        let mut image = MetadataImage::default();
        let names = |image: &MetadataImage| finalized(image).map(|(n, l)| format!("{n}={l}")).collect::<Vec<_>>();
        assert_eq!(
            names(&image),
            [
                "group.version=1",
                "kraft.version=1",
                "metadata.version=33",
                "share.version=2",
                "streams.version=1",
                "transaction.version=2"
            ]
        );
        image.features.insert(SHARE_VERSION.into(), 0);
        image.features.insert(GROUP_VERSION.into(), 1);
        assert_eq!(
            names(&image),
            ["group.version=1", "kraft.version=1", "metadata.version=33", "streams.version=1", "transaction.version=2"]
        );
        assert_eq!(level(&image, SHARE_VERSION), 0);
    }
}
