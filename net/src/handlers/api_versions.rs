//! ApiVersions: the APIs and versions the registry (`registry::APIS`) hands over,
//! nothing else.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
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
