//! Running the Python client scripts in `tests/clients/` with the test venv's interpreter.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The interpreter: `INLET_TEST_PYTHON`, else the venv `scripts/test-env.sh` creates; `None`
/// unless it can run `import_check` (a Python statement).
pub(crate) fn python(import_check: &str) -> Option<PathBuf> {
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

/// A script in `tests/clients/`.
pub(crate) fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name)
}

/// Runs `program args`, output captured to files, killed after `timeout`; returns the exit
/// status (`None` if killed) and the output for a failure message.
pub(crate) fn run(
    program: &Path,
    args: &[OsString],
    timeout: Duration,
) -> (Option<ExitStatus>, String) {
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
        // Waiting for the child to exit, checked every 50 ms.
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = format!(
        "--- stdout ---\n{}--- stderr ---\n{}",
        std::fs::read_to_string(&stdout_path).unwrap_or_default(),
        std::fs::read_to_string(&stderr_path).unwrap_or_default()
    );
    (status, output)
}
