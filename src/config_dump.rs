//! `inlet config dump`: the effective configuration of a node, each setting with where its
//! value came from (docs/architecture.md, "Configuration").
//!
//! The output is TOML (one dotted key a line, the source in a comment), so it can be saved and
//! used as a config file. Sources, from weakest to strongest: the default, the config file,
//! an `INLET_*` environment variable, a command-line flag.
//!
//! Secrets are never printed ([`redact`]): a setting named like one (`…password…`, `…secret…`,
//! `…token`, `…credential…`, `sasl.jaas.config`) shows `<redacted>`, and a URL's password
//! (`postgres://user:…@host`) shows as `REDACTED`.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::config::NodeConfig;

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    /// The config file (`--config`).
    File,
    /// This environment variable.
    Env(String),
    /// This command-line flag.
    Flag(String),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File => f.write_str("file"),
            Source::Env(name) => write!(f, "env {name}"),
            Source::Flag(name) => write!(f, "flag {name}"),
        }
    }
}

/// A setting's place in the config: its keys from the top (`["storage", "retry",
/// "max_attempts"]`, `["kafka", "log.retention.ms"]`).
pub type KeyPath = Vec<String>;

/// Every setting of `config`, a line each: `key = value  # source`. `file` is the config
/// file's table as written (None: no file); `overrides` the settings that flags and
/// environment variables set, with their source. Settings that are unset show what they
/// default to, as a comment.
pub fn dump(
    config: &NodeConfig,
    file: Option<&toml::Table>,
    overrides: &BTreeMap<KeyPath, Source>,
) -> anyhow::Result<String> {
    let toml::Value::Table(table) = toml::Value::try_from(config)? else {
        anyhow::bail!("the configuration is not a TOML table");
    };
    let mut leaves = Vec::new();
    walk(&mut Vec::new(), &table, &mut leaves);
    let source = |path: &KeyPath| {
        if let Some(s) = overrides.get(path) {
            return s.clone();
        }
        let mut at = file.map(|t| t as &toml::Table);
        for (i, key) in path.iter().enumerate() {
            let Some(t) = at else { break };
            match t.get(key) {
                Some(toml::Value::Table(inner)) if i + 1 < path.len() => at = Some(inner),
                Some(_) if i + 1 == path.len() => return Source::File,
                _ => break,
            }
        }
        Source::Default
    };
    let mut out = String::new();
    for (path, value) in &leaves {
        let key = path
            .iter()
            .map(|k| quote_key(k))
            .collect::<Vec<_>>()
            .join(".");
        writeln!(out, "{key} = {}  # {}", redact(path, value), source(path))?;
    }
    // Unset options, with what they mean.
    for (name, set, meaning) in [
        (
            "advertised_host",
            config.advertised_host.is_some(),
            "the Kafka listener's host (127.0.0.1 when it listens on 0.0.0.0)".to_string(),
        ),
        (
            "object_store",
            config.object_store.is_some(),
            config.object_store_url(),
        ),
        (
            "meta",
            config.meta.is_some(),
            redact_url(&config.meta_url()),
        ),
        (
            "storage.wal",
            config.storage.wal.is_some(),
            match config.wal_kind() {
                inlet_storage::WalKind::Object => {
                    "\"object\" (a PostgreSQL metadata store: a cluster)".to_string()
                }
                inlet_storage::WalKind::Local => {
                    "\"local\" (an SQLite metadata store: one node)".to_string()
                }
            },
        ),
    ] {
        if !set {
            writeln!(out, "# {name} is unset: {meaning}  # default")?;
        }
    }
    // Broker configs not given, with their defaults and meanings.
    for s in inlet_ingest::config::SETTINGS {
        let given = config
            .kafka
            .keys()
            .any(|k| inlet_ingest::config::setting_set_by(k) == Some(s.name));
        if !given {
            let key = format!("kafka.{}", quote_key(s.name));
            let value = toml::Value::String(s.default_value());
            writeln!(out, "# {key} = {value}  # default: {}", s.doc)?;
        }
    }
    Ok(out)
}

/// What the dump shows for `value` at `path`: `<redacted>` for a secret (by its key's name),
/// a URL with its password redacted, else `value`.
pub fn redact(path: &KeyPath, value: &toml::Value) -> toml::Value {
    const REDACTED: &str = "<redacted>";
    let key = path
        .last()
        .map(|k| k.to_ascii_lowercase())
        .unwrap_or_default();
    let secret = ["password", "secret", "credential"]
        .iter()
        .any(|s| key.contains(s))
        || key.ends_with("token")
        || key == "sasl.jaas.config";
    match value {
        _ if secret => toml::Value::String(REDACTED.into()),
        toml::Value::String(s) => toml::Value::String(redact_url(s)),
        toml::Value::Array(items) => {
            toml::Value::Array(items.iter().map(|v| redact(path, v)).collect())
        }
        other => other.clone(),
    }
}

/// `text` with the password of a URL in it (`scheme://user:password@host…`) replaced.
fn redact_url(text: &str) -> String {
    match url::Url::parse(text) {
        Ok(mut u) if u.password().is_some() => {
            // Only a URL that can hold a password gets here, so setting one cannot fail.
            let _ = u.set_password(Some("REDACTED"));
            u.to_string()
        }
        _ => text.to_string(),
    }
}

/// The leaves of `table` below `path`, in order: every value that is not a table (arrays are
/// leaves).
fn walk(path: &mut KeyPath, table: &toml::Table, out: &mut Vec<(KeyPath, toml::Value)>) {
    for (key, value) in table {
        path.push(key.clone());
        match value {
            toml::Value::Table(inner) => walk(path, inner, out),
            leaf => out.push((path.clone(), leaf.clone())),
        }
        path.pop();
    }
}

/// `key` as a TOML key: bare when it can be, else a quoted string.
fn quote_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare {
        key.to_string()
    } else {
        toml::Value::String(key.to_string()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_says_where_its_value_came_from_and_the_output_reads_back() {
        let file: toml::Table = toml::from_str(
            "node_id = 7\n[storage]\nupload_interval_ms = 2000\n[kafka]\n\"log.retention.ms\" = \"60000\"\n",
        )
        .expect("file");
        let mut config: NodeConfig =
            toml::from_str(&toml::to_string(&file).expect("text")).expect("config");
        config.http_listen = "127.0.0.1:18181".into();
        config.kafka_listen = "127.0.0.1:19092".into();
        let overrides = BTreeMap::from([
            (
                vec!["http_listen".to_string()],
                Source::Env("INLET_HTTP_LISTEN".into()),
            ),
            (
                vec!["kafka_listen".to_string()],
                Source::Flag("--kafka-listen".into()),
            ),
        ]);
        let out = dump(&config, Some(&file), &overrides).expect("dump");
        let line = |key: &str| {
            out.lines()
                .find(|l| l.starts_with(&format!("{key} = ")))
                .unwrap_or_else(|| panic!("no {key} in\n{out}"))
                .to_string()
        };
        assert_eq!(line("node_id"), "node_id = 7  # file");
        assert_eq!(
            line("storage.upload_interval_ms"),
            "storage.upload_interval_ms = 2000  # file"
        );
        assert_eq!(
            line("kafka.\"log.retention.ms\""),
            "kafka.\"log.retention.ms\" = \"60000\"  # file"
        );
        assert_eq!(
            line("http_listen"),
            "http_listen = \"127.0.0.1:18181\"  # env INLET_HTTP_LISTEN"
        );
        assert_eq!(
            line("kafka_listen"),
            "kafka_listen = \"127.0.0.1:19092\"  # flag --kafka-listen"
        );
        assert!(line("storage.retry.max_attempts").ends_with("# default"));
        assert!(
            out.contains("# object_store is unset: inlet-data/objects"),
            "{out}"
        );
        assert!(
            out.contains("# storage.wal is unset: \"local\""),
            "the WAL the node picks is shown: {out}"
        );
        // A broker config not given shows its default, commented out, with its meaning; a
        // given one does not repeat as a default.
        assert!(
            out.lines()
                .any(|l| l
                    .starts_with("# kafka.\"num.partitions\" = \"1\"  # default: Partitions of")),
            "{out}"
        );
        assert!(!out.contains("# kafka.\"log.retention.ms\""), "{out}");
        // Secrets are not printed.
        let mut secret = config.clone();
        secret.meta = Some("postgres://inlet:hunter2@db:5432/inlet".into());
        secret.catalog.token = Some("t0ken".into());
        secret.catalog.credential = Some("client:s3cret".into());
        secret.kafka.insert(
            "listener.name.sasl_ssl.ssl.key.password".into(),
            "k3y".into(),
        );
        let shown = dump(&secret, None, &BTreeMap::new()).expect("dump");
        for leaked in ["hunter2", "t0ken", "s3cret", "k3y"] {
            assert!(!shown.contains(leaked), "{leaked} in\n{shown}");
        }
        assert!(
            shown.contains("meta = \"postgres://inlet:REDACTED@db:5432/inlet\""),
            "{shown}"
        );
        assert!(shown.contains("http.token_ttl_s = 3600"), "{shown}");
        // Read back as a config file, it is the same configuration.
        let again: NodeConfig = toml::from_str(&out).expect("the dump parses as a config");
        assert_eq!(again, config);
    }
}
