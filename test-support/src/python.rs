//! Running the Python client scripts (the root crate's `tests/clients/`, a crate's own
//! `tests/clients/`) with the test venv's interpreter.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

/// The interpreter: `INLET_TEST_PYTHON`, else the venv `scripts/test-env.sh` creates; `None`
/// unless it can run `import_check` (a Python statement).
pub fn python(import_check: &str) -> Option<PathBuf> {
    let candidate = match std::env::var_os("INLET_TEST_PYTHON").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => {
            let venv =
                PathBuf::from(std::env::var_os("HOME")?).join(".cache/inlet/venv/bin/python");
            if !venv.exists() {
                return None;
            }
            venv
        }
    };
    let ok = Command::new(&candidate)
        .args(["-c", import_check])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(candidate)
}

/// [`python`], or `None` after [`crate::require`] skipped the calling test (a failure in CI)
/// because there is no "python with `what`".
pub fn require_python(import_check: &str, what: &str) -> Option<PathBuf> {
    let python = python(import_check);
    crate::require(&format!("python with {what}"), python.is_some()).then_some(python?)
}

/// A script in the root crate's `tests/clients/`.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/clients")
        .join(name)
}

/// Runs `program args`, output captured to files, killed after `timeout`; returns the exit
/// status (`None` if killed) and the output for a failure message.
pub fn run(program: &Path, args: &[OsString], timeout: Duration) -> (Option<ExitStatus>, String) {
    let done = crate::process::run_captured(
        Command::new(program)
            .args(args)
            .env("PYTHONUNBUFFERED", "1"),
        None,
        timeout,
        // Waiting for the child to exit, checked every 50 ms.
        Duration::from_millis(50),
    );
    (done.status, done.output())
}

/// Runs the client script `name` of the root crate's `tests/clients/` with `args` under
/// `python`; it must exit 0 within `timeout` and print OK. Returns its output.
pub fn run_client(
    python: &Path,
    name: &str,
    args: &[&dyn AsRef<OsStr>],
    timeout: Duration,
) -> String {
    let mut all: Vec<OsString> = vec![script(name).into()];
    all.extend(args.iter().map(|a| a.as_ref().to_os_string()));
    let (status, output) = run(python, &all, timeout);
    assert!(
        status.is_some_and(|s| s.success()) && output.contains("OK"),
        "{name} {:?} failed ({status:?}):\n{output}",
        &all[1..]
    );
    output
}
