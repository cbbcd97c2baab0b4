//! What a client sends to authenticate, before anything is trusted: SASL/PLAIN messages, the
//! SCRAM exchange's client-first and client-final (against a fixed credential), and the DER of
//! a client certificate whose subject names an mTLS principal. Each must answer an error, never
//! panic. (The TLS handshake itself is rustls's, fuzzed by its project.)
#![no_main]

use inlet_ingest::sasl::scram::{Credential, Mechanism, ServerExchange};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = inlet_ingest::sasl::parse_plain(data);
    let _ = inlet_ingest::tls::principal_of_der(data);
    let (first, last) = data.split_at(data.len() / 2);
    let _ = ServerExchange::user_of(first);
    for m in [Mechanism::Sha256, Mechanism::Sha512] {
        let credential = Credential::from_salted(m, b"salt", 4096, &[7; 32]);
        let mut exchange = ServerExchange::new(m);
        if exchange.first(first, Some(credential)).is_ok() {
            let _ = exchange.last(last);
        }
    }
});
