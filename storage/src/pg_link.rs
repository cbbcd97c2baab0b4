//! The node's path to a PostgreSQL metadata store: a relay inside the process that ends a
//! connection the server has gone silent on.
//!
//! sqlx sets no socket options and no client-side deadline. A connection whose path goes
//! silent (a lost route, a firewall or NAT that forgot its state, a host that vanished: no
//! FIN, no RST) hangs every statement sent on it until the kernel gives up, a quarter of an
//! hour later, and holds its pool slot all that time; a few such statements (the catalog's,
//! the registry's, a group's offsets) exhaust the pool, and the node stops working long after
//! the path is back. The server's own bounds (`lock_timeout`, `statement_timeout`,
//! `idle_in_transaction_session_timeout`, keepalives: `crate::meta`) free the server's side
//! only.
//!
//! So every pooled connection of a node (the metadata store's, the catalog's) goes through
//! this relay: sqlx connects to a Unix socket in a private directory (the URL's `host=`
//! parameter; the TLS handshake, if any, still names the real host), and the relay opens a TCP
//! connection to the server for each one, with keepalives and `TCP_USER_TIMEOUT` so the
//! kernel notices a path that stopped acknowledging. On top of that, the relay watches each
//! connection: once the client has sent something, the server must answer (any byte) within
//! [`SILENCE_BOUND`], which is longer than any statement may run on the server
//! (`statement_timeout`); otherwise the relay closes both sides, the statement fails with an
//! I/O error, and the pool opens a new connection. Timing a request from its first byte
//! after the server's last answer is sound because the PostgreSQL protocol as sqlx speaks it
//! takes turns: a request, then its whole answer.
//!
//! Memory: two buffers of [`BUFFER_BYTES`] per open connection, and the pools bound the
//! connections (`crate::meta`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::error::{Error, Result};

/// How long the server may stay silent while a request of the client's waits for its answer:
/// longer than `statement_timeout` (`crate::meta`), which bounds every statement, lock waits
/// included.
pub(crate) const SILENCE_BOUND: Duration = Duration::from_secs(40);

/// The upstream socket's keepalives (idle time, interval, probes) and `TCP_USER_TIMEOUT` (how
/// long sent data may go unacknowledged): a path that stops acknowledging is found in seconds.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
const KEEPALIVE_PROBES: u32 = 3;
const USER_TIMEOUT: Duration = Duration::from_secs(20);

/// Bytes read at a time, each way, per connection.
const BUFFER_BYTES: usize = 16 * 1024;

/// A running relay; it stops (and closes every connection through it) when dropped.
#[derive(Debug)]
pub(crate) struct PgLink {
    url: String,
    _dir: tempfile::TempDir,
    _tasks: JoinSet<()>,
}

impl PgLink {
    /// A relay to the server `url` (`postgres://…`) names, which closes a connection whose
    /// server stays silent for `silence` while a request waits ([`SILENCE_BOUND`] but in
    /// tests). `None` when the URL already names a Unix socket (a server on this machine,
    /// whose path cannot go silent).
    pub(crate) async fn start(url: &str, silence: Duration) -> Result<Option<PgLink>> {
        let bad = |why: String| Error::Config(format!("metadata store URL: {why}"));
        let mut parsed = url::Url::parse(url).map_err(|e| bad(e.to_string()))?;
        let mut host = parsed.host_str().unwrap_or("localhost").to_string();
        for (key, value) in parsed.query_pairs() {
            match key.as_ref() {
                "host" if value.starts_with('/') => return Ok(None),
                "host" | "hostaddr" => host = value.into_owned(),
                _ => {}
            }
        }
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = parsed.port().unwrap_or(5432);
        let dir = tempfile::Builder::new()
            .prefix("inlet-pg-")
            .tempdir()
            .map_err(|e| {
                Error::Config(format!("a directory for the metadata store's relay: {e}"))
            })?;
        let listener = UnixListener::bind(socket_path(dir.path(), port))
            .map_err(|e| Error::Config(format!("the metadata store's relay socket: {e}")))?;
        // sqlx reads `host=/dir` as the socket directory and keeps the URL's host for TLS.
        let query: Vec<(String, String)> = parsed
            .query_pairs()
            .filter(|(k, _)| k != "host" && k != "hostaddr")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        {
            let mut pairs = parsed.query_pairs_mut();
            pairs.clear();
            for (k, v) in &query {
                pairs.append_pair(k, v);
            }
            pairs.append_pair("host", &dir.path().to_string_lossy());
        }
        let mut tasks = JoinSet::new();
        tasks.spawn(accept(listener, host, port, silence));
        Ok(Some(PgLink {
            url: parsed.to_string(),
            _dir: dir,
            _tasks: tasks,
        }))
    }

    /// The URL to connect with: the original one, through the relay.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }
}

fn socket_path(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!(".s.PGSQL.{port}"))
}

async fn accept(listener: UnixListener, host: String, port: u16, silence: Duration) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    connections.spawn(relay(client, host.clone(), port, silence));
                }
                Err(e) => {
                    // Out of file descriptors, most likely: wait for some to close.
                    tracing::warn!(error = %e, "the metadata store's relay cannot accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Connects to the server, or closes `client` (sqlx then sees the connect fail).
async fn relay(client: UnixStream, host: String, port: u16, silence: Duration) {
    let server = match TcpStream::connect((host.as_str(), port)).await {
        Ok(server) => server,
        Err(e) => {
            tracing::debug!(%host, port, error = %e, "the metadata store's relay cannot connect");
            return;
        }
    };
    if let Err(e) = tune(&server) {
        tracing::warn!(error = %e, "the metadata store's relay cannot set its socket options");
    }
    pipe(client, server, silence).await;
}

fn tune(server: &TcpStream) -> std::io::Result<()> {
    server.set_nodelay(true)?;
    let socket = socket2::SockRef::from(server);
    socket.set_tcp_keepalive(
        &socket2::TcpKeepalive::new()
            .with_time(KEEPALIVE_IDLE)
            .with_interval(KEEPALIVE_INTERVAL)
            .with_retries(KEEPALIVE_PROBES),
    )?;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    socket.set_tcp_user_timeout(Some(USER_TIMEOUT))?;
    Ok(())
}

/// Copies bytes both ways until either side closes or the server is silent for `silence`
/// while a request waits; then both sides are closed (dropped).
async fn pipe(client: UnixStream, server: TcpStream, silence: Duration) {
    let start = Instant::now();
    // Nanoseconds since `start` (plus one) of the client's first byte since the server last
    // sent one; 0 when no request waits. (Whole milliseconds once let the cut come up to a
    // millisecond before the bound.)
    let waiting = AtomicU64::new(0);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = forward(client_read, server_write, || {
        let now = start.elapsed().as_nanos() as u64 + 1;
        let _ = waiting.compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire);
    });
    let down = forward(server_read, client_write, || {
        waiting.store(0, Ordering::Release)
    });
    let watch = async {
        loop {
            let since = waiting.load(Ordering::Acquire);
            let wake = if since == 0 {
                Instant::now() + silence
            } else {
                let deadline = start + Duration::from_nanos(since - 1) + silence;
                if Instant::now() >= deadline {
                    return;
                }
                deadline
            };
            tokio::time::sleep_until(wake).await;
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
        () = watch => tracing::warn!(
            ?silence,
            "the metadata store did not answer a request within the bound; \
             the connection is closed"
        ),
    }
}

/// Copies `from` to `to` until `from` closes or either fails, calling `on_bytes` as each
/// chunk arrives, before it is passed on.
async fn forward(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    on_bytes: impl Fn(),
) -> std::io::Result<()> {
    let mut buf = vec![0u8; BUFFER_BYTES];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        on_bytes();
        to.write_all(&buf[..n]).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::net::TcpListener;

    /// A server that accepts and echoes each read back, until `mute` is set; then it reads
    /// and answers nothing, as a path gone silent.
    async fn server(mute: Arc<std::sync::atomic::AtomicBool>) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                let mute = mute.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 {
                            return;
                        }
                        if !mute.load(Ordering::Relaxed) {
                            s.write_all(&buf[..n]).await.unwrap();
                        }
                    }
                });
            }
        });
        port
    }

    fn client_path(link: &PgLink, port: u16) -> PathBuf {
        let url = url::Url::parse(link.url()).unwrap();
        let dir = url
            .query_pairs()
            .find(|(k, _)| k == "host")
            .map(|(_, v)| v.into_owned())
            .unwrap();
        socket_path(Path::new(&dir), port)
    }

    #[tokio::test]
    async fn the_url_keeps_its_host_and_parameters_and_names_the_relay() {
        let link = PgLink::start(
            "postgres://u:p@db.example:6543/inlet?sslmode=require",
            SILENCE_BOUND,
        )
        .await
        .unwrap()
        .unwrap();
        let url = url::Url::parse(link.url()).unwrap();
        assert_eq!(url.host_str(), Some("db.example"));
        assert_eq!(url.port(), Some(6543));
        assert_eq!(url.path(), "/inlet");
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert_eq!(pairs[0], ("sslmode".into(), "require".into()));
        assert_eq!(pairs[1].0, "host");
        assert!(client_path(&link, 6543).exists(), "{:?}", pairs[1]);
        // A Unix socket already: nothing to relay.
        assert!(
            PgLink::start("postgres://u@x/db?host=/run/postgresql", SILENCE_BOUND)
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn bytes_pass_both_ways_and_a_silent_server_is_cut_off_within_the_bound() {
        let mute = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let port = server(mute.clone()).await;
        let silence = Duration::from_millis(300);
        let link = PgLink::start(&format!("postgres://u@127.0.0.1:{port}/db"), silence)
            .await
            .unwrap()
            .unwrap();
        let mut client = UnixStream::connect(client_path(&link, port)).await.unwrap();
        client.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        // Idle for longer than the bound: nothing waits for an answer, so nothing is cut.
        tokio::time::sleep(silence * 3).await;
        client.write_all(b"pong").await.unwrap();
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"pong");
        // The server goes silent: the request's wait ends in a closed connection.
        mute.store(true, Ordering::Relaxed);
        let asked = Instant::now();
        client.write_all(b"lost").await.unwrap();
        let read = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buf))
            .await
            .expect("the relay closes the connection");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        assert!(asked.elapsed() >= silence, "{:?}", asked.elapsed());
    }

    #[tokio::test]
    async fn a_server_that_cannot_be_reached_closes_the_client() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let link = PgLink::start(&format!("postgres://u@127.0.0.1:{port}/db"), SILENCE_BOUND)
            .await
            .unwrap()
            .unwrap();
        let mut client = UnixStream::connect(client_path(&link, port)).await.unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(client.read(&mut buf).await.unwrap(), 0);
    }
}
