//! Shared fixtures of the stream store's integration tests: a store that can be closed,
//! "crashed" (dropped) and reopened over the same WAL, metadata store and object store, on
//! each backend the store supports.

#![allow(dead_code)]

use std::sync::Arc;

use bytes::Bytes;
pub(crate) use inlet_common::ManualClock;
use inlet_storage::{open_object_store, FaultyStore, MetaStore, StorageConfig, StreamStore};
use object_store::ObjectStore;

/// Which object store and metadata store a fixture uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    /// In-memory objects, SQLite metadata.
    Memory,
    /// A local folder, SQLite metadata: the embedded default.
    Local,
    /// A real S3-compatible server and PostgreSQL (from `scripts/test-env.sh`).
    S3Postgres,
}

pub(crate) struct Fixture {
    pub dir: tempfile::TempDir,
    pub objects: FaultyStore,
    pub meta_url: String,
    pub clock: ManualClock,
    pub config: StorageConfig,
}

pub(crate) use inlet_test_support::service_env;

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        inlet_common::random::u32()
    )
}

/// A small configuration that exercises blocks, read-ahead and uploads with little data.
pub(crate) fn small_config() -> StorageConfig {
    StorageConfig {
        wal_segment_bytes: 64 * 1024,
        log_cache_bytes: 4 << 20,
        max_append_bytes: 1 << 20,
        upload_bytes: 1 << 20,
        upload_interval_ms: 3_600_000,
        object_block_bytes: 1024,
        block_cache_bytes: 64 * 1024,
        readahead_bytes: 4 * 1024,
        maintenance_interval_ms: 3_600_000,
        compaction_small_object_bytes: 64 * 1024,
        compaction_max_merge_bytes: 1 << 20,
        stream_object_min_bytes: 1 << 30,
        retention_ms: None,
        retention_bytes: None,
        delete_grace_ms: 1_000,
        retry: inlet_storage::RetryConfig {
            max_attempts: 4,
            initial_backoff_ms: 1,
            max_backoff_ms: 10,
            attempt_timeout_ms: 2_000,
            ..inlet_storage::RetryConfig::default()
        },
        ..StorageConfig::default()
    }
}

impl Fixture {
    /// A fixture on `backend`, or `None` when that backend's services are not available
    /// outside CI.
    pub(crate) async fn new(backend: Backend) -> Option<Fixture> {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, meta_url): (Arc<dyn ObjectStore>, String) = match backend {
            Backend::Memory => (
                open_object_store("memory://").expect("memory store"),
                format!("sqlite://{}", dir.path().join("meta.db").display()),
            ),
            Backend::Local => (
                open_object_store(dir.path().join("objects").to_str().expect("utf8"))
                    .expect("local store"),
                format!("sqlite://{}", dir.path().join("meta.db").display()),
            ),
            Backend::S3Postgres => {
                let endpoint = service_env("INLET_TEST_S3_ENDPOINT")?;
                let bucket = service_env("INLET_TEST_S3_BUCKET")?;
                let pg = service_env("INLET_TEST_POSTGRES_URL")?;
                let url = format!(
                    "s3://{bucket}/{}?endpoint={endpoint}&allow_http=true&region=us-east-1",
                    unique("t")
                );
                (
                    open_object_store(&url).expect("s3 store"),
                    inlet_test_support::fresh_postgres_database(&pg).await,
                )
            }
        };
        Some(Fixture {
            dir,
            objects: FaultyStore::new(store),
            meta_url,
            clock: ManualClock::new(1_700_000_000_000),
            config: small_config(),
        })
    }

    pub(crate) fn wal_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("wal")
    }

    /// Opens the store with background tasks off (tests drive uploads and maintenance).
    pub(crate) async fn open(&self) -> StreamStore {
        self.try_open().await.expect("store opens")
    }

    pub(crate) async fn try_open(&self) -> inlet_storage::Result<StreamStore> {
        self.open_with(false).await
    }

    /// Opens the store with its background uploader and maintenance running.
    pub(crate) async fn open_with_background_tasks(&self) -> StreamStore {
        self.open_with(true).await.expect("store opens")
    }

    async fn open_with(&self, background: bool) -> inlet_storage::Result<StreamStore> {
        StreamStore::builder(self.wal_dir())
            .config(self.config.clone())
            .meta(MetaStore::connect(&self.meta_url).await?)
            .object_store(Arc::new(self.objects.clone()))
            .clock(Arc::new(self.clock.clone()))
            .background_tasks(background)
            .open()
            .await
    }

    /// Every object key in the object store (tests may list; the store itself never does).
    pub(crate) async fn object_keys(&self) -> Vec<String> {
        use futures::TryStreamExt;
        let inner = open_inner(&self.objects);
        let mut keys: Vec<String> = inner
            .list(None)
            .map_ok(|m| m.location.to_string())
            .try_collect()
            .await
            .expect("list");
        keys.sort();
        keys
    }
}

fn open_inner(store: &FaultyStore) -> Arc<dyn ObjectStore> {
    // Listing through the wrapper would count as a store LIST; tests list the wrapped store.
    store.inner()
}

/// A payload that names its writer and sequence number, padded to `len` bytes.
pub(crate) fn payload(writer: u32, seq: u64, len: usize) -> Bytes {
    let mut v = format!("w{writer}:s{seq}:").into_bytes();
    v.resize(len.max(v.len()), b'.');
    Bytes::from(v)
}

/// The payloads of [`read_all`]'s batches.
pub(crate) async fn read_payloads(store: &StreamStore, stream: u64, from: u64) -> Vec<Bytes> {
    let batches = read_all(store, stream, from).await;
    batches.into_iter().map(|b| b.payload).collect()
}

/// Reads a whole stream from `from` and returns its batches, checking offsets are dense.
pub(crate) async fn read_all(
    store: &StreamStore,
    stream: u64,
    from: u64,
) -> Vec<inlet_storage::ReadBatch> {
    let end = store.end_offset(stream).expect("end offset");
    let mut out: Vec<inlet_storage::ReadBatch> = Vec::new();
    let mut at = from;
    while at < end {
        let batches = store.read(stream, at, 3000).await.expect("read");
        assert!(
            !batches.is_empty(),
            "read at {at} below end {end} returned nothing"
        );
        for b in batches {
            if let Some(prev) = out.last() {
                assert_eq!(b.base_offset, prev.end_offset(), "offsets are dense");
            }
            at = b.end_offset();
            out.push(b);
        }
    }
    out
}
