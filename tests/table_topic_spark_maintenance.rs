//! Exactly once while Spark 3.5 maintains a live table topic's table through the node's REST
//! catalog: `ALTER TABLE ... ADD COLUMN`, `rewrite_data_files` and `rewrite_manifests` racing
//! Inlet's rounds, then a rewrite and an `expire_snapshots` that leave no snapshot with Inlet's
//! progress, and a kill -9 of the node. After the restart every Kafka record is a row once, and
//! Spark's column stays (`tests/clients/table_topic_spark_maintenance.py`).
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::time::Duration;

use common::{assert_logged, require_spark, run_table_topic_phase};

#[test]
fn spark_maintenance_and_a_kill9_keep_every_record_once() {
    let Some(python) = require_spark() else {
        return;
    };
    // Orphan sweeps run all along: none may take a file a snapshot names.
    let (_dir, node) = common::sweeping_node();
    let script = "table_topic_spark_maintenance.py";
    run_table_topic_phase(&python, script, &node, "first", Duration::from_secs(420));
    let node = node.restart_after_kill9();
    run_table_topic_phase(
        &python,
        script,
        &node,
        "restarted",
        Duration::from_secs(300),
    );
    // No snapshot with Inlet's progress was left: it came from the table's properties.
    assert_logged(
        &node,
        "resuming from its progress in the table's properties",
        "the node did not resume from the table's properties",
    );
    node.stop();
}
