//! One table topic's coordinator: every commit interval it collects what the node's table
//! worker converted (and converts the tails), and commits it as one snapshot ([`commit`]).
//! Its decisions are [`crate::machine::Machine`]'s, which has no I/O (and which the
//! simulation drives too); [`run`] takes the lease, registers the table, and carries the
//! machine's actions out against the worker, the control stream, the leases and the catalog.
//!
//! Invariants:
//! - Conversion resumes where the table's current snapshot says (`inlet.offsets`); partitions
//!   the table has never seen start at their stream's first offset.
//! - A round, once built, is committed before any newer output is collected: a failed commit
//!   is retried with the same files and offsets at the next tick, so nothing is skipped and,
//!   with the commit id check in [`Committer::commit`], nothing is committed twice.
//! - The table watermark follows [`crate::watermark`]: the minimum over partitions that have
//!   held a record of each partition's largest event time (`event.time.field`, else the record
//!   timestamp), idle partitions excluded with `watermark.idle.ms`, never going back. Each
//!   partition's watermark is kept in the snapshot summary too, so a restart does not forget
//!   them.
//!
//! - Records that did not convert go to the dead-letter table `<table>_dlq`, committed just
//!   before the main table's round, with the round's offsets. A failed dead-letter commit
//!   does not hold the main round back: it is retried, and joins the next round's (the
//!   landed round's `PRE_COMMIT` stays open meanwhile, so a restart commits them). After a
//!   crash (or a re-register) between the two commits the range is converted again, but dead
//!   letters below the dead-letter table's committed offsets are not written again
//!   (`TableContext::dead_letter_floor`, read at every registration): the dead letters land
//!   once, whatever the new round's extent. A dead-letter round is continuous as a main round
//!   is: it lands only while the dead-letter table's progress is where it was built
//!   (`crate::machine`), so a deposed coordinator's dead letters and its successor's do not
//!   both land; the loser drops its round and converts again from the tables.
//!
//! - Upsert tables: the worker's primary-key index reflects the registered snapshot plus every
//!   round collected since. Each round is pinned to the snapshot it was built on
//!   ([`RoundBase::Snapshot`]). Whenever that chain breaks — the table moved under a round
//!   (another writer), a commit whose outcome was unknown turned out to have landed, or a
//!   conversion failed — the coordinator *re-registers*: it reloads the table, drops the
//!   uncollected outputs and the pending round, and the worker rebuilds the index from the
//!   table's live files before converting again from the committed offsets. The files of
//!   the dropped round are orphans (the same ranges are converted again under the same names).
//!
//! - Two phases ([`crate::control`]): a round's `PRE_COMMIT` is durable in the table's
//!   control stream before its first catalog call, and `COMMITTED` follows the commit. A
//!   restarted coordinator whose last `PRE_COMMIT` did not land commits the same files again
//!   (append-only tables), and converts from where that round ends. An upsert round is
//!   converted again instead: the primary-key index is rebuilt from the table, which does not
//!   hold the round's rows.
//!
//! - Rounds start on a fixed period (`commit.interval.ms`), not an interval after the last
//!   round ended, so the time a round takes does not add to the data's latency.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use iceberg::TableIdent;
use inlet_common::Clock;
use inlet_storage::StreamStore;
use inlet_table_worker::TableContext;
use inlet_table_worker::{PartitionSource, Worker};
use tokio_util::sync::CancellationToken;

use crate::commit::{CommitError, Committed, Committer};
use crate::control::{ControlStream, PendingRound};
use crate::lease::{Lease, Leases};
pub use crate::machine::Expiry;
use crate::machine::{Action, Machine, Outcome};
use crate::status::Statuses;
pub use crate::topic::TableTopic;

/// Tells each partition's stream what the table holds of it: retention may then expire the
/// stream below `committed` (and nothing above it; see `StreamStore::hold_for_table`). Only
/// offsets that moved since `raised` are written. A failure is logged and retried after the
/// next round: until then the stream keeps more than it must, never less.
async fn raise_floors(
    topic: &TableTopic,
    store: &StreamStore,
    committed: &BTreeMap<i32, u64>,
    raised: &mut BTreeMap<i32, u64>,
) {
    for (partition, stream) in &topic.partitions {
        let Some(&offset) = committed.get(partition) else {
            continue;
        };
        if raised.get(partition) == Some(&offset) {
            continue;
        }
        match store.raise_table_floor(*stream, offset).await {
            Ok(()) => {
                raised.insert(*partition, offset);
            }
            Err(e) => {
                tracing::warn!(table = %topic.ident, partition, error = %e, "cannot record what the table holds of the partition; its stream keeps it meanwhile");
            }
        }
    }
}

/// The default `[tables] dead_letter_pending_files`.
pub const DEFAULT_DEAD_LETTER_PENDING_FILES: usize = 256;

/// `table.topic.expire.snapshot.max.count` when unset: a day of snapshots at the default
/// 60 s interval, so the 24 h age rule is what applies there; at a 1 s interval, 24 minutes.
pub const DEFAULT_MAX_SNAPSHOTS: usize = 1_440;

/// Commits between two expiry runs unless `[tables] expire_every_commits` says otherwise.
pub const DEFAULT_EXPIRE_EVERY: u64 = 20;

/// Runs the coordinator of `topic` until `stop`: takes the table's lease, registers the
/// table, then carries out what its [`Machine`] decides, tick after tick (see
/// [`crate::machine`]): each action by its own handler ([`Driver::carry_out`]).
#[allow(clippy::too_many_arguments)]
pub async fn run(
    topic: TableTopic,
    worker: Arc<Worker>,
    committer: Committer,
    store: Arc<StreamStore>,
    clock: Arc<dyn Clock>,
    leases: Leases,
    statuses: Statuses,
    stop: CancellationToken,
) {
    // The table's lease first: nothing is converted or committed without it.
    let Some(lease) = take_lease(&topic, &committer, &leases, &stop).await else {
        return;
    };
    let registering = tokio::time::Instant::now();
    // Where the table is: retried until the catalog answers (or the node stops).
    let Some(mut reg) = register_until_ready(&topic, &worker, &committer, &store, &stop).await
    else {
        let _ = leases.release(&lease).await;
        return;
    };
    if let Some(p) = &reg.recovered {
        tracing::info!(table = %topic.ident, commit_id = %p.main.commit_id, files = p.main.files.len(), "recommitting a round from the control stream");
    }
    tracing::info!(table = %topic.ident, epoch = lease.epoch, offsets = ?reg.offsets, dead_letter_floor = ?reg.dead_letter_floor, registration_seconds = registering.elapsed().as_secs_f64(), "table coordinator started");
    let mut machine = Machine::new(
        machine_settings(&topic, lease.epoch),
        reg.machine(),
        clock.now_ms() as i64,
    );
    let mut ticks = tokio::time::interval_at(
        tokio::time::Instant::now() + topic.commit_interval,
        topic.commit_interval,
    );
    // A round slower than the interval delays the next one; ticks are not bunched up after.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The lease is renewed a few times per ttl, and before every commit.
    let mut renewals = tokio::time::interval(leases.ttl() / 3);
    renewals.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut driver = Driver {
        status_key: topic.ident.to_string(),
        control: reg.control.clone(),
        index: reg.index.take(),
        checkpoints: crate::key_checkpoint::Checkpoints::new(),
        compaction: None,
        was_held: false,
        pre_committing: false,
        floors: BTreeMap::new(),
        next_sweep_ms: topic
            .orphans
            .map(|o| clock.now_ms() as i64 + o.every.as_millis() as i64),
        topic,
        worker,
        committer,
        store,
        clock,
        leases,
        statuses,
        stop,
        lease,
    };
    driver.report(&machine);
    driver.raise_floors(&machine).await;
    let fenced = loop {
        let first = tokio::select! {
            _ = driver.stop.cancelled() => break false,
            _ = renewals.tick() => machine.renewal(),
            _ = ticks.tick() => {
                if driver.compaction.as_ref().is_some_and(|c| c.is_finished()) {
                    driver.compaction = None;
                    machine.compaction_finished();
                }
                machine.tick(driver.clock.now_ms() as i64)
            }
        };
        if let Some(fenced) = driver.chain(&mut machine, first).await {
            break fenced;
        }
        driver.between_ticks(&machine).await;
    };
    driver.finish(fenced).await;
}

/// The [`crate::machine::Settings`] of `topic`'s machine under lease `epoch`.
fn machine_settings(topic: &TableTopic, epoch: i64) -> crate::machine::Settings {
    crate::machine::Settings {
        name: topic.name.clone(),
        topic_id: topic.topic_id.clone(),
        upsert: topic.ctx.upsert.is_some(),
        id_columns: topic
            .ctx
            .upsert
            .as_ref()
            .map(|u| u.id_columns.clone())
            .unwrap_or_default(),
        idle_ms: topic.watermark_idle.map(|d| d.as_millis() as i64),
        compaction_interval: topic.compaction_interval,
        compact_every: topic.compaction.every_commits,
        expire: topic.expire,
        expire_every: topic.expire_every,
        dead_letter_pending_files: topic.dead_letter_pending_files,
        epoch,
    }
}

/// What [`run`] carries the machine's actions out with: the table's parts, and what the
/// coordinator keeps between actions besides the machine's own state.
struct Driver {
    topic: TableTopic,
    worker: Arc<Worker>,
    committer: Committer,
    store: Arc<StreamStore>,
    clock: Arc<dyn Clock>,
    leases: Leases,
    statuses: Statuses,
    stop: CancellationToken,
    lease: Lease,
    status_key: String,
    control: ControlStream,
    /// A distributed keyed table's primary-key index: its rounds' deletes are made here.
    index: Option<inlet_table_worker::TableIndex>,
    checkpoints: crate::key_checkpoint::Checkpoints,
    /// The running compaction, off the commit path: rounds go on while it reads and writes.
    compaction: Option<tokio::task::JoinHandle<()>>,
    /// Whether the dead-letter table held the rounds back at the last renewal (logged once).
    was_held: bool,
    /// Whether the current chain wrote the round's `PRE_COMMIT` (for the `round-built` point).
    pre_committing: bool,
    /// The offsets each partition's stream was last told the table holds (its table floor).
    floors: BTreeMap<i32, u64>,
    /// When the table's orphan files are next looked for ([`crate::orphans`]).
    next_sweep_ms: Option<i64>,
}

impl Driver {
    /// Carries out `action` and the ones the machine gives after it, until the tick is over
    /// ([`Action::Idle`], or a handler with nothing to do); `Some(fenced)` when the machine
    /// stops.
    async fn chain(&mut self, machine: &mut Machine, mut action: Action) -> Option<bool> {
        self.pre_committing = false;
        loop {
            let outcome = match action {
                Action::Idle => return None,
                Action::Stop { fenced } => {
                    tracing::warn!(table = %self.topic.ident, epoch = self.lease.epoch, "a newer coordinator took the table over; this one stops without committing");
                    self.report(machine);
                    return Some(fenced);
                }
                action => match self.carry_out(action, machine).await {
                    Some(outcome) => outcome,
                    None => return None,
                },
            };
            action = machine.on(outcome);
        }
    }

    /// Carries out one action; None when there is nothing to do (the tick ends).
    async fn carry_out(&mut self, action: Action, machine: &Machine) -> Option<Outcome> {
        Some(match action {
            Action::Register => self.register().await,
            Action::Drain if self.topic.chunks.is_some() => self.drain_chunks(machine).await,
            Action::Drain => self.drain().await,
            Action::CheckDeadLetters { commit_id } => self.check_dead_letters(&commit_id).await,
            Action::PreCommit => self.pre_commit(machine).await?,
            Action::Renew => self.renew(machine, false).await,
            Action::RenewForCommit => self.renew(machine, true).await,
            Action::CommitDeadLetters => self.commit_dead_letters(machine).await?,
            Action::Commit => self.commit(machine).await?,
            Action::Close {
                commit_id,
                snapshot,
            } => self.close(&commit_id, snapshot).await,
            Action::LearnTableUuid => self.learn_table_uuid().await,
            Action::StartCompaction => self.start_compaction(),
            Action::Expire => self.expire().await,
            Action::Idle | Action::Stop { .. } => return None,
        })
    }

    /// [`Action::Register`]: reloads the table; the primary-key index is built again.
    async fn register(&mut self) -> Outcome {
        let t = &self.topic;
        match register(t, &self.worker, &self.committer, &self.store).await {
            Ok(mut r) => {
                tracing::info!(table = %t.ident, offsets = ?r.offsets, "re-registered: the primary-key index is built again, from its checkpoint or the table");
                self.control = r.control.clone();
                self.index = r.index.take();
                self.checkpoints = crate::key_checkpoint::Checkpoints::new();
                // An upsert table's recovered round is never kept (see `register`).
                Outcome::Registered(Box::new(r.machine()))
            }
            Err(e) => {
                tracing::warn!(table = %t.ident, error = %e, "cannot reload the table; retrying");
                Outcome::Failed(e.to_string())
            }
        }
    }

    /// The partitions' ends as this node last read them, recorded in the table's status.
    fn ends(&self) -> BTreeMap<i32, u64> {
        let ends: BTreeMap<i32, u64> = self
            .topic
            .partitions
            .iter()
            .filter_map(|(p, s)| Some((*p, self.store.end_offset(*s).ok()?)))
            .collect();
        self.statuses
            .update(&self.status_key, |s| s.ends = ends.clone());
        ends
    }

    /// [`Action::Drain`] of a distributed table: collects the partitions' chunks.
    async fn drain_chunks(&mut self, machine: &Machine) -> Outcome {
        // Other nodes own most partitions: the ends are what this node last read.
        self.ends();
        let keyed = Keyed {
            index: self.index.as_mut(),
            epoch: self.lease.epoch,
            pool: self.worker.pool(),
            checkpoints: &mut self.checkpoints,
        };
        match collect_chunks(&self.topic, &self.committer, machine.offsets(), keyed).await {
            Ok(o) => Outcome::Drained(o),
            Err(e) => {
                tracing::warn!(table = %self.topic.ident, error = %e, "cannot collect the partitions' chunks; retrying at the next commit");
                Outcome::Failed(e.to_string())
            }
        }
    }

    /// [`Action::Drain`]: collects the worker's outputs up to the partitions' ends.
    async fn drain(&mut self) -> Outcome {
        let until = self.ends();
        match self.worker.drain(&self.topic.name, &until).await {
            Ok(o) => Outcome::Drained(o),
            Err(e) => {
                tracing::warn!(table = %self.topic.ident, error = %e, "conversion failed; retrying at the next commit");
                Outcome::Failed(e.to_string())
            }
        }
    }

    /// [`Action::CheckDeadLetters`]: whether the dead-letter round `commit_id` landed.
    async fn check_dead_letters(&self, commit_id: &str) -> Outcome {
        match self
            .committer
            .load(&dead_letter_table(&self.topic.ident))
            .await
        {
            Ok(t) => Outcome::Landed(
                t.is_some_and(|t| crate::commit::already_committed(t.metadata(), commit_id)),
            ),
            Err(e) => {
                tracing::warn!(table = %self.topic.ident, error = %e, "cannot load the dead-letter table; retrying");
                Outcome::Failed(e.to_string())
            }
        }
    }

    /// [`Action::PreCommit`]: the pending round's `PRE_COMMIT`; None without a round.
    async fn pre_commit(&mut self, machine: &Machine) -> Option<Outcome> {
        inlet_common::failpoint::hit("round-built");
        self.pre_committing = true;
        let (round, spec) = (machine.pending()?, machine.file_spec()?);
        let written = self
            .control
            .pre_commit(round, spec, machine.pending_dead_letters())
            .await;
        Some(match written {
            Ok(()) => {
                inlet_common::failpoint::hit("pre-committed");
                Outcome::Done
            }
            Err(e) => {
                tracing::warn!(table = %self.topic.ident, error = %e, "PRE_COMMIT failed; retrying at the next tick");
                Outcome::Failed(e.to_string())
            }
        })
    }

    /// [`Action::Renew`] and, `for_commit`, [`Action::RenewForCommit`].
    async fn renew(&mut self, machine: &Machine, for_commit: bool) -> Outcome {
        if for_commit && machine.pending().is_some() && !self.pre_committing {
            inlet_common::failpoint::hit("round-built");
        }
        if machine.held_by_dead_letters() && !self.was_held {
            tracing::warn!(table = %self.topic.ident, files = self.topic.dead_letter_pending_files, "the dead-letter table has refused this many files; the table's rounds wait until it takes them (the records stay in the stream)");
        }
        self.was_held = machine.held_by_dead_letters();
        match self.leases.renew(&self.lease).await {
            Ok(renewed) => Outcome::Renewed(renewed),
            Err(e) => {
                tracing::warn!(table = %self.topic.ident, error = %e, "cannot renew the coordinator's lease; a round commits at a later tick");
                Outcome::Failed(e.to_string())
            }
        }
    }

    /// [`Action::CommitDeadLetters`]; None without a dead-letter round.
    async fn commit_dead_letters(&mut self, machine: &Machine) -> Option<Outcome> {
        let round = machine.pending_dead_letters()?;
        let ident = &self.topic.ident;
        Some(
            match self
                .committer
                .commit(&dead_letter_table(ident), round)
                .await
            {
                Ok(s) => {
                    inlet_common::failpoint::hit("dlq-committed");
                    if self.was_held {
                        tracing::info!(table = %ident, "the dead-letter table took its files; the table's rounds go on");
                        self.was_held = false;
                    }
                    Outcome::Committed(s)
                }
                Err(e @ CommitError::NotContinuous { .. }) => {
                    tracing::warn!(table = %ident, error = %e, "another coordinator committed dead letters first; the round is dropped and converted again from the tables as they are");
                    Outcome::CommitFailed(e)
                }
                // Otherwise the main table does not wait for its dead letters.
                Err(e) => {
                    tracing::warn!(table = %ident, error = %e, "dead-letter commit failed; the round commits, and the dead letters are retried at the next tick");
                    Outcome::CommitFailed(e)
                }
            },
        )
    }

    /// [`Action::Commit`] of the pending round; None without one.
    async fn commit(&mut self, machine: &Machine) -> Option<Outcome> {
        let round = machine.pending()?;
        let ident = &self.topic.ident;
        Some(match self.committer.commit(ident, round).await {
            Ok(snapshot) => {
                // The index holds the jobs of this round and nothing since.
                if let Some(index) = self.index.as_mut() {
                    index.landed(snapshot);
                }
                tracing::info!(
                    table = %ident,
                    ?snapshot,
                    files = round.files.len(),
                    delete_files = round.delete_files.len(),
                    offsets = ?round.offsets,
                    "committed"
                );
                Outcome::Committed(snapshot)
            }
            Err(e) => {
                let what = match &e {
                    CommitError::Fenced { .. } => "this coordinator is fenced; it stops",
                    CommitError::BaseChanged { .. } => {
                        "upsert round dropped; converting again on the new base"
                    }
                    CommitError::SchemaConflict(_)
                    | CommitError::NotContinuous { .. }
                    | CommitError::TableReplaced { .. } => {
                        "round dropped; converting again from the table as it is"
                    }
                    _ => "commit failed; retrying at the next tick",
                };
                tracing::warn!(table = %ident, error = %e, "{what}");
                Outcome::CommitFailed(e)
            }
        })
    }

    /// [`Action::Close`]: records `COMMITTED` for `commit_id`.
    async fn close(&mut self, commit_id: &str, snapshot: Option<i64>) -> Outcome {
        if let Err(e) = self.control.committed(commit_id, snapshot).await {
            // A landed round's snapshot summary already says so; a dropped one's PRE_COMMIT
            // would be committed again after a restart, and refused.
            tracing::warn!(table = %self.topic.ident, error = %e, commit_id, "COMMITTED not recorded");
        }
        Outcome::Done
    }

    /// [`Action::LearnTableUuid`]: the uuid of the table the last round created.
    async fn learn_table_uuid(&self) -> Outcome {
        match self.committer.load(&self.topic.ident).await {
            Ok(t) => Outcome::TableUuid(t.map(|t| t.metadata().uuid())),
            Err(e) => {
                tracing::warn!(table = %self.topic.ident, error = %e, "cannot read the new table's uuid; the next round is not pinned to it");
                Outcome::Failed(e.to_string())
            }
        }
    }

    /// [`Action::StartCompaction`]: a compaction run in the background.
    fn start_compaction(&mut self) -> Outcome {
        self.compaction = Some(tokio::spawn(compact_in_background(
            self.committer.clone(),
            self.topic.ident.clone(),
            self.topic.ctx.settings.clone(),
            self.worker.clone(),
            self.clock.clone(),
            self.topic.compaction,
            self.stop.clone(),
        )));
        Outcome::Done
    }

    /// [`Action::Expire`]: the table's and its dead-letter table's old snapshots.
    async fn expire(&self) -> Outcome {
        if let Some(expiry) = self.topic.expire {
            let now_ms = self.clock.now_ms() as i64;
            expire(&self.committer, &self.topic.ident, expiry, now_ms).await;
        }
        Outcome::Done
    }

    /// Publishes what the machine reports in the table's status (`/v1/tables`, metrics).
    fn report(&self, machine: &Machine) {
        let r = machine.report().clone();
        self.statuses.update(&self.status_key, |s| {
            s.committed = r.committed;
            s.watermark_ms = r.watermark_ms.or(s.watermark_ms);
            s.partition_watermarks = r.partition_watermarks;
            s.last_commit_ms = r.last_commit_ms.or(s.last_commit_ms);
            s.commits = r.commits;
            s.failed_commits = r.failed_commits;
            s.pending_dead_letter_files = r.pending_dead_letter_files;
            s.held_by_dead_letters = r.held_by_dead_letters;
        });
    }

    /// Tells the partitions' streams what the table now holds ([`raise_floors`]).
    async fn raise_floors(&mut self, machine: &Machine) {
        let committed = &machine.report().committed;
        raise_floors(&self.topic, &self.store, committed, &mut self.floors).await;
    }

    /// After a tick's chain: the status, the streams' floors, the partitions' lag, and the
    /// orphan-file sweep when it is due.
    async fn between_ticks(&mut self, machine: &Machine) {
        self.report(machine);
        self.raise_floors(machine).await;
        let lag_bytes = self
            .topic
            .partitions
            .iter()
            .filter_map(|(p, s)| Some((*p, self.store.table_lag_bytes(*s)?.lag_bytes)))
            .collect();
        self.statuses
            .update(&self.status_key, |s| s.lag_bytes = lag_bytes);
        let (Some(sweep), Some(due)) = (self.topic.orphans, self.next_sweep_ms) else {
            return;
        };
        let now_ms = self.clock.now_ms() as i64;
        // Not while this coordinator compacts: its outputs are on their way in, and the sweep
        // takes compactions' files too.
        let compacting = self.compaction.as_ref().is_some_and(|c| !c.is_finished());
        if now_ms >= due && !compacting {
            let t = &self.topic;
            sweep_orphans(t, &self.committer, &self.worker, machine, sweep, now_ms).await;
            self.next_sweep_ms = Some(now_ms + sweep.every.as_millis() as i64);
        }
    }

    /// Stops: waits for the compaction (aborted when `fenced`), gives the lease back unless
    /// fenced, and unregisters the table.
    async fn finish(mut self, fenced: bool) {
        // It stops between partitions once `stop` is cancelled; its files come from the pool.
        if let Some(c) = self.compaction.take() {
            if fenced {
                c.abort();
            }
            let _ = c.await;
        }
        if !fenced {
            // The next coordinator (here or on another node) may take the table at once.
            if let Err(e) = self.leases.release(&self.lease).await {
                tracing::warn!(table = %self.topic.ident, error = %e, "cannot release the coordinator's lease; it expires");
            }
        }
        if self.topic.chunks.is_none() {
            // A distributed table's registration is its converter's, not this coordinator's.
            self.worker.remove_table(&self.topic.name);
        }
        self.statuses.remove(&self.status_key);
        tracing::info!(table = %self.topic.ident, "table coordinator stopped");
    }
}

/// A distributed keyed table's share of [`collect_chunks`]: the coordinator's primary-key
/// index (None when it must be built again first) and its epoch, which names the round's delete
/// files (so a fenced coordinator never writes over a newer one's).
struct Keyed<'a> {
    index: Option<&'a mut inlet_table_worker::TableIndex>,
    epoch: i64,
    /// The node's conversion memory: a job's keys, read back from its files, are held in it.
    pool: &'a inlet_table_worker::MemoryPool,
    /// When the index is next written as a checkpoint ([`crate::key_checkpoint`]).
    checkpoints: &'a mut crate::key_checkpoint::Checkpoints,
}

/// A distributed table's drain ([`TableTopic::chunks`]): drops the chunks the table's
/// progress is past (and their deleted-keys objects), takes those that continue `offsets`
/// ([`crate::chunks::chain`]) and refuses those whose schema cannot join the table's, as the
/// outputs of one round. Every output carries the schema all the taken files fit (the round's
/// schema is its last output's). A keyed table's taken chunks are applied to its primary-key
/// index here, chunk after chunk and job after job ([`apply_keyed`]); a failure may leave the
/// index part way, and the caller builds it again.
async fn collect_chunks(
    topic: &TableTopic,
    committer: &Committer,
    offsets: &BTreeMap<i32, u64>,
    keyed: Keyed<'_>,
) -> Result<Vec<(i32, inlet_table_worker::JobOutput)>, String> {
    let Some(chunks) = &topic.chunks else {
        return Ok(Vec::new());
    };
    let table = committer
        .load(&topic.ident)
        .await
        .map_err(|e| e.to_string())?;
    // Before this round's jobs: the index may hold exactly the table's current snapshot.
    if let (Some(t), Some(index)) = (&table, keyed.index.as_deref()) {
        keyed
            .checkpoints
            .maybe_write(
                topic,
                t,
                index,
                keyed.epoch,
                committer.files.as_ref(),
                keyed.pool,
            )
            .await;
    }
    let mut listed = chunks
        .list(&topic.topic_id)
        .await
        .map_err(|e| e.to_string())?;
    // The chunks the table is past: their deleted keys are applied for good (nothing names
    // the objects once the rows go).
    let (past, live): (Vec<_>, Vec<_>) = listed
        .into_iter()
        .partition(|c| offsets.get(&c.partition).is_some_and(|o| c.end <= *o));
    listed = live;
    for file in past.iter().filter_map(|c| c.deleted_keys_file.as_deref()) {
        if let Err(e) = topic.ctx.target.file_io.delete(file).await {
            tracing::warn!(table = %topic.ident, file, error = %e, "cannot delete a committed chunk's deleted keys; the orphan sweep will");
        }
    }
    chunks
        .remove_committed(&topic.topic_id, offsets)
        .await
        .map_err(|e| e.to_string())?;
    let current = table.as_ref().map(|t| {
        (
            t.metadata().current_schema().as_ref().clone(),
            t.metadata().last_column_id(),
        )
    });
    // A refused chunk's files are named by its row alone (its converter converts the range
    // again under a new registration tag, so new names): once the row is gone they go too.
    let files_of: HashMap<(i32, u64, i64), Vec<String>> = listed
        .iter()
        .map(|c| {
            (
                (c.partition, c.start, c.node),
                c.objects().map(str::to_string).collect(),
            )
        })
        .collect();
    let chained = crate::chunks::chain(listed, offsets, current.as_ref().map(|(s, l)| (s, *l)));
    for (partition, start, node) in &chained.refused {
        chunks
            .remove(&topic.topic_id, *partition, *start, *node)
            .await
            .map_err(|e| e.to_string())?;
        // Through the file IO the files were written with: the table may not exist yet (two
        // chunks of its first round that cannot agree).
        let files = files_of.get(&(*partition, *start, *node));
        let mut deleted = 0;
        for file in files.into_iter().flatten() {
            match topic.ctx.target.file_io.delete(file).await {
                Ok(()) => deleted += 1,
                Err(e) => {
                    tracing::warn!(table = %topic.ident, file, error = %e, "cannot delete a refused chunk's file; the orphan sweep will")
                }
            }
        }
        tracing::info!(table = %topic.ident, partition, start, node, files = deleted, "deleted a refused chunk's files");
    }
    let Some(schema) = chained.schema else {
        return Ok(Vec::new());
    };
    let mut delete_files = vec![Vec::new(); chained.taken.len()];
    if let Some(upsert) = &topic.ctx.upsert {
        let Some(index) = keyed.index else {
            return Err("the primary-key index must be built again first".into());
        };
        delete_files = apply_keyed(
            topic,
            upsert,
            table.as_ref(),
            index,
            (keyed.epoch, keyed.pool),
            &chained.taken,
        )
        .await?;
    }
    Ok(chained
        .taken
        .into_iter()
        .zip(delete_files)
        .map(|(c, delete_files)| {
            (
                c.partition,
                inlet_table_worker::JobOutput {
                    data_files: c.files,
                    next_offset: c.end,
                    schema: schema.clone(),
                    changes: Vec::new(),
                    dead_letters: Vec::new(),
                    dead_letter_files: c.dead_letter_files,
                    delete_files,
                    deleted_keys: Vec::new(),
                    rows: c.rows,
                    max_timestamp_ms: c.max_timestamp_ms,
                    input_bytes: 0,
                    decoded_bytes: 0,
                },
            )
        })
        .collect())
}

/// Jobs whose keys are read back ahead of the one being applied.
const KEYS_READ_AHEAD: usize = 4;

/// One deferred job of a keyed table's chunk, to apply.
struct KeyedJob {
    /// Its chunk's place in the round.
    chunk: usize,
    prefix: String,
    target: inlet_table_worker::data_file::FileTarget,
    schema: iceberg::spec::Schema,
    files: Vec<iceberg::spec::DataFile>,
    deleted: Vec<Vec<u8>>,
}

/// Applies a keyed table's taken `chunks` to the table's primary-key `index`, chunk after
/// chunk and job after job: each job's rows replace their keys' earlier rows and its deleted
/// keys remove theirs. Returns each chunk's position delete files, written into the table's
/// data folder under names that carry the table's tag and this coordinator's epoch. The keys
/// of the next [`KEYS_READ_AHEAD`] jobs are read back while a job applies; they are held in
/// the node's conversion pool.
async fn apply_keyed(
    topic: &TableTopic,
    upsert: &inlet_table_worker::UpsertSpec,
    table: Option<&iceberg::table::Table>,
    index: &mut inlet_table_worker::TableIndex,
    (epoch, pool): (i64, &inlet_table_worker::MemoryPool),
    chunks: &[crate::chunks::Chunk],
) -> Result<Vec<Vec<iceberg::spec::DataFile>>, String> {
    use futures::StreamExt as _;
    let ctx = table_context(topic, table, &BTreeMap::new(), None);
    let tag = ctx.file_tag.clone().unwrap_or_default();
    let mut jobs = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        let prefix = format!(
            "p{}-{}-{}-{tag}c{epoch}n{}",
            c.partition, c.start, c.end, c.node
        );
        jobs.extend(keyed_jobs(&ctx, c, i, &prefix).await.map_err(|e| {
            format!(
                "applying the keys of partition {}'s chunk [{}, {}) from node {}: {e}",
                c.partition, c.start, c.end, c.node
            )
        })?);
    }
    // Each key is held twice (read back, then in the index's map until it spills), counted
    // as the single-node job counts it, with keys of up to 32 bytes; for the jobs read ahead
    // and the one applying.
    let largest = jobs
        .iter()
        .map(|j| {
            let rows: u64 = j.files.iter().map(|f| f.record_count()).sum();
            (rows as usize + j.deleted.len()) * 2 * (32 + 64)
        })
        .max()
        .unwrap_or(0);
    let held = (largest * (KEYS_READ_AHEAD + 1)).min(pool.budget());
    let _memory = pool.reserve(held).await.map_err(|e| e.to_string())?;
    let mut out = vec![Vec::new(); chunks.len()];
    let mut reads = futures::stream::iter(jobs.into_iter().map(|job| async move {
        let keys =
            inlet_table_worker::TableIndex::read_job(upsert, &job.target, &job.schema, &job.files)
                .await;
        (job, keys)
    }))
    .buffered(KEYS_READ_AHEAD);
    while let Some((job, keys)) = reads.next().await {
        let c = &chunks[job.chunk];
        let what = |e: inlet_table_worker::Error| {
            format!(
                "applying the keys of partition {}'s chunk [{}, {}) from node {}: {e}",
                c.partition, c.start, c.end, c.node
            )
        };
        let keys = keys.map_err(what)?;
        out[job.chunk].extend(
            index
                .apply_read(&job.target, &job.prefix, keys, job.deleted, &ctx.settings)
                .await
                .map_err(what)?,
        );
    }
    Ok(out)
}

/// The jobs of chunk `c`, the `chunk`th of the round, with the target its files were written
/// to, each job's deleted keys (read from the chunk's deleted-keys object) and the name of its
/// delete files (`prefix` and `j<job>`).
async fn keyed_jobs(
    ctx: &TableContext,
    c: &crate::chunks::Chunk,
    chunk: usize,
    prefix: &str,
) -> Result<Vec<KeyedJob>, String> {
    let mut target = ctx.target.clone();
    target.schema = Arc::new(c.schema.clone());
    if target.spec.is_unpartitioned() && !ctx.partition_by.is_empty() {
        // A table not created yet: the chunk's files were written with `partition.by` bound
        // to their schema, and so are the deletes against them.
        target.spec = Arc::new(
            inlet_table_worker::partition::spec(&c.schema, &ctx.partition_by)
                .map_err(|e| e.to_string())?,
        );
    }
    if target.spec.spec_id() != c.spec_id {
        return Err(format!(
            "the files were written with partition spec {}, the table's is {}",
            c.spec_id,
            target.spec.spec_id()
        ));
    }
    // An append-only chunk (none of its jobs recorded): one job, no deletes.
    let shapes = if c.jobs.is_empty() {
        vec![crate::chunks::ChunkJob {
            files: c.files.len(),
            deleted_keys: 0,
        }]
    } else {
        c.jobs.clone()
    };
    if shapes.iter().map(|j| j.files).sum::<usize>() != c.files.len() {
        return Err("its jobs do not add up to its files".into());
    }
    let wanted: usize = shapes.iter().map(|j| j.deleted_keys).sum();
    let mut deleted = match &c.deleted_keys_file {
        Some(path) => {
            let bytes = target
                .file_io
                .new_input(path)
                .map_err(|e| e.to_string())?
                .read()
                .await
                .map_err(|e| format!("reading its deleted keys {path}: {e}"))?;
            inlet_table_worker::decode_keys_file(&bytes, wanted).map_err(|e| e.to_string())?
        }
        None if wanted == 0 => Vec::new(),
        None => return Err("its deleted keys are missing".into()),
    }
    .into_iter();
    let mut files = c.files.iter().cloned();
    Ok(shapes
        .iter()
        .enumerate()
        .map(|(n, shape)| KeyedJob {
            chunk,
            prefix: format!("{prefix}j{n}"),
            target: target.clone(),
            schema: c.schema.clone(),
            files: files.by_ref().take(shape.files).collect(),
            deleted: deleted.by_ref().take(shape.deleted_keys).collect(),
        })
        .collect())
}

/// Expires the snapshots of `ident` and of its dead-letter table (which commits with it) by
/// `expiry`, at `now_ms`.
async fn expire(committer: &Committer, ident: &TableIdent, expiry: Expiry, now_ms: i64) {
    let cutoff = now_ms - expiry.older_than.as_millis() as i64;
    for ident in [ident.clone(), dead_letter_table(ident)] {
        match committer
            .expire_beyond(&ident, cutoff, expiry.retain_last, expiry.max_snapshots)
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::info!(table = %ident, snapshots = n, "expired snapshots"),
            Err(e) => tracing::warn!(table = %ident, error = %e, "snapshot expiry failed"),
        }
    }
}

/// Deletes the orphan files of `topic`'s table and of its dead-letter table
/// ([`crate::orphans`]): between two rounds, so what is on its way in is the worker's
/// uncollected outputs, the machine's pending rounds and the chunk rows, all kept.
async fn sweep_orphans(
    topic: &TableTopic,
    committer: &Committer,
    worker: &Worker,
    machine: &Machine,
    sweep: crate::orphans::OrphanSweep,
    now_ms: i64,
) {
    let Some(storage) = &committer.files else {
        return;
    };
    let table = match committer.load(&topic.ident).await {
        Ok(Some(t)) => t,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(table = %topic.ident, error = %e, "orphan-file sweep: cannot load the table");
            return;
        }
    };
    // The dead-letter table's files carry the main table's tag.
    let tag = crate::orphans::file_tag(&table);
    // Another node's converter may hold uploaded files for a commit interval before it
    // publishes them: whatever the setting, a file is an orphan only once it is ten
    // intervals old.
    let older_than = sweep.older_than.max(topic.commit_interval * 10);
    let cutoff_ms = now_ms - older_than.as_millis() as i64;
    let dead_letters = dead_letter_table(&topic.ident);
    let dead_letter_location = match committer.load(&dead_letters).await {
        Ok(t) => t.map(|t| crate::orphans::data_location(&t)),
        Err(e) => {
            tracing::warn!(table = %dead_letters, error = %e, "orphan-file sweep: cannot load the table");
            None
        }
    };
    let tables = [
        (
            topic.ident.clone(),
            Some(crate::orphans::data_location(&table)),
        ),
        (dead_letters, dead_letter_location),
    ];
    for (ident, location) in tables {
        let Some(location) = location else { continue };
        let result = async {
            let candidates = crate::orphans::candidates(storage, &location, cutoff_ms)
                .await
                .map_err(|e| e.to_string())?;
            tracing::debug!(table = %ident, location, tag, candidates = candidates.len(), "orphan-file sweep");
            if candidates.is_empty() {
                return Ok(Vec::new());
            }
            // Read after the listing: see the module's invariants.
            let mut keep: HashSet<String> = worker
                .uncollected_files(&topic.name)
                .await
                .into_iter()
                .collect();
            for round in [machine.pending(), machine.pending_dead_letters()]
                .into_iter()
                .flatten()
            {
                keep.extend(
                    round
                        .files
                        .iter()
                        .chain(&round.delete_files)
                        .map(|f| f.file_path().to_string()),
                );
            }
            if let Some(chunks) = &topic.chunks {
                let listed = chunks
                    .list(&topic.topic_id)
                    .await
                    .map_err(|e| e.to_string())?;
                for c in listed {
                    keep.extend(c.objects().map(str::to_string));
                }
            }
            crate::orphans::remove(committer, storage, &ident, &tag, candidates, &keep)
                .await
                .map_err(|e| e.to_string())
        }
        .await;
        match result {
            Ok(removed) if removed.is_empty() => {}
            Ok(removed) => {
                tracing::info!(table = %ident, files = removed.len(), first = %removed[0], "deleted orphan files")
            }
            Err(e) => {
                tracing::warn!(table = %ident, error = %e, "orphan-file sweep failed; nothing more is deleted until the next one")
            }
        }
    }
}

/// Compacts `ident`'s small files, partition after partition, up to
/// `tuning.partitions_per_run` of them, until nothing is left to merge or `stop`.
/// Its commits race the coordinator's rounds, and rebase onto them (see [`crate::compact`]).
async fn compact_in_background(
    committer: Committer,
    ident: TableIdent,
    settings: inlet_table_worker::data_file::FileSettings,
    worker: Arc<Worker>,
    clock: Arc<dyn Clock>,
    tuning: crate::compact::CompactionTuning,
    stop: CancellationToken,
) {
    for _ in 0..tuning.partitions_per_run {
        if stop.is_cancelled() {
            return;
        }
        match committer
            .compact(
                &ident,
                &settings,
                worker.pool(),
                tuning.min_files,
                clock.now_ms() as i64,
            )
            .await
        {
            Ok(c) if c.removed > 0 => {
                tracing::info!(table = %ident, removed = c.removed, added = c.added, copied = c.copied, "compacted small files")
            }
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(table = %ident, error = %e, "compaction failed");
                return;
            }
        }
    }
}

/// Takes the table's lease ([`crate::lease`]), waiting while another node's coordinator holds
/// it; None when stopped first. The new epoch is above any the table's snapshots record.
async fn take_lease(
    topic: &TableTopic,
    committer: &Committer,
    leases: &Leases,
    stop: &CancellationToken,
) -> Option<Lease> {
    let key = topic.ident.to_string();
    let mut told = false;
    loop {
        let floor = match committer.load(&topic.ident).await {
            Ok(t) => Some(t.and_then(|t| Committer::committed(&t).epoch).unwrap_or(0)),
            Err(e) => {
                tracing::warn!(table = %topic.ident, error = %e, "cannot load the table; retrying");
                None
            }
        };
        if let Some(floor) = floor {
            match leases.acquire(&key, floor).await {
                Ok(Ok(lease)) => return Some(lease),
                Ok(Err(held)) if !told => {
                    tracing::info!(table = %topic.ident, holder = %held.holder, epoch = held.epoch, expires_ms = held.expires_ms, "another coordinator holds the table; waiting for its lease");
                    told = true;
                }
                Ok(Err(_)) => {}
                Err(e) => {
                    tracing::warn!(table = %topic.ident, error = %e, "cannot take the coordinator's lease; retrying")
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return None,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// The dead-letter table of `table`: `<table>_dlq` in the same namespace.
pub fn dead_letter_table(table: &TableIdent) -> TableIdent {
    TableIdent::new(
        table.namespace().clone(),
        format!(
            "{}{}",
            table.name(),
            inlet_table_worker::dead_letter::SUFFIX
        ),
    )
}

/// What registering a table with the worker found.
struct Registered {
    committed: Committed,
    /// Next offset per partition to convert.
    offsets: BTreeMap<i32, u64>,
    /// The snapshot the worker's view (and an upsert table's index) starts from.
    base: Option<i64>,
    /// The table's uuid; None when it does not exist yet (the first round creates it). Rounds
    /// are pinned to it ([`Round::table_uuid`]).
    table_uuid: Option<uuid::Uuid>,
    /// `partition.by` terms for a table that does not exist yet (empty otherwise).
    partition_by: Vec<inlet_table_worker::partition::Term>,
    /// The dead-letter table's committed offsets (see the module docs).
    dead_letter_floor: BTreeMap<i32, u64>,
    /// The table's default partition spec (unpartitioned for a table not created yet).
    spec: Arc<iceberg::spec::PartitionSpec>,
    /// The table's `last-column-id` (0 for a table not created yet): the worker's new
    /// columns get ids above it.
    last_column_id: i32,
    control: ControlStream,
    /// A round whose `PRE_COMMIT` is in the control stream but which never landed: the
    /// worker starts after it, and the coordinator commits it first.
    recovered: Option<PendingRound>,
    /// A distributed keyed table's primary-key index, built from the table's live files (the
    /// partitions' owners convert with deferred keys; see [`collect_chunks`]).
    index: Option<inlet_table_worker::TableIndex>,
}

impl Registered {
    /// What the machine takes from it.
    fn machine(&self) -> crate::machine::Registration {
        crate::machine::Registration {
            offsets: self.offsets.clone(),
            base: self.base,
            table_uuid: self.table_uuid,
            partition_by: self.partition_by.clone(),
            spec: self.spec.clone(),
            last_column_id: self.last_column_id,
            watermark_ms: self.committed.watermark_ms,
            partition_watermarks: self.committed.partition_watermarks.clone(),
            dead_letter_floor: self.dead_letter_floor.clone(),
            recovered: self.recovered.clone().map(|p| (p.main, p.dead_letters)),
        }
    }
}

/// [`register`], retried every second until the catalog answers; None when stopped first.
async fn register_until_ready(
    topic: &TableTopic,
    worker: &Worker,
    committer: &Committer,
    store: &Arc<StreamStore>,
    stop: &CancellationToken,
) -> Option<Registered> {
    loop {
        match register(topic, worker, committer, store).await {
            Ok(r) => return Some(r),
            Err(e) => {
                tracing::warn!(table = %topic.ident, error = %e, "cannot load the table; retrying");
                tokio::select! {
                    _ = stop.cancelled() => return None,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
}

/// Loads the table and (re)registers it with the worker from its current snapshot: the
/// committed offsets, the table's schema and spec, and for an upsert table its live files,
/// from which the worker rebuilds the primary-key index. Uncollected outputs are dropped.
async fn register(
    topic: &TableTopic,
    worker: &Worker,
    committer: &Committer,
    store: &Arc<StreamStore>,
) -> Result<Registered, CommitError> {
    let table = committer.load(&topic.ident).await?;
    let mut committed = table.as_ref().map(Committer::committed).unwrap_or_default();
    if committed.from_property {
        tracing::info!(table = %topic.ident, offsets = ?committed.offsets, "no snapshot left on main carries Inlet's progress (another engine expired them); resuming from its progress in the table's properties");
    }
    if committed.keep_only_topic(&topic.topic_id) {
        // The rows stay: the table now also holds the new topic's, from its first offset.
        tracing::warn!(table = %topic.ident, topic_id = %topic.topic_id, old_topic_id = ?committed.topic_id, "the table's progress is a deleted topic's of the same name; conversion starts at the new topic's first offsets");
    }
    let control = ControlStream::open(store.clone(), &topic.name, &topic.partitions).await?;
    let dead_letters = committer.load(&dead_letter_table(&topic.ident)).await?;
    let recovered = recover(
        topic,
        &control,
        table.as_ref(),
        dead_letters.as_ref(),
        &committed,
    )
    .await?;
    if let Some(p) = &recovered {
        // Conversion goes on after the recovered round, with its watermarks.
        committed.offsets.extend(p.main.offsets.clone());
        committed.watermark_ms = p.main.watermark_ms.or(committed.watermark_ms);
        committed.partition_watermarks = p.main.partition_watermarks.clone();
    }
    // How far the dead letters are committed: a crash between a round's dead-letter commit
    // and its main commit leaves the dead-letter table ahead.
    let dead_letter_floor = dead_letters
        .map(|t| {
            let mut c = Committer::committed(&t);
            c.keep_only_topic(&topic.topic_id);
            c.offsets
        })
        .unwrap_or_default();
    let base = table
        .as_ref()
        .and_then(|t| t.metadata().current_snapshot().map(|s| s.snapshot_id()));
    let spec = table.as_ref().map_or_else(
        || Arc::new(iceberg::spec::PartitionSpec::unpartition_spec()),
        |t| t.metadata().default_partition_spec().clone(),
    );
    let table_uuid = table.as_ref().map(|t| t.metadata().uuid());
    let ctx = table_context(topic, table.as_ref(), &dead_letter_floor, None);
    let partition_by = ctx.partition_by.clone();
    let sources: Vec<PartitionSource> = topic
        .partitions
        .iter()
        .map(|(p, stream)| PartitionSource {
            partition: *p,
            stream: *stream,
            start: committed
                .offsets
                .get(p)
                .copied()
                .unwrap_or_else(|| store.start_offset(*stream).unwrap_or(0)),
        })
        .collect();
    let mut index = None;
    let offsets = if topic.chunks.is_some() {
        // The partitions' owners convert them; only the table's progress counts here (a
        // partition without progress starts at its first chunk, see `chunks::chain`).
        if let Some(upsert) = &topic.ctx.upsert {
            // The pause before this coordinator's first round: short from a checkpoint, else
            // it grows with the table.
            index = Some(
                crate::key_checkpoint::build(topic, upsert, table.as_ref(), worker.pool()).await?,
            );
        }
        committed.offsets.clone()
    } else {
        let offsets = sources.iter().map(|s| (s.partition, s.start)).collect();
        let live = match (&table, &topic.ctx.upsert) {
            (Some(t), Some(_)) => crate::reading::live_files(t).await?,
            _ => Default::default(),
        };
        worker.add_table_with_base(&topic.name, ctx, &sources, live);
        offsets
    };
    Ok(Registered {
        committed,
        offsets,
        base,
        table_uuid,
        partition_by,
        dead_letter_floor,
        spec,
        last_column_id: table.as_ref().map_or(0, |t| t.metadata().last_column_id()),
        control,
        recovered,
        index,
    })
}

/// How `topic`'s records convert into `table` as it is now (None: not created yet): the
/// table's schema, `last-column-id`, spec and location, and `dead_letter_floor`. Files are
/// tagged with the table's identity (a random tag before it exists), plus `node_tag` when
/// set (a converter's: see [`crate::chunks`]).
pub(crate) fn table_context(
    topic: &TableTopic,
    table: Option<&iceberg::table::Table>,
    dead_letter_floor: &BTreeMap<i32, u64>,
    node_tag: Option<&str>,
) -> TableContext {
    let mut ctx = topic.ctx.clone();
    if let Some(t) = table {
        ctx.schema = Some(t.metadata().current_schema().as_ref().clone());
        ctx.last_column_id = t.metadata().last_column_id();
        // An existing table's spec rules; `partition.by` only shapes a new table.
        ctx.target.spec = t.metadata().default_partition_spec().clone();
        ctx.partition_by.clear();
    } else {
        ctx.schema = None;
    }
    // Files go to the table's own location, and their names carry its identity: a table made
    // again under this name (this one renamed or dropped) must not write over this one's files.
    match table {
        Some(t) => {
            ctx.target.data_location =
                format!("{}/data", t.metadata().location().trim_end_matches('/'));
            ctx.file_tag = Some(crate::orphans::uuid_tag(&t.metadata().uuid()));
        }
        #[allow(clippy::disallowed_methods)] // before the table exists: unique is all it must be
        None => ctx.file_tag = Some(crate::orphans::uuid_tag(&uuid::Uuid::new_v4())),
    }
    ctx.dead_letter_floor = dead_letter_floor.clone();
    if ctx.dead_letter_target.is_none() {
        let mut target = ctx.target.clone();
        target.data_location = target
            .data_location
            .trim_end_matches("/data")
            .trim_end_matches('/')
            .to_string()
            + inlet_table_worker::dead_letter::SUFFIX
            + "/data";
        ctx.dead_letter_target = Some(target);
    }
    if let (Some(tag), Some(own)) = (node_tag, ctx.file_tag.as_mut()) {
        own.push_str(tag);
    }
    ctx
}

/// The round of the control stream's last `PRE_COMMIT` if it must be committed again: it did
/// not land, the table is append-only, and the table is not past it. A round that landed gets
/// its `COMMITTED` now.
async fn recover(
    topic: &TableTopic,
    control: &ControlStream,
    table: Option<&iceberg::table::Table>,
    dead_letters: Option<&iceberg::table::Table>,
    committed: &Committed,
) -> Result<Option<PendingRound>, CommitError> {
    let Some(p) = control.pending().await? else {
        return Ok(None);
    };
    let id = p.main.commit_id.clone();
    if table.is_some_and(|t| crate::commit::already_committed(t.metadata(), &id)) {
        // The round landed; its dead letters may not have (the main table does not wait for
        // them). Committed again, the round is recognised and only they land.
        let dead_letters_landed = p.dead_letters.as_ref().is_none_or(|d| {
            dead_letters
                .is_some_and(|t| crate::commit::already_committed(t.metadata(), &d.commit_id))
        });
        if !dead_letters_landed {
            tracing::info!(table = %topic.ident, commit_id = %id, "the round landed but its dead letters did not; committing them");
            return Ok(Some(p));
        }
        control.committed(&id, None).await?;
        return Ok(None);
    }
    if topic.ctx.upsert.is_some() {
        tracing::info!(table = %topic.ident, commit_id = %id, "an upsert round did not land; it is converted again");
        return Ok(None);
    }
    let behind = p
        .main
        .offsets
        .iter()
        .any(|(part, o)| committed.offsets.get(part).is_some_and(|c| c > o));
    if behind {
        tracing::warn!(table = %topic.ident, commit_id = %id, "the table is past the control stream's last round; it is not committed again");
        return Ok(None);
    }
    Ok(Some(p))
}
