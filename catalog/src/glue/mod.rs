//! AWS Glue as the home of a node's tables (`[catalog] type = "glue"`): Glue databases are
//! namespaces, and a table is a Glue table whose parameters say `table_type = ICEBERG` and name
//! its current `metadata_location` (and `previous_metadata_location`), the layout Athena,
//! EMR, Spark's and Trino's Glue catalogs and pyiceberg's `GlueCatalog` share.
//!
//! Glue stores pointers only. Inlet writes everything else under [`CatalogConfig::files`]
//! (default: the node's object store), through its own object-store client: data files,
//! manifests, and the metadata files.
//!
//! Commits use the same path as the embedded catalog: check the requirements, apply the
//! updates, write the new `metadata.json` (`rest::stage`), then move the pointer. Here the
//! pointer swap ([`GlueCatalog`] as a [`MetadataPointerStore`]) is `GetTable`, a check that
//! the table is still at the metadata the commit was based on, then `UpdateTable` with the
//! `VersionId` that `GetTable` returned. Glue refuses an `UpdateTable` whose `VersionId` is no
//! longer the table's (`ConcurrentModificationException`), so of two racing commits one
//! fails; both checks failing mean the same thing: a lost race (a 409, the coordinator
//! rebuilds its round on the new base). The swap skips Glue's table-version archive
//! (`SkipArchive`): a table topic commits often and Glue keeps a bounded number of versions.
//!
//! Limits:
//! - One namespace level (Glue databases are flat); names as Glue stores them (lowercase).
//! - No multi-table transactions: Glue cannot update several tables atomically, so a
//!   `POST /v1/transactions/commit` touching more than one table answers 406.
//! - The Glue table's columns (`StorageDescriptor.Columns`, in Hive type names, as Athena and
//!   the Java and Python Glue catalogs write them) follow the current schema at each commit
//!   Inlet makes; engines read the schema from the Iceberg metadata either way.
//! - `rename_table` is create-then-delete (Glue has no rename).

pub mod client;
mod columns;
mod pointers;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::io::FileIO;
use iceberg::spec::{TableMetadata, TableMetadataBuilder};
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, MetadataLocation, Namespace, NamespaceIdent, Result, TableCommit,
    TableCreation, TableIdent,
};
use object_store::ObjectStore;
use serde_json::{json, Map, Value};

use crate::config::CatalogConfig;
use crate::rest::{publish, stage, Checked};
pub use client::{GlueClient, GlueError, GlueErrorKind, GlueSettings};
use columns::storage_descriptor;

/// Glue table parameter: the table format.
pub const TABLE_TYPE: &str = "table_type";
/// Glue table parameter: the current metadata file.
pub const METADATA_LOCATION: &str = "metadata_location";
/// Glue table parameter: the metadata file before the current one.
pub const PREVIOUS_METADATA_LOCATION: &str = "previous_metadata_location";
/// The `table_type` of Iceberg tables.
pub const ICEBERG: &str = "ICEBERG";

/// Namespace properties stored in a Glue database's own fields rather than its parameters.
const COMMENT: &str = "comment";
const LOCATION: &str = "location";

/// Tables and namespaces in AWS Glue, files in the object store.
pub struct GlueCatalog {
    client: GlueClient,
    file_io: FileIO,
    /// Where tables go whose namespace has no `location`: `<warehouse>/<db>/<table>`.
    warehouse: String,
    runtime: iceberg::Runtime,
}

impl std::fmt::Debug for GlueCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlueCatalog")
            .field("client", &self.client)
            .field("warehouse", &self.warehouse)
            .finish_non_exhaustive()
    }
}

/// An opened Glue catalog, with what the node needs around it.
#[derive(Clone, Debug)]
pub struct GlueHome {
    /// The catalog, which is also the pointer store of its commits.
    pub catalog: Arc<GlueCatalog>,
    /// The root of the file IO: [`CatalogConfig::files`] as a URL, or the node's object store
    /// root.
    pub files: String,
    /// Where tables and the data files of table topics go: `files`, or `<node root>/warehouse`
    /// when the files are in the node's object store.
    pub warehouse: String,
    /// File IO under `files`.
    pub file_io: FileIO,
    /// The same storage as itself, for what file IO cannot do (listing).
    pub storage: crate::storage::ObjectStoreStorage,
}

/// Opens the Glue catalog `config` names (`type = "glue"`), with credentials from the standard
/// AWS environment. `node_root` and `node_store` are the node's object store: the files go
/// there unless `config.files` names another place. Nothing is sent to Glue until the first
/// call.
pub fn open(
    config: &CatalogConfig,
    node_root: &str,
    node_store: Option<Arc<dyn ObjectStore>>,
    clock: Arc<dyn inlet_common::Clock>,
) -> Result<GlueHome> {
    let client = GlueClient::new(&settings(config)?, clock)
        .map_err(|e| Error::new(ErrorKind::DataInvalid, e))?;
    open_with_client(config, node_root, node_store, client)
}

/// Where and as whom `config` calls Glue: the region defaults to `AWS_REGION`, then
/// `AWS_DEFAULT_REGION`.
pub fn settings(config: &CatalogConfig) -> Result<GlueSettings> {
    config
        .validate()
        .map_err(|e| Error::new(ErrorKind::DataInvalid, e))?;
    let region = config
        .region
        .clone()
        .or_else(|| std::env::var("AWS_REGION").ok())
        .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
        .filter(|r| !r.is_empty())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                "catalog.region is not set (nor AWS_REGION): Glue needs a region",
            )
        })?;
    Ok(GlueSettings {
        region,
        endpoint: config.endpoint.clone(),
        catalog_id: config.catalog_id.clone(),
    })
}

/// [`open`] with a client of the caller's.
pub fn open_with_client(
    config: &CatalogConfig,
    node_root: &str,
    node_store: Option<Arc<dyn ObjectStore>>,
    client: GlueClient,
) -> Result<GlueHome> {
    config
        .validate()
        .map_err(|e| Error::new(ErrorKind::DataInvalid, e))?;
    let (files, warehouse, factory) =
        crate::external::files_factory(config.files.as_deref(), node_root, node_store);
    let storage = factory.storage()?;
    let file_io = iceberg::io::FileIOBuilder::new(Arc::new(factory)).build();
    let catalog = GlueCatalog {
        client,
        file_io: file_io.clone(),
        warehouse: warehouse.clone(),
        runtime: iceberg::Runtime::try_current()?,
    };
    Ok(GlueHome {
        catalog: Arc::new(catalog),
        files,
        warehouse,
        file_io,
        storage,
    })
}

impl GlueHome {
    /// The REST catalog API over Glue, to mount under `/iceberg`: reads and DDL through the
    /// catalog, commits applied here and swapped in Glue. Client-chosen locations must stay
    /// under the files' root.
    pub fn router(&self, mut config: crate::rest::RestConfig) -> axum::Router {
        config.warehouse_location = Some(self.warehouse.clone());
        if config.allowed_locations.is_empty() {
            config.allowed_locations = vec![self.files.clone()];
        }
        config
            .overrides
            .entry("warehouse".into())
            .or_insert_with(|| self.warehouse.clone());
        crate::rest::router_with_commits(self.catalog.clone(), self.catalog.clone(), config)
    }
}

/// A Glue table as `GetTable` returns it.
struct GlueTable {
    /// The whole `Table` object, to carry its fields over into `UpdateTable`.
    raw: Map<String, Value>,
    version_id: Option<String>,
    metadata_location: Option<String>,
}

impl GlueTable {
    fn parameters(&self) -> Map<String, Value> {
        self.raw
            .get("Parameters")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    }

    fn is_iceberg(&self) -> bool {
        is_iceberg(&self.parameters())
    }
}

fn is_iceberg(parameters: &Map<String, Value>) -> bool {
    parameters
        .get(TABLE_TYPE)
        .and_then(Value::as_str)
        .is_some_and(|t| t.eq_ignore_ascii_case(ICEBERG))
}

/// The Glue database of a namespace: Glue has one level.
fn database(namespace: &NamespaceIdent) -> Result<&str> {
    match namespace.as_ref().as_slice() {
        [name] if !name.is_empty() => Ok(name),
        _ => Err(Error::new(
            ErrorKind::DataInvalid,
            format!(
                "namespace {namespace:?}: Glue databases have exactly one level, so a \
                 namespace must have one non-empty name"
            ),
        )),
    }
}

fn not_an_iceberg_table(table: &TableIdent) -> Error {
    Error::new(
        ErrorKind::TableNotFound,
        format!("{table} exists in Glue but is not an Iceberg table (no table_type=ICEBERG)"),
    )
}

impl GlueCatalog {
    /// The Glue table, or `None` if it does not exist.
    async fn get_table(&self, table: &TableIdent) -> Result<Option<GlueTable>> {
        let db = database(table.namespace())?;
        let answer = self
            .client
            .call(
                "GetTable",
                json!({"DatabaseName": db, "Name": table.name()}),
            )
            .await;
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) if e.kind == GlueErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into_iceberg(ErrorKind::TableNotFound)),
        };
        let raw = answer
            .get("Table")
            .and_then(Value::as_object)
            .cloned()
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!("Glue's GetTable answer for {table} has no Table"),
                )
            })?;
        let version_id = raw
            .get("VersionId")
            .and_then(Value::as_str)
            .map(str::to_string);
        let metadata_location = raw
            .get("Parameters")
            .and_then(|p| p.get(METADATA_LOCATION))
            .and_then(Value::as_str)
            .map(str::to_string);
        Ok(Some(GlueTable {
            raw,
            version_id,
            metadata_location,
        }))
    }

    /// The Iceberg table at `metadata_location`.
    async fn table_at(&self, table: &TableIdent, metadata_location: String) -> Result<Table> {
        let metadata = TableMetadata::read_from(&self.file_io, &metadata_location).await?;
        self.build_table(table, metadata_location, metadata)
    }

    fn build_table(
        &self,
        table: &TableIdent,
        metadata_location: String,
        metadata: TableMetadata,
    ) -> Result<Table> {
        Table::builder()
            .file_io(self.file_io.clone())
            .metadata_location(metadata_location)
            .metadata(metadata)
            .identifier(table.clone())
            .runtime(self.runtime.clone())
            .build()
    }

    /// `TableInput` for a new Glue table pointing at `metadata_location`.
    fn table_input(name: &str, metadata_location: &str, metadata: &TableMetadata) -> Value {
        json!({
            "Name": name,
            "TableType": "EXTERNAL_TABLE",
            "Parameters": {
                TABLE_TYPE: ICEBERG,
                METADATA_LOCATION: metadata_location,
            },
            "StorageDescriptor": storage_descriptor(&Map::new(), metadata),
        })
    }

    /// Creates the Glue table for metadata already written at `metadata_location`.
    async fn create_glue_table(
        &self,
        table: &TableIdent,
        metadata_location: &str,
        metadata: &TableMetadata,
    ) -> Result<()> {
        let db = database(table.namespace())?;
        let input = Self::table_input(table.name(), metadata_location, metadata);
        self.client
            .call(
                "CreateTable",
                json!({"DatabaseName": db, "TableInput": input}),
            )
            .await
            .map(drop)
            .map_err(|e| match e.kind {
                GlueErrorKind::NotFound => Error::new(
                    ErrorKind::NamespaceNotFound,
                    format!("namespace {db:?} does not exist in Glue"),
                ),
                GlueErrorKind::AlreadyExists => Error::new(
                    ErrorKind::TableAlreadyExists,
                    format!("table {table} already exists in Glue"),
                ),
                _ => e.into_iceberg(ErrorKind::TableNotFound),
            })
    }

    async fn database_names(&self) -> Result<Vec<String>> {
        let mut names = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut request = json!({});
            if let Some(t) = &token {
                request["NextToken"] = json!(t);
            }
            let answer = self
                .client
                .call("GetDatabases", request)
                .await
                .map_err(|e| e.into_iceberg(ErrorKind::NamespaceNotFound))?;
            names.extend(
                answer
                    .get("DatabaseList")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|d| d.get("Name").and_then(Value::as_str))
                    .map(str::to_string),
            );
            token = next_token(&answer);
            if token.is_none() {
                return Ok(names);
            }
        }
    }

    /// The Glue tables of a database: (name, parameters).
    async fn glue_tables(&self, db: &str) -> Result<Vec<(String, Map<String, Value>)>> {
        let mut tables = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut request = json!({"DatabaseName": db});
            if let Some(t) = &token {
                request["NextToken"] = json!(t);
            }
            let answer = self
                .client
                .call("GetTables", request)
                .await
                .map_err(|e| e.into_iceberg(ErrorKind::NamespaceNotFound))?;
            for table in answer
                .get("TableList")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(name) = table.get("Name").and_then(Value::as_str) {
                    let parameters = table
                        .get("Parameters")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default();
                    tables.push((name.to_string(), parameters));
                }
            }
            token = next_token(&answer);
            if token.is_none() {
                return Ok(tables);
            }
        }
    }

    /// `DatabaseInput` for a namespace with `properties`.
    fn database_input(db: &str, properties: &HashMap<String, String>) -> Value {
        let mut input = json!({"Name": db});
        let mut parameters = Map::new();
        for (key, value) in properties {
            match key.as_str() {
                COMMENT => input["Description"] = json!(value),
                LOCATION => input["LocationUri"] = json!(value),
                _ => {
                    parameters.insert(key.clone(), json!(value));
                }
            }
        }
        input["Parameters"] = Value::Object(parameters);
        input
    }
}

fn next_token(answer: &Value) -> Option<String> {
    answer
        .get("NextToken")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
}

#[async_trait]
impl Catalog for GlueCatalog {
    /// Glue databases are flat: a parent lists nothing.
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        if parent.is_some() {
            return Ok(Vec::new());
        }
        Ok(self
            .database_names()
            .await?
            .into_iter()
            .map(NamespaceIdent::new)
            .collect())
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        let db = database(namespace)?;
        self.client
            .call(
                "CreateDatabase",
                json!({"DatabaseInput": Self::database_input(db, &properties)}),
            )
            .await
            .map_err(|e| e.into_iceberg(ErrorKind::NamespaceNotFound))?;
        Ok(Namespace::with_properties(namespace.clone(), properties))
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        let db = database(namespace)?;
        let answer = self
            .client
            .call("GetDatabase", json!({"Name": db}))
            .await
            .map_err(|e| e.into_iceberg(ErrorKind::NamespaceNotFound))?;
        let found = answer.get("Database").cloned().unwrap_or_default();
        let mut properties: HashMap<String, String> = found
            .get("Parameters")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect();
        for (field, key) in [("Description", COMMENT), ("LocationUri", LOCATION)] {
            if let Some(value) = found.get(field).and_then(Value::as_str) {
                properties.insert(key.to_string(), value.to_string());
            }
        }
        Ok(Namespace::with_properties(namespace.clone(), properties))
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        match self.get_namespace(namespace).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NamespaceNotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Sets exactly `properties` (Glue replaces the database's fields).
    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        let db = database(namespace)?;
        self.client
            .call(
                "UpdateDatabase",
                json!({"Name": db, "DatabaseInput": Self::database_input(db, &properties)}),
            )
            .await
            .map(drop)
            .map_err(|e| e.into_iceberg(ErrorKind::NamespaceNotFound))
    }

    /// Refuses a database that still has tables: Glue's `DeleteDatabase` would delete them.
    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        let db = database(namespace)?;
        let tables = self.glue_tables(db).await?;
        if !tables.is_empty() {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "namespace {db:?} is not empty: Glue would delete its {} tables with it",
                    tables.len()
                ),
            ));
        }
        self.client
            .call("DeleteDatabase", json!({"Name": db}))
            .await
            .map(drop)
            .map_err(|e| e.into_iceberg(ErrorKind::NamespaceNotFound))
    }

    /// The Iceberg tables of the database (other Glue tables are left out).
    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        let db = database(namespace)?;
        Ok(self
            .glue_tables(db)
            .await?
            .into_iter()
            .filter(|(_, parameters)| is_iceberg(parameters))
            .map(|(name, _)| TableIdent::new(namespace.clone(), name))
            .collect())
    }

    /// Writes the first metadata file under the table's location (default: the namespace's
    /// `location`, else `<warehouse>/<namespace>`, then `/<table>`) and creates the Glue
    /// table pointing at it. A table that already exists leaves no file behind.
    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        mut creation: TableCreation,
    ) -> Result<Table> {
        let db = database(namespace)?.to_string();
        let ident = TableIdent::new(namespace.clone(), creation.name.clone());
        if creation.location.is_none() {
            let ns = self.get_namespace(namespace).await?;
            let base = ns
                .properties()
                .get(LOCATION)
                .map(|l| l.trim_end_matches('/').to_string())
                .unwrap_or_else(|| format!("{}/{db}", self.warehouse));
            creation.location = Some(format!("{base}/{}", creation.name));
        }
        let location = creation.location.clone().unwrap_or_default();
        let metadata = TableMetadataBuilder::from_table_creation(creation)?
            .build()?
            .metadata;
        let metadata_location = MetadataLocation::new_with_metadata(location, &metadata);
        metadata.write_to(&self.file_io, &metadata_location).await?;
        let metadata_location = metadata_location.to_string();
        if let Err(e) = self
            .create_glue_table(&ident, &metadata_location, &metadata)
            .await
        {
            if matches!(
                e.kind(),
                ErrorKind::TableAlreadyExists | ErrorKind::NamespaceNotFound
            ) {
                let _ = self.file_io.delete(&metadata_location).await;
            }
            return Err(e);
        }
        self.build_table(&ident, metadata_location, metadata)
    }

    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        let found = self.get_table(table).await?.ok_or_else(|| {
            Error::new(
                ErrorKind::TableNotFound,
                format!("table {table} does not exist in Glue"),
            )
        })?;
        if !found.is_iceberg() {
            return Err(not_an_iceberg_table(table));
        }
        let location = found.metadata_location.ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("Glue table {table} has no metadata_location parameter"),
            )
        })?;
        self.table_at(table, location).await
    }

    async fn drop_table(&self, table: &TableIdent) -> Result<()> {
        let db = database(table.namespace())?;
        self.client
            .call(
                "DeleteTable",
                json!({"DatabaseName": db, "Name": table.name()}),
            )
            .await
            .map(drop)
            .map_err(|e| e.into_iceberg(ErrorKind::TableNotFound))
    }

    async fn purge_table(&self, table: &TableIdent) -> Result<()> {
        let loaded = self.load_table(table).await?;
        self.drop_table(table).await?;
        iceberg::drop_table_data(&loaded).await
    }

    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        Ok(self.get_table(table).await?.is_some_and(|t| t.is_iceberg()))
    }

    /// Glue has no rename: creates `dest` with `src`'s pointer, then deletes `src` (and
    /// deletes `dest` again if that fails).
    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        let table = self.load_table(src).await?;
        let location = table.metadata_location_result()?.to_string();
        self.create_glue_table(dest, &location, table.metadata())
            .await?;
        if let Err(e) = self.drop_table(src).await {
            if let Err(undo) = self.drop_table(dest).await {
                tracing::error!(%src, %dest, error = %undo, "rename: could not delete the new table after failing to delete the old one");
            }
            return Err(e);
        }
        Ok(())
    }

    async fn register_table(&self, table: &TableIdent, metadata_location: String) -> Result<Table> {
        let metadata = TableMetadata::read_from(&self.file_io, &metadata_location).await?;
        self.create_glue_table(table, &metadata_location, &metadata)
            .await?;
        self.build_table(table, metadata_location, metadata)
    }

    /// The embedded commit path (check, apply, write `metadata.json`) and the Glue swap.
    async fn update_table(&self, mut commit: TableCommit) -> Result<Table> {
        let ident = commit.identifier().clone();
        let requirements = commit.take_requirements();
        let updates = commit.take_updates();
        let table = self.load_table(&ident).await?;
        let staged = match stage(table, &requirements, updates, &[])
            .await
            .map_err(rest_to_iceberg)?
        {
            Checked::Unchanged(table) => return Ok(table),
            Checked::Staged(staged) => staged,
        };
        publish(self, std::slice::from_ref(staged.as_ref()))
            .await
            .map_err(rest_to_iceberg)?;
        let staged = *staged;
        self.build_table(&ident, staged.swap.new.clone(), staged.metadata)
    }
}

fn rest_to_iceberg(err: crate::rest::RestError) -> Error {
    use crate::rest::RestError as R;
    let kind = match &err {
        R::CommitFailed(_) => ErrorKind::CatalogCommitConflicts,
        R::BadRequest(_) => ErrorKind::DataInvalid,
        R::NoSuchTable(_) => ErrorKind::TableNotFound,
        R::NoSuchNamespace(_) => ErrorKind::NamespaceNotFound,
        R::Unsupported(_) => ErrorKind::FeatureUnsupported,
        _ => ErrorKind::Unexpected,
    };
    let retryable = kind == ErrorKind::CatalogCommitConflicts;
    Error::new(kind, err.to_string()).with_retryable(retryable)
}
