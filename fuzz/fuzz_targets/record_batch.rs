//! A partition's record set in a Produce request: splitting and header checks must refuse
//! bad input with an error, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = inlet_ingest::batch::split(&bytes::Bytes::copy_from_slice(data));
});
