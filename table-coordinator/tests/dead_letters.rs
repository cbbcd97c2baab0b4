//! Dead-letter rounds land once, as rows do: the coordinator's state machine
//! (`machine::Machine`) carried out by a small driver against the real committer on the
//! embedded catalog (SQLite and a local object store). The worker is left out: each drain hands
//! the machine outputs with a dead-letter file named for its range, and the tests read which
//! of those files the dead-letter table holds.
//!
//! The cases: a deposed coordinator and its successor building dead-letter rounds from the same
//! progress (only the first lands; the other round is dropped and converted again), carried
//! dead letters after a failed dead-letter commit, and crashes that leave the dead-letter table
//! ahead of the main table or a landed round without its dead letters.
#![allow(clippy::unwrap_used, clippy::panic)] // a test: a failed step fails it

use std::collections::BTreeMap;
use std::sync::Arc;

use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, NestedField, PrimitiveType, Schema,
    Struct, Type,
};
use iceberg::{NamespaceIdent, TableIdent};
use inlet_table_coordinator::commit::{already_committed, CommitError, Committer, Round};
use inlet_table_coordinator::machine::{Action, Machine, Outcome, Registration, Settings};
use inlet_table_coordinator::reading::live_files;
use inlet_table_worker::JobOutput;

const TOPIC_ID: &str = "0123456789abcdef";

fn settings(epoch: i64) -> Settings {
    Settings {
        name: "orders".into(),
        topic_id: TOPIC_ID.into(),
        upsert: false,
        id_columns: Vec::new(),
        idle_ms: None,
        compaction_interval: None,
        compact_every: 10,
        expire: None,
        expire_every: 20,
        dead_letter_pending_files: 8,
        epoch,
    }
}

fn schema() -> Schema {
    Schema::builder()
        .with_fields(vec![Arc::new(NestedField::required(
            1,
            "id",
            Type::Primitive(PrimitiveType::Long),
        ))])
        .build()
        .expect("schema")
}

/// A dead-letter file (metadata only: nothing reads it).
fn dead_letter_file(name: &str) -> DataFile {
    DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_path(format!("file:///orders_dlq/data/{name}.parquet"))
        .file_format(DataFileFormat::Parquet)
        .partition(Struct::empty())
        .record_count(1)
        .file_size_in_bytes(100)
        .build()
        .expect("data file")
}

/// Partition 0 converted up to `next`, with the dead-letter file `dead`.
fn output(next: u64, dead: &str) -> (i32, JobOutput) {
    let out = JobOutput {
        data_files: Vec::new(),
        next_offset: next,
        schema: schema(),
        changes: Vec::new(),
        dead_letters: Vec::new(),
        dead_letter_files: vec![dead_letter_file(dead)],
        delete_files: Vec::new(),
        deleted_keys: Vec::new(),
        rows: 0,
        max_timestamp_ms: None,
        input_bytes: 0,
        decoded_bytes: 0,
    };
    (0, out)
}

/// How the driver's next dead-letter commit goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeadLetterFault {
    None,
    /// Fails before the catalog call: nothing lands.
    Before,
    /// Lands, but the answer is lost: the machine sees a failure.
    LostReply,
}

/// The table `orders` and its dead-letter table, and what the driver saw.
struct Tables {
    c: Committer,
    main: TableIdent,
    dead_letters: TableIdent,
    /// The rounds the machines closed (`COMMITTED` in the control stream).
    closed: Vec<String>,
}

impl Tables {
    async fn new(dir: &tempfile::TempDir) -> Tables {
        let meta = format!("sqlite://{}?mode=rwc", dir.path().join("meta.db").display());
        let root = dir.path().join("objects");
        std::fs::create_dir_all(&root).expect("objects dir");
        let catalog = inlet_catalog::embedded::open(&meta, &root.to_string_lossy(), None)
            .await
            .expect("catalog");
        let ns = NamespaceIdent::new("default".into());
        Tables {
            c: Committer::new(catalog.catalog, catalog.pointers),
            main: TableIdent::new(ns.clone(), "orders".into()),
            dead_letters: TableIdent::new(ns, "orders_dlq".into()),
            closed: Vec::new(),
        }
    }

    /// A table's progress for the topic.
    async fn progress(&self, ident: &TableIdent) -> BTreeMap<i32, u64> {
        let Some(table) = self.c.load(ident).await.expect("load") else {
            return BTreeMap::new();
        };
        let mut c = Committer::committed(&table);
        c.keep_only_topic(TOPIC_ID);
        c.offsets
    }

    /// What registering the table finds, as `coordinator::register` reads it.
    async fn registration(&self, recovered: Option<(Round, Option<Round>)>) -> Registration {
        let table = self.c.load(&self.main).await.expect("load");
        let meta = table.as_ref().map(|t| t.metadata());
        let mut offsets = BTreeMap::from([(0, 0)]);
        offsets.extend(self.progress(&self.main).await);
        if let Some((main, _)) = &recovered {
            offsets.extend(main.offsets.clone());
        }
        Registration {
            offsets,
            base: meta.and_then(|m| m.current_snapshot().map(|s| s.snapshot_id())),
            table_uuid: meta.map(|m| m.uuid()),
            partition_by: Vec::new(),
            spec: meta.map_or_else(
                || Arc::new(iceberg::spec::PartitionSpec::unpartition_spec()),
                |m| m.default_partition_spec().clone(),
            ),
            last_column_id: meta.map_or(0, |m| m.last_column_id()),
            watermark_ms: None,
            partition_watermarks: BTreeMap::new(),
            dead_letter_floor: self.progress(&self.dead_letters).await,
            recovered,
        }
    }

    /// The dead-letter files the dead-letter table holds, by name, in commit order.
    async fn dead_letters(&self) -> Vec<String> {
        self.file_names(&self.dead_letters).await
    }

    /// The main table's data files, by name.
    async fn main_files(&self) -> Vec<String> {
        self.file_names(&self.main).await
    }

    /// The data files `table` holds (none if it does not exist yet), by name, sorted.
    async fn file_names(&self, table: &TableIdent) -> Vec<String> {
        let Some(table) = self.c.load(table).await.expect("load") else {
            return Vec::new();
        };
        let mut names: Vec<String> = live_files(&table)
            .await
            .expect("live files")
            .data
            .iter()
            .map(|f| {
                let name = f.file.path.rsplit('/').next().unwrap_or_default();
                name.trim_end_matches(".parquet").to_string()
            })
            .collect();
        names.sort();
        names
    }

    /// Carries out `m`'s actions from `action` until it idles, stops, or asks for an action
    /// `until` names (returned, not carried out). A drain hands over `outputs`; dead-letter
    /// commits go as `fault` says.
    async fn run(
        &mut self,
        m: &mut Machine,
        mut action: Action,
        mut outputs: Vec<(i32, JobOutput)>,
        fault: DeadLetterFault,
        until: Option<Action>,
    ) -> Action {
        loop {
            if Some(&action) == until.as_ref() {
                return action;
            }
            let outcome = match action {
                Action::Idle | Action::Stop { .. } => return action,
                Action::Register => Outcome::Registered(Box::new(self.registration(None).await)),
                Action::Drain => Outcome::Drained(std::mem::take(&mut outputs)),
                Action::CheckDeadLetters { commit_id } => {
                    let t = self.c.load(&self.dead_letters).await.expect("load");
                    Outcome::Landed(t.is_some_and(|t| already_committed(t.metadata(), &commit_id)))
                }
                Action::PreCommit | Action::StartCompaction | Action::Expire => Outcome::Done,
                Action::Renew | Action::RenewForCommit => Outcome::Renewed(true),
                Action::CommitDeadLetters => {
                    let round = m.pending_dead_letters().expect("a dead-letter round");
                    if fault == DeadLetterFault::Before {
                        Outcome::CommitFailed(CommitError::Catalog("injected".into()))
                    } else {
                        match self.c.commit(&self.dead_letters, round).await {
                            Ok(_) if fault == DeadLetterFault::LostReply => Outcome::CommitFailed(
                                CommitError::Catalog("injected lost reply".into()),
                            ),
                            Ok(s) => Outcome::Committed(s),
                            Err(e) => Outcome::CommitFailed(e),
                        }
                    }
                }
                Action::Commit => {
                    let round = m.pending().expect("a round");
                    match self.c.commit(&self.main, round).await {
                        Ok(s) => Outcome::Committed(s),
                        Err(e) => Outcome::CommitFailed(e),
                    }
                }
                Action::Close { commit_id, .. } => {
                    self.closed.push(commit_id);
                    Outcome::Done
                }
                Action::LearnTableUuid => {
                    let t = self.c.load(&self.main).await.expect("load");
                    Outcome::TableUuid(t.map(|t| t.metadata().uuid()))
                }
            };
            action = m.on(outcome);
        }
    }

    /// A tick of `m` at `now`, carried out as [`Tables::run`] does.
    async fn tick_until(
        &mut self,
        m: &mut Machine,
        now: i64,
        outputs: Vec<(i32, JobOutput)>,
        fault: DeadLetterFault,
        until: Option<Action>,
    ) -> Action {
        let first = m.tick(now);
        self.run(m, first, outputs, fault, until).await
    }

    /// A tick of `m` carried out to its end.
    async fn tick(&mut self, m: &mut Machine, now: i64, outputs: Vec<(i32, JobOutput)>) {
        let last = self
            .tick_until(m, now, outputs, DeadLetterFault::None, None)
            .await;
        assert_eq!(last, Action::Idle);
    }
}

/// The window of issue 40: coordinator A builds a round with dead letters and renews its
/// lease, then is deposed; B registers from the same progress and converts the same records.
/// A's dead-letter commit lands before B commits anything: B's dead letters are the same and
/// are refused, its round dropped; registered again, B converts on from the tables, and the
/// dead-letter table holds each dead letter once. (Before dead-letter rounds carried their
/// start, B's landed too: `a-0-10` and `b-0-12` both held the records 0..10's dead letters.)
#[tokio::test]
async fn a_deposed_coordinators_dead_letters_and_its_successors_land_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut t = Tables::new(&dir).await;
    let mut a = Machine::new(settings(1), t.registration(None).await, 0);
    let a_at = t
        .tick_until(
            &mut a,
            1,
            vec![output(10, "a-0-10")],
            DeadLetterFault::None,
            Some(Action::CommitDeadLetters),
        )
        .await;
    assert_eq!(
        a_at,
        Action::CommitDeadLetters,
        "A renewed, and commits next"
    );

    let mut b = Machine::new(settings(2), t.registration(None).await, 0);
    let b_at = t
        .tick_until(
            &mut b,
            1,
            vec![output(12, "b-0-12")],
            DeadLetterFault::None,
            Some(Action::CommitDeadLetters),
        )
        .await;
    assert_eq!(b_at, Action::CommitDeadLetters);

    // A, paused past its lease after its renewal, commits first: its dead letters and its
    // round land (the round starts where the table is).
    let end = t
        .run(&mut a, a_at, Vec::new(), DeadLetterFault::None, None)
        .await;
    assert_eq!(end, Action::Idle);
    assert_eq!(t.dead_letters().await, ["a-0-10"]);
    assert_eq!(t.progress(&t.main).await, BTreeMap::from([(0, 10)]));

    // B's dead letters are refused for their start, and its round is dropped with them.
    let end = t
        .run(&mut b, b_at, Vec::new(), DeadLetterFault::None, None)
        .await;
    assert_eq!(end, Action::Idle);
    assert_eq!(
        t.dead_letters().await,
        ["a-0-10"],
        "B's are the same records'"
    );
    assert!(b.pending().is_none() && b.pending_dead_letters().is_none());
    assert_eq!(
        t.closed.len(),
        2,
        "A's round and B's dropped one: {:?}",
        t.closed
    );

    // Registered again, B converts from the main table's progress; the dead letters below
    // the dead-letter table's progress are not written again (the worker's floor).
    assert_eq!(b.dead_letter_floor(), &BTreeMap::new());
    t.tick(&mut b, 2, vec![output(12, "b-10-12")]).await;
    assert_eq!(t.dead_letters().await, ["a-0-10", "b-10-12"]);
    assert_eq!(t.progress(&t.main).await, BTreeMap::from([(0, 12)]));
    assert_eq!(t.progress(&t.dead_letters).await, BTreeMap::from([(0, 12)]));
    assert_eq!(b.dead_letter_floor(), &BTreeMap::from([(0, 12)]));
}

/// A dead-letter commit that fails does not hold the round back; the next round carries its
/// files and lands them, from where the failed one started. When the failed commit landed
/// after all (its answer was lost), the next round starts after it instead.
#[tokio::test]
async fn carried_dead_letters_land_after_a_failed_dead_letter_commit() {
    for fault in [DeadLetterFault::Before, DeadLetterFault::LostReply] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut t = Tables::new(&dir).await;
        let mut m = Machine::new(settings(1), t.registration(None).await, 0);
        let end = t
            .tick_until(&mut m, 1, vec![output(10, "0-10")], fault, None)
            .await;
        assert_eq!(end, Action::Idle);
        assert_eq!(t.progress(&t.main).await, BTreeMap::from([(0, 10)]));
        assert!(m.pending_dead_letters().is_some(), "{fault:?}: carried");
        assert!(
            t.closed.is_empty(),
            "{fault:?}: the round's PRE_COMMIT holds its dead letters: {:?}",
            t.closed
        );

        t.tick(&mut m, 2, vec![output(20, "10-20")]).await;
        assert_eq!(t.dead_letters().await, ["0-10", "10-20"], "{fault:?}");
        assert_eq!(
            t.progress(&t.dead_letters).await,
            BTreeMap::from([(0, 20)]),
            "{fault:?}"
        );
        assert_eq!(t.progress(&t.main).await, BTreeMap::from([(0, 20)]));
    }
}

/// A crash between a round's dead-letter commit and its main commit leaves the dead-letter
/// table ahead. Whether the next coordinator recovers the round from the control stream or
/// converts its range again (an upsert table's round, a `PRE_COMMIT` that does not load, a
/// partition's owner that converted the range before the crash), the dead letters land once
/// and the records after them go on.
#[tokio::test]
async fn a_dead_letter_table_ahead_of_the_table_after_a_crash_loses_and_repeats_nothing() {
    for recover in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut t = Tables::new(&dir).await;
        let mut a = Machine::new(settings(1), t.registration(None).await, 0);
        let at = t
            .tick_until(
                &mut a,
                1,
                vec![output(10, "a-0-10")],
                DeadLetterFault::None,
                Some(Action::Commit),
            )
            .await;
        assert_eq!(at, Action::Commit);
        // A crashes before its main commit.
        let crashed = (
            a.pending().cloned().expect("the round"),
            a.pending_dead_letters().cloned(),
        );
        drop(a);
        assert_eq!(t.dead_letters().await, ["a-0-10"]);
        assert_eq!(t.progress(&t.main).await, BTreeMap::new());

        let reg = t.registration(recover.then_some(crashed)).await;
        assert_eq!(reg.dead_letter_floor, BTreeMap::from([(0, 10)]));
        let mut b = Machine::new(settings(2), reg, 0);
        let outputs = if recover {
            vec![output(20, "b-10-20")]
        } else {
            // The same range again: a chunk converted before the crash.
            vec![output(10, "a-0-10"), output(20, "b-10-20")]
        };
        t.tick(&mut b, 2, outputs.clone()).await;
        if recover {
            // The recovered round landed; the new records come with the next round.
            t.tick(&mut b, 3, outputs).await;
        }
        assert_eq!(
            t.dead_letters().await,
            ["a-0-10", "b-10-20"],
            "recover {recover}"
        );
        assert_eq!(t.progress(&t.main).await, BTreeMap::from([(0, 20)]));
        assert_eq!(t.progress(&t.dead_letters).await, BTreeMap::from([(0, 20)]));
    }
}

/// A crash after a round landed without its dead letters: its `PRE_COMMIT` is still open, so
/// the next coordinator recovers it (`coordinator::recover`: the round landed, its dead
/// letters did not) and commits them. (Before, the round was closed, and its dead letters,
/// carried only in memory, were lost with the process.)
#[tokio::test]
async fn dead_letters_of_a_landed_round_survive_a_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut t = Tables::new(&dir).await;
    let mut a = Machine::new(settings(1), t.registration(None).await, 0);
    let at = t
        .tick_until(
            &mut a,
            1,
            vec![output(10, "a-0-10")],
            DeadLetterFault::Before,
            Some(Action::CommitDeadLetters),
        )
        .await;
    // What its `PRE_COMMIT` holds.
    let pre_committed = (
        a.pending().cloned().expect("the round"),
        a.pending_dead_letters().cloned(),
    );
    let end = t
        .run(&mut a, at, Vec::new(), DeadLetterFault::Before, None)
        .await;
    assert_eq!(end, Action::Idle);
    assert_eq!(t.progress(&t.main).await, BTreeMap::from([(0, 10)]));
    assert!(t.closed.is_empty(), "still open: {:?}", t.closed);
    // A crashes.
    drop(a);

    let reg = t.registration(Some(pre_committed)).await;
    let mut b = Machine::new(settings(2), reg, 0);
    t.tick(&mut b, 2, Vec::new()).await;
    assert_eq!(t.dead_letters().await, ["a-0-10"]);
    assert_eq!(t.progress(&t.dead_letters).await, BTreeMap::from([(0, 10)]));
    t.tick(&mut b, 3, vec![output(20, "b-10-20")]).await;
    assert_eq!(t.dead_letters().await, ["a-0-10", "b-10-20"]);
    assert_eq!(t.progress(&t.main).await, BTreeMap::from([(0, 20)]));
}

/// A data file of the main table (metadata only: nothing reads it).
fn data_file(name: &str) -> DataFile {
    DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_path(format!("file:///orders/data/{name}.parquet"))
        .file_format(DataFileFormat::Parquet)
        .partition(Struct::empty())
        .record_count(1)
        .file_size_in_bytes(100)
        .build()
        .expect("data file")
}

/// Partition `partition` converted up to `next` into the data file `name`, no dead letters.
fn rows(partition: i32, next: u64, name: &str) -> (i32, JobOutput) {
    let (_, mut out) = output(next, name);
    out.dead_letter_files.clear();
    out.data_files = vec![data_file(name)];
    (partition, out)
}

/// The same window for the main table, on a partition the table held nothing of when both
/// coordinators registered (a partition added later, or one that had no record yet): A's
/// round lands first, and B's, built from the same (empty) progress there, is refused for its
/// start and dropped, so the records are rows once. (Before a round named where such a
/// partition starts, B's landed too: `a-1-10` and `b-1-12` both held records 0..10.)
#[tokio::test]
async fn a_deposed_coordinators_round_on_a_partition_the_table_never_held_lands_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut t = Tables::new(&dir).await;
    // The table exists with progress on partition 0 only.
    let mut first_coordinator = Machine::new(settings(1), t.registration(None).await, 0);
    t.tick(&mut first_coordinator, 1, vec![rows(0, 5, "p0-0-5")])
        .await;
    assert_eq!(t.main_files().await, ["p0-0-5"]);

    let mut a = Machine::new(settings(2), t.registration(None).await, 0);
    let a_at = t
        .tick_until(
            &mut a,
            2,
            vec![rows(1, 10, "a-1-10")],
            DeadLetterFault::None,
            Some(Action::Commit),
        )
        .await;
    assert_eq!(a_at, Action::Commit, "A renewed, and commits next");
    let mut b = Machine::new(settings(3), t.registration(None).await, 0);
    let b_at = t
        .tick_until(
            &mut b,
            2,
            vec![rows(1, 12, "b-1-12")],
            DeadLetterFault::None,
            Some(Action::Commit),
        )
        .await;
    assert_eq!(b_at, Action::Commit);

    // A, deposed after its renewal, commits first; then B.
    let end = t
        .run(&mut a, a_at, Vec::new(), DeadLetterFault::None, None)
        .await;
    assert_eq!(end, Action::Idle);
    assert_eq!(t.progress(&t.main).await, BTreeMap::from([(0, 5), (1, 10)]));
    t.run(&mut b, b_at, Vec::new(), DeadLetterFault::None, None)
        .await;
    assert!(b.pending().is_none(), "B's round is dropped");
    assert_eq!(
        t.main_files().await,
        ["a-1-10", "p0-0-5"],
        "partition 1's records 0..10 are rows once"
    );
}
