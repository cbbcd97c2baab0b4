//! The node's table worker: which ranges to convert, and when (docs/architecture.md, "Time-shared
//! memory").
//!
//! For every table topic partition it serves, the worker knows how far conversion has got
//! (`synced`, the next offset to convert) and holds the outputs of finished jobs until the
//! coordinator collects them. It buffers no records: when a partition's unsynced bytes are
//! enough for one file of the target size (`table.topic.target.file.size.bytes`, Parquet
//! output), [`Worker::poll`] converts that range at once, while the records are still
//! in the stream store's log cache. When the coordinator starts a commit round,
//! [`Worker::drain`] converts only the small tails up to the round's end offsets and hands over
//! every output.
//!
//! Invariants:
//! - Per partition, outputs cover consecutive offset ranges from the starting offset the
//!   coordinator registered (the table's committed offsets), without gaps or overlaps.
//! - Jobs of one table build on each other's schemas: each job starts from the schema the
//!   previous one wrote with, so field ids of columns added in the same round agree.
//! - Jobs run one at a time per table (the table's lock), and all jobs borrow from the one
//!   memory pool.
//!
//! - An upsert table's primary-key index lives here, beside the outputs it describes: it is
//!   built (from the table's live files given at registration) before the table's first job,
//!   and dropped with the uncollected outputs when the table is registered again.
//!
//! Unsynced bytes are estimated from offsets and the decoded bytes per record the partition's earlier
//! jobs saw (1 KiB until one ran): the stream store indexes offsets, not bytes. How much input
//! makes a target-size file is learnt the same way: Parquet bytes per input byte of the
//! partition's jobs (zstd Parquet of Avro records is often a fifth of its input). A job reads
//! at most a quarter of the conversion pool, so a table whose records compress very well
//! gets files under the target rather than jobs that crowd out the others.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use inlet_schema_registry::StoredSchema;
use inlet_storage::{StreamId, StreamStore};
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::job::{convert_range_indexed, value_schema_fits, JobOutput, JobSpec, TableContext};
use crate::memory::MemoryPool;
use crate::pk_index::KeyIndex;
use crate::transform::ValueTransform;
use crate::txn::TxnView;
use crate::upsert::{LiveFiles, UpsertSpec};

/// Bytes per record assumed before a partition's first job.
const DEFAULT_RECORD_BYTES: f64 = 1024.0;

/// A job's output is measured into the partition's ratio only past this much input (or one
/// target file's worth, if that is less): a small job's file is mostly Parquet footer and
/// statistics.
const RATIO_MIN_INPUT: usize = 1 << 20;

/// A job reads at most this fraction of the conversion pool (or one target file of input,
/// if that is more), so several tables' jobs fit at once.
const MAX_JOB_POOL_SHARE: usize = 4;

/// One partition of a table the worker serves.
#[derive(Debug, Clone, Copy)]
pub struct PartitionSource {
    pub partition: i32,
    pub stream: StreamId,
    /// The next offset to convert: the table's committed offset for this partition.
    pub start: u64,
}

#[derive(Debug)]
struct PartitionState {
    stream: StreamId,
    synced: u64,
    record_bytes: f64,
    /// Parquet bytes per input byte, learnt from the partition's jobs: a file is cut at the
    /// target size of *output*, so a job reads about `target / output_ratio` of input. None
    /// before the first sizeable job, which reads one target's worth of input.
    output_ratio: Option<f64>,
}

impl PartitionState {
    /// Input bytes a job reads to write one file of `target` Parquet bytes, at most
    /// `max_input` (but never less than `target`).
    fn job_input(&self, target: usize, max_input: usize) -> usize {
        let want = target as f64 / self.output_ratio.unwrap_or(1.0).max(1e-3);
        (want as usize).clamp(target, max_input.max(target))
    }
}

#[derive(Debug)]
struct TableState {
    ctx: TableContext,
    partitions: BTreeMap<i32, PartitionState>,
    outputs: Vec<(i32, JobOutput)>,
    /// Upsert tables: the primary-key index, once built.
    index: Option<KeyIndex>,
    /// Upsert tables: the table's live files to build the index from, until it is built.
    base: Option<LiveFiles>,
}

/// Figures of an upsert table's primary-key index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexStats {
    /// Bytes held in memory (entries, sparse indexes, file table).
    pub memory_bytes: usize,
    /// Times the in-memory entries were spilled to a run on disk.
    pub spills: u64,
    /// Runs on disk now.
    pub runs: usize,
}

/// The schema each served table converts into, by topic, readable at once (a job holds its
/// table's lock): the produce path asks it whether a new writer schema fits the table
/// ([`TableSchemas::fits`]), to refuse what a job could only make dead letters of.
///
/// Memory: one schema per served table, and per table at most [`TableSchemas::MAX_ANSWERS`]
/// remembered answers (dropped whenever the schema changes or they are full).
#[derive(Debug, Default)]
pub struct TableSchemas {
    tables: parking_lot::RwLock<HashMap<String, Arc<TableView>>>,
}

#[derive(Debug)]
struct TableView {
    schema: iceberg::spec::Schema,
    last_column_id: i32,
    transform: ValueTransform,
    /// Answers by schema id.
    answers: Mutex<HashMap<u32, Result<(), String>>>,
}

impl TableSchemas {
    /// Remembered answers per table.
    pub const MAX_ANSWERS: usize = 1024;

    /// Whether the table of `topic` can take values written with `schema`; Ok when the table
    /// is not served or has no schema yet (its first round creates it from the records).
    pub fn fits(&self, topic: &str, schema: &StoredSchema) -> Result<(), String> {
        let Some(view) = self.tables.read().get(topic).cloned() else {
            return Ok(());
        };
        if let Some(known) = view.answers.lock().get(&schema.id) {
            return known.clone();
        }
        let answer = value_schema_fits(&view.schema, view.last_column_id, view.transform, schema);
        let mut answers = view.answers.lock();
        if answers.len() >= Self::MAX_ANSWERS {
            answers.clear();
        }
        answers.insert(schema.id, answer.clone());
        answer
    }

    fn set(&self, topic: &str, ctx: &TableContext) {
        let mut tables = self.tables.write();
        match &ctx.schema {
            Some(schema) => {
                let same = tables.get(topic).is_some_and(|v| {
                    v.schema == *schema
                        && v.last_column_id == ctx.last_column_id
                        && v.transform == ctx.transform
                });
                if !same {
                    tables.insert(
                        topic.to_string(),
                        Arc::new(TableView {
                            schema: schema.clone(),
                            last_column_id: ctx.last_column_id,
                            transform: ctx.transform,
                            answers: Mutex::new(HashMap::new()),
                        }),
                    );
                }
            }
            None => {
                tables.remove(topic);
            }
        }
    }

    fn remove(&self, topic: &str) {
        self.tables.write().remove(topic);
    }
}

/// Converts the node's table topics, sharing one memory pool.
#[derive(Debug)]
pub struct Worker {
    store: Arc<StreamStore>,
    pool: MemoryPool,
    tables: Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<TableState>>>>,
    schemas: Arc<TableSchemas>,
    /// The partitions' transactions (`txn`), once the node hands them over.
    txns: Mutex<Option<Arc<dyn TxnView>>>,
}

impl Worker {
    pub fn new(store: Arc<StreamStore>, pool: MemoryPool) -> Self {
        Self::with_schemas(store, pool, Arc::default())
    }

    /// A worker that keeps `schemas` up to date with its tables' schemas.
    pub fn with_schemas(
        store: Arc<StreamStore>,
        pool: MemoryPool,
        schemas: Arc<TableSchemas>,
    ) -> Self {
        Worker {
            store,
            pool,
            tables: Mutex::new(BTreeMap::new()),
            schemas,
            txns: Mutex::new(None),
        }
    }

    /// Hands the worker the node's view of Kafka transactions: its jobs then read no further
    /// than each partition's last stable offset and skip aborted transactions' records.
    pub fn set_transactions(&self, view: Arc<dyn TxnView>) {
        *self.txns.lock() = Some(view);
    }

    pub fn pool(&self) -> &MemoryPool {
        &self.pool
    }

    /// Starts serving `table` (replacing an earlier registration and its uncollected outputs).
    pub fn add_table(&self, table: &str, ctx: TableContext, sources: &[PartitionSource]) {
        self.add_table_with_base(table, ctx, sources, LiveFiles::default());
    }

    /// Starts serving `table`, an upsert table whose current snapshot has the live files
    /// `base` (replacing an earlier registration, its uncollected outputs and its index). The
    /// primary-key index is rebuilt from `base` before the table's next job.
    pub fn add_table_with_base(
        &self,
        table: &str,
        ctx: TableContext,
        sources: &[PartitionSource],
        base: LiveFiles,
    ) {
        let partitions = sources
            .iter()
            .map(|s| {
                (
                    s.partition,
                    PartitionState {
                        stream: s.stream,
                        synced: s.start,
                        record_bytes: DEFAULT_RECORD_BYTES,
                        output_ratio: None,
                    },
                )
            })
            .collect();
        self.schemas.set(table, &ctx);
        self.tables.lock().insert(
            table.to_string(),
            Arc::new(tokio::sync::Mutex::new(TableState {
                ctx,
                partitions,
                outputs: Vec::new(),
                index: None,
                base: Some(base),
            })),
        );
    }

    /// Stops serving `table`; its uncollected outputs are dropped (their files become
    /// orphans that the next conversion of the same ranges overwrites).
    pub fn remove_table(&self, table: &str) {
        self.tables.lock().remove(table);
        self.schemas.remove(table);
    }

    fn table(&self, table: &str) -> Result<Arc<tokio::sync::Mutex<TableState>>> {
        self.tables
            .lock()
            .get(table)
            .cloned()
            .ok_or_else(|| Error::Schema(format!("table {table:?} is not served by this worker")))
    }

    /// Converts every partition whose unsynced bytes passed the file target. Returns how
    /// many jobs ran. A table whose job fails is logged and left for the next poll (its
    /// coordinator sees the failure at its next drain); the tables after it still convert.
    pub async fn poll(&self) -> usize {
        let tables: Vec<_> = self
            .tables
            .lock()
            .iter()
            .map(|(name, t)| (name.clone(), t.clone()))
            .collect();
        let mut jobs = 0;
        for (name, t) in tables {
            let mut state = t.lock().await;
            let target = state.ctx.settings.target_file_bytes;
            let max_input = self.max_job_input();
            // Due: enough unconverted input for one target-size file of output, in a
            // partition this node still owns (in a cluster one may have moved since the
            // table's last drain, which then drops it).
            let due: Vec<(i32, usize)> = state
                .partitions
                .iter()
                .filter(|(_, p)| self.store.owns(p.stream))
                .filter_map(|(n, p)| {
                    let end = self.store.end_offset(p.stream).unwrap_or(p.synced);
                    let input = p.job_input(target, max_input);
                    ((end.saturating_sub(p.synced) as f64) * p.record_bytes >= input as f64)
                        .then_some((*n, input))
                })
                .collect();
            for (partition, input) in due {
                match run_job(self, &name, &mut state, partition, None, input).await {
                    Ok(_) => jobs += 1,
                    Err(e) => {
                        tracing::warn!(table = %name, partition, error = %e, "early conversion failed; the table's next drain tries again");
                        break;
                    }
                }
            }
        }
        jobs
    }

    /// The most input one job reads (see [`MAX_JOB_POOL_SHARE`]).
    fn max_job_input(&self) -> usize {
        self.pool.budget() / MAX_JOB_POOL_SHARE
    }

    /// The files of `table`'s outputs not collected yet (data, delete and dead-letter files):
    /// uploaded, and on their way into a round. Empty for a table not served.
    pub async fn uncollected_files(&self, table: &str) -> Vec<String> {
        let Ok(t) = self.table(table) else {
            return Vec::new();
        };
        let state = t.lock().await;
        state
            .outputs
            .iter()
            .flat_map(|(_, o)| {
                o.data_files
                    .iter()
                    .chain(&o.delete_files)
                    .chain(&o.dead_letter_files)
            })
            .map(|f| f.file_path().to_string())
            .collect()
    }

    /// For a commit round: converts each partition up to `until` (its end offset when the
    /// round started; partitions not named go to their current end), then returns all the
    /// table's outputs since the last drain, in the order they were made.
    pub async fn drain(
        &self,
        table: &str,
        until: &BTreeMap<i32, u64>,
    ) -> Result<Vec<(i32, JobOutput)>> {
        let t = self.table(table)?;
        let mut state = t.lock().await;
        let target = state.ctx.settings.target_file_bytes;
        let max_input = self.max_job_input();
        let partitions: Vec<(i32, StreamId, u64)> = state
            .partitions
            .iter()
            .map(|(n, p)| (*n, p.stream, p.synced))
            .collect();
        for (partition, stream, synced) in partitions {
            let end = match until.get(&partition) {
                Some(u) => *u,
                None => self.store.end_offset(stream).map_err(Error::Storage)?,
            };
            let mut at = synced;
            while at < end {
                let input = state
                    .partitions
                    .get(&partition)
                    .map_or(target, |p| p.job_input(target, max_input));
                let out = run_job(self, table, &mut state, partition, Some(end), input).await?;
                if out <= at {
                    break; // nothing readable below `end` (trimmed or not yet durable)
                }
                at = out;
            }
        }
        Ok(std::mem::take(&mut state.outputs))
    }

    /// The table's schema as the worker's jobs see it (the last job's schema).
    pub async fn schema(&self, table: &str) -> Result<Option<iceberg::spec::Schema>> {
        Ok(self.table(table)?.lock().await.ctx.schema.clone())
    }

    /// An upsert table's primary-key index figures; None before the index is built.
    pub async fn index_stats(&self, table: &str) -> Result<Option<IndexStats>> {
        let t = self.table(table)?;
        let state = t.lock().await;
        Ok(state.index.as_ref().map(|i| IndexStats {
            memory_bytes: i.memory_bytes(),
            spills: i.spills(),
            runs: i.runs(),
        }))
    }

    /// The next offset to convert per partition.
    pub async fn synced(&self, table: &str) -> Result<BTreeMap<i32, u64>> {
        let t = self.table(table)?;
        let state = t.lock().await;
        Ok(state
            .partitions
            .iter()
            .map(|(n, p)| (*n, p.synced))
            .collect())
    }
}

/// Runs one job for `partition` and records its output; returns the new synced offset.
#[allow(clippy::too_many_arguments)]
async fn run_job(
    worker: &Worker,
    table: &str,
    state: &mut TableState,
    partition: i32,
    until: Option<u64>,
    max_input_bytes: usize,
) -> Result<u64> {
    let p = state
        .partitions
        .get(&partition)
        .ok_or_else(|| Error::Schema(format!("partition {partition} is not served")))?;
    let (store, pool, schemas) = (&worker.store, &worker.pool, &worker.schemas);
    // With transactions, a job reads to the partition's last stable offset, and skips the
    // records of aborted transactions (`txn`).
    let view = worker.txns.lock().clone();
    let (until, aborted) = match &view {
        None => (until, Vec::new()),
        Some(view) => {
            let stable = view
                .stable_end(table, partition)
                .await
                .map_err(|e| Error::Schema(format!("the partition's transactions: {e}")))?;
            let until = until.map_or(stable, |u| u.min(stable));
            (Some(until), view.aborted(table, partition, p.synced, until))
        }
    };
    let spec = JobSpec {
        partition,
        stream: p.stream,
        from: p.synced,
        until,
        max_input_bytes,
    };
    if let Some(upsert) = state.ctx.upsert.as_ref().filter(|u| !u.deferred) {
        if state.index.is_none() {
            state.index = Some(build_index(upsert, &state.ctx, state.base.take()).await?);
        }
    }
    let out = match convert_range_indexed(
        store,
        pool,
        &state.ctx,
        spec,
        state.index.as_mut(),
        &aborted,
    )
    .await
    {
        Ok(out) => out,
        Err(e) => {
            // A failed upsert job may have spilled part of its changes: rebuild before the
            // next job (the coordinator registers the table again with its live files).
            if state.ctx.upsert.as_ref().is_some_and(|u| !u.deferred) {
                state.index = None;
            }
            return Err(e);
        }
    };
    let records = out.next_offset.saturating_sub(spec.from);
    let next = out.next_offset;
    if let Some(p) = state.partitions.get_mut(&partition) {
        // Both in decoded bytes, what a job's input budget counts.
        if records > 0 && out.decoded_bytes > 0 {
            p.record_bytes = out.decoded_bytes as f64 / records as f64;
        }
        let written: u64 = out.data_files.iter().map(|f| f.file_size_in_bytes()).sum();
        let target = state.ctx.settings.target_file_bytes;
        if out.decoded_bytes >= RATIO_MIN_INPUT.min(target) && written > 0 {
            let ratio = written as f64 / out.decoded_bytes as f64;
            // Smoothed: one odd range (a burst of dead letters, a schema change) does not
            // swing the next job's size.
            p.output_ratio = Some(p.output_ratio.map_or(ratio, |r| (r + ratio) / 2.0));
        }
        p.synced = next;
    }
    if next > spec.from {
        state.ctx.last_column_id = state.ctx.last_column_id.max(out.schema.highest_field_id());
        state.ctx.schema = Some(out.schema.clone());
        schemas.set(table, &state.ctx);
        state.outputs.push((partition, out));
    }
    Ok(next)
}

/// A new index for an upsert table, rebuilt from the table's live files.
async fn build_index(
    upsert: &UpsertSpec,
    ctx: &TableContext,
    base: Option<LiveFiles>,
) -> Result<KeyIndex> {
    let base = base.ok_or_else(|| {
        Error::Schema(
            "the primary-key index must be rebuilt: register the table again with its live files"
                .into(),
        )
    })?;
    crate::upsert::new_index(
        upsert,
        "index",
        &ctx.target.file_io,
        ctx.schema.as_ref(),
        &base,
    )
    .await
}
