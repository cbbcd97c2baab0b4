//! Position delete files (Iceberg spec, "Position Delete Files"): the rows an upsert or CDC
//! delete removes, as (data file path, row position) pairs. Every engine Inlet is tested with
//! reads them, unlike equality deletes, which pyiceberg refuses.
//!
//! Invariants (the spec's): the file's schema is `file_path` (field id 2147483546, string) and
//! `pos` (2147483545, long), both required; rows are sorted by path, then position; the
//! `DataFile` says `PositionDeletes`, and names the one data file it applies to when all its
//! rows point at the same file (`referenced_data_file`), which lets readers skip it for others.
//! In a partitioned table a delete file belongs to the partition of the data files it deletes
//! from: it carries that partition tuple and the table's spec id, and lives under that
//! partition's path (readers such as pyiceberg match deletes to data files by partition).

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use iceberg::spec::{
    DataContentType, DataFile, DataFileFormat, NestedField, PartitionKey, PrimitiveType, Schema,
    Struct, Type,
};
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;

use crate::data_file::{FileSettings, FileTarget};
use crate::error::{Error, Result};

/// Field id of `file_path` in position delete files.
pub const FILE_PATH_ID: i32 = 2_147_483_546;
/// Field id of `pos` in position delete files.
pub const POS_ID: i32 = 2_147_483_545;

/// The schema of position delete files.
pub fn schema() -> Result<Schema> {
    Ok(Schema::builder()
        .with_fields(vec![
            Arc::new(NestedField::required(
                FILE_PATH_ID,
                "file_path",
                Type::Primitive(PrimitiveType::String),
            )),
            Arc::new(NestedField::required(
                POS_ID,
                "pos",
                Type::Primitive(PrimitiveType::Long),
            )),
        ])
        .build()?)
}

/// Writes `deletes` (any order, duplicates allowed) as position delete files of the table at
/// `target`. `partition` is the partition tuple (under `target.spec`, bound to
/// `target.schema`) of the data files the deletes point into: every row of one call must
/// point into data files of that partition. None (or an empty tuple) for an unpartitioned
/// table. Returns the files once complete.
pub async fn write(
    target: &FileTarget,
    prefix: &str,
    partition: Option<Struct>,
    mut deletes: Vec<(String, u64)>,
    settings: &FileSettings,
) -> Result<Vec<DataFile>> {
    if deletes.is_empty() {
        return Ok(Vec::new());
    }
    let partition = partition.filter(|p| !p.fields().is_empty());
    if partition.is_some() == target.spec.is_unpartitioned() {
        return Err(Error::Schema(format!(
            "position deletes: a partition tuple is needed exactly when the table is partitioned (spec {})",
            target.spec.spec_id()
        )));
    }
    let key = partition.as_ref().map(|p| {
        PartitionKey::new(
            target.spec.as_ref().clone(),
            target.schema.clone(),
            p.clone(),
        )
    });
    deletes.sort();
    deletes.dedup();
    let schema = Arc::new(schema()?);
    let arrow_schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema)?);
    let single = deletes
        .first()
        .map(|(p, _)| p.clone())
        .filter(|first| deletes.iter().all(|(p, _)| p == first));
    let batch = RecordBatch::try_new(
        arrow_schema,
        vec![
            Arc::new(StringArray::from_iter_values(
                deletes.iter().map(|(p, _)| p.as_str()),
            )),
            Arc::new(Int64Array::from_iter_values(
                deletes.iter().map(|(_, pos)| *pos as i64),
            )),
        ],
    )?;
    let parquet = ParquetWriterBuilder::new(settings_props(settings)?, schema);
    let mut writer = RollingFileWriterBuilder::new(
        parquet,
        settings.target_file_bytes,
        target.file_io.clone(),
        DefaultLocationGenerator::with_data_location(target.data_location.clone()),
        DefaultFileNameGenerator::new(format!("{prefix}-deletes"), None, DataFileFormat::Parquet),
    )
    .build();
    writer.write(&key, &batch).await?;
    let builders = writer.close().await?;
    builders
        .into_iter()
        .map(|mut b| {
            b.content(DataContentType::PositionDeletes);
            b.partition_spec_id(target.spec.spec_id());
            if let Some(p) = &partition {
                b.partition(p.clone());
            }
            if let Some(path) = &single {
                b.referenced_data_file(Some(path.clone()));
            }
            b.build()
                .map_err(|e| Error::Schema(format!("position delete file metadata: {e}")))
        })
        .collect()
}

fn settings_props(settings: &FileSettings) -> Result<parquet::file::properties::WriterProperties> {
    use parquet::basic::{Compression, ZstdLevel};
    let level = ZstdLevel::try_new(settings.zstd_level)
        .map_err(|e| Error::Schema(format!("zstd level {}: {e}", settings.zstd_level)))?;
    Ok(parquet::file::properties::WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::AsArray;
    use iceberg::io::FileIO;
    use iceberg::spec::PartitionSpec;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    #[tokio::test]
    async fn deletes_are_sorted_deduplicated_and_typed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = FileTarget {
            file_io: FileIO::new_with_fs(),
            schema: Arc::new(schema().expect("schema")),
            spec: Arc::new(PartitionSpec::unpartition_spec()),
            data_location: format!("file://{}/data", dir.path().display()),
        };
        let a = "file:///w/t/data/a.parquet".to_string();
        let b = "file:///w/t/data/b.parquet".to_string();
        let files = write(
            &target,
            "p0-0-10",
            None,
            vec![
                (b.clone(), 3),
                (a.clone(), 9),
                (a.clone(), 1),
                (b.clone(), 3),
            ],
            &FileSettings::default(),
        )
        .await
        .expect("write");
        assert_eq!(files.len(), 1);
        let f = &files[0];
        assert_eq!(f.content_type(), DataContentType::PositionDeletes);
        assert_eq!(f.record_count(), 3);
        assert_eq!(f.referenced_data_file(), None, "two data files");
        let file = std::fs::File::open(f.file_path().trim_start_matches("file://")).expect("open");
        let reader = ParquetRecordBatchReaderBuilder::try_new(file).expect("parquet");
        let ids: Vec<String> = reader
            .schema()
            .fields()
            .iter()
            .map(|f| {
                f.metadata()
                    .get("PARQUET:field_id")
                    .cloned()
                    .unwrap_or_default()
            })
            .collect();
        assert_eq!(ids, vec![FILE_PATH_ID.to_string(), POS_ID.to_string()]);
        let batch = reader
            .build()
            .expect("reader")
            .next()
            .expect("batch")
            .expect("ok");
        let paths: Vec<&str> = batch
            .column(0)
            .as_string::<i32>()
            .iter()
            .flatten()
            .collect();
        let pos: Vec<i64> = batch
            .column(1)
            .as_primitive::<arrow::datatypes::Int64Type>()
            .values()
            .to_vec();
        assert_eq!(paths, vec![a.as_str(), a.as_str(), b.as_str()]);
        assert_eq!(pos, vec![1, 9, 3]);

        let one = write(
            &target,
            "p0-10-20",
            None,
            vec![(a.clone(), 4)],
            &FileSettings::default(),
        )
        .await
        .expect("write");
        assert_eq!(one[0].referenced_data_file(), Some(a));
        assert!(
            write(&target, "none", None, Vec::new(), &FileSettings::default())
                .await
                .expect("empty")
                .is_empty()
        );
    }
}
