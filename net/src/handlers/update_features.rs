//! UpdateFeatures (KIP-584, `kafka-features upgrade|downgrade`): sets finalized feature
//! levels through the controller, all or none, by Kafka's rules (`features::check`).
//! v0-1 answer each feature; v2 only the whole request, as Kafka 4.4 does.

use std::rc::Rc;

use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{RequestHeader, UpdateFeaturesRequest, UpdateFeaturesResponse};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;
use skein_control::features::UpgradeType;
use skein_control::metadata::requests::ControllerRequest;

use super::s;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 2 };

pub async fn handle(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    request: UpdateFeaturesRequest,
) -> UpdateFeaturesResponse {
    let version = header.request_api_version;
    let updates: Vec<(String, i16, Option<UpgradeType>)> = request
        .feature_updates
        .iter()
        .map(|u| {
            let upgrade = match version {
                0 if u.allow_downgrade => Some(UpgradeType::SafeDowngrade),
                0 => Some(UpgradeType::Upgrade),
                _ => UpgradeType::from_code(u.upgrade_type),
            };
            (u.feature.to_string(), u.max_version_level, upgrade)
        })
        .collect();
    let image = shard.image();
    let node = shard.settings.node_id;
    let checked = updates
        .iter()
        .try_for_each(|(name, level, upgrade)| skein_control::features::check(&image, node, name, *level, *upgrade));
    let outcome = match checked {
        Err(refused) => Err(refused),
        Ok(()) if request.validate_only || updates.is_empty() => Ok(()),
        Ok(()) => shard.control(ControllerRequest::UpdateFeatures { updates }).await.map(|_| ()),
    };
    let mut response = UpdateFeaturesResponse::default();
    let (error, message) = match outcome {
        Ok(()) => (code::NONE, None),
        Err((error, message)) => (error, Some(message)),
    };
    if error != code::NONE {
        response.error_code = error;
        response.error_message = message
            .as_ref()
            .map(|m| s(format!("The update failed for all features since the following feature had an error: {m}")));
    }
    if version < 2 {
        response.results = request
            .feature_updates
            .iter()
            .map(|u| {
                UpdatableFeatureResult::default()
                    .with_feature(u.feature.clone())
                    .with_error_code(error)
                    .with_error_message(message.clone().map(s))
            })
            .collect();
    }
    response
}
