//! Dynamic broker configs as the broker puts them in force (`Broker::reload_configs`, at start
//! and on every topics poll) and changes them (AlterConfigs, IncrementalAlterConfigs of a broker
//! resource); what they are and how they are stored is `dynamic_config`'s.

use std::collections::BTreeMap;

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::dynamic_config::{check_dynamic, load_scope, save_changes, scope_of, Layers};
use crate::error::{KafkaError, Result};

impl Broker {
    /// Reads the dynamic broker configs from the metadata store and puts them in force. When
    /// the topics' defaults changed, the topics' retention follows at once.
    pub async fn reload_configs(&self) -> Result<()> {
        let layers = Layers {
            cluster: load_scope(self.store.meta(), "").await?,
            node: load_scope(self.store.meta(), &self.config().node_id.to_string()).await?,
        };
        let before = self.config();
        if self.config.install(layers) {
            let after = self.config();
            if retention_inputs(&before) != retention_inputs(&after) {
                self.topics.reapply_retention().await?;
            }
        }
        Ok(())
    }

    /// Changes broker resource `resource_name`'s dynamic configs: `change` turns the stored set
    /// into the new one, given the set and the config in force. Checks every changed name and
    /// the composed result before anything is stored; `validate_only` stores nothing.
    pub(crate) async fn alter_broker_configs(
        &self,
        resource_name: &str,
        validate_only: bool,
        change: impl FnOnce(&mut BTreeMap<String, String>, &BrokerConfig) -> Result<()>,
    ) -> Result<()> {
        let scope = scope_of(resource_name)?;
        let meta = self.store.meta();
        let before = load_scope(meta, &scope).await?;
        let mut after = before.clone();
        change(&mut after, &self.config())?;
        for (name, value) in &after {
            if before.get(name) != Some(value) {
                check_dynamic(name)?;
            }
        }
        for name in before.keys().filter(|k| !after.contains_key(*k)) {
            check_dynamic(name)?;
        }
        let mut layers = self.config.layers();
        if scope.is_empty() {
            layers.cluster = after.clone();
        } else if scope == self.config().node_id.to_string() {
            layers.node = after.clone();
        } else {
            // Another node's own set: check it over this node's static config, the nearest
            // this node can come to that node's.
            layers.node = after.clone();
        }
        self.config
            .check(&layers)
            .map_err(KafkaError::invalid_config)?;
        if validate_only {
            return Ok(());
        }
        save_changes(meta, &scope, &before, &after).await?;
        self.reload_configs().await
    }
}

/// What the topics' stream retention is derived from in a broker config.
fn retention_inputs(config: &BrokerConfig) -> (i64, i64, Option<String>) {
    (
        config.log_retention_ms,
        config.log_retention_bytes,
        config
            .topic_defaults
            .get("cleanup.policy")
            .map(str::to_string),
    )
}
