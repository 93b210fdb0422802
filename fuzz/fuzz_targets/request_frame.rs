//! A request frame's body (header and request), as every connection decodes what it
//! reads (`skein_net::server::decode_frame`): each API and version that
//! `registry::APIS` advertises, through the vendored, length-checked decoders. It
//! must answer an error or a request, never panic or allocate past the frame's size.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = skein_net::server::decode_frame(bytes::Bytes::copy_from_slice(data));
});
