//! The crash matrix (docs/architecture.md, "Recovery"): a node is aborted at each step of a commit
//! round in turn, by a fail point (`INLET_FAILPOINT`, see `catalog/src/failpoint.rs`),
//! on the same data directory, with records produced before every crash and after every
//! restart, to an append table topic (whose records gain a column part way, so rounds around
//! it evolve the schema) and a partitioned upsert one (40 keys in `bucket(key, 2)`, updated
//! over and over). At
//! the end the table holds every acknowledged record exactly once, the dead-letter table
//! every bad record exactly once, and the upsert table one row per key: its last
//! acknowledged update (or a later one whose acknowledgement the crash lost).
//!
//! The points, in round order: files uploaded (`round-built`), the round's `PRE_COMMIT`
//! durable in the control stream (`pre-committed`), dead letters committed (`dlq-committed`),
//! new metadata written (`metadata-staged`), pointer swapped (`committed`). After a crash
//! between `PRE_COMMIT` and the pointer swap, the next node commits the same files again
//! (it says so in its log) rather than converting the range again; an upsert round is
//! converted again, its primary-key index rebuilt from the table. The fail points count hits
//! over both tables' coordinators, so each crash lands in one table's round or the other's.

mod common;

use std::path::Path;
use std::time::Duration;

use common::python::{python, run, script};
use common::{require, Node};

const POINTS: [&str; 5] = [
    "round-built",
    "pre-committed",
    "dlq-committed",
    "metadata-staged",
    "committed",
];

fn client(python: &Path, args: &[String]) -> String {
    let mut all: Vec<std::ffi::OsString> = vec![script("table_topic_crash.py").into()];
    all.extend(args.iter().map(Into::into));
    let (status, output) = run(python, &all, Duration::from_secs(180));
    assert!(
        status.is_some_and(|s| s.success()) && output.contains("OK"),
        "table_topic_crash.py {} failed ({status:?}):\n{output}",
        args[0]
    );
    output
}

#[test]
fn a_crash_at_any_commit_step_loses_and_duplicates_nothing() {
    let python = python("import confluent_kafka.schema_registry.avro, pyiceberg.catalog.rest");
    if !require(
        "python with confluent-kafka[avro] and pyiceberg",
        python.is_some(),
    ) {
        return;
    }
    let python = python.expect("checked");
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = dir.path().join("ledger");
    let data = dir.path().join("node");
    std::fs::create_dir_all(&data).expect("data dir");
    let ledger = ledger.to_string_lossy().into_owned();

    let mut next_id = 0u64;
    let mut produce = |node: &Node| {
        let _ = client(
            &python,
            &[
                "produce".into(),
                node.kafka.clone(),
                format!("http://{}", node.registry),
                ledger.clone(),
                next_id.to_string(),
                "50".into(),
            ],
        );
        next_id += 51;
    };
    let mut first = true;
    // The point the previous node died at.
    let mut died_at: Option<&str> = None;
    for nth in [2, 3] {
        for point in POINTS {
            // Batches go in, one at a time, until the node dies at the point's nth hit (a
            // round whose dead letters were committed in a previous life does not commit
            // them again, so hits per round vary: counting batches would be fragile).
            let armed = format!("{point}:{nth}");
            let mut node = Node::start_with_env(&data, &[], &[(failpoint_var(), armed.as_str())]);
            if died_at
                .is_some_and(|p| ["pre-committed", "dlq-committed", "metadata-staged"].contains(&p))
            {
                // The point fired in the append table's round (its files are committed
                // again) or in the upsert table's (converted again from the table).
                node.wait_for_any_log(&[
                    "recommitting a round from the control stream",
                    "an upsert round did not land",
                ]);
            }
            died_at = Some(point);
            if first {
                let _ = client(&python, &["create".into(), node.kafka.clone()]);
                first = false;
            }
            let mut batches = 0;
            while !node.exited() {
                assert!(batches < 20, "{armed}: the node never reached the point");
                produce(&node);
                batches += 1;
            }
            let (status, _) = node.wait_for_exit(60);
            assert!(
                !status.success(),
                "{armed}: the node should have aborted, got {status}"
            );
        }
    }
    let node = Node::start(&data, &[]);
    produce(&node);
    let verified = client(
        &python,
        &[
            "verify".into(),
            format!("http://{}/iceberg", node.http),
            ledger.clone(),
        ],
    );
    assert!(verified.contains(", 40 upsert keys"), "{verified}");
    node.stop();
}

/// The variable `table-coordinator`'s fail points read.
fn failpoint_var() -> &'static str {
    inlet_table_coordinator::failpoint::VAR
}
