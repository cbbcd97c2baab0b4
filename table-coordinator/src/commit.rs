//! One commit round made durable as one Iceberg snapshot: the round's data files in a new
//! manifest, a manifest list with every earlier manifest, and a snapshot whose summary carries
//! `inlet.commit-id`, `inlet.offsets` (JSON partition → next offset) and `inlet.watermark`
//! (docs/architecture.md, "Summary keys and table properties"). The schema changes the files need go in the same metadata commit.
//!
//! Invariants:
//! - The table's current snapshot summary is the source of truth for where conversion resumes
//!   ([`Committer::committed`]): the offsets and the files of a round become visible in one
//!   atomic metadata-pointer swap, so a round is either entirely in the table or not at all.
//! - A round is committed at most once: the commit requires the table's `main` branch to still
//!   be at the snapshot the round was built on, and a round whose commit id is already in the
//!   table's history is recognised and not committed again.
//! - The same records are committed at most once, whoever commits them: a round carries where
//!   its records start ([`Round::start_offsets`]), and lands only while the table's progress
//!   is exactly there ([`CommitError::NotContinuous`] otherwise). A dead-letter round starts
//!   where its table's progress was when it was built (`crate::machine`'s dead-letter floor),
//!   and with [`Round::exact_start`] a partition it does not name must have no progress
//!   either: of two dead-letter rounds built on the same progress (a deposed coordinator's
//!   and its successor's), only the first lands.
//! - A commit that loses a race (another writer committed first) is rebuilt on the new base
//!   and retried, a bounded number of times.
//! - An upsert round (position deletes, computed from a primary-key index that reflects one
//!   snapshot) commits only on that snapshot ([`RoundBase::Snapshot`]): when `main` moved
//!   elsewhere, the commit fails with [`CommitError::BaseChanged`] instead of retrying, and
//!   the coordinator rebuilds the index from the new base and converts the records again.
//!   Retrying the same deletes on a base it has not seen could leave two live rows for a key
//!   (another writer's row) or delete rows another writer rewrote.
//!
//! A round with delete files is one *row-delta* snapshot (operation `overwrite`): a data
//! manifest for the new data files and a delete manifest for the position delete files, in
//! one manifest list.
//! - The same requirements and updates go to the embedded catalog or an external REST
//!   catalog ([`CommitTarget`]); both answer a lost race as [`CommitError::Conflict`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use iceberg::spec::{
    FormatVersion, ListType, ManifestFile, ManifestList, ManifestListWriter, ManifestWriterBuilder,
    MapType, NestedFieldRef, NullOrder, Operation, Schema, Snapshot, SnapshotReference,
    SnapshotRetention, SortDirection, SortField, SortOrder, StructType, Summary, TableMetadata,
    Transform, Type,
};
use iceberg::table::Table;
use iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent, TableRequirement, TableUpdate};
use inlet_catalog::rest::{MetadataPointerStore, DELETE_AFTER_COMMIT};
use inlet_catalog::CommitTarget;
use inlet_common::{ErrorKind, RetryPolicy};

/// Summary keys (docs/architecture.md, "Summary keys and table properties").
pub const COMMIT_ID: &str = "inlet.commit-id";
pub const OFFSETS: &str = "inlet.offsets";
pub const WATERMARK: &str = "inlet.watermark";
/// Each partition's watermark (JSON partition → epoch ms): an addition to docs/architecture.md's first keys, so
/// the watermark API can answer per partition and a restarted coordinator keeps them.
pub const PARTITION_WATERMARKS: &str = "inlet.partition-watermarks";
/// The Kafka topic id (a UUID) whose offsets `inlet.offsets` are: an addition to docs/architecture.md's first
/// keys, so a topic deleted and created again under the same name does not resume at the old
/// topic's offsets.
pub const TOPIC_ID: &str = "inlet.topic-id";
/// The epoch of the coordinator that committed the round ([`crate::lease`]): an addition to
/// docs/architecture.md's first keys. A round of a lower epoch than the table's is refused
/// ([`CommitError::Fenced`]).
pub const EPOCH: &str = "inlet.coordinator-epoch";
/// A table property: the `inlet.*` summary keys of Inlet's last commit, plus its
/// [`PROGRESS_SNAPSHOT_ID`] and [`PROGRESS_SEQUENCE_NUMBER`], as one JSON object of strings.
/// Set in the same metadata commit as the snapshot, so it is exactly as current. Properties
/// outlive snapshot expiry and other engines' rewrites, so the progress survives a history
/// from which other engines expired every snapshot Inlet wrote ([`Committer::committed`]).
pub const PROGRESS: &str = "inlet.progress";
/// In [`PROGRESS`]: the snapshot the keys are the summary of.
pub const PROGRESS_SNAPSHOT_ID: &str = "snapshot-id";
/// In [`PROGRESS`]: that snapshot's sequence number.
pub const PROGRESS_SEQUENCE_NUMBER: &str = "sequence-number";

pub use crate::commit_error::CommitError;
pub use crate::round::{Round, RoundBase};

pub(crate) const MAIN: &str = "main";
/// Attempts at a round that keeps losing races, each on the table reloaded, with a short
/// jittered wait between them so two committers that collided do not collide again.
pub(crate) const COMMIT_RETRY: RetryPolicy =
    RetryPolicy::new(8, Duration::from_millis(20), Duration::from_secs(1)).with_conflicts();

/// What [`COMMIT_RETRY`] decides from: only a lost race (`Conflict`) is tried again, on the
/// reloaded table. Anything else goes back to the caller, an unknown outcome too: the
/// caller's next try finds the round by its commit id if it landed (and a compaction's file
/// must then stay).
pub(crate) fn lost_race(e: &CommitError) -> ErrorKind {
    match e.kind() {
        ErrorKind::Conflict => ErrorKind::Conflict,
        _ => ErrorKind::Permanent,
    }
}

/// What a table's current snapshot says about conversion progress.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Committed {
    pub offsets: BTreeMap<i32, u64>,
    pub watermark_ms: Option<i64>,
    pub partition_watermarks: BTreeMap<i32, i64>,
    pub commit_id: Option<String>,
    /// The topic id the offsets belong to; None for progress written before Inlet recorded
    /// it (trusted as this topic's).
    pub topic_id: Option<String>,
    /// The progress came from the table property [`PROGRESS`]: no snapshot left on `main`
    /// carries it.
    pub from_property: bool,
    /// The epoch of the coordinator that committed it ([`EPOCH`]).
    pub epoch: Option<i64>,
}

impl Committed {
    /// Reads Inlet's keys (a snapshot summary, or the [`PROGRESS`] property's map).
    fn from_keys(props: &HashMap<String, String>, from_property: bool) -> Committed {
        let per_partition = |key: &str| {
            props
                .get(key)
                .and_then(|o| serde_json::from_str::<BTreeMap<String, serde_json::Value>>(o).ok())
                .map(|m| {
                    m.into_iter()
                        .filter_map(|(k, v)| Some((k.parse::<i32>().ok()?, v)))
                        .collect::<BTreeMap<_, _>>()
                })
                .unwrap_or_default()
        };
        Committed {
            offsets: per_partition(OFFSETS)
                .into_iter()
                .filter_map(|(p, v)| Some((p, v.as_u64()?)))
                .collect(),
            partition_watermarks: per_partition(PARTITION_WATERMARKS)
                .into_iter()
                .filter_map(|(p, v)| Some((p, v.as_i64()?)))
                .collect(),
            watermark_ms: props.get(WATERMARK).and_then(|w| w.parse().ok()),
            commit_id: props.get(COMMIT_ID).cloned(),
            topic_id: props.get(TOPIC_ID).cloned(),
            epoch: props.get(EPOCH).and_then(|e| e.parse().ok()),
            from_property,
        }
    }

    /// Forgets progress that belongs to another topic than `topic_id` (a deleted topic of the
    /// same name): its offsets and partition watermarks. The table watermark stays, as it
    /// never goes back. Returns whether it forgot anything.
    pub fn keep_only_topic(&mut self, topic_id: &str) -> bool {
        match &self.topic_id {
            Some(theirs) if theirs != topic_id => {
                self.offsets.clear();
                self.partition_watermarks.clear();
                self.commit_id = None;
                true
            }
            _ => false,
        }
    }
}

/// Commits rounds to tables of one catalog.
#[derive(Debug, Clone)]
pub struct Committer {
    catalog: Arc<dyn Catalog>,
    pub(crate) target: CommitTarget,
    /// The tables' storage as itself, which can list (for [`crate::orphans`]); None: no
    /// orphan sweeps.
    pub(crate) files: Option<inlet_catalog::storage::ObjectStoreStorage>,
}

impl Committer {
    /// A committer on the embedded catalog, whose pointers are in `pointers`.
    pub fn new(catalog: Arc<dyn Catalog>, pointers: Arc<dyn MetadataPointerStore>) -> Self {
        Self::with_target(catalog, CommitTarget::Pointers(pointers))
    }

    /// A committer that loads tables from `catalog` and commits to `target` (the same
    /// catalog's pointers, or an external REST catalog).
    pub fn with_target(catalog: Arc<dyn Catalog>, target: CommitTarget) -> Self {
        Committer {
            catalog,
            target,
            files: None,
        }
    }

    /// Lists table folders through `files` (the storage the tables' files are in), so the
    /// coordinators can sweep orphan files ([`crate::orphans`]).
    pub fn with_files(mut self, files: inlet_catalog::storage::ObjectStoreStorage) -> Self {
        self.files = Some(files);
        self
    }

    /// The table, if it exists.
    pub async fn load(&self, ident: &TableIdent) -> Result<Option<Table>, CommitError> {
        if !self.catalog.table_exists(ident).await? {
            return Ok(None);
        }
        Ok(Some(self.catalog.load_table(ident).await?))
    }

    /// Creates the table (and its namespace) with `schema` unless it exists; returns it.
    pub async fn create_if_missing(
        &self,
        ident: &TableIdent,
        schema: &Schema,
        spec: Option<iceberg::spec::UnboundPartitionSpec>,
    ) -> Result<Table, CommitError> {
        self.create_with_ids_if_missing(ident, schema, spec, &[])
            .await
    }

    /// Creates the table unless it exists, like [`Committer::create_if_missing`]; with
    /// `id_columns` (top-level columns), the table is sorted by them and, when they are all
    /// required, they are its identifier fields (Iceberg requires identifier fields to be
    /// required: optional ones, e.g. every column of `flatten_debezium`, are left out and a
    /// warning says so; upserts work the same, by Inlet's own index).
    pub async fn create_with_ids_if_missing(
        &self,
        ident: &TableIdent,
        schema: &Schema,
        spec: Option<iceberg::spec::UnboundPartitionSpec>,
        id_columns: &[String],
    ) -> Result<Table, CommitError> {
        if let Some(t) = self.load(ident).await? {
            return Ok(t);
        }
        let ns: &NamespaceIdent = ident.namespace();
        if !self.catalog.namespace_exists(ns).await? {
            match self.catalog.create_namespace(ns, HashMap::new()).await {
                Ok(_) => {}
                // Another coordinator created it meanwhile.
                Err(_) if self.catalog.namespace_exists(ns).await? => {}
                Err(e) => return Err(e.into()),
            }
        }
        let (schema, sort_order) = with_ids(ident, schema, id_columns)?;
        let mut creation = TableCreation::builder()
            .name(ident.name().to_string())
            .schema(schema)
            .properties(HashMap::from([
                ("write.format.default".to_string(), "parquet".to_string()),
                // Table topics commit often: any catalog (an external one too) deletes the
                // metadata files that drop off the log.
                (DELETE_AFTER_COMMIT.to_string(), "true".to_string()),
            ]))
            .build();
        creation.partition_spec = spec;
        creation.sort_order = sort_order;
        match self.catalog.create_table(ns, creation).await {
            Ok(t) => Ok(t),
            Err(_) if self.catalog.table_exists(ident).await? => {
                Ok(self.catalog.load_table(ident).await?)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Where conversion got to: Inlet's summary keys on the newest snapshot of `main` that has
    /// them, walking back from the current one through its parents. Other engines commit to
    /// the table too (a pyiceberg append or delete, Spark's `rewrite_data_files`, a Trino
    /// `DELETE`): their snapshots carry no `inlet.*` keys, and reading only the current one
    /// would start every partition again from the stream's start.
    ///
    /// When the walk ends at a parent that is gone (another engine's `expire_snapshots` left
    /// only its own snapshots), the progress comes from the table property [`PROGRESS`],
    /// which every round sets in its commit, if it passes [`expired_progress`]'s checks.
    /// Empty for a table where neither says anything.
    pub fn committed(table: &Table) -> Committed {
        let meta = table.metadata();
        match walk_main(meta, |s| {
            s.summary().additional_properties.contains_key(OFFSETS)
        }) {
            Walk::Found(snapshot) => {
                Committed::from_keys(&snapshot.summary().additional_properties, false)
            }
            Walk::Truncated { oldest_sequence } => expired_progress(meta, oldest_sequence)
                .map(|keys| Committed::from_keys(&keys, true))
                .unwrap_or_default(),
            Walk::Root => Committed::default(),
        }
    }

    /// Commits `round` to the table `ident` (created first if missing). Returns the snapshot
    /// id, or None when the round had already been committed.
    pub async fn commit(
        &self,
        ident: &TableIdent,
        round: &Round,
    ) -> Result<Option<i64>, CommitError> {
        // A round pinned to a table never creates one: the name may not be recreated under it
        // (the uuid itself is checked in the loop, on every table the commit is tried on).
        let table = match round.table_uuid {
            Some(expected) => self.load(ident).await?.ok_or(CommitError::TableReplaced {
                expected,
                found: None,
            })?,
            None => {
                let schema = creatable(
                    &round.schema,
                    round.partition_spec.as_ref(),
                    &round.id_columns,
                );
                self.create_with_ids_if_missing(
                    ident,
                    &schema,
                    round.partition_spec.clone(),
                    &round.id_columns,
                )
                .await?
            }
        };
        // The first attempt on the table just loaded, each further one (after a lost race)
        // on the table reloaded.
        let first = table;
        let outcome = inlet_common::retry(&COMMIT_RETRY, lost_race, |attempt| {
            let first = (attempt == 1).then(|| first.clone());
            async move {
                let table = match first {
                    Some(table) => table,
                    None => self.catalog.load_table(ident).await?,
                };
                self.attempt(&table, round).await
            }
        })
        .await;
        match outcome {
            Err(CommitError::Conflict(_)) => Err(CommitError::Contended(COMMIT_RETRY.max_attempts)),
            outcome => outcome,
        }
    }

    /// One attempt at `round` on `table`: the checks, then the commit; `Ok(None)` when the
    /// round is already in the table.
    async fn attempt(&self, table: &Table, round: &Round) -> Result<Option<i64>, CommitError> {
        if let Some(expected) = round.table_uuid {
            let found = table.metadata().uuid();
            if found != expected {
                return Err(CommitError::TableReplaced {
                    expected,
                    found: Some(found),
                });
            }
        }
        if already_committed(table.metadata(), &round.commit_id) {
            return Ok(None);
        }
        if let RoundBase::Snapshot(expected) = round.base {
            let found = table.metadata().current_snapshot().map(|s| s.snapshot_id());
            if found != expected {
                return Err(CommitError::BaseChanged { expected, found });
            }
        }
        fenced(table, round)?;
        continues(table, round)?;
        self.try_commit(table, round).await.map(Some)
    }

    async fn try_commit(&self, table: &Table, round: &Round) -> Result<i64, CommitError> {
        let meta = table.metadata();
        let parent = meta.current_snapshot().cloned();
        let sequence_number = meta.next_sequence_number();
        let snapshot_id = snapshot_id_for(&round.commit_id, meta);
        let (schema, evolve) = evolved_schema(table, round)?;
        let list_path = write_manifests(
            table,
            round,
            parent.as_deref(),
            &schema,
            snapshot_id,
            sequence_number,
        )
        .await?;
        let snapshot = Snapshot::builder()
            .with_snapshot_id(snapshot_id)
            .with_parent_snapshot_id(parent.as_ref().map(|p| p.snapshot_id()))
            .with_sequence_number(sequence_number)
            .with_timestamp_ms(round.timestamp_ms.max(meta.last_updated_ms() + 1))
            .with_manifest_list(list_path)
            .with_summary(Summary {
                // A row delta (data and position deletes) is an overwrite, as Iceberg's
                // RowDelta commits it.
                operation: if round.delete_files.is_empty() {
                    Operation::Append
                } else {
                    Operation::Overwrite
                },
                additional_properties: round_summary(round, parent.as_deref()),
            })
            .with_schema_id(schema.schema_id())
            .build();

        let mut requirements = main_requirements(meta, parent.as_ref().map(|p| p.snapshot_id()));
        let mut updates = Vec::new();
        if evolve {
            requirements.push(TableRequirement::CurrentSchemaIdMatch {
                current_schema_id: meta.current_schema_id(),
            });
            updates.push(TableUpdate::AddSchema {
                schema: schema.as_ref().clone(),
            });
            updates.push(TableUpdate::SetCurrentSchema { schema_id: -1 });
        }
        updates.push(progress_property(&snapshot));
        updates.extend(main_updates(snapshot));
        match self.target.commit(table, requirements, updates).await? {
            Some(_) => Ok(snapshot_id),
            None => Err(CommitError::Catalog("nothing to commit".into())),
        }
    }
}

/// The schema a round's files are written with: the table's current one, plus what the round
/// changed (`crate::rebase`), so another engine's schema change since the round was converted
/// is never reverted. Returns it, and whether it is a new schema the commit adds.
fn evolved_schema(table: &Table, round: &Round) -> Result<(Arc<Schema>, bool), CommitError> {
    let meta = table.metadata();
    let current = meta.current_schema();
    let rebased = crate::rebase::rebase(
        current,
        &round.schema,
        meta.last_column_id(),
        round.base_column_id,
    )
    .map_err(CommitError::SchemaConflict)?;
    let Some(fields) = rebased else {
        return Ok((current.clone(), false));
    };
    let id = meta
        .schemas_iter()
        .map(|s| s.schema_id())
        .max()
        .unwrap_or(0)
        + 1;
    // The table's identifier fields stay (the worker's schemas do not carry them), but for a
    // column that became optional (its source dropped a NOT NULL): Iceberg requires
    // identifier fields to be required.
    let identifiers: Vec<i32> = current
        .identifier_field_ids()
        .filter(|id| fields.field_by_id(*id).is_some_and(|f| f.required))
        .collect();
    if identifiers.len() < current.identifier_field_ids().count() {
        tracing::warn!(
            table = %table.identifier(),
            "an identifier column became optional: the table's schema no longer names identifier fields there (upserts still apply)"
        );
    }
    let s = Schema::builder()
        .with_schema_id(id)
        .with_fields(fields.fields().to_vec())
        .with_identifier_field_ids(identifiers)
        .build()?;
    Ok((Arc::new(s), true))
}

/// Writes the round's manifests (its data files, its position deletes; files inherit the
/// snapshot's sequence number), merges the parent's small ones, and writes the manifest list;
/// returns the list's path.
async fn write_manifests(
    table: &Table,
    round: &Round,
    parent: Option<&Snapshot>,
    schema: &Arc<Schema>,
    snapshot_id: i64,
    sequence_number: i64,
) -> Result<String, CommitError> {
    let meta = table.metadata();
    let file_io = table.file_io();
    let location = meta.location().trim_end_matches('/').to_string();
    let spec = meta.default_partition_spec().clone();
    let mut manifests: Vec<ManifestFile> = Vec::new();
    for (files, name, deletes) in [
        (&round.files, "m0", false),
        (&round.delete_files, "m1", true),
    ] {
        if !files.is_empty() {
            let path = format!("{location}/metadata/{snapshot_id:016x}-{name}.avro");
            let new = NewManifest {
                snapshot_id,
                schema,
                spec: &spec,
                deletes,
            };
            manifests.push(new.write(file_io, path, files).await?);
        }
    }
    if let Some(parent) = parent {
        let bytes = file_io.new_input(parent.manifest_list())?.read().await?;
        let list = ManifestList::parse_with_version(&bytes, FormatVersion::V2)?;
        let (existing, merged) = crate::manifest_merge::merge(
            list.consume_entries().into_iter().collect(),
            meta,
            schema,
            file_io,
            &location,
            snapshot_id,
        )
        .await?;
        if merged > 0 {
            tracing::debug!(table = %table.identifier(), manifests = merged, "merged small manifests");
        }
        manifests.extend(existing);
    }
    let list_path = format!(
        "{location}/metadata/snap-{snapshot_id}-1-{}.avro",
        round.commit_id
    );
    let mut list_writer = ManifestListWriter::v2(
        file_io.new_output(&list_path)?.writer().await?,
        snapshot_id,
        parent.map(|p| p.snapshot_id()),
        sequence_number,
    );
    list_writer.add_manifests(manifests.into_iter())?;
    list_writer.close().await?;
    Ok(list_path)
}

/// A manifest a new snapshot adds: of data files, or of position deletes (`deletes`).
pub(crate) struct NewManifest<'a> {
    pub snapshot_id: i64,
    pub schema: &'a Arc<Schema>,
    pub spec: &'a iceberg::spec::PartitionSpecRef,
    pub deletes: bool,
}

impl NewManifest<'_> {
    /// Writes the manifest of `files` at `path` (they inherit the snapshot's sequence number).
    pub(crate) async fn write(
        &self,
        file_io: &iceberg::io::FileIO,
        path: String,
        files: &[iceberg::spec::DataFile],
    ) -> Result<ManifestFile, CommitError> {
        let builder = ManifestWriterBuilder::new(
            file_io.new_output(path)?,
            Some(self.snapshot_id),
            self.schema.clone(),
            self.spec.as_ref().clone(),
        );
        let mut writer = if self.deletes {
            builder.build_v2_deletes()
        } else {
            builder.build_v2_data()
        };
        for f in files {
            writer.add_file(f.clone(), -1)?;
        }
        Ok(writer.write_manifest_file().await?)
    }
}

/// A round's snapshot summary: Iceberg's counts (totals carried from `parent`) and Inlet's
/// progress keys.
fn round_summary(round: &Round, parent: Option<&Snapshot>) -> HashMap<String, String> {
    let mut props: HashMap<String, String> = HashMap::new();
    let added_records: u64 = round.files.iter().map(|f| f.record_count()).sum();
    let added_size: u64 = round.files.iter().map(|f| f.file_size_in_bytes()).sum();
    let previous = parent.map(|p| &p.summary().additional_properties);
    let total = |key: &str, added: u64| -> String {
        let before: u64 = previous
            .and_then(|p| p.get(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        (before + added).to_string()
    };
    props.insert("added-data-files".into(), round.files.len().to_string());
    props.insert("added-records".into(), added_records.to_string());
    props.insert("added-files-size".into(), added_size.to_string());
    props.insert(
        "total-data-files".into(),
        total("total-data-files", round.files.len() as u64),
    );
    props.insert(
        "total-records".into(),
        total("total-records", added_records),
    );
    props.insert(
        "total-files-size".into(),
        total("total-files-size", added_size),
    );
    let added_deletes: u64 = round.delete_files.iter().map(|f| f.record_count()).sum();
    let added_delete_size: u64 = round
        .delete_files
        .iter()
        .map(|f| f.file_size_in_bytes())
        .sum();
    if !round.delete_files.is_empty() {
        props.insert(
            "added-delete-files".into(),
            round.delete_files.len().to_string(),
        );
        props.insert(
            "added-position-delete-files".into(),
            round.delete_files.len().to_string(),
        );
        props.insert("added-position-deletes".into(), added_deletes.to_string());
        props.insert(
            "total-files-size".into(),
            total("total-files-size", added_size + added_delete_size),
        );
    }
    props.insert(
        "total-delete-files".into(),
        total("total-delete-files", round.delete_files.len() as u64),
    );
    props.insert(
        "total-position-deletes".into(),
        total("total-position-deletes", added_deletes),
    );
    props.insert("total-equality-deletes".into(), "0".into());
    props.insert(COMMIT_ID.into(), round.commit_id.clone());
    let offsets: BTreeMap<String, u64> = round
        .offsets
        .iter()
        .map(|(p, o)| (p.to_string(), *o))
        .collect();
    props.insert(
        OFFSETS.into(),
        serde_json::to_string(&offsets).unwrap_or_default(),
    );
    if let Some(w) = round.watermark_ms {
        props.insert(WATERMARK.into(), w.to_string());
    }
    if let Some(id) = &round.topic_id {
        props.insert(TOPIC_ID.into(), id.clone());
    }
    if let Some(epoch) = round.epoch {
        props.insert(EPOCH.into(), epoch.to_string());
    }
    if !round.partition_watermarks.is_empty() {
        let per: BTreeMap<String, i64> = round
            .partition_watermarks
            .iter()
            .map(|(p, w)| (p.to_string(), *w))
            .collect();
        props.insert(
            PARTITION_WATERMARKS.into(),
            serde_json::to_string(&per).unwrap_or_default(),
        );
    }
    props
}

/// The [`PROGRESS`] table property of `snapshot`: its `inlet.*` keys, which outlive the
/// snapshot, with its id and sequence number.
fn progress_property(snapshot: &Snapshot) -> TableUpdate {
    let mut progress: HashMap<String, String> = snapshot
        .summary()
        .additional_properties
        .iter()
        .filter(|(k, _)| k.starts_with("inlet."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    progress.insert(
        PROGRESS_SNAPSHOT_ID.into(),
        snapshot.snapshot_id().to_string(),
    );
    progress.insert(
        PROGRESS_SEQUENCE_NUMBER.into(),
        snapshot.sequence_number().to_string(),
    );
    TableUpdate::SetProperties {
        updates: HashMap::from([(
            PROGRESS.to_string(),
            serde_json::to_string(&progress).unwrap_or_default(),
        )]),
    }
}

impl Committer {
    /// Sets table properties of `ident` through the same commit path.
    pub async fn set_properties(
        &self,
        ident: &TableIdent,
        properties: HashMap<String, String>,
    ) -> Result<(), CommitError> {
        let table = self.catalog.load_table(ident).await?;
        let updates = vec![TableUpdate::SetProperties {
            updates: properties,
        }];
        self.target.commit(&table, Vec::new(), updates).await?;
        Ok(())
    }
}

/// What a new `main` snapshot on `parent` requires: the same table, `main` still at `parent`.
pub(crate) fn main_requirements(
    meta: &TableMetadata,
    parent: Option<i64>,
) -> Vec<TableRequirement> {
    vec![
        TableRequirement::UuidMatch { uuid: meta.uuid() },
        TableRequirement::RefSnapshotIdMatch {
            r#ref: MAIN.to_string(),
            snapshot_id: parent,
        },
    ]
}

/// The updates that add `snapshot` and point `main` at it.
pub(crate) fn main_updates(snapshot: Snapshot) -> [TableUpdate; 2] {
    let snapshot_id = snapshot.snapshot_id();
    [
        TableUpdate::AddSnapshot { snapshot },
        TableUpdate::SetSnapshotRef {
            ref_name: MAIN.to_string(),
            reference: SnapshotReference::new(
                snapshot_id,
                SnapshotRetention::branch(None, None, None),
            ),
        },
    ]
}

/// Whether `main`'s history holds the round `commit_id` (or, when that history was cut by
/// another engine's expiry, whether the [`PROGRESS`] property says it was the last round).
pub fn already_committed(meta: &TableMetadata, commit_id: &str) -> bool {
    // Only `main`'s history counts: a snapshot that a rollback took off it no longer holds
    // its rows in the table, and its round must land again.
    let carries = |s: &Snapshot| {
        s.summary()
            .additional_properties
            .get(COMMIT_ID)
            .map(String::as_str)
            == Some(commit_id)
    };
    match walk_main(meta, carries) {
        Walk::Found(_) => true,
        Walk::Truncated { oldest_sequence } => expired_progress(meta, oldest_sequence)
            .is_some_and(|keys| keys.get(COMMIT_ID).map(String::as_str) == Some(commit_id)),
        Walk::Root => false,
    }
}

/// How a walk back through `main`'s history ended.
enum Walk<'a> {
    /// At the newest snapshot that matched.
    Found(&'a Snapshot),
    /// Before any matched, at a parent that is no longer in the metadata (expired);
    /// `oldest_sequence` is the sequence number of the oldest snapshot still there.
    Truncated { oldest_sequence: i64 },
    /// At the first snapshot (no parent), or no snapshot at all, or a history that loops.
    Root,
}

/// Walks `main` from its current snapshot back through the parents until `matches`.
fn walk_main<'a>(meta: &'a TableMetadata, matches: impl Fn(&Snapshot) -> bool) -> Walk<'a> {
    let Some(mut snapshot) = meta.current_snapshot() else {
        return Walk::Root;
    };
    let mut seen = HashSet::new();
    loop {
        if matches(snapshot) {
            return Walk::Found(snapshot.as_ref());
        }
        // A parent id that loops back (a corrupt history) ends the walk.
        if !seen.insert(snapshot.snapshot_id()) {
            return Walk::Root;
        }
        let Some(parent) = snapshot.parent_snapshot_id() else {
            return Walk::Root;
        };
        match meta.snapshot_by_id(parent) {
            Some(p) => snapshot = p,
            None => {
                return Walk::Truncated {
                    oldest_sequence: snapshot.sequence_number(),
                }
            }
        }
    }
}

/// The [`PROGRESS`] property's keys, when they can stand for a history that expiry cut at a
/// snapshot of sequence number `oldest_sequence`: the snapshot they describe is gone from the
/// metadata (expired, not merely taken off `main`: a snapshot still listed but not an
/// ancestor was rolled back, and its rows are not in the table), and it is older than every
/// snapshot left on `main`, as an expired ancestor is.
///
/// Not caught: a rollback to before Inlet's last round followed by an expiry of everything
/// older than the rollback's target. The table then resumes after the rolled-back round.
fn expired_progress(meta: &TableMetadata, oldest_sequence: i64) -> Option<HashMap<String, String>> {
    let keys: HashMap<String, String> =
        serde_json::from_str(meta.properties().get(PROGRESS)?).ok()?;
    let snapshot: i64 = keys.get(PROGRESS_SNAPSHOT_ID)?.parse().ok()?;
    let sequence: i64 = keys.get(PROGRESS_SEQUENCE_NUMBER)?.parse().ok()?;
    (meta.snapshot_by_id(snapshot).is_none() && sequence < oldest_sequence).then_some(keys)
}

/// Whether a coordinator of a newer epoch than `round`'s has committed to `table`. Checked
/// on the base the commit requires (`assert-ref-snapshot-id`), so it is atomic with it.
fn fenced(table: &Table, round: &Round) -> Result<(), CommitError> {
    let Some(ours) = round.epoch else {
        return Ok(());
    };
    match Committer::committed(table).epoch {
        Some(theirs) if theirs > ours => Err(CommitError::Fenced { ours, theirs }),
        _ => Ok(()),
    }
}

/// Whether `round` starts where `table`'s progress (for the round's topic) ends: every
/// partition the table has progress for is at the round's start there (at 0 for a partition an
/// [`Round::exact_start`] round does not name; not checked for one another round does not).
fn continues(table: &Table, round: &Round) -> Result<(), CommitError> {
    if round.start_offsets.is_empty() && !round.exact_start {
        return Ok(());
    }
    let mut progress = Committer::committed(table);
    if let Some(topic) = &round.topic_id {
        progress.keep_only_topic(topic);
    }
    for (partition, at) in &progress.offsets {
        let start = match round.start_offsets.get(partition) {
            Some(start) => *start,
            None if round.exact_start => 0,
            None => continue,
        };
        if *at != start {
            return Err(CommitError::NotContinuous {
                partition: *partition,
                start,
                table: *at,
            });
        }
    }
    Ok(())
}

/// A snapshot id from the commit id (FNV-1a), positive and not yet used by the table.
pub(crate) fn snapshot_id_for(commit_id: &str, meta: &TableMetadata) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in commit_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut id = (h & (i64::MAX as u64)) as i64;
    while id == 0 || meta.snapshot_by_id(id).is_some() {
        id = id.wrapping_add(1) & i64::MAX;
    }
    id
}

/// `schema` with `id_columns` as identifier fields (when all are required), and the sort order
/// by them; the schema unchanged and no sort order without id columns.
/// The schema to create a missing table with, for a round converted with `schema`. A
/// catalog's create gives the table fresh ids (in the order of
/// [`inlet_table_worker::fresh_ids`], which the worker uses for a new table too); a schema
/// that evolved within the round (a column added after a nested one) is not in that order,
/// and the round's files would not fit the table. So the table is created with the largest
/// part of `schema` up to some id that creation keeps as it is, and the round's commit adds
/// the columns above that id with their own ids (`crate::rebase`). `schema` itself when no
/// part fits, or when the partition spec or the id columns need a column above it.
fn creatable(
    schema: &Schema,
    spec: Option<&iceberg::spec::UnboundPartitionSpec>,
    id_columns: &[String],
) -> Schema {
    let fields = schema.as_struct().fields();
    let mut ids: Vec<i32> = schema.field_id_to_name_map().keys().copied().collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    for k in ids {
        let Some(part) = fields_up_to(fields, k) else {
            continue;
        };
        if part.is_empty() || inlet_table_worker::fresh_ids(&part) != part {
            continue;
        }
        let Ok(candidate) = Schema::builder()
            .with_schema_id(schema.schema_id())
            .with_fields(part)
            .build()
        else {
            continue;
        };
        let spec_fits = spec.is_none_or(|s| s.fields().iter().all(|f| f.source_id <= k));
        let ids_fit = id_columns
            .iter()
            .all(|c| candidate.as_struct().field_by_name(c).is_some());
        if spec_fits && ids_fit {
            return candidate;
        }
        break;
    }
    schema.clone()
}

/// `fields` without the fields whose id is above `k`; None when that would leave a list or
/// map without its element, key or value, or a struct without fields.
fn fields_up_to(fields: &[NestedFieldRef], k: i32) -> Option<Vec<NestedFieldRef>> {
    let mut kept = Vec::new();
    for f in fields.iter().filter(|f| f.id <= k) {
        let ty = type_up_to(&f.field_type, k)?;
        let mut field = (**f).clone();
        *field.field_type = ty;
        kept.push(Arc::new(field));
    }
    Some(kept)
}

fn type_up_to(ty: &Type, k: i32) -> Option<Type> {
    match ty {
        Type::Primitive(_) => Some(ty.clone()),
        Type::Struct(s) => {
            let fields = fields_up_to(s.fields(), k)?;
            (!fields.is_empty()).then(|| Type::Struct(StructType::new(fields)))
        }
        Type::List(l) => {
            (l.element_field.id <= k).then_some(())?;
            let mut element = (*l.element_field).clone();
            *element.field_type = type_up_to(&l.element_field.field_type, k)?;
            Some(Type::List(ListType::new(Arc::new(element))))
        }
        Type::Map(m) => {
            (m.key_field.id <= k && m.value_field.id <= k).then_some(())?;
            let mut key = (*m.key_field).clone();
            *key.field_type = type_up_to(&m.key_field.field_type, k)?;
            let mut value = (*m.value_field).clone();
            *value.field_type = type_up_to(&m.value_field.field_type, k)?;
            Some(Type::Map(MapType::new(Arc::new(key), Arc::new(value))))
        }
    }
}

fn with_ids(
    ident: &TableIdent,
    schema: &Schema,
    id_columns: &[String],
) -> Result<(Schema, Option<SortOrder>), CommitError> {
    if id_columns.is_empty() {
        return Ok((schema.clone(), None));
    }
    let mut fields = Vec::new();
    for c in id_columns {
        let f = schema.as_struct().field_by_name(c).ok_or_else(|| {
            CommitError::Catalog(format!(
                "table.topic.id.columns: {c:?} is not a top-level column of {ident}"
            ))
        })?;
        fields.push(f.clone());
    }
    let sort_order = SortOrder::builder()
        .with_order_id(1)
        .with_fields(
            fields
                .iter()
                .map(|f| SortField {
                    source_id: f.id,
                    transform: Transform::Identity,
                    direction: SortDirection::Ascending,
                    null_order: NullOrder::First,
                })
                .collect(),
        )
        .build_unbound()?;
    if fields.iter().all(|f| f.required) {
        let schema = schema
            .clone()
            .into_builder()
            .with_identifier_field_ids(fields.iter().map(|f| f.id))
            .build()?;
        Ok((schema, Some(sort_order)))
    } else {
        tracing::warn!(
            table = %ident,
            ?id_columns,
            "id columns that are optional cannot be Iceberg identifier fields; the table gets none (upserts still apply)"
        );
        Ok((schema.clone(), Some(sort_order)))
    }
}

#[cfg(test)]
mod tests {
    use super::CommitError;
    use inlet_common::ErrorKind;

    #[test]
    fn a_worker_failure_keeps_the_workers_error_and_its_kind() {
        let closed: inlet_table_worker::Error = inlet_table_worker::MemoryError::Closed.into();
        let e = CommitError::Worker {
            what: "compaction memory".into(),
            source: Box::new(closed),
        };
        assert_eq!(e.kind(), ErrorKind::Shutdown);
        let source = std::error::Error::source(&e).expect("a typed source");
        assert!(
            source
                .downcast_ref::<Box<inlet_table_worker::Error>>()
                .is_some(),
            "{source:?}"
        );
        assert!(e.to_string().starts_with("compaction memory: "), "{e}");
    }
}
