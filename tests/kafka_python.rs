//! The Kafka endpoint with Python's `confluent-kafka` as an independent client: the script
//! `tests/clients/confluent_kafka_roundtrip.py` runs admin calls (topics, incremental configs,
//! groups, DeleteRecords), idempotent produce with every codec, group consumers with commits and
//! OffsetsForTimes against a real node, and exits non-zero on the first mismatch.
//!
//! The interpreter: `INLET_TEST_PYTHON`, else the venv that `scripts/test-env.sh` creates
//! (`~/.cache/inlet/venv`). Without one that can `import confluent_kafka` the test is skipped
//! locally and fails in CI.

mod common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{require, Node};

/// How long the whole script may run before it is killed.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(300);

fn can_import_confluent_kafka(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import confluent_kafka"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The Python interpreter with confluent-kafka, if there is one.
fn python() -> Option<PathBuf> {
    let candidate = match std::env::var_os("INLET_TEST_PYTHON").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => {
            let home = std::env::var_os("HOME")?;
            let venv = PathBuf::from(home).join(".cache/inlet/venv/bin/python");
            if !venv.exists() {
                return None;
            }
            venv
        }
    };
    if can_import_confluent_kafka(&candidate) {
        Some(candidate)
    } else {
        eprintln!("{} cannot import confluent_kafka", candidate.display());
        None
    }
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name)
}

/// Runs `program args` with output captured to files (no pipe can fill up), killing it after
/// `timeout`. Returns the exit status (None when it was killed) and the combined output.
fn run(program: &Path, args: &[OsString], timeout: Duration) -> (Option<ExitStatus>, String) {
    let out_dir = tempfile::tempdir().expect("tempdir");
    let stdout_path = out_dir.path().join("stdout");
    let stderr_path = out_dir.path().join("stderr");
    let mut child = Command::new(program)
        .args(args)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = format!(
        "--- stdout ---\n{}--- stderr ---\n{}",
        std::fs::read_to_string(&stdout_path).unwrap_or_default(),
        std::fs::read_to_string(&stderr_path).unwrap_or_default()
    );
    (status, output)
}

#[test]
fn confluent_kafka_python_roundtrip() {
    let python = python();
    if !require("python with confluent-kafka", python.is_some()) {
        return;
    }
    let python = python.expect("checked");
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(
        dir.path(),
        &["--kafka-config", "group.initial.rebalance.delay.ms=0"],
    );
    let script = script("confluent_kafka_roundtrip.py");
    let (status, output) = run(
        &python,
        &[script.into_os_string(), node.kafka.clone().into()],
        SCRIPT_TIMEOUT,
    );
    match status {
        None => panic!("the script did not finish within {SCRIPT_TIMEOUT:?}\n{output}"),
        Some(status) => assert!(status.success(), "the script failed: {status}\n{output}"),
    }
    assert!(
        output.contains("\nOK\n"),
        "the script exited 0 without reaching its end\n{output}"
    );
    println!("{output}");
    node.stop();
}
