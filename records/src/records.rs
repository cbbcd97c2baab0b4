//! The records inside one batch, read the way Kafka's `LogValidator` reads them: one at a time,
//! streaming out of the decompressor, never materialised as a whole.
//!
//! [`walk`] checks what [`crate::batch::parse_header`] cannot see from the header alone:
//! - the batch holds exactly `record_count` records and no bytes after the last one;
//! - the record offset deltas are `0, 1, 2, …` (so `last_offset_delta` is `record_count - 1`);
//! - each record's length prefix matches its fields, header keys are not null, counts are not
//!   negative;
//! - a compressed payload decompresses, to at most [`Limits::max_decompressed_bytes`].
//!
//! Memory: an uncompressed batch is read in place. A compressed one streams through its codec's
//! reader with one reusable buffer that holds a single record, so what a batch can claim
//! (2^31 records, gigabytes of output) costs time bounded by the decompressed bound, never
//! memory beyond the largest record. The visitor sees each record's key and value as borrowed
//! slices.

use std::io::{self, BufRead, BufReader, Read};

use bytes::Bytes;

use crate::batch::{stored_header, Batch, BatchError, Marker, HEADER_LEN};

/// The default bound on what one batch may decompress to (`inlet.batch.max.decompressed.bytes`
/// sets the node's). Ours, passed in: the vendored `kafka-protocol` patch has a bound of its
/// own for its decoders, which this crate does not read.
pub const DEFAULT_MAX_DECOMPRESSED_BYTES: usize = 64 << 20;

/// What a walk may consume.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most bytes a compressed batch may decompress to.
    pub max_decompressed_bytes: usize,
    /// Whether the batch may be a compacted one, as stored batches of a compacted topic are:
    /// its offset deltas then rise but may skip (the records compaction removed), up to the
    /// header's `last_offset_delta`, and it may hold fewer records than offsets, or none.
    pub compacted: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_decompressed_bytes: DEFAULT_MAX_DECOMPRESSED_BYTES,
            compacted: false,
        }
    }
}

/// A reader of `payload`'s records decompressed with the codec of `codec` (1 to 4).
fn decoder<'a>(
    codec: i16,
    payload: &'a [u8],
    limits: Limits,
) -> Result<Box<dyn Read + 'a>, BatchError> {
    Ok(match codec {
        1 => Box::new(flate2::read::GzDecoder::new(payload)),
        2 => Box::new(Snappy::new(payload, limits.max_decompressed_bytes)),
        3 => Box::new(
            lz4::Decoder::new(payload)
                .map_err(|e| invalid(format!("the lz4 payload does not decompress: {e}")))?,
        ),
        4 => Box::new(
            zstd::stream::read::Decoder::with_buffer(payload)
                .map_err(|e| invalid(format!("the zstd payload does not decompress: {e}")))?,
        ),
        other => return Err(invalid(format!("unknown compression codec {other}"))),
    })
}

/// The batch's records section, decompressed, within `limits.max_decompressed_bytes`.
pub fn decompressed(batch: &Batch, limits: Limits) -> Result<bytes::Bytes, BatchError> {
    let payload = batch.bytes.slice(HEADER_LEN.min(batch.bytes.len())..);
    let codec = batch.header.attributes & 0x7;
    if codec == 0 {
        return Ok(payload);
    }
    let limit = limits.max_decompressed_bytes;
    let mut out = Vec::new();
    decoder(codec, &payload, limits)?
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| stream_error(e, limit))?;
    if out.len() > limit {
        return Err(over_limit(limit));
    }
    Ok(out.into())
}

/// The marker a control batch carries (its first record's key), or `None` for a batch that
/// is not a control batch or whose key is not a transaction marker's.
pub fn marker(batch: &Batch) -> Option<Marker> {
    if !batch.header.is_control() {
        return None;
    }
    let mut key = None;
    walk(batch, Limits::default(), |r| {
        if key.is_none() {
            key = r.key.map(<[u8]>::to_vec);
        }
    })
    .ok()?;
    match key?.as_slice() {
        [_, _, 0, 0] => Some(Marker::Abort),
        [_, _, 0, 1] => Some(Marker::Commit),
        _ => None,
    }
}

/// [`marker`] of a stored batch's bytes.
pub fn stored_marker(b: &Bytes) -> Option<Marker> {
    let header = stored_header(b)?;
    if !header.is_control() {
        return None;
    }
    marker(&Batch {
        header,
        bytes: b.clone(),
    })
}

/// One record, borrowed from the batch or the walk's buffer.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    /// The record's offset delta: its position in the batch, unless the batch is compacted.
    pub index: i32,
    pub timestamp_delta: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// The whole encoded record after its length prefix.
    pub raw: &'a [u8],
}

/// The smallest encoded record: length, attributes, timestamp delta, offset delta, key length,
/// value length and header count, one byte each.
pub const MIN_RECORD_BYTES: usize = 7;

/// Reads every record of `batch` (which passed `parse_header`), calling `visit` for each.
/// Returns how many bytes the records took (decompressed).
pub fn walk(
    batch: &Batch,
    limits: Limits,
    mut visit: impl FnMut(RecordRef<'_>),
) -> Result<usize, BatchError> {
    let count = batch.header.record_count;
    let payload = &batch.bytes[HEADER_LEN.min(batch.bytes.len())..];
    let codec = batch.header.attributes & 0x7;
    let mut deltas = Deltas {
        last: limits.compacted.then_some(batch.header.last_offset_delta),
        previous: -1,
    };
    if codec == 0 {
        return walk_slice(payload, count, &mut deltas, &mut visit);
    }
    let reader = decoder(codec, payload, limits)?;
    let limit = limits.max_decompressed_bytes;
    let mut input = BufReader::with_capacity(16 << 10, reader.take(limit as u64 + 1));
    let mut scratch = Vec::new();
    let mut total = 0usize;
    for index in 0..count {
        let length = match read_varint_stream(&mut input) {
            Ok(Some((n, width))) => {
                total += width;
                n
            }
            Ok(None) => return Err(too_few(index, count)),
            Err(e) => return Err(stream_error(e, limit)),
        };
        if length > 0 && total.saturating_add(length as usize) > limit {
            return Err(over_limit(limit));
        }
        let length = record_length(length, limit.saturating_sub(total))?;
        scratch.clear();
        let got = (&mut input)
            .take(length as u64)
            .read_to_end(&mut scratch)
            .map_err(|e| stream_error(e, limit))?;
        total += got;
        if total > limit {
            return Err(over_limit(limit));
        }
        if got < length {
            return Err(BatchError::Invalid(format!(
                "record {index} says it has {length} bytes; the batch ends after {got}"
            )));
        }
        visit(parse_record(&scratch, index, &mut deltas)?);
    }
    match input.fill_buf() {
        Ok([]) => {}
        Ok(_) => {
            return Err(invalid(format!(
                "bytes follow the last of the {count} records the batch header claims"
            )))
        }
        Err(e) => return Err(stream_error(e, limit)),
    }
    if total > limit {
        return Err(over_limit(limit));
    }
    Ok(total)
}

/// How a walk checks offset deltas: consecutive from 0, or (`last`: a compacted batch)
/// rising up to `last`.
struct Deltas {
    last: Option<i32>,
    previous: i64,
}

fn walk_slice(
    mut rest: &[u8],
    count: i32,
    deltas: &mut Deltas,
    visit: &mut impl FnMut(RecordRef<'_>),
) -> Result<usize, BatchError> {
    let total = rest.len();
    for index in 0..count {
        if rest.is_empty() {
            return Err(too_few(index, count));
        }
        let length = varint(&mut rest).map_err(|e| at(index, e))?;
        let length = record_length(length, rest.len())?;
        if length > rest.len() {
            return Err(BatchError::Invalid(format!(
                "record {index} says it has {length} bytes; {} remain in the batch",
                rest.len()
            )));
        }
        let (record, tail) = rest.split_at(length);
        visit(parse_record(record, index, deltas)?);
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(invalid(format!(
            "{} bytes follow the last of the {count} records the batch header claims",
            rest.len()
        )));
    }
    Ok(total)
}

fn record_length(length: i64, room: usize) -> Result<usize, BatchError> {
    if length < (MIN_RECORD_BYTES - 1) as i64 {
        return Err(invalid(format!("record length {length}")));
    }
    let length = length as usize;
    if length > room {
        return Err(invalid(format!(
            "a record of {length} bytes does not fit in the {room} bytes left"
        )));
    }
    Ok(length)
}

/// Parses one record's body (after its length prefix); every byte must be used.
fn parse_record<'a>(
    mut b: &'a [u8],
    index: i32,
    deltas: &mut Deltas,
) -> Result<RecordRef<'a>, BatchError> {
    let raw = b;
    let e = |m: String| at(index, m);
    let Some((_attributes, rest)) = b.split_first() else {
        return Err(e("empty record".into()));
    };
    b = rest;
    let timestamp_delta = varint(&mut b).map_err(e)?;
    let offset_delta = varint(&mut b).map_err(e)?;
    match deltas.last {
        None if offset_delta != index as i64 => {
            return Err(invalid(format!(
                "record {index} has offset delta {offset_delta}; deltas must be consecutive from 0"
            )));
        }
        Some(last) if offset_delta <= deltas.previous || offset_delta > i64::from(last) => {
            return Err(invalid(format!(
                "record {index} of a compacted batch has offset delta {offset_delta}, after {} \
                 and up to the batch's last {last}",
                deltas.previous
            )));
        }
        _ => {}
    }
    deltas.previous = offset_delta;
    let index = offset_delta as i32;
    let key = bytes_field(&mut b, "key").map_err(e)?;
    let value = bytes_field(&mut b, "value").map_err(e)?;
    let headers = varint(&mut b).map_err(e)?;
    if headers < 0 {
        return Err(e(format!("negative header count {headers}")));
    }
    // Each header takes at least two bytes: the counts below can never outrun the record.
    for h in 0..headers {
        match bytes_field(&mut b, "header key").map_err(e)? {
            Some(_) => {}
            None => return Err(e(format!("header {h} has a null key"))),
        }
        bytes_field(&mut b, "header value").map_err(e)?;
    }
    if !b.is_empty() {
        return Err(e(format!(
            "{} bytes after the record's fields (its length prefix disagrees)",
            b.len()
        )));
    }
    Ok(RecordRef {
        index,
        timestamp_delta,
        key,
        value,
        raw,
    })
}

fn bytes_field<'a>(b: &mut &'a [u8], what: &str) -> Result<Option<&'a [u8]>, String> {
    let len = varint(b)?;
    if len < -1 {
        return Err(format!("{what} length {len}"));
    }
    if len == -1 {
        return Ok(None);
    }
    let len = len as usize;
    if len > b.len() {
        return Err(format!(
            "{what} of {len} bytes, {} left in the record",
            b.len()
        ));
    }
    let (field, rest) = b.split_at(len);
    *b = rest;
    Ok(Some(field))
}

/// A zigzag varint of at most 10 bytes (Kafka's varint and varlong).
fn varint(b: &mut &[u8]) -> Result<i64, String> {
    let mut raw = 0u64;
    for i in 0..10 {
        let Some((&byte, rest)) = b.split_first() else {
            return Err("truncated varint".into());
        };
        *b = rest;
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    Err("varint longer than 10 bytes".into())
}

/// A varint from a stream: `None` at a clean end of input, else the value and its width.
fn read_varint_stream(r: &mut impl BufRead) -> io::Result<Option<(i64, usize)>> {
    let mut raw = 0u64;
    for i in 0..10 {
        let mut byte = [0u8; 1];
        if r.read(&mut byte)? == 0 {
            if i == 0 {
                return Ok(None);
            }
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "truncated varint",
            ));
        }
        raw |= u64::from(byte[0] & 0x7f) << (7 * i);
        if byte[0] & 0x80 == 0 {
            return Ok(Some((((raw >> 1) as i64) ^ -((raw & 1) as i64), i + 1)));
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "varint longer than 10 bytes",
    ))
}

fn invalid(m: String) -> BatchError {
    BatchError::Invalid(m)
}

fn at(index: i32, m: String) -> BatchError {
    BatchError::Invalid(format!("record {index}: {m}"))
}

fn too_few(index: i32, count: i32) -> BatchError {
    invalid(format!(
        "the batch header claims {count} records; the batch holds {index}"
    ))
}

fn over_limit(limit: usize) -> BatchError {
    invalid(format!("the batch decompresses to more than {limit} bytes"))
}

fn stream_error(e: io::Error, limit: usize) -> BatchError {
    if e.kind() == io::ErrorKind::OutOfMemory {
        return over_limit(limit);
    }
    invalid(format!("the compressed payload does not decompress: {e}"))
}

/// Kafka's Snappy payloads: the xerial framing (a 16-byte magic header, then blocks each
/// prefixed with a big-endian u32 length), or one raw Snappy block. Decompresses one block at a
/// time; a block claiming more than the limit is refused before anything is allocated for it.
struct Snappy<'a> {
    input: &'a [u8],
    raw: bool,
    block: Vec<u8>,
    at: usize,
    limit: usize,
    produced: usize,
}

const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER: usize = 16;

impl<'a> Snappy<'a> {
    fn new(input: &'a [u8], limit: usize) -> Self {
        let framed = input.len() >= XERIAL_HEADER && input[..8] == XERIAL_MAGIC[..];
        Snappy {
            input: if framed {
                &input[XERIAL_HEADER..]
            } else {
                input
            },
            raw: !framed,
            block: Vec::new(),
            at: 0,
            limit,
            produced: 0,
        }
    }

    /// Decompresses the next block into `self.block`; false at the end of input.
    fn next_block(&mut self) -> io::Result<bool> {
        if self.input.is_empty() {
            return Ok(false);
        }
        let compressed = if self.raw {
            std::mem::take(&mut self.input)
        } else {
            if self.input.len() < 4 {
                return Err(bad_data("truncated snappy block length"));
            }
            let len = u32::from_be_bytes(self.input[..4].try_into().expect("4 bytes")) as usize;
            let rest = &self.input[4..];
            if len > rest.len() {
                return Err(bad_data("truncated snappy block"));
            }
            self.input = &rest[len..];
            &rest[..len]
        };
        let n = snap::raw::decompress_len(compressed).map_err(|e| bad_data(&e.to_string()))?;
        if self.produced.saturating_add(n) > self.limit {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                "snappy output over the limit",
            ));
        }
        self.block.resize(n, 0);
        let got = snap::raw::Decoder::new()
            .decompress(compressed, &mut self.block)
            .map_err(|e| bad_data(&e.to_string()))?;
        self.block.truncate(got);
        self.produced += got;
        self.at = 0;
        Ok(true)
    }
}

fn bad_data(m: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, m.to_string())
}

impl Read for Snappy<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.at == self.block.len() {
            if !self.next_block()? {
                return Ok(0);
            }
        }
        let n = out.len().min(self.block.len() - self.at);
        out[..n].copy_from_slice(&self.block[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{self, tests::encode};
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::records::Compression;
    use proptest::prelude::*;

    const CODECS: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    fn one(bytes: &Bytes) -> Batch {
        let mut batches = batch::split(bytes).expect("a valid batch");
        assert_eq!(batches.len(), 1);
        batches.remove(0)
    }

    /// Rewrites the batch's record count (and CRC), as a hostile client could.
    fn with_count(b: &Bytes, count: i32) -> Bytes {
        let mut m = BytesMut::from(&b[..]);
        m[57..61].copy_from_slice(&count.to_be_bytes());
        m[23..27].copy_from_slice(&(count - 1).to_be_bytes());
        let crc = crc32c::crc32c(&m[21..]);
        m[17..21].copy_from_slice(&crc.to_be_bytes());
        m.freeze()
    }

    #[test]
    fn real_batches_walk_with_every_codec() {
        for codec in CODECS {
            let b = one(&encode(50, codec, 7, 0));
            let mut seen = Vec::new();
            walk(&b, Limits::default(), |r| {
                seen.push((r.index, r.key.map(<[u8]>::to_vec), r.value.map(<[u8]>::len)))
            })
            .unwrap_or_else(|e| panic!("{codec:?}: {e}"));
            assert_eq!(seen.len(), 50, "{codec:?}");
            for (i, (index, key, value)) in seen.into_iter().enumerate() {
                assert_eq!(index, i as i32);
                assert_eq!(key, Some(format!("k{i}").into_bytes()));
                assert_eq!(value, Some(100));
            }
        }
    }

    #[test]
    fn a_record_count_bomb_is_refused_without_allocating() {
        for codec in CODECS {
            let b = with_count(&encode(1, codec, 7, 0), i32::MAX);
            let b = one(&b);
            let err = walk(&b, Limits::default(), |_| {}).expect_err("a count bomb");
            assert!(
                err.to_string().contains("claims 2147483647 records"),
                "{codec:?}: {err}"
            );
        }
    }

    #[test]
    fn fewer_claimed_records_than_present_is_refused() {
        for codec in CODECS {
            let b = one(&with_count(&encode(3, codec, 7, 0), 2));
            let err = walk(&b, Limits::default(), |_| {}).expect_err("extra records");
            assert!(
                err.to_string().contains("follow the last"),
                "{codec:?}: {err}"
            );
        }
    }

    #[test]
    fn non_consecutive_offset_deltas_are_refused() {
        // Uncompressed: the first record's offset delta is its fifth byte (a two-byte length,
        // attributes, timestamp delta 0).
        let b = encode(2, Compression::None, 7, 0);
        let mut m = BytesMut::from(&b[..]);
        assert_eq!(m[HEADER_LEN + 4], 0, "offset delta 0 as a zigzag varint");
        m[HEADER_LEN + 4] = 4; // zigzag 2
        let crc = crc32c::crc32c(&m[21..]);
        m[17..21].copy_from_slice(&crc.to_be_bytes());
        let b = one(&m.freeze());
        let err = walk(&b, Limits::default(), |_| {}).expect_err("delta 2 first");
        assert!(err.to_string().contains("offset delta 2"), "{err}");
    }

    #[test]
    fn decompression_is_bounded_while_streaming() {
        // 100 records of 100 bytes: 10 KiB and more once decompressed, refused at 4 KiB.
        for codec in &CODECS[1..] {
            let b = one(&encode(100, *codec, 7, 0));
            let err = walk(
                &b,
                Limits {
                    max_decompressed_bytes: 4 << 10,
                    compacted: false,
                },
                |_| {},
            )
            .expect_err("over the bound");
            assert!(
                err.to_string().contains("more than 4096 bytes")
                    || err.to_string().contains("does not fit"),
                "{codec:?}: {err}"
            );
        }
    }

    #[test]
    fn garbage_in_a_compressed_payload_is_an_error() {
        for codec in &CODECS[1..] {
            let b = encode(5, *codec, 7, 0);
            let mut m = BytesMut::from(&b[..]);
            for byte in m[HEADER_LEN + 4..].iter_mut() {
                *byte ^= 0x5a;
            }
            let crc = crc32c::crc32c(&m[21..]);
            m[17..21].copy_from_slice(&crc.to_be_bytes());
            let b = one(&m.freeze());
            assert!(walk(&b, Limits::default(), |_| {}).is_err(), "{codec:?}");
        }
    }

    proptest! {
        #[test]
        fn mutated_batches_never_panic(
            codec in 0usize..5,
            at in 0usize..400,
            byte in any::<u8>(),
            count in prop_oneof![Just(None), (0i32..100).prop_map(Some)],
        ) {
            let b = encode(4, CODECS[codec], 7, 0);
            let mut m = BytesMut::from(&b[..]);
            let at = HEADER_LEN + at % (m.len() - HEADER_LEN);
            m[at] = byte;
            let crc = crc32c::crc32c(&m[21..]);
            m[17..21].copy_from_slice(&crc.to_be_bytes());
            let mut b = m.freeze();
            if let Some(c) = count.filter(|c| *c > 0) {
                b = with_count(&b, c);
            }
            if let Ok(batches) = batch::split(&b) {
                for batch in &batches {
                    let _ = walk(batch, Limits { max_decompressed_bytes: 1 << 20, compacted: false }, |_| {});
                }
            }
        }
    }
}
