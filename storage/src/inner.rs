//! The state every part of the stream store shares ([`Inner`]: the config, the clock, the
//! metadata store, the object store, the WAL, the streams, the caches, the counters) and an
//! append on its way through the WAL ([`AppendRequest`]). The store's API (`store`), the
//! object-store WAL (`objwal`), the uploader (`upload`) and maintenance (`maintenance`) each
//! add their own methods to [`Inner`] and import it from here, so none of them imports
//! another.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;
use tokio::sync::{oneshot, Notify};

use crate::cache::{BlockCache, LogBudget};
use crate::config::StorageConfig;
use crate::error::{Error, Result};
use crate::meta::{MetaStore, ObjectState};
use crate::objects::ObjectClient;
use crate::stream::{CachedEntry, StreamId, StreamShared};
use crate::wal::format::{self, EntryHeader};
use crate::wal::{Wal, WalRequest, Written};
use inlet_common::Clock;

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub appends: AtomicU64,
    pub appended_bytes: AtomicU64,
    pub uploads: AtomicU64,
    pub uploaded_bytes: AtomicU64,
    pub log_cache_reads: AtomicU64,
    pub object_reads: AtomicU64,
    pub compactions: AtomicU64,
    pub objects_deleted: AtomicU64,
    /// The object-store WAL's groups (each one object and one metadata commit), the time from
    /// cutting a group to its commit in total and at most.
    pub object_wal_groups: AtomicU64,
    pub object_wal_micros: AtomicU64,
    pub object_wal_max_micros: AtomicU64,
    /// The upload rounds' failure streak, for [`StreamStore::health`].
    pub upload_failure: parking_lot::Mutex<Option<UploadFailure>>,
}

/// Upload rounds have failed since `since_ms` (the store's clock), the last one with `error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadFailure {
    pub since_ms: u64,
    pub error: String,
    /// Whether the last error may go away by itself (a timeout, a 503) or will not (access
    /// denied, no such bucket).
    pub retryable: bool,
}

pub(crate) struct Inner {
    pub config: StorageConfig,
    pub clock: Arc<dyn Clock>,
    pub meta: MetaStore,
    pub objects: ObjectClient,
    /// The local WAL (`wal = "local"`), or `None` with the object-store WAL.
    pub wal: Option<Wal<AppendRequest>>,
    /// The object-store WAL's queue (`wal = "object"`).
    pub object_wal: Option<tokio::sync::mpsc::Sender<AppendRequest>>,
    pub streams: RwLock<HashMap<StreamId, Arc<StreamShared>>>,
    pub log_budget: Arc<LogBudget>,
    pub block_cache: BlockCache,
    /// Bytes appended and not yet uploaded.
    pub dirty_bytes: Arc<AtomicU64>,
    pub upload_wake: Arc<Notify>,
    /// Serializes upload rounds (background and explicit `flush`).
    pub upload_lock: tokio::sync::Mutex<()>,
    /// Serializes maintenance passes.
    pub maintenance_lock: tokio::sync::Mutex<()>,
    /// Serializes the changes of `streams` that follow a read or write of the metadata store
    /// (a refresh, a creation, a deletion): a refresh that read the rows before a stream was
    /// created or deleted must not apply them after, dropping the new stream (as deleted) or
    /// bringing the deleted one back.
    pub streams_sync: tokio::sync::Mutex<()>,
    pub counters: Arc<Counters>,
}

/// What a completing append updates. Separate from [`Inner`] (which owns the WAL) so that an
/// append in the WAL's queue never keeps the WAL itself alive.
pub(crate) struct AppendSink {
    pub(crate) dirty_bytes: Arc<AtomicU64>,
    pub(crate) upload_wake: Arc<Notify>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) upload_bytes: u64,
}

/// Writes an append's base offset into `payload[..8]` and, given one, the epoch its stream is
/// owned under into `payload[12..16]` (see [`AppendOptions`]).
pub(crate) fn stamp(payload: &mut [u8], base: u64, epoch: Option<u64>) {
    payload[..8].copy_from_slice(&base.to_be_bytes());
    if let Some(epoch) = epoch {
        let epoch = u32::try_from(epoch)
            .unwrap_or(u32::MAX)
            .min(i32::MAX as u32);
        payload[12..16].copy_from_slice(&epoch.to_be_bytes());
    }
}

/// An append on its way through the WAL writer.
pub(crate) struct AppendRequest {
    pub(crate) stream: Arc<StreamShared>,
    pub(crate) payload: Bytes,
    pub(crate) record_count: u32,
    pub(crate) timestamp_ms: u64,
    pub(crate) write_base_offset: bool,
    /// [`AppendOptions::write_epoch`].
    pub(crate) write_epoch: bool,
    pub(crate) base_offset: u64,
    pub(crate) sink: AppendSink,
    /// Log cache room held for this append: handed to the cache when the entry lands there,
    /// given back if the append fails or is dropped (a cancelled caller) on the way.
    pub(crate) reservation: Reservation,
    pub(crate) reply: oneshot::Sender<Result<u64>>,
    /// The stream's failure generation when this append was submitted: an append submitted
    /// before a failure on its stream fails too.
    pub(crate) generation: u64,
    /// [`AppendOptions::failure_latch`].
    pub(crate) failure_latch: bool,
}

pub(crate) struct Reservation {
    pub(crate) budget: Arc<LogBudget>,
    pub(crate) bytes: u64,
}

impl Reservation {
    /// The bytes now belong to the log cache; nothing is released on drop.
    pub(crate) fn into_cache(mut self) {
        self.bytes = 0;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.release(self.bytes);
        }
    }
}

impl WalRequest for AppendRequest {
    fn encoded_len(&self) -> usize {
        format::entry_len(self.payload.len())
    }

    fn encode(&mut self, buf: &mut Vec<u8>, position: u64) -> Result<()> {
        let mut state = self.stream.state.lock();
        if state.deleted {
            return Err(Error::UnknownStream(self.stream.id.to_string()));
        }
        if !state.owned {
            return Err(Error::NotOwner(self.stream.id));
        }
        self.base_offset = state.next_offset;
        state.next_offset += self.record_count as u64;
        let epoch = state.epoch;
        drop(state);
        let header = EntryHeader {
            stream_id: self.stream.id,
            base_offset: self.base_offset,
            record_count: self.record_count,
            timestamp_ms: self.timestamp_ms,
        };
        let base = self.base_offset;
        let (write_base_offset, write_epoch) = (self.write_base_offset, self.write_epoch);
        format::encode_entry(buf, position, &header, &self.payload, |payload| {
            if write_base_offset {
                stamp(payload, base, write_epoch.then_some(epoch));
            }
        });
        Ok(())
    }

    type Ack = (oneshot::Sender<Result<u64>>, Result<u64>);

    fn ack((reply, outcome): Self::Ack) {
        // The appender may have gone away (cancelled); the data is durable regardless.
        let _ = reply.send(outcome);
    }

    fn complete(self, result: Result<Written>) -> Self::Ack {
        let size = self.payload.len() as u64;
        let reservation = self.reservation;
        let outcome = match result {
            Ok(written) => {
                let payload = written
                    .group
                    .slice(written.range.start + format::ENTRY_HEADER_LEN..written.range.end);
                let end = self.base_offset + self.record_count as u64;
                let mut state = self.stream.state.lock();
                if state.deleted {
                    drop(state);
                    drop(reservation);
                    Err(Error::UnknownStream(self.stream.id.to_string()))
                } else {
                    state.cache.push_back(CachedEntry {
                        base_offset: self.base_offset,
                        record_count: self.record_count,
                        timestamp_ms: self.timestamp_ms,
                        payload,
                        wal_end: written.wal_end,
                    });
                    state.durable_end = end;
                    state.appended_bytes += size;
                    reservation.into_cache();
                    // Counted under the stream's lock, so a concurrent delete_stream, which
                    // subtracts the stream's dirty bytes, never sees them uncounted.
                    let dirty = self.sink.dirty_bytes.fetch_add(size, Ordering::AcqRel) + size;
                    drop(state);
                    self.stream.end.send_replace(end);
                    let c = &self.sink.counters;
                    c.appends.fetch_add(1, Ordering::Relaxed);
                    c.appended_bytes.fetch_add(size, Ordering::Relaxed);
                    if dirty >= self.sink.upload_bytes {
                        self.sink.upload_wake.notify_one();
                    }
                    Ok(self.base_offset)
                }
            }
            Err(e) => {
                drop(reservation);
                Err(e)
            }
        };
        (self.reply, outcome)
    }
}

impl Inner {
    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    pub(crate) fn live_streams(&self) -> Vec<Arc<StreamShared>> {
        let mut out: Vec<_> = self.streams.read().values().cloned().collect();
        out.sort_by_key(|s| s.id);
        out
    }

    /// Deletes prepared objects that no upload will commit: at open, every one this node left
    /// (it crashed between upload and commit); later, any older than the orphan grace period
    /// (another node's abandoned upload).
    pub(crate) async fn collect_orphans(&self, at_open: bool) -> Result<usize> {
        let now = self.now_ms();
        let mut collected = 0;
        for object in self.meta.objects_in_state(ObjectState::Prepared).await? {
            let left_by_this_node = at_open && object.node_id == self.config.node_id;
            let abandoned = object
                .created_ms
                .saturating_add(self.config.orphan_grace_ms)
                <= now;
            // Claim it first: an upload that commits meanwhile keeps its object.
            if (left_by_this_node || abandoned) && self.meta.claim_orphan(object.id, now).await? {
                self.objects.delete(&self.object_path(object.id)).await?;
                self.meta.forget_object(object.id).await?;
                collected += 1;
            }
        }
        if collected > 0 {
            tracing::info!(collected, "collected orphaned object uploads");
        }
        Ok(collected)
    }

    /// The object key of an object id, spread over 256 prefixes.
    pub(crate) fn object_path(&self, object_id: u64) -> object_store::path::Path {
        let spread = (object_id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8;
        object_store::path::Path::from(format!(
            "{}/{spread:02x}/{object_id:016x}.obj",
            self.config.object_prefix
        ))
    }
}
