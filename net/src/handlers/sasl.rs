//! SaslHandshake and SaslAuthenticate that reach a handler: on a SASL listener the
//! connection answers them itself (`security::sasl`), so these come from a connection
//! that is not SASL, and get ILLEGAL_SASL_STATE as from a Java broker.

use kafka_protocol::messages::{SaslAuthenticateResponse, SaslHandshakeResponse};
use kafka_protocol::protocol::VersionRange;
use skein_control::errors::code;

use super::s;

pub const HANDSHAKE_VERSIONS: VersionRange = VersionRange { min: 0, max: 1 };
pub const AUTHENTICATE_VERSIONS: VersionRange = VersionRange { min: 0, max: 2 };

pub fn handshake() -> SaslHandshakeResponse {
    let mut response = SaslHandshakeResponse::default();
    response.error_code = code::ILLEGAL_SASL_STATE;
    response
}

pub fn authenticate() -> SaslAuthenticateResponse {
    let mut response = SaslAuthenticateResponse::default();
    response.error_code = code::ILLEGAL_SASL_STATE;
    response.error_message = Some(s("SaslAuthenticate on a listener without SASL"));
    response
}
