//! Conversions handed from the nodes that own a table's partitions to the table's coordinator
//! (docs/architecture.md, "Cluster"): the `inlet_table_chunks` table of the metadata store.
//!
//! In a cluster, an append-only table topic's partitions are spread over the nodes like any
//! other partitions, and each is converted on its owner ([`crate::convert`]). A *chunk* is one
//! partition's conversion of a range `[start, end)`: its uploaded data files (and dead-letter
//! files), the schema they were written with, and its largest event time. The converter
//! publishes it here; the table's coordinator, on whichever node, reads the chunks and commits
//! the ones that continue the table's progress, as one round ([`chain`]).
//!
//! Invariants:
//! - A chunk is only a proposal. What lands is decided by the commit: a round's files must
//!   start exactly at the table's progress ([`crate::commit::CommitError::NotContinuous`]), so
//!   two chunks of one range (a dead owner's and its successor's) never both land.
//! - A row is keyed by (topic id, partition, start, node): a node converting a range again
//!   replaces its own proposal; another node's stays beside it until one is committed.
//! - Rows are deleted once the table's progress is past their end, and when the coordinator
//!   refuses one (its schema cannot join the table's): the converter that made it notices
//!   the missing row and converts again from the table's progress, under a new registration
//!   tag, so the refused row's files (deleted with it) are named by nothing else. Files of
//!   chunks that never land otherwise are left to the orphan sweep ([`crate::orphans`]).
//! - Files are named per node (the converter's file tag carries its node id), so two nodes
//!   converting one range never write over each other's files.

use std::collections::{BTreeMap, BTreeSet};

use iceberg::spec::{
    deserialize_data_file_from_json, serialize_data_file_to_json, DataFile, FormatVersion, Schema,
    StructType,
};
use inlet_storage::MetaStore;
use serde::{Deserialize, Serialize};
use sqlx::Row;

/// The chunk table, versioned with [`MetaStore::migrate`].
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE inlet_table_chunks (
        topic_id VARCHAR(64) NOT NULL,
        partition_index INTEGER NOT NULL,
        start_offset BIGINT NOT NULL,
        node BIGINT NOT NULL,
        end_offset BIGINT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (topic_id, partition_index, start_offset, node))",
    // Where each keyed table's latest primary-key index checkpoint is (`crate::key_checkpoint`).
    "CREATE TABLE inlet_key_index_checkpoints (
        topic_id VARCHAR(64) PRIMARY KEY,
        epoch BIGINT NOT NULL,
        snapshot_id BIGINT NOT NULL,
        path TEXT NOT NULL)",
];

/// A keyed table's latest primary-key index checkpoint: the object at `path` holds the index
/// of snapshot `snapshot_id`, written by the coordinator of `epoch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointPointer {
    pub epoch: i64,
    pub snapshot_id: i64,
    pub path: String,
}

/// A chunk error: the metadata store failed, or a row does not parse.
#[derive(Debug, thiserror::Error)]
pub enum ChunkError {
    #[error("table chunks: the metadata store: {0}")]
    Meta(#[from] sqlx::Error),
    #[error("table chunks: {0}")]
    Storage(#[from] inlet_storage::Error),
    #[error("table chunk: {0}")]
    Record(String),
}

/// One partition's conversion of `[start, end)`, made on `node`.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub partition: i32,
    pub start: u64,
    pub end: u64,
    pub node: i64,
    pub files: Vec<DataFile>,
    pub dead_letter_files: Vec<DataFile>,
    /// The schema the files were written with.
    pub schema: Schema,
    /// The table's `last-column-id` the converter's new columns build on (ids above it are
    /// its own).
    pub base_column_id: i32,
    /// The spec the files were written with: its id and partition type.
    pub spec_id: i32,
    pub partition_type: StructType,
    pub max_timestamp_ms: Option<i64>,
    pub rows: u64,
    /// A keyed table's chunk (its converter's jobs were deferred): the jobs in the order they
    /// ran, each as how many of `files` (in order) it wrote and how many keys it deleted, for
    /// the coordinator to apply one after the other. Empty for an append-only table.
    pub jobs: Vec<ChunkJob>,
    /// The object holding the jobs' deleted keys, in job order
    /// ([`inlet_table_worker::encode_keys_file`]); None when no job deleted a key.
    pub deleted_keys_file: Option<String>,
}

/// One deferred job of a keyed table's chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkJob {
    /// Data files the job wrote.
    pub files: usize,
    /// Keys the job deleted.
    pub deleted_keys: usize,
}

impl Chunk {
    /// Every object the chunk names: its files, its dead-letter files and its deleted keys.
    pub fn objects(&self) -> impl Iterator<Item = &str> {
        self.files
            .iter()
            .chain(&self.dead_letter_files)
            .map(|f| f.file_path())
            .chain(self.deleted_keys_file.as_deref())
    }
}

/// A chunk's body as stored (JSON).
#[derive(Debug, Serialize, Deserialize)]
struct StoredChunk {
    schema: Schema,
    base_column_id: i32,
    spec_id: i32,
    partition_type: StructType,
    /// Iceberg's JSON form of each file.
    files: Vec<String>,
    dead_letter_files: Vec<String>,
    max_timestamp_ms: Option<i64>,
    rows: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    jobs: Vec<ChunkJob>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deleted_keys_file: Option<String>,
}

/// The node's handle on the chunk table.
#[derive(Debug, Clone)]
pub struct Chunks {
    meta: MetaStore,
}

impl Chunks {
    /// The chunk table in `meta`, created the first time.
    pub async fn open(meta: MetaStore) -> Result<Self, ChunkError> {
        meta.migrate("table-coordinator.chunks", MIGRATIONS).await?;
        Ok(Chunks { meta })
    }

    /// Publishes `chunk` of topic `topic_id`, replacing this node's earlier chunk that starts
    /// at the same offset.
    pub async fn publish(&self, topic_id: &str, chunk: &Chunk) -> Result<(), ChunkError> {
        let json = |files: &[DataFile], partition_type: &StructType| {
            files
                .iter()
                .map(|f| {
                    serialize_data_file_to_json(f.clone(), partition_type, FormatVersion::V2)
                        .map_err(|e| ChunkError::Record(e.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let body = StoredChunk {
            schema: chunk.schema.clone(),
            base_column_id: chunk.base_column_id,
            spec_id: chunk.spec_id,
            partition_type: chunk.partition_type.clone(),
            files: json(&chunk.files, &chunk.partition_type)?,
            dead_letter_files: json(&chunk.dead_letter_files, &StructType::new(Vec::new()))?,
            max_timestamp_ms: chunk.max_timestamp_ms,
            rows: chunk.rows,
            jobs: chunk.jobs.clone(),
            deleted_keys_file: chunk.deleted_keys_file.clone(),
        };
        let body = serde_json::to_string(&body).map_err(|e| ChunkError::Record(e.to_string()))?;
        sqlx::query(
            "INSERT INTO inlet_table_chunks
                 (topic_id, partition_index, start_offset, node, end_offset, body)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (topic_id, partition_index, start_offset, node)
             DO UPDATE SET end_offset = excluded.end_offset, body = excluded.body",
        )
        .bind(topic_id)
        .bind(chunk.partition)
        .bind(chunk.start as i64)
        .bind(chunk.node)
        .bind(chunk.end as i64)
        .bind(body)
        .execute(self.meta.pool())
        .await?;
        Ok(())
    }

    /// Every chunk of topic `topic_id`. A row that does not parse is logged and deleted (its
    /// converter notices and converts the range again).
    pub async fn list(&self, topic_id: &str) -> Result<Vec<Chunk>, ChunkError> {
        let rows = sqlx::query(
            "SELECT partition_index, start_offset, node, end_offset, body
             FROM inlet_table_chunks WHERE topic_id = $1
             ORDER BY partition_index, start_offset, node",
        )
        .bind(topic_id)
        .fetch_all(self.meta.pool())
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let partition: i32 = row.try_get("partition_index")?;
            let start = row.try_get::<i64, _>("start_offset")? as u64;
            let node: i64 = row.try_get("node")?;
            let end = row.try_get::<i64, _>("end_offset")? as u64;
            let body: String = row.try_get("body")?;
            match parse(partition, start, end, node, &body) {
                Ok(c) => out.push(c),
                Err(e) => {
                    tracing::warn!(topic_id, partition, start, node, error = %e, "a table chunk does not load; it is dropped and converted again");
                    self.remove(topic_id, partition, start, node).await?;
                }
            }
        }
        Ok(out)
    }

    /// The (partition, start) of every chunk `node` has published for `topic_id`.
    pub async fn published_by(
        &self,
        topic_id: &str,
        node: i64,
    ) -> Result<BTreeSet<(i32, u64)>, ChunkError> {
        let rows = sqlx::query(
            "SELECT partition_index, start_offset FROM inlet_table_chunks
             WHERE topic_id = $1 AND node = $2",
        )
        .bind(topic_id)
        .bind(node)
        .fetch_all(self.meta.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("partition_index")?,
                    r.try_get::<i64, _>("start_offset")? as u64,
                ))
            })
            .collect()
    }

    /// The latest index checkpoint of topic `topic_id`'s table, if any.
    pub async fn checkpoint(
        &self,
        topic_id: &str,
    ) -> Result<Option<CheckpointPointer>, ChunkError> {
        let row = sqlx::query(
            "SELECT epoch, snapshot_id, path FROM inlet_key_index_checkpoints WHERE topic_id = $1",
        )
        .bind(topic_id)
        .fetch_optional(self.meta.pool())
        .await?;
        row.map(|r| {
            Ok(CheckpointPointer {
                epoch: r.try_get("epoch")?,
                snapshot_id: r.try_get("snapshot_id")?,
                path: r.try_get("path")?,
            })
        })
        .transpose()
    }

    /// Makes `to` topic `topic_id`'s latest index checkpoint unless a coordinator of a newer
    /// epoch set one (a fenced coordinator never moves it back). Returns whether it did.
    pub async fn set_checkpoint(
        &self,
        topic_id: &str,
        to: &CheckpointPointer,
    ) -> Result<bool, ChunkError> {
        let done = sqlx::query(
            "INSERT INTO inlet_key_index_checkpoints (topic_id, epoch, snapshot_id, path)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (topic_id) DO UPDATE
             SET epoch = excluded.epoch, snapshot_id = excluded.snapshot_id, path = excluded.path
             WHERE inlet_key_index_checkpoints.epoch <= excluded.epoch",
        )
        .bind(topic_id)
        .bind(to.epoch)
        .bind(to.snapshot_id)
        .bind(&to.path)
        .execute(self.meta.pool())
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Deletes one chunk.
    pub async fn remove(
        &self,
        topic_id: &str,
        partition: i32,
        start: u64,
        node: i64,
    ) -> Result<(), ChunkError> {
        sqlx::query(
            "DELETE FROM inlet_table_chunks
             WHERE topic_id = $1 AND partition_index = $2 AND start_offset = $3 AND node = $4",
        )
        .bind(topic_id)
        .bind(partition)
        .bind(start as i64)
        .bind(node)
        .execute(self.meta.pool())
        .await?;
        Ok(())
    }

    /// Deletes the chunks of each partition that end at or below its committed offset.
    pub async fn remove_committed(
        &self,
        topic_id: &str,
        committed: &BTreeMap<i32, u64>,
    ) -> Result<(), ChunkError> {
        for (partition, offset) in committed {
            sqlx::query(
                "DELETE FROM inlet_table_chunks
                 WHERE topic_id = $1 AND partition_index = $2 AND end_offset <= $3",
            )
            .bind(topic_id)
            .bind(*partition)
            .bind(*offset as i64)
            .execute(self.meta.pool())
            .await?;
        }
        Ok(())
    }

    /// Deletes `node`'s chunks of `partition` (its converter starts that partition over).
    pub async fn remove_node_partition(
        &self,
        topic_id: &str,
        partition: i32,
        node: i64,
    ) -> Result<(), ChunkError> {
        sqlx::query(
            "DELETE FROM inlet_table_chunks
             WHERE topic_id = $1 AND partition_index = $2 AND node = $3",
        )
        .bind(topic_id)
        .bind(partition)
        .bind(node)
        .execute(self.meta.pool())
        .await?;
        Ok(())
    }
}

fn parse(partition: i32, start: u64, end: u64, node: i64, body: &str) -> Result<Chunk, String> {
    let c: StoredChunk = serde_json::from_str(body).map_err(|e| e.to_string())?;
    let files = |files: &[String], spec_id: i32, partition_type: &StructType, schema: &Schema| {
        files
            .iter()
            .map(|f| {
                deserialize_data_file_from_json(f, spec_id, partition_type, schema)
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let dead_letter_schema =
        inlet_table_worker::dead_letter::schema().map_err(|e| e.to_string())?;
    Ok(Chunk {
        partition,
        start,
        end,
        node,
        files: files(&c.files, c.spec_id, &c.partition_type, &c.schema)?,
        dead_letter_files: files(
            &c.dead_letter_files,
            0,
            &StructType::new(Vec::new()),
            &dead_letter_schema,
        )?,
        schema: c.schema,
        base_column_id: c.base_column_id,
        spec_id: c.spec_id,
        partition_type: c.partition_type,
        max_timestamp_ms: c.max_timestamp_ms,
        rows: c.rows,
        jobs: c.jobs,
        deleted_keys_file: c.deleted_keys_file,
    })
}

/// What a round takes from the published chunks.
#[derive(Debug, Default)]
pub struct Chained {
    /// Per partition, the chunks that continue the table's progress, in offset order.
    pub taken: Vec<Chunk>,
    /// The schema every taken chunk's files fit: the table's current schema plus what the
    /// chunks added (None when nothing was taken).
    pub schema: Option<Schema>,
    /// Chunks refused: their files cannot be described by the table's schema with the other
    /// chunks' changes (a column id another chunk or engine gave another column). Their rows
    /// are deleted, and their converters convert again from the table.
    pub refused: Vec<(i32, u64, i64)>,
}

/// Picks the chunks a round commits: per partition, the chain of chunks from the table's
/// progress `offsets` (a partition without progress starts at its lowest chunk), each chunk
/// starting where the previous ends. Among chunks starting at one offset, the one reaching
/// furthest wins (then the highest node id, so the choice is the same on every try). Each
/// taken chunk's schema is rebased onto `table` (its current schema and `last-column-id`,
/// None for a table not created yet) plus the chunks before it; a chunk whose schema does
/// not fit is refused, and its partition's chain stops there.
pub fn chain(
    chunks: Vec<Chunk>,
    offsets: &BTreeMap<i32, u64>,
    table: Option<(&Schema, i32)>,
) -> Chained {
    let mut by_partition: BTreeMap<i32, Vec<Chunk>> = BTreeMap::new();
    for c in chunks {
        by_partition.entry(c.partition).or_default().push(c);
    }
    let mut out = Chained::default();
    let mut schema: Option<Schema> = table.map(|(s, _)| s.clone());
    let last_column_id = table.map_or(0, |(_, l)| l);
    for (partition, mut candidates) in by_partition {
        let mut at = match offsets.get(&partition) {
            Some(o) => *o,
            None => candidates.iter().map(|c| c.start).min().unwrap_or(0),
        };
        loop {
            // Furthest end first, then the highest node id.
            candidates.sort_by_key(|c| (c.start != at, std::cmp::Reverse((c.end, c.node))));
            let Some(pos) = candidates.iter().position(|c| c.start == at && c.end > at) else {
                break;
            };
            let c = candidates.swap_remove(pos);
            let merged = match &schema {
                None => Ok(c.schema.clone()),
                Some(s) => fit(s, &c.schema, last_column_id, c.base_column_id),
            };
            match merged {
                Ok(m) => {
                    schema = Some(m);
                    at = c.end;
                    out.taken.push(c);
                }
                Err(e) => {
                    tracing::warn!(partition, start = c.start, node = c.node, error = %e, "a chunk's schema does not fit the table's; it is converted again");
                    out.refused.push((c.partition, c.start, c.node));
                    break;
                }
            }
        }
    }
    if !out.taken.is_empty() {
        out.schema = schema;
    }
    out
}

/// `current` plus what `chunk` changed, or why `chunk`'s files do not fit it.
fn fit(
    current: &Schema,
    chunk: &Schema,
    last_column_id: i32,
    base_column_id: i32,
) -> Result<Schema, String> {
    match crate::rebase::rebase(current, chunk, last_column_id, base_column_id)? {
        None => Ok(current.clone()),
        Some(fields) => Schema::builder()
            .with_schema_id(current.schema_id())
            .with_identifier_field_ids(current.identifier_field_ids())
            .with_fields(fields.fields().to_vec())
            .build()
            .map_err(|e| e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{NestedField, PrimitiveType, Type};
    use std::sync::Arc;

    fn schema(fields: &[(i32, &str)]) -> Schema {
        Schema::builder()
            .with_fields(
                fields
                    .iter()
                    .map(|(id, n)| {
                        Arc::new(NestedField::optional(
                            *id,
                            *n,
                            Type::Primitive(PrimitiveType::Long),
                        ))
                    })
                    .collect::<Vec<_>>(),
            )
            .build()
            .expect("schema")
    }

    fn chunk(partition: i32, start: u64, end: u64, node: i64, s: &Schema, base: i32) -> Chunk {
        Chunk {
            partition,
            start,
            end,
            node,
            files: Vec::new(),
            dead_letter_files: Vec::new(),
            schema: s.clone(),
            base_column_id: base,
            spec_id: 0,
            partition_type: StructType::new(Vec::new()),
            max_timestamp_ms: None,
            rows: end - start,
            jobs: Vec::new(),
            deleted_keys_file: None,
        }
    }

    fn taken(c: &Chained) -> Vec<(i32, u64, u64, i64)> {
        c.taken
            .iter()
            .map(|c| (c.partition, c.start, c.end, c.node))
            .collect()
    }

    #[test]
    fn chains_start_at_the_tables_progress_and_skip_stale_and_detached_chunks() {
        let s = schema(&[(1, "id")]);
        let chunks = vec![
            chunk(0, 0, 100, 1, &s, 1),   // committed already
            chunk(0, 100, 200, 1, &s, 1), // the dead owner's
            chunk(0, 100, 250, 2, &s, 1), // its successor's, further
            chunk(0, 250, 300, 2, &s, 1),
            chunk(0, 400, 500, 2, &s, 1), // detached: 300..400 missing
            chunk(1, 7, 9, 3, &s, 1),     // no progress yet: its lowest chunk
            chunk(1, 9, 12, 3, &s, 1),
        ];
        let offsets = BTreeMap::from([(0, 100)]);
        let c = chain(chunks, &offsets, Some((&s, 1)));
        assert_eq!(
            taken(&c),
            vec![
                (0, 100, 250, 2),
                (0, 250, 300, 2),
                (1, 7, 9, 3),
                (1, 9, 12, 3)
            ]
        );
        assert!(c.refused.is_empty());
        assert_eq!(c.schema.as_ref().map(|s| s.highest_field_id()), Some(1));
    }

    #[test]
    fn chunks_adding_one_column_agree_and_a_clashing_id_is_refused() {
        let table = schema(&[(1, "id")]);
        let with_x = schema(&[(1, "id"), (2, "x")]);
        let with_y = schema(&[(1, "id"), (2, "y")]);
        let chunks = vec![
            chunk(0, 0, 10, 1, &with_x, 1),
            chunk(1, 0, 10, 2, &with_x, 1), // the same new column on another node
            chunk(2, 0, 10, 3, &with_y, 1), // id 2 for another column: refused
            chunk(2, 10, 20, 3, &with_y, 1),
        ];
        let offsets = BTreeMap::from([(0, 0), (1, 0), (2, 0)]);
        let c = chain(chunks, &offsets, Some((&table, 1)));
        assert_eq!(taken(&c), vec![(0, 0, 10, 1), (1, 0, 10, 2)]);
        assert_eq!(c.refused, vec![(2, 0, 3)]);
        let merged = c.schema.expect("a schema");
        assert_eq!(merged.field_by_id(2).map(|f| f.name.as_str()), Some("x"));
    }

    #[test]
    fn a_new_table_takes_the_first_chunks_schema() {
        let s = schema(&[(1, "id"), (2, "v")]);
        let c = chain(vec![chunk(0, 0, 5, 1, &s, 0)], &BTreeMap::new(), None);
        assert_eq!(taken(&c), vec![(0, 0, 5, 1)]);
        assert_eq!(c.schema, Some(s));
    }
}
