//! GetTelemetrySubscriptions (KIP-714), v0: which metrics a client instance pushes
//! and how often, from the CLIENT_METRICS resources it matches (`telemetry`).

use std::rc::Rc;

use kafka_protocol::messages::{GetTelemetrySubscriptionsRequest, GetTelemetrySubscriptionsResponse};
use kafka_protocol::protocol::VersionRange;

use super::s;
use crate::shard::Shard;
use crate::telemetry::{ClientInfo, ACCEPTED_COMPRESSION_TYPES};

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };

pub fn handle(
    shard: &Rc<Shard>,
    request: GetTelemetrySubscriptionsRequest,
    client: &ClientInfo,
) -> GetTelemetrySubscriptionsResponse {
    let image = shard.image();
    let now = std::time::Instant::now();
    let answer = shard.clients.telemetry.borrow_mut().get_subscription(
        request.client_instance_id,
        client,
        &image.client_metrics,
        now,
    );
    match answer {
        Ok((id, subscription)) => GetTelemetrySubscriptionsResponse::default()
            .with_client_instance_id(id)
            .with_subscription_id(subscription.id)
            .with_accepted_compression_types(ACCEPTED_COMPRESSION_TYPES.to_vec())
            .with_push_interval_ms(subscription.interval_ms)
            .with_telemetry_max_bytes(shard.settings.telemetry_max_bytes)
            .with_delta_temporality(true)
            .with_requested_metrics(subscription.metrics.into_iter().map(s).collect()),
        Err((code, message)) => {
            tracing::debug!(target: "skein::telemetry", client = client.client_id, code, message, "refused");
            GetTelemetrySubscriptionsResponse::default().with_error_code(code)
        }
    }
}
