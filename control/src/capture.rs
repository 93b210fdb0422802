//! A test-only hook for the fuzz targets' seed corpus (`fuzz/seeds.sh`): with
//! `SKEIN_CAPTURE_FRAMES=DIR` in the environment, every request frame a connection
//! decodes is kept in `DIR/request_frame/`, and each produce's record batches in
//! `DIR/produce_batch/`, one file per distinct input (named by its CRC-32C). Frames go
//! to a thread of its own over a bounded channel, so the executor never touches the
//! file system; what the thread cannot keep up with is dropped. Off, it costs one
//! atomic load per frame.

use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::OnceLock;

/// Inputs waiting for the writer thread; past it they are dropped.
const CAPTURE_QUEUE: usize = 1024;

/// An input for a fuzz target: the target's name and the bytes.
type Input = (&'static str, Vec<u8>);

static CAPTURE: OnceLock<Option<SyncSender<Input>>> = OnceLock::new();

fn sender() -> Option<&'static SyncSender<Input>> {
    CAPTURE
        .get_or_init(|| {
            let dir = PathBuf::from(std::env::var_os("SKEIN_CAPTURE_FRAMES")?);
            let (sender, inputs) = sync_channel::<Input>(CAPTURE_QUEUE);
            std::thread::Builder::new()
                .name("skein-capture".into())
                .spawn(move || {
                    for (target, input) in inputs {
                        let dir = dir.join(target);
                        let _ = std::fs::create_dir_all(&dir);
                        let _ = std::fs::write(dir.join(format!("{:08x}", crc32c::crc32c(&input))), &input);
                    }
                })
                .ok()?;
            Some(sender)
        })
        .as_ref()
}

/// Keeps `input` for fuzz target `target`, when capturing.
pub fn keep(target: &'static str, input: &[u8]) {
    if let Some(sender) = sender() {
        let _ = sender.try_send((target, input.to_vec()));
    }
}

/// Whether inputs are being captured.
pub fn on() -> bool {
    sender().is_some()
}

/// Writes `input` as seed `name` of fuzz target `target` under `$SKEIN_FUZZ_SEEDS`,
/// when that is set: for the unit tests that build inputs no client sends (snapshots,
/// pushes of every codec). Blocking: tests only.
pub fn seed(target: &str, name: &str, input: &[u8]) {
    let Some(dir) = std::env::var_os("SKEIN_FUZZ_SEEDS") else { return };
    let dir = PathBuf::from(dir).join(target);
    std::fs::create_dir_all(&dir).expect("the seed directory");
    std::fs::write(dir.join(name), input).expect("a seed file");
}
