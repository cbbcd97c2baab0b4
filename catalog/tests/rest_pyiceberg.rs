//! pyiceberg's `RestCatalog` against the REST catalog server over a real SQL catalog: the
//! script `clients/rest_pyiceberg.py` creates namespaces and tables, appends and scans with
//! pyarrow, evolves the schema, loses and retries a concurrent commit, runs a create
//! transaction, renames and purges.
//!
//! The interpreter comes from `INLET_TEST_PYTHON`, else `$HOME/.cache/inlet/venv/bin/python`;
//! it needs `pyiceberg` and `pyarrow`. Without one the test is skipped, unless `CI` is set,
//! where it fails instead.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use iceberg::io::LocalFsStorageFactory;
use iceberg::CatalogBuilder;
use iceberg_catalog_sql::SqlCatalogBuilder;
use inlet_catalog::rest::{router_with_commits, RestConfig, SqlMetadataPointers};

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/clients/rest_pyiceberg.py"
);
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(300);

/// The Python interpreter to use, or `None` (after saying why) when the test should be skipped.
fn python() -> Option<PathBuf> {
    let candidate = match std::env::var_os("INLET_TEST_PYTHON") {
        Some(path) => PathBuf::from(path),
        None => {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            home.join(".cache/inlet/venv/bin/python")
        }
    };
    let usable = std::process::Command::new(&candidate)
        .args(["-c", "import pyiceberg, pyarrow"])
        .output()
        .map(|out| out.status.success())
        .unwrap_or(false);
    if usable {
        return Some(candidate);
    }
    inlet_test_support::skip(&format!(
        "no Python with pyiceberg and pyarrow at {} (set INLET_TEST_PYTHON)",
        candidate.display()
    ));
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyiceberg_uses_the_rest_catalog() {
    let Some(python) = python() else { return };

    let dir = tempfile::tempdir().expect("tempdir");
    let uri = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("catalog.db").display()
    );
    let warehouse = format!("file://{}/warehouse", dir.path().display());
    let catalog = SqlCatalogBuilder::default()
        .uri(&uri)
        .warehouse_location(&warehouse)
        .with_storage_factory(Arc::new(LocalFsStorageFactory))
        .load("inlet", HashMap::new())
        .await
        .expect("sql catalog");
    let pointers = SqlMetadataPointers::connect(&uri, "inlet")
        .await
        .expect("pointer store");
    let config = RestConfig {
        warehouse_location: Some(warehouse.clone()),
        allowed_locations: vec![warehouse.clone()],
        ..RestConfig::default()
    };
    config.validate().expect("valid config");
    let app = Router::new().nest(
        "/iceberg",
        router_with_commits(Arc::new(catalog), Arc::new(pointers), config),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        axum::serve(listener, app).await.expect("serve");
    });

    let child = tokio::process::Command::new(&python)
        .arg(SCRIPT)
        .env("INLET_ICEBERG_URI", format!("http://{addr}/iceberg"))
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(SCRIPT_TIMEOUT, child)
        .await
        .expect("the pyiceberg script timed out")
        .expect("run the pyiceberg script");
    server.abort();

    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.trim_end().ends_with("OK"),
        "pyiceberg script failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
}
