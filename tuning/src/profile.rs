//! The recommendations of a device profile (`skein iotune`'s `iotune.json`) as a node
//! reads them at start (`parse`): the appender's chunk and writes in flight, and the
//! cap on the group commit's window. Each value is named when it is missing, mistyped
//! or out of range; the engine's bounds on the write shape are checked by the binary,
//! which knows the engine. No I/O here: the text comes from the caller.

use serde::{Deserialize, Serialize};

/// The profile's format. A file of a later format is refused at start, never guessed at.
pub const FORMAT_VERSION: u32 = 1;

/// The group commit window a profile may hold, in µs: what
/// `--group-commit-max-delay-us` takes at most.
pub const GROUP_COMMIT_WINDOW_US_MAX: u64 = 100_000;

/// The keys of a profile's `recommended` object.
const RECOMMENDED_KEYS: [&str; 3] = ["append_chunk_bytes", "writes_in_flight", "group_commit_window_us"];

/// What `skein start` applies (`skein iotune`'s `recommend` states the rules).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Recommended {
    /// The appender's chunk: the size of a full write.
    pub append_chunk_bytes: usize,
    /// Writes in flight per log file.
    pub writes_in_flight: usize,
    /// The cap on the adaptive group commit's window, in µs, when group commit is on.
    pub group_commit_window_us: u64,
}

/// The recommendations of a profile's text, checked but for the engine's bounds.
///
/// # Errors
/// Why the text is not a profile this version reads: not JSON, no or a later format,
/// a recommendation missing, mistyped, unknown or out of range.
pub fn parse(text: &str) -> Result<Recommended, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    match value.get("format_version").and_then(serde_json::Value::as_u64) {
        None => return Err("no format_version: not a profile written by skein iotune".into()),
        Some(version) if version > u64::from(FORMAT_VERSION) => {
            return Err(format!(
                "format {version} is newer than this skein reads ({FORMAT_VERSION}): run this version's skein iotune"
            ))
        }
        Some(version) if version != u64::from(FORMAT_VERSION) => {
            return Err(format!("format_version is not {FORMAT_VERSION}, the one this skein reads"))
        }
        Some(_) => {}
    }
    // Only the recommendations are read; the measurements are for people. Each is
    // named when missing or mistyped, and an unknown key is refused (a typo would
    // otherwise leave a default in place silently).
    let Some(values) = value.get("recommended").and_then(serde_json::Value::as_object) else {
        return Err("no recommended values".into());
    };
    if let Some(unknown) = values.keys().find(|k| !RECOMMENDED_KEYS.contains(&k.as_str())) {
        return Err(format!("unknown key recommended.{unknown}"));
    }
    let number = |name: &str| {
        values
            .get(name)
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| format!("recommended.{name} is missing or not a whole number"))
    };
    let whole = |name: &str| {
        number(name).and_then(|n| usize::try_from(n).map_err(|_| format!("recommended.{name} {n} is too large")))
    };
    let recommended = Recommended {
        append_chunk_bytes: whole("append_chunk_bytes")?,
        writes_in_flight: whole("writes_in_flight")?,
        group_commit_window_us: number("group_commit_window_us")?,
    };
    if !(1..=GROUP_COMMIT_WINDOW_US_MAX).contains(&recommended.group_commit_window_us) {
        return Err(format!(
            "group_commit_window_us {} is out of [1, {GROUP_COMMIT_WINDOW_US_MAX}]",
            recommended.group_commit_window_us
        ));
    }
    Ok(recommended)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A profile's recommendations are read; what is not a profile, a later format, and
    // a value missing, mistyped, unknown or out of range are refused with the reason.
    #[test]
    fn profiles_are_read_and_refused_with_the_reason() {
        let good = r#"{"format_version": 1, "measured_at": "x", "recommended":
            {"append_chunk_bytes": 1048576, "writes_in_flight": 4, "group_commit_window_us": 90}}"#;
        let r = parse(good).unwrap();
        assert_eq!((r.append_chunk_bytes, r.writes_in_flight, r.group_commit_window_us), (1 << 20, 4, 90));
        let check = |text: &str, expected: &str| {
            let error = parse(text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        };
        check("{", "not JSON");
        check("[]", "no format_version");
        check(r#"{"format_version": 2, "recommended": {}}"#, "format 2 is newer");
        check(r#"{"format_version": 0, "recommended": {}}"#, "format_version is not 1");
        check(&good.replace("\"writes_in_flight\": 4,", ""), "recommended.writes_in_flight is missing");
        check(r#"{"format_version": 1}"#, "recommended");
        check(&good.replace("90}", "0}"), "group_commit_window_us");
        check(&good.replace("90}", "90, \"extra\": 1}"), "extra");
        check(&good.replace("1048576", "\"big\""), "append_chunk_bytes");
    }
}
