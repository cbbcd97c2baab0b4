//! What the table worker's integration tests share: a real stream store and schema registry
//! in a temporary folder, Kafka record batches appended the way the broker stores them, and
//! Parquet files read back.

#![allow(dead_code)]

use std::sync::Arc;

use arrow::array::RecordBatch;
use bytes::Bytes;
use inlet_schema_registry::{Registry, RegistryConfig, SchemaRequest};
use inlet_storage::{AppendOptions, MetaStore, StreamId, StreamStore};
use kafka_protocol::records::Compression;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// A stream store (local WAL and object folder, no background tasks) and a schema registry
/// on its metadata, under `dir`.
pub(crate) async fn open(dir: &std::path::Path) -> (Arc<StreamStore>, Arc<Registry>) {
    let meta_url = format!("sqlite://{}", dir.join("meta.db").display());
    let store = Arc::new(
        StreamStore::builder(dir.join("wal"))
            .meta(MetaStore::connect(&meta_url).await.expect("meta"))
            .object_store_url(format!("file://{}", dir.join("objects").display()))
            .background_tasks(false)
            .open()
            .await
            .expect("store"),
    );
    let registry = Arc::new(
        inlet_schema_registry::open(store.meta().clone(), RegistryConfig::default())
            .await
            .expect("registry"),
    );
    (store, registry)
}

/// A job over all of partition 0's `stream`, reading up to `max_input_bytes`.
pub(crate) fn whole(stream: StreamId, max_input_bytes: usize) -> inlet_table_worker::JobSpec {
    inlet_table_worker::JobSpec {
        partition: 0,
        stream,
        from: 0,
        until: None,
        max_input_bytes,
    }
}

/// [`convert_range`](inlet_table_worker::convert_range) of all of `stream`, with a 16 MiB
/// pool, reading up to 1 MiB.
pub(crate) async fn convert_whole(
    store: &StreamStore,
    ctx: &inlet_table_worker::TableContext,
    stream: StreamId,
) -> Result<inlet_table_worker::JobOutput, inlet_table_worker::Error> {
    let pool = inlet_table_worker::MemoryPool::new(16 << 20);
    inlet_table_worker::convert_range(store, &pool, ctx, whole(stream, 1 << 20)).await
}

/// The rows of the data files a job wrote.
pub(crate) fn read_outputs(out: &inlet_table_worker::JobOutput) -> Vec<RecordBatch> {
    let files = out.data_files.iter();
    files.flat_map(|d| read_parquet(d.file_path())).collect()
}

/// Creates the stream `name` in `store`.
pub(crate) async fn create_stream(store: &StreamStore, name: &str) -> StreamId {
    store.create_stream(name).await.expect("stream").id
}

/// A store and registry (from [`open`]) in a temporary folder, and what one test file adds to
/// them: `T`, whose fields read as the fixture's own.
pub(crate) struct Fixture<T> {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) store: Arc<StreamStore>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) with: T,
}

impl Fixture<()> {
    /// A new store and registry in a new temporary folder.
    pub(crate) async fn open() -> Fixture<()> {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, registry) = open(dir.path()).await;
        Fixture {
            dir,
            store,
            registry,
            with: (),
        }
    }

    /// This fixture with `with` added.
    pub(crate) fn with<T>(self, with: T) -> Fixture<T> {
        let Fixture {
            dir,
            store,
            registry,
            ..
        } = self;
        Fixture {
            dir,
            store,
            registry,
            with,
        }
    }
}

impl<T> std::ops::Deref for Fixture<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.with
    }
}

/// Registers `text` under `subject`; `schema_type` None is Avro. Returns the schema id.
pub(crate) async fn register_typed(
    registry: &Registry,
    subject: &str,
    text: &str,
    schema_type: Option<&str>,
) -> u32 {
    let req = SchemaRequest {
        schema: text.to_string(),
        schema_type: schema_type.map(str::to_string),
        ..SchemaRequest::default()
    };
    registry.register(subject, &req).await.expect("register").0
}

/// Appends `records` (key, value) as one zstd Kafka record batch, offsets and timestamps
/// counting from the batch's start.
pub(crate) async fn append_records(
    store: &StreamStore,
    stream: StreamId,
    records: &[(Option<Bytes>, Option<Bytes>)],
) {
    append_records_with(store, stream, records, Compression::Zstd).await
}

/// [`append_records`] with another codec.
pub(crate) async fn append_records_with(
    store: &StreamStore,
    stream: StreamId,
    records: &[(Option<Bytes>, Option<Bytes>)],
    compression: Compression,
) {
    append_batch(
        store,
        stream,
        encode_records(records, compression),
        records.len(),
    )
    .await
}

/// `records` as one Kafka record batch: offsets from 0, CreateTime timestamps from
/// 1,700,000,000,000 ms, one per record.
pub(crate) fn encode_records(
    records: &[(Option<Bytes>, Option<Bytes>)],
    compression: Compression,
) -> Bytes {
    inlet_test_support::wire::encode_batch(
        records,
        &inlet_test_support::wire::BatchOptions {
            compression,
            ..Default::default()
        },
    )
}

/// Appends one encoded batch of `count` records, as the broker stores it.
pub(crate) async fn append_batch(
    store: &StreamStore,
    stream: StreamId,
    batch: Bytes,
    count: usize,
) {
    store
        .append_with(
            stream,
            batch,
            count as u32,
            AppendOptions {
                write_base_offset: true,
                ..AppendOptions::default()
            },
        )
        .await
        .expect("append");
}

/// Every record batch of a Parquet data file (`file://` path or plain path).
pub(crate) fn read_parquet(path: &str) -> Vec<RecordBatch> {
    let file = std::fs::File::open(path.trim_start_matches("file://")).expect("open");
    ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("parquet")
        .build()
        .expect("reader")
        .map(|b| b.expect("batch"))
        .collect()
}

/// A table context with the defaults the tests start from: framed values
/// (`by_schema_id`), raw keys, no transform, an unpartitioned table that does not exist yet
/// under `data_location`, append-only.
pub(crate) fn table_context(
    registry: &Arc<Registry>,
    data_location: String,
) -> inlet_table_worker::TableContext {
    use inlet_table_worker::{TableContext, ValueType};
    TableContext {
        last_column_id: 0,
        registry: registry.clone(),
        value_type: ValueType::BySchemaId,
        key_type: ValueType::Raw,
        transform: inlet_table_worker::ValueTransform::None,
        schema: None,
        target: inlet_table_worker::data_file::FileTarget {
            file_io: iceberg::io::FileIO::new_with_fs(),
            schema: Arc::new(iceberg::spec::Schema::builder().build().expect("empty")),
            spec: Arc::new(iceberg::spec::PartitionSpec::unpartition_spec()),
            data_location,
        },
        dead_letter_target: None,
        partition_by: Vec::new(),
        settings: inlet_table_worker::data_file::FileSettings::default(),
        event_time_field: None,
        dead_letter_floor: Default::default(),
        upsert: None,
        file_tag: None,
    }
}
