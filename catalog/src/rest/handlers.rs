//! What the route handlers share: their state, the extractors that turn paths, queries and
//! bodies into checked identifiers and typed requests (answering 400 in the spec's error form
//! otherwise), paging, and the config and fallback routes. The namespace and table routes are
//! in `namespaces` and `tables`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use iceberg::spec::FormatVersion;
use iceberg::table::Table;
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use iceberg_catalog_rest::LoadTableResult;
use serde::de::DeserializeOwned;

use super::commit::MetadataPointerStore;
use super::error::{RestError, Result};
use super::model::ConfigResponse;
use super::names::{check_location, check_name, parse_namespace, NameKind, MAX_NAME_BYTES};
use super::RestConfig;
use crate::external::RestClient;

/// Namespace property that sets where the namespace's tables go (the SQL catalog's rule too).
pub(super) const LOCATION_PROPERTY: &str = "location";
/// Longest namespace property value the SQL catalog stores.
const MAX_PROPERTY_VALUE_BYTES: usize = 1000;

/// What every handler shares.
#[derive(Clone, Debug)]
pub(super) struct AppState {
    pub catalog: Arc<dyn Catalog>,
    pub pointers: Option<Arc<dyn MetadataPointerStore>>,
    /// Table commits go to this external catalog as they are (see [`super::router_forwarding`]).
    pub forward: Option<Arc<RestClient>>,
    pub config: Arc<RestConfig>,
}

impl AppState {
    pub(super) fn pointers(&self) -> Result<&dyn MetadataPointerStore> {
        self.pointers.as_deref().ok_or_else(|| {
            RestError::NotImplemented(
                "this server has no metadata pointer store, so it cannot commit table changes"
                    .to_string(),
            )
        })
    }

    pub(super) fn load_result(&self, table: &Table) -> LoadTableResult {
        LoadTableResult {
            metadata_location: table.metadata_location().map(str::to_string),
            metadata: table.metadata().clone(),
            config: self.table_config(),
            storage_credentials: None,
        }
    }

    pub(super) fn table_config(&self) -> HashMap<String, String> {
        self.config
            .table_config
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Extractors

/// A namespace from the `{namespace}` path segment, checked.
pub(super) struct NamespacePath(pub NamespaceIdent);

impl<S: Send + Sync> FromRequestParts<S> for NamespacePath {
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self> {
        let Path(segments) = Path::<Vec<String>>::from_request_parts(parts, state)
            .await
            .map_err(|e| RestError::BadRequest(format!("invalid path: {e}")))?;
        let encoded = segments
            .first()
            .ok_or_else(|| RestError::BadRequest("missing namespace in path".to_string()))?;
        Ok(Self(parse_namespace(encoded)?))
    }
}

/// A table from the `{namespace}/tables/{table}` path segments, checked.
pub(super) struct TablePath(pub TableIdent);

impl<S: Send + Sync> FromRequestParts<S> for TablePath {
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self> {
        let Path((namespace, table)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|e| RestError::BadRequest(format!("invalid path: {e}")))?;
        let namespace = parse_namespace(&namespace)?;
        check_name(NameKind::Table, &table)?;
        Ok(Self(TableIdent::new(namespace, table)))
    }
}

/// Query parameters as a map; bad encoding is a 400.
pub(super) struct Params(pub HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self> {
        let Query(map) = Query::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|e| RestError::BadRequest(format!("invalid query: {e}")))?;
        Ok(Self(map))
    }
}

impl Params {
    pub(super) fn bool(&self, name: &str) -> Result<bool> {
        match self.0.get(name).map(|v| v.to_ascii_lowercase()) {
            None => Ok(false),
            Some(v) if v == "true" => Ok(true),
            Some(v) if v == "false" || v.is_empty() => Ok(false),
            Some(v) => Err(RestError::BadRequest(format!(
                "query parameter {name} must be true or false, not {v:?}"
            ))),
        }
    }
}

/// A JSON body of type `T`. Unlike `axum::Json` it needs no content type and answers bad JSON
/// with the spec's 400 (and an oversized body with 413).
pub(super) struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = RestError;

    async fn from_request(req: Request, state: &S) -> Result<Self> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                RestError::PayloadTooLarge(format!("request body too large: {e}"))
            } else {
                RestError::BadRequest(format!("cannot read request body: {e}"))
            }
        })?;
        serde_json::from_slice(&bytes)
            .map(Self)
            .map_err(|e| RestError::BadRequest(format!("malformed request body: {e}")))
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// Page through a sorted list: `pageToken` is the offset of the page's first item, `pageSize`
/// is capped by the configured maximum (which also applies when the client gives none).
pub(super) fn paginate<T>(
    items: Vec<T>,
    params: &Params,
    max_page_size: usize,
) -> Result<(Vec<T>, Option<String>)> {
    let parse = |name: &str| -> Result<Option<usize>> {
        match params.0.get(name).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => v.parse::<usize>().map(Some).map_err(|_| {
                RestError::BadRequest(format!("{name} must be a non-negative integer, not {v:?}"))
            }),
        }
    };
    let start = parse("pageToken")?.unwrap_or(0);
    let size = match parse("pageSize")? {
        Some(0) => {
            return Err(RestError::BadRequest(
                "pageSize must be positive".to_string(),
            ))
        }
        Some(size) => size.min(max_page_size),
        None => max_page_size,
    };
    if start > items.len() {
        return Err(RestError::BadRequest(format!(
            "pageToken {start} is past the end"
        )));
    }
    let end = start.saturating_add(size).min(items.len());
    let next = (end < items.len()).then(|| end.to_string());
    let page = items.into_iter().skip(start).take(end - start).collect();
    Ok((page, next))
}

pub(super) fn check_properties(
    properties: &HashMap<String, String>,
    allowed_locations: &[String],
) -> Result<()> {
    for (key, value) in properties {
        if key.is_empty() || key.len() > MAX_NAME_BYTES {
            return Err(RestError::BadRequest(format!(
                "property keys must be 1 to {MAX_NAME_BYTES} bytes"
            )));
        }
        if value.len() > MAX_PROPERTY_VALUE_BYTES {
            return Err(RestError::BadRequest(format!(
                "value of property {key:?} is more than {MAX_PROPERTY_VALUE_BYTES} bytes"
            )));
        }
        if key == LOCATION_PROPERTY {
            check_location(allowed_locations, value)?;
        }
    }
    Ok(())
}

/// Takes the reserved `format-version` table property out of a creation's properties.
pub(super) fn take_format_version(
    properties: &mut HashMap<String, String>,
) -> Result<FormatVersion> {
    match properties.remove("format-version").as_deref() {
        None | Some("2") => Ok(FormatVersion::V2),
        Some("1") => Ok(FormatVersion::V1),
        Some("3") => Ok(FormatVersion::V3),
        Some(other) => Err(RestError::BadRequest(format!(
            "unsupported format-version {other:?}: use 1, 2 or 3"
        ))),
    }
}

pub(super) async fn require_namespace(catalog: &dyn Catalog, ns: &NamespaceIdent) -> Result<()> {
    if catalog
        .namespace_exists(ns)
        .await
        .map_err(RestError::from_catalog)?
    {
        Ok(())
    } else {
        Err(RestError::NoSuchNamespace(format!(
            "namespace {ns} does not exist"
        )))
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration

pub(super) async fn get_config(State(state): State<AppState>) -> Json<ConfigResponse> {
    let mut endpoints = vec![
        "GET /v1/{prefix}/namespaces",
        "POST /v1/{prefix}/namespaces",
        "GET /v1/{prefix}/namespaces/{namespace}",
        "HEAD /v1/{prefix}/namespaces/{namespace}",
        "DELETE /v1/{prefix}/namespaces/{namespace}",
        "POST /v1/{prefix}/namespaces/{namespace}/properties",
        "GET /v1/{prefix}/namespaces/{namespace}/tables",
        "POST /v1/{prefix}/namespaces/{namespace}/tables",
        "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "POST /v1/{prefix}/namespaces/{namespace}/register",
        "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
        "POST /v1/{prefix}/tables/rename",
    ];
    if state.pointers.is_some() || state.forward.is_some() {
        endpoints.push("POST /v1/{prefix}/namespaces/{namespace}/tables/{table}");
        endpoints.push("POST /v1/{prefix}/transactions/commit");
    }
    Json(ConfigResponse {
        defaults: state.config.defaults.clone(),
        overrides: state.config.overrides.clone(),
        endpoints: endpoints.into_iter().map(str::to_string).collect(),
    })
}

// ---------------------------------------------------------------------------------------------
// Fallbacks

pub(super) async fn no_route() -> Response {
    RestError::NoSuchRoute("no such route in the Iceberg REST catalog API".to_string())
        .into_response()
}

pub(super) async fn wrong_method() -> Response {
    RestError::MethodNotAllowed("this route does not take this method".to_string()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_follow_tokens() {
        let params = |pairs: &[(&str, &str)]| {
            Params(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        let items: Vec<u32> = (0..5).collect();
        let (page, next) = paginate(items.clone(), &params(&[("pageSize", "2")]), 100).unwrap();
        assert_eq!((page, next.as_deref()), (vec![0, 1], Some("2")));
        let (page, next) = paginate(
            items.clone(),
            &params(&[("pageSize", "2"), ("pageToken", "4")]),
            100,
        )
        .unwrap();
        assert_eq!((page, next), (vec![4], None));
        let (page, next) = paginate(items.clone(), &params(&[]), 3).unwrap();
        assert_eq!((page, next.as_deref()), (vec![0, 1, 2], Some("3")));
        assert!(paginate(items.clone(), &params(&[("pageSize", "0")]), 3).is_err());
        assert!(paginate(items.clone(), &params(&[("pageToken", "x")]), 3).is_err());
        assert!(paginate(items, &params(&[("pageToken", "6")]), 3).is_err());
    }

    #[test]
    fn format_version_is_taken_out_of_properties() {
        let mut props = HashMap::from([("format-version".to_string(), "1".to_string())]);
        assert_eq!(take_format_version(&mut props).unwrap(), FormatVersion::V1);
        assert!(props.is_empty());
        let mut props = HashMap::from([("format-version".to_string(), "9".to_string())]);
        assert!(take_format_version(&mut props).is_err());
    }
}
