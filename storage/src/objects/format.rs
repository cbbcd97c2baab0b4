//! The object format shared by stream set objects (many streams) and stream objects (one).
//!
//! ```text
//! data blocks | index block | footer (32 bytes)
//! ```
//!
//! - A *data block* holds consecutive entries of one stream, in offset order, each framed as
//!   `base_offset: u64 | record_count: u32 | timestamp_ms: u64 | len: u32 | payload`. Blocks of
//!   one stream are contiguous in the object; blocks are about `object_block_bytes` big, and an
//!   entry is never split (a larger entry is a block of its own).
//! - The *index block* lists every data block: `stream_id: u64 | start_offset: u64 |
//!   end_offset: u64 | position: u64 | size: u32 | max_timestamp_ms: u64 | crc: u32`
//!   (48 bytes each), after a `count: u32`.
//! - The *footer*: `index_position: u64 | index_len: u32 | index_crc: u32 | version: u16 |
//!   reserved: [u8; 6] | magic: "INLETOB1"`.
//!
//! Integers are little-endian. Decoders check every length against the buffer, every CRC, and
//! that a block's entries cover exactly its offsets, so damaged or hostile input is an error.

use bytes::{BufMut, Bytes};

use crate::error::{Error, Result};

pub const FOOTER_LEN: usize = 32;
pub const MAGIC: &[u8; 8] = b"INLETOB1";
pub const VERSION: u16 = 1;
const INDEX_ENTRY_LEN: usize = 48;
const ENTRY_HEADER_LEN: usize = 24;

/// One stored batch: what an append wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectEntry {
    pub base_offset: u64,
    pub record_count: u32,
    pub timestamp_ms: u64,
    pub payload: Bytes,
}

impl ObjectEntry {
    pub fn end_offset(&self) -> u64 {
        self.base_offset + self.record_count as u64
    }
}

/// Where one data block lies and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockIndex {
    pub stream_id: u64,
    pub start_offset: u64,
    pub end_offset: u64,
    pub position: u64,
    pub size: u32,
    pub max_timestamp_ms: u64,
    pub crc: u32,
}

/// The footer: where the index is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    pub index_position: u64,
    pub index_len: u32,
    pub index_crc: u32,
}

/// A contiguous run of one stream's offsets in an object: what the metadata store indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamRange {
    pub stream_id: u64,
    pub start_offset: u64,
    pub end_offset: u64,
    pub position: u64,
    pub size: u64,
    pub max_timestamp_ms: u64,
}

/// A finished object: its bytes (as chunks that share the appended payloads rather than copy
/// them), block index and per-stream ranges.
#[derive(Debug, Clone)]
pub struct BuiltObject {
    pub chunks: Vec<Bytes>,
    pub len: u64,
    pub footer: Footer,
    pub blocks: Vec<BlockIndex>,
    pub ranges: Vec<StreamRange>,
}

impl BuiltObject {
    /// The object as one contiguous buffer (copies; for tests and small objects).
    pub fn to_bytes(&self) -> Bytes {
        let mut out = Vec::with_capacity(self.len as usize);
        for c in &self.chunks {
            out.extend_from_slice(c);
        }
        Bytes::from(out)
    }
}

/// Payloads at least this big are referenced, not copied, by the object being built.
const SHARE_AT_LEAST: usize = 4096;

/// Builds an object. Add each stream's entries in offset order; one stream's entries must be
/// added together (a stream may be added again only for a run that does not touch the last).
pub struct ObjectBuilder {
    block_bytes: usize,
    chunks: Vec<Bytes>,
    /// Bytes written since the last chunk: headers, small payloads, the index and footer.
    buf: Vec<u8>,
    len: usize,
    blocks: Vec<BlockIndex>,
    ranges: Vec<StreamRange>,
    open: Option<BlockIndex>,
    open_crc: u32,
}

impl ObjectBuilder {
    pub fn new(block_bytes: u64) -> Self {
        ObjectBuilder {
            block_bytes: block_bytes.max(1) as usize,
            chunks: Vec::new(),
            buf: Vec::new(),
            len: 0,
            blocks: Vec::new(),
            ranges: Vec::new(),
            open: None,
            open_crc: 0,
        }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn put_copied(&mut self, bytes: &[u8]) {
        self.open_crc = crc32c::crc32c_append(self.open_crc, bytes);
        self.buf.extend_from_slice(bytes);
        self.len += bytes.len();
    }

    fn put_shared(&mut self, bytes: &Bytes) {
        if bytes.len() < SHARE_AT_LEAST {
            return self.put_copied(bytes);
        }
        self.open_crc = crc32c::crc32c_append(self.open_crc, bytes);
        if !self.buf.is_empty() {
            self.chunks.push(Bytes::from(std::mem::take(&mut self.buf)));
        }
        self.chunks.push(bytes.clone());
        self.len += bytes.len();
    }

    /// Adds one entry of `stream_id`. Entries of a stream must come in offset order; an entry
    /// that does not follow the previous one of the same stream starts a new range.
    pub fn add(&mut self, stream_id: u64, entry: &ObjectEntry) {
        let continues = matches!(self.open, Some(b) if b.stream_id == stream_id && b.end_offset == entry.base_offset);
        let block_full = matches!(self.open, Some(b) if b.size as usize >= self.block_bytes);
        if !continues || block_full {
            self.seal_block();
        }
        let continues_range = continues
            && matches!(self.ranges.last(), Some(r) if r.stream_id == stream_id && r.end_offset == entry.base_offset);
        let position = self.len as u64;
        let mut header = [0u8; ENTRY_HEADER_LEN];
        let mut h = &mut header[..];
        h.put_u64_le(entry.base_offset);
        h.put_u32_le(entry.record_count);
        h.put_u64_le(entry.timestamp_ms);
        h.put_u32_le(entry.payload.len() as u32);
        self.put_copied(&header);
        self.put_shared(&entry.payload);
        let size = (ENTRY_HEADER_LEN + entry.payload.len()) as u64;
        let block = self.open.get_or_insert(BlockIndex {
            stream_id,
            start_offset: entry.base_offset,
            end_offset: entry.base_offset,
            position,
            size: 0,
            max_timestamp_ms: 0,
            crc: 0,
        });
        block.end_offset = entry.end_offset();
        block.size += size as u32;
        block.max_timestamp_ms = block.max_timestamp_ms.max(entry.timestamp_ms);
        if continues_range {
            let range = self.ranges.last_mut().expect("checked above");
            range.end_offset = entry.end_offset();
            range.size += size;
            range.max_timestamp_ms = range.max_timestamp_ms.max(entry.timestamp_ms);
        } else {
            self.ranges.push(StreamRange {
                stream_id,
                start_offset: entry.base_offset,
                end_offset: entry.end_offset(),
                position,
                size,
                max_timestamp_ms: entry.timestamp_ms,
            });
        }
    }

    fn seal_block(&mut self) {
        if let Some(mut block) = self.open.take() {
            block.crc = self.open_crc;
            self.blocks.push(block);
        }
        self.open_crc = 0;
    }

    /// Writes the index and footer and returns the object.
    pub fn finish(mut self) -> BuiltObject {
        self.seal_block();
        let index_position = self.len as u64;
        let mut index = Vec::with_capacity(4 + self.blocks.len() * INDEX_ENTRY_LEN);
        index.put_u32_le(self.blocks.len() as u32);
        for b in &self.blocks {
            index.put_u64_le(b.stream_id);
            index.put_u64_le(b.start_offset);
            index.put_u64_le(b.end_offset);
            index.put_u64_le(b.position);
            index.put_u32_le(b.size);
            index.put_u64_le(b.max_timestamp_ms);
            index.put_u32_le(b.crc);
        }
        let index_len = index.len() as u32;
        let index_crc = crc32c::crc32c(&index);
        self.buf.extend_from_slice(&index);
        let footer = Footer {
            index_position,
            index_len,
            index_crc,
        };
        self.buf.put_u64_le(index_position);
        self.buf.put_u32_le(index_len);
        self.buf.put_u32_le(index_crc);
        self.buf.put_u16_le(VERSION);
        self.buf.put_bytes(0, 6);
        self.buf.extend_from_slice(MAGIC);
        let len = self.len as u64 + index.len() as u64 + FOOTER_LEN as u64;
        self.chunks.push(Bytes::from(self.buf));
        BuiltObject {
            chunks: self.chunks,
            len,
            footer,
            blocks: self.blocks,
            ranges: self.ranges,
        }
    }
}

fn corrupt(what: &str, detail: impl Into<String>) -> Error {
    Error::corrupt(what.to_string(), detail)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Parses the last [`FOOTER_LEN`] bytes of an object of `object_len` bytes.
pub fn decode_footer(footer: &[u8], object_len: u64, what: &str) -> Result<Footer> {
    if footer.len() != FOOTER_LEN {
        return Err(corrupt(what, format!("footer is {} bytes", footer.len())));
    }
    if &footer[24..32] != MAGIC {
        return Err(corrupt(what, "bad magic: not an Inlet object"));
    }
    let version = u16::from_le_bytes([footer[16], footer[17]]);
    if version != VERSION {
        return Err(corrupt(
            what,
            format!("unsupported object version {version}"),
        ));
    }
    let f = Footer {
        index_position: u64_at(footer, 0),
        index_len: u32_at(footer, 8),
        index_crc: u32_at(footer, 12),
    };
    let index_end = f.index_position.checked_add(f.index_len as u64);
    if index_end != Some(object_len.saturating_sub(FOOTER_LEN as u64)) {
        return Err(corrupt(what, "index does not end at the footer"));
    }
    Ok(f)
}

/// Parses the index block.
pub fn decode_index(index: &[u8], footer: &Footer, what: &str) -> Result<Vec<BlockIndex>> {
    if index.len() != footer.index_len as usize {
        return Err(corrupt(what, "index length differs from the footer"));
    }
    if crc32c::crc32c(index) != footer.index_crc {
        return Err(corrupt(what, "index CRC mismatch"));
    }
    if index.len() < 4 {
        return Err(corrupt(what, "index shorter than its count"));
    }
    let count = u32_at(index, 0) as usize;
    if (index.len() - 4) / INDEX_ENTRY_LEN != count
        || !(index.len() - 4).is_multiple_of(INDEX_ENTRY_LEN)
    {
        return Err(corrupt(what, "index size does not match its count"));
    }
    let mut blocks = Vec::with_capacity(count);
    for i in 0..count {
        let at = 4 + i * INDEX_ENTRY_LEN;
        let b = BlockIndex {
            stream_id: u64_at(index, at),
            start_offset: u64_at(index, at + 8),
            end_offset: u64_at(index, at + 16),
            position: u64_at(index, at + 24),
            size: u32_at(index, at + 32),
            max_timestamp_ms: u64_at(index, at + 36),
            crc: u32_at(index, at + 44),
        };
        let block_end = b.position.checked_add(b.size as u64);
        if b.end_offset < b.start_offset || block_end.is_none_or(|e| e > footer.index_position) {
            return Err(corrupt(what, format!("index entry {i} is out of bounds")));
        }
        blocks.push(b);
    }
    Ok(blocks)
}

/// Parses one data block (its bytes only) into entries, checking its CRC and that the entries
/// cover exactly the block's offsets.
pub fn decode_block(block: &Bytes, index: &BlockIndex, what: &str) -> Result<Vec<ObjectEntry>> {
    if block.len() != index.size as usize {
        return Err(corrupt(what, "block length differs from the index"));
    }
    if crc32c::crc32c(block) != index.crc {
        return Err(corrupt(
            what,
            format!("block CRC mismatch at position {}", index.position),
        ));
    }
    let mut entries = Vec::new();
    let mut at = 0;
    let mut next = index.start_offset;
    while at < block.len() {
        if block.len() - at < ENTRY_HEADER_LEN {
            return Err(corrupt(what, "truncated entry header in block"));
        }
        let base_offset = u64_at(block, at);
        let record_count = u32_at(block, at + 8);
        let timestamp_ms = u64_at(block, at + 12);
        let len = u32_at(block, at + 20) as usize;
        let start = at + ENTRY_HEADER_LEN;
        if block.len() - start < len {
            return Err(corrupt(what, "truncated entry payload in block"));
        }
        if base_offset != next || record_count == 0 {
            return Err(corrupt(
                what,
                format!("block entry at offset {base_offset} where {next} was expected"),
            ));
        }
        next = base_offset + record_count as u64;
        entries.push(ObjectEntry {
            base_offset,
            record_count,
            timestamp_ms,
            payload: block.slice(start..start + len),
        });
        at = start + len;
    }
    if next != index.end_offset {
        return Err(corrupt(
            what,
            "block entries do not reach the block's end offset",
        ));
    }
    Ok(entries)
}

/// Decodes a whole object: every block, grouped as stored. For compaction and tests.
pub fn decode_object(data: &Bytes, what: &str) -> Result<Vec<(BlockIndex, Vec<ObjectEntry>)>> {
    if data.len() < FOOTER_LEN {
        return Err(corrupt(what, "object shorter than its footer"));
    }
    let footer = decode_footer(&data[data.len() - FOOTER_LEN..], data.len() as u64, what)?;
    let start = footer.index_position as usize;
    let index = decode_index(
        &data[start..start + footer.index_len as usize],
        &footer,
        what,
    )?;
    index
        .into_iter()
        .map(|b| {
            let bytes = data.slice(b.position as usize..(b.position + b.size as u64) as usize);
            decode_block(&bytes, &b, what).map(|entries| (b, entries))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn streams() -> impl Strategy<Value = Vec<(u64, Vec<ObjectEntry>)>> {
        prop::collection::vec(
            (
                any::<u64>(),
                0u64..1_000_000,
                prop::collection::vec(
                    (
                        1u32..50,
                        any::<u64>(),
                        prop::collection::vec(any::<u8>(), 0..200),
                    ),
                    1..30,
                ),
            ),
            1..6,
        )
        .prop_map(|streams| {
            let mut seen = std::collections::HashSet::new();
            streams
                .into_iter()
                .filter(|(id, _, _)| seen.insert(*id))
                .map(|(id, mut offset, entries)| {
                    let entries = entries
                        .into_iter()
                        .map(|(count, ts, payload)| {
                            let e = ObjectEntry {
                                base_offset: offset,
                                record_count: count,
                                timestamp_ms: ts,
                                payload: Bytes::from(payload),
                            };
                            offset += count as u64;
                            e
                        })
                        .collect();
                    (id, entries)
                })
                .collect()
        })
    }

    fn build(streams: &[(u64, Vec<ObjectEntry>)], block: u64) -> BuiltObject {
        let mut builder = ObjectBuilder::new(block);
        for (id, entries) in streams {
            for e in entries {
                builder.add(*id, e);
            }
        }
        builder.finish()
    }

    proptest! {
        #[test]
        fn objects_round_trip(streams in streams(), block in 1u64..2000) {
            let built = build(&streams, block);
            prop_assert_eq!(built.to_bytes().len() as u64, built.len);
            let decoded = decode_object(&built.to_bytes(), "test").expect("decodes");
            let mut got: Vec<(u64, Vec<ObjectEntry>)> = Vec::new();
            for (b, entries) in decoded {
                match got.last_mut() {
                    Some((id, es)) if *id == b.stream_id => es.extend(entries),
                    _ => got.push((b.stream_id, entries)),
                }
            }
            prop_assert_eq!(&got, &streams);
            // One range per stream, covering its entries exactly.
            prop_assert_eq!(built.ranges.len(), streams.len());
            for (range, (id, entries)) in built.ranges.iter().zip(&streams) {
                prop_assert_eq!(range.stream_id, *id);
                prop_assert_eq!(range.start_offset, entries[0].base_offset);
                prop_assert_eq!(range.end_offset, entries.last().unwrap().end_offset());
                let blocks: u64 = built.blocks.iter().filter(|b| b.stream_id == *id).map(|b| b.size as u64).sum();
                prop_assert_eq!(range.size, blocks);
            }
        }

        /// Any single bit flip is detected (or lands in a reserved byte); never silently
        /// different data.
        #[test]
        fn damage_is_detected(streams in streams(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
            let built = build(&streams, 512);
            let mut data = built.to_bytes().to_vec();
            let at = at.index(data.len());
            data[at] ^= 1 << bit;
            let reserved = data.len() - 14..data.len() - 8;
            match decode_object(&Bytes::from(data), "test") {
                Err(e) => prop_assert_eq!(e.kind(), crate::ErrorKind::Corruption),
                Ok(_) => prop_assert!(reserved.contains(&at), "flip at {} went unnoticed", at),
            }
        }

        /// Truncated objects and garbage are errors, never panics.
        #[test]
        fn truncation_and_garbage_are_errors(streams in streams(), cut in any::<prop::sample::Index>(), garbage in prop::collection::vec(any::<u8>(), 0..100)) {
            let built = build(&streams, 512);
            let data = built.to_bytes();
            let cut = cut.index(data.len());
            prop_assert!(decode_object(&data.slice(..cut), "test").is_err());
            let _ = decode_object(&Bytes::from(garbage), "test");
        }
    }
}
