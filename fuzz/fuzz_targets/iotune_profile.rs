//! The device profile a node reads at start (`iotune.json`, `skein iotune`'s output):
//! any text is refused with a reason or read into recommendations within their bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skein_tuning::profile::{parse, GROUP_COMMIT_WINDOW_US_MAX};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match parse(text) {
        Ok(recommended) => {
            assert!((1..=GROUP_COMMIT_WINDOW_US_MAX).contains(&recommended.group_commit_window_us));
            // What is read is what the text says: written back, it reads the same.
            let again = format!(
                r#"{{"format_version": 1, "recommended": {}}}"#,
                serde_json::to_string(&recommended).expect("recommendations serialise")
            );
            assert_eq!(parse(&again), Ok(recommended));
        }
        Err(reason) => assert!(!reason.is_empty()),
    }
});
