//! Iceberg catalog access (DESIGN.md §6): the embedded SQL catalog on the metadata store,
//! external REST / Glue catalogs, and the Iceberg REST catalog server engines connect to.
//!
//! - [`storage`]: iceberg's file IO over the node's object store (one client, one fault
//!   wrapper for streams and tables).
//! - [`rest`]: the Iceberg REST catalog server over any `iceberg::Catalog`, with its own
//!   compare-and-swap commit path.
//! - [`embedded`]: the node's default catalog: the SQL catalog on the metadata database, files
//!   under `<object store>/warehouse`, and its REST router.
//!
//! Not built yet: external catalogs (another REST catalog, Glue).

pub mod embedded;
pub mod rest;
pub mod storage;

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
