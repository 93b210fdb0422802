//! A fixed-rate producer for the broker benches: records due at `start + i / rate`,
//! latency measured from the due time (coordinated omission corrected).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;

/// Delivery latencies (µs), each with the time its record was due.
struct Latencies(Arc<Mutex<Vec<(Instant, u64)>>>);

impl ClientContext for Latencies {}

impl ProducerContext for Latencies {
    type DeliveryOpaque = Box<Instant>;

    fn delivery(&self, result: &DeliveryResult<'_>, due: Box<Instant>) {
        if result.is_ok() {
            let micros = due.elapsed().as_micros() as u64;
            self.0.lock().unwrap().push((*due, micros.max(1)));
        }
    }
}

/// Produces 200-byte records to `topic` at `rate` for `secs` (acks=all, linger 0);
/// returns when it started and each delivery's due time and latency (µs).
pub fn produce_at_rate(bootstrap: &str, topic: &str, rate: u64, secs: u64) -> (Instant, Vec<(Instant, u64)>) {
    let samples = Arc::new(Mutex::new(Vec::with_capacity((rate * secs) as usize)));
    let producer: BaseProducer<Latencies> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "0")
        .set("acks", "all")
        .create_with_context(Latencies(samples.clone()))
        .unwrap();
    let value = vec![b'x'; 200];
    let started = Instant::now();
    for n in 0..rate * secs {
        let due = started + Duration::from_nanos(n * 1_000_000_000 / rate);
        // Wait for the due time inside librdkafka's poll (delivery reports run
        // meanwhile), leaving the cores to the broker.
        while let Some(wait) = due.checked_duration_since(Instant::now()) {
            producer.poll(wait.min(Duration::from_millis(1)));
        }
        let record = BaseRecord::with_opaque_to(topic, Box::new(due)).payload(&value).key("k");
        if producer.send(record).is_err() {
            producer.poll(Duration::from_millis(1));
        }
    }
    producer.flush(Duration::from_secs(60)).unwrap();
    let samples = std::mem::take(&mut *samples.lock().unwrap());
    (started, samples)
}
