//! An external Iceberg REST catalog as the home of a node's tables (`[catalog] type = "rest"`):
//! Polaris, Nessie, Lakekeeper, Unity, S3 Tables' REST endpoint, or another Inlet node.
//!
//! Reads and DDL (load, create, drop, namespaces) go through iceberg-rust's `RestCatalog`.
//! Commits cannot: iceberg 0.10.1 gives no way to build the `TableCommit` its `update_table`
//! takes (see `rest/commit.rs`), so [`RestCommits`] posts the same requirements and updates
//! as the spec's `POST /v1/{prefix}/namespaces/{ns}/tables/{t}` itself, with the catalog's
//! own authentication. It also forwards what the node's `/iceberg` cannot pass through
//! `RestCatalog`: multi-table commits and namespace property updates.
//!
//! Invariants:
//! - The external catalog decides: it checks the requirements, writes `metadata.json` and
//!   swaps its pointer. A 409 means a requirement failed or another commit won (the caller
//!   reloads and retries); 500, 502 and 504 mean the outcome is unknown; a request that never
//!   reached the catalog (connection refused) is a 503, safe to retry.
//! - Inlet writes data files, manifests and manifest lists under [`CatalogConfig::files`]
//!   (default: the node's object store); a table location outside it cannot be written.
//!
//! AWS Glue is another kind of external catalog: [`crate::glue`].
//!
//! Not built: vended credentials (the files are reached with the node's own object
//! store credentials).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use iceberg::{Catalog, CatalogBuilder, TableIdent, TableRequirement, TableUpdate};
use iceberg_catalog_rest::{CommitTableRequest, CommitTableResponse, RestCatalogBuilder};
use object_store::ObjectStore;
use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;
use tokio::sync::{Mutex, OnceCell};

use crate::config::CatalogConfig;
use crate::rest::RestError;
use crate::storage::ObjectStoreStorageFactory;

/// The name the external catalog is loaded under (iceberg's catalog name; not sent).
const CATALOG_NAME: &str = "inlet-external";
/// How long one request to the external catalog may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// An opened external REST catalog.
#[derive(Clone)]
pub(crate) struct ExternalCatalog {
    /// Reads and DDL, through iceberg's `RestCatalog`.
    pub catalog: Arc<dyn Catalog>,
    /// Commits.
    pub commits: Arc<RestCommits>,
    /// The root of the file IO for this catalog's tables ([`CatalogConfig::files`] as a URL,
    /// or the node's object store root).
    pub files: String,
    /// Where the data files of table topics go: `files`, or `<node root>/warehouse` when
    /// the files are in the node's object store.
    pub warehouse: String,
    /// File IO under `files`, over the same object-store client as the catalog's tables.
    pub file_io: iceberg::io::FileIO,
    /// The same storage as itself, for what file IO cannot do (listing).
    pub storage: crate::storage::ObjectStoreStorage,
}

impl std::fmt::Debug for ExternalCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalCatalog")
            .field("uri", &self.commits.uri)
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

/// Opens the external catalog `config` names. `node_root` and `node_store` are the node's
/// object store: the files go there unless `config.files` names another place. Nothing is
/// sent until the first call.
pub(crate) async fn open(
    config: &CatalogConfig,
    node_root: &str,
    node_store: Option<Arc<dyn ObjectStore>>,
) -> iceberg::Result<ExternalCatalog> {
    config
        .validate()
        .map_err(|e| iceberg::Error::new(iceberg::ErrorKind::DataInvalid, e))?;
    let uri = config
        .uri
        .clone()
        .unwrap_or_default()
        .trim_end_matches('/')
        .to_string();
    let (files, warehouse, factory) = files_factory(config.files.as_deref(), node_root, node_store);
    let mut props: HashMap<String, String> = config
        .properties
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    props.insert("uri".into(), uri.clone());
    for (key, value) in [
        ("warehouse", &config.warehouse),
        ("token", &config.token),
        ("credential", &config.credential),
    ] {
        if let Some(value) = value {
            props.insert(key.into(), value.clone());
        }
    }
    // Checks the URL and opens the store now; clones of the factory share it, so data files
    // and the catalog's tables use one client.
    let storage = factory.storage()?;
    let file_io = iceberg::io::FileIOBuilder::new(Arc::new(factory.clone())).build();
    let catalog = RestCatalogBuilder::default()
        .with_storage_factory(Arc::new(factory))
        .load(CATALOG_NAME, props)
        .await?;
    Ok(ExternalCatalog {
        catalog: Arc::new(catalog),
        commits: Arc::new(RestCommits::new(config)?),
        files,
        warehouse,
        file_io,
        storage,
    })
}

/// Where an external catalog's table files are: `files` (a URL with a client of its own), or
/// else the node's object store (`node_root`, through `node_store` when given), whose
/// warehouse is `<node root>/warehouse`. Returns the file IO's root, the warehouse, and the
/// storage factory; clones of the factory share one client.
pub(crate) fn files_factory(
    files: Option<&str>,
    node_root: &str,
    node_store: Option<Arc<dyn ObjectStore>>,
) -> (String, String, ObjectStoreStorageFactory) {
    match files {
        Some(files) => {
            let files = crate::embedded::root_url(files);
            let factory = ObjectStoreStorageFactory::new(files.clone());
            (files.clone(), files, factory)
        }
        None => {
            let root = crate::embedded::root_url(node_root);
            let mut factory = ObjectStoreStorageFactory::new(root.clone());
            if let Some(store) = node_store {
                factory = factory.with_store(store);
            }
            (
                root,
                crate::embedded::warehouse_location(node_root),
                factory,
            )
        }
    }
}

/// Table commits to an external REST catalog: the spec's commit requests, with the catalog's
/// `prefix` from its `/v1/config` and its authentication (a bearer token, or OAuth2 client
/// credentials exchanged for one and renewed when the catalog answers 401).
#[derive(Debug)]
pub struct RestCommits {
    http: reqwest::Client,
    uri: String,
    warehouse: Option<String>,
    /// The configured properties; `/v1/config` defaults go under and overrides over them.
    properties: BTreeMap<String, String>,
    credential: Option<String>,
    token: Mutex<Option<String>>,
    /// The properties after `/v1/config`, fetched once.
    merged: OnceCell<BTreeMap<String, String>>,
}

/// The spec's error body.
#[derive(Deserialize)]
struct ErrorBody {
    error: ErrorModel,
}

#[derive(Deserialize)]
struct ErrorModel {
    message: String,
    #[serde(default, rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct ConfigBody {
    #[serde(default)]
    defaults: BTreeMap<String, String>,
    #[serde(default)]
    overrides: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct TokenBody {
    access_token: String,
}

impl RestCommits {
    /// A client for the external catalog `config` names (`type = "rest"`).
    pub fn new(config: &CatalogConfig) -> iceberg::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| {
                iceberg::Error::new(
                    iceberg::ErrorKind::Unexpected,
                    "cannot build an HTTP client",
                )
                .with_source(e)
            })?;
        Ok(RestCommits {
            http,
            uri: config
                .uri
                .clone()
                .unwrap_or_default()
                .trim_end_matches('/')
                .to_string(),
            warehouse: config.warehouse.clone(),
            properties: config.properties.clone(),
            credential: config.credential.clone(),
            token: Mutex::new(config.token.clone()),
            merged: OnceCell::new(),
        })
    }

    /// Commits `updates` to `table` if `requirements` hold there. A 409
    /// ([`RestError::CommitFailed`]) means nothing changed and the caller should reload and
    /// retry; [`RestError::CommitStateUnknown`] means the commit may have landed.
    pub async fn commit(
        &self,
        table: &TableIdent,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<CommitTableResponse, RestError> {
        let body = CommitTableRequest {
            identifier: Some(table.clone()),
            requirements,
            updates,
        };
        let body = serde_json::to_vec(&body)
            .map_err(|e| RestError::Internal(format!("cannot encode the commit: {e}")))?;
        let mut path = vec!["namespaces".to_string()];
        path.push(table.namespace().to_url_string());
        path.push("tables".to_string());
        path.push(table.name().to_string());
        let answer = self.send(&path, body).await?;
        serde_json::from_slice(&answer).map_err(|e| {
            RestError::CommitStateUnknown(format!(
                "the external catalog accepted the commit to {table} but its answer does not \
                 parse: {e}"
            ))
        })
    }

    /// Forwards a multi-table commit (`POST /v1/{prefix}/transactions/commit`, body as the
    /// client sent it).
    pub async fn commit_transaction(&self, body: Vec<u8>) -> Result<(), RestError> {
        self.send(&["transactions".to_string(), "commit".to_string()], body)
            .await
            .map(drop)
    }

    /// Forwards a namespace properties update (`POST .../namespaces/{ns}/properties`).
    pub async fn update_namespace_properties(
        &self,
        namespace: &iceberg::NamespaceIdent,
        request: &iceberg_catalog_rest::UpdateNamespacePropertiesRequest,
    ) -> Result<iceberg_catalog_rest::UpdateNamespacePropertiesResponse, RestError> {
        let body = serde_json::to_vec(request)
            .map_err(|e| RestError::Internal(format!("cannot encode the request: {e}")))?;
        let path = [
            "namespaces".to_string(),
            namespace.to_url_string(),
            "properties".to_string(),
        ];
        let answer = self.send(&path, body).await?;
        serde_json::from_slice(&answer).map_err(|e| {
            RestError::Internal(format!("the external catalog's answer does not parse: {e}"))
        })
    }

    /// POSTs a commit body to `v1/{prefix}/<path>`; the answer's body on success.
    async fn send(&self, path: &[String], body: Vec<u8>) -> Result<bytes::Bytes, RestError> {
        let props = self.properties().await?;
        let mut url = self.url(&[])?;
        {
            let mut segments = url
                .path_segments_mut()
                .map_err(|_| RestError::Internal(format!("bad catalog uri {:?}", self.uri)))?;
            if let Some(prefix) = props.get("prefix").filter(|p| !p.is_empty()) {
                segments.extend(prefix.split('/'));
            }
            segments.extend(path);
        }
        let mut renewed = false;
        loop {
            let request = self
                .request(Method::POST, url.clone(), props)
                .await?
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone());
            let response = request.send().await.map_err(|e| transport_error(&e))?;
            let status = response.status();
            let answer = response
                .bytes()
                .await
                .map_err(|e| RestError::CommitStateUnknown(format!("reading the answer: {e}")))?;
            if status.is_success() {
                return Ok(answer);
            }
            if status == StatusCode::UNAUTHORIZED && self.credential.is_some() && !renewed {
                // The token expired: get a new one once.
                *self.token.lock().await = None;
                renewed = true;
                continue;
            }
            return Err(commit_error(status, &answer));
        }
    }

    /// The configured properties merged with the catalog's `/v1/config` (fetched once).
    async fn properties(&self) -> Result<&BTreeMap<String, String>, RestError> {
        self.merged
            .get_or_try_init(|| async {
                let mut url = self.url(&["config"])?;
                if let Some(warehouse) = &self.warehouse {
                    url.query_pairs_mut().append_pair("warehouse", warehouse);
                }
                let response = self
                    .request(Method::GET, url, &self.properties)
                    .await?
                    .send()
                    .await
                    .map_err(|e| transport_error(&e))?;
                let status = response.status();
                let answer = response.bytes().await.map_err(|e| {
                    RestError::ServiceUnavailable(format!("reading /v1/config: {e}"))
                })?;
                if !status.is_success() {
                    return Err(RestError::ServiceUnavailable(format!(
                        "the external catalog's /v1/config answered {status}: {}",
                        message(&answer)
                    )));
                }
                let config: ConfigBody = serde_json::from_slice(&answer).map_err(|e| {
                    RestError::Internal(format!("the external catalog's /v1/config: {e}"))
                })?;
                let mut merged = config.defaults;
                merged.extend(self.properties.clone());
                merged.extend(config.overrides);
                Ok(merged)
            })
            .await
    }

    /// `<uri>/v1/<segments>`.
    fn url(&self, segments: &[&str]) -> Result<Url, RestError> {
        let mut url = Url::parse(&self.uri)
            .map_err(|e| RestError::Internal(format!("bad catalog uri {:?}: {e}", self.uri)))?;
        url.path_segments_mut()
            .map_err(|_| RestError::Internal(format!("bad catalog uri {:?}", self.uri)))?
            .pop_if_empty()
            .push("v1")
            .extend(segments);
        Ok(url)
    }

    /// A request with the configured headers and the bearer token.
    async fn request(
        &self,
        method: Method,
        url: Url,
        props: &BTreeMap<String, String>,
    ) -> Result<reqwest::RequestBuilder, RestError> {
        let mut request = self.http.request(method, url);
        for (name, value) in props
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("header.")?, v)))
        {
            request = request.header(name, value);
        }
        if let Some(token) = self.token().await? {
            request = request.bearer_auth(token);
        }
        Ok(request)
    }

    /// The bearer token: the configured one, or one from the OAuth2 token endpoint.
    async fn token(&self) -> Result<Option<String>, RestError> {
        let mut token = self.token.lock().await;
        if token.is_none() {
            if let Some(credential) = &self.credential {
                *token = Some(self.fetch_token(credential).await?);
            }
        }
        Ok(token.clone())
    }

    async fn fetch_token(&self, credential: &str) -> Result<String, RestError> {
        let (id, secret) = match credential.split_once(':') {
            Some((id, secret)) => (Some(id), secret),
            None => (None, credential),
        };
        let mut form: Vec<(&str, &str)> = vec![("grant_type", "client_credentials")];
        if let Some(id) = id {
            form.push(("client_id", id));
        }
        form.push(("client_secret", secret));
        form.push((
            "scope",
            self.properties
                .get("scope")
                .map(String::as_str)
                .unwrap_or("catalog"),
        ));
        for param in ["audience", "resource"] {
            if let Some(value) = self.properties.get(param) {
                form.push((param, value));
            }
        }
        let url = match self.properties.get("oauth2-server-uri") {
            Some(uri) => Url::parse(uri)
                .map_err(|e| RestError::Internal(format!("bad oauth2-server-uri: {e}")))?,
            None => self.url(&["oauth", "tokens"])?,
        };
        let response = self
            .http
            .post(url)
            .form(&form)
            .send()
            .await
            .map_err(|e| transport_error(&e))?;
        let status = response.status();
        let answer = response
            .bytes()
            .await
            .map_err(|e| RestError::ServiceUnavailable(format!("reading the token: {e}")))?;
        if !status.is_success() {
            return Err(RestError::ServiceUnavailable(format!(
                "the external catalog refused the credential ({status}): {}",
                message(&answer)
            )));
        }
        serde_json::from_slice::<TokenBody>(&answer)
            .map(|t| t.access_token)
            .map_err(|e| RestError::Internal(format!("the token endpoint's answer: {e}")))
    }
}

/// A failed request: one that never reached the catalog is safe to retry (503); after that,
/// the outcome of a commit is unknown.
fn transport_error(err: &reqwest::Error) -> RestError {
    if err.is_connect() || err.is_builder() {
        RestError::ServiceUnavailable(format!("cannot reach the external catalog: {err}"))
    } else {
        RestError::CommitStateUnknown(format!(
            "the external catalog did not answer the commit: {err}"
        ))
    }
}

/// The spec's meaning of a commit's error status.
fn commit_error(status: StatusCode, body: &[u8]) -> RestError {
    let message = format!("external catalog: {}", message(body));
    match status.as_u16() {
        409 => RestError::CommitFailed(message),
        400 | 422 => RestError::BadRequest(message),
        404 => {
            let kind = serde_json::from_slice::<ErrorBody>(body)
                .map(|b| b.error.kind)
                .unwrap_or_default();
            if kind.contains("Namespace") {
                RestError::NoSuchNamespace(message)
            } else {
                RestError::NoSuchTable(message)
            }
        }
        406 => RestError::Unsupported(message),
        503 => RestError::ServiceUnavailable(message),
        500 | 502 | 504 => RestError::CommitStateUnknown(message),
        _ => RestError::Internal(format!("{message} ({status})")),
    }
}

/// The `message` of a spec error body, or the body itself.
fn message(body: &[u8]) -> String {
    serde_json::from_slice::<ErrorBody>(body)
        .map(|b| b.error.message)
        .unwrap_or_else(|_| String::from_utf8_lossy(body).chars().take(500).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_mean_what_the_spec_says() {
        let body = br#"{"error":{"message":"branch main has changed","type":"CommitFailedException","code":409}}"#;
        match commit_error(StatusCode::CONFLICT, body) {
            RestError::CommitFailed(m) => assert!(m.contains("branch main has changed"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            commit_error(StatusCode::INTERNAL_SERVER_ERROR, b"oops"),
            RestError::CommitStateUnknown(_)
        ));
        assert!(matches!(
            commit_error(StatusCode::GATEWAY_TIMEOUT, b""),
            RestError::CommitStateUnknown(_)
        ));
        assert!(matches!(
            commit_error(StatusCode::SERVICE_UNAVAILABLE, b""),
            RestError::ServiceUnavailable(_)
        ));
        let missing = br#"{"error":{"message":"no","type":"NoSuchNamespaceException","code":404}}"#;
        assert!(matches!(
            commit_error(StatusCode::NOT_FOUND, missing),
            RestError::NoSuchNamespace(_)
        ));
    }

    /// A catalog that wants OAuth2 client credentials, has a `prefix`, and expires the first
    /// token at the first commit.
    #[tokio::test]
    async fn credentials_become_a_token_that_is_renewed_once_on_401() {
        use std::sync::atomic::{AtomicUsize, Ordering};

        use axum::extract::State;
        use axum::http::{HeaderMap, StatusCode as Status};
        use axum::routing::{get, post};

        #[derive(Clone, Default)]
        struct Seen {
            tokens: Arc<AtomicUsize>,
            commits: Arc<AtomicUsize>,
        }
        fn bearer(headers: &HeaderMap) -> String {
            headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        }
        let app = axum::Router::new()
            .route(
                "/v1/oauth/tokens",
                post(|State(seen): State<Seen>, body: String| async move {
                    assert!(body.contains("grant_type=client_credentials"), "{body}");
                    assert!(body.contains("client_id=id") && body.contains("client_secret=s%3Acret"), "{body}");
                    let n = seen.tokens.fetch_add(1, Ordering::SeqCst) + 1;
                    axum::Json(serde_json::json!({"access_token": format!("tok-{n}"), "token_type": "bearer"}))
                }),
            )
            .route(
                "/v1/config",
                get(|headers: HeaderMap| async move {
                    assert_eq!(bearer(&headers), "Bearer tok-1");
                    axum::Json(serde_json::json!({"defaults": {}, "overrides": {"prefix": "cat-1"}}))
                }),
            )
            .route(
                "/v1/cat-1/namespaces/db/tables/t",
                post(|State(seen): State<Seen>, headers: HeaderMap, body: String| async move {
                    assert_eq!(headers.get("x-test").and_then(|v| v.to_str().ok()), Some("yes"));
                    let request: serde_json::Value = serde_json::from_str(&body).unwrap();
                    assert_eq!(request["identifier"]["name"], "t", "{body}");
                    assert_eq!(request["updates"][0]["action"], "set-properties", "{body}");
                    if seen.commits.fetch_add(1, Ordering::SeqCst) == 0 {
                        assert_eq!(bearer(&headers), "Bearer tok-1");
                        return (Status::UNAUTHORIZED, String::new());
                    }
                    assert_eq!(bearer(&headers), "Bearer tok-2");
                    (
                        Status::CONFLICT,
                        r#"{"error":{"message":"main moved","type":"CommitFailedException","code":409}}"#
                            .to_string(),
                    )
                }),
            )
            ;
        let seen = Seen::default();
        let app = app.with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move { axum::serve(listener, app).await });

        let config = CatalogConfig {
            kind: crate::config::CatalogKind::Rest,
            uri: Some(uri),
            credential: Some("id:s:cret".into()),
            properties: [("header.X-Test".to_string(), "yes".to_string())].into(),
            ..CatalogConfig::default()
        };
        let commits = RestCommits::new(&config).unwrap();
        let table = TableIdent::from_strs(["db", "t"]).unwrap();
        let updates = vec![TableUpdate::SetProperties {
            updates: [("k".to_string(), "v".to_string())].into(),
        }];
        match commits.commit(&table, Vec::new(), updates).await {
            Err(RestError::CommitFailed(m)) => assert!(m.contains("main moved"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(seen.tokens.load(Ordering::SeqCst), 2, "renewed once");
        assert_eq!(seen.commits.load(Ordering::SeqCst), 2);
        server.abort();
    }

    #[test]
    fn urls_keep_the_base_path_and_encode_namespaces() {
        let config = CatalogConfig {
            kind: crate::config::CatalogKind::Rest,
            uri: Some("http://127.0.0.1:8181/iceberg/".into()),
            ..CatalogConfig::default()
        };
        let commits = RestCommits::new(&config).unwrap();
        let mut url = commits.url(&[]).unwrap();
        url.path_segments_mut()
            .unwrap()
            .extend(["namespaces", "a\u{1f}b", "tables", "t"]);
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:8181/iceberg/v1/namespaces/a%1Fb/tables/t"
        );
    }
}
