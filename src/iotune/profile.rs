//! The profile's side of `skein iotune`: the recommendations derived from the
//! measurements (`knee`, `recommend`, each rule in its doc) and what `skein start`
//! makes of a profile file (`load_for_start`, `group_commit_cap`, `apply`).

use super::*;

/// The knee of a curve of (depth, figure) points: the smallest depth whose figure
/// reaches `KNEE_SHARE` of the best. `None` when no figure is positive.
pub fn knee(points: impl IntoIterator<Item = (usize, f64)>) -> Option<usize> {
    let mut points: Vec<(usize, f64)> = points.into_iter().filter(|(_, figure)| figure.is_finite()).collect();
    points.sort_by_key(|(depth, _)| *depth);
    let best = points.iter().map(|(_, figure)| *figure).fold(0.0, f64::max);
    if best <= 0.0 {
        return None;
    }
    points.iter().find(|(_, figure)| *figure >= KNEE_SHARE * best).map(|(depth, _)| *depth)
}

/// The profile's recommendations from the measurements. The rules:
///
/// - `append_chunk_bytes`: the smallest block size whose best sequential write
///   bandwidth (over the depths) reaches 90% of the best of all. Larger chunks cost
///   memory in every active log and make a lone append's write longer, so the smallest
///   that reaches the device's bandwidth. Block sizes are powers of two within the
///   engine's bounds; without a measurement, the default.
/// - `writes_in_flight`: the knee of that block size's bandwidth over depth (the
///   smallest depth reaching 90% of its best), within the engine's bounds and so that
///   the tail buffer (a chunk per write in flight, at least `APPEND_CHUNKS_MAX`) stays
///   within `APPEND_BUFFER_BYTES_MAX`.
/// - `group_commit_window_us`: the median latency of a 4 KiB write at depth 1. While a
///   write is in flight, appends already wait for it and share the next one: a busy
///   device coalesces for one small write's time at no cost to throughput. A window no
///   longer than that gives an idle log the same coalescing, delaying an append no
///   more than a busy device would. The fdatasync latency is not used: a window holds
///   a write back, not a sync (an append with `flush.messages` waits for both anyway).
///   Within [1, `GROUP_COMMIT_WINDOW_US_MAX`]. It only caps
///   `--group-commit-max-delay-us`, never turns group commit on.
pub fn recommend(sequential_write: &[Bandwidth], small_write: &Latency) -> Recommended {
    let defaults = WriteShape::default();
    let best_of = |block: usize| {
        sequential_write.iter().filter(|s| s.block_bytes == block).map(|s| s.mb_per_s).fold(0.0, f64::max)
    };
    let mut blocks: Vec<usize> = sequential_write.iter().map(|s| s.block_bytes).collect();
    blocks.sort_unstable();
    blocks.dedup();
    let best = blocks.iter().map(|&b| best_of(b)).fold(0.0, f64::max);
    let chunk = blocks
        .iter()
        .copied()
        .filter(|b| b.is_power_of_two() && (APPEND_CHUNK_BYTES_MIN..=APPEND_CHUNK_BYTES_MAX).contains(b))
        .find(|&b| best > 0.0 && best_of(b) >= KNEE_SHARE * best);
    let (append_chunk_bytes, writes_in_flight) = match chunk {
        None => (defaults.chunk_bytes, defaults.writes_in_flight),
        Some(chunk) => {
            let depths = sequential_write.iter().filter(|s| s.block_bytes == chunk).map(|s| (s.depth, s.mb_per_s));
            let most = WRITES_IN_FLIGHT_MAX.min(APPEND_BUFFER_BYTES_MAX / chunk);
            (chunk, knee(depths).unwrap_or(defaults.writes_in_flight).clamp(WRITES_IN_FLIGHT_MIN, most))
        }
    };
    let group_commit_window_us = small_write.latency_us_p50.clamp(1, GROUP_COMMIT_WINDOW_US_MAX);
    let recommended = Recommended { append_chunk_bytes, writes_in_flight, group_commit_window_us };
    debug_assert!(write_shape(&recommended).validate().is_ok(), "{recommended:?}");
    recommended
}

/// The appender's write shape a profile recommends.
pub fn write_shape(recommended: &Recommended) -> WriteShape {
    WriteShape { chunk_bytes: recommended.append_chunk_bytes, writes_in_flight: recommended.writes_in_flight }
}

/// Reads the profile `skein start` applies: `explicit` (`--iotune-file`), which must
/// exist, else `<data-dir>/iotune.json` when present.
///
/// # Errors
/// A message naming the file when it cannot be read, is not a profile, is of a later
/// format, or recommends values out of the engine's bounds.
pub fn load_for_start(explicit: Option<&Path>, data_dir: &Path) -> Result<Option<Applied>, String> {
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None => data_dir.join(PROFILE_FILE),
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => return Ok(None),
        Err(e) => return Err(format!("cannot read iotune file {}: {e}", path.display())),
    };
    let recommended = parse_for_start(&text).map_err(|e| format!("invalid iotune file {}: {e}", path.display()))?;
    Ok(Some(Applied { path, recommended }))
}

/// The recommendations of a profile's text (`skein_tuning::profile::parse`), checked
/// against the engine's bounds too.
fn parse_for_start(text: &str) -> Result<Recommended, String> {
    let recommended = skein_tuning::profile::parse(text)?;
    write_shape(&recommended).validate().map_err(|e| e.to_string())?;
    Ok(recommended)
}

/// The group commit's effective maximum delay: the configured one, capped by the
/// profile's window. Zero (off) stays off: a profile never turns group commit on.
pub fn group_commit_cap(configured_us: u64, applied: Option<&Applied>) -> u64 {
    match applied {
        Some(applied) if configured_us > 0 => configured_us.min(applied.recommended.group_commit_window_us),
        _ => configured_us,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sequential(rows: &[(usize, usize, f64)]) -> Vec<Bandwidth> {
        rows.iter()
            .map(|&(block_bytes, depth, mb_per_s)| Bandwidth {
                block_bytes,
                depth,
                mb_per_s,
                latency_us_p50: 0,
                latency_us_p99: 0,
            })
            .collect()
    }

    fn latency(p50: u64) -> Latency {
        Latency { rounds: 100, latency_us_p50: p50, latency_us_p99: p50 * 3 }
    }

    // The knee is the smallest depth at 90% of the best, whatever the order; a curve
    // with nothing positive has none.
    #[test]
    fn knees() {
        let check = |points: &[(usize, f64)], expected: Option<usize>| {
            assert_eq!(knee(points.iter().copied()), expected, "{points:?}");
        };
        check(&[(1, 100.0), (2, 180.0), (4, 300.0), (8, 320.0), (16, 330.0)], Some(4));
        check(&[(16, 330.0), (1, 100.0), (8, 320.0), (4, 300.0)], Some(4));
        check(&[(1, 500.0), (2, 500.0)], Some(1));
        // A dip after the peak does not move the knee.
        check(&[(1, 10.0), (2, 95.0), (4, 100.0), (8, 60.0)], Some(2));
        check(&[(1, 0.0), (2, 0.0)], None);
        check(&[], None);
        check(&[(1, f64::NAN), (2, 10.0)], Some(2));
    }

    // The chunk is the smallest block size whose best reaches 90% of the best of all;
    // the depth is that block size's knee, bounded by the tail-buffer cap.
    #[test]
    fn chunk_and_depth() {
        let kib = |k: usize| k << 10;
        let rows = sequential(&[
            (kib(128), 1, 200.0),
            (kib(128), 8, 700.0),
            (kib(512), 1, 400.0),
            (kib(512), 4, 930.0),
            (kib(512), 8, 960.0),
            (kib(1024), 8, 1000.0),
            (kib(2048), 8, 990.0),
        ]);
        let r = recommend(&rows, &latency(150));
        assert_eq!((r.append_chunk_bytes, r.writes_in_flight, r.group_commit_window_us), (kib(512), 4, 150));
        // A device that is as fast with 128 KiB writes takes the smallest chunk.
        let flat = sequential(&[(kib(128), 2, 950.0), (kib(128), 1, 500.0), (kib(2048), 2, 1000.0)]);
        let r = recommend(&flat, &latency(80));
        assert_eq!((r.append_chunk_bytes, r.writes_in_flight), (kib(128), 2));
        // 2 MiB chunks at a knee of 32: the tail buffer allows 8.
        let deep = sequential(&[(kib(2048), 1, 100.0), (kib(2048), 16, 500.0), (kib(2048), 32, 1000.0)]);
        let r = recommend(&deep, &latency(80));
        assert_eq!((r.append_chunk_bytes, r.writes_in_flight), (kib(2048), 8));
        write_shape(&r).validate().unwrap();
        // Nothing measured: the defaults.
        let r = recommend(&[], &latency(0));
        assert_eq!(write_shape(&r), WriteShape::default());
        assert_eq!(r.group_commit_window_us, 1);
        // A slow disk's window is capped at what --group-commit-max-delay-us takes.
        assert_eq!(recommend(&rows, &latency(250_000)).group_commit_window_us, GROUP_COMMIT_WINDOW_US_MAX);
    }

    // Start reads a profile's recommendations and refuses, with the reason, values out
    // of the engine's bounds (the format's own checks are `skein_tuning::profile`'s).
    #[test]
    fn profiles_at_start() {
        let good = r#"{"format_version": 1, "measured_at": "x", "recommended":
            {"append_chunk_bytes": 1048576, "writes_in_flight": 4, "group_commit_window_us": 90}}"#;
        let r = parse_for_start(good).unwrap();
        assert_eq!((r.append_chunk_bytes, r.writes_in_flight, r.group_commit_window_us), (1 << 20, 4, 90));
        let check = |text: &str, expected: &str| {
            let error = parse_for_start(text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        };
        check("{", "not JSON");
        check(&good.replace("1048576", "1000000"), "append_chunk_bytes");
        check(&good.replace("\"writes_in_flight\": 4", "\"writes_in_flight\": 0"), "writes_in_flight");
    }

    // A profile caps an enabled group commit and never turns it on.
    #[test]
    fn group_commit_caps() {
        let applied = Applied {
            path: PathBuf::from("p"),
            recommended: Recommended {
                append_chunk_bytes: 512 << 10,
                writes_in_flight: 8,
                group_commit_window_us: 120,
            },
        };
        assert_eq!(group_commit_cap(0, Some(&applied)), 0);
        assert_eq!(group_commit_cap(500, Some(&applied)), 120);
        assert_eq!(group_commit_cap(50, Some(&applied)), 50);
        assert_eq!(group_commit_cap(500, None), 500);
    }
}
