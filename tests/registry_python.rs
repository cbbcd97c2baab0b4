//! The Schema Registry with Python's `confluent-kafka` SchemaRegistryClient and its serdes as
//! an independent client. `tests/clients/schema_registry_avro.py` registers, looks up, evolves,
//! is refused an incompatible change, sets configs, deletes, and round-trips an Avro record;
//! `schema_registry_protobuf_json.py` does the same with the Protobuf (imports as references,
//! several message types) and JSON Schema serdes, then reads everything back through a
//! registry restarted on the same store. The registry runs in this test (a real router on
//! 127.0.0.1:0 over a temporary SQLite metadata store).
//!
//! The interpreter: `INLET_TEST_PYTHON`, else the venv that `scripts/test-env.sh` creates
//! (`~/.cache/inlet/venv`). Without one that can import `confluent_kafka.schema_registry` and
//! `fastavro` the test is skipped locally and fails in CI.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::python::{require_python, run, script};
use inlet_schema_registry::{RegistryConfig, VersionSpec};
use inlet_storage::MetaStore;
use tokio_util::sync::CancellationToken;

/// How long the script may run before it is killed.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

#[test]
fn confluent_schema_registry_client_with_avro() {
    let Some(python) = require_python(
        "import confluent_kafka.schema_registry.avro, fastavro",
        "confluent-kafka[avro,schemaregistry]",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let meta_url = format!("sqlite://{}", dir.path().join("meta.db").display());
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (addr, stop, server) = rt.block_on(start(&meta_url));
    let script = script("schema_registry_avro.py");
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
                .versions("users-value", inlet_schema_registry::Deleted::Exclude)
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
        assert!(
            registry
                .subjects("", inlet_schema_registry::Deleted::Include)
                .await
                .expect("subjects")
                == vec!["users-value"]
        );
    });
}

/// Serves a registry over `meta_url` on 127.0.0.1:0 until the token is cancelled.
async fn start(
    meta_url: &str,
) -> (
    std::net::SocketAddr,
    CancellationToken,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let meta = MetaStore::connect(meta_url).await.expect("meta store");
    let registry = inlet_schema_registry::open(meta, RegistryConfig::default())
        .await
        .expect("registry");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stop = CancellationToken::new();
    let server = tokio::spawn(inlet_schema_registry::serve(
        listener,
        Arc::new(registry),
        None,
        stop.clone(),
    ));
    (addr, stop, server)
}

#[test]
fn confluent_schema_registry_client_with_protobuf_and_json() {
    let Some(python) = require_python("import confluent_kafka.schema_registry.protobuf, confluent_kafka.schema_registry.json_schema", "confluent-kafka[schemaregistry,protobuf,json]") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let meta_url = format!("sqlite://{}", dir.path().join("meta.db").display());
    let state = dir.path().join("framed.json");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    for phase in ["write", "read"] {
        // A new registry each phase: the read phase sees only what the store kept.
        let (addr, stop, server) = rt.block_on(start(&meta_url));
        let (status, output) = run(
            &python,
            &[
                script("schema_registry_protobuf_json.py").into(),
                format!("http://{addr}").into(),
                phase.into(),
                state.clone().into(),
            ],
            SCRIPT_TIMEOUT,
        );
        stop.cancel();
        rt.block_on(server)
            .expect("server task")
            .expect("server stops cleanly");
        eprintln!("{output}");
        assert!(
            status.is_some_and(|s| s.success()) && output.contains("ALL OK"),
            "the {phase} phase failed ({status:?}):\n{output}"
        );
    }
}
