//! Settings of the registry.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Settings of the registry; every field has its default in [`Default`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegistryConfig {
    /// How many parsed schemas the by-id cache keeps.
    pub cache_max_schemas: usize,
    /// Estimated memory the by-id cache may use, in bytes.
    pub cache_max_bytes: usize,
    /// Largest schema text accepted at registration, in bytes.
    pub max_schema_bytes: usize,
    /// How long an id found unknown is answered as unknown without asking the store again, in
    /// milliseconds (0: never cached). Ids registered on this node are forgotten at once.
    pub unknown_id_ttl_ms: u64,
    /// How many unknown ids are remembered at once.
    pub unknown_id_max_entries: usize,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            cache_max_schemas: 10_000,
            cache_max_bytes: 64 << 20,
            max_schema_bytes: 1 << 20,
            unknown_id_ttl_ms: 1_000,
            unknown_id_max_entries: 4_096,
        }
    }
}

impl RegistryConfig {
    /// Rejects settings that cannot work.
    pub fn validate(&self) -> Result<()> {
        if self.max_schema_bytes == 0 {
            return Err(Error::Config("max_schema_bytes must be positive".into()));
        }
        Ok(())
    }
}
