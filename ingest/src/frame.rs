//! Response frames built without copying record batches.
//!
//! A Fetch answer is mostly record batches that the stream store already holds as shared
//! [`Bytes`] (log cache entries, object blocks). Encoding the response into one buffer would
//! copy every batch once more. [`FrameWriter`] is the buffer the protocol encoder writes into:
//! when the encoder puts a slice that *is* one of the payloads it was told about (same address,
//! same length), the writer keeps a reference to that payload instead of copying it. The
//! result, a [`Frame`], is a short list of buffers that the connection writes with vectored
//! writes.
//!
//! Invariants:
//! - a frame's bytes are exactly what encoding into one contiguous buffer gives (tested
//!   against it);
//! - only payloads of at least [`SHARE_MIN_BYTES`] are kept by reference, so the small fields
//!   between them are coalesced and a frame has at most two parts per shared payload, plus one;
//! - a writer asked to seek back into a part it has already closed (a length gap some encoders
//!   fill in afterwards; no Fetch version has one) joins its parts into one buffer first, so
//!   the bytes stay right at the cost of a copy.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::ops::Range;

use bytes::buf::UninitSlice;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::buf::ByteBufMut;

/// Payloads smaller than this are copied into the frame: a reference costs a syscall slice.
pub(crate) const SHARE_MIN_BYTES: usize = 4096;

/// An encoded response frame: its parts in order, written back to back.
#[derive(Debug, Default)]
pub struct Frame {
    parts: VecDeque<Bytes>,
    len: usize,
}

impl Frame {
    /// The frame's length in bytes (length prefix included).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many buffers the frame is made of.
    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    /// The frame as one buffer (a copy unless it has a single part).
    pub fn to_bytes(&self) -> Bytes {
        match self.parts.len() {
            0 => Bytes::new(),
            1 => self.parts[0].clone(),
            _ => {
                let mut out = BytesMut::with_capacity(self.len);
                for p in &self.parts {
                    out.extend_from_slice(p);
                }
                out.freeze()
            }
        }
    }

    /// Whether one of the frame's parts is `payload` itself (shared, not copied).
    pub fn shares(&self, payload: &Bytes) -> bool {
        self.parts
            .iter()
            .any(|p| p.as_ptr() == payload.as_ptr() && p.len() == payload.len())
    }
}

impl From<Bytes> for Frame {
    fn from(b: Bytes) -> Frame {
        let len = b.len();
        Frame {
            parts: if b.is_empty() {
                VecDeque::new()
            } else {
                VecDeque::from([b])
            },
            len,
        }
    }
}

impl Buf for Frame {
    fn remaining(&self) -> usize {
        self.len
    }

    fn chunk(&self) -> &[u8] {
        self.parts.front().map(|p| &p[..]).unwrap_or(&[])
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, part) in dst.iter_mut().zip(&self.parts) {
            *slot = IoSlice::new(part);
            n += 1;
        }
        n
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(cnt <= self.len, "advance past the end of the frame");
        self.len -= cnt;
        while cnt > 0 {
            let front = self.parts.front_mut().expect("len counts the parts");
            if cnt < front.len() {
                front.advance(cnt);
                return;
            }
            cnt -= front.len();
            self.parts.pop_front();
        }
    }
}

/// The buffer a response is encoded into (see the module doc).
pub(crate) struct FrameWriter {
    /// Parts already closed, and their total length.
    done: Vec<Bytes>,
    done_len: usize,
    /// The part being written.
    current: BytesMut,
    /// Payloads to keep by reference when the encoder puts exactly them.
    shared: Vec<Bytes>,
}

impl FrameWriter {
    /// A writer that keeps `shared` payloads (those of at least [`SHARE_MIN_BYTES`]) by
    /// reference.
    pub(crate) fn new(shared: impl IntoIterator<Item = Bytes>) -> FrameWriter {
        FrameWriter {
            done: Vec::new(),
            done_len: 0,
            current: BytesMut::with_capacity(256),
            shared: shared
                .into_iter()
                .filter(|b| b.len() >= SHARE_MIN_BYTES)
                .collect(),
        }
    }

    pub(crate) fn finish(mut self) -> Frame {
        self.close_current();
        Frame {
            len: self.done_len,
            parts: self.done.into(),
        }
    }

    fn close_current(&mut self) {
        if !self.current.is_empty() {
            let part = self.current.split().freeze();
            self.done_len += part.len();
            self.done.push(part);
        }
    }

    /// Joins every part into `current` (a copy), for a seek back into a closed part.
    fn join(&mut self) {
        if self.done.is_empty() {
            return;
        }
        let mut all = BytesMut::with_capacity(self.done_len + self.current.len());
        for p in self.done.drain(..) {
            all.extend_from_slice(&p);
        }
        all.extend_from_slice(&self.current);
        self.current = all;
        self.done_len = 0;
    }
}

// SAFETY: every method that exposes or advances uninitialised room delegates to `current`, a
// `BytesMut`, whose own implementation upholds `BufMut`'s contract.
unsafe impl BufMut for FrameWriter {
    fn remaining_mut(&self) -> usize {
        isize::MAX as usize - self.done_len - self.current.len()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller initialised `cnt` bytes of `chunk_mut`, which is `current`'s.
        unsafe { self.current.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.current.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        if src.len() >= SHARE_MIN_BYTES {
            if let Some(payload) = self
                .shared
                .iter()
                .find(|b| b.as_ptr() == src.as_ptr() && b.len() == src.len())
            {
                let payload = payload.clone();
                self.close_current();
                self.done_len += payload.len();
                self.done.push(payload);
                return;
            }
        }
        self.current.extend_from_slice(src);
    }
}

impl ByteBufMut for FrameWriter {
    fn offset(&self) -> usize {
        self.done_len + self.current.len()
    }

    fn seek(&mut self, offset: usize) {
        if offset < self.done_len {
            self.join();
        }
        self.current.resize(offset - self.done_len, 0);
    }

    fn range(&mut self, r: Range<usize>) -> &mut [u8] {
        if r.start < self.done_len {
            self.join();
        }
        let base = self.done_len;
        &mut self.current[r.start - base..r.end - base]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_response::{
        FetchableTopicResponse, PartitionData as FetchPartition,
    };
    use kafka_protocol::messages::{FetchResponse, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};
    use proptest::prelude::*;

    fn fetch_response(records: &[Bytes]) -> FetchResponse {
        FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("orders")))
            .with_partitions(
                records
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        FetchPartition::default()
                            .with_partition_index(i as i32)
                            .with_high_watermark(1000 + i as i64)
                            .with_records(Some(r.clone()))
                    })
                    .collect(),
            )])
    }

    fn encoded(response: &FetchResponse, version: i16, shared: &[Bytes]) -> (Frame, Bytes) {
        let mut w = FrameWriter::new(shared.iter().cloned());
        w.put_i32(7);
        response.encode(&mut w, version).expect("encode");
        let mut plain = BytesMut::new();
        plain.put_i32(7);
        response.encode(&mut plain, version).expect("encode");
        (w.finish(), plain.freeze())
    }

    #[test]
    fn large_payloads_are_shared_and_the_bytes_match() {
        let big = Bytes::from(vec![0xab; 64 << 10]);
        let small = Bytes::from_static(b"tiny batch");
        let records = [big.clone(), small.clone(), big.slice(100..20_000)];
        for version in [4, 11, 12] {
            let (frame, plain) = encoded(&fetch_response(&records), version, &records);
            assert_eq!(frame.to_bytes(), plain, "v{version}");
            assert_eq!(frame.len(), plain.len());
            assert!(
                frame.shares(&records[0]) && frame.shares(&records[2]),
                "v{version}"
            );
            assert!(!frame.shares(&small), "small payloads are copied");
            // The header, the big payload, the fields around the small one, the slice, and
            // from v12 on the tagged fields after it.
            let tail = usize::from(version >= 12);
            assert_eq!(frame.parts(), 4 + tail, "v{version}");
        }
    }

    #[test]
    fn a_payload_it_was_not_told_about_is_copied() {
        let big = Bytes::from(vec![1u8; 16 << 10]);
        let (frame, plain) = encoded(&fetch_response(std::slice::from_ref(&big)), 12, &[]);
        assert_eq!(frame.to_bytes(), plain);
        assert!(!frame.shares(&big));
        assert_eq!(frame.parts(), 1);
    }

    #[test]
    fn seeking_back_into_a_closed_part_joins_the_parts() {
        let big = Bytes::from(vec![2u8; 8 << 10]);
        let mut w = FrameWriter::new([big.clone()]);
        let gap = w.put_gap(4);
        w.put_slice(&big);
        w.put_u8(9);
        let len = (w.offset() - 4) as u32;
        w.gap_buf(gap).copy_from_slice(&len.to_be_bytes());
        let frame = w.finish();
        let mut want = BytesMut::new();
        want.put_u32(len);
        want.extend_from_slice(&big);
        want.put_u8(9);
        assert_eq!(frame.to_bytes(), want.freeze());
        assert_eq!(frame.parts(), 1, "joined");
    }

    #[test]
    fn a_frame_reads_back_as_a_buf() {
        let big = Bytes::from(vec![3u8; 10_000]);
        let records = [big.clone(), big.slice(5..9000)];
        let (mut frame, plain) = encoded(&fetch_response(&records), 12, &records);
        let mut slices = [IoSlice::new(&[]); 8];
        let n = frame.chunks_vectored(&mut slices);
        assert_eq!(n, frame.parts());
        assert_eq!(
            slices[..n].iter().map(|s| s.len()).sum::<usize>(),
            plain.len()
        );
        let mut read = Vec::new();
        while frame.has_remaining() {
            let step = frame.chunk().len().min(777);
            read.extend_from_slice(&frame.chunk()[..step]);
            frame.advance(step);
        }
        assert_eq!(read, plain);
        assert_eq!(frame.remaining(), 0);
    }

    proptest! {
        #[test]
        fn frames_equal_contiguous_encoding(
            sizes in prop::collection::vec(0usize..20_000, 0..6),
            version in 4i16..=12,
        ) {
            let records: Vec<Bytes> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| Bytes::from(vec![i as u8; n]))
                .collect();
            let (frame, plain) = encoded(&fetch_response(&records), version, &records);
            prop_assert_eq!(frame.to_bytes(), plain);
            for r in records.iter().filter(|r| r.len() >= SHARE_MIN_BYTES) {
                prop_assert!(frame.shares(r));
            }
        }
    }
}
