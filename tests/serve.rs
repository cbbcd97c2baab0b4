//! End to end: `inlet serve` starts on the embedded default, lays out its data directory, keeps
//! what was stored across restarts, and stops cleanly on SIGTERM.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Starts `inlet serve` in `dir` and waits until it logs that it is up.
fn start(dir: &std::path::Path) -> (Child, mpsc::Receiver<String>) {
    // Free ports, so the test never collides with a node already on the defaults.
    let mut child = common::serve_command(&dir.join("inlet-data"), &[] as &[&str])
        .env("INLET_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("inlet starts");
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    wait_for(&rx, "Inlet node is up");
    (child, rx)
}

fn wait_for(rx: &mpsc::Receiver<String>, needle: &str) -> String {
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no log line with {needle:?}"));
        if line.contains(needle) {
            return line;
        }
    }
}

fn sigterm(child: &Child) {
    // SAFETY: sending a signal to our own child process.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0, "kill(SIGTERM)");
}

#[test]
fn serve_starts_on_the_embedded_default_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut child, rx) = start(dir.path());
    let data = dir.path().join("inlet-data");
    for part in ["wal", "objects", "meta.db"] {
        assert!(
            data.join(part).exists(),
            "{part} is created under the data dir"
        );
    }
    sigterm(&child);
    wait_for(&rx, "stopped cleanly");
    let status = child.wait().expect("exits");
    assert!(status.success(), "exit status {status}");

    // A second start on the same directory finds its state again.
    let (mut child, rx) = start(dir.path());
    sigterm(&child);
    wait_for(&rx, "stopped cleanly");
    assert!(child.wait().expect("exits").success());
}

#[test]
fn bad_flags_get_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_inlet"))
        .args(["serve", "--kafka-listen", "nonsense"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("HOST:PORT"), "{stderr}");
}
