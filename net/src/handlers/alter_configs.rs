//! AlterConfigs (legacy, whole-set replacement) for topics, brokers' dynamic configs
//! and groups.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::alter_configs_request::AlterableConfig;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_CLIENT_METRICS, RESOURCE_GROUP, RESOURCE_TOPIC};
use super::s;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 2 };

pub async fn handle(
    shard: &Rc<Shard>,
    request: AlterConfigsRequest,
    caller: &crate::authorize::Caller,
) -> AlterConfigsResponse {
    let mut response = AlterConfigsResponse::default();
    for resource in request.resources {
        let mut result = AlterConfigsResourceResponse::default();
        result.resource_type = resource.resource_type;
        result.resource_name = resource.resource_name.clone();
        let name = resource.resource_name.as_str();
        let denied =
            crate::authorize::config_denied(caller, resource.resource_type, name, crate::authorize::Op::AlterConfigs);
        let outcome = if let Some(denied) = denied {
            Err(denied)
        } else if resource.resource_type == RESOURCE_BROKER {
            crate::topics::set_broker_configs(shard, name, with_values(&resource.configs), request.validate_only).await
        } else if resource.resource_type == RESOURCE_GROUP {
            crate::topics::set_group_configs(shard, name, with_values(&resource.configs), request.validate_only).await
        } else if resource.resource_type == RESOURCE_CLIENT_METRICS {
            crate::topics::set_client_metrics(shard, name, with_values(&resource.configs), request.validate_only).await
        } else if resource.resource_type == RESOURCE_TOPIC {
            let mut configs = BTreeMap::new();
            let mut bad = None;
            for c in &resource.configs {
                match &c.value {
                    Some(v) => {
                        configs.insert(c.name.to_string(), v.to_string());
                    }
                    None => bad = Some((code::INVALID_CONFIG, format!("Null value for {}", c.name.as_str()))),
                }
            }
            match bad {
                Some(e) => Err(e),
                None => {
                    crate::topics::set_topic_configs(
                        shard,
                        resource.resource_name.as_str(),
                        configs,
                        request.validate_only,
                    )
                    .await
                }
            }
        } else {
            Err((
                code::INVALID_REQUEST,
                "Only topic, broker, group and client metrics configs can be altered".to_string(),
            ))
        };
        if let Err((error, message)) = outcome {
            result.error_code = error;
            result.error_message = Some(s(message));
        }
        response.responses.push(result);
    }
    response
}

/// The configs of a whole-set replacement that carry a value (a null one is dropped).
fn with_values(configs: &[AlterableConfig]) -> BTreeMap<String, String> {
    configs.iter().filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string()))).collect()
}
