//! A partition's record set in a Produce request: splitting, header checks and reading every
//! record (as Kafka's LogValidator does, through the decompressors) must refuse bad input with
//! an error, never panic, and never allocate for what a batch merely claims.
#![no_main]

use inlet_ingest::records::{walk, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(batches) = inlet_ingest::batch::split(&bytes::Bytes::copy_from_slice(data)) else {
        return;
    };
    let limits = Limits {
        max_decompressed_bytes: 1 << 20,
        compacted: false,
    };
    for b in &batches {
        let mut n = 0usize;
        let _ = walk(b, limits, |r| n += r.key.map_or(0, |k| k.len()) + r.value.map_or(0, |v| v.len()));
    }
});
