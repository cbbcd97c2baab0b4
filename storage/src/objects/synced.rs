//! [`SyncedLocalStore`]: a local folder as an object store whose writes survive power loss.
//!
//! `object_store`'s `LocalFileSystem` writes a temporary file and renames it into place, with no
//! fsync: after a power cut the object may be empty, missing, or its directory entry gone, while
//! the metadata store already says it holds data and the WAL behind it was trimmed. This wrapper
//! makes every write durable before it returns: the file is fsynced, then each directory from
//! its parent up to the store's root (a new object may have created several), so a metadata
//! commit that follows a `put` never points at bytes the disk may forget.
//!
//! Deletes are not synced: a delete lost at a power cut leaves an unreferenced object, which
//! costs space, not data.
//!
//! Syncing goes through [`Syncer`], so tests can record what was synced and simulate a power
//! cut that forgets everything else (`tests/power_loss.rs`).

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, UploadPart,
};

/// Makes a file or directory durable.
pub trait Syncer: Send + Sync + fmt::Debug + 'static {
    /// fsync(2) of the file or directory at `path`.
    fn sync(&self, path: &std::path::Path) -> std::io::Result<()>;
}

/// The real thing: `File::sync_all` (fsync) on the file or directory.
#[derive(Debug, Default, Clone, Copy)]
pub struct Fsync;

impl Syncer for Fsync {
    fn sync(&self, path: &std::path::Path) -> std::io::Result<()> {
        std::fs::File::open(path)?.sync_all()
    }
}

/// A local folder whose writes are durable when they return. See the module docs.
#[derive(Debug, Clone)]
pub struct SyncedLocalStore {
    inner: Arc<LocalFileSystem>,
    root: PathBuf,
    syncer: Arc<dyn Syncer>,
}

impl SyncedLocalStore {
    /// A store over the folder `root` (which must exist), syncing with `syncer`.
    pub fn new(root: impl Into<PathBuf>, syncer: Arc<dyn Syncer>) -> object_store::Result<Self> {
        let root: PathBuf = root.into();
        let root = root
            .canonicalize()
            .map_err(|e| object_store::Error::Generic {
                store: "synced-local",
                source: Box::new(e),
            })?;
        Ok(SyncedLocalStore {
            inner: Arc::new(LocalFileSystem::new_with_prefix(&root)?),
            root,
            syncer,
        })
    }

    /// Syncs the file behind `location`, then every directory from its parent to the root.
    async fn sync(&self, location: &Path) -> object_store::Result<()> {
        let file = self.inner.path_to_filesystem(location)?;
        let (root, syncer) = (self.root.clone(), self.syncer.clone());
        let synced = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            syncer.sync(&file)?;
            let mut dir = file.parent();
            while let Some(d) = dir {
                syncer.sync(d)?;
                if d == root || !d.starts_with(&root) {
                    break;
                }
                dir = d.parent();
            }
            Ok(())
        })
        .await
        .map_err(|e| generic(std::io::Error::other(e.to_string())))?;
        synced.map_err(generic)
    }
}

fn generic(e: std::io::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "synced-local",
        source: format!("fsync failed: {e}").into(),
    }
}

impl fmt::Display for SyncedLocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SyncedLocal({})", self.root.display())
    }
}

/// A multipart upload whose completion is durable.
#[derive(Debug)]
struct SyncedUpload {
    inner: Box<dyn MultipartUpload>,
    store: SyncedLocalStore,
    location: Path,
}

#[async_trait]
impl MultipartUpload for SyncedUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let done = self.inner.complete().await?;
        self.store.sync(&self.location).await?;
        Ok(done)
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.inner.abort().await
    }
}

#[async_trait]
impl ObjectStore for SyncedLocalStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let done = self.inner.put_opts(location, payload, opts).await?;
        self.sync(location).await?;
        Ok(done)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(SyncedUpload {
            inner,
            store: self.clone(),
            location: location.clone(),
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
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

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
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
        self.inner.copy_opts(from, to, options).await?;
        self.sync(to).await
    }
}
