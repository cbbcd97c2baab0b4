//! The crash matrix (docs/architecture.md, "Recovery"): a node is aborted at each step of a commit
//! round in turn, by a fail point (`INLET_FAILPOINT`, see `common/src/failpoint.rs`),
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
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::path::Path;
use std::time::Duration;

use common::python::{run, script};
use common::{avro_python, Node};

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

/// A data directory, the ledger of acknowledged records, and the client that writes both.
struct Matrix {
    python: std::path::PathBuf,
    dir: tempfile::TempDir,
    next_id: u64,
    created: bool,
}

impl Matrix {
    /// None (and a counted skip) without the Python clients.
    fn new() -> Option<Matrix> {
        let python = avro_python()?;
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("node")).expect("data dir");
        Some(Matrix {
            python,
            dir,
            next_id: 0,
            created: false,
        })
    }

    fn data(&self) -> std::path::PathBuf {
        self.dir.path().join("node")
    }

    fn ledger(&self) -> String {
        self.dir
            .path()
            .join("ledger")
            .to_string_lossy()
            .into_owned()
    }

    /// Creates the topics on the first call (`extra`: more `create` arguments).
    fn create_once(&mut self, node: &Node, extra: &[&str]) {
        if !self.created {
            let mut args = vec!["create".to_string(), node.kafka.clone()];
            args.extend(extra.iter().map(|a| a.to_string()));
            let _ = client(&self.python, &args);
            self.created = true;
        }
    }

    /// One batch to each topic, recorded in the ledger as far as it was acknowledged.
    fn produce(&mut self, node: &Node) {
        let _ = client(
            &self.python,
            &[
                "produce".into(),
                node.kafka.clone(),
                format!("http://{}", node.registry),
                self.ledger(),
                self.next_id.to_string(),
                "50".into(),
            ],
        );
        self.next_id += 51;
    }

    /// Batches until the node dies at its armed fail point (`<point>:<n>`), which must abort
    /// it, saying so in its log.
    fn produce_until_it_dies(&mut self, mut node: Node, armed: &str, max_batches: usize) {
        let mut batches = 0;
        while !node.exited() {
            assert!(
                batches < max_batches,
                "{armed}: the node never reached the point"
            );
            self.produce(&node);
            batches += 1;
        }
        let line = node.wait_for_any_log(&["fail point reached"]);
        let point = armed.split(':').next().unwrap_or(armed);
        assert!(line.contains(point), "{armed}: died elsewhere: {line}");
        let (status, _) = node.wait_for_exit(60);
        assert!(
            !status.success(),
            "{armed}: the node should have aborted, got {status}"
        );
    }

    /// A last node without fail points: one more batch, then every acknowledged record
    /// must be in the tables exactly once.
    fn verify(&mut self) {
        let node = Node::start(&self.data(), &[]);
        self.produce(&node);
        let verified = client(
            &self.python,
            &[
                "verify".into(),
                format!("http://{}/iceberg", node.http),
                self.ledger(),
            ],
        );
        assert!(verified.contains(", 40 upsert keys"), "{verified}");
        node.stop();
    }
}

#[test]
fn a_crash_at_any_commit_step_loses_and_duplicates_nothing() {
    let Some(mut matrix) = Matrix::new() else {
        return;
    };
    // The point the previous node died at.
    let mut died_at: Option<&str> = None;
    for nth in [2, 3] {
        for point in POINTS {
            // Batches go in, one at a time, until the node dies at the point's nth hit (a
            // round whose dead letters were committed in a previous life does not commit
            // them again, so hits per round vary: counting batches would be fragile).
            let armed = format!("{point}:{nth}");
            let node =
                Node::start_with_env(&matrix.data(), &[], &[(failpoint_var(), armed.as_str())]);
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
            matrix.create_once(&node, &[]);
            matrix.produce_until_it_dies(node, &armed, 20);
        }
    }
    matrix.verify();
}

/// The matrix's tables compacting every second (once ten rounds landed in a node's life):
/// a node dies with a compaction's file written but its replace not committed, then just
/// after the replace committed, in either table (the append one, or the upsert one, whose
/// position deletes the compaction applies). Every acknowledged record is still there exactly
/// once, and each upsert key has its latest row.
#[test]
fn a_crash_mid_compaction_loses_and_duplicates_nothing() {
    let Some(mut matrix) = Matrix::new() else {
        return;
    };
    for point in ["compaction-written", "compaction-committed"] {
        let armed = format!("{point}:1");
        let node = Node::start_with_env(&matrix.data(), &[], &[(failpoint_var(), armed.as_str())]);
        matrix.create_once(&node, &["compacting"]);
        matrix.produce_until_it_dies(node, &armed, 40);
    }
    matrix.verify();
}

/// The variable `table-coordinator`'s fail points read.
fn failpoint_var() -> &'static str {
    inlet_table_coordinator::failpoint::VAR
}
