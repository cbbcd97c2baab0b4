//! Exactly once while other engines write to a table topic's table: pyiceberg deletes rows, overwrites some,
//! appends its own and adds a column, then the node is killed with SIGKILL and restarted.
//! Every Kafka record is a row once, the deleted rows stay deleted, the foreign rows and
//! column stay (`tests/clients/table_topic_foreign.py`).
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::time::Duration;

use common::avro_python;
use common::python::require_python;
use common::{assert_logged, run_table_topic_phase, Node};

#[test]
fn foreign_deletes_and_appends_do_not_reset_progress() {
    let Some(python) = require_python("import confluent_kafka.schema_registry.avro, pyiceberg.catalog.rest, pyiceberg.expressions, pyarrow", "confluent-kafka[avro], pyiceberg and pyarrow") else {
        return;
    };
    // Orphan sweeps run all along: none may take a file a snapshot names.
    let (_dir, node) = common::sweeping_node();
    run_table_topic_phase(
        &python,
        "table_topic_foreign.py",
        &node,
        "first",
        Duration::from_secs(240),
    );
    // The round whose new column took the id pyiceberg gave its own column was refused and
    // converted again (see the script).
    assert_logged(
        &node,
        "does not fit the table's schema",
        "no refused round in the log",
    );
    // At once after the last acks: their round may or may not have landed.
    let node = node.restart_after_kill9();
    run_table_topic_phase(
        &python,
        "table_topic_foreign.py",
        &node,
        "restarted",
        Duration::from_secs(240),
    );
    node.stop();
}

/// Another writer breaks the dead-letter table for Inlet (pyiceberg drops a column its rounds
/// write): the dead-letter commits fail, and the main table goes on
/// (`tests/clients/table_topic_dlq_refused.py`).
#[test]
fn a_failing_dead_letter_table_does_not_stop_the_main_table() {
    let Some(run) = common::run_table_topic_script("table_topic_dlq_refused.py") else {
        return;
    };
    let node = run.node;
    assert_logged(
        &node,
        "dead-letter commit failed",
        "the dead-letter commits did fail",
    );
    node.stop();
}

/// A dead-letter table that keeps refusing Inlet's commits: its files are carried up to the
/// node's bound (`[tables] dead_letter_pending_files`, 3 here), then the table waits, and
/// once the dead-letter table is mended every carried letter and held record lands
/// (`tests/clients/table_topic_dlq_held.py`).
#[test]
fn dead_letters_that_cannot_land_hold_the_table_at_a_bound() {
    let Some(python) = avro_python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("inlet.toml");
    std::fs::write(&config, "[tables]\ndead_letter_pending_files = 3\n").expect("config");
    let node = Node::start(
        &dir.path().join("node"),
        &["--config", &config.to_string_lossy()],
    );
    run_table_topic_phase(
        &python,
        "table_topic_dlq_held.py",
        &node,
        "run",
        Duration::from_secs(240),
    );
    assert_logged(&node, "the table's rounds wait", "the table was held");
    node.stop();
}
