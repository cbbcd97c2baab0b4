//! Serving the node's HTTP APIs (the HTTP listener, the Schema Registry) over TLS when their
//! settings name a PEM keystore (`[http] tls_keystore`, `[registry] tls_keystore`: the private
//! key and the certificate chain in one file, as Kafka's `ssl.keystore.location` PEM holds
//! them), with the Kafka listeners' TLS (`inlet_ingest::tls`): rustls, and the files read again
//! when they change (checked every `RELOAD_EVERY`), so a renewed certificate needs no
//! restart.
//!
//! Handshakes happen off the accept loop, each within [`HANDSHAKE_WITHIN`], so a slow or
//! silent client holds up no one; a failed one is logged and dropped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use inlet_common::access::ClientCertificate;
use inlet_ingest::tls::{ClientAuth, Tls, TlsSettings, RELOAD_EVERY};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How long a client has to finish its TLS handshake.
pub(crate) const HANDSHAKE_WITHIN: Duration = Duration::from_secs(10);

/// Handshakes finished and not yet taken by the server.
const READY_QUEUE: usize = 64;

/// The TLS of a listener whose settings name `keystore`, and for client certificates
/// `truststore` and `client_auth` (Kafka's `ssl.client.auth` values); the reason when its files
/// do not make a server certificate, or the settings do not fit together.
pub(crate) fn load(
    keystore: &std::path::Path,
    truststore: Option<&std::path::Path>,
    client_auth: &str,
) -> anyhow::Result<Arc<Tls>> {
    let client_auth = match client_auth {
        "none" => ClientAuth::None,
        "requested" => ClientAuth::Requested,
        "required" => ClientAuth::Required,
        other => anyhow::bail!("tls_client_auth {other:?} is not one of none, requested, required"),
    };
    if client_auth != ClientAuth::None && truststore.is_none() {
        anyhow::bail!("tls_client_auth wants a tls_truststore (the CAs of client certificates)");
    }
    let tls = Tls::load(TlsSettings {
        keystore: keystore.to_path_buf(),
        truststore: truststore.map(std::path::Path::to_path_buf),
        client_auth,
    })
    .map_err(|e| anyhow::anyhow!("{}: {e}", keystore.display()))?;
    Ok(Arc::new(tls))
}

/// Who is at the other end of a TLS connection: its address, and the principal of the client
/// certificate it presented, if any (rustls verified it against the truststore).
#[derive(Clone, Debug)]
struct Peer {
    addr: SocketAddr,
    certificate: Option<String>,
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, TlsListener>) -> Self {
        let certificate = stream
            .io()
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(inlet_ingest::tls::principal_of);
        Peer {
            addr: *stream.remote_addr(),
            certificate,
        }
    }
}

/// Hands a TLS request what plain HTTP requests carry (`ConnectInfo<SocketAddr>`), and its
/// client certificate's principal ([`ClientCertificate`]).
async fn peer_extensions(mut req: axum::extract::Request) -> axum::extract::Request {
    let peer = req
        .extensions()
        .get::<axum::extract::ConnectInfo<Peer>>()
        .map(|c| c.0.clone());
    if let Some(peer) = peer {
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(peer.addr));
        if let Some(principal) = peer.certificate {
            req.extensions_mut().insert(ClientCertificate(principal));
        }
    }
    req
}

/// A TCP listener whose connections are TLS, for `axum::serve`.
struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(tokio_rustls::server::TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    /// Accepts on `tcp` until `stop`, handshaking with `tls`'s certificate in force; `what`
    /// names the listener in the log.
    fn new(
        tcp: TcpListener,
        tls: Arc<Tls>,
        what: &'static str,
        stop: CancellationToken,
    ) -> std::io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(READY_QUEUE);
        tokio::spawn(async move {
            let mut reload = tokio::time::interval(RELOAD_EVERY);
            reload.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = reload.tick() => match tls.reload_if_changed() {
                        Ok(true) => tracing::info!(listener = what, "TLS certificates reloaded"),
                        Ok(false) => {}
                        Err(e) => tracing::warn!(listener = what, error = %e, "reloading the TLS certificates failed; the ones in force stay"),
                    },
                    accepted = tcp.accept() => match accepted {
                        Ok((socket, peer)) => {
                            let (acceptor, tx) = (tls.acceptor(), tx.clone());
                            tokio::spawn(async move {
                                match tokio::time::timeout(HANDSHAKE_WITHIN, acceptor.accept(socket)).await {
                                    Ok(Ok(stream)) => {
                                        // The server stopped taking connections: drop it.
                                        let _ = tx.send((stream, peer)).await;
                                    }
                                    Ok(Err(e)) => tracing::info!(listener = what, %peer, error = %e, "TLS handshake failed"),
                                    Err(_) => tracing::info!(listener = what, %peer, "TLS handshake not done in time"),
                                }
                            });
                        }
                        Err(e) => {
                            tracing::warn!(listener = what, error = %e, "accepting a connection failed");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    },
                }
            }
        });
        Ok(TlsListener { local, ready })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop ended (the node stops): nothing more comes.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// Serves `app` on `tcp` until `stop` (then finishes the requests in flight), over TLS when
/// `tls` is given; handlers see the client's address (`ConnectInfo<SocketAddr>`) and, over TLS,
/// the principal of its client certificate ([`ClientCertificate`]) when it presented one.
pub(crate) async fn serve(
    tcp: TcpListener,
    tls: Option<Arc<Tls>>,
    app: Router,
    what: &'static str,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let stopped = stop.clone().cancelled_owned();
    match tls {
        None => {
            let make = app.into_make_service_with_connect_info::<SocketAddr>();
            axum::serve(tcp, make).with_graceful_shutdown(stopped).await
        }
        Some(tls) => {
            let listener = TlsListener::new(tcp, tls, what, stop)?;
            let make = app
                .layer(axum::middleware::map_request(peer_extensions))
                .into_make_service_with_connect_info::<Peer>();
            axum::serve(listener, make)
                .with_graceful_shutdown(stopped)
                .await
        }
    }
}
