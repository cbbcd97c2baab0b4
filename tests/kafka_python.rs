//! The Kafka endpoint with Python's `confluent-kafka` as an independent client: the script
//! `tests/clients/confluent_kafka_roundtrip.py` runs admin calls (topics, incremental configs,
//! groups, DeleteRecords), idempotent produce with every codec, group consumers with commits and
//! OffsetsForTimes against a real node, and exits non-zero on the first mismatch.
//!
//! The interpreter: `INLET_TEST_PYTHON`, else the venv that `scripts/test-env.sh` creates
//! (`~/.cache/inlet/venv`). Without one that can `import confluent_kafka` the test is skipped
//! locally and fails in CI.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::temp_node;

use std::time::Duration;

use common::python::{require_python, run, script};

/// How long the whole script may run before it is killed.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(300);

#[test]
fn confluent_kafka_python_roundtrip() {
    let Some(python) = require_python("import confluent_kafka", "confluent-kafka") else {
        return;
    };
    let (_dir, node) = temp_node(&["--kafka-config", "group.initial.rebalance.delay.ms=0"]);
    let script = script("confluent_kafka_roundtrip.py");
    let (status, output) = run(
        &python,
        &[script.into_os_string(), node.kafka.clone().into()],
        SCRIPT_TIMEOUT,
    );
    match status {
        None => panic!("the script did not finish within {SCRIPT_TIMEOUT:?}\n{output}"),
        Some(status) => assert!(status.success(), "the script failed: {status}\n{output}"),
    }
    assert!(
        output.contains("\nOK\n"),
        "the script exited 0 without reaching its end\n{output}"
    );
    println!("{output}");
    node.stop();
}
