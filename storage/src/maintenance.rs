//! Background maintenance of the objects: retention, compaction and garbage collection.
//!
//! - *Retention*: a stream's oldest ranges go when they lie below its start offset (trimmed),
//!   when all their data is older than its retention time, or while the stream holds more than
//!   its retention bytes. The start offset rises to the end of the last range dropped. Data not
//!   yet uploaded is never expired.
//! - *Stream objects*: a stream with at least `stream_object_min_bytes` spread over stream set
//!   objects gets its data copied into an object of its own, so a later catch-up read of it
//!   touches one object and expiring it frees whole objects.
//! - *Merging*: stream set objects smaller than `compaction_small_object_bytes` are merged, up
//!   to `compaction_max_merge_bytes` at a time.
//! - *Garbage collection*: objects left without ranges are deleted from the object store once
//!   `delete_grace_ms` has passed (readers that located them before may still be reading);
//!   abandoned prepared uploads are deleted after `orphan_grace_ms`.
//!
//! A compaction commits in one metadata transaction that swaps the copied ranges for the new
//! object's; if any copied range vanished meanwhile (its stream was deleted), the transaction is
//! abandoned and the new object collected.
//!
//! In a cluster a node maintains only the streams it owns, each commit fenced by its epoch. A
//! stream that moved during a pass (handed over, or taken while this node was away) fails
//! only its own step, which its new owner does; the pass goes on with the others.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::inner::Inner;
use crate::meta::{NewObject, ObjectKind, ObjectState, RangeRow};
use crate::objects::format::{self, ObjectBuilder, ObjectEntry};
use crate::stream::{RangeRef, StreamShared};

/// About how much a rewrite reads at a time (whole blocks; a block larger than this is read
/// alone).
const READ_CHUNK_BYTES: u64 = 8 << 20;

/// What one maintenance pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MaintenanceReport {
    pub ranges_expired: usize,
    pub stream_objects_written: usize,
    pub objects_merged: usize,
    pub objects_deleted: usize,
    pub orphans_collected: usize,
}

impl Inner {
    /// The streams this node owns.
    pub(crate) fn owned_streams(&self) -> Vec<Arc<StreamShared>> {
        let mut owned = self.live_streams();
        owned.retain(|s| s.state.lock().owned);
        owned
    }

    /// The epoch this node owns each of `streams` under; fails if it owns one no more.
    fn epochs_of(&self, streams: impl Iterator<Item = u64>) -> Result<BTreeMap<u64, u64>> {
        let map = self.streams.read();
        let mut epochs = BTreeMap::new();
        for id in streams {
            let state = map.get(&id).map(|s| {
                let state = s.state.lock();
                (state.owned, state.epoch)
            });
            match state {
                Some((true, epoch)) => {
                    epochs.insert(id, epoch);
                }
                _ => return Err(crate::error::Error::NotOwner(id)),
            }
        }
        Ok(epochs)
    }

    pub(crate) async fn maintain(&self) -> Result<MaintenanceReport> {
        let _pass = self.maintenance_lock.lock().await;
        let mut report = MaintenanceReport::default();
        // Table floors rise on whichever node runs the table's coordinator: read them afresh.
        let floors = self.meta.table_floors().await?;
        for stream in self.live_streams() {
            stream.state.lock().table_floor = floors.get(&stream.id).copied();
        }
        // Only streams this node owns: their owner alone commits their metadata. A stream
        // handed to another node meanwhile fails its step (its commit is fenced); the new
        // owner maintains it, and the pass goes on with the others.
        for stream in self.owned_streams() {
            report.ranges_expired += moved_away(self.apply_retention(&stream).await)?;
        }
        for stream in self.owned_streams() {
            if moved_away(self.write_stream_object(&stream).await)? {
                report.stream_objects_written += 1;
            }
        }
        report.objects_merged = moved_away(self.merge_small_objects().await)?;
        let stray = self.meta.retire_rangeless_objects(self.now_ms()).await?;
        if stray > 0 {
            tracing::warn!(
                objects = stray,
                "retired committed objects that held no range"
            );
        }
        report.objects_deleted = self.delete_retired_objects().await?;
        report.orphans_collected = self.collect_orphans(false).await?;
        Ok(report)
    }

    async fn apply_retention(&self, stream: &Arc<StreamShared>) -> Result<usize> {
        let now = self.now_ms();
        let (expired, new_start, epoch, held_for_table) = {
            let state = stream.state.lock();
            let retention_ms = match state.retention_ms {
                Some(ms) if ms < 0 => None,
                Some(ms) => Some(ms as u64),
                None => self.config.retention_ms,
            };
            let retention_bytes = match state.retention_bytes {
                Some(b) if b < 0 => None,
                Some(b) => Some(b as u64),
                None => self.config.retention_bytes,
            };
            let mut held: u64 = state.ranges.values().map(|r| r.row.size).sum();
            let mut expired = Vec::new();
            let mut new_start = state.start_offset;
            // Bytes retention would take but the table has not committed yet.
            let mut kept_for_table = 0;
            for r in state.ranges.values() {
                let trimmed = r.row.end_offset <= state.start_offset;
                let too_old =
                    retention_ms.is_some_and(|ms| r.row.max_timestamp_ms.saturating_add(ms) < now);
                let too_big = retention_bytes.is_some_and(|b| held > b);
                if !(trimmed || too_old || too_big) {
                    break;
                }
                // A table topic's stream keeps what its table has not committed: retention
                // never takes a record before the table holds it (an explicit trim does).
                if !trimmed && state.table_floor.is_some_and(|f| r.row.end_offset > f) {
                    kept_for_table += r.row.size;
                    // Later ranges are held too (they end higher); only their size is counted.
                    continue;
                }
                if kept_for_table > 0 {
                    break;
                }
                held -= r.row.size;
                new_start = new_start.max(r.row.end_offset);
                expired.push(r.row);
            }
            (expired, new_start, state.epoch, kept_for_table)
        };
        stream.state.lock().held_bytes = held_for_table;
        if held_for_table > 0 {
            tracing::debug!(
                stream = stream.id,
                held_bytes = held_for_table,
                "retention holds ranges the table has not committed"
            );
        }
        if expired.is_empty() {
            return Ok(0);
        }
        self.meta
            .expire_ranges(stream.id, epoch, new_start, &expired, now)
            .await?;
        let mut state = stream.state.lock();
        for r in &expired {
            state.ranges.remove(&r.start_offset);
        }
        state.start_offset = state.start_offset.max(new_start);
        tracing::debug!(
            stream = stream.id,
            new_start,
            ranges = expired.len(),
            "retention expired ranges"
        );
        Ok(expired.len())
    }

    /// Reads the entries of `ranges` (all from objects) in order.
    async fn read_ranges(&self, ranges: &[RangeRef]) -> Result<Vec<(u64, ObjectEntry)>> {
        let mut out = Vec::new();
        for range in ranges {
            let index = self.object_index(range).await?;
            let path = self.object_path(range.row.object_id);
            let end = range.row.position + range.row.size;
            let blocks: Vec<_> = index
                .iter()
                .filter(|b| {
                    b.stream_id == range.row.stream_id
                        && b.position >= range.row.position
                        && b.position < end
                })
                .collect();
            // In reads of about READ_CHUNK_BYTES (whole blocks), not the range at once: a
            // buffer of tens of MiB is a fresh mapping each time (page faults, zeroed pages),
            // while chunks come back from the allocator's own free memory.
            let mut at = 0;
            while at < blocks.len() {
                let first = blocks[at].position;
                let mut last = at;
                while last + 1 < blocks.len()
                    && blocks[last + 1].position
                        == blocks[last].position + u64::from(blocks[last].size)
                    && blocks[last + 1].position + u64::from(blocks[last + 1].size) - first
                        <= READ_CHUNK_BYTES
                {
                    last += 1;
                }
                let chunk_end = blocks[last].position + u64::from(blocks[last].size);
                let data = self.objects.get_range(&path, first..chunk_end).await?;
                for b in &blocks[at..=last] {
                    let start = (b.position - first) as usize;
                    let bytes = data.slice(start..start + b.size as usize);
                    for e in format::decode_block(&bytes, b, path.as_ref())? {
                        out.push((range.row.stream_id, e));
                    }
                }
                at = last + 1;
            }
        }
        Ok(out)
    }

    /// Writes `entries` as a new object of `kind` and commits it in place of `replaced`.
    async fn rewrite(
        &self,
        kind: ObjectKind,
        entries: &[(u64, ObjectEntry)],
        replaced: &[RangeRef],
        failpoint: Option<&str>,
    ) -> Result<bool> {
        // Copying and checksumming up to a whole object: background work.
        let built = crate::background(|| {
            let mut builder = ObjectBuilder::new(self.config.object_block_bytes);
            for (stream_id, e) in entries {
                builder.add(*stream_id, e);
            }
            builder.finish()
        });
        let object_id = self
            .meta
            .prepare_object(kind, self.config.node_id, self.now_ms())
            .await?;
        let path = self.object_path(object_id);
        self.objects.put_chunks(&path, &built.chunks).await?;
        if let Some(point) = failpoint {
            inlet_common::failpoint::hit(point);
        }
        let object = NewObject::new(object_id, &built);
        let old: Vec<RangeRow> = replaced.iter().map(|r| r.row).collect();
        let epochs = self.epochs_of(replaced.iter().map(|r| r.row.stream_id))?;
        if !self
            .meta
            .commit_compaction(&object, &old, &epochs, self.now_ms())
            .await?
        {
            // A copied range vanished (stream deleted or expired): drop the new object.
            self.objects.delete(&path).await?;
            self.meta.forget_object(object_id).await?;
            return Ok(false);
        }
        // Swap each stream's ranges under one hold of its lock, so a reader never finds the
        // offsets in neither the old nor the new object.
        let streams = self.streams.read().clone();
        let mut by_stream: BTreeMap<u64, (Vec<RangeRow>, Vec<RangeRow>)> = BTreeMap::new();
        for r in replaced {
            by_stream.entry(r.row.stream_id).or_default().0.push(r.row);
        }
        for row in &object.ranges {
            by_stream.entry(row.stream_id).or_default().1.push(*row);
        }
        for (stream_id, (old, new)) in by_stream {
            let Some(stream) = streams.get(&stream_id) else {
                continue;
            };
            let mut state = stream.state.lock();
            for r in old {
                if state.ranges.get(&r.start_offset).map(|x| x.row.object_id) == Some(r.object_id) {
                    state.ranges.remove(&r.start_offset);
                }
            }
            for row in new {
                state.ranges.insert(
                    row.start_offset,
                    RangeRef {
                        row,
                        kind,
                        index_position: object.index_position,
                        index_len: object.index_len,
                    },
                );
            }
        }
        self.counters.compactions.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Rewrites the uploaded batches of `stream` from the object range that holds `from` (or
    /// the first after it), through whole ranges that end at or below `until`, while they hold
    /// at most `max_bytes` (always at least one range): each batch goes through `rewrite`,
    /// which returns new bytes for it (its offsets unchanged) or `None` to keep it. The ranges
    /// are replaced by one stream object in one metadata transaction, fenced by this node's
    /// epoch of the stream; cached entries below its end are dropped, so reads come from it.
    /// Returns the end of what was rewritten, or `None` when no range qualifies. A crash
    /// before the commit leaves the old ranges in place (the new object is an orphan, which
    /// the collector deletes).
    pub(crate) async fn rewrite_stream(
        &self,
        stream: &Arc<StreamShared>,
        (from, until, max_bytes): (u64, u64, u64),
        rewrite: &mut (dyn FnMut(&ObjectEntry) -> Option<bytes::Bytes> + Send),
    ) -> Result<Option<u64>> {
        let _pass = self.maintenance_lock.lock().await;
        let ranges: Vec<RangeRef> = {
            let state = stream.state.lock();
            if !state.owned {
                return Err(Error::NotOwner(stream.id));
            }
            let mut picked: Vec<RangeRef> = Vec::new();
            let mut bytes = 0;
            let first = state.range_for(from).map_or(from, |r| r.row.start_offset);
            for r in state.ranges.range(first..).map(|(_, r)| *r) {
                let contiguous = picked
                    .last()
                    .is_none_or(|p| p.row.end_offset == r.row.start_offset);
                if r.row.end_offset > until
                    || !contiguous
                    || (!picked.is_empty() && bytes + r.row.size > max_bytes)
                {
                    break;
                }
                bytes += r.row.size;
                picked.push(r);
            }
            picked
        };
        let Some(end) = ranges.last().map(|r| r.row.end_offset) else {
            return Ok(None);
        };
        let mut entries = self.read_ranges(&ranges).await?;
        // The caller's rewrite is CPU work (a compactor decodes and re-encodes every batch):
        // background work, off the async workers that serve produce and fetch.
        let changed = crate::background(|| {
            let mut changed = false;
            for (_, e) in entries.iter_mut() {
                if let Some(payload) = rewrite(e) {
                    e.payload = payload;
                    changed = true;
                }
            }
            changed
        });
        if changed {
            if !self
                .rewrite(
                    ObjectKind::Stream,
                    &entries,
                    &ranges,
                    Some("log-compaction-written"),
                )
                .await?
            {
                return Ok(None);
            }
            stream.evict_cached_below(end);
        }
        Ok(Some(end))
    }

    async fn write_stream_object(&self, stream: &Arc<StreamShared>) -> Result<bool> {
        let ranges: Vec<RangeRef> = {
            let state = stream.state.lock();
            let mut picked = Vec::new();
            let mut bytes = 0;
            for r in state.ranges.values() {
                if r.kind != ObjectKind::StreamSet {
                    if picked.is_empty() {
                        continue;
                    }
                    break; // keep the run contiguous
                }
                if bytes + r.row.size > self.config.compaction_max_merge_bytes && !picked.is_empty()
                {
                    break;
                }
                bytes += r.row.size;
                picked.push(*r);
            }
            if bytes < self.config.stream_object_min_bytes {
                return Ok(false);
            }
            picked
        };
        let entries = self.read_ranges(&ranges).await?;
        self.rewrite(ObjectKind::Stream, &entries, &ranges, None)
            .await
    }

    async fn merge_small_objects(&self) -> Result<usize> {
        // Ranges by object, for the stream set objects that are small.
        let mut by_object: BTreeMap<u64, Vec<RangeRef>> = BTreeMap::new();
        for stream in self.owned_streams() {
            for r in stream.state.lock().ranges.values() {
                if r.kind == ObjectKind::StreamSet {
                    by_object.entry(r.row.object_id).or_default().push(*r);
                }
            }
        }
        let sizes: BTreeMap<u64, u64> = self
            .meta
            .objects_in_state(ObjectState::Committed)
            .await?
            .into_iter()
            .filter(|o| o.kind == ObjectKind::StreamSet)
            .map(|o| (o.id, o.size))
            .collect();
        let mut picked = Vec::new();
        let mut total = 0;
        for (id, ranges) in &by_object {
            let size = sizes.get(id).copied().unwrap_or(u64::MAX);
            if size >= self.config.compaction_small_object_bytes {
                continue;
            }
            if total + size > self.config.compaction_max_merge_bytes && picked.len() >= 2 {
                break;
            }
            total += size;
            picked.extend(ranges.iter().copied());
            if picked.len() > 1 && total >= self.config.compaction_max_merge_bytes {
                break;
            }
        }
        let objects: std::collections::BTreeSet<u64> =
            picked.iter().map(|r| r.row.object_id).collect();
        if objects.len() < 2 {
            return Ok(0);
        }
        picked.sort_by_key(|r| (r.row.stream_id, r.row.start_offset));
        let entries = self.read_ranges(&picked).await?;
        Ok(
            if self
                .rewrite(ObjectKind::StreamSet, &entries, &picked, None)
                .await?
            {
                objects.len()
            } else {
                0
            },
        )
    }

    async fn delete_retired_objects(&self) -> Result<usize> {
        let now = self.now_ms();
        let mut deleted = 0;
        for object in self.meta.objects_in_state(ObjectState::Deleting).await? {
            let since = object.deleted_ms.unwrap_or(0);
            if since.saturating_add(self.config.delete_grace_ms) > now {
                continue;
            }
            self.objects.delete(&self.object_path(object.id)).await?;
            self.meta.forget_object(object.id).await?;
            self.block_cache.forget_object(object.id);
            deleted += 1;
        }
        self.counters
            .objects_deleted
            .fetch_add(deleted as u64, Ordering::Relaxed);
        Ok(deleted)
    }
}

/// `result`, or the default value if it failed because a stream it touched is no longer
/// this node's (handed over, or taken while this node was away).
fn moved_away<T: Default>(result: Result<T>) -> Result<T> {
    match result {
        Err(e @ (Error::NotOwner(_) | Error::Fenced { .. })) => {
            tracing::debug!(error = %e, "maintenance skipped a stream that moved");
            Ok(T::default())
        }
        other => other,
    }
}

/// The background maintenance loop.
pub(crate) async fn run_maintenance(inner: Arc<Inner>, cancel: CancellationToken) {
    let interval = Duration::from_millis(inner.config.maintenance_interval_ms);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        if let Err(e) = inner.maintain().await {
            tracing::warn!(error = %e, "maintenance pass failed; it runs again next interval");
        }
    }
}
