//! Which catalog a node's tables live in: the embedded one (the default) or an external
//! Iceberg REST catalog, and the settings both share (the `[catalog]` section of `inlet.toml`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The kinds of catalog a node can commit its tables to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CatalogKind {
    /// The SQL catalog on the node's metadata database, served at `/iceberg`.
    #[default]
    Embedded,
    /// Another Iceberg REST catalog (Polaris, Nessie, Lakekeeper, Unity, S3 Tables, another
    /// Inlet node's `/iceberg`).
    Rest,
}

/// Settings of the node's catalog.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CatalogConfig {
    /// `embedded` (default) or `rest`.
    #[serde(rename = "type")]
    pub kind: CatalogKind,
    /// The external REST catalog's base URI, without `/v1` (e.g. `https://host/api/catalog`).
    /// Required with `type = "rest"`.
    pub uri: Option<String>,
    /// The warehouse to ask the external catalog for (its `warehouse` property: a name or a
    /// location, as that catalog expects).
    pub warehouse: Option<String>,
    /// A bearer token for the external catalog.
    pub token: Option<String>,
    /// OAuth2 client credentials for the external catalog, `client_id:client_secret` (or only
    /// the secret): exchanged for a token at its `/v1/oauth/tokens` (or `oauth2-server-uri`).
    pub credential: Option<String>,
    /// More REST client properties, by their Iceberg names: `prefix`, `scope`,
    /// `oauth2-server-uri`, `header.<name>`, ...
    pub properties: BTreeMap<String, String>,
    /// Where the external catalog keeps its tables, as an object store URL
    /// (`s3://bucket/warehouse`, `file:///path`): Inlet writes its data files, manifests and
    /// manifest lists there, and every table location the catalog chooses must lie under it.
    /// Default: the node's object store (`--object-store`), through the node's client.
    pub files: Option<String>,
    /// Bytes of parsed table metadata the embedded catalog keeps, by metadata location, so
    /// that loading a table with many snapshots does not parse its `metadata.json` again.
    /// 0 turns the cache off.
    pub metadata_cache_bytes: usize,
}

impl Default for CatalogConfig {
    fn default() -> Self {
        CatalogConfig {
            kind: CatalogKind::Embedded,
            uri: None,
            warehouse: None,
            token: None,
            credential: None,
            properties: BTreeMap::new(),
            files: None,
            metadata_cache_bytes: 8 << 20,
        }
    }
}

impl CatalogConfig {
    /// Checks the settings fit together, saying what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        match self.kind {
            CatalogKind::Embedded => {
                for (name, set) in [
                    ("uri", self.uri.is_some()),
                    ("warehouse", self.warehouse.is_some()),
                    ("token", self.token.is_some()),
                    ("credential", self.credential.is_some()),
                    ("files", self.files.is_some()),
                    ("properties", !self.properties.is_empty()),
                ] {
                    if set {
                        return Err(format!(
                            "catalog.{name} applies to an external catalog: set catalog.type = \"rest\""
                        ));
                    }
                }
            }
            CatalogKind::Rest => {
                let uri = self.uri.as_deref().unwrap_or_default();
                if !(uri.starts_with("http://") || uri.starts_with("https://")) {
                    return Err(format!(
                        "catalog.uri must be the external REST catalog's http(s) URL, got {uri:?}"
                    ));
                }
                if self.token.is_some() && self.credential.is_some() {
                    return Err("set catalog.token or catalog.credential, not both".to_string());
                }
                for key in ["uri", "warehouse", "token", "credential"] {
                    if self.properties.contains_key(key) {
                        return Err(format!(
                            "catalog.properties.{key}: use catalog.{key} instead"
                        ));
                    }
                }
                if self.files.as_deref().is_some_and(str::is_empty) {
                    return Err("catalog.files must not be empty".to_string());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_settings_need_a_rest_catalog_and_a_uri() {
        assert!(CatalogConfig::default().validate().is_ok());
        let stray = CatalogConfig {
            uri: Some("http://x".into()),
            ..CatalogConfig::default()
        };
        assert!(stray.validate().unwrap_err().contains("type"));
        let rest = CatalogConfig {
            kind: CatalogKind::Rest,
            ..CatalogConfig::default()
        };
        assert!(rest.validate().unwrap_err().contains("uri"));
        let rest = CatalogConfig {
            uri: Some("https://catalog.example/api".into()),
            ..rest
        };
        assert!(rest.validate().is_ok());
        let both = CatalogConfig {
            token: Some("t".into()),
            credential: Some("c".into()),
            ..rest
        };
        assert!(both.validate().is_err());
    }
}
