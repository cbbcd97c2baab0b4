//! Iceberg catalog access (DESIGN.md §6): the embedded SQL catalog on the metadata store,
//! external REST / Glue catalogs, and the Iceberg REST catalog server engines connect to.
//!
//! Built so far: [`storage`], iceberg's file IO over the node's object store. The catalogs and
//! the REST server come with the catalog issue.

pub mod storage;

pub mod rest;

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
