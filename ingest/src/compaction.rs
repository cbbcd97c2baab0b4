//! Log compaction of compacted topics (`cleanup.policy` with `compact`), Kafka's log cleaner
//! over the stream store: the latest record of every key is kept, older ones go, and
//! tombstones (null values) go `delete.retention.ms` after they were appended.
//!
//! A pass over one partition, on the node that owns it ([`Broker::run_compaction`], every
//! `log.cleaner.backoff.ms`):
//! 1. **What may be compacted**: the uploaded object ranges (the log cache's tail is Kafka's
//!    active segment), up to the last stable offset (an open transaction) and not past a range
//!    with records younger than `min.compaction.lag.ms`.
//! 2. **Whether it is due**: the bytes appended since the partition's last pass make at least
//!    `min.cleanable.dirty.ratio` of that, or a record waited `max.compaction.lag.ms`, or kept
//!    tombstones have come of age. Where the last pass ended is kept in the metadata store
//!    ([`CleanState`]), so a restart or a failover does not count everything as new.
//! 3. **The key map**: each key's latest offset in the dirty part of that range (from where
//!    the last pass ended; the clean part below already holds one record per key, so as in
//!    Kafka's cleaner a clean record goes exactly when the map has its key), as an MD5 digest
//!    of the key, as Kafka's cleaner keeps, and the offset ([`ENTRY_BYTES`] each), within
//!    `log.cleaner.dedupe.buffer.size`; a partition with more keys is compacted a part at a
//!    time (the range stops where the map filled).
//! 4. **The rewrite**: each batch keeps only its records that are their key's latest, minus
//!    tombstones past `delete.retention.ms` (`inlet_records::rewrite::retain`): offsets never
//!    change, a batch left empty still spans its offsets, so Fetch skips the removed offsets
//!    as Kafka's does. The storage swaps the ranges for one new object per
//!    `inlet.log.cleaner.rewrite.max.bytes`, atomically and fenced by this node's ownership
//!    epoch (`StreamStore::rewrite_uploaded`), so a kill -9 mid-pass leaves the old ranges and a
//!    node that lost the partition commits nothing.
//! 5. **The I/O bound**: `log.cleaner.io.max.bytes.per.second` ([`Throttle`]) paces a round's
//!    reads and writes.
//!
//! Records without a key (written before the topic became compacted) are kept; Produce to a
//! compacted topic refuses them. Transactions (Kafka Streams' exactly-once changelogs, Connect's
//! exactly-once offsets): a committed transaction's records are compacted as any others (their
//! keys count in the map); an aborted transaction's records all go, and none of its keys count
//! (the partition's aborted transactions, `crate::txn::partition`, say which batches those are);
//! transaction markers are kept. The range stops below any open transaction (step 1).
//! Produce is never blocked: the pass reads objects and swaps ranges under the storage's own
//! lock only. Nor does it lose its cores to the compactor: the pass's CPU work (the key map's
//! hashing, the rewrite, building the new object) runs at the scheduler's lowest priority
//! (`inlet_storage::background`, nice 19), on what produce and fetch leave idle.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use inlet_storage::StreamId;
use md5::{Digest, Md5};
use tokio_util::sync::CancellationToken;

use crate::batch;
use crate::error::Result;
use crate::records::{self, Limits};
use crate::topic_config;
use crate::topics::{Partition, Topic};
use crate::Broker;

/// What one key costs the key map: a 16-byte digest, an 8-byte offset, and the map's own
/// overhead (a hash table runs at most 7/8 full, plus a control byte per slot).
pub(crate) const ENTRY_BYTES: usize = 32;
/// Bytes read at a time while the key map is built.
const READ_BYTES: usize = 4 << 20;

/// The compactor's table: each stream's [`CleanState`] after its last pass.
pub(crate) const MIGRATIONS: &[&str] = &["CREATE TABLE inlet_compaction (
        stream_id BIGINT PRIMARY KEY,
        clean_end BIGINT NOT NULL,
        tombstones_due BIGINT)"];

/// What the compactor remembers of a partition between passes: in memory, and in the
/// metadata store after every pass (`inlet_compaction`), so that a restarted node or a new
/// owner does not count the whole partition as new and rewrite it again. The row is written
/// after the pass's rewrite is committed: a stale row (a crash between the two, or an owner
/// fenced meanwhile) only makes a pass come sooner or later, never loses a record.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CleanState {
    /// Where the last pass's range ended.
    clean_end: u64,
    /// When the tombstones the last pass kept come of age (the next pass removes them).
    tombstones_due: Option<u64>,
}

/// A topic's compaction settings.
#[derive(Debug, Clone, Copy)]
struct Settings {
    dirty_ratio: f64,
    delete_retention_ms: u64,
    min_lag_ms: u64,
    max_lag_ms: u64,
}

/// What a pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PassReport {
    pub(crate) cleaned_to: u64,
    pub(crate) bytes_read: u64,
    pub(crate) bytes_written: u64,
    pub(crate) records_removed: u64,
}

fn digest(key: &[u8]) -> [u8; 16] {
    Md5::digest(key).into()
}

/// Whether the data batch `b` belongs to one of `aborted` (its producer's, spanning its
/// offset): its records were never committed.
fn is_aborted(aborted: &[crate::txn::Aborted], b: &batch::Batch) -> bool {
    if !b.header.is_transactional() {
        return false;
    }
    let offset = b.base_offset().max(0) as u64;
    aborted
        .iter()
        .any(|a| a.producer_id == b.header.producer_id && a.first <= offset && offset <= a.last)
}

impl Broker {
    /// The compactor: every `log.cleaner.backoff.ms` until `stop`, a pass over each
    /// partition of a compacted topic this node owns. Off with `log.cleaner.enable=false`.
    pub async fn run_compaction(self: Arc<Self>, stop: CancellationToken) {
        if !self.config().log_cleaner_enable {
            return;
        }
        loop {
            // Read at every pass: log.cleaner.backoff.ms may change while the node runs.
            let every = Duration::from_millis(self.config().log_cleaner_backoff_ms.max(1));
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            self.compact_due().await;
        }
    }

    /// One pass over every compacted partition this node owns; returns the partitions
    /// compacted.
    pub(crate) async fn compact_due(&self) -> usize {
        let mut done = 0;
        // One bound over the whole round, as Kafka's cleaner threads share one throttler.
        let mut throttle = Throttle::new();
        for topic in self.topics.list() {
            let Some(settings) = self.compaction_settings(&topic) else {
                continue;
            };
            for partition in &topic.partitions {
                if self.shutdown.is_cancelled() {
                    return done;
                }
                if !self.store.owns(partition.stream) {
                    continue;
                }
                self.metrics
                    .compaction_checks
                    .fetch_add(1, Ordering::Relaxed);
                match self
                    .compact_partition(partition, settings, &mut throttle)
                    .await
                {
                    Ok(Some(report)) => {
                        done += 1;
                        tracing::info!(
                            topic = topic.name,
                            partition = partition.index,
                            cleaned_to = report.cleaned_to,
                            read = report.bytes_read,
                            written = report.bytes_written,
                            removed = report.records_removed,
                            "compacted"
                        );
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(topic = topic.name, partition = partition.index, error = %e, "compaction failed; the next pass tries again");
                    }
                }
            }
        }
        done
    }

    fn compaction_settings(&self, topic: &Topic) -> Option<Settings> {
        let config = self.config();
        let get = |name: &str| {
            topic
                .configs
                .get(name)
                .or_else(|| config.topic_defaults.get(name))
                .unwrap_or_else(|| topic_config::default_of(name))
                .to_string()
        };
        if !topic_config::compacts(topic.configs.cleanup_policy(&config.topic_defaults)) {
            return None;
        }
        let ms = |name: &str| get(name).parse::<i64>().unwrap_or(0).max(0) as u64;
        Some(Settings {
            dirty_ratio: get("min.cleanable.dirty.ratio").parse().unwrap_or(0.5),
            delete_retention_ms: ms("delete.retention.ms"),
            min_lag_ms: ms("min.compaction.lag.ms"),
            max_lag_ms: ms("max.compaction.lag.ms"),
        })
    }

    /// One pass over one partition (see the module doc); `None` when it was not due.
    async fn compact_partition(
        &self,
        partition: &Partition,
        settings: Settings,
        throttle: &mut Throttle,
    ) -> Result<Option<PassReport>> {
        let stream = partition.stream;
        let now = self.clock_ms();
        let ranges = self.store.uploaded_ranges(stream)?;
        let end = self.store.end_offset(stream)?;
        let stable = self.stable_end(partition, end, true).await?;
        let young = now.saturating_sub(settings.min_lag_ms);
        let cleanable: Vec<(u64, u64, u64, u64)> = ranges
            .iter()
            .copied()
            .take_while(|&(_, range_end, _, max_ts)| range_end <= stable && max_ts <= young)
            .collect();
        let Some(&(first, mut until, _, _)) = cleanable.first() else {
            return Ok(None);
        };
        until = cleanable.last().map_or(until, |r| r.1);
        let known = self.compaction_state.lock().get(&stream).copied();
        let state = match known {
            Some(state) => state,
            None => {
                let state = self.load_clean_state(stream).await?;
                self.compaction_state.lock().insert(stream, state);
                state
            }
        };
        let total: u64 = cleanable.iter().map(|r| r.2).sum();
        let dirty: u64 = cleanable
            .iter()
            .filter(|r| r.0 >= state.clean_end)
            .map(|r| r.2)
            .sum();
        let overdue = cleanable
            .iter()
            .any(|r| r.0 >= state.clean_end && r.3.saturating_add(settings.max_lag_ms) <= now);
        let tombstones = state.tombstones_due.is_some_and(|t| t <= now);
        let ratio = dirty as f64 / total.max(1) as f64;
        if dirty == 0 && !tombstones || !(ratio >= settings.dirty_ratio || overdue || tombstones) {
            return Ok(None);
        }
        // The aborted transactions in the range (the state is loaded: `stable_end` above).
        let aborted = partition.txns.lock().aborted_in(first, until);
        // The map covers the dirty part only: the clean part below `clean_end` already holds
        // at most one record per key, so its record of a key is superseded exactly when the
        // key is in the map (as Kafka's cleaner maps only from its first dirty offset).
        let dirty_from = state.clean_end.clamp(first, until);
        let (latest, mapped_to, bytes_read) = self
            .key_map(stream, (dirty_from, until), &aborted, throttle)
            .await?;
        until = mapped_to;
        let mut report = PassReport {
            cleaned_to: until,
            bytes_read,
            ..PassReport::default()
        };
        let limits = Limits {
            compacted: true,
            ..self.record_limits()
        };
        let mut tombstones_due: Option<u64> = None;
        let mut removed = 0u64;
        // Read between the rewrite's steps (the I/O bound), so not borrowed by the closure.
        let written = std::sync::atomic::AtomicU64::new(0);
        let mut rewrite = |rb: &inlet_storage::ReadBatch| -> Option<Bytes> {
            let out = rewrite_payload(rb, limits, &aborted, |offset, key, value| {
                let Some(key) = key else {
                    return true;
                };
                // A key the map does not hold has its latest record in the clean part.
                if latest.get(&digest(key)).is_some_and(|&o| o != offset) {
                    return false;
                }
                if value.is_none() {
                    let due = rb.timestamp_ms.saturating_add(settings.delete_retention_ms);
                    if due <= now {
                        return false;
                    }
                    tombstones_due = Some(tombstones_due.map_or(due, |t| t.min(due)));
                }
                true
            });
            if let Some((bytes, gone)) = &out {
                removed += gone;
                written.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            }
            out.map(|(bytes, _)| bytes)
        };
        let mut from = first;
        let mut paced_written = 0u64;
        while from < until {
            match self
                .store
                .rewrite_uploaded(
                    stream,
                    (from, until, self.config().log_cleaner_rewrite_max_bytes),
                    &mut rewrite,
                )
                .await?
            {
                Some(next) if next > from => {
                    // What the step read (its whole ranges) and wrote, against the I/O bound.
                    let read: u64 = cleanable
                        .iter()
                        .filter(|r| r.0 >= from && r.0 < next)
                        .map(|r| r.2)
                        .sum();
                    let now_written = written.load(Ordering::Relaxed);
                    throttle
                        .pace(read + now_written - paced_written, &self.config())
                        .await;
                    paced_written = now_written;
                    from = next;
                }
                _ => break,
            }
        }
        report.records_removed = removed;
        report.bytes_written = written.into_inner();
        let state = CleanState {
            clean_end: until,
            tombstones_due,
        };
        self.compaction_state.lock().insert(stream, state);
        if let Err(e) = self.save_clean_state(stream, state).await {
            // The pass is done; a restart would only count this range as new again.
            tracing::warn!(stream, error = %e, "could not record where compaction ended");
        }
        self.metrics
            .compaction_passes
            .fetch_add(1, Ordering::Relaxed);
        self.metrics
            .compaction_records_removed
            .fetch_add(removed, Ordering::Relaxed);
        self.metrics
            .compaction_bytes_read
            .fetch_add(bytes_read, Ordering::Relaxed);
        Ok(Some(report))
    }

    /// `stream`'s [`CleanState`] as the last pass on any node left it (the default when
    /// none did).
    async fn load_clean_state(&self, stream: StreamId) -> Result<CleanState> {
        use sqlx::Row;
        let row = inlet_storage::bounded(async {
            sqlx::query(
                "SELECT clean_end, tombstones_due FROM inlet_compaction WHERE stream_id = $1",
            )
            .bind(stream as i64)
            .fetch_optional(self.store.meta().pool())
            .await
            .map_err(inlet_storage::Error::from)
        })
        .await?;
        Ok(match row {
            Some(r) => CleanState {
                clean_end: r
                    .try_get::<i64, _>(0)
                    .map_err(inlet_storage::Error::from)?
                    .max(0) as u64,
                tombstones_due: r
                    .try_get::<Option<i64>, _>(1)
                    .map_err(inlet_storage::Error::from)?
                    .map(|t| t.max(0) as u64),
            },
            None => CleanState::default(),
        })
    }

    async fn save_clean_state(&self, stream: StreamId, state: CleanState) -> Result<()> {
        inlet_storage::bounded(async {
            sqlx::query(
                "INSERT INTO inlet_compaction (stream_id, clean_end, tombstones_due)
                 VALUES ($1, $2, $3)
                 ON CONFLICT (stream_id) DO UPDATE
                 SET clean_end = excluded.clean_end, tombstones_due = excluded.tombstones_due",
            )
            .bind(stream as i64)
            .bind(state.clean_end as i64)
            .bind(state.tombstones_due.map(|t| t as i64))
            .execute(self.store.meta().pool())
            .await
            .map_err(inlet_storage::Error::from)
        })
        .await?;
        Ok(())
    }

    /// Each key's latest offset in `from..until` of `stream`, within
    /// `log.cleaner.dedupe.buffer.size`: (the map, where it stops — `until`, or the first
    /// batch that did not fit —, bytes read).
    async fn key_map(
        &self,
        stream: StreamId,
        (from, until): (u64, u64),
        aborted: &[crate::txn::Aborted],
        throttle: &mut Throttle,
    ) -> Result<(HashMap<[u8; 16], u64>, u64, u64)> {
        let room = (self.config().log_cleaner_dedupe_buffer_size as usize / ENTRY_BYTES).max(1);
        let limits = Limits {
            compacted: true,
            ..self.record_limits()
        };
        let mut latest: HashMap<[u8; 16], u64> = HashMap::new();
        let mut at = from;
        let mut bytes = 0u64;
        while at < until {
            let batches = match self.store.read(stream, at, READ_BYTES).await {
                Ok(b) => b,
                // Retention or a trim moved the start: go on from it.
                Err(inlet_storage::Error::OffsetOutOfRange { start, .. }) if start > at => {
                    at = start;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            if batches.is_empty() {
                break;
            }
            let read: u64 = batches.iter().map(|rb| rb.payload.len() as u64).sum();
            throttle.pace(read, &self.config()).await;
            // Hashing every key is CPU work: background work, at the lowest priority
            // (`inlet_storage::background`), so that produce keeps its cores.
            let stop = inlet_storage::background(|| {
                for rb in &batches {
                    if rb.base_offset >= until {
                        return Some(until);
                    }
                    if latest.len() >= room {
                        // The map is full: this pass compacts up to here.
                        return Some(rb.base_offset);
                    }
                    bytes += rb.payload.len() as u64;
                    for b in batch::split_stored(&rb.payload).unwrap_or_default() {
                        if b.header.is_control() || is_aborted(aborted, &b) {
                            continue;
                        }
                        let base = b.base_offset().max(0) as u64;
                        let _ = records::walk(&b, limits, |r| {
                            if let Some(key) = r.key {
                                latest.insert(digest(key), base + r.index as u64);
                            }
                        });
                    }
                    at = rb.end_offset();
                }
                None
            });
            if let Some(end) = stop {
                return Ok((latest, end, bytes));
            }
            tokio::task::yield_now().await;
        }
        Ok((latest, until.min(at.max(from)), bytes))
    }
}

/// `log.cleaner.io.max.bytes.per.second` at or above this is no bound (Kafka's default is
/// Java's largest double).
const UNBOUNDED: u64 = i64::MAX as u64;

/// The bound on the compactor's I/O, `log.cleaner.io.max.bytes.per.second` (Kafka's name and
/// meaning: the bytes its passes read and write, on average, per second): after each step of
/// a round, the round waits until its bytes so far fit the rate since it began. The rate is
/// read at every step (it is a dynamic setting); unbounded (the default) it never waits.
pub(crate) struct Throttle {
    began: tokio::time::Instant,
    bytes: u64,
}

impl Throttle {
    pub(crate) fn new() -> Throttle {
        Throttle {
            began: tokio::time::Instant::now(),
            bytes: 0,
        }
    }

    /// How long `bytes` more may wait at `rate` bytes a second, `elapsed` into the round.
    fn wait_for(&mut self, bytes: u64, rate: u64, elapsed: Duration) -> Duration {
        self.bytes = self.bytes.saturating_add(bytes);
        if rate == 0 || rate >= UNBOUNDED {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(self.bytes as f64 / rate as f64).saturating_sub(elapsed)
    }

    async fn pace(&mut self, bytes: u64, config: &crate::config::BrokerConfig) {
        let wait = self.wait_for(
            bytes,
            config.log_cleaner_io_max_bytes_per_second,
            self.began.elapsed(),
        );
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// The batches of one stored payload with only the records `keep(offset, key, value)` says
/// yes to; `None` when it keeps them all (or the payload does not read, which is kept as it
/// is), else the new payload and how many records went.
fn rewrite_payload(
    rb: &inlet_storage::ReadBatch,
    limits: Limits,
    aborted: &[crate::txn::Aborted],
    mut keep: impl FnMut(u64, Option<&[u8]>, Option<&[u8]>) -> bool,
) -> Option<(Bytes, u64)> {
    let batches = batch::split_stored(&rb.payload).ok()?;
    let mut out: Vec<Bytes> = Vec::with_capacity(batches.len());
    let mut changed = false;
    let mut removed = 0u64;
    for b in &batches {
        if b.header.is_control() {
            out.push(b.bytes.clone());
            continue;
        }
        let base = b.base_offset().max(0) as u64;
        let dropped = is_aborted(aborted, b);
        let mut gone = 0u64;
        let kept = inlet_records::rewrite::retain(b, limits, |r| {
            let k = !dropped && keep(base + r.index as u64, r.key, r.value);
            if !k {
                gone += 1;
            }
            k
        });
        match kept {
            Ok(Some(bytes)) => {
                changed = true;
                removed += gone;
                out.push(bytes);
            }
            Ok(None) => out.push(b.bytes.clone()),
            Err(e) => {
                tracing::warn!(offset = base, error = %e, "a stored batch does not read; compaction keeps it");
                out.push(b.bytes.clone());
            }
        }
    }
    if !changed {
        return None;
    }
    let mut joined = BytesMut::with_capacity(out.iter().map(Bytes::len).sum());
    for b in &out {
        joined.extend_from_slice(b);
    }
    Some((joined.freeze(), removed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_throttle_waits_until_the_bytes_fit_the_rate() {
        let mut t = Throttle::new();
        // 1 MiB at 1 MiB/s, 0.25 s in: 0.75 s to wait.
        let wait = t.wait_for(1 << 20, 1 << 20, Duration::from_millis(250));
        assert_eq!(wait, Duration::from_millis(750));
        // Another 1 MiB, 2.5 s in: the round is behind its rate, no wait.
        assert_eq!(
            t.wait_for(1 << 20, 1 << 20, Duration::from_millis(2500)),
            Duration::ZERO
        );
        // Unbounded: never waits, whatever was read.
        assert_eq!(
            t.wait_for(1 << 40, u64::MAX, Duration::ZERO),
            Duration::ZERO
        );
    }
}
