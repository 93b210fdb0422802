//! The controller quorum's journal as a node reads it back at start: `quorum.state`
//! (a snapshot, a hard state and entries, behind a CRC) and `quorum.log` (frames
//! replayed onto it), then raft started from the result and driven a few ticks. The
//! fuzzer writes the bodies; the target puts them behind valid headers and CRCs most
//! of the time, so that the decoders behind the checksums are reached. A damaged or
//! inconsistent journal must be refused with a message, never panic raft.
//!
//! Input: a mode byte, then a u16 length and the state body, then frames (a u16
//! length and a body each) until the input ends.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skein_replication::quorum::journal::{encode_frame, load, state_file, BLOCK};
use skein_replication::quorum::{Durable, Quorum, QuorumConfig};

fn take<'a>(data: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (len, rest) = data.split_first_chunk::<2>()?;
    let len = (u16::from_be_bytes(*len) as usize).min(rest.len());
    let (chunk, rest) = rest.split_at(len);
    *data = rest;
    Some(chunk)
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else { return };
    let Some(state_body) = take(&mut rest) else { return };
    let generation = u64::from(mode >> 4);
    // Low bits: whether the state and the frames carry valid headers, and whether there
    // is a state file at all.
    let state = match mode & 3 {
        0 => None,
        1 => Some(state_body.to_vec()),
        _ => Some(state_file(generation, state_body)),
    };
    let mut log = Vec::new();
    let mut sequence = 0;
    while let Some(body) = take(&mut rest) {
        let frame = match mode & 4 {
            0 => encode_frame(generation, sequence, body),
            _ => body.to_vec(),
        };
        log.extend_from_slice(&frame);
        log.resize(log.len().div_ceil(BLOCK as usize) * BLOCK as usize, 0);
        sequence += 1;
    }
    let bootstrap = || Durable::bootstrap(&[1, 2, 3], b"image".to_vec());
    let Ok((_, durable, _)) = load(state.as_deref(), Some(&log), bootstrap) else { return };
    let Ok(voters) = Quorum::voters_of(&durable) else { return };
    let Some(&me) = voters.first() else { return };
    let Ok(mut quorum) = Quorum::new(&QuorumConfig::new(me, voters), durable) else { return };
    // Raft runs on what it loaded: elections, its first readies.
    for _ in 0..30 {
        quorum.tick();
        if let Some(work) = quorum.ready() {
            let _ = work.committed.len();
            quorum.advance();
        }
    }
});
