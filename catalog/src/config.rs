//! Which catalog a node's tables live in: the embedded one (the default), an external
//! Iceberg REST catalog, or AWS Glue, and the settings they share (the `[catalog]` section of `inlet.toml`).

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
    /// The AWS Glue Data Catalog: Glue keeps each table's metadata pointer, Inlet writes the
    /// files under `files` and commits by `UpdateTable` with optimistic concurrency.
    Glue,
}

/// Settings of the node's catalog.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CatalogConfig {
    /// `embedded` (default), `rest` or `glue`.
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
    /// Glue: the AWS region. Default: `AWS_REGION`, then `AWS_DEFAULT_REGION`.
    pub region: Option<String>,
    /// Glue: the endpoint URL, for a local Glue such as moto (default: the region's).
    pub endpoint: Option<String>,
    /// Glue: the Data Catalog's id, i.e. the AWS account that owns it (default: the
    /// credentials' own account).
    pub catalog_id: Option<String>,
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
            region: None,
            endpoint: None,
            catalog_id: None,
            files: None,
            metadata_cache_bytes: 8 << 20,
        }
    }
}

impl CatalogConfig {
    /// Checks the settings fit together, saying what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let rest_only = [
            ("uri", self.uri.is_some()),
            ("warehouse", self.warehouse.is_some()),
            ("token", self.token.is_some()),
            ("credential", self.credential.is_some()),
            ("properties", !self.properties.is_empty()),
        ];
        let glue_only = [
            ("region", self.region.is_some()),
            ("endpoint", self.endpoint.is_some()),
            ("catalog_id", self.catalog_id.is_some()),
        ];
        match self.kind {
            CatalogKind::Embedded => {
                for (name, set) in rest_only.iter().chain(&glue_only) {
                    if *set {
                        return Err(format!(
                            "catalog.{name} applies to an external catalog: set catalog.type = \"rest\" or \"glue\""
                        ));
                    }
                }
                if self.files.is_some() {
                    return Err(
                        "catalog.files applies to an external catalog: set catalog.type = \"rest\" or \"glue\""
                            .to_string(),
                    );
                }
            }
            CatalogKind::Rest => {
                if let Some((name, _)) = glue_only.iter().find(|(_, set)| *set) {
                    return Err(format!(
                        "catalog.{name} applies to AWS Glue (catalog.type = \"glue\")"
                    ));
                }
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
            }
            CatalogKind::Glue => {
                if let Some((name, _)) = rest_only.iter().find(|(_, set)| *set) {
                    return Err(format!(
                        "catalog.{name} applies to a REST catalog (catalog.type = \"rest\"); \
                         Glue takes region, endpoint, catalog_id and files, and credentials from \
                         the AWS environment"
                    ));
                }
                if self.region.as_deref().is_some_and(str::is_empty) {
                    return Err("catalog.region must not be empty".to_string());
                }
                if let Some(endpoint) = &self.endpoint {
                    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
                        return Err(format!(
                            "catalog.endpoint must be an http(s) URL, got {endpoint:?}"
                        ));
                    }
                }
            }
        }
        if self.files.as_deref().is_some_and(str::is_empty) {
            return Err("catalog.files must not be empty".to_string());
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

    #[test]
    fn glue_takes_its_own_settings_only() {
        let glue = CatalogConfig {
            kind: CatalogKind::Glue,
            region: Some("eu-west-1".into()),
            endpoint: Some("http://127.0.0.1:5000".into()),
            catalog_id: Some("123456789012".into()),
            files: Some("s3://lake/warehouse".into()),
            ..CatalogConfig::default()
        };
        assert!(glue.validate().is_ok());
        let with_uri = CatalogConfig {
            uri: Some("https://x".into()),
            ..glue.clone()
        };
        assert!(with_uri.validate().unwrap_err().contains("uri"));
        let bad_endpoint = CatalogConfig {
            endpoint: Some("localhost:5000".into()),
            ..glue.clone()
        };
        assert!(bad_endpoint.validate().unwrap_err().contains("endpoint"));
        let embedded = CatalogConfig {
            region: Some("eu-west-1".into()),
            ..CatalogConfig::default()
        };
        assert!(embedded.validate().unwrap_err().contains("glue"));
        let rest = CatalogConfig {
            kind: CatalogKind::Rest,
            uri: Some("https://x".into()),
            catalog_id: Some("1".into()),
            ..CatalogConfig::default()
        };
        assert!(rest.validate().unwrap_err().contains("catalog_id"));
    }
}
