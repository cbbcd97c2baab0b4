//! A fault-injecting TCP proxy for tests: put it between a node and PostgreSQL or S3, then add
//! latency to every chunk it forwards, cut every open connection, refuse new ones for a
//! while, as a flaky network or a restarting service would, or turn the path into a black hole
//! that drops every byte and tells neither side, as a lost route, a firewall or NAT that
//! forgot its state, or a vanished host does.
//!
//! Plain threads and blocking sockets: two threads per connection copy bytes each way.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Default)]
struct State {
    delay_ms: AtomicU64,
    refuse: AtomicBool,
    /// Every socket of every open connection (both sides), for `cut`.
    open: Mutex<Vec<TcpStream>>,
    stopped: AtomicBool,
    /// The next connection's number.
    next_connection: AtomicU64,
    /// Connections numbered below this are silent for good (`black_hole`).
    silent_below: AtomicU64,
    /// New connections are silent while set.
    hole: AtomicBool,
}

/// A running proxy; it stops accepting when dropped.
#[derive(Debug)]
pub struct Proxy {
    /// `127.0.0.1:port` to connect to instead of the upstream.
    pub addr: String,
    state: Arc<State>,
}

impl Proxy {
    /// Forwards a free local port to `upstream` (`host:port`).
    pub fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let addr = listener.local_addr().expect("address").to_string();
        let state = Arc::new(State::default());
        let upstream = upstream.to_string();
        let s = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.stopped.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = client else { continue };
                if s.refuse.load(Ordering::Relaxed) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let number = s.next_connection.fetch_add(1, Ordering::Relaxed);
                if s.hole.load(Ordering::Relaxed) {
                    // Accepted, then never answered: the client's connect or handshake hangs.
                    if let Ok(c) = client.try_clone() {
                        s.open.lock().expect("lock").push(c);
                    }
                    std::thread::spawn(move || swallow(client));
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut open = s.open.lock().expect("lock");
                    open.retain(|c| c.peer_addr().is_ok());
                    for side in [&client, &server] {
                        if let Ok(c) = side.try_clone() {
                            open.push(c);
                        }
                    }
                }
                for (from, to) in [(&client, &server), (&server, &client)] {
                    let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else {
                        continue;
                    };
                    let s = s.clone();
                    std::thread::spawn(move || pipe(from, to, &s, number));
                }
            }
        });
        Proxy { addr, state }
    }

    /// Delays every chunk forwarded (each way) by `ms` from now on.
    pub fn set_delay(&self, ms: u64) {
        self.state.delay_ms.store(ms, Ordering::Relaxed);
    }

    /// Closes new connections at once while `on` (the service is down).
    pub fn set_refuse(&self, on: bool) {
        self.state.refuse.store(on, Ordering::Relaxed);
    }

    /// While `on`, the path is a black hole. Every connection open when it starts goes silent
    /// for good: what either side sends is dropped, nothing arrives, and neither side is told
    /// (no FIN, no RST), so only a timeout or a keepalive of its own can end it. New
    /// connections are accepted and then never answered while `on`; once off, new ones pass
    /// again, and the silent ones stay silent (the state along the path is gone).
    pub fn black_hole(&self, on: bool) {
        if on {
            let next = self.state.next_connection.load(Ordering::Relaxed);
            self.state.silent_below.store(next, Ordering::Relaxed);
        }
        self.state.hole.store(on, Ordering::Relaxed);
    }

    /// Cuts every open connection (both ways), as a dropped network path does.
    pub fn cut(&self) {
        for c in self.state.open.lock().expect("lock").drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::Relaxed);
        self.cut();
        // Wake the accept loop so it sees `stopped`.
        let _ = TcpStream::connect(&self.addr);
    }
}

/// Reads and drops whatever `from` sends until it closes.
fn swallow(mut from: TcpStream) {
    let mut buf = vec![0u8; 64 * 1024];
    while matches!(from.read(&mut buf), Ok(n) if n > 0) {}
}

fn pipe(mut from: TcpStream, mut to: TcpStream, state: &State, number: u64) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if number < state.silent_below.load(Ordering::Relaxed) {
            // Black-holed: dropped, and the other side is never told.
            return swallow(from);
        }
        let delay = state.delay_ms.load(Ordering::Relaxed);
        if delay > 0 {
            std::thread::sleep(Duration::from_millis(delay));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
