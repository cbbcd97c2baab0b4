//! Kafka record batches (magic 2) as they arrive in Produce requests: splitting a partition's
//! record set into batches and checking each header without decoding its records. Batches
//! are stored exactly as produced; only the base offset (and, for `LogAppendTime` topics, the
//! max timestamp and CRC) is rewritten.
//!
//! Layout of the fixed header (all big-endian):
//! base offset i64 @0, batch length i32 @8 (bytes after this field), partition leader epoch
//! i32 @12, magic i8 @16, CRC-32C u32 @17 (over everything from the attributes to the end),
//! attributes i16 @21, last offset delta i32 @23, base timestamp i64 @27, max timestamp i64
//! @35, producer id i64 @43, producer epoch i16 @51, base sequence i32 @53, record count i32
//! @57; the records follow @61.

use bytes::{Bytes, BytesMut};

/// Length of the fixed header.
pub const HEADER_LEN: usize = 61;
/// Bytes before the batch length field's count starts.
pub(crate) const LOG_OVERHEAD: usize = 12;
pub(crate) const CRC_START: usize = 21;

/// Why a record set was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("record batch is truncated: {0}")]
    Truncated(String),
    #[error("record batch has magic {0}; only magic 2 (Kafka 0.11+) is accepted")]
    UnsupportedMagic(i8),
    #[error("record batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Crc { stored: u32, computed: u32 },
    #[error("invalid record batch: {0}")]
    Invalid(String),
}

/// The header fields of one batch that the broker acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
    pub attributes: i16,
}

impl BatchHeader {
    /// Offsets the batch takes: `last_offset_delta + 1`.
    pub fn offset_count(&self) -> u32 {
        self.last_offset_delta as u32 + 1
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & 0x10 != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }

    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }

    /// Last sequence number of the batch, wrapping at `i32::MAX` as Kafka does.
    pub fn last_sequence(&self) -> i32 {
        let last = self.base_sequence as i64 + self.last_offset_delta as i64;
        if last > i32::MAX as i64 {
            (last - i32::MAX as i64 - 1) as i32
        } else {
            last as i32
        }
    }
}

/// One batch: its header and its bytes (base offset still as produced).
#[derive(Debug, Clone)]
pub struct Batch {
    pub header: BatchHeader,
    pub bytes: Bytes,
}

impl Batch {
    /// The base offset the batch carries (a stored batch's is its offset in the stream).
    pub fn base_offset(&self) -> i64 {
        i64_at(&self.bytes, 0)
    }
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn i64_at(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Parses the header of one complete batch and checks its CRC.
pub fn parse_header(b: &[u8]) -> Result<BatchHeader, BatchError> {
    if b.len() < HEADER_LEN {
        return Err(BatchError::Truncated(format!(
            "{} bytes, the header alone has {HEADER_LEN}",
            b.len()
        )));
    }
    let magic = b[16] as i8;
    if magic != 2 {
        return Err(BatchError::UnsupportedMagic(magic));
    }
    let stored = u32::from_be_bytes(b[17..21].try_into().expect("4 bytes"));
    let computed = crc32c::crc32c(&b[CRC_START..]);
    if stored != computed {
        return Err(BatchError::Crc { stored, computed });
    }
    let header = stored_header(b).expect("the length was checked");
    if header.record_count <= 0 {
        return Err(BatchError::Invalid(format!(
            "record count {} (a batch holds at least one record)",
            header.record_count
        )));
    }
    if header.last_offset_delta != header.record_count - 1 {
        return Err(BatchError::Invalid(format!(
            "last offset delta {} does not match {} records (Kafka: inconsistent batch offset range and record count)",
            header.last_offset_delta, header.record_count
        )));
    }
    if header.attributes & 0x7 > 4 {
        return Err(BatchError::Invalid(format!(
            "unknown compression codec {}",
            header.attributes & 0x7
        )));
    }
    // A transaction marker (a control batch) carries its producer but no sequence.
    if header.has_producer_id() && header.base_sequence < 0 && !header.is_control() {
        return Err(BatchError::Invalid(
            "an idempotent batch needs a base sequence".into(),
        ));
    }
    Ok(header)
}

/// Splits a partition's record set into batches, checking each.
pub fn split(records: &Bytes) -> Result<Vec<Batch>, BatchError> {
    split_with(records, parse_header)
}

/// [`split`] of stored batches, which compaction ([`retain`]) may have thinned: a batch may
/// hold fewer records than its offsets, or none; its header and CRC are checked as produced
/// ones are.
pub fn split_stored(records: &Bytes) -> Result<Vec<Batch>, BatchError> {
    split_with(records, |b| {
        let header = stored_header(b).ok_or_else(|| BatchError::Truncated("a header".into()))?;
        if header.record_count == header.last_offset_delta + 1 {
            return parse_header(b);
        }
        if header.record_count < 0 || header.record_count > header.last_offset_delta + 1 {
            return Err(BatchError::Invalid(format!(
                "record count {} for {} offsets",
                header.record_count,
                header.offset_count()
            )));
        }
        let stored = u32::from_be_bytes(b[17..21].try_into().expect("4 bytes"));
        let computed = crc32c::crc32c(&b[CRC_START..]);
        if stored != computed {
            return Err(BatchError::Crc { stored, computed });
        }
        Ok(header)
    })
}

fn split_with(
    records: &Bytes,
    parse: impl Fn(&[u8]) -> Result<BatchHeader, BatchError>,
) -> Result<Vec<Batch>, BatchError> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < records.len() {
        let rest = &records[at..];
        if rest.len() < LOG_OVERHEAD {
            return Err(BatchError::Truncated(format!(
                "{} trailing bytes after {} batches",
                rest.len(),
                out.len()
            )));
        }
        let length = i32_at(rest, 8);
        if length < (HEADER_LEN - LOG_OVERHEAD) as i32 {
            return Err(BatchError::Invalid(format!("batch length {length}")));
        }
        let total = LOG_OVERHEAD + length as usize;
        if total > rest.len() {
            return Err(BatchError::Truncated(format!(
                "batch length says {total} bytes, {} remain",
                rest.len()
            )));
        }
        let header = parse(&rest[..total])?;
        out.push(Batch {
            header,
            bytes: records.slice(at..at + total),
        });
        at += total;
    }
    if out.is_empty() {
        return Err(BatchError::Invalid("empty record set".into()));
    }
    Ok(out)
}

/// Stamps a batch with the broker's time (`LogAppendTime`): sets the timestamp-type bit and
/// the max timestamp, then recomputes the CRC.
pub fn set_log_append_time(batch: &Bytes, now_ms: i64) -> Bytes {
    let mut b = BytesMut::from(&batch[..]);
    let attributes = i16_at(&b, 21) | 0x08;
    b[21..23].copy_from_slice(&attributes.to_be_bytes());
    b[35..43].copy_from_slice(&now_ms.to_be_bytes());
    let crc = crc32c::crc32c(&b[CRC_START..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

/// The compression codecs of a batch's attributes (bits 0–2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    None = 0,
    Gzip = 1,
    Snappy = 2,
    Lz4 = 3,
    Zstd = 4,
}

impl Codec {
    /// The codec a topic's `compression.type` names: `None` for `producer` (batches are
    /// stored as produced) or a name Kafka does not know.
    pub fn of_topic_config(value: &str) -> Option<Codec> {
        Some(match value {
            "uncompressed" => Codec::None,
            "gzip" => Codec::Gzip,
            "snappy" => Codec::Snappy,
            "lz4" => Codec::Lz4,
            "zstd" => Codec::Zstd,
            _ => return None,
        })
    }

    pub(crate) fn of_attributes(attributes: i16) -> Result<Codec, BatchError> {
        Ok(match attributes & 0x7 {
            0 => Codec::None,
            1 => Codec::Gzip,
            2 => Codec::Snappy,
            3 => Codec::Lz4,
            4 => Codec::Zstd,
            other => {
                return Err(BatchError::Invalid(format!(
                    "unknown compression codec {other}"
                )))
            }
        })
    }
}

/// Header fields of a stored batch (which passed [`parse_header`] when it was produced).
pub fn stored_header(b: &[u8]) -> Option<BatchHeader> {
    if b.len() < HEADER_LEN {
        return None;
    }
    Some(BatchHeader {
        attributes: i16_at(b, 21),
        last_offset_delta: i32_at(b, 23),
        base_timestamp: i64_at(b, 27),
        max_timestamp: i64_at(b, 35),
        producer_id: i64_at(b, 43),
        producer_epoch: i16_at(b, 51),
        base_sequence: i32_at(b, 53),
        record_count: i32_at(b, 57),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    use proptest::prelude::*;

    /// A real batch from the `kafka-protocol` encoder.
    pub(crate) fn encode(
        records: usize,
        compression: Compression,
        producer: i64,
        seq: i32,
    ) -> Bytes {
        let records: Vec<Record> = (0..records)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: producer,
                producer_epoch: 0,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: if producer >= 0 { seq + i as i32 } else { -1 },
                timestamp: 1_700_000_000_000 + i as i64,
                key: Some(Bytes::from(format!("k{i}"))),
                value: Some(Bytes::from(vec![b'v'; 100])),
                headers: Default::default(),
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
        )
        .expect("encode");
        buf.freeze()
    }

    /// Every codec to every codec: the result parses (CRC, length), walks, decodes with
    /// `kafka-protocol` to the same records, and keeps every header field but the codec.
    #[test]
    fn a_recompressed_batch_holds_the_same_records_in_the_new_codec() {
        use kafka_protocol::records::RecordBatchDecoder;
        let codecs = [
            (Compression::None, Codec::None),
            (Compression::Gzip, Codec::Gzip),
            (Compression::Snappy, Codec::Snappy),
            (Compression::Lz4, Codec::Lz4),
            (Compression::Zstd, Codec::Zstd),
        ];
        for (from, _) in codecs {
            let original = split(&encode(40, from, 7, 10)).expect("parses").remove(0);
            let want = RecordBatchDecoder::decode(&mut original.bytes.clone()).expect("decodes");
            for (_, to) in codecs {
                let b =
                    crate::rewrite::recompress(&original, to, crate::records::Limits::default())
                        .expect("recompresses");
                let again = split(&b.bytes).expect("the result parses").remove(0);
                assert_eq!(again.header, b.header, "{from:?} -> {to:?}");
                assert_eq!(again.header.attributes & 0x7, to as i16);
                assert_eq!(
                    BatchHeader {
                        attributes: original.header.attributes,
                        ..again.header
                    },
                    original.header,
                    "{from:?} -> {to:?}: only the codec changes"
                );
                let mut walked = 0;
                crate::records::walk(&again, Default::default(), |_| walked += 1).expect("walks");
                assert_eq!(walked, 40);
                let got = RecordBatchDecoder::decode(&mut again.bytes.clone()).expect("decodes");
                assert_eq!(got.records, want.records, "{from:?} -> {to:?}");
            }
        }
        assert_eq!(Codec::of_topic_config("producer"), None);
        assert_eq!(Codec::of_topic_config("uncompressed"), Some(Codec::None));
    }

    #[test]
    fn real_batches_parse_with_every_codec() {
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let b = encode(5, codec, 7, 10);
            let batches = split(&b).expect("parses");
            assert_eq!(batches.len(), 1);
            let h = batches[0].header;
            assert_eq!((h.record_count, h.offset_count()), (5, 5), "{codec:?}");
            assert_eq!(
                (h.producer_id, h.base_sequence, h.last_sequence()),
                (7, 10, 14)
            );
            assert_eq!(h.max_timestamp, 1_700_000_000_004);
        }
    }

    #[test]
    fn damage_is_detected() {
        let b = encode(3, Compression::None, -1, -1);
        let mut bad = BytesMut::from(&b[..]);
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(matches!(split(&bad.freeze()), Err(BatchError::Crc { .. })));
        assert!(matches!(
            split(&b.slice(..b.len() - 1)),
            Err(BatchError::Truncated(_))
        ));
        // A record set may hold several batches.
        let one = split(&b).expect("valid").len();
        let mut twice = BytesMut::from(&b[..]);
        twice.extend_from_slice(&b);
        assert_eq!(split(&twice.freeze()).expect("valid").len(), 2 * one);
    }

    #[test]
    fn log_append_time_keeps_the_crc_valid() {
        let b = encode(2, Compression::None, -1, -1);
        let stamped = set_log_append_time(&b, 42);
        let h = parse_header(&stamped).expect("valid after stamping");
        assert_eq!(h.max_timestamp, 42);
        assert_ne!(h.attributes & 0x08, 0);
    }

    #[test]
    /// The vendored `kafka-protocol` patch (`vendor/kafka-protocol/INLET-PATCH.md`) bounds
    /// its own decoders' output: this test is what fails when the `[patch]` is dropped for an
    /// upstream release without such a bound. Nothing of Inlet's reads the patch's bound.
    fn decompression_is_bounded() {
        use kafka_protocol::compression::MAX_DECOMPRESSED_BYTES;
        use kafka_protocol::records::RecordBatchDecoder;
        // A 2 MiB record of zeros compresses to a few KiB with every codec; with a 1 MiB
        // bound, decoding it is refused instead of allocating what the batch claims.
        MAX_DECOMPRESSED_BYTES.store(1 << 20, std::sync::atomic::Ordering::Relaxed);
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let record = Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: 0,
                sequence: -1,
                timestamp: 0,
                key: None,
                value: Some(Bytes::from(vec![0u8; 2 << 20])),
                headers: Default::default(),
            };
            let mut buf = BytesMut::new();
            RecordBatchEncoder::encode(
                &mut buf,
                [&record],
                &RecordEncodeOptions {
                    version: 2,
                    compression: codec,
                },
            )
            .expect("encode");
            assert!(
                buf.len() < 1 << 20,
                "{codec:?} compressed to {} bytes",
                buf.len()
            );
            let err = RecordBatchDecoder::decode(&mut buf.freeze()).expect_err("over the bound");
            assert!(
                format!("{err:#}").contains("decompress"),
                "{codec:?}: {err:#}"
            );
        }
        MAX_DECOMPRESSED_BYTES.store(64 << 20, std::sync::atomic::Ordering::Relaxed);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = split(&Bytes::from(data));
        }
    }
}

/// What a transaction's control record says: the transaction's records before it (of its
/// producer, in this partition) are committed or aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Abort,
    Commit,
}

/// A transaction marker as Kafka's broker writes it: a control, transactional batch of one
/// uncompressed record, for `producer_id` at `producer_epoch`, with no sequence. The record's
/// key is (version 0, type: 0 abort, 1 commit); its value (version 0, `coordinator_epoch`).
/// The base offset is 0 and the leader epoch -1: the stream store stamps both.
pub fn control_batch(
    producer_id: i64,
    producer_epoch: i16,
    marker: Marker,
    coordinator_epoch: i32,
    timestamp_ms: i64,
) -> Bytes {
    let kind: i16 = match marker {
        Marker::Abort => 0,
        Marker::Commit => 1,
    };
    // The record: length 16 (zigzag 32), attributes, timestamp and offset deltas 0, a 4-byte
    // key (zigzag 8), a 6-byte value (zigzag 12), no headers.
    let mut record = vec![0x20, 0, 0, 0, 0x08];
    record.extend_from_slice(&0i16.to_be_bytes());
    record.extend_from_slice(&kind.to_be_bytes());
    record.push(0x0c);
    record.extend_from_slice(&0i16.to_be_bytes());
    record.extend_from_slice(&coordinator_epoch.to_be_bytes());
    record.push(0);
    let mut out = BytesMut::with_capacity(HEADER_LEN + record.len());
    out.extend_from_slice(&0i64.to_be_bytes());
    out.extend_from_slice(&((HEADER_LEN - LOG_OVERHEAD + record.len()) as i32).to_be_bytes());
    out.extend_from_slice(&(-1i32).to_be_bytes());
    out.extend_from_slice(&[2]);
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(&0x30i16.to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    out.extend_from_slice(&timestamp_ms.to_be_bytes());
    out.extend_from_slice(&timestamp_ms.to_be_bytes());
    out.extend_from_slice(&producer_id.to_be_bytes());
    out.extend_from_slice(&producer_epoch.to_be_bytes());
    out.extend_from_slice(&(-1i32).to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&record);
    let crc = crc32c::crc32c(&out[CRC_START..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out.freeze()
}

#[cfg(test)]
mod marker_tests {
    use super::*;

    /// A marker parses as a valid batch (header, CRC, its one record) and reads back as the
    /// marker it was built as.
    #[test]
    fn control_batches_are_valid_and_read_back() {
        for m in [Marker::Abort, Marker::Commit] {
            let bytes = control_batch(42, 3, m, 0, 1_700_000_000_000);
            let batches = split(&bytes).expect("a valid batch");
            assert_eq!(batches.len(), 1);
            let h = batches[0].header;
            assert!(h.is_control() && h.is_transactional());
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.record_count),
                (42, 3, 1)
            );
            assert_eq!(crate::records::marker(&batches[0]), Some(m));
            assert_eq!(crate::records::stored_marker(&bytes), Some(m));
        }
    }
}
