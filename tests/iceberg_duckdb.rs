//! DuckDB (its iceberg extension) against the Iceberg REST catalog of a running `inlet serve`:
//! DuckDB reads a table that pyiceberg wrote (two snapshots and a schema change), creates a
//! namespace and a table through the catalog and inserts into it and into pyiceberg's table;
//! pyiceberg reads all of it back. DuckDB's data files must land in the node's object store, under
//! `objects/warehouse`.
//!
//! The interpreter: `INLET_TEST_PYTHON`, else the venv of `scripts/test-env.sh`. Without
//! pyiceberg, duckdb and the duckdb-extension-{iceberg,avro,httpfs} packages (whose extension
//! files are loaded offline) the test is skipped locally and fails in CI.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::time::Duration;

use common::python::require_python;
use common::run_catalog_client;

#[test]
fn duckdb_reads_and_writes_through_the_nodes_catalog() {
    let Some(python) = require_python(
        "import pyiceberg.catalog.rest, pyarrow, duckdb, duckdb_extension_iceberg, \
         duckdb_extension_avro, duckdb_extension_httpfs",
        "pyiceberg, duckdb and its iceberg, avro and httpfs extension packages",
    ) else {
        return;
    };
    // DuckDB's table is in the node's object store: two inserts, at least a data file each.
    run_catalog_client(
        &python,
        "iceberg_duckdb.py",
        Duration::from_secs(180),
        "duck/events",
    );
}
