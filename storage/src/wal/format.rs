//! The WAL's on-disk framing.
//!
//! A segment file starts with a fixed [`SEGMENT_HEADER_LEN`]-byte header (magic, version, the
//! segment's starting WAL position, CRC) and then holds entries back to back:
//!
//! ```text
//! len: u32 | crc: u32 | stream_id: u64 | base_offset: u64 | record_count: u32 | timestamp_ms: u64 | payload
//! ```
//!
//! All integers are little-endian. `len` counts the bytes after the `crc` field (the rest of the
//! header and the payload); `crc` is CRC32C over the entry's WAL position (8 bytes, not stored),
//! the `len` field and those bytes. A flipped length is caught, and so is a stale entry left in a
//! recycled segment file: it was written at another position. A decoder never trusts `len` beyond [`MAX_ENTRY_LEN`] and never
//! reads past the buffer: anything that does not check out is reported, never half-returned.

use bytes::{BufMut, Bytes};

pub const SEGMENT_MAGIC: &[u8; 8] = b"INLETWAL";
pub const SEGMENT_VERSION: u32 = 1;
/// magic (8) + version (4) + reserved (4) + start position (8) + crc (4) + reserved (4).
pub const SEGMENT_HEADER_LEN: usize = 32;
/// len (4) + crc (4) + stream id (8) + base offset (8) + record count (4) + timestamp (8).
pub const ENTRY_HEADER_LEN: usize = 36;
/// The part of the header counted by `len`.
const LEN_COVERED_HEADER: usize = ENTRY_HEADER_LEN - 8;
/// Upper bound on one entry; a larger `len` can only be garbage.
pub const MAX_ENTRY_LEN: usize = 1 << 30;

/// One decoded WAL entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub stream_id: u64,
    pub base_offset: u64,
    pub record_count: u32,
    pub timestamp_ms: u64,
    pub payload: Bytes,
}

/// The fields of an entry header, without the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryHeader {
    pub stream_id: u64,
    pub base_offset: u64,
    pub record_count: u32,
    pub timestamp_ms: u64,
}

/// Encoded size of an entry with this payload length.
pub fn entry_len(payload_len: usize) -> usize {
    ENTRY_HEADER_LEN + payload_len
}

/// Appends the framed entry to `buf`. `payload` is copied once; `patch` may then rewrite the
/// copied payload in place (the store uses it to write the assigned base offset into it).
pub fn encode_entry(
    buf: &mut Vec<u8>,
    position: u64,
    header: &EntryHeader,
    payload: &[u8],
    patch: impl FnOnce(&mut [u8]),
) {
    let start = buf.len();
    let len = (LEN_COVERED_HEADER + payload.len()) as u32;
    buf.put_u32_le(len);
    buf.put_u32_le(0); // crc, filled below
    buf.put_u64_le(header.stream_id);
    buf.put_u64_le(header.base_offset);
    buf.put_u32_le(header.record_count);
    buf.put_u64_le(header.timestamp_ms);
    buf.extend_from_slice(payload);
    patch(&mut buf[start + ENTRY_HEADER_LEN..]);
    let crc = entry_crc(position, &buf[start..start + 4], &buf[start + 8..]);
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

fn entry_crc(position: u64, len_field: &[u8], rest: &[u8]) -> u32 {
    let seeded = crc32c::crc32c_append(crc32c::crc32c(&position.to_le_bytes()), len_field);
    crc32c::crc32c_append(seeded, rest)
}

/// What [`decode_entry`] found at the start of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// A whole, valid entry; the header, where the payload lies in the buffer, and the bytes the
    /// entry takes.
    Entry {
        header: EntryHeader,
        payload: std::ops::Range<usize>,
        len: usize,
    },
    /// The buffer ends before the entry does (a torn write, or the end of the log).
    Incomplete,
    /// The bytes are not a valid entry.
    Invalid(&'static str),
}

/// Decodes the entry at the start of `buf`, expected at WAL position `position`.
pub fn decode_entry(buf: &[u8], position: u64) -> Decoded {
    if buf.len() < 8 {
        return Decoded::Incomplete;
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
    if len == 0 {
        // Zeroes: never written (preallocated or past the end).
        return Decoded::Invalid("zero length");
    }
    if !(LEN_COVERED_HEADER..=MAX_ENTRY_LEN).contains(&len) {
        return Decoded::Invalid("length out of range");
    }
    let total = 8 + len;
    if buf.len() < total {
        return Decoded::Incomplete;
    }
    let crc = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
    if entry_crc(position, &buf[0..4], &buf[8..total]) != crc {
        return Decoded::Invalid("CRC mismatch");
    }
    let field = |at: usize, n: usize| &buf[at..at + n];
    let header = EntryHeader {
        stream_id: u64::from_le_bytes(field(8, 8).try_into().expect("8 bytes")),
        base_offset: u64::from_le_bytes(field(16, 8).try_into().expect("8 bytes")),
        record_count: u32::from_le_bytes(field(24, 4).try_into().expect("4 bytes")),
        timestamp_ms: u64::from_le_bytes(field(28, 8).try_into().expect("8 bytes")),
    };
    Decoded::Entry {
        header,
        payload: ENTRY_HEADER_LEN..total,
        len: total,
    }
}

/// The segment header for a segment starting at WAL position `start`.
pub fn encode_segment_header(start: u64) -> [u8; SEGMENT_HEADER_LEN] {
    let mut h = [0u8; SEGMENT_HEADER_LEN];
    h[0..8].copy_from_slice(SEGMENT_MAGIC);
    h[8..12].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&start.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..24]);
    h[24..28].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Parses a segment header, returning the segment's start position.
pub fn decode_segment_header(h: &[u8]) -> Result<u64, &'static str> {
    if h.len() < SEGMENT_HEADER_LEN {
        return Err("segment shorter than its header");
    }
    if &h[0..8] != SEGMENT_MAGIC {
        return Err("bad segment magic");
    }
    let crc = u32::from_le_bytes(h[24..28].try_into().expect("4 bytes"));
    if crc32c::crc32c(&h[0..24]) != crc {
        return Err("segment header CRC mismatch");
    }
    let version = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
    if version != SEGMENT_VERSION {
        return Err("unsupported segment version");
    }
    Ok(u64::from_le_bytes(h[16..24].try_into().expect("8 bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode_all(entries: &[(EntryHeader, Vec<u8>)]) -> (Vec<u8>, Vec<usize>) {
        let mut buf = Vec::new();
        let mut ends = Vec::new();
        for (h, p) in entries {
            let position = buf.len() as u64;
            encode_entry(&mut buf, position, h, p, |_| {});
            ends.push(buf.len());
        }
        (buf, ends)
    }

    /// Decodes entries until the first one that is not whole and valid.
    fn decode_prefix(buf: &[u8]) -> Vec<(EntryHeader, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = 0;
        while let Decoded::Entry {
            header,
            payload,
            len,
        } = decode_entry(&buf[at..], at as u64)
        {
            out.push((header, buf[at..][payload].to_vec()));
            at += len;
        }
        out
    }

    fn entries() -> impl Strategy<Value = Vec<(EntryHeader, Vec<u8>)>> {
        prop::collection::vec(
            (
                any::<u64>(),
                any::<u64>(),
                1u32..1000,
                any::<u64>(),
                prop::collection::vec(any::<u8>(), 0..300),
            )
                .prop_map(|(s, o, n, t, p)| {
                    (
                        EntryHeader {
                            stream_id: s,
                            base_offset: o,
                            record_count: n,
                            timestamp_ms: t,
                        },
                        p,
                    )
                }),
            1..20,
        )
    }

    proptest! {
        #[test]
        fn entries_round_trip(entries in entries()) {
            let (buf, _) = encode_all(&entries);
            prop_assert_eq!(decode_prefix(&buf), entries);
        }

        /// Cutting the log anywhere yields exactly the entries that end before the cut.
        #[test]
        fn truncation_yields_a_clean_prefix(entries in entries(), cut in any::<prop::sample::Index>()) {
            let (buf, ends) = encode_all(&entries);
            let cut = cut.index(buf.len() + 1);
            let whole = ends.iter().filter(|&&e| e <= cut).count();
            prop_assert_eq!(decode_prefix(&buf[..cut]), entries[..whole].to_vec());
        }

        /// Flipping any bit yields a prefix of the original entries, ending at or before the
        /// entry that holds the flipped bit; never an altered entry.
        #[test]
        fn bit_flip_yields_a_prefix(entries in entries(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
            let (mut buf, ends) = encode_all(&entries);
            let at = at.index(buf.len());
            buf[at] ^= 1 << bit;
            let hit = ends.iter().position(|&e| e > at).expect("flip inside the log");
            let got = decode_prefix(&buf);
            prop_assert!(got.len() <= hit, "decoded past the damaged entry");
            prop_assert_eq!(&got[..], &entries[..got.len()]);
        }

        /// Arbitrary bytes never panic the decoder, and what it accepts lies inside the buffer.
        #[test]
        fn garbage_never_panics(buf in prop::collection::vec(any::<u8>(), 0..200)) {
            if let Decoded::Entry { payload, len, .. } = decode_entry(&buf, 0) {
                prop_assert!(len <= buf.len() && payload.end <= len);
            }
        }
    }

    #[test]
    fn an_entry_read_at_another_position_is_stale() {
        let header = EntryHeader {
            stream_id: 1,
            base_offset: 2,
            record_count: 3,
            timestamp_ms: 4,
        };
        let mut buf = Vec::new();
        encode_entry(&mut buf, 4096, &header, b"payload", |_| {});
        assert!(matches!(decode_entry(&buf, 4096), Decoded::Entry { .. }));
        assert_eq!(decode_entry(&buf, 0), Decoded::Invalid("CRC mismatch"));
    }

    #[test]
    fn segment_header_round_trips_and_rejects_damage() {
        let h = encode_segment_header(12345);
        assert_eq!(decode_segment_header(&h), Ok(12345));
        let mut bad = h;
        bad[17] ^= 1;
        assert!(decode_segment_header(&bad).is_err());
        assert!(decode_segment_header(&h[..10]).is_err());
    }
}
