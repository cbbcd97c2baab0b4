//! Kafka transactions with independent clients: each of `tests/clients/txn_*` runs, against a
//! node of its own, commits and aborts across partitions read at both isolation levels, an open
//! transaction holding `read_committed` back (non-transactional records behind it too),
//! read-process-write with the consumer's offsets sent in the transaction, zombie fencing by a
//! second producer with the same transactional id, and a transaction the broker aborts when it
//! times out; it exits non-zero on the first mismatch and prints OK at its end. The clients:
//! confluent-kafka (librdkafka), kafka-python, aiokafka and kafkajs. Over the raw protocol,
//! KIP-890's check: a transactional batch needs its partition in an open transaction.
//!
//! The nodes abort timed-out transactions within half a second of their timeout
//! (`transaction.abort.timed.out.transaction.cleanup.interval.ms=500`), so that the timeout
//! case takes seconds.
//!
//! The Python interpreter: `INLET_TEST_PYTHON`, else the venv that `scripts/test-env.sh` creates
//! (`~/.cache/inlet/venv`); kafkajs: `INLET_TEST_KAFKAJS` (from `scripts/test-env.sh`) and a
//! `node` on PATH. A client that is missing skips its test locally and fails it in CI.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::temp_node;

use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::Duration;

use common::python::{require_python, run, script};
use inlet_test_support::process::run_captured;

/// How long a whole script may run before it is killed.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(300);

/// The `serve` arguments of every test's node: groups rebalance at once, and timed-out
/// transactions are aborted every half second.
const NODE_ARGS: &[&str] = &[
    "--kafka-config",
    "group.initial.rebalance.delay.ms=0",
    "--kafka-config",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
];

/// The script `name` must have exited 0 within [`SCRIPT_TIMEOUT`] and printed OK as its last
/// line; prints its output.
fn check_script(name: &str, status: Option<ExitStatus>, output: &str) {
    match status {
        None => panic!("{name} did not finish within {SCRIPT_TIMEOUT:?}\n{output}"),
        Some(status) => assert!(status.success(), "{name} failed: {status}\n{output}"),
    }
    assert!(
        output.contains("\nOK\n"),
        "{name} exited 0 without reaching its end\n{output}"
    );
    println!("{output}");
}

/// Runs the Python client script `name` under `python` against a new node.
fn run_python_script(python: &Path, name: &str) {
    let (_dir, node) = temp_node(NODE_ARGS);
    let (status, output) = run(
        python,
        &[script(name).into_os_string(), node.kafka.clone().into()],
        SCRIPT_TIMEOUT,
    );
    check_script(name, status, &output);
    node.stop();
}

#[test]
fn confluent_kafka_transactions() {
    let Some(python) = require_python("import confluent_kafka", "confluent-kafka") else {
        return;
    };
    run_python_script(&python, "txn_confluent_kafka.py");
}

#[test]
fn kafka_python_transactions() {
    let Some(python) = require_python("import kafka", "kafka-python") else {
        return;
    };
    run_python_script(&python, "txn_kafka_python.py");
}

#[test]
fn aiokafka_transactions() {
    let Some(python) = require_python("import aiokafka", "aiokafka") else {
        return;
    };
    run_python_script(&python, "txn_aiokafka.py");
}

#[test]
fn kafkajs_transactions() {
    let Some(kafkajs) = common::kafkajs() else {
        return;
    };
    let (_dir, node) = temp_node(NODE_ARGS);
    let name = "txn_kafkajs.js";
    let done = run_captured(
        Command::new("node")
            .env("NODE_PATH", kafkajs.join("node_modules"))
            .arg(script(name))
            .arg(&node.kafka),
        None,
        SCRIPT_TIMEOUT,
        // Waiting for the script to exit, checked every 50 ms.
        Duration::from_millis(50),
    );
    check_script(name, done.status, &done.output());
    node.stop();
}

/// KIP-890's check, over the raw protocol: a transactional batch is stored only in a partition
/// its producer's open transaction added. A batch before AddPartitionsToTxn, and a late batch
/// of a transaction already aborted (at the same epoch), answer `INVALID_TXN_STATE` and leave
/// the partition's last stable offset at its end; a batch of a fenced epoch answers
/// `INVALID_PRODUCER_EPOCH`.
#[test]
fn a_transactional_batch_needs_its_partition_in_an_open_transaction() {
    use common::wire::Conn;
    let (_dir, node) = temp_node(&[]);
    let mut coordinator = Conn::open(&node);
    let mut leader = Conn::open(&node);
    common::txn_checks::create_topic(&mut leader, "verified");
    common::txn_checks::batches_need_an_open_transaction(
        &mut coordinator,
        &mut leader,
        "verifier",
        "verified",
    );
    node.stop();
}
