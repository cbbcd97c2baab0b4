//! The embedded catalog a node serves by default (DESIGN.md §6): iceberg-rust's SQL catalog on
//! the node's metadata database (SQLite in the data dir, or the cluster's PostgreSQL), its files
//! in the node's object store under `warehouse/`, and the REST server over it.
//!
//! Invariants:
//! - Table metadata and data files live under `<object store root>/warehouse`, written through
//!   the node's one object-store client ([`crate::storage`]), and the REST server refuses
//!   client-chosen locations outside it.
//! - Commits from REST clients and from Inlet itself go through the same compare-and-swap on the
//!   table's metadata pointer ([`crate::rest::SqlMetadataPointers`]).

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::{Catalog, CatalogBuilder};
use iceberg_catalog_sql::SqlCatalogBuilder;
use object_store::ObjectStore;

use crate::rest::{router_with_commits, RestConfig, SqlMetadataPointers};
use crate::storage::ObjectStoreStorageFactory;

/// The catalog's name in the SQL tables (`catalog_name` column).
pub const CATALOG_NAME: &str = "inlet";

/// The embedded catalog of a node.
#[derive(Clone)]
pub struct EmbeddedCatalog {
    pub catalog: Arc<dyn Catalog>,
    pub pointers: Arc<SqlMetadataPointers>,
    /// Where tables live: `<object store root>/warehouse`.
    pub warehouse: String,
}

impl std::fmt::Debug for EmbeddedCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedCatalog")
            .field("warehouse", &self.warehouse)
            .finish_non_exhaustive()
    }
}

/// An object store root as a URL: a plain path becomes an absolute `file://` URL, since
/// engines read table locations as URLs.
pub fn root_url(object_store_root: &str) -> String {
    // Connection parameters (`s3://bucket/prefix?endpoint=...`) are not part of locations.
    let root = object_store_root
        .split_once('?')
        .map_or(object_store_root, |(r, _)| r)
        .trim_end_matches('/');
    if root.contains("://") {
        root.to_string()
    } else {
        let path = std::path::Path::new(root);
        let abs = if path.is_absolute() {
            path.to_path_buf()
        } else {
            std::env::current_dir()
                .map(|d| d.join(path))
                .unwrap_or_else(|_| path.to_path_buf())
        };
        format!("file://{}", abs.display())
    }
}

/// The warehouse location under an object store root (`/data/objects`,
/// `file:///data/objects`, `s3://bucket/prefix`).
pub fn warehouse_location(object_store_root: &str) -> String {
    format!("{}/warehouse", root_url(object_store_root))
}

/// Opens the embedded catalog on the metadata database `meta_url`, with files in the object
/// store rooted at `object_store_root` (through `store`, the node's client, when given).
pub async fn open(
    meta_url: &str,
    object_store_root: &str,
    store: Option<Arc<dyn ObjectStore>>,
) -> iceberg::Result<EmbeddedCatalog> {
    let warehouse = warehouse_location(object_store_root);
    let mut factory = ObjectStoreStorageFactory::new(root_url(object_store_root));
    if let Some(store) = store {
        factory = factory.with_store(store);
    }
    let catalog = SqlCatalogBuilder::default()
        .uri(meta_url)
        .warehouse_location(&warehouse)
        .with_storage_factory(Arc::new(factory))
        .load(CATALOG_NAME, HashMap::new())
        .await?;
    let pointers = SqlMetadataPointers::connect(meta_url, CATALOG_NAME).await?;
    Ok(EmbeddedCatalog {
        catalog: Arc::new(catalog),
        pointers: Arc::new(pointers),
        warehouse,
    })
}

/// [`open`] with the node's catalog settings.
pub async fn open_with(
    _config: &crate::CatalogConfig,
    meta_url: &str,
    object_store_root: &str,
    store: Option<Arc<dyn ObjectStore>>,
) -> iceberg::Result<EmbeddedCatalog> {
    open(meta_url, object_store_root, store).await
}

impl EmbeddedCatalog {
    /// The REST catalog API over this catalog, to mount under `/iceberg`. Client-chosen
    /// locations must stay in the warehouse.
    pub fn router(&self, mut config: RestConfig) -> axum::Router {
        config.warehouse_location = Some(self.warehouse.clone());
        if config.allowed_locations.is_empty() {
            config.allowed_locations = vec![self.warehouse.clone()];
        }
        config
            .overrides
            .entry("warehouse".into())
            .or_insert_with(|| self.warehouse.clone());
        router_with_commits(self.catalog.clone(), self.pointers.clone(), config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warehouses_are_urls_under_the_root() {
        assert_eq!(
            warehouse_location("/data/objects/"),
            "file:///data/objects/warehouse"
        );
        assert_eq!(
            warehouse_location("s3://bucket/inlet"),
            "s3://bucket/inlet/warehouse"
        );
        assert!(warehouse_location("rel/objects").starts_with("file:///"));
        assert_eq!(
            warehouse_location("s3://b/p?endpoint=http://127.0.0.1:9000&allow_http=true"),
            "s3://b/p/warehouse"
        );
    }
}
