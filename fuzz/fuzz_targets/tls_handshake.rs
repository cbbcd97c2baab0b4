//! The TLS handshake as a Kafka `SSL` listener with `ssl.client.auth=required` runs it: the
//! listener's own rustls configuration (`inlet_ingest::tls::Tls`, built from PEM files as the
//! node builds it) fed whatever a client sends, in the pieces the input says, with the
//! certificate verifier that checks client certificates against the truststore. Every input
//! must end in an error or a handshake, never a panic. (The certificate and key below are a
//! throwaway self-signed pair made for this target.)
#![no_main]

use std::io::Cursor;
use std::sync::{Arc, OnceLock};

use inlet_ingest::tls::{ClientAuth, Tls, TlsSettings};
use libfuzzer_sys::fuzz_target;

const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIBgTCCASegAwIBAgIUFZMGo8m3IS7goTXoavLKI8SDoIswCgYIKoZIzj0EAwIw\nFTETMBEGA1UEAwwKaW5sZXQtZnV6ejAgFw0yNjEyMDcwOTMwNTdaGA8yMTI2MTEx\nMzA5MzA1N1owFTETMBEGA1UEAwwKaW5sZXQtZnV6ejBZMBMGByqGSM49AgEGCCqG\nSM49AwEHA0IABDX+Qtlzqf1GdG5zpSTTch7gPDyTn/YpISpGmo3KLs/jQVgNIqR4\nTu+rwhNoFdtSdwqShms3BoxO/qvQrJsiMZejUzBRMB0GA1UdDgQWBBTTW6vCnfx6\njMunMKsWlpv1tgsikDAfBgNVHSMEGDAWgBTTW6vCnfx6jMunMKsWlpv1tgsikDAP\nBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0gAMEUCIDCwt17bd/HcnEw+rolR\ncooxZ36OECl8C0TslpC6oCqAAiEA+08Ms3BO1I9dvB+6PsmJSlj2k6SJsN1edfd4\nPR+WvCo=\n-----END CERTIFICATE-----\n";
const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgUCBQCMtTzT+OXyg4\nC5yQHiyCDPGi5o3zH1fx/k6uUaKhRANCAAQ1/kLZc6n9RnRuc6Uk03Ie4Dw8k5/2\nKSEqRpqNyi7P40FYDSKkeE7vq8ITaBXbUncKkoZrNwaMTv6r0KybIjGX\n-----END PRIVATE KEY-----\n";

/// The listener's configuration, built once from PEM files as `Tls::load` reads them.
fn config() -> &'static Arc<rustls::ServerConfig> {
    static CONFIG: OnceLock<Arc<rustls::ServerConfig>> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("inlet-fuzz-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch dir");
        let keystore = dir.join("keystore.pem");
        let truststore = dir.join("truststore.pem");
        std::fs::write(&keystore, format!("{KEY}{CERT}")).expect("the keystore");
        std::fs::write(&truststore, CERT).expect("the truststore");
        let tls = Tls::load(TlsSettings {
            keystore,
            truststore: Some(truststore),
            client_auth: ClientAuth::Required,
        })
        .expect("the listener's TLS configuration");
        let config = tls.acceptor().config().clone();
        let _ = std::fs::remove_dir_all(&dir);
        config
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(mut server) = rustls::ServerConnection::new(config().clone()) else {
        return;
    };
    // The first byte cuts the rest into pieces of up to 1..=256 bytes, as a network might.
    let (piece, mut rest) = match data.split_first() {
        Some((p, rest)) => (usize::from(*p) + 1, rest),
        None => return,
    };
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (now, later) = rest.split_at(piece.min(rest.len()));
        rest = later;
        if server.read_tls(&mut Cursor::new(now)).is_err() {
            return;
        }
        if server.process_new_packets().is_err() {
            // The alert the server would send, then the connection is done.
            let _ = server.write_tls(&mut out);
            return;
        }
        while server.wants_write() {
            out.clear();
            if server.write_tls(&mut out).is_err() {
                return;
            }
        }
    }
});
