//! Kafka ACLs (`ingest/src/acl`) with confluent-kafka, from `tests/clients/acls.py`: created,
//! described and deleted through the admin API, enforced on produce, consume, metadata, groups
//! and transactions, kept in the metadata store across a restart; and refused with
//! SECURITY_DISABLED on a node without an authorizer.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::path::Path;
use std::time::Duration;

use common::python::{require_python, run, script};
use common::Node;

const AUTHORIZER: &[&str] = &[
    "--kafka-config",
    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "--kafka-config",
    "allow.everyone.if.no.acl.found=true",
];

fn phase(python: &Path, node: &Node, phase: &str) -> String {
    let (status, output) = run(
        python,
        &[
            script("acls.py").into(),
            node.kafka.clone().into(),
            phase.into(),
        ],
        Duration::from_secs(300),
    );
    assert!(
        status.is_some_and(|s| s.success()) && output.contains("\nOK\n"),
        "the {phase} phase failed ({status:?}):\n{output}"
    );
    output
}

#[test]
fn acls_are_administered_enforced_and_kept_across_a_restart() {
    let Some(python) = require_python("import confluent_kafka", "confluent-kafka") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), AUTHORIZER);
    let output = phase(&python, &node, "run");
    assert!(output.contains("enforced before the delete"), "{output}");
    node.stop();
    let node = Node::start(dir.path(), AUTHORIZER);
    phase(&python, &node, "after-restart");
    node.stop();
}

#[test]
fn without_an_authorizer_acls_are_refused_as_kafka_refuses_them() {
    let Some(python) = require_python("import confluent_kafka", "confluent-kafka") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &[]);
    phase(&python, &node, "disabled");
    node.stop();
}
