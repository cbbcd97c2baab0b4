//! The embedded catalog a node serves by default (docs/architecture.md, "Catalog and SQL"): iceberg-rust's SQL catalog on
//! the node's metadata database (SQLite in the data dir, or PostgreSQL with `--meta`), its files
//! in the node's object store under `warehouse/`, and the REST server over it.
//!
//! Invariants:
//! - Table metadata and data files live under `<object store root>/warehouse`, written through
//!   the node's one object-store client ([`crate::storage`]), and the REST server refuses
//!   client-chosen locations outside it.
//! - Commits from REST clients and from Inlet itself go through the same compare-and-swap on the
//!   table's metadata pointer ([`crate::rest::SqlMetadataPointers`]).
//! - The catalog is the SQL catalog wrapped in [`EmbeddedSqlCatalog`]: loads take parsed
//!   metadata from a [`MetadataCache`] keyed by the (immutable) metadata file, and
//!   `update_namespace` sets exactly the properties given, as `iceberg::Catalog` says it should.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::io::{FileIO, FileIOBuilder};
use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::{
    Catalog, CatalogBuilder, ErrorKind, Namespace, NamespaceIdent, TableCommit, TableCreation,
    TableIdent,
};
use iceberg_catalog_sql::{SqlCatalog, SqlCatalogBuilder};
use object_store::ObjectStore;

use crate::metadata_cache::MetadataCache;
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
    /// The parsed metadata the catalog keeps.
    pub metadata_cache: Arc<MetadataCache>,
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
/// store rooted at `object_store_root` (through `store`, the node's client, when given), and
/// the default settings.
pub async fn open(
    meta_url: &str,
    object_store_root: &str,
    store: Option<Arc<dyn ObjectStore>>,
) -> iceberg::Result<EmbeddedCatalog> {
    open_with(
        &crate::CatalogConfig::default(),
        meta_url,
        object_store_root,
        store,
    )
    .await
}

/// [`open`] with the node's catalog settings (`metadata_cache_bytes`).
pub async fn open_with(
    config: &crate::CatalogConfig,
    meta_url: &str,
    object_store_root: &str,
    store: Option<Arc<dyn ObjectStore>>,
) -> iceberg::Result<EmbeddedCatalog> {
    let warehouse = warehouse_location(object_store_root);
    let mut factory = ObjectStoreStorageFactory::new(root_url(object_store_root));
    if let Some(store) = store {
        factory = factory.with_store(store);
    }
    let file_io = FileIOBuilder::new(Arc::new(factory.clone())).build();
    let sql = SqlCatalogBuilder::default()
        .uri(meta_url)
        .warehouse_location(&warehouse)
        .with_storage_factory(Arc::new(factory))
        .load(CATALOG_NAME, HashMap::new())
        .await?;
    let pointers = Arc::new(SqlMetadataPointers::connect(meta_url, CATALOG_NAME).await?);
    let metadata_cache = Arc::new(MetadataCache::new(config.metadata_cache_bytes));
    let catalog = EmbeddedSqlCatalog {
        sql,
        pointers: pointers.clone(),
        file_io,
        cache: metadata_cache.clone(),
        runtime: iceberg::Runtime::current(),
    };
    Ok(EmbeddedCatalog {
        catalog: Arc::new(catalog),
        pointers,
        warehouse,
        metadata_cache,
    })
}

/// The embedded catalog's `iceberg::Catalog`: iceberg-rust's SQL catalog with two changes.
///
/// - `load_table` reads the table's pointer with one query (the SQL catalog runs two) and
///   takes the parsed metadata from the [`MetadataCache`], reading and parsing the file only
///   on a miss. A table with hundreds of snapshots is then not parsed again on every load.
/// - `update_namespace` sets exactly the properties given, as `iceberg::Catalog` specifies:
///   keys not given are removed (the SQL catalog only adds and changes). The SQL catalog's
///   own `exists` marker stays, since a namespace without properties rows would vanish.
#[derive(Debug)]
pub struct EmbeddedSqlCatalog {
    sql: SqlCatalog,
    pointers: Arc<SqlMetadataPointers>,
    file_io: FileIO,
    cache: Arc<MetadataCache>,
    runtime: iceberg::Runtime,
}

/// The property the SQL catalog writes to mark that a namespace exists.
const EXISTS_PROPERTY: &str = "exists";

impl EmbeddedSqlCatalog {
    async fn metadata(&self, location: &str) -> iceberg::Result<Arc<TableMetadata>> {
        if let Some(metadata) = self.cache.get(location) {
            return Ok(metadata);
        }
        let bytes = self.file_io.new_input(location)?.read().await?;
        let metadata: TableMetadata = if bytes.starts_with(&[0x1F, 0x8B]) {
            // A gzip-compressed file (another writer's choice): iceberg's reader inflates it.
            TableMetadata::read_from(&self.file_io, location).await?
        } else {
            serde_json::from_slice(&bytes).map_err(|e| {
                iceberg::Error::new(
                    ErrorKind::DataInvalid,
                    format!("cannot parse table metadata {location}"),
                )
                .with_source(e)
            })?
        };
        let metadata = Arc::new(metadata);
        self.cache.insert(location, metadata.clone(), bytes.len());
        Ok(metadata)
    }
}

#[async_trait]
impl Catalog for EmbeddedSqlCatalog {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> iceberg::Result<Vec<NamespaceIdent>> {
        self.sql.list_namespaces(parent).await
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<Namespace> {
        self.sql.create_namespace(namespace, properties).await
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<Namespace> {
        self.sql.get_namespace(namespace).await
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> iceberg::Result<bool> {
        self.sql.namespace_exists(namespace).await
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<()> {
        let current = self.sql.get_namespace(namespace).await?;
        let removed: Vec<String> = current
            .properties()
            .keys()
            .filter(|k| !properties.contains_key(*k) && k.as_str() != EXISTS_PROPERTY)
            .cloned()
            .collect();
        if !removed.is_empty() {
            self.pointers
                .remove_namespace_properties(namespace, &removed)
                .await?;
        }
        self.sql.update_namespace(namespace, properties).await
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<()> {
        self.sql.drop_namespace(namespace).await
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> iceberg::Result<Vec<TableIdent>> {
        self.sql.list_tables(namespace).await
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> iceberg::Result<Table> {
        self.sql.create_table(namespace, creation).await
    }

    async fn load_table(&self, table: &TableIdent) -> iceberg::Result<Table> {
        let Some(location) = self.pointers.location(table).await? else {
            return Err(iceberg::Error::new(
                ErrorKind::TableNotFound,
                format!("No such table: {table}"),
            ));
        };
        let metadata = self.metadata(&location).await?;
        Table::builder()
            .file_io(self.file_io.clone())
            .identifier(table.clone())
            .metadata_location(location)
            .metadata(metadata)
            .runtime(self.runtime.clone())
            .build()
    }

    async fn drop_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.sql.drop_table(table).await
    }

    async fn purge_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.sql.purge_table(table).await
    }

    async fn table_exists(&self, table: &TableIdent) -> iceberg::Result<bool> {
        self.sql.table_exists(table).await
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> iceberg::Result<()> {
        self.sql.rename_table(src, dest).await
    }

    async fn register_table(
        &self,
        table: &TableIdent,
        metadata_location: String,
    ) -> iceberg::Result<Table> {
        self.sql.register_table(table, metadata_location).await
    }

    async fn update_table(&self, commit: TableCommit) -> iceberg::Result<Table> {
        self.sql.update_table(commit).await
    }
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
    use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
    use iceberg::TableUpdate;

    async fn open_in(dir: &tempfile::TempDir, cache_bytes: usize) -> EmbeddedCatalog {
        let meta = format!("sqlite://{}?mode=rwc", dir.path().join("meta.db").display());
        let root = dir.path().join("objects");
        std::fs::create_dir_all(&root).unwrap();
        let config = crate::CatalogConfig {
            metadata_cache_bytes: cache_bytes,
            ..crate::CatalogConfig::default()
        };
        open_with(&config, &meta, &root.to_string_lossy(), None)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn loads_parse_each_metadata_file_once() {
        let dir = tempfile::tempdir().unwrap();
        let embedded = open_in(&dir, 1 << 20).await;
        let catalog = embedded.catalog.clone();
        let ns = NamespaceIdent::new("db".into());
        catalog.create_namespace(&ns, HashMap::new()).await.unwrap();
        let schema = Schema::builder()
            .with_fields(vec![Arc::new(NestedField::required(
                1,
                "id",
                Type::Primitive(PrimitiveType::Long),
            ))])
            .build()
            .unwrap();
        let creation = TableCreation::builder()
            .name("t".into())
            .schema(schema)
            .build();
        catalog.create_table(&ns, creation).await.unwrap();
        let ident = TableIdent::new(ns, "t".into());
        let first = catalog.load_table(&ident).await.unwrap();
        let again = catalog.load_table(&ident).await.unwrap();
        assert_eq!(embedded.metadata_cache.stats(), (1, 1));
        assert_eq!(first.metadata_location(), again.metadata_location());
        assert!(embedded.metadata_cache.used() > 0);

        // A commit moves the pointer: the next load reads the new file, and sees the change.
        let target = crate::CommitTarget::Pointers(embedded.pointers.clone());
        let updates = vec![TableUpdate::SetProperties {
            updates: [("k".to_string(), "v".to_string())].into(),
        }];
        target.commit(&again, Vec::new(), updates).await.unwrap();
        let after = catalog.load_table(&ident).await.unwrap();
        assert_eq!(
            after.metadata().properties().get("k").map(String::as_str),
            Some("v")
        );
        assert_eq!(embedded.metadata_cache.stats(), (1, 2));

        let missing = TableIdent::new(NamespaceIdent::new("db".into()), "nope".into());
        let err = catalog.load_table(&missing).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::TableNotFound);

        // Without a budget nothing is kept, and loads still work.
        let uncached = open_in(&dir, 0).await;
        uncached.catalog.load_table(&ident).await.unwrap();
        assert_eq!(uncached.metadata_cache.used(), 0);
    }

    #[tokio::test]
    async fn namespace_properties_can_be_removed_over_rest() {
        let dir = tempfile::tempdir().unwrap();
        let embedded = open_in(&dir, 1 << 20).await;
        let app = axum::Router::new().nest("/iceberg", embedded.router(RestConfig::default()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/iceberg/v1", listener.local_addr().unwrap());
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let http = reqwest::Client::new();
        let post = |path: &str, body: serde_json::Value| {
            http.post(format!("{base}{path}")).json(&body).send()
        };
        let created = post(
            "/namespaces",
            serde_json::json!({"namespace": ["db"], "properties": {"a": "1", "b": "2"}}),
        )
        .await
        .unwrap();
        assert_eq!(created.status(), 200);
        let answer = post(
            "/namespaces/db/properties",
            serde_json::json!({"removals": ["a", "zzz"], "updates": {"c": "3"}}),
        )
        .await
        .unwrap();
        assert_eq!(answer.status(), 200);
        let body: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(body["removed"], serde_json::json!(["a"]));
        assert_eq!(body["missing"], serde_json::json!(["zzz"]));
        assert_eq!(body["updated"], serde_json::json!(["c"]));
        let ns = embedded
            .catalog
            .get_namespace(&NamespaceIdent::new("db".into()))
            .await
            .unwrap();
        let props = ns.properties();
        assert!(!props.contains_key("a"), "{props:?}");
        assert_eq!(props.get("b").map(String::as_str), Some("2"));
        assert_eq!(props.get("c").map(String::as_str), Some("3"));
        // The SQL catalog's marker cannot go: the namespace would vanish with it.
        let refused = post(
            "/namespaces/db/properties",
            serde_json::json!({"removals": ["exists"]}),
        )
        .await
        .unwrap();
        assert_eq!(refused.status(), 406);
        server.abort();
    }

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
