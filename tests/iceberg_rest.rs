//! The Iceberg REST catalog of a running `inlet serve`, with pyiceberg as the client: create a
//! namespace and a table, append, evolve the schema and append again; then kill -9 the node,
//! restart it and read the table back. The table's files must be in the node's object store, under
//! `objects/warehouse`.
//!
//! The interpreter: `INLET_TEST_PYTHON`, else the venv of `scripts/test-env.sh`. Without
//! pyiceberg the test is skipped locally and fails in CI.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::time::Duration;

use common::python::{require_python, run_client};
use common::{service_env, Node};

#[test]
fn pyiceberg_reads_and_writes_through_the_nodes_catalog() {
    let Some(python) = require_python("import pyiceberg.catalog.rest, pyarrow", "pyiceberg") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut node = Node::start(dir.path(), &[]);
    for phase in ["write", "read"] {
        let uri = format!("http://{}/iceberg", node.http);
        run_client(
            &python,
            "iceberg_node.py",
            &[&uri, &phase],
            Duration::from_secs(180),
        );
        if phase == "write" {
            node = node.restart_after_kill9();
        }
    }
    // The table's data files are in the node's object store.
    let warehouse = dir.path().join("objects/warehouse/shop/orders/data");
    let files = std::fs::read_dir(&warehouse)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "parquet"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(
        files,
        2,
        "two appends, two data files under {}",
        warehouse.display()
    );
    node.stop();
}

/// The cluster setup: metadata (and the catalog) in PostgreSQL, files in S3 (moto). The node
/// tells clients the S3 endpoint through `/v1/config`, so pyiceberg writes and reads the same
/// bucket.
#[test]
fn pyiceberg_through_a_node_on_postgres_and_s3() {
    let Some(python) = require_python("import pyiceberg.catalog.rest, pyarrow", "pyiceberg") else {
        return;
    };
    let (Some(pg), Some(endpoint), Some(bucket)) = (
        service_env("INLET_TEST_POSTGRES_URL"),
        service_env("INLET_TEST_S3_ENDPOINT"),
        service_env("INLET_TEST_S3_BUCKET"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let db = common::fresh_postgres_database(&pg);
    // A prefix of its own in the shared bucket.
    let prefix = dir
        .path()
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let object_store = format!("s3://{bucket}/{prefix}");
    let node = Node::start_with_env(
        dir.path(),
        &["--meta", &db, "--object-store", &object_store],
        &[("AWS_ENDPOINT", &endpoint), ("AWS_ALLOW_HTTP", "true")],
    );
    let uri = format!("http://{}/iceberg", node.http);
    for phase in ["write", "read"] {
        run_client(
            &python,
            "iceberg_node.py",
            &[&uri, &phase],
            Duration::from_secs(180),
        );
    }
    node.stop();
}

/// `[http] authentication = "token"`: pyiceberg's `credential` through the catalog's OAuth2
/// token endpoint, table privileges from the Kafka ACLs (a table's own name, a table topic's
/// topic), and SQL and watermarks under the same tokens (`tests/clients/http_auth.py`); then
/// Spark with Iceberg Java's OAuth2 client (`tests/clients/spark_oauth.py`).
#[test]
fn the_http_listener_takes_tokens_and_the_kafka_acls_decide_what_they_may_do() {
    let Some(python) = require_python(
        "import pyiceberg.catalog.rest, pyarrow, confluent_kafka",
        "pyiceberg and confluent-kafka",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (node, sasl) = common::secured_node(
        dir.path(),
        "[http]\nauthentication = \"token\"\ntoken_ttl_s = 600\n",
    );
    let output = run_client(
        &python,
        "http_auth.py",
        &[&format!("http://{}", node.http), &sasl],
        Duration::from_secs(400),
    );
    let token = output
        .lines()
        .find_map(|l| l.strip_prefix("TOKEN "))
        .expect("http_auth.py prints a token");
    // The CLI sends INLET_TOKEN; without it the node refuses.
    let query = |token: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_inlet"));
        cmd.args(["query", "--server", &format!("http://{}", node.http)])
            .args([
                "--format",
                "csv",
                "SELECT count(*) AS n FROM analytics.daily",
            ])
            .env_remove("INLET_TOKEN");
        if let Some(t) = token {
            cmd.env("INLET_TOKEN", t);
        }
        let out = cmd.output().unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (ok, out) = query(Some(token));
    assert!(ok && out.contains('2'), "{out}");
    let (ok, out) = query(None);
    assert!(!ok && out.contains("requires authentication"), "{out}");
    // Iceberg Java's OAuth2 client, in Spark.
    if let Some(spark) = common::require_spark() {
        let output = run_client(
            &spark,
            "spark_oauth.py",
            &[&format!("http://{}/iceberg", node.http)],
            Duration::from_secs(300),
        );
        assert!(output.contains("spark 3.5"), "{output}");
    }
    node.stop();

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[http]\nauthentication = \"oauth\"\n").unwrap();
    let text = common::refused_at_start(
        &dir.path().join("other"),
        &["--config".into(), bad.to_string_lossy().into_owned()],
    );
    assert!(
        text.contains("[http] authentication \"oauth\" is not one of none, token"),
        "{text}"
    );
}
