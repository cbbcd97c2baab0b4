//! What a client sends to authenticate, before anything is trusted: SASL/PLAIN messages, the
//! SCRAM exchange's client-first and client-final (against a fixed credential), OAUTHBEARER's
//! client-first message and a token against a key set (both from the input), and the DER of
//! a client certificate whose subject names an mTLS principal. Each must answer an error, never
//! panic. (The TLS handshake is the `tls_handshake` target.)
#![no_main]

use inlet_ingest::sasl::scram::{Credential, Mechanism, ServerExchange};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = inlet_ingest::sasl::parse_plain(data);
    let _ = inlet_ingest::sasl::oauthbearer::parse_client_first(data);
    let _ = inlet_ingest::tls::principal_of_der(data);
    let (first, last) = data.split_at(data.len() / 2);
    let _ = ServerExchange::user_of(first);
    // An OAUTHBEARER token (the second half) against a key set (the first half).
    let settings = inlet_ingest::sasl::oauthbearer::Settings::from_configs(&Default::default())
        .expect("the defaults read");
    let _ = inlet_ingest::sasl::oauthbearer::validate_with_key_set(
        &settings,
        first,
        &String::from_utf8_lossy(last),
        1_000_000,
    );
    for m in [Mechanism::Sha256, Mechanism::Sha512] {
        let credential = Credential::from_salted(m, b"salt", 4096, &[7; 32]);
        let mut exchange = ServerExchange::new(m);
        if exchange.first(first, Some(credential)).is_ok() {
            let _ = exchange.last(last);
        }
    }
});
