//! The stream store's API and its assembly: [`StreamStore`] ties the WAL, the log cache, the
//! object index in the metadata store, the block cache and the background tasks together.
//!
//! What is durable when:
//! - `append` returns once the batch is in the WAL and synced; it is readable from then on.
//! - An upload makes the data durable in object storage; only after its metadata transaction
//!   commits is the WAL trimmed behind it.
//! - `create_stream`, `delete_stream`, `trim` and `set_retention` return once the metadata
//!   store committed the change.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use object_store::ObjectStore;
use parking_lot::RwLock;
use tokio::sync::{oneshot, watch, Notify};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cache::{BlockCache, LogBudget};
use crate::config::{StorageConfig, WalKind};
use crate::error::{Error, Result};
pub use crate::inner::UploadFailure;
use crate::inner::{AppendRequest, AppendSink, Counters, Inner, Reservation};
use crate::meta::{MetaStore, ObjectState};
use crate::objects::{open_object_store, ObjectClient};
use crate::stream::{CachedEntry, RangeRef, StreamShared, StreamState};
use crate::wal::{self, Wal};
use inlet_common::{Clock, SystemClock};

/// Most object ranges one read fetches concurrently.
const READ_TOGETHER_RANGES: usize = 32;

/// Identifies a stream; assigned by the store, never reused.
pub use crate::stream::StreamId;

/// A stream's name and offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    pub id: StreamId,
    pub name: String,
    /// First readable offset.
    pub start_offset: u64,
    /// One past the last durable offset: where the next append lands.
    pub end_offset: u64,
}

/// One appended batch as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadBatch {
    pub base_offset: u64,
    pub record_count: u32,
    /// Append time (or the time the appender gave), epoch milliseconds.
    pub timestamp_ms: u64,
    pub payload: Bytes,
}

impl ReadBatch {
    /// One past the last offset of this batch.
    pub fn end_offset(&self) -> u64 {
        self.base_offset + self.record_count as u64
    }
}

/// Options of one append.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppendOptions {
    /// Timestamp for retention by time; the store's clock when `None`.
    pub timestamp_ms: Option<u64>,
    /// Write the assigned base offset, as a big-endian `u64`, into the first 8 bytes of the
    /// payload before it is stored: for batch formats that carry their own base offset. The
    /// payload must then be at least 8 bytes long.
    pub write_base_offset: bool,
    /// Also write the epoch this node owns the stream under, as a big-endian `u32` (saturated
    /// at `i32::MAX`), into bytes 12..16 of the payload: a Kafka record batch's partition
    /// leader epoch, which its CRC does not cover. Needs `write_base_offset` and a payload of
    /// at least 16 bytes.
    pub write_epoch: bool,
    /// After an append of this kind fails, refuse every later append to the stream until the
    /// writer has called [`StreamStore::clear_failure`] for each such failure: for a writer
    /// whose appends depend on the ones before (a Kafka producer's sequence numbers), so that
    /// none after a failed one is stored before the writer has taken the failures in. Appends
    /// already queued behind a failed one fail with it whatever this says. (The object-store
    /// WAL only: a local WAL that fails refuses every append until a restart.)
    pub failure_latch: bool,
    /// Append only if this node owns the stream under this epoch (else [`Error::NotOwner`]):
    /// for a writer whose state was built for one ownership epoch (a Kafka partition's
    /// producer state), which must not append under another.
    pub expect_epoch: Option<u64>,
}

/// An append queued by [`StreamStore::submit_append`]: resolves to its base offset once it
/// is durable. Dropping it does not cancel the append.
#[derive(Debug)]
pub struct PendingAppend {
    done: oneshot::Receiver<Result<u64>>,
}

impl std::future::Future for PendingAppend {
    type Output = Result<u64>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<u64>> {
        std::pin::Pin::new(&mut self.done)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(Error::Shutdown)))
    }
}

/// How far a table lags in one stream held for it ([`StreamStore::table_lag_bytes`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableLag {
    /// The table's committed progress in the stream, as last reported.
    pub floor: u64,
    /// Bytes from the floor to the stream's end.
    pub lag_bytes: u64,
    /// Bytes past the stream's retention, kept because the table has not committed them.
    pub held_bytes: u64,
}

/// Counters of the store's activity, for metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub appends: u64,
    pub appended_bytes: u64,
    pub uploads: u64,
    pub uploaded_bytes: u64,
    pub log_cache_reads: u64,
    pub object_reads: u64,
    pub block_cache_hits: u64,
    pub block_cache_misses: u64,
    pub log_cache_used_bytes: u64,
    /// `log_cache_bytes`: the log cache's byte budget.
    pub log_cache_budget_bytes: u64,
    pub block_cache_used_bytes: u64,
    pub dirty_bytes: u64,
    pub wal_segments: u64,
    pub compactions: u64,
    pub objects_deleted: u64,
    /// WAL group commits (one write + one `fdatasync` each), the time they took in total and
    /// at most, and the bytes they wrote.
    pub wal_syncs: u64,
    pub wal_sync_micros_total: u64,
    pub wal_sync_micros_max: u64,
    pub wal_bytes: u64,
}

/// What [`StreamStore::health`] reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoreHealth {
    /// The WAL failed a write or sync and refuses appends until a restart.
    pub wal_failed: Option<String>,
    /// Uploads are failing (the data stays in the WAL meanwhile).
    pub upload_failure: Option<UploadFailure>,
}

/// A stream [`StreamStore::release`] has stopped serving but the metadata store has not freed
/// yet: dropped while armed, it is owned here again under the same epoch (unless it was
/// deleted or taken meanwhile).
struct Unreleased<'a> {
    shared: &'a StreamShared,
    epoch: u64,
    armed: bool,
}

impl Drop for Unreleased<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut state = self.shared.state.lock();
        if !state.deleted && state.epoch == self.epoch {
            state.owned = true;
        }
    }
}

/// The stream store. Cheap to share behind an `Arc`; call [`StreamStore::close`] to stop it
/// cleanly (dropping it also stops the background tasks, without waiting).
pub struct StreamStore {
    pub(crate) inner: Arc<Inner>,
    cancel: CancellationToken,
    tasks: parking_lot::Mutex<JoinSet<()>>,
}

impl std::fmt::Debug for StreamStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamStore").finish_non_exhaustive()
    }
}

/// Assembles a [`StreamStore`]: the WAL directory plus components that tests swap.
pub struct StreamStoreBuilder {
    wal_dir: PathBuf,
    config: StorageConfig,
    meta: Option<MetaStore>,
    meta_url: Option<String>,
    object_store: Option<Arc<dyn ObjectStore>>,
    object_store_url: Option<String>,
    clock: Arc<dyn Clock>,
    background: bool,
}

impl StreamStoreBuilder {
    pub fn config(mut self, config: StorageConfig) -> Self {
        self.config = config;
        self
    }

    /// The metadata store to use (default: SQLite `meta.db` beside the WAL directory).
    pub fn meta(mut self, meta: MetaStore) -> Self {
        self.meta = Some(meta);
        self
    }

    /// Connect to the metadata store at this URL (`sqlite://…` or `postgres://…`).
    pub fn meta_url(mut self, url: impl Into<String>) -> Self {
        self.meta_url = Some(url.into());
        self
    }

    /// The object store to use (default: the `objects` folder beside the WAL directory).
    pub fn object_store(mut self, store: Arc<dyn ObjectStore>) -> Self {
        self.object_store = Some(store);
        self
    }

    /// Open the object store at this URL; see [`open_object_store`].
    pub fn object_store_url(mut self, url: impl Into<String>) -> Self {
        self.object_store_url = Some(url.into());
        self
    }

    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Whether to run the uploader and maintenance in the background (default). Tests that
    /// drive them by hand with [`StreamStore::flush`] and [`StreamStore::run_maintenance`]
    /// turn this off.
    pub fn background_tasks(mut self, on: bool) -> Self {
        self.background = on;
        self
    }

    /// Opens the store: connects the metadata store, loads streams and the object index,
    /// replays the WAL, collects this node's orphaned uploads, and starts the WAL writer and the
    /// background tasks.
    pub async fn open(self) -> Result<StreamStore> {
        self.config.validate()?;
        let parent = self
            .wal_dir
            .parent()
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        let meta = match (self.meta, self.meta_url) {
            (Some(meta), _) => meta,
            (None, Some(url)) => MetaStore::connect(&url).await?,
            (None, None) => {
                std::fs::create_dir_all(&parent).map_err(|e| Error::wal_io(&parent, e))?;
                MetaStore::connect(&format!("sqlite://{}", parent.join("meta.db").display()))
                    .await?
            }
        };
        let store = match (self.object_store, self.object_store_url) {
            (Some(store), _) => store,
            (None, Some(url)) => open_object_store(&url)?,
            (None, None) => open_object_store(&parent.join("objects").to_string_lossy())?,
        };
        let config = self.config;
        let clock = self.clock;
        let log_budget = Arc::new(LogBudget::new(config.log_cache_bytes));

        // Streams and their committed ranges.
        let mut streams: HashMap<StreamId, Arc<StreamShared>> = HashMap::new();
        let objects: HashMap<u64, crate::meta::ObjectRow> = meta
            .objects_in_state(ObjectState::Committed)
            .await?
            .into_iter()
            .map(|o| (o.id, o))
            .collect();
        let local = config.wal_kind() == WalKind::Local;
        if local {
            // A single node owns every stream, under a new epoch: a stale process of it that
            // still runs is fenced.
            meta.claim_all(config.node_id).await?;
        }
        let mut states: HashMap<StreamId, (String, StreamState)> = HashMap::new();
        for row in meta.live_streams().await? {
            let state = StreamState::from_row(&row, local);
            states.insert(row.id, (row.name, state));
        }
        for range in meta.committed_ranges().await? {
            let (Some((_, state)), Some(object)) = (
                states.get_mut(&range.stream_id),
                objects.get(&range.object_id),
            ) else {
                continue;
            };
            state.ranges.insert(
                range.start_offset,
                RangeRef {
                    row: range,
                    kind: object.kind,
                    index_position: object.index_position,
                    index_len: object.index_len,
                },
            );
        }

        // WAL replay: entries not yet committed in objects go back into the log cache. The
        // object-store WAL has nothing to replay: what it acknowledged is committed already.
        let mut replayed_bytes = 0u64;
        let replay = |dir: &std::path::Path,
                      states: &mut HashMap<StreamId, (String, StreamState)>,
                      replayed_bytes: &mut u64| {
            wal::replay(dir, |r| {
                let Some((_, state)) = states.get_mut(&r.entry.stream_id) else {
                    return Ok(()); // a deleted stream
                };
                let e = &r.entry;
                let end = e.base_offset + e.record_count as u64;
                if end <= state.durable_end {
                    return Ok(()); // already in an object
                }
                if e.base_offset != state.durable_end {
                    return Err(Error::corrupt(
                        self.wal_dir.display().to_string(),
                        format!(
                            "WAL entry of stream {} at offset {} but the stream ends at {}",
                            e.stream_id, e.base_offset, state.durable_end
                        ),
                    ));
                }
                *replayed_bytes += e.payload.len() as u64;
                state.cache.push_back(CachedEntry {
                    base_offset: e.base_offset,
                    record_count: e.record_count,
                    timestamp_ms: e.timestamp_ms,
                    // A copy: a slice would keep the whole segment file's buffer alive, uploaded
                    // entries included, outside the log cache's accounting.
                    payload: Bytes::copy_from_slice(&e.payload),
                    wal_end: r.wal_end,
                });
                state.durable_end = end;
                state.next_offset = end;
                Ok(())
            })
        };
        let wal_end = if local {
            replay(&self.wal_dir, &mut states, &mut replayed_bytes)?
        } else {
            0
        };
        log_budget.force_reserve(replayed_bytes);
        for (id, (name, state)) in states {
            streams.insert(id, Arc::new(StreamShared::new(id, name, state)));
        }
        tracing::info!(
            streams = streams.len(),
            replayed_bytes,
            wal_end,
            "stream store opened"
        );

        let wal = if local {
            Some(Wal::start(
                &self.wal_dir,
                wal_end,
                config.wal_segment_bytes,
                config.wal_max_group_bytes,
                config.wal_queue_len,
            )?)
        } else {
            None
        };
        let (object_wal, object_wal_queue) = if local {
            (None, None)
        } else {
            let (tx, rx) = tokio::sync::mpsc::channel(config.wal_queue_len);
            (Some(tx), Some(rx))
        };
        let inner = Arc::new(Inner {
            object_wal,
            objects: ObjectClient::new(store, config.retry.clone()),
            block_cache: BlockCache::new(config.block_cache_bytes),
            config,
            clock,
            meta,
            wal,
            streams: RwLock::new(streams),
            log_budget,
            dirty_bytes: Arc::new(AtomicU64::new(replayed_bytes)),
            upload_wake: Arc::new(Notify::new()),
            upload_lock: tokio::sync::Mutex::new(()),
            maintenance_lock: tokio::sync::Mutex::new(()),
            streams_sync: tokio::sync::Mutex::new(()),
            counters: Arc::new(Counters::default()),
        });
        inner.collect_orphans(true).await?;

        let cancel = CancellationToken::new();
        let mut tasks = JoinSet::new();
        if let Some(queue) = object_wal_queue {
            tasks.spawn(crate::objwal::run(inner.clone(), queue, cancel.clone()));
        }
        if self.background && local {
            tasks.spawn(crate::upload::run_uploader(inner.clone(), cancel.clone()));
        }
        if self.background {
            tasks.spawn(crate::maintenance::run_maintenance(
                inner.clone(),
                cancel.clone(),
            ));
        }
        Ok(StreamStore {
            inner,
            cancel,
            tasks: parking_lot::Mutex::new(tasks),
        })
    }
}

impl StreamStore {
    /// A builder for a store whose WAL lives in `wal_dir`.
    pub fn builder(wal_dir: impl Into<PathBuf>) -> StreamStoreBuilder {
        StreamStoreBuilder {
            wal_dir: wal_dir.into(),
            config: StorageConfig::default(),
            meta: None,
            meta_url: None,
            object_store: None,
            object_store_url: None,
            clock: Arc::new(SystemClock),
            background: true,
        }
    }

    /// The metadata store, for crates that keep their own tables beside the stream index.
    pub fn meta(&self) -> &MetaStore {
        &self.inner.meta
    }

    pub fn config(&self) -> &StorageConfig {
        &self.inner.config
    }

    fn shared(&self, id: StreamId) -> Result<Arc<StreamShared>> {
        self.inner
            .streams
            .read()
            .get(&id)
            .cloned()
            .ok_or_else(|| Error::UnknownStream(id.to_string()))
    }

    fn info(shared: &StreamShared) -> StreamInfo {
        let state = shared.state.lock();
        StreamInfo {
            id: shared.id,
            name: shared.name.clone(),
            start_offset: state.start_offset,
            end_offset: state.durable_end,
        }
    }

    /// Creates a stream named `name`; fails if a live stream has that name.
    pub async fn create_stream(&self, name: &str) -> Result<StreamInfo> {
        if name.is_empty() || name.len() > 1024 {
            return Err(Error::InvalidArgument(
                "a stream name must have 1 to 1024 bytes".into(),
            ));
        }
        let _sync = self.inner.streams_sync.lock().await;
        let row = self
            .inner
            .meta
            .create_stream(
                name,
                self.inner.clock.now_ms(),
                Some(self.inner.config.node_id),
            )
            .await?;
        let state = StreamState {
            owned: row.owner_node.is_some(),
            epoch: row.epoch,
            ..StreamState::default()
        };
        let shared = Arc::new(StreamShared::new(row.id, row.name, state));
        let info = Self::info(&shared);
        self.inner.streams.write().insert(row.id, shared);
        Ok(info)
    }

    /// Looks up a live stream by name.
    pub fn open_stream(&self, name: &str) -> Result<StreamInfo> {
        self.inner
            .streams
            .read()
            .values()
            .find(|s| s.name == name)
            .map(|s| Self::info(s))
            .ok_or_else(|| Error::UnknownStream(format!("{name:?}")))
    }

    /// A live stream's name and offsets.
    pub fn stream(&self, id: StreamId) -> Result<StreamInfo> {
        let shared = self.shared(id)?;
        Ok(Self::info(&shared))
    }

    /// Every live stream.
    pub fn list_streams(&self) -> Vec<StreamInfo> {
        let mut out: Vec<StreamInfo> = self
            .inner
            .streams
            .read()
            .values()
            .map(|s| Self::info(s))
            .collect();
        out.sort_by_key(|s| s.id);
        out
    }

    fn local(&self) -> bool {
        self.inner.config.wal_kind() == WalKind::Local
    }

    /// The writer has taken in one failed append of stream `id` that had
    /// [`AppendOptions::failure_latch`]; once it has taken in every one, appends are let in
    /// again. Call it once per such failure.
    pub fn clear_failure(&self, id: StreamId) {
        if let Ok(shared) = self.shared(id) {
            let mut state = shared.state.lock();
            state.failed = state.failed.saturating_sub(1);
        }
    }

    /// Whether this node owns stream `id` (may append to it and read it).
    pub fn owns(&self, id: StreamId) -> bool {
        self.shared(id).is_ok_and(|s| s.state.lock().owned)
    }

    /// The epoch this node owns stream `id` under, or `None` if it does not own it.
    pub fn owned_epoch(&self, id: StreamId) -> Option<u64> {
        let shared = self.shared(id).ok()?;
        let state = shared.state.lock();
        state.owned.then_some(state.epoch)
    }

    /// The payload bytes this node has made durable in each stream it owns, since it opened
    /// the stream (a counter: its rate is the stream's load).
    pub fn owned_appended_bytes(&self) -> Vec<(StreamId, u64)> {
        self.inner
            .streams
            .read()
            .values()
            .filter_map(|s| {
                let state = s.state.lock();
                state.owned.then_some((s.id, state.appended_bytes))
            })
            .collect()
    }

    /// The streams this node owns, with the epoch it owns each under.
    pub fn owned_streams(&self) -> Vec<(StreamInfo, u64)> {
        let mut out: Vec<(StreamInfo, u64)> = self
            .inner
            .streams
            .read()
            .values()
            .filter_map(|s| {
                let epoch = {
                    let state = s.state.lock();
                    state.owned.then_some(state.epoch)
                }?;
                Some((Self::info(s), epoch))
            })
            .collect();
        out.sort_by_key(|(s, _)| s.id);
        out
    }

    /// Every live stream's owner and epoch as the metadata store has them now (for routing and
    /// `inlet cluster status`): `(stream, owner node, epoch)`.
    pub async fn stream_owners(&self) -> Result<Vec<(StreamInfo, Option<u64>, u64)>> {
        Ok(self
            .inner
            .meta
            .live_streams()
            .await?
            .into_iter()
            .map(|row| {
                let info = StreamInfo {
                    id: row.id,
                    name: row.name,
                    start_offset: row.start_offset,
                    end_offset: row.committed_end,
                };
                (info, row.owner_node, row.epoch)
            })
            .collect())
    }

    /// Brings the map of streams up to date with the metadata store: streams other nodes
    /// created appear (not owned), streams deleted elsewhere go, and retention settings made
    /// elsewhere apply. Owned streams keep their offsets: only this node changes those; the
    /// others' offsets follow the metadata store.
    pub async fn refresh_streams(&self) -> Result<()> {
        let _sync = self.inner.streams_sync.lock().await;
        let rows = self.inner.meta.live_streams().await?;
        let live: std::collections::HashSet<StreamId> = rows.iter().map(|r| r.id).collect();
        let mut streams = self.inner.streams.write();
        for row in rows {
            match streams.get(&row.id) {
                Some(shared) => {
                    let mut state = shared.state.lock();
                    state.retention_ms = row.retention_ms;
                    state.retention_bytes = row.retention_bytes;
                    state.table_floor = row.table_floor;
                    if !state.owned {
                        // Another node's stream: its offsets as that node last committed
                        // them (a table's coordinator reports its lag from them).
                        state.start_offset = row.start_offset;
                        state.committed_end = row.committed_end;
                        state.durable_end = row.committed_end;
                        state.next_offset = row.committed_end;
                    }
                }
                None => {
                    let state = StreamState::from_row(&row, false);
                    streams.insert(row.id, Arc::new(StreamShared::new(row.id, row.name, state)));
                }
            }
        }
        streams.retain(|id, shared| {
            let keep = live.contains(id);
            if !keep {
                shared.state.lock().deleted = true;
            }
            keep
        });
        Ok(())
    }

    /// Takes stream `id` for this node under a new epoch, if it is free or its owner is not
    /// among `live_nodes`; returns whether it is now this node's. The stream's offsets and
    /// index are loaded from the metadata store after the epoch is raised, so they include
    /// every commit the previous owner made, and no commit of it can land after. Only with the
    /// object-store WAL: a local WAL may hold acknowledged data the metadata store lacks.
    pub async fn acquire(&self, id: StreamId, live_nodes: &[u64]) -> Result<bool> {
        if self.local() {
            return Err(Error::Config(
                "streams move between nodes only with the object-store WAL (wal = \"object\")"
                    .into(),
            ));
        }
        let node = self.inner.config.node_id;
        let Some(row) = self
            .inner
            .meta
            .acquire_stream(id, node, live_nodes, self.inner.clock.now_ms())
            .await?
        else {
            return Ok(false);
        };
        let Some((committed_end, ranges)) = self.inner.meta.stream_index(id).await? else {
            return Ok(false); // deleted meanwhile
        };
        let shared = {
            let mut streams = self.inner.streams.write();
            streams
                .entry(id)
                .or_insert_with(|| {
                    Arc::new(StreamShared::new(
                        id,
                        row.name.clone(),
                        StreamState::default(),
                    ))
                })
                .clone()
        };
        {
            let mut state = shared.state.lock();
            state.deleted = false;
            state.owned = true;
            state.epoch = row.epoch;
            state.start_offset = row.start_offset;
            state.committed_end = committed_end;
            state.durable_end = committed_end;
            state.next_offset = committed_end;
            state.retention_ms = row.retention_ms;
            state.retention_bytes = row.retention_bytes;
            state.table_floor = row.table_floor;
            state.cache.clear();
            state.ranges = crate::stream::range_index(ranges);
        }
        shared.end.send_replace(committed_end);
        tracing::info!(stream = id, name = %shared.name, epoch = row.epoch, end = committed_end, "stream acquired");
        Ok(true)
    }

    /// Gives stream `id` up: new appends are refused at once, appends already on their way
    /// finish (or fail), and then the metadata store's row is freed for the next owner. Nothing
    /// is copied: everything acknowledged is committed already.
    pub async fn release(&self, id: StreamId) -> Result<()> {
        if self.local() {
            return Err(Error::Config(
                "streams move between nodes only with the object-store WAL (wal = \"object\")"
                    .into(),
            ));
        }
        let shared = self.shared(id)?;
        let epoch = {
            let mut state = shared.state.lock();
            if !state.owned {
                return Ok(());
            }
            state.owned = false;
            state.epoch
        };
        // Until the metadata store has freed it, the stream is still this node's there: a
        // release that fails or is given up (a pass bounded in time) gives it back here too, so
        // that this node never takes its own stream again while appends of the epoch it holds
        // may still be on their way.
        let mut unreleased = Unreleased {
            shared: &shared,
            epoch,
            armed: true,
        };
        let mut end = shared.end.subscribe();
        loop {
            {
                let state = shared.state.lock();
                if state.next_offset == state.durable_end || state.deleted {
                    break;
                }
            }
            // In-flight groups either commit (the end moves) or fail (the object-store WAL
            // rewinds `next_offset`): wake on the first, poll for the second.
            let _ = tokio::time::timeout(std::time::Duration::from_millis(20), end.changed()).await;
        }
        let node = self.inner.config.node_id;
        self.inner
            .meta
            .release_stream(id, node, epoch, self.inner.clock.now_ms())
            .await?;
        unreleased.armed = false;
        tracing::info!(stream = id, name = %shared.name, epoch, "stream released");
        Ok(())
    }

    /// Deletes a stream: it is gone at once; its objects are deleted after the grace period.
    pub async fn delete_stream(&self, id: StreamId) -> Result<()> {
        let shared = self.shared(id)?;
        let _sync = self.inner.streams_sync.lock().await;
        self.inner
            .meta
            .delete_stream(id, self.inner.clock.now_ms())
            .await?;
        self.inner.streams.write().remove(&id);
        let dirty = {
            let mut state = shared.state.lock();
            state.deleted = true;
            let dirty = state.dirty_bytes();
            state.cache.clear();
            state.ranges.clear();
            dirty
        };
        self.inner.dirty_bytes.fetch_sub(dirty, Ordering::AcqRel);
        self.inner.log_budget.release(dirty);
        Ok(())
    }

    /// Appends one batch of `record_count` records; returns its base offset once it is durable.
    pub async fn append(&self, id: StreamId, payload: Bytes, record_count: u32) -> Result<u64> {
        self.append_with(id, payload, record_count, AppendOptions::default())
            .await
    }

    /// [`StreamStore::append`] with options.
    pub async fn append_with(
        &self,
        id: StreamId,
        payload: Bytes,
        record_count: u32,
        options: AppendOptions,
    ) -> Result<u64> {
        self.submit_append(id, payload, record_count, options)
            .await?
            .await
    }

    /// Queues an append and returns once its place in the stream is fixed: appends to one
    /// stream take offsets in the order their `submit_append` calls returned. The returned
    /// [`PendingAppend`] resolves to the base offset once the batch is durable. A caller that
    /// must order appends with its own state (a Kafka producer's sequence numbers) holds its
    /// lock only across this call, not across the durable write.
    pub async fn submit_append(
        &self,
        id: StreamId,
        payload: Bytes,
        record_count: u32,
        options: AppendOptions,
    ) -> Result<PendingAppend> {
        if record_count == 0 {
            return Err(Error::InvalidArgument(
                "record_count must be at least 1".into(),
            ));
        }
        let limit = self.inner.config.max_append_bytes as usize;
        if payload.len() > limit {
            return Err(Error::TooLarge {
                size: payload.len(),
                limit,
            });
        }
        if options.write_base_offset && payload.len() < 8 {
            return Err(Error::InvalidArgument(
                "write_base_offset needs a payload of at least 8 bytes".into(),
            ));
        }
        if options.write_epoch && (!options.write_base_offset || payload.len() < 16) {
            return Err(Error::InvalidArgument(
                "write_epoch needs write_base_offset and a payload of at least 16 bytes".into(),
            ));
        }
        if self.cancel.is_cancelled() {
            return Err(Error::Shutdown);
        }
        let stream = self.shared(id)?;
        let generation = {
            let state = stream.state.lock();
            if !state.owned || options.expect_epoch.is_some_and(|e| e != state.epoch) {
                return Err(Error::NotOwner(id));
            }
            if state.failed > 0 {
                return Err(Error::ObjectWal(format!(
                    "an earlier append to stream {id} failed and its writer has not taken it in yet; retry"
                )));
            }
            state.generation
        };
        self.inner.log_budget.reserve(payload.len() as u64).await;
        let reservation = Reservation {
            budget: self.inner.log_budget.clone(),
            bytes: payload.len() as u64,
        };
        let (reply, done) = oneshot::channel();
        let request = AppendRequest {
            reservation,
            stream,
            payload,
            record_count,
            timestamp_ms: options
                .timestamp_ms
                .unwrap_or_else(|| self.inner.clock.now_ms()),
            write_base_offset: options.write_base_offset,
            write_epoch: options.write_epoch,
            generation,
            failure_latch: options.failure_latch,
            base_offset: 0,
            sink: AppendSink {
                dirty_bytes: self.inner.dirty_bytes.clone(),
                upload_wake: self.inner.upload_wake.clone(),
                counters: self.inner.counters.clone(),
                upload_bytes: self.inner.config.upload_bytes,
            },
            reply,
        };
        let queued = match (&self.inner.wal, &self.inner.object_wal) {
            (Some(wal), _) => wal.submit(request).await.is_ok(),
            (None, Some(queue)) => queue.send(request).await.is_ok(),
            (None, None) => false,
        };
        if !queued {
            return Err(Error::Shutdown); // the dropped request released its reservation
        }
        Ok(PendingAppend { done })
    }

    /// Reads batches starting with the one that holds `from`, up to about `max_bytes` (at least
    /// one batch when any exists). Returns nothing at the end of the stream.
    pub async fn read(&self, id: StreamId, from: u64, max_bytes: usize) -> Result<Vec<ReadBatch>> {
        let shared = self.shared(id)?;
        let range = {
            let state = shared.state.lock();
            if !state.owned {
                return Err(Error::NotOwner(id));
            }
            if from < state.start_offset || from > state.durable_end {
                return Err(Error::OffsetOutOfRange {
                    stream: id,
                    offset: from,
                    start: state.start_offset,
                    end: state.durable_end,
                });
            }
            if from == state.durable_end {
                return Ok(Vec::new());
            }
            match state.cache.front() {
                Some(first) if first.base_offset <= from => {
                    let at = state.cache.partition_point(|e| e.end_offset() <= from);
                    let mut out = Vec::new();
                    let mut bytes = 0;
                    for e in state.cache.range(at..) {
                        if !out.is_empty() && bytes + e.payload.len() > max_bytes {
                            break;
                        }
                        bytes += e.payload.len();
                        out.push(ReadBatch {
                            base_offset: e.base_offset,
                            record_count: e.record_count,
                            timestamp_ms: e.timestamp_ms,
                            payload: e.payload.clone(),
                        });
                    }
                    self.inner
                        .counters
                        .log_cache_reads
                        .fetch_add(1, Ordering::Relaxed);
                    return Ok(out);
                }
                _ => {
                    let first = state.range_for(from).ok_or_else(|| {
                        Error::corrupt(
                            format!("stream {id}"),
                            format!("offset {from} is neither cached nor in any object"),
                        )
                    })?;
                    // The ranges that follow, while they fit in `max_bytes`: read together.
                    let mut ranges = vec![first];
                    let mut bytes = first.row.size;
                    for r in state.ranges.range(first.row.end_offset..).map(|(_, r)| *r) {
                        let prev_end = ranges.last().map_or(0, |p| p.row.end_offset);
                        if ranges.len() >= READ_TOGETHER_RANGES
                            || bytes >= max_bytes as u64
                            || r.row.start_offset != prev_end
                        {
                            break;
                        }
                        bytes += r.row.size;
                        ranges.push(r);
                    }
                    ranges
                }
            }
        };
        self.inner
            .counters
            .object_reads
            .fetch_add(1, Ordering::Relaxed);
        // Small ranges (one per WAL object or upload) are fetched concurrently, each from its
        // own object, rather than one round trip after another. Every range but the last is
        // read whole (together they are under `max_bytes`), so the batches join without a gap.
        let reads = range.iter().enumerate().map(|(i, r)| {
            let start = if i == 0 { from } else { r.row.start_offset };
            self.inner.read_range(r, start, max_bytes)
        });
        let mut out = Vec::new();
        let mut bytes = 0;
        for batch in futures::future::try_join_all(reads)
            .await?
            .into_iter()
            .flatten()
        {
            if !out.is_empty() && bytes + batch.payload.len() > max_bytes {
                break;
            }
            bytes += batch.payload.len();
            out.push(batch);
        }
        Ok(out)
    }

    /// First readable offset of a stream.
    pub fn start_offset(&self, id: StreamId) -> Result<u64> {
        Ok(self.stream(id)?.start_offset)
    }

    /// One past the last durable offset of a stream.
    pub fn end_offset(&self, id: StreamId) -> Result<u64> {
        Ok(self.stream(id)?.end_offset)
    }

    /// Watches a stream's end offset, for readers that wait for new data (long polling).
    pub fn watch_end(&self, id: StreamId) -> Result<watch::Receiver<u64>> {
        Ok(self.shared(id)?.end.subscribe())
    }

    /// Makes offsets below `new_start` unreadable; their objects go once no stream needs them.
    /// `new_start` may not pass the end offset; a lower value than the current start is a no-op.
    pub async fn trim(&self, id: StreamId, new_start: u64) -> Result<()> {
        let shared = self.shared(id)?;
        let (end, epoch) = {
            let state = shared.state.lock();
            if !state.owned {
                return Err(Error::NotOwner(id));
            }
            (state.durable_end, state.epoch)
        };
        if new_start > end {
            return Err(Error::OffsetOutOfRange {
                stream: id,
                offset: new_start,
                start: shared.state.lock().start_offset,
                end,
            });
        }
        self.inner
            .meta
            .set_start_offset(id, epoch, new_start)
            .await?;
        let mut state = shared.state.lock();
        state.start_offset = state.start_offset.max(new_start);
        Ok(())
    }

    /// Stream `id`'s retention as last set ([`StreamStore::set_retention`]): (ms, bytes).
    pub fn retention(&self, id: StreamId) -> Result<(Option<i64>, Option<i64>)> {
        let shared = self.shared(id)?;
        let state = shared.state.lock();
        Ok((state.retention_ms, state.retention_bytes))
    }

    /// Sets a stream's retention; `None` uses the store's default, a negative value is
    /// unlimited.
    pub async fn set_retention(
        &self,
        id: StreamId,
        retention_ms: Option<i64>,
        retention_bytes: Option<i64>,
    ) -> Result<()> {
        let shared = self.shared(id)?;
        self.inner
            .meta
            .set_retention(id, retention_ms, retention_bytes)
            .await?;
        let mut state = shared.state.lock();
        state.retention_ms = retention_ms;
        state.retention_bytes = retention_bytes;
        Ok(())
    }

    /// Holds stream `id` for a table (`hold`), or ends the hold: while held, retention
    /// (`retention_ms`, `retention_bytes`) expires only ranges that the table's committed
    /// progress passed ([`StreamStore::raise_table_floor`]); until the table reports progress,
    /// nothing. An explicit trim ([`StreamStore::trim`]) is not held. A hold already on keeps
    /// its floor.
    pub async fn hold_for_table(&self, id: StreamId, hold: bool) -> Result<()> {
        let shared = self.shared(id)?;
        self.inner.meta.hold_for_table(id, hold).await?;
        let mut state = shared.state.lock();
        state.table_floor = match (hold, state.table_floor) {
            (true, floor) => Some(floor.unwrap_or(0)),
            (false, _) => None,
        };
        Ok(())
    }

    /// Raises the table floor of a held stream to `floor`, the table's committed progress in
    /// it: retention may expire what lies below. Any node may call it, owner or not (the floor
    /// only rises); the owner's maintenance reads it from the metadata store at every pass.
    pub async fn raise_table_floor(&self, id: StreamId, floor: u64) -> Result<()> {
        self.inner.meta.raise_table_floor(id, floor).await?;
        if let Ok(shared) = self.shared(id) {
            let mut state = shared.state.lock();
            if let Some(held) = state.table_floor.as_mut() {
                *held = (*held).max(floor);
            }
        }
        Ok(())
    }

    /// The bytes of stream `id` from its start to its end (object ranges that reach past the
    /// start, whole, and appends not uploaded yet); None when this node does not own it
    /// (another node's ranges are not loaded). DescribeLogDirs reports it.
    pub fn owned_stream_bytes(&self, id: StreamId) -> Option<u64> {
        let shared = self.shared(id).ok()?;
        let state = shared.state.lock();
        state.owned.then(|| state.bytes_from(state.start_offset))
    }

    /// The object ranges of stream `id` this node owns, in offset order: (start offset, end
    /// offset, bytes, max append time in epoch ms). Data not uploaded yet is in none.
    pub fn uploaded_ranges(&self, id: StreamId) -> Result<Vec<(u64, u64, u64, u64)>> {
        let shared = self.shared(id)?;
        let state = shared.state.lock();
        if !state.owned {
            return Err(Error::NotOwner(id));
        }
        Ok(state
            .ranges
            .values()
            .filter(|r| r.row.end_offset > state.start_offset)
            .map(|r| {
                (
                    r.row.start_offset,
                    r.row.end_offset,
                    r.row.size,
                    r.row.max_timestamp_ms,
                )
            })
            .collect())
    }

    /// Rewrites uploaded batches of stream `id` in place, offsets unchanged (a compacted
    /// topic's cleaner): from the object range holding `from` through whole ranges ending at
    /// or below `until`, at most `max_bytes` of them (at least one range) per call, each batch
    /// through `rewrite` (new bytes, or `None` to keep it). Atomic and fenced by this node's
    /// epoch of the stream. Returns where the rewritten ranges end (the next call's `from`),
    /// or `None` when none qualifies.
    pub async fn rewrite_uploaded(
        &self,
        id: StreamId,
        (from, until, max_bytes): (u64, u64, u64),
        rewrite: &mut (dyn FnMut(&ReadBatch) -> Option<Bytes> + Send),
    ) -> Result<Option<u64>> {
        let shared = self.shared(id)?;
        let mut each = |e: &crate::objects::format::ObjectEntry| {
            rewrite(&ReadBatch {
                base_offset: e.base_offset,
                record_count: e.record_count,
                timestamp_ms: e.timestamp_ms,
                payload: e.payload.clone(),
            })
        };
        self.inner
            .rewrite_stream(&shared, (from, until, max_bytes), &mut each)
            .await
    }

    /// For a stream held for a table: the bytes this node holds of it that its table has not
    /// committed yet (from the table floor to the end: object ranges, a range across the floor
    /// whole, and appends not uploaded yet), and the bytes kept only because of the hold, as
    /// of the last maintenance pass. None: not held, or not owned here (another node's ranges
    /// are not loaded).
    pub fn table_lag_bytes(&self, id: StreamId) -> Option<TableLag> {
        let shared = self.shared(id).ok()?;
        let state = shared.state.lock();
        let floor = state.table_floor?;
        if !state.owned {
            return None;
        }
        Some(TableLag {
            floor,
            lag_bytes: state.bytes_from(floor),
            held_bytes: state.held_bytes,
        })
    }

    /// Uploads everything appended so far (as several objects when it is more than
    /// `upload_max_object_bytes`) and trims the WAL behind it.
    pub async fn flush(&self) -> Result<()> {
        loop {
            // In a task of its own: a caller that gives up must not cut a round between its
            // metadata commit and the in-memory update that follows.
            let inner = self.inner.clone();
            let report = tokio::spawn(async move { inner.upload_round().await })
                .await
                .map_err(|e| Error::Internal(format!("upload task failed: {e}")))??;
            if !report.more {
                return Ok(());
            }
        }
    }

    /// Runs retention, compaction and garbage collection once, now.
    pub async fn run_maintenance(&self) -> Result<crate::maintenance::MaintenanceReport> {
        // In a task of its own, for the same reason as `flush`.
        let inner = self.inner.clone();
        tokio::spawn(async move { inner.maintain().await })
            .await
            .map_err(|e| Error::Internal(format!("maintenance task failed: {e}")))?
    }

    /// Activity counters and cache usage.
    pub fn stats(&self) -> StoreStats {
        let c = &self.inner.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let wal = self.inner.wal.as_ref();
        StoreStats {
            appends: get(&c.appends),
            appended_bytes: get(&c.appended_bytes),
            uploads: get(&c.uploads),
            uploaded_bytes: get(&c.uploaded_bytes),
            log_cache_reads: get(&c.log_cache_reads),
            object_reads: get(&c.object_reads),
            block_cache_hits: self.inner.block_cache.hits(),
            block_cache_misses: self.inner.block_cache.misses(),
            log_cache_used_bytes: self.inner.log_budget.used(),
            log_cache_budget_bytes: self.inner.log_budget.budget(),
            block_cache_used_bytes: self.inner.block_cache.used(),
            dirty_bytes: get(&self.inner.dirty_bytes),
            wal_segments: wal.map_or(0, |w| w.segment_count() as u64),
            compactions: get(&c.compactions),
            objects_deleted: get(&c.objects_deleted),
            wal_syncs: wal.map_or(get(&c.object_wal_groups), |w| get(&w.counters().syncs)),
            wal_sync_micros_total: wal.map_or(get(&c.object_wal_micros), |w| {
                get(&w.counters().sync_micros)
            }),
            wal_sync_micros_max: wal.map_or(get(&c.object_wal_max_micros), |w| {
                get(&w.counters().max_sync_micros)
            }),
            wal_bytes: wal.map_or(get(&c.appended_bytes), |w| get(&w.counters().bytes)),
        }
    }

    /// Whether the store can still take and keep data: the WAL's state and the uploads'
    /// failure streak, from memory.
    pub fn health(&self) -> StoreHealth {
        StoreHealth {
            wal_failed: self.inner.wal.as_ref().and_then(|w| w.failure()),
            upload_failure: self.inner.counters.upload_failure.lock().clone(),
        }
    }

    /// Checks every stream's invariants (see the `stream` module); for tests.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        for s in self.inner.streams.read().values() {
            s.state
                .lock()
                .check()
                .map_err(|e| format!("stream {} ({}): {e}", s.id, s.name))?;
        }
        Ok(())
    }

    /// Stops the background tasks and the WAL writer after it has synced what was queued.
    /// Data not yet uploaded stays in the WAL and is replayed on the next open.
    pub async fn close(self) {
        self.cancel.cancel();
        let mut tasks = std::mem::take(&mut *self.tasks.lock());
        while tasks.join_next().await.is_some() {}
        // The WAL writer drains its queue and exits when the last sender goes: with the store.
        let inner = self.inner.clone();
        drop(self);
        let _ = tokio::task::spawn_blocking(move || drop(inner)).await;
    }
}

impl Drop for StreamStore {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
