//! A produce's record batch as the partition leader takes it: framed and checked
//! (`Batch::validate_fresh`), then admitted by the topic's rules (`append::admit`):
//! records decoded for each codec (none, gzip, snappy, lz4, zstd) within the
//! decompression bound, keys checked for compacted topics, timestamps checked or
//! stamped, and the batch recompressed to the topic's codec. The first byte picks the
//! topic's rules.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;

const RULES: [&[(&str, &str)]; 5] = [
    &[],
    &[("cleanup.policy", "compact")],
    &[("compression.type", "zstd")],
    &[("compression.type", "gzip"), ("message.timestamp.type", "LogAppendTime")],
    &[("message.timestamp.before.max.ms", "1000"), ("message.timestamp.after.max.ms", "1000")],
];

fuzz_target!(|data: &[u8]| {
    let [pick, batch @ ..] = data else { return };
    let configs: BTreeMap<String, String> =
        RULES[*pick as usize % RULES.len()].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let compacted = configs.get("cleanup.policy").is_some_and(|p| p == "compact");
    let rules = skein_control::append::AppendRules::of(&configs, &BTreeMap::new(), compacted);
    let Ok(batch) = skein_engine::batch::Batch::validate_fresh(bytes::Bytes::copy_from_slice(batch), 1 << 20) else {
        return;
    };
    let _ = skein_control::append::admit(batch, &rules, "fuzzed-0", 1_700_000_000_000);
});
