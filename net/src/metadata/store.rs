//! The single-node metadata format of earlier versions, read once so that the
//! metadata log (`quorum`) can take a data directory over: a snapshot of the image
//! (`image.json`) and a log of the record batches decided since (`records.log`).
//!
//! The log was a file of fixed size whose frames each started on a 4 KiB boundary:
//! magic, generation, image version, length, CRC-32C, JSON records. Frames of the
//! snapshot's generation apply in version order up to the first that does not check
//! (a torn last write, or an older generation's leftovers).

use std::path::Path;

use super::{MetadataImage, MetadataRecord};

const BLOCK: u64 = 4096;
const MAGIC: u32 = 0x534b_4d4c; // "SKML"
const HEADER: usize = 4 + 8 + 8 + 4 + 4;

/// The image held in the old format under `dir` (`<data>/__skein_metadata`), if any.
/// Blocking: for the main thread, before the shards start.
///
/// # Errors
/// A message when a file exists but cannot be read or parsed.
pub fn load_legacy(dir: &Path) -> Result<Option<MetadataImage>, String> {
    let path = dir.join("image.json");
    let mut image = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice::<MetadataImage>(&bytes)
            .map_err(|e| format!("cannot parse {}: {e}", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let log_path = dir.join("records.log");
    match std::fs::read(&log_path) {
        Ok(log) => {
            replay(&log, &mut image);
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot read {}: {e}", log_path.display())),
    }
    image.index_ids();
    Ok(Some(image))
}

/// Applies the frames of `image`'s generation, in version order, to `image`; returns
/// how many.
fn replay(log: &[u8], image: &mut MetadataImage) -> usize {
    let mut position = 0usize;
    let mut applied = 0;
    while position + HEADER <= log.len() {
        let field = |at: usize, len: usize| &log[position + at..position + at + len];
        let magic = u32::from_be_bytes(field(0, 4).try_into().expect("4 bytes"));
        let generation = u64::from_be_bytes(field(4, 8).try_into().expect("8 bytes"));
        let version = u64::from_be_bytes(field(12, 8).try_into().expect("8 bytes"));
        let length = u32::from_be_bytes(field(20, 4).try_into().expect("4 bytes")) as usize;
        let crc = u32::from_be_bytes(field(24, 4).try_into().expect("4 bytes"));
        if magic != MAGIC || generation != image.log_generation || version != image.version + 1 {
            break;
        }
        let Some(body) = log.get(position + HEADER..position + HEADER + length) else { break };
        if crc32c::crc32c_append(crc32c::crc32c(field(4, 20)), body) != crc {
            break;
        }
        let Ok(records) = serde_json::from_slice::<Vec<MetadataRecord>>(body) else { break };
        image.apply(&records);
        applied += 1;
        position += ((HEADER + length) as u64).div_ceil(BLOCK) as usize * BLOCK as usize;
    }
    applied
}

/// Writes a data directory in the old format: `image` as `image.json` and `batches`
/// as frames of `records.log` after it, the last one torn when `torn`. For tests of
/// the take-over.
#[cfg(test)]
pub fn write_legacy(dir: &Path, image: &MetadataImage, batches: &[Vec<MetadataRecord>], torn: bool) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("image.json"), serde_json::to_vec(image).unwrap()).unwrap();
    let mut log = Vec::new();
    for (n, records) in batches.iter().enumerate() {
        let body = serde_json::to_vec(records).unwrap();
        let mut frame = Vec::new();
        frame.extend_from_slice(&MAGIC.to_be_bytes());
        frame.extend_from_slice(&image.log_generation.to_be_bytes());
        frame.extend_from_slice(&(image.version + 1 + n as u64).to_be_bytes());
        frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
        let mut crc = crc32c::crc32c_append(crc32c::crc32c(&frame[4..]), &body);
        if torn && n + 1 == batches.len() {
            crc ^= 1;
        }
        frame.extend_from_slice(&crc.to_be_bytes());
        frame.extend_from_slice(&body);
        frame.resize(((frame.len() as u64).div_ceil(BLOCK) * BLOCK) as usize, 0);
        log.extend_from_slice(&frame);
    }
    std::fs::write(dir.join("records.log"), log).unwrap();
}
