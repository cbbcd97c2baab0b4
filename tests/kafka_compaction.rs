//! Compacted topics (`cleanup.policy=compact`, `ingest/src/compaction.rs`) with
//! confluent-kafka, from `tests/clients/compacted_topic.py`: keys overwritten many times, then
//! tombstones. After compaction a consumer from offset 0 sees exactly the latest record of
//! every key, at the offset it was written at, and the tombstones go after
//! `delete.retention.ms`; a record without a key is refused; DescribeConfigs and
//! IncrementalAlterConfigs treat the policy as Kafka does; a table topic may not be compacted.
//! The same holds across a kill -9 in the middle of a compaction (a fail point aborts the node
//! once the rewritten object is uploaded, before the swap of ranges is committed). A topic
//! written in transactions is compacted too: aborted records go, committed ones are kept as
//! their keys' latest.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::path::Path;
use std::time::Duration;

use common::python::{require_python, run, script};
use common::Node;

/// A node config that uploads fast (compaction works on uploaded data), and the flags that
/// make the compactor look every half second.
fn node_args(dir: &Path) -> Vec<String> {
    let config = dir.join("inlet.toml");
    std::fs::write(&config, "[storage]\nupload_interval_ms = 300\n").unwrap();
    vec![
        "--config".into(),
        config.display().to_string(),
        "--kafka-config".into(),
        "log.cleaner.backoff.ms=500".into(),
    ]
}

/// What every test here starts from: confluent-kafka, a temporary folder with the node's
/// config, and where the node keeps its data. None (the test is skipped) without the client.
struct Setup {
    python: std::path::PathBuf,
    _dir: tempfile::TempDir,
    args: Vec<String>,
    data: std::path::PathBuf,
}

impl Setup {
    fn new() -> Option<Setup> {
        let python = require_python("import confluent_kafka", "confluent-kafka")?;
        let dir = tempfile::tempdir().unwrap();
        let args = node_args(dir.path());
        let data = dir.path().join("node");
        Some(Setup {
            python,
            _dir: dir,
            args,
            data,
        })
    }

    fn args(&self) -> Vec<&str> {
        self.args.iter().map(String::as_str).collect()
    }
}

fn phase(python: &Path, node: &Node, phase: &str) -> String {
    let (status, output) = run(
        python,
        &[
            script("compacted_topic.py").into(),
            node.kafka.clone().into(),
            phase.into(),
        ],
        Duration::from_secs(240),
    );
    assert!(
        status.is_some_and(|s| s.success()) && output.contains("\nOK\n"),
        "the {phase} phase failed ({status:?}):\n{output}"
    );
    output
}

#[test]
fn a_compacted_topic_keeps_the_latest_record_of_every_key() {
    let Some(setup) = Setup::new() else {
        return;
    };
    let (python, args) = (&setup.python, setup.args());
    let node = Node::start(&setup.data, &args);
    let output = phase(python, &node, "run");
    assert!(output.contains("ok: compacted: 40 records"), "{output}");
    let output = phase(python, &node, "again");
    assert!(output.contains("ok: compacted again: "), "{output}");
    assert!(node.metric("inlet_kafka_compaction_records_removed_total") >= 970.0);
    node.stop();
}

#[test]
fn a_kill9_in_the_middle_of_a_compaction_loses_nothing() {
    let Some(setup) = Setup::new() else {
        return;
    };
    let (python, args) = (&setup.python, setup.args());
    let node = Node::start_with_env(
        &setup.data,
        &args,
        &[("INLET_FAILPOINT", "log-compaction-written:1")],
    );
    phase(python, &node, "fill");
    // The first compaction uploads its object, then the fail point aborts the node before the
    // swap is committed.
    let (status, data) = node.wait_for_exit(60);
    assert!(
        !status.success(),
        "the node was aborted by the fail point: {status:?}"
    );
    let node = Node::start(&data, &args);
    let output = phase(python, &node, "check");
    assert!(output.contains("ok: compacted: "), "{output}");
    node.stop();
}

#[test]
fn a_compacted_topic_written_in_transactions_keeps_only_committed_latest_values() {
    let Some(setup) = Setup::new() else {
        return;
    };
    let (python, args) = (&setup.python, setup.args());
    let node = Node::start(&setup.data, &args);
    let output = phase(python, &node, "transactions");
    assert!(output.contains("ok: read_committed the same"), "{output}");
    // 10 aborted records and 5 superseded committed ones.
    assert!(node.metric("inlet_kafka_compaction_records_removed_total") >= 15.0);
    node.stop();
}

/// Where the last pass ended survives a restart (`inlet_compaction`): a node restarted on a
/// compacted topic with nothing new finds no pass due, however often it looks, instead of
/// rewriting the whole partition again.
#[test]
fn a_restart_does_not_compact_again_what_was_compacted() {
    let Some(setup) = Setup::new() else {
        return;
    };
    let (python, args) = (&setup.python, setup.args());
    let data = setup.data.clone();
    let node = Node::start(&data, &args);
    // Compacted, and the tombstones gone after delete.retention.ms: nothing left to do.
    let output = phase(python, &node, "run");
    assert!(output.contains("ok: compacted: "), "{output}");
    assert!(node.metric("inlet_kafka_compaction_passes_total") >= 1.0);
    // Settled: three looks in a row without a pass.
    let mut baseline = (0.0, 0.0);
    inlet_test_support::node::poll_until(60, "three looks without a pass", || {
        let now = (
            node.metric("inlet_kafka_compaction_passes_total"),
            node.metric("inlet_kafka_compaction_checks_total"),
        );
        if now.0 != baseline.0 {
            baseline = now;
            return None;
        }
        (now.1 >= baseline.1 + 3.0).then_some(())
    });
    node.stop();

    let node = Node::start(&data, &args);
    // Ten looks at the partition (every 500 ms), and no pass.
    inlet_test_support::node::poll_until(60, "ten looks at the compacted partition", || {
        (node.metric("inlet_kafka_compaction_checks_total") >= 10.0).then_some(())
    });
    assert_eq!(node.metric("inlet_kafka_compaction_passes_total"), 0.0);
    let output = phase(python, &node, "check");
    assert!(output.contains("ok: compacted: "), "{output}");
    node.stop();
}
