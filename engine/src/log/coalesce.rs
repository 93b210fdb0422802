//! Adaptive group commit: a short coalescing window before a write on an idle device.
//!
//! While a write is in flight, appends only fill the tail chunk and the next write
//! takes them all (`appender.rs`): a busy device coalesces by itself. On an idle device
//! each append would go out as a write of its own, so a log appending a batch every
//! 300 µs pays a device write (and a partial-block copy) per batch. The window trades
//! a bounded delay for fewer writes, and opens only when it pays:
//!
//! - the operator allowed it (`group_commit_max_delay`, 0 = never);
//! - the device is idle for this log and only a small write of the open chunk waits
//!   (a full chunk, or a large write, goes at once);
//! - appends arrive often enough that at least one more is expected within it: the
//!   mean gap between this log's appends (an EWMA) is below the maximum delay.
//!
//! The window then lasts twice the mean gap, at most the maximum delay, so it closes
//! as soon as a couple more appends are likely in. One task holds it (`open`); others
//! that would write wait for it; a window is not opened again for bytes that already
//! waited in one (`waited_upto`). If the task holding it is dropped, the window closes
//! and the next waiter drives.

use std::time::{Duration, Instant};

use super::*;

/// Weight of the newest gap in the mean.
const GAP_WEIGHT: f64 = 0.2;

#[derive(Debug)]
pub(super) struct Coalescing {
    last_arrival: Option<Instant>,
    /// Mean gap between appends, microseconds.
    mean_gap_us: f64,
    /// A task holds a window now.
    open: bool,
    /// Bytes below this position already waited in a window.
    waited_upto: u64,
}

impl Default for Coalescing {
    fn default() -> Self {
        Coalescing { last_arrival: None, mean_gap_us: f64::MAX, open: false, waited_upto: 0 }
    }
}

impl Coalescing {
    /// Notes an admitted append. A gap is counted up to `cap` (a long idle spell does
    /// not keep the window shut for long once appends come fast again).
    pub fn arrived(&mut self, now: Instant, cap: Duration) {
        if let Some(last) = self.last_arrival {
            let gap = now.duration_since(last).min(cap).as_secs_f64() * 1e6;
            self.mean_gap_us = match self.mean_gap_us {
                f64::MAX => gap,
                mean => mean * (1.0 - GAP_WEIGHT) + gap * GAP_WEIGHT,
            };
        }
        self.last_arrival = Some(now);
    }

    /// Whether a driver should go through `Log::coalesce` before taking a write: a
    /// window is open, or one would open.
    pub fn wants<F: StorageFile>(&self, appender: &crate::appender::Appender<F>, max_delay: Duration) -> bool {
        self.open || self.window(appender, max_delay).is_some()
    }

    /// How long to hold the next write back, if a window should open now.
    fn window<F: StorageFile>(&self, appender: &crate::appender::Appender<F>, max_delay: Duration) -> Option<Duration> {
        let max_us = max_delay.as_secs_f64() * 1e6;
        if max_delay.is_zero() || self.open || !appender.coalescible() || appender.written() < self.waited_upto {
            return None;
        }
        (self.mean_gap_us < max_us).then(|| Duration::from_secs_f64((2.0 * self.mean_gap_us).min(max_us) / 1e6))
    }
}

/// Closes a window when its holder is done or dropped.
struct Window<'a, S: Storage>(&'a Log<S>);

impl<S: Storage> Drop for Window<'_, S> {
    fn drop(&mut self) {
        let mut state = self.0.state.borrow_mut();
        state.coalescing.open = false;
        state.coalescing.waited_upto = state.appender.end();
        drop(state);
        self.0.written_waiters.wake_first();
    }
}

impl<S: Storage> Log<S> {
    /// Before a driver takes a write: holds it back in a window when one pays (see the
    /// module docs), or waits while another task holds one. Returns whether it waited;
    /// the caller then looks again.
    pub(super) async fn coalesce(&self, key: i64) -> bool {
        // `None` while another task holds a window; else the window that pays, if any.
        let window = {
            let mut state = self.state.borrow_mut();
            if state.coalescing.open {
                None
            } else {
                let delay = state.coalescing.window(&state.appender, self.ctx.group_commit_max_delay);
                state.coalescing.open = delay.is_some();
                Some(delay)
            }
        };
        let delay = match window {
            None => {
                self.written_waiters.wait(key).await;
                return true;
            }
            Some(None) => return false,
            Some(Some(delay)) => delay,
        };
        let window = Window(self);
        EngineMetrics::add(&self.ctx.metrics.coalescing_windows, 1);
        glommio::timer::sleep(delay).await;
        drop(window);
        true
    }
}
