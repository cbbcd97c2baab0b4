//! A conversion job: one range of a partition's records, read from the stream store, turned
//! into Arrow rows and written as data files. The unit the node's workers run in turn
//! (docs/architecture.md, "Time-shared memory"): a job borrows its memory from the node-wide [`MemoryPool`] for as long as it
//! runs and holds nothing once it returns.
//!
//! The flow of [`convert_range`]:
//! 1. Reserve the input budget, read Kafka record batches from `from` up to about
//!    `max_input_bytes` (or up to `until`), and decode them into records.
//! 2. First pass, headers only: the schemas the records were written with. Each is mapped to
//!    Iceberg and reconciled with the table's schema ([`evolve::reconcile`]), so the whole
//!    range is written with one table schema, and the changes it needs are proposed once.
//! 3. Second pass: each record's value goes to the decoder of its schema (Avro straight from
//!    binary; Protobuf and JSON through the registry's decoder), `_kafka` is filled in, and
//!    runs of records are cut into record batches. A record that does not decode becomes a
//!    dead letter and the others go on: produce-time validation already refused such records
//!    unless the topic tolerates errors.
//! 4. The batches are written as data files ([`data_file::write`]).
//!
//! Invariants:
//! - Output rows are in offset order; `next_offset` is one past the last record consumed, so
//!   consecutive jobs cover a partition without gaps or overlaps.
//! - The job's memory (input, decoder buffers, the Parquet writer, an upsert job's keys) stays
//!   within what it reserved from the pool; the reservation grows as the decoders' buffers do.
//!   A job waits for room only before it starts: when the pool is full it cannot grow, so it
//!   gives its room back and starts again asking for more (the pool never deadlocks).
//!
//! The parts, one file each: `read` (a range's records out of the stream store, within the
//! input budget), `schema` (registered value schemas as Iceberg schemas, and whether a table
//! can take them), `keys` (the key schemas and the `_key` column), `rows` (the decoders that
//! turn values into record batches) and `dead_letters` (records that do not convert).

mod dead_letters;
mod keys;
mod read;
mod rows;
mod schema;

pub(crate) use schema::value_schema_fits;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Schema as ArrowSchema, SchemaRef};
use bytes::Bytes;
use iceberg::spec::{DataFile, NestedField, PrimitiveType, Schema, Type};
use inlet_schema_registry::framing;
use inlet_schema_registry::{Registry, StoredSchema};
use inlet_storage::{StreamId, StreamStore};

use crate::data_file::{self, FileSettings, FileTarget};
use crate::error::{Error, Result};
use crate::evolve::{self, Change, KAFKA_COLUMN};
use crate::key::KeyColumn;
use crate::memory::{MemoryError, MemoryPool};
use crate::pk_index::KeyIndex;
use crate::transform::ValueTransform;
use crate::upsert::{self, UpsertSpec};

use dead_letters::{dead, write_dead_letters};
use keys::{with_key_column, KeySchemas};
use read::read_records;
use rows::RowBuilder;
use schema::{iceberg_schema_of, registered};

/// Records between two checks of a job's memory use against its reservation.
const RESERVE_EVERY: usize = 256;

/// How a record's value becomes columns (`table.topic.convert.value.type`), or its key the
/// `_key` column (`table.topic.convert.key.type`, see [`crate::key`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueType {
    /// Schema Registry framed records (magic byte, schema id, payload).
    BySchemaId,
    /// Unframed payloads written with the latest schema of this subject.
    ByLatestSchema { subject: String },
    /// The value as one UTF-8 `value` column (a key: `_key` as a string).
    String,
    /// The value as one binary `value` column (a key: no `_key`; the bytes are in
    /// `_kafka.key`).
    Raw,
}

impl ValueType {
    /// From the topic config's spelling; `subject` is the topic's value (or key) subject.
    pub fn parse(s: &str, subject: &str) -> Result<Self> {
        Ok(match s {
            "by_schema_id" => ValueType::BySchemaId,
            "by_latest_schema" => ValueType::ByLatestSchema {
                subject: subject.to_string(),
            },
            "string" => ValueType::String,
            "raw" => ValueType::Raw,
            other => {
                return Err(Error::Schema(format!(
                    "unknown table.topic.convert.value.type or convert.key.type {other:?}"
                )))
            }
        })
    }
}

/// What a job needs to know about its table.
#[derive(Debug, Clone)]
pub struct TableContext {
    pub registry: Arc<Registry>,
    pub value_type: ValueType,
    /// `table.topic.convert.key.type`; anything but `Raw` adds the `_key` column.
    pub key_type: ValueType,
    /// `table.topic.transform.value.type` (ignored for `string` and `raw` values).
    pub transform: ValueTransform,
    /// The table's current schema; None when the table does not exist yet.
    pub schema: Option<Schema>,
    /// The table's `last-column-id` (0 for a new table): columns a job adds get ids above it
    /// and above `schema`'s, never an id another engine used and dropped.
    pub last_column_id: i32,
    /// Where files go; its `schema` is replaced by the schema the job writes with.
    pub target: FileTarget,
    /// Where the dead-letter table's files go (`errors.tolerance=all`); None: dead letters are
    /// only returned.
    pub dead_letter_target: Option<FileTarget>,
    /// `table.topic.partition.by`, for a table that does not exist yet: files are written with
    /// this spec bound to the job's schema (spec id 0, as the table will be created with it).
    /// Empty for an existing table, whose spec is `target.spec`.
    pub partition_by: Vec<crate::partition::Term>,
    pub settings: FileSettings,
    /// Per partition, the offset below which dead letters are already in the dead-letter table
    /// (its committed `inlet.offsets`): a range converted again after a crash between the
    /// dead-letter commit and the main commit does not write them twice.
    pub dead_letter_floor: BTreeMap<i32, u64>,
    /// `table.topic.event.time.field`: the column whose largest value is a job's event time
    /// ([`JobOutput::max_timestamp_ms`]); None: the records' Kafka timestamps.
    pub event_time_field: Option<String>,
    /// Upsert or CDC mode (`table.topic.id.columns` with `upsert.enable` or `cdc.field`);
    /// None: append only. Jobs of such a table need the table's [`KeyIndex`].
    pub upsert: Option<UpsertSpec>,
    /// Every file name carries this after its partition and offsets (`p<partition>-<from>-
    /// <next>-<tag>`): the coordinator sets the table's uuid's first digits, or a random tag
    /// for a table not created yet. A table made again under an old table's name (the old one
    /// renamed, or dropped without purging its files) then never writes over the old one's
    /// files, which the same offsets would otherwise name. None: no tag.
    pub file_tag: Option<String>,
}

impl TableContext {
    /// The name prefix of the files a job over `[from, next)` of `partition` writes.
    pub fn file_prefix(&self, partition: i32, from: u64, next: u64) -> String {
        match &self.file_tag {
            Some(tag) => format!("p{partition}-{from}-{next}-{tag}"),
            None => format!("p{partition}-{from}-{next}"),
        }
    }
}

/// One range to convert.
#[derive(Debug, Clone, Copy)]
pub struct JobSpec {
    pub partition: i32,
    pub stream: StreamId,
    /// First offset to convert.
    pub from: u64,
    /// Stop before this offset (the commit's snapshot of the end); None: wherever the input
    /// budget ends.
    pub until: Option<u64>,
    /// Stop once the records read hold about this many bytes decoded (keys, values and
    /// their structs: [`JobOutput::decoded_bytes`]).
    pub max_input_bytes: usize,
}

/// A record that could not be converted, for the dead-letter table.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub error: String,
}

/// What a job produced.
#[derive(Debug, Clone)]
pub struct JobOutput {
    /// Complete data files, ready to commit.
    pub data_files: Vec<DataFile>,
    /// One past the last offset consumed: where the next job of this partition starts.
    pub next_offset: u64,
    /// The schema the files were written with.
    pub schema: Schema,
    /// Changes from the table's schema to `schema`, for the coordinator to commit first.
    pub changes: Vec<Change>,
    pub dead_letters: Vec<DeadLetter>,
    /// The dead letters as data files of the dead-letter table (when it has a target).
    pub dead_letter_files: Vec<DataFile>,
    /// Position delete files (upsert tables): the rows this job's keys replaced or deleted.
    pub delete_files: Vec<DataFile>,
    /// A deferred upsert table's jobs ([`UpsertSpec::deferred`]): the keys whose last record
    /// deletes them (their rows are not in `data_files`), for the table's coordinator to
    /// apply with the rows. Empty otherwise.
    pub deleted_keys: Vec<Vec<u8>>,
    /// Records converted into rows.
    pub rows: u64,
    /// Largest event time among the converted records (epoch ms): the `event_time_field`
    /// column's, else the records' Kafka timestamps.
    pub max_timestamp_ms: Option<i64>,
    /// Bytes of record batches read.
    pub input_bytes: usize,
    /// What the records read held in memory decoded (keys, values, structs): the measure of
    /// [`JobSpec::max_input_bytes`].
    pub decoded_bytes: usize,
}

/// Converts one range of an append-only table. See the module docs for the flow.
pub async fn convert_range(
    store: &StreamStore,
    pool: &MemoryPool,
    table: &TableContext,
    job: JobSpec,
) -> Result<JobOutput> {
    convert_range_indexed(store, pool, table, job, None, &[]).await
}

/// Converts one range; an upsert table (`table.upsert`) needs its primary-key `index`, which
/// the job moves to the rows it writes (see `upsert`).
pub(crate) async fn convert_range_indexed(
    store: &StreamStore,
    pool: &MemoryPool,
    table: &TableContext,
    job: JobSpec,
    mut index: Option<&mut KeyIndex>,
    aborted: &[crate::txn::AbortedTxn],
) -> Result<JobOutput> {
    if table.upsert.as_ref().is_some_and(|u| !u.deferred) && index.is_none() {
        return Err(Error::Schema(
            "an upsert table's job needs its primary-key index".into(),
        ));
    }
    // A job never asks for more than the whole pool: one larger than the budget runs alone,
    // holding all of it (and then never needs to grow).
    let cap = pool.budget();
    let mut reserve = job.max_input_bytes.clamp(1, cap);
    loop {
        match attempt(
            store,
            pool,
            table,
            (job, aborted),
            index.as_deref_mut(),
            reserve,
        )
        .await
        {
            // The pool is lent out and the job needs more than it holds: it gave everything
            // back (nothing is written and the index is untouched before the last growth) and
            // waits for the larger room, holding nothing, so jobs never wait for each other.
            Err(Error::Memory(MemoryError::Exhausted { wanted })) => {
                let next = wanted.max(reserve.saturating_mul(2)).min(cap);
                tracing::debug!(
                    partition = job.partition,
                    from = job.from,
                    held = reserve,
                    next,
                    "conversion memory is lent out; the job starts again with more"
                );
                reserve = next;
            }
            done => return done,
        }
    }
}

/// One try at a job, with `reserve` bytes reserved first. Every growth of the reservation
/// comes before the first file is written or the index changes, so a try that fails with
/// [`MemoryError::Exhausted`] leaves nothing behind.
async fn attempt(
    store: &StreamStore,
    pool: &MemoryPool,
    table: &TableContext,
    (job, aborted): (JobSpec, &[crate::txn::AbortedTxn]),
    index: Option<&mut KeyIndex>,
    reserve: usize,
) -> Result<JobOutput> {
    let cap = pool.budget();
    let mut reservation = pool.reserve(reserve).await?;
    let (records, next_offset, input_bytes, records_held) =
        read_records(store, &job, aborted).await?;

    // Pass 1: the schemas of the range, reconciled with the table's.
    let mut schemas: HashMap<u32, Arc<StoredSchema>> = HashMap::new();
    let mut incoming: Vec<Schema> = Vec::new();
    let mut dead_letters = Vec::new();
    let mut latest: Option<Arc<StoredSchema>> = None;
    // Schema ids whose records the table cannot take, and why: a schema with no Iceberg
    // mapping, or a change the registry accepts but Iceberg cannot make (int → double,
    // string ↔ bytes, ...). Their records become dead letters with the reason, so the table
    // never stalls on them.
    let mut refused: HashMap<u32, String> = HashMap::new();
    match &table.value_type {
        ValueType::BySchemaId => {
            // The table's schema as the range's schemas evolve it so far.
            let mut probe = table.schema.clone();
            for r in &records {
                let Some(value) = &r.value else { continue };
                let Ok((id, _)) = framing::split(value) else {
                    continue;
                };
                if schemas.contains_key(&id) || refused.contains_key(&id) {
                    continue;
                }
                // Unknown ids make dead letters below.
                let Some(s) = registered(&table.registry, id).await? else {
                    continue;
                };
                let mapped = iceberg_schema_of(&s, value)
                    .and_then(|m| m.map(|m| table.transform.table_schema(&m)).transpose());
                match mapped.and_then(|m| match m {
                    Some(t) => {
                        let evolved =
                            evolve::reconcile_above(probe.as_ref(), &t, table.last_column_id)?;
                        Ok(Some((t, evolved.schema)))
                    }
                    None => Ok(None),
                }) {
                    Ok(Some((t, evolved))) => {
                        probe = Some(evolved);
                        incoming.push(t);
                        schemas.insert(id, s);
                    }
                    Ok(None) => {
                        schemas.insert(id, s);
                    }
                    Err(e) => {
                        tracing::warn!(partition = job.partition, schema_id = id, error = %e, "the table cannot take this schema; its records go to the dead-letter table");
                        refused.insert(id, e.to_string());
                    }
                }
            }
        }
        ValueType::ByLatestSchema { subject } => {
            let sv = table
                .registry
                .version(subject, inlet_schema_registry::VersionSpec::Latest, false)
                .await
                .map_err(|e| Error::Schema(format!("latest schema of {subject:?}: {e}")))?;
            if let Some(m) = iceberg_schema_of(&sv.schema, &[])? {
                incoming.push(table.transform.table_schema(&m)?);
            }
            latest = Some(sv.schema);
        }
        ValueType::String | ValueType::Raw => {
            let t = if table.value_type == ValueType::String {
                PrimitiveType::String
            } else {
                PrimitiveType::Binary
            };
            incoming.push(
                Schema::builder()
                    .with_fields(vec![Arc::new(NestedField::optional(
                        1,
                        "value",
                        Type::Primitive(t),
                    ))])
                    .build()?,
            );
        }
    }
    let keys = KeySchemas::load(table, &records).await?;
    if !keys.fields.is_empty() {
        incoming = with_key_column(table, incoming, &keys.fields)?;
    }
    let mut current = table.schema.clone();
    let mut changes = Vec::new();
    for s in &incoming {
        let e = evolve::reconcile_above(current.as_ref(), s, table.last_column_id)?;
        changes.extend(e.changes);
        current = Some(e.schema);
    }
    if table.schema.is_none() {
        // A new table is created with the final schema: nothing to evolve.
        changes.clear();
    }
    let schema = match current {
        Some(s) => s,
        // Nothing decodable in the range and no table yet: nothing to write.
        None => {
            for r in &records {
                dead_letters.push(dead(job.partition, r, "no schema for this record".into()));
            }
            let dead_letter_files =
                write_dead_letters(table, &job, next_offset, &dead_letters).await?;
            return Ok(JobOutput {
                data_files: Vec::new(),
                next_offset,
                schema: evolve::reconcile(None, &Schema::builder().build()?)?.schema,
                changes,
                dead_letters,
                dead_letter_files,
                delete_files: Vec::new(),
                deleted_keys: Vec::new(),
                rows: 0,
                max_timestamp_ms: None,
                input_bytes,
                decoded_bytes: records_held,
            });
        }
    };

    // Pass 2: rows.
    let arrow_schema: SchemaRef = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema)?);
    let kafka_index = arrow_schema
        .index_of(KAFKA_COLUMN)
        .map_err(|_| Error::Schema("the table has no _kafka column".into()))?;
    let key_index = match table.key_type {
        ValueType::Raw => None,
        _ => arrow_schema.index_of(crate::key::KEY_COLUMN).ok(),
    };
    let value_target: SchemaRef = Arc::new(ArrowSchema::new(
        arrow_schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != kafka_index && Some(*i) != key_index)
            .map(|(_, f)| f.clone())
            .collect::<Vec<_>>(),
    ));
    let mut rows = RowBuilder::new(
        arrow_schema.clone(),
        value_target,
        kafka_index,
        key_index,
        job.partition,
        table.transform,
    )?;
    // Tombstones of an upsert table with converted keys: their keys, and how many rows came
    // before each (the order `upsert::dedupe` needs).
    let mut tombstones = key_index.map(|i| KeyColumn::new(arrow_schema.fields()[i].clone()));
    let mut tombstone_at: Vec<u64> = Vec::new();
    let mut batches = Vec::new();
    let mut max_ts: Option<i64> = None;
    let mut converted = 0u64;
    for (i, r) in records.iter().enumerate() {
        let tombstone = matches!(
            table.value_type,
            ValueType::BySchemaId | ValueType::ByLatestSchema { .. }
        ) && r.value.is_none()
            && table.upsert.is_some();
        if tombstone {
            // A tombstone (null value) of an upsert topic names its row only by its key: it
            // deletes that key's row when keys are converted, and is skipped otherwise.
            match (&mut tombstones, &r.key) {
                (Some(t), Some(_)) => match keys.append(t, r) {
                    Ok(()) => tombstone_at.push(converted),
                    Err(error) => dead_letters.push(dead(job.partition, r, error)),
                },
                _ => tracing::debug!(
                    partition = job.partition,
                    offset = r.offset,
                    "tombstone skipped: no converted key"
                ),
            }
            continue;
        }
        let keyed = match (&table.key_type, rows.keys.as_mut()) {
            (ValueType::Raw, _) => Ok(()),
            (_, Some((_, k))) => keys.append(k, r),
            // No `_key` column: only null keys are fine.
            (_, None) => match &r.key {
                None => Ok(()),
                Some(_) => keys.resolve(r).map(|_| ()),
            },
        };
        if let Err(error) = keyed {
            dead_letters.push(dead(job.partition, r, error));
            continue;
        }
        let outcome = match &table.value_type {
            ValueType::BySchemaId => match &r.value {
                None => Err("a table topic record needs a value".to_string()),
                Some(v) => match framing::split(v) {
                    Err(e) => Err(e.to_string()),
                    Ok((id, payload)) => match schemas.get(&id) {
                        None => Err(match refused.get(&id) {
                            Some(why) => format!("schema id {id} does not fit the table: {why}"),
                            None => format!("unknown schema id {id}"),
                        }),
                        Some(s) => rows.append_framed(s, payload, r, &mut batches),
                    },
                },
            },
            ValueType::ByLatestSchema { .. } => match (&r.value, &latest) {
                (Some(v), Some(s)) => rows.append_framed(s, v, r, &mut batches),
                _ => Err("a table topic record needs a value".to_string()),
            },
            ValueType::String => rows.append_plain(r, true, &mut batches),
            ValueType::Raw => rows.append_plain(r, false, &mut batches),
        };
        match outcome {
            Ok(()) => {
                converted += 1;
                max_ts = Some(max_ts.map_or(r.timestamp_ms, |m| m.max(r.timestamp_ms)));
            }
            Err(error) => {
                if let Some((_, k)) = rows.keys.as_mut() {
                    k.pop()?;
                }
                dead_letters.push(dead(job.partition, r, error))
            }
        }
        // Keep the reservation in step with what the decoders hold (measured every few
        // hundred records: measuring walks every column and batch).
        if (i + 1).is_multiple_of(RESERVE_EVERY) {
            let held = records_held
                + rows.buffered_bytes()
                + batches_bytes(&batches)
                + tombstones.as_ref().map_or(0, KeyColumn::buffered_bytes);
            if held > reservation.size() && reservation.size() < cap {
                reservation.resize(held.min(cap))?;
            }
        }
    }
    rows.cut(&mut batches)?;
    drop(records);
    // Rows left out of the batches (Debezium events without a row) are not rows: a
    // tombstone's place counts only the rows before it that are in the batches.
    if !rows.left_out.is_empty() {
        for at in tombstone_at.iter_mut() {
            *at -= rows.left_out.partition_point(|&i| i < *at) as u64;
        }
        converted -= rows.left_out.len() as u64;
    }
    if let Some(field) = &table.event_time_field {
        max_ts = match crate::event_time::max_ms(&batches, field) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(partition = job.partition, error = %e, "no event time; the partition's watermark does not move");
                None
            }
        };
    }
    // The Parquet writer holds the batches and about as much again in encoded pages.
    let writing = (2 * batches_bytes(&batches)).clamp(1, cap);
    reservation.resize(writing)?;
    let mut target = table.target.clone();
    target.schema = Arc::new(schema.clone());
    if target.spec.is_unpartitioned() && !table.partition_by.is_empty() {
        target.spec = Arc::new(crate::partition::spec(&schema, &table.partition_by)?);
    }
    let prefix = table.file_prefix(job.partition, job.from, next_offset);
    let (batches, key_ops) = match &table.upsert {
        Some(spec) => {
            let deletes = match tombstones.as_mut() {
                Some(t) if !t.is_empty() => {
                    let n = t.len();
                    let ids = spec
                        .id_columns
                        .iter()
                        .map(|c| Ok(arrow_schema.field_with_name(c)?.data_type().clone()))
                        .collect::<Result<Vec<_>>>()?;
                    let encoded = crate::key::tombstone_keys(&t.take(n)?, &spec.id_columns, &ids)?;
                    tombstone_at
                        .iter()
                        .zip(encoded)
                        .filter_map(|(at, k)| k.map(|k| (*at, k)))
                        .collect()
                }
                _ => Vec::new(),
            };
            let (b, ops) = upsert::dedupe(spec, batches, &deletes)?;
            // The keys are held until the index has them, and once more as the new rows'
            // positions read back from the files.
            let keys: usize = ops.iter().map(|(k, _)| k.len() + 64).sum();
            reservation.resize((writing + 2 * keys).clamp(1, cap))?;
            (b, Some((spec, ops)))
        }
        None => (batches, None),
    };
    let data_files = data_file::write(&target, &prefix, batches, &table.settings).await?;
    let mut deleted_keys = Vec::new();
    let delete_files = match (key_ops, index) {
        (Some((spec, ops)), _) if spec.deferred => {
            deleted_keys = ops
                .into_iter()
                .filter(|(_, op)| *op == upsert::Op::Delete)
                .map(|(k, _)| k)
                .collect();
            Vec::new()
        }
        (Some((spec, ops)), Some(index)) => {
            let ids = spec.id_field_ids(&schema)?;
            upsert::apply(
                index,
                &target,
                &prefix,
                &ids,
                &data_files,
                ops,
                &table.settings,
            )
            .await?
        }
        _ => Vec::new(),
    };
    let dead_letter_files = write_dead_letters(table, &job, next_offset, &dead_letters).await?;
    Ok(JobOutput {
        data_files,
        next_offset,
        schema,
        changes,
        dead_letters,
        dead_letter_files,
        delete_files,
        deleted_keys,
        rows: converted,
        max_timestamp_ms: max_ts,
        input_bytes,
        decoded_bytes: records_held,
    })
}

fn batches_bytes(batches: &[RecordBatch]) -> usize {
    batches.iter().map(|b| b.get_array_memory_size()).sum()
}
