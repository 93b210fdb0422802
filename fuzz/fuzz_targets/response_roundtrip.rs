//! Responses of every advertised (API, version): what decodes is encoded, decoded back
//! and encoded again to the same bytes, so the codec Skein answers with loses nothing. The first
//! two bytes pick the API (among `registry::APIS`) and the version.
#![no_main]

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::ResponseKind;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [pick, version, body @ ..] = data else { return };
    let apis = skein_net::registry::APIS;
    let (key, range, _) = apis[*pick as usize % apis.len()];
    let span = (range.max - range.min + 1) as u8;
    let version = range.min + (*version % span) as i16;
    let mut buf = Bytes::copy_from_slice(body);
    let Ok(response) = ResponseKind::decode(key, &mut buf, version) else { return };
    let mut out = BytesMut::new();
    // A value that decodes may still not encode (a field the version cannot carry).
    if response.encode(&mut out, version).is_err() {
        return;
    }
    let first = out.freeze();
    let again = ResponseKind::decode(key, &mut first.clone(), version).expect("an encoded response decodes");
    // Compared as bytes: a float field may hold NaN, which equals nothing.
    let mut second = BytesMut::new();
    again.encode(&mut second, version).expect("a decoded response encodes");
    assert_eq!(second.freeze(), first, "{key:?} v{version}: {response:?}");
});
