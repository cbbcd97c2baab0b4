//! Transactions into table topics (`tests/clients/table_topic_transactions.py`, with
//! confluent-kafka's transactional producer and pyiceberg): a table only ever holds committed
//! records. Aborted records and markers never reach it, its progress stops at each
//! partition's last stable offset while a transaction is open (plain records behind it wait
//! too), and still accounts for every offset once the partitions settle. A transaction left
//! open when its node is killed with -9 is aborted when a new instance of the producer
//! starts, and never reaches the table either.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::time::Duration;

use common::{avro_python, run_table_topic_phase, Node};

const SCRIPT: &str = "table_topic_transactions.py";

#[test]
fn a_table_takes_committed_transactions_only() {
    let Some(run) = common::run_table_topic_script(SCRIPT) else {
        return;
    };
    assert!(
        run.output
            .contains("ok: the table holds exactly the committed ids (70)"),
        "{}",
        run.output
    );
    run.node.stop();
}

#[test]
fn a_transaction_open_at_a_kill9_is_aborted_and_never_reaches_the_table() {
    let Some(python) = avro_python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path(), &[]);
    let timeout = Duration::from_secs(240);
    run_table_topic_phase(&python, SCRIPT, &node, "open", timeout);
    let node = node.restart_after_kill9();
    let output = run_table_topic_phase(&python, SCRIPT, &node, "settle", timeout);
    assert!(
        output.contains("ok: the table holds exactly the committed ids (50)"),
        "{output}"
    );
    node.stop();
}
