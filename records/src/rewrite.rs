//! Batches rewritten by the broker, record by record: recompressed for a topic's
//! `compression.type` ([`recompress`]) and compacted by the log cleaner ([`retain`]). Both read
//! the records through [`crate::records`] and lay the batch out again with [`crate::batch`]'s
//! header, so neither module needs the other.

use bytes::{Bytes, BytesMut};

use crate::batch::{Batch, BatchError, BatchHeader, Codec, CRC_START, HEADER_LEN, LOG_OVERHEAD};

/// The batch with its records compressed by `codec`, as Kafka's broker rewrites a batch for a
/// topic whose `compression.type` names a codec: the records' bytes, the header's fields
/// (producer id, epoch and sequence, timestamps, record count) and so every offset stay; the
/// codec bits, the batch length and the CRC change. A batch already in `codec` comes back
/// as it is. The records decompress within `limits` (this crate's own decoders, not the
/// vendored crate's); the work is CPU-bound, so async callers run it on a blocking thread.
pub fn recompress(
    batch: &Batch,
    codec: Codec,
    limits: crate::records::Limits,
) -> Result<Batch, BatchError> {
    use kafka_protocol::compression::{self as c, Compressor};
    let from = Codec::of_attributes(batch.header.attributes)?;
    if from == codec {
        return Ok(batch.clone());
    }
    let fail = |what: &str, e: anyhow::Error| BatchError::Invalid(format!("{what}: {e}"));
    let plain = crate::records::decompressed(batch, limits)?;
    let mut out = BytesMut::with_capacity(HEADER_LEN + plain.len() / 2);
    out.extend_from_slice(&batch.bytes[..HEADER_LEN]);
    let put = |b: &mut BytesMut| -> anyhow::Result<()> {
        b.extend_from_slice(&plain);
        Ok(())
    };
    match codec {
        Codec::None => out.extend_from_slice(&plain),
        Codec::Gzip => {
            c::Gzip::compress(&mut out, put).map_err(|e| fail("gzip compression failed", e))?
        }
        Codec::Snappy => {
            c::Snappy::compress(&mut out, put).map_err(|e| fail("snappy compression failed", e))?
        }
        Codec::Lz4 => {
            c::Lz4::compress(&mut out, put).map_err(|e| fail("lz4 compression failed", e))?
        }
        Codec::Zstd => {
            c::Zstd::compress(&mut out, put).map_err(|e| fail("zstd compression failed", e))?
        }
    }
    let attributes = (batch.header.attributes & !0x7) | codec as i16;
    Ok(Batch {
        header: BatchHeader {
            attributes,
            ..batch.header
        },
        bytes: reframe(out, attributes, None)?,
    })
}

/// `batch` with only the records `keep` answers true for, as Kafka's log cleaner rewrites a
/// batch of a compacted topic: the base offset, `last_offset_delta` (so the offsets the batch
/// spans), timestamps, producer fields and codec stay; the records left keep their offset
/// deltas, so their offsets do not change; the record count, length and CRC follow. A batch
/// left with no record stays as an empty batch spanning its offsets, so the stream has no gap.
/// `None` when every record is kept. The batch may already be compacted.
pub fn retain(
    batch: &Batch,
    limits: crate::records::Limits,
    mut keep: impl FnMut(&crate::records::RecordRef<'_>) -> bool,
) -> Result<Option<Bytes>, BatchError> {
    let codec = Codec::of_attributes(batch.header.attributes)?;
    let mut records = BytesMut::new();
    let (mut kept, mut seen) = (0i32, 0i32);
    crate::records::walk(
        batch,
        crate::records::Limits {
            compacted: true,
            ..limits
        },
        |r| {
            seen += 1;
            if keep(&r) {
                kept += 1;
                put_varint(&mut records, r.raw.len() as i64);
                records.extend_from_slice(r.raw);
            }
        },
    )?;
    if kept == seen {
        return Ok(None);
    }
    let mut out = BytesMut::with_capacity(HEADER_LEN + records.len());
    out.extend_from_slice(&batch.bytes[..HEADER_LEN]);
    out.extend_from_slice(&records);
    let attributes = batch.header.attributes & !0x7;
    let plain = Batch {
        header: BatchHeader {
            attributes,
            record_count: kept,
            ..batch.header
        },
        bytes: reframe(out, attributes, Some(kept))?,
    };
    if codec == Codec::None || kept == 0 {
        return Ok(Some(plain.bytes));
    }
    Ok(Some(recompress(&plain, codec, limits)?.bytes))
}

/// A rewritten batch's header made true to its new records section: the length, the
/// attributes (its codec), the record count when it changed, and the CRC over it all.
fn reframe(
    mut out: BytesMut,
    attributes: i16,
    record_count: Option<i32>,
) -> Result<Bytes, BatchError> {
    let length = i32::try_from(out.len() - LOG_OVERHEAD).map_err(|_| {
        BatchError::Invalid("the rewritten batch is larger than a batch may be".into())
    })?;
    out[8..12].copy_from_slice(&length.to_be_bytes());
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    if let Some(count) = record_count {
        out[57..61].copy_from_slice(&count.to_be_bytes());
    }
    let crc = crc32c::crc32c(&out[CRC_START..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(out.freeze())
}

/// Kafka's zigzag varint.
fn put_varint(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.extend_from_slice(&[(z as u8) | 0x80]);
        z >>= 7;
    }
    out.extend_from_slice(&[z as u8]);
}

#[cfg(test)]
mod retain_tests {
    use super::*;
    use crate::batch::{split, split_stored};
    use crate::records::{walk, Limits};

    fn batch_of(n: usize, compression: kafka_protocol::records::Compression) -> Bytes {
        use kafka_protocol::records::{
            Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
        };
        let records: Vec<Record> = (0..n)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: 7,
                producer_epoch: 0,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: i as i32,
                timestamp: 1_000 + i as i64,
                key: Some(Bytes::from(format!("k{}", i % 3))),
                value: (i != 4).then(|| Bytes::from(format!("v{i}"))),
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

    /// The records kept keep their offsets, keys and values; the batch still spans all its
    /// offsets, reads back as a stored batch (also compressed, and with no record left), and
    /// a second pass over it works.
    #[test]
    fn kept_records_keep_their_offsets_and_the_batch_its_span() {
        use kafka_protocol::records::Compression;
        for compression in [Compression::None, Compression::Zstd, Compression::Gzip] {
            let bytes = batch_of(6, compression);
            let b = &split(&bytes).expect("a batch")[0];
            let kept = retain(b, Limits::default(), |r| r.index % 2 == 1)
                .expect("rewritten")
                .expect("changed");
            let back = &split_stored(&kept).expect("a stored batch")[0];
            assert_eq!(back.header.offset_count(), 6, "{compression:?}");
            assert_eq!(back.header.record_count, 3);
            assert_eq!(back.header.attributes & 0x7, b.header.attributes & 0x7);
            assert!(split(&kept).is_err(), "not a batch a client may produce");
            let mut seen = Vec::new();
            walk(
                back,
                Limits {
                    compacted: true,
                    ..Limits::default()
                },
                |r| {
                    seen.push((
                        r.index,
                        r.key.map(<[u8]>::to_vec),
                        r.value.map(<[u8]>::to_vec),
                    ))
                },
            )
            .expect("walks");
            assert_eq!(
                seen,
                vec![
                    (1, Some(b"k1".to_vec()), Some(b"v1".to_vec())),
                    (3, Some(b"k0".to_vec()), Some(b"v3".to_vec())),
                    (5, Some(b"k2".to_vec()), Some(b"v5".to_vec())),
                ]
            );
            assert!(
                walk(back, Limits::default(), |_| {}).is_err(),
                "gaps need `compacted`"
            );
            // Again, down to nothing: an empty batch over the same offsets.
            let empty = retain(back, Limits::default(), |_| false)
                .expect("rewritten")
                .expect("changed");
            let e = &split_stored(&empty).expect("an empty stored batch")[0];
            assert_eq!((e.header.record_count, e.header.offset_count()), (0, 6));
            assert!(retain(back, Limits::default(), |_| true)
                .expect("read")
                .is_none());
        }
    }
}
