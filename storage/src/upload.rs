//! Uploads: the log cache's data not yet in object storage becomes stream set objects, each at
//! most `upload_max_object_bytes`.
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
use crate::inner::Inner;
use crate::meta::{NewObject, ObjectKind, RangeRow};
use crate::objects::format::{ObjectBuilder, ObjectEntry};
use crate::stream::{RangeRef, StreamShared};

/// What one upload round did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct UploadReport {
    pub object_id: Option<u64>,
    pub bytes: u64,
    pub streams: usize,
    pub wal_segments_trimmed: usize,
    /// The round stopped at `upload_max_object_bytes`: more is waiting for the next round.
    pub more: bool,
}

impl Inner {
    /// Uploads everything durable in the WAL and not yet in object storage.
    pub(crate) async fn upload_round(&self) -> Result<UploadReport> {
        let _round = self.upload_lock.lock().await;
        let Some(wal) = &self.wal else {
            // The object-store WAL commits every group as it acknowledges it.
            return Ok(UploadReport::default());
        };
        let wal_position = wal.durable_position();
        // Per stream taking part: where its upload ends, and how many payload bytes it adds.
        let mut taking_part: Vec<(Arc<StreamShared>, u64, u64)> = Vec::new();
        // Under each stream's lock only clone the entries (reference counts, no copying): the
        // WAL writer takes the same lock to publish appends.
        let mut picked: Vec<(u64, Vec<ObjectEntry>)> = Vec::new();
        // The object is bounded: entries are taken until `upload_max_object_bytes` (at least
        // one), and the WAL is then trimmed only below the first entry left behind.
        let cap = self.config.upload_max_object_bytes;
        let mut total = 0u64;
        let mut left_behind: Option<u64> = None;
        let mut epochs = std::collections::BTreeMap::new();
        for stream in self.live_streams() {
            let state = stream.state.lock();
            if !state.owned {
                continue;
            }
            let first = state.first_dirty();
            let mut entries: Vec<ObjectEntry> = Vec::new();
            for e in state
                .cache
                .range(first..)
                .take_while(|e| e.wal_end <= wal_position)
            {
                let len = e.payload.len() as u64;
                if total > 0 && total + len > cap {
                    left_behind = Some(left_behind.map_or(e.wal_end, |w| w.min(e.wal_end)));
                    break;
                }
                total += len;
                entries.push(ObjectEntry {
                    base_offset: e.base_offset,
                    record_count: e.record_count,
                    timestamp_ms: e.timestamp_ms,
                    payload: e.payload.clone(),
                });
            }
            let epoch = state.epoch;
            drop(state);
            if let Some(last) = entries.last() {
                epochs.insert(stream.id, epoch);
                let bytes = entries.iter().map(|e| e.payload.len() as u64).sum();
                taking_part.push((stream.clone(), last.end_offset(), bytes));
                picked.push((stream.id, entries));
            }
        }
        // An entry ends at `wal_end` and starts before it: trimming below `wal_end - 1` keeps
        // the segment that holds it.
        let trim_to = left_behind.map_or(wal_position, |w| wal_position.min(w.saturating_sub(1)));
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
            let object = NewObject::new(object_id, &built);
            let committed = match self.meta.commit_upload(&object, &epochs).await {
                Ok(committed) => committed,
                Err(e) if is_unique_violation(&e) => {
                    // An earlier commit of these ranges landed but was not applied in memory
                    // (its reply was lost): take the index from the metadata store, then drop
                    // this round's object; the next round uploads whatever is still missing.
                    let streams: Vec<_> = taking_part.into_iter().map(|(s, _, _)| s).collect();
                    self.resync_from_meta(&streams).await?;
                    if self.meta.claim_orphan(object_id, self.now_ms()).await? {
                        self.objects.delete(&self.object_path(object_id)).await?;
                        self.meta.forget_object(object_id).await?;
                    }
                    return Err(e);
                }
                Err(e) => return Err(e),
            };
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
                more: left_behind.is_some(),
            };
            tracing::debug!(
                object_id,
                size,
                streams = report.streams,
                "uploaded stream set object"
            );
            self.log_budget.uploaded(unit);
        }
        let segments = wal.segments();
        report.wal_segments_trimmed = tokio::task::spawn_blocking(move || segments.trim(trim_to))
            .await
            .map_err(|e| Error::Internal(format!("WAL trim task failed: {e}")))??;
        Ok(report)
    }
}

fn is_unique_violation(e: &Error) -> bool {
    matches!(e, Error::Meta(sqlx::Error::Database(db)) if db.kind() == sqlx::error::ErrorKind::UniqueViolation)
}

impl Inner {
    /// Rebuilds streams' object indexes and committed ends from the metadata store, marking
    /// cached entries that turn out to be committed as clean (evictable, no longer dirty).
    pub(crate) async fn resync_from_meta(&self, streams: &[Arc<StreamShared>]) -> Result<()> {
        let mut unit = CleanUnit {
            bytes: 0,
            streams: Vec::new(),
        };
        for stream in streams {
            let Some((committed_end, rows)) = self.meta.stream_index(stream.id).await? else {
                continue; // deleted
            };
            let mut state = stream.state.lock();
            if state.deleted {
                continue;
            }
            state.ranges = crate::stream::range_index(rows);
            if committed_end > state.committed_end {
                let was = state.committed_end;
                let bytes: u64 = state
                    .cache
                    .iter()
                    .filter(|e| e.base_offset >= was && e.end_offset() <= committed_end)
                    .map(|e| e.payload.len() as u64)
                    .sum();
                state.committed_end = committed_end;
                self.dirty_bytes.fetch_sub(bytes, Ordering::AcqRel);
                unit.bytes += bytes;
                unit.streams.push((stream.clone(), committed_end));
            }
        }
        tracing::warn!(
            streams = streams.len(),
            "object index resynchronized from the metadata store"
        );
        self.log_budget.uploaded(unit);
        Ok(())
    }
}

/// The background uploader: runs a round when enough data waits, when appends wait for room,
/// or when the upload interval has passed with data waiting.
pub(crate) async fn run_uploader(inner: Arc<Inner>, cancel: CancellationToken) {
    let interval = Duration::from_millis(inner.config.upload_interval_ms);
    let mut failures = 0u32;
    // A round cut at `upload_max_object_bytes` is followed by the next at once, so a backlog
    // drains as fast as the object store takes it.
    let mut more = false;
    loop {
        if !more {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = inner.upload_wake.notified() => {}
                _ = inner.log_budget.pressure.notified() => {}
                _ = tokio::time::sleep(interval) => {}
            }
        }
        more = false;
        let segments = inner.wal.as_ref().map_or(0, |w| w.segment_count());
        if inner.dirty_bytes.load(Ordering::Acquire) == 0 && segments <= 1 {
            continue;
        }
        match inner.upload_round().await {
            Ok(report) => {
                more = report.more;
                failures = 0;
                *inner.counters.upload_failure.lock() = None;
            }
            Err(e) => {
                failures += 1;
                {
                    let mut streak = inner.counters.upload_failure.lock();
                    let since_ms = streak
                        .as_ref()
                        .map_or_else(|| inner.clock.now_ms(), |f| f.since_ms);
                    *streak = Some(crate::inner::UploadFailure {
                        since_ms,
                        error: e.to_string(),
                        retryable: e.is_retryable(),
                    });
                }
                let backoff = inner.config.retry.policy().backoff(failures);
                tracing::error!(error = %e, ?backoff, "upload failed; the data stays in the WAL and is retried");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use crate::{StorageConfig, StreamStore};

    /// Every payload of stream `s`, in order.
    async fn payloads(store: &StreamStore, s: u64) -> Vec<Bytes> {
        let mut got = Vec::new();
        let mut at = 0;
        while at < store.end_offset(s).expect("end") {
            for b in store.read(s, at, 1 << 20).await.expect("read") {
                at = b.end_offset();
                got.push(b.payload);
            }
        }
        got
    }

    /// A metadata commit lands but its reply is lost, so memory never learns of it: the next
    /// upload of the same ranges conflicts, the index is rebuilt from the metadata store, and the
    /// round after that completes. Nothing is lost, duplicated, or double-counted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lost_commit_reply_is_recovered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = StreamStore::builder(dir.path().join("wal"))
            .config(StorageConfig {
                retention_ms: None,
                ..StorageConfig::default()
            })
            .object_store(crate::open_object_store("memory://").expect("memory"))
            .background_tasks(false)
            .open()
            .await
            .expect("open");
        let s = store.create_stream("s").await.expect("create").id;
        let payload = |i: u8| Bytes::from(vec![i; 100]);
        for i in 0..10 {
            store.append(s, payload(i), 1).await.expect("append");
        }
        let shared = store.inner.streams.read()[&s].clone();
        let before = {
            let state = shared.state.lock();
            (state.ranges.clone(), state.committed_end)
        };
        let dirty = store
            .inner
            .dirty_bytes
            .load(std::sync::atomic::Ordering::SeqCst);
        store.flush().await.expect("flush");
        // Undo the in-memory half of that round, as if its commit's reply had been lost.
        {
            let mut state = shared.state.lock();
            state.ranges = before.0;
            state.committed_end = before.1;
        }
        store
            .inner
            .dirty_bytes
            .store(dirty, std::sync::atomic::Ordering::SeqCst);
        store
            .inner
            .log_budget
            .take_last_clean()
            .expect("the round's unit");

        for i in 10..15 {
            store.append(s, payload(i), 1).await.expect("append");
        }
        let err = store
            .flush()
            .await
            .expect_err("the same ranges again conflict");
        assert!(err.to_string().contains("UNIQUE"), "{err}");
        store
            .flush()
            .await
            .expect("the round after the resync completes");
        store.check_invariants().expect("invariants");
        let stats = store.stats();
        assert_eq!(stats.dirty_bytes, 0, "{stats:?}");
        assert_eq!(stats.log_cache_used_bytes, 1500, "{stats:?}");
        let got = payloads(&store, s).await;
        assert_eq!(got, (0..15).map(payload).collect::<Vec<_>>());
    }

    /// A round bounded by `upload_max_object_bytes` trims the WAL only behind what it uploaded:
    /// a crash right after it (before the next round) loses nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_bounded_round_keeps_what_it_left_in_the_wal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let objects = dir.path().join("objects");
        let config = StorageConfig {
            retention_ms: None,
            upload_max_object_bytes: 8 * 1024,
            wal_segment_bytes: 4 * 1024,
            ..StorageConfig::default()
        };
        let open = || async {
            StreamStore::builder(dir.path().join("wal"))
                .config(config.clone())
                .meta_url(format!("sqlite://{}", dir.path().join("meta.db").display()))
                .object_store_url(objects.display().to_string())
                .background_tasks(false)
                .open()
                .await
                .expect("open")
        };
        let store = open().await;
        let s = store.create_stream("s").await.expect("create").id;
        let payload = |i: u8| Bytes::from(vec![i; 1000]);
        for i in 0..40 {
            store.append(s, payload(i), 1).await.expect("append");
        }
        let segments = store.stats().wal_segments;
        let report = store.inner.upload_round().await.expect("one round");
        assert!(
            report.more,
            "40 KB does not fit one 8 KiB object: {report:?}"
        );
        assert!(report.bytes <= 8 * 1024, "{report:?}");
        assert!(
            store.stats().wal_segments < segments,
            "the WAL behind the uploaded part was trimmed"
        );
        drop(store);
        let store = open().await;
        let got = payloads(&store, s).await;
        assert_eq!(got, (0..40).map(payload).collect::<Vec<_>>());
        store.flush().await.expect("the rest drains");
        assert_eq!(store.stats().dirty_bytes, 0);
    }
}
