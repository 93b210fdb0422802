//! How much file space a log reserves ahead of its appends, and when it gives it back.
//!
//! O_DIRECT writes that extend a file ran 6-9x slower on these machines than writes
//! into space reserved with fallocate, so a log keeps its active segment allocated
//! ahead of its appends. A fixed step would make the disk a log takes follow the
//! partition count rather than the data: 32 MiB reserved by each of 10,000 partitions
//! holding one record each filled a 77 GB disk. So the step follows the write rate:
//!
//! - a log starts with `RESERVATION_STEP_MIN_BYTES` ahead (one block: a log holding one
//!   record takes one block);
//! - each extension doubles the step when the last one was used up within
//!   `RESERVATION_HORIZON` (appends keep consuming the reservation), keeps it when it
//!   lasted up to four horizons, and halves it when it lasted longer; it never passes
//!   `RESERVATION_STEP_MAX_BYTES`. A log thus reserves about what it writes in one or
//!   two horizons, and never more than the step it last used up fast;
//! - a log extends ahead of need once less than half a step is left, in a task of its
//!   own that no append waits for (`Log::reserve_ahead`), so that appends rarely wait
//!   for an fallocate;
//! - the space is given back when a segment rolls (its seal trims it), when a log falls
//!   idle for `RESERVATION_IDLE_MS` (housekeeping trims the active segment to its last
//!   block and the step starts small again), and at a clean close.
//!
//! The step carries over a roll: the rate that filled one segment fills the next.

use std::time::{Duration, Instant};

use super::Log;
use crate::error::{Error, Result};
use crate::io::{align_up, Storage, StorageFile};
use crate::limits::{RESERVATION_HORIZON, RESERVATION_STEP_MAX_BYTES, RESERVATION_STEP_MIN_BYTES};

#[derive(Debug)]
pub(super) struct Reservation {
    /// Bytes the next extension adds past the current reservation.
    step: u64,
    /// When the last extension was decided.
    extended_at: Option<Instant>,
    /// An extension ahead of need is in flight (one at a time).
    pub ahead_in_flight: bool,
}

impl Default for Reservation {
    fn default() -> Self {
        Reservation { step: RESERVATION_STEP_MIN_BYTES, extended_at: None, ahead_in_flight: false }
    }
}

impl Reservation {
    /// The reservation end to ask for, now that appends need `end` bytes of a segment
    /// of at most `cap` bytes with `reserved` reserved; adapts the step to how long
    /// the last extension lasted. At least `align_up(end)`, whatever `cap` says (a
    /// batch larger than the segment still goes in whole).
    pub fn extend(&mut self, now: Instant, end: u64, reserved: u64, cap: u64) -> u64 {
        if let Some(at) = self.extended_at {
            let lasted = now.saturating_duration_since(at);
            if lasted < RESERVATION_HORIZON {
                self.step = (self.step * 2).min(RESERVATION_STEP_MAX_BYTES);
            } else if lasted > 4 * RESERVATION_HORIZON {
                self.step = (self.step / 2).max(RESERVATION_STEP_MIN_BYTES);
            }
        }
        self.extended_at = Some(now);
        let wanted = align_up(end).max(reserved + self.step);
        wanted.min(align_up(cap)).max(align_up(end))
    }

    /// Whether to extend ahead of need after an append brought the log to `end`: less
    /// than half a step is left, the segment can grow, and no extension is in flight.
    pub fn wants_ahead(&self, end: u64, reserved: u64, cap: u64) -> bool {
        !self.ahead_in_flight && reserved < align_up(cap) && reserved.saturating_sub(end) < self.step / 2
    }

    /// The bytes of the next extension (what a free-space check asks for).
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The log fell idle and gave its reservation back: the next appends start small.
    pub fn reset(&mut self) {
        self.step = RESERVATION_STEP_MIN_BYTES;
        self.extended_at = None;
    }
}

/// Whether a log whose last append was at `last_append` is idle at `now`.
pub(super) fn idle(last_append: Option<Instant>, now: Instant) -> bool {
    last_append
        .is_none_or(|at| now.saturating_duration_since(at) >= Duration::from_millis(crate::limits::RESERVATION_IDLE_MS))
}

/// Reservations of a log's active segment: extended at admission or ahead of need,
/// given back when the log falls idle.
impl<S: Storage> Log<S> {
    /// Gives the active segment's reservation back when the log has been idle for
    /// `RESERVATION_IDLE_MS` (`reserve.rs`): the file is trimmed to its last block, and
    /// the next appends reserve from the smallest step again. Skipped while anything
    /// waits at the gate, writes are pending or an extension is in flight. Returns
    /// whether space was given back.
    ///
    /// # Errors
    /// `Io` when the file cannot be trimmed; the reservation is then kept as it was.
    pub async fn trim_idle_reservation(&self, now: std::time::Instant) -> Result<bool> {
        if !self.gate.is_idle() {
            return Ok(false);
        }
        let ticket = self.gate.ticket();
        ticket.wait_turn().await;
        let (file, keep) = {
            let state = self.state.borrow();
            let appender = &state.appender;
            let keep = align_up(appender.end());
            let busy = appender.writes_in_flight() > 0 || appender.written() != appender.end();
            if state.closed
                || state.failed.is_some()
                || busy
                || state.reservation.ahead_in_flight
                || appender.reserved <= keep
                || !idle(state.last_append, now)
            {
                return Ok(false);
            }
            (state.active().file.clone(), keep)
        };
        let path = crate::segment::file_path(&self.dir, self.active_segment_base(), crate::segment::LOG_SUFFIX);
        file.truncate(keep).await.map_err(|e| Error::io("truncate", &path, e))?;
        let mut state = self.state.borrow_mut();
        state.appender.reserved = keep;
        state.reservation.reset();
        Ok(true)
    }

    /// Extends the active segment's reservation to `target` ahead of need, in a task of
    /// its own that no append waits for: later appends fill the current reservation
    /// meanwhile, and one that runs past it reserves for itself (admission). An
    /// fallocate runs on the kernel's io_uring workers; with a thousand slow logs each
    /// extending every few appends, the append that had asked waited behind all the
    /// others' (1,000 partitions at 20 records a second each: publish p50 97 ms).
    pub(super) fn reserve_ahead(&self, target: u64) {
        let Some(log) = self.me.upgrade() else {
            self.state.borrow_mut().reservation.ahead_in_flight = false;
            return;
        };
        self.ctx.storage.spawn(async move {
            // The flag clears however this ends.
            let _clear = ReservingAhead(&log);
            if let Err(e) = log.reserve(target).await {
                tracing::debug!(target: "skein::engine", partition = %log.partition, error = %e, "reservation ahead failed");
            }
        });
    }

    /// Reserves file space up to `target` bytes, checking free disk space first.
    pub(super) async fn reserve(&self, target: u64) -> Result<()> {
        let (file, reserved, base) = {
            let state = self.state.borrow();
            if state.closed {
                return Err(Error::Closed(self.partition.clone()));
            }
            (state.active().file.clone(), state.appender.reserved, state.active().base_offset)
        };
        if target <= reserved {
            return Ok(());
        }
        let needed = target - reserved;
        self.check_space(needed)?;
        match file.allocate(target).await {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(28) => {
                self.ctx.space.refused(&self.ctx.metrics, 0, needed);
                return Err(Error::DiskFull { path: self.dir.clone(), available_bytes: 0, needed_bytes: needed });
            }
            Err(e) => {
                // Not a full disk: the device failed (EIO, a read-only remount).
                let error = Error::io("allocate", &self.dir, e);
                self.ctx.space.failed(&self.partition, &error.to_string());
                return Err(error);
            }
        }
        let mut state = self.state.borrow_mut();
        // A roll may have replaced the active segment meanwhile; its file is not this one.
        if state.active().base_offset == base {
            state.appender.reserved = state.appender.reserved.max(target);
        }
        Ok(())
    }

    /// Whether the file system has `needed` bytes free beyond the headroom; a refusal
    /// is counted and, when the directory becomes full, logged (`space.rs`).
    pub(super) fn check_space(&self, needed: u64) -> Result<()> {
        let available = self.ctx.storage.available_bytes(&self.dir).map_err(|e| Error::io("statvfs", &self.dir, e))?;
        if available < needed + crate::space::DISK_HEADROOM_BYTES {
            self.ctx.space.refused(&self.ctx.metrics, available, needed);
            return Err(Error::DiskFull { path: self.dir.clone(), available_bytes: available, needed_bytes: needed });
        }
        self.ctx.space.has_room(available);
        Ok(())
    }
}

/// Clears `Reservation::ahead_in_flight` when an extension ahead of need ends, or is
/// dropped with its append.
struct ReservingAhead<'a, S: Storage>(&'a Log<S>);

impl<S: Storage> Drop for ReservingAhead<'_, S> {
    fn drop(&mut self) {
        self.0.state.borrow_mut().reservation.ahead_in_flight = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: u64 = 1 << 30;

    // A log that keeps using its reservation up within the horizon doubles its step up
    // to the maximum; one that takes longer keeps it, then halves it; a fresh log
    // reserves one block for one small record.
    #[test]
    fn the_step_follows_the_write_rate() {
        let mut r = Reservation::default();
        let t0 = Instant::now();
        assert_eq!(r.extend(t0, 150, 0, CAP), RESERVATION_STEP_MIN_BYTES, "one record takes one block");
        let mut reserved = RESERVATION_STEP_MIN_BYTES;
        let mut now = t0;
        for _ in 0..40 {
            now += Duration::from_millis(10);
            reserved = r.extend(now, reserved, reserved, CAP);
        }
        assert_eq!(r.step(), RESERVATION_STEP_MAX_BYTES, "a fast log reaches the maximum step");
        now += 2 * RESERVATION_HORIZON;
        let before = r.step();
        reserved = r.extend(now, reserved, reserved, CAP);
        assert_eq!(r.step(), before, "kept within four horizons");
        now += 5 * RESERVATION_HORIZON;
        r.extend(now, reserved, reserved, CAP);
        assert_eq!(r.step(), before / 2, "halved when it lasted longer");
        r.reset();
        assert_eq!(r.step(), RESERVATION_STEP_MIN_BYTES);
    }

    // The target never passes the segment's size, except to fit the append itself, and
    // is always block-aligned.
    #[test]
    fn the_target_is_capped_by_the_segment() {
        let mut r = Reservation::default();
        let now = Instant::now();
        assert_eq!(r.extend(now, 5000, 0, 6000), 8192);
        assert_eq!(r.extend(now, 10_000, 8192, 6000), 12_288, "a batch past the cap still fits");
        assert!(!r.wants_ahead(10_000, 12_288, 6000), "nothing ahead past the cap");
        assert!(r.wants_ahead(100, 4096, CAP) == (4096 - 100 < r.step() / 2));
    }
}
