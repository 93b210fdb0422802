//! ApiVersions: the APIs and versions the registry (`registry::APIS`) hands over,
//! and (v3+) the features Skein finalizes: `share.version` 2 (share groups, KIP-932,
//! with dead-letter topics, KIP-1191), as a Kafka 4.4 node formats it.

use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::protocol::VersionRange;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 4 };

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

/// Each feature Skein supports: its name, its supported levels, the level finalized.
const FEATURES: &[(&str, i16, i16, i16)] = &[("share.version", 0, 2, 2)];

/// `response` with the features (ApiVersions v3+ carries them as tagged fields).
pub fn with_features(mut response: ApiVersionsResponse, version: i16) -> ApiVersionsResponse {
    if version < 3 {
        return response;
    }
    for &(name, min, max, level) in FEATURES {
        let name = StrBytes::from_static_str(name);
        response
            .supported_features
            .push(SupportedFeatureKey::default().with_name(name.clone()).with_min_version(min).with_max_version(max));
        response.finalized_features.push(
            FinalizedFeatureKey::default().with_name(name).with_min_version_level(level).with_max_version_level(level),
        );
    }
    response.finalized_features_epoch = 0;
    response
}
