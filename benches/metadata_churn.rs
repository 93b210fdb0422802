//! Metadata churn against the produce path (node-bounds issue, section 2): produce p99
//! at a fixed rate, alone and while another client asks 1,000 InitProducerId per
//! second, in A-B-A order so that the two baseline runs show the machine's noise.
//!
//! `cargo bench --bench metadata_churn` (release build of the broker). Knobs:
//! `SKEIN_CHURN_SECS` per phase (default 8), `SKEIN_CHURN_RATE` produce messages per
//! second (default 5000), `SKEIN_CHURN_INITS` InitProducerId per second (default 1000).

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/fixed_rate.rs"]
mod fixed_rate;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Broker;
use hdrhistogram::Histogram;
use kafka_protocol::messages::InitProducerIdRequest;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Produces at `rate` for `secs`; returns the delivery latency histogram (µs).
fn produce_phase(bootstrap: &str, rate: u64, secs: u64) -> Histogram<u64> {
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    for (_, micros) in fixed_rate::produce_at_rate(bootstrap, "churn", rate, secs).1 {
        histogram.record(micros).unwrap();
    }
    histogram
}

/// Asks `per_second` InitProducerId until `stop`; returns how many were answered.
fn churn(bootstrap: String, per_second: u64, stop: Arc<AtomicBool>, answered: Arc<AtomicU64>) {
    let mut client = common::RawClient::connect(&bootstrap);
    let request = InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60_000);
    let started = Instant::now();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let due = started + Duration::from_nanos(n * 1_000_000_000 / per_second);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let response = client.call(&request, 4);
        assert_eq!(response.error_code, 0, "InitProducerId failed");
        answered.fetch_add(1, Ordering::Relaxed);
        n += 1;
    }
}

fn main() {
    let secs = env("SKEIN_CHURN_SECS", 8);
    let rate = env("SKEIN_CHURN_RATE", 5000);
    let inits = env("SKEIN_CHURN_INITS", 1000);
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path(), "1", &[]);
    common::create_topic(&broker, "churn", 1);
    let bootstrap = broker.bootstrap();
    // Warm-up: connections, metadata, page cache.
    produce_phase(&bootstrap, rate, 1);
    let p99 = |h: &Histogram<u64>| h.value_at_quantile(0.99);
    let quiet_before = produce_phase(&bootstrap, rate, secs);
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let churner = std::thread::spawn({
        let (bootstrap, stop, answered) = (bootstrap.clone(), stop.clone(), answered.clone());
        move || churn(bootstrap, inits, stop, answered)
    });
    let churn_started = Instant::now();
    let churned = produce_phase(&bootstrap, rate, secs);
    stop.store(true, Ordering::Relaxed);
    churner.join().unwrap();
    let init_rate = answered.load(Ordering::Relaxed) as f64 / churn_started.elapsed().as_secs_f64();
    let quiet_after = produce_phase(&bootstrap, rate, secs);
    broker.stop();
    let noise = (p99(&quiet_before) as f64 - p99(&quiet_after) as f64).abs();
    let baseline = (p99(&quiet_before) + p99(&quiet_after)) as f64 / 2.0;
    println!("metadata churn: {rate} produce msg/s (acks=all, 200 B), {secs} s per phase, 1 shard");
    for (name, h) in [("quiet", &quiet_before), ("InitProducerId churn", &churned), ("quiet again", &quiet_after)] {
        println!(
            "  {name:<22} p50 {:>6} µs  p99 {:>6} µs  p99.9 {:>6} µs  max {:>7} µs  ({} records)",
            h.value_at_quantile(0.5),
            p99(h),
            h.value_at_quantile(0.999),
            h.max(),
            h.len()
        );
    }
    println!("  InitProducerId answered: {init_rate:.0}/s (asked {inits}/s)");
    println!(
        "  p99 under churn / quiet p99: {:.2}  (quiet runs differ by {:.0} µs: the noise)",
        p99(&churned) as f64 / baseline,
        noise
    );
}
