//! Conformance of iceberg's file IO over object_store (`inlet_catalog::storage`), run against a
//! local folder, object_store's `InMemory`, and S3 (moto, from `scripts/test-env.sh`) when
//! its variables are set; plus fault injection through `inlet_storage::FaultyStore`.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use iceberg::io::{FileIO, FileIOBuilder, Storage, StorageConfig, StorageFactory};
use iceberg::ErrorKind;
use inlet_catalog::storage::{
    file_io, is_not_found, ObjectStoreStorage, ObjectStoreStorageFactory, WriteConfig,
};
use inlet_storage::{open_object_store, Fault, FaultyStore, Op};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, UploadPart,
};

const MIB: usize = 1024 * 1024;

/// One object store to run the suite against, with the base URL it is rooted at.
struct Backend {
    base_url: String,
    store: Arc<dyn ObjectStore>,
    _dir: Option<tempfile::TempDir>,
}

impl Backend {
    fn local() -> Backend {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("objects");
        let store = open_object_store(path.to_str().expect("utf8")).expect("local store");
        Backend {
            base_url: format!("file://{}", path.display()),
            store,
            _dir: Some(dir),
        }
    }

    fn memory() -> Backend {
        Backend {
            base_url: "memory://warehouse".to_string(),
            store: Arc::new(InMemory::new()),
            _dir: None,
        }
    }

    /// S3 from the test environment; `None` (skip) when it is not set up, outside CI.
    fn s3() -> Option<Backend> {
        let endpoint = service_env("INLET_TEST_S3_ENDPOINT")?;
        let bucket = service_env("INLET_TEST_S3_BUCKET")?;
        let base_url = format!(
            "s3://{bucket}/icestore_{}_{}?endpoint={endpoint}&allow_http=true&region=us-east-1",
            std::process::id(),
            {
                use std::hash::{BuildHasher, Hasher};
                // Random per run, so reruns against one bucket do not meet old objects.
                std::collections::hash_map::RandomState::new()
                    .build_hasher()
                    .finish()
            }
        );
        let store = open_object_store(&base_url).expect("s3 store");
        Some(Backend {
            base_url,
            store,
            _dir: None,
        })
    }

    /// The root as a location (without the S3 URL's query).
    fn root(&self) -> String {
        ObjectStoreStorage::new(
            &self.base_url,
            Some(self.store.clone()),
            WriteConfig::default(),
        )
        .expect("storage")
        .root()
    }

    fn loc(&self, key: &str) -> String {
        format!("{}/{key}", self.root())
    }
}

use inlet_test_support::service_env;

/// `len` bytes that differ at every offset modulo a prime, so misplaced ranges show.
fn data(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i % 251) as u8 ^ seed)
        .collect::<Vec<_>>()
        .into()
}

fn io_over(backend: &Backend, store: Arc<dyn ObjectStore>) -> FileIO {
    let factory = ObjectStoreStorageFactory::new(&backend.base_url).with_store(store);
    FileIOBuilder::new(Arc::new(factory)).build()
}

/// [`io_over`] with `config` for its writes.
fn io_with(backend: &Backend, store: Arc<dyn ObjectStore>, config: WriteConfig) -> FileIO {
    let factory = ObjectStoreStorageFactory::new(&backend.base_url)
        .with_store(store)
        .with_write_config(config);
    FileIOBuilder::new(Arc::new(factory)).build()
}

/// The backends to test: memory, a local folder, and S3 when it is set up.
fn backends() -> Vec<Backend> {
    let s3 = Backend::s3();
    [Some(Backend::memory()), Some(Backend::local()), s3]
        .into_iter()
        .flatten()
        .collect()
}

/// The suite every backend passes.
async fn conformance(backend: &Backend) {
    let spy = Arc::new(Spy::new(backend.store.clone(), None));
    let io = io_over(backend, spy.clone());
    whole_objects(backend, &io).await;
    ranged_reads(backend, &io).await;
    streaming_writes(backend, &io, &spy).await;
    missing_objects(backend, &io).await;
    deletes(backend, &io).await;
    outside_the_root(backend, &io).await;
}

async fn whole_objects(b: &Backend, io: &FileIO) {
    let path = b.loc("wh/ns/t/metadata/v1.metadata.json");
    let body = Bytes::from_static(b"{\"format-version\": 2}");
    let out = io.new_output(&path).expect("output");
    assert!(!out.exists().await.expect("exists"));
    out.write(body.clone()).await.expect("write");
    assert!(io.exists(&path).await.expect("exists"));
    let input = io.new_input(&path).expect("input");
    assert_eq!(input.location(), path);
    assert_eq!(
        input.metadata().await.expect("metadata").size,
        body.len() as u64
    );
    assert_eq!(input.read().await.expect("read"), body);

    // Overwrite replaces the object.
    out.write(Bytes::from_static(b"v2"))
        .await
        .expect("overwrite");
    assert_eq!(input.read().await.expect("read"), "v2");

    // The object is where the root says: key `wh/...` of the store.
    let key = Path::from("wh/ns/t/metadata/v1.metadata.json");
    let direct = b.store.get(&key).await.expect("get").bytes().await;
    assert_eq!(direct.expect("bytes"), "v2");
}

async fn ranged_reads(b: &Backend, io: &FileIO) {
    let path = b.loc("wh/ranges/a.bin");
    let body = data(10_000, 7);
    io.new_output(&path)
        .expect("output")
        .write(body.clone())
        .await
        .expect("write");
    let reader = io
        .new_input(&path)
        .expect("input")
        .reader()
        .await
        .expect("reader");
    for range in [0..10, 3..4, 9_990..10_000, 0..10_000, 4_096..8_192] {
        let got = reader.read(range.clone()).await.expect("read range");
        assert_eq!(
            got,
            body.slice(range.start as usize..range.end as usize),
            "{range:?}"
        );
    }
    assert!(reader.read(5..5).await.expect("empty").is_empty());
    for range in [9_990..10_001, 10_000..10_010, 20_000..20_001] {
        let err = reader.read(range.clone()).await.expect_err("past the end");
        assert_eq!(err.kind(), ErrorKind::DataInvalid, "{range:?}: {err}");
        assert!(!err.retryable(), "{range:?}: {err}");
        assert!(err.to_string().contains("10000 bytes"), "{err}");
    }
    #[allow(clippy::reversed_empty_ranges)]
    let err = reader.read(9..3).await.expect_err("reversed");
    assert_eq!(err.kind(), ErrorKind::DataInvalid);
}

async fn streaming_writes(b: &Backend, io: &FileIO, spy: &Spy) {
    // Small: one PUT at close, nothing visible before.
    let small = b.loc("wh/stream/small.parquet");
    let out = io.new_output(&small).expect("output");
    let mut writer = out.writer().await.expect("writer");
    writer
        .write(Bytes::from_static(b"PAR1"))
        .await
        .expect("write");
    writer
        .write(Bytes::from_static(b"..."))
        .await
        .expect("write");
    assert!(
        !io.exists(&small).await.expect("exists"),
        "visible before close"
    );
    writer.close().await.expect("close");
    assert_eq!(
        io.new_input(&small)
            .expect("in")
            .read()
            .await
            .expect("read"),
        "PAR1..."
    );
    assert!(writer.close().await.is_err(), "second close");
    assert!(
        writer.write(Bytes::from_static(b"x")).await.is_err(),
        "write after close"
    );
    assert_eq!(spy.multipart_starts(), 0, "small objects are one PUT");

    // Large: multipart in 8 MiB parts, written in uneven chunks, visible only after close.
    let large = b.loc("wh/stream/large.parquet");
    let len = 20 * MIB + 12_345;
    let body = data(len, 3);
    let mut writer = io
        .new_output(&large)
        .expect("out")
        .writer()
        .await
        .expect("writer");
    let mut at = 0;
    while at < len {
        let end = (at + 700 * 1024 + 13).min(len);
        writer
            .write(body.slice(at..end))
            .await
            .expect("write chunk");
        at = end;
    }
    assert_eq!(
        spy.multipart_starts(),
        1,
        "a large object is a multipart upload"
    );
    assert!(
        !io.exists(&large).await.expect("exists"),
        "visible before close"
    );
    writer.close().await.expect("close");
    let input = io.new_input(&large).expect("input");
    assert_eq!(input.metadata().await.expect("meta").size, len as u64);
    assert!(
        input.read().await.expect("read") == body,
        "large object round trip"
    );
    let reader = input.reader().await.expect("reader");
    let boundary = 8 * MIB as u64;
    let across = boundary - 100..boundary + 100;
    assert_eq!(
        reader.read(across.clone()).await.expect("across parts"),
        body.slice(across.start as usize..across.end as usize)
    );

    // A large whole-object write goes multipart too.
    let whole = b.loc("wh/stream/whole.bin");
    let body = data(12 * MIB, 9);
    io.new_output(&whole)
        .expect("out")
        .write(body.clone())
        .await
        .expect("write");
    assert_eq!(spy.multipart_starts(), 2);
    assert!(
        io.new_input(&whole)
            .expect("in")
            .read()
            .await
            .expect("read")
            == body
    );
}

async fn missing_objects(b: &Backend, io: &FileIO) {
    let path = b.loc("wh/missing/nothing.avro");
    assert!(!io.exists(&path).await.expect("exists"));
    let input = io.new_input(&path).expect("input");
    let err = input
        .metadata()
        .await
        .err()
        .expect("metadata of a missing object fails");
    assert!(is_not_found(&err) && !err.retryable(), "{err}");
    assert!(err.to_string().contains(&path), "{err}");
    let err = input.read().await.expect_err("read of a missing object");
    assert!(is_not_found(&err) && !err.retryable(), "{err}");
    let reader = input.reader().await.expect("readers are lazy");
    let err = reader
        .read(0..1)
        .await
        .expect_err("ranged read of a missing object");
    assert!(is_not_found(&err) && !err.retryable(), "{err}");
    // Deleting what is not there is fine.
    io.delete(&path).await.expect("delete missing");
    io.delete_prefix(b.loc("wh/missing/"))
        .await
        .expect("delete missing prefix");
}

async fn deletes(b: &Backend, io: &FileIO) {
    let write = |key: &'static str| {
        let path = b.loc(key);
        async move {
            io.new_output(&path)
                .expect("out")
                .write(Bytes::from(key))
                .await
                .expect("write");
        }
    };
    for key in [
        "wh/d/t/a",
        "wh/d/t/sub/b",
        "wh/d/tt/c",
        "wh/d/keep",
        "wh/d/x1",
        "wh/d/x2",
    ] {
        write(key).await;
    }
    io.delete(b.loc("wh/d/keep")).await.expect("delete");
    assert!(!io.exists(b.loc("wh/d/keep")).await.expect("exists"));

    io.delete_prefix(b.loc("wh/d/t"))
        .await
        .expect("delete_prefix");
    assert!(!io.exists(b.loc("wh/d/t/a")).await.expect("a"));
    assert!(!io.exists(b.loc("wh/d/t/sub/b")).await.expect("b"));
    assert!(
        io.exists(b.loc("wh/d/tt/c")).await.expect("c"),
        "a prefix is a folder, not a string prefix"
    );
    io.delete_prefix(b.loc("wh/d/tt/"))
        .await
        .expect("with a slash");
    assert!(!io.exists(b.loc("wh/d/tt/c")).await.expect("c"));

    let paths = vec![b.loc("wh/d/x1"), b.loc("wh/d/x2"), b.loc("wh/d/never")];
    io.delete_stream(futures::stream::iter(paths))
        .await
        .expect("delete_stream");
    assert!(!io.exists(b.loc("wh/d/x1")).await.expect("x1"));
    assert!(!io.exists(b.loc("wh/d/x2")).await.expect("x2"));

    let err = io.delete_prefix(b.root()).await.expect_err("the root");
    assert!(err.message().contains("refusing"), "{err}");
    assert!(io
        .exists(b.loc("wh/stream/small.parquet"))
        .await
        .expect("still there"));
}

async fn outside_the_root(b: &Backend, io: &FileIO) {
    let root = b.root();
    let outside = [
        format!("{root}/../escape"),
        format!("{root}/wh/./x"),
        format!("{root}2/x"),
        "file:///etc/passwd".to_string(),
        "s3://another-bucket/x".to_string(),
        "relative/path".to_string(),
    ];
    for path in &outside {
        let err = io.new_output(path).expect_err(path);
        assert_eq!(err.kind(), ErrorKind::DataInvalid, "{path}");
        assert!(!err.retryable(), "{path}");
        assert!(io.new_input(path).is_err(), "{path}");
        assert!(io.exists(path).await.is_err(), "{path}");
        assert!(io.delete(path).await.is_err(), "{path}");
        assert!(io.delete_prefix(path).await.is_err(), "{path}");
    }
    let paths = vec![b.loc("wh/stream/small.parquet"), outside[0].clone()];
    assert!(io
        .delete_stream(futures::stream::iter(paths))
        .await
        .is_err());
    assert!(
        io.exists(b.loc("wh/stream/small.parquet"))
            .await
            .expect("exists"),
        "a batch with a location outside the root deletes nothing"
    );
    let err = io.new_output(&root).expect_err("the root is not an object");
    assert!(err.message().contains("root"), "{err}");
}

#[tokio::test]
async fn conformance_local_folder() {
    let backend = Backend::local();
    conformance(&backend).await;
    // Objects are plain files under the folder, where other engines read them.
    let dir = backend.base_url.strip_prefix("file://").expect("file URL");
    let file = std::path::Path::new(dir).join("wh/stream/small.parquet");
    assert_eq!(std::fs::read(file).expect("file"), b"PAR1...");
}

#[tokio::test]
async fn conformance_in_memory() {
    conformance(&Backend::memory()).await;
}

#[tokio::test]
async fn conformance_s3() {
    let Some(backend) = Backend::s3() else { return };
    conformance(&backend).await;
}

#[tokio::test]
async fn file_io_helper_and_factory_serialization() {
    let backend = Backend::local();
    let io = file_io(&backend.base_url, None).expect("file_io opens the folder");
    let path = backend.loc("wh/t/metadata/00000-a.metadata.json");
    io.new_output(&path)
        .expect("out")
        .write(Bytes::from_static(b"{}"))
        .await
        .expect("write");

    // A factory travels as its URL and reopens the same store.
    let factory: Arc<dyn StorageFactory> = Arc::new(
        ObjectStoreStorageFactory::new(&backend.base_url).with_store(Arc::new(InMemory::new())),
    );
    let json = serde_json::to_string(&factory).expect("serialize");
    assert!(
        json.contains("inlet-object-store") && json.contains("base_url"),
        "{json}"
    );
    let back: Box<dyn StorageFactory> = serde_json::from_str(&json).expect("deserialize");
    let storage = back.build(&StorageConfig::new()).expect("build");
    assert_eq!(storage.read(&path).await.expect("read"), "{}");

    // So does a storage.
    let json = serde_json::to_string(&storage).expect("serialize storage");
    let again: Box<dyn Storage> = serde_json::from_str(&json).expect("deserialize storage");
    assert!(again.exists(&path).await.expect("exists"));

    // Without a store, a factory opens one on first build and keeps it.
    let factory = ObjectStoreStorageFactory::new("memory://");
    let first = factory.build(&StorageConfig::new()).expect("build");
    first
        .write("memory://a", Bytes::from_static(b"kept"))
        .await
        .expect("write");
    let second = factory.clone().build(&StorageConfig::new()).expect("build");
    assert_eq!(second.read("memory://a").await.expect("same store"), "kept");

    for bad in ["gs://bucket/x", "s3://bucket/x?colour=blue", ""] {
        let err = file_io(bad, None).expect_err(bad);
        assert_eq!(err.kind(), ErrorKind::DataInvalid, "{bad}: {err}");
    }
    let tiny = WriteConfig {
        part_bytes: 1024,
        ..WriteConfig::default()
    };
    assert!(ObjectStoreStorage::new(&backend.base_url, None, tiny).is_err());
}

/// With puts failing, writes fail retryably and leave no object; likewise reads and deletes.
#[tokio::test]
async fn faults_surface_as_retryable_errors_and_leave_nothing() {
    for backend in backends() {
        let faulty = FaultyStore::new(backend.store.clone());
        // One attempt: these faults never clear, so retrying would only wait.
        let io = io_with(
            &backend,
            Arc::new(faulty.clone()),
            WriteConfig {
                attempts: 1,
                ..WriteConfig::default()
            },
        );
        let path = backend.loc("wh/faults/a.parquet");
        let visible = |path: String| {
            let storage = ObjectStoreStorage::new(
                &backend.base_url,
                Some(backend.store.clone()),
                WriteConfig::default(),
            )
            .expect("storage");
            async move { storage.exists(&path).await.expect("exists") }
        };

        faulty.inject(Op::Put, Fault::Fail, None);
        let out = io.new_output(&path).expect("out");
        let err = out
            .write(Bytes::from_static(b"x"))
            .await
            .expect_err("put fails");
        assert!(err.retryable(), "{err}");
        assert!(err.to_string().contains("injected"), "source kept: {err}");
        assert!(!visible(path.clone()).await);

        let mut writer = out.writer().await.expect("writer");
        writer
            .write(Bytes::from_static(b"small"))
            .await
            .expect("buffered");
        let err = writer.close().await.expect_err("close fails");
        assert!(err.retryable(), "{err}");
        assert!(
            writer.close().await.is_err(),
            "a failed writer stays failed"
        );
        assert!(!visible(path.clone()).await);

        let mut writer = out.writer().await.expect("writer");
        let err = writer
            .write(data(9 * MIB, 1))
            .await
            .expect_err("starting the multipart upload fails");
        assert!(err.retryable(), "{err}");
        assert!(writer.write(Bytes::from_static(b"x")).await.is_err());
        assert!(!visible(path.clone()).await);

        faulty.clear(Op::Put);
        out.write(Bytes::from_static(b"ok")).await.expect("write");
        faulty.inject(Op::Get, Fault::Fail, None);
        let input = io.new_input(&path).expect("in");
        assert!(input.read().await.expect_err("get fails").retryable());
        assert!(input
            .metadata()
            .await
            .err()
            .expect("head fails")
            .retryable());
        let reader = input.reader().await.expect("reader");
        assert!(reader
            .read(0..1)
            .await
            .expect_err("range fails")
            .retryable());
        faulty.clear(Op::Get);

        faulty.inject(Op::Delete, Fault::Fail, None);
        assert!(io
            .delete(&path)
            .await
            .expect_err("delete fails")
            .retryable());
        assert!(io
            .delete_prefix(backend.loc("wh/faults"))
            .await
            .expect_err("prefix")
            .retryable());
        faulty.clear(Op::Delete);
        assert!(visible(path.clone()).await);
        io.delete_prefix(backend.loc("wh/faults"))
            .await
            .expect("delete_prefix");
        assert!(!visible(path).await);
    }
}

/// A part that fails aborts the multipart upload; a dropped writer leaves nothing visible.
#[tokio::test]
async fn failed_and_abandoned_multipart_uploads_leave_nothing() {
    for backend in backends() {
        let spy = Arc::new(Spy::new(backend.store.clone(), Some(1)));
        let io = io_over(&backend, spy.clone());
        let path = backend.loc("wh/parts/a.parquet");
        let mut writer = io
            .new_output(&path)
            .expect("out")
            .writer()
            .await
            .expect("writer");
        let mut failure = None;
        for i in 0..4 {
            if let Err(e) = writer.write(data(8 * MIB, i)).await {
                failure = Some(e);
                break;
            }
        }
        let err = match failure {
            Some(err) => err,
            None => writer.close().await.expect_err("the second part fails"),
        };
        assert!(err.retryable(), "{err}");
        assert_eq!(
            spy.aborts.load(Ordering::SeqCst),
            1,
            "the upload is aborted"
        );
        assert!(writer.close().await.is_err());
        assert!(!io.exists(&path).await.expect("exists"));
        if let Some(dir) = backend.base_url.strip_prefix("file://") {
            let parts = std::path::Path::new(dir).join("wh/parts");
            let left: Vec<_> = std::fs::read_dir(&parts)
                .map(|entries| entries.map(|e| e.expect("entry").path()).collect())
                .unwrap_or_default();
            assert!(left.is_empty(), "the aborted upload left {left:?}");
        }

        let io = io_over(&backend, backend.store.clone());
        let mut writer = io
            .new_output(&path)
            .expect("out")
            .writer()
            .await
            .expect("writer");
        writer.write(data(20 * MIB, 2)).await.expect("write");
        drop(writer);
        assert!(
            !io.exists(&path).await.expect("exists"),
            "dropped before close"
        );
    }
}

/// Counts multipart uploads and aborts, and can fail one part of each upload.
#[derive(Debug)]
struct Spy {
    inner: Arc<dyn ObjectStore>,
    starts: AtomicUsize,
    aborts: Arc<AtomicUsize>,
    fail_part: Option<usize>,
}

impl Spy {
    fn new(inner: Arc<dyn ObjectStore>, fail_part: Option<usize>) -> Self {
        Spy {
            inner,
            starts: AtomicUsize::new(0),
            aborts: Arc::default(),
            fail_part,
        }
    }

    fn multipart_starts(&self) -> usize {
        self.starts.load(Ordering::SeqCst)
    }
}

impl fmt::Display for Spy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Spy({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for Spy {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.starts.fetch_add(1, Ordering::SeqCst);
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(SpyUpload {
            inner,
            parts: 0,
            fail_part: self.fail_part,
            aborts: self.aborts.clone(),
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[derive(Debug)]
struct SpyUpload {
    inner: Box<dyn MultipartUpload>,
    parts: usize,
    fail_part: Option<usize>,
    aborts: Arc<AtomicUsize>,
}

#[async_trait]
impl MultipartUpload for SpyUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let n = self.parts;
        self.parts += 1;
        if Some(n) == self.fail_part {
            return Box::pin(async move {
                Err(object_store::Error::Generic {
                    store: "spy",
                    source: format!("injected failure of part {n}").into(),
                })
            });
        }
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        self.inner.complete().await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.aborts.fetch_add(1, Ordering::SeqCst);
        self.inner.abort().await
    }
}

/// Transient failures (two in a row) are retried away for reads, ranged reads, writes and
/// deletes; the store sees each failed attempt.
#[tokio::test]
async fn transient_faults_are_retried() {
    let backend = Backend::memory();
    let faulty = FaultyStore::new(backend.store.clone());
    let io = io_with(
        &backend,
        Arc::new(faulty.clone()),
        WriteConfig {
            attempts: 4,
            initial_backoff_ms: 1,
            ..WriteConfig::default()
        },
    );
    let path = backend.loc("wh/retry/a.bin");
    faulty.inject(Op::Put, Fault::Fail, Some(2));
    let out = io.new_output(&path).expect("out");
    out.write(Bytes::from_static(b"hello"))
        .await
        .expect("write after two failures");
    assert_eq!(faulty.calls(Op::Put), 3);
    faulty.inject(Op::Get, Fault::Fail, Some(2));
    let input = io.new_input(&path).expect("in");
    assert_eq!(
        input.read().await.expect("read"),
        Bytes::from_static(b"hello")
    );
    faulty.inject(Op::Get, Fault::Fail, Some(2));
    let reader = input.reader().await.expect("reader");
    assert_eq!(
        reader.read(1..3).await.expect("range"),
        Bytes::from_static(b"el")
    );
    faulty.inject(Op::Delete, Fault::Fail, Some(2));
    io.delete(&path).await.expect("delete after two failures");
    assert!(!io.exists(&path).await.expect("exists"));
}

/// S3 Tables keeps a table's files in a bucket of its own (`…--table-s3`): the node's file
/// IO in that mode (`TableBucketsFactory`) writes and reads there with the node's S3
/// settings, keeps its own root as before, and refuses any other bucket (moto, when set up).
#[tokio::test]
async fn s3_tables_buckets_are_written_beside_the_node_store() {
    let (Some(endpoint), Some(bucket)) = (
        service_env("INLET_TEST_S3_ENDPOINT"),
        service_env("INLET_TEST_S3_BUCKET"),
    ) else {
        return;
    };
    let run = {
        use std::hash::{BuildHasher, Hasher};
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    };
    // The table bucket S3 Tables would have made (moto takes an unsigned create).
    let table_bucket = format!("t{run:x}--table-s3");
    let created = reqwest::Client::new()
        .put(format!("{endpoint}/{table_bucket}"))
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success(), "{created:?}");
    let base =
        format!("s3://{bucket}/node_{run:x}?endpoint={endpoint}&allow_http=true&region=us-east-1");
    let factory =
        inlet_catalog::storage::TableBucketsFactory::new(ObjectStoreStorageFactory::new(&base));
    let io = FileIOBuilder::new(Arc::new(factory)).build();
    let body = Bytes::from_static(b"a data file");
    for location in [
        format!("s3://{table_bucket}/data/p0-0-10.parquet"),
        format!("s3://{bucket}/node_{run:x}/warehouse/t/data/p0-0-10.parquet"),
    ] {
        io.new_output(&location)
            .unwrap()
            .write(body.clone())
            .await
            .unwrap();
        assert_eq!(io.new_input(&location).unwrap().read().await.unwrap(), body);
        assert!(io.exists(&location).await.unwrap(), "{location}");
        io.delete(&location).await.unwrap();
        assert!(!io.exists(&location).await.unwrap(), "{location}");
    }
    // Another bucket, or another place in the node's bucket, is refused before any call.
    for refused in [
        format!("s3://{bucket}/elsewhere/f"),
        "s3://another-bucket/f".to_string(),
    ] {
        let err = io.new_output(&refused).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::DataInvalid, "{refused}: {err}");
    }
}
