//! Kafka requests this broker sends other brokers (replica fetches, transaction
//! markers and their verification): a connection to another broker's inter-broker
//! listener, secured as that listener is (TLS with this node's certificate, then a
//! SASL login as the broker's user), and one request written and its response read
//! on it.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use kafka_protocol::messages::{RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use crate::errors::code;
use crate::limits::PEER_CONNECT_TIMEOUT;
use crate::security::login::LoginExchange;
use crate::security::Security;

/// The largest response a peer may send.
const RESPONSE_MAX_BYTES: usize = 64 << 20;

/// A connection to another broker.
pub struct PeerStream {
    inner: Inner,
    /// When to log in again on a new connection: at 85% of the SASL session the
    /// other broker granted (`connections.max.reauth.ms`), as Kafka's clients
    /// re-authenticate before the session lapses.
    renew_at: Option<Instant>,
}

enum Inner {
    Plain(glommio::net::TcpStream),
    Tls(Box<futures_rustls::TlsStream<glommio::net::TcpStream>>),
}

impl std::fmt::Debug for PeerStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tls = matches!(self.inner, Inner::Tls(_));
        f.debug_struct("PeerStream").field("tls", &tls).field("renew_at", &self.renew_at).finish()
    }
}

impl PeerStream {
    /// A plaintext connection.
    pub fn plain(tcp: glommio::net::TcpStream) -> PeerStream {
        let _ = tcp.set_nodelay(true);
        PeerStream { inner: Inner::Plain(tcp), renew_at: None }
    }

    /// The client side of a TLS connection to `name` over `tcp`.
    ///
    /// # Errors
    /// The handshake's: a certificate the trust store does not vouch for, or one
    /// that does not name `name`.
    pub async fn tls_client(
        config: Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
        tcp: glommio::net::TcpStream,
    ) -> io::Result<PeerStream> {
        let _ = tcp.set_nodelay(true);
        let stream = futures_rustls::TlsConnector::from(config).connect(name, tcp).await?;
        Ok(PeerStream { inner: Inner::Tls(Box::new(stream.into())), renew_at: None })
    }

    /// The server side of a TLS connection accepted as `tcp`.
    ///
    /// # Errors
    /// The handshake's: garbage, or a client certificate the config refuses.
    pub async fn tls_server(config: Arc<rustls::ServerConfig>, tcp: glommio::net::TcpStream) -> io::Result<PeerStream> {
        let _ = tcp.set_nodelay(true);
        let stream = futures_rustls::TlsAcceptor::from(config).accept(tcp).await?;
        Ok(PeerStream { inner: Inner::Tls(Box::new(stream.into())), renew_at: None })
    }

    /// The SASL session this connection carries is about to lapse: connect anew
    /// before the next request.
    pub fn stale(&self) -> bool {
        self.renew_at.is_some_and(|at| Instant::now() >= at)
    }
}

impl AsyncRead for PeerStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().inner {
            Inner::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            Inner::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for PeerStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().inner {
            Inner::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            Inner::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().inner {
            Inner::Plain(stream) => Pin::new(stream).poll_flush(cx),
            Inner::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().inner {
            Inner::Plain(stream) => Pin::new(stream).poll_close(cx),
            Inner::Tls(stream) => Pin::new(stream.as_mut()).poll_close(cx),
        }
    }
}

/// Connects to another broker's inter-broker listener at `host:port`, secured as
/// `security.inter_broker` says, within `PEER_CONNECT_TIMEOUT`.
///
/// # Errors
/// The connection's or the TLS handshake's error; `PermissionDenied` when the other
/// broker refuses the login (its message kept); `TimedOut`.
pub async fn connect(security: &Security, host: &str, port: u16, client_id: &str) -> io::Result<PeerStream> {
    let connecting = async {
        let tcp = glommio::net::TcpStream::connect(format!("{host}:{port}")).await?;
        let protocol = security.inter_broker.protocol;
        let mut stream = match protocol.tls() {
            false => PeerStream::plain(tcp),
            true => {
                let config = peer_tls(security)?;
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("server name {host}: {e}")))?;
                PeerStream::tls_client(config, name, tcp).await?
            }
        };
        if protocol.sasl() {
            let lifetime = login(security, &mut stream, client_id).await?;
            stream.renew_at = lifetime.map(|ms| Instant::now() + Duration::from_millis(ms * 85 / 100));
        }
        Ok(stream)
    };
    let timeout = async {
        glommio::timer::sleep(PEER_CONNECT_TIMEOUT).await;
        Err(io::Error::new(io::ErrorKind::TimedOut, format!("connecting to {host}:{port} timed out")))
    };
    futures_lite::future::or(connecting, timeout).await
}

/// The TLS client config for other nodes (`tls::Tls::peer_config`).
///
/// # Errors
/// `InvalidInput` when no trust store is configured.
pub fn peer_tls(security: &Security) -> io::Result<Arc<rustls::ClientConfig>> {
    security
        .tls
        .as_ref()
        .and_then(|tls| tls.peer_config())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "TLS to another node needs --ssl-truststore-pem"))
}

/// SaslHandshake v1, then the login's tokens in SaslAuthenticate v2 (KIP-152). Returns
/// the session's lifetime in milliseconds when the other broker bounds it.
async fn login(security: &Security, stream: &mut PeerStream, client_id: &str) -> io::Result<Option<u64>> {
    let refused = |what: String| io::Error::new(io::ErrorKind::PermissionDenied, what);
    let login =
        security.inter_broker.login.as_ref().ok_or_else(|| refused("no inter-broker SASL login is set".into()))?;
    let mechanism = login.mechanism.name();
    let handshake = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism));
    let answer = exchange(stream, &handshake, 1, 0, client_id).await?;
    if answer.error_code != code::NONE {
        return Err(refused(format!("SASL {mechanism}: the broker answers error {}", answer.error_code)));
    }
    let mut exchange_state = LoginExchange::new(login);
    let mut token = exchange_state.first();
    let mut correlation = 0;
    // Each answer moves the login on or ends it: PLAIN takes one token, SCRAM two.
    loop {
        correlation += 1;
        let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
        let answer = exchange(stream, &request, 2, correlation, client_id).await?;
        if answer.error_code != code::NONE {
            let message = answer.error_message.as_deref().unwrap_or("");
            return Err(refused(format!("SASL {mechanism} as {}: error {} {message}", login.user, answer.error_code)));
        }
        match exchange_state.answer(&answer.auth_bytes).map_err(refused)? {
            Some(next) => token = next,
            None => return Ok((answer.session_lifetime_ms > 0).then_some(answer.session_lifetime_ms as u64)),
        }
    }
}

/// One request on a connection of its own to `host:port`, answered within `timeout`
/// (connecting included): a coordinator's call to another broker.
///
/// # Errors
/// As `connect` and `exchange`, or `TimedOut`.
pub async fn call<R: Request>(
    security: &Security,
    host: &str,
    port: u16,
    client_id: &str,
    request: &R,
    version: i16,
    timeout: Duration,
) -> io::Result<R::Response> {
    let call = async {
        let mut stream = connect(security, host, port, client_id).await?;
        exchange(&mut stream, request, version, 1, client_id).await
    };
    within(timeout, call).await
}

/// `call`'s answer, or `TimedOut` once `timeout` passed.
async fn within<T>(timeout: Duration, call: impl std::future::Future<Output = io::Result<T>>) -> io::Result<T> {
    let expired = async {
        glommio::timer::sleep(timeout).await;
        Err(io::Error::new(io::ErrorKind::TimedOut, "timed out"))
    };
    futures_lite::future::or(call, expired).await
}

/// Idle connections to other brokers kept per address for the next call, on this
/// thread (a shard's executor): at most this many each.
const IDLE_PER_ADDRESS_MAX: usize = 4;

thread_local! {
    static IDLE: std::cell::RefCell<std::collections::HashMap<(String, u16), Vec<PeerStream>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// `call` on a pooled connection: one left idle by an earlier call to `host:port` on
/// this shard, else a new one; it goes back to the pool once answered (one request
/// at a time on each), and is dropped on any error or timeout. A pooled connection
/// that fails is replaced and the request sent once more, so `request` must be one
/// that may be repeated. For calls many in a row, as a share-partition leader's state
/// writes to its share coordinator.
///
/// # Errors
/// As `call`.
pub async fn pooled_call<R: Request>(
    security: &Security,
    host: &str,
    port: u16,
    client_id: &str,
    request: &R,
    version: i16,
    timeout: Duration,
) -> io::Result<R::Response> {
    let address = (host.to_string(), port);
    let idle = IDLE.with(|idle| {
        let mut idle = idle.borrow_mut();
        let streams = idle.get_mut(&address)?;
        while let Some(stream) = streams.pop() {
            if !stream.stale() {
                return Some(stream);
            }
        }
        None
    });
    let keep = |stream: PeerStream| {
        IDLE.with(|idle| {
            let mut idle = idle.borrow_mut();
            let streams = idle.entry(address.clone()).or_default();
            if streams.len() < IDLE_PER_ADDRESS_MAX {
                streams.push(stream);
            }
        })
    };
    let call = async {
        if let Some(mut stream) = idle {
            if let Ok(response) = exchange(&mut stream, request, version, 1, client_id).await {
                keep(stream);
                return Ok(response);
            }
            // The peer closed the idle connection meanwhile: once more on a new one
            // (the calls this pool carries may be repeated: each sets a whole state).
        }
        let mut stream = connect(security, host, port, client_id).await?;
        let response = exchange(&mut stream, request, version, 1, client_id).await?;
        keep(stream);
        Ok(response)
    };
    within(timeout, call).await
}

/// Sends `request` at `version` with `correlation` and reads its response, checked to
/// be whole and to answer this request.
///
/// # Errors
/// The connection's error, or `InvalidData` for a response that does not decode.
pub async fn exchange<R: Request, S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    request: &R,
    version: i16,
    correlation: i32,
    client_id: &str,
) -> io::Result<R::Response> {
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
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
    // TLS holds records until flushed.
    stream.flush().await?;
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
