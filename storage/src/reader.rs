//! Catch-up reads from objects through the block cache.
//!
//! A reader locates its range in the stream's object index, reads the object's block index
//! (cached), and fetches blocks through the block cache. On a miss it fetches, in one ranged GET,
//! the wanted block and the blocks of the same stream that follow it, up to `readahead_bytes`,
//! so a sequential reader pays one request per read-ahead window rather than one per block.

use std::sync::Arc;

use bytes::Bytes;

use crate::cache::Cached;
use crate::error::{Error, Result};
use crate::inner::Inner;
use crate::objects::format::{self, BlockIndex};
use crate::store::ReadBatch;
use crate::stream::RangeRef;

const INDEX_POSITION: u64 = u64::MAX;

impl Inner {
    /// The block index of an object, from the cache or the object store.
    pub(crate) async fn object_index(&self, range: &RangeRef) -> Result<Arc<Vec<BlockIndex>>> {
        let object_id = range.row.object_id;
        if let Some(Cached::Index(index)) = self.block_cache.get((object_id, INDEX_POSITION)) {
            return Ok(index);
        }
        let path = self.object_path(object_id);
        // The index and the footer after it, in one GET; the footer's CRC checks the index.
        let end = range.index_position + range.index_len + format::FOOTER_LEN as u64;
        let bytes = self
            .objects
            .get_range(&path, range.index_position..end)
            .await?;
        if bytes.len() as u64 != end - range.index_position {
            return Err(Error::corrupt(
                path.to_string(),
                "short read of the object index",
            ));
        }
        let split = range.index_len as usize;
        let footer = format::decode_footer(&bytes[split..], end, path.as_ref())?;
        let index = Arc::new(format::decode_index(
            &bytes[..split],
            &footer,
            path.as_ref(),
        )?);
        let size = index.len() as u64 * 64;
        self.block_cache.insert(
            (object_id, INDEX_POSITION),
            Cached::Index(index.clone()),
            size,
        );
        Ok(index)
    }

    /// Block `at` of `blocks`, fetching it (and read-ahead after it) on a miss.
    async fn block(&self, object_id: u64, blocks: &[BlockIndex], at: usize) -> Result<Bytes> {
        let wanted = blocks[at];
        if let Some(Cached::Block(bytes)) = self.block_cache.get((object_id, wanted.position)) {
            return Ok(bytes);
        }
        let mut last = at;
        let mut span = wanted.size as u64;
        while last + 1 < blocks.len() {
            let next = blocks[last + 1];
            let contiguous = next.position == blocks[last].position + blocks[last].size as u64;
            if next.stream_id != wanted.stream_id
                || !contiguous
                || span + next.size as u64 > self.config.readahead_bytes
            {
                break;
            }
            span += next.size as u64;
            last += 1;
        }
        let path = self.object_path(object_id);
        let data = self
            .objects
            .get_range(&path, wanted.position..wanted.position + span)
            .await?;
        if data.len() as u64 != span {
            return Err(Error::corrupt(
                path.to_string(),
                format!("ranged read returned {} bytes, expected {span}", data.len()),
            ));
        }
        // Each cached block gets its own buffer, so the cache holds exactly the bytes it
        // accounts for (a slice would keep the whole read-ahead buffer alive).
        for b in &blocks[at + 1..=last] {
            let start = (b.position - wanted.position) as usize;
            let bytes = Bytes::copy_from_slice(&data[start..start + b.size as usize]);
            self.block_cache
                .insert((object_id, b.position), Cached::Block(bytes), b.size as u64);
        }
        let wanted_bytes = Bytes::copy_from_slice(&data[..wanted.size as usize]);
        self.block_cache.insert(
            (object_id, wanted.position),
            Cached::Block(wanted_bytes.clone()),
            wanted.size as u64,
        );
        Ok(wanted_bytes)
    }

    /// Reads batches from `from` within one object range, up to about `max_bytes`.
    pub(crate) async fn read_range(
        &self,
        range: &RangeRef,
        from: u64,
        max_bytes: usize,
    ) -> Result<Vec<ReadBatch>> {
        let object_id = range.row.object_id;
        let index = self.object_index(range).await?;
        let range_end = range.row.position + range.row.size;
        let blocks: Vec<BlockIndex> = index
            .iter()
            .filter(|b| {
                b.stream_id == range.row.stream_id
                    && b.position >= range.row.position
                    && b.position < range_end
            })
            .copied()
            .collect();
        let first = blocks.partition_point(|b| b.end_offset <= from);
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let what = self.object_path(object_id).to_string();
        'blocks: for at in first..blocks.len() {
            let data = self.block(object_id, &blocks, at).await?;
            for entry in format::decode_block(&data, &blocks[at], &what)? {
                if entry.end_offset() <= from {
                    continue;
                }
                if !out.is_empty() && bytes + entry.payload.len() > max_bytes {
                    break 'blocks;
                }
                bytes += entry.payload.len();
                out.push(ReadBatch {
                    base_offset: entry.base_offset,
                    record_count: entry.record_count,
                    timestamp_ms: entry.timestamp_ms,
                    payload: entry.payload,
                });
            }
        }
        if out.is_empty() {
            return Err(Error::corrupt(
                what,
                format!(
                    "range of stream {} holds no entry at offset {from}",
                    range.row.stream_id
                ),
            ));
        }
        Ok(out)
    }
}
