//! A release `inlet serve` node for the end-to-end benchmarks (`kafka_load`, `table_topics`):
//! started on free ports in a data directory, with `INLET_BENCH_NODE_ARGS` as extra arguments
//! and `INLET_BENCH_NODE_LOG` as its log filter. `INLET_BENCH_BIN` names another `inlet`
//! executable to run (an older build, for a before/after comparison in one run); by default
//! it is the one this bench was built with. Its warnings and errors go to the bench's
//! stderr; other log lines are dropped once the node is up.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub(crate) struct Node {
    child: Child,
    /// `host:port` of the Kafka listener.
    pub kafka: String,
    /// `host:port` of the HTTP listener.
    pub http: String,
    /// `host:port` of the Schema Registry.
    pub registry: String,
}

fn field(line: &str, name: &str) -> Option<String> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{name}=")))
        .map(str::to_string)
}

impl Node {
    /// Starts a node on `data_dir` and waits until it is up.
    pub(crate) fn start(data_dir: &Path) -> Node {
        let bin = std::env::var_os("INLET_BENCH_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_inlet").into());
        let mut child = Command::new(bin)
            .args([
                "serve",
                "--kafka-listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
                "--registry-listen",
                "127.0.0.1:0",
            ])
            .arg("--data-dir")
            .arg(data_dir)
            .args(
                std::env::var("INLET_BENCH_NODE_ARGS")
                    .unwrap_or_default()
                    .split_whitespace(),
            )
            .env(
                "INLET_LOG",
                std::env::var("INLET_BENCH_NODE_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("inlet starts");
        let (tx, logs) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains(" WARN ") || line.contains(" ERROR ") {
                    eprintln!("[inlet] {line}");
                }
                // Nobody listens once the node is up.
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        let up = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = logs
                .recv_timeout(left)
                .expect("the node is up within 120 s");
            if line.contains("Inlet node is up") {
                break line;
            }
        };
        Node {
            child,
            kafka: field(&up, "kafka").expect("the up line names the Kafka address"),
            http: field(&up, "http").expect("the up line names the HTTP address"),
            registry: field(&up, "registry").expect("the up line names the registry address"),
        }
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// SIGTERM, then up to 60 s for the node to exit (killed on drop otherwise).
    pub(crate) fn stop(mut self) {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("the node did not stop within 60 s; killing it");
    }

    /// The node's `/metrics`, as `name{labels}` → value.
    pub(crate) fn metric_values(&self) -> HashMap<String, f64> {
        let mut s = std::net::TcpStream::connect(&self.http).expect("connect HTTP");
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
        body.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
