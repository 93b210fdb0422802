//! PushTelemetry (KIP-714), v0: a client instance's metrics, checked as Kafka checks
//! them and kept for `/metrics` (`telemetry`).

use std::rc::Rc;

use kafka_protocol::messages::{PushTelemetryRequest, PushTelemetryResponse};
use kafka_protocol::protocol::VersionRange;

use crate::shard::Shard;
use crate::telemetry::{ClientInfo, Push};

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };

pub fn handle(shard: &Rc<Shard>, request: PushTelemetryRequest, client: &ClientInfo) -> PushTelemetryResponse {
    let image = shard.image();
    let push = Push {
        instance: request.client_instance_id,
        subscription_id: request.subscription_id,
        terminating: request.terminating,
        compression: request.compression_type,
        metrics: &request.metrics,
    };
    let max_bytes = shard.settings.telemetry_max_bytes;
    let now = std::time::Instant::now();
    match shard.clients.telemetry.borrow_mut().push(push, client, &image.client_metrics, max_bytes, now) {
        Ok(()) => PushTelemetryResponse::default(),
        Err((code, message)) => {
            tracing::debug!(target: "skein::telemetry", client = client.client_id, code, message, "push refused");
            PushTelemetryResponse::default().with_error_code(code)
        }
    }
}
