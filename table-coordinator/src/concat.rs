//! Compaction's fast path: data files merged by copying their Parquet column chunks into one
//! file, row group after row group, without decoding a value. A commit-tail file is already
//! zstd-compressed Parquet of the table's schema; decoding it to Arrow and encoding it again
//! (the general path in [`crate::compact`]) costs about as much CPU as converting the records
//! did, and at a 1 s commit interval every byte is compacted at least once.
//!
//! When ([`concat`]): every chosen file has no deleted rows, its Parquet schema is exactly the
//! one the table's current schema writes (the same columns, types and field ids), so the
//! copied chunks read as the current schema, and each of its row groups holds at least
//! `min_row_group_bytes` (a thirty-second of the target file). Files written before a schema
//! change, or by another engine with another layout, take the general path; so do tiny commit
//! tails, which cost little to decode, and whose row groups, copied, would leave a file of
//! hundreds of row groups of a few KiB each (every one costing readers a footer entry per
//! column).
//!
//! Invariants:
//! - The new file holds every row of the inputs, in the inputs' order, each input's row groups
//!   whole (a reader sees one row group per input file, which is what it read before).
//! - Its Iceberg metrics are the inputs' merged: counts and sizes summed, bounds the least
//!   lower and greatest upper. A metric that one input lacks is left out rather than guessed
//!   (a missing bound only costs pruning).
//! - The file is written whole or not at all (one object-store PUT of the finished bytes).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum, PartitionKey, PartitionSpec,
    Schema,
};
use parquet::arrow::ArrowSchemaConverter;
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;

use crate::commit::CommitError;

/// Where the merged file goes and what it is.
pub struct Output<'a> {
    pub file_io: &'a FileIO,
    /// The table's data location (`write.data.path`, or `<location>/data`).
    pub data_location: &'a str,
    /// The file's name, without folder.
    pub file_name: &'a str,
    pub schema: &'a Arc<Schema>,
    pub spec: &'a Arc<PartitionSpec>,
    /// The inputs' partition tuple.
    pub partition: &'a iceberg::spec::Struct,
}

/// Merges `inputs` (data files of one partition, none with deleted rows) into one file by
/// copying their column chunks. None, having written nothing, when an input's Parquet
/// schema is not the one `out.schema` writes, or one of its row groups holds fewer than
/// `min_row_group_bytes` (see the module docs).
pub async fn concat(
    inputs: &[DataFile],
    out: &Output<'_>,
    min_row_group_bytes: i64,
) -> Result<Option<DataFile>, CommitError> {
    let Some(first) = inputs.first() else {
        return Ok(None);
    };
    let expected = expected_parquet_schema(out.schema)?;
    let Some(read) = read_inputs(inputs, out, &expected, min_row_group_bytes).await? else {
        return Ok(None);
    };

    // The first input's footer key-values (the Arrow schema the writer stored) go on, so an
    // Arrow reader sees the same types it saw in the inputs.
    let key_values = read
        .first()
        .and_then(|(_, m)| m.file_metadata().key_value_metadata().cloned());
    let props = WriterProperties::builder()
        .set_key_value_metadata(key_values)
        .build();
    let buffer_size: usize = read.iter().map(|(b, _)| b.len()).sum();
    let mut writer =
        SerializedFileWriter::new(Vec::with_capacity(buffer_size), expected, Arc::new(props))
            .map_err(|e| parquet_error("the merged file", e))?;
    for (f, (bytes, meta)) in inputs.iter().zip(&read) {
        let err = |e| parquet_error(f.file_path(), e);
        for (g, group) in meta.row_groups().iter().enumerate() {
            let column_index = meta.column_index().and_then(|c| c.get(g));
            let offset_index = meta.offset_index().and_then(|o| o.get(g));
            let mut out_group = writer.next_row_group().map_err(err)?;
            for (c, column) in group.columns().iter().enumerate() {
                let close = ColumnCloseResult {
                    bytes_written: column.compressed_size() as u64,
                    rows_written: group.num_rows() as u64,
                    metadata: column.clone(),
                    bloom_filter: parquet::bloom_filter::Sbbf::read_from_column_chunk(
                        column, bytes,
                    )
                    .map_err(err)?,
                    column_index: column_index.and_then(|r| r.get(c)).cloned(),
                    offset_index: offset_index.and_then(|r| r.get(c)).cloned(),
                };
                out_group.append_column(bytes, close).map_err(err)?;
            }
            out_group.close().map_err(err)?;
        }
    }
    let written = writer
        .finish()
        .map_err(|e| parquet_error("the merged file", e))?;
    // The footer is written: the buffer is the whole file (`into_inner` would write it again).
    let body = std::mem::take(writer.inner_mut());
    drop(read);

    let key = PartitionKey::new(
        out.spec.as_ref().clone(),
        out.schema.clone(),
        out.partition.clone(),
    );
    let path = if PartitionKey::is_effectively_none(Some(&key)) {
        format!("{}/{}", out.data_location, out.file_name)
    } else {
        format!("{}/{}/{}", out.data_location, key.to_path(), out.file_name)
    };
    let size = body.len() as u64;
    out.file_io.new_output(&path)?.write(body.into()).await?;
    entry(inputs, first, out, path, size, &written).map(Some)
}

/// The table's entry of the merged file at `path` (`size` bytes, its footer `written`): its
/// counts and bounds are the inputs' combined.
fn entry(
    inputs: &[DataFile],
    first: &DataFile,
    out: &Output<'_>,
    path: String,
    size: u64,
    written: &parquet::file::metadata::ParquetMetaData,
) -> Result<DataFile, CommitError> {
    let mut builder = DataFileBuilder::default();
    builder
        .content(DataContentType::Data)
        .file_path(path)
        .file_format(DataFileFormat::Parquet)
        .partition(out.partition.clone())
        .partition_spec_id(out.spec.spec_id())
        .record_count(inputs.iter().map(DataFile::record_count).sum())
        .file_size_in_bytes(size)
        .column_sizes(sum(inputs, DataFile::column_sizes))
        .value_counts(sum(inputs, DataFile::value_counts))
        .null_value_counts(sum(inputs, DataFile::null_value_counts))
        .nan_value_counts(sum(inputs, DataFile::nan_value_counts))
        .lower_bounds(bound(
            inputs,
            DataFile::lower_bounds,
            std::cmp::Ordering::Less,
        ))
        .upper_bounds(bound(
            inputs,
            DataFile::upper_bounds,
            std::cmp::Ordering::Greater,
        ))
        .split_offsets(Some(
            written
                .row_groups()
                .iter()
                .filter_map(|g| g.file_offset())
                .collect(),
        ));
    if let Some(order) = first.sort_order_id() {
        builder.sort_order_id(order);
    }
    builder
        .build()
        .map_err(|e| CommitError::Catalog(format!("compaction: the merged file's entry: {e}")))
}

/// Reads every input whole, with its footer; None when one cannot be copied: not Parquet
/// data, a schema other than `expected`, or a row group under `min_row_group_bytes`.
async fn read_inputs(
    inputs: &[DataFile],
    out: &Output<'_>,
    expected: &parquet::schema::types::TypePtr,
    min_row_group_bytes: i64,
) -> Result<Option<Vec<(Bytes, ParquetMetaData)>>, CommitError> {
    let mut read: Vec<(Bytes, ParquetMetaData)> = Vec::with_capacity(inputs.len());
    for f in inputs {
        if f.content_type() != DataContentType::Data || f.file_format() != DataFileFormat::Parquet {
            return Ok(None);
        }
        let bytes = out.file_io.new_input(f.file_path())?.read().await?;
        let meta = ParquetMetaDataReader::new()
            .with_page_index_policy(PageIndexPolicy::Optional)
            .parse_and_finish(&bytes)
            .map_err(|e| parquet_error(f.file_path(), e))?;
        if meta.file_metadata().schema() != expected.as_ref()
            || meta
                .row_groups()
                .iter()
                .any(|g| g.compressed_size() < min_row_group_bytes)
        {
            return Ok(None);
        }
        let rows = meta.file_metadata().num_rows();
        if u64::try_from(rows).ok() != Some(f.record_count()) {
            return Err(CommitError::Catalog(format!(
                "compaction: {} holds {rows} rows by its footer and {} by the table",
                f.file_path(),
                f.record_count()
            )));
        }
        read.push((bytes, meta));
    }
    Ok(Some(read))
}

/// The Parquet schema iceberg-rust's writer gives a file of `schema`: Arrow's conversion of
/// the table schema's Arrow form (field ids included).
fn expected_parquet_schema(
    schema: &Schema,
) -> Result<parquet::schema::types::TypePtr, CommitError> {
    let arrow = iceberg::arrow::schema_to_arrow_schema(schema)?;
    let descr = ArrowSchemaConverter::new()
        .convert(&arrow)
        .map_err(|e| parquet_error("the table schema", e))?;
    Ok(descr.root_schema_ptr())
}

/// Per field id, the sum over `files` of a count; a field that one file does not count is
/// left out.
fn sum(files: &[DataFile], of: fn(&DataFile) -> &HashMap<i32, u64>) -> HashMap<i32, u64> {
    let Some((first, rest)) = files.split_first() else {
        return HashMap::new();
    };
    let mut out = of(first).clone();
    for f in rest {
        let counts = of(f);
        out.retain(|id, n| match counts.get(id) {
            Some(m) => {
                *n += m;
                true
            }
            None => false,
        });
    }
    out
}

/// Per field id, the bound of all `files`: the one that compares `keep` against the others.
/// A file whose values of the field are all null has no bound and adds nothing; a field that
/// another file lacks a bound for, or whose bounds do not compare, is left out.
fn bound(
    files: &[DataFile],
    of: fn(&DataFile) -> &HashMap<i32, Datum>,
    keep: std::cmp::Ordering,
) -> HashMap<i32, Datum> {
    let all_null = |f: &DataFile, id: &i32| {
        matches!(
            (f.value_counts().get(id), f.null_value_counts().get(id)),
            (Some(v), Some(n)) if v == n
        )
    };
    let mut ids: Vec<i32> = files.iter().flat_map(|f| of(f).keys().copied()).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut out = HashMap::new();
    'field: for id in ids {
        let mut best: Option<&Datum> = None;
        for f in files {
            match of(f).get(&id) {
                Some(d) => match best {
                    None => best = Some(d),
                    Some(b) => match d.partial_cmp(b) {
                        Some(o) if o == keep => best = Some(d),
                        Some(_) => {}
                        None => continue 'field,
                    },
                },
                None if all_null(f, &id) => {}
                None => continue 'field,
            }
        }
        if let Some(b) = best {
            out.insert(id, b.clone());
        }
    }
    out
}

fn parquet_error(what: &str, e: parquet::errors::ParquetError) -> CommitError {
    CommitError::Parquet {
        what: format!("compaction: {what}"),
        source: e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::Struct;

    fn file(path: &str, lower: i64, upper: i64, nulls: u64) -> DataFile {
        let mut b = DataFileBuilder::default();
        b.content(DataContentType::Data)
            .file_path(path.to_string())
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::empty())
            .record_count(10)
            .file_size_in_bytes(100)
            .column_sizes(HashMap::from([(1, 40), (2, 60)]))
            .value_counts(HashMap::from([(1, 10), (2, 10)]))
            .null_value_counts(HashMap::from([(1, 0), (2, nulls)]))
            .lower_bounds(if nulls == 10 {
                HashMap::from([(1, Datum::long(lower))])
            } else {
                HashMap::from([(1, Datum::long(lower)), (2, Datum::string("m"))])
            })
            .upper_bounds(HashMap::from([(1, Datum::long(upper))]));
        b.build().expect("data file")
    }

    #[test]
    fn metrics_merge_counts_and_widen_bounds() {
        let files = [file("a", 5, 9, 0), file("b", 1, 7, 10), file("c", 3, 12, 2)];
        let sizes = sum(&files, DataFile::column_sizes);
        assert_eq!(sizes, HashMap::from([(1, 120), (2, 180)]));
        let nulls = sum(&files, DataFile::null_value_counts);
        assert_eq!(nulls, HashMap::from([(1, 0), (2, 12)]));
        let lower = bound(&files, DataFile::lower_bounds, std::cmp::Ordering::Less);
        // Field 2: "b" is all null (no bound, nothing to add); "a" and "c" say "m".
        assert_eq!(
            lower,
            HashMap::from([(1, Datum::long(1)), (2, Datum::string("m"))])
        );
        let upper = bound(&files, DataFile::upper_bounds, std::cmp::Ordering::Greater);
        // Field 2 has no upper bound in "a", which holds values: unknown, so left out.
        assert_eq!(upper, HashMap::from([(1, Datum::long(12))]));
    }

    #[test]
    fn a_count_one_file_lacks_is_left_out() {
        let mut b = DataFileBuilder::default();
        b.content(DataContentType::Data)
            .file_path("d".to_string())
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::empty())
            .record_count(1)
            .file_size_in_bytes(1)
            .column_sizes(HashMap::from([(1, 4)]));
        let d = b.build().expect("data file");
        let files = [file("a", 0, 1, 0), d];
        assert_eq!(
            sum(&files, DataFile::column_sizes),
            HashMap::from([(1, 44)])
        );
    }
}
