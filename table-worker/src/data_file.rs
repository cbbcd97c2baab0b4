//! Writing converted rows as Iceberg data files: Parquet with zstd, one writer per partition
//! (fan-out), rolled over at the target file size, with the column statistics (sizes, value,
//! null and NaN counts, lower and upper bounds) that Iceberg keeps per data file for planning.
//!
//! Built on iceberg-rust's writer stack (`ParquetWriter` → `RollingFileWriter` →
//! `DataFileWriter`, `FanoutWriter` for partitioned tables), which writes through the table's
//! `FileIO`.
//!
//! Invariants:
//! - A [`DataFile`] is returned only after its file is completely written and closed in the
//!   object store: the coordinator never commits a file that is not all there.
//! - File names are derived from the caller's prefix (which names the records they hold), so
//!   converting the same range again after a crash writes the same names instead of orphans.

use std::sync::Arc;

use arrow::array::RecordBatch;
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::io::FileIO;
use iceberg::spec::{DataFile, DataFileFormat, PartitionSpec, Schema};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::partitioning::PartitioningWriter;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::error::{Error, Result};

/// How data files are written.
#[derive(Debug, Clone)]
pub struct FileSettings {
    /// A file is closed and a new one started once it reaches this size (docs/architecture.md, "Table workers":
    /// ~32 MiB).
    pub target_file_bytes: usize,
    /// zstd level of the Parquet pages.
    pub zstd_level: i32,
    /// Bytes per Parquet row group at most (Iceberg's default `write.parquet.row-group-size-bytes`
    /// is 128 MiB): at the default file size a file is one row group, which readers plan and
    /// prune well.
    pub max_row_group_bytes: usize,
    /// Rows per Parquet row group at most.
    pub max_row_group_rows: usize,
}

impl Default for FileSettings {
    fn default() -> Self {
        FileSettings {
            target_file_bytes: 32 << 20,
            zstd_level: 3,
            max_row_group_bytes: 128 << 20,
            max_row_group_rows: 1 << 20,
        }
    }
}

impl FileSettings {
    fn writer_properties(&self) -> Result<WriterProperties> {
        let level = ZstdLevel::try_new(self.zstd_level)
            .map_err(|e| Error::Schema(format!("zstd level {}: {e}", self.zstd_level)))?;
        Ok(WriterProperties::builder()
            .set_compression(Compression::ZSTD(level))
            .set_max_row_group_row_count(Some(self.max_row_group_rows.max(1)))
            .set_max_row_group_bytes(Some(self.max_row_group_bytes.max(1)))
            .build())
    }
}

/// Where and how one batch of data files is written.
#[derive(Debug, Clone)]
pub struct FileTarget {
    pub file_io: FileIO,
    /// The table's schema; the batches' Arrow schema is `schema_to_arrow_schema` of it.
    pub schema: Arc<Schema>,
    /// The table's partition spec (unpartitioned when it has no fields).
    pub spec: Arc<PartitionSpec>,
    /// The table's data location, e.g. `<table location>/data`.
    pub data_location: String,
}

/// Writes `batches` as data files named `<prefix>-NNNNN.parquet` (under the partition's path
/// for partitioned tables). Returns the files once all are complete.
pub async fn write(
    target: &FileTarget,
    prefix: &str,
    batches: impl IntoIterator<Item = RecordBatch>,
    settings: &FileSettings,
) -> Result<Vec<DataFile>> {
    let parquet = ParquetWriterBuilder::new(settings.writer_properties()?, target.schema.clone());
    let rolling = RollingFileWriterBuilder::new(
        parquet,
        settings.target_file_bytes,
        target.file_io.clone(),
        DefaultLocationGenerator::with_data_location(target.data_location.clone()),
        DefaultFileNameGenerator::new(prefix.to_string(), None, DataFileFormat::Parquet),
    );
    let builder = DataFileWriterBuilder::new(rolling);
    if target.spec.is_unpartitioned() {
        let mut writer = builder.build(None).await?;
        for batch in batches {
            if batch.num_rows() > 0 {
                writer.write(batch).await?;
            }
        }
        return Ok(writer.close().await?);
    }
    let splitter = RecordBatchPartitionSplitter::try_new_with_computed_values(
        target.schema.clone(),
        target.spec.clone(),
    )?;
    let mut writer = FanoutWriter::new(builder);
    for batch in batches {
        if batch.num_rows() == 0 {
            continue;
        }
        for (key, part) in splitter.split(&batch)? {
            writer.write(key, part).await?;
        }
    }
    Ok(writer.close().await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int64Array, StringArray, StructArray, TimestampMicrosecondArray};
    use arrow::datatypes::DataType;
    use iceberg::spec::{
        Datum, NestedField, PrimitiveType, Transform, Type, UnboundPartitionField,
    };
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    fn table_schema() -> Schema {
        let value = Schema::builder()
            .with_fields(vec![
                Arc::new(NestedField::required(
                    1,
                    "id",
                    Type::Primitive(PrimitiveType::Long),
                )),
                Arc::new(NestedField::optional(
                    2,
                    "city",
                    Type::Primitive(PrimitiveType::String),
                )),
            ])
            .build()
            .expect("schema");
        crate::evolve::reconcile(None, &value)
            .expect("table")
            .schema
    }

    /// `n` rows: ids from `first`, cities cycling over three names, `_kafka` filled in.
    fn batch(schema: &Schema, first: i64, n: usize) -> RecordBatch {
        let arrow_schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(schema).expect("arrow"));
        let ids = Int64Array::from_iter_values(first..first + n as i64);
        let cities = StringArray::from_iter((0..n).map(|i| {
            if i % 4 == 3 {
                None
            } else {
                Some(["oslo", "lima", "pune"][i % 3])
            }
        }));
        let DataType::Struct(kafka_fields) = arrow_schema.field(2).data_type().clone() else {
            panic!("_kafka is a struct");
        };
        let kafka = StructArray::new(
            kafka_fields,
            vec![
                Arc::new(arrow::array::Int32Array::from(vec![0; n])),
                Arc::new(Int64Array::from_iter_values(first..first + n as i64)),
                Arc::new(
                    TimestampMicrosecondArray::from_iter_values(
                        (0..n as i64).map(|i| 1_700_000_000_000_000 + i),
                    )
                    .with_timezone("+00:00"),
                ),
                Arc::new(arrow::array::LargeBinaryArray::from_iter(
                    (0..n).map(|_| None::<&[u8]>),
                )),
                Arc::new(arrow::array::Int32Array::from(vec![Some(1); n])),
            ],
            None,
        );
        RecordBatch::try_new(
            arrow_schema,
            vec![Arc::new(ids), Arc::new(cities), Arc::new(kafka)],
        )
        .expect("batch")
    }

    fn local_target(dir: &tempfile::TempDir, schema: Schema, spec: PartitionSpec) -> FileTarget {
        FileTarget {
            file_io: FileIO::new_with_fs(),
            schema: Arc::new(schema),
            spec: Arc::new(spec),
            data_location: format!("file://{}/data", dir.path().display()),
        }
    }

    fn read_back(path: &str) -> Vec<RecordBatch> {
        let local = path.strip_prefix("file://").unwrap_or(path);
        let file = std::fs::File::open(local).expect("open");
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .expect("parquet")
            .build()
            .expect("reader");
        reader.map(|b| b.expect("batch")).collect()
    }

    #[tokio::test]
    async fn unpartitioned_files_hold_the_rows_and_their_statistics() {
        let dir = tempfile::tempdir().expect("tempdir");
        let schema = table_schema();
        let target = local_target(&dir, schema.clone(), PartitionSpec::unpartition_spec());
        let files = write(
            &target,
            "p0-0-1000",
            [batch(&schema, 0, 600), batch(&schema, 600, 400)],
            &FileSettings::default(),
        )
        .await
        .expect("write");
        assert_eq!(files.len(), 1);
        let f = &files[0];
        assert!(
            f.file_path().contains("/data/p0-0-1000-"),
            "{}",
            f.file_path()
        );
        assert_eq!(f.record_count(), 1000);
        assert_eq!(f.null_value_counts().get(&2), Some(&250));
        assert_eq!(f.lower_bounds().get(&1), Some(&Datum::long(0)));
        assert_eq!(f.upper_bounds().get(&1), Some(&Datum::long(999)));
        assert_eq!(f.upper_bounds().get(&2), Some(&Datum::string("pune")));
        let rows: usize = read_back(f.file_path()).iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, 1000);
        let meta = parquet::file::reader::SerializedFileReader::new(
            std::fs::File::open(f.file_path().trim_start_matches("file://")).expect("open"),
        )
        .expect("reader");
        use parquet::file::reader::FileReader;
        let column = meta.metadata().row_group(0).column(0).compression();
        assert!(matches!(column, Compression::ZSTD(_)), "{column:?}");
    }

    #[tokio::test]
    async fn files_roll_over_at_the_target_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let schema = table_schema();
        let target = local_target(&dir, schema.clone(), PartitionSpec::unpartition_spec());
        let settings = FileSettings {
            target_file_bytes: 1,
            ..FileSettings::default()
        };
        let files = write(
            &target,
            "roll",
            (0..3).map(|i| batch(&schema, i * 100, 100)),
            &settings,
        )
        .await
        .expect("write");
        assert_eq!(files.len(), 3, "one file per batch past a 1-byte target");
        let total: u64 = files.iter().map(|f| f.record_count()).sum();
        assert_eq!(total, 300);
    }

    #[tokio::test]
    async fn partitioned_tables_get_one_file_per_partition() {
        let dir = tempfile::tempdir().expect("tempdir");
        let schema = table_schema();
        let spec = PartitionSpec::builder(schema.clone())
            .add_unbound_field(UnboundPartitionField {
                source_id: 2,
                field_id: None,
                name: "city".into(),
                transform: Transform::Identity,
            })
            .expect("field")
            .build()
            .expect("spec");
        let target = local_target(&dir, schema.clone(), spec);
        let files = write(
            &target,
            "part",
            [batch(&schema, 0, 100)],
            &FileSettings::default(),
        )
        .await
        .expect("write");
        // oslo, lima, pune and null.
        assert_eq!(
            files.len(),
            4,
            "{:?}",
            files.iter().map(|f| f.file_path()).collect::<Vec<_>>()
        );
        let total: u64 = files.iter().map(|f| f.record_count()).sum();
        assert_eq!(total, 100);
        let oslo = files
            .iter()
            .find(|f| f.file_path().contains("city=oslo"))
            .expect("an oslo file");
        for b in read_back(oslo.file_path()) {
            let cities = b
                .column(1)
                .as_any()
                .downcast_ref::<StringArray>()
                .expect("strings");
            assert!(cities.iter().all(|c| c == Some("oslo")));
            assert_eq!(cities.null_count(), 0);
        }
    }
}
