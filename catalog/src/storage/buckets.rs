//! Storage for the tables of S3 Tables, which keeps each table's files in an S3 bucket of its
//! own, named by the service (`s3://<id>--table-s3`, the table's location), where a client
//! writes them with its own credentials.
//!
//! [`TableBucketsStorage`] is an [`ObjectStoreStorage`] (the node's, its root confinement
//! intact) plus, for a location outside that root, the bucket the location names, opened on
//! first use with the node's S3 settings (the `AWS_*` environment, and the query of the node's
//! own S3 URL: endpoint, region) — only a bucket whose name ends with [`TABLE_BUCKET_SUFFIX`],
//! the suffix AWS reserves for table buckets. Any other location is refused before a call is
//! made, as [`ObjectStoreStorage`] refuses one outside its root. Each opened bucket keeps its
//! own storage, rooted at the bucket, so the same rules (no `.`/`..`, the bucket's root never
//! deleted whole) hold inside it. At most [`MAX_BUCKETS`] are kept open; past that the least
//! recently opened is closed.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::StreamExt;
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage, StorageConfig,
    StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::{ObjectStoreStorage, ObjectStoreStorageFactory};

/// The suffix of the buckets S3 Tables keeps table files in.
pub const TABLE_BUCKET_SUFFIX: &str = "--table-s3";
/// Table buckets kept open at once (one S3 client each).
pub(super) const MAX_BUCKETS: usize = 256;

/// Builds [`TableBucketsStorage`]s over `default`'s storage.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TableBucketsFactory {
    default: ObjectStoreStorageFactory,
    #[serde(skip)]
    opened: Arc<Mutex<VecDeque<(String, ObjectStoreStorage)>>>,
}

impl TableBucketsFactory {
    pub fn new(default: ObjectStoreStorageFactory) -> Self {
        TableBucketsFactory {
            default,
            opened: Arc::default(),
        }
    }

    /// The storage, as itself.
    pub fn storage(&self) -> Result<TableBucketsStorage> {
        Ok(TableBucketsStorage {
            default: self.default.storage()?,
            options: options_of(self.default.base_url()),
            opened: self.opened.clone(),
        })
    }
}

#[typetag::serde(name = "inlet-table-buckets")]
impl StorageFactory for TableBucketsFactory {
    fn build(&self, _config: &StorageConfig) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(self.storage()?))
    }
}

/// The query of an `s3://` base URL (`?endpoint=…&region=…`), which the table buckets are
/// opened with too; empty for other schemes.
fn options_of(base_url: &str) -> String {
    match base_url.strip_prefix("s3://") {
        Some(rest) => rest
            .split_once('?')
            .map(|(_, query)| format!("?{query}"))
            .unwrap_or_default(),
        None => String::new(),
    }
}

/// The node's storage, and S3 Tables' table buckets; see the module docs.
#[derive(Clone, Serialize, Deserialize)]
#[serde(try_from = "Spec", into = "Spec")]
pub struct TableBucketsStorage {
    default: ObjectStoreStorage,
    /// The query table buckets are opened with.
    options: String,
    /// Opened table buckets, the most recently opened last.
    opened: Arc<Mutex<VecDeque<(String, ObjectStoreStorage)>>>,
}

#[derive(Serialize, Deserialize)]
struct Spec {
    default: ObjectStoreStorage,
}

impl TryFrom<Spec> for TableBucketsStorage {
    type Error = Error;

    fn try_from(spec: Spec) -> Result<Self> {
        Ok(TableBucketsStorage {
            options: options_of(&spec.default.base_url),
            default: spec.default,
            opened: Arc::default(),
        })
    }
}

impl From<TableBucketsStorage> for Spec {
    fn from(storage: TableBucketsStorage) -> Self {
        Spec {
            default: storage.default,
        }
    }
}

impl fmt::Debug for TableBucketsStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableBucketsStorage")
            .field("default", &self.default)
            .field("opened", &self.opened.lock().len())
            .finish()
    }
}

impl TableBucketsStorage {
    /// The storage `location` is in: the node's, or the table bucket it names.
    pub fn route(&self, location: &str) -> Result<ObjectStoreStorage> {
        if self.default.object_key(location).is_ok() {
            return Ok(self.default.clone());
        }
        let bucket = location
            .strip_prefix("s3://")
            .and_then(|rest| rest.split('/').next())
            .filter(|b| b.ends_with(TABLE_BUCKET_SUFFIX) && b.len() > TABLE_BUCKET_SUFFIX.len())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::DataInvalid,
                    format!(
                        "location {location:?} is neither under {} nor in an S3 Tables table \
                         bucket (s3://…{TABLE_BUCKET_SUFFIX})",
                        self.default.root()
                    ),
                )
            })?;
        let mut opened = self.opened.lock();
        if let Some((_, storage)) = opened.iter().find(|(b, _)| b == bucket) {
            return Ok(storage.clone());
        }
        let storage = ObjectStoreStorage::new(
            &format!("s3://{bucket}{}", self.options),
            None,
            self.default.write,
        )?;
        if opened.len() >= MAX_BUCKETS {
            opened.pop_front();
        }
        opened.push_back((bucket.to_string(), storage.clone()));
        Ok(storage)
    }
}

#[async_trait]
#[typetag::serde(name = "inlet-table-buckets")]
impl Storage for TableBucketsStorage {
    async fn exists(&self, path: &str) -> Result<bool> {
        self.route(path)?.exists(path).await
    }

    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        self.route(path)?.metadata(path).await
    }

    async fn read(&self, path: &str) -> Result<Bytes> {
        self.route(path)?.read(path).await
    }

    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        self.route(path)?.reader(path).await
    }

    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        self.route(path)?.write(path, bs).await
    }

    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        self.route(path)?.writer(path).await
    }

    async fn delete(&self, path: &str) -> Result<()> {
        self.route(path)?.delete(path).await
    }

    async fn delete_prefix(&self, path: &str) -> Result<()> {
        self.route(path)?.delete_prefix(path).await
    }

    /// Deletes in batches, each split by the storage its locations are in; a location that
    /// is in none stops the deletes before its batch.
    async fn delete_stream(&self, paths: BoxStream<'static, String>) -> Result<()> {
        let mut batches = paths.chunks(super::DELETE_BATCH);
        while let Some(batch) = batches.next().await {
            let mut groups: Vec<(ObjectStoreStorage, Vec<String>)> = Vec::new();
            for path in batch {
                let storage = self.route(&path)?;
                match groups.iter_mut().find(|(s, _)| s.root() == storage.root()) {
                    Some((_, paths)) => paths.push(path),
                    None => groups.push((storage, vec![path])),
                }
            }
            for (storage, paths) in groups {
                storage.delete_stream(stream::iter(paths).boxed()).await?;
            }
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> Result<InputFile> {
        self.route(path)?.new_input(path)
    }

    fn new_output(&self, path: &str) -> Result<OutputFile> {
        self.route(path)?.new_output(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn table_buckets_are_reached_and_other_places_refused() {
        let node = tempfile::tempdir().unwrap();
        let factory = TableBucketsFactory::new(ObjectStoreStorageFactory::new(
            node.path().to_str().unwrap(),
        ));
        let storage = factory.storage().unwrap();
        // The node's own root, as ever.
        let own = format!("{}/warehouse/t/data/f.parquet", storage.default.root());
        storage.write(&own, Bytes::from_static(b"x")).await.unwrap();
        assert_eq!(storage.read(&own).await.unwrap(), Bytes::from_static(b"x"));
        // Another bucket only when S3 Tables named it; elsewhere refused before any call.
        for refused in [
            "s3://someone-elses-bucket/data/f.parquet",
            "s3://--table-s3/f",
            "file:///etc/passwd",
            "gs://b--table-s3/f",
        ] {
            let err = storage.route(refused).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::DataInvalid, "{refused}");
        }
        let table = "s3://6a3c2f3e-1d2b-4f5e-aa01-0123456789ab--table-s3/data/f.parquet";
        let routed = storage.route(table).unwrap();
        assert_eq!(
            routed.root(),
            "s3://6a3c2f3e-1d2b-4f5e-aa01-0123456789ab--table-s3"
        );
        // Opened once, then reused; the bucket's own root cannot be deleted whole.
        assert_eq!(storage.opened.lock().len(), 1);
        storage.route(table).unwrap();
        assert_eq!(storage.opened.lock().len(), 1);
        assert!(storage
            .delete_prefix("s3://6a3c2f3e-1d2b-4f5e-aa01-0123456789ab--table-s3")
            .await
            .is_err());
        assert_eq!(
            options_of("s3://b/p?endpoint=http://127.0.0.1:9000&region=us-east-1"),
            "?endpoint=http://127.0.0.1:9000&region=us-east-1"
        );
        assert_eq!(options_of("file:///x"), "");
    }
}
