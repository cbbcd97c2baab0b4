//! Exactly once while other engines write to a table topic's table: pyiceberg deletes rows, overwrites some,
//! appends its own and adds a column, then the node is killed with SIGKILL and restarted.
//! Every Kafka record is a row once, the deleted rows stay deleted, the foreign rows and
//! column stay (`tests/clients/table_topic_foreign.py`).

mod common;

use std::time::Duration;

use common::python::python;
use common::{require, run_table_topic_phase, Node};

#[test]
fn foreign_deletes_and_appends_do_not_reset_progress() {
    let python = python(
        "import confluent_kafka.schema_registry.avro, pyiceberg.catalog.rest, pyiceberg.expressions, pyarrow",
    );
    if !require(
        "python with confluent-kafka[avro], pyiceberg and pyarrow",
        python.is_some(),
    ) {
        return;
    }
    let python = python.expect("checked");
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path(), &[]);
    run_table_topic_phase(
        &python,
        "table_topic_foreign.py",
        &node,
        "first",
        Duration::from_secs(240),
    );
    // The round whose new column took the id pyiceberg gave its own column was refused and
    // converted again (see the script).
    let log = node.logs_so_far();
    assert!(
        log.iter()
            .any(|l| l.contains("does not fit the table's schema")),
        "no refused round in the log:\n{log:#?}"
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
    let log = node.logs_so_far();
    assert!(
        log.iter().any(|l| l.contains("dead-letter commit failed")),
        "the dead-letter commits did fail:\n{log:#?}"
    );
    node.stop();
}
