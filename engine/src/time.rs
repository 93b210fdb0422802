//! Time as the engine's background work reads it: the wall clock in milliseconds (record
//! timestamps, retention, flush ages) and the pause a paced task (the cleaner, the
//! offset map's build) takes between its steps.

use std::time::Duration;

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Lets the shard's other tasks and its I/O run: sleeps `pause` (at least a timer tick).
pub(crate) async fn pace(pause: Duration) {
    glommio::timer::sleep(pause.max(PACE_MIN)).await;
}

/// The shortest pause between two paced steps.
const PACE_MIN: Duration = Duration::from_micros(100);
