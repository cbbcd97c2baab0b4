//! One stream's in-memory state: offsets, its entries in the log cache, and the object ranges
//! that hold its committed data.
//!
//! Offsets of a stream, always ordered as
//! `start_offset <= committed_end <= durable_end <= next_offset`:
//! - `start_offset`: first readable offset (raised by trim and retention);
//! - `committed_end`: everything below is in committed objects (`ranges`);
//! - `durable_end`: everything below is durable in the WAL and readable;
//! - `next_offset`: the next offset the WAL writer assigns (ahead of `durable_end` while a group
//!   is being synced).
//!
//! The cache holds a contiguous run of entries ending at `durable_end`; entries at or above
//! `committed_end` are *dirty* (only in the WAL and the cache) and are never evicted. Together,
//! `ranges` and the cache cover every offset in `[start_offset, durable_end)`; see
//! [`StreamState::check`].

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::meta::{ObjectKind, RangeRow};

/// A stream's id in the metadata store.
pub type StreamId = u64;

/// An appended batch, as the log cache holds it.
#[derive(Debug, Clone)]
pub(crate) struct CachedEntry {
    pub base_offset: u64,
    pub record_count: u32,
    pub timestamp_ms: u64,
    pub payload: Bytes,
    /// WAL position just past this entry.
    pub wal_end: u64,
}

impl CachedEntry {
    pub(crate) fn end_offset(&self) -> u64 {
        self.base_offset + self.record_count as u64
    }
}

/// Where a range of a stream lives: the range row plus what a reader needs of its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RangeRef {
    pub row: RangeRow,
    pub kind: ObjectKind,
    pub index_position: u64,
    pub index_len: u64,
}

#[derive(Debug, Default)]
pub(crate) struct StreamState {
    pub deleted: bool,
    /// This node owns the stream: it may append and commit the stream's metadata, each commit
    /// fenced by `epoch`. A stream this node does not own is neither appended to nor read.
    pub owned: bool,
    /// The epoch this node owns the stream under (meaningless while not `owned`).
    pub epoch: u64,
    /// Raised by every failed append: appends submitted before it fail too.
    pub generation: u64,
    /// Failed appends that asked for the latch (`AppendOptions::failure_latch`) and that the
    /// writer has not taken in yet (`StreamStore::clear_failure`): while any, appends are
    /// refused.
    pub failed: u64,
    pub start_offset: u64,
    pub committed_end: u64,
    pub durable_end: u64,
    pub next_offset: u64,
    pub cache: VecDeque<CachedEntry>,
    /// start offset → range.
    pub ranges: BTreeMap<u64, RangeRef>,
    pub retention_ms: Option<i64>,
    pub retention_bytes: Option<i64>,
    /// A table topic's stream: retention expires only ranges that end at or below this offset
    /// (the table's committed progress). None: not held for a table.
    pub table_floor: Option<u64>,
    /// Bytes of ranges that retention would have expired but the table floor kept, as of the
    /// last maintenance pass.
    pub held_bytes: u64,
    /// Payload bytes made durable by this node since it opened the stream (a load measure:
    /// the cluster balances streams by its rate).
    pub appended_bytes: u64,
}

/// A stream's range index as the metadata store's `stream_index` returns it.
pub(crate) fn range_index(rows: Vec<(RangeRow, ObjectKind, u64, u64)>) -> BTreeMap<u64, RangeRef> {
    rows.into_iter()
        .map(|(row, kind, index_position, index_len)| {
            (
                row.start_offset,
                RangeRef {
                    row,
                    kind,
                    index_position,
                    index_len,
                },
            )
        })
        .collect()
}

impl StreamState {
    /// A stream's state from its row, with no cache and no ranges yet: committed, durable
    /// and next offsets all at the committed end.
    pub(crate) fn from_row(row: &crate::meta::StreamRow, owned: bool) -> Self {
        StreamState {
            owned,
            epoch: row.epoch,
            start_offset: row.start_offset,
            committed_end: row.committed_end,
            durable_end: row.committed_end,
            next_offset: row.committed_end,
            retention_ms: row.retention_ms,
            retention_bytes: row.retention_bytes,
            table_floor: row.table_floor,
            ..StreamState::default()
        }
    }

    /// Index of the first cached entry that is not yet in object storage.
    pub(crate) fn first_dirty(&self) -> usize {
        self.cache
            .partition_point(|e| e.end_offset() <= self.committed_end)
    }

    /// Bytes of cached entries not yet in object storage.
    pub(crate) fn dirty_bytes(&self) -> u64 {
        self.cache
            .range(self.first_dirty()..)
            .map(|e| e.payload.len() as u64)
            .sum()
    }

    /// Bytes of the stream at or after `offset`: its ranges that end after it (a range that
    /// holds `offset` counts whole) and the cached entries not in object storage yet.
    pub(crate) fn bytes_from(&self, offset: u64) -> u64 {
        let stored: u64 = self
            .ranges
            .values()
            .filter(|r| r.row.end_offset > offset)
            .map(|r| r.row.size)
            .sum();
        stored + self.dirty_bytes()
    }

    /// The range holding `offset`, if any.
    pub(crate) fn range_for(&self, offset: u64) -> Option<RangeRef> {
        self.ranges
            .range(..=offset)
            .next_back()
            .map(|(_, r)| *r)
            .filter(|r| r.row.end_offset > offset)
    }

    /// Checks the invariants in the module docs; returns what is broken.
    pub(crate) fn check(&self) -> Result<(), String> {
        if !(self.start_offset <= self.durable_end
            && self.committed_end <= self.durable_end
            && self.durable_end <= self.next_offset)
        {
            return Err(format!(
                "offsets out of order: start {} committed {} durable {} next {}",
                self.start_offset, self.committed_end, self.durable_end, self.next_offset
            ));
        }
        let mut expected = None;
        for e in &self.cache {
            if let Some(x) = expected {
                if e.base_offset != x {
                    return Err(format!("cache gap at {x}: next entry at {}", e.base_offset));
                }
            }
            expected = Some(e.end_offset());
        }
        if let Some(end) = expected {
            if end != self.durable_end {
                return Err(format!(
                    "cache ends at {end}, durable end is {}",
                    self.durable_end
                ));
            }
        }
        let cache_start = self
            .cache
            .front()
            .map_or(self.durable_end, |e| e.base_offset);
        if cache_start > self.committed_end {
            return Err(format!(
                "cache starts at {cache_start} above the committed end {}",
                self.committed_end
            ));
        }
        let mut at = self.start_offset;
        while at < cache_start {
            match self.range_for(at) {
                Some(r) => at = r.row.end_offset,
                None => return Err(format!("offset {at} is neither in an object nor cached")),
            }
        }
        Ok(())
    }
}

/// A stream shared between the API, the WAL writer and the background tasks.
#[derive(Debug)]
pub(crate) struct StreamShared {
    pub id: u64,
    pub name: String,
    pub state: Mutex<StreamState>,
    /// The durable end offset, for readers that wait for new data.
    pub end: watch::Sender<u64>,
}

impl StreamShared {
    pub(crate) fn new(id: u64, name: String, state: StreamState) -> Self {
        let (end, _) = watch::channel(state.durable_end);
        StreamShared {
            id,
            name,
            state: Mutex::new(state),
            end,
        }
    }

    /// Drops cached entries that end at or below `end` and are already in object storage.
    pub(crate) fn evict_cached_below(&self, end: u64) {
        let mut state = self.state.lock();
        let limit = end.min(state.committed_end);
        while state.cache.front().is_some_and(|e| e.end_offset() <= limit) {
            state.cache.pop_front();
        }
    }
}
