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
    /// How requests prove who they are: `none` (the API is open) or `basic` (HTTP basic auth
    /// with a Kafka user's password, as Confluent's clients send `basic.auth.user.info`;
    /// operations are then authorized by the Kafka ACLs of the subjects' topics).
    pub authentication: String,
    /// How long a verified `Authorization` header is trusted without checking the password
    /// again, in milliseconds (0: every request is checked; a check costs a PBKDF2 of the
    /// credential's iterations).
    pub auth_cache_ttl_ms: u64,
    /// Memory the verified headers may use, in bytes.
    pub auth_cache_max_bytes: usize,
    /// A PEM file with the private key and the certificate chain: the node serves the
    /// registry over HTTPS (reloaded when the file changes). None: plain HTTP.
    pub tls_keystore: Option<std::path::PathBuf>,
    /// A PEM file of the CAs client certificates must chain to (mTLS, with
    /// `tls_client_auth`).
    pub tls_truststore: Option<std::path::PathBuf>,
    /// Kafka's `ssl.client.auth` for the registry's listener: `none` (the default),
    /// `requested` or `required`. A verified certificate authenticates a request that has no
    /// `Authorization` header, as `User:<its subject's DN>`.
    pub tls_client_auth: String,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            cache_max_schemas: 10_000,
            cache_max_bytes: 64 << 20,
            max_schema_bytes: 1 << 20,
            unknown_id_ttl_ms: 1_000,
            unknown_id_max_entries: 4_096,
            authentication: "none".into(),
            auth_cache_ttl_ms: 1_000,
            auth_cache_max_bytes: 1 << 20,
            tls_keystore: None,
            tls_truststore: None,
            tls_client_auth: "none".into(),
        }
    }
}

impl RegistryConfig {
    /// Whether requests must authenticate.
    pub fn authenticates(&self) -> bool {
        self.authentication == "basic"
    }

    /// Rejects settings that cannot work.
    pub fn validate(&self) -> Result<()> {
        if self.max_schema_bytes == 0 {
            return Err(Error::Config("max_schema_bytes must be positive".into()));
        }
        if !matches!(self.authentication.as_str(), "none" | "basic") {
            return Err(Error::Config(format!(
                "authentication {:?} is not one of none, basic",
                self.authentication
            )));
        }
        Ok(())
    }
}
