//! The TCP side: accepting connections and running each one. A connection reads frames on
//! one task and answers on another; requests are handled concurrently (pipelining) and
//! answered in the order they arrived, as the protocol requires.
//!
//! Bounds, so that no client can stall another:
//! - a frame longer than `socket.request.max.bytes` closes the connection before any room is
//!   allocated for it;
//! - request bytes read but not yet answered hold at most `queued.max.request.bytes` over all
//!   connections. Room is reserved as the bytes arrive, [`READ_CHUNK`] at a time, never for
//!   what a length prefix merely announces, so a client that announces 100 MiB and sends
//!   nothing holds nothing;
//! - a request's body must arrive within `inlet.request.read.timeout.ms` of its length, and a
//!   connection with no request for `connections.max.idle.ms` is closed;
//! - at most `max.connections` connections, and `max.connections.per.ip` from one address
//!   (more are closed as they are accepted), and [`MAX_INFLIGHT`] requests per connection.
//!
//! A client under a quota (`quota`) has its requests handled one at a time; one that goes
//! over it is answered with its throttle time, and its connection handles no further request
//! until that time has passed (KIP-219).
//!
//! While the node stands down (`Broker::stand_down`: a cluster node that cannot renew its
//! lease), every connection is closed and new ones are closed as they are accepted.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use bytes::{Bytes, BytesMut};
use futures::stream::{FuturesOrdered, StreamExt};
use kafka_protocol::messages::{ApiKey, ResponseKind};
use kafka_protocol::ResponseError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::codec::{self, DecodeError};
use crate::frame::Frame;

/// Requests of one connection being handled at once.
pub const MAX_INFLIGHT: usize = 64;

/// Request bytes reserved and read at a time.
pub const READ_CHUNK: usize = 64 << 10;

/// Open connections, in all and per client address, for `max.connections(.per.ip)`.
#[derive(Debug, Default)]
struct Census {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// One connection's place in the [`Census`], given back on drop.
struct Admitted {
    census: Arc<parking_lot::Mutex<Census>>,
    ip: IpAddr,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut c = self.census.lock();
        c.total -= 1;
        if let Some(n) = c.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                c.per_ip.remove(&self.ip);
            }
        }
    }
}

/// Admits a connection from `ip`, or says which limit it is over.
fn admit(
    census: &Arc<parking_lot::Mutex<Census>>,
    ip: IpAddr,
    max_total: u32,
    max_per_ip: u32,
) -> Result<Admitted, &'static str> {
    let mut c = census.lock();
    if c.total >= max_total as usize {
        return Err("max.connections");
    }
    let from_ip = c.per_ip.get(&ip).copied().unwrap_or(0);
    if from_ip >= max_per_ip as usize {
        return Err("max.connections.per.ip");
    }
    c.total += 1;
    *c.per_ip.entry(ip).or_default() += 1;
    Ok(Admitted {
        census: census.clone(),
        ip,
    })
}

/// What the reader hands the answering side.
enum Item {
    Request(Box<codec::Request>, OwnedSemaphorePermit, Instant),
    /// A ready answer (ApiVersions at a version this broker does not know).
    Reply(Frame),
    /// Stop after answering what came before.
    Close(String),
}

/// How a listener's connections are authenticated (Kafka's listener security protocols).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSecurity {
    /// The listener's name, as `listeners` names it (`PLAINTEXT`, `SASL_PLAINTEXT`, or one
    /// mapped by `listener.security.protocol.map`).
    pub name: String,
    /// The SASL mechanisms its connections authenticate with; none: no authentication
    /// (requests come from `User:ANONYMOUS`).
    pub sasl_mechanisms: Vec<String>,
}

impl ListenerSecurity {
    /// A listener without authentication.
    pub fn plaintext() -> Self {
        ListenerSecurity {
            name: "PLAINTEXT".into(),
            sasl_mechanisms: Vec::new(),
        }
    }
}

/// One bound Kafka listener.
#[derive(Debug)]
pub struct Listener {
    pub tcp: TcpListener,
    pub security: ListenerSecurity,
    /// TLS (`SSL` and `SASL_SSL` listeners): each connection's handshake comes first.
    pub tls: Option<Arc<crate::tls::Tls>>,
}

/// Accepts Kafka connections on one listener without authentication until `shutdown`
/// ([`serve_listeners`]).
pub async fn serve(listener: TcpListener, broker: Arc<Broker>, shutdown: CancellationToken) {
    serve_listeners(
        vec![Listener {
            tcp: listener,
            security: ListenerSecurity::plaintext(),
            tls: None,
        }],
        broker,
        shutdown,
    )
    .await
}

/// Accepts Kafka connections on every listener until `shutdown`; then stops reading new
/// requests, answers the ones in flight and returns. The listeners share the request budget
/// and the connection limits, as Kafka's do.
pub async fn serve_listeners(
    listeners: Vec<Listener>,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
) {
    let mut connections = JoinSet::new();
    // One budget for every connection's read-ahead, as Kafka's queued.max.request.bytes.
    let budget = (broker.config().queued_max_request_bytes as usize).min(Semaphore::MAX_PERMITS);
    let permits = Arc::new(Semaphore::new(budget));
    let census = Arc::new(parking_lot::Mutex::new(Census::default()));
    let accept = || {
        std::future::poll_fn(|cx| {
            for l in &listeners {
                if let std::task::Poll::Ready(r) = l.tcp.poll_accept(cx) {
                    return std::task::Poll::Ready((r, l.security.clone(), l.tls.clone()));
                }
            }
            std::task::Poll::Pending
        })
    };
    let mut reload = tokio::time::interval(crate::tls::RELOAD_EVERY);
    reload.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = reload.tick() => {
                for l in &listeners {
                    let Some(tls) = &l.tls else { continue };
                    match tls.reload_if_changed() {
                        Ok(true) => tracing::info!(listener = l.security.name, "TLS certificates reloaded"),
                        Ok(false) => {}
                        Err(e) => tracing::warn!(listener = l.security.name, error = %e, "reloading the TLS certificates failed; the ones in force stay"),
                    }
                }
            }
            (accepted, security, tls) = accept() => match accepted {
                Ok((socket, peer)) if *broker.standing_down.borrow() => {
                    tracing::debug!(%peer, "turning a Kafka connection away: this node stands down");
                    drop(socket);
                }
                Ok((socket, peer)) => {
                    let config = broker.config();
                    match admit(&census, peer.ip(), config.max_connections, config.max_connections_per_ip) {
                        Ok(admitted) => {
                            let _ = socket.set_nodelay(true);
                            let (broker, permits, shutdown) = (broker.clone(), permits.clone(), shutdown.clone());
                            match tls {
                                None => {
                                    connections.spawn(connection(socket, peer, security, None, broker, permits, shutdown, admitted));
                                }
                                Some(tls) => {
                                    connections.spawn(async move {
                                        let within = Duration::from_millis(broker.config().request_read_timeout_ms);
                                        match tokio::time::timeout(within, tls.acceptor().accept(socket)).await {
                                            Ok(Ok(stream)) => {
                                                // mTLS: on an SSL listener, the certificate names the principal.
                                                let principal = if security.sasl_mechanisms.is_empty() {
                                                    stream.get_ref().1.peer_certificates()
                                                        .and_then(|certs| certs.first())
                                                        .and_then(crate::tls::principal_of)
                                                } else {
                                                    None
                                                };
                                                connection(stream, peer, security, principal, broker, permits, shutdown, admitted).await;
                                            }
                                            Ok(Err(e)) => {
                                                broker.metrics().tls_failures.fetch_add(1, Ordering::Relaxed);
                                                tracing::info!(%peer, error = %e, "TLS handshake failed");
                                            }
                                            Err(_) => {
                                                broker.metrics().tls_failures.fetch_add(1, Ordering::Relaxed);
                                                tracing::info!(%peer, ?within, "TLS handshake not done in time (inlet.request.read.timeout.ms)");
                                            }
                                        }
                                    });
                                }
                            }
                        }
                        Err(limit) => {
                            broker.metrics().refused_connections.fetch_add(1, Ordering::Relaxed);
                            tracing::info!(%peer, limit, "refusing a Kafka connection over the limit");
                            drop(socket);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a Kafka connection failed");
                    tokio::task::yield_now().await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = shutdown.cancelled() => break,
        }
    }
    while connections.join_next().await.is_some() {}
}

/// Serves one connection (plain TCP, or TLS once its handshake is done). `principal` is who
/// its client certificate names, if anyone (mTLS).
#[allow(clippy::too_many_arguments)] // one call site each, all of a connection's parts
async fn connection<S>(
    socket: S,
    peer: SocketAddr,
    security: ListenerSecurity,
    principal: Option<String>,
    broker: Arc<Broker>,
    permits: Arc<Semaphore>,
    shutdown: CancellationToken,
    _admitted: Admitted,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let metrics = broker.metrics().clone();
    metrics.connections.fetch_add(1, Ordering::Relaxed);
    metrics.connections_total.fetch_add(1, Ordering::Relaxed);
    let (read, mut write) = tokio::io::split(socket);
    let (tx, mut rx) = mpsc::channel::<Item>(MAX_INFLIGHT);
    let max_frame = broker.config().socket_request_max_bytes;
    let mut reader = JoinSet::new();
    reader.spawn(read_requests(
        read,
        tx,
        permits,
        max_frame,
        broker.clone(),
        shutdown.clone(),
    ));

    // Who the requests come from: the client's address, and the principal: User:ANONYMOUS
    // on a listener without authentication, else the user SASL authenticated.
    let mut session = crate::acl::Session::anonymous(&peer.ip().to_string(), &security.name);
    if let Some(principal) = principal {
        session.principal = principal;
    }
    let mut session = Arc::new(session);
    let peer_ip: Arc<str> = session.host.as_str().into();
    let mut sasl = (!security.sasl_mechanisms.is_empty())
        .then(|| crate::sasl::Authentication::new(&security.sasl_mechanisms, Some(peer.ip())));
    let mut inflight = FuturesOrdered::new();
    let mut reading = true;
    let mut standing_down = broker.standing_down();
    // Looked at once at the start too: the node may have stood down since the accept.
    standing_down.mark_changed();
    // The previous Produce request's "submitted" signal: Produce requests in flight on one
    // connection submit their batches in the order they arrived (Broker::produce).
    let mut last_produce: Option<tokio::sync::oneshot::Receiver<()>> = None;
    // Until when the connection reads no request: its client went over a quota.
    let muted: Arc<parking_lot::Mutex<Option<Instant>>> = Default::default();
    // Whether the last request's client is under a quota: then requests are handled one at a
    // time, so that a throttle holds back the ones after it (Kafka's broker never pipelines).
    let mut one_at_a_time = false;
    loop {
        let unmute = *muted.lock();
        tokio::select! {
            _ = tokio::time::sleep_until(unmute.unwrap_or_else(Instant::now)), if unmute.is_some() => {
                let mut m = muted.lock();
                if m.is_some_and(|t| t <= Instant::now()) {
                    *m = None;
                }
            }
            item = rx.recv(), if reading && inflight.len() < MAX_INFLIGHT && unmute.is_none()
                && (!one_at_a_time || inflight.is_empty()) => match item {
                Some(Item::Request(request, permit, _arrived))
                    if sasl.as_ref().is_some_and(|auth| {
                        !auth.serves(broker.clock().now_ms())
                            || matches!(request.api_key, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate)
                    }) && request.api_key != ApiKey::ApiVersions =>
                {
                    // Authentication traffic, answered here, in turn.
                    let auth = sasl.as_mut().expect("checked by the guard");
                    let (answer, close) = authenticate(&broker, auth, *request).await;
                    drop(permit);
                    if let Some(principal) = auth.principal().filter(|p| *p != session.principal) {
                        session = Arc::new(crate::acl::Session {
                            principal,
                            ..(*session).clone()
                        });
                    }
                    // A failed authentication is answered, and the connection closed, only after
                    // connection.failed.authentication.delay.ms (KIP-306): a client retrying a
                    // wrong password tries a few times a second, not thousands.
                    let delay = close.as_ref().map_or(0, |_| {
                        broker.config().connection_failed_authentication_delay_ms
                    });
                    if let Some(frame) = answer {
                        inflight.push_back(Box::pin(async move {
                            if delay > 0 {
                                tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                            }
                            Some(frame)
                        })
                            as futures::future::BoxFuture<'static, Option<Result<Frame, String>>>);
                    }
                    if let Some(reason) = close {
                        inflight.push_back(Box::pin(async move { Some(Err(reason)) }));
                        reading = false;
                    }
                }
                Some(Item::Request(request, permit, arrived)) => {
                    let broker = broker.clone();
                    let peer = peer_ip.clone();
                    let session = session.clone();
                    let turn = if request.api_key == ApiKey::Produce {
                        let (done, next) = tokio::sync::oneshot::channel();
                        crate::broker::ProduceTurn {
                            after: last_produce.replace(next),
                            done: Some(done),
                        }
                    } else {
                        crate::broker::ProduceTurn::default()
                    };
                    let muted = muted.clone();
                    // The header's own bytes (a reference count), not a copy: most connections
                    // are under no quota.
                    let client = request.header.client_id.clone();
                    let client_id = || client.as_deref().unwrap_or_default();
                    one_at_a_time = broker.quota_applies(&session, client_id());
                    inflight.push_back(Box::pin(async move {
                        let api = request.api_key;
                        let version = request.version();
                        let correlation = request.header.correlation_id;
                        let request_bytes = permit.num_permits() as u64;
                        tracing::debug!(%peer, ?api, version, correlation, "request");
                        let handled = broker.handle_in_turn(*request, &session, turn);
                        let (mut answer, thread_nanos) = if broker.measures_request_time() {
                            crate::quota::enforce::ThreadTimed::new(handled).await
                        } else {
                            (handled.await, 0)
                        };
                        drop(permit);
                        // Client quotas: over one, the answer says how long to wait, and this
                        // connection reads nothing more for that long (KIP-219).
                        let client_id = client.as_deref().unwrap_or_default();
                        let throttle = broker.throttle(&session, client_id, api, request_bytes, thread_nanos, answer.as_mut());
                        if throttle > 0 {
                            let until = Instant::now() + Duration::from_millis(throttle);
                            let mut m = muted.lock();
                            *m = Some(m.map_or(until, |t| t.max(until)));
                        }
                        let frame = match answer {
                            Some(body) => match codec::encode_response(api, version, correlation, &body) {
                                Ok(frame) => Some(Ok(frame)),
                                Err(e) => Some(Err(format!("encoding the {api:?} v{version} response failed: {e:#}"))),
                            },
                            None => None,
                        };
                        let micros = arrived.elapsed().as_micros() as u64;
                        broker.metrics().observe(api, micros);
                        tracing::debug!(%peer, ?api, version, correlation, micros, "answered");
                        frame
                    }) as futures::future::BoxFuture<'static, Option<Result<Frame, String>>>);
                }
                Some(Item::Reply(frame)) => inflight.push_back(Box::pin(async move { Some(Ok(frame)) })),
                Some(Item::Close(reason)) => {
                    inflight.push_back(Box::pin(async move { Some(Err(reason)) }));
                    reading = false;
                }
                None => reading = false,
            },
            Some(answer) = inflight.next(), if !inflight.is_empty() => match answer {
                Some(Ok(mut frame)) => {
                    metrics.bytes_out.fetch_add(frame.len() as u64, Ordering::Relaxed);
                    // Vectored writes: a Fetch frame's batches are the store's own buffers.
                    if let Err(e) = write.write_all_buf(&mut frame).await {
                        tracing::debug!(%peer, error = %e, "writing a response failed");
                        break;
                    }
                }
                Some(Err(reason)) => {
                    tracing::info!(%peer, reason, "closing Kafka connection");
                    break;
                }
                None => {}
            },
            Ok(()) = standing_down.changed(), if reading => if *standing_down.borrow_and_update() {
                tracing::info!(%peer, "closing Kafka connection: this node stands down");
                break;
            },
            else => break,
        }
    }
    reader.abort_all();
    let _ = write.shutdown().await;
    metrics.connections.fetch_sub(1, Ordering::Relaxed);
}

async fn read_requests<R: tokio::io::AsyncRead + Unpin>(
    mut read: R,
    tx: mpsc::Sender<Item>,
    permits: Arc<Semaphore>,
    max_frame: u32,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
) {
    let metrics = broker.metrics().clone();
    let bad = |reason: String| {
        metrics.bad_frames.fetch_add(1, Ordering::Relaxed);
        Item::Close(reason)
    };
    let idle = Duration::from_millis(broker.config().connections_max_idle_ms);
    let read_timeout = Duration::from_millis(broker.config().request_read_timeout_ms);
    loop {
        let mut len = [0u8; 4];
        let first = tokio::select! {
            r = tokio::time::timeout(idle, read.read_exact(&mut len)) => r,
            _ = shutdown.cancelled() => return,
        };
        match first {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return, // closed by the client
            Err(_) => {
                let _ = tx
                    .send(Item::Close(format!(
                        "no request for {idle:?} (connections.max.idle.ms)"
                    )))
                    .await;
                return;
            }
        }
        let size = i32::from_be_bytes(len);
        if size < 8 || size as u32 > max_frame {
            let _ = tx
                .send(bad(format!("request frame of {size} bytes is outside 8..={max_frame} (socket.request.max.bytes)")))
                .await;
            return;
        }
        let size = size as usize;
        let deadline = Instant::now() + read_timeout;
        let body = tokio::select! {
            r = read_body(&mut read, size, &permits, deadline) => r,
            _ = shutdown.cancelled() => return,
        };
        let (frame, permit) = match body {
            Ok(read) => read,
            Err(BodyError::Closed) => return,
            Err(BodyError::TimedOut(got)) => {
                metrics.slow_requests.fetch_add(1, Ordering::Relaxed);
                let _ = tx
                    .send(Item::Close(format!(
                        "request body of {size} bytes not received within {read_timeout:?} (inlet.request.read.timeout.ms); {got} bytes arrived"
                    )))
                    .await;
                return;
            }
        };
        metrics
            .bytes_in
            .fetch_add(size as u64 + 4, Ordering::Relaxed);
        let arrived = Instant::now();
        let item = match codec::decode_request(frame.clone()) {
            Ok(request) => Item::Request(Box::new(request), permit, arrived),
            Err(DecodeError::UnsupportedVersion {
                api: ApiKey::ApiVersions,
                ..
            }) => {
                // A client newer than this broker: answer in v0 with the versions this broker
                // has, so the client can pick one (KIP-511).
                let prefix = codec::header_prefix(&frame).expect("decoded a prefix already");
                let body = broker
                    .api_versions(Default::default(), 0)
                    .with_error_code(ResponseError::UnsupportedVersion.code());
                match codec::encode_response(
                    ApiKey::ApiVersions,
                    0,
                    prefix.correlation_id,
                    &ResponseKind::ApiVersions(body),
                ) {
                    Ok(f) => Item::Reply(f),
                    Err(e) => bad(format!("encoding ApiVersions failed: {e:#}")),
                }
            }
            Err(e) => bad(e.to_string()),
        };
        let closing = matches!(item, Item::Close(_));
        if tx.send(item).await.is_err() || closing {
            return;
        }
    }
}

/// Why a request body was not read.
enum BodyError {
    /// The client closed the connection (or the budget closed).
    Closed,
    /// The deadline passed; this many bytes had arrived.
    TimedOut(usize),
}

/// Reads a `size`-byte request body by [`READ_CHUNK`]s, reserving room in `permits` for each
/// chunk just before reading it, all before `deadline`.
async fn read_body<R: tokio::io::AsyncRead + Unpin>(
    read: &mut R,
    size: usize,
    permits: &Arc<Semaphore>,
    deadline: tokio::time::Instant,
) -> Result<(Bytes, OwnedSemaphorePermit), BodyError> {
    let mut frame = BytesMut::new();
    let mut held: Option<OwnedSemaphorePermit> = None;
    while frame.len() < size {
        let chunk = (size - frame.len()).min(READ_CHUNK);
        let permit = match tokio::time::timeout_at(
            deadline,
            permits.clone().acquire_many_owned(chunk as u32),
        )
        .await
        {
            Ok(Ok(p)) => p,
            Ok(Err(_)) => return Err(BodyError::Closed),
            Err(_) => return Err(BodyError::TimedOut(frame.len())),
        };
        match &mut held {
            Some(h) => h.merge(permit),
            None => held = Some(permit),
        }
        // Read straight into spare capacity: nothing is zeroed first.
        let end = frame.len() + chunk;
        frame.reserve(chunk);
        let fill = async {
            while frame.len() < end {
                let want = (end - frame.len()) as u64;
                if (&mut *read).take(want).read_buf(&mut frame).await? == 0 {
                    return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
                }
            }
            Ok(())
        };
        match tokio::time::timeout_at(deadline, fill).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(BodyError::Closed),
            Err(_) => return Err(BodyError::TimedOut(frame.len())),
        }
    }
    let held = held.ok_or(BodyError::Closed)?;
    Ok((frame.freeze(), held))
}

/// Answers one request of a connection that must authenticate (or re-authenticate) first:
/// SaslHandshake and SaslAuthenticate go to `auth`; anything else closes the connection, as
/// Kafka closes it. Returns the answer's frame and, if the connection must close, why.
async fn authenticate(
    broker: &Broker,
    auth: &mut crate::sasl::Authentication,
    request: codec::Request,
) -> (Option<Result<Frame, String>>, Option<String>) {
    use crate::sasl::Outcome;
    let api = request.api_key;
    let version = request.version();
    let correlation = request.header.correlation_id;
    let outcome = match &request.body {
        // Version 0's unframed tokens are not read (see `codec::SUPPORTED`).
        kafka_protocol::messages::RequestKind::SaslHandshake(_) if version == 0 => {
            Outcome::AnswerAndClose(kafka_protocol::messages::ResponseKind::SaslHandshake(
                kafka_protocol::messages::SaslHandshakeResponse::default()
                    .with_error_code(kafka_protocol::ResponseError::UnsupportedVersion.code()),
            ))
        }
        kafka_protocol::messages::RequestKind::SaslHandshake(r) => auth.handshake(r),
        kafka_protocol::messages::RequestKind::SaslAuthenticate(r) => {
            let reauth_ms = broker.config().connections_max_reauth_ms;
            auth.authenticate(broker, r, reauth_ms, broker.clock().now_ms())
                .await
        }
        _ if auth.principal().is_some() => {
            return (
                None,
                Some(format!(
                    "{api:?} after the session's lifetime (connections.max.reauth.ms) without re-authentication"
                )),
            )
        }
        _ => {
            return (
                None,
                Some(format!(
                    "unexpected {api:?} request before SASL authentication"
                )),
            )
        }
    };
    let (body, close) = match outcome {
        Outcome::Answer(body) => (body, None),
        Outcome::AnswerAndClose(body) => {
            (body, Some(format!("SASL authentication failed ({api:?})")))
        }
    };
    let frame = codec::encode_response(api, version, correlation, &body)
        .map_err(|e| format!("encoding the {api:?} v{version} response failed: {e:#}"));
    (Some(frame), close)
}
