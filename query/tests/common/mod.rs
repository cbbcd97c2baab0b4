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
use iceberg::spec::{
    DataFile, FormatVersion, ManifestList, ManifestListWriter, ManifestWriterBuilder, Operation,
    Schema, Snapshot, SnapshotReference, SnapshotRetention, Summary, TableMetadataBuilder, Type,
    UnboundPartitionSpec,
};
use iceberg::table::Table;
use iceberg::transaction::{AddColumn, ApplyTransactionAction, Transaction};
use iceberg::{Catalog, CatalogBuilder, NamespaceIdent, TableCreation, TableIdent};
use inlet_table_worker::data_file::{self, FileSettings, FileTarget};
use inlet_table_worker::position_delete;

pub(crate) struct Fixture {
    pub catalog: Arc<dyn Catalog>,
    pub dir: tempfile::TempDir,
}

impl Fixture {
    pub(crate) async fn new() -> Fixture {
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
    pub(crate) async fn create(
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

    pub(crate) async fn load(&self, ns: &str, name: &str) -> Table {
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
    pub(crate) async fn append(
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
    pub(crate) async fn write_files(
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
    pub(crate) async fn commit_files(&self, table: &Table, files: Vec<DataFile>) -> Table {
        let tx = Transaction::new(table);
        let tx = tx
            .fast_append()
            .add_data_files(files)
            .apply(tx)
            .expect("apply");
        tx.commit(self.catalog.as_ref()).await.expect("commit")
    }
}

impl Fixture {
    /// Adds the optional column `name` to `table`'s schema. Returns the table after the commit.
    pub(crate) async fn add_column(&self, table: &Table, name: &str, field_type: Type) -> Table {
        let tx = Transaction::new(table);
        let tx = tx
            .update_schema()
            .add_column(AddColumn::optional(name, field_type))
            .apply(tx)
            .expect("apply");
        tx.commit(self.catalog.as_ref()).await.expect("commit")
    }

    /// Drops the column `name` from `table`'s schema. Returns the table after the commit.
    pub(crate) async fn drop_column(&self, table: &Table, name: &str) -> Table {
        let tx = Transaction::new(table);
        let tx = tx
            .update_schema()
            .delete_column(name)
            .apply(tx)
            .expect("apply");
        tx.commit(self.catalog.as_ref()).await.expect("commit")
    }

    /// Deletes rows of the unpartitioned `table` by (data file path, row position), the way
    /// an upsert does: a position delete file committed as a row-delta snapshot.
    pub(crate) async fn delete_positions(
        &self,
        table: &Table,
        deletes: Vec<(String, u64)>,
    ) -> Table {
        let meta = table.metadata();
        let target = FileTarget {
            file_io: table.file_io().clone(),
            schema: meta.current_schema().clone(),
            spec: meta.default_partition_spec().clone(),
            data_location: format!("{}/data", meta.location()),
        };
        let files =
            position_delete::write(&target, "deletes", None, deletes, &FileSettings::default())
                .await
                .expect("write deletes");
        let snapshot = row_delta(table, files).await;
        // iceberg's catalog API commits no row delta: write the next metadata file and
        // register the table again with it.
        let snapshot_id = snapshot.snapshot_id();
        let metadata = TableMetadataBuilder::new_from_metadata(
            meta.clone(),
            table.metadata_location().map(str::to_string),
        )
        .add_snapshot(snapshot)
        .expect("add snapshot")
        .set_ref(
            "main",
            SnapshotReference::new(snapshot_id, SnapshotRetention::branch(None, None, None)),
        )
        .expect("set main")
        .build()
        .expect("metadata")
        .metadata;
        let path = format!(
            // The `<version>-<uuid>` name later commits parse.
            "{}/metadata/00999-00000000-0000-4000-8000-{:012x}.metadata.json",
            meta.location().trim_end_matches('/'),
            snapshot_id as u64 & 0xffff_ffff_ffff
        );
        table
            .file_io()
            .new_output(&path)
            .expect("output")
            .write(serde_json::to_vec(&metadata).expect("json").into())
            .await
            .expect("write metadata");
        self.catalog
            .drop_table(table.identifier())
            .await
            .expect("drop");
        self.catalog
            .register_table(table.identifier(), path)
            .await
            .expect("register")
    }
}

/// A snapshot adding position delete files `files` to `table`'s current one, as the table
/// coordinator commits them (its manifest and manifest list written).
async fn row_delta(table: &Table, files: Vec<DataFile>) -> Snapshot {
    let meta = table.metadata();
    let file_io = table.file_io();
    let parent = meta
        .current_snapshot()
        .expect("a snapshot to delete from")
        .clone();
    let snapshot_id = parent.snapshot_id() + 1;
    let location = meta.location().trim_end_matches('/');
    let mut writer = ManifestWriterBuilder::new(
        file_io
            .new_output(format!("{location}/metadata/{snapshot_id}-deletes.avro"))
            .expect("output"),
        Some(snapshot_id),
        meta.current_schema().clone(),
        meta.default_partition_spec().as_ref().clone(),
    )
    .build_v2_deletes();
    for f in &files {
        writer.add_file(f.clone(), -1).expect("add delete file");
    }
    let mut manifests = vec![writer.write_manifest_file().await.expect("manifest")];
    let bytes = file_io
        .new_input(parent.manifest_list())
        .expect("input")
        .read()
        .await
        .expect("manifest list");
    manifests.extend(
        ManifestList::parse_with_version(&bytes, FormatVersion::V2)
            .expect("parse manifest list")
            .consume_entries(),
    );
    let list_path = format!("{location}/metadata/snap-{snapshot_id}.avro");
    let mut list = ManifestListWriter::v2(
        file_io
            .new_output(&list_path)
            .expect("output")
            .writer()
            .await
            .expect("writer"),
        snapshot_id,
        Some(parent.snapshot_id()),
        meta.next_sequence_number(),
    );
    list.add_manifests(manifests.into_iter())
        .expect("manifests");
    list.close().await.expect("close manifest list");
    let mut summary = parent.summary().additional_properties.clone();
    summary.insert("total-delete-files".into(), files.len().to_string());
    Snapshot::builder()
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(Some(parent.snapshot_id()))
        .with_sequence_number(meta.next_sequence_number())
        .with_timestamp_ms(meta.last_updated_ms() + 1)
        .with_manifest_list(list_path)
        .with_summary(Summary {
            operation: Operation::Overwrite,
            additional_properties: summary,
        })
        .with_schema_id(meta.current_schema_id())
        .build()
}
