//! The stream store's on-disk and in-object formats read back: a stream object (footer, index,
//! blocks) and WAL segments (header, entries). Damaged bytes must give an error, never a panic
//! or an allocation out of proportion to the input.
#![no_main]

use inlet_storage::objects::format::{decode_footer, decode_object, FOOTER_LEN};
use inlet_storage::wal::format::{decode_entry, decode_segment_header, Decoded};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let bytes = bytes::Bytes::copy_from_slice(data);
    let _ = decode_object(&bytes, "fuzz");
    if data.len() >= FOOTER_LEN {
        let _ = decode_footer(&data[data.len() - FOOTER_LEN..], data.len() as u64, "fuzz");
    }
    let _ = decode_segment_header(data);
    let mut at = 0usize;
    while at < data.len() {
        match decode_entry(&data[at..], at as u64) {
            Decoded::Entry { len, .. } => at += len.max(1),
            _ => break,
        }
    }
});
