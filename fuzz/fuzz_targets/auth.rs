//! What a client sends to authenticate, before anything is trusted: SASL/PLAIN messages, the
//! SCRAM exchange's client-first and client-final (against a fixed credential), OAUTHBEARER's
//! client-first message and a token against a key set (both from the input), and the DER of
//! a client certificate whose subject names an mTLS principal; and, the other way, what
//! another node answers this node's SCRAM exchange with (`inter_broker`: server-first and
//! server-final). Each must answer an error, never panic. (The TLS handshake is the
//! `tls_handshake` target.)
#![no_main]

use inlet_ingest::sasl::scram::{ClientExchange, Credential, Mechanism, ServerExchange};
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
        // A node's client side, against a peer's answers (its nonce extended by the input, so
        // the rest is read too).
        let (mut client, client_first) = ClientExchange::start(m, "node", "secret");
        let text = String::from_utf8_lossy(&client_first).into_owned();
        let nonce = text.rsplit_once("r=").map_or("", |(_, n)| n);
        let server_first = format!("r={nonce}{}", String::from_utf8_lossy(first));
        if client.last(server_first.as_bytes()).is_ok() {
            let _ = client.verify(last);
        }
    }
});
