//! A small client for the AWS Glue Data Catalog's JSON API: one `POST /` per operation, with
//! `X-Amz-Target: AWSGlue.<Operation>`, signed with AWS Signature Version 4 ([`crate::sigv4`]).
//!
//! Why not `aws-sdk-glue`: the handful of operations a catalog needs are plain JSON, while the
//! SDK (and `iceberg-catalog-glue`, which also pulls in OpenDAL for S3) adds a large generated
//! crate and a second HTTP and TLS stack to a build that already has both. Credentials come
//! from the same provider chain the node's S3 client uses (`object_store`'s: the `AWS_*`
//! environment, web identity, ECS task role, EC2 instance metadata).
//!
//! Errors keep Glue's exception name; [`GlueError::kind`] says what it means for the caller.

use std::sync::Arc;
use std::time::Duration;

use inlet_common::{Clock, ErrorKind, RetryPolicy};
use object_store::aws::AwsCredentialProvider;
use reqwest::Url;
use serde_json::Value;

use crate::sigv4::Signer;

/// How long one request to Glue may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Retries of one call, when its failure is safe to retry ([`GlueClient::call`]): 4 attempts,
/// waiting up to 100 ms before the second, doubling.
const RETRY: RetryPolicy = RetryPolicy::new(4, Duration::from_millis(100), Duration::from_secs(2));

/// What a failed Glue call means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GlueErrorKind {
    /// `EntityNotFoundException`: the database or table does not exist.
    NotFound,
    /// `AlreadyExistsException`.
    AlreadyExists,
    /// `ConcurrentModificationException`: another writer changed the entity first (for
    /// `UpdateTable`, the `VersionId` sent is no longer the table's).
    ConcurrentModification,
    /// The request was refused as it is (`InvalidInputException`, access denied, ...).
    Refused,
    /// The request never reached Glue (connection refused, DNS): safe to retry.
    Unreached,
    /// `ThrottlingException`: refused for the request rate, nothing applied; retry later.
    Throttled,
    /// A service error (`InternalServiceException`, 5xx): a read can be retried; a write may
    /// or may not have been applied.
    Busy,
    /// The request may or may not have been applied (timeout, unreadable answer).
    Unknown,
}

/// A failed Glue call.
#[derive(Debug, Clone)]
pub struct GlueError {
    pub kind: GlueErrorKind,
    /// The operation, Glue's exception name when it answered, and its message.
    pub message: String,
}

impl std::fmt::Display for GlueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for GlueError {}

impl GlueError {
    /// The error's kind for callers outside Glue's client. A service error (`Busy`) or an
    /// unknown outcome is `Retryable` here: the caller may try the whole step again after
    /// reloading; [`GlueClient::call`] itself retries only what is safe for its operation.
    pub fn common_kind(&self) -> ErrorKind {
        match self.kind {
            GlueErrorKind::NotFound | GlueErrorKind::AlreadyExists | GlueErrorKind::Refused => {
                ErrorKind::BadInput
            }
            GlueErrorKind::ConcurrentModification => ErrorKind::Conflict,
            GlueErrorKind::Unreached
            | GlueErrorKind::Throttled
            | GlueErrorKind::Busy
            | GlueErrorKind::Unknown => ErrorKind::Retryable,
        }
    }
}

impl GlueError {
    /// As an iceberg error: `not_found` is the kind a missing entity becomes
    /// (`TableNotFound` or `NamespaceNotFound`).
    pub fn into_iceberg(self, not_found: iceberg::ErrorKind) -> iceberg::Error {
        use iceberg::ErrorKind as K;
        let (kind, retryable) = match self.kind {
            GlueErrorKind::NotFound => (not_found, false),
            GlueErrorKind::AlreadyExists => (
                if not_found == K::NamespaceNotFound {
                    K::NamespaceAlreadyExists
                } else {
                    K::TableAlreadyExists
                },
                false,
            ),
            GlueErrorKind::ConcurrentModification => (K::CatalogCommitConflicts, true),
            GlueErrorKind::Refused => (K::DataInvalid, false),
            GlueErrorKind::Unreached | GlueErrorKind::Throttled | GlueErrorKind::Busy => {
                (K::Unexpected, true)
            }
            GlueErrorKind::Unknown => (K::Unexpected, false),
        };
        iceberg::Error::new(kind, format!("AWS Glue: {}", self.message)).with_retryable(retryable)
    }
}

/// Where and as whom to call Glue.
#[derive(Clone, Debug)]
pub struct GlueSettings {
    /// The AWS region (`us-east-1`).
    pub region: String,
    /// The endpoint; default `https://glue.<region>.amazonaws.com`.
    pub endpoint: Option<String>,
    /// The Data Catalog's id (the AWS account id); default the caller's account.
    pub catalog_id: Option<String>,
}

/// Calls Glue operations.
pub struct GlueClient {
    http: reqwest::Client,
    endpoint: Url,
    catalog_id: Option<String>,
    signer: Signer,
}

impl std::fmt::Debug for GlueClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlueClient")
            .field("endpoint", &self.endpoint.as_str())
            .field("region", &self.signer.scope().1)
            .field("catalog_id", &self.catalog_id)
            .finish_non_exhaustive()
    }
}

impl GlueClient {
    /// A client with credentials from the standard AWS environment. Sends nothing yet.
    pub fn new(settings: &GlueSettings, clock: Arc<dyn Clock>) -> Result<Self, String> {
        let endpoint = settings
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("https://glue.{}.amazonaws.com", settings.region));
        let endpoint = Url::parse(&endpoint)
            .map_err(|e| format!("catalog.endpoint {endpoint:?} is not a URL: {e}"))?;
        let signer = Signer::from_env("glue", &settings.region, clock)?;
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        Ok(GlueClient {
            http,
            endpoint,
            catalog_id: settings.catalog_id.clone(),
            signer,
        })
    }

    /// Uses `credentials` instead of the standard chain (tests; fixed keys).
    pub fn with_credentials(mut self, credentials: AwsCredentialProvider) -> Self {
        self.signer = self.signer.with_credentials(credentials);
        self
    }

    /// Calls `operation` (`GetTable`, ...) with `body`, adding `CatalogId` when configured;
    /// the answer's JSON body.
    ///
    /// The one place Glue calls are retried, under [`RETRY`]:
    /// a request that never reached Glue or was throttled (nothing applied), and a read
    /// (`Get*`) that met a service error. A write that met a service error is not retried,
    /// since it may have been applied.
    pub async fn call(&self, operation: &str, body: Value) -> Result<Value, GlueError> {
        // Only what is safe for this operation is retried here: a write that met a service
        // error may have been applied.
        let classify = |e: &GlueError| {
            if retry_safe(operation, e.kind) {
                ErrorKind::Retryable
            } else {
                ErrorKind::Permanent
            }
        };
        inlet_common::retry(&RETRY, classify, |_| {
            self.call_once(operation, body.clone())
        })
        .await
    }

    async fn call_once(&self, operation: &str, mut body: Value) -> Result<Value, GlueError> {
        if let (Some(id), Some(fields)) = (&self.catalog_id, body.as_object_mut()) {
            fields.insert("CatalogId".into(), Value::String(id.clone()));
        }
        let payload = serde_json::to_vec(&body).map_err(|e| GlueError {
            kind: GlueErrorKind::Refused,
            message: format!("{operation}: cannot encode the request: {e}"),
        })?;
        let target = format!("AWSGlue.{operation}");
        let mut request = self
            .http
            .post(self.endpoint.clone())
            .header("content-type", CONTENT_TYPE)
            .header("x-amz-target", &target)
            .body(payload)
            .build()
            .map_err(|e| GlueError {
                kind: GlueErrorKind::Refused,
                message: format!("{operation}: cannot build the request: {e}"),
            })?;
        self.signer
            .sign(&mut request)
            .await
            .map_err(|e| GlueError {
                kind: GlueErrorKind::Unreached,
                message: format!("{operation}: {e}"),
            })?;
        let response = self.http.execute(request).await.map_err(|e| GlueError {
            kind: if e.is_connect() || e.is_builder() {
                GlueErrorKind::Unreached
            } else {
                GlueErrorKind::Unknown
            },
            message: format!("{operation}: {e}"),
        })?;
        let status = response.status();
        let header_type = response
            .headers()
            .get("x-amzn-errortype")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let answer = response.bytes().await.map_err(|e| GlueError {
            kind: GlueErrorKind::Unknown,
            message: format!("{operation}: reading the answer: {e}"),
        })?;
        if status.is_success() {
            if answer.is_empty() {
                return Ok(Value::Object(Default::default()));
            }
            return serde_json::from_slice(&answer).map_err(|e| GlueError {
                kind: GlueErrorKind::Unknown,
                message: format!("{operation}: the answer does not parse: {e}"),
            });
        }
        Err(service_error(
            operation,
            status.as_u16(),
            header_type.as_deref(),
            &answer,
        ))
    }
}

const CONTENT_TYPE: &str = "application/x-amz-json-1.1";

/// Whether a failed call can be sent again without risk of applying it twice.
fn retry_safe(operation: &str, kind: GlueErrorKind) -> bool {
    match kind {
        GlueErrorKind::Unreached | GlueErrorKind::Throttled => true,
        GlueErrorKind::Busy => operation.starts_with("Get"),
        _ => false,
    }
}

/// Glue's error answer as a [`GlueError`]: the exception name is the `__type` field (or the
/// `x-amzn-ErrorType` header), possibly prefixed with a namespace and `#`.
fn service_error(
    operation: &str,
    status: u16,
    header_type: Option<&str>,
    body: &[u8],
) -> GlueError {
    let json: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let raw_type = json
        .get("__type")
        .and_then(Value::as_str)
        .or(header_type)
        .unwrap_or_default();
    let name = raw_type
        .rsplit('#')
        .next()
        .unwrap_or_default()
        .split(':')
        .next()
        .unwrap_or_default()
        .to_string();
    let message = json
        .get("message")
        .or_else(|| json.get("Message"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(300).collect());
    let kind = match name.as_str() {
        "EntityNotFoundException" => GlueErrorKind::NotFound,
        "AlreadyExistsException" => GlueErrorKind::AlreadyExists,
        "ConcurrentModificationException" => GlueErrorKind::ConcurrentModification,
        "ThrottlingException" => GlueErrorKind::Throttled,
        "OperationTimeoutException" | "InternalServiceException" => GlueErrorKind::Busy,
        _ if status >= 500 => GlueErrorKind::Busy,
        _ => GlueErrorKind::Refused,
    };
    GlueError {
        kind,
        message: format!("{operation} answered {status} {name}: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exceptions_become_kinds() {
        let e = service_error(
            "GetTable",
            400,
            None,
            br#"{"__type":"com.amazonaws.glue#EntityNotFoundException","Message":"Table t not found"}"#,
        );
        assert_eq!(e.kind, GlueErrorKind::NotFound);
        assert!(e.message.contains("Table t not found"), "{e}");
        let e = service_error(
            "UpdateTable",
            400,
            Some("ConcurrentModificationException:http://internal"),
            b"",
        );
        assert_eq!(e.kind, GlueErrorKind::ConcurrentModification);
        assert_eq!(
            service_error(
                "GetTables",
                400,
                None,
                br#"{"__type":"ThrottlingException"}"#
            )
            .kind,
            GlueErrorKind::Throttled
        );
        assert!(retry_safe("UpdateTable", GlueErrorKind::Throttled));
        assert!(!retry_safe("UpdateTable", GlueErrorKind::Busy));
        assert!(retry_safe("GetTable", GlueErrorKind::Busy));
        assert!(!retry_safe(
            "GetTable",
            GlueErrorKind::ConcurrentModification
        ));
        assert_eq!(
            service_error(
                "GetTables",
                400,
                None,
                br#"{"__type":"AccessDeniedException"}"#
            )
            .kind,
            GlueErrorKind::Refused
        );
    }
}
