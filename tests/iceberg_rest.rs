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
