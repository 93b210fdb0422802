//! ApiVersions: the APIs and versions the registry (`registry::APIS`) hands over,
//! and (v3+) the features (`features`): those supported, and those finalized in the
//! cluster with their epoch.

use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::protocol::VersionRange;
use skein_control::metadata::MetadataImage;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 5 };

/// Whether a v3+ request names its client software as Kafka requires (KIP-511: each
/// of name and version letters, digits, `-` and `.`, starting and ending with a letter
/// or digit); Kafka answers INVALID_REQUEST to one that does not.
pub fn is_valid(request: &ApiVersionsRequest, version: i16) -> bool {
    let valid = |text: &str| {
        let bytes = text.as_bytes();
        let inner = |b: &u8| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'.';
        match (bytes.first(), bytes.last()) {
            (Some(first), Some(last)) => {
                first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric() && bytes.iter().all(inner)
            }
            _ => false,
        }
    };
    version < 3 || (valid(&request.client_software_name) && valid(&request.client_software_version))
}

/// ApiVersions v5 (KIP-1242): a client that names the cluster and node it means, and
/// they are not this one's (another cluster behind the address, or another node since
/// the client's metadata), is answered REBOOTSTRAP_REQUIRED, as Kafka 4.4 checks it.
/// A virtual broker of this node (`--virtual-brokers`) is this node.
pub fn meant_elsewhere(request: &ApiVersionsRequest, shard: &crate::shard::Shard) -> bool {
    let Some(cluster) = &request.cluster_id else { return false };
    let node = shard.settings.node_id;
    let this_node = request.node_id == node
        || skein_control::virtual_brokers::split(request.node_id).is_some_and(|(owner, _)| owner == node);
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
    for feature in skein_control::features::FEATURES {
        response.supported_features.push(
            SupportedFeatureKey::default()
                .with_name(StrBytes::from_static_str(feature.name))
                .with_min_version(feature.min)
                .with_max_version(feature.max),
        );
    }
    for (name, level) in skein_control::features::finalized(image) {
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

#[cfg(test)]
mod tests {
    use super::*;

    // Kafka's `SOFTWARE_NAME_VERSION_PATTERN`, checked from v3 only.
    #[test]
    fn client_software_names() {
        let named = |name: &str, version: &str| {
            ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_string(name.to_string()))
                .with_client_software_version(StrBytes::from_string(version.to_string()))
        };
        assert!(is_valid(&named("apache-kafka-java", "4.4.0"), 3));
        assert!(is_valid(&named("librdkafka", "2.16.2-RC1"), 4));
        assert!(is_valid(&named("", ""), 2));
        for (name, version) in [("", "1"), ("kgo", ""), ("-kgo", "1"), ("kgo.", "1"), ("kafka python", "1"), ("é", "1")]
        {
            assert!(!is_valid(&named(name, version), 3), "{name:?} {version:?}");
        }
    }
}
