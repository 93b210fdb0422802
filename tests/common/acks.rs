//! An rdkafka producer context that keeps what the broker acknowledged.

use std::sync::{Arc, Mutex};

use rdkafka::message::Message;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::ClientContext;

/// (partition, offset, payload) of each acknowledged record.
pub type Delivered = Arc<Mutex<Vec<(i32, i64, Vec<u8>)>>>;

/// Collects delivery reports: the records acknowledged, and the errors reported.
#[derive(Clone, Default)]
pub struct Acks {
    pub acked: Delivered,
    pub errors: Arc<Mutex<Vec<String>>>,
}

impl ClientContext for Acks {}

impl ProducerContext for Acks {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(m) => {
                self.acked.lock().unwrap().push((m.partition(), m.offset(), m.payload().unwrap_or_default().to_vec()))
            }
            Err((e, _)) => self.errors.lock().unwrap().push(e.to_string()),
        }
    }
}
