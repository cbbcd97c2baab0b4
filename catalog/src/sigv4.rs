//! AWS Signature Version 4 for the AWS endpoints a node's catalog calls: Glue's JSON API
//! (service `glue`), and the Iceberg REST endpoints of AWS Glue (`glue`) and S3 Tables
//! (`s3tables`), as the AWS docs configure Iceberg clients for them (`rest.sigv4-enabled`).
//!
//! [`sign`] is the algorithm itself, with no clock or credentials of its own, so that a test
//! can hold its output against an independent signer (botocore's `SigV4Auth`); [`Signer`]
//! adds the node's clock and the AWS credential chain the node's S3 client uses (`object_store`'s:
//! the `AWS_*` environment, web identity, ECS task role, EC2 instance metadata).
//!
//! What is signed, as botocore signs for every service but S3:
//! - the canonical URI is the request's path, already percent-encoded, encoded once more
//!   (`%1F` becomes `%251F`); an empty path is `/`;
//! - the canonical query is the request's own `name=value` pairs, sorted; requests built here
//!   encode their query with [`encode`] (RFC 3986's unreserved characters only), so that
//!   form and AWS's re-encoded form are the same;
//! - the signed headers are `host`, `x-amz-date`, `x-amz-security-token` (temporary
//!   credentials), `content-type` and any other `x-amz-*` header the request carries; the
//!   payload's SHA-256 is part of the canonical request (no `x-amz-content-sha256` header).

use std::sync::Arc;

use hmac::{Hmac, Mac};
use inlet_common::Clock;
use object_store::aws::{AmazonS3Builder, AwsCredential, AwsCredentialProvider};
use reqwest::header::{HeaderName, HeaderValue};
use reqwest::Url;
use sha2::{Digest, Sha256};

/// What signing adds to a request: these headers, `authorization` last.
pub(crate) type SignedHeaders = Vec<(&'static str, String)>;

/// Signs requests for one AWS service in one region with the node's credentials.
pub struct Signer {
    service: String,
    region: String,
    credentials: AwsCredentialProvider,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("service", &self.service)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// A signer with credentials from the standard AWS chain. Resolves nothing yet.
    pub fn from_env(service: &str, region: &str, clock: Arc<dyn Clock>) -> Result<Self, String> {
        // The S3 builder resolves the standard credential chain without sending anything; the
        // bucket only satisfies the builder.
        let s3 = AmazonS3Builder::from_env()
            .with_region(region)
            .with_bucket_name("inlet-signing-credentials")
            .build()
            .map_err(|e| format!("cannot resolve AWS credentials for {service}: {e}"))?;
        Ok(Signer {
            service: service.to_string(),
            region: region.to_string(),
            credentials: s3.credentials().clone(),
            clock,
        })
    }

    /// Uses `credentials` instead of the standard chain (tests; fixed keys).
    pub fn with_credentials(mut self, credentials: AwsCredentialProvider) -> Self {
        self.credentials = credentials;
        self
    }

    /// The service and region signed for.
    pub fn scope(&self) -> (&str, &str) {
        (&self.service, &self.region)
    }

    /// Signs `request` in place: adds `x-amz-date`, `x-amz-security-token` when the
    /// credentials are temporary, and `authorization`. The body must be in memory (not a
    /// stream). Fails when no credentials can be had.
    pub async fn sign(&self, request: &mut reqwest::Request) -> Result<(), String> {
        let credential = self
            .credentials
            .get_credential()
            .await
            .map_err(|e| format!("no AWS credentials to sign with: {e}"))?;
        let payload = request
            .body()
            .map(|b| {
                b.as_bytes()
                    .ok_or_else(|| "cannot sign a streamed body".to_string())
            })
            .transpose()?
            .unwrap_or_default();
        let headers: Vec<(String, String)> = request
            .headers()
            .iter()
            .filter(|(name, _)| {
                let name = name.as_str();
                name == "content-type" || name.starts_with("x-amz-")
            })
            .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
            .collect();
        let added = sign(
            request.method().as_str(),
            request.url(),
            &headers,
            payload,
            &credential,
            &self.service,
            &self.region,
            &amz_date(self.clock.now_ms()),
        );
        for (name, value) in added {
            let value = HeaderValue::from_str(&value)
                .map_err(|e| format!("a signing header does not encode: {e}"))?;
            request
                .headers_mut()
                .insert(HeaderName::from_static(name), value);
        }
        Ok(())
    }
}

/// The headers that sign a request (`x-amz-date`, `x-amz-security-token` with temporary
/// credentials, then `authorization`): `headers` are the request's own headers to sign besides
/// `host` (lowercase names), `amz_date` the time in [`amz_date`]'s form.
#[allow(clippy::too_many_arguments)] // the algorithm's inputs, each distinct
pub(crate) fn sign(
    method: &str,
    url: &Url,
    headers: &[(String, String)],
    payload: &[u8],
    credential: &AwsCredential,
    service: &str,
    region: &str,
    amz_date: &str,
) -> SignedHeaders {
    let date = &amz_date[..8];
    let mut signed: Vec<(String, String)> = headers
        .iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), value.clone()))
        .filter(|(name, _)| name != "x-amz-date" && name != "x-amz-security-token")
        .collect();
    signed.push(("host".into(), host_header(url)));
    signed.push(("x-amz-date".into(), amz_date.to_string()));
    if let Some(token) = &credential.token {
        signed.push(("x-amz-security-token".into(), token.clone()));
    }
    signed.sort();
    let signed_headers = signed
        .iter()
        .map(|(name, _)| name.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let canonical_headers: String = signed
        .iter()
        .map(|(name, value)| {
            format!(
                "{name}:{}\n",
                value.split_whitespace().collect::<Vec<_>>().join(" ")
            )
        })
        .collect();
    let canonical_request = format!(
        "{method}\n{}\n{}\n{canonical_headers}\n{signed_headers}\n{}",
        canonical_uri(url),
        canonical_query(url),
        hex::encode(Sha256::digest(payload))
    );
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical_request.as_bytes()))
    );
    let mut key = hmac(
        format!("AWS4{}", credential.secret_key).as_bytes(),
        date.as_bytes(),
    );
    for part in [region, service, "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    let signature = hex::encode(hmac(&key, string_to_sign.as_bytes()));
    let mut out: SignedHeaders = vec![("x-amz-date", amz_date.to_string())];
    if let Some(token) = &credential.token {
        out.push(("x-amz-security-token", token.clone()));
    }
    out.push((
        "authorization",
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
            credential.key_id
        ),
    ));
    out
}

/// The path, as sent (percent-encoded), encoded once more; `/` when empty.
fn canonical_uri(url: &Url) -> String {
    match url.path() {
        "" => "/".into(),
        path => path.split('/').map(encode).collect::<Vec<_>>().join("/"),
    }
}

/// The query's `name=value` pairs as sent, sorted.
fn canonical_query(url: &Url) -> String {
    let Some(query) = url.query().filter(|q| !q.is_empty()) else {
        return String::new();
    };
    let mut pairs: Vec<(&str, &str)> = query
        .split('&')
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// RFC 3986 percent-encoding: everything but `A-Z a-z 0-9 - . _ ~` as `%XX` (upper case).
pub(crate) fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The `host` header a client sends for `url`: the host, and the port when not the scheme's.
pub(crate) fn host_header(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

/// `YYYYMMDDTHHMMSSZ` for a Unix time in milliseconds.
pub(crate) fn amz_date(now_ms: u64) -> String {
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

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(token: Option<&str>) -> AwsCredential {
        AwsCredential {
            key_id: "AKIDEXAMPLE".into(),
            secret_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            token: token.map(str::to_string),
        }
    }

    fn authorization(headers: &SignedHeaders) -> &str {
        &headers
            .iter()
            .find(|(name, _)| *name == "authorization")
            .expect("an authorization header")
            .1
    }

    #[test]
    fn dates_are_utc_basic_format() {
        assert_eq!(amz_date(0), "19700101T000000Z");
        // 2015-08-30T12:36:00Z, the date of AWS's SigV4 examples.
        assert_eq!(amz_date(1_440_938_160_000), "20150830T123600Z");
        // A leap day.
        assert_eq!(amz_date(1_709_210_096_000), "20240229T123456Z");
    }

    /// The signature botocore's `SigV4Auth` computes for the same Glue request, credentials
    /// and time:
    ///   AWSRequest('POST', 'http://127.0.0.1:5000/', data=b'{"Name":"db"}', headers={
    ///     'Content-Type': 'application/x-amz-json-1.1', 'X-Amz-Target': 'AWSGlue.GetDatabase'})
    ///   SigV4Auth(Credentials('AKIDEXAMPLE', 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
    ///     token), 'glue', 'us-east-1').add_auth(request) at 2026-11-29T20:02:05Z
    /// (botocore 1.44).
    #[test]
    fn glue_signatures_match_botocore() {
        let url = Url::parse("http://127.0.0.1:5000/").unwrap();
        let headers = vec![
            (
                "content-type".to_string(),
                "application/x-amz-json-1.1".to_string(),
            ),
            (
                "x-amz-target".to_string(),
                "AWSGlue.GetDatabase".to_string(),
            ),
        ];
        let payload = br#"{"Name":"db"}"#;
        let signed = sign(
            "POST",
            &url,
            &headers,
            payload,
            &credential(None),
            "glue",
            "us-east-1",
            "20261129T200205Z",
        );
        assert_eq!(
            authorization(&signed),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261129/us-east-1/glue/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date;x-amz-target, \
             Signature=f482f0ba071e8403ebe24d35ec94a2a540a63d85de8ae68e09ed99380d3b934b"
        );
        let signed = sign(
            "POST",
            &url,
            &headers,
            payload,
            &credential(Some("session-token")),
            "glue",
            "us-east-1",
            "20261129T200205Z",
        );
        assert_eq!(signed[1], ("x-amz-security-token", "session-token".into()));
        assert!(authorization(&signed).ends_with(
            "SignedHeaders=content-type;host;x-amz-date;x-amz-security-token;x-amz-target, \
             Signature=7f336bbd6b54aefff9a1e948746e2ca2c8d8dfd4f1a2db0410938d81068807e6"
        ));
    }

    #[test]
    fn paths_are_encoded_twice_and_queries_sorted() {
        let url =
            Url::parse("https://s3tables.us-east-1.amazonaws.com/iceberg/v1/a%3Ab/namespaces/x%1Fy/tables?pageToken=t%2B1&parent=a")
                .unwrap();
        assert_eq!(
            canonical_uri(&url),
            "/iceberg/v1/a%253Ab/namespaces/x%251Fy/tables"
        );
        assert_eq!(canonical_query(&url), "pageToken=t%2B1&parent=a");
        assert_eq!(
            canonical_uri(&Url::parse("http://h:1").unwrap()),
            "/",
            "an empty path"
        );
        assert_eq!(
            encode("arn:aws:s3tables:us-east-1:1:bucket/b ~x"),
            "arn%3Aaws%3As3tables%3Aus-east-1%3A1%3Abucket%2Fb%20~x"
        );
        assert_eq!(host_header(&url), "s3tables.us-east-1.amazonaws.com");
    }
}
