//! Uploads: the log cache's data not yet in object storage becomes one stream set object.
//!
//! A round takes the WAL's durable position `P` first, then every cached entry that ends at or
//! below `P` and is not yet committed, from every stream. It prepares an object id in the
//! metadata store, builds and PUTs the object (retried with backoff), commits its ranges in one
//! metadata transaction, and only then trims the WAL up to `P`: everything below `P` is now in
//! object storage (or belongs to a deleted stream). A crash anywhere in between loses nothing:
//! the WAL still holds the data, and the prepared object is collected as an orphan.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::cache::CleanUnit;
use crate::error::{Error, Result};
use crate::meta::{NewObject, ObjectKind, RangeRow};
use crate::objects::format::{ObjectBuilder, ObjectEntry};
use crate::store::Inner;
use crate::stream::{RangeRef, StreamShared};

/// What one upload round did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct UploadReport {
    pub object_id: Option<u64>,
    pub bytes: u64,
    pub streams: usize,
    pub wal_segments_trimmed: usize,
}

impl Inner {
    /// Uploads everything durable in the WAL and not yet in object storage.
    pub(crate) async fn upload_round(&self) -> Result<UploadReport> {
        let _round = self.upload_lock.lock().await;
        let wal_position = self.wal.durable_position();
        // Per stream taking part: where its upload ends, and how many payload bytes it adds.
        let mut taking_part: Vec<(Arc<StreamShared>, u64, u64)> = Vec::new();
        // Under each stream's lock only clone the entries (reference counts, no copying): the
        // WAL writer takes the same lock to publish appends.
        let mut picked: Vec<(u64, Vec<ObjectEntry>)> = Vec::new();
        for stream in self.live_streams() {
            let state = stream.state.lock();
            let first = state.first_dirty();
            let entries: Vec<ObjectEntry> = state
                .cache
                .range(first..)
                .take_while(|e| e.wal_end <= wal_position)
                .map(|e| ObjectEntry {
                    base_offset: e.base_offset,
                    record_count: e.record_count,
                    timestamp_ms: e.timestamp_ms,
                    payload: e.payload.clone(),
                })
                .collect();
            drop(state);
            if let Some(last) = entries.last() {
                let bytes = entries.iter().map(|e| e.payload.len() as u64).sum();
                taking_part.push((stream.clone(), last.end_offset(), bytes));
                picked.push((stream.id, entries));
            }
        }
        let mut report = UploadReport::default();
        if !picked.is_empty() {
            let object_id = self
                .meta
                .prepare_object(ObjectKind::StreamSet, self.config.node_id, self.now_ms())
                .await?;
            // Checksumming tens of MiB is CPU work: keep it off the async workers.
            let block_bytes = self.config.object_block_bytes;
            let built = tokio::task::spawn_blocking(move || {
                let mut builder = ObjectBuilder::new(block_bytes);
                for (stream_id, entries) in &picked {
                    for e in entries {
                        builder.add(*stream_id, e);
                    }
                }
                builder.finish()
            })
            .await
            .map_err(|e| Error::Internal(format!("object build task failed: {e}")))?;
            let size = built.len;
            self.objects
                .put_chunks(&self.object_path(object_id), &built.chunks)
                .await?;
            let object = NewObject {
                id: object_id,
                size,
                index_position: built.footer.index_position,
                index_len: built.footer.index_len as u64,
                ranges: built
                    .ranges
                    .iter()
                    .map(|r| RangeRow {
                        object_id,
                        stream_id: r.stream_id,
                        start_offset: r.start_offset,
                        end_offset: r.end_offset,
                        position: r.position,
                        size: r.size,
                        max_timestamp_ms: r.max_timestamp_ms,
                    })
                    .collect(),
            };
            let committed = self.meta.commit_upload(&object).await?;
            let mut rows: HashMap<u64, Vec<RangeRow>> = HashMap::new();
            for row in committed {
                rows.entry(row.stream_id).or_default().push(row);
            }
            // A stream deleted meanwhile has no committed rows (or is marked deleted):
            // `delete_stream` already released its dirty bytes, so they are not counted here.
            let mut unit = CleanUnit {
                bytes: 0,
                streams: Vec::new(),
            };
            for (stream, end, bytes) in taking_part {
                let Some(stream_rows) = rows.remove(&stream.id) else {
                    continue;
                };
                let mut state = stream.state.lock();
                if state.deleted {
                    continue;
                }
                for row in stream_rows {
                    state.ranges.insert(
                        row.start_offset,
                        RangeRef {
                            row,
                            kind: ObjectKind::StreamSet,
                            index_position: object.index_position,
                            index_len: object.index_len,
                        },
                    );
                    state.committed_end = state.committed_end.max(row.end_offset);
                }
                drop(state);
                unit.bytes += bytes;
                unit.streams.push((stream, end));
            }
            self.dirty_bytes.fetch_sub(unit.bytes, Ordering::AcqRel);
            self.counters.uploads.fetch_add(1, Ordering::Relaxed);
            self.counters
                .uploaded_bytes
                .fetch_add(unit.bytes, Ordering::Relaxed);
            report = UploadReport {
                object_id: Some(object_id),
                bytes: unit.bytes,
                streams: unit.streams.len(),
                wal_segments_trimmed: 0,
            };
            tracing::debug!(
                object_id,
                size,
                streams = report.streams,
                "uploaded stream set object"
            );
            self.log_budget.uploaded(unit);
        }
        let segments = self.wal.segments();
        report.wal_segments_trimmed =
            tokio::task::spawn_blocking(move || segments.trim(wal_position))
                .await
                .map_err(|e| Error::Internal(format!("WAL trim task failed: {e}")))??;
        Ok(report)
    }
}

/// The background uploader: runs a round when enough data waits, when appends wait for room,
/// or when the upload interval has passed with data waiting.
pub(crate) async fn run_uploader(inner: Arc<Inner>, cancel: CancellationToken) {
    let interval = Duration::from_millis(inner.config.upload_interval_ms);
    let mut failures = 0u32;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = inner.upload_wake.notified() => {}
            _ = inner.log_budget.pressure.notified() => {}
            _ = tokio::time::sleep(interval) => {}
        }
        if inner.dirty_bytes.load(Ordering::Acquire) == 0 && inner.wal.segment_count() <= 1 {
            continue;
        }
        match inner.upload_round().await {
            Ok(_) => failures = 0,
            Err(e) => {
                failures += 1;
                let backoff = inner.config.retry.backoff(failures);
                tracing::error!(error = %e, ?backoff, "upload failed; the data stays in the WAL and is retried");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
            }
        }
    }
}
