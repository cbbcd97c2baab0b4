//! Object storage: opening a store from a URL, the object format, retries, and a
//! fault-injecting wrapper for tests.
//!
//! Every object store call the stream store makes goes through [`ObjectClient`], the one place
//! that retries retryable failures with backoff and bounds each attempt by a timeout. The
//! object store is never listed to find data: the metadata store indexes every object.

pub mod faulty;
pub mod format;
pub mod synced;

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::config::RetryConfig;
use crate::error::{Error, Result};

/// Opens the object store a URL names:
/// - `file:///abs/path` or a plain path: a local folder (created if missing), whose writes are
///   fsynced before they return ([`synced::SyncedLocalStore`]);
/// - `s3://bucket[/prefix]`: S3 or an S3-compatible store. Credentials, region and endpoint come
///   from the standard AWS environment variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
///   `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`); query parameters `endpoint`, `region`
///   and `allow_http` override them;
/// - `memory://`: in memory, for tests.
///
/// A prefix in the URL scopes every key under it.
/// The S3 client of `s3://bucket/prefix?…`: the environment's settings, then the URL's.
///
/// Payload signing hashes every byte PUT with SHA-256 (a tenth of a node's CPU under load).
/// Over HTTPS it is skipped (`UNSIGNED-PAYLOAD`): TLS protects the body in transit, and every
/// object Inlet writes carries its own CRC-32C, checked on read. Over plain HTTP the signature
/// is the body's only integrity check at the store, so it stays. `unsigned_payload=true|false`
/// in the URL, or `AWS_UNSIGNED_PAYLOAD`, decides instead.
fn s3_builder(parsed: &url::Url, bucket: &str) -> std::result::Result<AmazonS3Builder, String> {
    let mut builder = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        // Retries happen in ObjectClient, the one retry loop.
        .with_retry(object_store::RetryConfig {
            max_retries: 0,
            ..Default::default()
        });
    let mut unsigned = std::env::var("AWS_UNSIGNED_PAYLOAD")
        .ok()
        .map(|v| v.eq_ignore_ascii_case("true"));
    for (key, value) in parsed.query_pairs() {
        builder = match key.as_ref() {
            "endpoint" => builder.with_endpoint(value.to_string()),
            "region" => builder.with_region(value.to_string()),
            "allow_http" => builder.with_allow_http(value == "true"),
            "unsigned_payload" => {
                unsigned = Some(value == "true");
                builder
            }
            other => return Err(format!("unknown parameter {other:?}")),
        };
    }
    let https = builder
        .get_config_value(&AmazonS3ConfigKey::Endpoint)
        .is_none_or(|e| e.starts_with("https://"));
    Ok(builder.with_unsigned_payload(unsigned.unwrap_or(https)))
}

pub fn open_object_store(url: &str) -> Result<Arc<dyn ObjectStore>> {
    let bad = |msg: String| Error::Config(format!("object store URL {url:?}: {msg}"));
    if url == "memory://" || url == "memory:" {
        return Ok(Arc::new(InMemory::new()));
    }
    if url.starts_with("s3://") {
        let parsed = url::Url::parse(url).map_err(|e| bad(e.to_string()))?;
        let bucket = parsed
            .host_str()
            .filter(|b| !b.is_empty())
            .ok_or_else(|| bad("no bucket".into()))?;
        let store = s3_builder(&parsed, bucket)
            .map_err(bad)?
            .build()
            .map_err(|e| bad(e.to_string()))?;
        let prefix = parsed.path().trim_matches('/');
        return Ok(if prefix.is_empty() {
            Arc::new(store)
        } else {
            Arc::new(PrefixStore::new(store, prefix))
        });
    }
    let path = url.strip_prefix("file://").unwrap_or(url);
    if path.is_empty() || url.contains("://") && !url.starts_with("file://") {
        return Err(bad(
            "expected file:///path, a path, s3://bucket/prefix or memory://".into(),
        ));
    }
    std::fs::create_dir_all(path).map_err(|e| bad(e.to_string()))?;
    // Every write is fsynced (file and folders) before it returns: see `synced`.
    let store = synced::SyncedLocalStore::new(path, Arc::new(synced::Fsync))
        .map_err(|e| bad(e.to_string()))?;
    Ok(Arc::new(store))
}

/// Object store calls with bounded retries and per-attempt timeouts.
#[derive(Debug, Clone)]
pub struct ObjectClient {
    store: Arc<dyn ObjectStore>,
    retry: RetryConfig,
}

impl ObjectClient {
    pub fn new(store: Arc<dyn ObjectStore>, retry: RetryConfig) -> Self {
        ObjectClient { store, retry }
    }

    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// Runs `call` until it succeeds, fails with an error that is not retryable, or has used
    /// `max_attempts`. A timed-out attempt counts as a retryable failure.
    async fn with_retry<T, F, Fut>(&self, op: &'static str, path: &Path, call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = object_store::Result<T>>,
    {
        let timeout = Duration::from_millis(self.retry.attempt_timeout_ms);
        self.with_retry_in(op, path, timeout, call).await
    }

    /// [`Self::with_retry`] with `timeout` for each attempt.
    async fn with_retry_in<T, F, Fut>(
        &self,
        op: &'static str,
        path: &Path,
        timeout: Duration,
        mut call: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = object_store::Result<T>>,
    {
        inlet_common::retry(&self.retry.policy(), Error::kind, |_| {
            let attempt = call();
            async move {
                let outcome = match tokio::time::timeout(timeout, attempt).await {
                    Ok(result) => result,
                    Err(_) => Err(object_store::Error::Generic {
                        store: "inlet",
                        source: format!("attempt timed out after {timeout:?}").into(),
                    }),
                };
                outcome.map_err(|source| Error::ObjectStore {
                    op,
                    path: path.to_string(),
                    source,
                })
            }
        })
        .await
    }

    /// Writes a whole object atomically.
    pub async fn put(&self, path: &Path, data: Bytes) -> Result<()> {
        self.put_chunks(path, std::slice::from_ref(&data)).await
    }

    /// Writes a whole object, given as chunks, atomically. Each attempt may take longer the
    /// larger the object is ([`RetryConfig`]'s `min_put_bytes_per_sec`).
    pub async fn put_chunks(&self, path: &Path, chunks: &[Bytes]) -> Result<()> {
        let payload: PutPayload = chunks.iter().cloned().collect();
        let size: u64 = chunks.iter().map(|c| c.len() as u64).sum();
        let timeout = self.retry.put_timeout(size);
        self.with_retry_in("PUT", path, timeout, || {
            self.store.put(path, payload.clone())
        })
        .await
        .map(|_| ())
    }

    /// Reads a byte range of an object.
    pub async fn get_range(&self, path: &Path, range: Range<u64>) -> Result<Bytes> {
        self.with_retry("GET", path, || self.store.get_range(path, range.clone()))
            .await
    }

    /// Reads a whole object.
    pub async fn get(&self, path: &Path) -> Result<Bytes> {
        self.with_retry("GET", path, || async {
            self.store.get(path).await?.bytes().await
        })
        .await
    }

    /// Deletes an object; an object that is already gone counts as deleted.
    pub async fn delete(&self, path: &Path) -> Result<()> {
        match self
            .with_retry("DELETE", path, || self.store.delete(path))
            .await
        {
            Err(Error::ObjectStore {
                source: object_store::Error::NotFound { .. },
                ..
            }) => Ok(()),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked() {
        assert!(open_object_store("memory://").is_ok());
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("objects");
        assert!(open_object_store(path.to_str().expect("utf8")).is_ok());
        assert!(path.is_dir(), "the local folder is created");
        let err = open_object_store("ftp://example/x").unwrap_err();
        assert!(err.to_string().contains("expected"), "{err}");
        let err = open_object_store("s3://bucket/p?colour=blue").unwrap_err();
        assert!(err.to_string().contains("colour"), "{err}");
    }

    #[test]
    fn payloads_are_signed_over_http_only() {
        if std::env::var_os("AWS_UNSIGNED_PAYLOAD").is_some() {
            return; // the environment decides for every URL
        }
        let unsigned = |url: &str| {
            let parsed = url::Url::parse(url).expect("URL");
            s3_builder(&parsed, "b")
                .expect("builder")
                .get_config_value(&AmazonS3ConfigKey::UnsignedPayload)
        };
        let tls = "s3://b/p?endpoint=https://s3.example";
        let plain = "s3://b/p?endpoint=http://127.0.0.1:9000&allow_http=true";
        assert_eq!(unsigned(tls).as_deref(), Some("true"));
        assert_eq!(unsigned(plain).as_deref(), Some("false"));
        assert_eq!(
            unsigned(&format!("{plain}&unsigned_payload=true")).as_deref(),
            Some("true")
        );
        assert_eq!(
            unsigned(&format!("{tls}&unsigned_payload=false")).as_deref(),
            Some("false")
        );
    }
}
