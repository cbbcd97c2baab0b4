//! A catalog as one principal sees it for reading ([`VisibleTo`]): what `POST /v1/query` runs
//! over when the HTTP APIs are guarded, so that a query sees only the tables its principal may
//! read. A table it may not read is not there for it (listed by no one, not found when named),
//! as Kafka's Metadata leaves out the topics a principal may not describe. Nothing can be
//! changed through it.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, Namespace, NamespaceIdent, Result, TableCommit, TableCreation,
    TableIdent,
};
use inlet_common::access::{TableOp, Viewer};

/// `inner` as `viewer` may read it.
pub struct VisibleTo {
    inner: Arc<dyn Catalog>,
    viewer: Viewer,
}

impl VisibleTo {
    pub fn new(inner: Arc<dyn Catalog>, viewer: Viewer) -> Self {
        VisibleTo { inner, viewer }
    }

    fn may_read(&self, table: &TableIdent) -> bool {
        self.viewer
            .may(TableOp::Read, table.namespace().as_ref(), table.name())
    }

    fn read_only(&self) -> Error {
        Error::new(
            ErrorKind::FeatureUnsupported,
            format!("the catalog is read-only for {}", self.viewer.principal),
        )
    }
}

impl std::fmt::Debug for VisibleTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VisibleTo")
            .field("inner", &self.inner)
            .field("principal", &self.viewer.principal)
            .finish()
    }
}

#[async_trait]
impl Catalog for VisibleTo {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        self.inner.list_namespaces(parent).await
    }

    async fn create_namespace(
        &self,
        _namespace: &NamespaceIdent,
        _properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        Err(self.read_only())
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        self.inner.get_namespace(namespace).await
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        self.inner.namespace_exists(namespace).await
    }

    async fn update_namespace(
        &self,
        _namespace: &NamespaceIdent,
        _properties: HashMap<String, String>,
    ) -> Result<()> {
        Err(self.read_only())
    }

    async fn drop_namespace(&self, _namespace: &NamespaceIdent) -> Result<()> {
        Err(self.read_only())
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        let mut tables = self.inner.list_tables(namespace).await?;
        tables.retain(|t| self.may_read(t));
        Ok(tables)
    }

    async fn create_table(
        &self,
        _namespace: &NamespaceIdent,
        _creation: TableCreation,
    ) -> Result<Table> {
        Err(self.read_only())
    }

    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        if !self.may_read(table) {
            return Err(Error::new(
                ErrorKind::TableNotFound,
                format!("table {table} does not exist"),
            ));
        }
        self.inner.load_table(table).await
    }

    async fn drop_table(&self, _table: &TableIdent) -> Result<()> {
        Err(self.read_only())
    }

    async fn purge_table(&self, _table: &TableIdent) -> Result<()> {
        Err(self.read_only())
    }

    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        Ok(self.may_read(table) && self.inner.table_exists(table).await?)
    }

    async fn rename_table(&self, _src: &TableIdent, _dest: &TableIdent) -> Result<()> {
        Err(self.read_only())
    }

    async fn register_table(
        &self,
        _table: &TableIdent,
        _metadata_location: String,
    ) -> Result<Table> {
        Err(self.read_only())
    }

    async fn update_table(&self, _commit: TableCommit) -> Result<Table> {
        Err(self.read_only())
    }
}
