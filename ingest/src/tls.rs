//! TLS on Kafka listeners (`SSL` and `SASL_SSL`), with rustls: the node's certificate chain and
//! key, and the CAs it trusts for client certificates, from PEM files named by Kafka's configs
//! (`ssl.keystore.type=PEM`, `ssl.keystore.location`, `ssl.truststore.location`,
//! `ssl.client.auth`, each also as `listener.name.<listener>.ssl.*`).
//!
//! Certificates are reloaded without a restart: [`Tls::reload_if_changed`] (run every
//! [`RELOAD_EVERY`] by the listener) reads the files again when one changed, and new
//! connections use the new ones; a reload that fails keeps the old ones and says why.
//!
//! A client certificate (mTLS) names the connection's principal on an `SSL` listener, as
//! Kafka's default principal builder does: `User:` and the subject's distinguished name in
//! RFC 2253 form (`User:CN=client,OU=eng,O=Example`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::{Mutex, RwLock};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;

/// How often a TLS listener looks at its PEM files for a change.
pub const RELOAD_EVERY: Duration = Duration::from_secs(10);

/// Kafka's `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    None,
    /// One is asked for; a client without one is still served (as `User:ANONYMOUS`).
    Requested,
    /// One is required, signed by a trusted CA.
    Required,
}

/// What a TLS listener is configured with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM: the private key and the certificate chain, the node's first.
    pub keystore: PathBuf,
    /// PEM: the CAs client certificates must chain to.
    pub truststore: Option<PathBuf>,
    pub client_auth: ClientAuth,
}

impl TlsSettings {
    /// Listener `listener`'s settings from Kafka's configs (`get` reads one by its name; a
    /// `listener.name.<listener lowercased>.` one wins over the plain one); `None` when no
    /// keystore is named.
    pub fn from_configs(
        listener: &str,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<TlsSettings>, String> {
        let prefix = format!("listener.name.{}.", listener.to_ascii_lowercase());
        let read = |key: &str| get(&format!("{prefix}{key}")).or_else(|| get(key));
        for (key, pem) in [("ssl.keystore.type", "PEM"), ("ssl.truststore.type", "PEM")] {
            if let Some(kind) = read(key) {
                if !kind.eq_ignore_ascii_case(pem) {
                    return Err(format!(
                        "{key}={kind}: Inlet reads PEM files only (set {key}=PEM)"
                    ));
                }
            }
        }
        if read("ssl.key.password").is_some() {
            return Err(
                "ssl.key.password: encrypted private keys are not supported; give the key unencrypted (PKCS#8, PKCS#1 or SEC1 PEM) in a file only the node can read"
                    .into(),
            );
        }
        let Some(keystore) = read("ssl.keystore.location") else {
            return Ok(None);
        };
        let client_auth = match read("ssl.client.auth").as_deref() {
            None | Some("none") => ClientAuth::None,
            Some("requested") => ClientAuth::Requested,
            Some("required") => ClientAuth::Required,
            Some(other) => {
                return Err(format!(
                    "ssl.client.auth={other}: must be none, requested or required"
                ))
            }
        };
        let truststore = read("ssl.truststore.location").map(PathBuf::from);
        if client_auth != ClientAuth::None && truststore.is_none() {
            return Err(format!(
                "listener {listener}: ssl.client.auth={} needs ssl.truststore.location (the CAs client certificates must chain to)",
                if client_auth == ClientAuth::Required { "required" } else { "requested" }
            ));
        }
        Ok(Some(TlsSettings {
            keystore: PathBuf::from(keystore),
            truststore,
            client_auth,
        }))
    }
}

/// A listener's TLS: the server config in force, and what it was read from.
#[derive(Debug)]
pub struct Tls {
    settings: TlsSettings,
    config: RwLock<Arc<ServerConfig>>,
    /// The files' modification times when last read.
    stamps: Mutex<Vec<Option<SystemTime>>>,
}

fn stamp(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl Tls {
    /// Reads the PEM files; refuses with the reason when they do not make a server config.
    pub fn load(settings: TlsSettings) -> Result<Tls, String> {
        let config = build(&settings)?;
        let stamps = files(&settings).iter().map(|p| stamp(p)).collect();
        Ok(Tls {
            settings,
            config: RwLock::new(Arc::new(config)),
            stamps: Mutex::new(stamps),
        })
    }

    /// An acceptor with the config in force.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.config.read().clone())
    }

    /// Reads the files again if one changed since; returns whether the config was replaced.
    /// A failed read keeps the config in force.
    pub fn reload_if_changed(&self) -> Result<bool, String> {
        let now: Vec<Option<SystemTime>> = files(&self.settings).iter().map(|p| stamp(p)).collect();
        let mut stamps = self.stamps.lock();
        if *stamps == now {
            return Ok(false);
        }
        // Remember the new stamps even when the read fails: a half-written file is read again
        // at its next change, not every few seconds with the same error.
        *stamps = now;
        let config = build(&self.settings)?;
        *self.config.write() = Arc::new(config);
        Ok(true)
    }

    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }
}

fn files(settings: &TlsSettings) -> Vec<PathBuf> {
    let mut out = vec![settings.keystore.clone()];
    out.extend(settings.truststore.clone());
    out
}

fn build(settings: &TlsSettings) -> Result<ServerConfig, String> {
    let keystore = &settings.keystore;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(keystore)
        .map_err(|e| format!("ssl.keystore.location {}: {e}", keystore.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("ssl.keystore.location {}: {e}", keystore.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "ssl.keystore.location {}: no certificate in it (it must hold the key and the certificate chain)",
            keystore.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(keystore).map_err(|e| {
        format!(
            "ssl.keystore.location {}: no private key read: {e}",
            keystore.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match (&settings.truststore, settings.client_auth) {
        (Some(truststore), auth) if auth != ClientAuth::None => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(truststore)
                .map_err(|e| format!("ssl.truststore.location {}: {e}", truststore.display()))?
            {
                let cert = cert.map_err(|e| {
                    format!("ssl.truststore.location {}: {e}", truststore.display())
                })?;
                roots.add(cert).map_err(|e| {
                    format!("ssl.truststore.location {}: {e}", truststore.display())
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if auth == ClientAuth::Requested {
                verifier.allow_unauthenticated()
            } else {
                verifier
            }
            .build()
            .map_err(|e| format!("ssl.truststore.location {}: {e}", truststore.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("ssl.keystore.location {}: {e}", keystore.display()))
}

/// The principal a client certificate names: `User:` and its subject in RFC 2253 form, or
/// `None` when the certificate cannot be read.
pub fn principal_of(cert: &CertificateDer<'_>) -> Option<String> {
    principal_of_der(cert.as_ref())
}

/// [`principal_of`] of a certificate's DER bytes.
pub fn principal_of_der(der: &[u8]) -> Option<String> {
    subject_dn(der).map(|dn| format!("User:{dn}"))
}

/// One DER element: (tag, contents, the rest after it).
fn der(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| acc << 8 | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// The subject of a DER certificate in RFC 2253 form: its RDNs last first, `,`-separated.
fn subject_dn(cert: &[u8]) -> Option<String> {
    const SEQUENCE: u8 = 0x30;
    let (tag, certificate, _) = der(cert)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, tbs, _) = der(certificate)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut rest = tbs;
    // [0] version, if present; then serial, signature, issuer, validity; then the subject.
    if rest.first() == Some(&0xa0) {
        rest = der(rest)?.2;
    }
    for _ in 0..4 {
        rest = der(rest)?.2;
    }
    let (tag, subject, _) = der(rest)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut rdns = Vec::new();
    let mut set = subject;
    while !set.is_empty() {
        let (_, attributes, after) = der(set)?;
        set = after;
        let mut parts = Vec::new();
        let mut attrs = attributes;
        while !attrs.is_empty() {
            let (_, pair, after) = der(attrs)?;
            attrs = after;
            let (_, oid, value) = der(pair)?;
            let (_, value, _) = der(value)?;
            parts.push(format!(
                "{}={}",
                attribute_name(oid),
                escape(&String::from_utf8_lossy(value))
            ));
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

/// RFC 2253's short names of the usual attributes; others as their dotted OID.
fn attribute_name(oid: &[u8]) -> String {
    match oid {
        [0x55, 0x04, 0x03] => "CN".into(),
        [0x55, 0x04, 0x06] => "C".into(),
        [0x55, 0x04, 0x07] => "L".into(),
        [0x55, 0x04, 0x08] => "ST".into(),
        [0x55, 0x04, 0x0a] => "O".into(),
        [0x55, 0x04, 0x0b] => "OU".into(),
        [0x55, 0x04, 0x09] => "STREET".into(),
        _ => {
            let mut arcs = Vec::new();
            if let Some((&first, rest)) = oid.split_first() {
                arcs.push(u64::from(first / 40));
                arcs.push(u64::from(first % 40));
                let mut acc = 0u64;
                for b in rest {
                    acc = acc << 7 | u64::from(b & 0x7f);
                    if b & 0x80 == 0 {
                        arcs.push(acc);
                        acc = 0;
                    }
                }
            }
            arcs.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(".")
        }
    }
}

/// RFC 2253's escaping of an attribute value.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for (i, c) in value.chars().enumerate() {
        let edge =
            (i == 0 && (c == ' ' || c == '#')) || (i + 1 == value.chars().count() && c == ' ');
        if edge || matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_follow_kafkas_names_and_listener_prefixes() {
        let configs = std::collections::BTreeMap::from([
            (
                "ssl.keystore.location".to_string(),
                "/etc/node.pem".to_string(),
            ),
            (
                "listener.name.internal.ssl.keystore.location".to_string(),
                "/etc/internal.pem".to_string(),
            ),
            (
                "ssl.truststore.location".to_string(),
                "/etc/ca.pem".to_string(),
            ),
            ("ssl.client.auth".to_string(), "required".to_string()),
        ]);
        let get = |k: &str| configs.get(k).cloned();
        let external = TlsSettings::from_configs("SSL", get).unwrap().unwrap();
        assert_eq!(external.keystore, PathBuf::from("/etc/node.pem"));
        assert_eq!(external.client_auth, ClientAuth::Required);
        let internal = TlsSettings::from_configs("INTERNAL", get).unwrap().unwrap();
        assert_eq!(internal.keystore, PathBuf::from("/etc/internal.pem"));
        let refused = |pairs: &[(&str, &str)]| {
            let map: std::collections::BTreeMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            TlsSettings::from_configs("SSL", |k| map.get(k).cloned()).unwrap_err()
        };
        assert!(refused(&[("ssl.keystore.type", "JKS")]).contains("PEM files only"));
        assert!(refused(&[("ssl.key.password", "x")]).contains("encrypted private keys"));
        assert!(refused(&[
            ("ssl.keystore.location", "/k"),
            ("ssl.client.auth", "required")
        ])
        .contains("needs ssl.truststore.location"));
        assert!(TlsSettings::from_configs("SSL", |_| None)
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_subject_reads_as_rfc_2253_writes_it() {
        // A certificate's skeleton: tbs { [0]{v3}, serial, sigalg, issuer, validity, subject }.
        fn tlv(tag: u8, body: &[u8]) -> Vec<u8> {
            let mut out = vec![tag];
            if body.len() < 0x80 {
                out.push(body.len() as u8);
            } else {
                out.push(0x82);
                out.extend((body.len() as u16).to_be_bytes());
            }
            out.extend(body);
            out
        }
        let atv = |oid: &[u8], value: &str| {
            tlv(
                0x31,
                &tlv(
                    0x30,
                    &[tlv(0x06, oid), tlv(0x0c, value.as_bytes())].concat(),
                ),
            )
        };
        let subject = tlv(
            0x30,
            &[
                atv(&[0x55, 0x04, 0x06], "US"),
                atv(&[0x55, 0x04, 0x0a], "Example, Inc"),
                atv(&[0x55, 0x04, 0x03], "client"),
            ]
            .concat(),
        );
        let tbs = tlv(
            0x30,
            &[
                tlv(0xa0, &tlv(0x02, &[2])),
                tlv(0x02, &[1]),
                tlv(0x30, &[]),
                tlv(0x30, &[]),
                tlv(0x30, &[]),
                subject,
            ]
            .concat(),
        );
        let cert = tlv(0x30, &tbs);
        assert_eq!(
            principal_of(&CertificateDer::from(cert)),
            Some("User:CN=client,O=Example\\, Inc,C=US".to_string())
        );
        assert_eq!(subject_dn(&[0x30, 0x05, 0x01]), None);
    }
}
