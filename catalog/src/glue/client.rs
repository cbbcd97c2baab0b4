//! A small client for the AWS Glue Data Catalog's JSON API: one `POST /` per operation, with
//! `X-Amz-Target: AWSGlue.<Operation>`, signed with AWS Signature Version 4.
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

use hmac::{Hmac, Mac};
use inlet_common::{Clock, ErrorKind, RetryPolicy};
use object_store::aws::{AmazonS3Builder, AwsCredential, AwsCredentialProvider};
use reqwest::Url;
use serde_json::Value;
use sha2::{Digest, Sha256};

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
    region: String,
    catalog_id: Option<String>,
    credentials: AwsCredentialProvider,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for GlueClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlueClient")
            .field("endpoint", &self.endpoint.as_str())
            .field("region", &self.region)
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
        // The S3 builder resolves the standard credential chain without sending anything;
        // the bucket only satisfies the builder.
        let s3 = AmazonS3Builder::from_env()
            .with_region(&settings.region)
            .with_bucket_name("inlet-glue-credentials")
            .build()
            .map_err(|e| format!("cannot resolve AWS credentials for Glue: {e}"))?;
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        Ok(GlueClient {
            http,
            endpoint,
            region: settings.region.clone(),
            catalog_id: settings.catalog_id.clone(),
            credentials: s3.credentials().clone(),
            clock,
        })
    }

    /// Uses `credentials` instead of the standard chain (tests; fixed keys).
    pub fn with_credentials(mut self, credentials: AwsCredentialProvider) -> Self {
        self.credentials = credentials;
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
        let credential = self
            .credentials
            .get_credential()
            .await
            .map_err(|e| GlueError {
                kind: GlueErrorKind::Unreached,
                message: format!("{operation}: no AWS credentials: {e}"),
            })?;
        let target = format!("AWSGlue.{operation}");
        let request = SignedRequest {
            host: host_header(&self.endpoint),
            path: self.endpoint.path().to_string(),
            target: &target,
            payload: &payload,
        };
        let amz_date = amz_date(self.clock.now_ms());
        let authorization = request.authorization(&credential, &self.region, &amz_date);
        let mut builder = self
            .http
            .post(self.endpoint.clone())
            .header("content-type", CONTENT_TYPE)
            .header("x-amz-target", &target)
            .header("x-amz-date", &amz_date)
            .header("authorization", authorization);
        if let Some(token) = &credential.token {
            builder = builder.header("x-amz-security-token", token);
        }
        let response = builder.body(payload).send().await.map_err(|e| GlueError {
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

fn host_header(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

/// `YYYYMMDDTHHMMSSZ` for a Unix time in milliseconds.
fn amz_date(now_ms: u64) -> String {
    let secs = now_ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A Glue request to sign: `POST <path>` with the headers SigV4 covers.
struct SignedRequest<'a> {
    host: String,
    path: String,
    target: &'a str,
    payload: &'a [u8],
}

impl SignedRequest<'_> {
    /// The `Authorization` header (AWS Signature Version 4, service `glue`). Signs
    /// `content-type`, `host`, `x-amz-date`, `x-amz-target` and, with temporary credentials,
    /// `x-amz-security-token`.
    fn authorization(&self, credential: &AwsCredential, region: &str, amz_date: &str) -> String {
        let date = &amz_date[..8];
        let mut headers = vec![
            ("content-type", CONTENT_TYPE.to_string()),
            ("host", self.host.clone()),
            ("x-amz-date", amz_date.to_string()),
        ];
        if let Some(token) = &credential.token {
            headers.push(("x-amz-security-token", token.clone()));
        }
        headers.push(("x-amz-target", self.target.to_string()));
        let signed_headers = headers
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join(";");
        let canonical_headers: String = headers
            .iter()
            .map(|(name, value)| format!("{name}:{}\n", value.trim()))
            .collect();
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        let canonical_request = format!(
            "POST\n{path}\n\n{canonical_headers}\n{signed_headers}\n{}",
            hex::encode(Sha256::digest(self.payload))
        );
        let scope = format!("{date}/{region}/glue/aws4_request");
        let string_to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
            hex::encode(Sha256::digest(canonical_request.as_bytes()))
        );
        let mut key = hmac(
            format!("AWS4{}", credential.secret_key).as_bytes(),
            date.as_bytes(),
        );
        for part in [region, "glue", "aws4_request"] {
            key = hmac(&key, part.as_bytes());
        }
        let signature = hex::encode(hmac(&key, string_to_sign.as_bytes()));
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
            credential.key_id
        )
    }
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_basic_format() {
        assert_eq!(amz_date(0), "19700101T000000Z");
        // 2015-08-30T12:36:00Z, the date of AWS's SigV4 examples.
        assert_eq!(amz_date(1_440_938_160_000), "20150830T123600Z");
        // A leap day.
        assert_eq!(amz_date(1_709_210_096_000), "20240229T123456Z");
    }

    /// The signature botocore's `SigV4Auth` computes for the same request, credentials and
    /// time (the script is in the comment).
    #[test]
    fn signatures_match_botocore() {
        // Computed with botocore 1.44:
        //   AWSRequest('POST', 'http://127.0.0.1:5000/', data=b'{"Name":"db"}', headers={
        //     'Content-Type': 'application/x-amz-json-1.1', 'X-Amz-Target': 'AWSGlue.GetDatabase'})
        //   SigV4Auth(Credentials('AKIDEXAMPLE', 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
        //     token), 'glue', 'us-east-1').add_auth(request) at 2026-11-29T20:02:05Z
        let request = SignedRequest {
            host: "127.0.0.1:5000".into(),
            path: "/".into(),
            target: "AWSGlue.GetDatabase",
            payload: br#"{"Name":"db"}"#,
        };
        let mut credential = AwsCredential {
            key_id: "AKIDEXAMPLE".into(),
            secret_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            token: None,
        };
        let auth = request.authorization(&credential, "us-east-1", "20261129T200205Z");
        assert_eq!(
            auth,
            format!(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261129/us-east-1/glue/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature={}",
                BOTOCORE_SIGNATURE
            )
        );
        credential.token = Some("session-token".into());
        let auth = request.authorization(&credential, "us-east-1", "20261129T200205Z");
        assert!(auth.contains(
            "SignedHeaders=content-type;host;x-amz-date;x-amz-security-token;x-amz-target, \
             Signature="
        ));
        assert!(auth.ends_with(BOTOCORE_SIGNATURE_WITH_TOKEN), "{auth}");
    }

    const BOTOCORE_SIGNATURE: &str =
        "f482f0ba071e8403ebe24d35ec94a2a540a63d85de8ae68e09ed99380d3b934b";
    const BOTOCORE_SIGNATURE_WITH_TOKEN: &str =
        "7f336bbd6b54aefff9a1e948746e2ca2c8d8dfd4f1a2db0410938d81068807e6";

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
