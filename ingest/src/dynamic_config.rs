//! Dynamic broker configs (Kafka's KIP-226): broker configs changed while nodes run, through
//! AlterConfigs and IncrementalAlterConfigs on the broker resource, for the whole cluster
//! (resource name `""`, Kafka's cluster-wide default) or for one node (its node id). They live
//! in the metadata store (`inlet_broker_configs`), so they survive restarts and reach every
//! node: a node reads them when it opens, after each change it makes, and, in a cluster, on
//! every topics poll (`cluster/src/node.rs`), so a change made through any node holds on every
//! node within about a second.
//!
//! What may change ([`check_dynamic`]): the settings of [`DYNAMIC_SETTINGS`] (each read where
//! it is used, not copied when the node starts), topic-config defaults other than
//! `table.topic.*` (by the topic config's name or Kafka's `log.*` synonym; existing topics
//! without their own value follow), and the Kafka names kept without effect
//! ([`crate::config::KEPT_WITHOUT_EFFECT`]). Every other broker config is static (flags and
//! the config file) and a change to it is refused with the reason, as Kafka refuses its
//! read-only configs.
//!
//! Precedence, as in Kafka: a node's own dynamic value, then the cluster-wide one, then the
//! node's static config, then the default.
//!
//! Invariant: [`LiveConfig::current`] is always the static config with the stored layers
//! applied over it, cluster-wide first, each stored value checked as a static one is; a stored
//! value that does not pass (one written by another version) is skipped with a warning, never
//! half-applied.

use std::collections::BTreeMap;
use std::sync::Arc;

use inlet_storage::MetaStore;
use kafka_protocol::ResponseError;
use parking_lot::RwLock;
use sqlx::Row;

use crate::config::{self, BrokerConfig, KEPT_WITHOUT_EFFECT};
use crate::error::{KafkaError, Result};
use crate::topic_config;

pub(crate) const MIGRATIONS: &[&str] = &["CREATE TABLE inlet_broker_configs (
        scope VARCHAR(16) NOT NULL,
        name VARCHAR(255) NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (scope, name))"];

/// Inlet's broker settings that may change while nodes run (by their names in
/// [`crate::config::SETTINGS`]; `log.retention.hours` and `.minutes` set the first). Each is
/// read from [`LiveConfig::current`] where it is used.
pub const DYNAMIC_SETTINGS: &[&str] = &[
    "log.retention.ms",
    "log.retention.bytes",
    "message.max.bytes",
    "max.connections",
    "max.connections.per.ip",
    "producer.id.expiration.ms",
    "log.cleaner.backoff.ms",
    "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.max.bytes.per.second",
    "inlet.log.cleaner.rewrite.max.bytes",
];

/// Where a broker config's value comes from, as DescribeConfigs reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BrokerSource {
    /// This node's own dynamic value (`DYNAMIC_BROKER_CONFIG`).
    Node,
    /// The cluster-wide dynamic value (`DYNAMIC_DEFAULT_BROKER_CONFIG`).
    Cluster,
    /// The node's flags or config file (`STATIC_BROKER_CONFIG`).
    Static,
    /// Nobody set it (`DEFAULT_CONFIG`).
    Default,
}

/// The stored dynamic configs that apply to one node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Layers {
    /// Cluster-wide (scope `""`).
    pub(crate) cluster: BTreeMap<String, String>,
    /// This node's own (scope: its node id).
    pub(crate) node: BTreeMap<String, String>,
}

/// A node's broker config as it stands: the static config with the dynamic layers over it.
pub struct LiveConfig {
    base: BrokerConfig,
    state: RwLock<(Layers, Arc<BrokerConfig>)>,
}

impl std::fmt::Debug for LiveConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveConfig")
            .field("layers", &self.state.read().0)
            .finish_non_exhaustive()
    }
}

impl LiveConfig {
    /// The static config, with no dynamic layer yet.
    pub fn new(base: BrokerConfig) -> Self {
        let current = Arc::new(base.clone());
        LiveConfig {
            base,
            state: RwLock::new((Layers::default(), current)),
        }
    }

    /// The config in force now.
    pub fn current(&self) -> Arc<BrokerConfig> {
        self.state.read().1.clone()
    }

    pub(crate) fn layers(&self) -> Layers {
        self.state.read().0.clone()
    }

    /// Puts `layers` in force; returns whether anything changed.
    pub(crate) fn install(&self, layers: Layers) -> bool {
        if self.state.read().0 == layers {
            return false;
        }
        let composed = compose(&self.base, &layers, false).unwrap_or_else(|_| self.base.clone());
        *self.state.write() = (layers, Arc::new(composed));
        true
    }

    /// Where the value of DescribeConfigs' entry `entry` comes from.
    pub(crate) fn source_of(&self, entry: &str) -> BrokerSource {
        let sets = |map: &BTreeMap<String, String>| {
            map.keys()
                .any(|k| k == entry || config::described_as(k) == Some(entry))
        };
        let state = self.state.read();
        if sets(&state.0.node) {
            BrokerSource::Node
        } else if sets(&state.0.cluster) {
            BrokerSource::Cluster
        } else if sets(&self.base.given) {
            BrokerSource::Static
        } else {
            BrokerSource::Default
        }
    }

    /// Checks that `layers` would compose cleanly over this node's static config.
    pub(crate) fn check(&self, layers: &Layers) -> std::result::Result<(), String> {
        compose(&self.base, layers, true).map(drop)
    }
}

/// `base` with `layers` applied over it, cluster-wide first. `strict` fails on the first value
/// that does not apply; otherwise such a value is skipped with a warning.
fn compose(
    base: &BrokerConfig,
    layers: &Layers,
    strict: bool,
) -> std::result::Result<BrokerConfig, String> {
    let mut config = base.clone();
    for layer in [&layers.cluster, &layers.node] {
        for (key, value) in layer {
            let mut next = config.clone();
            let one = BTreeMap::from([(key.clone(), value.clone())]);
            match next.apply_named(&one, "") {
                Ok(()) => config = next,
                Err(e) if strict => return Err(e),
                Err(e) => {
                    tracing::warn!(error = %e, "a stored dynamic broker config does not apply; skipped")
                }
            }
        }
    }
    Ok(config)
}

/// Whether broker config `key` may change while nodes run, or why not.
pub(crate) fn check_dynamic(key: &str) -> Result<()> {
    let refuse = |why: String| Err(KafkaError::new(ResponseError::InvalidRequest, why));
    if let Some(setting) = config::setting_set_by(key) {
        if DYNAMIC_SETTINGS.contains(&setting) {
            return Ok(());
        }
        return refuse(format!(
            "{key} cannot be changed while nodes run: set it with --kafka-config {key}=VALUE (or the config file) and restart"
        ));
    }
    if KEPT_WITHOUT_EFFECT.contains(&key) {
        return Ok(());
    }
    if matches!(
        key,
        "authorizer.class.name"
            | "super.users"
            | "sasl.enabled.mechanisms"
            | "listeners"
            | "advertised.listeners"
            | "listener.security.protocol.map"
    ) || key.starts_with("ssl.")
        || key.starts_with("sasl.oauthbearer.")
        || key.starts_with("listener.name.")
    {
        return refuse(format!(
            "{key} cannot be changed while nodes run: set it with --kafka-config (or the config file) and restart (a TLS listener reads its PEM files again by itself when they change)"
        ));
    }
    match config::topic_default_set_by(key) {
        Some(name) if topic_config::is_table_config(name) => refuse(format!(
            "{key} cannot be changed while nodes run: table.topic.* defaults decide what every table topic is, so they are set with --kafka-config (or the config file); set a topic's own with AlterConfigs on the topic"
        )),
        Some(_) => Ok(()),
        None if key == "broker.id" => refuse("broker.id is read-only".into()),
        None => Err(KafkaError::invalid_config(format!(
            "unknown broker config {key:?}"
        ))),
    }
}

/// The scope a broker resource name stands for: `""` (cluster-wide) or a node id.
pub(crate) fn scope_of(resource_name: &str) -> Result<String> {
    if resource_name.is_empty() {
        return Ok(String::new());
    }
    match resource_name.parse::<i32>() {
        Ok(id) if id >= 0 => Ok(id.to_string()),
        _ => Err(KafkaError::new(
            ResponseError::InvalidRequest,
            format!("broker resource {resource_name:?} is neither a node id nor \"\" (the cluster-wide default)"),
        )),
    }
}

/// The dynamic configs stored for `scope`.
pub(crate) async fn load_scope(meta: &MetaStore, scope: &str) -> Result<BTreeMap<String, String>> {
    let rows = inlet_storage::bounded(async {
        sqlx::query("SELECT name, value FROM inlet_broker_configs WHERE scope = $1")
            .bind(scope)
            .fetch_all(meta.pool())
            .await
            .map_err(inlet_storage::Error::from)
    })
    .await?;
    let mut out = BTreeMap::new();
    for row in rows {
        let name: String = row.try_get(0).map_err(inlet_storage::Error::from)?;
        let value: String = row.try_get(1).map_err(inlet_storage::Error::from)?;
        out.insert(name, value);
    }
    Ok(out)
}

/// Writes the changes from `before` to `after` to `scope`'s rows: one row per changed name,
/// so concurrent changes of other names through other nodes are kept.
pub(crate) async fn save_changes(
    meta: &MetaStore,
    scope: &str,
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Result<()> {
    let mut tx = meta
        .pool()
        .begin()
        .await
        .map_err(inlet_storage::Error::from)?;
    for name in before.keys().filter(|k| !after.contains_key(*k)) {
        sqlx::query("DELETE FROM inlet_broker_configs WHERE scope = $1 AND name = $2")
            .bind(scope)
            .bind(name)
            .execute(&mut *tx)
            .await
            .map_err(inlet_storage::Error::from)?;
    }
    for (name, value) in after {
        if before.get(name) == Some(value) {
            continue;
        }
        sqlx::query(
            "INSERT INTO inlet_broker_configs (scope, name, value) VALUES ($1, $2, $3)
             ON CONFLICT (scope, name) DO UPDATE SET value = excluded.value",
        )
        .bind(scope)
        .bind(name)
        .bind(value)
        .execute(&mut *tx)
        .await
        .map_err(inlet_storage::Error::from)?;
    }
    tx.commit().await.map_err(inlet_storage::Error::from)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn base(pairs: &[(&str, &str)]) -> BrokerConfig {
        let mut config = BrokerConfig::default();
        config.apply_kafka_configs(&map(pairs)).expect("valid");
        config
    }

    #[test]
    fn a_node_value_beats_the_cluster_value_which_beats_the_static_one() {
        let live = LiveConfig::new(base(&[
            ("message.max.bytes", "5000"),
            ("num.partitions", "3"),
        ]));
        assert_eq!(live.current().message_max_bytes, 5000);
        assert_eq!(live.source_of("message.max.bytes"), BrokerSource::Static);
        assert_eq!(live.source_of("log.retention.ms"), BrokerSource::Default);
        assert!(live.install(Layers {
            cluster: map(&[("message.max.bytes", "6000"), ("log.retention.hours", "2")]),
            node: BTreeMap::new(),
        }));
        assert_eq!(live.current().message_max_bytes, 6000);
        assert_eq!(live.current().log_retention_ms, 7_200_000);
        assert_eq!(live.source_of("log.retention.ms"), BrokerSource::Cluster);
        live.install(Layers {
            cluster: map(&[("message.max.bytes", "6000")]),
            node: map(&[("message.max.bytes", "7000")]),
        });
        assert_eq!(live.current().message_max_bytes, 7000);
        assert_eq!(live.source_of("message.max.bytes"), BrokerSource::Node);
        // Dropping the layers gives the static values back, not the last dynamic ones.
        live.install(Layers::default());
        assert_eq!(live.current().message_max_bytes, 5000);
        assert_eq!(live.current().log_retention_ms, 7 * 24 * 3_600_000);
        assert_eq!(live.current().num_partitions, 3);
    }

    #[test]
    fn log_synonyms_set_topic_defaults_and_kept_names_are_reported() {
        let live = LiveConfig::new(BrokerConfig::default());
        live.install(Layers {
            cluster: map(&[
                ("log.cleanup.policy", "delete,compact"),
                ("sasl.kerberos.min.time.before.relogin", "58000"),
            ]),
            node: BTreeMap::new(),
        });
        let current = live.current();
        assert_eq!(
            current.topic_defaults.get("cleanup.policy"),
            Some("delete,compact")
        );
        assert_eq!(live.source_of("cleanup.policy"), BrokerSource::Cluster);
        assert!(current.describe().iter().any(|(n, v, default)| n
            == "sasl.kerberos.min.time.before.relogin"
            && v == "58000"
            && !default));
    }

    #[test]
    fn a_stored_value_that_does_not_apply_is_skipped_and_the_rest_hold() {
        let live = LiveConfig::new(BrokerConfig::default());
        let layers = Layers {
            cluster: map(&[("message.max.bytes", "nope"), ("log.retention.ms", "1000")]),
            node: BTreeMap::new(),
        };
        assert!(live.check(&layers).is_err());
        live.install(layers);
        assert_eq!(live.current().log_retention_ms, 1000);
        assert_eq!(live.current().message_max_bytes, 1_048_588);
    }

    #[test]
    fn static_settings_and_table_defaults_are_refused_with_the_reason() {
        for key in [
            "log.retention.ms",
            "log.retention.hours",
            "log.cleanup.policy",
            "cleanup.policy",
            "background.threads",
            "message.max.bytes",
        ] {
            assert!(check_dynamic(key).is_ok(), "{key}");
        }
        let reason = |key: &str| check_dynamic(key).err().map(|e| (e.code(), e.message));
        let (code, why) = reason("num.partitions").expect("static");
        assert_eq!(code, ResponseError::InvalidRequest.code());
        assert!(why.contains("--kafka-config num.partitions=VALUE"), "{why}");
        let (_, why) = reason("table.topic.enable").expect("static");
        assert!(why.contains("table.topic.* defaults"), "{why}");
        let (code, _) = reason("no.such.config").expect("unknown");
        assert_eq!(code, ResponseError::InvalidConfig.code());
        assert!(scope_of("").is_ok_and(|s| s.is_empty()));
        assert!(scope_of("3").is_ok_and(|s| s == "3"));
        assert!(scope_of("-1").is_err() && scope_of("x").is_err());
    }
}
