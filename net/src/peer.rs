//! Kafka requests this broker sends other brokers (replica fetches, transaction
//! markers): one request written and its response read on a glommio connection.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

/// The largest response a peer may send.
const RESPONSE_MAX_BYTES: usize = 64 << 20;

/// Sends `request` at `version` with `correlation` and reads its response, checked to
/// be whole and to answer this request.
///
/// # Errors
/// The connection's error, or `InvalidData` for a response that does not decode.
pub async fn exchange<R: Request>(
    stream: &mut glommio::net::TcpStream,
    request: &R,
    version: i16,
    correlation: i32,
    client_id: &str,
) -> std::io::Result<R::Response> {
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation)
        .with_client_id(Some(StrBytes::from_string(client_id.to_string())));
    let mut frame = BytesMut::new();
    frame.put_i32(0);
    header.encode(&mut frame, <R as HeaderVersion>::header_version(version)).map_err(|e| invalid(e.to_string()))?;
    request.encode(&mut frame, version).map_err(|e| invalid(e.to_string()))?;
    let length = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&length.to_be_bytes());
    stream.write_all(&frame).await?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).await?;
    let size = i32::from_be_bytes(size);
    if size < 0 || size as usize > RESPONSE_MAX_BYTES {
        return Err(invalid(format!("response of {size} bytes")));
    }
    let mut body = vec![0u8; size as usize];
    stream.read_exact(&mut body).await?;
    let mut body = Bytes::from(body);
    let response_header_version = <R::Response as HeaderVersion>::header_version(version);
    let header = ResponseHeader::decode(&mut body, response_header_version).map_err(|e| invalid(e.to_string()))?;
    if header.correlation_id != correlation {
        return Err(invalid(format!("correlation {} for {correlation}", header.correlation_id)));
    }
    let response = R::Response::decode(&mut body, version).map_err(|e| invalid(e.to_string()))?;
    if body.has_remaining() {
        return Err(invalid(format!("trailing bytes in a response to API {}", R::KEY)));
    }
    Ok(response)
}
