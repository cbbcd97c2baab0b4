//! A table topic reconfigured with Kafka's admin calls while it is written (AlterConfigs of
//! its commit interval, CreatePartitions): each change restarts the topic's coordinator, which
//! must hand over with no overlap. Every record is a row exactly once
//! (`tests/clients/table_topic_reconfigure.py`).
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use common::{assert_logged, run_table_topic_script};

#[test]
fn reconfiguring_a_table_topic_hands_its_coordinator_over() {
    let Some(run) = run_table_topic_script("table_topic_reconfigure.py") else {
        return;
    };
    let node = run.node;
    // Every coordinator of the table stopped before the next one started, and the changes
    // did restart it.
    let log = node.logs_so_far();
    let (mut live, mut starts) = (0i32, 0);
    for line in log.iter().filter(|l| l.contains("default.moving")) {
        if line.contains("table coordinator started") {
            live += 1;
            starts += 1;
            assert!(
                live <= 1,
                "two coordinators of one table at once:\n{log:#?}"
            );
        } else if line.contains("table coordinator stopped") {
            live -= 1;
        }
    }
    assert!(starts >= 3, "{starts} coordinator starts:\n{log:#?}");
    node.stop();
}

/// A table topic deleted and created again under its name: the new topic's offsets start
/// again at 0, below the old one's progress in the table, and all its records become rows
/// (`tests/clients/table_topic_recreate.py`). Progress names the topic id it belongs to.
#[test]
fn a_recreated_topic_does_not_resume_at_the_old_topics_offsets() {
    if let Some(run) = run_table_topic_script("table_topic_recreate.py") {
        run.node.stop();
    }
}

/// A table topic's table renamed while the topic is written: rounds are pinned to the table
/// they were built for, so none lands in the new table under the old name; that table gets
/// every record from the stream's start, in files of its own, and the renamed table keeps its
/// rows (`tests/clients/table_topic_rename.py`).
#[test]
fn a_renamed_table_keeps_its_rows_and_a_new_one_gets_every_record() {
    let Some(run) = run_table_topic_script("table_topic_rename.py") else {
        return;
    };
    assert_logged(
        &run.node,
        "renamed or dropped",
        "a round pinned to the renamed table was refused",
    );
    run.node.stop();
}
