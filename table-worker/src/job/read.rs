//! Reading a job's range out of the stream store: the Kafka record batches from the job's
//! first offset, walked one record at a time, into [`Rec`]s.
//!
//! Invariants:
//! - Records come out in offset order, only those in `from..until`; the offset returned is one
//!   past the last record taken (or where the read stopped), never before `from`.
//! - The read stops once the records hold about the job's `max_input_bytes` in memory (their
//!   decoded keys, values and structs, [`record_cost`]), also inside a batch, but never inside
//!   a batch before they hold [`MIN_SPLIT_BYTES`]. A compressed batch is never decoded whole.
//! - Records deleted by retention before the job reached them are skipped, with a warning.
//! - Control batches and the batches of aborted transactions (`aborted`) are skipped; their
//!   offsets still count as read.

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use inlet_records::batch::{self as records_batch, BatchError};
use inlet_records::records::{walk, Limits};
use inlet_storage::StreamStore;

use super::JobSpec;
use crate::error::{Error, Result};
use crate::txn::AbortedTxn;

/// One Kafka record of the range.
pub(super) struct Rec {
    pub(super) offset: i64,
    pub(super) timestamp_ms: i64,
    pub(super) key: Option<Bytes>,
    pub(super) value: Option<Bytes>,
}

/// Reads and decodes the range's records. Returns them, the next offset and the bytes read.
/// The records of the job's range: (records, the offset after them, stored bytes read, bytes
/// the records hold in memory).
pub(super) async fn read_records(
    store: &StreamStore,
    job: &JobSpec,
    aborted: &[AbortedTxn],
) -> Result<(Vec<Rec>, u64, usize, usize)> {
    let end = store.end_offset(job.stream).map_err(Error::Storage)?;
    let until = job.until.map_or(end, |u| u.min(end));
    let start = store.start_offset(job.stream).map_err(Error::Storage)?;
    let mut records = Vec::new();
    let mut offset = job.from;
    if offset < start {
        // Retention removed records before the table got them: they cannot be converted any
        // more. Go on from the first one left rather than stall the table.
        tracing::warn!(
            partition = job.partition,
            from = job.from,
            start,
            "records were deleted by retention before they reached the table"
        );
        offset = start;
    }
    // `bytes` counts stored bytes (what the job reports as its input); `held` what the decoded
    // records hold in memory — decompressed keys and values plus each record's own struct — and
    // it is what stops the read at `max_input_bytes`, the room the job reserved, also in the
    // middle of a batch (the next job goes on from there). Stored batches are walked one record
    // at a time (`inlet_records`), so a zstd batch of millions of tiny records never exists as
    // a whole in memory: counting stored bytes, or decoding whole batches, let one job hold
    // many times its reservation.
    let mut bytes = 0usize;
    let mut held = 0usize;
    'read: while offset < until && held < job.max_input_bytes {
        let batches = store
            .read(job.stream, offset, (job.max_input_bytes - held).max(1))
            .await
            .map_err(Error::Storage)?;
        if batches.is_empty() {
            break;
        }
        for b in batches {
            if b.base_offset >= until {
                break 'read;
            }
            bytes += b.payload.len();
            let from = job.from.max(start).max(offset);
            // A stored payload is normally one Kafka batch; read every batch it holds.
            let stop = read_payload(
                (&b.payload, aborted),
                from,
                until,
                job.max_input_bytes,
                &mut held,
                &mut records,
            )
            .map_err(|e| {
                Error::Decode(format!(
                    "stored record batch at offset {} does not read: {e}",
                    b.base_offset
                ))
            })?;
            if let Some(at) = stop {
                offset = at;
                break 'read;
            }
            offset = b.end_offset().min(until);
            if held >= job.max_input_bytes {
                break 'read;
            }
        }
    }
    Ok((records, offset.max(job.from), bytes, held))
}

/// A record read out of a compressed batch: offset, timestamp, and where its key and value are
/// in the batch's buffer.
type Taken = (i64, i64, Option<Range<usize>>, Option<Range<usize>>);

/// What one record costs a job in memory: its struct, key and value.
fn record_cost(key: Option<&[u8]>, value: Option<&[u8]>) -> usize {
    std::mem::size_of::<Rec>() + key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len)
}

/// A job stops inside a batch only once its records hold this much (and its `max_input_bytes`):
/// small jobs take whole batches, and no batch, however many records it packs, makes a job hold
/// more than this plus one record beyond its budget.
const MIN_SPLIT_BYTES: usize = 4 << 20;

/// Appends the records of one stored payload (one or more batches) with offsets in
/// `from..until` to `records`, counting their cost in `held`. Returns the offset it stopped at
/// when `held` reached `max_held` (and [`MIN_SPLIT_BYTES`]) before the payload's end.
fn read_payload(
    (payload, aborted): (&Bytes, &[AbortedTxn]),
    from: u64,
    until: u64,
    max_held: usize,
    held: &mut usize,
    records: &mut Vec<Rec>,
) -> std::result::Result<Option<u64>, BatchError> {
    let split_at = max_held.max(MIN_SPLIT_BYTES);
    for batch in records_batch::split(payload)? {
        let header = batch.header;
        let base = i64::from_be_bytes(batch.bytes[..8].try_into().expect("a batch header"));
        // Markers, and the records of aborted transactions, are not the table's.
        if header.is_control()
            || (header.is_transactional()
                && AbortedTxn::covers(aborted, header.producer_id, base as u64))
        {
            continue;
        }
        // Kafka's LogAppendTime: every record carries the batch's max timestamp, the broker's.
        let log_append = header.attributes & 0x08 != 0;
        let timestamp = |delta: i64| {
            if log_append {
                header.max_timestamp
            } else {
                header.base_timestamp + delta
            }
        };
        let mut stop = None;
        if header.attributes & 0x7 == 0 {
            // Uncompressed: keys and values are slices of the stored payload, not copies.
            walk(&batch, Limits::default(), |r| {
                let o = base + r.index as i64;
                if stop.is_some() || (o as u64) < from || o as u64 >= until {
                    return;
                }
                if *held >= split_at {
                    stop = Some(o as u64);
                    return;
                }
                *held += record_cost(r.key, r.value);
                records.push(Rec {
                    offset: o,
                    timestamp_ms: timestamp(r.timestamp_delta),
                    key: r.key.map(|k| batch.bytes.slice_ref(k)),
                    value: r.value.map(|v| batch.bytes.slice_ref(v)),
                });
            })?;
        } else {
            // Compressed: the records' keys and values are copied into one buffer as they
            // stream out of the decompressor, and sliced from it afterwards.
            let mut arena = BytesMut::new();
            let mut taken: Vec<Taken> = Vec::new();
            walk(&batch, Limits::default(), |r| {
                let o = base + r.index as i64;
                if stop.is_some() || (o as u64) < from || o as u64 >= until {
                    return;
                }
                if *held >= split_at {
                    stop = Some(o as u64);
                    return;
                }
                *held += record_cost(r.key, r.value);
                let mut put = |b: Option<&[u8]>| {
                    b.map(|b| {
                        arena.extend_from_slice(b);
                        arena.len() - b.len()..arena.len()
                    })
                };
                let key = put(r.key);
                let value = put(r.value);
                taken.push((o, timestamp(r.timestamp_delta), key, value));
            })?;
            let arena = arena.freeze();
            records.extend(
                taken
                    .into_iter()
                    .map(|(offset, timestamp_ms, key, value)| Rec {
                        offset,
                        timestamp_ms,
                        key: key.map(|k| arena.slice(k)),
                        value: value.map(|v| arena.slice(v)),
                    }),
            );
        }
        if stop.is_some() {
            return Ok(stop);
        }
    }
    Ok(None)
}
