//! Small-file compaction of append-only tables: a table that commits every second gets a few
//! small files per round, and readers pay per file. Every [`COMPACT_EVERY`] commits, and at
//! most once per [`COMPACT_MIN_INTERVAL`], the coordinator rewrites the small files of a
//! partition into one file of up to the target size, in one `replace` snapshot.
//!
//! Invariants:
//! - Only append-only tables without delete files: an upsert table's primary-key index and
//!   position deletes name files and row positions, which a rewrite would move.
//! - Rows are copied, never changed: the same rows, `_kafka` included, read in the table's
//!   current schema (columns added since a file was written read as null).
//! - The replace snapshot carries the parent's `inlet.*` summary (offsets, watermarks), so
//!   conversion resumes exactly where it did; it is pinned to its parent
//!   (`assert-ref-snapshot-id`), so a concurrent writer makes it fail harmlessly.
//! - Its memory is borrowed from the node's conversion pool, like a conversion job's.
//! - A crash or a lost race leaves the new files as orphans; the table is unchanged.

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

/// A partition's files are compacted once it has this many small ones.
pub const MIN_FILES: usize = 16;

/// A file under this fraction of the target file size is small.
const SMALL_FRACTION: u64 = 4;

/// What a compaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compacted {
    /// Files replaced.
    pub removed: usize,
    /// Files written.
    pub added: usize,
}

/// A live data file and where its entry was.
struct Live {
    file: DataFile,
    manifest: usize,
}

impl Committer {
    /// Compacts the small data files of one partition of `ident` (the one with the most), if
    /// it has at least `min_files` of them; `now_ms` is the snapshot's time (the caller's
    /// clock). Returns what was done; nothing when there is nothing to do, the table has
    /// delete files, or another commit won the race.
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
        // Cheap first: fewer files in all than a compaction needs.
        let total_files = parent
            .summary()
            .additional_properties
            .get("total-data-files")
            .and_then(|v| v.parse::<usize>().ok());
        if total_files.is_some_and(|n| n < min_files) {
            return Ok(Compacted::default());
        }
        let file_io = table.file_io();
        let spec = meta.default_partition_spec().clone();
        let schema = meta.current_schema().clone();
        let bytes = file_io.new_input(parent.manifest_list())?.read().await?;
        let manifests: Vec<ManifestFile> =
            iceberg::spec::ManifestList::parse_with_version(&bytes, meta.format_version())?
                .consume_entries()
                .into_iter()
                .collect();

        // The small live files, by partition of the current spec.
        let small_below = settings.target_file_bytes as u64 / SMALL_FRACTION;
        let mut groups: HashMap<iceberg::spec::Struct, Vec<Live>> = HashMap::new();
        let mut loaded = Vec::with_capacity(manifests.len());
        for (i, m) in manifests.iter().enumerate() {
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
                    groups.entry(f.partition().clone()).or_default().push(Live {
                        file: f.clone(),
                        manifest: i,
                    });
                }
            }
            loaded.push(manifest);
        }
        let Some((partition, mut files)) = groups
            .into_iter()
            .filter(|(_, files)| files.len() >= min_files)
            .max_by_key(|(_, files)| files.len())
        else {
            return Ok(Compacted::default());
        };
        // At most one target file's worth of input per compaction.
        files.sort_by(|a, b| a.file.file_path().cmp(b.file.file_path()));
        let mut input = 0u64;
        files.retain(|l| {
            input += l.file.file_size_in_bytes();
            input <= settings.target_file_bytes as u64
        });
        if files.len() < min_files {
            return Ok(Compacted::default());
        }

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
        let target = FileTarget {
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
            parent.snapshot_id(),
            uuid::Uuid::new_v4().simple()
        );
        let written = inlet_table_worker::data_file::write(&target, &prefix, batches, settings)
            .await
            .map_err(|e| CommitError::Catalog(format!("compaction: {e}")))?;

        // The replace snapshot: the new files added, the old ones deleted from their
        // manifests (the rest of those manifests kept), every other manifest as it was.
        let snapshot_id = crate::commit::snapshot_id_for(&prefix, meta);
        let sequence_number = meta.next_sequence_number();
        let removed: HashSet<&str> = files.iter().map(|l| l.file.file_path()).collect();
        let touched: HashSet<usize> = files.iter().map(|l| l.manifest).collect();
        let mut out: Vec<ManifestFile> = Vec::new();
        let mut writer = ManifestWriterBuilder::new(
            file_io.new_output(format!("{location}/metadata/{snapshot_id:016x}-c0.avro"))?,
            Some(snapshot_id),
            schema.clone(),
            spec.as_ref().clone(),
        )
        .build_v2_data();
        for f in &written {
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
        let list_path = format!("{location}/metadata/snap-{snapshot_id}-1-{prefix}.avro");
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
        ] {
            props.remove(key);
        }
        let removed_size: u64 = files.iter().map(|l| l.file.file_size_in_bytes()).sum();
        let added_size: u64 = written.iter().map(|f| f.file_size_in_bytes()).sum();
        let shift = |props: &mut HashMap<String, String>, key: &str, delta: i64| {
            if let Some(v) = props.get(key).and_then(|v| v.parse::<i64>().ok()) {
                props.insert(key.to_string(), (v + delta).max(0).to_string());
            }
        };
        shift(
            &mut props,
            "total-data-files",
            written.len() as i64 - files.len() as i64,
        );
        shift(
            &mut props,
            "total-files-size",
            added_size as i64 - removed_size as i64,
        );
        props.insert("added-data-files".into(), written.len().to_string());
        props.insert("deleted-data-files".into(), files.len().to_string());
        props.insert("added-records".into(), rows.to_string());
        props.insert("deleted-records".into(), rows.to_string());
        props.insert("added-files-size".into(), added_size.to_string());
        props.insert("removed-files-size".into(), removed_size.to_string());
        props.insert(COMMIT_ID.into(), prefix.clone());
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
        match self
            .target
            .commit(&table, requirements, updates)
            .await
            .map_err(CommitError::from)
        {
            Ok(Some(_)) => Ok(Compacted {
                removed: files.len(),
                added: written.len(),
            }),
            // Refused, or nothing changed: no snapshot references this attempt's files (their
            // names are its own), so they go.
            Ok(None) | Err(CommitError::Conflict(_)) => {
                for f in &written {
                    let _ = file_io.delete(f.file_path()).await;
                }
                Ok(Compacted::default())
            }
            // The outcome is unknown: the files may be live, so they stay.
            Err(e) => Err(e),
        }
    }
}
