//! ApiVersions: the APIs and versions in `registry::APIS`, nothing else.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::ApiVersionsResponse;
use kafka_protocol::protocol::VersionRange;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 4 };

pub fn response() -> ApiVersionsResponse {
    let mut response = ApiVersionsResponse::default();
    response.api_keys = crate::registry::APIS
        .iter()
        .map(|(key, range, _)| {
            let mut v = ApiVersion::default();
            v.api_key = *key as i16;
            v.min_version = range.min;
            v.max_version = range.max;
            v
        })
        .collect();
    response
}
