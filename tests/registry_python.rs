//! The Schema Registry with Python's `confluent-kafka` SchemaRegistryClient and its Avro
//! serializer as an independent client: `tests/clients/schema_registry_avro.py` registers, looks
//! up, evolves, is refused an incompatible change, sets configs, deletes, and round-trips a
//! record. The registry runs in this test (a real router on 127.0.0.1:0 over a temporary SQLite
//! metadata store); afterwards it is reopened on the same file to check that nothing was lost.
//!
//! The interpreter: `INLET_TEST_PYTHON`, else the venv that `scripts/test-env.sh` creates
//! (`~/.cache/inlet/venv`). Without one that can import `confluent_kafka.schema_registry` and
//! `fastavro` the test is skipped locally and fails in CI.

mod common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::require;
use inlet_schema_registry::{RegistryConfig, VersionSpec};
use inlet_storage::MetaStore;
use tokio_util::sync::CancellationToken;

/// How long the script may run before it is killed.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

fn python() -> Option<PathBuf> {
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
    let imports = Command::new(&candidate)
        .args([
            "-c",
            "import confluent_kafka.schema_registry.avro, fastavro",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if imports {
        Some(candidate)
    } else {
        eprintln!(
            "{} cannot import confluent_kafka.schema_registry and fastavro",
            candidate.display()
        );
        None
    }
}

/// Runs `program args` with output captured to files, killing it after `timeout`.
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
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = format!(
        "--- stdout ---\n{}--- stderr ---\n{}",
        std::fs::read_to_string(&stdout_path).unwrap_or_default(),
        std::fs::read_to_string(&stderr_path).unwrap_or_default()
    );
    (status, output)
}

#[test]
fn confluent_schema_registry_client_with_avro() {
    let python = python();
    if !require(
        "python with confluent-kafka[avro,schemaregistry]",
        python.is_some(),
    ) {
        return;
    }
    let python = python.expect("checked");
    let dir = tempfile::tempdir().expect("tempdir");
    let meta_url = format!("sqlite://{}", dir.path().join("meta.db").display());
    let rt = tokio::runtime::Runtime::new().expect("runtime");

    let stop = CancellationToken::new();
    let (addr, server) = rt.block_on(async {
        let meta = MetaStore::connect(&meta_url).await.expect("meta store");
        let registry = inlet_schema_registry::open(meta, RegistryConfig::default())
            .await
            .expect("registry");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(inlet_schema_registry::serve(
            listener,
            Arc::new(registry),
            stop.clone(),
        ));
        (addr, server)
    });

    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/schema_registry_avro.py");
    let (status, output) = run(
        &python,
        &[script.into(), format!("http://{addr}").into()],
        SCRIPT_TIMEOUT,
    );
    stop.cancel();
    rt.block_on(server)
        .expect("server task")
        .expect("server stops cleanly");
    assert!(
        status.is_some_and(|s| s.success()),
        "the client script failed ({status:?}):\n{output}"
    );
    eprintln!("{output}");
    assert!(output.contains("ALL OK"), "{output}");

    // Reopened on the same file: the versions and ids the client saw are still there.
    rt.block_on(async {
        let meta = MetaStore::connect(&meta_url).await.expect("meta store");
        let registry = inlet_schema_registry::open(meta, RegistryConfig::default())
            .await
            .expect("registry");
        assert_eq!(
            registry
                .versions("users-value", false)
                .await
                .expect("versions"),
            vec![1, 2]
        );
        let v1 = registry
            .version("users-value", VersionSpec::Number(1), false)
            .await
            .expect("v1");
        let v2 = registry
            .version("users-value", VersionSpec::Latest, false)
            .await
            .expect("v2");
        assert_eq!(v2.version, 2);
        assert!(v1.schema.id < v2.schema.id);
        assert!(registry.subjects(true).await.expect("subjects") == vec!["users-value"]);
    });
}
