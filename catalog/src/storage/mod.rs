//! Iceberg file IO over the node's object store, so stream objects and Iceberg tables share one
//! client, one configuration and one fault-injection wrapper ([`inlet_storage::FaultyStore`]).
//!
//! [`ObjectStoreStorage`] implements iceberg's [`Storage`] over an `Arc<dyn ObjectStore>`
//! rooted at a base URL (`file:///data/objects`, `s3://bucket/prefix`, `memory://`): key `a/b`
//! of the store is location `<base URL>/a/b`. [`ObjectStoreStorageFactory`] builds it from
//! iceberg's [`FileIOBuilder`] (and is what catalogs take in `with_storage_factory`);
//! [`file_io`] does both.
//!
//! Invariants:
//! - **Root confinement.** Every location is mapped by [`ObjectStoreStorage::object_key`],
//!   which refuses (non-retryable `DataInvalid`) any location of another scheme or bucket,
//!   outside the root's path, or with a `.`/`..` segment, before any call reaches the store.
//!   The root is the store's whole key space, stream objects included, so `delete_prefix`
//!   refuses the root itself.
//! - **Visible on close.** An object appears whole or not at all: `write` is one PUT (or a
//!   multipart upload completed at the end), and a [`FileWrite`] from `writer` makes its object
//!   visible only when `close` succeeds. A failed or dropped writer leaves nothing under the
//!   key; a failed multipart upload is aborted (a dropped one is left for the bucket's lifecycle
//!   rule on incomplete uploads).
//! - **Durable on a local disk.** On a `file://` root, a write returns (and a writer's
//!   `close` succeeds) only after the file and the folders it changed are fsynced
//!   (`durable.rs`), so a metadata-pointer swap that follows never names a file a power loss
//!   could take back (the local object store renames a staged file into place but syncs
//!   nothing). Object stores like S3 are durable when the PUT returns.
//! - **Errors say whether to retry.** object_store errors keep their message as the source;
//!   transient failures are `retryable()`, refusals and missing objects are not (see
//!   [`is_not_found`]). Nothing here retries: `open_object_store` turns the client's own
//!   retries off, so callers retry through their one retry helper.

mod buckets;
mod durable;
mod error;
mod root;
mod writer;

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use iceberg::io::{
    FileIO, FileIOBuilder, FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage,
    StorageConfig, StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutOptions};
use serde::{Deserialize, Serialize};

pub use buckets::{TableBucketsFactory, TableBucketsStorage, TABLE_BUCKET_SUFFIX};
pub use durable::local_syncs;
pub use error::is_not_found;
pub use writer::WriteConfig;

use durable::LocalSync;
use error::from_object_store;
use root::Root;
use writer::ObjectWriter;

/// How many keys one `delete_stream` call hands the store at a time (S3's batch limit).
const DELETE_BATCH: usize = 1000;

/// A [`FileIO`] over `store` (or, if `None`, the store `base_url` opens with
/// [`inlet_storage::open_object_store`]), rooted at `base_url`. Checks the URL now.
pub fn file_io(base_url: &str, store: Option<Arc<dyn ObjectStore>>) -> Result<FileIO> {
    let mut factory = ObjectStoreStorageFactory::new(base_url);
    if let Some(store) = store {
        factory = factory.with_store(store);
    }
    factory.build(&StorageConfig::new())?;
    Ok(FileIOBuilder::new(Arc::new(factory)).build())
}

/// Builds [`ObjectStoreStorage`]s, all over one store: the one given with
/// [`with_store`](Self::with_store), or else the one the first `build` opens from the base
/// URL (clones share it). Serializes as its base URL and write configuration only, so a
/// deserialized factory opens its own store from the URL (S3 credentials come from the
/// environment; a `memory://` store starts empty).
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectStoreStorageFactory {
    base_url: String,
    #[serde(default)]
    write: WriteConfig,
    #[serde(skip)]
    store: Arc<OnceLock<Arc<dyn ObjectStore>>>,
}

impl ObjectStoreStorageFactory {
    /// A factory for storages rooted at `base_url`; see [`ObjectStoreStorage::new`].
    pub fn new(base_url: impl Into<String>) -> Self {
        ObjectStoreStorageFactory {
            base_url: base_url.into(),
            write: WriteConfig::default(),
            store: Arc::default(),
        }
    }

    /// Uses `store` (rooted at the base URL) instead of opening one: the node's shared
    /// client, possibly wrapped in [`inlet_storage::FaultyStore`].
    pub fn with_store(mut self, store: Arc<dyn ObjectStore>) -> Self {
        self.store = Arc::new(OnceLock::from(store));
        self
    }

    /// The storage this factory builds, as itself (what iceberg's [`Storage`] does not offer,
    /// such as [`ObjectStoreStorage::list`]); opens the shared store if none is open yet.
    pub fn storage(&self) -> Result<ObjectStoreStorage> {
        let storage =
            ObjectStoreStorage::new(&self.base_url, self.store.get().cloned(), self.write)?;
        // Racing first builds each open a store; all keep the one that lands first.
        let store = self.store.get_or_init(|| storage.store.clone());
        Ok(ObjectStoreStorage {
            store: store.clone(),
            ..storage
        })
    }

    /// Sets how objects are uploaded.
    pub fn with_write_config(mut self, write: WriteConfig) -> Self {
        self.write = write;
        self
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }
}

impl fmt::Debug for ObjectStoreStorageFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStoreStorageFactory")
            .field("base_url", &self.base_url)
            .field("write", &self.write)
            .field("store", &self.store.get().map(|s| s.to_string()))
            .finish()
    }
}

#[typetag::serde(name = "inlet-object-store")]
impl StorageFactory for ObjectStoreStorageFactory {
    /// Builds the storage. iceberg's storage properties (`s3.*` and the like) are ignored: the
    /// object store is configured by the base URL and the environment, as the stream store's.
    fn build(&self, _config: &StorageConfig) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(self.storage()?))
    }
}

/// One object found by [`ObjectStoreStorage::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedFile {
    /// Its location, in the form the storage's root gives (`s3://bucket/prefix/…`).
    pub location: String,
    pub last_modified_ms: i64,
}

/// What an [`ObjectStoreStorage`] serializes as.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StorageSpec {
    base_url: String,
    #[serde(default)]
    write: WriteConfig,
}

/// iceberg's [`Storage`] over one object store rooted at a base URL; see the module docs for
/// its invariants. Serializes as its base URL and write configuration; deserializing opens the
/// store from the URL.
#[derive(Clone, Serialize, Deserialize)]
#[serde(try_from = "StorageSpec", into = "StorageSpec")]
pub struct ObjectStoreStorage {
    base_url: String,
    root: Arc<Root>,
    write: WriteConfig,
    store: Arc<dyn ObjectStore>,
}

impl ObjectStoreStorage {
    /// A storage rooted at `base_url`: `file:///abs/path` or a plain path (a relative one is
    /// made absolute now), `s3://bucket[/prefix][?endpoint=…&region=…&allow_http=…]`, or
    /// `memory://`. `store`, if given, must be rooted there too; otherwise the store is opened
    /// with [`inlet_storage::open_object_store`] (for `memory://`, a new empty one).
    pub fn new(
        base_url: &str,
        store: Option<Arc<dyn ObjectStore>>,
        write: WriteConfig,
    ) -> Result<Self> {
        let root = Root::parse(base_url)?;
        write.validate()?;
        let store = match store {
            Some(store) => store,
            None => inlet_storage::open_object_store(root.open_url()).map_err(|e| {
                Error::new(
                    ErrorKind::DataInvalid,
                    format!("cannot open the object store at {base_url:?}"),
                )
                .with_source(e)
            })?,
        };
        Ok(ObjectStoreStorage {
            base_url: base_url.to_string(),
            root: Arc::new(root),
            write,
            store,
        })
    }

    /// The root as a location, e.g. `file:///data/objects` or `s3://bucket/prefix`.
    pub fn root(&self) -> String {
        self.root.location()
    }

    /// The object store underneath.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The key `location` names in the store (empty for the root itself), or an error if it
    /// is outside the root.
    pub fn object_key(&self, location: &str) -> Result<Path> {
        self.root.key(location)
    }

    /// The location of `key` in the store.
    pub fn location_of(&self, key: &Path) -> String {
        self.root.location_of(key)
    }

    /// The objects under the folder `location` (at any depth) that `wanted` takes, with when
    /// each was last written (ms since the epoch); the others are not kept, so a large
    /// folder costs memory only for what is wanted. iceberg's file IO cannot list; table
    /// maintenance that looks for files no snapshot names does.
    pub async fn list(
        &self,
        location: &str,
        wanted: impl Fn(&ListedFile) -> bool,
    ) -> Result<Vec<ListedFile>> {
        let key = self.root.key(location)?;
        let prefix = (!key.as_ref().is_empty()).then_some(&key);
        let mut listing = self.store.list(prefix);
        let mut found = Vec::new();
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|e| from_object_store("list", location, e))?;
            let file = ListedFile {
                location: self.location_of(&meta.location),
                last_modified_ms: meta.last_modified.timestamp_millis(),
            };
            if wanted(&file) {
                found.push(file);
            }
        }
        Ok(found)
    }

    /// The key of the object `location` names; the root itself names no object.
    fn object(&self, location: &str) -> Result<Path> {
        let key = self.root.key(location)?;
        if key.as_ref().is_empty() {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!("location {location:?} is the storage root, not an object"),
            ));
        }
        Ok(key)
    }

    fn object_writer(&self, location: &str) -> Result<ObjectWriter> {
        let key = self.object(location)?;
        let local = self.root.local_path(&key).map(LocalSync::before_write);
        Ok(
            ObjectWriter::new(self.store.clone(), key, location.to_string(), self.write)
                .syncing(local),
        )
    }

    /// Drains the outcome of a store `delete_stream`; objects already gone count as deleted.
    async fn finish_deletes(
        &self,
        mut outcomes: BoxStream<'static, object_store::Result<Path>>,
        what: &str,
    ) -> Result<()> {
        while let Some(outcome) = outcomes.next().await {
            match outcome {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(from_object_store("delete", what, e)),
            }
        }
        Ok(())
    }
}

impl TryFrom<StorageSpec> for ObjectStoreStorage {
    type Error = Error;

    fn try_from(spec: StorageSpec) -> Result<Self> {
        ObjectStoreStorage::new(&spec.base_url, None, spec.write)
    }
}

impl From<ObjectStoreStorage> for StorageSpec {
    fn from(storage: ObjectStoreStorage) -> Self {
        StorageSpec {
            base_url: storage.base_url,
            write: storage.write,
        }
    }
}

impl fmt::Debug for ObjectStoreStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStoreStorage")
            .field("root", &self.root.location())
            .field("store", &self.store.to_string())
            .finish()
    }
}

#[async_trait]
#[typetag::serde(name = "inlet-object-store")]
impl Storage for ObjectStoreStorage {
    /// Whether an object is at `path` (a prefix with objects under it is not one).
    async fn exists(&self, path: &str) -> Result<bool> {
        let key = self.object(path)?;
        self.write
            .retrying(|| async {
                match self.store.head(&key).await {
                    Ok(_) => Ok(true),
                    Err(object_store::Error::NotFound { .. }) => Ok(false),
                    Err(e) => Err(from_object_store("look up", path, e)),
                }
            })
            .await
    }

    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        let key = self.object(path)?;
        let meta = self
            .write
            .retrying(|| async {
                self.store
                    .head(&key)
                    .await
                    .map_err(|e| from_object_store("look up", path, e))
            })
            .await?;
        Ok(FileMetadata { size: meta.size })
    }

    async fn read(&self, path: &str) -> Result<Bytes> {
        let key = self.object(path)?;
        self.write
            .retrying(|| async {
                let read = async { self.store.get(&key).await?.bytes().await };
                read.await.map_err(|e| from_object_store("read", path, e))
            })
            .await
    }

    /// A reader of ranges of `path`; a missing object is reported by the first read.
    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        Ok(Box::new(ObjectReader {
            store: self.store.clone(),
            key: self.object(path)?,
            location: path.to_string(),
            retry: self.write,
        }))
    }

    /// Writes the whole object: visible at once, complete, when this returns `Ok`.
    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        if bs.len() > self.write.part_bytes {
            let mut writer = self.object_writer(path)?;
            writer.write(bs).await?;
            return writer.close().await;
        }
        let key = self.object(path)?;
        let local = self.root.local_path(&key).map(LocalSync::before_write);
        self.write
            .retrying(|| async {
                self.store
                    .put_opts(&key, bs.clone().into(), PutOptions::default())
                    .await
                    .map(|_| ())
                    .map_err(|e| from_object_store("write", path, e))
            })
            .await?;
        match local {
            Some(local) => local.sync(path).await,
            None => Ok(()),
        }
    }

    /// A streaming writer; the object becomes visible when `close` returns `Ok`.
    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        Ok(Box::new(self.object_writer(path)?))
    }

    /// Deletes the object at `path`; a missing object is not an error.
    async fn delete(&self, path: &str) -> Result<()> {
        let key = self.object(path)?;
        self.write
            .retrying(|| async {
                match self.store.delete(&key).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(from_object_store("delete", path, e)),
                }
            })
            .await
    }

    /// Deletes every object under `path` (as a folder: `a/b` covers `a/b/c`, not `a/bc` nor
    /// an object at `a/b` itself). Refuses the root.
    async fn delete_prefix(&self, path: &str) -> Result<()> {
        let prefix = self.root.key(path)?;
        if prefix.as_ref().is_empty() {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "refusing to delete everything under the storage root ({path:?}): it holds \
                     the stream store's objects too"
                ),
            ));
        }
        let under = prefix.clone();
        let listed = self
            .store
            .list(Some(&prefix))
            .try_filter(move |meta| {
                let strictly_under = meta
                    .location
                    .prefix_match(&under)
                    .is_some_and(|mut rest| rest.next().is_some());
                futures::future::ready(strictly_under)
            })
            .map_ok(|meta| meta.location)
            .boxed();
        self.finish_deletes(self.store.delete_stream(listed), path)
            .await
    }

    /// Deletes the objects at `paths`, in batches; checks each batch's locations before
    /// deleting any of it, so a location outside the root stops the deletes there.
    async fn delete_stream(&self, paths: BoxStream<'static, String>) -> Result<()> {
        let mut batches = paths.chunks(DELETE_BATCH);
        while let Some(batch) = batches.next().await {
            let keys = batch
                .iter()
                .map(|path| self.object(path))
                .collect::<Result<Vec<_>>>()?;
            let keys = stream::iter(keys.into_iter().map(Ok)).boxed();
            let what = format!("objects under {}", self.root.location());
            self.finish_deletes(self.store.delete_stream(keys), &what)
                .await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> Result<InputFile> {
        self.object(path)?;
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> Result<OutputFile> {
        self.object(path)?;
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

/// Ranged reads of one object, one GET each (retried).
struct ObjectReader {
    store: Arc<dyn ObjectStore>,
    key: Path,
    location: String,
    retry: WriteConfig,
}

impl ObjectReader {
    fn past_end(&self, range: &Range<u64>, size: u64) -> Error {
        Error::new(
            ErrorKind::DataInvalid,
            format!(
                "cannot read bytes {}..{} of {}: it is only {size} bytes long",
                range.start, range.end, self.location
            ),
        )
    }
}

#[async_trait]
impl FileRead for ObjectReader {
    async fn read(&self, range: Range<u64>) -> Result<Bytes> {
        self.retry.retrying(|| self.read_once(range.clone())).await
    }
}

impl ObjectReader {
    async fn read_once(&self, range: Range<u64>) -> Result<Bytes> {
        if range.start > range.end {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "cannot read bytes {}..{} of {}: the range is reversed",
                    range.start, range.end, self.location
                ),
            ));
        }
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        match self.store.get_range(&self.key, range.clone()).await {
            Ok(bytes) if bytes.len() as u64 == range.end - range.start => Ok(bytes),
            // Stores return what there is of a range that runs past the end.
            Ok(bytes) => Err(self.past_end(&range, range.start + bytes.len() as u64)),
            // Some stores report a range that starts past the end as a generic (retryable)
            // failure; a HEAD tells that apart from a transient one.
            Err(e @ object_store::Error::Generic { .. }) => {
                match self.store.head(&self.key).await {
                    Ok(meta) if meta.size <= range.start => Err(self.past_end(&range, meta.size)),
                    _ => Err(from_object_store("read", &self.location, e)),
                }
            }
            Err(e) => Err(from_object_store("read", &self.location, e)),
        }
    }
}
