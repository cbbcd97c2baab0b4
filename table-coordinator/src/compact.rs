//! Small-file compaction of append-only tables. A table that commits every second gets a
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
//! Invariants:
//! - Only append-only tables without delete files: an upsert table's primary-key index and
//!   position deletes name files and row positions, which a rewrite would move.
//! - Rows are copied, never changed: the same rows, `_kafka` included, read in the table's
//!   current schema (columns added since a file was written read as null).
//! - A replace snapshot is valid on any base where every file it removes is still live and no
//!   delete file exists: a commit that loses a race to a round (or another engine) is rebuilt
//!   on the new base and retried; one whose files another commit removed is dropped.
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
    DataContentType, DataFile, ManifestFile, ManifestListWriter, ManifestWriterBuilder, Operation,
    Snapshot, Summary,
};
use iceberg::{Runtime, TableIdent};
use inlet_table_worker::data_file::{FileSettings, FileTarget};
use inlet_table_worker::memory::MemoryPool;

use crate::commit::{CommitError, Committer, COMMIT_ID};

/// Commits of a table between two compaction checks.
pub const COMPACT_EVERY: u64 = 10;

/// And at least this long between two checks of a table: at a 1 s commit interval, ten
/// commits of a quiet table hold too little data to be worth a rewrite, and a file still
/// small after one compaction would be rewritten every ten seconds until it grows past the
/// small size.
pub const COMPACT_MIN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// A partition's files are compacted once it has this many small ones (or fewer that make
/// half a target file).
pub const MIN_FILES: usize = 16;

/// A file under `SMALL_NUMERATOR / SMALL_DENOMINATOR` of the target file size is small.
pub const SMALL_NUMERATOR: u64 = 3;
/// See [`SMALL_NUMERATOR`].
pub const SMALL_DENOMINATOR: u64 = 4;

/// Partitions (or target files' worth of one partition) compacted in one background run: a
/// backlog of small files catches up over a few runs, and a run ends in bounded time.
pub const PARTITIONS_PER_RUN: usize = 8;

/// Commits of one compaction lost to other commits before it is given up.
const MAX_ATTEMPTS: u32 = 8;

/// What a compaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compacted {
    /// Files replaced.
    pub removed: usize,
    /// Files written.
    pub added: usize,
}

/// A live data file.
struct Live {
    file: DataFile,
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
        let schema = meta.current_schema().clone();
        let bytes = file_io.new_input(parent.manifest_list())?.read().await?;
        let manifests: Vec<ManifestFile> =
            iceberg::spec::ManifestList::parse_with_version(&bytes, meta.format_version())?
                .consume_entries()
                .into_iter()
                .collect();

        // The small live files, by partition of the current spec.
        let target = settings.target_file_bytes as u64;
        let small_below = target * SMALL_NUMERATOR / SMALL_DENOMINATOR;
        let mut groups: HashMap<iceberg::spec::Struct, Vec<Live>> = HashMap::new();
        for m in &manifests {
            let manifest = m.load_manifest(file_io).await?;
            for entry in manifest.entries() {
                if !entry.is_alive() {
                    continue;
                }
                if entry.content_type() != DataContentType::Data {
                    // Deletes name files and positions: not for this compaction.
                    return Ok(Compacted::default());
                }
                let f = entry.data_file();
                if m.partition_spec_id == spec.spec_id() && f.file_size_in_bytes() < small_below {
                    groups
                        .entry(f.partition().clone())
                        .or_default()
                        .push(Live { file: f.clone() });
                }
            }
        }
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
        let input: u64 = files.iter().map(|l| l.file.file_size_in_bytes()).sum();

        // Read the rows in the current schema, holding memory from the node's pool: the
        // decoded batches, and as much again while the Parquet writer runs.
        let cap = pool.budget();
        let _reservation = pool
            .reserve(((input as usize).saturating_mul(8)).clamp(1, cap))
            .await
            .map_err(|e| CommitError::Catalog(format!("compaction memory: {e}")))?;
        let field_ids: Vec<i32> = schema.as_struct().fields().iter().map(|f| f.id).collect();
        let tasks: Vec<FileScanTask> = files
            .iter()
            .map(|l| FileScanTask {
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
            })
            .collect();
        let batches: Vec<arrow::array::RecordBatch> =
            ArrowReaderBuilder::new(file_io.clone(), Runtime::current())
                .build()
                .read(futures::stream::iter(tasks.into_iter().map(Ok)).boxed())?
                .stream()
                .try_collect()
                .await?;
        let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
        let expected: u64 = files.iter().map(|l| l.file.record_count()).sum();
        if rows != expected {
            return Err(CommitError::Catalog(format!(
                "compaction read {rows} rows from files that hold {expected}"
            )));
        }
        let location = meta.location().trim_end_matches('/').to_string();
        let data_location = meta
            .properties()
            .get("write.data.path")
            .cloned()
            .unwrap_or_else(|| format!("{location}/data"));
        let parent_id = parent.snapshot_id();
        let file_target = FileTarget {
            file_io: file_io.clone(),
            schema: schema.clone(),
            spec: spec.clone(),
            data_location,
        };
        // Unique per attempt: two compactions of one parent (a restarted or a second
        // coordinator) must not write the same files, or the loser's clean-up below would
        // delete the winner's live ones. The prefix is also the snapshot's commit id.
        let prefix = format!(
            "compact-{:016x}-{}",
            parent_id,
            uuid::Uuid::new_v4().simple()
        );
        // One file: the input is at most one target file of Parquet already. The writer's
        // rolling size is an estimate that counts in-progress pages before compression (and
        // dictionaries whole), so at the target it cut highly compressible rows into files of
        // a twentieth of it (the files benchmark: 1.6 MiB files at a 32 MiB target).
        let one_file = FileSettings {
            target_file_bytes: usize::MAX,
            ..settings.clone()
        };
        let written =
            inlet_table_worker::data_file::write(&file_target, &prefix, batches, &one_file)
                .await
                .map_err(|e| CommitError::Catalog(format!("compaction: {e}")))?;
        let replace = Replace {
            removed: files.iter().map(|l| l.file.clone()).collect(),
            written,
            rows,
            prefix,
            spec_id: spec.spec_id(),
        };

        // Committed on the table as it is at each attempt: rounds that land meanwhile only
        // add files, so the rewrite still holds on their snapshots.
        let mut table = table;
        for _ in 0..MAX_ATTEMPTS {
            let Some((requirements, updates)) = replace.on(&table, now_ms).await? else {
                break;
            };
            match self
                .target
                .commit(&table, requirements, updates)
                .await
                .map_err(CommitError::from)
            {
                Ok(Some(_)) => {
                    return Ok(Compacted {
                        removed: replace.removed.len(),
                        added: replace.written.len(),
                    })
                }
                Ok(None) => break,
                Err(CommitError::Conflict(_)) => match self.load(ident).await? {
                    Some(t) => table = t,
                    None => break,
                },
                // The outcome is unknown: the files may be live, so they stay.
                Err(e) => return Err(e),
            }
        }
        // Dropped: no snapshot references this attempt's files (their names are its own).
        for f in &replace.written {
            let _ = file_io.delete(f.file_path()).await;
        }
        Ok(Compacted::default())
    }
}

/// A rewrite, ready to be committed on whatever `main` is by then.
struct Replace {
    removed: Vec<DataFile>,
    written: Vec<DataFile>,
    rows: u64,
    prefix: String,
    /// The spec the files were grouped and written by.
    spec_id: i32,
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
        let spec = meta.default_partition_spec().clone();
        if spec.spec_id() != self.spec_id {
            return Ok(None);
        }
        let schema = meta.current_schema().clone();
        let location = meta.location().trim_end_matches('/').to_string();
        let bytes = file_io.new_input(parent.manifest_list())?.read().await?;
        let manifests: Vec<ManifestFile> =
            iceberg::spec::ManifestList::parse_with_version(&bytes, meta.format_version())?
                .consume_entries()
                .into_iter()
                .collect();
        let removed: HashSet<&str> = self.removed.iter().map(|f| f.file_path()).collect();
        let mut found = 0usize;
        let mut loaded = Vec::with_capacity(manifests.len());
        let mut touched = HashSet::new();
        for (i, m) in manifests.iter().enumerate() {
            let manifest = m.load_manifest(file_io).await?;
            for entry in manifest.entries() {
                if !entry.is_alive() {
                    continue;
                }
                if entry.content_type() != DataContentType::Data {
                    return Ok(None);
                }
                if removed.contains(entry.file_path()) {
                    found += 1;
                    touched.insert(i);
                }
            }
            loaded.push(manifest);
        }
        if found != removed.len() {
            return Ok(None);
        }

        // The replace snapshot: the new files added, the old ones deleted from their
        // manifests (the rest of those manifests kept), every other manifest as it was.
        let snapshot_id = crate::commit::snapshot_id_for(&self.prefix, meta);
        let sequence_number = meta.next_sequence_number();
        let mut out: Vec<ManifestFile> = Vec::new();
        let mut writer = ManifestWriterBuilder::new(
            file_io.new_output(format!("{location}/metadata/{snapshot_id:016x}-c0.avro"))?,
            Some(snapshot_id),
            schema.clone(),
            spec.as_ref().clone(),
        )
        .build_v2_data();
        for f in &self.written {
            writer.add_file(f.clone(), -1)?;
        }
        out.push(writer.write_manifest_file().await?);
        for (i, m) in manifests.into_iter().enumerate() {
            if !touched.contains(&i) {
                out.push(m);
                continue;
            }
            let manifest_spec = meta
                .partition_spec_by_id(m.partition_spec_id)
                .cloned()
                .unwrap_or_else(|| spec.clone());
            let mut writer = ManifestWriterBuilder::new(
                file_io.new_output(format!(
                    "{location}/metadata/{snapshot_id:016x}-c{}.avro",
                    i + 1
                ))?,
                Some(snapshot_id),
                schema.clone(),
                manifest_spec.as_ref().clone(),
            )
            .build_v2_data();
            crate::manifest_merge::carry_entries(
                &mut writer,
                &loaded[i],
                &m.manifest_path,
                |path| removed.contains(path),
            )?;
            out.push(writer.write_manifest_file().await?);
        }
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

        // The summary: the parent's (Inlet's progress included), with the counts moved.
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
        ] {
            props.remove(key);
        }
        let removed_size: u64 = self.removed.iter().map(|f| f.file_size_in_bytes()).sum();
        let added_size: u64 = self.written.iter().map(|f| f.file_size_in_bytes()).sum();
        let shift = |props: &mut HashMap<String, String>, key: &str, delta: i64| {
            if let Some(v) = props.get(key).and_then(|v| v.parse::<i64>().ok()) {
                props.insert(key.to_string(), (v + delta).max(0).to_string());
            }
        };
        shift(
            &mut props,
            "total-data-files",
            self.written.len() as i64 - self.removed.len() as i64,
        );
        shift(
            &mut props,
            "total-files-size",
            added_size as i64 - removed_size as i64,
        );
        props.insert("added-data-files".into(), self.written.len().to_string());
        props.insert("deleted-data-files".into(), self.removed.len().to_string());
        props.insert("added-records".into(), self.rows.to_string());
        props.insert("deleted-records".into(), self.rows.to_string());
        props.insert("added-files-size".into(), added_size.to_string());
        props.insert("removed-files-size".into(), removed_size.to_string());
        props.insert(COMMIT_ID.into(), self.prefix.clone());
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
            .with_schema_id(schema.schema_id())
            .build();
        let requirements = crate::commit::main_requirements(meta, Some(parent.snapshot_id()));
        let updates = crate::commit::main_updates(snapshot).to_vec();
        Ok(Some((requirements, updates)))
    }
}
