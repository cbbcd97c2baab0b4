//! An external Iceberg REST catalog as the home of a node's tables (`[catalog] type = "rest"`):
//! Polaris, Nessie, Lakekeeper, Unity, S3 Tables' REST endpoint, or another Inlet node.
//!
//! One client ([`RestClient`], `client.rs`) makes every call, with the catalog's
//! authentication: a bearer token, OAuth2 client credentials, or AWS SigV4 (AWS Glue's and S3
//! Tables' Iceberg REST endpoints; an S3 Tables table bucket's ARN as `warehouse` is enough).
//! Reads and DDL are iceberg's `Catalog` over it (`tables.rs`); commits post the spec's
//! `POST /v1/{prefix}/namespaces/{ns}/tables/{t}` with the requirements and updates as they
//! are (iceberg 0.10.1 gives no way to build a `TableCommit`, see `rest/commit.rs`). It also
//! forwards what the node's `/iceberg` cannot pass through a `Catalog`: multi-table commits and
//! namespace property updates.
//!
//! Invariants:
//! - The external catalog decides: it checks the requirements, writes `metadata.json` and
//!   swaps its pointer. A 409 means a requirement failed or another commit won (the caller
//!   reloads and retries); 500, 502 and 504 mean the outcome is unknown; a request that never
//!   reached the catalog (connection refused) is a 503, safe to retry.
//! - Inlet writes data files, manifests and manifest lists under [`CatalogConfig::files`]
//!   (default: the node's object store); a table location outside it cannot be written.
//!
//! AWS Glue is another kind of external catalog: [`crate::glue`].
//!
//! Not built: vended credentials (the files are reached with the node's own object
//! store credentials).

mod client;
mod tables;

use std::sync::Arc;

use iceberg::Catalog;
use object_store::ObjectStore;

use crate::config::CatalogConfig;
use crate::storage::ObjectStoreStorageFactory;
pub(crate) use client::RestClient;
use tables::RestTables;

/// An opened external REST catalog.
#[derive(Clone)]
pub(crate) struct ExternalCatalog {
    /// Reads and DDL.
    pub catalog: Arc<dyn Catalog>,
    /// Commits, and what is forwarded as it is.
    pub commits: Arc<RestClient>,
    /// The root of the file IO for this catalog's tables ([`CatalogConfig::files`] as a URL,
    /// or the node's object store root).
    pub files: String,
    /// Where the data files of table topics go: `files`, or `<node root>/warehouse` when
    /// the files are in the node's object store.
    pub warehouse: String,
    /// File IO under `files`, over the same object-store client as the catalog's tables.
    pub file_io: iceberg::io::FileIO,
    /// The same storage as itself, for what file IO cannot do (listing).
    pub storage: crate::storage::ObjectStoreStorage,
}

impl std::fmt::Debug for ExternalCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalCatalog")
            .field("uri", &self.commits.uri)
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

/// Opens the external catalog `config` names. `node_root` and `node_store` are the node's
/// object store: the files go there unless `config.files` names another place; `clock` dates
/// SigV4 signatures. Nothing is sent until the first call.
pub(crate) async fn open(
    config: &CatalogConfig,
    node_root: &str,
    node_store: Option<Arc<dyn ObjectStore>>,
    clock: Arc<dyn inlet_common::Clock>,
) -> iceberg::Result<ExternalCatalog> {
    config
        .validate()
        .map_err(|e| iceberg::Error::new(iceberg::ErrorKind::DataInvalid, e))?;
    let (files, warehouse, factory) = files_factory(config.files.as_deref(), node_root, node_store);
    // Checks the URL and opens the store now; clones of the factory share it, so data files
    // and the catalog's tables use one client.
    let storage = factory.storage()?;
    // S3 Tables keeps each table's files in a bucket of its own: with its ARN as the
    // warehouse and no `files`, those buckets are reached too.
    let table_buckets = config.files.is_none()
        && config
            .warehouse
            .as_deref()
            .and_then(crate::config::s3_tables_region)
            .is_some();
    let file_io = if table_buckets {
        iceberg::io::FileIOBuilder::new(Arc::new(crate::storage::TableBucketsFactory::new(factory)))
            .build()
    } else {
        iceberg::io::FileIOBuilder::new(Arc::new(factory)).build()
    };
    let client = Arc::new(RestClient::new(config, clock)?);
    Ok(ExternalCatalog {
        catalog: Arc::new(RestTables::new(client.clone(), file_io.clone())),
        commits: client,
        files,
        warehouse,
        file_io,
        storage,
    })
}

/// Where an external catalog's table files are: `files` (a URL with a client of its own), or
/// else the node's object store (`node_root`, through `node_store` when given), whose
/// warehouse is `<node root>/warehouse`. Returns the file IO's root, the warehouse, and the
/// storage factory; clones of the factory share one client.
pub(crate) fn files_factory(
    files: Option<&str>,
    node_root: &str,
    node_store: Option<Arc<dyn ObjectStore>>,
) -> (String, String, ObjectStoreStorageFactory) {
    match files {
        Some(files) => {
            let files = crate::embedded::root_url(files);
            let factory = ObjectStoreStorageFactory::new(files.clone());
            (files.clone(), files, factory)
        }
        None => {
            let root = crate::embedded::root_url(node_root);
            let mut factory = ObjectStoreStorageFactory::new(root.clone());
            if let Some(store) = node_store {
                factory = factory.with_store(store);
            }
            (
                root,
                crate::embedded::warehouse_location(node_root),
                factory,
            )
        }
    }
}
