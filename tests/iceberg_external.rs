//! An external REST catalog: node B keeps its tables in node A's catalog (`[catalog] type =
//! "rest"` with A's `/iceberg` as the URI, A's warehouse as the files' place). Records
//! produced to a table topic on B are read through A's catalog with pyiceberg, exactly once
//! each; B's own `/iceberg` fronts A (reads, and a pyiceberg append forwarded as a commit),
//! and `inlet query` on B reads the table from A. After a kill -9 of B, more records land in
//! A's table once each.
//!
//! The same, with AWS Signature Version 4 between B and A, as B calls AWS's S3 Tables
//! endpoint (its table bucket's ARN as the warehouse): a stub in front of A checks every call
//! with botocore's signer and refuses tampered ones.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::python::{require_python, run_client, script};
use common::{avro_python, inlet_query, Node};

/// `table_topic_external.py`'s `phase`: records produced to node `b`, whose catalog is node
/// `a`'s, read back through both.
fn external_phase(python: &std::path::Path, a: &Node, b: &Node, phase: &str) {
    run_client(
        python,
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
}

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

    let phase = |b: &Node, phase: &str| external_phase(&python, &a, b, phase);
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

/// A process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_node_signs_its_calls_to_an_aws_style_catalog_with_sigv4() {
    let Some(python) = require_python(
        "import confluent_kafka.schema_registry.avro, pyiceberg, pyarrow, botocore",
        "confluent-kafka[avro], pyiceberg, pyarrow and botocore",
    ) else {
        return;
    };
    let a_dir = tempfile::tempdir().expect("tempdir");
    let a = Node::start(a_dir.path(), &[]);

    // The stub: an AWS-style endpoint in front of A's catalog.
    let (key, secret) = ("AKIDINLETSIGV4TEST", "inlet/sigv4+test-secret");
    let mut stub = Command::new(&python)
        .arg(script("sigv4_stub.py"))
        .args([
            &format!("http://{}/iceberg", a.http),
            key,
            secret,
            "us-east-1",
            "s3tables",
        ])
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the SigV4 stub starts");
    let mut line = String::new();
    std::io::BufReader::new(stub.stdout.take().expect("its stdout"))
        .read_line(&mut line)
        .expect("the stub's port");
    let stub = (
        Killed(stub),
        format!(
            "127.0.0.1:{}",
            line.trim()
                .strip_prefix("LISTENING ")
                .expect("LISTENING <port>")
        ),
    );

    // B: S3 Tables as AWS's docs configure it (the table bucket's ARN; SigV4 for `s3tables`
    // in its region follows), the endpoint pointed at the stub.
    let b_dir = tempfile::tempdir().expect("tempdir");
    let config = b_dir.path().join("inlet.toml");
    let warehouse = a_dir.path().join("objects").join("warehouse");
    std::fs::write(
        &config,
        format!(
            "[catalog]\ntype = \"rest\"\nuri = \"http://{}/iceberg\"\n\
             warehouse = \"arn:aws:s3tables:us-east-1:111122223333:bucket/inlet-test\"\n\
             files = \"file://{}\"\n",
            stub.1,
            warehouse.display()
        ),
    )
    .expect("config");
    let env = [
        ("AWS_ACCESS_KEY_ID", key),
        ("AWS_SECRET_ACCESS_KEY", secret),
    ];
    let b_data = b_dir.path().join("data");
    let b = Node::start_with_env(&b_data, &["--config", &config.to_string_lossy()], &env);
    external_phase(&python, &a, &b, "first");
    let sql = "SELECT count(*) AS n, sum(id) AS s FROM ext.clicks";
    assert_eq!(inlet_query(&b, "csv", sql), "n,s\n20,190");

    // Every call B made was signed as botocore signs, none refused.
    let (status, stats) = common::http_get(&stub.1, "/__stub/stats");
    assert_eq!(status, 200, "{stats}");
    let stats: serde_json::Value = serde_json::from_str(&stats).expect("stats");
    assert_eq!(stats["refused"], 0, "{stats}");
    assert!(stats["verified"].as_u64().unwrap_or(0) >= 5, "{stats}");
    // A tampered copy of B's last call is refused; the same call unchanged is not.
    let (status, tamper) = common::http_get(&stub.1, "/__stub/tamper");
    assert_eq!(status, 200, "{tamper}");
    let tamper: serde_json::Value = serde_json::from_str(&tamper).expect("tamper");
    assert_eq!(tamper["unchanged"], 200, "{tamper}");
    for part in ["body", "path", "date", "signature"] {
        assert_eq!(tamper[part], 403, "{part}: {tamper}");
    }
    b.stop();
    a.stop();
}
