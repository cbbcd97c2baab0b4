//! The coordinator's decisions, as a state machine without I/O: events in (a tick, what the
//! worker converted, how a commit, a renewal or a `PRE_COMMIT` went), actions out (register
//! the table, drain the worker, write a `PRE_COMMIT`, renew the lease, commit, close a round,
//! start a compaction, expire). [`crate::coordinator::run`] carries the actions out against the
//! real worker, control stream, leases and catalog; `tests/simulation.rs` drives the same
//! machine against a faulty catalog, a manual clock and racing coordinators, so the protocol
//! the node runs is the one the simulation checks.
//!
//! One tick is a chain: [`Machine::tick`] gives the first action, and each [`Machine::on`]
//! with that action's [`Outcome`] gives the next, until [`Action::Idle`] (wait for the next
//! tick) or [`Action::Stop`]. Between ticks, [`Machine::renewal`] asks for a lease renewal.
//!
//! Invariants (the coordinator's, see its module docs):
//! - A built round is committed, unchanged, before anything newer is collected; a failed
//!   commit is retried with it at the next tick.
//! - Nothing is committed without a renewal of the lease just before; a lost lease or a
//!   fenced commit stops the machine, committing nothing more.
//! - A round refused for its start, its schema or its table is closed (so a restart does not
//!   commit it again) and the table is registered again; so is an upsert table whose base moved.
//! - While the dead-letter table refuses its files and they reach the bound, no round is built.
//! - Dead letters land once, as rows do. The machine keeps the *dead-letter floor*: the
//!   dead-letter table's progress, read at registration (it may be ahead of the main table's
//!   after a crash between the two commits) and moved by each dead-letter round that lands. A
//!   dead-letter round starts at the floor, or, when it carries the files of one that did not
//!   land, at that one's start; either way it holds every dead letter from its start to its
//!   offsets, and it lands only while its table's progress is exactly its start
//!   (`Round::exact_start`). Refused as not continuous (another coordinator, a deposed one or
//!   a successor, committed dead letters from the same floor), it is dropped with its main
//!   round, which must not move the table past dead letters that are not in, and the table is
//!   registered again: conversion starts over from the main table's progress with the
//!   dead-letter table's as the floor. Outputs that end at or below the floor add no dead
//!   letters (they are in already).
//! - A round that landed without its dead letters is not closed: its `PRE_COMMIT` keeps them
//!   durable until they land or the next round's `PRE_COMMIT` carries them.

use std::collections::BTreeMap;
use std::time::Duration;

use iceberg::spec::PartitionSpec;
use inlet_table_worker::JobOutput;

use crate::commit_error::CommitError;
use crate::control::FileSpec;
use crate::round::{Round, RoundBase};
use crate::watermark::Watermarks;

/// What the machine knows about the table topic, fixed for its life.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The topic's name (commit ids start with it).
    pub name: String,
    /// The topic id (commit ids and rounds carry it).
    pub topic_id: String,
    /// Upsert or CDC: rounds are pinned to their base snapshot.
    pub upsert: bool,
    pub id_columns: Vec<String>,
    /// `watermark.idle.ms` in ms; None: off.
    pub idle_ms: Option<i64>,
    /// Least time between compactions; None: never.
    pub compaction_interval: Option<Duration>,
    /// Commits between two compaction checks (`[tables] compaction_every_commits`).
    pub compact_every: u64,
    pub expire: Option<Expiry>,
    /// Commits between two expiry runs (`[tables] expire_every_commits`).
    pub expire_every: u64,
    /// At this many carried dead-letter files, no round is built.
    pub dead_letter_pending_files: usize,
    /// The lease's epoch: every round carries it.
    pub epoch: i64,
}

/// What registering the table found (see `coordinator::register`).
#[derive(Debug, Clone)]
pub struct Registration {
    /// Next offset per partition to convert.
    pub offsets: BTreeMap<i32, u64>,
    /// The snapshot the worker's view starts from.
    pub base: Option<i64>,
    pub table_uuid: Option<uuid::Uuid>,
    /// `partition.by` terms for a table that does not exist yet.
    pub partition_by: Vec<inlet_table_worker::partition::Term>,
    pub spec: std::sync::Arc<PartitionSpec>,
    pub last_column_id: i32,
    /// Watermarks the table records (table, per partition).
    pub watermark_ms: Option<i64>,
    pub partition_watermarks: BTreeMap<i32, i64>,
    /// The dead-letter table's progress for the topic (its committed `inlet.offsets`, empty
    /// without any): where the next dead-letter round starts. It may be ahead of `offsets`
    /// after a crash between a round's dead-letter commit and its main commit.
    pub dead_letter_floor: BTreeMap<i32, u64>,
    /// A round read back from the control stream, committed first (its dead letters with it).
    pub recovered: Option<(Round, Option<Round>)>,
}

/// What the driver must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Reload the table and register it with the worker again: [`Outcome::Registered`].
    Register,
    /// Collect the worker's outputs up to the partitions' ends: [`Outcome::Drained`].
    Drain,
    /// Whether the dead-letter round `commit_id` landed after all: [`Outcome::Landed`].
    CheckDeadLetters { commit_id: String },
    /// Write the `PRE_COMMIT` of [`Machine::pending`], [`Machine::pending_dead_letters`] and
    /// [`Machine::file_spec`]: [`Outcome::Done`].
    PreCommit,
    /// Renew the lease (between ticks): [`Outcome::Renewed`].
    Renew,
    /// Renew the lease before committing: [`Outcome::Renewed`].
    RenewForCommit,
    /// Commit [`Machine::pending_dead_letters`] to the dead-letter table:
    /// [`Outcome::Committed`].
    CommitDeadLetters,
    /// Commit [`Machine::pending`]: [`Outcome::Committed`].
    Commit,
    /// Record `COMMITTED` for `commit_id` in the control stream (`snapshot`: None for a
    /// round that was closed without landing): [`Outcome::Done`].
    Close {
        commit_id: String,
        snapshot: Option<i64>,
    },
    /// Read the uuid of the table the last round created: [`Outcome::TableUuid`].
    LearnTableUuid,
    /// Start a compaction run in the background (the driver reports its end with
    /// [`Machine::compaction_finished`]): [`Outcome::Done`].
    StartCompaction,
    /// Expire the table's and its dead-letter table's snapshots by [`Settings::expire`]:
    /// [`Outcome::Done`].
    Expire,
    /// Nothing more this tick.
    Idle,
    /// The machine is done: `fenced` when a newer coordinator took the table.
    Stop { fenced: bool },
}

/// How an action went.
#[derive(Debug)]
pub enum Outcome {
    /// The action succeeded (or its failure does not matter to the machine).
    Done,
    /// The action failed; retried at a later tick.
    Failed(String),
    Registered(Box<Registration>),
    Drained(Vec<(i32, JobOutput)>),
    Landed(bool),
    Renewed(bool),
    Committed(Option<i64>),
    CommitFailed(CommitError),
    TableUuid(Option<uuid::Uuid>),
}

/// What the machine reports about the table (`/v1/tables`, metrics).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub committed: BTreeMap<i32, u64>,
    pub watermark_ms: Option<i64>,
    /// Each partition's watermark as the table records it.
    pub partition_watermarks: BTreeMap<i32, i64>,
    pub last_commit_ms: Option<i64>,
    pub commits: u64,
    pub failed_commits: u64,
    pub pending_dead_letter_files: usize,
    pub held_by_dead_letters: bool,
}

/// Where the machine is in a tick: which action's outcome it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Idle,
    Registering,
    QuietCompaction,
    Draining,
    CheckingDeadLetters,
    PreCommitting,
    RenewingForCommit,
    RenewingPeriodic,
    CommittingDeadLetters,
    Committing,
    ClosingDropped,
    ClosingCommitted,
    LearningUuid,
    Compacting,
    Expiring,
    Stopped,
}

/// The coordinator's state between actions. See the module docs.
#[derive(Debug)]
pub struct Machine {
    settings: Settings,
    phase: Phase,
    offsets: BTreeMap<i32, u64>,
    base: Option<i64>,
    table_uuid: Option<uuid::Uuid>,
    partition_by: Vec<inlet_table_worker::partition::Term>,
    spec: std::sync::Arc<PartitionSpec>,
    last_column_id: i32,
    watermarks: Watermarks,
    pending: Option<Round>,
    pending_dead_letters: Option<Round>,
    /// The dead-letter table's progress as this machine knows it: read at registration, moved
    /// by each dead-letter round that lands. A new dead-letter round starts there.
    dead_letter_floor: BTreeMap<i32, u64>,
    /// `pending_dead_letters` holds dead letters of a round that landed without them.
    dead_letters_carried: bool,
    /// Whether `pending`'s `PRE_COMMIT` is durable.
    pre_committed: bool,
    file_spec: Option<FileSpec>,
    /// The table must be registered again before the next round (see the module docs).
    resync: bool,
    held: bool,
    commits_at_compaction: u64,
    last_compaction_ms: Option<i64>,
    compaction_running: bool,
    /// Outputs waiting for [`Action::CheckDeadLetters`]'s answer.
    held_outputs: Vec<(i32, JobOutput)>,
    /// The time of the tick in progress.
    now_ms: i64,
    report: Report,
}

impl Machine {
    /// A machine for a table just registered (`reg`), at `now_ms`.
    pub fn new(settings: Settings, reg: Registration, now_ms: i64) -> Machine {
        let mut m = Machine {
            settings,
            phase: Phase::Idle,
            offsets: BTreeMap::new(),
            base: None,
            table_uuid: None,
            partition_by: Vec::new(),
            spec: std::sync::Arc::new(PartitionSpec::unpartition_spec()),
            last_column_id: 0,
            watermarks: Watermarks::default(),
            pending: None,
            pending_dead_letters: None,
            dead_letter_floor: BTreeMap::new(),
            dead_letters_carried: false,
            pre_committed: false,
            file_spec: None,
            resync: false,
            held: false,
            commits_at_compaction: 0,
            last_compaction_ms: None,
            compaction_running: false,
            held_outputs: Vec::new(),
            now_ms,
            report: Report::default(),
        };
        m.apply(reg, true);
        m
    }

    /// The round to commit (or pre-commit), if any.
    pub fn pending(&self) -> Option<&Round> {
        self.pending.as_ref()
    }

    /// The dead-letter round to commit, if any.
    pub fn pending_dead_letters(&self) -> Option<&Round> {
        self.pending_dead_letters.as_ref()
    }

    /// The dead-letter table's progress as the machine knows it: where its next dead-letter
    /// round starts.
    pub fn dead_letter_floor(&self) -> &BTreeMap<i32, u64> {
        &self.dead_letter_floor
    }

    /// The spec of the pending round's files, for its `PRE_COMMIT`.
    pub fn file_spec(&self) -> Option<&FileSpec> {
        self.file_spec.as_ref()
    }

    /// Next offset per partition: where conversion is.
    pub fn offsets(&self) -> &BTreeMap<i32, u64> {
        &self.offsets
    }

    pub fn report(&self) -> &Report {
        &self.report
    }

    pub fn is_upsert(&self) -> bool {
        self.settings.upsert
    }

    /// The background compaction the machine started has ended.
    pub fn compaction_finished(&mut self) {
        self.compaction_running = false;
    }

    /// Takes a registration: where conversion resumes, and a recovered round to commit first
    /// (kept only on the first registration: an upsert table's is never kept, see `register`).
    fn apply(&mut self, reg: Registration, first: bool) {
        self.offsets = reg.offsets.clone();
        self.base = reg.base;
        self.table_uuid = reg.table_uuid;
        self.partition_by = reg.partition_by;
        self.spec = reg.spec;
        self.last_column_id = reg.last_column_id;
        let mut w = Watermarks {
            partitions: reg.partition_watermarks,
            table: reg.watermark_ms,
            ..Watermarks::default()
        };
        w.start(reg.offsets.keys().copied(), self.now_ms);
        self.watermarks = w;
        self.pending = None;
        self.pending_dead_letters = None;
        self.dead_letter_floor = reg.dead_letter_floor;
        self.dead_letters_carried = false;
        self.held_outputs.clear();
        self.pre_committed = false;
        self.report.committed = self.offsets.clone();
        self.report.watermark_ms = reg.watermark_ms;
        self.report.partition_watermarks = self.watermarks.partitions.clone();
        if let (true, Some((mut main, dead_letters))) = (first, reg.recovered) {
            // This coordinator commits it now, under its own epoch. Until it lands, the
            // table's progress is where the round starts.
            for (partition, start) in &main.start_offsets {
                self.report.committed.insert(*partition, *start);
            }
            main.epoch = Some(self.settings.epoch);
            self.pending = Some(main);
            self.pending_dead_letters = dead_letters.map(|mut d| {
                d.epoch = Some(self.settings.epoch);
                d
            });
            self.pre_committed = true;
        }
    }

    /// A commit tick at `now_ms`: the first action of the round.
    pub fn tick(&mut self, now_ms: i64) -> Action {
        if self.phase == Phase::Stopped {
            return Action::Stop { fenced: true };
        }
        self.now_ms = now_ms;
        if self.resync {
            self.phase = Phase::Registering;
            return Action::Register;
        }
        self.after_registration()
    }

    /// A renewal between ticks.
    pub fn renewal(&mut self) -> Action {
        if self.phase == Phase::Stopped {
            return Action::Stop { fenced: true };
        }
        self.phase = Phase::RenewingPeriodic;
        Action::Renew
    }

    /// The outcome of the last action; the next action.
    pub fn on(&mut self, outcome: Outcome) -> Action {
        let phase = std::mem::replace(&mut self.phase, Phase::Idle);
        match (phase, outcome) {
            (Phase::Stopped, _) => self.stop(true),
            (Phase::RenewingPeriodic, Outcome::Renewed(false)) => self.stop(true),
            (Phase::RenewingPeriodic, _) => Action::Idle,

            (Phase::Registering, Outcome::Registered(reg)) => {
                self.apply(*reg, false);
                self.resync = false;
                self.after_registration()
            }
            (Phase::Registering, _) => Action::Idle,

            (Phase::QuietCompaction, _) => self.after_quiet_compaction(),

            (Phase::Draining, Outcome::Drained(outputs)) => self.drained(outputs),
            (Phase::Draining, _) => {
                // An upsert job that failed may have moved the index part way.
                self.resync = self.settings.upsert;
                Action::Idle
            }

            (Phase::CheckingDeadLetters, Outcome::Landed(landed)) => {
                let outputs = std::mem::take(&mut self.held_outputs);
                let carried = match self.pending_dead_letters.take() {
                    Some(d) if landed => {
                        self.dead_letters_landed(d);
                        None
                    }
                    earlier => earlier,
                };
                self.build(outputs, carried);
                self.pre_commit()
            }
            (Phase::CheckingDeadLetters, _) => {
                // Asked again at the next tick: the outputs stay aside meanwhile (the worker
                // has handed them over; dropping them would skip their records).
                Action::Idle
            }

            (Phase::PreCommitting, Outcome::Done) => {
                self.pre_committed = true;
                self.renew_for_commit()
            }
            (Phase::PreCommitting, _) => Action::Idle,

            (Phase::RenewingForCommit, Outcome::Renewed(true)) => self.commit_dead_letters(),
            (Phase::RenewingForCommit, Outcome::Renewed(false)) => self.stop(true),
            (Phase::RenewingForCommit, _) => Action::Idle,

            (Phase::CommittingDeadLetters, Outcome::Committed(_)) => {
                if let Some(d) = self.pending_dead_letters.take() {
                    self.dead_letters_landed(d);
                }
                self.held = false;
                self.report_dead_letters();
                self.commit()
            }
            (
                Phase::CommittingDeadLetters,
                Outcome::CommitFailed(CommitError::NotContinuous { .. }),
            ) => self.dead_letters_refused(),
            (Phase::CommittingDeadLetters, _) => {
                // The main table does not wait for its dead letters: they go with the next
                // round's (its PRE_COMMIT keeps them durable).
                self.report.failed_commits += 1;
                self.report_dead_letters();
                self.commit()
            }

            (Phase::Committing, Outcome::Committed(snapshot)) => self.committed(snapshot),
            (Phase::Committing, Outcome::CommitFailed(e)) => self.commit_failed(e),
            (Phase::Committing, _) => {
                self.report.failed_commits += 1;
                Action::Idle
            }

            (Phase::ClosingDropped, _) => Action::Idle,
            (Phase::ClosingCommitted, _) => self.after_close(),
            (Phase::LearningUuid, Outcome::TableUuid(uuid)) => {
                self.table_uuid = uuid;
                self.after_uuid()
            }
            (Phase::LearningUuid, _) => self.after_uuid(),
            (Phase::Compacting, _) => self.after_compaction_start(),
            (Phase::Expiring, _) => Action::Idle,
            (Phase::Idle, _) => Action::Idle,
        }
    }

    fn stop(&mut self, fenced: bool) -> Action {
        self.phase = Phase::Stopped;
        Action::Stop { fenced }
    }

    /// Steps after the table is registered (or was): a quiet table's compaction, then the
    /// round.
    fn after_registration(&mut self) -> Action {
        // A table that went quiet still gets its last small files merged: an interval after
        // its last compaction, if it committed since.
        let quiet_due = self.pending.is_none()
            && self.report.commits > self.commits_at_compaction
            && !self.compaction_running
            && self
                .settings
                .compaction_interval
                .zip(self.last_compaction_ms)
                .is_some_and(|(interval, at)| self.now_ms - at >= interval.as_millis() as i64);
        if quiet_due {
            self.phase = Phase::QuietCompaction;
            self.start_compaction_bookkeeping();
            return Action::StartCompaction;
        }
        self.after_quiet_compaction()
    }

    fn start_compaction_bookkeeping(&mut self) {
        self.last_compaction_ms = Some(self.now_ms);
        self.commits_at_compaction = self.report.commits;
        self.compaction_running = true;
    }

    fn after_quiet_compaction(&mut self) -> Action {
        let full = self
            .pending_dead_letters
            .as_ref()
            .is_some_and(|d| d.files.len() >= self.settings.dead_letter_pending_files.max(1));
        if self.pending.is_none() && !self.held_outputs.is_empty() {
            // Outputs drained at an earlier tick wait for the carried dead letters' check.
            let outputs = std::mem::take(&mut self.held_outputs);
            return self.drained(outputs);
        }
        if self.pending.is_none() && full {
            self.held = true;
            self.report.held_by_dead_letters = true;
            return self.renew_for_commit();
        }
        if self.pending.is_none() {
            self.phase = Phase::Draining;
            return Action::Drain;
        }
        self.pre_commit()
    }

    /// Whether the machine's table is held by its dead letters (logged by the driver).
    pub fn held_by_dead_letters(&self) -> bool {
        self.held
    }

    fn drained(&mut self, outputs: Vec<(i32, JobOutput)>) -> Action {
        if outputs.is_empty() {
            if self.pending_dead_letters.is_none() {
                return Action::Idle;
            }
            // A dead-letter round that failed to commit is retried even without new output.
            return self.pre_commit();
        }
        if let Some(earlier) = &self.pending_dead_letters {
            // Unless it landed after all: its commit's outcome may have been unknown.
            let commit_id = earlier.commit_id.clone();
            self.held_outputs = outputs;
            self.phase = Phase::CheckingDeadLetters;
            return Action::CheckDeadLetters { commit_id };
        }
        self.build(outputs, None);
        self.pre_commit()
    }

    /// Builds the round (and its dead-letter round, the `carried` dead-letter round's files
    /// first) from `outputs`.
    fn build(&mut self, outputs: Vec<(i32, JobOutput)>, carried: Option<Round>) {
        let mut start_offsets = self.offsets.clone();
        // A partition the table held nothing of at registration starts at 0 for the
        // continuity check: if another coordinator commits it meanwhile (a deposed one, still
        // converting), this round is refused instead of landing the same records again.
        for (partition, _) in &outputs {
            start_offsets.entry(*partition).or_insert(0);
        }
        let mut files = Vec::new();
        let mut delete_files = Vec::new();
        let mut dead_letter_files = Vec::new();
        let mut schema = None;
        let now_ms = self.now_ms;
        for (partition, out) in outputs {
            files.extend(out.data_files);
            delete_files.extend(out.delete_files);
            // An output that ends at or below the floor holds only dead letters its table
            // already has (a partition's owner converted it before they landed: a chunk).
            if self
                .dead_letter_floor
                .get(&partition)
                .is_none_or(|floor| out.next_offset > *floor)
            {
                dead_letter_files.extend(out.dead_letter_files);
            }
            let next = self.offsets.entry(partition).or_default();
            if out.next_offset > *next {
                self.watermarks
                    .observe(partition, out.max_timestamp_ms, now_ms);
            }
            *next = (*next).max(out.next_offset);
            schema = Some(out.schema);
            if !out.dead_letters.is_empty() {
                tracing::warn!(
                    table = %self.settings.name,
                    partition,
                    records = out.dead_letters.len(),
                    first_error = %out.dead_letters[0].error,
                    "records did not convert; they go to the dead-letter table"
                );
            }
        }
        // The topic id's first 12 digits: a topic created again under the same name reaches
        // the same offsets, and its rounds must not pass for the old one's.
        let topic_id = &self.settings.topic_id;
        let commit_id = format!(
            "{}-{}-{}",
            self.settings.name,
            &topic_id[..topic_id.len().min(12)],
            self.offsets
                .iter()
                .map(|(p, o)| format!("{p}.{o}"))
                .collect::<Vec<_>>()
                .join("-")
        );
        let epoch = Some(self.settings.epoch);
        self.pending_dead_letters = self.dead_letter_round(&commit_id, carried, dead_letter_files);
        let Some(schema) = schema else { return };
        let bound_spec = if self.partition_by.is_empty() {
            None
        } else {
            match inlet_table_worker::partition::spec(&schema, &self.partition_by) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(table = %self.settings.name, error = %e, "partition.by does not apply; the table is created unpartitioned");
                    None
                }
            }
        };
        // The spec the files were written with: a new table's, or the table's.
        let files_spec = bound_spec
            .clone()
            .unwrap_or_else(|| self.spec.as_ref().clone());
        self.file_spec = match files_spec.partition_type(&schema) {
            Ok(t) => Some(FileSpec {
                spec_id: files_spec.spec_id(),
                partition_type: t,
            }),
            Err(e) => {
                tracing::warn!(table = %self.settings.name, error = %e, "the files' partition type is unknown; the round is committed without a PRE_COMMIT");
                None
            }
        };
        self.pre_committed = false;
        self.pending = Some(Round {
            commit_id,
            schema,
            files,
            delete_files,
            base: if self.settings.upsert {
                RoundBase::Snapshot(self.base)
            } else {
                RoundBase::Latest
            },
            id_columns: self.settings.id_columns.clone(),
            offsets: self.offsets.clone(),
            watermark_ms: self.watermarks.advance(now_ms, self.settings.idle_ms),
            partition_watermarks: self.watermarks.partitions.clone(),
            timestamp_ms: now_ms,
            partition_spec: bound_spec.map(|s| s.into_unbound()),
            topic_id: Some(self.settings.topic_id.clone()),
            base_column_id: self.last_column_id,
            start_offsets,
            // Partitions the machine has no offset for yet are not checked (see
            // `Round::exact_start`; the dead-letter round sets it).
            exact_start: false,
            epoch,
            table_uuid: self.table_uuid,
        });
    }

    /// The dead-letter round of the round `commit_id`: the `carried` round's files, then
    /// `files`; None when there are none. It starts where the dead-letter table's progress
    /// was when its oldest files were built: the carried round's start, else the floor.
    fn dead_letter_round(
        &self,
        commit_id: &str,
        carried: Option<Round>,
        files: Vec<iceberg::spec::DataFile>,
    ) -> Option<Round> {
        let (start_offsets, exact_start, mut all) = match carried {
            Some(c) => (c.start_offsets, c.exact_start, c.files),
            None => (self.dead_letter_floor.clone(), true, Vec::new()),
        };
        all.extend(files);
        if all.is_empty() {
            return None;
        }
        Some(Round {
            commit_id: format!("{commit_id}-dlq"),
            schema: inlet_table_worker::dead_letter::schema().ok()?,
            files: all,
            delete_files: Vec::new(),
            base: RoundBase::Latest,
            id_columns: Vec::new(),
            offsets: self.offsets.clone(),
            watermark_ms: None,
            partition_watermarks: BTreeMap::new(),
            timestamp_ms: self.now_ms,
            partition_spec: None,
            topic_id: Some(self.settings.topic_id.clone()),
            // Inlet's fixed schema: none of its ids is new, and another name for one is
            // another engine's rename.
            base_column_id: i32::MAX,
            start_offsets,
            exact_start,
            epoch: Some(self.settings.epoch),
            table_uuid: None,
        })
    }

    fn pre_commit(&mut self) -> Action {
        if self.pending.is_some() && !self.pre_committed {
            if self.file_spec.is_some() {
                self.phase = Phase::PreCommitting;
                return Action::PreCommit;
            }
            self.pre_committed = true;
        }
        self.renew_for_commit()
    }

    fn renew_for_commit(&mut self) -> Action {
        if self.pending.is_none() && self.pending_dead_letters.is_none() {
            return Action::Idle;
        }
        // Committing only while the epoch is still this coordinator's (`crate::lease`).
        self.phase = Phase::RenewingForCommit;
        Action::RenewForCommit
    }

    fn commit_dead_letters(&mut self) -> Action {
        if self.pending_dead_letters.is_some() {
            self.phase = Phase::CommittingDeadLetters;
            return Action::CommitDeadLetters;
        }
        self.commit()
    }

    fn report_dead_letters(&mut self) {
        self.report.pending_dead_letter_files = self
            .pending_dead_letters
            .as_ref()
            .map_or(0, |d| d.files.len());
        self.report.held_by_dead_letters = self.held;
    }

    fn commit(&mut self) -> Action {
        if self.pending.is_some() {
            self.phase = Phase::Committing;
            return Action::Commit;
        }
        Action::Idle
    }

    fn committed(&mut self, snapshot: Option<i64>) -> Action {
        let Some(round) = self.pending.take() else {
            return Action::Idle;
        };
        if self.settings.upsert {
            match snapshot {
                Some(id) => self.base = Some(id),
                // Landed earlier (an unknown outcome): its snapshot may not be `main` any
                // more; the index is rebuilt from the table.
                None => self.resync = true,
            }
        }
        self.report.committed = round.offsets.clone();
        self.report.watermark_ms = round.watermark_ms.or(self.report.watermark_ms);
        self.report
            .partition_watermarks
            .extend(round.partition_watermarks.iter().map(|(p, w)| (*p, *w)));
        self.report.last_commit_ms = Some(self.now_ms);
        self.report.commits += 1;
        if self.pending_dead_letters.is_some() {
            self.dead_letters_carried = true;
            // Its dead letters did not land, and its PRE_COMMIT is where they are durable: it
            // stays open, so a restart commits them (`coordinator::recover`: the round landed,
            // its dead letters did not) instead of converting on past their records. The next
            // round's PRE_COMMIT carries them on.
            return self.after_close();
        }
        self.phase = Phase::ClosingCommitted;
        Action::Close {
            commit_id: round.commit_id,
            snapshot,
        }
    }

    fn after_close(&mut self) -> Action {
        if self.table_uuid.is_none() {
            // The round created the table: later rounds are pinned to it.
            self.phase = Phase::LearningUuid;
            return Action::LearnTableUuid;
        }
        self.after_uuid()
    }

    fn after_uuid(&mut self) -> Action {
        let due = !self.compaction_running
            && self
                .report
                .commits
                .is_multiple_of(self.settings.compact_every.max(1))
            && self.settings.compaction_interval.is_some_and(|interval| {
                self.last_compaction_ms
                    .is_none_or(|at| self.now_ms - at >= interval.as_millis() as i64)
            });
        if due {
            self.start_compaction_bookkeeping();
            self.phase = Phase::Compacting;
            return Action::StartCompaction;
        }
        self.after_compaction_start()
    }

    fn after_compaction_start(&mut self) -> Action {
        if self.settings.expire.is_some()
            && self
                .report
                .commits
                .is_multiple_of(self.settings.expire_every.max(1))
        {
            self.phase = Phase::Expiring;
            return Action::Expire;
        }
        Action::Idle
    }

    fn commit_failed(&mut self, e: CommitError) -> Action {
        self.report.failed_commits += 1;
        match e {
            CommitError::Fenced { .. } => self.stop(true),
            CommitError::BaseChanged { .. } => {
                self.resync = true;
                Action::Idle
            }
            CommitError::SchemaConflict(_)
            | CommitError::NotContinuous { .. }
            | CommitError::TableReplaced { .. } => self.drop_pending(),
            _ => Action::Idle,
        }
    }

    /// Drops the pending round: its PRE_COMMIT must not be committed again after a restart,
    /// so it is closed, and its range is converted again from the tables' progress after the
    /// table is registered again.
    fn drop_pending(&mut self) -> Action {
        self.resync = true;
        let Some(round) = self.pending.take() else {
            return Action::Idle;
        };
        self.phase = Phase::ClosingDropped;
        Action::Close {
            commit_id: round.commit_id,
            snapshot: None,
        }
    }

    /// A dead-letter round landed: the dead-letter table's progress is now its offsets.
    fn dead_letters_landed(&mut self, round: Round) {
        self.dead_letter_floor = round.offsets;
        self.dead_letters_carried = false;
    }

    /// The dead-letter table's progress is not where the dead-letter round starts: another
    /// coordinator (a deposed one, or this one's successor) committed dead letters since this
    /// machine read it, maybe these very ones. The dead-letter round is dropped, and so is the
    /// main round, which must not move the table past dead letters that were not committed:
    /// both are converted again from the tables' progress, where the dead-letter table's
    /// becomes the floor (below it, dead letters are not written again).
    fn dead_letters_refused(&mut self) -> Action {
        self.report.failed_commits += 1;
        if std::mem::take(&mut self.dead_letters_carried) {
            // Their records are below the table's progress, so they are not converted again.
            tracing::warn!(table = %self.settings.name, "a refused dead-letter round carried dead letters of rounds that landed without them; those the other coordinator did not commit are lost");
        }
        self.pending_dead_letters = None;
        self.held = false;
        self.report_dead_letters();
        self.drop_pending()
    }
}

/// Which snapshots expiry removes, every `TableTopic::expire_every` commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry {
    /// `older.than.hours`: snapshots older than this, beyond the newest `retain_last`.
    pub older_than: Duration,
    /// `retain.last`: kept whatever their age.
    pub retain_last: usize,
    /// `max.count`: at most this many snapshots are kept, whatever their age.
    pub max_snapshots: usize,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use iceberg::spec::{
        DataContentType, DataFile, DataFileBuilder, DataFileFormat, NestedField, PrimitiveType,
        Schema, Struct, Type,
    };

    use super::*;

    fn settings() -> Settings {
        Settings {
            name: "t".into(),
            topic_id: "0123456789abcdef".into(),
            upsert: false,
            id_columns: Vec::new(),
            idle_ms: None,
            compaction_interval: None,
            compact_every: 10,
            expire: None,
            expire_every: 20,
            dead_letter_pending_files: 8,
            epoch: 1,
        }
    }

    /// Partition 0's progress at `at`, the dead-letter table's at `floor`.
    fn registration(at: u64, floor: Option<u64>) -> Registration {
        Registration {
            offsets: BTreeMap::from([(0, at)]),
            base: None,
            table_uuid: Some(uuid::Uuid::nil()),
            partition_by: Vec::new(),
            spec: Arc::new(PartitionSpec::unpartition_spec()),
            last_column_id: 1,
            watermark_ms: None,
            partition_watermarks: BTreeMap::new(),
            dead_letter_floor: floor.map(|f| BTreeMap::from([(0, f)])).unwrap_or_default(),
            recovered: None,
        }
    }

    fn file(name: &str) -> DataFile {
        DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(format!("file:///t_dlq/data/{name}.parquet"))
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::empty())
            .record_count(1)
            .file_size_in_bytes(100)
            .build()
            .expect("data file")
    }

    /// Partition 0 converted up to `next`; with `dead`, a dead-letter file of that name.
    fn output(next: u64, dead: Option<&str>) -> (i32, JobOutput) {
        let schema = Schema::builder()
            .with_fields(vec![Arc::new(NestedField::required(
                1,
                "id",
                Type::Primitive(PrimitiveType::Long),
            ))])
            .build()
            .expect("schema");
        let out = JobOutput {
            data_files: Vec::new(),
            next_offset: next,
            schema,
            changes: Vec::new(),
            dead_letters: Vec::new(),
            dead_letter_files: dead.map(file).into_iter().collect(),
            delete_files: Vec::new(),
            deleted_keys: Vec::new(),
            rows: 0,
            max_timestamp_ms: None,
            input_bytes: 0,
            decoded_bytes: 0,
        };
        (0, out)
    }

    /// From a `PRE_COMMIT` to the action after the lease's renewal.
    fn pre_commit_and_renew(m: &mut Machine, after_drain: Action) -> Action {
        assert_eq!(after_drain, Action::PreCommit);
        assert_eq!(m.on(Outcome::Done), Action::RenewForCommit);
        m.on(Outcome::Renewed(true))
    }

    /// A tick that drains `outputs` into a round, up to the action after the renewal.
    fn round(m: &mut Machine, now_ms: i64, outputs: Vec<(i32, JobOutput)>) -> Action {
        assert_eq!(m.tick(now_ms), Action::Drain);
        let next = m.on(Outcome::Drained(outputs));
        pre_commit_and_renew(m, next)
    }

    fn dead_letter_files(m: &Machine) -> Vec<String> {
        m.pending_dead_letters()
            .map(|d| d.files.iter().map(|f| f.file_path().to_string()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn dead_letter_rounds_start_at_the_floor_which_follows_them() {
        let mut m = Machine::new(settings(), registration(10, Some(4)), 0);
        assert_eq!(
            round(&mut m, 1, vec![output(20, Some("a"))]),
            Action::CommitDeadLetters
        );
        let d = m.pending_dead_letters().expect("a dead-letter round");
        assert_eq!(d.start_offsets, BTreeMap::from([(0, 4)]));
        assert!(d.exact_start);
        assert_eq!(d.offsets, BTreeMap::from([(0, 20)]));
        let main = m.pending().expect("the round");
        assert_eq!(main.start_offsets, BTreeMap::from([(0, 10)]));
        assert_eq!(m.on(Outcome::Committed(Some(1))), Action::Commit);
        assert_eq!(m.dead_letter_floor(), &BTreeMap::from([(0, 20)]));
        assert!(matches!(
            m.on(Outcome::Committed(Some(2))),
            Action::Close {
                snapshot: Some(2),
                ..
            }
        ));
        assert_eq!(m.on(Outcome::Done), Action::Idle);
        assert_eq!(
            round(&mut m, 2, vec![output(30, Some("b"))]),
            Action::CommitDeadLetters
        );
        let d = m.pending_dead_letters().expect("a dead-letter round");
        assert_eq!(d.start_offsets, BTreeMap::from([(0, 20)]));
    }

    #[test]
    fn a_dead_letter_round_refused_for_its_start_is_dropped_with_its_round() {
        let mut m = Machine::new(settings(), registration(10, None), 0);
        assert_eq!(
            round(&mut m, 1, vec![output(20, Some("a"))]),
            Action::CommitDeadLetters
        );
        let d = m.pending_dead_letters().expect("a dead-letter round");
        assert!(d.start_offsets.is_empty(), "{:?}", d.start_offsets);
        assert!(d.exact_start);
        let main = m.pending().expect("the round").commit_id.clone();
        // Another coordinator committed dead letters of the same records first.
        let refused = CommitError::NotContinuous {
            partition: 0,
            start: 0,
            table: 20,
        };
        assert_eq!(
            m.on(Outcome::CommitFailed(refused)),
            Action::Close {
                commit_id: main,
                snapshot: None
            }
        );
        assert!(m.pending().is_none() && m.pending_dead_letters().is_none());
        assert_eq!(m.on(Outcome::Done), Action::Idle);
        assert_eq!(m.tick(2), Action::Register);
        // The main table is still at 10 (the other's round did not land yet); its dead
        // letters are in up to 20.
        assert_eq!(
            m.on(Outcome::Registered(Box::new(registration(10, Some(20))))),
            Action::Drain
        );
        // The same range again (a chunk converted before they landed) adds none of them.
        let next = m.on(Outcome::Drained(vec![
            output(20, Some("a")),
            output(30, Some("b")),
        ]));
        assert_eq!(
            pre_commit_and_renew(&mut m, next),
            Action::CommitDeadLetters
        );
        assert_eq!(dead_letter_files(&m), ["file:///t_dlq/data/b.parquet"]);
        let d = m.pending_dead_letters().expect("a dead-letter round");
        assert_eq!(d.start_offsets, BTreeMap::from([(0, 20)]));
    }

    /// A round whose dead letters failed: it is not closed (its `PRE_COMMIT` holds them); the
    /// next round carries them, from where the failed one started, or, when they landed
    /// after all (a lost reply), from where they end.
    #[test]
    fn carried_dead_letters_start_where_the_oldest_carried_round_did() {
        for landed in [false, true] {
            let mut m = Machine::new(settings(), registration(10, Some(4)), 0);
            assert_eq!(
                round(&mut m, 1, vec![output(20, Some("a"))]),
                Action::CommitDeadLetters
            );
            let down = CommitError::Catalog("down".into());
            assert_eq!(m.on(Outcome::CommitFailed(down)), Action::Commit);
            assert_eq!(
                m.on(Outcome::Committed(Some(2))),
                Action::Idle,
                "not closed"
            );
            assert_eq!(m.dead_letter_floor(), &BTreeMap::from([(0, 4)]));

            assert_eq!(m.tick(2), Action::Drain);
            let check = m.on(Outcome::Drained(vec![output(30, Some("b"))]));
            assert!(
                matches!(check, Action::CheckDeadLetters { .. }),
                "{check:?}"
            );
            let next = m.on(Outcome::Landed(landed));
            assert_eq!(
                pre_commit_and_renew(&mut m, next),
                Action::CommitDeadLetters
            );
            let d = m.pending_dead_letters().expect("a dead-letter round");
            assert_eq!(d.offsets, BTreeMap::from([(0, 30)]));
            if landed {
                assert_eq!(d.start_offsets, BTreeMap::from([(0, 20)]));
                assert_eq!(dead_letter_files(&m), ["file:///t_dlq/data/b.parquet"]);
            } else {
                assert_eq!(d.start_offsets, BTreeMap::from([(0, 4)]));
                assert_eq!(
                    dead_letter_files(&m),
                    [
                        "file:///t_dlq/data/a.parquet",
                        "file:///t_dlq/data/b.parquet"
                    ]
                );
            }
            assert_eq!(m.on(Outcome::Committed(Some(3))), Action::Commit);
            assert_eq!(m.dead_letter_floor(), &BTreeMap::from([(0, 30)]));
            assert!(matches!(
                m.on(Outcome::Committed(Some(4))),
                Action::Close { .. }
            ));
        }
    }
}
