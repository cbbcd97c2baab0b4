//! AWS Glue as the node's catalog (`[catalog] type = "glue"`), against moto's Glue and S3
//! (from `scripts/test-env.sh`): records produced to a table topic are read exactly once each
//! with pyiceberg's own `GlueCatalog`; the Glue table carries `table_type=ICEBERG` and the
//! metadata locations; the node's `/iceberg` fronts Glue (reads, and a pyiceberg append
//! committed to Glue); a table pyiceberg wrote to Glue reads back through the node; `inlet
//! query` counts the rows. After a kill -9, and after the node aborts at each of the Glue
//! commit's steps (metadata file written; Glue table updated), more records land once each.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::time::Duration;

use common::python::{require_python, run_client};
use common::{inlet_query, service_env, Node};

#[test]
fn a_node_commits_its_table_topics_to_glue() {
    let Some(python) = require_python(
        "import confluent_kafka.schema_registry.avro, pyiceberg.catalog.glue, boto3, pyarrow",
        "confluent-kafka[avro], pyiceberg and boto3",
    ) else {
        return;
    };
    let (Some(endpoint), Some(bucket)) = (
        service_env("INLET_TEST_S3_ENDPOINT"),
        service_env("INLET_TEST_S3_BUCKET"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    // A prefix of its own in the shared bucket, and a Glue database of its own.
    let prefix = dir
        .path()
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase().replace('.', "_"))
        .unwrap_or_default();
    let namespace = format!("glue_{}", prefix.trim_start_matches('_'));
    let object_store = format!("s3://{bucket}/{prefix}");
    let warehouse = format!("{object_store}/warehouse");
    let config = dir.path().join("inlet.toml");
    std::fs::write(
        &config,
        format!("[catalog]\ntype = \"glue\"\nregion = \"us-east-1\"\nendpoint = \"{endpoint}\"\n"),
    )
    .expect("config");
    let data = dir.path().join("data");
    let env = [
        ("AWS_ENDPOINT", endpoint.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
    ];
    let config = config.to_string_lossy();
    let args: [&str; 4] = ["--object-store", &object_store, "--config", &config];
    let start = || Node::start_with_env(&data, &args, &env);
    let node = start();

    let phase = |node: &Node, phase: &str| {
        let output = run_client(
            &python,
            "table_topic_glue.py",
            &[
                &node.kafka,
                &format!("http://{}", node.registry),
                &endpoint,
                &warehouse,
                &format!("http://{}/iceberg", node.http),
                &namespace,
                &phase,
            ],
            Duration::from_secs(240),
        );
        if std::env::var_os("INLET_TEST_VERBOSE").is_some() {
            eprintln!("{output}");
        }
    };
    phase(&node, "first");

    // The node's SQL reads the table from Glue.
    let sql = format!("SELECT count(*) AS n, sum(id) AS s FROM {namespace}.{namespace}_clicks");
    assert_eq!(inlet_query(&node, "csv", &sql), "n,s\n20,190");

    // The node's /iceberg lists Glue's databases.
    let (status, body) = node.http_get("/iceberg/v1/namespaces");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&namespace), "{body}");

    // The node resumes from the offsets in the Glue table's snapshot summary, also when it
    // dies with a commit's metadata file written but the Glue table not updated yet, and
    // right after the Glue table was updated.
    node.kill9();
    let mut produced = 20;
    for point in ["metadata-staged", "committed"] {
        let armed = format!("{point}:1");
        let mut env = env.to_vec();
        env.push((inlet_table_coordinator::failpoint::VAR, armed.as_str()));
        let doomed = Node::start_with_env(&data, &args, &env);
        phase(&doomed, &format!("produce:{produced}:{}", produced + 5));
        produced += 5;
        let (status, _) = doomed.wait_for_exit(120);
        assert!(!status.success(), "the node aborts at {point}");
        let node = start();
        phase(&node, &format!("check:{produced}"));
        node.kill9();
    }
    let node = start();
    phase(&node, "check:30");
    node.stop();
}
