//! A real `inlet serve` process for end-to-end tests: started on free ports in a temporary
//! data directory, stopped with SIGTERM or killed with SIGKILL, restarted on the same data.
#![allow(dead_code)]

pub(crate) mod python;
pub(crate) mod wire;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// `inlet serve` on `data_dir`, listening on free ports, with `extra` arguments.
pub(crate) fn serve_command<S: AsRef<std::ffi::OsStr>>(data_dir: &Path, extra: &[S]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_inlet"));
    command
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
        .args(extra);
    command
}

/// A running node.
pub(crate) struct Node {
    child: Child,
    logs: mpsc::Receiver<String>,
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
    /// Starts a node on `data_dir` with extra `serve` arguments.
    pub(crate) fn start(data_dir: &Path, extra: &[&str]) -> Node {
        Node::start_with_env(data_dir, extra, &[])
    }

    /// [`Node::start`] with extra environment variables for the node.
    pub(crate) fn start_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Node {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let mut child = serve_command(data_dir, &extra)
            .env(
                "INLET_LOG",
                std::env::var("INLET_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("inlet starts");
        let (tx, logs) = mpsc::channel();
        let verbose = std::env::var_os("INLET_TEST_VERBOSE").is_some();
        let stdout = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // Warnings and errors of the node go to the test's output.
                if line.contains(" WARN ") || line.contains(" ERROR ") || verbose {
                    eprintln!("[inlet] {line}");
                }
                let _ = tx.send(line);
            }
        });
        let mut node = Node {
            child,
            logs,
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
    pub(crate) fn wait_for_log(&self, needle: &str) -> String {
        self.wait_for_any_log(&[needle])
    }

    /// The first log line, from now, with any of `needles`; panics after 120 s.
    pub(crate) fn wait_for_any_log(&self, needles: &[&str]) -> String {
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
    #[allow(dead_code)] // not every test binary reads them
    pub(crate) fn logs_so_far(&self) -> Vec<String> {
        self.logs.try_iter().collect()
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child process.
        let rc = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(rc, 0, "kill({sig})");
    }

    /// SIGTERM, then waits for a clean exit.
    pub(crate) fn stop(mut self) {
        self.signal(libc::SIGTERM);
        self.wait_for_log("stopped cleanly");
        let status = self.child.wait().expect("exits");
        assert!(status.success(), "exit status {status}");
    }

    /// SIGKILL: the process dies without any chance to flush.
    pub(crate) fn kill9(mut self) -> PathBuf {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
        self.data_dir.clone()
    }

    /// Whether the process has ended by itself.
    pub(crate) fn exited(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_some()
    }

    /// Waits up to `secs` for the process to end by itself (a fail point aborting it);
    /// returns its exit status and data directory.
    pub(crate) fn wait_for_exit(mut self, secs: u64) -> (std::process::ExitStatus, PathBuf) {
        let status = wait_until(secs, "the node to exit", || {
            self.child.try_wait().expect("try_wait")
        });
        (status, self.data_dir.clone())
    }

    /// Starts a node again on the same data directory and arguments.
    pub(crate) fn restart_after_kill9(self) -> Node {
        let extra = self.extra.clone();
        let dir = self.kill9();
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        Node::start(&dir, &extra)
    }

    /// GET on the HTTP listener; returns (status, body).
    pub(crate) fn http_get(&self, path: &str) -> (u16, String) {
        http_get(&self.http, path)
    }

    /// GET on the Schema Registry listener; returns (status, body).
    pub(crate) fn registry_get(&self, path: &str) -> (u16, String) {
        http_get(&self.registry, path)
    }

    /// The value of the unlabelled Prometheus metric `name` in `/metrics`.
    pub(crate) fn metric(&self, name: &str) -> f64 {
        let (_, metrics) = self.http_get("/metrics");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in /metrics:\n{metrics}"))
    }

    /// The node's resident set size, in KiB.
    pub(crate) fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("status")
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .expect("VmRSS")
    }
}

/// A plain HTTP/1.1 GET; returns (status, body).
pub(crate) fn http_get(addr: &str, path: &str) -> (u16, String) {
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

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` until it returns `Some`, or panics after `secs` seconds with `what`.
pub(crate) fn wait_until<T>(secs: u64, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
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
pub(crate) fn poll_until<T>(secs: u64, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
    }
}

/// A required external tool or service for client tests: in CI (`CI` set) its absence fails
/// the test; elsewhere the test is skipped and the skip is counted (`inlet_test_support`).
#[allow(unused_imports)] // each test binary uses some of them
pub(crate) use inlet_test_support::{require, service_env};

/// Runs one phase of a table topic client script (`script BOOTSTRAP REGISTRY_URL ICEBERG_URI
/// PHASE`) against `node`; it must exit 0 and print OK. In its `after-restart` phase the
/// script also reads with DuckDB: only a machine without DuckDB's packages skips that, never
/// CI. Returns the script's output.
pub(crate) fn run_table_topic_phase(
    python: &Path,
    script_name: &str,
    node: &Node,
    phase: &str,
    timeout: Duration,
) -> String {
    let (status, output) = python::run(
        python,
        &[
            python::script(script_name).into(),
            node.kafka.clone().into(),
            format!("http://{}", node.registry).into(),
            format!("http://{}/iceberg", node.http).into(),
            phase.into(),
        ],
        timeout,
    );
    assert!(
        status.is_some_and(|s| s.success()) && output.contains("OK"),
        "the {phase} phase of {script_name} failed ({status:?}):\n{output}"
    );
    if phase == "after-restart" && std::env::var_os("CI").is_some() {
        assert!(
            output.contains("DuckDB OK"),
            "DuckDB did not check:\n{output}"
        );
    }
    output
}

/// A node started in a new data directory, after which a one-phase table topic client
/// script (`script BOOTSTRAP REGISTRY_URL ICEBERG_URI run`) ran against it and printed OK.
pub(crate) struct ScriptRun {
    pub node: Node,
    /// What the script printed.
    pub output: String,
    _dir: tempfile::TempDir,
}

/// Starts a node and runs `script`'s `run` phase with confluent-kafka (Avro) and pyiceberg;
/// None when that Python is missing and the test is skipped (a failure in CI).
#[allow(dead_code)] // not every test binary runs such a script
pub(crate) fn run_table_topic_script(script: &str) -> Option<ScriptRun> {
    let python =
        python::python("import confluent_kafka.schema_registry.avro, pyiceberg.catalog.rest");
    if !require(
        "python with confluent-kafka[avro] and pyiceberg",
        python.is_some(),
    ) {
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path(), &[]);
    let output = run_table_topic_phase(
        &python.expect("checked"),
        script,
        &node,
        "run",
        Duration::from_secs(240),
    );
    Some(ScriptRun {
        node,
        output,
        _dir: dir,
    })
}

/// Is there a `java` that runs (for Spark)?
pub(crate) fn java() -> bool {
    Command::new("java")
        .arg("-version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A Python with pyiceberg, pyspark and Iceberg's Spark runtime jar (from the PyPI package
/// snowpark-connect-deps-iceberg), when there is one.
pub(crate) fn spark_python() -> Option<PathBuf> {
    python::python(
        "import pyiceberg.catalog.rest, pyarrow, pyspark, snowpark_connect_deps_iceberg, os; \
         assert os.path.isfile(os.path.join(os.path.dirname(snowpark_connect_deps_iceberg.__file__), \
         'jars', 'iceberg-spark-runtime-3.5_2.12-1.10.2.jar'))",
    )
}

/// A new empty database on the PostgreSQL at `url`; returns its URL
/// (`inlet_test_support::fresh_postgres_database`, for synchronous tests).
pub(crate) fn fresh_postgres_database(url: &str) -> String {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(inlet_test_support::fresh_postgres_database(url))
}
