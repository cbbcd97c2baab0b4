//! A distributed keyed table's primary-key index, kept so that a new coordinator starts in
//! seconds (docs/architecture.md, "Cluster"): the coordinator writes its index as a
//! checkpoint of the snapshot it holds ([`Checkpoints::maybe_write`]), and a coordinator that
//! registers the table catches up from the latest one ([`build`]) instead of reading the keys
//! of every data file (which took minutes for a table of a thousand files).
//!
//! Where: the object `<table location>/inlet-key-index/<snapshot id>-e<epoch>.kix`
//! ([`inlet_table_worker::CheckpointOf`] and the format are the table worker's
//! `index_checkpoint`); the metadata store's `inlet_key_index_checkpoints` row of the topic
//! names the latest ([`crate::chunks::Chunks::set_checkpoint`]).
//!
//! Invariants:
//! - A checkpoint is written only while the index holds exactly the live rows of the
//!   table's current snapshot: built from it, or every job applied since in a round that
//!   landed as it ([`inlet_table_worker::TableIndex::snapshot`]).
//! - It is used only when its snapshot is the current snapshot or one of its ancestors,
//!   of the same table (uuid) and the same id columns; anything else, a missing or cut
//!   object, or a catch-up that cannot say ([`inlet_table_worker::FromCheckpoint::Refused`]),
//!   rebuilds from the table as before. A checkpoint saves time, never decides a row.
//! - The row moves only forward in epochs: a fenced coordinator's checkpoint (still a true
//!   index of its snapshot) never replaces a newer coordinator's.
//! - Once the row names a new checkpoint, the coordinator deletes the one it replaced; after
//!   its first, it also deletes every checkpoint of an older epoch (left by a crash between
//!   an upload and its row, or by a fenced coordinator), which no row can name any more.
//! - Writing costs a pass over the index and one upload, at most every [`MIN_EVERY`] and at
//!   most [`COST_SHARE`] of the coordinator's time. A write or a read holds one buffer
//!   ([`CHECKPOINT_BUFFER_BYTES`]) borrowed from the node's conversion pool.

use std::time::Duration;

use iceberg::table::Table;
use inlet_catalog::storage::ObjectStoreStorage;
use inlet_table_worker::{
    CheckpointOf, FromCheckpoint, LiveFiles, MemoryPool, TableIndex, UpsertSpec,
    CHECKPOINT_BUFFER_BYTES,
};

use crate::chunks::CheckpointPointer;
use crate::commit_error::CommitError;
use crate::topic::TableTopic;

/// The folder under the table's location that holds its checkpoints.
const FOLDER: &str = "inlet-key-index";

/// The least time between two checkpoints of a table.
pub(crate) const MIN_EVERY: Duration = Duration::from_secs(5);
/// Checkpoints take at most 1/COST_SHARE of the time: the next waits that many times as long
/// as the last took.
const COST_SHARE: u32 = 20;

/// When a coordinator next writes its index.
#[derive(Debug)]
pub(crate) struct Checkpoints {
    next: tokio::time::Instant,
    /// Whether this coordinator has deleted the checkpoints of older epochs yet.
    swept: bool,
    /// The snapshot of this coordinator's last checkpoint: an idle table's is not written
    /// again.
    written: Option<i64>,
}

impl Checkpoints {
    /// The first checkpoint is due at once: a new index (built, or caught up from a
    /// checkpoint the table has moved on from) is written as soon as it holds a snapshot.
    pub(crate) fn new() -> Self {
        Checkpoints {
            next: tokio::time::Instant::now(),
            swept: false,
            written: None,
        }
    }

    /// Writes `index` as a checkpoint of `table`'s current snapshot if one is due and the
    /// index holds exactly that snapshot. A failure is logged: the previous checkpoint stays.
    pub(crate) async fn maybe_write(
        &mut self,
        topic: &TableTopic,
        table: &Table,
        index: &TableIndex,
        epoch: i64,
        files: Option<&ObjectStoreStorage>,
        pool: &MemoryPool,
    ) {
        let now = tokio::time::Instant::now();
        let (Some(chunks), Some(upsert)) = (&topic.chunks, &topic.ctx.upsert) else {
            return;
        };
        let Some(current) = table.metadata().current_snapshot_id() else {
            return;
        };
        if now < self.next || index.snapshot() != Some(current) || self.written == Some(current) {
            return;
        }
        let of = match upsert.id_field_ids(table.metadata().current_schema()) {
            Ok(id_field_ids) => CheckpointOf {
                table_uuid: table.metadata().uuid().to_string(),
                snapshot_id: current,
                id_field_ids,
            },
            Err(e) => {
                tracing::warn!(table = %topic.ident, error = %e, "cannot checkpoint the primary-key index");
                self.next = now + MIN_EVERY;
                return;
            }
        };
        let path = format!(
            "{}/{FOLDER}/{current}-e{epoch}.kix",
            table.metadata().location().trim_end_matches('/')
        );
        let file_io = table.file_io();
        // The write's buffer, from the node's conversion memory.
        let Ok(_memory) = pool.reserve(CHECKPOINT_BUFFER_BYTES).await else {
            return;
        };
        let previous = chunks.checkpoint(&topic.topic_id).await;
        let written = match index.write_checkpoint(file_io, &path, &of).await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(table = %topic.ident, error = %e, "cannot write the primary-key index checkpoint; the previous one stays");
                self.next = now + MIN_EVERY;
                return;
            }
        };
        let pointer = CheckpointPointer {
            epoch,
            snapshot_id: current,
            path: path.clone(),
        };
        match chunks.set_checkpoint(&topic.topic_id, &pointer).await {
            Ok(true) => {
                self.written = Some(current);
                if let Ok(Some(old)) = previous {
                    if old.path != path {
                        if let Err(e) = file_io.delete(&old.path).await {
                            tracing::debug!(table = %topic.ident, path = old.path, error = %e, "cannot delete the replaced index checkpoint");
                        }
                    }
                }
                if let (false, Some(files)) = (self.swept, files) {
                    self.swept = sweep_older_epochs(topic, table, files, epoch).await;
                }
            }
            Ok(false) => {
                // A newer coordinator's checkpoint stays; this one is nobody's.
                let _ = file_io.delete(&path).await;
            }
            Err(e) => {
                tracing::warn!(table = %topic.ident, error = %e, "cannot record the primary-key index checkpoint");
                let _ = file_io.delete(&path).await;
            }
        }
        let took = now.elapsed();
        tracing::debug!(table = %topic.ident, snapshot = current, entries = written.entries, bytes = written.bytes, seconds = took.as_secs_f64(), "checkpointed the primary-key index");
        self.next = tokio::time::Instant::now() + MIN_EVERY.max(took * COST_SHARE);
    }
}

/// Deletes the checkpoints that coordinators of epochs before `epoch` left (a crash between
/// an upload and its row, a fenced coordinator's last one): once this coordinator's row is
/// in, no older epoch's object is named or ever will be. Returns whether the listing worked.
async fn sweep_older_epochs(
    topic: &TableTopic,
    table: &Table,
    files: &ObjectStoreStorage,
    epoch: i64,
) -> bool {
    let folder = format!(
        "{}/{FOLDER}",
        table.metadata().location().trim_end_matches('/')
    );
    let older = |location: &str| {
        epoch_of(location.rsplit('/').next().unwrap_or_default()).is_some_and(|e| e < epoch)
    };
    match files.list(&folder, |f| older(&f.location)).await {
        Ok(stale) => {
            for f in stale {
                if let Err(e) = table.file_io().delete(&f.location).await {
                    tracing::debug!(table = %topic.ident, path = f.location, error = %e, "cannot delete an older coordinator's index checkpoint");
                }
            }
            true
        }
        Err(e) => {
            tracing::debug!(table = %topic.ident, error = %e, "cannot list the index checkpoints");
            false
        }
    }
}

/// The epoch in a checkpoint's name (`<snapshot id>-e<epoch>.kix`).
fn epoch_of(name: &str) -> Option<i64> {
    let (_, rest) = name.strip_suffix(".kix")?.rsplit_once("-e")?;
    rest.parse().ok()
}

/// A keyed table's index for a coordinator registering `table`: caught up from the latest
/// checkpoint when it can be, else rebuilt from the table's live files. It holds exactly the
/// current snapshot ([`TableIndex::snapshot`]).
pub(crate) async fn build(
    topic: &TableTopic,
    upsert: &UpsertSpec,
    table: Option<&Table>,
    pool: &MemoryPool,
) -> Result<TableIndex, CommitError> {
    let started = tokio::time::Instant::now();
    let current = table.and_then(|t| t.metadata().current_snapshot());
    let (Some(t), Some(now)) = (table, current) else {
        // No table or no snapshot yet: an empty index.
        return TableIndex::build(
            upsert,
            &topic.ctx.target.file_io,
            None,
            &LiveFiles::default(),
        )
        .await
        .map_err(|e| worker_error("building the primary-key index", e));
    };
    let checkpoint = match checkpoint_of(topic, upsert, t).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(table = %topic.ident, error = %e, "cannot read the primary-key index checkpoint; rebuilding the index from the table");
            None
        }
    };
    // The live files of now and of the checkpoint's snapshot, read together (they share
    // most manifests).
    let mut snapshots = vec![now.clone()];
    snapshots.extend(checkpoint.as_ref().map(|(_, then, _)| then.clone()));
    let mut lives = crate::reading::live_files_of(t, &snapshots)
        .await?
        .into_iter();
    let live = lives.next().unwrap_or_default();
    if let (Some((pointer, _, of)), Some(then)) = (checkpoint, lives.next()) {
        // The read's buffer, from the node's conversion memory.
        let _memory = pool
            .reserve(CHECKPOINT_BUFFER_BYTES)
            .await
            .map_err(|e| worker_error("reading the index checkpoint", e.into()))?;
        match TableIndex::from_checkpoint(upsert, t.file_io(), &pointer.path, &of, &then, &live)
            .await
        {
            Ok(FromCheckpoint::Built(mut index, c)) => {
                tracing::info!(
                    table = %topic.ident,
                    checkpoint_snapshot = pointer.snapshot_id,
                    kept = c.kept,
                    dropped = c.dropped,
                    new_data_files = c.new_data_files,
                    new_delete_files = c.new_delete_files,
                    seconds = started.elapsed().as_secs_f64(),
                    "caught the primary-key index up from its checkpoint"
                );
                if c.duplicates > 0 {
                    tracing::warn!(table = %topic.ident, duplicates = c.duplicates, "keys with more than one live row in the table; the latest is indexed");
                }
                index.landed(Some(now.snapshot_id()));
                return Ok(*index);
            }
            Ok(FromCheckpoint::Refused(why)) => {
                tracing::info!(table = %topic.ident, why, "the primary-key index checkpoint does not fit the table; rebuilding the index from the table");
            }
            Err(e) => {
                tracing::warn!(table = %topic.ident, path = pointer.path, error = %e, "cannot catch the primary-key index up from its checkpoint; rebuilding the index from the table");
            }
        }
    }
    let schema = t.metadata().current_schema().as_ref().clone();
    let mut index = TableIndex::build(upsert, t.file_io(), Some(&schema), &live)
        .await
        .map_err(|e| worker_error("rebuilding the primary-key index", e))?;
    index.landed(Some(now.snapshot_id()));
    tracing::info!(
        table = %topic.ident,
        data_files = live.data.len(),
        position_delete_files = live.position_deletes.len(),
        seconds = started.elapsed().as_secs_f64(),
        "built the primary-key index from the table"
    );
    Ok(index)
}

fn worker_error(what: &str, e: inlet_table_worker::Error) -> CommitError {
    CommitError::Worker {
        what: what.into(),
        source: Box::new(e),
    }
}

/// The table's latest checkpoint if it may be caught up from: its pointer, its snapshot
/// (the current one or an ancestor) and what it must be of. None (said in the log) when
/// there is none that fits.
async fn checkpoint_of(
    topic: &TableTopic,
    upsert: &UpsertSpec,
    table: &Table,
) -> Result<Option<(CheckpointPointer, iceberg::spec::SnapshotRef, CheckpointOf)>, CommitError> {
    let Some(chunks) = &topic.chunks else {
        return Ok(None);
    };
    let pointer = chunks
        .checkpoint(&topic.topic_id)
        .await
        .map_err(|e| CommitError::Catalog(e.to_string()))?;
    let Some(pointer) = pointer else {
        return Ok(None);
    };
    let meta = table.metadata();
    let Some(then) = ancestor(table, pointer.snapshot_id) else {
        tracing::info!(table = %topic.ident, checkpoint_snapshot = pointer.snapshot_id, "the primary-key index checkpoint is not of an ancestor of the current snapshot; rebuilding the index from the table");
        return Ok(None);
    };
    let of = CheckpointOf {
        table_uuid: meta.uuid().to_string(),
        snapshot_id: pointer.snapshot_id,
        id_field_ids: upsert
            .id_field_ids(meta.current_schema())
            .map_err(|e| CommitError::Catalog(e.to_string()))?,
    };
    Ok(Some((pointer, then, of)))
}

/// Snapshot `id` of `table` if it is the current snapshot or one of its ancestors.
fn ancestor(table: &Table, id: i64) -> Option<iceberg::spec::SnapshotRef> {
    let meta = table.metadata();
    let mut at = meta.current_snapshot()?.clone();
    // Each step goes to a parent: no more steps than snapshots.
    for _ in 0..=meta.snapshots().len() {
        if at.snapshot_id() == id {
            return Some(at);
        }
        at = meta.snapshot_by_id(at.parent_snapshot_id()?)?.clone();
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_checkpoints_epoch_is_read_from_its_name() {
        assert_eq!(super::epoch_of("-8093-e12.kix"), Some(12));
        assert_eq!(super::epoch_of("7510182937004010727-e3.kix"), Some(3));
        assert_eq!(super::epoch_of("7510182937004010727-e3.bin"), None);
        assert_eq!(super::epoch_of("e3.kix"), None);
    }
}
