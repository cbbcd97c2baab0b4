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
    /// `oauth2-server-uri`, `header.<name>`, and for AWS's endpoints `rest.sigv4-enabled`,
    /// `rest.signing-name` and `rest.signing-region`, ...
    pub properties: BTreeMap<String, String>,
    /// Glue, and a REST catalog signed with SigV4 (where `rest.signing-region` does not say):
    /// the AWS region. Default: an S3 Tables warehouse ARN's region, then `AWS_REGION`, then
    /// `AWS_DEFAULT_REGION`.
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
            ("endpoint", self.endpoint.is_some()),
            ("catalog_id", self.catalog_id.is_some()),
        ];
        match self.kind {
            CatalogKind::Embedded => {
                let region = [("region", self.region.is_some())];
                for (name, set) in rest_only.iter().chain(&glue_only).chain(&region) {
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
                for key in ["uri", "warehouse", "token", "credential"] {
                    if self.properties.contains_key(key) {
                        return Err(format!(
                            "catalog.properties.{key}: use catalog.{key} instead"
                        ));
                    }
                }
                self.rest_endpoint()?;
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

/// Where an external REST catalog is and how requests to it are authenticated
/// ([`CatalogConfig::rest_endpoint`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestEndpoint {
    /// The base URI, without `/v1`.
    pub uri: String,
    pub auth: RestAuth,
}

/// How requests to an external REST catalog are authenticated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestAuth {
    None,
    /// `catalog.token`, or `catalog.credential` exchanged for one.
    Bearer,
    /// AWS Signature Version 4 for service `name` in `region`.
    SigV4 {
        name: String,
        region: String,
    },
}

/// An S3 Tables table bucket's ARN, `arn:<partition>:s3tables:<region>:<account>:bucket/<name>`:
/// its region.
pub(crate) fn s3_tables_region(warehouse: &str) -> Option<&str> {
    let mut parts = warehouse.splitn(6, ':');
    let (arn, _partition, service, region, _account, resource) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    (arn == "arn" && service == "s3tables" && !region.is_empty() && resource.starts_with("bucket/"))
        .then_some(region)
}

impl CatalogConfig {
    /// The external REST catalog's URI and authentication, as AWS's docs configure Iceberg
    /// clients and Iceberg's own properties say:
    /// - `warehouse` an S3 Tables table bucket's ARN: the URI defaults to that region's S3
    ///   Tables endpoint (`https://s3tables.<region>.amazonaws.com/iceberg`) and requests are
    ///   signed for `s3tables` in that region;
    /// - `rest.sigv4-enabled = "true"`: signed for `rest.signing-name` (default `s3tables` or
    ///   `glue` by the URI's host, else `execute-api`, as Iceberg's Java client) in
    ///   `rest.signing-region` (default `catalog.region`, the ARN's region, then `AWS_REGION`
    ///   and `AWS_DEFAULT_REGION`);
    /// - else `token` or `credential`, or none.
    pub fn rest_endpoint(&self) -> Result<RestEndpoint, String> {
        let arn_region = self.warehouse.as_deref().and_then(s3_tables_region);
        let uri = match (&self.uri, arn_region) {
            (Some(uri), _) => uri.clone(),
            (None, Some(region)) => format!("https://s3tables.{region}.amazonaws.com/iceberg"),
            (None, None) => String::new(),
        };
        if !(uri.starts_with("http://") || uri.starts_with("https://")) {
            return Err(format!(
                "catalog.uri must be the external REST catalog's http(s) URL, got {uri:?}"
            ));
        }
        let sigv4 = match self.properties.get("rest.sigv4-enabled").map(String::as_str) {
            Some("true") => true,
            Some("false") => false,
            Some(other) => {
                return Err(format!(
                    "catalog.properties.\"rest.sigv4-enabled\" must be \"true\" or \"false\", got {other:?}"
                ))
            }
            None => arn_region.is_some() && self.token.is_none() && self.credential.is_none(),
        };
        if !sigv4 {
            if self.token.is_some() && self.credential.is_some() {
                return Err("set catalog.token or catalog.credential, not both".to_string());
            }
            let auth = if self.token.is_some() || self.credential.is_some() {
                RestAuth::Bearer
            } else {
                RestAuth::None
            };
            return Ok(RestEndpoint { uri, auth });
        }
        if self.token.is_some() || self.credential.is_some() {
            return Err(
                "catalog.token and catalog.credential do not go with SigV4 (rest.sigv4-enabled): \
                 requests are signed with the node's AWS credentials"
                    .to_string(),
            );
        }
        let host = uri
            .split_once("://")
            .map_or("", |(_, rest)| rest)
            .split(['/', ':'])
            .next()
            .unwrap_or_default();
        let name = match self.properties.get("rest.signing-name") {
            Some(name) => name.clone(),
            None if arn_region.is_some() || host.starts_with("s3tables.") => "s3tables".into(),
            None if host.starts_with("glue.") => "glue".into(),
            None => "execute-api".into(),
        };
        let region = self
            .properties
            .get("rest.signing-region")
            .cloned()
            .or_else(|| self.region.clone())
            .or_else(|| arn_region.map(str::to_string))
            .or_else(|| std::env::var("AWS_REGION").ok())
            .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
            .filter(|r| !r.is_empty())
            .ok_or_else(|| {
                "SigV4 needs a region: set catalog.region (or rest.signing-region, or AWS_REGION)"
                    .to_string()
            })?;
        Ok(RestEndpoint {
            uri,
            auth: RestAuth::SigV4 { name, region },
        })
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
    fn aws_endpoints_are_signed_as_aws_documents_them() {
        // S3 Tables, configured as AWS's docs configure pyiceberg: the ARN alone.
        let s3_tables = CatalogConfig {
            kind: CatalogKind::Rest,
            warehouse: Some("arn:aws:s3tables:eu-west-1:111122223333:bucket/lake".into()),
            ..CatalogConfig::default()
        };
        assert_eq!(
            s3_tables.rest_endpoint().unwrap(),
            RestEndpoint {
                uri: "https://s3tables.eu-west-1.amazonaws.com/iceberg".into(),
                auth: RestAuth::SigV4 {
                    name: "s3tables".into(),
                    region: "eu-west-1".into()
                },
            }
        );
        assert!(s3_tables.validate().is_ok());
        // Glue's Iceberg REST endpoint, with Iceberg's own property names.
        let glue_rest = CatalogConfig {
            kind: CatalogKind::Rest,
            uri: Some("https://glue.us-east-2.amazonaws.com/iceberg".into()),
            warehouse: Some("111122223333".into()),
            properties: [
                ("rest.sigv4-enabled".to_string(), "true".to_string()),
                ("rest.signing-region".to_string(), "us-east-2".to_string()),
            ]
            .into(),
            ..CatalogConfig::default()
        };
        assert_eq!(
            glue_rest.rest_endpoint().unwrap().auth,
            RestAuth::SigV4 {
                name: "glue".into(),
                region: "us-east-2".into()
            }
        );
        // A signing name given wins; SigV4 turned off leaves no auth.
        let mut named = glue_rest.clone();
        named
            .properties
            .insert("rest.signing-name".into(), "execute-api".into());
        assert!(matches!(
            named.rest_endpoint().unwrap().auth,
            RestAuth::SigV4 { name, .. } if name == "execute-api"
        ));
        let mut off = s3_tables.clone();
        off.uri = Some("http://127.0.0.1:1/iceberg".into());
        off.properties
            .insert("rest.sigv4-enabled".into(), "false".into());
        assert_eq!(off.rest_endpoint().unwrap().auth, RestAuth::None);
        // Refused, each with its reason.
        let mut bad = glue_rest.clone();
        bad.properties
            .insert("rest.sigv4-enabled".into(), "yes".into());
        assert!(bad.validate().unwrap_err().contains("rest.sigv4-enabled"));
        let with_token = CatalogConfig {
            token: Some("t".into()),
            ..glue_rest.clone()
        };
        assert!(with_token.validate().unwrap_err().contains("SigV4"));
        let not_an_arn = CatalogConfig {
            warehouse: Some("arn:aws:s3:::bucket".into()),
            ..s3_tables.clone()
        };
        assert!(not_an_arn.validate().unwrap_err().contains("catalog.uri"));
        assert_eq!(
            s3_tables_region("arn:aws-cn:s3tables:cn-north-1:1:bucket/b"),
            Some("cn-north-1")
        );
        assert_eq!(
            s3_tables_region("arn:aws:s3tables:us-east-1:1:table/b"),
            None
        );
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
