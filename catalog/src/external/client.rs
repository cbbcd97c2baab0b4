//! The HTTP side of an external Iceberg REST catalog: URLs under the catalog's `prefix` (from
//! its `/v1/config`), its authentication, and the spec's meaning of a commit's status.
//!
//! Authentication is one of:
//! - none;
//! - a bearer token (`catalog.token`), or OAuth2 client credentials (`catalog.credential`)
//!   exchanged for one at `/v1/oauth/tokens` (or `oauth2-server-uri`) and exchanged again
//!   once when the catalog answers 401;
//! - AWS Signature Version 4 (`rest.sigv4-enabled`; AWS Glue's and S3 Tables' Iceberg REST
//!   endpoints): every request, `/v1/config` included, signed with the node's AWS credentials
//!   ([`crate::sigv4`]).
//!
//! Query strings are encoded with RFC 3986's unreserved set only, so that the signed form and
//! the sent form are the same text.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use iceberg::{TableIdent, TableRequirement, TableUpdate};
use iceberg_catalog_rest::{CommitTableRequest, CommitTableResponse};
use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;
use tokio::sync::{Mutex, OnceCell};

use crate::config::{CatalogConfig, RestAuth};
use crate::rest::RestError;
use crate::sigv4::{self, Signer};

/// How long one request to the external catalog may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A client of one external REST catalog: reads and DDL ([`super::tables::RestTables`] on it)
/// and commits.
#[derive(Debug)]
pub struct RestClient {
    http: reqwest::Client,
    pub(crate) uri: String,
    warehouse: Option<String>,
    /// The configured properties; `/v1/config` defaults go under and overrides over them.
    properties: BTreeMap<String, String>,
    auth: Auth,
    /// The properties after `/v1/config`, fetched once.
    merged: OnceCell<BTreeMap<String, String>>,
}

/// How requests are authenticated.
#[derive(Debug)]
enum Auth {
    None,
    /// A bearer token: the configured one, or one the credential was exchanged for.
    Bearer {
        credential: Option<String>,
        token: Mutex<Option<String>>,
    },
    SigV4(Signer),
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

impl RestClient {
    /// A client for the external catalog `config` names (`type = "rest"`); `clock` dates
    /// SigV4 signatures. Sends nothing yet.
    pub fn new(
        config: &CatalogConfig,
        clock: Arc<dyn inlet_common::Clock>,
    ) -> iceberg::Result<Self> {
        let invalid = |e: String| iceberg::Error::new(iceberg::ErrorKind::DataInvalid, e);
        let endpoint = config.rest_endpoint().map_err(invalid)?;
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
        let auth = match endpoint.auth {
            RestAuth::None => Auth::None,
            RestAuth::Bearer => Auth::Bearer {
                credential: config.credential.clone(),
                token: Mutex::new(config.token.clone()),
            },
            RestAuth::SigV4 { name, region } => {
                Auth::SigV4(Signer::from_env(&name, &region, clock).map_err(invalid)?)
            }
        };
        Ok(RestClient {
            http,
            uri: endpoint.uri.trim_end_matches('/').to_string(),
            warehouse: config.warehouse.clone(),
            properties: config.properties.clone(),
            auth,
            merged: OnceCell::new(),
        })
    }

    /// Signs with `credentials` instead of the standard AWS chain (tests).
    #[cfg(test)]
    pub(crate) fn with_aws_credentials(
        mut self,
        credentials: object_store::aws::AwsCredentialProvider,
    ) -> Self {
        if let Auth::SigV4(signer) = self.auth {
            self.auth = Auth::SigV4(signer.with_credentials(credentials));
        }
        self
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
        let answer = self.post(&table_path(table), body).await?;
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
        self.post(&["transactions".to_string(), "commit".to_string()], body)
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
        let answer = self.post(&path, body).await?;
        serde_json::from_slice(&answer).map_err(|e| {
            RestError::Internal(format!("the external catalog's answer does not parse: {e}"))
        })
    }

    /// POSTs a JSON body to `v1/{prefix}/<path>`; the answer's body on success, else the
    /// spec's meaning of the status for a commit.
    async fn post(&self, path: &[String], body: Vec<u8>) -> Result<Bytes, RestError> {
        let (status, answer) = self.call(Method::POST, path, &[], Some(body)).await?;
        if status.is_success() {
            Ok(answer)
        } else {
            Err(commit_error(status, &answer))
        }
    }

    /// Sends `method` to `v1/{prefix}/<path>?<query>` with `body` as JSON, authenticated;
    /// the status and body of the answer, whatever the status. With OAuth2 credentials, a 401
    /// gets a new token and one more try. A request that never reached the catalog is
    /// [`RestError::ServiceUnavailable`]; one that got no answer, [`RestError::CommitStateUnknown`].
    pub(crate) async fn call(
        &self,
        method: Method,
        path: &[String],
        query: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), RestError> {
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
        set_query(&mut url, query);
        let mut renewed = false;
        loop {
            let mut request = self.http.request(method.clone(), url.clone());
            if let Some(body) = &body {
                request = request
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.clone());
            }
            let request = self.authenticated(request, props).await?;
            let response = self
                .http
                .execute(request)
                .await
                .map_err(|e| transport_error(&e))?;
            let status = response.status();
            let answer = response
                .bytes()
                .await
                .map_err(|e| RestError::CommitStateUnknown(format!("reading the answer: {e}")))?;
            if status == StatusCode::UNAUTHORIZED && !renewed && self.renew().await {
                renewed = true;
                continue;
            }
            return Ok((status, answer));
        }
    }

    /// The configured properties merged with the catalog's `/v1/config` (fetched once).
    async fn properties(&self) -> Result<&BTreeMap<String, String>, RestError> {
        self.merged
            .get_or_try_init(|| async {
                let mut url = self.url(&["config"])?;
                if let Some(warehouse) = &self.warehouse {
                    set_query(&mut url, &[("warehouse", warehouse)]);
                }
                let request = self
                    .authenticated(self.http.request(Method::GET, url), &self.properties)
                    .await?;
                let response = self
                    .http
                    .execute(request)
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
    pub(crate) fn url(&self, segments: &[&str]) -> Result<Url, RestError> {
        let mut url = Url::parse(&self.uri)
            .map_err(|e| RestError::Internal(format!("bad catalog uri {:?}: {e}", self.uri)))?;
        url.path_segments_mut()
            .map_err(|_| RestError::Internal(format!("bad catalog uri {:?}", self.uri)))?
            .pop_if_empty()
            .push("v1")
            .extend(segments);
        Ok(url)
    }

    /// `request` with the configured headers and the authentication, built.
    async fn authenticated(
        &self,
        mut request: reqwest::RequestBuilder,
        props: &BTreeMap<String, String>,
    ) -> Result<reqwest::Request, RestError> {
        for (name, value) in props
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("header.")?, v)))
        {
            request = request.header(name, value);
        }
        if let Some(token) = self.token().await? {
            request = request.bearer_auth(token);
        }
        let mut request = request
            .build()
            .map_err(|e| RestError::Internal(format!("cannot build the request: {e}")))?;
        if let Auth::SigV4(signer) = &self.auth {
            signer
                .sign(&mut request)
                .await
                .map_err(RestError::ServiceUnavailable)?;
        }
        Ok(request)
    }

    /// After a 401: whether a new token was asked for (OAuth2 credentials only).
    async fn renew(&self) -> bool {
        match &self.auth {
            Auth::Bearer {
                credential: Some(_),
                token,
            } => {
                *token.lock().await = None;
                true
            }
            _ => false,
        }
    }

    /// The bearer token: the configured one, or one from the OAuth2 token endpoint.
    async fn token(&self) -> Result<Option<String>, RestError> {
        let Auth::Bearer { credential, token } = &self.auth else {
            return Ok(None);
        };
        let mut token = token.lock().await;
        if token.is_none() {
            if let Some(credential) = credential {
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

/// `namespaces/{ns}/tables/{table}`.
pub(crate) fn table_path(table: &TableIdent) -> Vec<String> {
    vec![
        "namespaces".to_string(),
        table.namespace().to_url_string(),
        "tables".to_string(),
        table.name().to_string(),
    ]
}

/// Sets `url`'s query to `pairs`, RFC 3986-encoded (see the module docs); none leaves no `?`.
fn set_query(url: &mut Url, pairs: &[(&str, &str)]) {
    if pairs.is_empty() {
        url.set_query(None);
        return;
    }
    let query = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", sigv4::encode(k), sigv4::encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    url.set_query(Some(&query));
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
pub(crate) fn commit_error(status: StatusCode, body: &[u8]) -> RestError {
    let message = format!("external catalog: {}", message(body));
    match status.as_u16() {
        409 => RestError::CommitFailed(message),
        400 | 422 => RestError::BadRequest(message),
        404 => {
            if error_type(body).contains("Namespace") {
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

/// The `type` of a spec error body (`NoSuchTableException`), or "".
pub(crate) fn error_type(body: &[u8]) -> String {
    serde_json::from_slice::<ErrorBody>(body)
        .map(|b| b.error.kind)
        .unwrap_or_default()
}

/// The `message` of a spec error body, or the body itself.
pub(crate) fn message(body: &[u8]) -> String {
    serde_json::from_slice::<ErrorBody>(body)
        .map(|b| b.error.message)
        .unwrap_or_else(|_| String::from_utf8_lossy(body).chars().take(500).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves `app` on a free local port: its base URI, and the server's task.
    async fn serve(app: axum::Router) -> (String, tokio::task::JoinHandle<std::io::Result<()>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri = format!("http://{}", listener.local_addr().unwrap());
        (
            uri,
            tokio::spawn(async move { axum::serve(listener, app).await }),
        )
    }

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
        let (uri, server) = serve(app).await;

        let config = CatalogConfig {
            kind: crate::config::CatalogKind::Rest,
            uri: Some(uri),
            credential: Some("id:s:cret".into()),
            properties: [("header.X-Test".to_string(), "yes".to_string())].into(),
            ..CatalogConfig::default()
        };
        let commits = RestClient::new(&config, Arc::new(inlet_common::SystemClock)).unwrap();
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

    /// An S3 Tables catalog (its ARN as the warehouse): every request, `/v1/config` first,
    /// carries a SigV4 signature for `s3tables` in the ARN's region, the ARN strictly encoded
    /// in the query, and no bearer token. (The signature's value is checked against botocore
    /// in `sigv4.rs` and end to end in `tests/iceberg_external.rs`.)
    #[tokio::test]
    async fn an_s3_tables_catalog_is_signed() {
        use axum::extract::{OriginalUri, State};
        use axum::http::HeaderMap;
        use axum::routing::{get, post};
        use object_store::aws::AwsCredential;
        use object_store::StaticCredentialProvider;

        type Seen = Arc<std::sync::Mutex<Vec<(String, String, String)>>>;
        async fn record(State(seen): State<Seen>, uri: OriginalUri, headers: HeaderMap) {
            let get = |name: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string()
            };
            seen.lock()
                .unwrap()
                .push((uri.0.to_string(), get("authorization"), get("x-amz-date")));
        }
        let seen: Seen = Arc::default();
        let app = axum::Router::new()
            .route(
                "/iceberg/v1/config",
                get(|state: State<Seen>, uri: OriginalUri, headers: HeaderMap| async move {
                    record(state, uri, headers).await;
                    axum::Json(serde_json::json!({"overrides": {"prefix": "p"}}))
                }),
            )
            .route(
                "/iceberg/v1/p/namespaces/db/tables/t",
                post(|state: State<Seen>, uri: OriginalUri, headers: HeaderMap| async move {
                    record(state, uri, headers).await;
                    (
                        axum::http::StatusCode::CONFLICT,
                        r#"{"error":{"message":"moved","type":"CommitFailedException","code":409}}"#,
                    )
                }),
            )
            .with_state(seen.clone());
        let (base, server) = serve(app).await;
        let uri = format!("{base}/iceberg");

        let config = CatalogConfig {
            kind: crate::config::CatalogKind::Rest,
            uri: Some(uri),
            warehouse: Some("arn:aws:s3tables:eu-west-1:111122223333:bucket/lake".into()),
            ..CatalogConfig::default()
        };
        let clock = inlet_common::ManualClock::new(1_440_938_160_000);
        let client = RestClient::new(&config, Arc::new(clock))
            .unwrap()
            .with_aws_credentials(Arc::new(StaticCredentialProvider::new(AwsCredential {
                key_id: "AKIDEXAMPLE".into(),
                secret_key: "secret".into(),
                token: None,
            })));
        let table = TableIdent::from_strs(["db", "t"]).unwrap();
        match client.commit(&table, Vec::new(), Vec::new()).await {
            Err(RestError::CommitFailed(m)) => assert!(m.contains("moved"), "{m}"),
            other => panic!("{other:?}"),
        }
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(
            seen[0].0,
            "/iceberg/v1/config?warehouse=arn%3Aaws%3As3tables%3Aeu-west-1%3A111122223333%3Abucket%2Flake"
        );
        assert_eq!(seen[1].0, "/iceberg/v1/p/namespaces/db/tables/t");
        for (_, authorization, date) in &seen {
            assert!(
                authorization.starts_with(
                    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/eu-west-1/s3tables/aws4_request, SignedHeaders="
                ),
                "{authorization}"
            );
            assert_eq!(date, "20150830T123600Z");
        }
        assert!(seen[1]
            .1
            .contains("SignedHeaders=content-type;host;x-amz-date,"));
        server.abort();
    }

    #[test]
    fn urls_keep_the_base_path_and_encode_namespaces() {
        let config = CatalogConfig {
            kind: crate::config::CatalogKind::Rest,
            uri: Some("http://127.0.0.1:8181/iceberg/".into()),
            ..CatalogConfig::default()
        };
        let commits = RestClient::new(&config, Arc::new(inlet_common::SystemClock)).unwrap();
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
