//! Calls between nodes (a transaction coordinator's WriteTxnMarkers to a partition's leader),
//! made as a Kafka broker makes them: on the inter-broker listener (Kafka's
//! `inter.broker.listener.name`, by default the first listener), with that listener's security
//! protocol, as the node's own principal.
//!
//! - **TLS** (`SSL`, `SASL_SSL`): the other node's certificate must chain to the listener's
//!   `ssl.truststore.location` and name the address called (Kafka's default
//!   `ssl.endpoint.identification.algorithm=https`); the node presents its own keystore
//!   (certificate and key) when asked, so on an `SSL` listener with client authentication its
//!   certificate is its principal.
//! - **SASL** (`SASL_PLAINTEXT`, `SASL_SSL`): `sasl.mechanism.inter.broker.protocol` (PLAIN,
//!   SCRAM-SHA-256 or SCRAM-SHA-512) with the username and password of the listener's JAAS
//!   config (`listener.name.<listener>.<mechanism>.sasl.jaas.config`, or `sasl.jaas.config`),
//!   as Kafka's `PlainLoginModule` / `ScramLoginModule` lines give them. A SCRAM server must
//!   prove it holds the credential too.
//!
//! With the authorizer on, that principal needs CLUSTER_ACTION on the cluster (or to be one of
//! `super.users`), as a Kafka broker's does. A misconfiguration (no such listener, no
//! credentials, no truststore) refuses the node's start with the reason.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, RequestHeader, RequestKind, ResponseHeader, SaslAuthenticateRequest,
    SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::config::{BrokerAddr, BrokerConfig};
use crate::sasl::scram::{ClientExchange, Mechanism};
use crate::tls::TlsSettings;

/// The largest answer read back.
const MAX_RESPONSE: usize = 1 << 20;

/// A connection to another node, authenticated.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<S: AsyncRead + AsyncWrite + Send + Unpin> Stream for S {}

/// How this node calls the others.
#[derive(Debug, Clone, Default)]
pub struct InterBroker {
    /// The listener's name; empty: the nodes' first listener (one PLAINTEXT listener).
    listener: String,
    tls: Option<TlsSettings>,
    /// The mechanism, user and password.
    sasl: Option<(String, String, String)>,
}

impl InterBroker {
    /// How this node calls the others, from its broker configs; refuses a configuration that
    /// cannot work, with the reason.
    pub fn from_config(c: &BrokerConfig) -> Result<InterBroker, String> {
        let name = c.inter_broker_listener_name.clone();
        if c.listeners.is_empty() {
            if !name.is_empty() && name != "PLAINTEXT" {
                return Err(format!(
                    "inter.broker.listener.name={name}: this node has one PLAINTEXT listener (--kafka-listen); name {name} in listeners"
                ));
            }
            return Ok(InterBroker::default());
        }
        let listener = if name.is_empty() {
            c.listeners[0].name.clone()
        } else if c.listeners.iter().any(|l| l.name == name) {
            name
        } else {
            return Err(format!(
                "inter.broker.listener.name={name}: no listener of that name in listeners ({})",
                c.listeners
                    .iter()
                    .map(|l| l.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        };
        let protocol = c.protocol_of(&listener).unwrap_or("PLAINTEXT");
        let tls = if protocol.ends_with("SSL") {
            let settings = TlsSettings::from_configs(&listener, |k| c.ssl_configs.get(k).cloned())?
                .ok_or_else(|| format!("the inter-broker listener {listener} is {protocol} but has no ssl.keystore.location"))?;
            if settings.truststore.is_none() {
                return Err(format!(
                    "the inter-broker listener {listener} is {protocol}: nodes check each other's certificates against ssl.truststore.location (the CA that signed the nodes' certificates); name it"
                ));
            }
            Some(settings)
        } else {
            None
        };
        let sasl = if protocol.starts_with("SASL_") {
            let enabled = &c.sasl_enabled_mechanisms;
            let mechanism = if c.sasl_mechanism_inter_broker_protocol.is_empty() {
                ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]
                    .into_iter()
                    .find(|m| enabled.iter().any(|e| e == m))
                    .ok_or_else(|| format!("the inter-broker listener {listener} offers none of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (sasl.enabled.mechanisms)"))?
                    .to_string()
            } else {
                c.sasl_mechanism_inter_broker_protocol.clone()
            };
            if !enabled.contains(&mechanism) {
                return Err(format!(
                    "sasl.mechanism.inter.broker.protocol={mechanism} is not in sasl.enabled.mechanisms"
                ));
            }
            let key = format!(
                "listener.name.{}.{}.sasl.jaas.config",
                listener.to_ascii_lowercase(),
                mechanism.to_ascii_lowercase()
            );
            let jaas = c
                .sasl_jaas_configs
                .get(&key)
                .or_else(|| c.sasl_jaas_configs.get("sasl.jaas.config"))
                .ok_or_else(|| format!(
                    "the inter-broker listener {listener} is {protocol}: give this node's own user as {key}=\"org.apache.kafka.common.security.{}.{} required username=\\\"…\\\" password=\\\"…\\\";\"",
                    if mechanism == "PLAIN" { "plain" } else { "scram" },
                    if mechanism == "PLAIN" { "PlainLoginModule" } else { "ScramLoginModule" },
                ))?;
            let (user, password) =
                inlet_common::jaas::credentials(jaas).map_err(|e| format!("{key}: {e}"))?;
            Some((mechanism, user, password))
        } else {
            None
        };
        Ok(InterBroker {
            listener,
            tls,
            sasl,
        })
    }

    /// The listener's name (empty: the first).
    pub fn listener(&self) -> &str {
        &self.listener
    }

    /// A connection to `to`'s inter-broker listener, through TLS and SASL as configured.
    pub(crate) async fn connect(&self, to: &BrokerAddr) -> anyhow::Result<Box<dyn Stream>> {
        let (host, port) = to.on(&self.listener);
        let tcp = tokio::net::TcpStream::connect((host, port)).await?;
        let _ = tcp.set_nodelay(true);
        let mut stream: Box<dyn Stream> = match &self.tls {
            None => Box::new(tcp),
            Some(settings) => {
                let config = client_config(settings).map_err(anyhow::Error::msg)?;
                let name = ServerName::try_from(host.to_string())?;
                let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
                Box::new(connector.connect(name, tcp).await?)
            }
        };
        if let Some((mechanism, user, password)) = &self.sasl {
            authenticate(&mut stream, mechanism, user, password).await?;
        }
        Ok(stream)
    }
}

/// A TLS client config from the listener's files (read at each call, so a certificate
/// replaced on disk is used at once): its truststore's CAs, its keystore as the client
/// certificate.
fn client_config(settings: &TlsSettings) -> Result<rustls::ClientConfig, String> {
    let truststore = settings
        .truststore
        .as_ref()
        .ok_or("no ssl.truststore.location")?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(truststore)
        .map_err(|e| format!("ssl.truststore.location {}: {e}", truststore.display()))?
    {
        let cert =
            cert.map_err(|e| format!("ssl.truststore.location {}: {e}", truststore.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("ssl.truststore.location {}: {e}", truststore.display()))?;
    }
    let keystore = &settings.keystore;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(keystore)
        .and_then(|certs| certs.collect())
        .map_err(|e| format!("ssl.keystore.location {}: {e}", keystore.display()))?;
    let key = PrivateKeyDer::from_pem_file(keystore)
        .map_err(|e| format!("ssl.keystore.location {}: {e}", keystore.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| format!("ssl.keystore.location {}: {e}", keystore.display()))
}

/// Sends one request (`correlation` 1) and reads its answer's body.
pub(crate) async fn call<R: Decodable>(
    s: &mut Box<dyn Stream>,
    api: ApiKey,
    version: i16,
    body: RequestKind,
) -> anyhow::Result<R> {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("inlet-inter-broker")));
    let frame = crate::codec::encode_request(&header, &body)?;
    s.write_all(&frame).await?;
    s.flush().await?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    let len = usize::try_from(i32::from_be_bytes(len))?;
    anyhow::ensure!(len <= MAX_RESPONSE, "an answer of {len} bytes");
    let mut buf = BytesMut::zeroed(len);
    s.read_exact(&mut buf).await?;
    let mut buf: Bytes = buf.freeze();
    let h = ResponseHeader::decode(&mut buf, api.response_header_version(version))?;
    anyhow::ensure!(h.correlation_id == 1, "an answer to another request");
    R::decode(&mut buf, version)
}

/// SaslHandshake and SaslAuthenticate as `user`.
async fn authenticate(
    s: &mut Box<dyn Stream>,
    mechanism: &str,
    user: &str,
    password: &str,
) -> anyhow::Result<()> {
    let shake: SaslHandshakeResponse = call(
        s,
        ApiKey::SaslHandshake,
        1,
        RequestKind::SaslHandshake(
            SaslHandshakeRequest::default()
                .with_mechanism(StrBytes::from_string(mechanism.to_string())),
        ),
    )
    .await?;
    anyhow::ensure!(
        shake.error_code == 0,
        "the node does not offer {mechanism} (error {})",
        shake.error_code
    );
    match Mechanism::from_name(mechanism) {
        None => {
            let token = format!("\0{user}\0{password}").into_bytes();
            step(s, user, token).await?;
        }
        Some(m) => {
            let (mut exchange, first) = ClientExchange::start(m, user, password);
            let server_first = step(s, user, first).await?;
            let last = exchange.last(&server_first).map_err(anyhow::Error::msg)?;
            let server_final = step(s, user, last).await?;
            exchange.verify(&server_final).map_err(anyhow::Error::msg)?;
        }
    }
    Ok(())
}

/// One SaslAuthenticate round: `bytes` out, the server's bytes back.
async fn step(s: &mut Box<dyn Stream>, user: &str, bytes: Vec<u8>) -> anyhow::Result<Bytes> {
    let answer: SaslAuthenticateResponse = call(
        s,
        ApiKey::SaslAuthenticate,
        2,
        RequestKind::SaslAuthenticate(
            SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes)),
        ),
    )
    .await?;
    anyhow::ensure!(
        answer.error_code == 0,
        "authentication as {user} failed: {}",
        answer.error_message.as_deref().unwrap_or("no reason given")
    );
    Ok(answer.auth_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Result<InterBroker, String> {
        let mut c = BrokerConfig::default();
        let map = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        c.apply_kafka_configs(&map)?;
        InterBroker::from_config(&c)
    }

    #[test]
    fn the_inter_broker_listener_is_checked_at_start() {
        // One PLAINTEXT listener: nothing to configure.
        assert!(config(&[]).unwrap().sasl.is_none());
        let two = [
            ("listeners", "EXTERNAL://:9092,INTERNAL://:9093"),
            (
                "listener.security.protocol.map",
                "EXTERNAL:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
            ),
        ];
        // The first listener by default.
        assert_eq!(config(&two).unwrap().listener(), "EXTERNAL");
        let mut with = two.to_vec();
        with.push(("inter.broker.listener.name", "internal"));
        let e = config(&with).unwrap_err();
        assert!(
            e.contains("listener.name.internal.scram-sha-512.sasl.jaas.config"),
            "{e}"
        );
        with.push((
            "listener.name.internal.scram-sha-512.sasl.jaas.config",
            r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="secret";"#,
        ));
        let ib = config(&with).unwrap();
        assert_eq!(ib.listener(), "INTERNAL");
        assert_eq!(
            ib.sasl,
            Some(("SCRAM-SHA-512".into(), "broker".into(), "secret".into()))
        );
        with.push(("sasl.mechanism.inter.broker.protocol", "PLAIN"));
        let e = config(&with).unwrap_err();
        assert!(
            e.contains("listener.name.internal.plain.sasl.jaas.config"),
            "{e}"
        );
        with.push(("sasl.enabled.mechanisms", "SCRAM-SHA-256"));
        assert!(config(&with)
            .unwrap_err()
            .contains("not in sasl.enabled.mechanisms"));
        let e = config(&[("inter.broker.listener.name", "NOPE"), two[0], two[1]]).unwrap_err();
        assert!(e.contains("no listener of that name"), "{e}");
        let e = config(&[("sasl.mechanism.inter.broker.protocol", "GSSAPI")]).unwrap_err();
        assert!(e.contains("PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"), "{e}");
        // TLS between nodes needs the CA to check each other with.
        let e = config(&[
            ("listeners", "SSL://:9093"),
            ("ssl.keystore.location", "/nonexistent/node.pem"),
        ])
        .unwrap_err();
        assert!(e.contains("ssl.truststore.location"), "{e}");
    }
}
