//! Fixtures for the query tests and benchmark: Iceberg tables in an in-memory catalog whose
//! metadata and data files live on the local disk in a temporary directory, written the way table topics are (the table worker's
//! data-file writer, fast appends).

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::io::LocalFsStorageFactory;
use iceberg::memory::{MemoryCatalogBuilder, MEMORY_CATALOG_WAREHOUSE};
use iceberg::spec::{DataFile, Schema, UnboundPartitionSpec};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, CatalogBuilder, NamespaceIdent, TableCreation, TableIdent};
use inlet_table_worker::data_file::{self, FileSettings, FileTarget};

pub struct Fixture {
    pub catalog: Arc<dyn Catalog>,
    pub dir: tempfile::TempDir,
}

impl Fixture {
    pub async fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let catalog = MemoryCatalogBuilder::default()
            .with_storage_factory(Arc::new(LocalFsStorageFactory))
            .load(
                "test",
                HashMap::from([(
                    MEMORY_CATALOG_WAREHOUSE.to_string(),
                    format!("file://{}", dir.path().display()),
                )]),
            )
            .await
            .expect("catalog");
        Fixture {
            catalog: Arc::new(catalog),
            dir,
        }
    }

    /// Creates `ns.name` (and `ns`) with `schema` and `spec`.
    pub async fn create(
        &self,
        ns: &str,
        name: &str,
        schema: Schema,
        spec: Option<UnboundPartitionSpec>,
    ) -> Table {
        let namespace = NamespaceIdent::new(ns.to_string());
        if !self.catalog.namespace_exists(&namespace).await.expect("ns") {
            self.catalog
                .create_namespace(&namespace, HashMap::new())
                .await
                .expect("create namespace");
        }
        let creation = TableCreation::builder()
            .name(name.to_string())
            .schema(schema);
        let creation = match spec {
            Some(spec) => creation.partition_spec(spec).build(),
            None => creation.build(),
        };
        self.catalog
            .create_table(&namespace, creation)
            .await
            .expect("create table")
    }

    pub async fn load(&self, ns: &str, name: &str) -> Table {
        self.catalog
            .load_table(&TableIdent::new(
                NamespaceIdent::new(ns.to_string()),
                name.to_string(),
            ))
            .await
            .expect("load")
    }

    /// Appends one snapshot holding `columns` (in schema order) as data files of at most
    /// `target_file_bytes` each. Returns the table after the commit.
    pub async fn append(
        &self,
        table: &Table,
        columns: Vec<ArrayRef>,
        target_file_bytes: usize,
        prefix: &str,
    ) -> Table {
        let files = self
            .write_files(table, columns, target_file_bytes, prefix)
            .await;
        self.commit_files(table, files).await
    }

    /// Writes `columns` (in schema order) as data files named `<prefix>-…`.
    pub async fn write_files(
        &self,
        table: &Table,
        columns: Vec<ArrayRef>,
        target_file_bytes: usize,
        prefix: &str,
    ) -> Vec<DataFile> {
        let meta = table.metadata();
        let schema = meta.current_schema().clone();
        let arrow_schema = Arc::new(schema_to_arrow_schema(&schema).expect("arrow schema"));
        let batch = RecordBatch::try_new(arrow_schema, columns).expect("batch");
        let target = FileTarget {
            file_io: table.file_io().clone(),
            schema,
            spec: meta.default_partition_spec().clone(),
            data_location: format!("{}/data", meta.location()),
        };
        let settings = FileSettings {
            target_file_bytes,
            ..FileSettings::default()
        };
        let mut batches = Vec::new();
        let mut offset = 0;
        while offset < batch.num_rows() {
            let len = 8192.min(batch.num_rows() - offset);
            batches.push(batch.slice(offset, len));
            offset += len;
        }
        data_file::write(&target, prefix, batches, &settings)
            .await
            .expect("write files")
    }

    /// Commits `files` as one fast-append snapshot.
    pub async fn commit_files(&self, table: &Table, files: Vec<DataFile>) -> Table {
        let tx = Transaction::new(table);
        let tx = tx
            .fast_append()
            .add_data_files(files)
            .apply(tx)
            .expect("apply");
        tx.commit(self.catalog.as_ref()).await.expect("commit")
    }
}
