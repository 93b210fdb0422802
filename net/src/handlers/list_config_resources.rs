//! ListConfigResources (KIP-1142; v0 was ListClientMetricsResources): the config
//! resources of the types asked for, as `kafka-configs --describe` lists them before
//! it describes one. Topics and brokers from the image; groups that have overrides
//! or a coordinator on this node; client-metrics resources (KIP-714 subscriptions).

use std::collections::BTreeSet;
use std::rc::Rc;

use kafka_protocol::messages::list_config_resources_response::ConfigResource;
use kafka_protocol::messages::{ListConfigResourcesRequest, ListConfigResourcesResponse, RequestHeader};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_coordinator::group::calls;

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_CLIENT_METRICS, RESOURCE_GROUP, RESOURCE_TOPIC};
use super::s;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 1 };

const RESOURCE_BROKER_LOGGER: i8 = 8;
const SUPPORTED: [i8; 5] =
    [RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_CLIENT_METRICS, RESOURCE_GROUP];

pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: ListConfigResourcesRequest,
) -> ListConfigResourcesResponse {
    let mut response = ListConfigResourcesResponse::default();
    // v0 lists client-metrics resources only; v1 the types asked for, every type
    // when none is named.
    let types: Vec<i8> = match (header.request_api_version, request.resource_types.is_empty()) {
        (0, _) => vec![RESOURCE_CLIENT_METRICS],
        (_, true) => SUPPORTED.to_vec(),
        (_, false) => request.resource_types.clone(),
    };
    // Kafka answers a type it has no resources of with INVALID_REQUEST.
    if types.iter().any(|t| !SUPPORTED.contains(t)) {
        response.error_code = code::INVALID_REQUEST;
        return response;
    }
    let image = shard.image();
    let mut listed: Vec<(i8, String)> = Vec::new();
    for kind in types {
        match kind {
            RESOURCE_TOPIC => listed.extend(image.topics.keys().map(|t| (kind, t.clone()))),
            RESOURCE_CLIENT_METRICS => listed.extend(image.client_metrics.keys().map(|m| (kind, m.clone()))),
            RESOURCE_BROKER | RESOURCE_BROKER_LOGGER => {
                let mut ids: BTreeSet<i32> = image.brokers.keys().copied().collect();
                ids.insert(shard.settings.node_id);
                listed.extend(ids.into_iter().map(|id| (kind, id.to_string())));
            }
            RESOURCE_GROUP => {
                let mut groups: BTreeSet<String> = image.group_configs.keys().cloned().collect();
                for answer in shard.group_call_everywhere(|| calls::List { states: Vec::new() }).await {
                    match answer {
                        Ok(found) => groups.extend(found.into_iter().map(|g| g.group_id.to_string())),
                        Err(error) => {
                            response.error_code = error;
                            return response;
                        }
                    }
                }
                listed.extend(groups.into_iter().map(|g| (kind, g)));
            }
            _ => {}
        }
    }
    response.config_resources = listed
        .into_iter()
        .map(|(kind, name)| ConfigResource::default().with_resource_name(s(name)).with_resource_type(kind))
        .collect();
    response
}
