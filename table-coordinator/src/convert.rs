//! A distributed table's converter on one node (docs/architecture.md, "Cluster"): converts the
//! table topic's partitions this node owns and publishes each conversion as a chunk
//! ([`crate::chunks`]) for the table's coordinator, wherever it runs, to commit.
//!
//! Every commit interval it:
//! 1. reads the table's progress (`inlet.offsets` of the topic) and which of its chunks are
//!    still published;
//! 2. per owned partition, goes on from where its last chunk ended, unless that no longer
//!    continues the table: the table's progress is neither there nor at the start of one of
//!    its chunks still waiting (another node's chunk of the range landed, or the table was
//!    rolled back), or the coordinator refused one of its chunks (deleted it). Then it starts
//!    the partition over at the table's progress and drops its own chunks of it;
//! 3. registers the owned partitions with the node's worker again when they, a starting
//!    point or the table's schema changed (files are tagged with the node id and a random
//!    registration tag, so no two conversions write one file);
//! 4. converts each owned partition to its end offset (the worker's early jobs included) and
//!    publishes one chunk per partition.
//!
//! Invariants:
//! - Chunks of a partition published by one converter are consecutive from where it started,
//!   so the coordinator can chain them from the table's progress.
//! - Nothing here decides what lands: the coordinator's commit checks that a round starts at
//!   the table's progress, so a chunk made by a node that lost the partition meanwhile, or
//!   made twice, is never committed twice.
//! - A partition this node stops owning is dropped from the worker at the next interval;
//!   its published chunks stay for the coordinator (they are durable conversions).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use inlet_storage::{StreamId, StreamStore};
use inlet_table_worker::{JobOutput, PartitionSource, Worker};
use tokio_util::sync::CancellationToken;

use crate::chunks::{Chunk, ChunkJob, Chunks};
use crate::commit::Committer;
use crate::coordinator::{dead_letter_table, table_context, TableTopic};

/// One owned partition's conversion state.
#[derive(Debug)]
struct Part {
    stream: StreamId,
    /// The next offset to convert: where the last published chunk ended.
    at: u64,
    /// (start, end) of the chunks published since the partition was (re)started that the
    /// table's progress has not passed yet.
    pending: BTreeSet<(u64, u64)>,
}

/// What the worker's registration was made from: registered again when it changes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Registration {
    table_uuid: Option<uuid::Uuid>,
    schema_id: Option<i32>,
    last_column_id: i32,
    starts: BTreeMap<i32, u64>,
}

/// Runs the converter of `topic` (whose [`TableTopic::chunks`] is set) on node `node` until
/// `stop`. See the module doc.
pub async fn run(
    topic: TableTopic,
    worker: Arc<Worker>,
    committer: Committer,
    store: Arc<StreamStore>,
    node: i64,
    stop: CancellationToken,
) {
    let Some(chunks) = topic.chunks.clone() else {
        return;
    };
    let mut converter = Converter {
        topic,
        worker,
        committer,
        store,
        chunks,
        node,
        parts: BTreeMap::new(),
        registered: None,
        ctx: None,
    };
    let mut ticks = tokio::time::interval(converter.topic.commit_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = ticks.tick() => {}
        }
        if let Err(e) = converter.cycle().await {
            tracing::warn!(table = %converter.topic.ident, error = %e, "converting this node's partitions failed; retrying at the next interval");
            // The worker may have moved past what was published: start from the chunks.
            converter.registered = None;
        }
    }
    if converter.registered.is_some() {
        converter.worker.remove_table(&converter.topic.name);
    }
}

struct Converter {
    topic: TableTopic,
    worker: Arc<Worker>,
    committer: Committer,
    store: Arc<StreamStore>,
    chunks: Chunks,
    node: i64,
    parts: BTreeMap<i32, Part>,
    registered: Option<Registration>,
    /// The context of the current registration: its `last_column_id` is what the chunks'
    /// new columns build on.
    ctx: Option<inlet_table_worker::TableContext>,
}

impl Converter {
    async fn cycle(&mut self) -> Result<(), String> {
        let owned: BTreeMap<i32, StreamId> = self
            .topic
            .partitions
            .iter()
            .filter(|(_, s)| self.store.owns(*s))
            .copied()
            .collect();
        self.parts.retain(|p, _| owned.contains_key(p));
        if owned.is_empty() {
            if self.registered.take().is_some() {
                self.worker.remove_table(&self.topic.name);
            }
            return Ok(());
        }
        // Which of its chunks are still there, then the table: a chunk deleted before this read
        // was refused or committed, and a committed one's range is in the progress read after.
        let published = self
            .chunks
            .published_by(&self.topic.topic_id, self.node)
            .await
            .map_err(|e| e.to_string())?;
        let table = self
            .committer
            .load(&self.topic.ident)
            .await
            .map_err(|e| e.to_string())?;
        let mut committed = table.as_ref().map(Committer::committed).unwrap_or_default();
        committed.keep_only_topic(&self.topic.topic_id);
        let mut restarted = false;
        for (partition, stream) in &owned {
            let progress = committed.offsets.get(partition).copied();
            let first =
                || progress.unwrap_or_else(|| self.store.start_offset(*stream).unwrap_or(0));
            let part = self.parts.entry(*partition).or_insert_with(|| Part {
                stream: *stream,
                at: first(),
                pending: BTreeSet::new(),
            });
            if let Some(p) = progress {
                part.pending.retain(|(_, end)| *end > p);
            }
            let refused = part
                .pending
                .iter()
                .any(|(start, _)| !published.contains(&(*partition, *start)));
            let continues =
                progress.is_none_or(|p| p == part.at || part.pending.iter().any(|(s, _)| *s == p));
            if refused || !continues {
                let restart = first();
                tracing::info!(table = %self.topic.ident, partition, from = part.at, to = restart, refused, "this node's conversion of the partition no longer continues the table; converting again from the table's progress");
                self.chunks
                    .remove_node_partition(&self.topic.topic_id, *partition, self.node)
                    .await
                    .map_err(|e| e.to_string())?;
                part.at = restart;
                part.pending.clear();
                restarted = true;
            }
        }
        let registration = Registration {
            table_uuid: table.as_ref().map(|t| t.metadata().uuid()),
            schema_id: table
                .as_ref()
                .map(|t| t.metadata().current_schema().schema_id()),
            last_column_id: table.as_ref().map_or(0, |t| t.metadata().last_column_id()),
            starts: self.parts.iter().map(|(p, s)| (*p, s.at)).collect(),
        };
        // Registered again (the worker's uncollected early outputs dropped) when a partition
        // starts over, came or went, or the table changed: the worker then starts each
        // partition where its published chunks end.
        let moved = self.registered.as_ref().is_none_or(|r| {
            r.table_uuid != registration.table_uuid
                || r.schema_id != registration.schema_id
                || r.last_column_id != registration.last_column_id
                || r.starts.keys().ne(registration.starts.keys())
        });
        if moved || restarted {
            self.register(table.as_ref(), registration).await?;
        }
        let until: BTreeMap<i32, u64> = self
            .parts
            .iter()
            .filter_map(|(p, s)| Some((*p, self.store.end_offset(s.stream).ok()?)))
            .collect();
        let outputs = self
            .worker
            .drain(&self.topic.name, &until)
            .await
            .map_err(|e| e.to_string())?;
        self.publish(outputs).await
    }

    async fn register(
        &mut self,
        table: Option<&iceberg::table::Table>,
        registration: Registration,
    ) -> Result<(), String> {
        let dead_letter_floor = match self
            .committer
            .load(&dead_letter_table(&self.topic.ident))
            .await
            .map_err(|e| e.to_string())?
        {
            Some(t) => {
                let mut c = Committer::committed(&t);
                c.keep_only_topic(&self.topic.topic_id);
                c.offsets
            }
            None => BTreeMap::new(),
        };
        #[allow(clippy::disallowed_methods)] // a registration's file tag: unique is all it must be
        let tag = format!(
            "n{}r{}",
            self.node,
            &uuid::Uuid::new_v4().simple().to_string()[..6]
        );
        let mut ctx = table_context(&self.topic, table, &dead_letter_floor, Some(&tag));
        // A keyed table's one primary-key index is its coordinator's: the jobs here only write
        // rows and name the keys they delete.
        if let Some(upsert) = ctx.upsert.as_mut() {
            upsert.deferred = true;
        }
        let sources: Vec<PartitionSource> = self
            .parts
            .iter()
            .map(|(p, s)| PartitionSource {
                partition: *p,
                stream: s.stream,
                start: s.at,
            })
            .collect();
        self.worker
            .add_table(&self.topic.name, ctx.clone(), &sources);
        self.ctx = Some(ctx);
        self.registered = Some(registration);
        Ok(())
    }

    /// Publishes one chunk per partition from the worker's `outputs` (consecutive per
    /// partition, from each partition's `at`).
    async fn publish(&mut self, outputs: Vec<(i32, JobOutput)>) -> Result<(), String> {
        let Some(ctx) = &self.ctx else {
            return Ok(());
        };
        let mut by_partition: BTreeMap<i32, Vec<JobOutput>> = BTreeMap::new();
        for (p, out) in outputs {
            by_partition.entry(p).or_default().push(out);
        }
        for (partition, outs) in by_partition {
            let Some(part) = self.parts.get_mut(&partition) else {
                continue;
            };
            let Some(last) = outs.last() else { continue };
            let (end, schema) = (last.next_offset, last.schema.clone());
            if end <= part.at {
                continue;
            }
            let (spec_id, partition_type) = files_spec(ctx, &schema)?;
            let mut chunk = Chunk {
                partition,
                start: part.at,
                end,
                node: self.node,
                files: Vec::new(),
                dead_letter_files: Vec::new(),
                schema,
                base_column_id: ctx.last_column_id,
                spec_id,
                partition_type,
                max_timestamp_ms: None,
                rows: 0,
                jobs: Vec::new(),
                deleted_keys_file: None,
            };
            let keyed = ctx.upsert.is_some();
            let mut deleted_keys = Vec::new();
            for out in outs {
                if keyed {
                    chunk.jobs.push(ChunkJob {
                        files: out.data_files.len(),
                        deleted_keys: out.deleted_keys.len(),
                    });
                    deleted_keys.extend(out.deleted_keys);
                }
                chunk.files.extend(out.data_files);
                chunk.dead_letter_files.extend(out.dead_letter_files);
                chunk.rows += out.rows;
                chunk.max_timestamp_ms = chunk.max_timestamp_ms.max(out.max_timestamp_ms);
                if !out.dead_letters.is_empty() {
                    tracing::warn!(table = %self.topic.ident, partition, records = out.dead_letters.len(), first_error = %out.dead_letters[0].error, "records did not convert; they go to the dead-letter table");
                }
            }
            if !deleted_keys.is_empty() {
                let path = format!(
                    "{}/{}-deleted-keys",
                    ctx.target.data_location.trim_end_matches('/'),
                    ctx.file_prefix(partition, chunk.start, chunk.end)
                );
                let bytes = inlet_table_worker::encode_keys_file(&deleted_keys);
                ctx.target
                    .file_io
                    .new_output(&path)
                    .map_err(|e| e.to_string())?
                    .write(bytes.into())
                    .await
                    .map_err(|e| format!("writing the chunk's deleted keys to {path}: {e}"))?;
                chunk.deleted_keys_file = Some(path);
            }
            self.chunks
                .publish(&self.topic.topic_id, &chunk)
                .await
                .map_err(|e| e.to_string())?;
            part.pending.insert((chunk.start, chunk.end));
            part.at = end;
        }
        Ok(())
    }
}

/// The spec files written with `schema` under `ctx` have: a new table's `partition.by` bound
/// to the schema (spec id 0), or the table's spec.
fn files_spec(
    ctx: &inlet_table_worker::TableContext,
    schema: &iceberg::spec::Schema,
) -> Result<(i32, iceberg::spec::StructType), String> {
    let spec = if ctx.partition_by.is_empty() {
        ctx.target.spec.as_ref().clone()
    } else {
        inlet_table_worker::partition::spec(schema, &ctx.partition_by).map_err(|e| e.to_string())?
    };
    let partition_type = spec.partition_type(schema).map_err(|e| e.to_string())?;
    Ok((spec.spec_id(), partition_type))
}
