//! A keyed table's files as its key index reads them: the live data and position delete
//! files of its current snapshot ([`LiveFiles`]), the keys of a data file, one per row
//! ([`read_keys`], encoded by [`encode_keys`]), the rows position deletes remove, and an index
//! rebuilt from them ([`rebuild`]). `upsert` (the index of a running table) and
//! `index_checkpoint` (catching a saved index up) both read files through here.

use std::collections::HashMap;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Int16Type, Int32Type, Int64Type, Int8Type};
use futures::{StreamExt, TryStreamExt};
use iceberg::io::FileIO;
use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};

use crate::error::{Error, Result};
use crate::pk_index::{FileRef, KeyIndex, Location};

/// The key of every row: the id columns' values, each with a type tag.
pub(crate) fn encode_keys(columns: &[ArrayRef], rows: usize) -> Result<Vec<Vec<u8>>> {
    let mut keys = vec![Vec::new(); rows];
    for column in columns {
        // Dates, times, timestamps and decimals are keyed by their text (stable within a
        // table: a column always has the same Arrow type), cast once per column.
        let column = &match column.data_type() {
            DataType::Date32
            | DataType::Time64(_)
            | DataType::Timestamp(_, _)
            | DataType::Decimal128(_, _) => arrow::compute::cast(column, &DataType::Utf8)?,
            _ => column.clone(),
        };
        for (row, key) in keys.iter_mut().enumerate() {
            encode_value(column, row, key)?;
        }
    }
    Ok(keys)
}

fn encode_value(column: &ArrayRef, row: usize, out: &mut Vec<u8>) -> Result<()> {
    if column.is_null(row) {
        out.push(0);
        return Ok(());
    }
    let int = |out: &mut Vec<u8>, v: i64| {
        out.push(1);
        out.extend_from_slice(&v.to_be_bytes());
    };
    let bytes = |out: &mut Vec<u8>, v: &[u8]| {
        out.push(2);
        out.extend_from_slice(&(v.len() as u32).to_be_bytes());
        out.extend_from_slice(v);
    };
    match column.data_type() {
        DataType::Int8 => int(out, column.as_primitive::<Int8Type>().value(row).into()),
        DataType::Int16 => int(out, column.as_primitive::<Int16Type>().value(row).into()),
        DataType::Int32 => int(out, column.as_primitive::<Int32Type>().value(row).into()),
        DataType::Int64 => int(out, column.as_primitive::<Int64Type>().value(row)),
        DataType::Boolean => int(out, column.as_boolean().value(row).into()),
        DataType::Utf8 => bytes(out, column.as_string::<i32>().value(row).as_bytes()),
        DataType::LargeUtf8 => bytes(out, column.as_string::<i64>().value(row).as_bytes()),
        DataType::Binary => bytes(out, column.as_binary::<i32>().value(row)),
        DataType::LargeBinary => bytes(out, column.as_binary::<i64>().value(row)),
        DataType::FixedSizeBinary(_) => bytes(out, column.as_fixed_size_binary().value(row)),
        other => {
            return Err(Error::Schema(format!(
                "table.topic.id.columns: a column of type {other} cannot be a key"
            )))
        }
    }
    Ok(())
}

/// Reads the keys of a data file, one per row position. An id column the file lacks (written
/// before the column was added) is null in every row, as readers see it.
pub(crate) async fn read_keys(
    file_io: &FileIO,
    path: &str,
    id_field_ids: &[i32],
) -> Result<Vec<Vec<u8>>> {
    let input = file_io.new_input(path)?;
    let reader =
        iceberg::arrow::ArrowFileReader::new(input.metadata().await?, input.reader().await?);
    let builder = ParquetRecordBatchStreamBuilder::new(reader).await?;
    // Top-level columns by field id (top-level Arrow fields are the Parquet roots).
    let fields = builder.schema().fields().clone();
    let roots: Vec<Option<usize>> = id_field_ids
        .iter()
        .map(|id| {
            fields.iter().position(|f| {
                f.metadata()
                    .get(parquet::arrow::PARQUET_FIELD_ID_META_KEY)
                    .and_then(|v| v.parse::<i32>().ok())
                    == Some(*id)
            })
        })
        .collect();
    let mut projected: Vec<usize> = roots.iter().flatten().copied().collect();
    projected.sort_unstable();
    projected.dedup();
    let mask = ProjectionMask::roots(builder.parquet_schema(), projected.iter().copied());
    let stream = builder.with_projection(mask).build()?;
    let batches: Vec<RecordBatch> = stream.try_collect().await?;
    let mut keys = Vec::new();
    for batch in batches {
        // The projection keeps file order: put the columns in id-column order.
        let columns: Vec<ArrayRef> = roots
            .iter()
            .map(|r| match r.and_then(|r| projected.binary_search(&r).ok()) {
                Some(i) => batch.column(i).clone(),
                None => arrow::array::new_null_array(&DataType::Int64, batch.num_rows()),
            })
            .collect();
        keys.extend(encode_keys(&columns, batch.num_rows())?);
    }
    Ok(keys)
}

/// A live data file of the table, for [`rebuild`].
#[derive(Debug, Clone)]
pub struct LiveDataFile {
    pub file: FileRef,
    /// Its data sequence number: later files win when a key has two live rows.
    pub sequence_number: i64,
}

/// The table's live files, as its current snapshot lists them.
#[derive(Debug, Clone, Default)]
pub struct LiveFiles {
    pub data: Vec<LiveDataFile>,
    /// Paths of the live position delete files.
    pub position_deletes: Vec<String>,
}

/// Data files whose keys [`rebuild`] reads back ahead of the one it indexes, and position
/// delete files it reads at once: on an object store each read is a few requests of tens of
/// milliseconds, which a rebuild of a large table would otherwise pay one after the other.
const REBUILD_READ_AHEAD: usize = 8;

/// Builds the index from the table: every live data file's id columns, minus the rows its
/// position deletes remove. Returns how many keys had more than one live row (the later one
/// is indexed; the earlier stays visible, e.g. rows appended before upsert was enabled).
pub(crate) async fn rebuild(
    index: &mut KeyIndex,
    file_io: &FileIO,
    live: &LiveFiles,
    id_field_ids: &[i32],
) -> Result<u64> {
    let deleted = read_deleted(file_io, live.position_deletes.clone()).await?;
    let mut sequence = HashMap::new();
    index_files(
        index,
        file_io,
        live.data.clone(),
        &deleted,
        id_field_ids,
        &mut sequence,
    )
    .await
}

/// The rows the position delete files at `paths` delete: positions per data file, sorted (8
/// bytes a delete). The files are read [`REBUILD_READ_AHEAD`] at a time, in any order: a
/// keyed table has about as many as data files, and one after the other they were most of a
/// rebuild on an object store.
pub(crate) async fn read_deleted(
    file_io: &FileIO,
    paths: Vec<String>,
) -> Result<HashMap<String, Vec<u64>>> {
    let mut deleted: HashMap<String, Vec<u64>> = HashMap::new();
    let mut reads = futures::stream::iter(
        paths
            .into_iter()
            .map(|path| async move { read_position_deletes(file_io, &path).await }),
    )
    .buffer_unordered(REBUILD_READ_AHEAD);
    while let Some(rows) = reads.next().await {
        for (file, pos) in rows? {
            deleted.entry(file).or_default().push(pos);
        }
    }
    drop(reads);
    for positions in deleted.values_mut() {
        positions.sort_unstable();
        positions.dedup();
    }
    Ok(deleted)
}

/// Puts the live rows of the data `files` into `index`, in data sequence order, minus the
/// `deleted` ones: a key's row replaces its entry unless the entry's file has a later
/// sequence number (`sequence`: by the index's file id, of the files indexed so far; the
/// files' own are added). Returns how many keys had more than one live row. The next files'
/// keys are read while one file's go into the index.
pub(crate) async fn index_files(
    index: &mut KeyIndex,
    file_io: &FileIO,
    mut files: Vec<LiveDataFile>,
    deleted: &HashMap<String, Vec<u64>>,
    id_field_ids: &[i32],
    sequence: &mut HashMap<u32, i64>,
) -> Result<u64> {
    files.sort_by_key(|f| f.sequence_number);
    let mut duplicates = 0u64;
    let mut reads = futures::stream::iter(files.into_iter().map(|f| async move {
        let keys = read_keys(file_io, &f.file.path, id_field_ids).await;
        (f, keys)
    }))
    .buffered(REBUILD_READ_AHEAD);
    while let Some((f, keys)) = reads.next().await {
        let keys = keys?;
        let gone = deleted.get(&f.file.path);
        let seq = f.sequence_number;
        let file = index.file_id(f.file);
        sequence.insert(file, seq);
        for (pos, key) in keys.into_iter().enumerate() {
            let pos = pos as u64;
            if gone.is_some_and(|g| g.binary_search(&pos).is_ok()) {
                continue;
            }
            if let Some(old) = index.get(&key)? {
                duplicates += 1;
                if sequence.get(&old.file).is_some_and(|s| *s > seq) {
                    continue;
                }
            }
            index.put(key, Location { file, pos })?;
        }
    }
    Ok(duplicates)
}

/// The (data file path, position) rows of the position delete file at `path`.
pub async fn read_position_deletes(file_io: &FileIO, path: &str) -> Result<Vec<(String, u64)>> {
    let input = file_io.new_input(path)?;
    let reader =
        iceberg::arrow::ArrowFileReader::new(input.metadata().await?, input.reader().await?);
    let stream = ParquetRecordBatchStreamBuilder::new(reader)
        .await?
        .build()?;
    let batches: Vec<RecordBatch> = stream.try_collect().await?;
    let mut out = Vec::new();
    for b in batches {
        let paths = arrow::compute::cast(b.column(0), &DataType::Utf8)?;
        let paths = paths.as_string::<i32>();
        let pos = b.column(1).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            out.push((paths.value(i).to_string(), pos.value(i) as u64));
        }
    }
    Ok(out)
}
