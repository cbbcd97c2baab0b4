//! Kafka request frames from the network: decoding must answer an error, never panic or
//! allocate what the frame does not hold.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = inlet_ingest::codec::decode_request(bytes::Bytes::copy_from_slice(data));
});
