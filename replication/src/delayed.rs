//! Delayed operations that complete when the high watermark passes an offset: an
//! `acks=all` produce waits until its batch is replicated to the whole ISR, as Kafka's
//! `DelayedProduce` does. Whoever moves the high watermark calls `complete_through`;
//! a waiter whose request timed out or went away is dropped with its receiver.

use std::collections::BTreeMap;

use futures_channel::oneshot;
use skein_engine::Offset;

#[derive(Default)]
pub struct HighWatermarkWaiters {
    /// Senders by the high watermark they need (at least the key).
    waiting: BTreeMap<Offset, Vec<oneshot::Sender<Offset>>>,
}

impl HighWatermarkWaiters {
    /// A receiver answered with the high watermark once it reaches `offset`, at once if
    /// `high_watermark` already has.
    pub fn wait_for(&mut self, offset: Offset, high_watermark: Offset) -> oneshot::Receiver<Offset> {
        let (sender, receiver) = oneshot::channel();
        if high_watermark >= offset {
            let _ = sender.send(high_watermark);
        } else {
            self.waiting.entry(offset).or_default().push(sender);
        }
        receiver
    }

    /// Completes every waiter the high watermark `high_watermark` satisfies.
    pub fn complete_through(&mut self, high_watermark: Offset) {
        let later = self.waiting.split_off(&Offset(high_watermark.0.saturating_add(1)));
        for sender in std::mem::replace(&mut self.waiting, later).into_values().flatten() {
            let _ = sender.send(high_watermark);
        }
    }

    /// Drops every waiter: their produces fail (this replica stopped leading).
    pub fn fail_all(&mut self) {
        self.waiting.clear();
    }

    /// Waiters still waiting (their receivers may be gone).
    pub fn len(&self) -> usize {
        self.waiting.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Waiters complete in offset order as the high watermark passes them, at once when
    // it already has.
    #[test]
    fn waiters_complete_as_the_high_watermark_passes() {
        let mut waiters = HighWatermarkWaiters::default();
        let mut now = waiters.wait_for(Offset(5), Offset(5));
        assert_eq!(now.try_recv().unwrap(), Some(Offset(5)));
        let mut ten = waiters.wait_for(Offset(10), Offset(5));
        let mut twenty = waiters.wait_for(Offset(20), Offset(5));
        waiters.complete_through(Offset(12));
        assert_eq!(ten.try_recv().unwrap(), Some(Offset(12)));
        assert_eq!(twenty.try_recv().unwrap(), None);
        assert_eq!(waiters.len(), 1);
        waiters.complete_through(Offset(20));
        assert_eq!(twenty.try_recv().unwrap(), Some(Offset(20)));
        assert!(waiters.is_empty());
    }
}
