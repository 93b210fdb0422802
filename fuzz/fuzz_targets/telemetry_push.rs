//! A PushTelemetry's metrics (KIP-714): OTLP `MetricsData` compressed with the codec
//! the first byte names (0-4, and others refused), walked within its bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [codec, metrics @ ..] = data else { return };
    if let Ok(decoded) = skein_net::telemetry::otlp::decode(*codec as i8 % 6, metrics, 1 << 20) {
        assert!(decoded.points.len() <= skein_control::limits::TELEMETRY_SERIES_PER_CLIENT_MAX);
    }
});
