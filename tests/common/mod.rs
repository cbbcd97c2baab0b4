//! What only the root crate's end-to-end tests share: the `inlet` executable this crate builds,
//! on the kit's launcher (`inlet_test_support::node`), and the table topic client scripts of
//! `tests/clients/`. The launcher, the Python runner (`python`) and the raw Kafka wire helpers
//! (`wire`) are the kit's.
#![allow(dead_code, unused_imports)] // each test binary uses some of it

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub(crate) use inlet_test_support::node::{http_get, poll_until, wait_until, Node};
pub(crate) use inlet_test_support::process::tool_runs;
/// A required external tool or service for client tests: in CI (`CI` set) its absence fails
/// the test; elsewhere the test is skipped and the skip is counted (`inlet_test_support`).
pub(crate) use inlet_test_support::{python, require, service_env, wire};

/// The `inlet` executable under test.
pub(crate) const INLET: &str = env!("CARGO_BIN_EXE_inlet");

/// `inlet serve` on `data_dir`, listening on free ports, with `extra` arguments.
pub(crate) fn serve_command<S: AsRef<std::ffi::OsStr>>(data_dir: &Path, extra: &[S]) -> Command {
    inlet_test_support::node::serve_command(INLET.as_ref(), data_dir, extra)
}

/// Starting [`Node`]s of this crate's `inlet`.
pub(crate) trait Start {
    /// Starts a node on `data_dir` with extra `serve` arguments.
    fn start(data_dir: &Path, extra: &[&str]) -> Node;
    /// [`Start::start`] with extra environment variables for the node.
    fn start_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Node;
}

impl Start for Node {
    fn start(data_dir: &Path, extra: &[&str]) -> Node {
        Node::launch(INLET.as_ref(), data_dir, extra, &[])
    }

    fn start_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Node {
        Node::launch(INLET.as_ref(), data_dir, extra, env)
    }
}

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
pub(crate) fn run_table_topic_script(script: &str) -> Option<ScriptRun> {
    let python = avro_python()?;
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path(), &[]);
    let output = run_table_topic_phase(&python, script, &node, "run", Duration::from_secs(240));
    Some(ScriptRun {
        node,
        output,
        _dir: dir,
    })
}

/// A Python with confluent-kafka's Avro serializer and pyiceberg; None after skipping the
/// test (a failure in CI).
pub(crate) fn avro_python() -> Option<PathBuf> {
    python::require_python(
        "import confluent_kafka.schema_registry.avro, pyiceberg.catalog.rest",
        "confluent-kafka[avro] and pyiceberg",
    )
}

/// Is there a `java` that runs (for Spark)?
pub(crate) fn java() -> bool {
    tool_runs("java", "-version")
}

/// A Python with pyiceberg, pyspark and Iceberg's Spark runtime jar (from the PyPI package
/// snowpark-connect-deps-iceberg), and a `java` that runs; None after skipping the test (a
/// failure in CI) when either is missing.
pub(crate) fn require_spark() -> Option<PathBuf> {
    let python = python::python(
        "import pyiceberg.catalog.rest, pyarrow, pyspark, snowpark_connect_deps_iceberg, os; \
         assert os.path.isfile(os.path.join(os.path.dirname(snowpark_connect_deps_iceberg.__file__), \
         'jars', 'iceberg-spark-runtime-3.5_2.12-1.10.2.jar'))",
    );
    if !require(
        "python with pyiceberg, pyspark and the Iceberg Spark runtime jar",
        python.is_some(),
    ) || !require("java (for Spark)", java())
    {
        return None;
    }
    python
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
