//! Iceberg catalog access (docs/architecture.md, "Catalog and SQL"): the embedded SQL catalog on the metadata store,
//! external REST catalogs, AWS Glue, and the Iceberg REST catalog server engines connect to.
//!
//! - [`storage`]: iceberg's file IO over the node's object store (one client, one fault
//!   wrapper for streams and tables).
//! - [`rest`]: the Iceberg REST catalog server over any `iceberg::Catalog`, with its own
//!   compare-and-swap commit path.
//! - [`embedded`]: the node's default catalog: the SQL catalog on the metadata database, files
//!   under `<object store>/warehouse`, and its REST router.
//! - [`external`]: another Iceberg REST catalog as the home of the node's tables (its
//!   own client: bearer tokens, OAuth2 client credentials, or SigV4 for AWS's endpoints).
//! - [`sigv4`]: AWS Signature Version 4, for Glue and the AWS Iceberg REST endpoints.
//! - [`glue`]: AWS Glue as the home of the node's tables (pointers in Glue, files in the
//!   object store, commits by `UpdateTable` with optimistic concurrency).
//! - [`metadata_cache`]: parsed table metadata by metadata location, within a byte budget.
//! - [`target`]: where Inlet's own commits go, either way ([`CommitTarget`]).
//! - [`NodeCatalog`]: whichever of the three a node's [`CatalogConfig`] names.
//! - [`visible`]: a catalog as one principal may read it (SQL under the HTTP APIs' guard).

pub(crate) mod config;
pub mod embedded;
pub(crate) mod external;
pub mod glue;
pub(crate) mod metadata_cache;
pub mod rest;
pub mod sigv4;
pub mod storage;
pub(crate) mod target;
pub mod visible;

use std::sync::Arc;

use iceberg::io::FileIO;
use iceberg::Catalog;
use object_store::ObjectStore;

pub use config::{CatalogConfig, CatalogKind};
pub use target::CommitTarget;

/// The catalog a node's tables live in, opened from its [`CatalogConfig`].
#[derive(Clone, Debug)]
pub struct NodeCatalog {
    home: Home,
    file_io: FileIO,
    /// The storage under `file_io`, as itself (it can list).
    storage: storage::ObjectStoreStorage,
}

#[derive(Clone, Debug)]
enum Home {
    Embedded(embedded::EmbeddedCatalog),
    External(external::ExternalCatalog),
    Glue(glue::GlueHome),
}

impl NodeCatalog {
    /// Opens the catalog `config` names: the embedded one on the metadata database `meta_url`
    /// with files in the object store at `object_store_root` (through `store`, the node's
    /// client, when given), or an external one; `clock` is the node's (Glue signs its
    /// requests with it).
    pub async fn open(
        config: &CatalogConfig,
        meta_url: &str,
        object_store_root: &str,
        store: Option<Arc<dyn ObjectStore>>,
        clock: Arc<dyn inlet_common::Clock>,
    ) -> iceberg::Result<NodeCatalog> {
        config
            .validate()
            .map_err(|e| iceberg::Error::new(iceberg::ErrorKind::DataInvalid, e))?;
        let root = embedded::root_url(object_store_root);
        match config.kind {
            CatalogKind::Embedded => {
                let factory = match &store {
                    Some(s) => storage::ObjectStoreStorageFactory::new(&root).with_store(s.clone()),
                    None => storage::ObjectStoreStorageFactory::new(&root),
                };
                let files = factory.storage()?;
                let file_io = iceberg::io::FileIOBuilder::new(std::sync::Arc::new(factory)).build();
                let catalog =
                    embedded::open_with(config, meta_url, object_store_root, store).await?;
                Ok(NodeCatalog {
                    home: Home::Embedded(catalog),
                    file_io,
                    storage: files,
                })
            }
            CatalogKind::Rest => {
                let catalog = external::open(config, object_store_root, store, clock).await?;
                Ok(NodeCatalog {
                    file_io: catalog.file_io.clone(),
                    storage: catalog.storage.clone(),
                    home: Home::External(catalog),
                })
            }
            CatalogKind::Glue => {
                let home = glue::open(config, object_store_root, store, clock)?;
                Ok(NodeCatalog {
                    file_io: home.file_io.clone(),
                    storage: home.storage.clone(),
                    home: Home::Glue(home),
                })
            }
        }
    }

    /// The catalog, for loading tables and DDL.
    pub fn catalog(&self) -> Arc<dyn Catalog> {
        match &self.home {
            Home::Embedded(c) => c.catalog.clone(),
            Home::External(c) => c.catalog.clone(),
            Home::Glue(c) => c.catalog.clone(),
        }
    }

    /// Where Inlet's own commits go.
    pub fn commit_target(&self) -> CommitTarget {
        match &self.home {
            Home::Embedded(c) => CommitTarget::Pointers(c.pointers.clone()),
            Home::External(c) => CommitTarget::Rest(c.commits.clone()),
            Home::Glue(c) => CommitTarget::Glue(c.catalog.clone()),
        }
    }

    /// Where the data files of a table topic's table go: `<warehouse>/<namespace>/<table>/data`.
    /// The embedded catalog's warehouse, or for an external or Glue catalog
    /// [`CatalogConfig::files`]
    /// (default: `<object store>/warehouse`).
    pub fn warehouse(&self) -> String {
        match &self.home {
            Home::Embedded(c) => c.warehouse.clone(),
            Home::External(c) => c.warehouse.clone(),
            Home::Glue(c) => c.warehouse.clone(),
        }
    }

    /// The file IO for data files under [`warehouse`](Self::warehouse).
    pub fn file_io(&self) -> &FileIO {
        &self.file_io
    }

    /// The storage under [`file_io`](Self::file_io) as itself, for what file IO cannot do
    /// (listing a table's files).
    pub fn storage(&self) -> &storage::ObjectStoreStorage {
        &self.storage
    }

    /// Whether the tables live in an external catalog (REST or Glue).
    pub fn is_external(&self) -> bool {
        matches!(self.home, Home::External(_) | Home::Glue(_))
    }

    /// The REST catalog API to serve at `/iceberg`: over the embedded catalog, or in front of
    /// the external one (its commits forwarded), or over Glue (commits applied here and
    /// swapped in Glue).
    pub fn router(&self, config: rest::RestConfig) -> axum::Router {
        match &self.home {
            Home::Embedded(c) => c.router(config),
            Home::External(c) => {
                rest::router_forwarding(c.catalog.clone(), c.commits.clone(), config)
            }
            Home::Glue(c) => c.router(config),
        }
    }
}

#[cfg(test)]
mod tests {
    use iceberg::memory::{MemoryCatalogBuilder, MEMORY_CATALOG_WAREHOUSE};
    use iceberg::{Catalog, CatalogBuilder, NamespaceIdent};

    #[tokio::test]
    async fn memory_catalog_creates_a_namespace() {
        let dir = std::env::temp_dir().join(format!("inlet-catalog-smoke-{}", std::process::id()));
        let catalog = MemoryCatalogBuilder::default()
            .load(
                "smoke",
                [(
                    MEMORY_CATALOG_WAREHOUSE.to_string(),
                    dir.to_string_lossy().into_owned(),
                )]
                .into(),
            )
            .await
            .expect("catalog");
        let ns = NamespaceIdent::new("smoke".into());
        catalog
            .create_namespace(&ns, Default::default())
            .await
            .expect("create");
        assert!(catalog.namespace_exists(&ns).await.expect("exists"));
    }
}
