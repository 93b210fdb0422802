//! ApiVersions: the APIs and versions the registry (`registry::APIS`) hands over,
//! and (v3+) the features (`features`): those supported, and those finalized in the
//! cluster with their epoch.

use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::protocol::VersionRange;

use crate::metadata::MetadataImage;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 5 };

/// ApiVersions v5 (KIP-1242): a client that names the cluster and node it means, and
/// they are not this one's (another cluster behind the address, or another node since
/// the client's metadata), is answered REBOOTSTRAP_REQUIRED, as Kafka 4.4 checks it.
/// A virtual broker of this node (`--virtual-brokers`) is this node.
pub fn meant_elsewhere(request: &ApiVersionsRequest, shard: &crate::shard::Shard) -> bool {
    let Some(cluster) = &request.cluster_id else { return false };
    let node = shard.settings.node_id;
    let this_node = request.node_id == node
        || crate::virtual_brokers::split(request.node_id).is_some_and(|(owner, _)| owner == node);
    cluster.as_str() != shard.settings.cluster_id || !this_node
}

/// The response listing `apis`, each with the versions it implements.
pub fn response<'a>(apis: impl Iterator<Item = (&'a ApiKey, &'a VersionRange)>) -> ApiVersionsResponse {
    let mut response = ApiVersionsResponse::default();
    response.api_keys = apis
        .map(|(key, range)| {
            let mut v = ApiVersion::default();
            v.api_key = *key as i16;
            v.min_version = range.min;
            v.max_version = range.max;
            v
        })
        .collect();
    response
}

/// `response` with the features (ApiVersions v3+ carries them as tagged fields): each
/// feature this broker supports with its levels, the finalized ones from the metadata
/// image, and the epoch of their last change, as a Kafka 4.4 broker lists them.
pub fn with_features(mut response: ApiVersionsResponse, version: i16, image: &MetadataImage) -> ApiVersionsResponse {
    if version < 3 {
        return response;
    }
    for feature in crate::features::FEATURES {
        response.supported_features.push(
            SupportedFeatureKey::default()
                .with_name(StrBytes::from_static_str(feature.name))
                .with_min_version(feature.min)
                .with_max_version(feature.max),
        );
    }
    for (name, level) in crate::features::finalized(image) {
        response.finalized_features.push(
            FinalizedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_min_version_level(level)
                .with_max_version_level(level),
        );
    }
    response.finalized_features_epoch = image.features_epoch;
    response
}
