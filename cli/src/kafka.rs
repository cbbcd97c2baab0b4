//! The client settings every Kafka command shares: the bootstrap servers, a file of client
//! properties (Kafka's `--command-config`) and single properties (`-X`, as kcat's), given to
//! librdkafka.
//!
//! An operator's Kafka client properties carry over: the Java client's names librdkafka spells
//! differently are translated (`sasl.jaas.config` to `sasl.username` / `sasl.password`,
//! `ssl.truststore.location` to `ssl.ca.location`, `ssl.keystore.location` to the certificate
//! and key locations; PEM files only). Every other property goes to librdkafka as it is, which
//! refuses one it does not know by name.

use std::path::PathBuf;
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::ClientConfig;

use crate::{Failure, Result};

/// The client context of every command's clients: it keeps the last error librdkafka reports
/// on its own (a failed SASL authentication, a TLS handshake), which a call's own error only
/// calls a "transport failure"; [`crate::Failure`] adds it to the message.
#[derive(Clone, Copy, Default)]
pub struct Reporter;

/// A consumer (or metadata and offsets client) with the [`Reporter`].
pub type KafkaConsumer = BaseConsumer<Reporter>;

static LAST_CLIENT_ERROR: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Records an error librdkafka reported on its own; the first one stays (the cause, where the
/// later ones are what it led to, "all brokers are down").
pub fn report(error: &KafkaError, reason: &str) {
    let mut first = LAST_CLIENT_ERROR.lock().unwrap_or_else(|p| p.into_inner());
    first.get_or_insert_with(|| format!("{error}: {reason}"));
}

/// The first error librdkafka reported on its own, if any.
pub fn last_client_error() -> Option<String> {
    LAST_CLIENT_ERROR
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

/// The cluster's metadata (of `topic`, or every topic), asked in short attempts within
/// [`TIMEOUT`]: a client whose authentication or TLS handshake failed stops at once with the
/// reason instead of retrying until the timeout.
#[allow(clippy::disallowed_methods)] // Instant: only the deadline of the attempts is measured
pub fn metadata(
    client: &KafkaConsumer,
    topic: Option<&str>,
) -> crate::Result<rdkafka::metadata::Metadata> {
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let attempt = deadline
            .saturating_duration_since(std::time::Instant::now())
            .min(std::time::Duration::from_secs(2));
        match client.fetch_metadata(topic, attempt) {
            Ok(m) => return Ok(m),
            Err(e) => {
                drain(client);
                if std::time::Instant::now() >= deadline || refused_for_good() {
                    return Err(crate::Failure::from(e));
                }
            }
        }
    }
}

/// A topic's error in a metadata answer as the command's failure: exit 3 for an unknown topic.
pub fn topic_failure(topic: &str, error: rdkafka::types::RDKafkaRespErr) -> crate::Failure {
    use rdkafka::types::RDKafkaErrorCode;
    match RDKafkaErrorCode::from(error) {
        RDKafkaErrorCode::UnknownTopicOrPartition => {
            crate::Failure::not_found(format!("topic {topic} does not exist"))
        }
        code => crate::Failure::failed(format!("topic {topic}: {code}")),
    }
}

/// The partitions of `topic`, asked through `client` (one made with
/// `allow.auto.create.topics=false`, so asking never creates it); exit 3 when it does not
/// exist.
pub fn partitions(client: &KafkaConsumer, topic: &str) -> crate::Result<Vec<i32>> {
    let metadata = metadata(client, Some(topic))?;
    let Some(t) = metadata.topics().first() else {
        return Err(crate::Failure::not_found(format!(
            "topic {topic} does not exist"
        )));
    };
    match t.error() {
        Some(e) => Err(topic_failure(topic, e)),
        None => Ok(t.partitions().iter().map(|p| p.id()).collect()),
    }
}

/// Delivers `client`'s queued events (errors, and librdkafka's log lines, which it queues) to
/// its [`Reporter`].
fn drain(client: &KafkaConsumer) {
    for _ in 0..10 {
        if client.poll(std::time::Duration::from_millis(10)).is_none() {
            break;
        }
    }
}

/// Whether librdkafka reported a failure that retrying does not mend: authentication, or a
/// TLS handshake.
fn refused_for_good() -> bool {
    LAST_CLIENT_ERROR
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_deref()
        .is_some_and(|e| e.contains("authentication error") || e.contains("SSL handshake failed"))
}

impl ClientContext for Reporter {
    /// librdkafka's own log lines are for debugging (`INLET_LOG=debug`); an error among them
    /// (a failed SASL authentication is logged from its broker thread, before any call
    /// returns) is kept for the command's failure message.
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        use rdkafka::config::RDKafkaLogLevel as L;
        if matches!(level, L::Emerg | L::Alert | L::Critical | L::Error) {
            let mut first = LAST_CLIENT_ERROR.lock().unwrap_or_else(|p| p.into_inner());
            first.get_or_insert_with(|| message.to_string());
        }
        tracing::debug!(target: "librdkafka", ?level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        report(&error, reason);
    }
}

impl ConsumerContext for Reporter {}

/// How long a command waits for a node's answer.
pub const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(clap::Args, Debug, Clone)]
pub struct KafkaArgs {
    /// The node's Kafka listener, HOST:PORT (several comma-separated).
    #[arg(
        long = "bootstrap-server",
        visible_alias = "broker-list",
        env = "INLET_BOOTSTRAP_SERVER",
        default_value = "127.0.0.1:9092"
    )]
    pub bootstrap_server: String,
    /// A file of client properties, KEY=VALUE lines: security.protocol, sasl.mechanism,
    /// sasl.jaas.config, ssl.truststore.location (PEM), or any librdkafka property.
    #[arg(
        long = "command-config",
        env = "INLET_COMMAND_CONFIG",
        value_name = "FILE"
    )]
    pub command_config: Option<PathBuf>,
    /// A client property, KEY=VALUE, after the file's (repeatable).
    #[arg(short = 'X', long = "client-property", value_name = "KEY=VALUE")]
    pub properties: Vec<String>,
}

impl KafkaArgs {
    /// The librdkafka configuration: bootstrap servers, then the file's properties, then `-X`.
    pub fn client_config(&self) -> Result<ClientConfig> {
        let mut pairs = Vec::new();
        if let Some(path) = &self.command_config {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::usage(format!("reading --command-config {}: {e}", path.display()))
            })?;
            pairs.extend(parse_properties(&text));
        }
        for p in &self.properties {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| Failure::usage(format!("-X {p:?}: expected KEY=VALUE")))?;
            pairs.push((k.trim().to_string(), v.trim().to_string()));
        }
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.bootstrap_server)
            .set("client.id", "inlet-cli");
        for (k, v) in pairs {
            for (k, v) in translate(&k, &v)? {
                config.set(k, v);
            }
        }
        Ok(config)
    }
}

/// Java properties text: `key=value` (or `key: value`) lines, `#` and `!` comments.
pub fn parse_properties(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .filter_map(|l| {
            let at = l.find(['=', ':'])?;
            Some((l[..at].trim().to_string(), l[at + 1..].trim().to_string()))
        })
        .collect()
}

/// A Java client property as librdkafka's properties.
fn translate(key: &str, value: &str) -> Result<Vec<(String, String)>> {
    let one = |k: &str, v: &str| Ok(vec![(k.to_string(), v.to_string())]);
    match key {
        "sasl.jaas.config" => {
            let (user, password) = inlet_common::jaas::credentials(value)
                .map_err(|e| Failure::usage(format!("sasl.jaas.config: {e}")))?;
            Ok(vec![
                ("sasl.username".into(), user),
                ("sasl.password".into(), password),
            ])
        }
        "ssl.truststore.location" => one("ssl.ca.location", value),
        "ssl.keystore.location" => Ok(vec![
            ("ssl.certificate.location".into(), value.into()),
            ("ssl.key.location".into(), value.into()),
        ]),
        "ssl.truststore.type" | "ssl.keystore.type" if value.eq_ignore_ascii_case("PEM") => {
            Ok(Vec::new())
        }
        "ssl.truststore.type" | "ssl.keystore.type" => Err(Failure::usage(format!(
            "{key}={value}: only PEM files are read (convert the store with openssl or keytool)"
        ))),
        // Java's "" (no host name check) is librdkafka's "none".
        "ssl.endpoint.identification.algorithm" if value.is_empty() => one(key, "none"),
        _ => one(key, value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_client_properties_become_librdkafkas() {
        let text = "# a comment\nsecurity.protocol=SASL_SSL\nsasl.mechanism = SCRAM-SHA-256\n\
            sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"s3=cret\";\n\
            ssl.truststore.type=PEM\nssl.truststore.location=/ca.pem\nssl.endpoint.identification.algorithm=\n";
        let pairs: Vec<(String, String)> = parse_properties(text)
            .iter()
            .flat_map(|(k, v)| translate(k, v).unwrap())
            .collect();
        let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(get("sasl.mechanism"), Some("SCRAM-SHA-256"));
        assert_eq!(get("sasl.username"), Some("alice"));
        assert_eq!(get("sasl.password"), Some("s3=cret"));
        assert_eq!(get("ssl.ca.location"), Some("/ca.pem"));
        assert_eq!(get("ssl.endpoint.identification.algorithm"), Some("none"));
        assert_eq!(get("ssl.truststore.type"), None);
        let jks = translate("ssl.truststore.type", "JKS").unwrap_err();
        assert_eq!(jks.exit, crate::Exit::Usage);
        assert!(jks.message.contains("only PEM"));
    }
}
