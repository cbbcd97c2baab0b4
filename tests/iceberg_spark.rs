//! Spark 3.5 with Iceberg's Spark runtime 1.10.2 against the Iceberg REST catalog of a running
//! `inlet serve`: Spark reads a table that pyiceberg wrote (two snapshots and a schema change),
//! then `CREATE NAMESPACE`, `CREATE TABLE ... USING iceberg`, `INSERT INTO`, `ALTER TABLE ... ADD
//! COLUMN` and `SELECT` through the catalog, and appends to pyiceberg's table; pyiceberg reads all
//! of it back. Spark's data files must land in the node's object store, under `objects/warehouse`.
//!
//! Spark's create requests carry no `location`, `partition-spec` or `write-order`, and its commits
//! no `identifier`: the server must take both.
//!
//! The interpreter: `INLET_TEST_PYTHON`, else the venv of `scripts/test-env.sh`. Without
//! pyiceberg, pyspark and the runtime jar (from the PyPI package snowpark-connect-deps-iceberg),
//! or without `java`, the test is skipped locally and fails in CI. One local Spark session: about
//! 20 s.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::time::Duration;

use common::{require_spark, run_catalog_client};

#[test]
fn spark_reads_and_writes_through_the_nodes_catalog() {
    let Some(python) = require_spark() else {
        return;
    };
    // Spark's table is in the node's object store: two inserts, at least a data file each.
    run_catalog_client(
        &python,
        "iceberg_spark.py",
        Duration::from_secs(300),
        "spark/clicks",
    );
}
