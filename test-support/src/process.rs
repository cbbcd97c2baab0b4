//! Running a program with its output captured to files and a watchdog: the Python client
//! scripts, kcat and other tools the end-to-end tests drive.

use std::io::Write;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What a finished (or killed) program left behind.
pub struct Captured {
    /// The exit status; `None` when it was killed after its timeout.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl Captured {
    /// Whether it exited 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Both outputs, labelled, for a failure message.
    pub fn output(&self) -> String {
        format!(
            "--- stdout ---\n{}--- stderr ---\n{}",
            self.stdout, self.stderr
        )
    }
}

/// Runs `command` with `stdin` on its standard input (none when `None`), its output captured
/// to files; killed after `timeout`. Checks for its exit every `poll`.
pub fn run_captured(
    command: &mut Command,
    stdin: Option<&[u8]>,
    timeout: Duration,
    poll: Duration,
) -> Captured {
    let out_dir = tempfile::tempdir().expect("tempdir");
    let stdout_path = out_dir.path().join("stdout");
    let stderr_path = out_dir.path().join("stderr");
    let mut child = command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(std::fs::File::create(&stdout_path).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", command.get_program()));
    let writer = stdin.map(|data| {
        let mut input = child.stdin.take().expect("stdin");
        let data = data.to_vec();
        std::thread::spawn(move || {
            // A program that exits early closes the pipe; its exit status tells what happened.
            let _ = input.write_all(&data);
        })
    });
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
        std::thread::sleep(poll);
    };
    if let Some(writer) = writer {
        let _ = writer.join();
    }
    Captured {
        status,
        stdout: std::fs::read_to_string(&stdout_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&stderr_path).unwrap_or_default(),
    }
}

/// Whether `program arg` runs and exits 0 (`java -version`, `kcat -V`): is the tool here?
pub fn tool_runs(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
