//! A real `inlet serve` process for end-to-end tests and benchmarks: started on free ports in
//! a data directory, stopped with SIGTERM or killed with SIGKILL, restarted on the same data.
//!
//! The executable is a parameter: only the root crate's tests and benches know it
//! (`env!("CARGO_BIN_EXE_inlet")`). Benchmarks start it with [`Node::start_bench`], which
//! honours `INLET_BENCH_BIN` (another `inlet` executable, an older build for a before/after
//! comparison in one run), `INLET_BENCH_NODE_ARGS` and `INLET_BENCH_NODE_LOG`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// `bin serve` on `data_dir`, listening on free ports unless `extra` names a listener (a node
/// restarted on the same addresses), with `extra` arguments.
pub fn serve_command<S: AsRef<OsStr>>(bin: &Path, data_dir: &Path, extra: &[S]) -> Command {
    let mut command = Command::new(bin);
    command.arg("serve");
    for flag in ["--kafka-listen", "--http-listen", "--registry-listen"] {
        if !extra.iter().any(|a| a.as_ref() == OsStr::new(flag)) {
            command.args([flag, "127.0.0.1:0"]);
        }
    }
    command.arg("--data-dir").arg(data_dir).args(extra);
    command
}

/// A port free on 127.0.0.1 now, for a node that must come back on the same address (as a
/// node restarted in production does: clients keep its address). It is taken below the
/// kernel's ephemeral range, so that no client connection is given it while the node is down.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, span) = (10_000u16, ephemeral_low.saturating_sub(10_000).max(1));
    // Where to start looking: differs between test processes and between calls.
    let seed = u64::from(std::process::id()).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::from(d.subsec_nanos()))
            .unwrap_or_default();
    for _ in 0..u32::from(span) {
        let n = seed.wrapping_add(NEXT.fetch_add(7919, Ordering::Relaxed));
        let port = low + (n % u64::from(span)) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A running node.
pub struct Node {
    child: Child,
    logs: mpsc::Receiver<String>,
    bin: PathBuf,
    pub data_dir: PathBuf,
    /// `host:port` of the Kafka listener.
    pub kafka: String,
    /// `host:port` of the HTTP listener.
    pub http: String,
    /// `host:port` of the Schema Registry.
    pub registry: String,
    extra: Vec<String>,
}

fn field(line: &str, name: &str) -> Option<String> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{name}=")))
        .map(str::to_string)
}

impl Node {
    /// Starts `bin` on `data_dir` with extra `serve` arguments and environment variables for
    /// the node; its log filter is `INLET_TEST_LOG` (default `info`). Its warnings and errors
    /// (every line with `INLET_TEST_VERBOSE`) go to the test's output.
    pub fn launch(bin: &Path, data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Node {
        let log = std::env::var("INLET_TEST_LOG").unwrap_or_else(|_| "info".into());
        let verbose = std::env::var_os("INLET_TEST_VERBOSE").is_some();
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Node::spawn(bin, data_dir, extra, &log, env, verbose)
    }

    /// A release node for a benchmark: `INLET_BENCH_BIN`, else `default_bin`, on `data_dir`
    /// with `INLET_BENCH_NODE_ARGS` (split on whitespace) as extra arguments and
    /// `INLET_BENCH_NODE_LOG` (default `info`) as its log filter. Its warnings and errors go
    /// to stderr; other log lines are dropped once the node is up.
    pub fn start_bench(default_bin: &Path, data_dir: &Path) -> Node {
        Node::start_bench_with(default_bin, data_dir, &[])
    }

    /// [`Node::start_bench`] with the bench's own `serve` arguments before
    /// `INLET_BENCH_NODE_ARGS`.
    pub fn start_bench_with(default_bin: &Path, data_dir: &Path, args: &[&str]) -> Node {
        let bin = std::env::var_os("INLET_BENCH_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| default_bin.to_path_buf());
        let extra = args
            .iter()
            .map(|a| a.to_string())
            .chain(
                std::env::var("INLET_BENCH_NODE_ARGS")
                    .unwrap_or_default()
                    .split_whitespace()
                    .map(str::to_string),
            )
            .collect();
        let log = std::env::var("INLET_BENCH_NODE_LOG").unwrap_or_else(|_| "info".into());
        let mut node = Node::spawn(&bin, data_dir, extra, &log, &[], false);
        // Nobody listens once the node is up.
        node.logs = mpsc::channel().1;
        node
    }

    fn spawn(
        bin: &Path,
        data_dir: &Path,
        extra: Vec<String>,
        log: &str,
        env: &[(&str, &str)],
        verbose: bool,
    ) -> Node {
        let mut child = serve_command(bin, data_dir, &extra)
            .env("INLET_LOG", log)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("inlet starts");
        let (tx, logs) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        // Each line names its node by its data directory (`node-3` in a cluster test).
        let name = data_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // Warnings and errors of the node go to the test's output.
                if line.contains(" WARN ") || line.contains(" ERROR ") || verbose {
                    eprintln!("[inlet {name}] {line}");
                }
                let _ = tx.send(line);
            }
        });
        let mut node = Node {
            child,
            logs,
            bin: bin.to_path_buf(),
            data_dir: data_dir.to_path_buf(),
            kafka: String::new(),
            http: String::new(),
            registry: String::new(),
            extra,
        };
        let up = node.wait_for_log("Inlet node is up");
        node.kafka = field(&up, "kafka").expect("the up line names the Kafka address");
        node.http = field(&up, "http").expect("the up line names the HTTP address");
        node.registry = field(&up, "registry").expect("the up line names the registry address");
        node
    }

    /// Waits for a log line containing `needle` and returns it.
    pub fn wait_for_log(&self, needle: &str) -> String {
        self.wait_for_any_log(&[needle])
    }

    /// The first log line, from now, with any of `needles`; panics after 120 s.
    pub fn wait_for_any_log(&self, needles: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .logs
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no log line with any of {needles:?} within 120 s"));
            if needles.iter().any(|n| line.contains(n)) {
                return line;
            }
        }
    }

    /// The log lines not read yet by [`Node::wait_for_log`], in order.
    pub fn logs_so_far(&self) -> Vec<String> {
        self.logs.try_iter().collect()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child process.
        let rc = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(rc, 0, "kill({sig})");
    }

    /// SIGTERM, then waits for a clean exit.
    pub fn stop(mut self) {
        self.signal(libc::SIGTERM);
        self.wait_for_log("stopped cleanly");
        let status = self.child.wait().expect("exits");
        assert!(status.success(), "exit status {status}");
    }

    /// SIGTERM, then up to `secs` for the node to exit (killed on drop otherwise): a
    /// benchmark's stop, which reads no logs.
    pub fn stop_within(mut self, secs: u64) {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("the node did not stop within {secs} s; killing it");
    }

    /// SIGKILL: the process dies without any chance to flush.
    pub fn kill9(mut self) -> PathBuf {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
        self.data_dir.clone()
    }

    /// Whether the process has ended by itself.
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_some()
    }

    /// Waits up to `secs` for the process to end by itself (a fail point aborting it);
    /// returns its exit status and data directory.
    pub fn wait_for_exit(mut self, secs: u64) -> (std::process::ExitStatus, PathBuf) {
        let status = wait_until(secs, "the node to exit", || {
            self.child.try_wait().expect("try_wait")
        });
        (status, self.data_dir.clone())
    }

    /// Starts a node again on the same executable, data directory and arguments.
    pub fn restart_after_kill9(self) -> Node {
        let extra = self.extra.clone();
        let bin = self.bin.clone();
        let dir = self.kill9();
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        Node::launch(&bin, &dir, &extra, &[])
    }

    /// GET on the HTTP listener; returns (status, body).
    pub fn http_get(&self, path: &str) -> (u16, String) {
        http_get(&self.http, path)
    }

    /// GET on the Schema Registry listener; returns (status, body).
    pub fn registry_get(&self, path: &str) -> (u16, String) {
        http_get(&self.registry, path)
    }

    /// The value of the unlabelled Prometheus metric `name` in `/metrics`.
    pub fn metric(&self, name: &str) -> f64 {
        let (_, metrics) = self.http_get("/metrics");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in /metrics:\n{metrics}"))
    }

    /// The node's `/metrics`, as `name{labels}` → value.
    pub fn metric_values(&self) -> HashMap<String, f64> {
        let (_, body) = self.http_get("/metrics");
        body.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect()
    }

    /// The node's CPU time (user + system) so far, in ms.
    pub fn cpu_ms(&self) -> f64 {
        process_cpu_ms(&self.pid().to_string())
    }

    /// The node's minor page faults so far (pages it touched for the first time, which the
    /// kernel zeroed for it) and its CPU time in the kernel, ms.
    pub fn faults_and_system_ms(&self) -> (u64, f64) {
        let f = proc_stat(&self.pid().to_string());
        // After the command name: minflt (field 10) is index 7, stime (15) index 12.
        let faults = f.get(7).copied().unwrap_or(0);
        let ticks = f.get(12).copied().unwrap_or(0);
        (faults, ticks as f64 * 1000.0 / clock_ticks())
    }

    /// The node's resident set size, in KiB.
    pub fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("status")
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .expect("VmRSS")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// utime + stime of process `pid` (or `"self"`) so far, in ms, from `/proc/<pid>/stat`.
pub fn process_cpu_ms(pid: &str) -> f64 {
    let f = proc_stat(pid);
    // After the command name: field 3 (state) is index 0, utime (14) index 11, stime (15) 12.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    ticks as f64 * 1000.0 / clock_ticks()
}

/// The numeric fields of `/proc/<pid>/stat` after the command name (field 3, the state, is
/// index 0); empty when the process is gone.
fn proc_stat(pid: &str) -> Vec<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    rest.split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect()
}

/// Clock ticks per second, the unit of `/proc/<pid>/stat`'s times.
fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

/// A plain HTTP/1.1 GET; returns (status, body).
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect HTTP");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("an HTTP status");
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// Polls `check` until it returns `Some`, or panics after `secs` seconds with `what`.
pub fn wait_until<T>(secs: u64, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Like [`wait_until`] for checks that block on their own (a consumer's `poll` with a timeout):
/// calls `check` again at once, without sleeping in between.
pub fn poll_until<T>(secs: u64, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
    }
}
