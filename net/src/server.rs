//! The Kafka listener of one shard and its connections.
//!
//! Every shard binds the same address with SO_REUSEPORT (glommio's `TcpListener` sets
//! it), so the kernel spreads connections over the shards. A connection reads frames:
//! a 4-byte size checked against `socket.request.max.bytes` before anything is
//! allocated, then the request. Each request runs as its own task; a writer sends the
//! responses in request order (Kafka clients pipeline and match responses by order).
//! At most `IN_FLIGHT_REQUESTS_PER_CONNECTION` requests and
//! `CONNECTION_BUFFERED_BYTES_MAX` bytes are in flight; beyond that the connection stops
//! reading its socket. Response frames are held against the connection's and the
//! shard's response budgets until written (`budget.rs`); a fetch reads only what its
//! grant allows. A fetch response goes out as segments (`frame.rs`): its framing and
//! the record batches as they are, with vectored writes. Malformed frames close the
//! connection, as a Java broker does.
//!
//! Each shard serves every listener of the node (`security`). An SSL or SASL_SSL
//! listener's connections start with a TLS handshake, bounded in time, on the shard
//! that accepted them; their frames are then written through rustls, segment by
//! segment, instead of with vectored writes. A SASL listener's connections
//! authenticate first (`security::sasl`): the connection answers SaslHandshake and
//! SaslAuthenticate itself, in order with its other responses, takes frames of at most
//! `SASL_TOKEN_MAX_BYTES` until authenticated, and closes on any other request before.

use std::cell::Cell;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::rc::Rc;
use std::time::Instant;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};
use skein_control::limits::{
    CONNECTION_BUFFERED_BYTES_MAX, IN_FLIGHT_REQUESTS_PER_CONNECTION, SASL_TOKEN_MAX_BYTES, SHARD_BUFFERED_BYTES_MAX,
    TLS_HANDSHAKE_TIMEOUT,
};
use skein_control::security::acl::Session;
use skein_control::security::sasl::{Authenticator, Gate};
use skein_control::security::{ListenerConfig, Principal};

use crate::budget::{ConnectionResponses, Grant};
use crate::frame::{self, Frame, SharedRecords, Splicer};
use crate::registry;
use crate::shard::quotas::{self as enforce, QuotaClient};
use crate::shard::Shard;

/// Accepts connections on `config`'s listener until it fails; each runs as its own
/// task.
pub async fn serve(shard: Rc<Shard>, listener: TcpListener, config: Rc<ListenerConfig>) {
    loop {
        match listener.accept().await {
            Ok(stream) => {
                let shard = shard.clone();
                let config = config.clone();
                let ip = match stream.peer_addr() {
                    Ok(peer) => peer.ip(),
                    Err(_) => continue,
                };
                let admitted = match shard.settings.connections.admit(ip, shard.metrics.connections.get() as usize) {
                    Ok(admitted) => admitted,
                    Err(limit) => {
                        // Closed before anything is read: the client sees the
                        // connection end, as with Kafka's limits.
                        shard.metrics.connections_refused.set(shard.metrics.connections_refused.get() + 1);
                        tracing::debug!(target: "skein::net", shard = shard.id, %ip, ?limit, "connection refused by a limit");
                        drop(stream);
                        continue;
                    }
                };
                // Counted on this shard at once, so a burst of accepts meets the limit.
                shard.metrics.connections.set(shard.metrics.connections.get() + 1);
                glommio::spawn_local(async move {
                    let _admitted = admitted;
                    // KIP-612: a connection over its ip's creation rate is held for
                    // the throttle, then closed.
                    let throttle = enforce::connection_throttle(&shard, ip);
                    if !throttle.is_zero() {
                        shard.metrics.connections_throttled.set(shard.metrics.connections_throttled.get() + 1);
                        glommio::timer::sleep(throttle).await;
                        drop(stream);
                        shard.metrics.connections.set(shard.metrics.connections.get() - 1);
                        return;
                    }
                    if let Err(reason) = connection(&shard, stream, &config).await {
                        tracing::debug!(target: "skein::net", shard = shard.id, %reason, "connection closed");
                    }
                    shard.metrics.connections.set(shard.metrics.connections.get() - 1);
                })
                .detach();
            }
            Err(e) => {
                tracing::warn!(target: "skein::net", shard = shard.id, error = %e, "accept failed");
                glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}

/// A parsed request, ready for its handler.
pub struct Request {
    pub header: RequestHeader,
    pub body: RequestKind,
    pub api_key: ApiKey,
    /// The client's address, for DescribeGroups' client host.
    pub peer: String,
    /// The listener it came in on: Metadata gives the brokers' addresses on it.
    pub listener: Rc<str>,
    /// A fetch's response budget, granted by its connection before it reads the next
    /// request.
    pub grant: Option<Grant>,
    /// The frame's buffer, which a produce's batches are slices of.
    pub frame: skein_engine::Backing,
    /// Who sent it, for the ACL checks; set by the connection.
    pub session: Option<Rc<Session>>,
    /// The throttle its produce quota gave it when it was read.
    pub produce_throttle: std::time::Duration,
    /// Until when the connection reads no more requests: a quota's throttle.
    pub muted_until: Option<Rc<Cell<Instant>>>,
    /// The connection's id (the share sessions it opens close with it).
    pub connection: u64,
    /// The client's port, and its software as its ApiVersions named it (KIP-511),
    /// for client telemetry's `match`.
    pub peer_port: u16,
    pub software: Option<Rc<ClientSoftware>>,
}

/// A client's software, from its ApiVersions request (v3+).
#[derive(Debug)]
pub struct ClientSoftware {
    pub name: String,
    pub version: String,
}

/// What reading one frame gave.
enum Incoming {
    Request(Box<Request>),
    /// An ApiVersions request at a version we do not speak: answered with v0 and
    /// UNSUPPORTED_VERSION, as clients expect (KIP-511).
    UnsupportedApiVersions {
        correlation_id: i32,
    },
}

/// Why the broker closed a connection (logged at debug level).
#[derive(Debug, thiserror::Error)]
pub enum Closed {
    #[error("socket: {0}")]
    Socket(std::io::Error),
    #[error("a TLS listener without TLS settings")]
    NoTlsSettings,
    #[error("TLS handshake failed: {0}")]
    TlsHandshake(std::io::Error),
    #[error("TLS handshake timed out")]
    TlsHandshakeTimedOut,
    #[error("frame size {size} outside [8, {max}]")]
    FrameSize { size: i32, max: usize },
    #[error("truncated frame: {0}")]
    Truncated(std::io::Error),
    #[error(transparent)]
    Malformed(#[from] Malformed),
    #[error("SASL authentication failed")]
    SaslFailed,
    #[error("{api_key:?}: {reason}")]
    Unauthenticated { api_key: ApiKey, reason: &'static str },
    #[error("a SASL response did not encode: {0}")]
    SaslEncode(anyhow::Error),
}

/// Why a request frame does not decode.
#[derive(Debug, thiserror::Error)]
pub enum Malformed {
    #[error("frame shorter than a request header")]
    Short,
    #[error("unknown api key {0}")]
    UnknownApiKey(i16),
    #[error("unsupported version {version} of api key {key}")]
    UnsupportedVersion { key: i16, version: i16 },
    #[error("bad request header: {0}")]
    Header(String),
    #[error("bad {api_key:?} v{version} body: {error}")]
    Body { api_key: ApiKey, version: i16, error: String },
}

async fn connection(shard: &Rc<Shard>, stream: TcpStream, listener: &ListenerConfig) -> Result<(), Closed> {
    stream.set_nodelay(true).map_err(|e| Closed::Socket(e.into()))?;
    let address = stream.peer_addr().ok();
    let peer = address.map(|a| a.ip().to_string()).unwrap_or_default();
    let port = address.map(|a| a.port()).unwrap_or_default();
    let sasl = listener.protocol.sasl().then(Authenticator::new);
    let name: Rc<str> = Rc::from(listener.name.as_str());
    if listener.protocol.tls() {
        let tls = shard.settings.security.tls.as_ref().ok_or(Closed::NoTlsSettings)?;
        let acceptor = futures_rustls::TlsAcceptor::from(tls.config(&shard.security.tls));
        let socket = skein_control::security::buffered::buffered(stream);
        let handshake = futures_lite::future::or(async { Some(acceptor.accept(socket).await) }, async {
            glommio::timer::sleep(TLS_HANDSHAKE_TIMEOUT).await;
            None
        });
        let stream = match handshake.await {
            Some(Ok(stream)) => stream,
            failed => {
                let metrics = &shard.metrics;
                metrics.tls_handshake_failures.set(metrics.tls_handshake_failures.get() + 1);
                return Err(match failed {
                    Some(Err(e)) => Closed::TlsHandshake(e),
                    _ => Closed::TlsHandshakeTimedOut,
                });
            }
        };
        // An mTLS client acts as its certificate's subject (until SASL says otherwise).
        let principal: Option<Principal> = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|leaf| tls.principal_of(leaf))
            .map(Principal::user);
        if let Some(principal) = &principal {
            tracing::debug!(target: "skein::net", shard = shard.id, %principal, "TLS client authenticated");
        }
        let connection = Connection::new((peer, port), name, sasl, principal);
        return serve_stream(shard, stream, None, connection).await;
    }
    // SAFETY: the descriptor is the stream's, open for as long as `stream` lives, and
    // it is borrowed only to duplicate it here.
    let socket = unsafe { BorrowedFd::borrow_raw(stream.as_raw_fd()) };
    // A second descriptor of the same socket, for the writer's vectored writes (the
    // stream's own halves write one buffer at a time); closing it closes nothing else.
    let socket = socket2::Socket::from(socket.try_clone_to_owned().map_err(Closed::Socket)?);
    let connection = Connection::new((peer, port), name, sasl, None);
    serve_stream(shard, stream, Some(socket), connection).await
}

/// Serves one connection's requests over `stream`, plain or TLS. `socket`, on plain
/// connections, takes vectored writes of multi-segment frames.
async fn serve_stream<S: AsyncRead + AsyncWrite + Unpin + 'static>(
    shard: &Rc<Shard>,
    stream: S,
    socket: Option<socket2::Socket>,
    connection: Connection,
) -> Result<(), Closed> {
    let _share_sessions = ConnectionGuard { shard: shard.clone(), connection: connection.id };
    let socket = socket.map(Rc::new);
    let reader_socket = socket.clone();
    let (mut reader, mut writer) = futures_lite::io::split(stream);
    let (queue, responses) = glommio::channels::local_channel::new_bounded(IN_FLIGHT_REQUESTS_PER_CONNECTION);
    let buffered = Rc::new(Cell::new(0usize));
    let budget = ConnectionResponses::new(shard.responses.clone());
    let writer_buffered = buffered.clone();
    let writer_shard = shard.clone();
    let writer_task = glommio::spawn_local(async move {
        // After a failed write the rest is still awaited, so every request's bytes are
        // released from the connection's and the shard's budgets.
        let mut broken = false;
        while let Some((task, size)) = responses.recv().await {
            let task: glommio::Task<Reply> = task;
            let reply = task.await;
            writer_buffered.set(writer_buffered.get() - size);
            writer_shard.buffered_bytes.set(writer_shard.buffered_bytes.get() - size);
            match (reply, broken) {
                // The frame's budget is released once the socket has taken it.
                (Reply::Frame { frame, held: _held, api_key, ready }, false) => {
                    let stages = writer_shard.metrics.stages(api_key);
                    let started = std::time::Instant::now();
                    if let Some(stages) = stages {
                        stages.queued.observe(started - ready);
                    }
                    broken = write_frame(&mut writer, socket.as_deref(), &frame).await.is_err();
                    if let Some(stages) = stages {
                        stages.write.observe_since(started);
                    }
                }
                // Responses after this one would be matched to the wrong requests: the
                // client sees the connection end and retries on a new one.
                (Reply::Close, false) => {
                    broken = true;
                    let _ = writer.close().await;
                }
                _ => {}
            }
        }
        let _ = writer.close().await;
    });
    let result = read_loop(shard, &mut reader, reader_socket.as_deref(), &queue, &buffered, &budget, connection).await;
    drop(queue);
    writer_task.await;
    result
}

/// What a connection knows about itself.
struct Connection {
    peer: String,
    port: u16,
    /// What its ApiVersions said it runs, once it has said.
    software: Option<Rc<ClientSoftware>>,
    listener: Rc<str>,
    /// A SASL listener's authentication state.
    sasl: Option<Authenticator>,
    /// The mapped subject of an mTLS client's certificate.
    tls_principal: Option<Principal>,
    /// Who the client acts as, once it is known: the SASL user, else the mTLS
    /// subject, else `User:ANONYMOUS`.
    session: Option<Rc<Session>>,
    /// Until when it reads no more requests (a quota's throttle, KIP-219).
    muted_until: Rc<Cell<Instant>>,
    /// Its id: the share sessions it opens close when it does (`ConnectionGuard`).
    id: u64,
}

/// The ids of connections, for the share sessions they open.
static NEXT_CONNECTION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Closes, when a connection ends, the share sessions it opened, and releases what
/// their members hold, and forgets its client telemetry instances (as Kafka does at
/// a disconnect).
struct ConnectionGuard {
    shard: Rc<Shard>,
    connection: u64,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        if let Ok(mut telemetry) = self.shard.clients.telemetry.try_borrow_mut() {
            telemetry.connection_closed(self.connection);
        }
        let Ok(mut sessions) = self.shard.clients.share_sessions.try_borrow_mut() else { return };
        if sessions.is_empty() {
            return;
        }
        let closed = sessions.connection_closed(self.connection);
        drop(sessions);
        if closed.is_empty() {
            return;
        }
        let shard = self.shard.clone();
        glommio::spawn_local(async move {
            for session in closed {
                crate::handlers::share_fetch::release(&shard, session).await;
            }
        })
        .detach();
    }
}

impl Connection {
    fn new(
        (peer, port): (String, u16),
        listener: Rc<str>,
        sasl: Option<Authenticator>,
        tls_principal: Option<Principal>,
    ) -> Connection {
        let muted_until = Rc::new(Cell::new(Instant::now()));
        let id = NEXT_CONNECTION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Connection { peer, port, software: None, listener, sasl, tls_principal, session: None, muted_until, id }
    }

    /// The session of an authenticated connection: made once (SASL re-authentication
    /// keeps the principal's name), and again when a re-authentication moves between a
    /// password and a delegation token.
    fn session(&mut self) -> Rc<Session> {
        let sasl = self.sasl.as_ref().and_then(|a| a.principal());
        let may_request_tokens = sasl.map_or(self.tls_principal.is_some(), |p| !p.token);
        // A re-authentication keeps the name but may switch between a password and a
        // token: the session follows.
        if let Some(session) = self.session.as_ref().filter(|s| s.may_request_tokens == may_request_tokens) {
            return session.clone();
        }
        let principal = sasl.or(self.tls_principal.as_ref()).cloned().unwrap_or_else(Principal::anonymous);
        let session = Session::authenticated(principal.to_string(), self.peer.clone(), may_request_tokens);
        // Before a SASL client has authenticated (its ApiVersions) it is anonymous,
        // but only for that request.
        if self.sasl.as_ref().is_none_or(|a| a.principal().is_some()) {
            self.session = Some(session.clone());
        }
        session
    }
}

type Queue = glommio::channels::local_channel::LocalSender<(glommio::Task<Reply>, usize)>;

async fn read_loop<S: AsyncRead + Unpin>(
    shard: &Rc<Shard>,
    reader: &mut futures_lite::io::ReadHalf<S>,
    socket: Option<&socket2::Socket>,
    queue: &Queue,
    buffered: &Rc<Cell<usize>>,
    budget: &Rc<ConnectionResponses>,
    mut connection: Connection,
) -> Result<(), Closed> {
    let mut reader = match socket {
        Some(socket) => FrameReader::Plain(crate::incoming::Frames::new(socket)),
        None => FrameReader::Stream(reader),
    };
    loop {
        // Until it has authenticated, a client can make the broker buffer no more
        // than a SASL token's worth.
        let authenticated = connection.sasl.as_ref().is_none_or(|a| a.principal().is_some());
        let max = match authenticated {
            true => shard.settings.socket_request_max_bytes,
            false => SASL_TOKEN_MAX_BYTES.min(shard.settings.socket_request_max_bytes),
        };
        // A throttled client's next request waits out its throttle (KIP-219).
        let muted = connection.muted_until.get().saturating_duration_since(Instant::now());
        if !muted.is_zero() {
            glommio::timer::sleep(muted).await;
        }
        // A shard that is stopping reads no more requests: what was read is answered,
        // then the connection closes.
        // Nor does one idle past `connections.max.idle.ms` (an unauthenticated one
        // included): it is closed, as Kafka closes it.
        let idle = shard.settings.connections_max_idle_ms;
        let read = futures_lite::future::or(async { Some(reader.size().await) }, async {
            futures_lite::future::or(shard.closing(), async {
                match idle {
                    0 => futures_lite::future::pending::<()>().await,
                    ms => glommio::timer::sleep(std::time::Duration::from_millis(ms)).await,
                }
            })
            .await;
            None
        });
        let size = match read.await {
            Some(Ok(size)) => size,
            Some(Err(_)) | None => return Ok(()),
        };
        if size < 8 || size as usize > max {
            return Err(Closed::FrameSize { size, max });
        }
        let size = size as usize;
        let frame_started = std::time::Instant::now();
        // Backpressure: wait for responses to drain before buffering more, per
        // connection and per shard. A connection's first frame waits for the shard's
        // budget too (many new connections cannot overrun it); a connection or shard
        // with nothing buffered always takes one frame.
        loop {
            let connection_full = buffered.get() > 0 && buffered.get() + size > CONNECTION_BUFFERED_BYTES_MAX;
            let shard_buffered = shard.buffered_bytes.get();
            let shard_full = shard_buffered > 0 && shard_buffered + size > SHARD_BUFFERED_BYTES_MAX;
            if !connection_full && !shard_full {
                break;
            }
            glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
        }
        let body = reader.body(size).await.map_err(Closed::Truncated)?;
        if let FrameReader::Plain(frames) = &mut reader {
            let copied = std::mem::take(&mut frames.produce_copied);
            let metrics = &shard.metrics;
            metrics.produce_copied_bytes.set(metrics.produce_copied_bytes.get() + copied);
        }
        let read = std::time::Instant::now();
        if let Some(auth) = connection.sasl.as_mut().filter(|a| a.expects_raw_token()) {
            // After a v0 handshake the tokens come as bare frames, answered bare.
            let request =
                kafka_protocol::messages::SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(body));
            let reply = authenticate(shard, auth, 0, &request, read);
            if reply.close {
                return Err(Closed::SaslFailed);
            }
            let token = &reply.response.auth_bytes;
            let mut out = BytesMut::with_capacity(4 + token.len());
            out.put_i32(token.len() as i32);
            out.extend_from_slice(token);
            let task = ready_frame(budget, Frame::contiguous(out.freeze()), ApiKey::SaslAuthenticate);
            if queue.send((task, 0)).await.is_err() {
                return Ok(());
            }
            continue;
        }
        let frame = parse(Bytes::from(body))?;
        if let Incoming::Request(request) = &frame {
            if let Some(stages) = shard.metrics.stages(request.api_key as i16) {
                stages.read.observe(read - frame_started);
                stages.decode.observe_since(read);
            }
        }
        let task = match frame {
            Incoming::UnsupportedApiVersions { correlation_id } => {
                let response = registry::unsupported_api_versions(correlation_id);
                ready_frame(budget, Frame::contiguous(response), ApiKey::ApiVersions)
            }
            Incoming::Request(mut request) => {
                if let Some(auth) = connection.sasl.as_mut() {
                    match auth.gate(request.api_key, read) {
                        Gate::Serve => {}
                        Gate::Close(reason) => {
                            let metrics = &shard.metrics;
                            metrics.unauthenticated_requests.set(metrics.unauthenticated_requests.get() + 1);
                            return Err(Closed::Unauthenticated { api_key: request.api_key, reason });
                        }
                        Gate::Authenticate => {
                            let (response, close) = sasl_step(shard, auth, &request, read);
                            let (key, version, correlation_id) =
                                (request.api_key, request.header.request_api_version, request.header.correlation_id);
                            let frame = encode(key, version, correlation_id, &response, SharedRecords::default())
                                .map_err(Closed::SaslEncode)?;
                            let task = ready_frame(budget, frame, key);
                            // The frame's bytes were read, not counted: nothing to release.
                            if queue.send((task, 0)).await.is_err() || close {
                                return match close {
                                    true => Err(Closed::SaslFailed),
                                    false => Ok(()),
                                };
                            }
                            continue;
                        }
                    }
                }
                request.peer = connection.peer.clone();
                request.listener = connection.listener.clone();
                let session = connection.session();
                request.muted_until = Some(connection.muted_until.clone());
                request.connection = connection.id;
                request.peer_port = connection.port;
                if let RequestKind::ApiVersions(r) = &request.body {
                    if request.header.request_api_version >= 3 && !r.client_software_name.is_empty() {
                        let name = r.client_software_name.to_string();
                        let version = r.client_software_version.to_string();
                        connection.software = Some(Rc::new(ClientSoftware { name, version }));
                    }
                }
                request.software = connection.software.clone();
                if request.api_key == ApiKey::Produce {
                    let client_id = request.header.client_id.as_deref().unwrap_or("");
                    let throttle = enforce::charge_produce(shard, &session.principal, client_id, size);
                    if !throttle.is_zero() {
                        let muted = &connection.muted_until;
                        muted.set(muted.get().max(Instant::now() + throttle));
                    }
                    request.produce_throttle = throttle;
                }
                request.session = Some(session);
                if let RequestKind::Fetch(fetch) = &request.body {
                    let want = crate::handlers::fetch::response_max_bytes(fetch);
                    request.grant = Some(budget.grant(want).await);
                }
                let shard = shard.clone();
                let budget = budget.clone();
                shard.metrics.count_request(request.header.request_api_key);
                glommio::spawn_local(async move { respond(&shard, &budget, *request).await })
            }
        };
        buffered.set(buffered.get() + size);
        shard.buffered_bytes.set(shard.buffered_bytes.get() + size);
        if queue.send((task, size)).await.is_err() {
            return Ok(());
        }
    }
}

/// Parses a frame: header, version check against the registry, body.
/// Decodes one request frame's body (after its size) as `parse` does for every frame a
/// connection reads: the entry point of the `request_frame` fuzz target (`fuzz/`).
///
/// # Errors
/// Why the frame does not decode (the connection would close).
pub fn decode_frame(buf: Bytes) -> Result<(), Malformed> {
    parse(buf).map(|_| ())
}

fn parse(mut buf: Bytes) -> Result<Incoming, Malformed> {
    if buf.remaining() < 8 {
        return Err(Malformed::Short);
    }
    let key = i16::from_be_bytes([buf[0], buf[1]]);
    let version = i16::from_be_bytes([buf[2], buf[3]]);
    let correlation_id = i32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
    let api_key = ApiKey::try_from(key).map_err(|_| Malformed::UnknownApiKey(key))?;
    let supported = registry::versions(api_key);
    let in_range = supported.is_some_and(|v| version >= v.min && version <= v.max);
    if !in_range {
        if api_key == ApiKey::ApiVersions {
            return Ok(Incoming::UnsupportedApiVersions { correlation_id });
        }
        return Err(Malformed::UnsupportedVersion { key, version });
    }
    let frame = skein_engine::Backing::of(&buf);
    let whole = skein_control::capture::on().then(|| buf.clone());
    let header_version = api_key.request_header_version(version);
    let header = RequestHeader::decode(&mut buf, header_version).map_err(|e| Malformed::Header(e.to_string()))?;
    let body = RequestKind::decode(api_key, &mut buf, version).map_err(|e| Malformed::Body {
        api_key,
        version,
        error: e.to_string(),
    })?;
    if let Some(whole) = whole {
        capture(&whole, &body);
    }
    let listener = Rc::from("");
    Ok(Incoming::Request(Box::new(Request {
        header,
        body,
        api_key,
        peer: String::new(),
        listener,
        grant: None,
        frame,
        session: None,
        produce_throttle: std::time::Duration::ZERO,
        muted_until: None,
        connection: 0,
        peer_port: 0,
        software: None,
    })))
}

/// Keeps a decoded frame, and a produce's record batches, for the fuzz targets' seeds
/// (`capture`, test-only).
fn capture(frame: &[u8], body: &RequestKind) {
    skein_control::capture::keep("request_frame", frame);
    if let RequestKind::Produce(produce) = body {
        for partition in produce.topic_data.iter().flat_map(|t| &t.partition_data) {
            if let Some(records) = &partition.records {
                // produce_batch's first byte picks the topic's rules: the default ones.
                skein_control::capture::keep("produce_batch", &[&[0u8][..], &records[..]].concat());
            }
        }
    }
}

/// A response the read loop built itself, held against the connection's budget and
/// queued for the writer in request order.
fn ready_frame(budget: &Rc<ConnectionResponses>, frame: Frame, api_key: ApiKey) -> glommio::Task<Reply> {
    let held = budget.hold(frame.len());
    let ready = std::time::Instant::now();
    glommio::spawn_local(async move { Reply::Frame { frame, held, api_key: api_key as i16, ready } })
}

/// Answers a SaslHandshake or SaslAuthenticate on a SASL listener: the response and
/// whether the connection closes after it.
fn sasl_step(
    shard: &Shard,
    auth: &mut Authenticator,
    request: &Request,
    now: std::time::Instant,
) -> (ResponseKind, bool) {
    let version = request.header.request_api_version;
    match &request.body {
        RequestKind::SaslHandshake(handshake) => {
            let (response, close) = auth.handshake(&shard.settings.security, version, handshake);
            if close {
                let metrics = &shard.metrics;
                metrics.sasl_authentication_failures.set(metrics.sasl_authentication_failures.get() + 1);
            }
            (ResponseKind::SaslHandshake(response), close)
        }
        RequestKind::SaslAuthenticate(token) => {
            let reply = authenticate(shard, auth, version, token, now);
            (ResponseKind::SaslAuthenticate(reply.response), reply.close)
        }
        _ => unreachable!("the gate sends only SASL requests here"),
    }
}

/// One SASL token, counted in the metrics.
fn authenticate(
    shard: &Shard,
    auth: &mut Authenticator,
    version: i16,
    request: &kafka_protocol::messages::SaslAuthenticateRequest,
    now: std::time::Instant,
) -> skein_control::security::sasl::TokenReply {
    let image = shard.image();
    let security = &shard.settings.security;
    let credentials = skein_control::security::NodeCredentials { security, image: &image };
    let keys = shard.jwks_keys();
    let reply = auth.authenticate(security, version, request, &credentials, keys.as_deref(), now);
    let metrics = &shard.metrics;
    if reply.close {
        metrics.sasl_authentication_failures.set(metrics.sasl_authentication_failures.get() + 1);
    } else if reply.authenticated {
        metrics.sasl_authentications.set(metrics.sasl_authentications.get() + 1);
        if let Some(principal) = auth.principal() {
            tracing::debug!(target: "skein::net", shard = shard.id, %principal, "SASL authenticated");
        }
    }
    reply
}

/// What a request task hands the connection's writer.
enum Reply {
    /// A response frame to send, with the response budget it holds until written,
    /// its API and when it was ready (for the stage histograms).
    Frame { frame: Frame, held: Grant, api_key: i16, ready: std::time::Instant },
    /// No response: a produce with acks=0.
    Nothing,
    /// The response could not be built: close the connection.
    Close,
}

/// Runs the handler and encodes the response frame. A response that does not encode
/// at the request's version (a handler bug) is counted and logged, and replaced by the
/// API's error response, or the connection is closed where the API has none. The
/// frame is held against the response budgets: a fetch's grant settled to the frame's
/// size, any other response at its size.
async fn respond(shard: &Rc<Shard>, budget: &Rc<ConnectionResponses>, request: Request) -> Reply {
    let (api_key, version, correlation_id) =
        (request.api_key, request.header.request_api_version, request.header.correlation_id);
    let started = std::time::Instant::now();
    // Client quotas: who is charged, and whether its fetch must wait (`quota`).
    let image = shard.has_quotas().then(|| shard.image());
    let quotas = image.as_ref().map_or(&[][..], |i| &i.client_quotas[..]);
    // Copied only when some client has a quota: the common path allocates nothing.
    let (principal, client_id) = match quotas.is_empty() {
        true => (String::new(), String::new()),
        false => (
            request.session.as_ref().map_or_else(String::new, |s| s.principal.clone()),
            request.header.client_id.as_deref().unwrap_or("").to_string(),
        ),
    };
    let client = QuotaClient::new(&principal, &client_id);
    let (charged, muted_until) = (request.produce_throttle, request.muted_until.clone());
    let mute = |throttle: std::time::Duration| {
        if let Some(until) = &muted_until {
            until.set(until.get().max(Instant::now() + throttle));
        }
    };
    if let RequestKind::Fetch(fetch) = &request.body {
        let throttle = enforce::fetch_throttled(shard, quotas, &client);
        if !throttle.is_zero() {
            shard.metrics.count_throttle(throttle);
            mute(throttle);
            let response = ResponseKind::Fetch(enforce::throttled_fetch(fetch, version, throttle));
            return match encode(api_key, version, correlation_id, &response, SharedRecords::default()) {
                Ok(frame) => {
                    let held = budget.hold(frame.len());
                    Reply::Frame { frame, held, api_key: api_key as i16, ready: Instant::now() }
                }
                Err(_) => Reply::Close,
            };
        }
    }
    let (handled, busy) = match enforce::meters_time(quotas, &client) {
        true => enforce::Timed::new(registry::dispatch(shard, request)).await,
        false => (registry::dispatch(shard, request).await, std::time::Duration::ZERO),
    };
    let throttle = enforce::charge(shard, quotas, &client, charged, handled.as_ref().map(|h| &h.response), busy);
    mute(throttle);
    let Some(registry::Handled { mut response, grant, records, close }) = handled else {
        return Reply::Nothing;
    };
    if close {
        return Reply::Close;
    }
    enforce::set_throttle_time(&mut response, throttle);
    let handled = std::time::Instant::now();
    shard.metrics.observe_latency(api_key as i16, handled - started);
    let stages = shard.metrics.stages(api_key as i16);
    if let Some(stages) = stages {
        stages.handle.observe(handled - started);
    }
    let reply = |frame: Frame, held: Grant| {
        let ready = std::time::Instant::now();
        if let Some(stages) = stages {
            stages.encode.observe(ready - handled);
        }
        Reply::Frame { frame, held, api_key: api_key as i16, ready }
    };
    let held = |frame: &Frame| match grant {
        Some(mut grant) => {
            grant.settle(frame.len());
            grant
        }
        None => budget.hold(frame.len()),
    };
    let copied = records.copied_bytes();
    let error = match encode(api_key, version, correlation_id, &response, records) {
        Ok(frame) => {
            let metrics = &shard.metrics;
            metrics.fetch_copied_bytes.set(metrics.fetch_copied_bytes.get() + copied);
            let held = held(&frame);
            return reply(frame, held);
        }
        Err(e) => e,
    };
    shard.metrics.count_encode_failure(api_key as i16);
    tracing::error!(target: "skein::net", shard = shard.id, ?api_key, version, correlation_id, error = %error, "response encoding failed");
    match crate::error_response::for_failed(api_key, response, version) {
        Some(fallback) => match encode(api_key, version, correlation_id, &fallback, SharedRecords::default()) {
            Ok(frame) => {
                let held = held(&frame);
                reply(frame, held)
            }
            Err(_) => Reply::Close,
        },
        None => Reply::Close,
    }
}

/// One response frame: size, header, body. A fetch response's records are the
/// `records` behind its placeholders, shared into the frame's segments.
pub fn encode(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    response: &ResponseKind,
    records: SharedRecords,
) -> anyhow::Result<Frame> {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let header_version = api_key.response_header_version(version);
    if let ResponseKind::Fetch(fetch) = response {
        // Sized first: the framing buffer is allocated once, at its final size.
        let size = header.compute_size(header_version)? + fetch.compute_size(version)?;
        let mut out = Splicer::new(4 + size, records);
        out.put_i32(i32::try_from(size)?);
        header.encode(&mut out, header_version)?;
        fetch.encode(&mut out, version)?;
        let frame = out.finish()?;
        anyhow::ensure!(frame.len() == 4 + size, "a fetch frame of {} bytes, sized {}", frame.len(), 4 + size);
        return Ok(frame);
    }
    let mut out = BytesMut::with_capacity(4 + 256);
    out.put_i32(0);
    header.encode(&mut out, header_version)?;
    response.encode(&mut out, version)?;
    let len = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&len.to_be_bytes());
    Ok(Frame::contiguous(out.freeze()))
}

/// Where a connection's frames are read: straight off a plain connection's socket
/// (`incoming.rs`: unzeroed bodies, few `recv` calls), or through its TLS stream. One
/// per connection, in its task: the plain reader stays inline rather than boxed (an
/// allocation per connection, an indirection per read).
#[allow(clippy::large_enum_variant)]
enum FrameReader<'a, S> {
    Plain(crate::incoming::Frames<'a>),
    Stream(&'a mut futures_lite::io::ReadHalf<S>),
}

impl<S: AsyncRead + Unpin> FrameReader<'_, S> {
    /// The next frame's size; an error when the peer closed.
    async fn size(&mut self) -> std::io::Result<i32> {
        match self {
            FrameReader::Plain(frames) => frames.size().await,
            FrameReader::Stream(reader) => {
                let mut size = [0u8; 4];
                reader.read_exact(&mut size).await?;
                Ok(i32::from_be_bytes(size))
            }
        }
    }

    /// The body of the frame whose size was read: `size` bytes.
    async fn body(&mut self, size: usize) -> std::io::Result<Vec<u8>> {
        match self {
            FrameReader::Plain(frames) => frames.body(size).await,
            FrameReader::Stream(reader) => {
                let mut body = vec![0; size];
                reader.read_exact(&mut body).await?;
                Ok(body)
            }
        }
    }
}

/// Sends a frame: one write for a single segment, vectored writes (`sendmsg`, never
/// blocking) for several. When the socket is full, the stream's own write of the
/// current segment waits for room, then vectored writes go on.
async fn write_frame<S: AsyncWrite + Unpin>(
    writer: &mut futures_lite::io::WriteHalf<S>,
    socket: Option<&socket2::Socket>,
    frame: &Frame,
) -> std::io::Result<()> {
    let segments = frame.segments();
    let socket = match (socket, segments) {
        // A TLS stream: rustls seals the segments in turn, and the buffered socket
        // under it sends them when flushed.
        (None, _) => {
            for segment in segments {
                writer.write_all(segment).await?;
            }
            return writer.flush().await;
        }
        (Some(_), [one]) => return writer.write_all(one).await,
        (Some(socket), _) => socket,
    };
    let mut at = frame::advance(segments, (0, 0), 0);
    while at.0 < segments.len() {
        let slices = frame::io_slices(&segments[at.0..], at.1);
        let sent = match socket.send_vectored_with_flags(&slices, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) {
            Ok(sent) => sent,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => writer.write(&segments[at.0][at.1..]).await?,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if sent == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        at = frame::advance(segments, at, sent);
    }
    Ok(())
}
