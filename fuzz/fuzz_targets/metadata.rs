//! The metadata a node reads back or is sent: a snapshot of the image (rkyv, checked
//! by its CRC and validated before use, every format version), and a metadata log
//! entry (a proposal's records, JSON) applied to an image. The first byte picks
//! which. A damaged snapshot must be refused, never trusted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skein_control::metadata::log::{decode_image, Proposal};

fuzz_target!(|data: &[u8]| {
    let [pick, rest @ ..] = data else { return };
    if pick % 2 == 0 {
        let _ = decode_image(rest);
        return;
    }
    let Ok(proposal) = serde_json::from_slice::<Proposal>(rest) else { return };
    let mut image = skein_control::metadata::MetadataImage::default();
    image.apply(&proposal.records);
    // What it applied survives a snapshot.
    let again = decode_image(&skein_control::metadata::log::encode_image(&image)).expect("a fresh snapshot decodes");
    assert_eq!(again.version, image.version);
});
