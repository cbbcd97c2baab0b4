//! Small-file compaction of table topics' tables. A table that commits every second gets a
//! tail file per partition per round, and readers pay per file. In the background of its
//! coordinator (never in the way of a commit round), every [`COMPACT_EVERY`] commits and at
//! most once per [`COMPACT_MIN_INTERVAL`], the small files of a partition are rewritten into
//! files of the target size, in `replace` snapshots.
//!
//! Which files ([`Committer::compact`]): per partition of the current spec, the live files
//! under [`SMALL_NUMERATOR`]/[`SMALL_DENOMINATOR`] of the target, smallest first, as many as
//! fit in one target file. A partition is compacted when that takes [`MIN_FILES`] files, or
//! at least two that make half a target file and of which all but the largest make an
//! eighth: commit tails of a few KiB and files of 2–24 MiB (at the default 32 MiB target) are
//! both merged, and a growing file is rewritten only for a sizeable addition.
//!
//! How: files none of whose rows are deleted, written in the table's current schema, in row
//! groups of at least [`COPY_ROW_GROUP_DIVISOR`]th of the target, are merged by copying their
//! Parquet column chunks (`crate::concat`: no value is decoded, which
//! makes a compaction cost I/O rather than CPU); otherwise the rows are read in the current
//! schema and written again.
//!
//! Deletes (upsert and CDC tables, or another engine's merge-on-read deletes): the position
//! deletes of the partition that point into the chosen files are applied, so the new file
//! holds only the live rows; a delete file all of whose rows point into them is removed with
//! them. Position deletes that other commits add while the compaction runs (an upsert round
//! landing meanwhile) are carried over when it rebases: those into the chosen files are
//! written again as deletes of the new file, at the row's new position. An upsert table's
//! primary-key index names files and positions too: the compaction moves `main`, so the next
//! upsert round, pinned to its base, is refused and the coordinator rebuilds the index from
//! the table (`crate::coordinator`, "re-registers").
//!
//! Invariants:
//! - Rows are copied, never changed: the same live rows, `_kafka` included, read in the
//!   table's current schema (columns added since a file was written read as null), in the
//!   files' order.
//! - Tables with equality deletes are not compacted (Inlet never writes them; another engine's
//!   would need their sequence numbers kept).
//! - A replace snapshot is valid on any base where every file it removes is still live: a
//!   commit that loses a race to a round (or another engine) is rebuilt on the new base,
//!   with the new deletes carried over, and retried; one whose files another commit removed
//!   is dropped.
//! - The replace snapshot carries its parent's `inlet.*` summary (offsets, watermarks), the
//!   parent it is finally committed on, so conversion resumes exactly where it did.
//! - Its memory is borrowed from the node's conversion pool, like a conversion job's.
//! - A dropped attempt deletes only its own files (their names are unique per attempt). A
//!   crash, or an error whose outcome is unknown, leaves them as orphans; the table is
//!   unchanged or compacted, never both.

use std::collections::{HashMap, HashSet};

use futures::{StreamExt, TryStreamExt};
use iceberg::arrow::ArrowReaderBuilder;
use iceberg::scan::FileScanTask;
use iceberg::spec::{
    DataContentType, DataFile, ManifestContentType, ManifestFile, ManifestListWriter,
    ManifestWriterBuilder, Operation, Snapshot, Summary,
};
use iceberg::{Runtime, TableIdent};
use inlet_table_worker::data_file::{FileSettings, FileTarget};
use inlet_table_worker::MemoryPool;

use crate::commit::{lost_race, CommitError, Committer, COMMIT_ID, COMMIT_RETRY};

/// Commits of a table between two compaction checks, unless `[tables]
/// compaction_every_commits` says otherwise ([`CompactionTuning`]).
pub const COMPACT_EVERY: u64 = 10;

/// How often and how much small-file compaction works, node-wide (`[tables] compaction_*`
/// in the node's config): defaults [`COMPACT_EVERY`], [`MIN_FILES`] and
/// [`PARTITIONS_PER_RUN`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionTuning {
    /// Commits of a table between two compaction checks (at least 1).
    pub every_commits: u64,
    /// Small files that make a partition worth compacting on their count alone (at least 2).
    pub min_files: usize,
    /// Partitions (or target files' worth of one) compacted in one run (at least 1).
    pub partitions_per_run: usize,
}

impl Default for CompactionTuning {
    fn default() -> Self {
        CompactionTuning {
            every_commits: COMPACT_EVERY,
            min_files: MIN_FILES,
            partitions_per_run: PARTITIONS_PER_RUN,
        }
    }
}

/// And at least this long between two checks of a table, unless the topic says otherwise
/// (`table.topic.compaction.interval.ms`): at a 1 s commit interval, ten commits of a quiet
/// table hold too little data to be worth a rewrite, and a file still small after one
/// compaction would be rewritten every ten seconds until it grows past the small size.
pub const COMPACT_MIN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// [`COMPACT_MIN_INTERVAL`] of upsert and CDC tables: each compaction moves the rows that
/// their primary-key index names, and the index is then rebuilt from the table.
pub const UPSERT_COMPACT_MIN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(600);

/// The least time between two compactions of a table by default: [`COMPACT_MIN_INTERVAL`],
/// or [`UPSERT_COMPACT_MIN_INTERVAL`] for an upsert or CDC table.
pub fn default_interval(upsert: bool) -> std::time::Duration {
    if upsert {
        UPSERT_COMPACT_MIN_INTERVAL
    } else {
        COMPACT_MIN_INTERVAL
    }
}

/// A partition's files are compacted once it has this many small ones (or fewer that make
/// half a target file), unless `[tables] compaction_min_files` says otherwise.
pub const MIN_FILES: usize = 16;

/// A file under `SMALL_NUMERATOR / SMALL_DENOMINATOR` of the target file size is small.
pub const SMALL_NUMERATOR: u64 = 3;
/// See [`SMALL_NUMERATOR`].
pub const SMALL_DENOMINATOR: u64 = 4;

/// Files are merged by copying their column chunks only when each of their row groups holds
/// at least a `COPY_ROW_GROUP_DIVISOR`th of the target file (1 MiB at the default 32 MiB):
/// smaller ones are decoded and written again (see `crate::concat`).
pub const COPY_ROW_GROUP_DIVISOR: u64 = 32;

/// Partitions (or target files' worth of one partition) compacted in one background run: a
/// backlog of small files catches up over a few runs, and a run ends in bounded time. Unless
/// `[tables] compaction_partitions_per_run` says otherwise.
pub const PARTITIONS_PER_RUN: usize = 8;

/// What a compaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compacted {
    /// Files replaced.
    pub removed: usize,
    /// Files written.
    pub added: usize,
    /// Whether the rows were moved by copying Parquet column chunks (`crate::concat`), not
    /// decoded and written again.
    pub copied: bool,
}

/// A live data file.
struct Live {
    file: DataFile,
}

/// A live position delete file, with the spec its manifest has.
struct LiveDeletes {
    file: DataFile,
    spec_id: i32,
}

/// Where the chosen files' live rows went: every row of `path` that `deleted` does not name is
/// in the new file, from `base` on, in order.
#[derive(Debug, Default)]
struct Moved {
    /// Per chosen file: its first live row's position in the new file, and its deleted
    /// positions (sorted).
    files: HashMap<String, (u64, Vec<u64>)>,
}

impl Moved {
    /// The new position of row `pos` of `path`; None when the row was deleted already, or
    /// `path` is not a chosen file.
    fn position(&self, path: &str, pos: u64) -> Option<u64> {
        let (base, deleted) = self.files.get(path)?;
        match deleted.binary_search(&pos) {
            Ok(_) => None,
            Err(before) => Some(base + pos - before as u64),
        }
    }
}

/// Which small files of a partition to compact: smallest first, as many as fit in one target
/// file; None when that is not worth a rewrite (see the module docs).
fn pick(mut files: Vec<Live>, target: u64, min_files: usize) -> Option<Vec<Live>> {
    files.sort_by(|a, b| {
        (a.file.file_size_in_bytes(), a.file.file_path())
            .cmp(&(b.file.file_size_in_bytes(), b.file.file_path()))
    });
    let mut input = 0u64;
    files.retain(|l| {
        input += l.file.file_size_in_bytes();
        input <= target
    });
    let bytes: u64 = files.iter().map(|l| l.file.file_size_in_bytes()).sum();
    // The files besides the largest must add an eighth of a target: a file already near
    // three quarters is not rewritten every run for a few KiB of tails (at a low rate that
    // rewrote a 16 MiB file a minute for hours).
    let largest = files.last().map_or(0, |l| l.file.file_size_in_bytes());
    let worth = files.len() >= min_files
        || (files.len() >= 2 && bytes >= target / 2 && bytes - largest >= target / 8);
    worth.then_some(files)
}

impl Committer {
    /// Compacts the small data files of one partition of `ident` (the one with the most to
    /// merge), as the module docs say; `now_ms` is the snapshot's time (the caller's clock).
    /// Returns what was done; nothing when there is nothing to do, the table has delete
    /// files, or other commits removed the files first.
    pub async fn compact(
        &self,
        ident: &TableIdent,
        settings: &FileSettings,
        pool: &MemoryPool,
        min_files: usize,
        now_ms: i64,
    ) -> Result<Compacted, CommitError> {
        let Some(table) = self.load(ident).await? else {
            return Ok(Compacted::default());
        };
        let meta = table.metadata();
        let Some(parent) = meta.current_snapshot().cloned() else {
            return Ok(Compacted::default());
        };
        // Cheap first: fewer than two files in all.
        let total_files = parent
            .summary()
            .additional_properties
            .get("total-data-files")
            .and_then(|v| v.parse::<usize>().ok());
        if total_files.is_some_and(|n| n < 2) {
            return Ok(Compacted::default());
        }
        let file_io = table.file_io().clone();
        let file_io = &file_io;
        let spec = meta.default_partition_spec().clone();
        let target = settings.target_file_bytes as u64;
        let Some((groups, deletes)) = small_files(&table, &parent, target).await? else {
            return Ok(Compacted::default());
        };
        let Some((partition, files)) = groups
            .into_iter()
            .filter_map(|(p, files)| Some((p, pick(files, target, min_files)?)))
            .max_by_key(|(_, files)| {
                (
                    files.len(),
                    files
                        .iter()
                        .map(|l| l.file.file_size_in_bytes())
                        .sum::<u64>(),
                )
            })
        else {
            return Ok(Compacted::default());
        };
        let chosen = chosen_deletes(file_io, &deletes, spec.spec_id(), &partition, &files).await?;
        let location = meta.location().trim_end_matches('/').to_string();
        let file_target = FileTarget {
            file_io: file_io.clone(),
            schema: meta.current_schema().clone(),
            spec: spec.clone(),
            data_location: meta
                .properties()
                .get("write.data.path")
                .cloned()
                .unwrap_or_else(|| format!("{location}/data")),
        };
        let prefix = attempt_prefix(meta, parent.snapshot_id());
        // Without deletes into them, the files' column chunks are copied.
        let no_deletes = chosen.deleted.is_empty() && chosen.removed_deletes.is_empty();
        let rewritten = rewrite(
            &file_target,
            &files,
            &partition,
            (!no_deletes).then_some(chosen.deleted),
            &prefix,
            settings,
            pool,
        )
        .await?;
        inlet_common::failpoint::hit("compaction-written");
        let replace = Replace {
            removed: files.iter().map(|l| l.file.clone()).collect(),
            removed_deletes: chosen.removed_deletes,
            seen_deletes: chosen.seen_deletes,
            moved: rewritten.moved,
            written: rewritten.written,
            rows: rewritten.rows,
            removed_rows: rewritten.removed_rows,
            prefix,
            spec_id: spec.spec_id(),
            partition,
            file_target,
            settings: settings.clone(),
            carried: Default::default(),
        };
        self.commit_replace(ident, table, replace, now_ms, rewritten.copied)
            .await
    }

    /// Commits `replace` on the table as it is at each attempt: rounds that land meanwhile
    /// add files, and deletes that are carried over (see `Replace::on`). Only lost races are
    /// tried again: after an unknown outcome the replace may have landed, and its file must
    /// stay (an attempt on the reloaded table would find nothing to replace, and drop it). A
    /// dropped replace's files are deleted.
    async fn commit_replace(
        &self,
        ident: &TableIdent,
        table: iceberg::table::Table,
        replace: Replace,
        now_ms: i64,
        copied: bool,
    ) -> Result<Compacted, CommitError> {
        let file_io = table.file_io().clone();
        let outcome = inlet_common::retry(&COMMIT_RETRY, lost_race, |attempt| {
            let first = (attempt == 1).then(|| table.clone());
            let replace = &replace;
            async move {
                let table = match first {
                    Some(table) => table,
                    None => match self.load(ident).await? {
                        Some(table) => table,
                        None => return Ok(false),
                    },
                };
                let Some((requirements, updates)) = replace.on(&table, now_ms).await? else {
                    return Ok(false);
                };
                let committed = self
                    .target
                    .commit(&table, requirements, updates)
                    .await
                    .map_err(CommitError::from)?;
                Ok(committed.is_some())
            }
        })
        .await;
        match outcome {
            Ok(true) => {
                inlet_common::failpoint::hit("compaction-committed");
                // Carried deletes of earlier attempts, not the committed one, are unused.
                replace.delete_carried_except_last(&file_io).await;
                return Ok(Compacted {
                    removed: replace.removed.len(),
                    added: replace.written.len(),
                    copied,
                });
            }
            Ok(false) | Err(CommitError::Conflict(_)) => {}
            // The outcome is unknown: the files may be live, so they stay.
            Err(e) => return Err(e),
        }
        // Dropped: no snapshot references this attempt's files (their names are its own).
        for f in &replace.written {
            let _ = file_io.delete(f.file_path()).await;
        }
        replace.delete_carried(&file_io).await;
        Ok(Compacted::default())
    }
}

/// The small live data files of `parent`, by partition of the table's current spec, and its
/// live position delete files; None when it has equality deletes (not Inlet's: see the
/// module docs).
async fn small_files(
    table: &iceberg::table::Table,
    parent: &iceberg::spec::Snapshot,
    target: u64,
) -> Result<Option<SmallFiles>, CommitError> {
    let meta = table.metadata();
    let file_io = table.file_io();
    let spec_id = meta.default_partition_spec().spec_id();
    let manifests = crate::reading::manifests(table, parent).await?;
    let small_below = target * SMALL_NUMERATOR / SMALL_DENOMINATOR;
    let mut groups: HashMap<iceberg::spec::Struct, Vec<Live>> = HashMap::new();
    let mut deletes: Vec<LiveDeletes> = Vec::new();
    for m in &manifests {
        let manifest = m.load_manifest(file_io).await?;
        for entry in manifest.entries() {
            if !entry.is_alive() {
                continue;
            }
            match entry.content_type() {
                DataContentType::Data => {}
                DataContentType::PositionDeletes => {
                    deletes.push(LiveDeletes {
                        file: entry.data_file().clone(),
                        spec_id: m.partition_spec_id,
                    });
                    continue;
                }
                DataContentType::EqualityDeletes => return Ok(None),
            }
            let f = entry.data_file();
            if m.partition_spec_id == spec_id && f.file_size_in_bytes() < small_below {
                groups
                    .entry(f.partition().clone())
                    .or_default()
                    .push(Live { file: f.clone() });
            }
        }
    }
    Ok(Some((groups, deletes)))
}

/// [`small_files`]' answer: the small data files by partition, and the live delete files.
type SmallFiles = (HashMap<iceberg::spec::Struct, Vec<Live>>, Vec<LiveDeletes>);

/// The partition's position deletes into the chosen files.
struct ChosenDeletes {
    /// The deleted positions of each chosen file.
    deleted: HashMap<String, Vec<u64>>,
    /// The delete files whose rows all point into the chosen files: they go with them.
    removed_deletes: Vec<DataFile>,
    /// Every live position delete file when the rows were read ([`Replace::seen_deletes`]).
    seen_deletes: HashSet<String>,
}

/// Reads the position deletes of `partition` (spec `spec_id`) into `files`.
async fn chosen_deletes(
    file_io: &iceberg::io::FileIO,
    deletes: &[LiveDeletes],
    spec_id: i32,
    partition: &iceberg::spec::Struct,
    files: &[Live],
) -> Result<ChosenDeletes, CommitError> {
    let chosen: HashSet<&str> = files.iter().map(|l| l.file.file_path()).collect();
    let mut out = ChosenDeletes {
        deleted: HashMap::new(),
        removed_deletes: Vec::new(),
        seen_deletes: HashSet::new(),
    };
    for d in deletes {
        out.seen_deletes.insert(d.file.file_path().to_string());
        if d.spec_id != spec_id || d.file.partition() != partition {
            continue;
        }
        if d.file
            .referenced_data_file()
            .is_some_and(|r| !chosen.contains(r.as_str()))
        {
            continue;
        }
        let rows = read_deletes(file_io, d.file.file_path()).await?;
        let mut all_chosen = true;
        for (path, pos) in rows {
            if chosen.contains(path.as_str()) {
                out.deleted.entry(path).or_default().push(pos);
            } else {
                all_chosen = false;
            }
        }
        if all_chosen {
            out.removed_deletes.push(d.file.clone());
        }
    }
    Ok(out)
}

/// The names of one compaction attempt's files (and its snapshot's commit id). Unique per
/// attempt: two compactions of one parent (a restarted or a second coordinator) must not
/// write the same files, or the loser's clean-up would delete the winner's live ones. Its
/// random part starts with the table's tag, so the orphan sweep knows a crashed compaction's
/// outputs as this table's even once their parent snapshot expired (`crate::orphans`).
fn attempt_prefix(meta: &iceberg::spec::TableMetadata, parent_id: i64) -> String {
    #[allow(clippy::disallowed_methods)] // unique is all it must be
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!(
        "compact-{:016x}-{}{}",
        parent_id,
        crate::orphans::uuid_tag(&meta.uuid()),
        &random[crate::orphans::TAG_LEN..]
    )
}

/// The chosen files' live rows, written as one new file.
struct Rewritten {
    written: Vec<DataFile>,
    moved: Moved,
    /// Rows written.
    rows: u64,
    /// Rows the chosen files hold, deleted ones included.
    removed_rows: u64,
    /// Whether the rows were moved by copying column chunks ([`crate::concat`]).
    copied: bool,
}

/// Writes the live rows of `files` as one file named by `prefix`: their column chunks copied
/// when there are no deletes into them (`deleted` None), else decoded with the `deleted`
/// positions left out.
/// Memory comes from the node's `pool`: to copy column chunks, the inputs' bytes and the new
/// file's; to decode, the decoded batches, and as much again while the Parquet writer runs.
async fn rewrite(
    file_target: &FileTarget,
    files: &[Live],
    partition: &iceberg::spec::Struct,
    deleted: Option<HashMap<String, Vec<u64>>>,
    prefix: &str,
    settings: &FileSettings,
    pool: &MemoryPool,
) -> Result<Rewritten, CommitError> {
    let file_io = &file_target.file_io;
    let (schema, spec) = (&file_target.schema, &file_target.spec);
    let input: u64 = files.iter().map(|l| l.file.file_size_in_bytes()).sum();
    let cap = pool.budget();
    let reserve = |factor: usize| async move {
        pool.reserve(((input as usize).saturating_mul(factor)).clamp(1, cap))
            .await
            .map_err(|e| CommitError::Worker {
                what: "compaction memory".into(),
                source: Box::new(e.into()),
            })
    };
    let no_deletes = deleted.is_none();
    let mut reservation = reserve(if no_deletes { 2 } else { 8 }).await?;
    let copied = if no_deletes {
        let inputs: Vec<DataFile> = files.iter().map(|l| l.file.clone()).collect();
        crate::concat::concat(
            &inputs,
            &crate::concat::Output {
                file_io,
                data_location: &file_target.data_location,
                file_name: &format!("{prefix}-00000.parquet"),
                schema,
                spec,
                partition,
            },
            (settings.target_file_bytes as u64 / COPY_ROW_GROUP_DIVISOR) as i64,
        )
        .await?
    } else {
        None
    };
    let out = if let Some(file) = copied {
        let mut moved = Moved::default();
        let mut rows = 0u64;
        for l in files {
            moved
                .files
                .insert(l.file.file_path().to_string(), (rows, Vec::new()));
            rows += l.file.record_count();
        }
        Rewritten {
            written: vec![file],
            moved,
            rows,
            removed_rows: rows,
            copied: true,
        }
    } else {
        if no_deletes {
            drop(reservation);
            reservation = reserve(8).await?;
        }
        let (batches, moved, rows, removed_rows) = decode(
            file_io,
            files,
            schema,
            spec,
            partition,
            deleted.unwrap_or_default(),
        )
        .await?;
        // One file: the input is at most one target file of Parquet already. The writer's
        // rolling size is an estimate that counts in-progress pages before compression (and
        // dictionaries whole), so at the target it cut highly compressible rows into files of
        // a twentieth of it (the files benchmark: 1.6 MiB files at a 32 MiB target).
        let one_file = FileSettings {
            target_file_bytes: usize::MAX,
            ..settings.clone()
        };
        let written = inlet_table_worker::data_file::write(file_target, prefix, batches, &one_file)
            .await
            .map_err(|e| CommitError::Worker {
                what: "compaction: writing the merged file".into(),
                source: Box::new(e),
            })?;
        Rewritten {
            written,
            moved,
            rows,
            removed_rows,
            copied: false,
        }
    };
    drop(reservation);
    // Deletes are carried over into the new file by row position: it must be one file.
    if out.written.len() > 1 {
        for f in &out.written {
            let _ = file_io.delete(f.file_path()).await;
        }
        return Err(CommitError::Catalog(format!(
            "compaction wrote {} files where one was expected",
            out.written.len()
        )));
    }
    Ok(out)
}

/// A rewrite, ready to be committed on whatever `main` is by then.
struct Replace {
    removed: Vec<DataFile>,
    /// Position delete files whose rows all point into `removed`.
    removed_deletes: Vec<DataFile>,
    /// The live position delete files when the rows were read: any other is newer, and its
    /// rows into `removed` are carried over.
    seen_deletes: HashSet<String>,
    moved: Moved,
    written: Vec<DataFile>,
    /// Rows written (the live rows of `removed`).
    rows: u64,
    /// Rows `removed` hold, deleted ones included.
    removed_rows: u64,
    prefix: String,
    /// The spec the files were grouped and written by.
    spec_id: i32,
    /// The files' partition tuple.
    partition: iceberg::spec::Struct,
    file_target: FileTarget,
    settings: FileSettings,
    /// Delete files written to carry deletes over, one set per attempt.
    carried: parking_lot::Mutex<Vec<Vec<String>>>,
}

/// What [`Replace::find`] found of a replace's files in the current snapshot's manifests.
struct Found {
    /// The manifests, loaded, in the manifest list's order.
    loaded: Vec<iceberg::spec::Manifest>,
    /// The manifests that hold a file the replace removes: written again without it.
    touched: HashSet<usize>,
    /// Rows that deletes newer than the read remove from the chosen files, at their new
    /// positions in the new file.
    carried: Vec<(String, u64)>,
}

impl Replace {
    /// The requirements and updates of the replace snapshot on `table`'s current snapshot;
    /// None when it no longer holds there: a file it removes is gone (another compaction, an
    /// overwrite, a delete), a delete file exists, or the spec changed.
    async fn on(
        &self,
        table: &iceberg::table::Table,
        now_ms: i64,
    ) -> Result<Option<(Vec<iceberg::TableRequirement>, Vec<iceberg::TableUpdate>)>, CommitError>
    {
        let meta = table.metadata();
        let file_io = table.file_io();
        let Some(parent) = meta.current_snapshot().cloned() else {
            return Ok(None);
        };
        if meta.default_partition_spec().spec_id() != self.spec_id {
            return Ok(None);
        }
        let manifests = crate::reading::manifests(table, &parent).await?;
        let Some(mut found) = self.find(file_io, &manifests).await? else {
            return Ok(None);
        };
        // The replace snapshot: the new files added, the old ones deleted from their
        // manifests (the rest of those manifests kept), every other manifest as it was.
        let snapshot_id = crate::commit::snapshot_id_for(&self.prefix, meta);
        let sequence_number = meta.next_sequence_number();
        let carried_rows = found.carried.len() as u64;
        let carried = std::mem::take(&mut found.carried);
        let carried_files = self.write_carried(snapshot_id, carried).await?;
        let out = self
            .manifests(table, snapshot_id, manifests, &found, &carried_files)
            .await?;
        let location = meta.location().trim_end_matches('/');
        let list_path = format!(
            "{location}/metadata/snap-{snapshot_id}-1-{}.avro",
            self.prefix
        );
        let mut list = ManifestListWriter::v2(
            file_io.new_output(&list_path)?.writer().await?,
            snapshot_id,
            Some(parent.snapshot_id()),
            sequence_number,
        );
        list.add_manifests(out.into_iter())?;
        list.close().await?;
        let props = self.summary(&parent, &carried_files, carried_rows);
        let snapshot = Snapshot::builder()
            .with_snapshot_id(snapshot_id)
            .with_parent_snapshot_id(Some(parent.snapshot_id()))
            .with_sequence_number(sequence_number)
            .with_timestamp_ms(now_ms.max(meta.last_updated_ms() + 1))
            .with_manifest_list(list_path)
            .with_summary(Summary {
                operation: Operation::Replace,
                additional_properties: props,
            })
            .with_schema_id(meta.current_schema().schema_id())
            .build();
        let requirements = crate::commit::main_requirements(meta, Some(parent.snapshot_id()));
        let updates = crate::commit::main_updates(snapshot).to_vec();
        Ok(Some((requirements, updates)))
    }

    /// Finds the replace's files among the live entries of `manifests`, and the rows that
    /// newer position deletes remove from them; None when one is gone or an equality delete
    /// is there.
    async fn find(
        &self,
        file_io: &iceberg::io::FileIO,
        manifests: &[ManifestFile],
    ) -> Result<Option<Found>, CommitError> {
        let removed: HashSet<&str> = self.removed.iter().map(|f| f.file_path()).collect();
        let removed_deletes: HashSet<&str> =
            self.removed_deletes.iter().map(|f| f.file_path()).collect();
        let (mut found, mut found_deletes) = (0usize, 0usize);
        let mut loaded = Vec::with_capacity(manifests.len());
        let mut touched = HashSet::new();
        let mut carried: Vec<(String, u64)> = Vec::new();
        for (i, m) in manifests.iter().enumerate() {
            let manifest = m.load_manifest(file_io).await?;
            for entry in manifest.entries() {
                if !entry.is_alive() {
                    continue;
                }
                let path = entry.file_path();
                match entry.content_type() {
                    DataContentType::Data => {
                        if removed.contains(path) {
                            found += 1;
                            touched.insert(i);
                        }
                    }
                    DataContentType::PositionDeletes if removed_deletes.contains(path) => {
                        found_deletes += 1;
                        touched.insert(i);
                    }
                    DataContentType::PositionDeletes => {
                        let elsewhere = entry
                            .data_file()
                            .referenced_data_file()
                            .is_some_and(|r| !removed.contains(r.as_str()));
                        if self.seen_deletes.contains(path) || elsewhere {
                            continue;
                        }
                        let Some(new_file) = self.written.first() else {
                            // Every row was deleted: nothing to carry.
                            continue;
                        };
                        for (p, pos) in read_deletes(file_io, path).await? {
                            if let Some(at) = self.moved.position(&p, pos) {
                                carried.push((new_file.file_path().to_string(), at));
                            }
                        }
                    }
                    DataContentType::EqualityDeletes => return Ok(None),
                }
            }
            loaded.push(manifest);
        }
        if found != removed.len() || found_deletes != removed_deletes.len() {
            return Ok(None);
        }
        Ok(Some(Found {
            loaded,
            touched,
            carried,
        }))
    }

    /// Writes the `carried` deletes as position-delete files of the new file (none when
    /// there are none), remembered for [`Replace::delete_carried`].
    async fn write_carried(
        &self,
        snapshot_id: i64,
        carried: Vec<(String, u64)>,
    ) -> Result<Vec<DataFile>, CommitError> {
        let files = if carried.is_empty() {
            Vec::new()
        } else {
            inlet_table_worker::position_delete::write(
                &self.file_target,
                &format!("{}-{snapshot_id:016x}", self.prefix),
                Some(self.partition.clone()),
                carried,
                &self.settings,
            )
            .await
            .map_err(|e| CommitError::Worker {
                what: "compaction: carried deletes".into(),
                source: Box::new(e),
            })?
        };
        self.carried
            .lock()
            .push(files.iter().map(|f| f.file_path().to_string()).collect());
        Ok(files)
    }

    /// The replace snapshot's manifests: one of the new file, one of the carried deletes, the
    /// touched manifests written again without the removed files, and the others as they were.
    async fn manifests(
        &self,
        table: &iceberg::table::Table,
        snapshot_id: i64,
        manifests: Vec<ManifestFile>,
        found: &Found,
        carried_files: &[DataFile],
    ) -> Result<Vec<ManifestFile>, CommitError> {
        let meta = table.metadata();
        let file_io = table.file_io();
        let spec = meta.default_partition_spec().clone();
        let schema = meta.current_schema().clone();
        let location = meta.location().trim_end_matches('/');
        let removed: HashSet<&str> = self.removed.iter().map(|f| f.file_path()).collect();
        let removed_deletes: HashSet<&str> =
            self.removed_deletes.iter().map(|f| f.file_path()).collect();
        let mut out: Vec<ManifestFile> = Vec::new();
        for (files, name, deletes) in [
            (&self.written[..], "c0", false),
            (carried_files, "d0", true),
        ] {
            if !files.is_empty() {
                let path = format!("{location}/metadata/{snapshot_id:016x}-{name}.avro");
                let new = crate::commit::NewManifest {
                    snapshot_id,
                    schema: &schema,
                    spec: &spec,
                    deletes,
                };
                out.push(new.write(file_io, path, files).await?);
            }
        }
        for (i, m) in manifests.into_iter().enumerate() {
            if !found.touched.contains(&i) {
                out.push(m);
                continue;
            }
            let manifest_spec = meta
                .partition_spec_by_id(m.partition_spec_id)
                .cloned()
                .unwrap_or_else(|| spec.clone());
            let builder = ManifestWriterBuilder::new(
                file_io.new_output(format!(
                    "{location}/metadata/{snapshot_id:016x}-c{}.avro",
                    i + 1
                ))?,
                Some(snapshot_id),
                schema.clone(),
                manifest_spec.as_ref().clone(),
            );
            let mut writer = match m.content {
                ManifestContentType::Data => builder.build_v2_data(),
                ManifestContentType::Deletes => builder.build_v2_deletes(),
            };
            crate::manifest_merge::carry_entries(
                &mut writer,
                &found.loaded[i],
                &m.manifest_path,
                |path| removed.contains(path) || removed_deletes.contains(path),
            )?;
            out.push(writer.write_manifest_file().await?);
        }
        Ok(out)
    }

    /// The replace snapshot's summary: the parent's (Inlet's progress included), with the
    /// counts moved by the files removed and written.
    fn summary(
        &self,
        parent: &Snapshot,
        carried_files: &[DataFile],
        carried_rows: u64,
    ) -> HashMap<String, String> {
        let mut props = parent.summary().additional_properties.clone();
        for key in [
            "added-data-files",
            "added-records",
            "added-files-size",
            "added-delete-files",
            "added-position-delete-files",
            "added-position-deletes",
            "deleted-data-files",
            "deleted-records",
            "removed-files-size",
            "removed-delete-files",
            "removed-position-deletes",
        ] {
            props.remove(key);
        }
        let size = |files: &[DataFile]| files.iter().map(|f| f.file_size_in_bytes()).sum::<u64>();
        let removed_size = size(&self.removed) + size(&self.removed_deletes);
        let added_size = size(&self.written) + size(carried_files);
        let removed_position_deletes: u64 =
            self.removed_deletes.iter().map(|f| f.record_count()).sum();
        let mut shift = |key: &str, delta: i64| {
            if let Some(v) = props.get(key).and_then(|v| v.parse::<i64>().ok()) {
                props.insert(key.to_string(), (v + delta).max(0).to_string());
            }
        };
        shift(
            "total-data-files",
            self.written.len() as i64 - self.removed.len() as i64,
        );
        shift("total-files-size", added_size as i64 - removed_size as i64);
        shift("total-records", self.rows as i64 - self.removed_rows as i64);
        shift(
            "total-delete-files",
            carried_files.len() as i64 - self.removed_deletes.len() as i64,
        );
        shift(
            "total-position-deletes",
            carried_rows as i64 - removed_position_deletes as i64,
        );
        if !carried_files.is_empty() {
            props.insert("added-delete-files".into(), carried_files.len().to_string());
            props.insert(
                "added-position-delete-files".into(),
                carried_files.len().to_string(),
            );
            props.insert("added-position-deletes".into(), carried_rows.to_string());
        }
        if !self.removed_deletes.is_empty() {
            props.insert(
                "removed-delete-files".into(),
                self.removed_deletes.len().to_string(),
            );
            props.insert(
                "removed-position-deletes".into(),
                removed_position_deletes.to_string(),
            );
        }
        props.insert("added-data-files".into(), self.written.len().to_string());
        props.insert("deleted-data-files".into(), self.removed.len().to_string());
        props.insert("added-records".into(), self.rows.to_string());
        props.insert("deleted-records".into(), self.removed_rows.to_string());
        props.insert("added-files-size".into(), added_size.to_string());
        props.insert("removed-files-size".into(), removed_size.to_string());
        props.insert(COMMIT_ID.into(), self.prefix.clone());
        props
    }
}

impl Replace {
    /// Deletes every carried-deletes file of every attempt (the compaction was dropped).
    async fn delete_carried(&self, file_io: &iceberg::io::FileIO) {
        let all: Vec<String> = self.carried.lock().drain(..).flatten().collect();
        for path in all {
            let _ = file_io.delete(&path).await;
        }
    }

    /// Deletes the carried-deletes files of every attempt but the last (the committed one).
    async fn delete_carried_except_last(&self, file_io: &iceberg::io::FileIO) {
        let stale = {
            let mut carried = self.carried.lock();
            let attempts = std::mem::take(&mut *carried);
            let (stale, last) = stale_carried(attempts);
            carried.extend(last);
            stale
        };
        for path in stale {
            let _ = file_io.delete(&path).await;
        }
    }
}

/// Of each attempt's carried-deletes files, those only earlier attempts wrote, and the last
/// attempt's (the committed one's). An attempt names its file after the snapshot id it would
/// commit, which is the same on every attempt that lost a race (none of them took the id), so
/// an earlier attempt's path is often the committed one's: it must stay.
fn stale_carried(mut attempts: Vec<Vec<String>>) -> (Vec<String>, Option<Vec<String>>) {
    let last = attempts.pop();
    let kept: HashSet<&String> = last.iter().flatten().collect();
    let stale = attempts
        .into_iter()
        .flatten()
        .filter(|p| !kept.contains(p))
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    (stale, last)
}

/// The (data file path, position) rows of a position delete file.
async fn read_deletes(
    file_io: &iceberg::io::FileIO,
    path: &str,
) -> Result<Vec<(String, u64)>, CommitError> {
    inlet_table_worker::read_position_deletes(file_io, path)
        .await
        .map_err(|e| CommitError::Worker {
            what: format!("reading position deletes {path}"),
            source: Box::new(e),
        })
}

/// The general path: the chosen files' rows read in the current schema, each file on its own
/// so its rows come in order, with its deleted rows dropped. Returns the batches, where each
/// file's live rows went, the rows kept and the rows the files held.
async fn decode(
    file_io: &iceberg::io::FileIO,
    files: &[Live],
    schema: &iceberg::spec::SchemaRef,
    spec: &iceberg::spec::PartitionSpecRef,
    partition: &iceberg::spec::Struct,
    mut deleted: HashMap<String, Vec<u64>>,
) -> Result<(Vec<arrow::array::RecordBatch>, Moved, u64, u64), CommitError> {
    let field_ids: Vec<i32> = schema.as_struct().fields().iter().map(|f| f.id).collect();
    let mut batches: Vec<arrow::array::RecordBatch> = Vec::new();
    let mut moved = Moved::default();
    let mut rows = 0u64;
    let mut removed_rows = 0u64;
    for l in files {
        let task = FileScanTask {
            file_size_in_bytes: l.file.file_size_in_bytes(),
            start: 0,
            length: l.file.file_size_in_bytes(),
            record_count: Some(l.file.record_count()),
            data_file_path: l.file.file_path().to_string(),
            data_file_format: l.file.file_format(),
            schema: schema.clone(),
            project_field_ids: field_ids.clone(),
            predicate: None,
            deletes: Vec::new(),
            partition: Some(partition.clone()),
            partition_spec: Some(spec.clone()),
            name_mapping: None,
            case_sensitive: true,
        };
        let read: Vec<arrow::array::RecordBatch> =
            ArrowReaderBuilder::new(file_io.clone(), Runtime::current())
                .build()
                .read(futures::stream::iter([Ok(task)]).boxed())?
                .stream()
                .try_collect()
                .await?;
        let read_rows: u64 = read.iter().map(|b| b.num_rows() as u64).sum();
        if read_rows != l.file.record_count() {
            return Err(CommitError::Catalog(format!(
                "compaction read {read_rows} rows from {}, which holds {}",
                l.file.file_path(),
                l.file.record_count()
            )));
        }
        removed_rows += read_rows;
        let mut gone = deleted.remove(l.file.file_path()).unwrap_or_default();
        gone.sort_unstable();
        gone.dedup();
        gone.retain(|&p| p < read_rows);
        let mut at = 0u64;
        for b in read {
            let n = b.num_rows() as u64;
            let first = gone.partition_point(|&p| p < at);
            let last = gone.partition_point(|&p| p < at + n);
            if first == last {
                batches.push(b);
            } else {
                let keep = arrow::array::BooleanArray::from_iter(
                    (at..at + n).map(|p| Some(gone[first..last].binary_search(&p).is_err())),
                );
                batches.push(
                    arrow::compute::filter_record_batch(&b, &keep).map_err(CommitError::Arrow)?,
                );
            }
            at += n;
        }
        let live = read_rows - gone.len() as u64;
        moved
            .files
            .insert(l.file.file_path().to_string(), (rows, gone));
        rows += live;
    }
    Ok((batches, moved, rows, removed_rows))
}

#[cfg(test)]
mod carried_tests {
    use super::stale_carried;

    /// The committed attempt's file stays, even when an attempt that lost a race wrote the
    /// same path (the same snapshot id); only paths no later attempt wrote go.
    #[test]
    fn the_committed_attempts_carried_deletes_stay() {
        let p = |s: &str| s.to_string();
        let (mut stale, last) = stale_carried(vec![
            vec![p("c-1-deletes")],
            vec![p("c-2-deletes"), p("c-1-deletes")],
            vec![p("c-1-deletes")],
        ]);
        stale.sort();
        assert_eq!(stale, [p("c-2-deletes")]);
        assert_eq!(last, Some(vec![p("c-1-deletes")]));
        let (stale, last) = stale_carried(Vec::new());
        assert!(stale.is_empty() && last.is_none());
    }
}
