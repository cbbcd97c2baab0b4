//! An external REST catalog: node B keeps its tables in node A's catalog (`[catalog] type =
//! "rest"` with A's `/iceberg` as the URI, A's warehouse as the files' place). Records
//! produced to a table topic on B are read through A's catalog with pyiceberg, exactly once
//! each; B's own `/iceberg` fronts A (reads, and a pyiceberg append forwarded as a commit),
//! and `inlet query` on B reads the table from A. After a kill -9 of B, more records land in
//! A's table once each.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::time::Duration;

use common::python::run_client;
use common::{avro_python, inlet_query, Node};

#[test]
fn a_node_commits_its_table_topics_to_another_nodes_catalog() {
    let Some(python) = avro_python() else {
        return;
    };
    let a_dir = tempfile::tempdir().expect("tempdir");
    let a = Node::start(a_dir.path(), &[]);

    let b_dir = tempfile::tempdir().expect("tempdir");
    let config = b_dir.path().join("inlet.toml");
    let warehouse = a_dir.path().join("objects").join("warehouse");
    std::fs::write(
        &config,
        format!(
            "[catalog]\ntype = \"rest\"\nuri = \"http://{}/iceberg\"\nfiles = \"file://{}\"\n",
            a.http,
            warehouse.display()
        ),
    )
    .expect("config");
    let b_data = b_dir.path().join("data");
    let mut b = Node::start(&b_data, &["--config", &config.to_string_lossy()]);

    let phase = |b: &Node, phase: &str| {
        run_client(
            &python,
            "table_topic_external.py",
            &[
                &b.kafka,
                &format!("http://{}", b.registry),
                &format!("http://{}/iceberg", a.http),
                &format!("http://{}/iceberg", b.http),
                &phase,
            ],
            Duration::from_secs(240),
        );
    };
    phase(&b, "first");

    // B's SQL reads the table from A's catalog.
    let sql = "SELECT count(*) AS n, sum(id) AS s FROM ext.clicks";
    assert_eq!(inlet_query(&b, "csv", sql), "n,s\n20,190");

    // Nothing of the table is in B's own catalog or object store.
    assert!(!b_data.join("objects").join("warehouse").exists());

    // B resumes from the offsets in A's snapshot summary.
    b = b.restart_after_kill9();
    phase(&b, "after-restart");
    b.stop();
    a.stop();
}
