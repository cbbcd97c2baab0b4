//! A partition's record set in a Produce request: splitting, header checks and reading every
//! record (as Kafka's LogValidator does, through the decompressors) must refuse bad input with
//! an error, never panic, and never allocate for what a batch merely claims. The same bytes as
//! stored batches of a compacted topic: split, walked with gaps allowed, and thinned by the
//! compactor's rewrite, which must read back as a stored batch.
#![no_main]

use inlet_records::batch::split_stored;
use inlet_records::rewrite::retain;
use inlet_records::records::{walk, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let bytes = bytes::Bytes::copy_from_slice(data);
    let limits = Limits {
        max_decompressed_bytes: 1 << 20,
        compacted: false,
    };
    if let Ok(batches) = inlet_ingest::batch::split(&bytes) {
        for b in &batches {
            let mut n = 0usize;
            let _ = walk(b, limits, |r| {
                n += r.key.map_or(0, |k| k.len()) + r.value.map_or(0, |v| v.len())
            });
        }
    }
    let Ok(stored) = split_stored(&bytes) else {
        return;
    };
    let compacted = Limits {
        compacted: true,
        ..limits
    };
    for b in &stored {
        let _ = walk(b, compacted, |_| {});
        if let Ok(Some(thinned)) = retain(b, limits, |r| r.index % 2 == 0) {
            assert!(split_stored(&thinned).is_ok(), "a rewritten batch reads back");
        }
    }
});
