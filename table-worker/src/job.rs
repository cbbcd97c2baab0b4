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

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;

use arrow::array::ArrayBuilder;
use arrow::array::{
    ArrayRef, Int32Builder, Int64Builder, LargeBinaryBuilder, RecordBatch, StringBuilder,
    StructArray, TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, Schema as ArrowSchema, SchemaRef};
use bytes::{Bytes, BytesMut};
use iceberg::spec::{DataFile, NestedField, PrimitiveType, Schema, Type};
use inlet_records::batch::{self as records_batch, BatchError};
use inlet_records::records::{walk, Limits};
use inlet_schema_registry::framing::{self, Value};
use inlet_schema_registry::{ParsedSchema, Registry, StoredSchema};
use inlet_storage::{StreamId, StreamStore};
use prost_reflect::ReflectMessage;

use crate::data_file::{self, FileSettings, FileTarget};
use crate::error::{Error, Result};
use crate::evolve::{self, Change, KAFKA_COLUMN};
use crate::key::KeyColumn;
use crate::memory::{MemoryError, MemoryPool};
use crate::pk_index::KeyIndex;
use crate::transform::ValueTransform;
use crate::upsert::{self, UpsertSpec};

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
    fn file_prefix(&self, partition: i32, from: u64, next: u64) -> String {
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

/// One Kafka record of the range.
struct Rec {
    offset: i64,
    timestamp_ms: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
}

/// Converts one range of an append-only table. See the module docs for the flow.
pub async fn convert_range(
    store: &StreamStore,
    pool: &MemoryPool,
    table: &TableContext,
    job: JobSpec,
) -> Result<JobOutput> {
    convert_range_indexed(store, pool, table, job, None).await
}

/// Converts one range; an upsert table (`table.upsert`) needs its primary-key `index`, which
/// the job moves to the rows it writes (see `upsert`).
pub async fn convert_range_indexed(
    store: &StreamStore,
    pool: &MemoryPool,
    table: &TableContext,
    job: JobSpec,
    mut index: Option<&mut KeyIndex>,
) -> Result<JobOutput> {
    if table.upsert.is_some() && index.is_none() {
        return Err(Error::Schema(
            "an upsert table's job needs its primary-key index".into(),
        ));
    }
    // A job never asks for more than the whole pool: one larger than the budget runs alone,
    // holding all of it (and then never needs to grow).
    let cap = pool.budget();
    let mut reserve = job.max_input_bytes.clamp(1, cap);
    loop {
        match attempt(store, pool, table, job, index.as_deref_mut(), reserve).await {
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
    job: JobSpec,
    index: Option<&mut KeyIndex>,
    reserve: usize,
) -> Result<JobOutput> {
    let cap = pool.budget();
    let mut reservation = pool.reserve(reserve).await?;
    let (records, next_offset, input_bytes, records_held) = read_records(store, &job).await?;

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
    let delete_files = match (key_ops, index) {
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
        rows: converted,
        max_timestamp_ms: max_ts,
        input_bytes,
        decoded_bytes: records_held,
    })
}

/// Writes `letters` to the dead-letter table's location, when the table has one.
async fn write_dead_letters(
    table: &TableContext,
    job: &JobSpec,
    next_offset: u64,
    letters: &[DeadLetter],
) -> Result<Vec<DataFile>> {
    let Some(target) = &table.dead_letter_target else {
        return Ok(Vec::new());
    };
    let floor = table
        .dead_letter_floor
        .get(&job.partition)
        .copied()
        .unwrap_or(0);
    let letters: Vec<DeadLetter> = letters
        .iter()
        .filter(|l| l.offset >= floor as i64)
        .cloned()
        .collect();
    let letters = letters.as_slice();
    if letters.is_empty() {
        return Ok(Vec::new());
    }
    let mut target = target.clone();
    target.schema = Arc::new(crate::dead_letter::schema()?);
    // The dead-letter table is never partitioned.
    target.spec = Arc::new(iceberg::spec::PartitionSpec::unpartition_spec());
    let batch = crate::dead_letter::batch(letters)?;
    let prefix = table.file_prefix(job.partition, job.from, next_offset);
    data_file::write(&target, &prefix, [batch], &table.settings).await
}

fn batches_bytes(batches: &[RecordBatch]) -> usize {
    batches.iter().map(|b| b.get_array_memory_size()).sum()
}

fn dead(partition: i32, r: &Rec, error: String) -> DeadLetter {
    DeadLetter {
        partition,
        offset: r.offset,
        timestamp_ms: r.timestamp_ms,
        key: r.key.clone(),
        value: r.value.clone(),
        error,
    }
}

/// Reads and decodes the range's records. Returns them, the next offset and the bytes read.
/// The records of the job's range: (records, the offset after them, stored bytes read, bytes
/// the records hold in memory).
async fn read_records(store: &StreamStore, job: &JobSpec) -> Result<(Vec<Rec>, u64, usize, usize)> {
    let end = store.end_offset(job.stream).map_err(Error::Storage)?;
    let until = job.until.map_or(end, |u| u.min(end));
    let start = store.start_offset(job.stream).map_err(Error::Storage)?;
    let mut records = Vec::new();
    let mut offset = job.from;
    if offset < start {
        // Retention removed records before the table got them: they cannot be converted any
        // more. Go on from the first one left rather than stall the table.
        tracing::warn!(
            partition = job.partition,
            from = job.from,
            start,
            "records were deleted by retention before they reached the table"
        );
        offset = start;
    }
    // `bytes` counts stored bytes (what the job reports as its input); `held` what the decoded
    // records hold in memory — decompressed keys and values plus each record's own struct — and
    // it is what stops the read at `max_input_bytes`, the room the job reserved, also in the
    // middle of a batch (the next job goes on from there). Stored batches are walked one record
    // at a time (`inlet_records`), so a zstd batch of millions of tiny records never exists as
    // a whole in memory: counting stored bytes, or decoding whole batches, let one job hold
    // many times its reservation.
    let mut bytes = 0usize;
    let mut held = 0usize;
    'read: while offset < until && held < job.max_input_bytes {
        let batches = store
            .read(job.stream, offset, (job.max_input_bytes - held).max(1))
            .await
            .map_err(Error::Storage)?;
        if batches.is_empty() {
            break;
        }
        for b in batches {
            if b.base_offset >= until {
                break 'read;
            }
            bytes += b.payload.len();
            let from = job.from.max(start).max(offset);
            // A stored payload is normally one Kafka batch; read every batch it holds.
            let stop = read_payload(
                &b.payload,
                from,
                until,
                job.max_input_bytes,
                &mut held,
                &mut records,
            )
            .map_err(|e| {
                Error::Decode(format!(
                    "stored record batch at offset {} does not read: {e}",
                    b.base_offset
                ))
            })?;
            if let Some(at) = stop {
                offset = at;
                break 'read;
            }
            offset = b.end_offset().min(until);
            if held >= job.max_input_bytes {
                break 'read;
            }
        }
    }
    Ok((records, offset.max(job.from), bytes, held))
}

/// A record read out of a compressed batch: offset, timestamp, and where its key and value are
/// in the batch's buffer.
type Taken = (i64, i64, Option<Range<usize>>, Option<Range<usize>>);

/// What one record costs a job in memory: its struct, key and value.
fn record_cost(key: Option<&[u8]>, value: Option<&[u8]>) -> usize {
    std::mem::size_of::<Rec>() + key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len)
}

/// A job stops inside a batch only once its records hold this much (and its `max_input_bytes`):
/// small jobs take whole batches, and no batch, however many records it packs, makes a job hold
/// more than this plus one record beyond its budget.
const MIN_SPLIT_BYTES: usize = 4 << 20;

/// Appends the records of one stored payload (one or more batches) with offsets in
/// `from..until` to `records`, counting their cost in `held`. Returns the offset it stopped at
/// when `held` reached `max_held` (and [`MIN_SPLIT_BYTES`]) before the payload's end.
fn read_payload(
    payload: &Bytes,
    from: u64,
    until: u64,
    max_held: usize,
    held: &mut usize,
    records: &mut Vec<Rec>,
) -> std::result::Result<Option<u64>, BatchError> {
    let split_at = max_held.max(MIN_SPLIT_BYTES);
    for batch in records_batch::split(payload)? {
        let header = batch.header;
        let base = i64::from_be_bytes(batch.bytes[..8].try_into().expect("a batch header"));
        if header.is_control() {
            continue;
        }
        // Kafka's LogAppendTime: every record carries the batch's max timestamp, the broker's.
        let log_append = header.attributes & 0x08 != 0;
        let timestamp = |delta: i64| {
            if log_append {
                header.max_timestamp
            } else {
                header.base_timestamp + delta
            }
        };
        let mut stop = None;
        if header.attributes & 0x7 == 0 {
            // Uncompressed: keys and values are slices of the stored payload, not copies.
            walk(&batch, Limits::default(), |r| {
                let o = base + r.index as i64;
                if stop.is_some() || (o as u64) < from || o as u64 >= until {
                    return;
                }
                if *held >= split_at {
                    stop = Some(o as u64);
                    return;
                }
                *held += record_cost(r.key, r.value);
                records.push(Rec {
                    offset: o,
                    timestamp_ms: timestamp(r.timestamp_delta),
                    key: r.key.map(|k| batch.bytes.slice_ref(k)),
                    value: r.value.map(|v| batch.bytes.slice_ref(v)),
                });
            })?;
        } else {
            // Compressed: the records' keys and values are copied into one buffer as they
            // stream out of the decompressor, and sliced from it afterwards.
            let mut arena = BytesMut::new();
            let mut taken: Vec<Taken> = Vec::new();
            walk(&batch, Limits::default(), |r| {
                let o = base + r.index as i64;
                if stop.is_some() || (o as u64) < from || o as u64 >= until {
                    return;
                }
                if *held >= split_at {
                    stop = Some(o as u64);
                    return;
                }
                *held += record_cost(r.key, r.value);
                let mut put = |b: Option<&[u8]>| {
                    b.map(|b| {
                        arena.extend_from_slice(b);
                        arena.len() - b.len()..arena.len()
                    })
                };
                let key = put(r.key);
                let value = put(r.value);
                taken.push((o, timestamp(r.timestamp_delta), key, value));
            })?;
            let arena = arena.freeze();
            records.extend(
                taken
                    .into_iter()
                    .map(|(offset, timestamp_ms, key, value)| Rec {
                        offset,
                        timestamp_ms,
                        key: key.map(|k| arena.slice(k)),
                        value: value.map(|v| arena.slice(v)),
                    }),
            );
        }
        if stop.is_some() {
            return Ok(stop);
        }
    }
    Ok(None)
}

/// The registered schema `id`; None when the registry does not have it. A registry that
/// cannot answer (a retryable error) ends the job.
async fn registered(registry: &Registry, id: u32) -> Result<Option<Arc<StoredSchema>>> {
    match registry.schema_by_id(id).await {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.is_retryable() => Err(Error::Schema(format!("schema registry: {e}"))),
        Err(_) => Ok(None),
    }
}

/// The key schemas of a range (`convert.key.type`), and the `_key` columns they map to.
struct KeySchemas<'t> {
    key_type: &'t ValueType,
    by_id: HashMap<u32, Arc<StoredSchema>>,
    latest: Option<Arc<StoredSchema>>,
    /// One `_key` column per key schema seen (for `string`, the one string column).
    fields: Vec<NestedField>,
}

impl<'t> KeySchemas<'t> {
    async fn load(table: &'t TableContext, records: &[Rec]) -> Result<Self> {
        let mut keys = KeySchemas {
            key_type: &table.key_type,
            by_id: HashMap::new(),
            latest: None,
            fields: Vec::new(),
        };
        match &table.key_type {
            ValueType::Raw => {}
            ValueType::String => keys.fields.push(crate::key::string_key_field()),
            ValueType::BySchemaId => {
                for r in records {
                    let Some(k) = &r.key else { continue };
                    let Ok((id, payload)) = framing::split(k) else {
                        continue;
                    };
                    if keys.by_id.contains_key(&id) {
                        continue;
                    }
                    // Unknown ids make dead letters.
                    if let Some(s) = registered(&table.registry, id).await? {
                        keys.fields.extend(crate::key::key_field(&s, payload)?);
                        keys.by_id.insert(id, s);
                    }
                }
            }
            ValueType::ByLatestSchema { subject } => {
                if records.iter().any(|r| r.key.is_some()) {
                    let sv = table
                        .registry
                        .version(subject, inlet_schema_registry::VersionSpec::Latest, false)
                        .await
                        .map_err(|e| Error::Schema(format!("latest schema of {subject:?}: {e}")))?;
                    let first = records.iter().find_map(|r| r.key.as_deref()).unwrap_or(&[]);
                    keys.fields
                        .extend(crate::key::key_field(&sv.schema, first)?);
                    keys.latest = Some(sv.schema);
                }
            }
        }
        Ok(keys)
    }

    /// The schema and encoded form of a record's (non-null) key.
    fn resolve<'r>(
        &self,
        r: &'r Rec,
    ) -> std::result::Result<(&Arc<StoredSchema>, &'r [u8]), String> {
        let key = r.key.as_deref().ok_or("key: null")?;
        match self.key_type {
            ValueType::BySchemaId => {
                let (id, payload) = framing::split(key).map_err(|e| format!("key: {e}"))?;
                let s = self
                    .by_id
                    .get(&id)
                    .ok_or_else(|| format!("key: unknown schema id {id}"))?;
                Ok((s, payload))
            }
            ValueType::ByLatestSchema { subject } => self
                .latest
                .as_ref()
                .map(|s| (s, key))
                .ok_or_else(|| format!("key: no schema in subject {subject:?}")),
            ValueType::String | ValueType::Raw => Err("key: not decoded by a schema".into()),
        }
    }

    /// Appends a record's key to `column`.
    fn append(&self, column: &mut KeyColumn, r: &Rec) -> std::result::Result<(), String> {
        match (self.key_type, &r.key) {
            (ValueType::String, key) => column.append_string(key.as_ref()),
            (_, None) => column.append_null().map_err(|e| e.to_string()),
            (_, Some(_)) => {
                let (schema, payload) = self.resolve(r)?;
                column.append_decoded(schema, payload)
            }
        }
    }
}

/// The value schemas `incoming` with the `_key` column added: one schema per value schema
/// with the first key schema, then one per further key schema, so that reconciling them all
/// merges every value and key schema. With no value schema, the table's value columns stand
/// in (tombstones alone can add `_key`).
fn with_key_column(
    table: &TableContext,
    incoming: Vec<Schema>,
    key_fields: &[NestedField],
) -> Result<Vec<Schema>> {
    use crate::key::{with_key, KEY_COLUMN};
    if incoming
        .iter()
        .any(|s| s.as_struct().field_by_name(KEY_COLUMN).is_some())
    {
        return Err(Error::Schema(format!(
            "the value schema has a field named {KEY_COLUMN}, which holds the converted key (table.topic.convert.key.type)"
        )));
    }
    let base = match incoming.last() {
        Some(s) => s.clone(),
        None => match &table.schema {
            Some(t) => Schema::builder()
                .with_fields(
                    t.as_struct()
                        .fields()
                        .iter()
                        .filter(|f| f.name != KAFKA_COLUMN && f.name != KEY_COLUMN)
                        .cloned()
                        .collect::<Vec<_>>(),
                )
                .build()?,
            // No table and no values: nothing to write.
            None => return Ok(incoming),
        },
    };
    let mut keyed = Vec::with_capacity(incoming.len() + key_fields.len());
    for v in &incoming {
        keyed.push(with_key(v, &key_fields[0])?);
    }
    if incoming.is_empty() {
        keyed.push(with_key(&base, &key_fields[0])?);
    }
    for k in &key_fields[1..] {
        keyed.push(with_key(&base, k)?);
    }
    Ok(keyed)
}

/// Whether a table whose schema is `table` (with `last_column_id`, see
/// [`TableContext::last_column_id`]) can take values written with `stored`, as a job decides
/// it for that schema's records: Err names the column and the change. Protobuf schemas are
/// left to the job (the message type is in each payload).
pub fn value_schema_fits(
    table: &Schema,
    last_column_id: i32,
    transform: ValueTransform,
    stored: &StoredSchema,
) -> std::result::Result<(), String> {
    if matches!(stored.parsed, ParsedSchema::Protobuf(_)) {
        return Ok(());
    }
    let fits = || -> Result<()> {
        if let Some(m) = iceberg_schema_of(stored, &[])? {
            evolve::reconcile_above(Some(table), &transform.table_schema(&m)?, last_column_id)?;
        }
        Ok(())
    };
    fits().map_err(|e| e.to_string())
}

/// The Iceberg schema of the values a stored schema describes (for Protobuf, of the message
/// the payload names); None when the payload cannot tell (it becomes a dead letter).
fn iceberg_schema_of(schema: &StoredSchema, framed_or_payload: &[u8]) -> Result<Option<Schema>> {
    Ok(Some(match &schema.parsed {
        ParsedSchema::Avro(a) => crate::avro::avro_to_iceberg(&a.schema, &a.refs)?,
        ParsedSchema::Json(j) => crate::json::json_to_iceberg(&j.value)?,
        ParsedSchema::Protobuf(p) => {
            let payload = framing::split(framed_or_payload)
                .map(|(_, p)| p)
                .unwrap_or(framed_or_payload);
            match inlet_schema_registry::protobuf::decode_payload(p, payload) {
                Ok(m) => crate::protobuf::protobuf_to_iceberg(&m.descriptor())?,
                Err(_) => return Ok(None),
            }
        }
    }))
}

/// A value decoder for one schema (or the plain `value` column), with the nested target it
/// fills (see `transform`).
enum Decoder {
    Avro(crate::avro::AvroDecoder, SchemaRef),
    /// Converters per message type, and the type of the current run.
    Protobuf(
        HashMap<String, (crate::protobuf::ProtobufConverter, SchemaRef)>,
        Option<String>,
    ),
    Json(crate::json::JsonConverter, SchemaRef),
    Plain(PlainColumn),
}

enum PlainColumn {
    Str(StringBuilder),
    Raw(LargeBinaryBuilder),
}

/// Builds the rows of a range: runs of records with the same decoder become record batches.
struct RowBuilder {
    schema: SchemaRef,
    value_target: SchemaRef,
    kafka_index: usize,
    kafka_fields: arrow::datatypes::Fields,
    /// The `_key` column's index and values (`convert.key.type`), filled by the caller one
    /// key per row, before the row's value.
    keys: Option<(usize, KeyColumn)>,
    partition_number: i32,
    transform: ValueTransform,
    decoders: HashMap<Option<u32>, Decoder>,
    current: Option<Option<u32>>,
    partition: Int32Builder,
    offset: Int64Builder,
    timestamp: TimestampMicrosecondBuilder,
    /// `_kafka.key` is binary in Iceberg: LargeBinary in Arrow.
    key: LargeBinaryBuilder,
    schema_id: Int32Builder,
}

impl RowBuilder {
    fn new(
        schema: SchemaRef,
        value_target: SchemaRef,
        kafka_index: usize,
        key_index: Option<usize>,
        partition_number: i32,
        transform: ValueTransform,
    ) -> Result<Self> {
        let key = key_index.map(|i| (i, KeyColumn::new(schema.fields()[i].clone())));
        let DataType::Struct(kafka_fields) = schema.field(kafka_index).data_type().clone() else {
            return Err(Error::Schema("_kafka is not a struct".into()));
        };
        Ok(RowBuilder {
            schema,
            value_target,
            kafka_index,
            kafka_fields,
            keys: key,
            partition_number,
            transform,
            decoders: HashMap::new(),
            current: None,
            partition: Int32Builder::new(),
            offset: Int64Builder::new(),
            timestamp: TimestampMicrosecondBuilder::new().with_timezone("+00:00"),
            key: LargeBinaryBuilder::new(),
            schema_id: Int32Builder::new(),
        })
    }

    fn buffered_bytes(&self) -> usize {
        let decoders: usize = self
            .decoders
            .values()
            .map(|d| match d {
                Decoder::Avro(a, _) => a.buffered_bytes(),
                Decoder::Protobuf(m, _) => m.values().map(|(c, _)| c.buffered_bytes()).sum(),
                Decoder::Json(j, _) => j.buffered_bytes(),
                Decoder::Plain(PlainColumn::Str(b)) => b.values_slice().len(),
                Decoder::Plain(PlainColumn::Raw(b)) => b.values_slice().len(),
            })
            .sum();
        decoders
            + self.key.values_slice().len()
            + self.offset.len() * 32
            + self.keys.as_ref().map_or(0, |(_, k)| k.buffered_bytes())
    }

    /// Switches to the decoder `id`, cutting the current run into a batch first.
    fn switch(&mut self, id: Option<u32>, batches: &mut Vec<RecordBatch>) -> Result<(), String> {
        if self.current != Some(id) {
            self.cut(batches).map_err(|e| e.to_string())?;
            self.current = Some(id);
        }
        Ok(())
    }

    fn push_kafka(&mut self, r: &Rec, schema_id: Option<u32>) {
        self.partition.append_value(self.partition_number);
        self.offset.append_value(r.offset);
        self.timestamp
            .append_value(r.timestamp_ms.saturating_mul(1000));
        match &r.key {
            Some(k) => self.key.append_value(k),
            None => self.key.append_null(),
        }
        match schema_id {
            Some(id) => self.schema_id.append_value(id as i32),
            None => self.schema_id.append_null(),
        }
    }

    /// The nested target a decoder of `writer` (a mapped record schema) fills.
    fn target_for(&self, writer: &Schema) -> Result<SchemaRef, String> {
        crate::transform::nested_target(self.transform, &self.value_target, writer)
            .map_err(|e| e.to_string())
    }

    fn append_framed(
        &mut self,
        schema: &Arc<StoredSchema>,
        payload: &[u8],
        r: &Rec,
        batches: &mut Vec<RecordBatch>,
    ) -> Result<(), String> {
        let id = Some(schema.id);
        self.switch(id, batches)?;
        if !self.decoders.contains_key(&id) {
            let d = match &schema.parsed {
                ParsedSchema::Avro(a) => {
                    let writer = crate::avro::avro_to_iceberg(&a.schema, &a.refs)
                        .map_err(|e| e.to_string())?;
                    let target = self.target_for(&writer)?;
                    Decoder::Avro(
                        crate::avro::AvroDecoder::new(&a.schema, &a.refs, target.clone())
                            .map_err(|e| e.to_string())?,
                        target,
                    )
                }
                ParsedSchema::Json(j) => {
                    let writer =
                        crate::json::json_to_iceberg(&j.value).map_err(|e| e.to_string())?;
                    let target = self.target_for(&writer)?;
                    Decoder::Json(
                        crate::json::JsonConverter::new(&j.value, target.clone())
                            .map_err(|e| e.to_string())?,
                        target,
                    )
                }
                ParsedSchema::Protobuf(_) => Decoder::Protobuf(HashMap::new(), None),
            };
            self.decoders.insert(id, d);
        }
        // A Protobuf schema may frame several message types: each gets runs of its own.
        let message = match &schema.parsed {
            ParsedSchema::Protobuf(_) => match framing::decode_payload(schema, payload) {
                Ok(Value::Protobuf(m)) => Some(m),
                Ok(_) => return Err("not a Protobuf message".into()),
                Err(e) => return Err(e.to_string()),
            },
            _ => None,
        };
        if let (Some(m), Some(Decoder::Protobuf(_, Some(last)))) =
            (&message, self.decoders.get(&id))
        {
            if last != m.descriptor().full_name() {
                self.cut(batches).map_err(|e| e.to_string())?;
                self.current = Some(id);
            }
        }
        let new_target = match (&message, self.decoders.get(&id)) {
            (Some(m), Some(Decoder::Protobuf(converters, _)))
                if !converters.contains_key(m.descriptor().full_name()) =>
            {
                let writer = crate::protobuf::protobuf_to_iceberg(&m.descriptor())
                    .map_err(|e| e.to_string())?;
                Some(self.target_for(&writer)?)
            }
            _ => None,
        };
        let decoder = self.decoders.get_mut(&id).ok_or("decoder")?;
        match decoder {
            Decoder::Avro(a, _) => a.append(payload).map_err(|e| e.to_string())?,
            Decoder::Json(j, _) => {
                let v = match framing::decode_payload(schema, payload) {
                    Ok(Value::Json(v)) => v,
                    Ok(_) => return Err("not a JSON value".into()),
                    Err(e) => return Err(e.to_string()),
                };
                j.append(&v).map_err(|e| e.to_string())?;
            }
            Decoder::Protobuf(converters, last) => {
                let m = message.ok_or("no message")?;
                let name = m.descriptor().full_name().to_string();
                if let Some(target) = new_target {
                    let c =
                        crate::protobuf::ProtobufConverter::new(&m.descriptor(), target.clone())
                            .map_err(|e| e.to_string())?;
                    converters.insert(name.clone(), (c, target));
                }
                converters
                    .get_mut(&name)
                    .ok_or("converter")?
                    .0
                    .append(&m)
                    .map_err(|e| e.to_string())?;
                *last = Some(name);
            }
            Decoder::Plain(_) => return Err("unexpected plain column".into()),
        }
        self.push_kafka(r, Some(schema.id));
        Ok(())
    }

    fn append_plain(
        &mut self,
        r: &Rec,
        utf8: bool,
        batches: &mut Vec<RecordBatch>,
    ) -> Result<(), String> {
        self.switch(None, batches)?;
        let d = self.decoders.entry(None).or_insert_with(|| {
            Decoder::Plain(if utf8 {
                PlainColumn::Str(StringBuilder::new())
            } else {
                PlainColumn::Raw(LargeBinaryBuilder::new())
            })
        });
        match (d, &r.value) {
            (Decoder::Plain(PlainColumn::Str(b)), Some(v)) => {
                let s = std::str::from_utf8(v).map_err(|e| format!("value is not UTF-8: {e}"))?;
                b.append_value(s);
            }
            (Decoder::Plain(PlainColumn::Str(b)), None) => b.append_null(),
            (Decoder::Plain(PlainColumn::Raw(b)), Some(v)) => b.append_value(v),
            (Decoder::Plain(PlainColumn::Raw(b)), None) => b.append_null(),
            _ => return Err("unexpected decoder".into()),
        }
        self.push_kafka(r, None);
        Ok(())
    }

    /// Cuts the current run into a record batch.
    fn cut(&mut self, batches: &mut Vec<RecordBatch>) -> Result<()> {
        let Some(id) = self.current else {
            return Ok(());
        };
        let rows = self.offset.len();
        if rows == 0 {
            return Ok(());
        }
        let transform = self.transform;
        let value_target = self.value_target.clone();
        let values: Vec<ArrayRef> = match self.decoders.get_mut(&id) {
            Some(Decoder::Avro(a, t)) => {
                crate::transform::flatten_columns(transform, t, a.finish()?, &value_target)?
            }
            Some(Decoder::Json(j, t)) => {
                crate::transform::flatten_columns(transform, t, j.finish()?, &value_target)?
            }
            Some(Decoder::Protobuf(converters, last)) => {
                let name = last.take().unwrap_or_default();
                match converters.get_mut(&name) {
                    Some((c, t)) => {
                        crate::transform::flatten_columns(transform, t, c.finish()?, &value_target)?
                    }
                    None => return Err(Error::Schema("no Protobuf converter".into())),
                }
            }
            Some(Decoder::Plain(p)) => {
                let column: ArrayRef = match p {
                    PlainColumn::Str(b) => Arc::new(b.finish()),
                    PlainColumn::Raw(b) => Arc::new(b.finish()),
                };
                // The plain column is `value`; other value columns (from an earlier schema of
                // the table) are null.
                self.value_target
                    .fields()
                    .iter()
                    .map(|f| {
                        if f.name() == "value" {
                            column.clone()
                        } else {
                            arrow::array::new_null_array(f.data_type(), column.len())
                        }
                    })
                    .collect()
            }
            None => return Err(Error::Schema("no decoder for the current run".into())),
        };
        let kafka = StructArray::try_new(
            self.kafka_fields.clone(),
            vec![
                Arc::new(self.partition.finish()),
                Arc::new(self.offset.finish()),
                Arc::new(self.timestamp.finish()),
                Arc::new(self.key.finish()),
                Arc::new(self.schema_id.finish()),
            ],
            None,
        )?;
        let mut columns = values;
        let mut system: Vec<(usize, ArrayRef)> = vec![(self.kafka_index, Arc::new(kafka))];
        if let Some((i, k)) = self.keys.as_mut() {
            system.push((*i, k.take(rows)?));
        }
        system.sort_by_key(|(i, _)| *i);
        for (i, column) in system {
            columns.insert(i, column);
        }
        batches.push(RecordBatch::try_new(self.schema.clone(), columns)?);
        Ok(())
    }
}
