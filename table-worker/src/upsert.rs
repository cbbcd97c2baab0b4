//! Upsert and CDC table topics (`table.topic.id.columns` with `table.topic.upsert.enable` or
//! `table.topic.cdc.field`): the table holds the latest row per key. A later record with the
//! same key removes the earlier row; a CDC delete (`D`, Debezium `d`) removes it and writes
//! no row. Removed rows become *position deletes* (data file path, row position), which every
//! engine Inlet is tested with reads (docs/table-worker.md, "Upsert and CDC").
//!
//! How a job applies its records ([`dedupe`], then [`apply`]):
//! 1. Before writing, the rows of the job are de-duplicated: per key only the last record
//!    counts (last write wins); earlier rows and delete rows are dropped, so a key written
//!    twice in one job leaves one row in the files.
//! 2. The rows are written as data files; then the id columns of the new files are read back
//!    to learn each new row's (file, position).
//! 3. Each key's previous live row (from the [`KeyIndex`]) gets a position delete, written
//!    in the partition of the data file it points into.
//! 4. Only once the delete files are written, the index is moved to the new rows (or forgets
//!    deleted keys). A job that fails before leaves the index as it was.
//!
//! Jobs of a table run one at a time, so a later job of the same round sees the earlier
//! job's rows in the index: its position deletes may point into a file of the same round,
//! which Iceberg applies (a position delete applies to data files with a sequence number up
//! to its own).
//!
//! Keys are the id columns' values, encoded with a type tag per value (integers of any width
//! as i64, so widening int→long keeps keys equal). A null id value is a value like any other.
//!
//! Invariants:
//! - Per key, at most one live row in the table: the one the index points at.
//! - The index reflects every job handed to the coordinator since the table was registered
//!   (committed or not). When outputs are discarded, the index is rebuilt from the table
//!   ([`rebuild`]).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch};
use arrow::datatypes::DataType;
use iceberg::io::FileIO;
use iceberg::spec::{DataFile, Schema, Struct};

use crate::data_file::{FileSettings, FileTarget};
use crate::error::{Error, Result};
use crate::index_checkpoint::{CaughtUp, CheckpointOf, Written};
use crate::live_files::{encode_keys, read_keys, rebuild};
pub use crate::live_files::{read_position_deletes, LiveDataFile, LiveFiles};
use crate::pk_index::{FileRef, KeyIndex, Location};
use crate::transform::{ValueTransform, OP_COLUMN};

/// The default memory budget that all upsert tables' primary-key indexes on a node share.
pub const DEFAULT_INDEX_BUDGET: usize = 256 << 20;

/// How a table topic upserts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpsertSpec {
    /// `table.topic.id.columns`: top-level columns of the table.
    pub id_columns: Vec<String>,
    /// `table.topic.cdc.field`: the column holding the operation; None: every record upserts.
    pub cdc_field: Option<String>,
    /// The memory of index entries kept before spilling to `index_dir` (normally the node's
    /// one shared budget).
    pub index_budget: crate::pk_index::IndexBudget,
    /// Where the index spills (owned by the index: emptied when it is built).
    pub index_dir: PathBuf,
    /// The keys are applied elsewhere (a cluster's converter: the table's coordinator holds
    /// the one index, see [`TableIndex`]): jobs write their rows de-duplicated, write no
    /// position deletes, and return the keys they delete ([`crate::JobOutput::deleted_keys`]).
    pub deferred: bool,
}

impl UpsertSpec {
    /// Upsert mode from a topic's configs (`inlet_ingest::TableTopicConfig`, read
    /// by the node): id columns with `upsert.enable=true` or a
    /// `cdc.field`; None when neither is set (id columns alone keep a table append-only).
    /// With `flatten_debezium`, the operation is the `_op` column the transform adds: it is
    /// the CDC field when none is given, and `op` (the envelope's name for it) means it too.
    pub fn from_configs(
        id_columns: &[String],
        upsert_enable: bool,
        cdc_field: Option<&str>,
        transform: ValueTransform,
        index_budget: crate::pk_index::IndexBudget,
        index_dir: PathBuf,
    ) -> Result<Option<Self>> {
        let id_columns = id_columns.to_vec();
        let mut cdc_field = cdc_field
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .map(str::to_string);
        if !upsert_enable && cdc_field.is_none() {
            return Ok(None);
        }
        if id_columns.is_empty() {
            return Err(Error::Schema(
                "table.topic.upsert.enable and table.topic.cdc.field need table.topic.id.columns"
                    .into(),
            ));
        }
        if transform == ValueTransform::FlattenDebezium
            && cdc_field.as_deref().is_none_or(|f| f == "op")
        {
            cdc_field = Some(OP_COLUMN.to_string());
        }
        Ok(Some(UpsertSpec {
            id_columns,
            cdc_field,
            index_budget,
            index_dir,
            deferred: false,
        }))
    }

    /// The field ids of the id columns in `schema`; an error names a missing or nested column.
    pub fn id_field_ids(&self, schema: &Schema) -> Result<Vec<i32>> {
        self.id_columns
            .iter()
            .map(|c| {
                schema
                    .as_struct()
                    .field_by_name(c)
                    .filter(|f| f.field_type.is_primitive())
                    .map(|f| f.id)
                    .ok_or_else(|| {
                        Error::Schema(format!(
                            "table.topic.id.columns: {c:?} is not a top-level primitive column of the table"
                        ))
                    })
            })
            .collect()
    }
}

/// What a record does to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Insert or update: the record's row becomes the key's row.
    Upsert,
    /// Delete: the key's row goes away, no row is written.
    Delete,
}

impl Op {
    /// The operation a CDC field's value names: `D`/`d` delete; `I`, `U`, Debezium `c`, `r`,
    /// `u`, a null or anything else upsert.
    pub(crate) fn parse(value: Option<&str>) -> Op {
        match value.map(str::trim) {
            Some("D" | "d") => Op::Delete,
            _ => Op::Upsert,
        }
    }
}

/// The keys of one job, after [`dedupe`]: each key once, with the operation of its last
/// record, in the order of those records.
pub(crate) type KeyOps = Vec<(Vec<u8>, Op)>;

/// Keeps, per key, only the last record's row (and none for a delete). `tombstones` are
/// deletes by key from records without a row (upsert tombstones), each with how many rows came
/// before it. Returns the remaining rows and each key's final operation.
pub(crate) fn dedupe(
    spec: &UpsertSpec,
    batches: Vec<RecordBatch>,
    tombstones: &[(u64, Vec<u8>)],
) -> Result<(Vec<RecordBatch>, KeyOps)> {
    // Events in record order: a row is (its index, 1), a tombstone (rows before it, 0).
    type Position = (u64, u8);
    let mut ops: Vec<Op> = Vec::new();
    let mut starts = Vec::with_capacity(batches.len());
    // key → position of its last event.
    let mut last: HashMap<Vec<u8>, Position> = HashMap::new();
    for batch in &batches {
        starts.push(ops.len());
        let keys = encode_keys(&id_columns(spec, batch)?, batch.num_rows())?;
        for (key, op) in keys.into_iter().zip(ops_of(spec, batch)?) {
            last.insert(key, (ops.len() as u64, 1));
            ops.push(op);
        }
    }
    for (at, key) in tombstones {
        let event = (*at, 0);
        let e = last.entry(key.clone()).or_insert(event);
        if *e < event {
            *e = event;
        }
    }
    let mut order: Vec<(Position, Vec<u8>)> = last.into_iter().map(|(k, p)| (p, k)).collect();
    order.sort_unstable_by_key(|(p, _)| *p);
    let mut keep = vec![false; ops.len()];
    let mut key_ops = Vec::with_capacity(order.len());
    for ((at, kind), key) in order {
        let op = if kind == 0 {
            Op::Delete
        } else {
            ops[at as usize]
        };
        if kind == 1 {
            keep[at as usize] = op == Op::Upsert;
        }
        key_ops.push((key, op));
    }
    let mut out = Vec::with_capacity(batches.len());
    for (batch, start) in batches.into_iter().zip(starts) {
        let mask = &keep[start..start + batch.num_rows()];
        if mask.iter().all(|k| *k) {
            out.push(batch);
        } else if mask.iter().any(|k| *k) {
            out.push(arrow::compute::filter_record_batch(
                &batch,
                &BooleanArray::from(mask.to_vec()),
            )?);
        }
    }
    Ok((out, key_ops))
}

fn id_columns(spec: &UpsertSpec, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
    spec.id_columns
        .iter()
        .map(|c| {
            batch.column_by_name(c).cloned().ok_or_else(|| {
                Error::Schema(format!(
                    "table.topic.id.columns: the rows have no column {c:?}"
                ))
            })
        })
        .collect()
}

fn ops_of(spec: &UpsertSpec, batch: &RecordBatch) -> Result<Vec<Op>> {
    let Some(field) = &spec.cdc_field else {
        return Ok(vec![Op::Upsert; batch.num_rows()]);
    };
    let column = batch.column_by_name(field).ok_or_else(|| {
        Error::Schema(format!(
            "table.topic.cdc.field: the rows have no column {field:?}"
        ))
    })?;
    let column = arrow::compute::cast(column, &DataType::Utf8)?;
    let strings = column.as_string::<i32>();
    Ok((0..strings.len())
        .map(|i| Op::parse((!strings.is_null(i)).then(|| strings.value(i))))
        .collect())
}

/// Applies a job's keys to the index: writes the position deletes of the rows they replace or
/// delete, then points the index at the job's new rows. Returns the delete files.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn apply(
    index: &mut KeyIndex,
    target: &FileTarget,
    prefix: &str,
    id_field_ids: &[i32],
    new_files: &[DataFile],
    key_ops: KeyOps,
    settings: &FileSettings,
) -> Result<Vec<DataFile>> {
    let new_rows = intern(index, read_files(target, id_field_ids, new_files).await?);
    apply_located(index, target, prefix, new_rows, key_ops, settings).await
}

/// The keys of every file of `files`, by row position, read all at once.
async fn read_files(
    target: &FileTarget,
    id_field_ids: &[i32],
    files: &[DataFile],
) -> Result<JobKeys> {
    let read = files.iter().map(|f| async move {
        let keys = read_keys(&target.file_io, f.file_path(), id_field_ids).await?;
        let file = FileRef {
            path: f.file_path().to_string(),
            partition: f.partition().clone(),
            spec_id: target.spec.spec_id(),
        };
        Ok::<_, Error>((file, keys))
    });
    Ok(JobKeys {
        files: futures::future::try_join_all(read).await?,
    })
}

/// Interns the files of `keys` in `index`: where each key's row is (the last, should one
/// repeat).
fn intern(index: &mut KeyIndex, keys: JobKeys) -> HashMap<Vec<u8>, Location> {
    let mut new_rows = HashMap::new();
    for (file, keys) in keys.files {
        let file = index.file_id(file);
        for (pos, key) in keys.into_iter().enumerate() {
            new_rows.insert(
                key,
                Location {
                    file,
                    pos: pos as u64,
                },
            );
        }
    }
    new_rows
}

/// [`apply`] once the new rows are located.
async fn apply_located(
    index: &mut KeyIndex,
    target: &FileTarget,
    prefix: &str,
    mut new_rows: HashMap<Vec<u8>, Location>,
    key_ops: KeyOps,
    settings: &FileSettings,
) -> Result<Vec<DataFile>> {
    // The rows the keys had, grouped by the partition of their data file.
    let mut deletes: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for (key, _) in &key_ops {
        if let Some(old) = index.get(key)? {
            deletes.entry(old.file).or_default().push(old.pos);
        }
    }
    let mut by_partition: HashMap<(i32, Struct), Vec<(String, u64)>> = HashMap::new();
    for (file, positions) in deletes {
        let f = index
            .file(file)
            .ok_or_else(|| Error::Schema(format!("primary-key index: unknown file id {file}")))?;
        if f.spec_id != target.spec.spec_id() {
            // Inlet never evolves a table's spec; another writer did.
            return Err(Error::Schema(format!(
                "{} was written with partition spec {}, the table's is now {}: upserts across a partition spec change are not supported",
                f.path,
                f.spec_id,
                target.spec.spec_id()
            )));
        }
        by_partition
            .entry((f.spec_id, f.partition.clone()))
            .or_default()
            .extend(positions.into_iter().map(|p| (f.path.clone(), p)));
    }
    let mut delete_files = Vec::new();
    let mut groups: Vec<_> = by_partition.into_iter().collect();
    groups.sort_by(|a, b| a.1.cmp(&b.1));
    for (n, ((_, partition), rows)) in groups.into_iter().enumerate() {
        delete_files.extend(
            crate::position_delete::write(
                target,
                &format!("{prefix}-g{n:03}"),
                Some(partition),
                rows,
                settings,
            )
            .await?,
        );
    }
    // Only now, with the delete files written, does the index move.
    for (key, op) in key_ops {
        match (op, new_rows.remove(&key)) {
            (Op::Upsert, Some(at)) => index.put(key, at)?,
            (Op::Upsert, None) => {
                return Err(Error::Schema(
                    "an upserted row is missing from the files just written".into(),
                ))
            }
            (Op::Delete, _) => index.remove(&key)?,
        }
    }
    Ok(delete_files)
}

/// A keyed table's primary-key index held by its coordinator, in a cluster (docs/architecture.md,
/// "Cluster"): the partitions convert on their owners with [`UpsertSpec::deferred`] keys, and
/// the coordinator applies each job's rows and deleted keys here, job after job in the order
/// they ran per partition, writing the round's position deletes.
///
/// Invariants: as the worker's index (module docs), it reflects every job applied since it was
/// built from the table; a failed [`TableIndex::apply_job`] may leave it part way, and it must
/// then be built again.
#[derive(Debug)]
pub struct TableIndex {
    index: KeyIndex,
    spec: UpsertSpec,
    /// The snapshot whose live rows the index holds exactly, if it does: set by the caller
    /// once a round lands ([`TableIndex::landed`]), cleared by every job applied.
    snapshot: Option<i64>,
}

impl TableIndex {
    /// The index of a table whose current schema is `schema` (None: not created yet) and whose
    /// current snapshot lists the `live` files, rebuilt from them. It spills under
    /// `spec.index_dir`, in a directory of its own.
    pub async fn build(
        spec: &UpsertSpec,
        file_io: &FileIO,
        schema: Option<&Schema>,
        live: &LiveFiles,
    ) -> Result<Self> {
        let index = new_index(spec, "coordinator", file_io, schema, live).await?;
        Ok(TableIndex {
            index,
            spec: spec.clone(),
            snapshot: None,
        })
    }

    /// The index of a table whose current snapshot lists the `now` files, caught up from the
    /// checkpoint at `path` of `of`'s snapshot, which listed the `then` files
    /// (`crate::index_checkpoint`); [`FromCheckpoint::Refused`] when the checkpoint cannot
    /// say (the caller builds the index from the table instead).
    pub async fn from_checkpoint(
        spec: &UpsertSpec,
        file_io: &FileIO,
        path: &str,
        of: &CheckpointOf,
        then: &LiveFiles,
        now: &LiveFiles,
    ) -> Result<FromCheckpoint> {
        let mut index = fresh_index(spec, "checkpoint")?;
        Ok(
            match crate::index_checkpoint::catch_up(&mut index, file_io, path, of, then, now)
                .await?
            {
                Ok(caught) => FromCheckpoint::Built(
                    Box::new(TableIndex {
                        index,
                        spec: spec.clone(),
                        snapshot: None,
                    }),
                    caught,
                ),
                Err(why) => FromCheckpoint::Refused(why),
            },
        )
    }

    /// Writes the index to `path` as a checkpoint of `of` ([`TableIndex::snapshot`] must be
    /// `of`'s snapshot).
    pub async fn write_checkpoint(
        &self,
        file_io: &FileIO,
        path: &str,
        of: &CheckpointOf,
    ) -> Result<Written> {
        if self.snapshot != Some(of.snapshot_id) {
            return Err(Error::Schema(format!(
                "the primary-key index holds snapshot {:?}, not {}",
                self.snapshot, of.snapshot_id
            )));
        }
        crate::index_checkpoint::write(&self.index, of, file_io, path).await
    }

    /// The snapshot whose live rows the index holds exactly, if it does.
    pub fn snapshot(&self) -> Option<i64> {
        self.snapshot
    }

    /// Says the index holds exactly the live rows of `snapshot`: the one it was built from, or
    /// the one the round of every job applied since landed as (None: not known).
    pub fn landed(&mut self, snapshot: Option<i64>) {
        self.snapshot = snapshot;
    }

    /// Every key's live row as (key, data file path, row position), sorted: for checks.
    pub fn live_rows(&self) -> Result<Vec<(Vec<u8>, String, u64)>> {
        let mut rows = Vec::new();
        let mut live = self.index.live_entries()?;
        while let Some((key, at)) = live.next()? {
            let file = self.index.file(at.file).map(|f| f.path.clone());
            rows.push((key, file.unwrap_or_default(), at.pos));
        }
        rows.sort();
        Ok(rows)
    }

    /// Applies one job of a deferred conversion: its data `files` (written with `schema`, in
    /// the table's partition spec `target.spec`), each key's row, and its `deleted_keys`. Writes
    /// the position deletes of the rows they replace or delete under `prefix` and returns them.
    pub async fn apply_job(
        &mut self,
        target: &FileTarget,
        prefix: &str,
        schema: &Schema,
        files: &[DataFile],
        deleted_keys: Vec<Vec<u8>>,
        settings: &FileSettings,
    ) -> Result<Vec<DataFile>> {
        let keys = Self::read_job(&self.spec, target, schema, files).await?;
        self.apply_read(target, prefix, keys, deleted_keys, settings)
            .await
    }

    /// The first half of [`TableIndex::apply_job`], which does not touch the index (so the
    /// next jobs' keys can be read while earlier ones apply): reads back the keys of `files`,
    /// all at once.
    pub async fn read_job(
        spec: &UpsertSpec,
        target: &FileTarget,
        schema: &Schema,
        files: &[DataFile],
    ) -> Result<JobKeys> {
        read_files(target, &spec.id_field_ids(schema)?, files).await
    }

    /// The second half of [`TableIndex::apply_job`]: applies a job whose keys were read.
    pub async fn apply_read(
        &mut self,
        target: &FileTarget,
        prefix: &str,
        keys: JobKeys,
        deleted_keys: Vec<Vec<u8>>,
        settings: &FileSettings,
    ) -> Result<Vec<DataFile>> {
        self.snapshot = None;
        let new_rows = intern(&mut self.index, keys);
        let mut key_ops: KeyOps = new_rows.keys().map(|k| (k.clone(), Op::Upsert)).collect();
        key_ops.extend(
            deleted_keys
                .into_iter()
                .filter(|k| !new_rows.contains_key(k))
                .map(|k| (k, Op::Delete)),
        );
        apply_located(&mut self.index, target, prefix, new_rows, key_ops, settings).await
    }

    /// Bytes the index holds in memory.
    pub fn memory_bytes(&self) -> usize {
        self.index.memory_bytes()
    }
}

/// What [`TableIndex::from_checkpoint`] made: the index, or why the checkpoint cannot say.
#[derive(Debug)]
pub enum FromCheckpoint {
    Built(Box<TableIndex>, CaughtUp),
    Refused(String),
}

/// The keys of one deferred job's data files, read back ([`TableIndex::read_job`]): each
/// file with its rows' keys, by row position.
#[derive(Debug)]
pub struct JobKeys {
    files: Vec<(FileRef, Vec<Vec<u8>>)>,
}

/// A new index under `spec.index_dir` (a directory of its own named from `role`: an index
/// being replaced may still be dropping its own), rebuilt from the `live` files of a table
/// whose schema is `schema`.
pub(crate) async fn new_index(
    spec: &UpsertSpec,
    role: &str,
    file_io: &FileIO,
    schema: Option<&Schema>,
    live: &LiveFiles,
) -> Result<KeyIndex> {
    let mut index = fresh_index(spec, role)?;
    if let Some(schema) = schema {
        if !live.data.is_empty() {
            let ids = spec.id_field_ids(schema)?;
            let duplicates = rebuild(&mut index, file_io, live, &ids).await?;
            if duplicates > 0 {
                tracing::warn!(
                    duplicates,
                    "keys with more than one live row in the table; the latest is indexed"
                );
            }
            tracing::info!(
                files = live.data.len(),
                delete_files = live.position_deletes.len(),
                memory_bytes = index.memory_bytes(),
                spills = index.spills(),
                "primary-key index rebuilt from the table"
            );
        }
    }
    Ok(index)
}

/// An empty index under `spec.index_dir`, in a directory of its own named from `role`.
fn fresh_index(spec: &UpsertSpec, role: &str) -> Result<KeyIndex> {
    static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let generation = GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    KeyIndex::new(
        spec.index_budget.clone(),
        spec.index_dir.join(format!("{role}-{generation}")),
    )
}

/// The deleted keys of deferred jobs as one object: each key as its length (4 bytes, big
/// endian) and its bytes.
pub fn encode_keys_file(keys: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(keys.iter().map(|k| k.len() + 4).sum());
    for k in keys {
        out.extend_from_slice(&(k.len() as u32).to_be_bytes());
        out.extend_from_slice(k);
    }
    out
}

/// The keys of [`encode_keys_file`]'s `bytes`; an error when they are cut short or `expected`
/// keys are not exactly all of them.
pub fn decode_keys_file(bytes: &[u8], expected: usize) -> Result<Vec<Vec<u8>>> {
    let mut keys = Vec::with_capacity(expected.min(bytes.len() / 4));
    let mut rest = bytes;
    while !rest.is_empty() {
        let (len, tail) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| Error::Schema("deleted keys: a length is cut short".into()))?;
        let len = u32::from_be_bytes(*len) as usize;
        if tail.len() < len {
            return Err(Error::Schema("deleted keys: a key is cut short".into()));
        }
        keys.push(tail[..len].to_vec());
        rest = &tail[len..];
    }
    if keys.len() != expected {
        return Err(Error::Schema(format!(
            "deleted keys: {} keys where {expected} were written",
            keys.len()
        )));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn configs_choose_the_mode_and_the_cdc_column() {
        let dir = PathBuf::from("idx");
        let spec = |ids: &str, upsert: bool, cdc: Option<&str>, t: ValueTransform| {
            // `[a, b]` as the node reads `table.topic.id.columns`.
            let ids: Vec<String> = ids
                .trim_matches(|c| c == '[' || c == ']')
                .split(',')
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty())
                .collect();
            UpsertSpec::from_configs(&ids, upsert, cdc, t, 1.into(), dir.clone())
        };
        assert_eq!(
            spec("[id]", false, None, ValueTransform::None).expect("ok"),
            None,
            "id columns alone: append only"
        );
        let s = spec("[a, b]", true, None, ValueTransform::None)
            .expect("ok")
            .expect("upsert");
        assert_eq!(s.id_columns, vec!["a", "b"]);
        assert_eq!(s.cdc_field, None);
        let s = spec("id", false, Some(" op "), ValueTransform::None)
            .expect("ok")
            .expect("cdc");
        assert_eq!(s.cdc_field.as_deref(), Some("op"));
        for cdc in [None, Some("op"), Some("_op")] {
            let s = spec("[id]", true, cdc, ValueTransform::FlattenDebezium)
                .expect("ok")
                .expect("cdc");
            assert_eq!(s.cdc_field.as_deref(), Some(OP_COLUMN), "{cdc:?}");
        }
        assert!(spec("", true, None, ValueTransform::None).is_err());
        assert!(spec("[]", false, Some("op"), ValueTransform::None).is_err());
    }

    #[test]
    fn deleted_keys_round_trip_and_a_cut_file_is_refused() {
        let keys = vec![b"a".to_vec(), Vec::new(), vec![0, 1, 2, 3, 4]];
        let bytes = encode_keys_file(&keys);
        assert_eq!(decode_keys_file(&bytes, 3).expect("decodes"), keys);
        assert!(decode_keys_file(&bytes, 2).is_err(), "a count that differs");
        // Cut inside a length, inside a key, or between keys (then only the count tells).
        for cut in 0..bytes.len() {
            assert!(decode_keys_file(&bytes[..cut], 3).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn operations() {
        for d in ["D", "d", " d "] {
            assert_eq!(Op::parse(Some(d)), Op::Delete);
        }
        for u in ["I", "U", "c", "r", "u", "x"] {
            assert_eq!(Op::parse(Some(u)), Op::Upsert);
        }
        assert_eq!(Op::parse(None), Op::Upsert);
    }

    #[test]
    fn keys_are_equal_across_integer_widths_and_distinct_across_columns() {
        use arrow::array::TimestampMicrosecondArray;
        let ts: Vec<ArrayRef> = vec![Arc::new(
            TimestampMicrosecondArray::from(vec![1, 2, 1]).with_timezone("+00:00"),
        )];
        let k = encode_keys(&ts, 3).expect("timestamp keys");
        assert_eq!(k[0], k[2]);
        assert_ne!(k[0], k[1]);
        use arrow::array::{Int32Array, Int64Array, StringArray};
        let narrow: Vec<ArrayRef> = vec![Arc::new(Int32Array::from(vec![7, 8]))];
        let wide: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(vec![7, 8]))];
        assert_eq!(
            encode_keys(&narrow, 2).expect("keys"),
            encode_keys(&wide, 2).expect("keys")
        );
        // ("ab", "c") and ("a", "bc") are different keys.
        let two = |a: &str, b: &str| -> Vec<u8> {
            let cols: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from(vec![a])),
                Arc::new(StringArray::from(vec![b])),
            ];
            encode_keys(&cols, 1).expect("keys").remove(0)
        };
        assert_ne!(two("ab", "c"), two("a", "bc"));
        let nulls: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(vec![None, Some(0)]))];
        let k = encode_keys(&nulls, 2).expect("keys");
        assert_ne!(k[0], k[1], "null is not zero");
    }
}
