//! The small files a partition keeps beside its segments, each fed to the parser its
//! recovery uses: the engine's checkpoint and leader-epoch files, the replication
//! checkpoint (high watermarks), offset and time indexes, and producer snapshots. The
//! first byte picks the file and whether the target puts the body behind a valid
//! checksum (so that the parser behind the CRC is reached). A damaged file is refused
//! (`None` or `Err`), never trusted: what a parser accepts must survive its own
//! encoding unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skein_engine::checkpoint::{Checkpoint, LeaderEpochCache};
use skein_engine::index::{OffsetIndex, TimeIndex};
use skein_engine::Offset;
use skein_replication::producer::ProducerStates;

fuzz_target!(|data: &[u8]| {
    let [pick, body @ ..] = data else { return };
    match pick % 8 {
        0 => {
            if let Some(checkpoint) = Checkpoint::decode(body) {
                assert_eq!(Checkpoint::decode(&checkpoint.encode()), Some(checkpoint));
            }
        }
        1 => {
            // A body behind a valid CRC line.
            let Ok(text) = std::str::from_utf8(body) else { return };
            let text = format!("{}\n", text.trim_end_matches('\n'));
            let file = format!("{text}crc {}\n", crc32c::crc32c(text.as_bytes()));
            if let Some(checkpoint) = Checkpoint::decode(file.as_bytes()) {
                assert_eq!(Checkpoint::decode(&checkpoint.encode()), Some(checkpoint));
            }
        }
        2 => {
            if let Some(epochs) = LeaderEpochCache::decode(body) {
                assert_eq!(LeaderEpochCache::decode(&epochs.encode()), Some(epochs));
            }
        }
        3 => {
            if let Some(watermarks) = skein_replication::checkpoint::decode(body) {
                let pairs: Vec<_> = watermarks.iter().map(|(p, o)| (p.clone(), *o)).collect();
                let again = skein_replication::checkpoint::decode(&skein_replication::checkpoint::encode(&pairs));
                assert_eq!(again, Some(watermarks));
            }
        }
        4 => {
            let Some((log_bytes, index)) = body.split_first_chunk::<4>() else { return };
            if let Ok(index) = OffsetIndex::decode(index, u64::from(u32::from_be_bytes(*log_bytes))) {
                let _ = index.len();
            }
        }
        5 => {
            if let Ok(index) = TimeIndex::decode(body) {
                let _ = index.len();
            }
        }
        6 | 7 => {
            let file = match pick % 8 {
                6 => body.to_vec(),
                // The header with the body's CRC (the magic as a fresh snapshot has it).
                _ => {
                    let fresh = ProducerStates::default().snapshot_below(Offset(0));
                    let header = fresh.iter().position(|&b| b == b'\n').unwrap_or(0).saturating_sub(8);
                    let mut file = fresh[..header].to_vec();
                    file.extend_from_slice(format!("{:08x}\n", crc32c::crc32c(body)).as_bytes());
                    file.extend_from_slice(body);
                    file
                }
            };
            let Ok(mut states) = ProducerStates::from_snapshot(&file) else { return };
            // What recovery does with a loaded snapshot: the head cut to the log start,
            // the tail to the log end, and a new snapshot taken.
            let again = ProducerStates::from_snapshot(&states.snapshot_below(Offset(i64::MAX))).expect("own snapshot");
            assert_eq!(again.len(), states.len());
            states.truncate_head(Offset(10));
            states.truncate(Offset(1_000));
            let _ = states.describe();
            ProducerStates::from_snapshot(&states.snapshot_below(Offset(500))).expect("own snapshot");
        }
        _ => unreachable!("pick % 8"),
    }
});
